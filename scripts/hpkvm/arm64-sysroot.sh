#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# An arm64 sysroot for cross-building qemu-system-aarch64 with clang and
# lld, and the arm64 packages of the arm64 nested test host.
#
# Usage: scripts/hpkvm/arm64-sysroot.sh DIR [PACKAGE...]
#        scripts/hpkvm/arm64-sysroot.sh --download DIR PACKAGE...
#
# The second form only downloads the packages named (no dependencies:
# the arm64 nested test host's kernel and busybox), into DIR/debs, and
# prints their paths.
#
# Debian 12 cannot install the arm64 build dependencies beside the x86
# ones: gcc-aarch64-linux-gnu conflicts with gcc-multilib and libfdt-dev
# is not co-installable across architectures, so the obvious
# "dpkg --add-architecture arm64" removes packages the x86 build needs.
# Nothing is installed here instead: apt runs on a private state of its
# own (an arm64-only view of bookworm, an empty dpkg status) to resolve
# and download the packages and their dependencies, whose contents are
# unpacked into DIR/root.  The host's dpkg, apt lists and packages stay
# as they were, and no root is needed.  DIR/debs keeps the downloads;
# DIR/root is unpacked again only when the package list changes.

set -eu

die() {
    echo "arm64-sysroot: $*" >&2
    exit 1
}

download_only=no
if [ "${1:-}" = --download ]; then
    download_only=yes
    shift
fi
[ $# -ge 1 ] || die "usage: $0 [--download] DIR [PACKAGE...]"
dir=$1
shift
# What the aarch64 build links against (as the x86 build's
# install-deps.sh), and what clang needs to link for Linux (crt files and
# libgcc from libgcc-12-dev, the C library, the kernel's uapi headers).
pkgs="libc6-dev libgcc-12-dev linux-libc-dev libglib2.0-dev
 libpixman-1-dev libfdt-dev zlib1g-dev libslirp-dev $*"

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt_dir=$dir/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" \
    "$apt_dir/etc/preferences.d" "$dir/debs"
: > "$apt_dir/status"
cat > "$apt_dir/sources.list" <<'SRC'
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
SRC

apt_opts=(
    -o "APT::Architecture=arm64" -o "APT::Architectures::=arm64"
    -o "Dir::State=$apt_dir" -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::State::status=$apt_dir/status"
    -o "Dir::Cache=$apt_dir" -o "Dir::Cache::Archives=$apt_dir/archives"
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/etc/sources.list.d"
    -o "Dir::Etc::Preferences=$apt_dir/etc/preferences"
    -o "Dir::Etc::PreferencesParts=$apt_dir/etc/preferences.d"
    -o "Debug::NoLocking=1" -o "APT::Install-Recommends=0"
    -o "APT::Sandbox::User=$(id -un)"
)

# A day-old view is fresh enough; update otherwise (and the first time).
update_lists() {
    [ -n "$(find "$apt_dir/lists" -maxdepth 1 -name '*_Packages*' -mtime -1)" ] &&
        return 0
    echo "arm64-sysroot: reading bookworm's arm64 package lists" >&2
    apt-get "${apt_opts[@]}" -q update >&2 ||
        die "apt-get update of the arm64 lists failed (is deb.debian.org reachable?)"
}

if [ $download_only = yes ]; then
    for pkg in "$@"; do
        found=$(find "$dir/debs" -name "${pkg}_*_arm64.deb" | sort | tail -n 1)
        if [ -z "$found" ]; then
            update_lists
            echo "arm64-sysroot: downloading $pkg (arm64)" >&2
            (cd "$dir/debs" && apt-get "${apt_opts[@]}" -q download "$pkg") >&2 ||
                die "cannot download $pkg for arm64"
            found=$(find "$dir/debs" -name "${pkg}_*_arm64.deb" | sort | tail -n 1)
        fi
        [ -n "$found" ] || die "no $pkg package after downloading it"
        echo "$found"
    done
    exit 0
fi

stamp=$(echo "$pkgs" | tr -s '[:space:]' '\n' | sort -u | sha256sum | cut -c1-16)
if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] &&
   [ -d "$dir/root/usr" ]; then
    exit 0
fi
update_lists
# shellcheck disable=SC2086
echo "arm64-sysroot: fetching" $pkgs >&2
# shellcheck disable=SC2086
apt-get "${apt_opts[@]}" -q -y --download-only install $pkgs >&2 ||
    die "cannot resolve or download the arm64 packages"
cp -n "$apt_dir"/archives/*.deb "$dir/debs/" 2>/dev/null || true

rm -rf "$dir/root.tmp"
mkdir -p "$dir/root.tmp"
for deb in "$apt_dir"/archives/*.deb; do
    dpkg-deb -x "$deb" "$dir/root.tmp"
done
# Absolute symlinks of the packages (e.g. lib*.so -> /lib/...) would
# point into the build machine's own root: make them relative.
find "$dir/root.tmp" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" \
        "$dir/root.tmp$target")" "$link"
done
rm -rf "$dir/root"
mv "$dir/root.tmp" "$dir/root"
echo "$stamp" > "$dir/.stamp"
