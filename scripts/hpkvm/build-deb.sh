#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# A Debian package of what "make install" installs: qemu-hpkvm.
#
#   build-deb.sh BUILD OUTDIR
#
# The package holds QEMU's own install of BUILD (meson install, stripped)
# at its configured prefix, as it would be installed by hand, except for
# the helper's systemd units: they go to /lib/systemd/system, where
# packaged units belong and systemd reads them whatever the prefix.  The
# dependencies are dpkg-shlibdeps' reading of the binaries, plus the
# firmware packages on QEMU's firmware path (see configure).  No
# maintainer script enables or starts the helper: granting host cores is
# the operator's decision (docs/system/hpkvm-install.rst); on removal the
# helper is stopped, which changes nothing on the host.
#
# Prints the package's path.

set -eu

build=$(realpath "$1")
outdir=$2
here=$(dirname "$(realpath "$0")")
repo=$(realpath "$here/../..")

die() {
    echo "hpkvm: $*" >&2
    exit 1
}

meson_opt() {
    "$build/pyvenv/bin/meson" introspect --buildoptions "$build" |
        python3 -c 'import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$1"
}

prefix=$(meson_opt prefix)
bindir=$(meson_opt bindir)
case $prefix in
/usr|/usr/)
    die "prefix /usr would overwrite Debian's qemu-system-x86 files;" \
        "run ./configure --prefix=/usr/local (the default) or" \
        "--prefix=/opt/hpkvm, then make deb"
    ;;
esac

qemu_version=$("$build/pyvenv/bin/meson" introspect --projectinfo "$build" |
               python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
# One version per commit of ours: the count orders them as dpkg must.
if count=$(git -C "$repo" rev-list --count HEAD 2>/dev/null); then
    version=$qemu_version+hpkvm$count
else
    version=$qemu_version+hpkvm0
fi
arch=$(dpkg --print-architecture)

work=$(mktemp -d "${TMPDIR:-/tmp}/hpkvm-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
"$build/pyvenv/bin/meson" install -C "$build" --no-rebuild --quiet --strip \
    --destdir "$stage" > "$work/install.log" 2>&1 ||
    { tail -n 20 "$work/install.log" >&2; die "meson install failed"; }

units=$stage$prefix/lib/systemd/system
[ -f "$units/qemu-hpkvm-helper.service" ] ||
    die "meson install did not install the helper's units in $prefix/lib/systemd/system"
mkdir -p "$stage/lib/systemd/system"
mv "$units"/qemu-hpkvm-helper.* "$stage/lib/systemd/system/"
rmdir -p --ignore-fail-on-non-empty "$units"

# dpkg-shlibdeps reads debian/control (it names no package here).
mkdir -p "$work/src/debian" "$stage/DEBIAN"
printf 'Source: qemu-hpkvm\n\nPackage: qemu-hpkvm\nArchitecture: any\n' \
    > "$work/src/debian/control"
mapfile -t elves < <(find "$stage$prefix/bin" -type f -perm -u+x)
shlibs=$(cd "$work/src" &&
         dpkg-shlibdeps -O --warnings=0 "${elves[@]}" 2> "$work/shlibdeps.log") ||
    { cat "$work/shlibdeps.log" >&2; die "dpkg-shlibdeps failed"; }
depends=${shlibs#shlibs:Depends=}

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" << EOF
Package: qemu-hpkvm
Version: $version
Architecture: $arch
Maintainer: hpkvm developers <hpkvm@localhost>
Installed-Size: $size
Depends: $depends, seabios, ipxe-qemu
Suggests: libvirt-daemon-driver-qemu
Section: misc
Priority: optional
Homepage: https://www.qemu.org/
Description: QEMU with the hpkvm accelerator (dedicated cores, few VM exits)
 qemu-system-x86_64 with -accel hpkvm, installed in $prefix beside the
 distribution's QEMU, with qemu-hpkvm-helper (the root service that
 leases host cores to QEMU running as any user, and its systemd units),
 qemu-hpkvm-check and qemu-hpkvm-recover, QEMU's own tools of the same
 build (qemu-img, qemu-nbd, qemu-pr-helper, ...), the man pages and
 QEMU's manual.
EOF

# Only systemd's view of the units changes; under dpkg --root
# (DPKG_ROOT) there is no running systemd of that root to tell.
cat > "$stage/DEBIAN/postinst" << 'EOF'
#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
EOF
cat > "$stage/DEBIAN/prerm" << 'EOF'
#!/bin/sh
# The helper stops without changing the host; running VMs keep their
# leases and the journal stays in /run/hpkvm for the next helper or
# qemu-hpkvm-recover.
set -e
if [ "$1" = remove ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl stop qemu-hpkvm-helper.socket qemu-hpkvm-helper.service || true
fi
EOF
cat > "$stage/DEBIAN/postrm" << 'EOF'
#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$outdir"
deb=$(realpath "$outdir")/qemu-hpkvm_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" > /dev/null
echo "$deb"
