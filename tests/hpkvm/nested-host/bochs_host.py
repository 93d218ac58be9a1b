#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The Bochs nested test host: the nested host's image on Intel VMX.

QEMU's TCG emulates SVM but not VMX, so the x86 nested host
(nested_host.py) runs only kvm-amd.  Bochs (Debian's bochs package), an
x86 emulator written independently of QEMU, emulates both: booted there,
Debian's kernel loads kvm-intel (ours or Debian's) and runs our QEMU
under real VMX code paths; or, with the SVM model, kvm-amd on a second
emulator's SVM, so that a result which holds only on our TCG patches
shows.  As in the TCG host, exit counts are real and timings are not.

One call runs a shell script inside, as root, as nested_host.run does:

    from bochs_host import run
    result = run("qemu-system-x86_64 -accel hpkvm ...", model="vmx")

or from a shell:

    tests/hpkvm/nested-host/bochs_host.py run [OPTIONS] -- 'SCRIPT'

The image is the TCG host's (image.py: Debian's kernel, base, our KVM,
our build, the payload), on an ISO 9660 disc that Bochs's BIOS boots
with ISOLINUX.  The initrd on the disc holds only the base, our KVM and
the payload; our build is a directory tree on the disc that /init mounts
and links into place (init.sh, nested_host.medium=cdrom): a BIOS reads a
disc, and Bochs's CPU copies memory, far more slowly than Linux's PIIX
driver reads it by DMA.

What Bochs 2.7 does not emulate, and so what this host cannot test, is
in docs/devel/testing/hpkvm-nested-host.rst ("The Bochs nested host").
"""

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import image  # noqa: E402
import nested_host  # noqa: E402
from nested_host import NestedHostError  # noqa: E402,F401

BIOS = "/usr/share/bochs/BIOS-bochs-latest"
VGA_BIOS = "/usr/share/vgabios/vgabios.bin"
ISOLINUX = ("/usr/lib/ISOLINUX/isolinux.bin",
            "/usr/lib/syslinux/modules/bios/ldlinux.c32")

# Bochs CPU models, and the kernel parameters each needs.
#
# vmx: a Skylake-X: kvm-intel finds EPT, VPID, unrestricted guest, the
# VMX preemption timer, PML, shadow VMCS and TSC scaling; not APICv
# (Bochs 2.7 has no posted interrupts, so kvm-intel turns enable_apicv
# off).  Bochs's Tiger Lake model stops Linux 6.1 early in its boot.
# svm: a Ryzen: kvm-amd finds NPT and NRIP save; not AVIC, vGIF or VMCB
# clean bits.  noxsave (both models) and noxsaves: Bochs's XSAVE state
# is broken; clearcpuid=221 (X86_FEATURE_MWAITX in Linux 6.1's
# numbering): Linux would use the Ryzen model's MONITORX/MWAITX.
MODELS = {
    "vmx": ("corei7_skylake_x", ()),
    "svm": ("ryzen", ("clearcpuid=221", "noxsaves")),
}

# Instructions a second of the emulated CPU runs; Bochs's TSC ticks
# once per instruction, while its models' CPUID claims GHz, so Linux is
# told the rate (tsc_early_khz).
IPS = 100_000_000


def available():
    """None if Bochs and the tools that make its disc are here; else what
    is missing and how to install it."""
    missing = [p for p in (BIOS, VGA_BIOS, *ISOLINUX) if not
               os.path.exists(p)]
    missing += [t for t in ("bochs-bin", "xorriso") if not shutil.which(t)]
    if not missing:
        return None
    return ("missing " + ", ".join(missing) + ": install bochs bochsbios "
            "vgabios isolinux syslinux-common xorriso "
            "(scripts/hpkvm/install-deps.sh does, as root)")


def run(script, model="vmx", cpus=2, mem_mb=2048, kvm="hpkvm",
        timeout=1200, files=None, build=None, cache=None, append=()):
    """Boot Debian's kernel in Bochs, run script in it, return a
    nested_host.Result.

    model: "vmx" (kvm-intel) or "svm" (kvm-amd), see MODELS;
    kvm: "hpkvm", our KVM's modules (kvm/), or "stock", Debian's;
    cpus, mem_mb: the emulated machine's CPUs and memory in MiB;
    files: {path inside: bytes} added next to the script in /payload;
    append: more parameters for the kernel command line;
    timeout: seconds for the whole run; NestedHostError past it.
    """
    if model not in MODELS:
        raise ValueError(f"model={model!r}: one of {', '.join(MODELS)}")
    if kvm not in ("hpkvm", "stock"):
        raise ValueError(f"kvm={kvm!r}: 'hpkvm' or 'stock'")
    why = available()
    if why:
        raise RuntimeError(f"the Bochs nested host: {why}")
    build = build or nested_host.build_dir()
    cache = cache or image.default_cache_dir()
    kver = image.choose_kernel()
    vmlinuz, base = image.build_base(cache, kver)
    pieces = [base]
    if kvm == "hpkvm":
        pieces.append(image.build_kvm(build, kver))
    tree = image.hpkvm_inputs(build)
    for _, host in tree:
        if not os.path.exists(host):
            raise RuntimeError(f"{host} is missing: build it first (make)")
    cpu, params = MODELS[model]

    with tempfile.TemporaryDirectory(prefix="bochs-host-") as tmp:
        boot = os.path.join(tmp, "boot")
        os.makedirs(os.path.join(boot, "isolinux"))
        for f in ISOLINUX:
            shutil.copy(f, os.path.join(boot, "isolinux"))
        shutil.copy(vmlinuz, os.path.join(boot, "vmlinuz"))
        payload = os.path.join(tmp, "payload.cpio")
        nested_host.write_payload(payload, script, files)
        with open(os.path.join(boot, "initrd"), "wb") as out:
            for piece in pieces + [payload]:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out)
        # clearcpuid=124 (X86_FEATURE_APERFMPERF): both models claim
        # APERF/MPERF, which Bochs does not implement; Linux would read
        # them on every tick of every CPU, each a #GP (and a line of
        # Bochs's log).  cryptomgr.notests: the crypto self-tests are
        # half of the boot's emulated time before /init.  Not quiet: the
        # console is what says where a boot that never reaches the
        # payload stopped.
        cmdline = ["console=ttyS0", "panic=-1", "tsc=reliable",
                   f"tsc_early_khz={IPS // 1000}", "noxsave",
                   "clearcpuid=124", "cryptomgr.notests",
                   "mitigations=off", *params,
                   "nested_host.medium=cdrom", "nested_host.modules=kvm",
                   f"nested_host.kvm={kvm}", "nested_host.kernel=debian"]
        # As in the TCG host: every core opted in to binding, unless the
        # test names its own list.
        if kvm == "hpkvm" and not any(a.startswith("kvm.hpkvm_cores=")
                                      for a in append):
            cmdline.append(f"kvm.hpkvm_cores=0-{cpus - 1}")
        with open(os.path.join(boot, "isolinux", "isolinux.cfg"), "w") as f:
            f.write("default hpkvm\nprompt 0\nlabel hpkvm\n"
                    "  kernel /boot/vmlinuz\n  initrd /boot/initrd\n"
                    f"  append {' '.join(cmdline + list(append))}\n")
        # Our build, with QEMU without its debug information (most of
        # its size).
        qemu = os.path.join(tmp, "qemu")
        subprocess.run(["objcopy", "--strip-debug", tree[0][1], qemu],
                       check=True)
        grafts = [f"root/{tree[0][0]}={qemu}"] + \
            [f"root/{path}={host}" for path, host in tree[1:]] + \
            [f"boot={boot}"]
        disc = os.path.join(tmp, "host.iso")
        subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-R", "-f",
                        "-o", disc, "-b", "boot/isolinux/isolinux.bin",
                        "-c", "boot/isolinux/boot.cat", "-no-emul-boot",
                        "-boot-load-size", "4", "-boot-info-table",
                        "-graft-points", *grafts],
                       check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)

        console = os.path.join(tmp, "console.log")
        output = os.path.join(tmp, "payload.log")
        rc = os.path.join(tmp, "bochsrc")
        with open(rc, "w") as f:
            f.write(bochsrc(cpu, cpus, mem_mb, disc, console, output,
                            os.path.join(tmp, "bochs.log")))
        # Debian's bochs-bin has its debugger built in and stops at its
        # prompt: this file's one command lets it run.
        commands = os.path.join(tmp, "commands")
        with open(commands, "w") as f:
            f.write("continue\n")
        # Debian's Bochs has no display-less GUI; the VNC one (rfb)
        # listens on every interface, so it runs in a network namespace
        # of its own, where nothing can reach it (and two runs' port
        # 5900 do not collide).  unshare execs Bochs: a time-out kills
        # Bochs itself.
        cmd = ["unshare", "--map-root-user", "--net",
               "bochs-bin", "-q", "-f", rc, "-rc", commands]
        # Without MALLOC_PERTURB_ (which meson sets for every test):
        # Bochs 2.7 reads memory malloc() did not clear while it parses
        # its configuration, and with the pattern in it hangs there or
        # aborts ("buffer overflow detected").
        env = {k: v for k, v in os.environ.items()
               if k != "MALLOC_PERTURB_"}
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True,
                                  timeout=timeout, env=env,
                                  preexec_fn=_die_with_parent)
            err = _bochs_said(proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired:
            err = f"timed out after {timeout} s"
        seconds = time.monotonic() - start
        return nested_host.payload_result(
            nested_host.read_serial(console),
            nested_host.read_serial(output), err, seconds)


def bochsrc(cpu, cpus, mem_mb, disc, console, output, log):
    """Bochs's configuration: an i440FX PC booting the disc, the console
    on COM1 and the payload's output on COM2 (as in the TCG host)."""
    return f"""\
cpu: model={cpu}, count={cpus}, ips={IPS}
memory: guest={mem_mb}, host={mem_mb}
romimage: file={BIOS}
vgaromimage: file={VGA_BIOS}
pci: enabled=1, chipset=i440fx
ata0-master: type=cdrom, path={disc}, status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev={console}
com2: enabled=1, mode=file, dev={output}
display_library: rfb, options="timeout=0"
speaker: enabled=0
log: {log}
panic: action=fatal
error: action=report
info: action=ignore
debug: action=ignore
"""


def _die_with_parent():
    """Bochs goes when this process does (a test killed at its meson
    time-out, say), as the time-out kills it otherwise."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG,
                                            signal.SIGKILL)


def _bochs_said(text):
    """Bochs's last words without its banner, debugger echo and ALSA's
    complaints about a machine without sound."""
    keep = [line for line in text.splitlines()
            if line.strip() and not line.startswith(("ALSA lib", "====",
                                                     "(0)", "(1)", "(2)",
                                                     "(3)"))]
    return "\n".join(keep[-8:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a shell script inside")
    r.add_argument("--model", choices=tuple(MODELS), default="vmx")
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--mem", type=int, default=2048, help="MiB")
    r.add_argument("--kvm", choices=("hpkvm", "stock"), default="hpkvm",
                   help="our KVM (kvm/, the default) or Debian's")
    r.add_argument("--append", action="append", default=[],
                   metavar="PARAM", help="a kernel parameter more (repeatable)")
    r.add_argument("--timeout", type=float, default=1200)
    r.add_argument("--console", action="store_true",
                   help="print the host's kernel console too")
    r.add_argument("script", nargs="+", help="shell script (words joined)")
    args = ap.parse_args()
    try:
        res = run(" ".join(args.script), model=args.model, cpus=args.cpus,
                  mem_mb=args.mem, kvm=args.kvm, append=args.append,
                  timeout=args.timeout)
    except (NestedHostError, RuntimeError) as e:
        print(f"bochs-host: {e}", file=sys.stderr)
        return 125
    return nested_host.report(res, "bochs-host", args.console)


if __name__ == "__main__":
    sys.exit(main())
