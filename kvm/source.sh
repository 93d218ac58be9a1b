# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Debian's linux-source for hpkvm's kernel side, sourced by kvm/build.sh
# (the modules) and kvm/build-kernel.sh (the whole kernel): the package
# downloaded once into the cache, unpacked, the series applied.  The
# caller sets $me (its name, for messages) and $here (kvm/).
# shellcheck disable=SC2154

cache=${HPKVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpkvm}/kvm

say() {
    echo "$me: $*" >&2
}

die() {
    say "$@"
    exit 1
}

# kvm_source_fetch KVER VERSION: set $srcpkg (6.1.0-57-amd64 ->
# linux-source-6.1) and $deb, that package at VERSION, downloaded into
# the cache unless it is there.
kvm_source_fetch() {
    srcpkg=linux-source-$(echo "$1" | cut -d. -f1-2)
    mkdir -p "$cache"
    deb=$cache/${srcpkg}_${2}_all.deb
    [ -f "$deb" ] && return 0
    say "downloading $srcpkg $2"
    (cd "$cache" && apt-get download -q "$srcpkg=$2") >&2 ||
        die "cannot download $srcpkg=$2 (apt-get update?)"
}

# kvm_image_fetch KVER VERSION: set $imagedeb, linux-image-KVER at
# VERSION (the kernel Debian built from that source, with its config),
# downloaded into the cache unless it is there.
kvm_image_fetch() {
    imagedeb=$cache/linux-image-${1}_${2}_amd64.deb
    [ -f "$imagedeb" ] && return 0
    say "downloading linux-image-$1 $2"
    (cd "$cache" && apt-get download -q "linux-image-$1=$2") >&2 ||
        die "cannot download linux-image-$1=$2 (apt-get update?)"
}

# kvm_source_unpack TREE [PATH...]: $deb's source into TREE, only the
# PATHs (relative to the source's top) if given.  Fails as tar does,
# e.g. for a PATH the source does not have.
kvm_source_unpack() {
    local tree=$1
    shift
    mkdir -p "$tree"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -xO "./usr/src/$srcpkg.tar.xz" | xz -dc |
        tar -x -C "$tree" --strip-components=1 "${@/#/$srcpkg/}"
}

# kvm_source_patch TREE: the series, in order.
kvm_source_patch() {
    local p

    for p in "$here"/patches/*.patch; do
        patch -d "$1" -p1 --batch --quiet < "$p" ||
            die "$(basename "$p") does not apply to $srcpkg"
    done
}
