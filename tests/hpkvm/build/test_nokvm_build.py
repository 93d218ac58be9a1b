#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's changes keep a QEMU without KVM, and with no optional
features, configuring, building and running: the same source tree
configured --disable-kvm --without-default-features (no vhost-user
either) in a build directory of its own, qemu-system-x86_64 built, and
what a user of that binary meets checked: no hpkvm accelerator, an
"-accel hpkvm" refused by name, query-hpkvm and "info hpkvm" saying
hpkvm is not in this binary, and hpnet ruling vhost-user out with the
build option to change.  A non-Linux host is not covered: this machine
cannot build one.  Prints TAP.

    test_nokvm_build.py SOURCE-DIR BUILD-DIR
"""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                "..", "..", "..", "scripts", "hpkvm"))
import hpkvm_qmp  # noqa: E402 pylint: disable=wrong-import-position

# Built unoptimised and without debug information: the binary only has
# to start and answer, and make check's time is bounded (a minute less of
# about six on two cores, measured 2026-12-05).
CONFIGURE_ARGS = ["--target-list=x86_64-softmmu", "--disable-kvm",
                  "--without-default-features", "--disable-docs",
                  "--disable-tools", "--disable-guest-agent",
                  "--disable-debug-info", "-Doptimization=0",
                  "--python=/usr/bin/python3"]
STAMP = ".hpkvm-nokvm-args"


class Tap:
    def __init__(self, total):
        self.n = 0
        self.failed = 0
        print(f"1..{total}", flush=True)

    def result(self, ok, name, detail=""):
        self.n += 1
        if not ok:
            self.failed += 1
            for line in detail.splitlines()[-30:]:
                print(f"# {line}")
        print(f"{'ok' if ok else 'not ok'} {self.n} - {name}", flush=True)
        return ok


def run(cmd, cwd=None, timeout=1200):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


def hpkvm_report(build, qemu, tmp):
    """(query-hpkvm, "info hpkvm") of a QEMU of BUILD (-machine none),
    through QEMU's QMP client as the other tests use it."""
    sock = os.path.join(tmp, "qmp.sock")
    proc = subprocess.Popen([qemu, "-machine", "none", "-nodefaults",
                             "-display", "none",
                             "-qmp", f"unix:{sock},server=on,wait=off"],
                            stderr=subprocess.PIPE, text=True)
    mon = None
    try:
        mon = hpkvm_qmp.connect(build, sock, time.monotonic() + 60, proc,
                                timeout=30)
        if mon is None:
            return None, proc.stderr.read()
        return (mon.cmd("query-hpkvm"),
                mon.cmd("human-monitor-command", **{"command-line":
                                                    "info hpkvm"}))
    finally:
        if mon:
            mon.close()
        proc.kill()
        proc.wait()
        proc.stderr.close()


def main():
    src, build = sys.argv[1], sys.argv[2]
    tap = Tap(5)
    os.makedirs(build, exist_ok=True)
    stamp = os.path.join(build, STAMP)
    try:
        with open(stamp, encoding="utf-8") as f:
            configured = f.read() == " ".join(CONFIGURE_ARGS)
    except OSError:
        configured = False
    if not configured or not os.path.exists(os.path.join(build,
                                                         "build.ninja")):
        res = run([os.path.join(src, "configure"), *CONFIGURE_ARGS],
                  cwd=build, timeout=600)
        if not tap.result(res.returncode == 0, "configures without KVM",
                          res.stdout + res.stderr):
            return 1
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(" ".join(CONFIGURE_ARGS))
    else:
        tap.result(True, "configures without KVM (as configured before)")
    res = run(["ninja", "-C", build, "qemu-system-x86_64"], timeout=1500)
    if not tap.result(res.returncode == 0, "builds without KVM",
                      res.stdout[-6000:] + res.stderr):
        return 1
    qemu = os.path.join(build, "qemu-system-x86_64")

    accels = run([qemu, "-accel", "help"], timeout=60).stdout.split()
    refused = run([qemu, "-machine", "none", "-accel", "hpkvm"], timeout=60)
    tap.result("hpkvm" not in accels and refused.returncode != 0 and
               "invalid accelerator hpkvm" in refused.stderr,
               "-accel hpkvm is refused by name",
               f"accelerators: {accels}; {refused.stderr}")

    with tempfile.TemporaryDirectory(prefix="hpkvm-nokvm-") as tmp:
        info, hmp = hpkvm_report(build, qemu, tmp)
    tap.result(info == {"enabled": False, "present": False} and
               "not in this binary" in hmp,
               "query-hpkvm and info hpkvm say hpkvm is not in this binary",
               f"{info!r} {hmp!r}")

    net = run([qemu, "-machine", "none", "-nodefaults", "-display", "none",
               "-netdev", "hpnet,id=n0,backend=vhost-user,"
               "vhost-user-socket=/nonexistent"], timeout=60)
    tap.result(net.returncode != 0 and "hpnet n0: backend=vhost-user is not "
               "available: this QEMU is built without vhost-user "
               "(--enable-vhost-user)" in net.stderr,
               "hpnet rules vhost-user out, naming the build option",
               net.stderr)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
