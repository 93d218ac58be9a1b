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
# With --config debian (x86), the configuration is instead Debian's own,
# the one linux-image-KVER was built with, cut down by "make
# localmodconfig" to the modules the nested host loads, and those built
# in: the production-config kernel, on which a grant must hold as on the
# kernel a user runs (~22 min on 2 cores).
#
# Usage: kvm/build-kernel.sh [--arch x86|arm64] [--config tiny|debian]
#                            [KVER [OUTDIR]]
#        (default: x86, tiny, kvm/tested-kernel, build/kernel/KVER for
#        x86, build/kernel/KVER-arm64 for arm64 and
#        build/kernel/KVER-debian for Debian's config)
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
config=tiny
if [ "${1:-}" = --config ]; then
    config=${2:-}
    shift 2 || die "--config needs tiny or debian"
fi
case $arch-$config in
*-tiny | x86-debian) ;;
*) die "--config $config: tiny, or debian with --arch x86" ;;
esac
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
[ "$config" = tiny ] || suffix=-$config
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

if [ "$config" = debian ]; then
    kvm_image_fetch "$kver" "$version"
    fragments=("$out/config-$kver")
    dpkg-deb --fsys-tarfile "$imagedeb" |
        tar -xO "./boot/config-$kver" > "${fragments[0]}" ||
        die "linux-image-$kver has no /boot/config-$kver"
else
    fragments=("$here/kernel.config" "$here/kernel-$arch.config")
fi
stamp=$( (cat "$0" "$here/source.sh" "${fragments[@]}" \
               "$here"/patches/*.patch; echo "$version $arch $config") |
        sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] &&
   [ -f "$out/$image" ]; then
    say "$out/$image is current"
    exit 0
fi

# The modules the x86 nested host loads into Debian's kernel (the
# image's MODULES, and the CD-ROM's for the Bochs host), by the names
# lsmod prints: what localmodconfig keeps of Debian's config.
debian_modules="kvm kvm_amd kvm_intel irqbypass tun tap vhost_iotlb vhost
vhost_net dca i2c_algo_bit igb vfio vfio_iommu_type1 vfio_virqfd
vfio_pci_core vfio_pci veth ata_piix sr_mod cdrom isofs"

# kernel_config_tiny TREE: tinyconfig with the fragments merged over it;
# fails naming what the fragments ask and the result lacks (a
# dependency they missed).
kernel_config_tiny() {
    local missing

    {
        make -C "$1" "${kmake[@]}" tinyconfig &&
        "$1/scripts/kconfig/merge_config.sh" -m -O "$1" "$1/.config" \
            "${fragments[@]}" &&
        make -C "$1" "${kmake[@]}" olddefconfig
    } >> "$log" 2>&1 || die "configuring over tinyconfig failed; see $log"
    missing=$(cat "${fragments[@]}" | grep '^CONFIG_.*=y$' |
              grep -vxF -f "$1/.config" || true)
    [ -z "$missing" ] ||
        die "kvm/kernel.config or kernel-$arch.config options not set:" \
            $missing
}

# kernel_config_debian TREE CONFIG: Debian's CONFIG, reduced to
# $debian_modules, those built in (the nested host loads no module into
# our kernel: Debian's carry another vermagic), plus the series' own
# option.  What else differs from Debian's build, and why: no debug info
# and BTF (hours of build, not behaviour), and module signing (which the
# lockdown LSM keeps on) with a key made at build time, as Debian's is
# not in its source; no module is left to sign anyway.
kernel_config_debian() {
    local m

    cp "$2" "$1/.config"
    for m in $debian_modules; do
        echo "$m 0 0"
    done > "$1/lsmod"
    make -C "$1" LSMOD="$1/lsmod" localmodconfig < /dev/null \
        >> "$log" 2>&1 || die "localmodconfig failed; see $log"
    sed -i 's/=m$/=y/' "$1/.config"
    "$1/scripts/config" --file "$1/.config" \
        --enable X86_HPKVM_OWNERSHIP \
        --disable DEBUG_INFO --enable DEBUG_INFO_NONE \
        --disable DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT \
        --disable DEBUG_INFO_BTF --disable MODULE_SIG_ALL \
        --set-str SYSTEM_TRUSTED_KEYS "" \
        --set-str SYSTEM_REVOCATION_KEYS "" \
        --set-str BUILD_SALT "$kver-hpkvm"
    make -C "$1" olddefconfig >> "$log" 2>&1 ||
        die "olddefconfig failed; see $log"
    for m in X86_HPKVM_OWNERSHIP KVM KVM_AMD VHOST_NET VFIO_PCI IGB \
             NO_HZ_FULL X86_MCE; do
        grep -qx "CONFIG_$m=y" "$1/.config" ||
            die "Debian's config reduced lacks CONFIG_$m=y"
    done
}

tree=$out/src
rm -rf "$tree" "$out/.stamp"
say "unpacking $srcpkg $version"
kvm_source_unpack "$tree" || die "cannot unpack $deb"
kvm_source_patch "$tree"
log=$out/build.log
: > "$log"
if [ "$config" = debian ]; then
    kernel_config_debian "$tree" "${fragments[0]}"
else
    kernel_config_tiny "$tree"
fi
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
