#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""QEMU's linux-headers/linux/hpkvm.h is the kernel's, byte for byte.

kvm/patches/0001 adds include/uapi/linux/hpkvm.h to the kernel; QEMU
imports uapi headers unchanged.  If one is edited without the other, the
two sides of the contract disagree on a number or a layout, and nothing
else would say so until a feature misbehaves.  Prints TAP.
"""

import glob
import os
import sys

# realpath: meson runs this from build/src, whose files link back here.
REPO = os.path.normpath(os.path.join(os.path.dirname(
    os.path.realpath(__file__)), "../../.."))
UAPI = "include/uapi/linux/hpkvm.h"


def added_file(patch, path):
    """The content of @path as the new file @patch adds, or None."""
    lines, inside = [], False
    with open(patch) as f:
        for line in f:
            if line.startswith("diff --git "):
                inside = line.rstrip("\n").endswith(f" b/{path}")
            elif inside and line.startswith("+++ "):
                continue
            elif inside and line.startswith("+"):
                lines.append(line[1:])
    return "".join(lines) if lines else None


def main():
    print("1..1")
    adders = [p for p in sorted(glob.glob(os.path.join(REPO, "kvm/patches",
                                                       "*.patch")))
              if added_file(p, UAPI) is not None]
    with open(os.path.join(REPO, "linux-headers/linux/hpkvm.h")) as f:
        qemu = f.read()
    if len(adders) != 1:
        print(f"# {len(adders)} patches of kvm/patches add {UAPI}, not one")
        print("not ok 1 - uapi-header-matches")
        return 1
    kernel = added_file(adders[0], UAPI)
    if kernel != qemu:
        print(f"# linux-headers/linux/hpkvm.h differs from {UAPI} of "
              f"{os.path.basename(adders[0])}: copy it over (QEMU imports "
              f"uapi headers unchanged)")
        print("not ok 1 - uapi-header-matches")
        return 1
    print("ok 1 - uapi-header-matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
