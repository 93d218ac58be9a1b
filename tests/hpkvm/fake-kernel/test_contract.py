#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The reference kernel's contract test, run against the test double.

tests/hpkvm/kernel/hpkvm-contract-test checks that a patched KVM keeps
docs/devel/hpkvm-kernel-contract.rst; here it runs on this machine's
KVM with hpkvm-fake-kernel LD_PRELOADed, scripted to announce exactly
what the reference kernel does (exclusive-cores, and dynamic-nohz on a
machine booted with nohz_full=), so that the double
refuses what that kernel refuses, in the same order.  Each case runs in
a process of its own (glib -p), reported as one TAP line: a failed
g_assert ends its process, and glib's own TAP, with one -p per run,
would give meson one plan per run.

Usage: test_contract.py CONTRACT_TEST FAKE_KERNEL_SO.  Prints TAP.
"""

import os
import subprocess
import sys
import tempfile


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def reference_spec():
    """The reference kernel's announcement on this machine: exclusive
    cores (kvm/patches/0004), dynamic nohz (0005) if it was booted with
    nohz_full= (6.1 reads "(null)" there otherwise; a kernel without
    CONFIG_NO_HZ_FULL has no file), and irq-passthrough and ipi-fastpath
    on APIC virtualization (0008) where kvm-amd uses x2AVIC.  Not
    vfio-irte (0011), which also needs the AMD IOMMU to post (its guest
    virtual APIC mode), which nothing but the kernel log tells; the
    contract test then checks HPKVM_SET_IRTE's refusal without it."""
    supported, apicv = 0x1, 0
    if read("/sys/devices/system/cpu/nohz_full").strip()[:1].isdigit():
        supported |= 0x20
    flags = [ln for ln in read("/proc/cpuinfo").splitlines()
             if ln.startswith("flags")][:1]
    if (read("/sys/module/kvm_amd/parameters/avic").strip() in ("Y", "1")
            and flags and " x2avic" in flags[0]):
        supported |= 0xa
        apicv = 0xa
    return f"supported={supported:#x},apicv={apicv:#x}"


# What the double models (its header comment says what it refuses).
CASES = [
    "/hpkvm-contract/caps",
    "/hpkvm-contract/caps/dynamic-nohz",
    "/hpkvm-contract/enable/grants-exclusive-cores",
    "/hpkvm-contract/enable/not-requested",
    "/hpkvm-contract/enable/required-refused",
    "/hpkvm-contract/enable/apicv",
    "/hpkvm-contract/enable/dependencies",
    "/hpkvm-contract/enable/invalid",
    "/hpkvm-contract/enable/once",
    "/hpkvm-contract/set-irte",
    "/hpkvm-contract/order/after-vcpu",
    "/hpkvm-contract/order/disable-before-vcpu",
    "/hpkvm-contract/bind/without-grant",
    "/hpkvm-contract/bind/invalid",
    "/hpkvm-contract/bind/more-than-announced",
    "/hpkvm-contract/bind/one-vcpu-per-thread",
    "/hpkvm-contract/run/unbound",
    "/hpkvm-contract/run/other-thread",
]

# The kernel's alone, each with why the double does not play it.
EXCLUDED = {
    "/hpkvm-contract/enable/owned-apic":
        "interrupt features not on APIC virtualization need dynamic-nohz "
        "asked for (EINVAL) and grantable (the host's nohz_full cores): "
        "the double's grants are scripted, and QEMU's tests of them ask "
        "without dynamic-nohz",
    "/hpkvm-contract/enable/too-many-vcpus":
        "E2BIG for nr_vcpus above this machine's online cores minus one: "
        "the double's grants are scripted (supported=, grant=), not "
        "counted from real cores",
    "/hpkvm-contract/bind/pins-thread":
        "the kernel pins the thread, and refuses KVM_RUN (EPERM) once "
        "the thread was moved off its core; the double intercepts "
        "ioctl() only and does not read the thread's affinity (QEMU "
        "pins the thread itself first)",
    "/hpkvm-contract/bind/needs-grant":
        "a bind without CAP_SYS_NICE needs the core granted to the "
        "process (HPKVM_GRANT_CORE, kvm/patches/0017): the double keeps "
        "no grants and binds for any caller",
    "/hpkvm-contract/bind/host-cores":
        "the host's list of bindable cores is the reference kernel's "
        "kvm.hpkvm_cores parameter, in sysfs; the double has no module "
        "and no parameter",
    "/hpkvm-contract/bind/take-from-stopped-vm":
        "needs the kernel's table of held cores across VMs (EBUSY at "
        "KVM_RUN once another VM took the core)",
    "/hpkvm-contract/enable/dynamic-nohz":
        "ENODEV on a host without nohz_full=, E2BIG for more vCPUs than "
        "nohz_full cores: the double refuses with one scripted errno "
        "(refuse=) and counts no cores",
    "/hpkvm-contract/bind/dynamic-nohz-outside-nohz-full":
        "needs the kernel's nohz_full mask (EINVAL for a core outside "
        "it); the double does not model which cores are nohz_full",
    "/hpkvm-contract/enable/without-irqchip":
        "EINVAL for interrupt features of a VM without the in-kernel "
        "irqchip: the double does not model the irqchip (QEMU checks it "
        "itself before it asks)",
    "/hpkvm-contract/bind/last-core-is-the-hosts":
        "needs the kernel's table of held cores across VMs (the last "
        "core without a holder is the host's)",
}

TIMEOUT = 60


def comment(text):
    for line in text.splitlines():
        print(f"# {line}")


def listed_cases(binary):
    out = subprocess.run([binary, "-l"], capture_output=True, text=True,
                         timeout=TIMEOUT, check=True).stdout
    return [ln.strip() for ln in out.splitlines() if ln.startswith("/")]


def run_case(binary, env, log, path):
    """None if the case passed, else what to show."""
    if os.path.exists(log):
        os.unlink(log)
    try:
        res = subprocess.run([binary, "-p", path], env=env,
                             capture_output=True, text=True,
                             timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT} s"
    if res.returncode == 0:
        return None
    shown = f"exit status {res.returncode}\n{res.stdout}{res.stderr}"
    if os.path.exists(log):
        with open(log) as f:
            shown += "the double's log:\n" + f.read()
    return shown


def main():
    binary, fake_kernel = sys.argv[1:3]
    if not os.path.exists("/dev/kvm"):
        print("1..0 # SKIP this kernel has no KVM (no /dev/kvm)")
        return 0
    print(f"1..{len(CASES) + 1}", flush=True)
    failed = 0

    # A case added to the contract test must be sorted here, not lost.
    listed = set(listed_cases(binary))
    unsorted = sorted(listed - set(CASES) - set(EXCLUDED))
    stale = sorted((set(CASES) | set(EXCLUDED)) - listed)
    if unsorted or stale:
        failed += 1
        print("not ok 1 - every contract case is run or excluded")
        comment("not in CASES nor EXCLUDED: " + ", ".join(unsorted))
        comment("no longer in the contract test: " + ", ".join(stale))
    else:
        print("ok 1 - every contract case is run or excluded")
    for path, why in EXCLUDED.items():
        comment(f"excluded {path}: {why}")

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "fake-kernel.log")
        env = dict(os.environ, LD_PRELOAD=os.path.abspath(fake_kernel),
                   HPKVM_FAKE_KERNEL=reference_spec(), HPKVM_FAKE_KERNEL_LOG=log)
        for i, path in enumerate(CASES, 2):
            shown = run_case(binary, env, log, path)
            if shown is None:
                print(f"ok {i} - {path}", flush=True)
            else:
                failed += 1
                print(f"not ok {i} - {path}", flush=True)
                comment(shown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
