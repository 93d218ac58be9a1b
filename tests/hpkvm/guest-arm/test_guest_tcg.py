#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's aarch64 test guest under TCG: it boots on QEMU's virt machine
(GICv3; one, four and eight CPUs), starts its secondaries, takes its
timer interrupts and SGIs, and powers off through PSCI, saying PASS.
The same guest runs on arm64 KVM in the arm64 nested test host; this
checks the guest alone.  (Not GICv4: TCG has it only with
virtualization=on, which starts the guest at EL2.)

Prints TAP.
"""

import os
import re
import subprocess
import sys

BUILD = os.environ.get("HPKVM_BUILD") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)),
                 "../../../build/qemu"))
QEMU = os.path.join(BUILD, "qemu-system-aarch64")
GUEST = os.path.join(BUILD, "tests/hpkvm/guest-arm/hpkvm-guest-arm.elf")


def boot(cpus, gic):
    cmd = [QEMU, "-M", f"virt,gic-version={gic}", "-cpu", "max",
           "-accel", "tcg", "-smp", str(cpus), "-m", "128",
           "-nodefaults", "-display", "none", "-no-reboot",
           "-serial", "stdio", "-kernel", GUEST]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout.replace("\r", "") + r.stderr


def main():
    cases = [(1, 3), (4, 3), (8, 3)]
    print(f"1..{len(cases)}")
    failed = 0
    for n, (cpus, gic) in enumerate(cases, 1):
        name = f"guest passes with {cpus} cpus on gic-version={gic}"
        try:
            rc, out = boot(cpus, gic)
        except subprocess.TimeoutExpired as e:
            rc, out = -1, f"timed out: {e.stdout or ''}"
        m = re.search(r"^hpkvm-arm-guest: PASS cpus=(\d+) timer=(\d+) "
                      r"sgi=(\d+)", out, re.M)
        want_sgi = 20 * (cpus - 1)
        ok = (rc == 0 and m is not None and int(m.group(1)) == cpus and
              int(m.group(2)) == 20 and int(m.group(3)) == want_sgi)
        if not ok:
            failed += 1
            print(f"not ok {n} - {name}")
            print(f"# exit status {rc}; expected PASS cpus={cpus} timer=20 "
                  f"sgi={want_sgi}; output:")
            for line in out.splitlines()[-15:]:
                print(f"#   {line}")
        else:
            print(f"ok {n} - {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
