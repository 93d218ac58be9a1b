#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Boot hpkvm's built-in guest and report its result and the accelerator.

    run-guest.py QEMU GUEST TIMEOUT [QEMU-ARGS...]

QEMU starts paused; QMP says which accelerator is in charge; then the
guest runs, prints one result line on COM1 and ends QEMU through
isa-debug-exit: exit status 1 means it passed, 3 that it failed.
Exits 0 when the guest passed.
"""

import os
import subprocess
import sys
import tempfile
import time

import hpkvm_qmp


def main():
    qemu, guest, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    extra = sys.argv[4:]
    # QEMU may be an installed one: QMP's client comes from the build
    # (hpkvm_qmp's default, or $HPKVM_BUILD).
    qmp = hpkvm_qmp.qmp_module()
    with tempfile.TemporaryDirectory(prefix="hpkvm-run-") as tmp:
        qmp_path = os.path.join(tmp, "qmp.sock")
        # -nodefaults: the guest needs no default NIC, VGA, floppy or
        # CD-ROM, and the firmware then runs no iPXE option ROM first.
        cmd = [qemu, *extra, "-S", "-machine", "pc", "-nodefaults",
               "-kernel", guest,
               "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
               "-display", "none", "-serial", "stdio", "-monitor", "none",
               "-qmp", f"unix:{qmp_path},server=on,wait=off"]
        print("hpkvm: running", " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd)
        deadline = time.monotonic() + timeout
        try:
            mon = hpkvm_qmp.connect(None, qmp_path,
                                    deadline, proc, bound_by_deadline=True)
            if mon is None:
                raise RuntimeError("QEMU exited before QMP answered")
            hpkvm = mon.cmd("query-hpkvm")["enabled"]
            kvm = mon.cmd("query-kvm")["enabled"]
            accel = "hpkvm" if hpkvm else ("kvm" if kvm else "tcg")
            print(f"hpkvm: accelerator in use: {accel} "
                  f"(query-hpkvm enabled={hpkvm}, query-kvm enabled={kvm})",
                  flush=True)
            mon.cmd("cont")
            mon.close()
            status = proc.wait(max(1.0, deadline - time.monotonic()))
        except (OSError, RuntimeError, ValueError, qmp.QMPError) as exc:
            if proc.poll() is None:
                proc.kill()
            status = proc.wait()
            print(f"hpkvm: QEMU failed before the guest ran ({exc}); "
                  f"exit status {status}", file=sys.stderr)
            return 1
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"hpkvm: guest did not finish within {timeout:.0f} s",
                  file=sys.stderr)
            return 1
    if status == 1:
        print("hpkvm: guest passed")
        return 0
    print(f"hpkvm: guest failed (QEMU exit status {status})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
