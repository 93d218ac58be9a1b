#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Lay hpkvm's own files over an unpacked QEMU base and bring the base's
# patch state in line with patches/series.
#
#   overlay.sh REPO SRC
#
# Our files are symbolic links into the repository, so an edit is seen by
# the next ninja run and rebuilds only what depends on it.  A file of ours
# may never shadow an upstream file: changes to upstream behaviour are
# patches.  Applied patches are remembered in SRC/.hpkvm-applied/; when the
# series changes, the old ones are reversed and the new ones applied, so
# only the files they touch are rebuilt.  Exit status 2 asks the caller to
# unpack the base afresh (a reversal failed).

set -eu

repo=$1
src=$2
applied=$src/.hpkvm-applied

die() {
    echo "hpkvm: $*" >&2
    exit 1
}

# The directories of QEMU's tree that hold files of ours.
overlay_dirs="accel contrib docs hw include linux-headers net qapi system target
              tests tools"

link_tree() {
    local d f rel
    for d in $overlay_dirs; do
        [ -d "$repo/$d" ] || continue
        while IFS= read -r -d '' f; do
            rel=${f#"$repo"/}
            if [ -e "$src/$rel" ] && [ ! -L "$src/$rel" ]; then
                die "$rel exists in the QEMU base: change upstream files" \
                    "with a patch in patches/, not by shadowing them"
            fi
            mkdir -p "$(dirname "$src/$rel")"
            ln -sfn "$f" "$src/$rel"
        done < <(find "$repo/$d" -type f -print0)
    done
    # Drop links whose target was removed or renamed in the repository.
    find "$src" -xtype l -lname "$repo/*" -delete
}

series() {
    [ -f "$repo/patches/series" ] || return 0
    grep -v -e '^#' -e '^[[:space:]]*$' "$repo/patches/series"
}

patches_current() {
    local p
    [ -d "$applied" ] || return 1
    [ "$(series)" = "$(cat "$applied/series" 2>/dev/null)" ] || return 1
    for p in $(series); do
        cmp -s "$repo/patches/$p" "$applied/$p" || return 1
    done
}

unapply_old() {
    local p
    [ -f "$applied/series" ] || return 0
    for p in $(tac "$applied/series"); do
        if ! patch -s -R -p1 -d "$src" --no-backup-if-mismatch \
                < "$applied/$p" >&2; then
            echo "hpkvm: cannot reverse $p; the base will be unpacked afresh" >&2
            exit 2
        fi
    done
    rm -rf "$applied"
}

apply_new() {
    local p
    mkdir -p "$applied.new"
    for p in $(series); do
        [ -f "$repo/patches/$p" ] || die "patches/series names $p, which is missing"
        if ! patch -s -N -p1 -d "$src" --no-backup-if-mismatch \
                < "$repo/patches/$p" >&2; then
            die "patches/$p does not apply to this QEMU base" \
                "($(cat "$src/VERSION")): refresh it against that version"
        fi
        cp "$repo/patches/$p" "$applied.new/$p"
        echo "$p" >> "$applied.new/series"
    done
    touch "$applied.new/series"
    mv "$applied.new" "$applied"
}

link_tree
if ! patches_current; then
    unapply_old
    rm -rf "$applied.new"
    apply_new
fi
