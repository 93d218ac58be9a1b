#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build hpkvm's reference KVM: Debian's own arch/x86/kvm and virt/kvm for
# kernel ABI KVER, with kvm/patches/*.patch applied in order, as external
# modules (kvm.ko, kvm-amd.ko) that load into Debian's linux-image-KVER.
#
# Usage: kvm/build.sh [KVER [OUTDIR]]
#        (default: kvm/tested-kernel, build/kvm/KVER)
#
# Needs linux-headers-KVER (scripts/hpkvm/install-deps.sh installs it) and
# downloads the matching linux-source package once, into $HPKVM_CACHE/kvm
# (default ~/.cache/hpkvm/kvm).  OUTDIR/kvm.ko and OUTDIR/kvm-amd.ko are
# rebuilt when a patch or this script changes; the compile itself is
# incremental.

# $(...) in single quotes is make's, in the Makefile edit below.
# shellcheck disable=SC2016
set -eu

here=$(cd "$(dirname "$0")" && pwd)
kver=${1:-$(cat "$here/tested-kernel")}
out=${2:-$here/../build/kvm/$kver}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${HPKVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpkvm}/kvm
headers=/usr/src/linux-headers-$kver

die() {
    echo "kvm/build.sh: $*" >&2
    exit 1
}

[ -f "$headers/Makefile" ] ||
    die "no $headers: install linux-headers-$kver" \
        "(scripts/hpkvm/install-deps.sh does, as root)"
version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver") ||
    die "dpkg does not know linux-headers-$kver"
# 6.1.0-57-amd64 -> linux-source-6.1, at the headers' exact version.
srcpkg=linux-source-$(echo "$kver" | cut -d. -f1-2)

mkdir -p "$cache" "$out"
deb=$cache/${srcpkg}_${version}_all.deb
if [ ! -f "$deb" ]; then
    echo "kvm/build.sh: downloading $srcpkg $version" >&2
    (cd "$cache" && apt-get download -q "$srcpkg=$version") >&2 ||
        die "cannot download $srcpkg=$version (apt-get update?)"
fi

# The tree: what the modules are built from, plus every file a patch
# touches.  Unpacked afresh whenever a patch or this script changes.
stamp=$( (cat "$0" "$here"/patches/*.patch; echo "$version") | sha256sum |
         cut -c1-16)
tree=$out/src
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$tree" "$out/.stamp"
    mkdir -p "$tree"
    top=$srcpkg
    paths=("$top/arch/x86/kvm" "$top/virt/kvm")
    while read -r f; do
        paths+=("$top/$f")
    done < <(sed -n 's|^+++ b/||p' "$here"/patches/*.patch | sort -u |
             grep -v '^arch/x86/kvm/\|^virt/kvm/')
    echo "kvm/build.sh: unpacking arch/x86/kvm and virt/kvm of" \
         "$srcpkg $version" >&2
    # New files of a patch are not in the tarball: ignore their absence.
    dpkg-deb --fsys-tarfile "$deb" |
        tar -xO "./usr/src/$srcpkg.tar.xz" | xz -dc |
        tar -x -C "$tree" --strip-components=1 --ignore-failed-read \
            "${paths[@]}" 2>/dev/null || true
    [ -f "$tree/virt/kvm/kvm_main.c" ] || die "cannot unpack $deb"
    for p in "$here"/patches/*.patch; do
        patch -d "$tree" -p1 --batch --quiet < "$p" ||
            die "$(basename "$p") does not apply to $srcpkg $version"
    done
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
    echo "$stamp" > "$out/.stamp"
fi

# Headers our patches change shadow the headers package's: they come
# first (-nostdinc stays, as the kernel's Makefile sets it).
ours="-I$tree/include -I$tree/include/uapi -I$tree/arch/x86/include"
make -C "$headers" M="$tree/arch/x86/kvm" -j"$(nproc)" \
    NOSTDINC_FLAGS="-nostdinc $ours" \
    CONFIG_KVM_INTEL= modules > "$out/build.log" 2>&1 || {
    tail -n 30 "$out/build.log" >&2
    die "the module build failed; full log in $out/build.log"
}
for m in kvm kvm-amd; do
    cp "$tree/arch/x86/kvm/$m.ko" "$out/$m.ko.new"
    mv "$out/$m.ko.new" "$out/$m.ko"
done
echo "kvm/build.sh: $out/kvm.ko $out/kvm-amd.ko for $kver" >&2
