# SPDX-License-Identifier: GPL-2.0-or-later
"""Shared by hpkvm's host-core tests: QEMU under QMP, fake host trees and
snapshots of host state (fake or real) to prove it was restored exactly."""

import atexit
import ctypes
import glob
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import types

BUILD = os.environ.get("HPKVM_BUILD", "build/qemu")
# QEMU's own QMP client, through the scripts' one wrapper of it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                "..", "..", "..", "scripts", "hpkvm"))
import hpkvm_qmp  # noqa: E402 pylint: disable=wrong-import-position
QEMU = os.path.join(BUILD, "qemu-system-x86_64")
RECOVER = os.path.join(BUILD, "tools/hpkvm/qemu-hpkvm-recover")
HELPER = os.path.join(BUILD, "tools/hpkvm/qemu-hpkvm-helper")
HELPER_SOCKET = "/run/qemu-hpkvm-helper.sock"
GUEST = os.path.join(BUILD, "tests/hpkvm/guest/hpkvm-guest.elf")
FAKE_KERNEL = os.path.join(BUILD, "tests/hpkvm/fake-kernel/"
                           "libhpkvm-fake-kernel.so")

class TapSuite:
    """Test cases run in order, printed as TAP; a case returning "SKIP
    reason" is reported skipped, one raising fails with its traceback
    (printed before its "not ok" line)."""

    def __init__(self):
        self.cases = []

    def case(self, fn):
        self.cases.append(fn)
        return fn

    def kvm_case(self, fn):
        """A case that runs QEMU on this host's KVM: skipped, saying why,
        only where the kernel has no KVM at all; a /dev/kvm that is there
        but unusable fails the case."""
        def run_on_kvm():
            why = no_kvm()
            return f"SKIP {why}" if why else fn()
        run_on_kvm.__name__ = fn.__name__
        return self.case(run_on_kvm)

    def run(self, skip_all=None):
        if skip_all:
            print(f"1..0 # SKIP {skip_all}")
            return 0
        print(f"1..{len(self.cases)}", flush=True)
        failed = 0
        for i, fn in enumerate(self.cases, 1):
            name = fn.__name__.replace("_", " ")
            start = time.monotonic()
            try:
                skip = fn()
                took = f" ({time.monotonic() - start:.0f} s)"
                print(f"ok {i} - {name}{took}" +
                      (f" # {skip}" if skip else ""), flush=True)
            except Exception:
                # The traceback before the case's line, as every hpkvm
                # test prints: scripts/hpkvm/run-tests.py repeats the
                # comments before a failing line at the end of the log.
                failed += 1
                for line in traceback.format_exc().splitlines():
                    print(f"# {line}", flush=True)
                print(f"not ok {i} - {name}", flush=True)
        return 1 if failed else 0


def own_affinity():
    """This process's Cpus_allowed_list, which QEMU inherits."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def no_kvm():
    """Why this host's kernel offers no KVM (no /dev/kvm node, no kvm
    misc device), or None.  A node that exists but cannot be opened is
    not a reason: tests fail on it."""
    if os.path.exists("/dev/kvm"):
        return None
    try:
        with open("/proc/misc") as f:
            if any(line.split()[1:] == ["kvm"] for line in f):
                return None
    except OSError:
        pass
    return "this kernel has no KVM (no /dev/kvm, no kvm in /proc/misc)"


def _die_with_parent():
    """A helper started by a test goes when the test's process does."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG,
                                            signal.SIGTERM)


class Helper:
    """qemu-hpkvm-helper for one host tree ("/" or a fake one), as an
    operator's systemd would run it; its log is .log().  Its policy is
    the tree's /etc/qemu/hpkvm-helper.conf unless policy= says."""

    def __init__(self, root="/", policy=None, extra=(), wait=True):
        self.root = root
        self.socket = (HELPER_SOCKET if root == "/" else
                       os.path.join(root, HELPER_SOCKET.lstrip("/")))
        self._log = tempfile.TemporaryFile()
        cmd = [HELPER, *([f"--policy={policy}"] if policy else []), *extra]
        if root != "/":
            cmd.append(f"--x-host-root={root}")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log,
                                     preexec_fn=_die_with_parent)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("qemu-hpkvm-helper exited: " + self.log())
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.socket)
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("qemu-hpkvm-helper not listening: " +
                                       self.log())
                time.sleep(0.05)

    def log(self):
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def request(self, execute, **arguments):
        """One request of the helper's protocol; the reply's dict."""
        return helper_request(self.socket, execute, **arguments)[0]

    def settle(self):
        """Reconcile now: what a dead client left is undone on return."""
        reply = self.request("reconcile")
        assert "return" in reply, reply
        return reply["return"]["failures"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _helpers.pop(self.root, None)
        return self.log()

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        _helpers.pop(self.root, None)


def helper_request(path, execute, fds=(), timeout=60, **arguments):
    """One request as QEMU sends it: (reply, files received); each step
    waits at most timeout seconds (socket.timeout past it)."""
    msg = json.dumps({"execute": execute,
                      "arguments": arguments}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX) as s:
        # Blocking, as QEMU connects: a full backlog is waited for (up to
        # the timeout), not refused at once as a timed socket's connect.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                     struct.pack("ll", timeout, 0))
        s.connect(path)
        s.settimeout(timeout)
        socket.send_fds(s, [msg], list(fds))
        data, got = b"", []
        while not data.endswith(b"\n"):
            chunk, new, _, _ = socket.recv_fds(s, 1 << 20, 253)
            got += new
            if not chunk:
                break
            data += chunk
    return json.loads(data), got


def helper_lease(path, fds=(), timeout=60, **arguments):
    """A "lease" request: (reply, the leases' files)."""
    return helper_request(path, "lease", fds, timeout, **arguments)


_helpers = {}


def helper_for(root="/"):
    """The helper of a host tree, started on first use and stopped when
    the test program ends; on the real host one already listening (the
    operator's) is used instead."""
    h = _helpers.get(root)
    if h and h.proc.poll() is None:
        return h
    if root == "/" and os.path.exists(HELPER_SOCKET):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(HELPER_SOCKET)
            return None
        except OSError:
            pass
    h = _helpers[root] = Helper(root)
    return h


@atexit.register
def stop_helpers():
    for h in list(_helpers.values()):
        h.stop()


def needs_helper(accel):
    """The host tree an -accel hpkvm argument leases cores on through
    the default helper, or None."""
    if not accel.startswith("hpkvm") or "host-cpus=" not in accel or \
            "helper=" in accel:
        return None
    m = re.search(r"(?:^|,)x-host-root=([^,]*)", accel)
    return m.group(1) if m else "/"


# This machine's nested paravirtual KVM refuses QEMU's write of
# IA32_ARCH_CAPABILITIES; a real host takes plain -cpu host.
CPU = "host,-arch-capabilities"
# A QMP command QEMU does not answer in this long fails its case rather
# than hanging it until meson's timeout.
QMP_COMMAND_TIMEOUT = 120


# Every QEMU a Vm started (its QEMUMachine): whatever a test did, none
# outlives the test program (migration destinations included).
_qemus = []


@atexit.register
def _kill_qemus():
    for machine in _qemus:
        try:
            machine.kill()      # nothing for one already gone
        except Exception:  # pylint: disable=broad-except
            pass    # killed, but its log went with its test's directory


def _env_wrapper(env):
    """env(1) starting QEMU with ENV, a whole environment as Popen's env=
    takes (None: this process's): QEMUMachine's launch() has no
    environment of its own to give, its wrapper= is how QEMU is run."""
    if env is None:
        return []
    unset = [a for k in os.environ if k not in env for a in ("-u", k)]
    changed = [f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v]
    return ["env", *unset, *changed] if unset or changed else []


class Vm:
    """A paused QEMU with QMP; .qmp(cmd) returns the command's result.

    The process is python/qemu's QEMUMachine: its command line, launch,
    log of QEMU's output (.stderr), wait, kill.  Its QMP is not, but QEMU's
    own -qmp server socket (.sock) under hpkvm_qmp's client (qemu.qmp's
    QMPClient, every call bounded).  QEMUMachine's monitor is off: its
    launch() returns only once that monitor has greeted (on its socket
    pair with no bound at all), while a Vm is started first and connected
    later: a CPR destination's monitor comes up only with the state of a
    migration started after it, and fifty VMs must race for one core, not
    start one after the other.  Hence composition rather than a subclass,
    which would offer QEMUMachine's qmp(), cmd() and events on no
    monitor."""

    def __init__(self, accel, tmp, smp=1, extra=(), timeout=30, name="vm",
                 env=None, guest=None, machine="pc", memory=("-m", "32"),
                 wrap=(), pass_fds=()):
        """guest: None, or the test guest's -append options; its serial
        output then goes to self.serial.  pass_fds: descriptors QEMU
        inherits (as fd=N options name them)."""
        qemu_machine = hpkvm_qmp.machine_module(BUILD)
        root = needs_helper(accel)
        if root:
            helper_for(root)
        self.sock = os.path.join(tmp, f"{name}.qmp")
        self.serial = os.path.join(tmp, f"{name}.serial")
        # QEMUMachine puts "-display none -vga none" before these.
        args = ["-accel", accel, "-S", "-machine", machine,
                "-smp", str(smp),
                "-cpu", "max" if accel == "tcg" else CPU, *memory,
                "-nodefaults", "-monitor", "none",
                "-qmp", f"unix:{self.sock},server=on,wait=off"]
        if guest is None:
            args += ["-serial", "none"]
        else:
            args += ["-kernel", GUEST, "-append", guest,
                     "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
                     "-serial", f"file:{self.serial}"]
        args += list(extra)
        wrapper = _env_wrapper(env) + list(wrap)
        self.cmd = [*wrapper, QEMU, *args]
        # Its log is QEMU's stdout and stderr in one: with no monitor,
        # display or serial on stdio QEMU writes only to stderr.  Not
        # NAME.log, which tests give the fake kernel.
        self._machine = qemu_machine.QEMUMachine(
            QEMU, args=args, wrapper=wrapper, name=f"{name}.qemu",
            log_dir=tmp)
        self._machine.set_qmp_monitor(False)
        self._abnormal = qemu_machine.AbnormalShutdown
        self._mon = None
        self.timeout = timeout
        self.stderr = ""
        self._launch(pass_fds)
        _qemus.append(self._machine)

    def _launch(self, pass_fds):
        # QEMUMachine's Popen keeps every inheritable descriptor open
        # (close_fds=False): those QEMU is to have are made inheritable
        # for its start only, not to leak into the next QEMU too.
        was = [(fd, os.get_inheritable(fd)) for fd in pass_fds]
        try:
            for fd, _ in was:
                os.set_inheritable(fd, True)
            self._machine.launch()
        finally:
            for fd, inheritable in was:
                os.set_inheritable(fd, inheritable)

    @property
    def pid(self):
        """QEMU's (or its wrapper's) process id while it runs, else None."""
        return self._machine.get_pid()

    def exitcode(self):
        """QEMU's exit status once it is gone, else None."""
        return self._machine.exitcode()

    def connect(self):
        deadline = time.monotonic() + self.timeout
        # hpkvm_qmp.connect() gives up when proc.poll() says QEMU exited.
        exited = types.SimpleNamespace(poll=self._machine.exitcode)
        try:
            self._mon = hpkvm_qmp.connect(BUILD, self.sock, deadline,
                                          exited, QMP_COMMAND_TIMEOUT)
        except TimeoutError as e:
            raise RuntimeError("no QMP socket") from e
        if self._mon is None:
            self.wait()
            raise RuntimeError("QEMU exited: " + self.stderr)
        return self

    def qmp(self, cmd, **args):
        qmp = hpkvm_qmp.qmp_module(BUILD)
        if self._mon is None:
            raise RuntimeError(f"{cmd}: QMP is not connected")
        try:
            return self._mon.cmd(cmd, **args)
        except qmp.QMPError as e:
            raise RuntimeError(f"{cmd}: {e}") from e

    def hmp(self, line):
        return self.qmp("human-monitor-command", **{"command-line": line})

    def serial_text(self):
        try:
            with open(self.serial) as f:
                return f.read()
        except OSError:
            return ""

    def wait_serial(self, text, timeout=60):
        deadline = time.monotonic() + timeout
        while text not in self.serial_text():
            if self.exitcode() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def quit(self):
        """Ask QEMU to quit and wait for it (killing it if it does not):
        never raises before QEMU is gone, so that one quit in a finally
        block cannot leave the next QEMU behind."""
        try:
            self.qmp("quit")
        except Exception:  # pylint: disable=broad-except
            pass
        return self.wait()

    def kill(self):
        self._machine.kill()
        return self._gone()

    def wait(self):
        """QEMU's exit status, waiting for it up to the timeout and then
        killing it."""
        self._wait(self.timeout)
        return self._gone()

    def _wait(self, timeout):
        """Whether QEMU exited by itself within TIMEOUT (else killed)."""
        try:
            self._machine.wait(timeout)
        except self._abnormal:
            return False
        return True

    def _gone(self):
        if self._mon:
            self._mon.close()
            self._mon = None
        log = self._machine.get_log()   # read once QEMU is gone
        if log is not None:
            self.stderr = log
        return self.exitcode()


def run_error(accel, tmp, smp=1, **kwargs):
    """QEMU that must refuse to start: (exit status, stderr)."""
    vm = Vm(accel, tmp, smp=smp, name="err", **kwargs)
    # pylint: disable=protected-access
    exited = vm._wait(30)
    status = vm._gone()
    return (status, vm.stderr) if exited else (None, "did not exit")


def run_recover(root):
    """qemu-hpkvm-recover on a fake host; its output."""
    rec = subprocess.run([RECOVER, f"--host-root={root}"],
                         capture_output=True, text=True, timeout=60)
    return rec.stdout + rec.stderr


def thread_affinity(pid):
    """{tid: (comm, Cpus_allowed_list)} of a live process."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(f"{task}/comm") as f:
                comm = f.read().strip()
            with open(f"{task}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        out[int(os.path.basename(task))] = (
                            comm, line.split(":", 1)[1].strip())
        except OSError:
            pass
    return out


# --- a fake host tree -----------------------------------------------------

PF_KTHREAD = 0x00200000
PF_NO_SETAFFINITY = 0x04000000


def write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def fake_task(root, pid, comm, allowed, cgroup="/", flags=0):
    write(root, f"/proc/{pid}/stat",
          f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 "
          f"20 0 1 0 {1000 + pid} 0 0\n")
    write(root, f"/proc/{pid}/status",
          f"Name:\t{comm}\nCpus_allowed_list:\t{allowed}\n")
    write(root, f"/proc/{pid}/cpuset", cgroup + "\n")


def make_fake_host(root):
    """Cores 0-1 online (this machine's), 2-3 present but offline; IRQs,
    a cgroup v1 cpuset with one other cgroup, host tasks, kthreads."""
    cpu = "/sys/devices/system/cpu"
    write(root, f"{cpu}/present", "0-3\n")
    write(root, f"{cpu}/online", "0-1\n")
    write(root, f"{cpu}/nohz_full", "(null)\n")
    write(root, f"{cpu}/isolated", "\n")
    write(root, "/sys/devices/virtual/workqueue/cpumask", "3\n")
    write(root, "/proc/irq/default_smp_affinity", "3\n")
    for irq, aff in ((24, "0-1"), (25, "1"), (26, "0")):
        write(root, f"/proc/irq/{irq}/smp_affinity_list", aff + "\n")
    os.makedirs(os.path.join(root, "proc/irq/24/eth0-rx-0"), exist_ok=True)
    write(root, "/proc/mounts",
          "cgroup /sys/fs/cgroup/cpuset cgroup rw,cpuset 0 0\n")
    cg = "/sys/fs/cgroup/cpuset"
    write(root, f"{cg}/cpuset.cpus", "0-1\n")
    write(root, f"{cg}/cpuset.mems", "0\n")
    write(root, f"{cg}/cgroup.procs", "")
    write(root, f"{cg}/machine/cpuset.cpus", "0-1\n")
    write(root, f"{cg}/machine/cgroup.procs", "")
    fake_task(root, 100, "sshd", "0-1")
    fake_task(root, 101, "plain-qemu", "0-1", "/machine")
    fake_task(root, 21, "ksoftirqd/1", "1", flags=PF_KTHREAD |
              PF_NO_SETAFFINITY)


def snapshot_tree(root):
    """Every file of a fake tree but hpkvm's own state directory and the
    cgroup.procs files, which in a fake tree log the moves (read back as
    the kernel would: without the trailing newline)."""
    out = {}
    for d, _, names in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel.startswith("run"):
            continue
        out[rel] = None
        for n in names:
            if n == "cgroup.procs":
                continue
            with open(os.path.join(d, n)) as f:
                out[os.path.join(rel, n)] = f.read().strip()
    return out


def moved_to(root, cgroup):
    """The pids written to a fake cgroup's cgroup.procs."""
    path = os.path.join(root, "sys/fs/cgroup/cpuset", cgroup.strip("/"),
                        "cgroup.procs")
    with open(path) as f:
        return f.read().split()


def tree_diff(before, after):
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k, '<none>')!r} -> {after.get(k, '<none>')!r}"
            for k in keys if before.get(k, "<none>") != after.get(k, "<none>")]


# --- the real host ----------------------------------------------------------

def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def real_snapshot():
    """What dynamic isolation may change on this host."""
    snap = {}
    for p in ["/proc/irq/default_smp_affinity",
              "/sys/devices/virtual/workqueue/cpumask"] + \
            glob.glob("/proc/irq/*/smp_affinity_list"):
        snap[p] = read_text(p)
    for p in glob.glob("/sys/fs/cgroup/cpuset/**/cpuset.cpus",
                       recursive=True) + \
            glob.glob("/sys/fs/cgroup/*/cpuset.cpus"):
        snap[p] = read_text(p)
    for d in glob.glob("/proc/[0-9]*"):
        stat = read_text(f"{d}/stat")
        status = read_text(f"{d}/status")
        if not stat or not status:
            continue
        start = stat.rsplit(")", 1)[1].split()[19]
        allowed = [ln for ln in status.splitlines()
                   if ln.startswith("Cpus_allowed_list")]
        snap[f"{d}@{start}"] = (read_text(f"{d}/cpuset"), allowed[0]
                                if allowed else None)
    return snap


def real_diff(before, after):
    """Differences, ignoring processes that came or went in between."""
    return [f"{k}: {before[k]!r} -> {after[k]!r}"
            for k in sorted(set(before) & set(after))
            if before[k] != after[k]] + \
           [f"{k}: gone" for k in sorted(set(before) - set(after))
            if not k.startswith("/proc/")] + \
           [f"{k}: new" for k in sorted(set(after) - set(before))
            if not k.startswith("/proc/")]
