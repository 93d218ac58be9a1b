/*
 * hpkvm test guest: "cr8=N", the task priority as a guest sets it through
 * CR8
 *
 * First N writes of CR8, raising and lowering it as an OS does around
 * its short critical sections (Windows' IRQL): a workload for what a CR8
 * write costs, which the nested host reads as the boot CPU's exits.
 * Then what the priority does and reads, across exits, where a host may
 * give the guest its core's TPR:
 *   - CR8 at 15: a fixed self-IPI of class 4 waits; at 4 it still waits;
 *     at 3 it is taken;
 *   - CR8 set to 5 reads 5 after an exit, and the x2APIC TPR (or the
 *     xAPIC one) reads 0x50.
 * A failure fails the guest, naming the check.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "cpu.h"
#include "guest.h"

#define LAPIC_TPR           0x080
/* Long enough for a pending interrupt to be taken, on any host. */
#define CR8_WAIT_CYCLES     200000000ull

static uint32_t cr8_taken;

__attribute__((interrupt))
static void cr8_handler(struct interrupt_frame *frame)
{
    __atomic_fetch_add(&cr8_taken, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

static inline void cr8_write(uint64_t v)
{
    __asm__ volatile("mov %0, %%cr8" : : "r"(v) : "memory");
}

static inline uint64_t cr8_read(void)
{
    uint64_t v;

    __asm__ volatile("mov %%cr8, %0" : "=r"(v));
    return v;
}

void cr8_init(void)
{
    set_gate(VEC_CR8, cr8_handler);
}

void cr8_check(uint64_t writes)
{
    uint64_t i;

    for (i = 0; i < writes; i++) {
        cr8_write(1);
        cr8_write(0);
    }

    cr8_write(15);
    send_ipi(lapic_read(LAPIC_ID) >> (x2apic ? 0 : 24), ICR_FIXED | VEC_CR8);
    if (wait_for(&cr8_taken, 1, CR8_WAIT_CYCLES)) {
        fail("cr8: an interrupt of class 4 was taken with CR8 at 15");
    }
    cr8_write(4);
    if (wait_for(&cr8_taken, 1, CR8_WAIT_CYCLES)) {
        fail("cr8: an interrupt of class 4 was taken with CR8 at 4");
    }
    cr8_write(3);
    if (!wait_for(&cr8_taken, 1, CR8_WAIT_CYCLES)) {
        fail("cr8: an interrupt of class 4 was not taken with CR8 at 3");
    }

    cr8_write(5);
    cpu_exit_once();
    if (cr8_read() != 5) {
        fail("cr8: CR8 written 5 read otherwise after an exit");
    }
    if ((lapic_read(LAPIC_TPR) & 0xff) != 0x50) {
        fail("cr8: CR8 written 5, the TPR did not read 0x50");
    }
    cr8_write(0);
}
