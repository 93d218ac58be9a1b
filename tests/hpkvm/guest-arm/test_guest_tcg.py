#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's aarch64 test guest under TCG: it boots on QEMU's virt machine
(GICv3; one, four and eight CPUs), starts its secondaries, takes its
timer interrupts and SGIs, and powers off through PSCI, saying PASS.
Its bench mode (a sample count from fw_cfg) stops the VM at each of its
frames' two boundaries through pvpanic-pci and reports every workload;
without pvpanic-pci it says what to add.  Its vnet workload (the
virtio-net driver it shares with the x86 guest) sends its frames
through virtio-net-pci, which QEMU's filter-dump captures; without
virtio-net-pci it says so.  The same guest runs on arm64 KVM in the
arm64 nested test host; this checks the guest alone.  (Not
GICv4: TCG has it only with virtualization=on, which starts the guest at
EL2.)

Prints TAP.
"""

import os
import re
import struct
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


VNET_FRAMES = 8


def pcap_frames(path):
    """The frames of a pcap file (QEMU's filter-dump writes them in the
    host's byte order)."""
    with open(path, "rb") as f:
        data = f.read()
    order = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    frames, off = [], 24
    while off + 16 <= len(data):
        length = struct.unpack_from(order + "I", data, off + 8)[0]
        frames.append(data[off + 16:off + 16 + length])
        off += 16 + length
    return frames


def vnet(frames, nic=True):
    """The guest's vnet workload on 2 CPUs, virtio-net-pci on user
    networking with filter-dump: (exit status, serial output, the frames
    the capture holds)."""
    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "vnet.pcap")
        cmd = [QEMU, "-M", "virt,gic-version=3,highmem-ecam=off",
               "-cpu", "max", "-accel", "tcg", "-smp", "2", "-m", "128",
               "-nodefaults", "-display", "none", "-no-reboot",
               "-serial", "stdio", "-kernel", GUEST,
               "-fw_cfg", f"name=opt/org.hpkvm/vnet,string={frames}"]
        if nic:
            cmd += ["-netdev", "user,id=n0",
                    "-device", "virtio-net-pci,netdev=n0,romfile=",
                    "-object", f"filter-dump,id=d0,netdev=n0,file={pcap}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        captured = pcap_frames(pcap) if nic else []
        return r.returncode, r.stdout.replace("\r", "") + r.stderr, captured


def check_vnet():
    rc, out, frames = vnet(VNET_FRAMES)
    problems = []
    if rc != 0 or not re.search(r"^hpkvm-arm-guest: PASS .* "
                                rf"vnet={VNET_FRAMES}$", out, re.M):
        problems.append(f"exit status {rc}, no PASS ... vnet={VNET_FRAMES}")
    if f"hpkvm-arm-guest: vnet: sent {VNET_FRAMES} frames\n" not in out:
        problems.append("no \"vnet: sent\" line")
    # Broadcasts of EtherType 0x88b5 saying "hpkvm-vnet K", K = 0, 1, ...
    sent = [f for f in frames if f[12:14] == b"\x88\xb5"]
    want = [b"hpkvm-vnet %d" % (k % 10) for k in range(VNET_FRAMES)]
    if len(sent) != len(frames) or [f[14:26] for f in sent] != want or \
            any(f[:6] != b"\xff" * 6 for f in sent):
        problems.append(f"captured {[f[:32].hex() for f in frames]}, not "
                        f"{VNET_FRAMES} broadcasts of 0x88b5 hpkvm-vnet K")
    rc, out2, _ = vnet(VNET_FRAMES, nic=False)
    if "hpkvm-arm-guest: FAIL vnet: no virtio-net PCI device" not in out2:
        problems.append(f"without virtio-net-pci: {out2!r}")
    return problems, out + out2


def main():
    cases = [(1, 3), (4, 3), (8, 3)]
    print(f"1..{len(cases) + 2}")
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
    checks = [("bench mode stops at its boundaries and reports each "
               "workload", check_bench),
              (f"vnet sends {VNET_FRAMES} frames through virtio-net-pci",
               check_vnet)]
    for n, (name, check) in enumerate(checks, len(cases) + 1):
        try:
            problems, out = check()
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
