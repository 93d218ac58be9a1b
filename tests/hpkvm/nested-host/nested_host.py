#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The nested test host: real KVM, vhost-net, VFIO and SR-IOV for tests.

This machine's own /dev/kvm may be a nested paravirtual KVM without
vhost-net, VFIO or SR-IOV.  The nested host is Debian's generic kernel
booted under hpkvm's own QEMU with TCG (q35, VT-d with interrupt
remapping, an igb NIC with SR-IOV): inside it, KVM (SVM semantics, from
TCG), vhost-net, VFIO and SR-IOV are the kernel's real code paths.  Exit
counts and behaviour there are meaningful; timings are not (TCG).

One line runs a shell script inside it, as root, and returns its output
and exit status:

    from nested_host import run
    result = run("qemu-system-x86_64 -accel hpkvm ...", cpus=2)

or from a shell:

    tests/hpkvm/nested-host/nested_host.py run [OPTIONS] -- 'SCRIPT'

Inside, PATH has our QEMU (qemu-system-x86_64) and qmp-exec, and
$HPKVM_GUEST is our test guest.
"""

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import image  # noqa: E402
from cpio_newc import NewcWriter  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BUILD = os.path.normpath(os.path.join(HERE, "../../../build/qemu"))
EXIT_MARK = "NESTED-HOST-EXIT "
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;=?]*[A-Za-z]")


# Shell functions for payloads that run an L2 QEMU with QMP on
# /tmp/qmp.sock, its pid in $qemu_pid; every wait is bounded in seconds
# (a loop of commands inside the nested host is slow, and its speed
# varies) and a stuck guest says why.
L2_SHELL = r"""
# QMP's socket appears within 60 s, or the QEMU is said to have failed.
wait_qmp_socket() {
    i=0
    while [ ! -S /tmp/qmp.sock ]; do
        [ -e /proc/$qemu_pid ] || { echo "qemu-exited: before QMP"; return 1; }
        sleep 0.1; i=$((i + 1)); [ $i -gt 600 ] && return 1
    done
    return 0
}
# Why the guest of QEMU $qemu_pid (QMP socket $1, /tmp/qmp.sock unless
# given) did not finish: QEMU's view, its threads in the kernel, and
# whether KVM still runs the guest (exits growing).
guest_stuck() {
    sock=${1:-/tmp/qmp.sock}
    echo "stuck: no result line from the guest"
    echo "stuck: status $(qmp-exec $sock '{"execute": "query-status"}')"
    for n in 1 2; do
        echo "stuck: exits $(qmp-exec $sock '{"execute": "query-stats",
            "arguments": {"target": "vcpu", "providers": [{"provider": "kvm",
            "names": ["exits", "halt_exits", "irq_exits", "io_exits",
                      "mmio_exits"]}]}}')"
        cat /proc/interrupts > /tmp/stuck-irqs-$n
        sleep 1
    done
    # The host's interrupts in that second, per CPU, where there were any
    # (the firmware hang comes with ~11,000 interrupt exits a second).
    awk 'FNR == 1 { next }
         NR == FNR { for (i = 2; i <= NF; i++) was[$1, i] = $i; next }
         { d = ""; sum = 0
           for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) {
               d = d " " ($i - was[$1, i]); sum += $i - was[$1, i] }
           if (sum > 0) print "stuck: interrupts in 1 s " $1 d }' \
        /tmp/stuck-irqs-1 /tmp/stuck-irqs-2
    regs='[ER]IP=[0-9a-f]*\|HLT=[01]\|[ER]FL=[0-9a-f]*'
    regs=$regs'\|CS =[0-9a-f]* [0-9a-f]*\|CR0=[0-9a-f]*'
    qmp-exec $sock '{"execute": "human-monitor-command",
        "arguments": {"command-line": "info registers -a"}}' |
        grep -o "$regs" |
        tr '\n' ' ' | sed 's/^/stuck: registers /'
    echo
    echo "stuck: clocksource" \
         "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
    dmesg | tail -n 8 | sed 's/^/stuck: dmesg /'
    mount -t debugfs none /sys/kernel/debug 2>/dev/null
    for f in /sys/kernel/debug/kvm/$qemu_pid-*/vcpu*/tsc-*; do
        echo "stuck: ${f#/sys/kernel/debug/kvm/} $(cat $f 2>/dev/null)"
    done
    for t in /proc/$qemu_pid/task/*; do
        echo "stuck: thread ${t##*/} $(cat $t/comm) $(cat $t/wchan)" \
             "$(cut -d' ' -f3 $t/stat)"
    done
}
# Whether the guest of the QEMU whose QMP socket is $1 runs with its vCPU
# 0 still in real mode (CR0.PE clear).  Our x86 guests leave real mode in
# their firmware's first seconds, so long after "cont" this is the
# firmware hang of hpkvm-nested-host.rst.  False where QMP does not
# answer, the guest is not running, or the CPU has no CR0 (arm64).
in_firmware() {
    qmp-exec $1 '{"execute": "query-status"}' 2>/dev/null |
        grep -q '"status": "running"' || return 1
    cr0=$(qmp-exec $1 '{"execute": "human-monitor-command",
        "arguments": {"command-line": "info registers"}}' 2>/dev/null |
        grep -o 'CR0=[0-9a-f]*' | head -n 1)
    [ -n "$cr0" ] && [ $((0x${cr0#CR0=} & 1)) = 0 ]
}
# Reap QEMU with its exit status; one that has not exited in 240 s is
# killed and said so, so a hang shows as this line, not as the nested
# host's own timeout with nothing printed.
wait_qemu() {
    i=0
    while [ -e /proc/$qemu_pid ] &&
          [ "$(cut -d' ' -f3 /proc/$qemu_pid/stat 2>/dev/null)" != Z ]; do
        sleep 0.2; i=$((i + 1))
        if [ $i -gt 1200 ]; then
            echo "qemu-hang: pid $qemu_pid still running after 240 s; killed"
            guest_stuck
            echo "qemu-hang-serial: $(cat /tmp/serial.log)"
            kill -9 $qemu_pid
            break
        fi
    done
    wait $qemu_pid
}
"""


class NestedHostError(RuntimeError):
    """The nested host could not run the payload to its end."""


@dataclasses.dataclass
class Result:
    status: int             # the payload's exit status
    output: str             # what it printed (stdout and stderr)
    console: str            # the nested host's kernel console
    seconds: float          # wall time of the whole boot


def build_dir():
    return os.environ.get("HPKVM_BUILD", DEFAULT_BUILD)


def whole_kernel_config(config=None):
    """The configuration our whole kernel is built with: @config, else
    $HPKVM_KERNEL_CONFIG, else "tiny" (make check's); "debian" is
    Debian's own (make check-production-kernel's)."""
    config = config or os.environ.get("HPKVM_KERNEL_CONFIG", "tiny")
    if config not in ("tiny", "debian"):
        raise ValueError(f"kernel config {config!r} "
                         f"(HPKVM_KERNEL_CONFIG): 'tiny' or 'debian'")
    return config


def run(script, cpus=2, mem="2G", iommu=True, vfs=0, vfio_vfs=0,
        timeout=600, files=None, build=None, cache=None, kvm="hpkvm",
        libvirt=False, installed=False, append=(), arch="x86_64",
        gic=3, kernel="debian", kvm_amd="", linux_guest=False,
        mttcg=False, our_modules=False, kernel_config=None):
    """Boot the nested host, run script in it, return a Result.

    arch: "x86_64", or "aarch64" for the arm64 nested host: Debian's arm64
    kernel on TCG's virt machine with EL2 (GICv3 with an ITS), where
    arm64 KVM's own code runs, with the aarch64 cross build of QEMU
    (build/aarch64) and the aarch64 test guest inside; there, kvm is
    "stock" with Debian's kernel, "hpkvm" with ours (arm64's KVM is
    built in: no modules-only variant), and no libvirt or installed
    tree yet;

    gic: on arm64, the host's GIC version: 3, or 4, TCG's GICv4.0, where
    KVM maps a passed-through device's MSIs as vLPIs
    (kvm-arm.vgic_v4_enable=1: off by default in Linux 6.1);

    kvm: "hpkvm", our KVM (kvm/), or "stock", Debian's;
    kvm_amd: kvm-amd's module parameters, e.g. "avic=1" (x86 with
    kernel="debian", where kvm-amd is a module; with our whole kernel,
    append "kvm_amd.avic=1" instead);
    our_modules: with kvm="stock", our KVM's modules in the image too
    (/hpkvm/kvm), not loaded (x86), and Debian's kmod (image.build_kmod),
    for a payload that installs them as on a Debian host;
    kernel: "debian", Debian's kernel (with our KVM's modules if
    kvm="hpkvm", x86 only), or "hpkvm", our whole kernel
    (kvm/build-kernel.sh: our series, everything built in; kvm must be
    "hpkvm"), configured over tinyconfig, or with Debian's own config
    (kvm/build-kernel.sh --config debian: the production-config kernel)
    if kernel_config, else $HPKVM_KERNEL_CONFIG, is "debian" (x86);
    cpus, mem: the nested host's vCPUs and memory (room for an L2 guest);
    iommu: emulated VT-d with interrupt remapping; "amd" (x86): the AMD
    IOMMU instead, with interrupt remapping, x2APIC and guest virtual
    APIC mode (patches/0018), in which kvm-amd with avic=1 has the IOMMU
    post a passed-through device's interrupts to its vCPUs; "x2apic"
    (x86): VT-d with extended interrupt mode, so that the host runs its
    APICs in x2APIC mode, as hpkvm's interrupt ownership needs; on arm64, an
    SMMUv3, and the host boots through UEFI with ACPI, as Arm servers do
    (see below why not with a device tree);
    vfs, vfio_vfs: an igb NIC with SR-IOV, vfs VFs created and the first
    vfio_vfs of them bound to vfio-pci (vfs=0: no NIC);
    files: {path inside: bytes} added next to the script in /payload;
    libvirt: libvirtd, virtlogd and virsh inside, configured as Debian
    ships them (image.build_libvirt); the payload starts them;
    installed: our build as "make install" installs it, at its prefix
    (/usr/local: /usr/local/bin/qemu-system-x86_64, its firmware);
    linux_guest: the Linux guest inside (x86; image.build_linux_guest),
    its kernel and initramfs at $HPKVM_LINUX_KERNEL and
    $HPKVM_LINUX_INITRD;
    mttcg: the nested host on multi-threaded TCG, a thread per vCPU
    (also if $HPKVM_NESTED_MTTCG is set), where its vCPUs and so the L2
    guests' run concurrently; one thread for all of them by default;
    append: more parameters for the nested host's kernel command line,
    e.g. ("nohz_full=2-3",): what Linux fixes at boot;
    timeout: seconds for the whole run; NestedHostError past it.
    """
    if kvm not in ("hpkvm", "stock"):
        raise ValueError(f"kvm={kvm!r}: 'hpkvm' or 'stock'")
    if kernel not in ("debian", "hpkvm") or \
            (kernel == "hpkvm" and kvm != "hpkvm"):
        raise ValueError(f"kernel={kernel!r}: 'debian', or 'hpkvm' with "
                         f"kvm='hpkvm'")
    if kvm_amd and (arch != "x86_64" or kernel != "debian" or
                    " " in kvm_amd):
        raise ValueError(f"kvm_amd={kvm_amd!r}: one parameter of the "
                         f"kvm-amd module, x86 with kernel='debian'")
    if arch not in ("x86_64", "aarch64"):
        raise ValueError(f"arch={arch!r}: 'x86_64' or 'aarch64'")
    if gic not in (3, 4) or (gic == 4 and arch != "aarch64"):
        raise ValueError(f"gic={gic!r}: 3, or 4 on arch='aarch64'")
    if arch == "aarch64" and (kvm == "hpkvm") != (kernel == "hpkvm"):
        raise ValueError("the arm64 nested host has our KVM only in our "
                         "kernel: kvm='hpkvm' with kernel='hpkvm', or "
                         "kvm='stock' with kernel='debian'")
    config = whole_kernel_config(kernel_config)
    if arch == "aarch64" and kernel == "hpkvm" and config != "tiny":
        raise ValueError("HPKVM_KERNEL_CONFIG: Debian's config is built "
                         "for x86 only")
    if our_modules and (kvm != "stock" or arch != "x86_64"):
        raise ValueError("our_modules: with kvm='stock', on x86")
    if arch == "aarch64" and (libvirt or installed or linux_guest):
        raise ValueError("the arm64 nested host has no libvirt, "
                         "installed tree or Linux guest yet")
    build = build or build_dir()
    cache = cache or image.default_cache_dir()
    kver = image.choose_kernel()
    vmlinuz, base = image.build_base(cache, kver, arch)
    pieces = [base]
    if kernel == "hpkvm":
        vmlinuz = image.build_kernel(build, kver, arch, config)
    elif kvm == "hpkvm" or our_modules:
        pieces.append(image.build_kvm(build, kver))
    if our_modules:
        pieces.append(image.build_kmod(cache))
    if libvirt:
        pieces.append(image.build_libvirt(cache))
    if linux_guest:
        pieces.append(image.build_linux_guest(cache, kver))
    hpkvm = image.build_hpkvm(build, os.path.join(
        build, "..", "nested-host",
        "hpkvm.cpio" if arch == "x86_64" else "hpkvm-arm64.cpio"), arch)
    if installed:
        pieces.append(image.build_installed(
            build, os.path.join(build, "..", "nested-host",
                                "installed.cpio")))
    qemu = os.path.join(build, f"qemu-system-{arch}")

    with tempfile.TemporaryDirectory(prefix="nested-host-") as tmp:
        payload = os.path.join(tmp, "payload.cpio")
        write_payload(payload, script, files)
        initrd = os.path.join(tmp, "initrd")
        with open(initrd, "wb") as out:
            for piece in pieces + [hpkvm, payload]:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out)

        console = os.path.join(tmp, "console.log")
        output = os.path.join(tmp, "payload.log")
        # tsc=reliable: TCG reads the one host TSC for every vCPU, so it
        # is synchronized, which Linux need not test (an AMD CPU without
        # constant_tsc fails it: "TSCs unsynchronized") nor watch: a TSC
        # marked unstable puts Linux on the HPET and has KVM adjust its
        # guests' TSCs on every vCPU move.
        # +invtsc (patches/0017): that TSC runs at the host TSC's
        # constant rate; without it Linux has no constant_tsc, and KVM
        # keeps the rate it saw when it loaded (max_tsc_khz) as its
        # guests' TSC rate, which with our whole kernel's built-in KVM is
        # Linux's first estimate, before it is refined: its guests'
        # TSC-deadline timers then fire late or never.
        cmdline = ["panic=-1", "quiet", f"nested_host.vfs={vfs}",
                   f"nested_host.vfio_vfs={vfio_vfs}",
                   f"nested_host.kvm={kvm}",
                   f"nested_host.kernel={kernel}"]
        if kvm_amd:
            cmdline.append(f"nested_host.kvm_amd={kvm_amd}")
        # Our KVM binds vCPUs only to the cores the host opts in (none by
        # default): this host opts every core in, as an operator of a
        # host for hpkvm VMs would its isolated ones, unless the test
        # names its own list.
        if kvm == "hpkvm" and not any(a.startswith("kvm.hpkvm_cores=")
                                      for a in append):
            cmdline.append(f"kvm.hpkvm_cores=0-{cpus - 1}")
        if arch == "aarch64":
            # EL2 for KVM (VHE: -cpu max has it), GICv3 and its ITS.
            # pauth-impdef: TCG's architected pointer authentication
            # (QARMA) costs much of the boot; KVM does not care which.
            cmdline.insert(0, "console=ttyAMA0")
            machine = f"virt,virtualization=on,gic-version={gic},its=on"
            if gic == 4:
                cmdline.append("kvm-arm.vgic_v4_enable=1")
            cpu = "max,pauth-impdef=on"
        else:
            cmdline[:0] = ["console=ttyS0", "tsc=reliable"]
            machine = "q35"
            cpu = "max,+invtsc"
        firmware = []
        if iommu and arch == "aarch64":
            # Linux 6.1 booted from a device tree enables ACS on PCIe
            # ports only if an IOMMU asked for it before PCI enumeration,
            # and the SMMUv3's OF code asks later: every VF then shares
            # the root port's IOMMU group and none can be passed through
            # alone.  ACPI's IORT asks in time.
            machine += ",iommu=smmuv3"
            firmware = ["-bios", image.arm64_firmware(cache)]
            cmdline.append("acpi=force")
        elif iommu:
            if iommu != "amd":
                cmdline.append("intel_iommu=on")
            machine += ",kernel-irqchip=split"
        # One TCG thread for all vCPUs: with a thread per vCPU, QEMU 10.0
        # lets one vCPU use a stale TLB entry for MMIO while another has
        # just changed the memory map (iotlb_to_section() then reads the
        # new map with the old section index and aborts on its assertion;
        # seen here once in 42 boots, while the kernel set up PCI).  With
        # one thread, the TLB flush queued by the change runs before any
        # other vCPU runs again.
        tcg = "tcg,thread=multi" if mttcg or os.environ.get(
            "HPKVM_NESTED_MTTCG") else "tcg,thread=single"
        cmd = [qemu, "-accel", tcg, "-cpu", cpu,
               "-machine", machine,
               "-m", mem, "-smp", str(cpus), "-nodefaults",
               "-display", "none", "-no-reboot",
               *firmware, "-kernel", vmlinuz, "-initrd", initrd,
               "-append", " ".join(cmdline + list(append)),
               "-chardev", f"file,id=con,path={console}",
               "-serial", "chardev:con",
               "-chardev", f"file,id=out,path={output}",
               "-serial", "chardev:out"]
        if iommu == "amd" and arch == "x86_64":
            cmd += ["-device", "amd-iommu,intremap=on,xtsup=on,vapic=on"]
        elif iommu and arch == "x86_64":
            cmd += ["-device", "intel-iommu,intremap=on,caching-mode=on" +
                    (",eim=on" if iommu == "x2apic" else "")]
        if vfs:
            cmd += ["-device", "pcie-root-port,id=rp0,chassis=1",
                    "-device", "igb,bus=rp0"]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True,
                                  timeout=timeout)
            err = proc.stderr
        except subprocess.TimeoutExpired as e:
            err = f"timed out after {timeout} s; {e.stderr or ''}"
        seconds = time.monotonic() - start
        return payload_result(read_serial(console),
                              read_serial(output), err, seconds)


def write_payload(path, script, files):
    """The payload's cpio piece at path: script as /payload/run.sh, and
    files ({path inside /payload: bytes}) beside it."""
    w = NewcWriter()
    w.add_bytes("payload/run.sh", script.encode(), 0o755)
    for name, data in (files or {}).items():
        w.add_bytes(f"payload/{name}", data, 0o755)
    w.write(path)


def payload_result(con, out, err, seconds):
    """The Result of a boot whose console and payload serial ports read
    con and out; NestedHostError, with err (the emulator's own words)
    and the console's last lines, if the payload did not finish."""
    lines = out.splitlines()
    if not lines or not lines[-1].startswith(EXIT_MARK):
        raise NestedHostError(
            f"the nested host did not finish its payload ({err.strip()})\n"
            f"--- console (last lines) ---\n"
            + "\n".join(con.splitlines()[-30:]) +
            "\n--- payload output ---\n" + out)
    status = int(lines[-1][len(EXIT_MARK):])
    return Result(status, "\n".join(lines[:-1]) + "\n", con, seconds)


def read_serial(path):
    """A serial port's text, without what only a terminal reads: the
    carriage returns, and the escape sequences with which UEFI (arm64
    with an SMMU) clears every serial port it finds."""
    try:
        with open(path, errors="replace") as f:
            return ANSI_ESCAPE.sub("", f.read().replace("\r", ""))
    except FileNotFoundError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a shell script inside")
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--mem", default="2G")
    r.add_argument("--no-iommu", action="store_true")
    r.add_argument("--vfs", type=int, default=0)
    r.add_argument("--vfio-vfs", type=int, default=0)
    r.add_argument("--kvm", choices=("hpkvm", "stock"), default="hpkvm",
                   help="our KVM (kvm/, the default) or Debian's")
    r.add_argument("--kernel", choices=("debian", "hpkvm"), default="debian",
                   help="Debian's kernel (default) or ours, built whole "
                        "(kvm/build-kernel.sh)")
    r.add_argument("--arch", choices=("x86_64", "aarch64"), default="x86_64",
                   help="the x86 nested host (default) or the arm64 one "
                        "(its IOMMU an SMMUv3; our KVM there only with "
                        "--kernel hpkvm)")
    r.add_argument("--gic", type=int, choices=(3, 4), default=3,
                   help="the arm64 host's GIC: 4 for GICv4 vLPIs")
    r.add_argument("--append", action="append", default=[],
                   metavar="PARAM", help="a kernel parameter more (repeatable)")
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--console", action="store_true",
                   help="print the nested host's kernel console too")
    r.add_argument("script", nargs="+", help="shell script (words joined)")
    args = ap.parse_args()
    try:
        res = run(" ".join(args.script), cpus=args.cpus, mem=args.mem,
                  iommu=not args.no_iommu, vfs=args.vfs,
                  vfio_vfs=args.vfio_vfs, timeout=args.timeout,
                  kvm=args.kvm, append=args.append, arch=args.arch,
                  gic=args.gic, kernel=args.kernel)
    except (NestedHostError, RuntimeError) as e:
        print(f"nested-host: {e}", file=sys.stderr)
        return 125
    return report(res, "nested-host", args.console)


def report(res, name, console=False):
    """A command line's end of a run: the payload's output on stdout, the
    host's console (if asked) and the status line on stderr; the
    payload's exit status."""
    if console:
        sys.stderr.write(res.console)
    sys.stdout.write(res.output)
    print(f"{name}: payload exit status {res.status} "
          f"({res.seconds:.1f} s)", file=sys.stderr)
    return res.status


if __name__ == "__main__":
    sys.exit(main())
