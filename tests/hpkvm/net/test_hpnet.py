#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""-netdev hpnet on this machine, for real: /dev/net/tun works, there is no
/dev/vhost-net, no VFIO, no SR-IOV.  Forced backends that are missing
fail naming what is missing; needs fall back to what is there; QEMU's own
virtio-net sends the test guest's frames into a tap in a network
namespace the test creates; vhost-user to QEMU's vhost-user-bridge
completes its handshake and carries the frames to a UDP port on
loopback; so does DPDK's testpmd where installed.  Prints TAP."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "host"))

import hostlib  # noqa: E402
from hostlib import Vm  # noqa: E402

BRIDGE = os.path.join(hostlib.BUILD, "tests/hpkvm/net/hpkvm-vhost-user-bridge")
CAPTURE = os.path.join(HERE, "capture.py")
FRAMES = 8
tests = hostlib.TapSuite()


def nic(netdev, extra=""):
    return ["-netdev", f"hpnet,id=n0,{netdev}",
            "-device", f"virtio-net-pci,netdev=n0{extra}"]


def refused(tmp, netdev, want, memory=("-m", "32")):
    status, err = hostlib.run_error("kvm", tmp, extra=nic(netdev),
                                    memory=memory)
    assert status not in (0, None) and want in err, \
        f"{netdev}: status {status}, stderr {err!r}"


SHARED = ("-m", "64", "-object",
          "memory-backend-memfd,id=mem,size=64M,share=on")


@tests.case
def forced_backends_that_are_missing_are_refused():
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "fake")
        os.makedirs(os.path.join(fake, "dev"))
        sock = os.path.join(tmp, "none.sock")
        refused(tmp, "backend=vhost-net", "hpnet n0: backend=vhost-net is "
                "not available: /dev/vhost-net: No such file or directory "
                "(load the vhost_net module)")
        refused(tmp, "backend=sriov", "hpnet n0: backend=sriov is not "
                "available: not configured: give vf= or pf=")
        refused(tmp, "backend=sriov,pf=eth9", "needs standby=ID")
        refused(tmp, f"backend=vhost-user,vhost-user-socket={sock}",
                f"{sock} is not a socket: start the vhost-user peer first",
                memory=SHARED + ("-machine", "memory-backend=mem"))
        refused(tmp, "vf=0000:01:10.0,pf=eth1", "give vf= or pf=, not both")
        refused(tmp, "vhost-user-socket=a,vhost-user-chardev=b",
                "give vhost-user-socket= or vhost-user-chardev=, not both")
        refused(tmp, "need=fast", "need")
        refused(tmp, "backend=tap", "backend")
        refused(tmp, f"need=compatibility,x-root={fake}", "hpnet n0: no "
                "backend for need=compatibility is available: virtio-net: "
                "/dev/net/tun: No such file or directory; vhost-net: "
                "/dev/net/tun")


class Netns:
    """A network namespace with a persistent tap that is up."""

    def __init__(self, tap="hptap0"):
        self.name = f"hpnet-test-{os.getpid()}"
        self.tap = tap
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.run("ip", "tuntap", "add", "dev", tap, "mode", "tap")
        self.run("ip", "link", "set", tap, "up")

    def run(self, *cmd):
        subprocess.run(["ip", "netns", "exec", self.name, *cmd], check=True)

    def wrap(self):
        return ("ip", "netns", "exec", self.name)

    def close(self):
        subprocess.run(["ip", "netns", "delete", self.name])


def start_capture(wrap, kind, where):
    cap = subprocess.Popen([*wrap, sys.executable, CAPTURE, kind, str(where),
                            "30", str(FRAMES)], stdout=subprocess.PIPE,
                           text=True)
    assert cap.stdout.readline().strip() == "ready"
    return cap


def candidates(info):
    return [(c["backend"], c["available"], c["taken"])
            for c in info["candidates"]]


@tests.case
def each_need_falls_back_to_userspace_virtio_net_here():
    """No /dev/vhost-net, no vhost-user peer, no VF: every need ends on
    QEMU's own virtio-net, each backend before it passed over with why."""
    want = {
        "throughput": [("vhost-net", False, False),
                       ("vhost-user", False, False),
                       ("virtio-net", True, True)],
        "latency": [("vhost-user", False, False),
                    ("vhost-net", False, False),
                    ("virtio-net", True, True)],
        "compatibility": [("virtio-net", True, True),
                          ("vhost-net", False, False)],
        "isolation": [("sriov", False, False), ("vhost-user", False, False),
                      ("vhost-net", False, False),
                      ("virtio-net", True, True)],
    }
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for need, cands in want.items():
                vm = Vm("kvm", tmp, name=need, wrap=ns.wrap(),
                        extra=nic(f"need={need},ifname={ns.tap}"))
                try:
                    vm.connect()
                    (info,) = vm.qmp("query-hpnet")
                    text = vm.hmp("info hpnet")
                finally:
                    vm.quit()
                assert info["backend"] == "virtio-net" and \
                    info["need"] == need and not info["forced"], info
                assert candidates(info) == cands, (need, info)
                assert "vhost-started" not in info, info
                reasons = {c["backend"]: c["reason"]
                           for c in info["candidates"]}
                assert "/dev/vhost-net: No such file" in \
                    reasons["vhost-net"], reasons
                assert f"n0: need {need}, backend virtio-net" in text, text
    finally:
        ns.close()


@tests.case
def userspace_virtio_net_frames_reach_a_tap_in_a_namespace():
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cap = start_capture(ns.wrap(), "iface", ns.tap)
            vm = Vm("kvm", tmp, guest=f"vnet={FRAMES} hold", wrap=ns.wrap(),
                    extra=nic(f"need=compatibility,ifname={ns.tap}"))
            try:
                vm.connect()
                vm.qmp("cont")
                assert vm.wait_serial(f"vnet: sent {FRAMES} frames"), \
                    vm.serial_text()
                (info,) = vm.qmp("query-hpnet")
            finally:
                vm.quit()
            out = cap.communicate(timeout=40)[0]
            assert info["backend"] == "virtio-net", info
            assert out.strip() == f"frames {FRAMES}", out
    finally:
        ns.close()


def start_bridge(sock, port_l, port_r):
    if os.path.exists(sock):
        os.unlink(sock)
    bridge = subprocess.Popen([BRIDGE, "-u", sock,
                               "-l", f"127.0.0.1:{port_l}",
                               "-r", f"127.0.0.1:{port_r}"],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not os.path.exists(sock):
        assert time.monotonic() < deadline and bridge.poll() is None, \
            "no bridge socket"
        time.sleep(0.05)
    return bridge


@tests.case
def vhost_user_to_qemus_vhost_user_bridge_carries_frames():
    if not os.path.exists(BRIDGE):
        raise AssertionError(f"{BRIDGE} not built")
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "vubr.sock")
        port_l, port_r = 40000 + os.getpid() % 1000, 41000 + os.getpid() % 1000
        # A refused QEMU ends the bridge's only session: one bridge each.
        bridge = start_bridge(sock, port_l, port_r)
        try:
            # Guest RAM the peer cannot map: refused with the fix.
            refused(tmp, f"need=latency,vhost-user-socket={sock}",
                    "hpnet n0: vhost-user: guest RAM is not shared with "
                    "the peer: add -object memory-backend-memfd")
        finally:
            bridge.terminate()
            bridge.wait(10)
        cap = start_capture((), "udp", port_r)
        bridge = start_bridge(sock, port_l, port_r)
        try:
            vm = Vm("kvm", tmp, guest=f"vnet={FRAMES} hold",
                    memory=SHARED, machine="pc,memory-backend=mem",
                    extra=nic(f"need=latency,vhost-user-socket={sock}"))
            try:
                vm.connect()
                (before,) = vm.qmp("query-hpnet")
                vm.qmp("cont")
                assert vm.wait_serial(f"vnet: sent {FRAMES} frames"), \
                    vm.serial_text()
                (after,) = vm.qmp("query-hpnet")
            finally:
                vm.quit()
        finally:
            bridge.terminate()
            bridge.wait(10)
        out = cap.communicate(timeout=40)[0]
        assert after["backend"] == "vhost-user", after
        assert candidates(after)[0] == ("vhost-user", True, True), after
        assert before.get("vhost-started") is False, before
        assert after.get("vhost-started") is True, after
        assert out.strip() == f"frames {FRAMES}", out


@tests.case
def vhost_user_to_dpdk_testpmd_carries_frames():
    """DPDK's testpmd (vhost PMD, no hugepages) as a second, real peer."""
    testpmd = shutil.which("dpdk-testpmd")
    if not testpmd:
        return "SKIP dpdk-testpmd not installed (Debian package dpdk-dev)"
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "testpmd.sock")
        log = os.path.join(tmp, "testpmd.log")
        with open(log, "w") as out:
            pmd = subprocess.Popen(
                [testpmd, "--no-huge", "-m", "1024", "--no-pci", "-l", "0-1",
                 f"--file-prefix=hpnet{os.getpid()}",
                 "--vdev", f"net_vhost0,iface={sock}", "--",
                 "--total-num-mbufs=2048", "--forward-mode=rxonly",
                 "--stats-period", "1"], stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(sock):
                assert time.monotonic() < deadline and pmd.poll() is None, \
                    "testpmd did not start: " + hostlib.read_text(log)
                time.sleep(0.1)
            vm = Vm("kvm", tmp, guest=f"vnet={FRAMES} hold",
                    memory=SHARED, machine="pc,memory-backend=mem",
                    extra=nic(f"need=latency,vhost-user-socket={sock}"))
            try:
                vm.connect()
                vm.qmp("cont")
                assert vm.wait_serial(f"vnet: sent {FRAMES} frames"), \
                    vm.serial_text()
                (info,) = vm.qmp("query-hpnet")
                time.sleep(2)           # a stats period
            finally:
                vm.quit()
        finally:
            pmd.terminate()
            pmd.wait(10)
        rx = [int(n) for n in re.findall(r"RX-packets: (\d+)",
                                          hostlib.read_text(log))]
        assert info["backend"] == "vhost-user", info
        assert info.get("vhost-started") is True, info
        assert rx and max(rx) >= FRAMES, hostlib.read_text(log)[-800:]


def main():
    usable = os.geteuid() == 0 and os.access("/dev/kvm", os.R_OK | os.W_OK)
    return tests.run(None if usable else "needs root (network namespaces, "
                     "taps) and /dev/kvm")


if __name__ == "__main__":
    sys.exit(main())
