#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's dedicated cores on this very host (root, /dev/kvm, 2+ cores):
lease core 1 for a 1-vCPU VM, housekeeping on core 0.  While it runs:
its vCPU thread on core 1, every other QEMU thread on core 0, host IRQs
and host tasks off core 1, new processes and a plain -accel kvm QEMU
started meanwhile too.  After quit, and after SIGKILL plus
qemu-hpkvm-recover, everything touched is back as it was.  Runs alone
(meson is_parallel: false): it changes the whole host for a few seconds.
Prints TAP."""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402
from hostlib import Vm  # noqa: E402

CORE, HOUSE = 1, 0


def unusable():
    if os.geteuid() != 0:
        return "needs root (it moves host IRQs and tasks)"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "needs /dev/kvm"
    if len(os.sched_getaffinity(0)) < 2 or os.cpu_count() < 2:
        return "needs 2 host cores"
    return None


def accel():
    # The real host's one lease domain, /run/hpkvm: what an operator gets.
    return (f"hpkvm,host-cpus={CORE},housekeeping-cpus={HOUSE},"
            f"dynamic-isolation=on")


def affinity_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return None


def check_running(vm, tmp):
    info = vm.qmp("query-hpkvm")
    iso = info["isolation"]
    assert iso["active"], iso
    (place,) = info["placement"]
    assert place["host-cpu"] == CORE
    threads = hostlib.thread_affinity(vm.pid)
    assert threads[place["thread-id"]][1] == str(CORE), threads
    bad = {t: a for t, a in threads.items()
           if t != place["thread-id"] and a[1] != str(HOUSE)}
    assert not bad, f"QEMU threads off housekeeping: {bad}"

    core = iso["cores"][0]
    for irq in core["irqs-moved"]:
        with open(f"/proc/irq/{irq}/smp_affinity_list") as f:
            assert f.read().strip() == str(HOUSE), irq
    assert core["irqs-moved"] or core["irqs-left"], core
    with open("/proc/irq/default_smp_affinity") as f:
        assert int(f.read().strip().replace(",", ""), 16) == 1 << HOUSE

    # This test process is a host task: moved (cpuset or affinity).
    assert affinity_of(os.getpid()) == str(HOUSE), affinity_of(os.getpid())
    # New processes are born off the core, and so is a plain KVM VM.
    child = subprocess.run(["grep", "Cpus_allowed_list", "/proc/self/status"],
                           capture_output=True, text=True).stdout
    assert child.split()[-1] == str(HOUSE), child
    plain = Vm("kvm", tmp, name="plain").connect()
    try:
        plain_threads = hostlib.thread_affinity(plain.pid)
    finally:
        plain.quit()
    assert all(a == str(HOUSE) for _, a in plain_threads.values()), \
        plain_threads

    # Running, KVM starts a worker of its own from the vCPU thread; hpkvm
    # moves it (and any late thread) to housekeeping a second later.
    vm.qmp("cont")
    time.sleep(2.5)
    threads = hostlib.thread_affinity(vm.pid)
    late = {t: a for t, a in threads.items()
            if t != place["thread-id"] and a[1] != str(HOUSE)}
    assert not late, f"threads off housekeeping after the start: {late}"
    return iso


def run_case(kill):
    with tempfile.TemporaryDirectory() as tmp:
        before = hostlib.real_snapshot()
        vm = Vm(accel(), tmp).connect()
        rec = None
        try:
            iso = check_running(vm, tmp)
            if kill:
                vm.kill()
                during = hostlib.real_diff(before, hostlib.real_snapshot())
                assert during, "SIGKILL undid the changes: nothing to recover"
            else:
                assert vm.quit() == 0, vm.stderr
        finally:
            # Whatever failed, leave this host as it was: the recovery
            # tool replays /run/hpkvm's journal once no lease is left.
            if vm.exitcode() is None:
                vm.kill()
            rec = subprocess.run([hostlib.RECOVER],
                                 capture_output=True, text=True, timeout=60)
        assert rec.returncode == 0, rec.stdout + rec.stderr
        if kill:
            assert "host restored: journal replayed" in rec.stdout, rec.stdout
        diff = hostlib.real_diff(before, hostlib.real_snapshot())
        assert not diff, "not restored:\n" + "\n".join(diff)
        return iso


def report(iso):
    core = iso["cores"][0]
    print(f"# {iso['method']}: {iso['tasks-moved']} tasks moved; "
          f"core {CORE}: IRQs moved {sorted(core['irqs-moved'])}, "
          f"left {core['irqs-left']}, "
          f"{len(core['kthreads-left'])} per-CPU kthreads left", flush=True)


tests = hostlib.TapSuite()


@tests.case
def quit_restores_this_host():
    report(run_case(kill=False))


@tests.case
def sigkill_then_qemu_hpkvm_recover_restores_this_host():
    report(run_case(kill=True))


def main():
    return tests.run(unusable())


if __name__ == "__main__":
    sys.exit(main())
