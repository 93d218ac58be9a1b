#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Tests of hpkvm on arm64 KVM, in the arm64 nested test host.

The arm64 nested host is Debian's arm64 kernel on TCG's virt machine with
EL2 (nested_host.run(arch="aarch64")): its KVM is arm64 KVM's real code
(VHE, vGICv3 with the ITS), Debian's, or in the last case ours
(kvm/build-kernel.sh --arch arm64).  Inside run the aarch64 cross build
of QEMU (build/aarch64) and the aarch64 test guest (tests/hpkvm/guest-arm):

- the guest passes on arm64 KVM (one and three vCPUs: timer interrupts,
  SGIs, WFI wake-ups);
- -accel hpkvm negotiates on the first vCPU's realize (Arm's accel-CPU
  class), finds no hpkvm extension and reports every feature's upstream
  fallback in Arm's words; the guest passes;
- with host-cpus=2-3, each vCPU thread runs on its leased core and
  QEMU's other threads on the housekeeping cores, qemu-hpkvm-helper
  isolates the cores (host IRQs moved off, the GIC's per-CPU ones, IPIs,
  timers and the vGIC's, reported as per-CPU, none left),
  exclusive-cores is the upstream mechanism; the host's IRQ affinities
  are as before once QEMU has exited;
- a SIGKILLed hpkvm VM leaves the host as it was (the helper undoes its
  isolation) and the next VM leases the same cores;
- qemu-hpkvm-check advises as for an arm64 host (the architected
  counter, GICv4 vLPIs), not x86's;
- hpkvm's unit tests (cpuset, isolation and its journal, the helper's
  policy, option folding, MSI decoding, hpnet's selector and probe),
  built for aarch64, pass there;
- a feature the guest's machine cannot have stops QEMU with the fix:
  vfio-irte=on without an ITS;
- -netdev hpnet's vhost-net and QEMU's virtio-net carry the guest's
  frames into a tap, vhost-user to QEMU's vhost-user-bridge, and an igb
  VF on vfio-pci behind the host's SMMUv3 is plugged as the failover
  primary;
- make bench's arm64 exit census (scripts/hpkvm/bench.py) is exact;
- on our arm64 kernel, the contract's test passes, -accel hpkvm has
  exclusive-cores and dynamic-nohz granted by the kernel (the vCPU
  threads cannot be moved, the bound cores' timer stops while the guest
  waits), and plain -accel kvm guests pass.

Prints TAP.  Each test boots the arm64 nested host once (~5 s).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "host"))
import hostlib  # noqa: E402
from nested_host import NestedHostError, run  # noqa: E402

NESTED_TIMEOUT = 300

# What a payload needs: its L2 QEMU with QMP on /tmp/qmp.sock and the
# serial in /tmp/serial.log, each wait bounded.
PAYLOAD_LIB = r"""
GUEST="-M virt -cpu host -m 128 -nodefaults -display none -kernel $HPKVM_GUEST"
start_qemu() {
    rm -f /tmp/qmp.sock /tmp/serial.log
    qemu-system-aarch64 "$@" $GUEST -serial file:/tmp/serial.log \
        -qmp unix:/tmp/qmp.sock,server=on,wait=off -S &
    qemu_pid=$!
    i=0
    while [ ! -S /tmp/qmp.sock ]; do
        [ -e /proc/$qemu_pid ] || { wait $qemu_pid; echo "qemu-exited: $?"; return 1; }
        sleep 0.1; i=$((i + 1))
        [ $i -gt 300 ] && { echo "qemu-no-qmp"; kill -9 $qemu_pid; return 1; }
    done
    return 0
}
# Let the guest run and wait for its result line, at most $1 tenths of
# a second.
run_to_result() {
    qmp-exec /tmp/qmp.sock cont > /dev/null
    i=0
    while ! grep -q 'PASS\|FAIL' /tmp/serial.log && [ $i -lt $1 ]; do
        sleep 0.1; i=$((i + 1))
    done
}
finish_qemu() {
    qmp-exec /tmp/qmp.sock cont > /dev/null
    i=0
    while [ "$(cut -d' ' -f3 /proc/$qemu_pid/stat 2>/dev/null)" != Z ] &&
          [ -e /proc/$qemu_pid ]; do
        sleep 0.2; i=$((i + 1))
        if [ $i -gt 300 ]; then
            echo "qemu-hang: killed after 60 s"
            kill -9 $qemu_pid
            break
        fi
    done
    wait $qemu_pid
    echo "qemu-status: $?"
    sed 's/^/serial: /' /tmp/serial.log | tr -d '\r'
}
# Every IRQ's affinity, on one line: "N=LIST N=LIST ...".
affinities() {
    for irq in /proc/irq/[0-9]*; do
        echo "${irq##*/}=$(cat $irq/smp_affinity_list 2>/dev/null)"
    done | sort | tr '\n' ' '
}
# Once QEMU has gone: wait for the helper to have undone its changes
# (once a request of root's is served, it has seen QEMU's connection
# end; it removes its journal when nothing is left to undo), then print
# "journal-left: " and "after: " affinities.
host_after_qemu() {
    . /etc/nested-host/helper.sh
    qmp-exec -l $HELPER_SOCK '{"execute": "reconcile"}' > /dev/null ||
        echo "helper-sync-failed: $(tail -n 3 $HELPER_LOG)"
    i=0
    while [ -e /run/hpkvm/host.journal ] && [ $i -lt 200 ]; do
        sleep 0.05; i=$((i + 1))
    done
    echo "journal-left: $([ -e /run/hpkvm/host.journal ] && echo yes || echo no)"
    echo "after: $(affinities)"
}
"""

tests = hostlib.TapSuite()


def lines_with(output, prefix):
    return [line[len(prefix):] for line in output.splitlines()
            if line.startswith(prefix)]


def nested(script, **extra):
    """run() in the arm64 nested host (extra: more of run()'s options);
    booted once more if the nested host itself failed (the emulated test
    bed, not what is tested)."""
    kwargs = dict(arch="aarch64", kvm="stock", iommu=False, cpus=4,
                  timeout=NESTED_TIMEOUT) | extra
    try:
        res = run(PAYLOAD_LIB + script, **kwargs)
    except NestedHostError as e:
        print("# the nested host failed; booting it once more. Why:\n# "
              + str(e).replace("\n", "\n# "), flush=True)
        res = run(PAYLOAD_LIB + script, **kwargs)
    assert not lines_with(res.output, "qemu-hang: "), res.output
    return res


def assert_passed(res, cpus):
    """One guest's end: QEMU exited 0 and the guest said PASS with its
    CPUs' timer interrupts and SGIs (20 each way per secondary)."""
    assert lines_with(res.output, "qemu-status: ") == ["0"], res.output
    want = (f"hpkvm-arm-guest: PASS cpus={cpus} timer=20 "
            f"sgi={20 * (cpus - 1)} ")
    assert any(line.startswith(want)
               for line in lines_with(res.output, "serial: ")), res.output


def assert_host_restored(res):
    """The payload's "before: ", "during: " (QEMU up) and "after: " IRQ
    affinities (host_after_qemu): isolation moved some, and the helper
    put every one back and left no journal."""
    before, = lines_with(res.output, "before: ")
    during, = lines_with(res.output, "during: ")
    after, = lines_with(res.output, "after: ")
    assert during != before, "isolation moved no IRQ"
    assert after == before, (before, after)
    assert lines_with(res.output, "journal-left: ") == ["no"], res.output
    assert not lines_with(res.output, "helper-sync-failed: "), res.output


def hpkvm_info(res, label="hpkvm"):
    return json.loads(lines_with(res.output, f"{label}: ")[0])["return"]


def feature(info, name):
    return next(f for f in info["features"] if f["feature"] == name)


@tests.case
def the_aarch64_guest_passes_on_arm64_kvm():
    for cpus in (1, 3):
        res = nested(f"""
start_qemu -accel kvm -smp {cpus} || exit 1
finish_qemu
""")
        assert_passed(res, cpus)


@tests.case
def hpkvm_negotiates_on_arm64_and_reports_arms_fallbacks():
    res = nested(r"""
start_qemu -accel hpkvm -smp 2 || exit 1
echo "hpkvm: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
finish_qemu
""")
    assert_passed(res, 2)
    info = hpkvm_info(res)
    assert info["present"] and info["negotiated"], info
    assert info["kernel-version"] == 0 and not info["disabled-exits"], info
    for f in info["features"]:
        assert not f["granted"], f
    # Arm's own words, not x86's (the LAPIC, HLT, the TSC-deadline MSR).
    # On shared cores: interrupts without exits need cores of their own.
    irq = feature(info, "irq-passthrough")
    assert "needs exclusive-cores" in irq["reason"], irq
    assert "vGIC" in irq["reason"], irq
    # The timer builds on irq-passthrough, and so on cores of its own.
    timer = feature(info, "timer-passthrough")
    assert "needs exclusive-cores" in timer["reason"], timer
    assert "virtual timer" in timer["reason"], timer
    assert "ICC_SGI1R_EL1" in feature(info, "ipi-fastpath")["reason"]
    assert "vLPI" in feature(info, "vfio-irte")["reason"]
    text = json.dumps(info)
    for x86 in ("LAPIC", "HLT", "TSC", "X86"):
        assert x86 not in text, (x86, info)


@tests.case
def hpkvm_leases_and_isolates_arm64_cores_and_restores_the_host():
    res = nested(r"""
echo "before: $(affinities)"
start_qemu -accel hpkvm,host-cpus=2-3,housekeeping-cpus=0-1 -smp 2 || exit 1
echo "hpkvm: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
for t in /proc/$qemu_pid/task/*; do
    echo "thread: ${t##*/} $(grep Cpus_allowed_list $t/status | cut -f2)"
done
echo "during: $(affinities)"
finish_qemu
host_after_qemu
""")
    assert_passed(res, 2)
    info = hpkvm_info(res)
    assert info["host-cpus"] == "2-3", info
    exclusive = feature(info, "exclusive-cores")
    assert exclusive["mechanism"] == "upstream", exclusive
    assert "leased core" in exclusive["reason"], exclusive
    placement = {p["thread-id"]: p["host-cpu"] for p in info["placement"]}
    assert sorted(placement.values()) == [2, 3], info
    threads = dict(line.split() for line in lines_with(res.output,
                                                        "thread: "))
    for tid, cpus in threads.items():
        want = str(placement[int(tid)]) if int(tid) in placement else "0-1"
        assert cpus == want, (tid, cpus, threads, placement)
    iso = info["isolation"]
    assert iso["active"] and iso["method"] == "affinity", iso
    for core in iso["cores"]:
        assert core["irqs-moved"], core
        # The GIC's SGIs and PPIs are each core's own, not failures.
        assert not core["irqs-left"], core
        # (/proc/irq/N names no handler of the IPIs and the host's timer.)
        per_cpu = {i["handlers"] for i in core["irqs-per-cpu"]}
        assert {"vgic", "kvm guest vtimer"} <= per_cpu, core
        assert len(core["irqs-per-cpu"]) >= 10, core
    assert_host_restored(res)


@tests.case
def a_sigkilled_arm64_vm_leaves_the_host_as_it_was():
    """QEMU killed mid-run: the helper alone undoes its isolation (no
    qemu-hpkvm-recover), and the cores lease again at once."""
    res = nested(r"""
echo "before: $(affinities)"
start_qemu -accel hpkvm,host-cpus=2-3,housekeeping-cpus=0-1 -smp 2 || exit 1
echo "during: $(affinities)"
# Killed while its guest runs (the guest's checks take longer than this).
qmp-exec /tmp/qmp.sock cont > /dev/null
kill -9 $qemu_pid
wait $qemu_pid
host_after_qemu
start_qemu -accel hpkvm,host-cpus=2-3,housekeeping-cpus=0-1 -smp 2 || exit 1
finish_qemu
""")
    assert_host_restored(res)
    # The next VM leases the same cores and runs.
    assert_passed(res, 2)


@tests.case
def qemu_hpkvm_check_gives_arm64s_advice_on_an_arm64_host():
    res = nested(r"""
echo "check: $(qemu-hpkvm-check --json | tr -d '\n')"
""")
    by = {c["id"]: c for c in json.loads(lines_with(res.output,
                                                    "check: ")[0])["checks"]}
    assert by["kvm"]["verdict"] == "ok", by["kvm"]
    assert by["clocksource"]["verdict"] == "ok", by["clocksource"]
    assert "architected counter" in by["clocksource"]["message"], by
    # Booted without kvm-arm.vgic_v4_enable=1.
    assert by["gicv4"]["verdict"] == "info", by["gicv4"]
    assert "irq-remapping" not in by, by


# hpkvm's unit tests, as the Makefile's ARM_UNIT_TESTS builds them.
ARM_UNIT_TESTS = ["accel-opts", "cpuset", "helper-policy", "hpnet-probe",
                  "hpnet-select", "isolate", "msi"]


@tests.case
def hpkvms_unit_tests_pass_on_aarch64():
    res = nested(r"""
for t in /hpkvm/tests/test-hpkvm-*; do
    echo "unit: ${t##*/} start"
    timeout 120 $t --tap 2>&1 | sed "s|^|unit: ${t##*/} |"
done
""")
    ran = {line.split()[0] for line in lines_with(res.output, "unit: ")}
    assert ran == {f"test-hpkvm-{t}" for t in ARM_UNIT_TESTS}, res.output
    for name in ran:
        lines = [line.split(" ", 1)[1] for line in
                 lines_with(res.output, "unit: ") if line.startswith(name)]
        plan = [ln for ln in lines if re.match(r"1\.\.\d+$", ln)]
        oks = [ln for ln in lines if re.match(r"ok \d+", ln)]
        assert plan and len(oks) == int(plan[0][3:]), (name, lines)
        assert not [ln for ln in lines if ln.startswith("not ok")], lines


@tests.case
def a_feature_the_machine_cannot_have_stops_qemu_with_the_fix():
    res = nested(r"""
qemu-system-aarch64 -accel hpkvm,vfio-irte=on -M virt,its=off -cpu host \
    -m 128 -nodefaults -display none -kernel $HPKVM_GUEST 2>&1 |
    sed 's/^/stderr: /'
""")
    err = "\n".join(lines_with(res.output, "stderr: "))
    assert re.search(r"vfio-irte=on needs a GICv3 with an ITS in the "
                     r"guest: use -M virt,gic-version=3,its=on", err), err


# The guest's vnet workload (tests/hpkvm/guest-common/vnet.c) through
# -netdev hpnet, one backend per need; each run prints "LABEL-before: "
# and "LABEL-after: " query-hpnet, "LABEL-rx: " the tap's received
# frames (where there is a tap) and the guest's serial lines; a payload
# may redefine hpnet_peek LABEL to look at the host while the guest holds.
HPNET_LIB = r"""
hpnet_peek() { :; }
printf '#!/bin/sh\nip link set "$1" up\n' > /tmp/ifup
chmod +x /tmp/ifup
# The tap of -netdev hpnet's tap backends.
TAP=ifname=hptap0,script=/tmp/ifup
VNET="-machine highmem-ecam=off -fw_cfg name=opt/org.hpkvm/vnet,string=8
      -fw_cfg name=opt/org.hpkvm/hold,string=1"
hpnet_run() {
    label=$1
    shift
    start_qemu -accel kvm -smp 1 $VNET "$@" || exit 1
    echo "$label-before: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpnet"}')"
    run_to_result 300
    echo "$label-after: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpnet"}')"
    hpnet_peek $label
    echo "$label-rx: $(cat /sys/class/net/hptap0/statistics/rx_packets 2>/dev/null)"
    qmp-exec /tmp/qmp.sock quit > /dev/null
    wait $qemu_pid
    sed "s/^/$label-serial: /" /tmp/serial.log | tr -d '\r'
}
"""


@tests.case
def hpnet_backends_carry_the_guests_frames_on_arm64():
    """Each need takes its backend on arm64 and the guest's 8 frames go
    through it: vhost-net (throughput) and QEMU's own virtio-net
    (compatibility) into a tap; vhost-user (latency) to QEMU's
    vhost-user-bridge, which sends each as a UDP datagram (counted by the
    host's UDP statistics: nothing else in the nested host sends any)."""
    res = nested(HPNET_LIB + r"""
hpnet_run vhost-net -netdev hpnet,id=n0,need=throughput,$TAP \
    -device virtio-net-pci,netdev=n0,romfile=
hpnet_run virtio-net -netdev hpnet,id=n0,need=compatibility,$TAP \
    -device virtio-net-pci,netdev=n0,romfile=
udp_out() { awk '/^Udp: [0-9]/ { print $5 }' /proc/net/snmp; }
vhost-user-bridge -u /tmp/vubr.sock -l 127.0.0.1:4444 -r 127.0.0.1:5555 \
    > /tmp/bridge.log 2>&1 &
bridge=$!
i=0
while [ ! -S /tmp/vubr.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
udp_before=$(udp_out)
hpnet_run vhost-user -object memory-backend-memfd,id=mem,size=128M,share=on \
    -machine memory-backend=mem \
    -netdev hpnet,id=n0,need=latency,vhost-user-socket=/tmp/vubr.sock \
    -device virtio-net-pci,netdev=n0,romfile=
echo "vhost-user-udp: $(($(udp_out) - udp_before))"
# The bridge ends with QEMU's connection; if it has not, it is stopped.
kill $bridge 2>/dev/null
wait $bridge
grep -v '^[TR]X::' /tmp/bridge.log | tail -n 5 | sed 's/^/bridge: /'
""")
    print("#", res.output.replace("\n", "\n# "))
    for label, backend in (("vhost-net", "vhost-net"),
                           ("virtio-net", "virtio-net"),
                           ("vhost-user", "vhost-user")):
        serial = lines_with(res.output, f"{label}-serial: ")
        assert "hpkvm-arm-guest: vnet: sent 8 frames" in serial, \
            (label, res.output)
        assert any(line.startswith("hpkvm-arm-guest: PASS ") and
                   " vnet=8" in line for line in serial), (label, serial)
        after = json.loads(lines_with(res.output,
                                      f"{label}-after: ")[0])["return"][0]
        assert after["backend"] == backend, (label, after)
        assert after["candidates"][0]["taken"], (label, after)
        if backend != "virtio-net":
            before = json.loads(lines_with(
                res.output, f"{label}-before: ")[0])["return"][0]
            # vhost starts when the guest's driver is ready, not before.
            assert before["vhost-started"] is False, (label, before)
            assert after["vhost-started"] is True, (label, after)
    for label in ("vhost-net", "virtio-net"):
        assert int(lines_with(res.output, f"{label}-rx: ")[0]) >= 8, \
            (label, res.output)
    assert lines_with(res.output, "vhost-user-udp: ") == ["8"], res.output


@tests.case
def hpnet_passes_an_sriov_vf_through_on_arm64_its_msi_a_vlpi_on_gicv4():
    """need=isolation takes an igb VF on vfio-pci behind the host's SMMUv3
    (each VF its own IOMMU group: ACS on, see nested_host.run) and plugs
    it behind the guest's root port as the failover primary of its
    virtio-net standby, once the guest accepted STANDBY.  The guest maps
    the VF's MSI through its ITS and has the VF raise it: on a GICv3 host
    the host takes it and KVM injects it; on a GICv4 host
    (kvm-arm.vgic_v4_enable=1) KVM has forwarded it as a vLPI, its
    vgic-state shows the guest's LPI backed by a host interrupt (the HW
    flag), and the guest takes it without the host taking it."""
    for gic in (3, 4):
        res = nested(HPNET_LIB + r"""
pf=$(basename "$(dirname "$(ls /sys/bus/pci/devices/*/sriov_numvfs | head -1)")")
for vf in /sys/bus/pci/devices/$pf/virtfn*; do
    echo "group: $(basename $(readlink $vf)) $(basename $(readlink $vf/iommu_group))"
done
# The PF up, as on a host that uses it: only then is igb in MSI-X mode,
# which its VFs' interrupts need.
ip link set "$(ls /sys/bus/pci/devices/$pf/net)" up
mount -t debugfs none /sys/kernel/debug
# KVM's view of the guest's LPIs: "LPI INTID TGT PLAEHCG ...", the fifth
# flag H: whether a host interrupt backs it; and how often the host took
# the VF's MSI itself: "N: COUNT... vfio-msix[0](VF)".
hpnet_peek() {
    grep -h '^ *LPI ' /sys/kernel/debug/kvm/*/vgic-state | sed "s/^ */$1-lpi: /"
    grep 'vfio-msix' /proc/interrupts | sed "s/^ */$1-host-irq: /"
}
hpnet_run sriov -fw_cfg name=opt/org.hpkvm/vnet-standby,string=1 \
    -fw_cfg name=opt/org.hpkvm/vf-msi,string=1 \
    -device pcie-root-port,id=rp1,slot=1,chassis=1 \
    -netdev hpnet,id=n1,need=isolation,pf=$pf,standby=net1,vf-bus=rp1,$TAP \
    -device virtio-net-pci,netdev=n1,id=net1,failover=on,romfile=
""", iommu=True, vfs=2, vfio_vfs=2, gic=gic)
        print(f"# GICv{gic} host:\n#", res.output.replace("\n", "\n# "))
        groups = [line.split()[1]
                  for line in lines_with(res.output, "group: ")]
        assert len(groups) == 2 and len(set(groups)) == 2, res.output
        after = json.loads(lines_with(res.output,
                                      "sriov-after: ")[0])["return"][0]
        assert after["backend"] == "sriov" and after["vf"], after
        serial = lines_with(res.output, "sriov-serial: ")
        assert "hpkvm-arm-guest: vnet: sent 8 frames" in serial, res.output
        # QEMU plugged the VF (igbvf, 8086:10ca) once the guest took
        # STANDBY.
        assert "hpkvm-arm-guest: vnet: failover primary 32902:4298 " \
            "on bus 1" in serial, serial
        assert "hpkvm-arm-guest: vf-msi: devid=256 event=0 lpi=8192 " \
            "taken=1" in serial, (gic, serial)
        lpis = [line.split() for line in lines_with(res.output, "sriov-lpi: ")]
        hw = "1" if gic == 4 else "0"
        assert [(lpi[1], lpi[3][4]) for lpi in lpis] == [("8192", hw)], \
            (gic, lpis)
        irq, = lines_with(res.output, "sriov-host-irq: ")
        taken_by_host = sum(int(n) for n in irq.split()[1:5])
        assert taken_by_host == (0 if gic == 4 else 1), (gic, irq)


@tests.case
def make_benchs_arm64_exit_census_is_exact():
    """make bench's arm64 table, at its smallest, on our arm64 kernel
    (hpkvm with exclusive-cores and dynamic-nohz granted): both
    accelerators' frames cost exactly their boundary (the null frame's one
    MMIO exit, QEMU's kicks, which race its "cont", not counted, the
    tracepoint's count of every vCPU's exits equal to KVM's), and
    what each workload must cost on arm64 KVM, whatever the host's
    interrupts add: one HVC trap per HVC, one system register trap per
    SGI sent, none for the receiver but its wake-up."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(
        __file__)), "..", "..", "..", "scripts", "hpkvm"))
    import bench
    runs = bench.run_nested(os.environ.get("HPKVM_BUILD", "build/qemu"),
                            ["kvm", "hpkvm"], 20, 0, 1,
                            bench.ARCHES["aarch64"])
    for accel in ("kvm", "hpkvm"):
        r = runs[accel][0]
        assert not r["boundary_extra"], (accel, r["boundary_extra"])
        w = r["workloads"]
        assert set(w) == {"null", "idle", "hvc", "timer", "vf-msi",
                          "sgi-spin", "sgi-wfi"}, (accel, list(w))
        assert w["hvc"]["exits_per_op"]["hvc_traps"] == 1.0, w["hvc"]
        # The VF's MSI a vLPI on the bench host's GICv4: the guest takes
        # it without an exit (on a GICv3 host, one IRQ exit each); what
        # else exits then is the host's, a tick now and then.
        assert w["vf-msi"]["exits_per_op"].get("guest_exits", 0) < 0.5, \
            (accel, w["vf-msi"])
        for name in ("sgi-spin", "sgi-wfi"):
            sender, receiver = w[name]["exits_per_op_by_vcpu"]
            assert sender.get("sysreg_traps") == 1.0, (accel, name, sender)
            assert not receiver.get("sysreg_traps"), (accel, name, receiver)
        # The receiver waiting in WFI takes its WFI exit each round; the
        # stop at the frame's end kicks it out of its last one, which
        # then counts as the kick's (bench.TRACE_SHELL).
        receiver = w["sgi-wfi"]["exits_per_op_by_vcpu"][1]
        assert receiver.get("wfx_traps", 0) + \
            receiver.get("kick_exits", 0) >= 1.0, (accel, receiver)
    info = runs["hpkvm"][0]["hpkvm"]
    assert info["host-cpus"] == "2-3", info
    # On our arm64 kernel, as make bench runs it (ARCHES["aarch64"]).
    assert info["kernel-version"] == 2, info
    for name in ("exclusive-cores", "dynamic-nohz"):
        assert feature(info, name)["granted"], (name, info["features"])


# The host's own timer interrupts ("arch_timer" in /proc/interrupts: in
# VHE, the EL2 timer) per second on cores 0-3, over 4 s.
TIMER_RATES = r"""
timer_counts() {
    awk '$NF == "arch_timer" || / arch_timer$/ { print $2, $3, $4, $5; exit }' \
        /proc/interrupts
}
timer_rates() {
    a=$(timer_counts)
    sleep 4
    b=$(timer_counts)
    echo "$a $b" | awk '{ printf "%.1f %.1f %.1f %.1f", ($5 - $1) / 4,
        ($6 - $2) / 4, ($7 - $3) / 4, ($8 - $4) / 4 }'
}
"""


@tests.case
def our_arm64_kernel_keeps_the_contract_and_grants_cores_and_nohz():
    """Our kernel for arm64 (kvm/build-kernel.sh --arch arm64: the series
    on Debian's source, built whole, as arm64's KVM cannot be a module),
    booted with nohz_full=2-3: the contract's test passes, its
    dynamic-nohz cases run; -accel hpkvm has exclusive-cores and
    dynamic-nohz granted by the kernel (contract 2); while the guest
    waits in WFI the bound cores' timer all but stops; root then moves
    each vCPU thread off its core and the kernel runs neither again (the
    VM pauses), also when the vCPU spins in the guest and never returns
    to QEMU (hold=2: the check at every guest entry in KVM's loop); plain
    -accel kvm guests pass on the same kernel."""
    res = nested(TIMER_RATES + r"""
echo "kernel: $(uname -r) $(cat /proc/sys/kernel/tainted)"
hpkvm-contract-test --tap > /tmp/contract.log 2>&1
echo "contract-status: $?"
sed 's/^/contract: /' /tmp/contract.log
echo "nohz_full: $(cat /sys/devices/system/cpu/nohz_full)"
leased=host-cpus=2-3,housekeeping-cpus=0-1
start_qemu -accel hpkvm,$leased,exclusive-cores=on,dynamic-nohz=on \
    -smp 2 -fw_cfg name=opt/org.hpkvm/hold,string=1 || exit 1
echo "hpkvm: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
run_to_result 600
sed 's/^/held-serial: /' /tmp/serial.log | tr -d '\r'
sleep 1             # the guest's last exits, and the tick's stop
for w in 1 2 3; do echo "timer-rates: $(timer_rates)"; done
# The threads on a leased core (the vCPUs'), each moved to 0 by root;
# the vCPUs, in WFI, see it when "stop" and "cont" run them again.
for t in /proc/$qemu_pid/task/*; do
    case "$(grep Cpus_allowed_list $t/status | cut -f2)" in
    2|3) taskset -p -c 0 ${t##*/} > /dev/null 2>&1
         echo "taskset: ${t##*/} $?" \
              "$(grep Cpus_allowed_list $t/status | cut -f2)" ;;
    esac
done
qmp-exec /tmp/qmp.sock stop > /dev/null
qmp-exec /tmp/qmp.sock cont > /dev/null
i=0
until qmp-exec /tmp/qmp.sock query-status | grep -q '"paused"'; do
    sleep 0.2; i=$((i + 1)); [ $i -gt 100 ] && break
done
echo "moved-status: $(qmp-exec /tmp/qmp.sock query-status |
    grep -o '"status": "[a-z-]*"')"
qmp-exec /tmp/qmp.sock quit > /dev/null
wait $qemu_pid
echo "quit-status: $?"
# Again with the boot vCPU spinning, interrupts masked (hold=2): it
# never leaves the guest by itself, so the move's IPI brings it back to
# KVM's run loop, whose check at the next entry stops it without a
# return to QEMU first (no stop/cont this time).
start_qemu -accel hpkvm,$leased,exclusive-cores=on,dynamic-nohz=on \
    -smp 2 -fw_cfg name=opt/org.hpkvm/hold,string=2 || exit 1
run_to_result 600
sed 's/^/spin-serial: /' /tmp/serial.log | tr -d '\r'
sleep 1
echo "spin-status: $(qmp-exec /tmp/qmp.sock query-status |
    grep -o '"status": "[a-z-]*"')"
for t in /proc/$qemu_pid/task/*; do
    case "$(grep Cpus_allowed_list $t/status | cut -f2)" in
    2|3) taskset -p -c 0 ${t##*/} > /dev/null 2>&1 ;;
    esac
done
i=0
until qmp-exec /tmp/qmp.sock query-status | grep -q '"paused"'; do
    sleep 0.2; i=$((i + 1)); [ $i -gt 100 ] && break
done
echo "spin-moved-status: $(qmp-exec /tmp/qmp.sock query-status |
    grep -o '"status": "[a-z-]*"')"
echo "spin-moved-to: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}' |
    grep -o '"moved-to": "[^"]*"')"
qmp-exec /tmp/qmp.sock quit > /dev/null
wait $qemu_pid
echo "spin-quit-status: $?"
start_qemu -accel kvm -smp 2 || exit 1
finish_qemu
""", kvm="hpkvm", kernel="hpkvm", append=("nohz_full=2-3",))
    print("#", res.output.replace("\n", "\n# "))
    # Ours, not Debian's: our kernel's version, nothing loaded (taint 0).
    release, taint = lines_with(res.output, "kernel: ")[0].split()
    assert "-arm64" not in release and taint == "0", (release, taint)
    contract = lines_with(res.output, "contract: ")
    assert lines_with(res.output, "contract-status: ") == ["0"], contract
    assert not [ln for ln in contract if ln.startswith("not ok")], contract
    for case in ("caps/dynamic-nohz", "enable/dynamic-nohz",
                 "bind/dynamic-nohz-outside-nohz-full",
                 "bind/pins-thread", "run/unbound", "run/other-thread"):
        line = [ln for ln in contract
                if ln.endswith(f"/hpkvm-contract/{case}")]
        assert line and line[0].startswith("ok "), (case, contract)
        assert "# SKIP" not in line[0], (case, contract)
    assert lines_with(res.output, "nohz_full: ") == ["2-3"], res.output
    info = hpkvm_info(res)
    assert info["kernel-version"] == 2, info
    for name in ("exclusive-cores", "dynamic-nohz"):
        f = feature(info, name)
        assert f["granted"] and f["mechanism"] == "patched-kernel", f
    placement = {p["thread-id"]: p["host-cpu"] for p in info["placement"]}
    assert sorted(placement.values()) == [2, 3], info
    assert any(line.startswith("hpkvm-arm-guest: PASS cpus=2 ")
               for line in lines_with(res.output, "held-serial: ")), \
        res.output
    # Root moves each vCPU thread, and the kernel then runs neither
    # vCPU: KVM_RUN fails (EPERM) and QEMU pauses the VM.
    moved = [line.split() for line in lines_with(res.output, "taskset: ")]
    assert len(moved) == 2, res.output
    for tid, status, cpus in moved:
        assert int(tid) in placement and status == "0" and cpus == "0", \
            moved
    assert lines_with(res.output, "moved-status: ") == \
        ['"status": "paused"'], res.output
    assert lines_with(res.output, "quit-status: ") == ["0"], res.output
    # The spinning vCPU, moved while it runs, is stopped in KVM's loop.
    assert any(line.startswith("hpkvm-arm-guest: PASS cpus=2 ")
               for line in lines_with(res.output, "spin-serial: ")), \
        res.output
    assert lines_with(res.output, "spin-status: ") == \
        ['"status": "running"'], res.output
    assert lines_with(res.output, "spin-moved-status: ") == \
        ['"status": "paused"'], \
        f"the spinning vCPU ran on after its thread moved:\n{res.output}"
    assert lines_with(res.output, "spin-moved-to: ")[0].startswith(
        '"moved-to": "0"'), res.output
    assert lines_with(res.output, "spin-quit-status: ") == ["0"], res.output
    windows = [[float(r) for r in line.split()]
               for line in lines_with(res.output, "timer-rates: ")]
    assert len(windows) == 3 and all(len(w) == 4 for w in windows), windows
    print(f"# host timer interrupts/s, cores 0-3, per window: {windows}")
    quietest = min(windows, key=lambda w: w[2] + w[3])
    assert quietest[2] <= 2 and quietest[3] <= 2, windows
    # And a plain -accel kvm VM on the same kernel.
    assert_passed(res, 2)


def main():
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())

