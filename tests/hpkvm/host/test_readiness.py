#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""qemu-hpkvm-check on fake host trees: a host ready for hpkvm passes,
and each problem of the troubleshooting list is found with its fix.
Prints TAP."""

import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402

CHECK = os.path.join(hostlib.BUILD, "tools/hpkvm/qemu-hpkvm-check")
tests = hostlib.TapSuite()


def link(root, path, target):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(target, full)


def ready_host(root):
    """Everything hpkvm wants, for cores 2-3."""
    w = hostlib.write
    for node in ("/dev/kvm", "/dev/vhost-net", "/dev/net/tun",
                 "/dev/vfio/7"):
        w(root, node, "")
    os.makedirs(os.path.join(root, "sys/class/iommu/dmar0"))
    w(root, "/proc/interrupts", " 40: 0 0 IR-PCI-MSI 524288-edge eth1\n")
    w(root, "/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n")
    cpu = "/sys/devices/system/cpu"
    w(root, f"{cpu}/online", "0-3\n")
    w(root, f"{cpu}/isolated", "2-3\n")
    w(root, f"{cpu}/nohz_full", "2-3\n")
    w(root, "/sys/module/kvm/parameters/hpkvm_cores", "0-3\n")
    for n in range(4):
        w(root, f"{cpu}/cpu{n}/cpufreq/scaling_governor", "performance\n")
    w(root, "/sys/devices/system/clocksource/clocksource0/"
      "current_clocksource", "tsc\n")
    w(root, "/sys/devices/system/node/node0/cpulist", "0-3\n")
    w(root, "/sys/devices/system/node/node1/cpulist", "4-7\n")
    w(root, "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
      "512\n")
    os.makedirs(os.path.join(root, "sys/class/net/eth1/device/msi_irqs/40"))
    w(root, "/proc/irq/40/smp_affinity_list", "0-1\n")
    dev = "/sys/bus/pci/devices/"
    w(root, dev + "0000:01:00.0/sriov_numvfs", "1\n")
    link(root, dev + "0000:01:00.0/virtfn0", "../0000:01:10.0")
    link(root, dev + "0000:01:10.0/physfn", "../0000:01:00.0")
    link(root, dev + "0000:01:10.0/driver", "../../drivers/vfio-pci")
    link(root, dev + "0000:01:10.0/iommu_group",
         "../../../kernel/iommu_groups/7")
    os.makedirs(os.path.join(root, "sys/kernel/iommu_groups/7/devices/"
                             "0000:01:10.0"))
    os.makedirs(os.path.join(root, "run"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(root, "run/vs0"))
    sock.listen()
    # What /proc/net/unix shows for a listening socket (__SO_ACCEPTCON).
    w(root, "/proc/net/unix", "Num       RefCount Protocol Flags    Type "
      "St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 "
      "01 31337 /run/vs0\n")
    return sock


def check_with_helper(root, sock, *args):
    """check() with a helper serving the tree, and its vhost-user peer
    (sock) closed after."""
    helper = hostlib.Helper(root)
    try:
        return check(root, *args)
    finally:
        helper.stop()
        sock.close()


def check(root, *args):
    res = subprocess.run([CHECK, f"--host-root={root}", "--json", *args],
                         capture_output=True, timeout=30)
    out = json.loads(res.stdout)
    by_id = {}
    for c in out["checks"]:
        by_id.setdefault(c["id"], []).append(c)
    return res.returncode, out["ready"], by_id


@tests.case
def a_ready_host_passes():
    with tempfile.TemporaryDirectory() as root:
        rc, ready, by = check_with_helper(root, ready_host(root),
                                          "--host-cpus=2-3",
                                          "--vhost-user-socket=/run/vs0")
        bad = {i: c for i, cs in by.items() for c in cs
               if c["verdict"] not in ("ok", "info")}
        assert rc == 0 and ready and not bad, (rc, bad)
        assert by["sriov"][0]["message"].startswith(
            "PF 0000:01:00.0: VF 0000:01:10.0 on vfio-pci"), by["sriov"]
        assert by["clocksource"][0]["verdict"] == "ok", by["clocksource"]
        assert by["host-cpus"][0]["message"] == \
            "cores 2-3 are online; 0-1 stay the host's", by["host-cpus"]
        assert by["vhost-user"][0]["message"] == \
            "a peer listens on /run/vs0", by["vhost-user"]
        # The kernel's extension needs ioctls: only on the real host.
        assert by["hpkvm-kernel"][0]["verdict"] == "info"
        assert by["kvm-cores"][0]["message"] == \
            "the kernel binds vCPUs to the cores (kvm.hpkvm_cores: 0-3)", \
            by["kvm-cores"]
        assert by["kvm-cores"][0]["verdict"] == "ok", by["kvm-cores"]


@tests.case
def an_operator_without_root_is_told_to_check_as_root():
    """/run/hpkvm is root's and 0700, as hpkvm requires: another user
    cannot read the leases, and is told so rather than warned."""
    with tempfile.TemporaryDirectory() as root:
        os.chmod(root, 0o755)
        sock = ready_host(root)
        os.makedirs(os.path.join(root, "run/hpkvm/leases"), mode=0o700)
        os.chmod(os.path.join(root, "run/hpkvm"), 0o700)
        res = subprocess.run([CHECK, f"--host-root={root}", "--json",
                              "--host-cpus=2-3"], capture_output=True,
                             text=True, timeout=30,
                             preexec_fn=lambda: os.setuid(65534))
        sock.close()
        by = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
        assert by["host-changes"]["verdict"] == "info", by["host-changes"]
        assert "as root" in by["host-changes"]["fix"], by["host-changes"]


@tests.case
def looking_changes_nothing_and_any_path_makes_valid_json():
    """A state directory without leases stays so (the check creates
    nothing), and a socket path that is not ASCII, or not UTF-8 at all,
    still gives valid JSON, the path in it."""
    with tempfile.TemporaryDirectory() as root:
        sock = ready_host(root)
        sock.close()
        state = os.path.join(root, "run/hpkvm")
        os.makedirs(state, mode=0o700)
        _, _, by = check(root, "--host-cpus=2-3",
                         "--vhost-user-socket=/run/v\u00e9",
                         os.fsencode("--vhost-user-socket=/run/v") + b"\xff")
        assert os.listdir(state) == [], os.listdir(state)
        assert by["host-changes"][0]["verdict"] == "ok", by["host-changes"]
        messages = [c["message"] for c in by["vhost-user"]]
        assert messages == ["/run/v\u00e9 is not a socket",
                            "/run/v\ufffd is not a socket"], messages


@tests.case
def cores_that_are_offline_or_all_of_them_are_refused():
    """What QEMU would refuse, the check fails: a core that is not
    online, and host-cpus= leaving the host no core."""
    with tempfile.TemporaryDirectory() as root:
        ready_host(root).close()
        rc, ready, by = check(root, "--host-cpus=3-5")
        assert rc == 1 and not ready, rc
        expect(by, "host-cpus", "fail", "name online cores (online: 0-3)")
        assert by["host-cpus"][0]["message"] == "cores 4-5 are not online"
        rc, ready, by = check(root, "--host-cpus=0-3")
        assert rc == 1 and not ready, rc
        expect(by, "host-cpus", "fail", "leave at least one online core")


def expect(by, cid, verdict, fix_part):
    for c in by.get(cid, []):
        if c["verdict"] == verdict and fix_part in c.get("fix", ""):
            return
    raise AssertionError(f"{cid}: want {verdict} with '{fix_part}': "
                         f"{by.get(cid)}")


@tests.case
def each_problem_is_found_with_its_fix():
    with tempfile.TemporaryDirectory() as root:
        sock = ready_host(root)
        sock.close()
        r = lambda p: os.path.join(root, p.lstrip("/"))  # noqa: E731
        os.unlink(r("/dev/kvm"))
        os.unlink(r("/dev/vhost-net"))
        os.unlink(r("/run/vs0"))                # the peer is gone
        # Another peer exited and left its socket file behind.
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(r("/run/vs1"))
        stale.close()
        os.rmdir(r("/sys/class/iommu/dmar0"))
        hostlib.write(root, "/proc/interrupts", " 40: 0 0 PCI-MSI eth1\n")
        hostlib.write(root, "/sys/devices/system/cpu/nohz_full", "(null)\n")
        hostlib.write(root, "/proc/irq/40/smp_affinity_list", "0-3\n")
        hostlib.write(root, "/sys/kernel/mm/hugepages/hugepages-2048kB/"
                      "nr_hugepages", "0\n")
        hostlib.write(root, "/sys/devices/system/cpu/cpu3/cpufreq/"
                      "scaling_governor", "powersave\n")
        hostlib.write(root, "/sys/devices/system/clocksource/clocksource0/"
                      "current_clocksource", "hpet\n")
        # A virtio NIC: its IRQs are its PCI parent's, on the cores.
        virtio = "/sys/devices/pci0000:00/0000:00:03.0"
        os.makedirs(r(virtio + "/virtio0"))
        os.makedirs(r(virtio + "/msi_irqs/41"))
        link(root, "/sys/class/net/ens3/device", r(virtio + "/virtio0"))
        hostlib.write(root, "/proc/irq/41/smp_affinity_list", "3\n")
        os.unlink(r("/sys/bus/pci/devices/0000:01:10.0/driver"))
        link(root, "/sys/bus/pci/devices/0000:01:10.0/driver",
             "../../drivers/igbvf")
        hostlib.write(root, "/proc/mounts", "proc /proc proc rw 0 0\n")
        hostlib.write(root, "/run/hpkvm/host.journal", "W\t/x\t1\n")
        os.chmod(r("/run/hpkvm"), 0o700)
        hostlib.write(root, "/etc/qemu/hpkvm-helper.conf", "let 3 user 0\n")
        rc, ready, by = check(root, "--host-cpus=3-4",
                              "--vhost-user-socket=/run/vs0",
                              "--vhost-user-socket=/run/vs1")
        assert rc == 1 and not ready, rc
        expect(by, "kvm", "fail", "load kvm_intel or kvm_amd")
        expect(by, "vhost-user", "fail", "start the vhost-user peer")
        expect(by, "vhost-user", "warn", "leaves its socket file behind")
        expect(by, "iommu", "warn", "intel_iommu=on")
        expect(by, "irq-remapping", "warn", "intremap=on")
        expect(by, "isolated-cores", "warn", "isolcpus=3-4 nohz_full=3-4")
        expect(by, "kvm-cores", "warn", "add 4 to kvm.hpkvm_cores")
        assert "exclusive-cores=on does not start" in \
            by["kvm-cores"][0]["message"], by["kvm-cores"]
        expect(by, "nic-irq-affinity", "warn",
               "/proc/irq/40/smp_affinity_list")
        expect(by, "nic-irq-affinity", "warn",
               "/proc/irq/41/smp_affinity_list")
        expect(by, "host-cpus", "fail", "name online cores")
        expect(by, "hugepages", "warn", "nr_hugepages")
        expect(by, "cpufreq-governor", "warn",
               "echo performance > /sys/devices/system/cpu/cpu3/cpufreq")
        expect(by, "clocksource", "warn", "tsc=reliable")
        assert "keeps time with hpet" in by["clocksource"][0]["message"]
        expect(by, "vhost-net", "warn", "modprobe vhost_net")
        expect(by, "sriov", "warn", "bind them to vfio-pci")
        assert "bound to igbvf, not vfio-pci" in by["sriov"][0]["message"]
        expect(by, "numa", "warn", "within one NUMA node")
        expect(by, "cgroup-cpuset", "warn", "cgroup v2")
        expect(by, "host-changes", "warn", "qemu-hpkvm-recover")
        expect(by, "helper", "fail",
               "systemctl enable --now qemu-hpkvm-helper.socket")
        expect(by, "helper-policy", "fail", "the helper does not start")
        assert "line 1: not a rule" in by["helper-policy"][0]["message"]

        # A state directory others may change is not trusted, and said so.
        os.chmod(r("/run/hpkvm"), 0o755)
        _, _, by = check(root, "--host-cpus=3-4")
        expect(by, "host-changes", "warn", "remove it while no hpkvm VM runs")
        assert "mode 0755" in by["host-changes"][0]["message"]
        os.chmod(r("/run/hpkvm"), 0o700)

        human = subprocess.run([CHECK, f"--host-root={root}"],
                               capture_output=True, text=True, timeout=30)
        assert human.returncode == 1
        assert "[fail] kvm: no usable /dev/kvm" in human.stdout
        assert "NOT ready for hpkvm" in human.stdout, human.stdout


def ready_arm64_host(root):
    """ready_host() as an arm64 host has it: SMMUv3, MSIs through the
    GIC's ITS, GICv4 vLPIs enabled, the architected counter."""
    sock = ready_host(root)
    w = hostlib.write
    os.rmdir(os.path.join(root, "sys/class/iommu/dmar0"))
    os.makedirs(os.path.join(root, "sys/class/iommu/smmu3.0x0000000009050000"))
    w(root, "/proc/interrupts", " 40: 0 0 ITS-MSI 524288 Edge eth1\n")
    w(root, "/proc/cmdline", "console=ttyAMA0 kvm-arm.vgic_v4_enable=1\n")
    w(root, "/sys/devices/system/clocksource/clocksource0/"
      "current_clocksource", "arch_sys_counter\n")
    return sock


@tests.case
def an_arm64_host_gets_arm64s_advice():
    """--arch=aarch64 (this machine's own architecture otherwise): the
    SMMU, the GIC's ITS and GICv4 vLPIs, the architected counter, EL2;
    none of x86's (VT-d, interrupt remapping, the TSC)."""
    with tempfile.TemporaryDirectory() as root:
        rc, ready, by = check_with_helper(root, ready_arm64_host(root),
                                          "--arch=aarch64",
                                          "--host-cpus=2-3",
                                          "--vhost-user-socket=/run/vs0")
        bad = {i: c for i, cs in by.items() for c in cs
               if c["verdict"] not in ("ok", "info")}
        assert rc == 0 and ready and not bad, (rc, bad)
        for cid in ("gic-its", "gicv4", "clocksource", "iommu"):
            assert by[cid][0]["verdict"] == "ok", by[cid]
        assert "irq-remapping" not in by, by["irq-remapping"]

        r = lambda p: os.path.join(root, p.lstrip("/"))  # noqa: E731
        os.unlink(r("/dev/kvm"))
        os.rmdir(r("/sys/class/iommu/smmu3.0x0000000009050000"))
        hostlib.write(root, "/proc/interrupts", " 40: 0 0 GICv3 40 eth1\n")
        hostlib.write(root, "/proc/cmdline", "console=ttyAMA0\n")
        hostlib.write(root, "/sys/devices/system/clocksource/clocksource0/"
                      "current_clocksource", "jiffies\n")
        rc, ready, by = check(root, "--arch=aarch64", "--host-cpus=2-3")
        assert rc == 1 and not ready, rc
        expect(by, "kvm", "fail", "enter the kernel at EL2")
        expect(by, "iommu", "warn", "SMMUv3")
        expect(by, "gic-its", "warn", "ITS")
        expect(by, "gicv4", "info", "kvm-arm.vgic_v4_enable=1")
        expect(by, "clocksource", "warn", "architected timer")
        assert by["kvm-cores"][0]["verdict"] == "ok", by["kvm-cores"]
        # The reference KVM as it boots: no core opted in; how to.
        hostlib.write(root, "/sys/module/kvm/parameters/hpkvm_cores", "\n")
        _, _, by = check(root, "--arch=aarch64")
        expect(by, "kvm-cores", "info", "name them in kvm.hpkvm_cores")
        assert "cores none" in by["kvm-cores"][0]["message"], by
        # Another kernel than the reference KVM: its policy, not ours.
        os.unlink(r("/sys/module/kvm/parameters/hpkvm_cores"))
        _, _, by = check(root, "--arch=aarch64", "--host-cpus=2-3")
        expect(by, "kvm-cores", "info", "")
        assert "not hpkvm's reference KVM" in by["kvm-cores"][0]["message"]
        text = json.dumps(by)
        for x86 in ("intel_iommu", "intremap", "tsc=reliable", "kvm_amd"):
            assert x86 not in text, (x86, by)


@tests.case
def bad_options_are_refused():
    res = subprocess.run([CHECK, "--host-cpus=5-2"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2 and "backwards" in res.stderr, res.stderr
    res = subprocess.run([CHECK, "--frobnicate"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2 and "--frobnicate" in res.stderr, res.stderr
    res = subprocess.run([CHECK, "--arch=sparc"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 2 and "x86_64 or aarch64" in res.stderr, \
        res.stderr


def main():
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())
