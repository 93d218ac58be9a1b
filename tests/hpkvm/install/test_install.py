#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm as an operator installs it: QEMU's own install of the build
("make install", i.e. meson install) into a DESTDIR of this test's, then
the installed tree used as installed: the emulator boots our guest with
the firmware installed beside it (not the build tree's), the tools run,
and the helper's systemd units start the installed helper on the socket
QEMU connects to.  Needs no root and no KVM (the guest runs on TCG).
Prints TAP."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "host"))

import hostlib  # noqa: E402

BUILD = os.path.abspath(hostlib.BUILD)
PREFIX = os.environ.get("HPKVM_PREFIX", "/usr/local")
BINDIR = os.path.join(PREFIX, os.environ.get("HPKVM_BINDIR", "bin"))
DATADIR = os.path.join(PREFIX, "share", "qemu")
UNITDIR = os.path.join(PREFIX, "lib", "systemd", "system")
MANDIR = os.path.join(PREFIX, os.environ.get("HPKVM_MANDIR", "share/man"))
RUN_GUEST = os.path.join(HERE, "../../../scripts/hpkvm/run-guest.py")
INSTALL_TARGETS = os.path.join(HERE,
                               "../../../scripts/hpkvm/install-targets.py")
PROTO_H = os.path.join(HERE, "../../../accel/hpkvm/hpkvm-helper-proto.h")
TOOLS = ("qemu-hpkvm-helper", "qemu-hpkvm-recover", "qemu-hpkvm-check")
tests = hostlib.TapSuite()
ROOT = None


def installed(path):
    """Where the installed file @path (as the host would see it) lies."""
    return ROOT + path


def run_guest(seconds=60, root=None):
    """run-guest.py with the QEMU installed below @root (the test's
    DESTDIR by default); its guest within @seconds."""
    qemu = (root or ROOT) + os.path.join(BINDIR, "qemu-system-x86_64")
    return subprocess.run([sys.executable, RUN_GUEST, qemu,
                           os.path.abspath(hostlib.GUEST), str(seconds),
                           "-accel", "tcg", "-cpu", "max", "-smp", "2",
],
                          capture_output=True, text=True, timeout=90)


@tests.case
def the_installed_qemu_boots_the_guest_from_the_installed_firmware():
    # Its data directory is the one installed beside it (QEMU is
    # relocatable), then the firmware path of Debian's packages; never
    # the build tree's.
    qemu = installed(os.path.join(BINDIR, "qemu-system-x86_64"))
    dirs = subprocess.run([qemu, "-L", "help"], capture_output=True,
                          text=True, timeout=30, check=True).stdout.split()
    datadirs = [os.path.normpath(d) for d in dirs
                if not d.startswith(("/usr/share/", "/usr/lib/"))]
    assert datadirs == [installed(DATADIR)], dirs
    res = run_guest()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "hpkvm-guest: PASS cpus=2/2" in res.stdout, res.stdout


@tests.case
def without_its_installed_option_rom_the_installed_qemu_cannot_boot():
    # The case above proves something only if the installed file is the
    # one read: taken away, -kernel has no multiboot loader and the guest
    # never runs (it passed in under a second above).
    rom = installed(os.path.join(DATADIR, "multiboot_dma.bin"))
    aside = rom + ".aside"
    os.rename(rom, aside)
    try:
        res = run_guest(seconds=10)
    finally:
        os.rename(aside, rom)
    assert res.returncode != 0, res.stdout
    assert "multiboot_dma.bin" in res.stderr, res.stderr


@tests.case
def the_installed_tools_run():
    for tool in TOOLS:
        path = installed(os.path.join(BINDIR, tool))
        res = subprocess.run([path, "--help"], capture_output=True,
                             text=True, timeout=30)
        assert res.returncode == 0 and "Usage" in res.stdout + res.stderr, \
            (tool, res.returncode, res.stdout, res.stderr)


def help_options(tool):
    """The long options @tool's --help lists."""
    res = subprocess.run([installed(os.path.join(BINDIR, tool)), "--help"],
                         capture_output=True, text=True, timeout=30)
    return set(re.findall(r"--[a-z][a-z-]*", res.stdout + res.stderr))


@tests.case
def each_tool_has_a_man_page_naming_every_option_of_its_help():
    # Section 8, as QEMU's qemu-pr-helper; built by Sphinx from the
    # tools' pages in docs/system.  A man page that lacks an option the
    # tool takes (or names it differently) fails.
    for tool in TOOLS:
        page = installed(os.path.join(MANDIR, "man8", tool + ".8"))
        assert os.path.exists(page), f"{page} not installed"
        with open(page) as f:
            roff = f.read()
        title = re.search(r'^\.TH "([^"]+)" "(\d)"', roff, re.M)
        assert title and title.groups() == (tool.upper(), "8"), \
            (page, roff[:300])
        # roff writes a hyphen as "\-" and Sphinx an option as \fB...\fP.
        text = roff.replace("\\-", "-")
        options = help_options(tool)
        assert options, (tool, "--help lists no option")
        missing = [o for o in sorted(options) if o not in text]
        assert not missing, f"{tool}.8 lacks {missing}"
    # QEMU's own page comes with it.
    assert os.path.exists(installed(os.path.join(MANDIR, "man1",
                                                 "qemu.1")))


def unit(name):
    with open(installed(os.path.join(UNITDIR, name))) as f:
        return f.read()


@tests.case
def the_installed_units_start_the_installed_helper_on_qemus_socket():
    service = unit("qemu-hpkvm-helper.service")
    socket_unit = unit("qemu-hpkvm-helper.socket")
    assert "@" not in service, "unsubstituted: " + service
    (exec_start,) = re.findall(r"^ExecStart=(\S+)", service, re.M)
    assert exec_start == os.path.join(BINDIR, "qemu-hpkvm-helper"), \
        exec_start
    assert os.access(installed(exec_start), os.X_OK), exec_start
    # The socket QEMU's helper client connects to.
    with open(PROTO_H) as f:
        (helper_socket,) = re.findall(
            r'^#define HPKVM_HELPER_SOCKET "([^"]+)"', f.read(), re.M)
    assert re.findall(r"^ListenStream=(\S+)", socket_unit, re.M) == \
        [helper_socket], socket_unit
    # systemd itself reads them: every directive known to this systemd,
    # and the command there.  verify looks for ExecStart= on the running
    # system, so a copy of the units points it into the DESTDIR (the
    # only change); man pages are not installed (--man=no).
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze not installed (package systemd)"
    with tempfile.TemporaryDirectory(prefix="hpkvm-units-") as tmp:
        with open(os.path.join(tmp, "qemu-hpkvm-helper.service"), "w") as f:
            f.write(service.replace(f"ExecStart={exec_start}",
                                    f"ExecStart={installed(exec_start)}"))
        with open(os.path.join(tmp, "qemu-hpkvm-helper.socket"), "w") as f:
            f.write(socket_unit)
        res = subprocess.run([analyze, "verify", "--man=no",
                              os.path.join(tmp, "qemu-hpkvm-helper.socket"),
                              os.path.join(tmp, "qemu-hpkvm-helper.service")],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not res.stderr.strip(), \
        res.stdout + res.stderr


BUILD_DEB = os.path.join(HERE, "../../../scripts/hpkvm/build-deb.sh")
PACKAGED_UNITDIR = "/lib/systemd/system"


def dpkg(root, *args):
    """dpkg on the root file system @root (dpkg --root), as an operator's
    dpkg would run, but with the maintainer scripts run here (they leave
    systemd alone under DPKG_ROOT) and on a root that has none of the
    dependencies installed."""
    return subprocess.run(["dpkg", f"--root={root}", "--force-not-root",
                           "--force-script-chrootless", "--force-depends",
                           "--log=/dev/null", *args],
                          capture_output=True, text=True, timeout=120)


def files_below(root):
    return {"/" + os.path.relpath(os.path.join(d, f), root)
            for d, _, names in os.walk(root) for f in names}


@tests.case
def the_debian_package_installs_what_make_install_does_runs_and_goes():
    with tempfile.TemporaryDirectory(prefix="hpkvm-deb-") as tmp:
        res = subprocess.run([BUILD_DEB, BUILD, os.path.join(tmp, "out")],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        deb = res.stdout.strip()
        fields = subprocess.run(["dpkg-deb", "--field", deb, "Package",
                                 "Depends"], capture_output=True, text=True,
                                check=True).stdout
        assert "Package: qemu-hpkvm" in fields, fields
        # From the binaries themselves (dpkg-shlibdeps), and the firmware.
        for dep in ("libglib2.0-0", "libc6", "seabios", "ipxe-qemu"):
            assert dep in fields, (dep, fields)
        # A root with an empty dpkg database.
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "var/lib/dpkg/info"))
        os.makedirs(os.path.join(root, "var/lib/dpkg/updates"))
        open(os.path.join(root, "var/lib/dpkg/status"), "w").close()
        res = dpkg(root, "--install", deb)
        assert res.returncode == 0, res.stdout + res.stderr
        # What make install installs, the units where packages put them.
        want = {p if not p.startswith(UNITDIR + "/") else
                PACKAGED_UNITDIR + p[len(UNITDIR):]
                for p in files_below(ROOT)}
        got = {p for p in files_below(root) if not p.startswith("/var/")}
        assert got == want, (sorted(got - want), sorted(want - got))
        # The installed package runs where dpkg put it.
        res = run_guest(root=root)
        assert "hpkvm-guest: PASS cpus=2/2" in res.stdout, \
            res.stdout + res.stderr
        res = dpkg(root, "--purge", "qemu-hpkvm")
        assert res.returncode == 0, res.stdout + res.stderr
        left = {p for p in files_below(root) if not p.startswith("/var/")}
        assert not left, sorted(left)


def not_built():
    """What meson install installs but the build has not built: with
    QEMU's tools configured, qemu-img and the like, which this test's
    dependencies cannot name (make check and make install build them)."""
    res = subprocess.run([sys.executable, INSTALL_TARGETS, BUILD],
                         capture_output=True, text=True, check=True)
    return [t for t in res.stdout.split()
            if not os.path.exists(os.path.join(BUILD, t))]


def main():
    global ROOT
    missing = not_built()
    if missing:
        print("1..1\nnot ok 1 - meson install into a DESTDIR")
        print(f"# not built: {' '.join(missing)}; build what meson install "
              f"installs: ninja -C {BUILD} $({INSTALL_TARGETS} {BUILD})")
        return 1
    with tempfile.TemporaryDirectory(prefix="hpkvm-install-") as root:
        ROOT = root
        meson = os.path.join(BUILD, "pyvenv", "bin", "meson")
        res = subprocess.run([meson, "install", "-C", BUILD, "--no-rebuild",
                              "--quiet", "--destdir", root],
                             capture_output=True, text=True, timeout=300)
        if res.returncode:
            print("1..1\nnot ok 1 - meson install into a DESTDIR")
            for line in (res.stdout + res.stderr).splitlines()[-20:]:
                print(f"# {line}")
            return 1
        return tests.run()


if __name__ == "__main__":
    sys.exit(main())
