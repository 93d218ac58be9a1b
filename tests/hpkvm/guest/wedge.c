/*
 * hpkvm test guest: "wedge=N", a guest that tries to wedge its host
 *
 * With interrupts off from here on, N rounds of: an ICR write of any
 * valid value (vector, delivery mode, destination mode, level, trigger,
 * shorthand and destination all pseudo-random; half of the destinations
 * small, so that they name host CPUs' APIC IDs), a self-IPI of any
 * vector, a TPR of any value and a CR8 of any value (the TPR's priority
 * class, which SVM keeps in V_TPR: with self-IPIs pending behind IF=0
 * the hypervisor's interrupt window is open when it is written).  Then
 * it reports and spins with IF=0 forever, never halting, never taking a
 * fixed interrupt and never writing EOI.  A host that counted on its
 * guest to take interrupts, to EOI them or to exit on its own would lose
 * its own interrupts here.
 *
 * Only INIT, SIPI and SMI are kept off this vCPU itself (their shorthand
 * becomes all-but-self, which with one vCPU is no one): they would stop
 * the guest before it reports, which is not what is tested.  NMIs are
 * counted; a #GP (a write KVM refuses) is counted and the WRMSR skipped,
 * so that the report shows how many writes were taken.
 * The sequence is the same in every run (a fixed xorshift seed), so a
 * host that fails on it fails again.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "cpu.h"
#include "guest.h"

#define MSR_X2APIC_TPR      0x808
#define MSR_X2APIC_ICR      0x830
#define MSR_X2APIC_SELF_IPI 0x83f
#define LAPIC_TPR           0x080

#define ICR_MODE_SHIFT      8
#define ICR_MODE_SMI        2
#define ICR_MODE_INIT       5
#define ICR_MODE_SIPI       6
#define ICR_SHORTHAND       (3u << 18)
/* x2APIC: a WRMSR setting these is refused with #GP (SDM 10.12.9) */
#define ICR_RESERVED        (0xfff00000ull | (3ull << 16) | (1ull << 13))

#define WRMSR_LEN           2

/* Written by the NMI and #GP handlers of this vCPU only. */
static uint32_t wedge_nmis;
static uint32_t wedge_gps;

__attribute__((interrupt))
static void wedge_nmi_handler(struct interrupt_frame *frame)
{
    __atomic_fetch_add(&wedge_nmis, 1, __ATOMIC_RELAXED);
}

/* Every #GP here comes from a WRMSR below: skip it. */
__attribute__((interrupt))
static void wedge_gp_handler(struct interrupt_frame *frame,
                             unsigned long error_code)
{
    __atomic_fetch_add(&wedge_gps, 1, __ATOMIC_RELAXED);
    frame->rip += WRMSR_LEN;
}

static uint64_t wedge_next(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

/*
 * Any ICR value the local APIC accepts, except INIT, SIPI and SMI aimed
 * at this vCPU.
 */
static uint64_t wedge_icr(uint64_t r)
{
    uint32_t mode = (r >> ICR_MODE_SHIFT) & 7;

    r &= ~ICR_RESERVED;
    if (r & (1ull << 63)) {
        /* A small destination: APIC IDs the host's CPUs have. */
        r &= 0x7fffffffull | (7ull << 32);
    }
    if (mode == ICR_MODE_SMI || mode == ICR_MODE_INIT ||
        mode == ICR_MODE_SIPI) {
        r |= ICR_SHORTHAND;                     /* all but self */
    }
    return r;
}

void __attribute__((noreturn)) wedge(uint64_t rounds, uint32_t ncpus)
{
    uint64_t state = 0x9e3779b97f4a7c15ull, i, r;

    if (ncpus != 1) {
        fail("wedge= needs one vCPU: it would INIT and SIPI the others");
    }
    __asm__ volatile("cli");
    set_gate(2, wedge_nmi_handler);
    set_gate(13, wedge_gp_handler);
    for (i = 0; i < rounds; i++) {
        __asm__ volatile("mov %0, %%cr8" : : "r"(wedge_next(&state) & 0xf));
        r = wedge_icr(wedge_next(&state));
        if (x2apic) {
            wrmsr(MSR_X2APIC_ICR, r);
            wrmsr(MSR_X2APIC_SELF_IPI, wedge_next(&state) & 0xff);
            wrmsr(MSR_X2APIC_TPR, wedge_next(&state) & 0xff);
        } else {
            lapic_write(LAPIC_ICR_HI, (uint32_t)(r >> 32) << 24);
            lapic_write(LAPIC_ICR_LO, (uint32_t)r);
            lapic_write(LAPIC_TPR, wedge_next(&state) & 0xff);
        }
    }
    puts_serial("hpkvm-guest: wedge: rounds=");
    putu_serial(rounds);
    puts_serial(" nmis=");
    putu_serial(__atomic_load_n(&wedge_nmis, __ATOMIC_RELAXED));
    puts_serial(" gps=");
    putu_serial(__atomic_load_n(&wedge_gps, __ATOMIC_RELAXED));
    puts_serial(", interrupts off from now on\n");
    for (;;) {
        __asm__ volatile("cli" : : : "memory");
    }
}
