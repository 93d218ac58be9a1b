#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Print the ninja targets that "meson install" installs, one per line.

    install-targets.py BUILD

"meson install --no-rebuild" (make install, make deb, the test
hpkvm-install) needs every target it installs built.  With QEMU's tools
configured (hpkvm's are built with them) that includes qemu-img,
qemu-nbd, qemu-storage-daemon and the like, which depend on what the
host has (elf2dmp needs libcurl, for one): meson's install plan names
them, a list in the Makefile could not.  A plain "ninja" would build them
too, but also every test program of QEMU's, about a thousand steps more.
Run it after ninja has regenerated the build, so the plan is current.
"""

import json
import os
import sys


def main():
    build = os.path.realpath(sys.argv[1])
    plan = os.path.join(build, "meson-info", "intro-install_plan.json")
    with open(plan, encoding="utf-8") as f:
        targets = json.load(f).get("targets", {})
    for path in sorted(targets):
        # Outputs of the build only: nothing else is a ninja target.
        rel = os.path.relpath(os.path.realpath(path), build)
        if not rel.startswith(os.pardir + os.sep):
            print(rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
