#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm on Intel VMX: our KVM's kvm-intel in the Bochs nested host.

One boot of Debian's kernel on Bochs's Skylake-X (bochs_host.py) with
our KVM's modules, kvm.ko and kvm-intel.ko:

- the kernel loads ours, not Debian's (tainted with an out-of-tree
  module), and kvm-intel, not kvm-amd;
- our guest passes under -accel kvm on two vCPUs (IPIs between them),
  with x2APIC and the TSC-deadline timer, on real kvm-intel code paths
  (VMX exits, EPT);
- under -accel hpkvm with host-cpus= and exclusive-cores=on, the kernel
  grants exclusive-cores under contract 2 (the binding is
  vendor-neutral), the vCPU thread on its leased core and no longer
  movable; every interrupt feature is refused with the reason our KVM
  gives on VMX, where the series implements none yet, and falls back to
  KVM's own mechanism; the guest passes.

With --all, also our guest on Bochs's SVM model under our kvm-amd
(another boot; not in make check).

Prints TAP.  Bochs runs about 8 times slower than TCG: the boot takes
about 3 minutes to the shell, the whole case about 6; one failed boot of
the host is retried once, as in the TCG host's tests.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "host"))

import bochs_host  # noqa: E402
from hostlib import TapSuite  # noqa: E402
from nested_host import NestedHostError  # noqa: E402
from test_nested_host import (PAYLOAD_LIB, assert_vcpus_held,  # noqa: E402
                               feature, lines_with)

# One boot, bounded at 2.5 times the 350 s it took under meson here (Bochs
# uses one core, whatever runs beside it); the L2 guest's waits inside
# are PAYLOAD_LIB's.
BOOT_TIMEOUT = 900
# The host has 2 CPUs (Bochs runs its CPUs in turn on one thread: a
# third makes the boot take twice as long): the guest's two vCPUs under
# -accel kvm, one under -accel hpkvm on core 1, housekeeping on core 0.
ACCEL = "hpkvm,host-cpus=1,housekeeping-cpus=0,exclusive-cores=on"
# TAINT_OOT_MODULE: a module from outside the kernel's tree (ours).
TAINT_OOT_MODULE = 1 << 12

suite = TapSuite()


def bochs(script, **kwargs):
    """bochs_host.run(), booted once more if the host itself failed (the
    emulator, not what the test checks); the second failure counts."""
    try:
        return bochs_host.run(script, timeout=BOOT_TIMEOUT, **kwargs)
    except NestedHostError as e:
        print("# the Bochs host failed; booting it once more. Why:\n# "
              + str(e).replace("\n", "\n# "), flush=True)
        return bochs_host.run(script, timeout=BOOT_TIMEOUT, **kwargs)


@suite.case
def our_kvm_intel_grants_exclusive_cores_and_runs_our_guest_on_vmx():
    res = bochs(PAYLOAD_LIB + r"""
mount -t cgroup2 none /sys/fs/cgroup
echo "tainted: $(cat /proc/sys/kernel/tainted)"
echo "modules: $(lsmod | grep -o '^kvm[_a-z]*' | sort | tr '\n' ' ')"
p=/sys/module/kvm_intel/parameters
echo "vmx: ept=$(cat $p/ept) apicv=$(cat $p/enable_apicv)" \
     "preemption_timer=$(cat $p/preemption_timer)"
guest_qemu -accel kvm -cpu host || exit 1
guest_finish
guest_qemu -accel %(accel)s -cpu host -smp 1 || exit 1
hp=$(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')
echo "hpkvm: $hp"
vcpu_threads "$hp"
guest_finish
""" % {"accel": ACCEL}, model="vmx")
    print("#", res.output.replace("\n", "\n# "))
    assert res.status == 0, res.output
    assert int(lines_with(res.output, "tainted: ")[0]) & TAINT_OOT_MODULE, \
        "Debian's KVM answered, not ours:\n" + res.output
    assert lines_with(res.output, "modules: ") == ["kvm kvm_intel "], \
        res.output
    vmx = dict(kv.split("=") for kv in
               lines_with(res.output, "vmx: ")[0].split())
    assert vmx["ept"] == "Y", vmx
    hp = json.loads(lines_with(res.output, "hpkvm: ")[0])["return"]
    assert hp["kernel-version"] == 2, hp
    cores = feature(hp, "exclusive-cores")
    assert cores["granted"] and cores["mechanism"] == "patched-kernel", \
        cores
    # The series has no VMX vendor op (kvm_arch_hpkvm_refusal(): the
    # kernel answers EOPNOTSUPP); the guest's TSC-deadline timer is not
    # what timer-passthrough passes through, so QEMU does not ask.
    for name in ("irq-passthrough", "ipi-fastpath", "vfio-irte"):
        f = feature(hp, name)
        assert not f["granted"] and not f["apicv"], f
        assert "this kernel does not implement it" in f["reason"], f
    timer = feature(hp, "timer-passthrough")
    assert not timer["granted"], timer
    assert "one-shot LAPIC timer" in timer["reason"], timer
    assert_vcpus_held(res, hp, [1])
    assert lines_with(res.output, "status: ") == ["1", "1"], res.output
    kvm, hpkvm = lines_with(res.output, "serial: ")
    assert "hpkvm-guest: PASS cpus=2/2" in kvm, kvm
    assert "hpkvm-guest: PASS cpus=1/1" in hpkvm, hpkvm
    for serial in (kvm, hpkvm):
        assert "apic=x2apic timer=tsc-deadline" in serial, serial


# Cases that only "--all" runs (another boot each, about 6 minutes):
# not in make check.
EXTRA = []


def extra(fn):
    EXTRA.append(fn)
    return fn


@extra
def our_guest_passes_on_bochs_svm_under_kvm_and_hpkvm():
    """Bochs's SVM (a second emulator's, not our TCG's): our kvm-amd
    loads, and our guest, which loads a 64-bit TSS before it enters long
    mode (Bochs refuses long mode with KVM's reset TR, a 16-bit TSS, as
    Intel CPUs do and AMD's do not), passes under -accel kvm and under
    -accel hpkvm with exclusive cores (one vCPU on core 1); without
    AVIC (Bochs has none) the interrupt features are refused."""
    res = bochs(PAYLOAD_LIB + r"""
mount -t cgroup2 none /sys/fs/cgroup
echo "modules: $(lsmod | grep -o '^kvm[_a-z]*' | sort | tr '\n' ' ')"
guest_qemu -accel kvm -cpu host || exit 1
guest_finish
guest_qemu -accel %(accel)s -cpu host -smp 1 || exit 1
echo "hpkvm: $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
guest_finish
""" % {"accel": ACCEL}, model="svm")
    print("#", res.output.replace("\n", "\n# "))
    assert res.status == 0, res.output
    assert lines_with(res.output, "modules: ") == ["kvm kvm_amd "], \
        res.output
    assert lines_with(res.output, "status: ") == ["1", "1"], res.output
    kvm, hpkvm = lines_with(res.output, "serial: ")
    assert "hpkvm-guest: PASS cpus=2/2" in kvm, kvm
    assert "hpkvm-guest: PASS cpus=1/1" in hpkvm, hpkvm
    hp = json.loads(lines_with(res.output, "hpkvm: ")[0])["return"]
    cores = feature(hp, "exclusive-cores")
    assert cores["granted"] and cores["mechanism"] == "patched-kernel", \
        cores
    for name in ("irq-passthrough", "ipi-fastpath", "vfio-irte"):
        f = feature(hp, name)
        assert not f["granted"], f
        print(f"# {name}: {f['mechanism']}: {f['reason']}")


def main():
    if "--all" in sys.argv[1:]:
        suite.cases += EXTRA
    return suite.run(skip_all=None)


if __name__ == "__main__":
    sys.exit(main())
