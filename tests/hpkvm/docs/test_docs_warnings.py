#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The manual and the man pages build with Sphinx's warnings as errors.

    test_docs_warnings.py -- SPHINX-COMMAND... DOCS-DIR

SPHINX-COMMAND is QEMU's own (docs/meson.build's SPHINX_ARGS); this
adds -W --keep-going, so that every warning is listed, and builds into
a directory of its own with fresh doctrees: cached ones would hide the
warnings of unchanged pages.  Prints TAP.
"""

import os
import subprocess
import sys
import tempfile

# hpkvm's man pages: they must come out of the man builder.
HPKVM_MAN_PAGES = ("qemu-hpkvm-helper.8", "qemu-hpkvm-check.8",
                   "qemu-hpkvm-recover.8")


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "--":
        sys.exit("usage: test_docs_warnings.py -- SPHINX-COMMAND... DOCS-DIR")
    sphinx, docs = sys.argv[2:-1], sys.argv[-1]
    print("1..2")
    with tempfile.TemporaryDirectory(prefix="hpkvm-docs-") as tmp:
        out = os.path.join(tmp, "man")
        cmd = sphinx + ["-W", "--keep-going", "-b", "man",
                        "-d", os.path.join(tmp, "doctrees"), docs, out]
        print("# " + " ".join(cmd))
        run = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=840, check=False)
        for line in (run.stdout + run.stderr).splitlines():
            print("# " + line)
        print(("ok" if run.returncode == 0 else "not ok") +
              " 1 - the manual builds with warnings as errors" +
              ("" if run.returncode == 0 else
               f" (sphinx-build exited {run.returncode}; warnings above)"))
        missing = [p for p in HPKVM_MAN_PAGES
                   if not os.path.isfile(os.path.join(out, p))]
        print(("not ok" if missing else "ok") +
              " 2 - hpkvm's man pages are built" +
              (f" (missing: {', '.join(missing)})" if missing else ""))


if __name__ == "__main__":
    main()
