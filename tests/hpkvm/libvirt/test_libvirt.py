#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A real libvirt daemon drives hpkvm: Debian's libvirt (bookworm-backports)
started by the test in a private mount namespace (its own /etc/libvirt,
/run/libvirt, /var/lib/libvirt: nothing of the host's configuration is
touched), with qemu.conf running QEMU as root without a security driver
and without the cgroup v1 "cpu" controller.  A domain whose <emulator> is
our binary and whose <qemu:commandline> passes -accel hpkvm starts, and
virsh qemu-monitor-command shows hpkvm in charge; libvirt's <vcpupin> and
<emulatorpin> are accepted where they agree with host-cpus= and, where
they contradict it, the VM stops before its guest runs, saying why; the
host is as before once the domain is gone.
Runs alone (it isolates a core of this host).  Prints TAP."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "host"))

import hostlib  # noqa: E402
from libvirt_domain import domain_xml  # noqa: E402

QEMU = os.path.abspath(hostlib.QEMU)
GUEST = os.path.abspath(hostlib.GUEST)
URI = "qemu:///system"
tests = hostlib.TapSuite()
STATE = None


def sh(*cmd, check=True):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and res.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stdout}{res.stderr}")
    return res


def virsh(*args, check=True):
    return sh("virsh", "-c", URI, *args, check=check)


def private_libvirt(state):
    """This process's mount namespace gets libvirt directories of its own."""
    conf = os.path.join(state, "etc")
    shutil.copytree("/etc/libvirt", conf)
    with open(os.path.join(conf, "qemu.conf"), "w") as f:
        f.write('user = "root"\ngroup = "root"\nsecurity_driver = "none"\n'
                # cgroup v1 real-time limits make the "cpu" controller fail.
                'cgroup_controllers = [ "cpuset", "memory", "devices", '
                '"blkio", "cpuacct" ]\n')
    sh("mount", "--make-rprivate", "/")
    sh("mount", "--bind", conf, "/etc/libvirt")
    os.makedirs("/run/libvirt", exist_ok=True)
    sh("mount", "-t", "tmpfs", "tmpfs", "/run/libvirt")
    for d in ("lib", "log", "cache"):
        mine = os.path.join(state, d)
        os.makedirs(mine)
        os.makedirs(f"/var/{d}/libvirt", exist_ok=True)
        sh("mount", "--bind", mine, f"/var/{d}/libvirt")
    sh("virtlogd", "-d", "-p", os.path.join(state, "virtlogd.pid"))
    sh("libvirtd", "-d", "-p", os.path.join(state, "libvirtd.pid"))
    deadline = time.monotonic() + 30
    while virsh("version", check=False).returncode:
        assert time.monotonic() < deadline, "libvirtd did not come up"
        time.sleep(0.2)


def recover():
    """A domain that died without QEMU's exit leaves its host changes."""
    sh(hostlib.RECOVER, check=False)


def stop_libvirt(state, cgroups_before):
    for name in ("libvirtd", "virtlogd"):
        pidfile = os.path.join(state, f"{name}.pid")
        if not os.path.exists(pidfile):
            continue
        with open(pidfile) as f:
            pid = int(f.read().strip())
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    # libvirt's partition cgroups ("machine"), empty once its VMs are gone
    for d in sorted(set(cgroup_dirs()) - cgroups_before, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


def cgroup_dirs():
    out = []
    for top in glob.glob("/sys/fs/cgroup/*/machine*"):
        for d, _, _ in os.walk(top):
            out.append(d)
    return out


def accel(extra=""):
    return f"hpkvm,host-cpus=1,housekeeping-cpus=0,dynamic-isolation=on{extra}"


def define(name, vcpupin, emulatorpin):
    path = os.path.join(STATE, f"{name}.xml")
    with open(path, "w") as f:
        f.write(domain_xml(name, emulator=QEMU, kernel=GUEST,
                           serial=f"{STATE}/{name}.serial", vcpupin=vcpupin,
                           emulatorpin=emulatorpin, accel=accel()))
    virsh("define", path)


def qmp(name, cmd):
    out = virsh("qemu-monitor-command", name, json.dumps({"execute": cmd}))
    return json.loads(out.stdout)["return"]


@tests.case
def a_domain_pinned_as_host_cpus_starts_under_hpkvm():
    before = hostlib.real_snapshot()
    define("hpkvm-agree", "1", "0")
    try:
        virsh("start", "hpkvm-agree")
        info = qmp("hpkvm-agree", "query-hpkvm")
        kvm = qmp("hpkvm-agree", "query-kvm")
        pid = int(hostlib.read_text("/run/libvirt/qemu/hpkvm-agree.pid"))
        threads = hostlib.thread_affinity(pid)
    finally:
        virsh("destroy", "hpkvm-agree", check=False)
        virsh("undefine", "hpkvm-agree", check=False)
    assert info["enabled"] and kvm["enabled"], (info, kvm)
    assert info["host-cpus"] == "1" and info["isolation"]["active"], info
    (place,) = info["placement"]
    assert threads[place["thread-id"]][1] == "1", threads
    # KVM's own worker (kvm-nx-lpage-recovery) is started by the vCPU
    # thread at its first KVM_RUN, inside libvirt's cpuset cgroup of that
    # vCPU, which confines it to the vCPU's core: hpkvm moves it to the
    # housekeeping cores a second after the start only outside such a
    # cgroup.
    others = {t: a for t, (c, a) in threads.items()
              if t != place["thread-id"] and not c.startswith("kvm-")}
    assert all(a == "0" for a in others.values()), threads
    time.sleep(0.5)
    diff = host_diff(before)
    assert not diff, "not restored: " + "; ".join(diff)


def host_diff(before):
    """Differences but libvirt's own partition cgroups ("machine")."""
    return [d for d in hostlib.real_diff(before, hostlib.real_snapshot())
            if "/machine" not in d.split(":")[0]]


def stopped(name, vcpupin, emulatorpin, want):
    """A domain pinned against host-cpus= starts, but its VM stops before
    the guest runs (internal-error), the message naming the fix in the
    domain's log; QEMU stays up for libvirt until the domain is
    destroyed, and the host is as before."""
    before = hostlib.real_snapshot()
    define(name, vcpupin, emulatorpin)
    try:
        virsh("start", name)
        deadline = time.monotonic() + 10
        while True:
            status = qmp(name, "query-status")
            state = virsh("domstate", name).stdout.strip()
            if (status["status"], state) == ("internal-error", "paused") \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        serial = hostlib.read_text(f"{STATE}/{name}.serial") or ""
    finally:
        virsh("destroy", name, check=False)
        virsh("undefine", name, check=False)
    assert not status["running"] and status["status"] == "internal-error" \
        and state == "paused", (status, state)
    # Our guest prints as soon as it runs: it never did.
    assert serial == "", serial
    log = hostlib.read_text(f"/var/log/libvirt/qemu/{name}.log") or ""
    assert want in log, log
    time.sleep(0.5)
    diff = host_diff(before)
    assert not diff, "not restored: " + "; ".join(diff)


@tests.case
def a_vcpupin_that_contradicts_host_cpus_stops_the_vm():
    stopped("hpkvm-vcpupin", "0", "0",
            "vCPU 0 was pinned to host cores 0 since it started (by "
            "libvirt's <vcpupin>?), but host-cpus= gives it core 1")


@tests.case
def an_emulatorpin_only_on_a_leased_core_stops_the_vm():
    stopped("hpkvm-emulatorpin", "1", "1",
            "is confined to host cores 1 (by libvirt's <emulatorpin>?), "
            "which include cores leased for vCPUs (1) and none of "
            "housekeeping-cpus=")


def inner(state):
    global STATE
    STATE = state
    before = set(cgroup_dirs())
    # The operator's qemu-hpkvm-helper, or one for the test's duration:
    # QEMU asks it for host-cpus=.
    hostlib.helper_for("/")
    private_libvirt(state)
    try:
        return tests.run()
    finally:
        recover()
        stop_libvirt(state, before)
        hostlib.stop_helpers()


def unusable():
    if os.geteuid() != 0:
        return "needs root (libvirtd, mount namespaces)"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "needs /dev/kvm"
    if os.cpu_count() < 2:
        return "needs 2 host cores"
    missing = [p for p in ("libvirtd", "virtlogd", "virsh", "unshare")
               if not shutil.which(p)]
    if missing:
        return (f"{', '.join(missing)} not installed (scripts/hpkvm/"
                f"install-deps.sh installs libvirt from bookworm-backports)")
    return None


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--inner":
        return inner(sys.argv[2])
    why = unusable()
    if why:
        return tests.run(why)
    with tempfile.TemporaryDirectory(prefix="hpkvm-libvirt-") as state:
        return subprocess.call(["unshare", "-m", sys.executable,
                                os.path.realpath(__file__), "--inner", state],
                               timeout=600)


if __name__ == "__main__":
    sys.exit(main())
