# SPDX-License-Identifier: GPL-2.0-or-later
"""QMP for hpkvm's scripts and tests: QEMU's own client (python/qemu's
qemu.qmp, from the QEMU source tree the build was configured from),
connected once QEMU listens.

    mon = hpkvm_qmp.connect(build, path, deadline, proc)
    mon.cmd("query-hpkvm")      # the result; qemu.qmp.ExecuteError if not

What is added to qemu.qmp is the wait and its bounds: with
"server=on,wait=off" the socket appears some time after QEMU starts,
and the greeting comes from the main loop, after the accelerator is set
up (or QEMU exits instead).
"""

import asyncio
import os
import sys
import time


# The build "make" makes, where no other is named.
DEFAULT_BUILD = os.path.join(os.path.dirname(os.path.realpath(__file__)),
                             "..", "..", "build", "qemu")


def _qemu_python(build):
    """python/ of the QEMU tree a build was configured from: BUILD's,
    else $HPKVM_BUILD's, else the default build's."""
    tried = []
    for b in (build, os.environ.get("HPKVM_BUILD"), DEFAULT_BUILD):
        if not b:
            continue
        mak = os.path.join(b, "config-host.mak")
        tried.append(mak)
        try:
            with open(mak, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("SRC_PATH="):
                        return os.path.join(line.split("=", 1)[1].strip(),
                                            "python")
        except OSError:
            continue
    raise RuntimeError(f"no QEMU build with a SRC_PATH in {', '.join(tried)}:"
                       " run ./configure first (or set HPKVM_BUILD)")


def qmp_module(build=None):
    """qemu.qmp, imported from the QEMU tree of BUILD (see
    _qemu_python())."""
    path = _qemu_python(build)
    if path not in sys.path:
        sys.path.insert(0, path)
    # pylint: disable=import-outside-toplevel
    import qemu.qmp
    return qemu.qmp


def machine_module(build=None):
    """qemu.machine.machine (QEMUMachine and its exceptions), from the
    same QEMU tree as qmp_module()."""
    qmp_module(build)
    # pylint: disable=import-outside-toplevel
    import qemu.machine.machine
    return qemu.machine.machine


class Monitor:
    """qemu.qmp's QMPClient for synchronous callers, every call bounded
    (qemu.qmp.legacy's shim bounds commands but not the greeting)."""

    def __init__(self, qmp, timeout=None, deadline=None):
        """Each command takes at most TIMEOUT seconds and ends by
        DEADLINE (time.monotonic()); None: no such bound."""
        self.timeout = timeout
        self.deadline = deadline
        self._loop = asyncio.new_event_loop()
        self._client = qmp.QMPClient()

    def _bound(self):
        bounds = [b for b in (self.timeout, self.deadline and
                              max(self.deadline - time.monotonic(), 0.1))
                  if b]
        return min(bounds) if bounds else None

    def _run(self, coro, timeout):
        return self._loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def cmd(self, name, **args):
        """NAME's result; qemu.qmp.ExecuteError (its text the error's
        description) if QEMU answers with an error, TimeoutError if it
        does not answer in time."""
        return self._run(self._client.execute(name, args or None),
                         self._bound())

    def close(self):
        """Disconnect; the end of the stream is no error here: QEMU
        closes it when it quits (python/qemu's machine.py ignores it
        alike)."""
        try:
            self._run(self._client.disconnect(), 5)
        except (EOFError, OSError):
            pass
        finally:
            self._loop.close()


def connect(build, path, deadline, proc=None, timeout=None,
            bound_by_deadline=False):
    """A Monitor on the socket PATH, capabilities negotiated, each
    command then bounded by TIMEOUT and, with BOUND_BY_DEADLINE, by
    DEADLINE too.  None if PROC, QEMU's Popen, exits first.
    TimeoutError if QEMU neither answers nor exits by DEADLINE
    (time.monotonic())."""
    qmp = qmp_module(build)
    while proc is None or proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{path}: no QMP greeting")
        mon = Monitor(qmp, timeout, deadline if bound_by_deadline else None)
        try:
            # pylint: disable=protected-access
            mon._run(mon._client.connect(path), left)
        except qmp.ConnectError:
            # Not listening yet, or closing because QEMU exits.
            mon.close()
            time.sleep(0.05)
            continue
        except BaseException:
            mon.close()
            raise
        return mon
    return None
