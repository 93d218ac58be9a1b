/*
 * hpkvm test guest: the one-shot LAPIC timer as a guest sees it across
 * VM exits, where a host may lend the guest its core's timer
 *
 * "tmict-check": the boot CPU arms a one-shot count of TMICT_CHECK_COUNT
 * (divide by 1) and reads TMICT back at each point where a host that
 * lends the core's timer takes it back or lends it again: right after
 * the write, after another exit, after the expiry, after one more exit
 * and after switching the LVT to periodic (masked).  The SDM's TMICT is
 * what the guest wrote, at each of them; any other value fails the
 * guest, naming the point.
 *
 * "ap-timers" (with halts=N): before each HLT the first AP arms a
 * one-shot count from a sweep (AP_TIMER_STEP to AP_TIMER_STEPS times
 * that, in bus cycles at divide 1), exits once (CPUID) and waits with
 * interrupts on until that timer fired; only then does it halt for the
 * boot CPU's IPI.  Somewhere in the sweep the count runs out while the
 * host handles the CPUID, between its last look at the timer and the
 * next entry: the entry then finds the expiry due.  A host that
 * mishandles that entry (e.g. leaves the vCPU marked as exiting, so that
 * nothing kicks it again) loses the next wake-up, which wake_ap()
 * reports.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "cpu.h"
#include "guest.h"

#define LAPIC_TIMER_CCR     0x390
#define LAPIC_TPR           0x080
#define LAPIC_PPR           0x0a0
#define LAPIC_ISR_64        0x120       /* vectors 64-95 in service */
#define LAPIC_IRR_64        0x220       /* vectors 64-95 requested */
#define LVT_PERIODIC        (1u << 17)
#define TIMER_DIVIDE_1      0xb

/* About 10 ms at a 1 GHz bus, 100 ms at 100 MHz: outlives the reads. */
#define TMICT_CHECK_COUNT   0x999999u
#define TMICT_WAIT_CYCLES   20000000000ull

/*
 * 2 us to 800 us at a 1 GHz bus: from less than an exit costs under TCG
 * to more than one.
 */
#define AP_TIMER_STEP       2000u
#define AP_TIMER_STEPS      400u
/* Less than the boot CPU waits for a wake-up: the AP reports first. */
#define AP_TIMER_WAIT_CYCLES 2000000000ull

static uint32_t ap_timer_fired;

__attribute__((interrupt))
static void ap_timer_handler(struct interrupt_frame *frame)
{
    __atomic_fetch_add(&ap_timer_fired, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

static void tmict_expect(const char *when)
{
    uint32_t v = lapic_read(LAPIC_TIMER_ICR);

    if (v == TMICT_CHECK_COUNT) {
        return;
    }
    puts_serial("hpkvm-guest: FAIL tmict-check: TMICT ");
    putu_serial(v);
    puts_serial(" ");
    puts_serial(when);
    puts_serial(", written ");
    putu_serial(TMICT_CHECK_COUNT);
    puts_serial("\n");
    guest_exit(GUEST_FAIL);
}

void tmict_check(void)
{
    __atomic_store_n(&timer_fired, 0, __ATOMIC_RELAXED);
    lapic_write(LAPIC_TIMER_DCR, TIMER_DIVIDE_1);
    lapic_write(LAPIC_LVT_TIMER, VEC_TIMER);
    lapic_write(LAPIC_TIMER_ICR, TMICT_CHECK_COUNT);
    tmict_expect("right after the write");
    cpu_exit_once();
    tmict_expect("after an exit");
    if (!wait_for(&timer_fired, 1, TMICT_WAIT_CYCLES)) {
        fail("tmict-check: the timer never fired");
    }
    tmict_expect("after the expiry");
    cpu_exit_once();
    tmict_expect("after an exit past the expiry");
    lapic_write(LAPIC_LVT_TIMER, LVT_PERIODIC | LVT_MASKED | VEC_TIMER);
    tmict_expect("after switching to periodic");
    /* Stopped, and one-shot again, as fire_timer() set it up. */
    lapic_write(LAPIC_TIMER_ICR, 0);
    lapic_write(LAPIC_LVT_TIMER, VEC_TIMER);
}

static void ap_timer_reg(const char *name, uint32_t reg)
{
    puts_serial(name);
    putu_serial(lapic_read(reg));
}

/* What the APIC held when a timer was lost: for whoever debugs it. */
static void __attribute__((noreturn)) ap_timer_lost(uint32_t i)
{
    puts_serial("hpkvm-guest: FAIL ap-timers: the AP's timer never fired, "
                "sweep step ");
    putu_serial(i);
    ap_timer_reg(": TMICT ", LAPIC_TIMER_ICR);
    ap_timer_reg(" TMCCT ", LAPIC_TIMER_CCR);
    ap_timer_reg(" LVTT ", LAPIC_LVT_TIMER);
    ap_timer_reg(" TPR ", LAPIC_TPR);
    ap_timer_reg(" PPR ", LAPIC_PPR);
    ap_timer_reg(" ISR[64-95] ", LAPIC_ISR_64);
    ap_timer_reg(" IRR[64-95] ", LAPIC_IRR_64);
    puts_serial("\n");
    guest_exit(GUEST_FAIL);
}

void ap_timers_init(void)
{
    set_gate(VEC_AP_TIMER, ap_timer_handler);
}

void ap_timer_before_halt(uint32_t i)
{
    uint32_t fired = __atomic_load_n(&ap_timer_fired, __ATOMIC_ACQUIRE);

    if (i == 0) {
        lapic_write(LAPIC_TIMER_DCR, TIMER_DIVIDE_1);
        lapic_write(LAPIC_LVT_TIMER, VEC_AP_TIMER);
    }
    lapic_write(LAPIC_TIMER_ICR, AP_TIMER_STEP * (1 + i % AP_TIMER_STEPS));
    cpu_exit_once();
    if (!wait_for(&ap_timer_fired, fired + 1, AP_TIMER_WAIT_CYCLES)) {
        ap_timer_lost(i);
    }
}
