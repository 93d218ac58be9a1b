#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""QEMU's linux-headers/linux/hpkvm.h is the kernel's, byte for byte.

kvm/patches/0001 adds include/uapi/linux/hpkvm.h to the kernel, and
later patches of the series change it (0007: contract version 2); QEMU
imports uapi headers unchanged.  If one is edited without the other, the
two sides of the contract disagree on a number or a layout, and nothing
else would say so until a feature misbehaves.  The kernel's header is
the one the whole series leaves: each patch's part for that file,
applied in order with patch(1).  Prints TAP.
"""

import glob
import os
import subprocess
import sys
import tempfile

# realpath: meson runs this from build/src, whose files link back here.
REPO = os.path.normpath(os.path.join(os.path.dirname(
    os.path.realpath(__file__)), "../../.."))
UAPI = "include/uapi/linux/hpkvm.h"


def file_diff(patch, path):
    """The part of @patch that changes @path (a diff patch(1) applies),
    or None."""
    lines, inside = [], False
    with open(patch) as f:
        for line in f:
            if line.startswith("diff --git "):
                inside = line.rstrip("\n").endswith(f" b/{path}")
            elif line == "-- \n":
                inside = False      # the mail's signature
            if inside:
                lines.append(line)
    return "".join(lines) if lines else None


def series_header(tmp):
    """The header as the series leaves it, or why there is none."""
    diffs = [(p, d) for p in sorted(glob.glob(os.path.join(
        REPO, "kvm/patches", "*.patch"))) if (d := file_diff(p, UAPI))]
    if not diffs or "new file mode" not in diffs[0][1]:
        return None, f"no patch of kvm/patches adds {UAPI} first"
    for patch, diff in diffs:
        res = subprocess.run(["patch", "-p1", "--batch", "--quiet", "-d",
                              tmp], input=diff, text=True,
                             capture_output=True, timeout=60, check=False)
        if res.returncode:
            return None, (f"{os.path.basename(patch)}'s change of {UAPI} "
                          f"does not apply: {res.stdout}{res.stderr}")
    with open(os.path.join(tmp, UAPI)) as f:
        return f.read(), None


def main():
    print("1..1")
    with open(os.path.join(REPO, "linux-headers/linux/hpkvm.h")) as f:
        qemu = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        kernel, why = series_header(tmp)
    if kernel is None:
        print(f"# {why}")
        print("not ok 1 - uapi-header-matches")
        return 1
    if kernel != qemu:
        print(f"# linux-headers/linux/hpkvm.h differs from {UAPI} as "
              f"kvm/patches leave it: copy it over (QEMU imports uapi "
              f"headers unchanged)")
        print("not ok 1 - uapi-header-matches")
        return 1
    print("ok 1 - uapi-header-matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
