#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""make bench in its tiny configuration, end to end: the table is printed
and the JSON is complete.  Not a benchmark: no figure is judged.
Prints TAP."""

import json
import os
import subprocess
import sys
import tempfile

BUILD = os.environ.get("HPKVM_BUILD", "build/qemu")
SRC = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.realpath(__file__)))))
WORKLOADS = ("idle", "cpuid", "tsc-deadline-write", "timer", "ipi-unicast",
             "ipi-multicast", "hlt-wake")


def main():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        print("1..0 # SKIP no usable /dev/kvm")
        return 0
    print("1..1")
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run([sys.executable,
                              os.path.join(SRC, "scripts/hpkvm/bench.py"),
                              BUILD, "--tiny", "--out", out],
                             capture_output=True, text=True, timeout=600)
        problems = []
        if res.returncode != 0:
            problems.append(f"exit status {res.returncode}")
        table = [ln for ln in res.stdout.splitlines()]
        if not any(ln.startswith("== local:") for ln in table):
            problems.append("no table")
        for w in WORKLOADS:
            rows = [ln for ln in table if ln.startswith(w + " ")]
            if not rows or "hpkvm/kvm" in rows[0]:
                problems.append(f"no row for {w}")
        try:
            with open(os.path.join(out, "results.json")) as f:
                raw = json.load(f)
            for accel in ("kvm", "hpkvm"):
                run = raw["hosts"]["local"][accel][0]
                for w in WORKLOADS:
                    r = run["workloads"][w]
                    if r["median"] <= 0 or "exits_per_op" not in r:
                        problems.append(f"{accel} {w}: {r}")
            if "granted by the kernel" not in res.stdout:
                problems.append("no statement of what the kernel granted")
        except (OSError, KeyError, IndexError, ValueError) as e:
            problems.append(f"results.json: {e!r}")
        if problems:
            print("not ok 1 - make bench --tiny")
            for line in problems + res.stdout.splitlines() + \
                    res.stderr.splitlines()[-20:]:
                print(f"# {line}")
            return 1
        for line in table:
            print(f"# {line}")
        print("ok 1 - make bench --tiny prints its table and valid JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
