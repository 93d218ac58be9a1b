/*
 * hpkvm's aarch64 test guest: bench mode, the Arm side of make bench
 * (scripts/hpkvm/bench.py), when QEMU gives it a sample count:
 *
 *   -M virt,highmem-ecam=off -fw_cfg name=opt/org.hpkvm/bench,string=N
 *   -device pvpanic-pci -action panic=pause
 *
 * The workloads, each framed by two boundaries at which the VM stops
 * itself: a write to pvpanic-pci's BAR stops the VM at that write's own
 * exit (an MMIO exit to QEMU), the host reads KVM's statistics and
 * resumes it.  So a frame holds its workload's exits and exactly one of
 * its own on the boot CPU, the end boundary's, besides what stopping
 * the VM does to the other vCPUs.  "null" is an empty frame: its exits
 * are what the boundaries cost.  Then idle (the boot CPU spins, the
 * secondaries wait in WFI), hvc (PSCI_VERSION, the reference trap),
 * timer (virtual timer deadline to handler, the CPU spinning), and, with
 * a second CPU, sgi-spin (SGI to CPU 1 spinning with interrupts enabled,
 * send to handler) and sgi-wfi (the same to CPU 1 waiting in WFI: the
 * wake-up).  No SGI is answered, so the sender's exits are CPU 0's and
 * the receiver's CPU 1's.  With an igb VF passed through (vf.c), vf-msi:
 * the VF raises its MSI, an LPI to CPU 0 spinning, raise to handler:
 * the device interrupt, a vLPI where KVM uses GICv4.  Each prints
 *
 *   hpkvm-bench: result NAME n=N min=T median=T p99=T
 *
 * in virtual counter ticks (the header says the counter's kHz).
 *
 * The virt machine's PCI bus 0 is enumerated here, through pci.c's ECAM
 * below 4 GiB (hence highmem-ecam=off), and BAR 0 of the pvpanic
 * function placed at the start of the PCI MMIO window.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* hw/arm/virt.c's memory map */
#define PCIE_MMIO_BASE      0x10000000UL
#define PCI_SLOTS           32
#define PCI_VENDOR_ID       0x00
#define PCI_COMMAND         0x04
#define PCI_COMMAND_MEMORY  0x2
#define PCI_BAR0            0x10
#define PVPANIC_PCI_ID      (0x0011u << 16 | 0x1b36u)  /* Red Hat's */
#define PVPANIC_PANICKED    1

#define BENCH_MAX_SAMPLES   2048
#define IDLE_MS             500
#define TIMER_DELAY_US      100
#define SETTLE_US           50
#define WAIT_SECONDS        20

volatile uint32_t secondary_spin;           /* volatile: set by CPU 0 */
volatile uint32_t wfi_entered[MAX_CPUS];    /* volatile: set by the CPU */

static uint64_t samples[BENCH_MAX_SAMPLES];
static uintptr_t pvpanic;
static uint64_t ticks_per_us;
static uint32_t timer_early;

/* Written by CPU 1's SGI handler, waited for by CPU 0: volatile. */
static volatile uint32_t bench_count;   /* volatile: CPU 0 spins on it */
static volatile uint64_t bench_at;      /* volatile: written by CPU 1 */

void bench_sgi(void)
{
    bench_at = now();
    dsb();
    bench_count++;
}

static uintptr_t bench_find_pvpanic(unsigned *functions)
{
    unsigned slot;

    for (slot = 0; slot < PCI_SLOTS; slot++) {
        uint32_t devfn = slot << 3;
        uint32_t id = pci_read(devfn, PCI_VENDOR_ID);

        if (id != 0xffffffff) {
            *functions += 1;
        }
        if (id == PVPANIC_PCI_ID) {
            pci_write(devfn, PCI_BAR0, PCIE_MMIO_BASE);
            pci_write(devfn, PCI_COMMAND, PCI_COMMAND_MEMORY);
            return PCIE_MMIO_BASE;
        }
    }
    return 0;
}

/* A frame boundary: the VM stops at this write's exit (see above). */
static void frame(void)
{
    dsb();
    mmio_write8(pvpanic, PVPANIC_PANICKED);
}

/* Spin on the counter: no WFI, no trap. */
static void bench_spin_us(uint64_t us)
{
    uint64_t end = now() + us * ticks_per_us;

    while (now() < end) {
        /* spinning */
    }
}

/* Spin until *word != old, or fail after WAIT_SECONDS. */
static void bench_wait_change(volatile uint32_t *word, uint32_t old,
                              const char *what)
{
    uint64_t end = now() + WAIT_SECONDS * 1000000ull * ticks_per_us;

    while (*word == old) {
        if (now() > end) {
            fail(what, old);
        }
    }
}

static void report(const char *name, uint32_t n)
{
    uint32_t i, j;

    /* Insertion sort: n is small and this is outside the frames. */
    for (i = 1; i < n; i++) {
        uint64_t v = samples[i];

        for (j = i; j > 0 && samples[j - 1] > v; j--) {
            samples[j] = samples[j - 1];
        }
        samples[j] = v;
    }
    put("hpkvm-bench: result ");
    put(name);
    put(" n=");
    put_dec(n);
    put(" min=");
    put_dec(n ? samples[0] : 0);
    put(" median=");
    put_dec(n ? samples[n / 2] : 0);
    put(" p99=");
    /* The smallest sample at or above 99% of them (nearest rank). */
    put_dec(n ? samples[(n * 99 + 99) / 100 - 1] : 0);
    put("\n");
}

/*
 * One virtual timer interrupt, deadline to handler, the CPU spinning.
 * One that comes before its deadline by the counter is counted and
 * taken as latency 0 (the bench says so in a note).
 */
static uint64_t bench_timer_sample(void)
{
    uint32_t before = timer_irqs;
    uint64_t deadline = now() + TIMER_DELAY_US * ticks_per_us;

    sysreg_write(cntv_cval_el0, deadline);
    sysreg_write(cntv_ctl_el0, 1);
    isb();
    bench_wait_change(&timer_irqs, before, "bench: timer interrupt lost");
    if (timer_irq_at < deadline) {
        timer_early++;
        return 0;
    }
    return timer_irq_at - deadline;
}

/* One MSI of the VF at @regs to CPU 0, raise to handler. */
static uint64_t bench_vf_msi_sample(uintptr_t regs)
{
    uint32_t before = vf_msis;
    uint64_t t0 = now();

    vf_raise_msi(regs);
    bench_wait_change(&vf_msis, before, "bench: the VF's MSI never arrived");
    return vf_msi_at - t0;
}

/* One SGI to CPU 1, send to its handler. */
static uint64_t bench_sgi_sample(void)
{
    uint32_t before = bench_count;
    uint64_t t0 = now();

    send_sgi(SGI_BENCH, cpu_mpidr[1]);
    bench_wait_change(&bench_count, before, "bench: an SGI never arrived");
    return bench_at - t0;
}

void bench_run(unsigned cpus, uint64_t n)
{
    unsigned functions = 0;
    uint32_t i, m, w, vf;
    uintptr_t regs;
    uint64_t t0;

    if (n > BENCH_MAX_SAMPLES) {
        n = BENCH_MAX_SAMPLES;
    }
    ticks_per_us = sysreg_read(cntfrq_el0) / 1000000;
    if (!ticks_per_us) {
        fail("bench: counter below 1 MHz, cntfrq", sysreg_read(cntfrq_el0));
    }
    pvpanic = bench_find_pvpanic(&functions);
    if (!pvpanic) {
        fail("bench: no pvpanic-pci on PCI bus 0 (run with -M "
             "virt,highmem-ecam=off -device pvpanic-pci -action "
             "panic=pause); functions there:", functions);
    }
    put("hpkvm-bench: counter-khz=");
    put_dec(sysreg_read(cntfrq_el0) / 1000);
    put(" source=cntfrq cpus=");
    put_dec(cpus);
    put(" samples=");
    put_dec(n);
    put("\n");

    frame();
    frame();
    report("null", 0);

    /* The secondaries in WFI, the boot CPU spinning. */
    frame();
    t0 = now();
    bench_spin_us(IDLE_MS * 1000);
    samples[0] = now() - t0;
    frame();
    report("idle", 1);

    frame();
    for (i = 0; i < n; i++) {
        t0 = now();
        psci_call(PSCI_VERSION, 0, 0, 0);
        samples[i] = now() - t0;
    }
    frame();
    report("hvc", n);

    /* A quarter of the samples: a timer interrupt costs a host's one. */
    m = n / 4 > 8 ? n / 4 : (n < 8 ? n : 8);
    frame();
    for (i = 0; i < m; i++) {
        samples[i] = bench_timer_sample();
    }
    frame();
    report("timer", m);
    if (timer_early) {
        put("hpkvm-bench: note timer interrupts before their deadline by "
            "the counter (counted as 0): ");
        put_dec(timer_early);
        put("\n");
    }

    vf = vf_find();
    if (vf != VF_NONE) {
        regs = vf_route_msi(vf);
        bench_vf_msi_sample(regs);
        bench_spin_us(SETTLE_US);
        frame();
        for (i = 0; i < n; i++) {
            samples[i] = bench_vf_msi_sample(regs);
            bench_spin_us(SETTLE_US);
        }
        frame();
        report("vf-msi", n);
    }

    if (cpus < 2) {
        return;
    }
    /* CPU 1 out of WFI (one SGI) and spinning, at both boundaries too. */
    secondary_spin = 1;
    dsb();
    bench_sgi_sample();
    bench_spin_us(SETTLE_US * 10);
    frame();
    for (i = 0; i < n; i++) {
        samples[i] = bench_sgi_sample();
        bench_spin_us(SETTLE_US);
    }
    frame();
    report("sgi-spin", n);

    /*
     * CPU 1 back to WFI, as it sees the flag, and in it at both
     * boundaries, as in the frames before: where a vCPU is when the VM
     * stops decides what the stop costs it (bench.py, "aarch64").
     */
    w = wfi_entered[1];
    secondary_spin = 0;
    dsb();
    bench_wait_change(&wfi_entered[1], w, "bench: CPU 1 did not reach WFI");
    bench_spin_us(SETTLE_US);
    frame();
    for (i = 0; i < n; i++) {
        /* It is in WFI; wake it; wait for it to head back there. */
        w = wfi_entered[1];
        bench_spin_us(SETTLE_US);
        samples[i] = bench_sgi_sample();
        bench_wait_change(&wfi_entered[1], w,
                          "bench: CPU 1 did not return to WFI");
    }
    bench_spin_us(SETTLE_US);
    frame();
    report("sgi-wfi", n);
}
