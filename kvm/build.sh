#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build hpkvm's reference KVM: Debian's own arch/x86/kvm and virt/kvm for
# kernel ABI KVER, with kvm/patches/*.patch applied in order, as external
# modules (kvm.ko, kvm-amd.ko, kvm-intel.ko) that load into Debian's
# linux-image-KVER.
#
# Usage: kvm/build.sh [KVER [OUTDIR]]
#        (default: kvm/tested-kernel, build/kvm/KVER)
#
# Needs linux-headers-KVER (scripts/hpkvm/install-deps.sh installs it) and
# downloads the matching linux-source package once, into $HPKVM_CACHE/kvm
# (default ~/.cache/hpkvm/kvm).  OUTDIR/kvm.ko, kvm-amd.ko and kvm-intel.ko
# are rebuilt when a patch or this script changes; the compile itself is
# incremental.

# $(...) in single quotes is make's, in the Makefile edit below.
# shellcheck disable=SC2016
set -eu

here=$(cd "$(dirname "$0")" && pwd)
me=kvm/build.sh
# shellcheck source=kvm/source.sh
. "$here/source.sh"
kver=${1:-$(cat "$here/tested-kernel")}
out=${2:-$here/../build/kvm/$kver}
mkdir -p "$out"
out=$(cd "$out" && pwd)
headers=/usr/src/linux-headers-$kver

[ -f "$headers/Makefile" ] ||
    die "no $headers: install linux-headers-$kver" \
        "(scripts/hpkvm/install-deps.sh does, as root)"
# The source at the headers' exact version.
version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver") ||
    die "dpkg does not know linux-headers-$kver"
kvm_source_fetch "$kver" "$version"

# The tree: what the modules are built from, plus every file a patch
# touches.  Unpacked and checked afresh whenever a patch, the ABI probe
# or this script changes.
stamp=$( (cat "$0" "$here/source.sh" "$here"/patches/*.patch \
          "$here"/abi-probe/*
          echo "$version") | sha256sum | cut -c1-16)
tree=$out/src
# Headers our patches change shadow the headers package's: they come
# first (-nostdinc stays, as the kernel's Makefile sets it).
ours="-I$tree/include -I$tree/include/uapi -I$tree/arch/x86/include"

# The kernel's own code writes some fields of struct kvm_vcpu (see
# abi-probe/abi-probe.c): our headers must leave them where it has them.
# abi_offsets FLAGS: its offsets as NAME=VALUE lines, built with the
# include FLAGS ahead of the headers package's.
abi_offsets() {
    local dir=$out/abi-probe
    rm -rf "$dir"
    cp -r "$here/abi-probe" "$dir"
    make -C "$headers" M="$dir" NOSTDINC_FLAGS="-nostdinc $1" \
        abi-probe.s >> "$out/abi-probe.log" 2>&1 ||
        die "the ABI probe did not build; log in $out/abi-probe.log"
    sed -n 's/.*"->\(HPKVM_ABI_[A-Z_]*\) \$\{0,1\}\([0-9]*\) .*/\1=\2/p' \
        "$dir/abi-probe.s"
}
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$tree" "$out/.stamp"
    paths=(arch/x86/kvm virt/kvm)
    while read -r f; do
        paths+=("$f")
    done < <(sed -n 's|^+++ b/||p' "$here"/patches/*.patch | sort -u |
             grep -v '^arch/x86/kvm/\|^virt/kvm/')
    say "unpacking arch/x86/kvm and virt/kvm of $srcpkg $version"
    # New files of a patch are not in the tarball: ignore their absence.
    kvm_source_unpack "$tree" "${paths[@]}" 2>/dev/null || true
    [ -f "$tree/virt/kvm/kvm_main.c" ] || die "cannot unpack $deb"
    kvm_source_patch "$tree"
    # Out of tree, $(srctree) is the headers package, which has neither
    # arch/x86/kvm nor virt/kvm: point KVM's two includes at the tree.
    # -I $(src)/.. because KVM's trace headers are found as
    # ../../arch/x86/kvm/trace.h from an include directory.
    old_inc='^ccflags-y += -I $(srctree)/arch/x86/kvm$'
    new_inc='ccflags-y += -I $(src) -I $(src)/..'
    old_mk='^include $(srctree)/virt/kvm/Makefile.kvm$'
    new_mk='include $(src)/../../../virt/kvm/Makefile.kvm'
    sed -i -e "s|$old_inc|$new_inc|" -e "s|$old_mk|$new_mk|" \
        "$tree/arch/x86/kvm/Makefile"
    [ "$(grep -c '$(src)' "$tree/arch/x86/kvm/Makefile")" -ge 2 ] ||
        die "arch/x86/kvm/Makefile changed: adapt the out-of-tree edit"
    rm -f "$out/abi-probe.log"
    stock=$(abi_offsets "")
    patched=$(abi_offsets "$ours")
    [ -n "$stock" ] ||
        die "no offsets in $out/abi-probe/abi-probe.s: adapt abi_offsets()"
    if [ "$stock" != "$patched" ]; then
        die "the patches move fields of struct kvm_vcpu that linux-$kver" \
            "itself writes; with these modules it would corrupt them." \
            "Kernel: ${stock//$'\n'/ }; patched: ${patched//$'\n'/ }." \
            "Add new fields after them (struct kvm_vcpu's hpkvm is last)."
    fi
    echo "$stamp" > "$out/.stamp"
fi

make -C "$headers" M="$tree/arch/x86/kvm" -j"$(nproc)" \
    NOSTDINC_FLAGS="-nostdinc $ours" \
    modules > "$out/build.log" 2>&1 || {
    tail -n 30 "$out/build.log" >&2
    die "the module build failed; full log in $out/build.log"
}
# Without their debug information (19 of kvm.ko's 20 MB): the nested
# hosts load them from an initrd that an emulated CPU copies, and an oops
# is read from the symbols, which stay.
for m in kvm kvm-amd kvm-intel; do
    objcopy --strip-debug "$tree/arch/x86/kvm/$m.ko" "$out/$m.ko.new"
    mv "$out/$m.ko.new" "$out/$m.ko"
done
say "$out/kvm.ko $out/kvm-amd.ko $out/kvm-intel.ko for $kver"
