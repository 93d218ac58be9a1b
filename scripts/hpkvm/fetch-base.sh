#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Obtain the pristine QEMU base and unpack it into DEST.
#
#   fetch-base.sh DEST debian TESTED_UPSTREAM_VERSION CACHE_DIR
#   fetch-base.sh DEST tarball FILE
#   fetch-base.sh DEST tree DIR
#
# "debian" takes Debian's source package of QEMU (trixie) with apt, which
# verifies it against Debian's signed indexes, and unpacks only its orig
# tarball: that is pristine upstream QEMU minus the firmware blobs Debian
# repacks out (+ds).  Debian's own patches are not applied.  Debian keeps
# one point release per suite, so when the tested version is gone the newest
# 10.0.x is taken and the choice is said out loud.
#
# Prints one line "VERSION ORIGIN" on stdout for the caller to record.

set -eu

die() {
    echo "hpkvm: $*" >&2
    exit 1
}

dest=$1
kind=$2

upstream_version_of() {
    # "1:10.0.13+ds-0+deb13u1" -> "10.0.13"
    echo "$1" | sed -e 's/^[0-9]*://' -e 's/[+~-].*//'
}

unpack_tarball() {
    local tarball=$1 tmp
    [ -r "$tarball" ] || die "cannot read QEMU tarball '$tarball'"
    tmp=$(mktemp -d "$dest.unpack.XXXXXX")
    if ! tar -C "$tmp" -xf "$tarball"; then
        rm -rf "$tmp"
        die "cannot unpack '$tarball': not a tar archive of QEMU?"
    fi
    # Upstream and Debian tarballs hold one top-level directory.
    set -- "$tmp"/*
    if [ $# != 1 ] || [ ! -f "$1/VERSION" ] || [ ! -f "$1/configure" ]; then
        rm -rf "$tmp"
        die "'$tarball' does not hold a QEMU source tree (no VERSION/configure)"
    fi
    rm -rf "$dest"
    mv "$1" "$dest"
    rmdir "$tmp"
}

check_tree_version() {
    local v
    v=$(cat "$dest/VERSION")
    case "$v" in
    10.0.*) ;;
    *) echo "hpkvm: warning: QEMU base is $v; hpkvm is made for 10.0.x" \
            "(10.1 changed the accelerator API). Patches may not apply." >&2 ;;
    esac
    echo "$v"
}

case "$kind" in
tarball)
    unpack_tarball "$3"
    echo "$(check_tree_version) tarball:$3"
    ;;
tree)
    [ -f "$3/VERSION" ] && [ -f "$3/configure" ] ||
        die "'$3' is not a QEMU source tree (no VERSION/configure)"
    rm -rf "$dest"
    # A copy, so that the user's tree is never patched.
    cp -a --reflink=auto "$3" "$dest"
    rm -rf "$dest/.git"
    echo "$(check_tree_version) tree:$3"
    ;;
debian)
    tested=$3
    cache=$4
    command -v apt-cache >/dev/null ||
        die "apt is needed to fetch Debian's QEMU source; on other systems" \
            "pass --qemu-tarball=FILE or --qemu-source=DIR to configure"
    list_versions() {
        apt-cache showsrc qemu 2>/dev/null | sed -n 's/^Version: //p' |
            while read -r v; do
                case "$(upstream_version_of "$v")" in
                10.0.*) echo "$v" ;;
                esac
            done
    }
    versions=$(list_versions)
    if [ -z "$versions" ] && [ "$(id -u)" = 0 ]; then
        apt-get update -q >&2 || true
        versions=$(list_versions)
    fi
    [ -n "$versions" ] ||
        die "apt knows no QEMU 10.0.x source package. It comes from Debian" \
            "trixie's deb-src: run scripts/hpkvm/install-deps.sh as root" \
            "(it adds that source) and 'apt-get update', or pass" \
            "--qemu-tarball=FILE / --qemu-source=DIR to configure."
    newest=
    for v in $versions; do
        if [ -z "$newest" ] || dpkg --compare-versions "$v" gt "$newest"; then
            newest=$v
        fi
    done
    pick=
    for v in $versions; do
        if [ "$(upstream_version_of "$v")" = "$tested" ]; then
            if [ -z "$pick" ] || dpkg --compare-versions "$v" gt "$pick"; then
                pick=$v
            fi
        fi
    done
    if [ -z "$pick" ]; then
        pick=$newest
        echo "hpkvm: warning: QEMU $tested, the version hpkvm is tested on," \
             "is no longer in Debian's archive; using $pick instead." \
             "The tests tell whether the overlay still applies." >&2
    fi
    mkdir -p "$cache"
    upstream=$(upstream_version_of "$pick")
    orig=$(echo "$cache"/qemu_"$upstream"*.orig.tar.*)
    if [ ! -f "$orig" ]; then
        echo "hpkvm: downloading Debian's QEMU source $pick" >&2
        # apt checks the files against the signed Sources index.
        (cd "$cache" && apt-get source -q --download-only "qemu=$pick" >&2) ||
            die "apt-get source qemu=$pick failed (see above). Check" \
                "network access to Debian's archive, or pass" \
                "--qemu-tarball=FILE to configure."
        orig=$(echo "$cache"/qemu_"$upstream"*.orig.tar.*)
        [ -f "$orig" ] || die "apt fetched no orig tarball for qemu=$pick"
    fi
    unpack_tarball "$orig"
    echo "$(check_tree_version) debian:$pick"
    ;;
*)
    die "fetch-base.sh: unknown source kind '$kind'"
    ;;
esac
