#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's aarch64 test guest under TCG: it boots on QEMU's virt machine
(GICv3; one, four and eight CPUs), starts its secondaries, takes its
timer interrupts and SGIs, and powers off through PSCI, saying PASS.
Its bench mode (a sample count from fw_cfg) stops the VM at each of its
frames' two boundaries through pvpanic-pci and reports every workload;
without pvpanic-pci it says what to add.  The same guest runs on arm64
KVM in the arm64 nested test host; this checks the guest alone.  (Not
GICv4: TCG has it only with virtualization=on, which starts the guest at
EL2.)

Prints TAP.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

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


BENCH_WORKLOADS = ["null", "idle", "hvc", "timer", "sgi-spin", "sgi-wfi"]


def bench(samples, pvpanic=True):
    """The guest's bench mode on 2 CPUs, each boundary's stop resumed:
    (exit status, stops seen, serial output)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(
        __file__)), "..", "..", "..", "scripts", "hpkvm"))
    import hpkvm_qmp
    qmp = hpkvm_qmp.qmp_module(BUILD)
    with tempfile.TemporaryDirectory() as tmp:
        sock, serial = os.path.join(tmp, "qmp"), os.path.join(tmp, "serial")
        cmd = [QEMU, "-M", "virt,gic-version=3,highmem-ecam=off",
               "-cpu", "max", "-accel", "tcg", "-smp", "2", "-m", "128",
               "-nodefaults", "-display", "none", "-kernel", GUEST,
               "-fw_cfg", f"name=opt/org.hpkvm/bench,string={samples}",
               "-serial", f"file:{serial}", "-S",
               "-qmp", f"unix:{sock},server=on,wait=off"]
        if pvpanic:
            cmd += ["-device", "pvpanic-pci", "-action", "panic=pause"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        stops = 0
        mon = None
        try:
            mon = hpkvm_qmp.connect(BUILD, sock, deadline, proc,
                                    bound_by_deadline=True)
            mon.cmd("cont")
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    status = mon.cmd("query-status")["status"]
                except (OSError, qmp.QMPError):
                    break               # the guest powered QEMU off
                if status == "guest-panicked":
                    stops += 1
                    mon.cmd("cont")
                time.sleep(0.002)
            rc = proc.wait(max(1, deadline - time.monotonic()))
        finally:
            if mon:
                mon.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with open(serial) as f:
            return rc, stops, f.read().replace("\r", "")


def check_bench():
    rc, stops, out = bench(16)
    results = re.findall(r"^hpkvm-bench: result (\S+) n=(\d+) ", out, re.M)
    want = [("null", "0"), ("idle", "1"), ("hvc", "16"), ("timer", "8"),
            ("sgi-spin", "16"), ("sgi-wfi", "16")]
    problems = []
    if rc != 0 or "FAIL" in out:
        problems.append(f"exit status {rc}")
    if stops != 2 * len(BENCH_WORKLOADS):
        problems.append(f"{stops} stops, not two per workload")
    if results != want:
        problems.append(f"results {results}, not {want}")
    if not re.search(r"^hpkvm-bench: counter-khz=\d+ source=cntfrq cpus=2 "
                     r"samples=16$", out, re.M):
        problems.append("no header line")
    rc, stops, out2 = bench(16, pvpanic=False)
    if stops or "FAIL bench: no pvpanic-pci" not in out2 or \
            "-device pvpanic-pci -action panic=pause" not in out2:
        problems.append(f"without pvpanic-pci: {stops} stops, {out2!r}")
    return problems, out + out2


def main():
    cases = [(1, 3), (4, 3), (8, 3)]
    print(f"1..{len(cases) + 1}")
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
    n = len(cases) + 1
    name = "bench mode stops at its boundaries and reports each workload"
    try:
        problems, out = check_bench()
    except (subprocess.TimeoutExpired, OSError) as e:
        problems, out = [repr(e)], ""
    if problems:
        failed += 1
        print(f"not ok {n} - {name}")
        for line in problems + out.splitlines()[-15:]:
            print(f"#   {line}")
    else:
        print(f"ok {n} - {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
