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

import json
import os
import subprocess
import sys

CONFIGURE_ARGS = ["--target-list=x86_64-softmmu", "--disable-kvm",
                  "--without-default-features", "--disable-docs",
                  "--disable-tools", "--disable-guest-agent",
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


def run(cmd, cwd=None, timeout=1200, stdin=None):
    return subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=timeout, check=False)


def qmp_session(qemu, commands):
    """Replies to COMMANDS of one QEMU (-machine none) over QMP on stdio."""
    msgs = [{"execute": "qmp_capabilities"}] + \
        [{"execute": c, **({"arguments": a} if a else {})}
         for c, a in commands] + [{"execute": "quit"}]
    res = run([qemu, "-machine", "none", "-nodefaults", "-display", "none",
               "-qmp", "stdio"], timeout=60,
              stdin="".join(json.dumps(m) + "\n" for m in msgs))
    replies = [json.loads(line) for line in res.stdout.splitlines()
               if line.startswith("{")]
    return [r for r in replies if "return" in r or "error" in r][1:-1]


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

    replies = qmp_session(qemu, [("query-hpkvm", None),
                                 ("human-monitor-command",
                                  {"command-line": "info hpkvm"})])
    tap.result(len(replies) == 2 and
               replies[0].get("return") == {"enabled": False,
                                            "present": False} and
               "not in this binary" in replies[1].get("return", ""),
               "query-hpkvm and info hpkvm say hpkvm is not in this binary",
               repr(replies))

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
