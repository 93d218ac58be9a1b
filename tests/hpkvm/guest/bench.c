/*
 * hpkvm test guest: micro-benchmarks ("bench=N")
 *
 * The workloads of the seed's evaluation, each N samples (at most
 * BENCH_MAX_SAMPLES), timed with the TSC: a reference exit (CPUID), the
 * cost of one TSC-deadline MSR write, timer latency (deadline to handler),
 * IPI latency to a running vCPU (unicast) and to all other running vCPUs
 * (multicast: until the last handler), HLT wake latency (IPI to a halted
 * vCPU until its handler), and an idle phase; plus "null", an empty
 * workload whose exits are what the boundaries themselves cost; and, with
 * an igb VF passed through (vf.c), vf-msi: the VF's MSI to the BSP
 * spinning, raise to handler, the device interrupt.
 *
 * Each workload is framed by two boundaries, at which the VM stops itself:
 * a write to pvpanic (QEMU run with -device pvpanic -action panic=pause)
 * stops the VM at that write's own exit, the host reads KVM's statistics
 * and resumes it ("cont").  So a frame holds its workload's exits and
 * exactly one of its own, the end boundary's I/O exit, besides the kicks
 * that stopping the VM gives the other vCPUs.  Then one line
 * "hpkvm-bench: result NAME n=N min=C median=C p99=C" in TSC cycles.  The
 * idle workload spins bench-idle million cycles (default 1000).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu.h"
#include "guest.h"

#define MIN(a, b)           ((a) < (b) ? (a) : (b))
#define MAX(a, b)           ((a) > (b) ? (a) : (b))
#define BENCH_MAX_SAMPLES   2048
#define DEFAULT_IDLE_MCYCLES 1000
#define PVPANIC_PORT        0x505
#define PVPANIC_PANICKED    1
#define SETTLE_CYCLES       20000
#define BENCH_WAIT_CYCLES   20000000000ull
#define TIMER_LOST_CYCLES   4000000000ull
#define PIT_HZ              1193182u
#define PIT_GATE_MS         50u

static uint64_t samples[BENCH_MAX_SAMPLES];
static uint64_t idle_cycles;
static uint32_t timer_early, timer_lost;

/* Written by the IPI handler on whichever vCPU takes it. */
static uint32_t bench_count;
static uint64_t bench_last_tsc;

__attribute__((interrupt))
static void bench_handler(void *frame)
{
    uint64_t now = rdtsc();
    uint64_t seen = __atomic_load_n(&bench_last_tsc, __ATOMIC_RELAXED);

    /* The latest handler wins: for multicast, the last receiver. */
    while (now > seen &&
           !__atomic_compare_exchange_n(&bench_last_tsc, &seen, now, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        /* seen was reloaded */
    }
    __atomic_fetch_add(&bench_count, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

/* Spin without exits: no PAUSE (pause-loop exiting), no I/O. */
static void quiet_spin(uint64_t cycles)
{
    uint64_t end = rdtsc() + cycles;

    while (rdtsc() < end) {
        __asm__ volatile("" : : : "memory");
    }
}

/* A frame boundary: the VM stops at this write's exit (see above). */
static void frame(void)
{
    outb(PVPANIC_PORT, PVPANIC_PANICKED);
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
    puts_serial("hpkvm-bench: result ");
    puts_serial(name);
    puts_serial(" n=");
    putu_serial(n);
    puts_serial(" min=");
    putu_serial(n ? samples[0] : 0);
    puts_serial(" median=");
    putu_serial(n ? samples[n / 2] : 0);
    puts_serial(" p99=");
    /* The smallest sample at or above 99% of them (nearest rank). */
    putu_serial(n ? samples[(n * 99 + 99) / 100 - 1] : 0);
    puts_serial("\n");
}

/* TSC kHz: the hypervisor's timing leaf where it has one, else the PIT. */
static uint64_t tsc_khz(const char **source)
{
    uint32_t a, b, c, d;
    uint64_t t0, t1;
    uint16_t count = PIT_HZ / 1000 * PIT_GATE_MS;

    cpuid(0x40000000, &a, &b, &c, &d);
    if (a >= 0x40000010 && a < 0x40010000) {
        cpuid(0x40000010, &a, &b, &c, &d);
        if (a) {
            *source = "cpuid";
            return a;
        }
    }
    /* PIT channel 2, mode 0, gate on, speaker off: OUT2 rises at zero. */
    outb(0x61, (inb(0x61) & ~0x02) | 0x01);
    outb(0x43, 0xb0);
    outb(0x42, count & 0xff);
    outb(0x42, count >> 8);
    t0 = rdtsc();
    while (!(inb(0x61) & 0x20)) {
        /* counting down */
    }
    t1 = rdtsc();
    *source = "pit";
    return (t1 - t0) / PIT_GATE_MS;
}

/*
 * One TSC-deadline interrupt, deadline to handler.  Unlike fire_timer(),
 * an interrupt that arrives before the deadline by the guest's TSC is
 * not fatal here: it is counted (a nested KVM under TCG, whose TSC and
 * timer clocks drift apart, does that) and taken as latency 0; one that
 * does not come within TIMER_LOST_CYCLES is counted as lost, and the
 * sample dropped.  Returns whether there is a sample.  The LVT timer is
 * in TSC-deadline mode already, as a guest's kernel sets it once: each
 * interrupt is one MSR write.
 */
static bool timer_sample(uint64_t *latency)
{
    uint64_t deadline, fired;

    __atomic_store_n(&timer_fired, 0, __ATOMIC_RELAXED);
    __asm__ volatile("mfence" : : : "memory");
    deadline = rdtsc() + 2000000;
    wrmsr(MSR_TSC_DEADLINE, deadline);
    if (!wait_for(&timer_fired, 1, TIMER_LOST_CYCLES)) {
        /* Seen on a nested paravirtual KVM: counted, not a sample. */
        wrmsr(MSR_TSC_DEADLINE, 0);
        timer_lost++;
        return false;
    }
    fired = __atomic_load_n(&timer_fired_tsc, __ATOMIC_RELAXED);
    if (fired < deadline) {
        timer_early++;
        *latency = 0;
    } else {
        *latency = fired - deadline;
    }
    return true;
}

static void wait_count(uint32_t want)
{
    if (!wait_for(&bench_count, want, BENCH_WAIT_CYCLES)) {
        fail("bench: an IPI or the VF's MSI never arrived");
    }
}

/* One MSI of the VF at @regs (MMIO: volatile) to the BSP, raise to handler */
static uint64_t vf_msi_sample(volatile uint32_t *regs)
{
    uint32_t before = __atomic_load_n(&bench_count, __ATOMIC_ACQUIRE);
    uint64_t t0;

    t0 = rdtsc();
    vf_raise_msi(regs);
    wait_count(before + 1);
    return __atomic_load_n(&bench_last_tsc, __ATOMIC_RELAXED) - t0;
}

static void set_ap_spin(uint32_t spin, uint32_t ncpus)
{
    __atomic_store_n(&ap_spin, spin, __ATOMIC_RELEASE);
    if (spin && ncpus > 1) {
        /* Out of HLT, to see the flag. */
        send_ipi(0, ICR_ALL_BUT_SELF | ICR_FIXED | VEC_WAKE);
    }
    quiet_spin(SETTLE_CYCLES * 10);
}

/* IPI send to the last handler, to @dest or to all other vCPUs (0). */
static uint64_t ipi_sample(uint32_t dest, uint32_t receivers)
{
    uint32_t before = __atomic_load_n(&bench_count, __ATOMIC_ACQUIRE);
    uint64_t t0;

    __atomic_store_n(&bench_last_tsc, 0, __ATOMIC_RELAXED);
    t0 = rdtsc();
    send_ipi(dest, (dest ? ICR_FIXED : ICR_ALL_BUT_SELF | ICR_FIXED) |
             VEC_BENCH);
    wait_count(before + receivers);
    return __atomic_load_n(&bench_last_tsc, __ATOMIC_RELAXED) - t0;
}

void bench_run(uint32_t ncpus, bool tsc_deadline)
{
    uint32_t n = option("bench"), i, h, m, vf;
    volatile uint32_t *regs;    /* the VF's, MMIO */
    uint32_t ap = __atomic_load_n(&reported_apic_id[0], __ATOMIC_RELAXED);
    uint64_t mcycles = option("bench-idle") ?: DEFAULT_IDLE_MCYCLES;
    const char *source;
    uint64_t khz, t0, t1;
    uint32_t a, b, c, d;

    if (n > BENCH_MAX_SAMPLES) {
        n = BENCH_MAX_SAMPLES;
    }
    idle_cycles = mcycles * 1000000;
    /* No device answers 0xff: without pvpanic no frame would stop. */
    if (inb(PVPANIC_PORT) == 0xff) {
        fail("bench= needs -device pvpanic -action panic=pause");
    }
    set_gate(VEC_BENCH, bench_handler);
    khz = tsc_khz(&source);
    puts_serial("hpkvm-bench: tsc-khz=");
    putu_serial(khz);
    puts_serial(" source=");
    puts_serial(source);
    puts_serial(" cpus=");
    putu_serial(ncpus);
    puts_serial(" samples=");
    putu_serial(n);
    puts_serial("\n");

    frame();
    frame();
    report("null", 0);

    /* APs halted, the BSP spinning: what exits an idle guest takes. */
    frame();
    t0 = rdtsc();
    quiet_spin(idle_cycles);
    samples[0] = rdtsc() - t0;
    frame();
    report("idle", 1);

    frame();
    for (i = 0; i < n; i++) {
        t0 = rdtsc();
        cpuid(0, &a, &b, &c, &d);
        samples[i] = rdtsc() - t0;
    }
    frame();
    report("cpuid", n);

    if (tsc_deadline) {
        lapic_write(LAPIC_LVT_TIMER, LVT_TSC_DEADLINE | VEC_TIMER);
        frame();
        for (i = 0; i < n; i++) {
            /* Far in the future, each replacing the last: no interrupt. */
            t0 = rdtsc();
            wrmsr(MSR_TSC_DEADLINE, t0 + (1ull << 40));
            t1 = rdtsc();
            samples[i] = t1 - t0;
        }
        frame();
        wrmsr(MSR_TSC_DEADLINE, 0);
        report("tsc-deadline-write", n);
    }

    /*
     * An eighth of the samples: one timer interrupt can take up to a
     * second on a nested paravirtual KVM.
     */
    if (tsc_deadline) {
        lapic_write(LAPIC_LVT_TIMER, LVT_TSC_DEADLINE | VEC_TIMER);
        /* Order the LVT write before the MSR writes (SDM 10.5.4.1). */
        __asm__ volatile("mfence" : : : "memory");
    }
    frame();
    for (i = 0, m = 0; i < MAX(n / 8, MIN(n, 8)); i++) {
        if (!tsc_deadline) {
            samples[m++] = fire_timer(false);
        } else if (timer_sample(&samples[m])) {
            m++;
        }
    }
    frame();
    report(tsc_deadline ? "timer" : "timer-oneshot", m);
    if (timer_lost) {
        puts_serial("hpkvm-bench: note timer interrupts lost (not in the "
                    "samples): ");
        putu_serial(timer_lost);
        puts_serial("\n");
    }
    if (timer_early) {
        puts_serial("hpkvm-bench: note timer interrupts before their "
                    "deadline by the guest TSC (counted as 0): ");
        putu_serial(timer_early);
        puts_serial("\n");
    }

    vf = vf_find();
    if (vf != VF_NONE) {
        regs = vf_route_msi(vf, bsp_apic_id, VEC_BENCH);
        vf_msi_sample(regs);
        quiet_spin(SETTLE_CYCLES);
        frame();
        for (i = 0; i < n; i++) {
            samples[i] = vf_msi_sample(regs);
            quiet_spin(SETTLE_CYCLES);
        }
        frame();
        report("vf-msi", n);
    }

    if (ncpus < 2) {
        return;
    }
    set_ap_spin(1, ncpus);
    frame();
    for (i = 0; i < n; i++) {
        samples[i] = ipi_sample(ap, 1);
        quiet_spin(SETTLE_CYCLES);
    }
    frame();
    report("ipi-unicast", n);

    frame();
    for (i = 0; i < n; i++) {
        samples[i] = ipi_sample(0, ncpus - 1);
        quiet_spin(SETTLE_CYCLES);
    }
    frame();
    report("ipi-multicast", n);
    set_ap_spin(0, ncpus);

    h = __atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE);
    frame();
    for (i = 0; i < n; i++) {
        /* Let it reach HLT, wake it, wait for it to head back there. */
        quiet_spin(SETTLE_CYCLES);
        samples[i] = ipi_sample(ap, 1);
        while (__atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE) == h) {
            /* the first AP counts each HLT it enters */
        }
        h = __atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE);
    }
    frame();
    report("hlt-wake", n);
}
