#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Run hpkvm's tests (meson suite "hpkvm") and print one closing line.

    run-tests.py BUILD_DIR [--build-times FILE] [MESON-TEST-ARGS...]

meson counts test executables; this counts the test cases inside them,
from the TAP each one printed, and ends with "N passed, N failed,
N skipped".  A test executable that failed without a failing case (a
crash, a timeout) counts as one failed case.  Exits non-zero on any
failure.

For each failure it then repeats, after meson's summary, the lines that
explain it (the TAP comments before each failing case, the end of the
test's stderr) and, last, one line per failed case with its exception:
CI systems often keep only the end of a log.  Just before those, one
line says how long the build's steps (FILE: "STEP SECONDS" lines, which
the Makefile writes; removed once read) and the longest tests took.
"""

import json
import os
import re
import subprocess
import sys

TAP_RESULT = re.compile(r"^(not ok|ok)\b[^#]*(#\s*(SKIP|TODO)\b)?", re.I)
# A whole test skipped, with its reason: "1..0 # SKIP needs root".
TAP_SKIP_ALL = re.compile(r"^1\.\.0\s*#\s*SKIP\b\s*(.*)", re.I)
# How much of each failure is repeated at the end.
EXCERPT_LINES = 40
EXCERPT_WIDTH = 300
SUMMARY_WIDTH = 600


def excerpt(lines):
    """The last EXCERPT_LINES of lines, each cut to EXCERPT_WIDTH."""
    return [line[:EXCERPT_WIDTH] for line in lines[-EXCERPT_LINES:]]


# A Python traceback's last line, in a TAP comment: "# ValueError: ...".
EXCEPTION_LINE = re.compile(r"^#\s*([\w.]+(Error|Exception|Exit)\b.*)")


# A traceback's caret line under the failing expression: "#   ^^^^^".
CARETS = re.compile(r"^#\s*[\^~]+\s*$")


def failing_source(comments, at):
    """The source line a traceback shows just above its exception at
    comments[at] (an assert names the check that failed), or None."""
    i = at - 1
    while i >= 0 and CARETS.match(comments[i]):
        i -= 1
    if i < 1 or not comments[i - 1].lstrip("# ").startswith("File "):
        return None
    return comments[i].lstrip("# ").strip()


def exception(comments):
    """The last exception in TAP comments, after the source line that
    raised it and before its next two lines, joined."""
    starts = [i for i, line in enumerate(comments)
              if EXCEPTION_LINE.match(line)]
    if not starts:
        return "see above"
    first = EXCEPTION_LINE.match(comments[starts[-1]]).group(1)
    rest = [line.lstrip("# ") for line in comments[starts[-1] + 1:][:2]]
    source = failing_source(comments, starts[-1])
    return " | ".join(([source] if source else []) + [first] +
                      [line for line in rest if line])


def explain_failure(entry):
    """(lines that say why a test executable failed, one-line summaries)"""
    name = entry.get("name")
    out = [f"hpkvm: --- {name}: {entry.get('result')} ---"]
    summaries = []
    comments = []
    for line in entry.get("stdout", "").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
        elif TAP_RESULT.match(stripped):
            if stripped.lower().startswith("not ok"):
                out += excerpt(comments) + [stripped]
                summaries.append(f"hpkvm: FAILED {name}: {stripped}: "
                                 f"{exception(comments)}"[:SUMMARY_WIDTH])
            comments = []
    stderr = entry.get("stderr", "").splitlines()
    if stderr:
        out += ["hpkvm: stderr (end):"] + excerpt(stderr)
    if not summaries:
        summaries.append(f"hpkvm: FAILED {name}: {entry.get('result')}, "
                         f"{(stderr or ['no stderr'])[-1]}"[:EXCERPT_WIDTH])
    return out, summaries


# Tests at least this long (seconds) are named in the durations line.
LONG_TEST = 30


def durations(times_file, entries):
    """One line: the build steps' seconds from times_file (then removed)
    and the meson tests' of at least LONG_TEST, longest first."""
    steps = []
    if times_file:
        try:
            with open(times_file, encoding="utf-8") as f:
                steps = [line.split() for line in f if line.strip()]
            os.unlink(times_file)
        except OSError:
            pass
    tests = sorted(((e.get("duration", 0), e.get("name", "?"))
                    for e in entries), reverse=True)
    return ("hpkvm: seconds taken: build " +
            (", ".join(" ".join(step) for step in steps) or "(not timed)") +
            "; tests " + ", ".join(f"{name.split('/')[-1].strip()} {d:.0f}"
                                   for d, name in tests if d >= LONG_TEST) +
            f" ({sum(d for d, _ in tests):.0f} in all)")


def main():
    build = sys.argv[1]
    args = sys.argv[2:]
    times_file = None
    if args[:1] == ["--build-times"]:
        times_file, args = args[1], args[2:]
    cmd = ["meson", "test", "-C", build, "--suite", "hpkvm", "--no-rebuild",
           "--print-errorlogs", *args]
    print("hpkvm:", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)

    log = os.path.join(build, "meson-logs", "testlog.json")
    passed = failed = skipped = 0
    with open(log, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    explanations, summaries = [], []
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
        if case_failed:
            lines, why = explain_failure(entry)
            explanations += lines
            summaries += why
    if not entries:
        print("hpkvm: meson ran no test", file=sys.stderr)
        failed += 1
    if rc != 0 and failed == 0:
        failed = 1
    print(durations(times_file, entries))
    for line in explanations + summaries:
        print(line)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
