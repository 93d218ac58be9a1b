#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Install what a fresh Debian 12 machine lacks to build hpkvm and run its
# tests.  As root it installs; otherwise it prints the one command to run
# and fails.  Nothing here is needed on a machine that already has it all.
#
# The apt source it adds is limited on purpose: trixie only as deb-src
# (the QEMU base), bookworm-backports as deb (meson >= 1.5, pycotap); no
# binary package is ever taken from trixie.

set -eu

sources=/etc/apt/sources.list.d/hpkvm.sources

# "--bench": only what "make bench" adds (the chart), from bookworm.
if [ "${1:-}" = --bench ]; then
    bench_pkgs="python3-matplotlib"
    need=$(for p in $bench_pkgs; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
            grep -q '^install ok installed$' || echo "$p"; done)
    [ -z "$need" ] && exit 0
    if [ "$(id -u)" != 0 ]; then
        echo "hpkvm: make bench draws its chart with $need; install it" \
             "(sudo apt-get install $need) or read the table and JSON" >&2
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $need
    exit 0
fi

# Packages from bookworm itself.  gcc-multilib: the x86 option roms and
# our bare-metal guest are 32-bit code built with the host compiler.
# iproute2 and dpdk-dev (dpdk-testpmd): the network selector's tests.
# systemd (systemd-analyze): the install test verifies the helper's units.
# python3-sphinx, python3-sphinx-rtd-theme: QEMU's manual and the man
# pages of QEMU and hpkvm's tools.  dpkg-dev (dpkg-shlibdeps): make deb.
# clang, lld, llvm: the aarch64 cross build, its bare-metal guest and
# our arm64 kernel (scripts/hpkvm/aarch64-toolchain.sh says why not
# gcc-aarch64-linux-gnu).
# bc, libelf-dev (objtool): our whole kernel (kvm/build-kernel.sh);
# libssl-dev, openssl: its Debian-config variant (module signing keys).
# bochs (with bochs-term, the lightest of the GUIs its package needs one
# of; the tests use its built-in VNC one), bochsbios, vgabios, isolinux,
# syslinux-common, xorriso: the Bochs nested host, where kvm-intel runs
# (tests/hpkvm/nested-host/bochs_host.py).
base_pkgs="gcc gcc-multilib make pkg-config patch xz-utils ca-certificates
 libglib2.0-dev libpixman-1-dev libfdt-dev zlib1g-dev libslirp-dev
 flex bison ninja-build python3 python3-venv seabios ipxe-qemu
 iproute2 dpdk-dev systemd python3-sphinx python3-sphinx-rtd-theme
 dpkg-dev clang lld llvm bc libelf-dev libssl-dev openssl
 bochs bochs-term bochsbios vgabios isolinux syslinux-common xorriso"
# The headers of the kernel the nested test host boots, which our KVM
# (kvm/build.sh) is built against.  When Debian has dropped that ABI, the
# current one, as the nested host then boots it.
kver=$(cat "$(dirname "$0")/../../kvm/tested-kernel")
if apt-cache show "linux-headers-$kver" > /dev/null 2>&1; then
    base_pkgs="$base_pkgs linux-headers-$kver"
else
    base_pkgs="$base_pkgs linux-headers-amd64"
fi
# Packages that need a newer version than bookworm has; libvirt 11 for
# the test that drives hpkvm through a real libvirt daemon.
bpo_pkgs="meson python3-pycotap libvirt-daemon libvirt-daemon-driver-qemu
 libvirt-daemon-log libvirt-clients"

missing_pkgs() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
            grep -q '^install ok installed$' || echo "$p"
    done
}

meson_ok() {
    local v
    v=$(meson --version 2>/dev/null) || return 1
    dpkg --compare-versions "$v" ge 1.5.0
}

write_sources() {
    cat > "$sources" <<'SRC'
# Written by hpkvm's configure.
# trixie as deb-src only: the QEMU base is Debian's source package of QEMU.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

# bookworm-backports: meson >= 1.5 and python3-pycotap for QEMU 10.0.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}

need_sources=no
[ -f "$sources" ] || need_sources=yes
# shellcheck disable=SC2086
need_base=$(missing_pkgs $base_pkgs)
need_bpo=$(missing_pkgs python3-pycotap libvirt-daemon \
    libvirt-daemon-driver-qemu libvirt-daemon-log libvirt-clients)
meson_ok || need_bpo="$need_bpo meson"
need_bpo=$(echo $need_bpo)

if [ "$need_sources" = no ] && [ -z "$need_base" ] && [ -z "$need_bpo" ]; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    bpo_note=${need_bpo:+ $need_bpo (bookworm-backports)}
    echo "hpkvm: missing build dependencies:${need_base:+ $need_base}$bpo_note" >&2
    [ "$need_sources" = yes ] && echo "hpkvm: and the apt source $sources" >&2
    echo "hpkvm: run this once as root, then configure again:" >&2
    echo "    sudo $0" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
[ "$need_sources" = yes ] && write_sources
echo "hpkvm: installing build dependencies"
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $base_pkgs
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends -t bookworm-backports $bpo_pkgs
