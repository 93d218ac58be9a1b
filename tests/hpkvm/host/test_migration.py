#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Live migration and CPR hot upgrade of hpkvm VMs on this host's KVM.

The guest runs the soak workload (memory pattern and timer checks, round
after round) and must finish with its pass line on the destination.
Each side is a host of its own: a fake host tree (x-host-root=) with its
own leases and journal; the vCPU threads are real.  Prints TAP."""

import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402
from hostlib import Vm  # noqa: E402

SOAK = "soak=12"
tests = hostlib.TapSuite()


def accel(root, extra=""):
    return (f"hpkvm,x-host-root={root},host-cpus=1,"
            f"housekeeping-cpus=0{extra}")


def fake_kernel_env():
    return dict(os.environ, LD_PRELOAD=hostlib.FAKE_KERNEL,
                HPKVM_FAKE_KERNEL="supported=0x3f")


def host(tmp, name):
    root = os.path.join(tmp, name)
    hostlib.make_fake_host(root)
    return root, hostlib.snapshot_tree(root)


def start_guest(vm):
    vm.connect()
    vm.qmp("cont")
    assert vm.wait_serial("soak: started"), \
        vm.serial_text() + " ".join(vm.cmd)


def return_path(*vms):
    """Let the destination's verdict reach the source: without the return
    path a refusing destination fails after the source completed."""
    for vm in vms:
        vm.qmp("migrate-set-capabilities", capabilities=[
            {"capability": "return-path", "state": True}])


def resume(dst, timeout=60):
    """The destination was started with -S: run it once the state is in."""
    deadline = time.monotonic() + timeout
    while dst.qmp("query-status")["status"] == "inmigrate":
        assert time.monotonic() < deadline, "incoming migration never ended"
        time.sleep(0.1)
    dst.qmp("cont")


def migrate(src, timeout=120, **args):
    src.qmp("migrate", **args)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = src.qmp("query-migrate").get("status")
        if status in ("completed", "failed", "cancelled"):
            return status
        time.sleep(0.1)
    return "timeout"


def leases_alive(root):
    rec = hostlib.run_recover(root)
    for line in rec.splitlines():
        if line.startswith("cores leased by running VMs: "):
            return line.split(": ", 1)[1]
    raise AssertionError(rec)


def assert_passed_on(dst, src):
    resume(dst)
    status = dst.wait()
    text = dst.serial_text()
    assert status == 1, f"destination exit {status}: {text} {dst.stderr}"
    assert "hpkvm-guest: PASS" in text and f" {SOAK}" in text, text
    assert "PASS" not in src.serial_text(), "the guest finished on the source"


@tests.kvm_case
def live_migration_moves_the_guest_and_then_the_cores():
    with tempfile.TemporaryDirectory() as tmp:
        a, a_before = host(tmp, "a")
        b, b_before = host(tmp, "b")
        sock = os.path.join(tmp, "mig.sock")
        src = Vm(accel(a), tmp, guest=SOAK, name="src", timeout=120)
        dst = Vm(accel(b), tmp, guest=SOAK, name="dst", timeout=120,
                 extra=["-incoming", f"unix:{sock}"])
        try:
            start_guest(src)
            dst.connect()
            return_path(src, dst)
            assert leases_alive(a) == "1" and leases_alive(b) == "1"
            assert migrate(src, uri=f"unix:{sock}") == "completed"
            # The source let its core and its host go once it completed.
            assert leases_alive(a) == "none"
            diff = hostlib.tree_diff(a_before, hostlib.snapshot_tree(a))
            assert not diff, "source host not restored: " + "; ".join(diff)
            info = dst.qmp("query-hpkvm")
            assert info["host-cpus"] == "1" and info["isolation"]["active"]
            assert "incoming-lost" not in info, info
            assert_passed_on(dst, src)
            diff = hostlib.tree_diff(b_before, hostlib.snapshot_tree(b))
            assert not diff, "destination not restored: " + "; ".join(diff)
        finally:
            src.quit()
            dst.quit()


@tests.kvm_case
def a_destination_that_cannot_keep_an_on_promise_refuses():
    with tempfile.TemporaryDirectory() as tmp:
        a, _ = host(tmp, "a")
        b, _ = host(tmp, "b")
        sock = os.path.join(tmp, "mig.sock")
        # The kernel test double grants irq-passthrough on the source only.
        src = Vm(accel(a, ",irq-passthrough=on"), tmp, guest=SOAK,
                 name="src", env=fake_kernel_env(), timeout=120)
        dst = Vm(accel(b), tmp, guest=SOAK, name="dst", timeout=120,
                 extra=["-incoming", f"unix:{sock}"])
        try:
            start_guest(src)
            dst.connect()
            return_path(src, dst)
            during = hostlib.snapshot_tree(a)
            assert migrate(src, uri=f"unix:{sock}") == "failed"
            dst.wait()
            assert dst.exitcode() != 0, dst.stderr
            assert "incoming migration refused" in dst.stderr and \
                "irq-passthrough (on on the source): granted by the " \
                "source's kernel, not here" in dst.stderr, dst.stderr
            # The source runs on, its core and host exactly as before.
            assert src.qmp("query-status")["status"] == "running"
            assert src.qmp("query-hpkvm")["host-cpus"] == "1"
            assert leases_alive(a) == "1"
            diff = hostlib.tree_diff(during, hostlib.snapshot_tree(a))
            assert not diff, "source host changed: " + "; ".join(diff)
            assert src.wait_serial("hpkvm-guest: PASS", 120), \
                src.serial_text()
        finally:
            src.quit()
            dst.quit()


@tests.kvm_case
def an_auto_promise_degrades_with_a_report():
    with tempfile.TemporaryDirectory() as tmp:
        a, _ = host(tmp, "a")
        b, _ = host(tmp, "b")
        sock = os.path.join(tmp, "mig.sock")
        src = Vm(accel(a), tmp, guest=SOAK, name="src",
                 env=fake_kernel_env(), timeout=120)
        dst = Vm(accel(b), tmp, guest=SOAK, name="dst", timeout=120,
                 extra=["-incoming", f"unix:{sock}"])
        try:
            start_guest(src)
            feats = {f["feature"]: f["granted"]
                     for f in src.qmp("query-hpkvm")["features"]}
            assert feats["irq-passthrough"], feats
            dst.connect()
            return_path(src, dst)
            assert migrate(src, uri=f"unix:{sock}") == "completed"
            lost = dst.qmp("query-hpkvm").get("incoming-lost", [])
            assert any(x["feature"] == "irq-passthrough" and
                       x["source-requested"] == "auto" and x["reason"]
                       for x in lost), lost
            assert_passed_on(dst, src)
            assert "incoming migration degraded: the guest loses hpkvm's " \
                "irq-passthrough" in \
                dst.stderr, dst.stderr
        finally:
            src.quit()
            dst.quit()


@tests.kvm_case
def hpkvm_to_plain_kvm_is_refused_and_plain_kvm_to_hpkvm_works():
    with tempfile.TemporaryDirectory() as tmp:
        a, _ = host(tmp, "a")
        sock = os.path.join(tmp, "mig.sock")
        # hpkvm promised dedicated vCPUs (the CPUID hint): kvm cannot keep
        # that, and does not know the section that says so.
        src = Vm(accel(a), tmp, guest=SOAK, name="src", timeout=120)
        dst = Vm("kvm", tmp, guest=SOAK, name="dst", timeout=120,
                 extra=["-incoming", f"unix:{sock}"])
        try:
            start_guest(src)
            dst.connect()
            return_path(src, dst)
            assert migrate(src, uri=f"unix:{sock}") == "failed"
            dst.wait()
            assert "Unknown savevm section or instance 'hpkvm'" in \
                dst.stderr, dst.stderr
            assert src.qmp("query-status")["status"] == "running"
        finally:
            src.quit()
            dst.quit()

        sock = os.path.join(tmp, "mig2.sock")
        src = Vm("kvm", tmp, guest=SOAK, name="src2", timeout=120)
        dst = Vm(accel(a), tmp, guest=SOAK, name="dst2", timeout=120,
                 extra=["-incoming", f"unix:{sock}"])
        try:
            start_guest(src)
            dst.connect()
            return_path(src, dst)
            assert migrate(src, uri=f"unix:{sock}") == "completed"
            assert_passed_on(dst, src)
        finally:
            src.quit()
            dst.quit()


CPR_MEMORY = ("-m", "32", "-object",
              "memory-backend-memfd,id=ram0,size=32M,share=on")
CPR_MACHINE = "pc,aux-ram-share=on,memory-backend=ram0"


@tests.kvm_case
def cpr_transfer_hands_the_cores_and_the_journal_over():
    with tempfile.TemporaryDirectory() as tmp:
        a, a_before = host(tmp, "a")
        main_sock = os.path.join(tmp, "main.sock")
        cpr_sock = os.path.join(tmp, "cpr.sock")
        cpr = {"channel-type": "cpr",
               "addr": {"transport": "socket", "type": "unix",
                        "path": cpr_sock}}
        old = Vm(accel(a), tmp, guest=SOAK, name="old", timeout=120,
                 machine=CPR_MACHINE, memory=CPR_MEMORY)
        new = None
        try:
            start_guest(old)
            isolated = hostlib.snapshot_tree(a)
            assert hostlib.tree_diff(a_before, isolated)
            # Same host, same root and state-dir: the upgrade's new binary.
            new = Vm(accel(a), tmp, guest=SOAK, name="new", timeout=120,
                     machine=CPR_MACHINE, memory=CPR_MEMORY,
                     extra=["-incoming", f"unix:{main_sock}",
                            "-incoming", json.dumps(cpr)])
            deadline = time.monotonic() + 30
            while not os.path.exists(cpr_sock):
                assert time.monotonic() < deadline and \
                    new.exitcode() is None, "new QEMU: no CPR socket"
                time.sleep(0.05)
            old.qmp("migrate-set-parameters", mode="cpr-transfer")
            status = migrate(old, channels=[
                {"channel-type": "main",
                 "addr": {"transport": "socket", "type": "unix",
                          "path": main_sock}}, cpr])
            assert status == "completed", status
            new.connect()
            # The new QEMU owns the core; the host stays as it was.
            with open(os.path.join(a, "run/hpkvm/leases/cpu1")) as f:
                assert f.read().strip() == str(new.pid)
            info = new.qmp("query-hpkvm")
            assert info["host-cpus"] == "1" and info["isolation"]["active"]
            assert old.quit() == 0, old.stderr
            assert leases_alive(a) == "1"
            diff = hostlib.tree_diff(isolated, hostlib.snapshot_tree(a))
            assert not diff, "the old QEMU undid: " + "; ".join(diff)
            assert_passed_on(new, old)
            assert "could not restore" not in new.stderr, new.stderr
            diff = hostlib.tree_diff(a_before, hostlib.snapshot_tree(a))
            assert not diff, "not restored: " + "; ".join(diff)
        finally:
            old.quit()
            if new:
                new.quit()


def main():
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())
