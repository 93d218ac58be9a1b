#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# A cross toolchain for aarch64 Linux made of the host's clang, lld and
# LLVM binutils over an arm64 sysroot (scripts/hpkvm/arm64-sysroot.sh):
# wrappers named as GNU's aarch64-linux-gnu-* are, so that QEMU's
# configure takes them with --cross-prefix=DIR/aarch64-linux-gnu-.
# Debian's gcc-aarch64-linux-gnu is not used because installing it
# removes gcc-multilib, which the x86 build needs.
#
# Usage: scripts/hpkvm/aarch64-toolchain.sh DIR SYSROOT

set -eu

[ $# = 2 ] || { echo "usage: $0 DIR SYSROOT" >&2; exit 1; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
sysroot=$(cd "$2" && pwd)

# Debian's llvm-14 keeps the unversioned LLVM tools in its own bin.
llvm_bin=$(find /usr/lib -maxdepth 2 -path '/usr/lib/llvm-*/bin' | sort -V |
           tail -n 1)
PATH=$PATH${llvm_bin:+:$llvm_bin}
for tool in clang ld.lld llvm-ar llvm-nm llvm-ranlib llvm-strip \
            llvm-objcopy llvm-readelf pkg-config; do
    command -v "$tool" > /dev/null ||
        { echo "aarch64-toolchain: no $tool (scripts/hpkvm/install-deps.sh installs it)" >&2; exit 1; }
done

wrap() {
    local name=$1
    shift
    cat > "$dir/aarch64-linux-gnu-$name.tmp" <<EOF
#!/bin/sh
# Written by scripts/hpkvm/aarch64-toolchain.sh.
$*
EOF
    chmod +x "$dir/aarch64-linux-gnu-$name.tmp"
    mv "$dir/aarch64-linux-gnu-$name.tmp" "$dir/aarch64-linux-gnu-$name"
}

target="--target=aarch64-linux-gnu --sysroot=$sysroot"
# lld only where the call links: clang warns about an unused -fuse-ld,
# and meson's compiler checks make warnings errors.
# shellcheck disable=SC2016 # expanded by the wrapper, not here
links='for a; do case $a in -c|-S|-E|-M|-MM) exec '
wrap gcc "${links}clang $target \"\$@\";; esac; done
exec clang $target -fuse-ld=lld \"\$@\""
wrap g++ "${links}clang++ $target \"\$@\";; esac; done
exec clang++ $target -fuse-ld=lld \"\$@\""
wrap ld "exec ld.lld --sysroot=$sysroot \"\$@\""
for t in ar nm ranlib strip objcopy readelf; do
    wrap "$t" "exec $(command -v "llvm-$t") \"\$@\""
done
wrap pkg-config "PKG_CONFIG_SYSROOT_DIR=$sysroot \\
PKG_CONFIG_LIBDIR=$sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig \\
PKG_CONFIG_PATH= exec pkg-config \"\$@\""
