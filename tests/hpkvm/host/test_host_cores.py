#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""hpkvm's dedicated cores against a fake host tree (x-host-root=): every
refusal of host-cpus=/housekeeping-cpus=, isolation applied and restored
exactly on quit, after SIGKILL by qemu-hpkvm-helper at once (and by
qemu-hpkvm-recover when no helper runs), and by the next VM,
everything undone when KVM fails after hpkvm and QEMU falls back to TCG,
and 50 QEMUs racing for one core.  The vCPU threads are real: cores 0 and
1 of this machine.  Prints TAP."""

import fcntl
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402
from hostlib import Vm  # noqa: E402

tests = hostlib.TapSuite()


def fake_accel(root, extra=""):
    return (f"hpkvm,x-host-root={root},host-cpus=1,"
            f"housekeeping-cpus=0{extra}")


@tests.kvm_case
def refusals_name_the_core_and_the_fix():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        base = f"hpkvm,x-host-root={root}"
        cases = [
            ("host-cpus=x", 1, "host-cpus: 'x' is not a CPU list"),
            ("host-cpus=9", 1, "host-cpus= lists host core 9, which does "
                               "not exist (this host has 0-3)"),
            ("host-cpus=3", 1, "host-cpus= lists host core 3, which is "
                               "offline\nBring it online (echo 1 > "
                               "/sys/devices/system/cpu/cpu3/online)"),
            ("host-cpus=1", 2, "host-cpus=1 lists 1 host core for 2 vCPUs "
                               "(-smp maxcpus counts hot-pluggable ones)\n"
                               "List 1 more, or lower -smp.\n"),
            ("host-cpus=pinned", "1,maxcpus=2", "host-cpus=pinned takes "
             "the cores the vCPUs are pinned to when the guest first runs, "
             "and hot-pluggable vCPUs (-smp cpus=1,maxcpus=2) have none"),
            ("host-cpus=1,smp-unused=1", 1, "Property 'hpkvm-accel."
                                            "smp-unused' not found"),
            ("host-cpus=0-1", 1, "leaves no online core for QEMU's other "
                                 "threads"),
            ("host-cpus=1,housekeeping-cpus=0-1", 1,
             "host core 1 is in both host-cpus= and housekeeping-cpus="),
            ("host-cpus=1,housekeeping-cpus=2", 1,
             "housekeeping-cpus= lists host core 2, which is offline"),
            ("housekeeping-cpus=0", 1, "housekeeping-cpus= needs "
                                       "host-cpus="),
            ("dynamic-isolation=on", 1, "dynamic-isolation=on needs "
                                        "host-cpus="),
            ("dynamic-isolation=maybe", 1, "dynamic-isolation"),
        ]
        bad = []
        for opts, smp, want in cases:
            status, err = hostlib.run_error(f"{base},{opts}", tmp, smp=smp)
            if status in (0, None) or want not in err:
                bad.append(f"{opts}: status {status}, stderr {err!r}")
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not bad, "\n".join(bad)
        assert not diff, "host changed by a refused start: " + "; ".join(diff)
        assert not os.path.exists(os.path.join(root, "run/hpkvm/"
                                               "host.journal"))


def check_isolated(root, vm):
    """The fake host while the VM runs, and the VM's own threads."""
    info = vm.qmp("query-hpkvm")
    iso = info["isolation"]
    assert info["host-cpus"] == "1" and info["housekeeping-cpus"] == "0", info
    assert iso["active"] and iso["method"] == "cgroup-v1", iso
    core = iso["cores"][0]
    assert core["host-cpu"] == 1 and 24 in core["irqs-moved"] and \
        25 in core["irqs-moved"] and 26 not in core["irqs-moved"], core
    assert {"pid": 21, "comm": "ksoftirqd/1"} in core["kthreads-left"], core
    tree = hostlib.snapshot_tree(root)
    irq = "proc/irq/{}/smp_affinity_list"
    assert tree[irq.format(24)] == "0" and tree[irq.format(25)] == "0", tree
    assert tree["proc/irq/default_smp_affinity"] == "00000001"
    cg = "sys/fs/cgroup/cpuset"
    assert tree[f"{cg}/hpkvm.host/cpuset.cpus"] == "0"
    assert "100" in hostlib.moved_to(root, "hpkvm.host")
    assert tree[f"{cg}/machine/cpuset.cpus"] == "0"

    # The real threads: the vCPU on core 1, everything else on core 0.
    (place,) = info["placement"]
    threads = hostlib.thread_affinity(vm.pid)
    assert threads[place["thread-id"]][1] == "1", threads
    others = {t: a for t, (c, a) in threads.items()
              if t != place["thread-id"]}
    assert others and all(a == "0" for a in others.values()), threads
    text = vm.hmp("info hpkvm")
    assert "vCPU 0: host core 1" in text, text
    assert re.search(r"host core 1: nohz off; IRQs moved:.* 24", text), text


@tests.kvm_case
def quit_restores_the_fake_host_exactly():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        vm = Vm(fake_accel(root), tmp).connect()
        try:
            check_isolated(root, vm)
        finally:
            status = vm.quit()
        assert status == 0, vm.stderr
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)
        assert "100" in hostlib.moved_to(root, "/"), "sshd not moved back"


@tests.kvm_case
def sigkill_then_the_helper_restores_at_once():
    """qemu-hpkvm-helper sees its client die (pidfd) and undoes its
    changes with no other VM or tool."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        vm = Vm(fake_accel(root), tmp).connect()
        check_isolated(root, vm)
        vm.kill()
        deadline = time.monotonic() + 10
        while hostlib.tree_diff(before, hostlib.snapshot_tree(root)) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)


@tests.kvm_case
def sigkill_without_a_helper_then_recovery_tool_restores():
    """With the helper down when QEMU dies, qemu-hpkvm-recover puts the
    host back."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        vm = Vm(fake_accel(root), tmp).connect()
        check_isolated(root, vm)
        hostlib.helper_for(root).kill()
        vm.kill()
        assert hostlib.tree_diff(before, hostlib.snapshot_tree(root)), \
            "SIGKILL undid the changes: nothing left to recover"
        rec = subprocess.run([hostlib.RECOVER, f"--host-root={root}"],
                             capture_output=True, text=True, timeout=30)
        assert rec.returncode == 0, rec.stdout + rec.stderr
        assert "cores leased by running VMs: none" in rec.stdout, rec.stdout
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)
        assert not os.path.exists(os.path.join(root, "run/hpkvm/"
                                               "host.journal"))


@tests.kvm_case
def sigkill_then_next_vm_takes_over_and_restores():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        vm = Vm(fake_accel(root), tmp).connect()
        vm.kill()
        # The dead VM's lease is gone: the core can be leased again.
        vm2 = Vm(fake_accel(root), tmp, name="vm2").connect()
        try:
            check_isolated(root, vm2)
        finally:
            status = vm2.quit()
        assert status == 0, vm2.stderr
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)


def lease_held(root, cpu):
    """Whether a process holds the lease on a core: its OFD lock conflicts
    with our POSIX one."""
    path = os.path.join(root, f"run/hpkvm/leases/cpu{cpu}")
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


@tests.case
def kvm_failing_after_the_lease_undoes_everything_for_tcg():
    """KVM's own initialisation fails after hpkvm leased the core and
    isolated the host (device=/dev/null opens, but is no KVM): QEMU goes
    on with -accel tcg as with plain KVM, and nothing of hpkvm's stays:
    the host as before, no lease, QEMU's threads where they were, no
    notifier left to run at migrate or quit.  No /dev/kvm needed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        stream = os.path.join(tmp, "stream")
        vm = Vm(fake_accel(root, ",device=/dev/null"), tmp,
                extra=["-accel", "tcg", "-cpu", "qemu64"]).connect()
        died = None
        try:
            kvm = vm.qmp("query-kvm")
            info = vm.qmp("query-hpkvm")
            during = hostlib.snapshot_tree(root)
            threads = hostlib.thread_affinity(vm.pid)
            held = lease_held(root, 1)
            vm.qmp("cont")
            vm.qmp("migrate", uri=f"file:{stream}")
            deadline = time.monotonic() + 30
            while vm.qmp("query-migrate").get("status") not in \
                    ("completed", "failed") and time.monotonic() < deadline:
                time.sleep(0.1)
            migrated = vm.qmp("query-migrate").get("status")
        except (OSError, ValueError) as e:
            died = e                    # QMP's connection gone
        finally:
            status = vm.quit()
        assert not died, f"QEMU died ({died}): exit status {status}, " \
            f"stderr {vm.stderr!r}"
        assert not kvm["enabled"] and not info["enabled"], (kvm, info)
        assert "host-cpus" not in info and "placement" not in info, info
        diff = hostlib.tree_diff(before, during)
        assert not diff, "host left isolated: " + "; ".join(diff)
        assert not held, "core 1 still leased"
        mine = hostlib.own_affinity()
        assert threads and all(a == mine for _, a in threads.values()), \
            f"QEMU's threads not put back on {mine}: {threads}"
        assert migrated == "completed", migrated
        assert status == 0, f"exit status {status}: {vm.stderr}"
        assert "falling back to tcg" in vm.stderr, vm.stderr
        assert "kvm-hint-dedicated" not in vm.stderr, vm.stderr


@tests.case
def a_second_lease_domain_on_the_real_host_is_refused():
    """A state directory other than /run/hpkvm on the real host (or a
    root that names it as "//") would let two VMs lease one core: the
    helper refuses to start, naming the one directory, before anything
    changes; QEMU has no such option at all.  No /dev/kvm needed."""
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        for root in ([], ["--x-host-root=//"]):
            helper = subprocess.run(
                [hostlib.HELPER, f"--x-state-dir={state}",
                 f"--policy={tmp}/none.conf",
                 f"--socket={tmp}/helper.sock", *root],
                capture_output=True, text=True, timeout=30)
            assert helper.returncode == 1, (helper.returncode, helper.stderr)
            assert "on the real host the leases and the journal live in " \
                "/run/hpkvm" in helper.stderr, helper.stderr
            assert not os.path.exists(state), "created the second domain"
            assert not os.path.exists(f"{tmp}/helper.sock"), "listened"
        rc, err = hostlib.run_error(
            f"hpkvm,device=/dev/null,x-state-dir={state}", tmp)
        assert rc == 1 and "x-state-dir' not found" in err, (rc, err)


def wait_status(vm, want, timeout=10):
    """query-status once it says want, or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        status = vm.qmp("query-status")
        if status["status"] == want or time.monotonic() > deadline:
            return {k: status[k] for k in ("running", "status")}
        time.sleep(0.1)


def fake_kernel_vm(root, tmp, spec, name):
    log = os.path.join(tmp, f"{name}.log")
    env = dict(os.environ, LD_PRELOAD=hostlib.FAKE_KERNEL,
               HPKVM_FAKE_KERNEL=spec, HPKVM_FAKE_KERNEL_LOG=log)
    return Vm(fake_accel(root), tmp, name=name, env=env), log


@tests.kvm_case
def granted_exclusive_cores_bind_each_vcpu_on_its_thread():
    """With the patched kernel's test double granting everything: the
    kernel is asked to bind vCPU 0 to core 1 from the vCPU's own thread,
    already pinned there, and the report says dynamic nohz; a refused
    bind stops the VM before the guest runs (internal-error, saying
    why), and QEMU, still up for the manager to see, puts the host back
    when it quits."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        vm, log = fake_kernel_vm(root, tmp, "supported=0x3f", "granted")
        vm.connect()
        try:
            info = vm.qmp("query-hpkvm")
        finally:
            assert vm.quit() == 0, vm.stderr
        feats = {f["feature"]: f for f in info["features"]}
        assert feats["exclusive-cores"]["granted"], feats
        (place,) = info["placement"]
        with open(log) as f:
            binds = [ln for ln in f if ln.startswith("HPKVM_BIND_VCPU")]
        assert binds == [f"HPKVM_BIND_VCPU host_cpu=1 tid="
                         f"{place['thread-id']} affinity=1 -> 0\n"], binds
        assert info["isolation"]["cores"][0]["nohz"] == "dynamic", info

        vm, log = fake_kernel_vm(root, tmp, "supported=0x3f,bind=16",
                                 "refused")
        vm.connect()
        try:
            vm.qmp("cont")
            status = wait_status(vm, "internal-error")
        finally:
            quit_status = vm.quit()
        assert status == {"running": False, "status": "internal-error"}, \
            status
        assert quit_status == 0, vm.stderr
        assert "cannot bind vCPU 0 to host core 1: Device or resource busy" \
            in vm.stderr, vm.stderr
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)


@tests.kvm_case
def grants_the_kernel_cannot_undo_stop_qemu():
    """A kernel that fails HPKVM_ENABLE part way and then HPKVM_DISABLE
    (which the contract says must succeed) keeps grants QEMU would not
    use: QEMU must not fall back and run the guest on them, but refuse
    to start, saying why, and leave the host as it was."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        before = hostlib.snapshot_tree(root)
        log = os.path.join(tmp, "undo.log")
        env = dict(os.environ, LD_PRELOAD=hostlib.FAKE_KERNEL,
                   HPKVM_FAKE_KERNEL="supported=0x3f,enable=5,disable=5",
                   HPKVM_FAKE_KERNEL_LOG=log)
        status, err = hostlib.run_error(fake_accel(root), tmp, env=env)
        assert status == 1, (status, err)
        assert "cannot undo the kernel's hpkvm grants after HPKVM_ENABLE " \
            "failed: Input/output error: HPKVM_DISABLE failed: " \
            "Input/output error" in err, err
        with open(log) as f:
            text = f.read()
        # The kernel kept what it had granted: something to undo.
        assert re.search(r"^HPKVM_DISABLE \(granted was 0x0*[1-9a-f]"
                         r"[0-9a-f]*\) -> 5$", text, re.M), text
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "not restored: " + "; ".join(diff)


@tests.kvm_case
def fifty_racing_starts_never_two_owners():
    n = 50
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "host")
        hostlib.make_fake_host(root)
        accel = fake_accel(root, ",dynamic-isolation=off")
        vms = [Vm(accel, tmp, name=f"r{i}", timeout=120) for i in range(n)]
        try:
            # Each either holds the core (QMP up) or exits refused.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                pending = [v for v in vms if v.exitcode() is None and
                           not os.path.exists(v.sock)]
                if not pending:
                    break
                time.sleep(0.2)
            time.sleep(0.5)
            alive = [v for v in vms if v.exitcode() is None]
            refused = [v for v in vms if v.exitcode() is not None]
            assert len(alive) == 1, f"{len(alive)} VMs hold core 1"
            winner = alive[0]
            want = (f"host core 1 is leased by another VM (pid "
                    f"{winner.pid})")
            for v in refused:
                v.wait()        # gone already: its output is read
            errs = [v.stderr for v in refused]
            wrong = [e for e in errs if want not in e]
            assert len(refused) == n - 1 and not wrong, wrong[:3]
            info = winner.connect().qmp("query-hpkvm")
            assert info["host-cpus"] == "1", info
            winner.kill()
            again = Vm(accel, tmp, name="again").connect()
            assert again.quit() == 0, again.stderr
        finally:
            for v in vms:
                v.kill()


def main():
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())
