#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""make bench: the seed's micro-benchmarks and an exit census, -accel kvm
and -accel hpkvm side by side (and -accel tcg as a reference), alternating
in one run, on this machine's KVM and in the nested test host.

For each workload of the test guest's bench mode (tests/hpkvm/guest/
bench.c) it reports latency (min / median / p99, TSC cycles converted to
ns with the guest's TSC frequency) and the VM exits per operation by
reason, from KVM's binary statistics (query-stats) read while the VM is
stopped at the workload's boundaries.  The guest stops the VM itself
there (a pvpanic write, with -action panic=pause: the VM stops at that
write's exit), so a frame holds its workload's exits plus exactly one
I/O exit, its end boundary's, which is subtracted; an empty workload
("null") checks that.  It prints one table, writes
the raw results as JSON and, when matplotlib is there, a PNG chart of the
hpkvm/kvm ratios.  Benchmarks never fail on a slow machine: only a
broken run (no result, a boundary that costs other than one exit) is an
error.

  bench.py BUILD [--tiny] [--out DIR] [--reps N] [--samples N]
           [--no-nested] [--no-local] [--no-tcg]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import hpkvm_qmp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests/hpkvm/nested-host"))

STATS = {"execute": "query-stats",
         "arguments": {"target": "vcpu", "providers": [{"provider": "kvm"}]}}
# Exits the host caused (its interrupts, QEMU's kicks), not the guest.
HOST_CAUSED = ("irq_exits", "signal_exits", "request_irq_exits")
# Of those, the VM exits that KVM's "exits" counts: signal_exits and
# request_irq_exits are returns to QEMU, not VM exits (subtracting them
# made the guest's exits negative).
HOST_VM_EXITS = ("irq_exits",)
# What a frame boundary itself costs: the pvpanic write's exit, as
# hardware files it (the null frame says how this KVM does).
BOUNDARY = {"exits": 1, "io_exits": 1, "guest_exits": 1}
# The guest stops itself at each boundary (see tests/hpkvm/guest/bench.c).
BOUNDARY_ARGS = ["-device", "pvpanic", "-action", "panic=pause"]
# The exits a reader cares about, by KVM's statistic names.
REASONS = ("halt_exits", "irq_exits", "io_exits", "mmio_exits",
           "signal_exits", "irq_window_exits", "nmi_window_exits",
           "request_irq_exits", "insn_emulation", "hypercalls")
CPU = {"kvm": "host,-arch-capabilities", "hpkvm": "host,-arch-capabilities",
       "tcg": "max"}
HOSTS = {
    "local": "this machine's KVM (nested paravirtual: timings real but "
             "noisy, exits emulated differently from hardware)",
    "nested": "the nested test host's KVM (real SVM exit semantics: exit "
              "counts meaningful, timings not: it runs under TCG)",
}


HOSTS_SHORT = {
    "local": "this machine (nested paravirtual KVM): timings real, exit "
             "counts emulated",
    "nested": "nested test host (KVM under TCG): exit counts real, "
              "timings not",
}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def run_local(build, accel, samples, idle, smp, tmp):
    """One guest run under @accel; frames: [(k, 'begin'|'end', stats)]."""
    qemu = os.path.join(build, "qemu-system-x86_64")
    guest = os.path.join(build, "tests/hpkvm/guest/hpkvm-guest.elf")
    sock = os.path.join(tmp, f"{accel}.qmp")
    serial = os.path.join(tmp, f"{accel}.serial")
    for p in (sock, serial):
        if os.path.exists(p):
            os.unlink(p)
    cmd = [qemu, "-accel", accel, "-cpu", CPU[accel], "-smp", str(smp),
           "-m", "64", "-machine", "pc", "-S", "-nodefaults",
           "-display", "none", "-monitor", "none",
           "-kernel", guest, "-append", f"bench={samples} bench-idle={idle}",
           "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
           "-serial", f"file:{serial}",
           "-qmp", f"unix:{sock},server=on,wait=off", *BOUNDARY_ARGS]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    frames = []
    qmp = hpkvm_qmp.qmp_module(build)
    mon = None
    try:
        mon = hpkvm_qmp.connect(build, sock, deadline, proc,
                                bound_by_deadline=True)
        if mon is None:
            raise RuntimeError(f"{accel}: QEMU exited before QMP answered: "
                               f"{proc.stderr.read()[-500:]}")
        info = mon.cmd("query-hpkvm")
        mon.cmd("cont")
        k, edge = 0, "begin"
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                now = mon.cmd("query-status")["status"]
            except (OSError, qmp.QMPError):
                break                   # the guest ended QEMU
            if now != "guest-panicked":     # not at a boundary yet
                time.sleep(0.002)
                continue
            stats = (mon.cmd(STATS["execute"], **STATS["arguments"])
                     if accel != "tcg" else [])
            frames.append((k, edge, stats))
            mon.cmd("cont")
            if edge == "end":
                k += 1
            edge = "end" if edge == "begin" else "begin"
        status = proc.wait(max(1, deadline - time.monotonic()))
    finally:
        if mon:
            mon.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = read(serial)
    if status != 1:
        raise RuntimeError(f"{accel}: guest did not pass (status {status}): "
                           f"{text[-500:]} {proc.stderr.read()[-500:]}")
    return parse(text, frames, info)


def vcpu_totals(stats):
    """{stat: value summed over vCPUs} of one query-stats answer."""
    out = {}
    for vcpu in stats:
        for s in vcpu["stats"]:
            if isinstance(s["value"], int):
                out[s["name"]] = out.get(s["name"], 0) + s["value"]
    return out


def parse(text, frames, info):
    """Results by workload: cycles, and exit deltas per operation."""
    lines = [ln for ln in text.splitlines() if ln.startswith("hpkvm-bench")]
    head = [ln for ln in lines if "tsc-khz=" in ln][0]
    fields = dict(f.split("=") for f in head.split()[1:])
    khz = int(fields["tsc-khz"])
    results = [ln.split()[2:] for ln in lines if " result " in ln]
    by_frame = {}
    for k, edge, stats in frames:
        by_frame.setdefault(k, {})[edge] = vcpu_totals(stats)
    out = {"tsc_khz": khz, "tsc_source": fields["source"],
           "cpus": int(fields["cpus"]),
           "notes": [ln.split(" note ", 1)[1] for ln in lines
                     if " note " in ln],
           "hpkvm": info, "workloads": {}}
    for k, res in enumerate(results):
        name = res[0]
        vals = dict(f.split("=") for f in res[1:])
        w = {key: int(vals[key]) for key in ("n", "min", "median", "p99")}
        fr = by_frame.get(k, {})
        if "begin" in fr and "end" in fr and fr["begin"]:
            w["exits"] = {s: fr["end"][s] - fr["begin"].get(s, 0)
                          for s in fr["end"]
                          if s == "exits" or s in REASONS}
            w["exits"]["guest_exits"] = w["exits"]["exits"] - sum(
                w["exits"].get(s, 0) for s in HOST_VM_EXITS)
        out["workloads"][name] = w
    # The empty frame holds the boundary's one exit and, of what the
    # guest causes, nothing else: else the accounting is not exact.  It
    # also says which reason this KVM files that exit under: io_exits on
    # hardware; a nested paravirtual KVM that emulates the port write
    # counts insn_emulation instead.
    null = out["workloads"].get("null", {}).get("exits", {})
    boundary = dict(BOUNDARY)
    out["boundary_extra"] = {}
    if null:
        guest = null.get("guest_exits", 0)
        if guest != 1:
            out["boundary_extra"]["guest_exits"] = guest - 1
        boundary = {r: v for r, v in null.items()
                    if r in REASONS and r not in HOST_CAUSED and v}
        boundary.update(exits=1, guest_exits=1)
    out["boundary"] = boundary
    for name, w in out["workloads"].items():
        if "exits" in w and name != "null":
            ops = max(w["n"], 1)
            w["exits_per_op"] = {s: (v - boundary.get(s, 0)) / ops
                                 for s, v in w["exits"].items()}
            # A count below what one boundary costs: not exact either.
            out["boundary_extra"].update(
                {f"{name}:{s}": v for s, v in w["exits_per_op"].items()
                 if v < 0})
    return out


NESTED_PAYLOAD = r"""
run_bench() {
    label=$1; shift
    rm -f /tmp/qmp.sock /tmp/serial.log
    qemu-system-x86_64 -machine pc -smp %(smp)d -m 64 -S -nodefaults \
        -kernel "$HPKVM_GUEST" -append "bench=%(samples)d bench-idle=%(idle)d" \
        -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
        -display none -monitor none -serial file:/tmp/serial.log \
        -qmp unix:/tmp/qmp.sock,server=on,wait=off %(boundary)s "$@" &
    qemu_pid=$!
    wait_qmp_socket || return 1
    echo "BENCH $label hpkvm $(qmp-exec /tmp/qmp.sock '{"execute": "query-hpkvm"}')"
    qmp-exec /tmp/qmp.sock '{"execute": "cont"}' > /dev/null
    # The guest stops the VM at each boundary (pvpanic, panic=pause).
    for k in $(seq 0 %(frames)d); do
        for edge in begin end; do
            i=0
            until qmp-exec /tmp/qmp.sock '{"execute": "query-status"}' |
                    grep -q '"guest-panicked"'; do
                kill -0 $qemu_pid 2>/dev/null || break 3
                sleep 0.02; i=$((i + 1))
                if [ $i -gt 15000 ]; then
                    echo "BENCH $label no-boundary $k $edge"
                    kill -9 $qemu_pid
                    break 3
                fi
            done
            echo "BENCH $label stats $k $edge $(qmp-exec /tmp/qmp.sock '%(stats)s')"
            qmp-exec /tmp/qmp.sock '{"execute": "cont"}' > /dev/null
        done
    done
    wait_qemu
    echo "BENCH $label status $?"
    sed "s/^/BENCH $label serial /" /tmp/serial.log
}
"""


def run_nested(build, accels, samples, idle, reps):
    """Each accelerator in turn, reps times, in one boot of the nested
    host (4 CPUs: hpkvm leases cores 1-3, housekeeping on 0)."""
    from nested_host import L2_SHELL, run
    smp = 3
    args = {"kvm": "-accel kvm -cpu host",
            "hpkvm": "-accel hpkvm,host-cpus=1-3,housekeeping-cpus=0 "
                     "-cpu host"}
    script = L2_SHELL + NESTED_PAYLOAD % {"smp": smp, "samples": samples, "idle": idle,
                               "boundary": " ".join(BOUNDARY_ARGS),
                               "frames": 7, "stats": json.dumps(STATS)}
    order = []
    for rep in range(reps):
        for accel in accels:
            label = f"{accel}-{rep}"
            order.append((accel, label))
            script += f"run_bench {label} {args[accel]}\n"
    res = run(script, cpus=4, timeout=3000)
    out = {}
    for accel, label in order:
        pre = f"BENCH {label} "
        lines = [ln[len(pre):] for ln in res.output.splitlines()
                 if ln.startswith(pre)]
        serial = "\n".join(ln[len("serial "):] for ln in lines
                           if ln.startswith("serial ")) + "\n"
        frames, info = [], {}
        status = None
        for ln in lines:
            parts = ln.split(" ", 3)
            if parts[0] == "stats":
                stats = json.loads(parts[3]).get("return", [])
                frames.append((int(parts[1]), parts[2], stats))
            elif parts[0] == "hpkvm":
                info = json.loads(ln[len("hpkvm "):]).get("return", {})
            elif parts[0] == "status":
                status = int(parts[1])
        if status != 1:
            raise RuntimeError(f"nested {label}: guest did not pass "
                               f"({status}): {serial[-400:]}")
        out.setdefault(accel, []).append(parse(serial, frames, info))
    return out


def ns(cycles, khz):
    return cycles * 1e6 / khz


def summarize(runs):
    """Per accelerator: per workload, medians over runs and the spread."""
    table = {}
    for accel, rs in runs.items():
        for name in rs[0]["workloads"]:
            meds = [ns(r["workloads"][name]["median"], r["tsc_khz"])
                    for r in rs if name in r["workloads"]]
            p99s = [ns(r["workloads"][name]["p99"], r["tsc_khz"])
                    for r in rs if name in r["workloads"]]
            exits = [r["workloads"][name].get("exits_per_op", {})
                     for r in rs if name in r["workloads"]]
            per_op = {}
            for e in exits:
                for s, v in e.items():
                    per_op.setdefault(s, []).append(v)
            table.setdefault(name, {})[accel] = {
                "median_ns": statistics.median(meds),
                "p99_ns": statistics.median(p99s),
                "spread": (max(meds) / min(meds)) if min(meds) > 0 else None,
                "runs": len(meds),
                "n": rs[0]["workloads"][name]["n"],
                "exits_per_op": {s: statistics.median(v)
                                 for s, v in per_op.items()},
            }
    return table


def fmt_ns(v):
    if v >= 1e6:
        return f"{v / 1e6:.2f}ms"
    if v >= 1e3:
        return f"{v / 1e3:.1f}us"
    return f"{v:.0f}ns"


def top_reasons(per_op):
    parts = [(v, s) for s, v in per_op.items()
             if s not in ("exits", "guest_exits") and v >= 0.05]
    parts.sort(reverse=True)
    return ",".join(f"{s.replace('_exits', '')}={v:.1f}"
                    for v, s in parts[:3])


def print_table(host, table, accels, reps):
    print()
    print(f"== {host}: {HOSTS[host]}")
    print(f"   {reps} run(s) per accelerator, alternating; latency = median "
          f"over runs of each run's median (p99 likewise); spread = "
          f"slowest/fastest run's median; exits/op = VM exits the guest "
          f"caused (all VM exits but host interrupts), "
          f"less the frame's one boundary exit, per operation")
    head = f"{'workload':<19}{'n':>5}"
    for a in accels:
        head += f" | {a + ' median (p99)':<24}{'spread':>7}{'exits/op':>10}"
    if "kvm" in accels and "hpkvm" in accels:
        head += " | hpkvm/kvm lat  exits"
    print(head)
    print("-" * len(head))
    for name, row in table.items():
        if name == "null":
            continue
        any_a = next(iter(row.values()))
        line = f"{name:<19}{any_a['n']:>5}"
        for a in accels:
            r = row.get(a)
            if not r:
                line += " | " + " " * 41
                continue
            lat = f"{fmt_ns(r['median_ns'])} ({fmt_ns(r['p99_ns'])})"
            spread = f"{r['spread']:.2f}x" if r["spread"] else "-"
            exits = r["exits_per_op"].get("guest_exits")
            ex = f"{exits:.2f}" if exits is not None else "n/a"
            line += f" | {lat:<24}{spread:>7}{ex:>10}"
        if "kvm" in row and "hpkvm" in row:
            k, h = row["kvm"], row["hpkvm"]
            lat = h["median_ns"] / k["median_ns"] if k["median_ns"] else 0
            ke = k["exits_per_op"].get("guest_exits")
            he = h["exits_per_op"].get("guest_exits")
            ratio = (f"{he / ke:.2f}" if ke and ke > 0.05 and he is not None
                     else "-")
            line += f" | {lat:>12.2f}x  {ratio:>5}"
        print(line)
    for name, row in table.items():
        reasons = "; ".join(f"{a}: {top_reasons(r['exits_per_op'])}"
                            for a, r in row.items()
                            if top_reasons(r["exits_per_op"]))
        if reasons and name != "null":
            print(f"   exits/op by reason, {name}: {reasons}")


def granted(runs):
    rs = runs.get("hpkvm")
    if not rs:
        return "hpkvm not run"
    info = rs[0]["hpkvm"]
    feats = info.get("features", [])
    g = [f["feature"] for f in feats if f.get("granted")]
    up = [f["feature"] for f in feats
          if not f.get("granted") and f.get("mechanism") == "upstream"]
    exits = ",".join(info.get("disabled-exits", [])) or "none"
    return (f"kernel hpkvm contract version {info.get('kernel-version')}; "
            f"granted by the kernel: {', '.join(g) or 'nothing'}; upstream "
            f"fallbacks: {', '.join(up) or 'none'}; exits disabled: "
            f"{exits}; realtime hint: {info.get('realtime-hint')}; "
            f"host-cpus: {info.get('host-cpus', 'none')}")


def chart(summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"hpkvm bench: no matplotlib: {path} not drawn "
              f"(scripts/hpkvm/install-deps.sh --bench installs it)")
        return False
    hosts = [h for h in summary if summary[h]]
    fig, axes = plt.subplots(len(hosts), 1, figsize=(9, 3.2 * len(hosts)),
                             squeeze=False)
    for ax, host in zip(axes[:, 0], hosts):
        names, lat, ex = [], [], []
        for name, row in summary[host].items():
            if name == "null" or "kvm" not in row or "hpkvm" not in row:
                continue
            k, h = row["kvm"], row["hpkvm"]
            names.append(name)
            lat.append(h["median_ns"] / k["median_ns"])
            ke = k["exits_per_op"].get("guest_exits") or 0
            he = h["exits_per_op"].get("guest_exits") or 0
            ex.append(he / ke if ke > 0.05 else 1.0)
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], lat, 0.4, label="latency hpkvm/kvm")
        ax.bar([i + 0.2 for i in x], ex, 0.4, label="exits/op hpkvm/kvm")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_title(HOSTS_SHORT[host], fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--tiny", action="store_true",
                    help="prove it works end to end: few samples, local "
                         "only, one run, no chart")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--no-nested", action="store_true")
    ap.add_argument("--no-tcg", action="store_true")
    ap.add_argument("--no-local", action="store_true")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    out = args.out or os.path.join(build, "..", "bench")
    os.makedirs(out, exist_ok=True)
    if args.tiny:
        args.reps, args.samples, args.no_nested, args.no_tcg = 1, 8, True, \
            True
    idle = 100 if args.tiny else 600
    local_accels = ["kvm", "hpkvm"] + ([] if args.no_tcg else ["tcg"])

    raw = {"config": vars(args), "hosts": {}}
    summary = {}
    if args.no_local:
        pass
    elif os.access("/dev/kvm", os.R_OK | os.W_OK):
        runs = {}
        with tempfile.TemporaryDirectory(prefix="hpkvm-bench-") as tmp:
            for rep in range(args.reps):
                # Rotate the order so no accelerator always goes first.
                order = local_accels[rep % len(local_accels):] + \
                    local_accels[:rep % len(local_accels)]
                for accel in order:
                    print(f"hpkvm bench: local {accel} run {rep + 1}/"
                          f"{args.reps}", flush=True)
                    runs.setdefault(accel, []).append(
                        run_local(build, accel, args.samples, idle, 2, tmp))
        raw["hosts"]["local"] = runs
        summary["local"] = summarize(runs)
    else:
        print("hpkvm bench: no usable /dev/kvm: local runs skipped")
    if not args.no_nested:
        print("hpkvm bench: nested test host, kvm and hpkvm alternating",
              flush=True)
        runs = run_nested(build, ["kvm", "hpkvm"], max(args.samples // 4, 20),
                          1500, 1)
        raw["hosts"]["nested"] = runs
        summary["nested"] = summarize(runs)

    inexact = [(h, a, r["boundary_extra"])
               for h, runs in raw["hosts"].items()
               for a, rs in runs.items() for r in rs if r["boundary_extra"]]
    for host, table in summary.items():
        accels = [a for a in ("kvm", "hpkvm", "tcg") if a in raw["hosts"][host]]
        print_table(host, table, accels, len(raw["hosts"][host]["kvm"]))
        print(f"   what hpkvm had ({host}): {granted(raw['hosts'][host])}")
        notes = sorted({f"{a}: {n}" for a, rs in raw["hosts"][host].items()
                        for r in rs for n in r["notes"]})
        for n in notes:
            print(f"   guest note, {n}")
    raw["summary"] = summary
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump(raw, f, indent=1)
    print(f"\nhpkvm bench: raw results in {os.path.abspath(path)}")
    if not args.tiny and summary:
        png = os.path.join(out, "ratios.png")
        if chart(summary, png):
            print(f"hpkvm bench: chart in {os.path.abspath(png)}")
    if inexact:
        # Broken accounting is an error, not a figure.
        print(f"hpkvm bench: a boundary cost other than its one exit, or "
              f"a workload less than a boundary, so exits/op are not "
              f"exact: {inexact}")
        return 1
    return 0 if summary else 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
