#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build hpkvm's reference kernel whole: Debian's linux-source for kernel
# ABI KVER with kvm/patches/*.patch applied to the whole tree, configured
# by kvm/kernel.config and kvm/kernel-ARCH.config over "make tinyconfig",
# everything built in: the kernel a nested test host boots instead of
# Debian's.  On x86 (bzImage) it is for the features that need
# core-kernel changes (kvm/build.sh builds the modules-only variant); on
# arm64 (Image, cross-built with the host's clang and LLVM binutils) it
# is the only way, as arm64's KVM cannot be a module.
#
# Usage: kvm/build-kernel.sh [--arch x86|arm64] [KVER [OUTDIR]]
#        (default: x86, kvm/tested-kernel, build/kernel/KVER for x86 and
#        build/kernel/KVER-arm64 for arm64)
#
# KVER names the source: Debian's linux-source at the version of
# linux-image-KVER, whichever the architecture built.  Downloads it once,
# into $HPKVM_CACHE/kvm (shared with kvm/build.sh).  The image is rebuilt
# only when the source version, a patch, a config fragment or this script
# changes (~9 min on 2 cores for x86, ~13 for arm64).

set -eu

here=$(cd "$(dirname "$0")" && pwd)
me=kvm/build-kernel.sh
# shellcheck source=kvm/source.sh
. "$here/source.sh"
arch=x86
if [ "${1:-}" = --arch ]; then
    arch=${2:-}
    shift 2 || die "--arch needs x86 or arm64"
fi
case $arch in
x86)
    image=bzImage
    suffix=
    kmake=()
    tools="flex bison bc"
    ;;
arm64)
    image=Image
    suffix=-arm64
    # Debian's llvm keeps the unversioned tools LLVM=1 calls in its own
    # bin (as scripts/hpkvm/aarch64-toolchain.sh finds them).
    llvm_bin=$(find /usr/lib -maxdepth 2 -path '/usr/lib/llvm-*/bin' |
               sort -V | tail -n 1)
    PATH=${llvm_bin:+$llvm_bin:}$PATH
    kmake=(ARCH=arm64 LLVM=1)
    tools="flex bison bc clang ld.lld llvm-ar llvm-nm llvm-objcopy llvm-strip"
    ;;
*)
    die "--arch $arch: x86 or arm64"
    ;;
esac
kver=${1:-$(cat "$here/tested-kernel")}
out=${2:-$here/../build/kernel/$kver$suffix}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in $tools; do
    command -v "$tool" > /dev/null ||
        die "no $tool: scripts/hpkvm/install-deps.sh installs it (as root)"
done
[ "$arch" != x86 ] || [ -f /usr/include/gelf.h ] ||
    die "no libelf-dev (objtool needs it):" \
        "scripts/hpkvm/install-deps.sh installs it (as root)"

# The source at the version of Debian's kernel KVER (its headers package
# names it; the nested host runs linux-image-KVER of the same version).
version=$(apt-cache show "linux-image-$kver" 2>/dev/null |
          sed -n 's/^Version: //p' | head -n 1)
[ -n "$version" ] || die "apt knows no linux-image-$kver (apt-get update?)"
kvm_source_fetch "$kver" "$version"

fragments=("$here/kernel.config" "$here/kernel-$arch.config")
stamp=$( (cat "$0" "$here/source.sh" "${fragments[@]}" \
               "$here"/patches/*.patch; echo "$version $arch") |
        sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] &&
   [ -f "$out/$image" ]; then
    say "$out/$image is current"
    exit 0
fi

tree=$out/src
rm -rf "$tree" "$out/.stamp"
say "unpacking $srcpkg $version"
kvm_source_unpack "$tree" || die "cannot unpack $deb"
kvm_source_patch "$tree"
make -C "$tree" "${kmake[@]}" tinyconfig > "$out/build.log" 2>&1
"$tree/scripts/kconfig/merge_config.sh" -m -O "$tree" "$tree/.config" \
    "${fragments[@]}" >> "$out/build.log" 2>&1
make -C "$tree" "${kmake[@]}" olddefconfig >> "$out/build.log" 2>&1
# What the fragments ask and the result lacks: a dependency they missed.
missing=$(cat "${fragments[@]}" | grep '^CONFIG_.*=y$' |
          grep -vxF -f "$tree/.config" || true)
[ -z "$missing" ] ||
    die "kvm/kernel.config or kernel-$arch.config options not set:" $missing
say "building $arch $image (log: $out/build.log)"
make -C "$tree" "${kmake[@]}" -j"$(nproc)" "$image" \
    >> "$out/build.log" 2>&1 || {
    tail -n 30 "$out/build.log" >&2
    die "the kernel build failed; full log in $out/build.log"
}
cp "$tree/arch/$arch/boot/$image" "$out/$image.new"
mv "$out/$image.new" "$out/$image"
echo "$stamp" > "$out/.stamp"
say "$out/$image for $kver ($arch)"
