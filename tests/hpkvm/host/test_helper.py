#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""qemu-hpkvm-helper on fake host trees, with no KVM needed: the helper
is the only owner of host changes, and QEMU asks it.

- QEMU with host-cpus= and no helper is refused, naming the helper and
  how to start it; nothing changes;
- QEMU as an unprivileged user (uid 65534) leases what the policy allows
  it, and is refused, naming the core and the policy line to add, what
  it does not;
- a client that dies is undone by the helper alone, at once (pidfd);
- a helper killed and started again undoes what a client left while it
  was down, and watches the clients alive;
- leases handed over (CPR) are adopted only if they are the lease files
  and hold their locks; a lease without isolation stays shared;
- a policy that is not a root's file closed to others, or that has a
  line that is no rule, stops the helper; bad requests get an error and
  the helper serves on;
- connections that send nothing, held and reopened by another user,
  hold up no VM's request;
- -V, -f (pidfile) and -T (tracing) work as in QEMU's other helpers.

Clients other than QEMU speak the helper's protocol from Python (as
QEMU does, see hpkvm-helper-proto.h), to hold leases without KVM.
Prints TAP."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402
from hostlib import Helper  # noqa: E402

tests = hostlib.TapSuite()
NOBODY = 65534

# A client that leases core 1, prints the reply and holds the leases.
CLIENT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import hostlib
reply, fds = hostlib.helper_lease(sys.argv[2], cores="1", housekeeping="0",
                                  isolation="on")
print(json.dumps(reply), flush=True)
time.sleep(600)
"""


# As uid 65534: connections that send nothing, held, and more opened and
# closed as fast as it can; "holding N" once the first are open.
STALLER = r"""
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
print(f"holding {len(held)}", flush=True)
while True:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(sys.argv[1])
        except OSError:
            pass
"""
STALLING_CONNECTIONS = 50


def start_client(helper):
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT, os.path.dirname(hostlib.__file__),
         helper.socket], stdout=subprocess.PIPE, text=True,
        preexec_fn=hostlib._die_with_parent)
    reply = json.loads(proc.stdout.readline() or "{}")
    assert "return" in reply, (reply, helper.log())
    assert reply["return"]["isolation"]["active"], reply
    return proc


def fake_host(tmp):
    root = os.path.join(tmp, "host")
    hostlib.make_fake_host(root)
    return root, hostlib.snapshot_tree(root)


def wait_restored(root, before, timeout=10):
    """The differences left once the tree is back, or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        except FileNotFoundError as e:
            diff = [f"changing while read: {e}"]    # the helper at work
        if not diff or time.monotonic() > deadline:
            return diff
        time.sleep(0.1)


@tests.case
def qemu_without_a_helper_is_refused_naming_it():
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        rc, err = hostlib.run_error(
            f"hpkvm,x-host-root={root},host-cpus=1,housekeeping-cpus=0,"
            f"helper={tmp}/none.sock,device=/dev/null", tmp)
        assert rc == 1, (rc, err)
        assert "host-cpus= needs qemu-hpkvm-helper" in err, err
        assert "systemctl enable --now qemu-hpkvm-helper.socket" in err, err
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "host changed: " + "; ".join(diff)


def nobody_dir(tmp):
    """A directory uid 65534 can use (QMP socket), on a tree it can
    read (the fake host)."""
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "nobody")
    os.mkdir(path)
    os.chown(path, NOBODY, NOBODY)
    return path


@tests.case
def an_unprivileged_qemu_leases_what_the_policy_allows():
    """QEMU as uid 65534: core 1 granted (policy), isolation on, all
    undone when KVM's initialisation fails; core 1 refused without the
    policy line, naming the fix."""
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        run = nobody_dir(tmp)
        policy = os.path.join(tmp, "policy.conf")
        hostlib.write(tmp, "policy.conf", "# test\nallow 1 user 65534\n")
        os.chmod(policy, 0o644)
        wrap = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                "--clear-groups"]
        accel = (f"hpkvm,x-host-root={root},host-cpus=1,housekeeping-cpus=0,"
                 f"device=/dev/null,helper={root}/run/qemu-hpkvm-helper.sock")
        helper = Helper(root, policy=policy)
        try:
            rc, err = hostlib.run_error(accel, run, wrap=wrap)
            log = helper.log()
            assert "(uid 65534): host cores 1 leased, isolation on" in log, \
                (log, err)
            assert "failed to initialize hpkvm" in err, err
            diff = wait_restored(root, before)
            assert not diff, "not restored: " + "; ".join(diff)
        finally:
            helper.stop()

        hostlib.write(tmp, "policy.conf", "allow 0 user 65534\n")
        helper = Helper(root, policy=policy)
        try:
            rc, err = hostlib.run_error(accel, run, wrap=wrap)
        finally:
            helper.stop()
        assert rc == 1, (rc, err)
        assert "the host's policy does not let uid 65534 lease host core 1" \
            in err, err
        assert "'allow 1 user 65534' line" in err, err
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "host changed: " + "; ".join(diff)


@tests.case
def a_client_that_dies_is_undone_by_the_helper_alone():
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        helper = Helper(root)
        try:
            client = start_client(helper)
            during = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
            client.kill()
            client.wait()
            diff = wait_restored(root, before)
            log = helper.log()
        finally:
            helper.stop()
        assert during, "the client's lease isolated nothing"
        assert not diff, "not undone: " + "; ".join(diff) + log
        assert f"pid {client.pid} exited: host reconciled" in log, log


@tests.case
def a_restarted_helper_undoes_what_was_left_and_watches_the_living():
    """Killed with a client alive: the client's isolation stays while no
    helper runs; one started again watches the client (its death undoes
    the host), and one started after a client died undoes at start."""
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        helper = Helper(root)
        client = start_client(helper)
        helper.kill()
        helper = Helper(root)
        try:
            time.sleep(0.5)
            still = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
            client.kill()
            client.wait()
            diff = wait_restored(root, before)
        finally:
            helper.stop()
        assert still, "a restarted helper undid a living client's isolation"
        assert not diff, "not undone after restart: " + "; ".join(diff)

        helper = Helper(root)
        client = start_client(helper)
        helper.kill()
        client.kill()
        client.wait()
        left = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        helper = Helper(root)
        try:
            diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        finally:
            helper.stop()
        assert left, "nothing was left to undo"
        assert not diff, "not undone at start: " + "; ".join(diff)


@tests.case
def handed_over_leases_are_adopted_only_if_they_are_the_leases():
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        helper = Helper(root)
        lease = os.path.join(root, "run/hpkvm/leases/cpu1")
        fds = []
        try:
            reply, fds = hostlib.helper_lease(helper.socket, cores="1",
                                              isolation="off")
            assert reply["return"]["leases"] == [1] and len(fds) == 1, reply
            with open(lease) as f:
                assert f.read() == f"{os.getpid()} shared\n"
            other = os.open(os.path.join(tmp, "other"),
                            os.O_RDWR | os.O_CREAT)
            fresh = os.open(lease, os.O_RDWR)
            refused = [hostlib.helper_lease(helper.socket, fds=[fd],
                                            cores="1", isolation="off",
                                            adopt=[1])[0]
                       for fd in (other, fresh)]
            os.close(other)
            os.close(fresh)
            mismatch, _ = hostlib.helper_lease(helper.socket, cores="1",
                                               isolation="off", adopt=[1])
            adopted, more = hostlib.helper_lease(helper.socket, fds=fds,
                                                 cores="1", isolation="off",
                                                 adopt=[1])
        finally:
            for fd in fds:
                os.close(fd)
            helper.settle()
            log = helper.stop()
        for r in refused:
            assert "not its lease" in r["error"]["desc"], (r, log)
        assert "'adopt' lists 1 cores, but 0 files came" in \
            mismatch["error"]["desc"], mismatch
        assert adopted["return"]["leases"] == [] and not more, adopted
        diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        assert not diff, "host changed: " + "; ".join(diff)


@tests.case
def a_lease_without_isolation_stays_shared_for_every_reconcile():
    """dynamic-isolation=off: no one's reconcile (another VM starting or
    exiting, the helper's own) isolates the host from that VM's core."""
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        helper = Helper(root)
        fds = []
        try:
            reply, fds = hostlib.helper_lease(helper.socket, cores="1",
                                              isolation="off")
            assert not reply["return"]["isolation"]["active"], reply
            failures = helper.settle()
            diff = hostlib.tree_diff(before, hostlib.snapshot_tree(root))
        finally:
            for fd in fds:
                os.close(fd)
            helper.stop()
        assert failures == [] and not diff, \
            "a shared lease was isolated: " + "; ".join(diff)


@tests.case
def socket_activation_serves_on_the_socket_systemd_gives():
    """As qemu-hpkvm-helper.socket starts it: the listening socket is
    fd 3, LISTEN_FDS=1, LISTEN_PID its pid (systemd's protocol, played
    here so that no systemd is needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        path = os.path.join(tmp, "activated.sock")
        listener = hostlib.socket.socket(hostlib.socket.AF_UNIX)
        listener.bind(path)
        listener.listen()

        def as_systemd():
            # Fd 3, as systemd passes it, whatever number the listener
            # has here; close_fds would close a dup2()ed fd 3 again.
            if listener.fileno() == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(listener.fileno(), 3)
            os.environ["LISTEN_FDS"] = "1"
            os.environ["LISTEN_PID"] = str(os.getpid())
            hostlib._die_with_parent()

        proc = subprocess.Popen(
            [hostlib.HELPER, f"--x-host-root={root}",
             f"--policy={tmp}/none.conf"], close_fds=False,
            stderr=subprocess.PIPE, text=True, preexec_fn=as_systemd)
        listener.close()
        fds = []
        try:
            reply, fds = hostlib.helper_lease(path, cores="1",
                                              housekeeping="0",
                                              isolation="on")
        finally:
            for fd in fds:
                os.close(fd)
            reconciled, _ = hostlib.helper_request(path, "reconcile")
            proc.terminate()
            err = proc.communicate(timeout=30)[1]
        assert reconciled == {"return": {"failures": []}}, (reconciled, err)
        assert reply.get("return", {}).get("leases") == [1], (reply, err)
        assert not os.path.exists(os.path.join(
            root, "run/qemu-hpkvm-helper.sock")), "listened elsewhere too"
        diff = wait_restored(root, before)
        assert not diff, "not restored: " + "; ".join(diff)


@tests.case
def a_client_that_sends_nothing_holds_up_no_other():
    """Another user holds STALLING_CONNECTIONS connections that send
    nothing and opens and closes more as fast as it can: a VM's lease is
    still answered within 1 s, and the helper says what it closed.
    (Before, the helper read one client at a time, each for up to 10 s:
    a lease behind one idle connection waited 10 s, behind six 30 s.)"""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)            # uid 65534 reaches the socket
        root, _ = fake_host(tmp)
        helper = Helper(root)
        fds = []
        staller = subprocess.Popen(
            [sys.executable, "-c", STALLER, helper.socket,
             str(STALLING_CONNECTIONS)], stdout=subprocess.PIPE, text=True,
            preexec_fn=hostlib._die_with_parent)
        try:
            holding = staller.stdout.readline().strip()
            start = time.monotonic()
            try:
                reply, fds = hostlib.helper_lease(helper.socket, cores="1",
                                                  isolation="off",
                                                  timeout=5)
            except (socket.timeout, ConnectionError) as e:
                reply = {"no reply within 5 s": str(e)}
            took = time.monotonic() - start
            # The idle ones are dropped when late, the helper alive.
            time.sleep(11)
            staller.kill()
            staller.wait()
            alive = helper.settle()
        finally:
            for fd in fds:
                os.close(fd)
            if staller.poll() is None:
                staller.kill()
                staller.wait()
            log = helper.stop()
        print(f"# {holding}; the lease answered after {took:.3f} s")
        assert holding == f"holding {STALLING_CONNECTIONS}", holding
        assert "return" in reply, (reply, log)
        assert took < 1.0, (took, log)
        assert alive == [], (alive, log)
        assert "connections of this user wait already" in log, log
        assert "no request within 10 s; connection closed" in log, log


@tests.case
def a_bad_policy_stops_the_helper_and_bad_requests_are_refused():
    with tempfile.TemporaryDirectory() as tmp:
        root, _ = fake_host(tmp)
        policy = os.path.join(tmp, "policy.conf")
        bad = {
            "allow 1 user root\nlet 2 user root\n":
                "line 2: not a rule: 'let 2 user root'",
            "allow 1 user no-such-user-here\n":
                "no user named 'no-such-user-here'",
            "allow x user root\n": "line 1: 'x' is not a CPU list",
        }
        for text, want in bad.items():
            hostlib.write(tmp, "policy.conf", text)
            h = Helper(root, policy=policy, wait=False)
            h.proc.wait(30)
            assert h.proc.returncode == 1 and want in h.log(), (text, h.log())
        hostlib.write(tmp, "policy.conf", "allow 1 user root\n")
        os.chmod(policy, 0o664)
        h = Helper(root, policy=policy, wait=False)
        h.proc.wait(30)
        assert h.proc.returncode == 1 and "chmod 0644" in h.log(), h.log()
        os.chmod(policy, 0o644)
        link = os.path.join(tmp, "link.conf")
        os.symlink(policy, link)
        h = Helper(root, policy=link, wait=False)
        h.proc.wait(30)
        assert h.proc.returncode == 1 and "symbolic link" in h.log(), h.log()

        helper = Helper(root, policy=policy)
        try:
            unknown = helper.request("format-the-disk")
            no_cores = helper.request("lease", isolation="on")
            bad_mode = helper.request("lease", cores="1", isolation="maybe")
            with hostlib.socket.socket(hostlib.socket.AF_UNIX) as s:
                s.connect(helper.socket)
                s.sendall(b"not json\n")
                garbage = s.recv(65536)
            alive = helper.settle()
        finally:
            log = helper.stop()
        assert "unknown request 'format-the-disk'" in \
            unknown["error"]["desc"], unknown
        assert "'cores' must be a string" in no_cores["error"]["desc"]
        assert "maybe" in bad_mode["error"]["desc"], bad_mode
        assert b'"error"' in garbage, garbage
        assert alive == [], (alive, log)


@tests.case
def the_helper_has_the_options_of_qemus_helpers():
    """-V prints QEMU's version; -f writes the helper's pid once it serves
    and removes it at its exit; -T turns on the host code's trace
    events, which only the tools fire (the isolation's writes here)."""
    version = subprocess.run([hostlib.HELPER, "-V"], capture_output=True,
                             text=True, timeout=30)
    assert version.returncode == 0, version
    assert "Copyright" in version.stdout and "QEMU" in version.stdout, \
        version.stdout
    with tempfile.TemporaryDirectory() as tmp:
        root, before = fake_host(tmp)
        pidfile = os.path.join(tmp, "helper.pid")
        helper = Helper(root, extra=("-f", pidfile,
                                     "-T", "hpkvm_isolate_write"))
        try:
            with open(pidfile) as f:
                pid = int(f.read())
            client = start_client(helper)
            client.kill()
            client.wait()
            diff = wait_restored(root, before)
        finally:
            log = helper.stop()
        assert pid == helper.proc.pid, (pid, helper.proc.pid)
        assert not os.path.exists(pidfile), log
        assert "hpkvm_isolate_write " in log, log
        assert diff == [], (diff, log)


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit(tests.run("needs root: the helper, and QEMU as uid 65534"))
    sys.exit(tests.run())
