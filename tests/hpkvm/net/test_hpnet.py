#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""-netdev hpnet on this machine, for real, whatever it has (/dev/net/tun
is needed; /dev/vhost-net may be there or not; no VF is used): forced
backends that are missing fail naming what is missing; each need takes
the first backend the host has; QEMU's own virtio-net sends the test
guest's frames into a tap in a network namespace the test creates, also
through a tap passed as fd= (as libvirt passes it); netdev_add and
netdev_del at run time; a vhost-user peer that never answers is given
up on; vhost-user to QEMU's vhost-user-bridge completes
its handshake and carries the frames to a UDP port on loopback; so does
DPDK's testpmd where installed.  QEMU runs on KVM where the kernel has
it, else on TCG: hpnet does not depend on the accelerator.  Prints
TAP."""

import ctypes
import fcntl
import os
import re
import struct
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "host"))

import hostlib  # noqa: E402
from hostlib import Vm  # noqa: E402

BRIDGE = os.path.join(hostlib.BUILD, "tests/hpkvm/net/hpkvm-vhost-user-bridge")
CAPTURE = os.path.join(HERE, "capture.py")
FRAMES = 8
# A /dev/kvm that is there but unusable fails the tests, as it should.
ACCEL = "tcg" if hostlib.no_kvm() else "kvm"
tests = hostlib.TapSuite()


def have_vhost_net():
    try:
        os.close(os.open("/dev/vhost-net", os.O_RDWR))
        return True
    except OSError:
        return False


HAVE_VHOST_NET = have_vhost_net()


def nic(netdev, extra=""):
    return ["-netdev", f"hpnet,id=n0,{netdev}",
            "-device", f"virtio-net-pci,netdev=n0{extra}"]


def refused(tmp, netdev, want, memory=("-m", "32")):
    status, err = hostlib.run_error(ACCEL, tmp, extra=nic(netdev),
                                    memory=memory)
    assert status not in (0, None) and want in err, \
        f"{netdev}: status {status}, stderr {err!r}"


SHARED = ("-m", "64", "-object",
          "memory-backend-memfd,id=mem,size=64M,share=on")
# Guest RAM as two -numa nodes: both shared, or only the first.
NUMA_SHARED = ("-m", "64",
               "-object", "memory-backend-memfd,id=m0,size=32M,share=on",
               "-numa", "node,memdev=m0",
               "-object", "memory-backend-memfd,id=m1,size=32M,share=on",
               "-numa", "node,memdev=m1")
NUMA_HALF_SHARED = NUMA_SHARED[:-4] + (
    "-object", "memory-backend-ram,id=m1,size=32M", "-numa", "node,memdev=m1")


@tests.case
def forced_backends_that_are_missing_are_refused():
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "fake")
        os.makedirs(os.path.join(fake, "dev"))
        # A tree with a tap node that opens and no /dev/vhost-net.
        tun_only = os.path.join(tmp, "tun-only")
        os.makedirs(os.path.join(tun_only, "dev/net"))
        open(os.path.join(tun_only, "dev/net/tun"), "w").close()
        sock = os.path.join(tmp, "none.sock")
        refused(tmp, f"backend=vhost-net,x-root={tun_only}", "hpnet n0: "
                "backend=vhost-net is not available: /dev/vhost-net: No "
                "such file or directory (load the vhost_net module)")
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
        # What becomes a sysfs path names a device, never a path.
        refused(tmp, "vf=../../../../etc", "hpnet n0: vf=../../../../etc "
                "is not a PCI address")
        refused(tmp, "pf=../eth0", "hpnet n0: pf=../eth0 is neither a "
                "network interface nor a PCI address")
        refused(tmp, "fd=2", "hpnet n0: fd=2 is QEMU's standard error, "
                "not a tap")
        refused(tmp, "fd=5,vhostfd=1", "hpnet n0: vhostfd=1 is QEMU's "
                "standard output, not /dev/vhost-net")


@tests.case
def netdev_help_lists_hpnet():
    out = subprocess.run([hostlib.QEMU, "-netdev", "help"],
                         capture_output=True, text=True, timeout=30).stdout
    assert "hpnet" in out.split(), out


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


def send_frames(vm, settle=0):
    """Let the paused vnet guest send its frames: hpnet's report before
    and after (QEMU quits whatever happens, settle seconds after)."""
    try:
        vm.connect()
        (before,) = vm.qmp("query-hpnet")
        vm.qmp("cont")
        assert vm.wait_serial(f"vnet: sent {FRAMES} frames"), \
            vm.serial_text()
        (after,) = vm.qmp("query-hpnet")
        time.sleep(settle)
    finally:
        vm.quit()
    return before, after


def candidates(info):
    return [(c["backend"], c["available"], c["taken"])
            for c in info["candidates"]]


@tests.case
def each_need_takes_the_first_backend_this_host_has():
    """No vhost-user peer, no VF, /dev/vhost-net as this host has it: each
    need takes the first backend of its order that is there, each backend
    before it passed over with why."""
    order = {
        "throughput": ["vhost-net", "vhost-user", "virtio-net"],
        "latency": ["vhost-user", "vhost-net", "virtio-net"],
        "compatibility": ["virtio-net", "vhost-net"],
        "isolation": ["sriov", "vhost-user", "vhost-net", "virtio-net"],
    }
    has = {"sriov": False, "vhost-user": False, "virtio-net": True,
           "vhost-net": HAVE_VHOST_NET}
    want = {}
    for need, backends in order.items():
        taken = next(b for b in backends if has[b])
        want[need] = [(b, has[b], b == taken) for b in backends]
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for need, cands in want.items():
                vm = Vm(ACCEL, tmp, name=need, wrap=ns.wrap(),
                        extra=nic(f"need={need},ifname={ns.tap}"))
                try:
                    vm.connect()
                    (info,) = vm.qmp("query-hpnet")
                    text = vm.hmp("info hpnet")
                finally:
                    vm.quit()
                taken = next(b for b, _, t in cands if t)
                assert info["backend"] == taken and \
                    info["need"] == need and not info["forced"], info
                assert candidates(info) == cands, (need, info)
                assert ("vhost-started" in info) == (taken == "vhost-net"), \
                    info
                reasons = {c["backend"]: c["reason"]
                           for c in info["candidates"]}
                if "vhost-net" in reasons:
                    assert ("/dev/vhost-net open" if HAVE_VHOST_NET else
                            "/dev/vhost-net: No such file") in \
                        reasons["vhost-net"], reasons
                assert f"n0: need {need}, backend {taken}" in text, text
    finally:
        ns.close()


@tests.case
def userspace_virtio_net_frames_reach_a_tap_in_a_namespace():
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cap = start_capture(ns.wrap(), "iface", ns.tap)
            vm = Vm(ACCEL, tmp, guest=f"vnet={FRAMES} hold", wrap=ns.wrap(),
                    extra=nic(f"need=compatibility,ifname={ns.tap}"))
            _, info = send_frames(vm)
            out = cap.communicate(timeout=40)[0]
            assert info["backend"] == "virtio-net", info
            assert out.strip() == f"frames {FRAMES}", out
    finally:
        ns.close()


CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454ca
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x0002, 0x1000, 0x4000


def open_tap(ns, ifname):
    """An fd of the namespace's tap, opened as libvirt opens one for
    QEMU; the namespace is entered by this thread only while opening."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns.name}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "setns")
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack(
                "16sH", ifname.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
        finally:
            if libc.setns(own, CLONE_NEWNET):
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)
    return fd


@tests.case
def a_tap_passed_as_fd_carries_frames():
    """-netdev hpnet,fd=N, N a tap the caller opened (libvirt's way): no
    script is run or refused, and the guest's frames reach the tap."""
    ns = Netns()
    try:
        fd = open_tap(ns, ns.tap)
        with tempfile.TemporaryDirectory() as tmp:
            cap = start_capture(ns.wrap(), "iface", ns.tap)
            vm = Vm(ACCEL, tmp, guest=f"vnet={FRAMES} hold", pass_fds=(fd,),
                    extra=nic(f"need=compatibility,fd={fd}"))
            os.close(fd)
            _, info = send_frames(vm)
            out = cap.communicate(timeout=40)[0]
            assert info["backend"] == "virtio-net", info
            assert info["candidates"][0]["reason"] == "tap fd= given", info
            assert out.strip() == f"frames {FRAMES}", out
    finally:
        ns.close()


@tests.case
def netdev_add_and_netdev_del_at_run_time_keep_query_hpnet_true():
    """netdev_del removes an hpnet netdev from query-hpnet, and adding it
    again lists it once; what netdev_add probes is the machine as it
    runs: guest RAM that is not shared rules vhost-user out, and no VF
    is chosen, since nothing would plug it."""
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sock = os.path.join(tmp, "none.sock")
            vm = Vm(ACCEL, tmp, wrap=ns.wrap())
            try:
                vm.connect()
                add = {"type": "hpnet", "id": "h0", "need": "compatibility",
                       "ifname": ns.tap}
                vm.qmp("netdev_add", **add)
                listed = [i["id"] for i in vm.qmp("query-hpnet")]
                vm.qmp("netdev_del", id="h0")
                after_del = vm.qmp("query-hpnet")
                vm.qmp("netdev_add", **add)
                readded = [i["id"] for i in vm.qmp("query-hpnet")]
                vm.qmp("netdev_del", id="h0")
                vm.qmp("netdev_add", type="hpnet", id="h1", need="latency",
                       ifname=ns.tap, **{"vhost-user-socket": sock})
                (latency,) = vm.qmp("query-hpnet")
                try:
                    vm.qmp("netdev_add", type="hpnet", id="h2",
                           backend="sriov", vf="0000:01:10.0", standby="x")
                    sriov = "added"
                except RuntimeError as e:
                    sriov = str(e)
                remaining = [i["id"] for i in vm.qmp("query-hpnet")]
            finally:
                vm.quit()
            # RAM shared through -numa nodes: vhost-user is not ruled out
            # for it (here only for the missing socket).
            vm = Vm(ACCEL, tmp, name="numa", wrap=ns.wrap(),
                    memory=NUMA_SHARED)
            try:
                vm.connect()
                vm.qmp("netdev_add", type="hpnet", id="h1", need="latency",
                       ifname=ns.tap, **{"vhost-user-socket": sock})
                (numa,) = vm.qmp("query-hpnet")
            finally:
                vm.quit()
        assert listed == ["h0"], listed
        assert after_del == [], after_del
        assert readded == ["h0"], readded
        reasons = {c["backend"]: c["reason"] for c in latency["candidates"]}
        assert latency["backend"] != "vhost-user", latency
        assert reasons["vhost-user"].startswith(
            "guest RAM is not shared with the peer"), reasons
        assert "netdev_add at run time: hpnet plugs a VF only at start-up" \
            in sriov, sriov
        assert remaining == ["h1"], remaining
        reasons = {c["backend"]: c["reason"] for c in numa["candidates"]}
        assert reasons["vhost-user"].startswith(
            f"{sock} is not a socket: start the vhost-user peer first"), \
            reasons
    finally:
        ns.close()


class SilentPeer:
    """A UNIX socket whose peer never answers: it listens and never
    accepts (the kernel's backlog takes the connection), or it accepts
    and never reads."""

    def __init__(self, path, accept):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.conns = []
        self.thread = None
        if accept:
            self.thread = threading.Thread(target=self._accept, daemon=True)
            self.thread.start()

    def _accept(self):
        try:
            while True:
                self.conns.append(self.sock.accept()[0])
        except OSError:
            pass                        # closed

    def close(self):
        # shutdown() ends a blocked accept(); close() alone may not.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.thread:
            self.thread.join(10)
        for c in self.conns:
            c.close()


@tests.case
def a_vhost_user_peer_that_does_not_answer_is_given_up_on():
    """QEMU's vhost-user start-up waits for its peer without a bound:
    hpnet asks the peer first and gives it vhost-user-timeout= seconds,
    then refuses (forced) or takes the next backend, saying why; a
    listening chardev nobody connects to is given up on alike."""
    shared = SHARED + ("-machine", "memory-backend=mem")
    with tempfile.TemporaryDirectory() as tmp:
        refused(tmp, "backend=vhost-user,vhost-user-socket=x,"
                "vhost-user-timeout=0", "hpnet n0: vhost-user-timeout=0 "
                "leaves the peer no time to answer", memory=shared)
        for accept in (False, True):
            sock = os.path.join(tmp, f"silent-{accept}.sock")
            peer = SilentPeer(sock, accept)
            try:
                start = time.monotonic()
                refused(tmp, f"backend=vhost-user,vhost-user-socket={sock},"
                        "vhost-user-timeout=1", f"hpnet n0: backend=vhost-user:"
                        f" the vhost-user peer on {sock} did not answer "
                        "within 1 s", memory=shared)
                took = time.monotonic() - start
                assert took < 20, f"accept={accept}: refused after {took} s"
            finally:
                peer.close()
        listening = os.path.join(tmp, "listening.sock")
        status, err = hostlib.run_error(
            ACCEL, tmp, memory=shared,
            extra=["-chardev", f"socket,id=c0,path={listening},server=on,"
                   "wait=off", *nic("backend=vhost-user,vhost-user-chardev=c0,"
                                    "vhost-user-timeout=1")])
        assert status not in (0, None) and "hpnet n0: backend=vhost-user: " \
            "no vhost-user peer connected to chardev c0 within 1 s" in err, \
            (status, err)
    # Not forced: the next backend, with the silent peer as the reason.
    ns = Netns()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sock = os.path.join(tmp, "silent.sock")
            peer = SilentPeer(sock, True)
            try:
                vm = Vm(ACCEL, tmp, wrap=ns.wrap(), memory=SHARED,
                        machine="pc,memory-backend=mem",
                        extra=nic(f"need=latency,ifname={ns.tap},"
                                  f"vhost-user-socket={sock},"
                                  "vhost-user-timeout=1"))
                try:
                    info = vm.connect().qmp("query-hpnet")[0]
                finally:
                    vm.quit()
            finally:
                peer.close()
            reasons = {c["backend"]: c["reason"] for c in info["candidates"]}
            assert info["backend"] in ("vhost-net", "virtio-net"), info
            assert reasons["vhost-user"].startswith(
                f"could not be brought up: the vhost-user peer on {sock} "
                "did not answer within 1 s"), reasons
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
                    "the peer: give each memory backend of guest RAM "
                    "share=on, e.g. -object memory-backend-memfd")
        finally:
            bridge.terminate()
            bridge.wait(10)
        # Guest RAM from -numa nodes, one of them not shared: refused too.
        bridge = start_bridge(sock, port_l, port_r)
        try:
            refused(tmp, f"need=latency,vhost-user-socket={sock}",
                    "hpnet n0: vhost-user: guest RAM is not shared with "
                    "the peer: give each memory backend of guest RAM "
                    "share=on", memory=NUMA_HALF_SHARED)
        finally:
            bridge.terminate()
            bridge.wait(10)
        cap = start_capture((), "udp", port_r)
        bridge = start_bridge(sock, port_l, port_r)
        try:
            vm = Vm(ACCEL, tmp, guest=f"vnet={FRAMES} hold",
                    memory=SHARED, machine="pc,memory-backend=mem",
                    extra=nic(f"need=latency,vhost-user-socket={sock}"))
            before, after = send_frames(vm)
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
            vm = Vm(ACCEL, tmp, guest=f"vnet={FRAMES} hold",
                    memory=SHARED, machine="pc,memory-backend=mem",
                    extra=nic(f"need=latency,vhost-user-socket={sock}"))
            _, info = send_frames(vm, settle=2)     # a stats period
        finally:
            pmd.terminate()
            pmd.wait(10)
        rx = [int(n) for n in re.findall(r"RX-packets: (\d+)",
                                          hostlib.read_text(log))]
        assert info["backend"] == "vhost-user", info
        assert info.get("vhost-started") is True, info
        assert rx and max(rx) >= FRAMES, hostlib.read_text(log)[-800:]


def main():
    # CI runs as root: there this fails, it does not skip.
    usable = os.geteuid() == 0 and os.access("/dev/net/tun", os.R_OK | os.W_OK)
    return tests.run(None if usable else "needs root (network namespaces, "
                     "taps) and /dev/net/tun")


if __name__ == "__main__":
    sys.exit(main())
