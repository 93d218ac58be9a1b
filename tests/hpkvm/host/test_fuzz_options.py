#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A bounded fuzz of every -accel hpkvm property and every -netdev hpnet
option, the lists taken from QEMU itself (-accel hpkvm,help and the QMP
schema): valid, boundary and hostile values, duplicated options, kvm
entries for hpkvm to fold in, -accel tcg behind hpkvm or not.  No QEMU
may be killed by a signal or hang; one that refuses to start says so,
naming what it refuses.  hpkvm runs on fake host trees only, which it
must leave as they were, with no lease held, while QEMU goes on with TCG
and after it exits; hpnet runs in a network namespace of its own and
must leave nothing on this host.  The inputs of the bugs found so far
run first, every time.  HPKVM_FUZZ_SEED repeats a run (the seed is
printed), HPKVM_FUZZ_RUNS makes it longer.  Prints TAP."""

import fcntl
import os
import random
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostlib  # noqa: E402
import hpkvm_qmp  # noqa: E402

SEED = int(os.environ.get("HPKVM_FUZZ_SEED") or
           random.SystemRandom().randrange(1 << 32))
RUNS = int(os.environ.get("HPKVM_FUZZ_RUNS") or 200)
RUN_TIMEOUT = 15                # seconds for one QEMU, start to exit
MAX_REPORTED = 8                # failing runs shown before giving up
MAX_ARG = 100000                # bytes; Linux refuses arguments of 128 KiB

tests = hostlib.TapSuite()


# --- one QEMU, bounded ------------------------------------------------------

# QEMU's own QMP client (python/qemu), through hostlib's wrapper.
QMP = hpkvm_qmp.qmp_module(hostlib.BUILD)


class Run:
    """One QEMU: its command line, its exit status (negative: the signal
    that killed it), its stderr, whether QMP came up, what went wrong."""

    def __init__(self, cmd):
        self.cmd = cmd
        self.status = None
        self.stderr = ""
        self.up = False
        self.hung = False
        self.problems = []

    def repro(self):
        return shlex.join(self.cmd)


def run_qemu(tmp, args, wrap=(), while_up=None):
    """QEMU with @args and QMP, in @tmp, for at most RUN_TIMEOUT seconds;
    while_up(qmp, proc) returns the problems it finds while QEMU runs,
    then QEMU is told to quit.  Never leaves a QEMU behind."""
    sock = os.path.join(tmp, "qmp.sock")
    err_path = os.path.join(tmp, "qemu.stderr")
    if os.path.lexists(sock):
        os.unlink(sock)
    run = Run([*wrap, hostlib.QEMU, *args, "-nodefaults", "-display", "none",
               "-qmp", f"unix:{sock},server=on,wait=off"])
    deadline = time.monotonic() + RUN_TIMEOUT
    # A file, not a pipe: hostile values are echoed back at length.
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(run.cmd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                cwd=tmp)
    qmp = None
    try:
        # Every command bounded by the run's deadline: a hang is a
        # TimeoutError.
        qmp = hpkvm_qmp.connect(hostlib.BUILD, sock, deadline, proc,
                                bound_by_deadline=True)
        if qmp:
            run.up = True
            if while_up:
                run.problems += while_up(qmp, proc)
            try:
                qmp.cmd("quit")
            except QMP.ExecInterruptedError:
                pass                            # it closed as it quit
        run.status = proc.wait(max(deadline - time.monotonic(), 1))
    except (TimeoutError, subprocess.TimeoutExpired) as e:
        run.hung = True
        run.problems.append(f"hang: still running after {RUN_TIMEOUT} s "
                            f"({e})")
    except (OSError, EOFError, ValueError, QMP.QMPError) as e:
        run.problems.append(f"QMP failed: {e!r}")
    finally:
        if qmp:
            qmp.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if run.status is None and not run.hung:
        run.status = proc.returncode
    with open(err_path, "rb") as f:
        run.stderr = f.read().decode(errors="surrogateescape")
    return run


def opt_value(text, p):
    """util/qemu-option.c's get_opt_value(): up to a single comma."""
    value = ""
    while True:
        end = text.find(",", p)
        end = len(text) if end < 0 else end
        if text[end + 1:end + 2] != ",":
            return end, value + text[p:end]
        value += text[p:end + 1]
        p = end + 2


def qemu_opts(text, first="accel"):
    """[(name, value)] as QemuOpts parses @text (opts_do_parse()): a bare
    first word is the accelerator, other bare words name=on, noname
    name=off."""
    out, p = [], 0
    while p < len(text):
        length = re.compile(r"[^=,]*").match(text, p).end() - p
        if text[p + length:p + length + 1] == "=":
            name = text[p:p + length]
            p, value = opt_value(text, p + length + 1)
        elif first:
            name = first
            p, value = opt_value(text, p)
        else:
            name, value = text[p:p + length], "on"
            p += length
            if name.startswith("no"):
                name, value = name[2:], "off"
        first = None
        p += text[p:p + 1] == ","
        out.append((name, value))
    return out


def accel_entries(args):
    """The -accel entries of a command line, each as {name: [values]}."""
    entries = []
    for opt, arg in zip(args, args[1:]):
        if opt == "-accel":
            entry = {}
            for name, value in qemu_opts(arg):
                entry.setdefault(name, []).append(value)
            entries.append(entry)
    return entries


def given_words(args):
    """The option names and values of a command line's -accel, -netdev
    and -device arguments, as QemuOpts reads them."""
    words = set()
    for opt, arg in zip(args, args[1:]):
        if opt in ("-accel", "-netdev", "-device"):
            for name, value in qemu_opts(arg):
                words |= {name, value}
    return {w for w in words if len(w.strip()) >= 3}


def past_echo(run, args):
    """QEMU's messages without the "-accel ARG: " it repeats from the
    command line in front of them."""
    text = run.stderr
    for opt, value in zip(args, args[1:]):
        text = text.replace(f"{opt} {value}: ", "")
    return text


def names_any(text, words):
    """Whether @text has one of @words, as a word ("vf" is not in
    "vfio-pci", "hpkvm" is in "hpkvm-accel")."""
    return any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text, re.I)
               for w in words if w)


def exit_problems(run, args, names):
    """A signal, a hang (already noted), a refusal that says nothing or
    does not say what it refuses (the option, or hpkvm or hpnet, which
    the "-accel hpkvm,...: " in front may be alone in naming), a crash
    reported on stderr."""
    if run.hung:
        return []
    if run.status < 0:
        return [f"killed by signal {signal.Signals(-run.status).name}"]
    out = []
    if run.status == 0 and not run.up:
        out.append("exit status 0, but it never started")
    if run.status != 0 and run.up:
        out.append(f"exit status {run.status} after quit")
    if run.status != 0 and not run.up:
        if not run.stderr.strip():
            out.append(f"exit status {run.status} with nothing on stderr")
        elif not names_any(run.stderr, names):
            out.append(f"exit status {run.status}, but the message names "
                       f"none of {sorted(set(names))}")
    for bad in ("CRITICAL", "Assertion", "assertion failed", "Aborted",
                "core dumped", "double free", "corrupted"):
        if bad in run.stderr:
            out.append(f"stderr says {bad!r}")
    return out


class Failures:
    """Failing runs, each with the command line that reproduces it; and
    the refusals whose message, past the command line QEMU repeats,
    names nothing given (reported, not failed: see the summary)."""

    def __init__(self, what):
        self.what = what
        self.runs = []
        self.count = 0
        self.vague = {}

    def add(self, run, problems, args=None):
        if problems:
            self.count += 1
            if len(self.runs) < MAX_REPORTED:
                self.runs.append((run, problems))
        if args and run.status and run.status > 0 and not run.up:
            text = past_echo(run, args)
            if not names_any(text, given_words(args) |
                             {"hpkvm", "hpnet", "kvm", "accel"}):
                key = re.sub(r"\S*/\S*", "PATH", text.strip())[:160]
                self.vague.setdefault(key, run.repro())

    def check(self):
        if self.vague:
            print(f"# {self.what}: {len(self.vague)} kinds of refusal name "
                  "nothing given past the command line QEMU repeats:",
                  flush=True)
            for key, repro in sorted(self.vague.items()):
                print(f"#   {key!r}\n#     e.g. {repro[:300]}", flush=True)
        if not self.count:
            return
        lines = [f"{self.count} {self.what} runs failed (seed {SEED}):"]
        for run, problems in self.runs:
            lines += ["  " + "; ".join(problems),
                      "    reproduce: " + run.repro(),
                      "    stderr: " + run.stderr[-600:].strip()]
        raise AssertionError("\n".join(lines))


# --- values -----------------------------------------------------------------

def esc(value):
    """A value for QemuOpts: a comma is written twice."""
    return value.replace(",", ",,")


def long_string(rng):
    return rng.choice("xé9/,") * rng.choice([16, 256, 4097, 10000])


def hostile(rng, tmp):
    """A string no option expects."""
    return rng.choice([
        "", " ", "a", ",", ",,", "=", ".", "..", "../..", "//", "/", "-1",
        "0", "on", "help", "%s%s%n%n", "\t", "\n", "é", "日本語",
        "\udcff\udcfe",                 # bytes that are not UTF-8
        os.path.join(tmp, "nonexistent"), os.path.join(tmp, "file"), tmp,
        long_string(rng),
    ])


CPU_LISTS = [
    "0", "1", "2", "3", "0-1", "1-0", "1-1", "0,1", "1,0", "1,1", "0-3",
    "99999", "4095", "4096", "0-4294967295", "4294967296", "-1", "1-", "-",
    "1--2", "0x1", "01", " 1 ", "\t1\n", ",", ",1", "1,", ",,", "1,,2", "a",
    "", "１", "1-1-1", "1,a", "0-1,1-0", "18446744073709551615",
    "18446744073709551616", "9" * 400, ",".join(["1"] * 5000),
    "pinned", "Pinned", "pinned,1", "pinned-1",
]
INTS = [
    "0", "1", "-1", "2", "3", "4096", "65535", "65536", "2147483647",
    "2147483648", "4294967295", "4294967296", "9223372036854775807",
    "9223372036854775808", "18446744073709551615", "18446744073709551616",
    "-9223372036854775808", "-9223372036854775809", "0x10", "0x", "010",
    "1e3", "1.5", "", " 1", "1 ", "a", "1k", "1M", "１", "9" * 400,
]
ON_OFF_AUTO = ["on", "off", "auto", "ON", "Auto", "", "yes", "no", "true",
               "maybe", "1", "0", "on ", "o"]
BOOLS = ["on", "off", "true", "false", "yes", "no", "y", "n", "", "2",
         "ON", "maybe"]
# The values of the types -accel NAME,help shows, valid ones first.
BY_TYPE = {
    "OnOffAuto": ON_OFF_AUTO,
    "bool": BOOLS,
    "int": INTS,
    "uint16": INTS,
    "uint32": INTS,
    "on|off|split": ["on", "off", "split", "", "Split", "auto", "splitt"],
    "NotifyVMexitOption": ["run", "internal-error", "disable", "", "on",
                           "Run", "internal"],
    "str": None,                    # hostile() only
    "string": None,
}
# Values each type takes, for runs that get past the parsing.
VALID_BY_TYPE = {
    "OnOffAuto": ["on", "off", "auto"],
    "bool": ["on", "off", "true", "false", "yes", "no"],
    "int": ["0", "1", "-1", "4096", "0x10", "9223372036854775807"],
    "uint16": ["0", "1", "010", "65535"],
    "uint32": ["0", "1", "4096", "0x4000a", "4294967295"],
    "on|off|split": ["on", "off", "split"],
    "NotifyVMexitOption": ["run", "internal-error", "disable"],
    "str": None,
    "string": None,
}


def resolves_inside(value, tmp):
    """Whether @value, which hpkvm resolves from "/" both by its letters
    and through symbolic links, stays inside @tmp."""
    path = "/" + value.lstrip("/")
    for p in (os.path.normpath(path), os.path.realpath(path)):
        if os.path.commonpath([p, tmp]) != tmp:
            return False
    return True


class HostCtx:
    """One hpkvm run's directory, its fake host tree and its random."""

    def __init__(self, rng, tmp, root):
        self.rng = rng
        self.tmp = tmp
        self.root = root
        self.skipped_roots = 0
        # Most values of a wrong type stop QEMU at the parsing: in these
        # runs only the strings are hostile, to get further.
        self.typed = rng.random() < 0.4

    def path(self, name):
        return os.path.join(self.tmp, name)

    def host_root(self):
        """A spelling of the fake tree, or of somewhere else in tmp; never
        the real host.  Those that would be are in the list, and left
        out here."""
        rng, root, tmp = self.rng, self.root, self.tmp
        value = rng.choice([
            root, root, root, root + "/", "//" + root, root + "//",
            root + "/./", root + "/../" + os.path.basename(root),
            os.path.relpath(root, "/"), "../" * 9 + root.lstrip("/"),
            self.path("link"), self.path("slash") + root,
            self.path("nonexistent"), self.path("file"), self.path("empty"),
            tmp, root + "/run", root + "/proc", root + "\n",
            self.path("x" * 300), self.path("é"), root + "/" + "a/" * 3000,
            # The real host, in disguise: never passed.
            "", "/", "//", "../..", "/tmp/..", "tmp", self.path("slash"),
            self.path("slash") + "/..", tmp + "/" + "../" * 20,
        ])
        if resolves_inside(value, tmp):
            return value
        self.skipped_roots += 1
        return root

    def helper_socket(self):
        """Mostly the fake tree's helper; else no helper there."""
        rng = self.rng
        sock = os.path.join(self.root, "run/qemu-hpkvm-helper.sock")
        if rng.random() < 0.6:
            return sock
        return rng.choice([self.path("nonexistent"), self.path("file"),
                           self.tmp, "", sock + "\n",
                           hostile(rng, self.tmp)])

    def device(self):
        rng = self.rng
        if rng.random() < 0.85:
            return "/dev/null"
        return rng.choice(["/dev/zero", "/dev/full", self.path("nonexistent"),
                           self.tmp, self.path("file"), "", "a",
                           hostile(rng, self.tmp)])

    def cpu_list(self):
        rng = self.rng
        return rng.choice(CPU_LISTS) if rng.random() < 0.8 else \
            hostile(rng, self.tmp)

    def path_value(self):
        return self.rng.choice([self.path("nonexistent"), self.path("file"),
                                hostile(self.rng, self.tmp)])

    def value(self, name, prop_type):
        special = {
            "host-cpus": self.cpu_list,
            "housekeeping-cpus": self.cpu_list,
            "x-host-root": self.host_root,
            "helper": self.helper_socket,
            "device": self.device,
            "rapl-helper-socket": self.path_value,
        }
        if name in special:
            return special[name]()
        values = (VALID_BY_TYPE if self.typed else BY_TYPE)[prop_type]
        if values and (self.typed or self.rng.random() < 0.75):
            return self.rng.choice(values)
        return hostile(self.rng, self.tmp)


def accel_props(accel):
    """{property: type} as -accel ACCEL,help lists them."""
    out = subprocess.run([hostlib.QEMU, "-accel", f"{accel},help"],
                         capture_output=True, text=True, timeout=30)
    props = dict(re.findall(r"^\s+([\w-]+)=<([^>]+)>", out.stdout, re.M))
    assert out.returncode == 0 and props, out.stdout + out.stderr
    return props


# --- hpkvm ------------------------------------------------------------------

# Raw words slipped between the options: bare names (name=on), empty
# ones, an accel= that turns the entry into another accelerator.
RAW_WORDS = ["", "=", "=on", "host-cpus", "dynamic-isolation", "x",
             "nodynamic-isolation", "hpkvm", "accel=tcg", "accel=", "kvm"]
PLACEMENTS = [
    [("host-cpus", "1")],
    [("host-cpus", "1"), ("housekeeping-cpus", "0")],
    [("host-cpus", "0"), ("housekeeping-cpus", "1")],
    [("host-cpus", "1"), ("dynamic-isolation", "off")],
    [("host-cpus", "1"), ("dynamic-isolation", "on")],
]


def hpkvm_entry(ctx, props):
    """An -accel hpkvm argument: always on the fake tree, mostly with
    device=/dev/null, often with a placement that leases a core."""
    rng = ctx.rng
    opts = [("x-host-root", ctx.root), ("device", "/dev/null")]
    if rng.random() < 0.5:
        opts += rng.choice(PLACEMENTS)
    for _ in range(rng.randint(0, 5)):
        name = rng.choice(sorted(props))
        opts.append((name, ctx.value(name, props[name])))
    if rng.random() < 0.2:
        opts.append(rng.choice(opts))           # the same option twice
    if rng.random() < 0.3:
        rng.shuffle(opts)
    words = [f"{n}={esc(v)}" for n, v in opts]
    if rng.random() < 0.15 and not ctx.typed:
        words.insert(rng.randrange(len(words) + 1), rng.choice(RAW_WORDS))
    return "hpkvm," + ",".join(words)


def kvm_entry(ctx, kvm_props):
    """An -accel kvm argument, as libvirt writes one, for hpkvm to fold."""
    rng = ctx.rng
    opts = []
    for _ in range(rng.randint(0, 3)):
        name = rng.choice(sorted(kvm_props))
        opts.append(f"{name}={esc(ctx.value(name, kvm_props[name]))}")
    return ",".join(["kvm"] + opts)


def safe_accel_args(args, tmp):
    """No -accel that could reach the real host, read as QEMU reads them:
    every x-host-root= inside tmp, each hpkvm entry with its own, and a
    device= that is no KVM (on a host that has one, hpkvm must fail as
    it does here); no kvm entry without an hpkvm one to fold it in."""
    entries = accel_entries(args)
    accels = [e.get("accel", [""])[-1] for e in entries]
    for e in entries:
        if not all(resolves_inside(v, tmp) for v in e.get("x-host-root", [])):
            return False
        if e.get("accel", [""])[-1] != "hpkvm":
            continue
        if "x-host-root" not in e or "device" not in e:
            return False
        if any(os.path.realpath(os.path.join(tmp, v)) == "/dev/kvm"
               for v in e["device"]):
            return False
    return "kvm" not in accels or "hpkvm" in accels


def hpkvm_args(ctx, props, kvm_props):
    rng = ctx.rng
    entries = [hpkvm_entry(ctx, props)]
    if rng.random() < 0.15:
        entries.append(hpkvm_entry(ctx, props))     # tried if the first fails
    if rng.random() < 0.25:
        entries.insert(rng.randrange(len(entries) + 1),
                       kvm_entry(ctx, kvm_props))
    if rng.random() < 0.6:
        entries.insert(rng.randint(1, len(entries)), "tcg")
    args = [a for e in entries for a in ("-accel", e)]
    if rng.random() < 0.4:
        args += ["-machine", "none"]
    else:
        args += ["-M", "pc", "-S", "-m", "32", "-smp", rng.choice("1112")]
    return args


def make_run_dir(tmp, rng, name=None):
    """A fresh fake host, and the things values may point at; sometimes
    a state directory that hpkvm must refuse: a symbolic link, open to
    all, a lease that is a symbolic link (to "elsewhere", which must stay
    empty)."""
    run_dir = tempfile.mkdtemp(dir=tmp)
    name = name or rng.choice(["host", "host", "hôst ✓", "host,1",
                               "h\udcff"])
    root = os.path.join(run_dir, name)
    hostlib.make_fake_host(root)
    for d in ("empty", "elsewhere", os.path.join(name, "run")):
        os.makedirs(os.path.join(run_dir, d))
    hostlib.write(run_dir, "file", "not a device\n")
    os.symlink(root, os.path.join(run_dir, "link"))
    os.symlink("/", os.path.join(run_dir, "slash"))
    state = os.path.join(root, "run/hpkvm")
    elsewhere = os.path.join(run_dir, "elsewhere")
    variant = rng.random()
    if variant < 0.05:
        os.symlink(elsewhere, state)
    elif variant < 0.1:
        os.mkdir(state)
        os.chmod(state, 0o777)
    elif variant < 0.15:
        os.makedirs(os.path.join(state, "leases"), mode=0o700)
        os.chmod(state, 0o700)
        os.symlink(os.path.join(elsewhere, "cpu1"),
                   os.path.join(state, "leases/cpu1"))
    return run_dir, root


def start_helper(root):
    """The fake tree's qemu-hpkvm-helper, or None where it refuses the
    state directory (planted links, open to all): QEMU then finds no
    helper and must refuse host-cpus= cleanly."""
    try:
        return hostlib.Helper(root)
    except RuntimeError:
        return None


def files_under(top):
    """Every path below @top, not following symbolic links (fake trees
    have loops of them, as sysfs does)."""
    for d, dirs, names in os.walk(top):
        for n in dirs + names:
            yield os.path.join(d, n)


def lease_files(root):
    return [p for p in files_under(root)
            if os.path.basename(os.path.dirname(p)) == "leases" and
            os.path.basename(p).startswith("cpu")]


def leases_held(root):
    """The lease files under @root some process holds (hpkvm's OFD lock
    conflicts with our POSIX one)."""
    held = []
    for path in lease_files(root):
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue                    # not a lease hpkvm would take
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            held.append(os.path.relpath(path, root))
        finally:
            os.close(fd)
    return held


def state_dirs(args):
    """Where the helper keeps leases and the journal, under the root."""
    return ["run/hpkvm"]


def host_changes(before, after, args):
    """What changed in the fake tree: anything but what hpkvm may create,
    the helper's state directory."""
    dirs = [d for d in state_dirs(args) if d != "."]
    out = []
    for key in sorted(set(before) | set(after)):
        if before.get(key, "<none>") == after.get(key, "<none>"):
            continue
        new = key not in before
        if new and any(key == d or key.startswith(d + "/") or
                       d.startswith(key + "/") for d in dirs):
            continue
        out.append(f"{key}: {before.get(key, '<none>')!r} -> "
                   f"{after.get(key, '<none>')!r}")
    return out


def hpkvm_while_up(root, before, args):
    """QEMU went on with TCG: nothing of hpkvm's may be left, on the fake
    host (changes, leases) or on QEMU's own threads."""
    def check(qmp, proc):
        out = []
        kvm = qmp.cmd("query-kvm")
        info = qmp.cmd("query-hpkvm")
        if kvm["enabled"] or info["enabled"]:
            out.append(f"KVM enabled without KVM: {kvm} {info}")
        if "placement" in info or "host-cpus" in info:
            out.append(f"query-hpkvm reports a placement: {info}")
        out += [f"while up: {c}" for c in host_changes(
            before, hostlib.snapshot_tree(root), args)]
        out += [f"while up: lease {p} held" for p in leases_held(root)]
        mine = hostlib.own_affinity()
        moved = {t: a for t, (_, a) in
                 hostlib.thread_affinity(proc.pid).items() if a != mine}
        if moved:
            out.append(f"QEMU threads not back on {mine}: {moved}")
        return out
    return check


def hpkvm_problems(run, args, root, before, prop_names):
    out = exit_problems(run, args, list(prop_names) + ["hpkvm", "accel"])
    if run.up and "hpkvm" not in run.stderr:
        out.append("went on with TCG without saying why hpkvm failed")
    out += host_changes(before, hostlib.snapshot_tree(root), args)
    out += [f"lease {p} held after exit" for p in leases_held(root)]
    out += [f"journal left: {os.path.relpath(p, root)}"
            for p in files_under(root) if p.endswith("/host.journal")]
    elsewhere = os.path.join(os.path.dirname(root), "elsewhere")
    out += [f"followed a symbolic link: {p}" for p in files_under(elsewhere)]
    return out


def run_hpkvm(tmp, args, root, prop_names):
    before = hostlib.snapshot_tree(root)
    run = run_qemu(tmp, args, while_up=hpkvm_while_up(root, before, args))
    return run, run.problems + hpkvm_problems(run, args, root, before,
                                              prop_names)


# --- hpnet ------------------------------------------------------------------

def netns_wrap():
    """A network namespace of its own for each hpnet QEMU: the taps it
    makes go with it.  None if this host cannot give one."""
    wrap = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    try:
        ok = subprocess.run(wrap + ["true"], capture_output=True,
                            timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return wrap if ok else None


def host_links():
    """This host's network interfaces, as ip link lists them."""
    return sorted(os.listdir("/sys/class/net"))


def hpnet_schema():
    """{option: [enum values] or None} of -netdev hpnet, from the QMP
    schema of the QEMU under test."""
    with tempfile.TemporaryDirectory() as tmp:
        found = {}

        def query(qmp, proc):
            found["schema"] = qmp.cmd("query-qmp-schema")
            return []
        run = run_qemu(tmp, ["-machine", "none", "-accel", "tcg"],
                       while_up=query)
        assert "schema" in found, run.problems + [run.stderr]
    types = {t["name"]: t for t in found["schema"]}
    netdev = [t for t in found["schema"] if t.get("meta-type") == "object"
              and t.get("tag") == "type" and
              any(v["case"] == "hpnet" for v in t.get("variants", []))]
    assert len(netdev) == 1, netdev
    (hpnet,) = [v["type"] for v in netdev[0]["variants"]
                if v["case"] == "hpnet"]
    members = {}
    for m in types[hpnet]["members"]:
        t = types.get(m["type"], {})
        members[m["name"]] = [v["name"] for v in t["members"]] \
            if t.get("meta-type") == "enum" else None
    return members


def make_fake_net_roots(tmp):
    """root= trees: none of the nodes; every node (regular files: they
    open); nodes that are a FIFO and a directory; an SR-IOV PF with a VF
    on vfio-pci, a second not on it, and a group with a stray member."""
    w = hostlib.write
    roots = {name: os.path.join(tmp, name) for name in
             ("net-empty", "net-all", "net-odd", "net-sriov")}
    os.makedirs(roots["net-empty"])
    for node in ("/dev/net/tun", "/dev/vhost-net", "/dev/vfio/7"):
        w(roots["net-all"], node, "")
    os.makedirs(os.path.join(roots["net-odd"], "dev/net/tun"))
    os.mkfifo(os.path.join(roots["net-odd"], "dev/vhost-net"))
    r = roots["net-sriov"]
    dev = "sys/bus/pci/devices/"

    def link(path, target):
        full = os.path.join(r, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)
    w(r, dev + "0000:03:00.0/sriov_numvfs", "3\n")
    link("sys/class/net/fzpf0/device", "../../../" + dev + "0000:03:00.0")
    for i, vf in enumerate(("0000:03:00.1", "0000:03:00.2")):
        link(dev + f"0000:03:00.0/virtfn{i}", f"../{vf}")
        link(dev + f"{vf}/physfn", "../0000:03:00.0")
        link(dev + f"{vf}/iommu_group",
             f"../../../kernel/iommu_groups/{7 + i}")
        os.makedirs(os.path.join(r, f"sys/kernel/iommu_groups/{7 + i}/"
                                 f"devices/{vf}"))
        w(r, f"/dev/vfio/{7 + i}", "")
    link(dev + "0000:03:00.1/driver", "../../drivers/vfio-pci")
    link(dev + "0000:03:00.2/driver", "../../drivers/ixgbevf")
    link(dev + "0000:03:00.0/virtfn2", "../0000:03:00.9")
    w(r, "/dev/net/tun", "")
    return roots


def make_net_files(tmp):
    """Scripts (one succeeds, one fails, one may not run), and vhost-user
    sockets no peer listens on, one with commas in its name."""
    for name, code in (("ok.sh", 0), ("fail.sh", 1)):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(path)}.log\n"
                    f"exit {code}\n")
        os.chmod(path, 0o755)
    hostlib.write(tmp, "plain.sh", "#!/bin/sh\nexit 0\n")
    for name in ("stale.sock", "vu.sock,server=on,wait=off"):
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(tmp, name))
        s.close()


def sockets_in(tmp):
    return sorted(p for p in files_under(tmp)
                  if stat.S_ISSOCK(os.lstat(p).st_mode))


class NetCtx:
    """Values for each hpnet option; the coverage case checks that every
    option of the schema has its own."""

    def __init__(self, rng, tmp, roots, members):
        self.rng = rng
        self.tmp = tmp
        self.roots = roots
        self.members = members
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        self.values = {
            "need": None, "backend": None,
            "ifname": ["fz0", "fz%d", "tap%d", "lo", "eth0", "x" * 15,
                       "x" * 16, "a b", "é", "-", "-x", "%s%n"],
            "script": ["no", p("ok.sh"), p("fail.sh"), p("plain.sh"),
                       p("nonexistent")],
            "downscript": ["no", p("ok.sh"), p("fail.sh"), p("plain.sh"),
                           p("nonexistent")],
            "fd": ["0", "1", "2", "3", "99999", "-1", "4294967296", "fd0"],
            "vhostfd": ["0", "1", "2", "3", "99999", "-1", "4294967296",
                        "vhost0"],
            "vhost-user-chardev": ["cnull", "cfile", "nope", "n0"],
            "vhost-user-socket": [p("stale.sock"), p("nonexistent"),
                                  p("vu.sock,server=on,wait=off"),
                                  p("file"), tmp],
            "vhost-user-timeout": ["1", "0", "4294967295", "4294967296",
                                   "-1", "1.5", "x"],
            "vf": ["0000:03:00.1", "0000:03:00.2", "0000:03:00.9",
                   "0000:00:00.0", "0000:03:00.1/../0000:03:00.1",
                   "../../../../../etc"],
            "pf": ["fzpf0", "0000:03:00.0", "eth0", "eth9", "lo"],
            "standby": ["nic0", "nope", "n0"],
            "vf-bus": ["pci.0", "pcie.0", "rp0", "nope"],
            "x-root": list(roots.values()) + [tmp + "/nonexistent", ""],
        }

    def value(self, name):
        rng = self.rng
        values = self.values[name]
        if values is None:
            values = self.members[name] + ["", "fast", "tap", "SRIOV",
                                           "vhost_net"]
        if rng.random() < 0.7:
            return rng.choice(values)
        return hostile(rng, self.tmp)


def hpnet_scenarios(ctx):
    """Options that get each backend some way, for mutations."""
    tmp, roots = ctx.tmp, ctx.roots
    return [
        [("need", "isolation"), ("x-root", roots["net-sriov"]),
         ("vf", "0000:03:00.1"), ("standby", "nic0")],
        [("need", "isolation"), ("x-root", roots["net-sriov"]),
         ("pf", "fzpf0"), ("standby", "nic0"), ("vf-bus", "rp0")],
        [("need", "latency"), ("vhost-user-socket", f"{tmp}/stale.sock")],
        [("need", "compatibility"), ("ifname", "fz0"),
         ("script", f"{tmp}/ok.sh"), ("downscript", f"{tmp}/ok.sh")],
        [("backend", "vhost-net"), ("x-root", roots["net-all"])],
        [("x-root", roots["net-all"])],
    ]


def hpnet_args(ctx, members):
    rng = ctx.rng
    opts = [("id", "n0")]
    if rng.random() < 0.4:
        opts += rng.choice(hpnet_scenarios(ctx))
    for _ in range(rng.randint(0 if len(opts) > 1 else 1, 5)):
        name = rng.choice(sorted(members))
        opts.append((name, ctx.value(name)))
    if rng.random() < 0.2:
        opts.append(rng.choice(opts[1:]))       # the same option twice
    netdev = ",".join(["hpnet"] + [f"{n}={esc(v)}" for n, v in opts])
    machine = rng.choice(["none", "pc", "q35"])
    args = ["-accel", "tcg", "-M", machine, "-netdev", netdev]
    if machine != "none":
        args += ["-m", "32", "-S"]
        if rng.random() < 0.8:
            args += ["-device", "virtio-net-pci,netdev=n0,id=nic0" +
                     rng.choice(["", ",failover=on"])]
        if machine == "q35" and rng.random() < 0.5:
            args += ["-device", "pcie-root-port,id=rp0,chassis=1"]
    if rng.random() < 0.3 and machine != "none":
        args += ["-object", "memory-backend-memfd,id=mem,size=32M,share=on",
                 "-machine", "memory-backend=mem"]
    if "vhost-user-chardev=" in netdev:
        args += ["-chardev", "null,id=cnull", "-chardev",
                 f"file,id=cfile,path={ctx.tmp}/cfile.out"]
    return args


def hpnet_while_up(qmp, proc):
    out = []
    nets = qmp.cmd("query-hpnet")
    if [n["id"] for n in nets] != ["n0"]:
        out.append(f"query-hpnet: {nets}")
    text = qmp.cmd("human-monitor-command", **{"command-line": "info hpnet"})
    if "n0: need" not in text:
        out.append(f"info hpnet: {text!r}")
    return out


def run_hpnet(tmp, args, wrap, names):
    socks = sockets_in(tmp)
    run = run_qemu(tmp, args, wrap=wrap, while_up=hpnet_while_up)
    out = run.problems + exit_problems(run, args, list(names) + ["hpnet"])
    made = sorted(set(sockets_in(tmp)) - set(socks) -
                  {os.path.join(tmp, "qmp.sock")})
    out += [f"created a socket: {s}" for s in made]
    return run, out


# --- the inputs of the bugs found -------------------------------------------

# KVM's xen-version= turns on Xen emulation as it is set; hpkvm failing
# (device check, placement, KVM's own init) left it on, and the pc board
# then asked TCG for KVM's Xen state: SIGABRT.
REGRESSIONS_HPKVM = [
    # (the -accel entries before -accel tcg, -smp)
    (["hpkvm,{base},device={tmp}/nonexistent,xen-version=1"], 1),
    (["hpkvm,{base},host-cpus=1,xen-version=0x4000a"], 2),
    (["hpkvm,{base},host-cpus=1,xen-version=1"], 1),
    (["kvm,xen-version=1", "hpkvm,{base}"], 1),
]

# A vhost-user-socket= path with commas was pasted into a chardev
# description: ",server=on,wait=off" made QEMU create a listening socket
# at another path and wait there for a peer, for ever.  (The options,
# and what QEMU says when it refuses; None: it starts.)
REGRESSIONS_HPNET = [
    ("need=latency,vhost-user-socket={tmp}/vu.sock,,server=on,,wait=off",
     None),
    ("backend=vhost-user,vhost-user-socket={tmp}/vu.sock,,server=on,,"
     "wait=off", "Failed to connect to '{tmp}/vu.sock,server=on,wait=off'"),
]


# --- the cases --------------------------------------------------------------

@tests.case
def every_property_and_option_has_values_to_fuzz():
    """The properties -accel hpkvm,help lists and the options of hpnet's
    schema are the ones this test knows values for: a new one must be
    added here."""
    props = accel_props("hpkvm")
    unknown = [f"{n} ({t})" for n, t in props.items()
               if t not in BY_TYPE or t not in VALID_BY_TYPE]
    assert not unknown, f"no values for the properties {unknown}"
    assert set(accel_props("kvm")) <= set(props)
    members = hpnet_schema()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = NetCtx(random.Random(0), tmp, {}, members)
        missing = sorted(set(members) - set(ctx.values))
        stale = sorted(set(ctx.values) - set(members))
    assert not missing and not stale, \
        f"hpnet options without values: {missing}; gone: {stale}"
    assert members["need"] and members["backend"], members


@tests.case
def regressions_found_by_this_fuzz():
    props = accel_props("hpkvm")
    failures = Failures("regression")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        for entries, smp in REGRESSIONS_HPKVM:
            run_dir, root = make_run_dir(tmp, random.Random(0), "host")
            helper = start_helper(root)
            base = f"x-host-root={root}," \
                "device=/dev/null"
            args = [a for e in entries for a in
                    ("-accel", e.format(base=base, tmp=run_dir))]
            args += ["-accel", "tcg", "-M", "pc", "-S", "-m", "32",
                     "-smp", str(smp)]
            assert safe_accel_args(args, run_dir), args
            run, problems = run_hpkvm(run_dir, args, root, props)
            if helper:
                helper.stop()
            if not run.up:
                problems.append("did not go on with TCG")
            failures.add(run, problems)
    wrap = netns_wrap()
    if wrap is None:
        failures.check()
        return "SKIP hpnet's: no network namespace (unshare -n failed)"
    members = hpnet_schema()
    links = host_links()
    with tempfile.TemporaryDirectory() as tmp:
        hostlib.write(tmp, "file", "not a socket\n")
        make_net_files(tmp)
        for opts, want in REGRESSIONS_HPNET:
            args = ["-accel", "tcg", "-M", "none", "-netdev",
                    "hpnet,id=n0," + opts.format(tmp=tmp)]
            run, problems = run_hpnet(tmp, args, wrap, members)
            if want is None and not run.up:
                problems.append("did not start")
            if want and want.format(tmp=tmp) not in run.stderr:
                problems.append(f"did not say {want.format(tmp=tmp)!r}")
            failures.add(run, problems)
    failures.check()
    assert host_links() == links, f"{links} -> {host_links()}"


@tests.case
def fuzz_accel_hpkvm_properties():
    rng = random.Random(f"{SEED}:hpkvm")
    props = accel_props("hpkvm")
    kvm_props = accel_props("kvm")
    failures = Failures("hpkvm")
    skipped = started = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        for i in range(RUNS):
            run_dir, root = make_run_dir(tmp, rng)
            helper = start_helper(root)
            ctx = HostCtx(rng, run_dir, root)
            while True:
                args = hpkvm_args(ctx, props, kvm_props)
                if safe_accel_args(args, run_dir) and \
                        max(len(os.fsencode(a)) for a in args) < MAX_ARG:
                    break
                skipped += 1
            run, problems = run_hpkvm(run_dir, args, root, props)
            if helper:
                helper.stop()
            failures.add(run, problems, args)
            started += run.up
            skipped += ctx.skipped_roots
            subprocess.run(["rm", "-rf", "--", run_dir], check=True)
    print(f"# hpkvm: {RUNS} runs, {started} went on with TCG, {skipped} "
          f"values or command lines left out as unsafe", flush=True)
    failures.check()


@tests.case
def fuzz_netdev_hpnet_options():
    wrap = netns_wrap()
    if wrap is None:
        return "SKIP no network namespace for hpnet (unshare -n failed)"
    rng = random.Random(f"{SEED}:hpnet")
    members = hpnet_schema()
    failures = Failures("hpnet")
    links = host_links()
    started = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        roots = make_fake_net_roots(tmp)
        make_net_files(tmp)
        hostlib.write(tmp, "file", "not a socket\n")
        ctx = NetCtx(rng, tmp, roots, members)
        for i in range(RUNS):
            args = hpnet_args(ctx, members)
            if max(len(os.fsencode(a)) for a in args) >= MAX_ARG:
                continue
            run, problems = run_hpnet(tmp, args, wrap, members)
            failures.add(run, problems, args)
            started += run.up
    print(f"# hpnet: {RUNS} runs, {started} started", flush=True)
    failures.check()
    assert host_links() == links, \
        f"interfaces on this host changed: {links} -> {host_links()}"


def main():
    print(f"# seed {SEED}, {RUNS} runs a case: HPKVM_FUZZ_SEED={SEED} "
          f"HPKVM_FUZZ_RUNS={RUNS} repeats them", flush=True)
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())
