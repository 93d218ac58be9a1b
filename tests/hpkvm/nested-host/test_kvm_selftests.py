#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Linux's own KVM selftests on Debian's KVM and on ours, in the nested
test hosts: the same tests must pass.

The tests are upstream's, unmodified (tools/testing/selftests/kvm of
Debian's linux-source for the tested kernel, built by
kvm/build-selftests.sh).  Each is run once (a failure up to three
times), with its own time bound, on:

- x86: Debian's kernel with Debian's kvm-amd; the same kernel with our
  KVM's modules (kvm/build.sh), where our series is the one difference;
  and our whole x86 kernel (kvm/build-kernel.sh), the one with the
  core-kernel half, on its own configuration;
- arm64: Debian's arm64 kernel, and our whole arm64 kernel (arm64's KVM
  cannot be a module: kvm/build-kernel.sh --arch arm64).

Every test's outcome (pass, skip, fail, time-out) must be the same on
Debian's side and each of ours; a difference is listed with the test's
last lines from each side.  The kernel log of our sides must hold no
warning or BUG that Debian's has not.  Tests that did not build from
Debian's source (stable backports whose selftests were not updated) are
printed, not hidden.  What the nested host cannot show: tests that need
hardware TCG lacks (Intel VMX, AMX, SEV, a PMU) skip on both sides
alike, and tests sized for hardware run far slower (ARGS sizes them
down, LEFT_OUT says which ones do not fit, and why).

Prints TAP: one case per architecture ("x86" or "arm64" as an
argument picks one); x86 boots three times, arm64 twice, 6-10 min each.
"""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "host"))
import hostlib  # noqa: E402
import image  # noqa: E402
from nested_host import NestedHostError, build_dir, run  # noqa: E402

# KSFT_SKIP (tools/testing/selftests/kselftest.h).
KSFT_SKIP = 4

# Each test's bound, seconds of the nested host's own clock, and each
# boot's (a side takes 3-5 min on a 2-core machine; the meson test's
# bound, 30 min, holds both sides).
TEST_TIMEOUT = 120
SIDE_TIMEOUT = 900
BOCHS_SIDE_TIMEOUT = 3600
# --all: the LEFT_OUT tests too, each side bounded 4 times longer.
EVERY = "--all" in sys.argv
# Time-outs as busybox's and GNU's timeout report them.
TIMED_OUT = (124, 143)

# Upstream's tests size themselves for hardware (1 GiB per vCPU, 100000
# migrations, every memory slot KVM allows).  Under TCG the nested host
# runs them some hundred times slower, so the tests that take options are
# run smaller, by their own options; the outcome compared is the same
# code's.  A tuple is several runs, "NAME:1", "NAME:2"...  The ones
# without options that exceed the bound are LEFT_OUT.
ARGS = {
    "access_tracking_perf_test": "-b 16M -v 2",
    "demand_paging_test": "-b 16M -v 2",
    "dirty_log_perf_test": "-b 16M -v 2 -i 2",
    "kvm_page_table_test": "-b 16M -v 2",
    "max_guest_memory_test": "-c 2 -m 1 -s 1",
    "memslot_modification_stress_test": "-b 16M -v 2 -i 100",
    # Its tests 1 (unmap in 2 MiB pieces) and 5 (read-write, whose own
    # alarm fires) do not fit; 0 and 2-4 do, in two runs.
    "memslot_perf_test": ("-s 128 -l 1 -r 1 -f 0 -e 0",
                          "-s 128 -l 1 -r 1 -f 2 -e 4"),
    "aarch64/debug-exceptions": "-i 100",
}
# arm64's tests of memory run once per guest mode the host supports (4K,
# 16K and 64K pages, 40 and 48 bits); dirty_log_perf_test takes more
# than the bound so: it runs the default mode only (P40V48_4K).
ARGS_ARM64 = {
    "dirty_log_perf_test": "-b 16M -v 2 -i 2 -m 5",
}

# Tests not run here, per architecture, each with why: no option makes
# them fit the bound, or their outcome is chance under TCG.
# (test_kvm_selftests.py --all runs them too.)
LEFT_OUT = {
    "x86": {
        "hardware_disable_test":
            "512 forks of a 4-vCPU VM, each run and killed: beyond the bound",
        "kvm_create_max_vcpus":
            "creates KVM_CAP_MAX_VCPUS (1024) vCPUs: beyond the bound",
        "rseq_test": "100000 forced task migrations: beyond the bound",
        "set_memory_region_test":
            "fills all 32764 memory slots with 2 MiB each: beyond the bound",
    },
    "arm64": {
        "rseq_test": "100000 forced task migrations: beyond the bound",
        # Not a matter of time: it fails or passes by chance on either
        # side (seen both ways on both).
        "aarch64/arch_timer":
            "its guest waits the timer's period plus 100 us for each "
            "interrupt, a margin TCG's nested delivery does not keep",
    },
}

# The Bochs nested host (VMX) runs the x86 tests, with x86's exceptions
# and one of its own.
LEFT_OUT["vmx"] = dict(
    LEFT_OUT["x86"],
    memslot_perf_test="on Debian's kvm-intel its sub-tests 2-4 stopped "
                      "the Bochs host for good: a CPU waited on a TLB "
                      "shootdown's function call for 439 s and more "
                      "(2026-12-07)")

# Differences between Debian's KVM and ours that are explained: (arch,
# test) -> why.  Any other difference fails.
EXPLAINED = {}

# At least this many tests must pass on Debian's KVM: a harness that ran
# nothing (no /dev/kvm, a missing library) fails, not passes alike.
MIN_PASSED = {"x86": 25, "arm64": 8, "vmx": 25}

# Host kernel messages that mean KVM did something wrong.
KERNEL_TROUBLE = re.compile(r"WARNING:|BUG:|Oops|Call Trace|"
                            r"general protection|refcount_t|list_(add|del)")

PAYLOAD = r"""
export LD_LIBRARY_PATH=/payload/lib
[ -c /dev/kvm ] || { echo "no-dev-kvm"; exit 1; }
echo "kselftest-kernel: $(uname -r)"
dmesg > /tmp/dmesg.0
while read -r label name bound args; do
    start=$(cut -d' ' -f1 /proc/uptime)
    # shellcheck disable=SC2086
    timeout "$bound" "/payload/kvm/$name" $args < /dev/null \
        > /tmp/kst.log 2>&1
    st=$?
    # A failure up to twice more (not a time-out: its bound is spent):
    # timing tests fail now and then on a loaded emulated host.  The
    # last try's status counts.
    all=$st
    tries=1
    while [ "$st" != 0 ] && [ "$st" != 4 ] && [ "$st" != 124 ] &&
          [ "$st" != 143 ] && [ $tries -lt 3 ]; do
        # shellcheck disable=SC2086
        timeout "$bound" "/payload/kvm/$name" $args < /dev/null \
            > /tmp/kst.again 2>&1
        st=$?
        all=$all,$st
        tries=$((tries + 1))
    done
    end=$(cut -d' ' -f1 /proc/uptime)
    echo "kselftest: $label $all $start $end"
    [ "$all" = 0 ] || [ "$all" = 4 ] ||
        tail -n 8 /tmp/kst.log | sed "s|^|kselftest-log: $label: |"
    dmesg > /tmp/dmesg.1
    diff /tmp/dmesg.0 /tmp/dmesg.1 | sed -n 's/^+\([^+]\)/\1/p' |
        sed "s|^|kselftest-dmesg: $label: |"
    mv /tmp/dmesg.1 /tmp/dmesg.0
done < /payload/kvm/list
echo "kselftest-done"
"""


def _read_list(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def test_runs(arch, names):
    """(label, test, arguments) of each run: ARGS's."""
    out = []
    for name in names:
        args = (ARGS_ARM64 if arch == "arm64" else {}).get(
            name, ARGS.get(name, ""))
        if isinstance(args, str):
            out.append((name, name, args))
        else:
            out += [(f"{name}:{i}", name, a) for i, a in enumerate(args, 1)]
    return out


def payload_files(arch, d, runs):
    """The tests, the runs' list with labels, bounds and arguments, and
    the one library they need beyond QEMU's (libgcc_s: glibc's
    pthread_cancel loads it), as nested_host.run()'s files."""
    files = {}
    lines = []
    for label, name, args in runs:
        with open(os.path.join(d, "bin", name), "rb") as f:
            files[f"kvm/{name}"] = f.read()
        lines.append(f"{label} {name} {TEST_TIMEOUT} {args}".rstrip())
    files["kvm/list"] = ("\n".join(lines) + "\n").encode()
    if arch == "x86":
        libdir = "/lib/x86_64-linux-gnu"
    else:
        libdir = os.path.join(image.arm64_sysroot(), "root",
                              "lib/aarch64-linux-gnu")
    with open(os.path.join(libdir, "libgcc_s.so.1"), "rb") as f:
        files["lib/libgcc_s.so.1"] = f.read()
    return files


def outcome(status):
    if status == 0:
        return "pass"
    if status == KSFT_SKIP:
        return "skip"
    if status in TIMED_OUT:
        return "time-out"
    return "fail"


class Side:
    """One boot's results per test: outcome (pass, skip, fail, time-out;
    a failure's last try counts), its tries' exit statuses if it failed,
    seconds, last log lines and kernel messages."""

    def __init__(self, label, res, names):
        self.label = label
        self.outcome, self.seconds, self.note = {}, {}, {}
        self.log, self.dmesg = {}, {}
        out = res.output
        assert "no-dev-kvm" not in out, f"{label}: no /dev/kvm\n{out}"
        assert "kselftest-done" in out, \
            f"{label}: the payload did not finish\n{out}"
        for line in out.splitlines():
            tag, _, rest = line.partition(": ")
            if tag == "kselftest":
                name, tries, start, end = rest.split()
                # Each try's exit status; the last one counts.
                statuses = [int(t) for t in tries.split(",")]
                self.outcome[name] = outcome(statuses[-1])
                self.note[name] = tries if \
                    outcome(statuses[0]) == "fail" else ""
                self.seconds[name] = float(end) - float(start)
            elif tag in ("kselftest-log", "kselftest-dmesg"):
                name, _, text = rest.partition(": ")
                d = self.log if tag == "kselftest-log" else self.dmesg
                d.setdefault(name, []).append(text)
        missing = [n for n in names if n not in self.outcome]
        assert not missing, f"{label}: no result for {missing}\n{out}"

    def trouble(self, name):
        return [m for m in self.dmesg.get(name, [])
                if KERNEL_TROUBLE.search(m)]


def run_side(arch, d, label, runs, host=run, side_timeout=SIDE_TIMEOUT,
             **kwargs):
    """Boot the nested host once (@host: nested_host's run, or
    bochs_host's) and run every test in it."""
    files = payload_files(arch, d, runs)
    names = [r[0] for r in runs]
    if arch == "arm64":
        kwargs |= dict(arch="aarch64", iommu=False, cpus=4)
    else:
        kwargs |= dict(cpus=2)
    kwargs |= dict(timeout=side_timeout * (4 if EVERY else 1), files=files)
    start = time.monotonic()
    try:
        res = host(PAYLOAD, **kwargs)
    except NestedHostError as e:
        # The emulated test bed, not what is tested: once more, as every
        # nested test does.
        print("# the nested host failed; booting it once more. Why:\n# "
              + str(e).replace("\n", "\n# "), flush=True)
        res = host(PAYLOAD, **kwargs)
    side = Side(label, res, names)
    print(f"# {label}: {len(names)} tests in "
          f"{time.monotonic() - start:.0f} s, kernel "
          f"{(re.findall(r'kselftest-kernel: (.*)', res.output) or ['?'])[0]}",
          flush=True)
    return side


def compare(arch, names, debian, ours):
    """Print the table of Debian's side and each of ours; return the
    (side, test) differences no EXPLAINED entry covers, and those where
    our kernel logged trouble that Debian's did not."""
    sides = [debian] + ours
    width = max(len(n) for n in names)
    print(f"# {'test':{width}}" +
          "".join(f"  {side.label:>24}" for side in sides))
    unexplained, trouble = [], []
    for n in names:
        cells, marks = [], []
        for side in sides:
            cells.append(f"{side.outcome[n]}"
                         f"{f' ({side.note[n]})' if side.note[n] else ''} "
                         f"{side.seconds[n]:.0f}s")
            if side is debian:
                continue
            if side.outcome[n] != debian.outcome[n]:
                if (arch, n) in EXPLAINED:
                    marks.append(f"explained: {EXPLAINED[(arch, n)]}")
                else:
                    marks.append(f"{side.label} differs")
                    unexplained.append((side, n))
            if side.trouble(n) and not debian.trouble(n):
                marks.append(f"{side.label}'s kernel log")
                trouble.append((side, n))
        print(f"# {n:{width}}" + "".join(f"  {c:>24}" for c in cells) +
              (f"  <-- {'; '.join(marks)}" if marks else ""))
    for side, n in unexplained + trouble:
        for s in (debian, side):
            for line in s.log.get(n, []) + s.trouble(n):
                print(f"# {s.label}: {n}: {line}")
    return ([f"{side.label}: {n}" for side, n in unexplained],
            [f"{side.label}: {n}" for side, n in trouble])


def selftests_agree(arch, debian_kwargs, ours, every=False, bed=None):
    """Run the selftests on Debian's KVM and on each of ours (label,
    run() arguments); assert that they agree.  @bed: "vmx" for the Bochs
    nested host (its own LEFT_OUT, MIN_PASSED and EXPLAINED entries),
    else @arch's TCG one."""
    key = bed or arch
    d = image.build_selftests(build_dir(), image.choose_kernel(), arch)
    built = _read_list(os.path.join(d, "built"))
    for line in _read_list(os.path.join(d, "unbuilt")):
        print(f"# did not build from Debian's source: {line}")
    chosen = [n for n in built if every or n not in LEFT_OUT[key]]
    for n in sorted(set(built) - set(chosen)):
        print(f"# left out: {n}: {LEFT_OUT[key][n]}")
    runs = test_runs(arch, chosen)
    names = [r[0] for r in runs]
    debian = run_side(arch, d, "Debian's KVM", runs, **debian_kwargs)
    sides = [run_side(arch, d, label, runs, **kwargs)
             for label, kwargs in ours]
    unexplained, trouble = compare(key, names, debian, sides)
    passed = sum(debian.outcome[n] == "pass" for n in names)
    assert passed >= MIN_PASSED[key], \
        f"only {passed} tests passed on Debian's KVM"
    assert not unexplained, \
        f"outcomes differ between Debian's KVM and ours: {unexplained}"
    assert not trouble, f"our kernel's log has trouble in: {trouble}"


tests = hostlib.TapSuite()


@tests.case
def upstream_kvm_selftests_pass_alike_on_debians_and_our_x86_kvm():
    """Debian's kernel with Debian's kvm-amd; the same kernel with our
    KVM's modules; our whole kernel."""
    selftests_agree("x86", dict(kvm="stock"),
                    [("our KVM modules", dict(kvm="hpkvm", kernel="debian")),
                     ("our whole kernel", dict(kvm="hpkvm",
                                               kernel="hpkvm"))], EVERY)


@tests.case
def upstream_kvm_selftests_pass_alike_on_debians_and_our_arm64_kvm():
    """Debian's arm64 kernel, and our whole arm64 kernel."""
    selftests_agree("arm64", dict(kvm="stock", kernel="debian"),
                    [("our whole kernel", dict(kvm="hpkvm",
                                               kernel="hpkvm"))], EVERY)


@tests.case
def upstream_kvm_selftests_pass_alike_on_debians_and_our_vmx_kvm():
    """The Bochs nested host's VMX (Skylake-X): Debian's kernel with
    Debian's kvm-intel, and with our KVM's modules."""
    import bochs_host
    bochs = dict(host=bochs_host.run, model="vmx",
                 side_timeout=BOCHS_SIDE_TIMEOUT)
    selftests_agree("x86", dict(bochs, kvm="stock"),
                    [("our KVM modules", dict(bochs, kvm="hpkvm"))],
                    EVERY, bed="vmx")


def main():
    """Every case, or those whose name holds an argument ("x86",
    "arm64")."""
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    tests.cases = [fn for fn in tests.cases
                   if not only or any(o in fn.__name__ for o in only)]
    return tests.run()


if __name__ == "__main__":
    sys.exit(main())
