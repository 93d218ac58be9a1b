#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build Linux's own KVM selftests (tools/testing/selftests/kvm), unmodified,
# from Debian's linux-source for kernel ABI KVER: the tests the nested
# test hosts run on Debian's KVM and on ours, to show that our series
# changes nothing upstream's tests see
# (tests/hpkvm/nested-host/test_kvm_selftests.py).
#
# Usage: kvm/build-selftests.sh [--arch x86|arm64] [KVER [OUTDIR]]
#        (default: x86, kvm/tested-kernel, build/kvm-selftests/KVER-ARCH)
#
# OUTDIR gets:
#   bin/NAME       each test that built, stripped, as the Makefile names
#                  it (x86_64/xapic_state_test, rseq_test, ...);
#   built          their names, one per line;
#   unbuilt        the tests of TEST_GEN_PROGS that did not build, with
#                  the first error the compiler gave: Debian's 6.1 has
#                  stable backports whose selftests do not build, which
#                  the nested tests report rather than hide.
# The tests are linked against the C library the nested hosts already
# carry (QEMU's).  arm64 is cross-built with the host's clang and lld
# (build/aarch64-tools, as configure makes them for QEMU's cross build).
# Rebuilt only when the source version or this script changes (~1.5 min).

set -eu

here=$(cd "$(dirname "$0")" && pwd)
me=kvm/build-selftests.sh
# shellcheck source=kvm/source.sh
. "$here/source.sh"
arch=x86
if [ "${1:-}" = --arch ]; then
    arch=${2:-}
    shift 2 || die "--arch needs x86 or arm64"
fi
kver=${1:-$(cat "$here/tested-kernel")}
out=${2:-$here/../build/kvm-selftests/$kver-$arch}
case $arch in
x86)
    karch=()
    kmake=()
    ;;
arm64)
    cross=$here/../build/aarch64-tools/aarch64-linux-gnu-
    [ -x "${cross}gcc" ] ||
        die "no ${cross}gcc: run ./configure (it makes the aarch64" \
            "cross toolchain)"
    karch=(ARCH=arm64)
    kmake=("${karch[@]}" "CROSS_COMPILE=$cross" "CC=${cross}gcc")
    ;;
*)
    die "--arch $arch: x86 or arm64"
    ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(apt-cache show "linux-image-$kver" 2>/dev/null |
          sed -n 's/^Version: //p' | head -n 1)
[ -n "$version" ] || die "apt knows no linux-image-$kver (apt-get update?)"
kvm_source_fetch "$kver" "$version"

stamp=$( (cat "$0" "$here/source.sh"; echo "$version $arch") |
        sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] &&
   [ -s "$out/built" ]; then
    say "$out is current"
    exit 0
fi

# What "make headers" and the selftests read: not the drivers.
tree=$out/src
rm -rf "$tree" "${out:?}/obj" "${out:?}/bin" "$out/.stamp"
say "unpacking $srcpkg $version (tools, headers)"
kvm_source_unpack "$tree" Makefile Kbuild Kconfig scripts include tools \
    "arch/${arch}" || die "cannot unpack $deb"
log=$out/build.log
# The uapi headers the selftests include (LINUX_HDR_PATH): this
# source's, for the architecture built, never the host's (made with the
# host's compiler: only its scripts are compiled).
make -C "$tree" "${karch[@]}" O="$out/obj" headers > "$log" 2>&1 || {
    tail -n 20 "$log" >&2
    die "make headers failed; log in $log"
}
st=$tree/tools/testing/selftests/kvm
say "building the $arch KVM selftests (log: $log)"
# -k: one test that does not build stops no other.
make -C "$st" -k -j"$(nproc)" "${kmake[@]}" OUTPUT="$out/obj/kvm" \
    INSTALL_HDR_PATH="$out/obj/usr" \
    KHDR_INCLUDES="-isystem $out/obj/usr/include" >> "$log" 2>&1 || true

# Every test the Makefile would build for this architecture.
progs=$(make -C "$st" -pn "${kmake[@]}" OUTPUT=/nonexistent 2>/dev/null |
        sed -n 's/^TEST_GEN_PROGS := //p' | head -n 1 |
        tr ' ' '\n' | sed -n 's,^/nonexistent/,,p')
[ -n "$progs" ] || die "no TEST_GEN_PROGS in $st/Makefile"
strip=${cross:-}strip
: > "$out/built.new"
: > "$out/unbuilt.new"
for p in $progs; do
    if [ -x "$out/obj/kvm/$p" ]; then
        mkdir -p "$(dirname "$out/bin/$p")"
        "$strip" -o "$out/bin/$p" "$out/obj/kvm/$p"
        echo "$p" >> "$out/built.new"
    else
        # The first error in or under the test's own source.
        name=$(basename "$p")
        at="(^|[ /])$name\.c:[0-9]+|referenced by $name\.c"
        why=$(grep -B 1 -A 3 -E "$at" "$log" |
              grep -m 1 -E "error|undefined" |
              sed "s,$tree/,,; s,$out/obj/,," || true)
        echo "$p: ${why:-did not build}" >> "$out/unbuilt.new"
    fi
done
[ -s "$out/built.new" ] || {
    tail -n 30 "$log" >&2
    die "no selftest built; log in $log"
}
mv "$out/unbuilt.new" "$out/unbuilt"
mv "$out/built.new" "$out/built"
rm -rf "$tree" "$out/obj"
echo "$stamp" > "$out/.stamp"
say "$(wc -l < "$out/built") selftests in $out/bin," \
    "$(wc -l < "$out/unbuilt") did not build (see $out/unbuilt)"
