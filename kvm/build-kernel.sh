#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build hpkvm's reference kernel whole: Debian's linux-source for kernel
# ABI KVER with kvm/patches/*.patch applied to the whole tree, configured
# by kvm/kernel.config over "make tinyconfig", everything built in: a
# bzImage the nested test host boots instead of Debian's kernel, for the
# features that need core-kernel changes (kvm/build.sh builds the
# modules-only variant).
#
# Usage: kvm/build-kernel.sh [KVER [OUTDIR]]
#        (default: kvm/tested-kernel, build/kernel/KVER)
#
# Downloads linux-source once, into $HPKVM_CACHE/kvm (shared with
# kvm/build.sh).  OUTDIR/bzImage is rebuilt only when the source version,
# a patch, the config or this script changes (~9 min on 2 cores).

set -eu

here=$(cd "$(dirname "$0")" && pwd)
me=kvm/build-kernel.sh
# shellcheck source=kvm/source.sh
. "$here/source.sh"
kver=${1:-$(cat "$here/tested-kernel")}
out=${2:-$here/../build/kernel/$kver}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in flex bison bc; do
    command -v $tool > /dev/null ||
        die "no $tool: scripts/hpkvm/install-deps.sh installs it (as root)"
done
[ -f /usr/include/gelf.h ] ||
    die "no libelf-dev (objtool needs it):" \
        "scripts/hpkvm/install-deps.sh installs it (as root)"

# The source at the version of Debian's kernel KVER (its headers package
# names it; the nested host runs linux-image-KVER of the same version).
version=$(apt-cache show "linux-image-$kver" 2>/dev/null |
          sed -n 's/^Version: //p' | head -n 1)
[ -n "$version" ] || die "apt knows no linux-image-$kver (apt-get update?)"
kvm_source_fetch "$kver" "$version"

stamp=$( (cat "$0" "$here/source.sh" "$here/kernel.config" \
               "$here"/patches/*.patch; echo "$version") |
        sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] &&
   [ -f "$out/bzImage" ]; then
    say "$out/bzImage is current"
    exit 0
fi

tree=$out/src
rm -rf "$tree" "$out/.stamp"
say "unpacking $srcpkg $version"
kvm_source_unpack "$tree" || die "cannot unpack $deb"
kvm_source_patch "$tree"
make -C "$tree" tinyconfig > "$out/build.log" 2>&1
"$tree/scripts/kconfig/merge_config.sh" -m -O "$tree" "$tree/.config" \
    "$here/kernel.config" >> "$out/build.log" 2>&1
make -C "$tree" olddefconfig >> "$out/build.log" 2>&1
# What the fragment asks and the result lacks: a dependency it missed.
missing=$(grep '^CONFIG_.*=y$' "$here/kernel.config" |
          grep -vxF -f "$tree/.config" || true)
[ -z "$missing" ] || die "kvm/kernel.config options not set: $missing"
say "building bzImage (log: $out/build.log)"
make -C "$tree" -j"$(nproc)" bzImage >> "$out/build.log" 2>&1 || {
    tail -n 30 "$out/build.log" >&2
    die "the kernel build failed; full log in $out/build.log"
}
cp "$tree/arch/x86/boot/bzImage" "$out/bzImage.new"
mv "$out/bzImage.new" "$out/bzImage"
echo "$stamp" > "$out/.stamp"
say "$out/bzImage for $kver"
