#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Run hpkvm's tests (meson suite "hpkvm") and print one closing line.

    run-tests.py BUILD_DIR [MESON-TEST-ARGS...]

meson counts test executables; this counts the test cases inside them,
from the TAP each one printed, and ends with "N passed, N failed,
N skipped".  A test executable that failed without a failing case (a
crash, a timeout) counts as one failed case.  Exits non-zero on any
failure.
"""

import json
import os
import re
import subprocess
import sys

TAP_RESULT = re.compile(r"^(not ok|ok)\b[^#]*(#\s*(SKIP|TODO)\b)?", re.I)
# A whole test skipped, with its reason: "1..0 # SKIP needs root".
TAP_SKIP_ALL = re.compile(r"^1\.\.0\s*#\s*SKIP\b\s*(.*)", re.I)


def main():
    build = sys.argv[1]
    cmd = ["meson", "test", "-C", build, "--suite", "hpkvm", "--no-rebuild",
           "--print-errorlogs", *sys.argv[2:]]
    print("hpkvm:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)

    log = os.path.join(build, "meson-logs", "testlog.json")
    passed = failed = skipped = 0
    with open(log, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    for entry in entries:
        case_failed = 0
        for line in entry.get("stdout", "").splitlines():
            skip_all = TAP_SKIP_ALL.match(line.strip())
            if skip_all:
                skipped += 1
                print(f"hpkvm: {entry.get('name')} skipped: "
                      f"{skip_all.group(1)}")
            m = TAP_RESULT.match(line.strip())
            if not m:
                continue
            if m.group(3):
                skipped += 1
            elif m.group(1).lower() == "ok":
                passed += 1
            else:
                case_failed += 1
        if entry.get("result") not in ("OK", "SKIP", "EXPECTEDFAIL") \
                and case_failed == 0:
            case_failed = 1
        failed += case_failed
    if not entries:
        print("hpkvm: meson ran no test", file=sys.stderr)
        failed += 1
    if rc != 0 and failed == 0:
        failed = 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
