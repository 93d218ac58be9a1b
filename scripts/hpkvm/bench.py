#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""make bench: the seed's micro-benchmarks and an exit census, -accel kvm
and -accel hpkvm side by side (and -accel tcg as a reference), alternating
in one run, on this machine's KVM, in the nested test host and in the
arm64 nested test host.  The nested hosts run our reference KVM (kvm/:
its modules on Debian's x86 kernel, our whole arm64 kernel), and a
second boot of each on Debian's own KVM runs -accel kvm once more: the
stock reference column ("kvm-stock").  A third boot of the x86 one has
kvm-amd's AVIC on (QEMU's TCG emulates AVIC and x2AVIC) and runs both
accelerators again: the "kvm-avic" and "hpkvm-avic" columns, what the
interrupt virtualization upstream KVM already uses takes off; the stock
boot with AVIC on gives "kvm-stock-avic", Debian's unmodified kvm-amd on
the same emulated AVIC.  A fourth
boots our whole kernel, where hpkvm's guest owns its cores' APICs, the
guests of both on their one-shot LAPIC timer: the "kvm-own" and
"hpkvm-own" columns.  The Bochs nested host (Intel VMX, where QEMU's TCG
has none) runs kvm and hpkvm on our KVM's kvm-intel, and kvm-stock on
Debian's.  The "nested-linux" host is the x86 nested host with the same
boots and columns, running a Linux guest (Debian's kernel, SMP, with
Debian's rt-tests: tests/hpkvm/guest-linux) instead of our test guest.

For each workload of the test guest's bench mode (tests/hpkvm/guest/
bench.c; on arm64 tests/hpkvm/guest-arm/bench.c) it reports latency
(min / median / p99, TSC or virtual counter ticks converted to ns with
the guest's view of their frequency) and the VM exits per operation by
reason, in all and for vCPU 0 (the sender of IPIs) and the other vCPUs
(their receivers), from KVM's binary statistics (query-stats) read while
the VM is stopped at the workload's boundaries.  The guest stops the VM
itself there (a pvpanic write, with -action panic=pause: the VM stops at
that write's exit), so a frame holds its workload's exits plus exactly
one exit, its end boundary's (an I/O exit on x86, an MMIO one on arm64),
which is subtracted; an empty workload ("null") checks that.  It prints
one table per host, writes the raw results as JSON and, when matplotlib
is there, a PNG chart of the hpkvm/kvm ratios.  Benchmarks never fail on
a slow machine: only a broken run (no result, a boundary that costs
other than one exit) is an error.

  bench.py BUILD [--tiny] [--out DIR] [--reps N] [--samples N]
           [--hosts local,nested,nested-arm64,nested-linux,bochs-vmx]
           [--no-nested]
           [--no-local] [--no-arm] [--no-bochs] [--no-tcg] [--no-reference]
           [--no-avic] [--no-own]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import hpkvm_qmp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests/hpkvm/nested-host"))

STATS = {"execute": "query-stats",
         "arguments": {"target": "vcpu", "providers": [{"provider": "kvm"}]}}
# What differs between the architectures' guests and KVMs.
#
# host_caused: exits the host caused (its interrupts, QEMU's kicks), not
# the guest; host_vm_exits: of those, the VM exits that KVM's "exits"
# counts (x86: signal_exits and request_irq_exits are returns to QEMU,
# not VM exits: subtracting them made the guest's exits negative).
# boundary: what a frame boundary itself costs, the pvpanic write's
# exit, as hardware files it (the null frame says how this KVM does).
# reasons: the exits a reader cares about, by KVM's statistic names.
# The nested hosts' igb VF, for the guests' vf-msi: its PF up (an igb VF
# interrupts only while its PF is in MSI-X mode), and its address for
# "guest".
VF_SETUP = r"""
for numvfs in /sys/bus/pci/devices/*/sriov_numvfs; do
    ip link set "$(ls ${numvfs%/*}/net)" up
done
HPKVM_VF=$(basename "$(readlink /sys/bus/pci/devices/*/virtfn0)")
"""
ARCHES = {
    "x86_64": {
        "host_caused": ("irq_exits", "signal_exits", "request_irq_exits"),
        "host_vm_exits": ("irq_exits",),
        "boundary": {"exits": 1, "io_exits": 1, "guest_exits": 1},
        # The guest stops itself at each boundary (tests/hpkvm/guest/
        # bench.c).
        "boundary_args": ["-device", "pvpanic", "-action", "panic=pause"],
        "reasons": ("halt_exits", "irq_exits", "io_exits", "mmio_exits",
                    "signal_exits", "irq_window_exits", "nmi_window_exits",
                    "request_irq_exits", "insn_emulation", "hypercalls"),
        "qemu": "qemu-system-x86_64",
        # With an igb VF for vf-msi (VF_SETUP finds it).
        "guest": '-machine pc -smp %(smp)d -m 64 -kernel "$HPKVM_GUEST" '
                 '-append "bench=%(samples)d bench-idle=%(idle)d" '
                 '-device isa-debug-exit,iobase=0xf4,iosize=0x04 '
                 '-device vfio-pci,host=$HPKVM_VF',
        # isa-debug-exit's status for the guest's PASS.
        "passed": 1,
        "smp": 3,
        "accel": {"kvm": "-accel kvm -cpu host",
                  "hpkvm": "-accel hpkvm,host-cpus=1-3,housekeeping-cpus=0 "
                           "-cpu host"},
        # An igb VF on vfio-pci behind the emulated VT-d, for vf-msi;
        # our KVM's modules on Debian's kernel, booted with nohz_full on
        # the cores hpkvm leases (so that it grants dynamic-nohz), as on
        # arm64.
        "nested": {"kvm": "hpkvm", "vfs": 1, "vfio_vfs": 1,
                   "append": ("nohz_full=1-3",)},
        # The stock reference: the same host on Debian's KVM.
        "reference": {"kvm": "stock"},
        # AVIC: the same host with kvm-amd's avic=1 (kvm-amd loads our
        # module with it), and each accelerator's in-kernel PIT set not
        # to reinject lost ticks, which would inhibit AVIC for the VM
        # (Linux 6.1: APICV_INHIBIT_REASON_PIT_REINJ; QEMU's default is
        # to reinject).
        # The AMD IOMMU in guest virtual APIC mode instead of VT-d, as an
        # AMD host has it: KVM has it post the VF's MSIs to the vCPU, and
        # our KVM grants hpkvm vfio-irte on it (kvm/patches/0011).
        # Where kvm-amd cannot enable it (no AVIC in the CPU), the boot
        # stops rather than fill the columns with exits without AVIC.
        # The guest owning its cores' APICs (kvm/patches/0012-0014): the
        # same host on our whole kernel, its APICs in x2APIC mode (VT-d
        # in extended interrupt mode), no AVIC, the guests of both
        # accelerators on their one-shot LAPIC timer, which is what
        # hpkvm's timer-passthrough passes through; the kernel claims
        # no core a device interrupt is routed to, hence the IRQs moved.
        "own": {"nested": {"kernel": "hpkvm", "iommu": "x2apic"},
                "accel": {"kvm": "-accel kvm -cpu host,tsc-deadline=off",
                          "hpkvm": "-accel hpkvm,host-cpus=1-3,"
                                   "housekeeping-cpus=0,irq-passthrough=on,"
                                   "timer-passthrough=on "
                                   "-cpu host,tsc-deadline=off"},
                "setup": r"""
for f in /proc/irq/*/smp_affinity_list; do echo 0 > $f 2>/dev/null; done
"""},
        "avic": {"nested": {"kvm_amd": "avic=1", "iommu": "amd"},
                 "args": " -global kvm-pit.lost_tick_policy=discard",
                 "setup": r"""
avic=$(cat /sys/module/kvm_amd/parameters/avic)
[ "$avic" = Y ] || { echo "kvm-amd did not enable AVIC (avic=$avic)"; exit 1; }
"""},
        "setup": VF_SETUP,
        "host": "nested",
        "exits_meaning": "VM exits the guest caused (all VM exits but "
                         "host interrupts)",
    },
    # Linux 6.1's arm64 KVM counts every exit in "exits" and names only
    # some traps: HVC, WFI, WFE, MMIO; its kvm_exit tracepoint says of
    # each exit whether it was an IRQ (a host interrupt, the guest's own
    # virtual timer expiring, a kick) or a trap of which class (SYS64:
    # a system register, ICC_SGI1R_EL1 for an SGI), which bench.py
    # counts beside the statistics.  QEMU's kick of a vCPU (one
    # signal_exit) costs an exit where it interrupted the guest (an IRQ
    # exit) or woke the vCPU from WFI (which the guest executes again),
    # and none where it found the vCPU in the host between two entries
    # (a kick racing KVM_RUN, as "cont" sends one to every vCPU it
    # wakes): the tracepoint says which (TRACE_SHELL's kick_exits).
    "aarch64": {
        "host_caused": ("signal_exits", "kick_exits"),
        "host_vm_exits": ("kick_exits",),
        "boundary": {"exits": 1, "dabt_traps": 1, "guest_exits": 1},
        # An IRQ exit in the null frame is the host's: the guest has
        # armed no timer and sent no SGI yet.  kvm's vCPUs float onto
        # cores that tick, and on a loaded machine a tick can fall
        # between the two boundaries.  Elsewhere the tracepoint cannot
        # tell the host's IRQs from the guest's timer: they count.
        "null_frame_host": ("irq_exits",),
        # tests/hpkvm/guest-arm/bench.c
        "boundary_args": ["-device", "pvpanic-pci", "-action",
                          "panic=pause"],
        # The statistics' HVC, WFx and MMIO counts are the tracepoint's
        # classes again (TRACE_CLASSES), so only kicks come from them.
        "reasons": ("signal_exits",),
        # Every exit's class from the kvm_exit tracepoint (TRACE_SHELL).
        "trace": True,
        "qemu": "qemu-system-aarch64",
        # With an igb VF for vf-msi (VF_SETUP finds it).
        "guest": '-M virt,highmem-ecam=off -smp %(smp)d -m 128 '
                 '-kernel "$HPKVM_GUEST" '
                 '-fw_cfg name=opt/org.hpkvm/bench,string=%(samples)d '
                 '-device vfio-pci,host=$HPKVM_VF',
        # PSCI SYSTEM_OFF; the serial says whether it passed.
        "passed": 0,
        "smp": 2,
        "accel": {"kvm": "-accel kvm -cpu host",
                  "hpkvm": "-accel hpkvm,host-cpus=2-3,"
                           "housekeeping-cpus=0-1 -cpu host"},
        # Our arm64 kernel (kvm/build-kernel.sh --arch arm64), booted
        # with nohz_full on the cores hpkvm leases (so that it grants
        # dynamic-nohz; what hpkvm-arm.rst tells an operator of a stock
        # kernel too); an SMMUv3 and an igb VF on vfio-pci for vf-msi; a
        # GICv4 with kvm-arm.vgic_v4_enable=1 (--arm-gic 3: a GICv3).
        "nested": {"arch": "aarch64", "kvm": "hpkvm", "kernel": "hpkvm",
                   "iommu": True, "vfs": 1, "vfio_vfs": 1, "gic": 4,
                   "append": ("nohz_full=2-3",)},
        # The stock reference: Debian's arm64 kernel and its KVM.
        "reference": {"kvm": "stock", "kernel": "debian"},
        "setup": VF_SETUP,
        "host": "nested-arm64",
        "exits_meaning": "VM exits less QEMU's kicks (host interrupts "
                         "included, as irq: no architected way to tell "
                         "the guest's timer's from the host's)",
    },
}
X86 = ARCHES["x86_64"]
# The Bochs nested host (tests/hpkvm/nested-host/bochs_host.py): the same
# guest on kvm-intel, Bochs's Skylake-X, our KVM's modules (kvm-stock:
# Debian's).  3 CPUs, not 4, and a guest of 2 vCPUs: Bochs runs its CPUs
# in turn on one thread, and a fourth makes the boot alone take over 10
# minutes.  Not booted with nohz_full=: with it, Bochs's CPUs 1-2 stopped
# answering (RCU stalls from 40 s, then a soft lockup in stop_machine
# when Linux switched to the TSC), so dynamic-nohz is refused there.  Bochs has no IOMMU, so no VF: the guest has no vf-msi
# workload there; and no APICv (no posted interrupts in Bochs 2.7), so
# no AVIC-like columns.
BOCHS_VMX = dict(
    X86,
    guest=X86["guest"].replace(" -device vfio-pci,host=$HPKVM_VF", ""),
    smp=2, cpus=3,
    accel={"kvm": "-accel kvm -cpu host",
           "hpkvm": "-accel hpkvm,host-cpus=1-2,housekeeping-cpus=0 "
                    "-cpu host"},
    nested={"kvm": "hpkvm", "model": "vmx"},
    setup="", runner="bochs", host="bochs-vmx", timeout=7200)
for _boot in ("avic", "own"):
    del BOCHS_VMX[_boot]
# The Linux guest (tests/hpkvm/guest-linux): Debian's kernel with 3
# vCPUs on the x86 nested host, the same boots and columns as the test
# guest's, its workloads Debian's rt-tests and busybox (null, idle,
# timer, sched, cpu-md5), each framed the same way from vCPU 0, and ping
# round trips through a NIC per hpnet backend (LINUX_NICS: net-rr-NAME).
# Its frames are not exact: the guest's own timer ticks, and marking a
# frame (two short processes) costs IPIs and exits of its own, which the
# null frame shows, and which no frame subtracts beyond the one boundary
# exit.  No VF (the guest has no driver for it).
LINUX_NICS = ("virtio-net", "vhost-net")
# Each NIC's tap (hptapN, from 1) up, its host side 10.0.N.2/24.
LINUX_NIC_SETUP = r"""
printf '#!/bin/sh\nip link set "$1" up\nip addr add 10.0.${1#hptap}.2/24 dev "$1"\n' \
    > /tmp/hpkvm-ifup
chmod +x /tmp/hpkvm-ifup
"""
LINUX_X86 = dict(
    X86,
    guest='-machine pc -smp %(smp)d -m 512 -no-reboot '
          '-kernel "$HPKVM_LINUX_KERNEL" -initrd "$HPKVM_LINUX_INITRD" '
          '-append "console=ttyS0 quiet panic=-1 hpkvm.bench=%(samples)d '
          'hpkvm.cpus=%(smp)d hpkvm.nics=' + ",".join(LINUX_NICS) + '" ' +
          " ".join(f"-netdev hpnet,id=n{i},backend={b},ifname=hptap{i},"
                   f"script=/tmp/hpkvm-ifup -device virtio-net-pci,"
                   f"netdev=n{i},mac=52:54:00:00:0{i}:01,romfile="
                   for i, b in enumerate(LINUX_NICS, 1)),
    passed=0, pass_line="hpkvm-linux-guest: PASS", exact_null=False,
    frames=4 + len(LINUX_NICS),
    nested={"kvm": "hpkvm", "append": ("nohz_full=1-3",),
            "linux_guest": True},
    setup=LINUX_NIC_SETUP, host="nested-linux")
CPU = {"kvm": "host,-arch-capabilities", "hpkvm": "host,-arch-capabilities",
       "tcg": "max"}
HOSTS = {
    "local": "this machine's KVM (nested paravirtual: timings real but "
             "noisy, exits emulated differently from hardware)",
    "nested": "the nested test host's KVM, ours (kvm/'s modules; "
              "kvm-stock: Debian's), with real SVM exit semantics: exit "
              "counts meaningful, timings not: it runs under TCG; an igb "
              "VF passed through",
    "nested-arm64": "the arm64 nested test host's KVM, ours (kvm/'s arm64 "
                    "kernel; kvm-stock: Debian's), VHE, a vGICv3; the "
                    "host's GIC a GICv4 with vLPIs unless --arm-gic 3; an "
                    "igb VF passed through; under TCG: exit counts real, "
                    "timings not",
    "nested-linux": "the nested test host's KVM as in nested, a Linux "
                    "guest (Debian's kernel, 3 vCPUs) running Debian's "
                    "rt-tests instead of our test guest: exit counts "
                    "meaningful but frames not exact, timings not",
    "bochs-vmx": "the Bochs nested test host's KVM, ours (kvm/'s modules "
                 "with kvm-intel; kvm-stock: Debian's), on Bochs's "
                 "Skylake-X: VMX exit semantics as Bochs emulates them, "
                 "exit counts meaningful, timings not; no APICv, no "
                 "IOMMU (so no VF)",
}


# Hosts whose KVM counts exits only approximately (this machine's nested
# paravirtual KVM): a frame there that is not exact marks its column,
# and the run goes on; on the nested hosts (real exit counts) it is an
# error.
APPROXIMATE_EXIT_HOSTS = ("local",)


HOSTS_SHORT = {
    "local": "this machine (nested paravirtual KVM): timings real, exit "
             "counts emulated",
    "nested": "nested test host (KVM under TCG): exit counts real, "
              "timings not",
    "nested-arm64": "arm64 nested test host (arm64 KVM under TCG): exit "
                    "counts real, timings not",
    "nested-linux": "nested test host, Linux guest: exit counts real, "
                    "frames approximate, timings not",
    "bochs-vmx": "Bochs nested host (kvm-intel under Bochs): exit counts "
                 "real, timings not",
}
# The accelerators' columns, in order: kvm-stock is -accel kvm on the
# nested hosts' stock KVM (the "reference" boot), kvm-avic and
# hpkvm-avic the x86 nested host's boot with AVIC on ("avic"),
# kvm-stock-avic the stock boot with AVIC on (Debian's kvm-amd,
# unmodified, avic=1: what upstream KVM alone gets from the same emulated
# AVIC), kvm-own and hpkvm-own its boot where hpkvm's guest owns its
# cores' APICs ("own").
COLUMNS = ("kvm", "hpkvm", "kvm-avic", "hpkvm-avic", "kvm-own", "hpkvm-own",
           "kvm-stock", "kvm-stock-avic", "tcg")
# Which architecture each host's guests are.
HOST_ARCH = {"local": X86, "nested": X86, "nested-arm64": ARCHES["aarch64"],
             "nested-linux": LINUX_X86, "bochs-vmx": BOCHS_VMX}
# Workloads whose operation is an IPI from vCPU 0: their exits also
# split into the sender's and the receivers'.
IPI_WORKLOADS = ("ipi-unicast", "ipi-multicast", "hlt-wake", "sgi-spin",
                 "sgi-wfi")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def run_local(build, accel, samples, idle, smp, tmp):
    """One guest run under @accel; frames: [(k, 'begin'|'end', stats)]."""
    qemu = os.path.join(build, "qemu-system-x86_64")
    guest = os.path.join(build, "tests/hpkvm/guest/hpkvm-guest.elf")
    sock = os.path.join(tmp, f"{accel}.qmp")
    serial = os.path.join(tmp, f"{accel}.serial")
    for p in (sock, serial):
        if os.path.exists(p):
            os.unlink(p)
    cmd = [qemu, "-accel", accel, "-cpu", CPU[accel], "-smp", str(smp),
           "-m", "64", "-machine", "pc", "-S", "-nodefaults",
           "-display", "none", "-monitor", "none",
           "-kernel", guest, "-append", f"bench={samples} bench-idle={idle}",
           "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
           "-serial", f"file:{serial}",
           "-qmp", f"unix:{sock},server=on,wait=off", *X86["boundary_args"]]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    frames = []
    qmp = hpkvm_qmp.qmp_module(build)
    mon = None
    try:
        mon = hpkvm_qmp.connect(build, sock, deadline, proc,
                                bound_by_deadline=True)
        if mon is None:
            raise RuntimeError(f"{accel}: QEMU exited before QMP answered: "
                               f"{proc.stderr.read()[-500:]}")
        info = mon.cmd("query-hpkvm")
        cpus = mon.cmd("query-cpus-fast")
        mon.cmd("cont")
        k, edge = 0, "begin"
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                now = mon.cmd("query-status")["status"]
            except (OSError, qmp.QMPError):
                break                   # the guest ended QEMU
            if now != "guest-panicked":     # not at a boundary yet
                time.sleep(0.002)
                continue
            stats = (mon.cmd(STATS["execute"], **STATS["arguments"])
                     if accel != "tcg" else [])
            frames.append((k, edge, stats))
            mon.cmd("cont")
            if edge == "end":
                k += 1
            edge = "end" if edge == "begin" else "begin"
        status = proc.wait(max(1, deadline - time.monotonic()))
    finally:
        if mon:
            mon.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = read(serial)
    if status != 1:
        raise RuntimeError(f"{accel}: guest did not pass (status {status}): "
                           f"{text[-500:]} {proc.stderr.read()[-500:]}")
    return parse(text, frames, info, X86, cpus)


# Our KVM's counts of the entries that gave the guest its core's APIC,
# and of those that could not, by reason (kvm/patches: the owned APIC).
ENTRY_STATS = ("hpkvm_owned_entries", "hpkvm_timer_busy_entries",
               "hpkvm_unowned_entries")


def vcpu_values(stats, cpus):
    """[{stat: value} per vCPU index] of one query-stats answer (whose
    order is not the vCPUs'), by query-cpus-fast's @cpus."""
    index = {c["qom-path"]: c["cpu-index"] for c in cpus}
    out = [{} for _ in stats]
    for n, vcpu in enumerate(stats):
        i = index.get(vcpu.get("qom-path"), n) if cpus else n
        out[i] = {s["name"]: s["value"] for s in vcpu["stats"]
                  if isinstance(s["value"], int)}
    return out


def frame_exits(begin, end, arch):
    """One vCPU's exits in a frame: every exit statistic's delta, the
    guest's own (guest_exits: less the host's VM exits) and, where KVM
    names only some of them, the rest (other_exits)."""
    d = {s: end[s] - begin.get(s, 0) for s in end
         if s == "exits" or s in arch["reasons"]}
    set_guest_exits(d, arch)
    return d


def set_guest_exits(d, arch):
    """A vCPU's exits in a frame less those the host caused."""
    d["guest_exits"] = d.get("exits", 0) - sum(
        d.get(s, 0) for s in arch["host_vm_exits"])


def add_exits(dicts):
    out = {}
    for d in dicts:
        for s, v in d.items():
            out[s] = out.get(s, 0) + v
    return out


def parse(text, frames, info, arch=X86, cpus=(), trace=None):
    """Results by workload: latency, and exit deltas per operation, in
    all and per vCPU (vCPU 0 sends the IPIs, the others receive)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("hpkvm-bench")]
    head = [ln for ln in lines if "-khz=" in ln][0]
    fields = dict(f.split("=") for f in head.split()[1:])
    khz = int(fields.get("tsc-khz") or fields["counter-khz"])
    results = [ln.split()[2:] for ln in lines if " result " in ln]
    by_frame = {}
    for k, edge, stats in frames:
        by_frame.setdefault(k, {})[edge] = vcpu_values(stats, cpus)
    out = {"clock_khz": khz, "clock_source": fields["source"],
           "cpus": int(fields["cpus"]),
           "notes": [ln.split(" note ", 1)[1] for ln in lines
                     if " note " in ln],
           "hpkvm": info, "workloads": {}, "boundary_extra": {}}
    for k, res in enumerate(results):
        name = res[0]
        vals = dict(f.split("=") for f in res[1:])
        w = {key: int(vals[key]) for key in ("n", "min", "median", "p99")}
        fr = by_frame.get(k, {})
        if "begin" in fr and "end" in fr and fr["begin"]:
            w["exits_by_vcpu"] = [frame_exits(b, e, arch) for b, e in
                                  zip(fr["begin"], fr["end"])]
            if trace is not None:
                # The tracepoint's classes beside the statistics, which
                # must count the same exits.
                for i, (d, t) in enumerate(zip(w["exits_by_vcpu"],
                                               trace.get(k, []))):
                    d.update(t)
                    set_guest_exits(d, arch)
                    if sum(t.values()) != d.get("exits", 0):
                        out["boundary_extra"][f"{name}:vcpu{i}:traced"] = \
                            sum(t.values()) - d.get("exits", 0)
            w["exits"] = add_exits(w["exits_by_vcpu"])
            # How our KVM entered each vCPU meanwhile, where it counts.
            w["entries_by_vcpu"] = [
                {s: e[s] - b.get(s, 0) for s in ENTRY_STATS if s in e}
                for b, e in zip(fr["begin"], fr["end"])]
        out["workloads"][name] = w
    # The empty frame holds the boundary's one exit, on vCPU 0, which
    # writes it, and, of what the guest causes, nothing else: else the
    # accounting is not exact.  It also says which reason this KVM files
    # that exit under: io_exits on hardware; a nested paravirtual KVM
    # that emulates the port write counts insn_emulation instead.
    null = out["workloads"].get("null", {})
    boundary = dict(arch["boundary"])
    noise = arch.get("null_frame_host", ())

    def null_guest_exits(d):
        """A vCPU's exits in the null frame, less the host's there."""
        return d.get("guest_exits", 0) - sum(d.get(r, 0) for r in noise)
    if null.get("exits") and arch.get("exact_null", True):
        guest = null_guest_exits(null["exits"])
        if guest != 1:
            out["boundary_extra"]["guest_exits"] = guest - 1
        for i, d in enumerate(null["exits_by_vcpu"][1:], 1):
            extra = null_guest_exits(d)
            if extra:
                out["boundary_extra"][f"vcpu{i}:guest_exits"] = extra
        # vCPU 0's: stopping the VM costs the others only kicks, which
        # their guest_exits leave out, but which a reason of theirs may
        # count (a vCPU woken from WFI goes back to it).
        boundary = {r: v for r, v in null["exits_by_vcpu"][0].items()
                    if r not in ("exits", "guest_exits") and
                    r not in arch["host_caused"] and r not in noise and v}
        boundary.update(exits=1, guest_exits=1)
    out["boundary"] = boundary
    for name, w in out["workloads"].items():
        if "exits" in w and name != "null":
            ops = max(w["n"], 1)
            w["exits_per_op"] = {s: (v - boundary.get(s, 0)) / ops
                                 for s, v in w["exits"].items()}
            w["exits_per_op_by_vcpu"] = [
                {s: (v - (boundary.get(s, 0) if i == 0 else 0)) / ops
                 for s, v in d.items()}
                for i, d in enumerate(w["exits_by_vcpu"])]
            # A count below what one boundary costs: not exact either.
            out["boundary_extra"].update(
                {f"{name}:{s}": v for s, v in w["exits_per_op"].items()
                 if v < 0})
    return out


NESTED_PAYLOAD = r"""
run_bench() {
    label=$1; shift
    rm -f /tmp/qmp.sock /tmp/serial.log
    %(qemu)s %(guest)s -S -nodefaults \
        -display none -monitor none -serial file:/tmp/serial.log \
        -qmp unix:/tmp/qmp.sock,server=on,wait=off %(boundary)s "$@" &
    qemu_pid=$!
    wait_qmp_socket || return 1
    echo "BENCH $label hpkvm $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
    echo "BENCH $label cpus $(qmp-exec /tmp/qmp.sock '{"execute": "query-cpus-fast"}')"
    %(trace_start)s
    qmp-exec /tmp/qmp.sock '{"execute": "cont"}' > /dev/null
    # The guest stops the VM at each boundary (pvpanic, panic=pause).
    for k in $(seq 0 %(frames)d); do
        for edge in begin end; do
            i=0
            until qmp-exec /tmp/qmp.sock '{"execute": "query-status"}' |
                    grep -q '"guest-panicked"'; do
                kill -0 $qemu_pid 2>/dev/null || break 3
                sleep 0.02; i=$((i + 1))
                if [ $i -gt 15000 ]; then
                    echo "BENCH $label no-boundary $k $edge"
                    kill -9 $qemu_pid
                    break 3
                fi
            done
            echo "BENCH $label stats $k $edge $(qmp-exec /tmp/qmp.sock '%(stats)s')"
            %(trace_frame)s
            qmp-exec /tmp/qmp.sock '{"execute": "cont"}' > /dev/null
        done
    done
    wait_qemu
    echo "BENCH $label status $?"
    sed "s/^/BENCH $label serial /" /tmp/serial.log | tr -d '\r'
}
"""


# arm64 KVM's kvm_exit tracepoint, where its statistics have no counter:
# each exit as IRQ (a host interrupt) or TRAP with the exception class.
# At each boundary, while the VM is stopped: "COUNT TID:TYPE:CLASS ..."
# of the exits since the last one, and the buffer emptied.
#
# An exit that a kick ended counts as TID:KICK:CLASS instead: one whose
# vCPU thread next returns from KVM_RUN with EINTR (kvm_userspace_exit's
# "restart", a signal_exit) and which the kick caused, an IRQ (the kick
# interrupted the guest) or a WFx (it woke the vCPU from WFI, which the
# guest then executes again).  A kick that ends KVM_RUN after any other
# exit, or before the first entry, cost the guest no exit of its own.
TRACE_SHELL = r"""
TRACEFS=/sys/kernel/tracing
trace_exits_start() {
    [ -e $TRACEFS/trace ] || mount -t tracefs none $TRACEFS
    echo 1 > $TRACEFS/events/kvm/kvm_exit/enable
    echo 1 > $TRACEFS/events/kvm/kvm_userspace_exit/enable
    echo > $TRACEFS/trace
}
trace_exits() {
    # Lines "COMM-TID [CPU] ... kvm_exit: TYPE: HSR_EC: 0xN (CLASS), ..."
    # and "COMM-TID [CPU] ... kvm_userspace_exit: reason WHY (N)".
    awk '
    !match($0, /-[0-9]+ +\[[0-9]+\]/) { next }
    { split(substr($0, RSTART + 1, RLENGTH - 1), f, " "); tid = f[1] }
    / kvm_exit: / {
        split(substr($0, index($0, " kvm_exit: ") + 11), e, " ")
        class = e[4]
        gsub(/[(),]/, "", class)
        key = tid ":" substr(e[1], 1, length(e[1]) - 1) ":" class
        n[key]++
        last[tid] = key
        next
    }
    / kvm_userspace_exit: reason restart / &&
            last[tid] ~ /:IRQ:|:TRAP:WFx$/ {
        n[last[tid]]--
        split(last[tid], k, ":")
        n[tid ":KICK:" k[3]]++
    }
    / kvm_userspace_exit: / { last[tid] = "" }
    END { for (key in n) if (n[key]) printf "%d %s ", n[key], key }
    ' $TRACEFS/trace
    echo > $TRACEFS/trace
}
"""


def extra_boot(arch, boot):
    """@arch for its further boot @boot ("avic", "own"): its nested
    host's options over the default boot's, its accelerators' command
    lines (its own, or the default's with its "args" added), and its
    set-up after the default's."""
    extra = arch[boot]
    accel = extra.get("accel") or {a: cmd + extra["args"]
                                   for a, cmd in arch["accel"].items()}
    return dict(arch, nested=dict(arch["nested"], **extra["nested"]),
                accel=accel, setup=arch["setup"] + extra["setup"])


def run_nested(build, accels, samples, idle, reps, arch=X86, run=None):
    """Each accelerator in turn, reps times, in one boot of the nested
    host of @arch (4 CPUs unless it says: hpkvm leases the last ones,
    housekeeping on the first); in Bochs if @arch's runner says so.
    @run: what boots the host, nested_host.run's signature (a test's
    own, which boots a failed host again), instead of the runner's."""
    from nested_host import L2_SHELL
    if run is None:
        if arch.get("runner") == "bochs":
            from bochs_host import run
        else:
            from nested_host import run
    guest = arch["guest"] % {"smp": arch["smp"], "samples": samples,
                             "idle": idle}
    trace = arch.get("trace", False)
    script = L2_SHELL + (TRACE_SHELL if trace else "") + \
        arch.get("setup", "") + NESTED_PAYLOAD % {
        "qemu": arch["qemu"], "guest": guest,
        "boundary": " ".join(arch["boundary_args"]),
        "frames": arch.get("frames", 8), "stats": json.dumps(STATS),
        "trace_start": "trace_exits_start" if trace else ":",
        "trace_frame": ('echo "BENCH $label trace $k $edge $(trace_exits)"'
                        if trace else ":")}
    order = []
    for rep in range(reps):
        for accel in accels:
            label = f"{accel}-{rep}"
            order.append((accel, label))
            script += f"run_bench {label} {arch['accel'][accel]}\n"
    res = run(script, cpus=arch.get("cpus", 4),
              timeout=arch.get("timeout", 3000),
              **arch["nested"])
    out = {}
    for accel, label in order:
        pre = f"BENCH {label} "
        lines = [ln[len(pre):] for ln in res.output.splitlines()
                 if ln.startswith(pre)]
        serial = "\n".join(ln[len("serial "):] for ln in lines
                           if ln.startswith("serial ")) + "\n"
        frames, info, cpus, traces = [], {}, [], {}
        status = None
        for ln in lines:
            parts = ln.split(" ", 3)
            if parts[0] == "stats":
                stats = json.loads(parts[3]).get("return", [])
                frames.append((int(parts[1]), parts[2], stats))
            elif parts[0] == "trace":
                traces[(int(parts[1]), parts[2])] = \
                    parts[3] if len(parts) > 3 else ""
            elif parts[0] == "hpkvm":
                info = json.loads(ln[len("hpkvm "):]).get("return", {})
            elif parts[0] == "cpus":
                cpus = json.loads(ln[len("cpus "):]).get("return", [])
            elif parts[0] == "status":
                status = int(parts[1])
        if status != arch["passed"] or "FAIL" in serial or \
                arch.get("pass_line", "") not in serial:
            # Nothing of this run at all: the payload stopped before it,
            # and its own output says why.
            why = serial if lines else res.output
            raise RuntimeError(f"nested {arch['qemu']} {label}: guest did "
                               f"not pass ({status}): {why[-400:]}")
        out.setdefault(accel, []).append(
            parse(serial, frames, info, arch, cpus,
                  trace_by_vcpu(traces, cpus) if trace else None))
    return out


# Names for the exception classes of arm64's kvm_exit tracepoint.
TRACE_CLASSES = {"HVC64": "hvc", "SYS64": "sysreg", "WFx": "wfx",
                 "DABT_LOW": "dabt", "IABT_LOW": "iabt", "SMC64": "smc"}


def trace_by_vcpu(traces, cpus):
    """{frame: [{stat: count} per vCPU index]} from trace_exits()'s
    lines at frames' ends: irq_exits, TRAP exits as CLASS_traps
    (dabt_traps: MMIO, or a stage-2 fault on RAM), and the exits kicks
    caused as kick_exits."""
    index = {c["thread-id"]: c["cpu-index"] for c in cpus}
    out = {}
    for (k, edge), text in traces.items():
        if edge != "end":
            continue
        per = [{} for _ in cpus]
        words = text.split()
        for count, key in zip(words[::2], words[1::2]):
            tid, kind, ec = key.split(":")
            if int(tid) not in index:
                continue                # not a vCPU of this QEMU
            stat = ("irq_exits" if kind == "IRQ" else
                    "kick_exits" if kind == "KICK" else
                    f"{TRACE_CLASSES.get(ec, ec.lower())}_traps")
            d = per[index[int(tid)]]
            d[stat] = d.get(stat, 0) + int(count)
        out[k] = per
    return out


def ns(cycles, khz):
    return cycles * 1e6 / khz


def summarize(runs):
    """Per accelerator: per workload, medians over runs and the spread."""
    table = {}
    for accel, rs in runs.items():
        for name in rs[0]["workloads"]:
            meds = [ns(r["workloads"][name]["median"], r["clock_khz"])
                    for r in rs if name in r["workloads"]]
            p99s = [ns(r["workloads"][name]["p99"], r["clock_khz"])
                    for r in rs if name in r["workloads"]]
            exits = [r["workloads"][name].get("exits_per_op", {})
                     for r in rs if name in r["workloads"]]
            per_op = {}
            for e in exits:
                for s, v in e.items():
                    per_op.setdefault(s, []).append(v)
            # The guest's exits per operation of vCPU 0 (the sender of
            # IPI workloads) and of the others (the receivers).
            split = [(v[0].get("guest_exits", 0),
                      sum(d.get("guest_exits", 0) for d in v[1:]))
                     for v in (r["workloads"][name].get(
                         "exits_per_op_by_vcpu") for r in rs
                         if name in r["workloads"]) if v]
            table.setdefault(name, {})[accel] = {
                "median_ns": statistics.median(meds),
                "p99_ns": statistics.median(p99s),
                "spread": (max(meds) / min(meds)) if min(meds) > 0 else None,
                "runs": len(meds),
                "n": rs[0]["workloads"][name]["n"],
                "exits_per_op": {s: statistics.median(v)
                                 for s, v in per_op.items()},
                "sender_receivers": ([statistics.median(x[0] for x in split),
                                      statistics.median(x[1] for x in split)]
                                     if split else None),
            }
    return table


def fmt_ns(v):
    if v >= 1e6:
        return f"{v / 1e6:.2f}ms"
    if v >= 1e3:
        return f"{v / 1e3:.1f}us"
    return f"{v:.0f}ns"


def top_reasons(per_op):
    parts = [(v, s) for s, v in per_op.items()
             if s not in ("exits", "guest_exits") and v >= 0.05]
    parts.sort(reverse=True)
    return ",".join(f"{short_reason(s)}={v:.1f}" for v, s in parts[:3])


def short_reason(stat):
    """irq_exits, sysreg_traps: irq, sysreg."""
    for suffix in ("_exits", "_traps"):
        if stat.endswith(suffix):
            return stat[:-len(suffix)]
    return stat


def print_table(host, table, accels, reps, approximate=()):
    """The host's table; an accelerator in approximate has an exits/op
    column that is not exact (marked "~")."""
    print()
    print(f"== {host}: {HOSTS[host]}")
    print(f"   {reps} run(s) per accelerator, alternating; latency = median "
          f"over runs of each run's median (p99 likewise); spread = "
          f"slowest/fastest run's median; exits/op = "
          f"{HOST_ARCH[host]['exits_meaning']}, "
          f"less the frame's one boundary exit, per operation")
    head = f"{'workload':<19}{'n':>5}"
    for a in accels:
        head += f" | {a + ' median (p99)':<24}{'spread':>7}{'exits/op':>10}"
    if "kvm" in accels and "hpkvm" in accels:
        head += " | hpkvm/kvm lat  exits"
    print(head)
    print("-" * len(head))
    for name, row in table.items():
        if name == "null":
            continue
        any_a = next(iter(row.values()))
        line = f"{name:<19}{any_a['n']:>5}"
        for a in accels:
            r = row.get(a)
            if not r:
                line += " | " + " " * 41
                continue
            lat = f"{fmt_ns(r['median_ns'])} ({fmt_ns(r['p99_ns'])})"
            spread = f"{r['spread']:.2f}x" if r["spread"] else "-"
            exits = r["exits_per_op"].get("guest_exits")
            ex = f"{exits:.2f}" if exits is not None else "n/a"
            if a in approximate and exits is not None:
                ex = "~" + ex
            line += f" | {lat:<24}{spread:>7}{ex:>10}"
        if "kvm" in row and "hpkvm" in row:
            k, h = row["kvm"], row["hpkvm"]
            lat = h["median_ns"] / k["median_ns"] if k["median_ns"] else 0
            ke = k["exits_per_op"].get("guest_exits")
            he = h["exits_per_op"].get("guest_exits")
            ratio = (f"{he / ke:.2f}" if ke and ke > 0.05 and he is not None
                     else "-")
            line += f" | {lat:>12.2f}x  {ratio:>5}"
        print(line)
    for name, row in table.items():
        reasons = "; ".join(f"{a}: {top_reasons(r['exits_per_op'])}"
                            for a, r in row.items()
                            if top_reasons(r["exits_per_op"]))
        if reasons and name != "null":
            print(f"   exits/op by reason, {name}: {reasons}")
    for name, row in table.items():
        split = "; ".join(f"{a}: {r['sender_receivers'][0]:.2f} / "
                          f"{r['sender_receivers'][1]:.2f}"
                          for a, r in row.items()
                          if r.get("sender_receivers"))
        if name in IPI_WORKLOADS and split:
            print(f"   exits/op of the sender (vCPU 0) / the receivers, "
                  f"{name}: {split}")


def granted(runs, accel="hpkvm"):
    rs = runs.get(accel)
    if not rs:
        return f"{accel} not run"
    info = rs[0]["hpkvm"]
    feats = info.get("features", [])
    # A grant on APIC virtualization is upstream KVM's mechanism, named.
    g = [f["feature"] + (f" (delivered by upstream's "
                         f"{f.get('delivered-by', 'APIC virtualization')})"
                         if f.get("apicv") else "")
         for f in feats if f.get("granted")]
    up = [f["feature"] for f in feats
          if not f.get("granted") and f.get("mechanism") == "upstream"]
    ours = [f["feature"] for f in feats
            if f.get("granted") and f.get("mechanism") == "patched-kernel"]
    exits = ",".join(info.get("disabled-exits", [])) or "none"
    return (f"kernel hpkvm contract version {info.get('kernel-version')}; "
            f"granted by the kernel: {', '.join(g) or 'nothing'}; of "
            f"them, our kernel's own: {', '.join(ours) or 'none'}; upstream "
            f"fallbacks: {', '.join(up) or 'none'}; exits disabled: "
            f"{exits}; realtime hint: {info.get('realtime-hint')}; "
            f"host-cpus: {info.get('host-cpus', 'none')}" +
            (f"; APIC virtualization inhibited by: "
             f"{', '.join(info['apicv-inhibits']) or 'nothing'}"
             if "apicv-inhibits" in info else ""))


def chart(summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"hpkvm bench: no matplotlib: {path} not drawn "
              f"(scripts/hpkvm/install-deps.sh --bench installs it)")
        return False
    hosts = [h for h in summary if summary[h]]
    fig, axes = plt.subplots(len(hosts), 1, figsize=(9, 3.2 * len(hosts)),
                             squeeze=False)
    for ax, host in zip(axes[:, 0], hosts):
        names, lat, ex = [], [], []
        for name, row in summary[host].items():
            if name == "null" or "kvm" not in row or "hpkvm" not in row:
                continue
            k, h = row["kvm"], row["hpkvm"]
            names.append(name)
            lat.append(h["median_ns"] / k["median_ns"])
            ke = k["exits_per_op"].get("guest_exits") or 0
            he = h["exits_per_op"].get("guest_exits") or 0
            ex.append(he / ke if ke > 0.05 else 1.0)
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], lat, 0.4, label="latency hpkvm/kvm")
        ax.bar([i + 0.2 for i in x], ex, 0.4, label="exits/op hpkvm/kvm")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_title(HOSTS_SHORT[host], fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--tiny", action="store_true",
                    help="prove it works end to end: few samples, local "
                         "only, one run, no chart")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--hosts", default=",".join(HOSTS),
                    help="where to run, of " + ", ".join(HOSTS))
    ap.add_argument("--no-nested", action="store_true",
                    help="neither nested test host")
    ap.add_argument("--no-tcg", action="store_true")
    ap.add_argument("--no-local", action="store_true")
    ap.add_argument("--no-arm", action="store_true",
                    help="not the arm64 nested test host")
    ap.add_argument("--no-bochs", action="store_true",
                    help="not the Bochs nested host (VMX)")
    ap.add_argument("--no-reference", action="store_true",
                    help="no second boot of the nested hosts on Debian's "
                         "KVM (the kvm-stock column)")
    ap.add_argument("--no-avic", action="store_true",
                    help="no boot of the x86 nested host with AVIC on "
                         "(the kvm-avic and hpkvm-avic columns)")
    ap.add_argument("--no-own", action="store_true",
                    help="no boot of the x86 nested host on our whole "
                         "kernel where hpkvm's guest owns its cores' APICs "
                         "(the kvm-own and hpkvm-own columns)")
    ap.add_argument("--kernel-config", choices=("tiny", "debian"),
                    default="tiny",
                    help="our whole kernel of the own boot (kvm-own, "
                         "hpkvm-own) built over tinyconfig (default), or "
                         "with Debian's own config: the production-config "
                         "kernel (kvm/build-kernel.sh --config debian)")
    ap.add_argument("--arm-gic", type=int, choices=(3, 4), default=4,
                    help="the arm64 nested test host's GIC: 4 (default), "
                         "where KVM forwards the VF's MSI as a vLPI, or 3")
    args = ap.parse_args()
    hosts = set(args.hosts.split(","))
    if hosts - set(HOSTS):
        ap.error(f"--hosts: {', '.join(sorted(hosts - set(HOSTS)))}: not "
                 f"a host; the hosts are {', '.join(HOSTS)}")
    build = os.path.abspath(args.build)
    out = args.out or os.path.join(build, "..", "bench")
    os.makedirs(out, exist_ok=True)
    if args.tiny:
        args.reps, args.samples, args.no_nested, args.no_tcg = 1, 8, True, \
            True
    if args.no_nested:
        hosts -= {"nested", "nested-arm64", "nested-linux", "bochs-vmx"}
    if args.no_local:
        hosts.discard("local")
    if args.no_arm:
        hosts.discard("nested-arm64")
    if args.no_bochs:
        hosts.discard("bochs-vmx")
    idle = 100 if args.tiny else 600
    local_accels = ["kvm", "hpkvm"] + ([] if args.no_tcg else ["tcg"])

    raw = {"config": vars(args), "hosts": {}}
    summary = {}
    if "local" not in hosts:
        pass
    elif os.access("/dev/kvm", os.R_OK | os.W_OK):
        runs = {}
        with tempfile.TemporaryDirectory(prefix="hpkvm-bench-") as tmp:
            for rep in range(args.reps):
                # Rotate the order so no accelerator always goes first.
                order = local_accels[rep % len(local_accels):] + \
                    local_accels[:rep % len(local_accels)]
                for accel in order:
                    print(f"hpkvm bench: local {accel} run {rep + 1}/"
                          f"{args.reps}", flush=True)
                    runs.setdefault(accel, []).append(
                        run_local(build, accel, args.samples, idle, 2, tmp))
        raw["hosts"]["local"] = runs
        summary["local"] = summarize(runs)
    else:
        print("hpkvm bench: no usable /dev/kvm: local runs skipped")
    arm = ARCHES["aarch64"]
    arm = dict(arm, nested=dict(arm["nested"], gic=args.arm_gic))
    for host, arch, label in (("nested", X86, "nested test host"),
                              ("nested-arm64", arm,
                               "arm64 nested test host"),
                              ("nested-linux", LINUX_X86,
                               "nested test host, Linux guest"),
                              ("bochs-vmx", BOCHS_VMX,
                               "Bochs nested host (VMX)")):
        if host not in hosts:
            continue
        print(f"hpkvm bench: {label}, our KVM: kvm and hpkvm alternating",
              flush=True)
        samples = max(args.samples // 4, 20)
        runs = run_nested(build, ["kvm", "hpkvm"], samples, 1500, 1, arch)
        if not args.no_reference:
            print(f"hpkvm bench: {label}, stock KVM: kvm", flush=True)
            stock = dict(arch, nested=dict(arch["nested"],
                                           **arch["reference"]))
            runs["kvm-stock"] = run_nested(build, ["kvm"], samples, 1500, 1,
                                           stock)["kvm"]
            if "avic" in arch and not args.no_avic:
                # The true stock AVIC column: Debian's kvm-amd, unmodified,
                # with avic=1 on the same emulated hardware as kvm-avic.
                print(f"hpkvm bench: {label}, stock KVM with AVIC: kvm",
                      flush=True)
                avic = extra_boot(arch, "avic")
                stock_avic = dict(avic, nested=dict(avic["nested"],
                                                    **arch["reference"]))
                runs["kvm-stock-avic"] = run_nested(
                    build, ["kvm"], samples, 1500, 1, stock_avic)["kvm"]
        for boot, skip, what in (("avic", args.no_avic,
                                  "our KVM with AVIC"),
                                 ("own", args.no_own,
                                  f"our whole kernel ({args.kernel_config} "
                                  f"config), guests on the one-shot "
                                  f"timer")):
            if boot in arch and not skip:
                print(f"hpkvm bench: {label}, {what}: kvm and hpkvm "
                      f"alternating", flush=True)
                extra = extra_boot(arch, boot)
                # Only a boot of our whole kernel reads it.
                extra["nested"]["kernel_config"] = args.kernel_config
                for accel, rs in run_nested(build, ["kvm", "hpkvm"], samples,
                                            1500, 1, extra).items():
                    runs[f"{accel}-{boot}"] = rs
        raw["hosts"][host] = runs
        summary[host] = summarize(runs)

    inexact = [(h, a, r["boundary_extra"])
               for h, runs in raw["hosts"].items()
               for a, rs in runs.items() for r in rs if r["boundary_extra"]]
    for host, table in summary.items():
        accels = [a for a in COLUMNS if a in raw["hosts"][host]]
        approximate = sorted({a for h, a, _ in inexact if h == host})
        print_table(host, table, accels, len(raw["hosts"][host]["kvm"]),
                    approximate)
        if approximate:
            print(f"   ~: exits/op of {', '.join(approximate)} not exact "
                  f"on this host (a frame's boundary cost other than its "
                  f"one exit): read them as approximate")
        if "hpkvm-own" in accels:
            built = {"tiny": "over tinyconfig",
                     "debian": "with Debian's config"}[args.kernel_config]
            print(f"   kvm-own, hpkvm-own ({host}): our whole kernel, built "
                  f"{built}")
        for a in ("hpkvm", "hpkvm-avic", "hpkvm-own"):
            if a in accels:
                print(f"   what {a} had ({host}): "
                      f"{granted(raw['hosts'][host], a)}")
        notes = sorted({f"{a}: {n}" for a, rs in raw["hosts"][host].items()
                        for r in rs for n in r["notes"]})
        for n in notes:
            print(f"   guest note, {n}")
    raw["summary"] = summary
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump(raw, f, indent=1)
    print(f"\nhpkvm bench: raw results in {os.path.abspath(path)}")
    if not args.tiny and summary:
        png = os.path.join(out, "ratios.png")
        if chart(summary, png):
            print(f"hpkvm bench: chart in {os.path.abspath(png)}")
    for h, a, extra in inexact:
        print(f"hpkvm bench: {h} {a}: a boundary cost other than its one "
              f"exit, or a workload less than a boundary: {extra}")
    if any(h not in APPROXIMATE_EXIT_HOSTS for h, _, _ in inexact):
        # Broken accounting where exit counts are real is an error, not
        # a figure.
        print("hpkvm bench: exits/op are not exact on a host whose exit "
              "counts are real (above)")
        return 1
    return 0 if summary else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
