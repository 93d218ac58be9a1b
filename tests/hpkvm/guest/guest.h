/*
 * hpkvm test guest: what boot.S, guest.c, bench.c and wedge.c share, and
 * vnet.h, which guest.c implements for the shared vnet.c
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_H
#define HPKVM_GUEST_H

#include <stdbool.h>
#include <stdint.h>
#include "layout.h"
/* pci_read(), pci_write() and vnet.c's other needs (guest.c); vnet_send() */
#include "vnet.h"

#define MSR_APIC_BASE   0x1b
#define MSR_TSC_DEADLINE 0x6e0
#define MSR_X2APIC_BASE 0x800

#define APIC_BASE_EXTD  (1u << 10)
#define APIC_BASE_EN    (1u << 11)

#define LAPIC_BASE      0xfee00000u
#define LAPIC_ID        0x020
#define LAPIC_EOI       0x0b0
#define LAPIC_SVR       0x0f0
#define LAPIC_ICR_LO    0x300
#define LAPIC_ICR_HI    0x310
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_TIMER_ICR 0x380
#define LAPIC_TIMER_DCR 0x3e0

#define ICR_FIXED       0x00000
#define ICR_INIT        0x00500
#define ICR_STARTUP     0x00600
#define ICR_ASSERT      0x04000
#define ICR_BUSY        0x01000
#define ICR_ALL_BUT_SELF 0xc0000

#define LVT_TSC_DEADLINE (2u << 17)
#define LVT_MASKED      (1u << 16)
#define SVR_ENABLE      0x100

#define VEC_REPORT      0x40
#define VEC_TIMER       0x41
#define VEC_WAKE        0x42
#define VEC_BENCH       0x43
#define VEC_VF          0x44
#define VEC_AP_TIMER    0x45
#define VEC_CR8         0x46    /* class 4: below CR8 = 4, above 3 */
#define VEC_SPURIOUS    0xff

/* What an interrupt handler (__attribute__((interrupt))) is given. */
struct interrupt_frame {
    uint64_t rip;
    uint64_t cs;
    uint64_t rflags;
    uint64_t rsp;
    uint64_t ss;
};

/* boot.S */
extern char trampoline_start[], trampoline_end[];
extern uint32_t multiboot_info;     /* physical address, below 4 GiB */

/* guest.c, called from boot.S */
void bsp_main(void);
void ap_main(uint32_t slot);

/* guest.c, for the workloads */
extern bool x2apic;
extern uint32_t bsp_apic_id;
extern uint32_t reported_apic_id[MAX_CPUS];     /* the APs', by slot */
extern uint32_t halts_entered;                  /* by the first AP */
extern uint32_t ap_spin;        /* APs spin with interrupts on, not HLT */
extern uint32_t timer_fired;                    /* VEC_TIMER handler */
extern uint64_t timer_fired_tsc;

void puts_serial(const char *s);
void putu_serial(uint64_t v);
void __attribute__((noreturn)) guest_exit(uint8_t code);
void __attribute__((noreturn)) fail(const char *why);
uint64_t option(const char *name);
uint32_t lapic_read(uint32_t reg);
void lapic_write(uint32_t reg, uint32_t v);
void send_ipi(uint32_t dest_apic_id, uint32_t icr_lo);
void delay_cycles(uint64_t cycles);
bool wait_for(uint32_t *flag, uint32_t want, uint64_t cycles);
uint64_t fire_timer(bool tsc_deadline);

/*
 * An igb VF's MSI on demand (vf.c): vf_find() says where the first VF
 * on bus 0 is (VF_NONE: nowhere); vf_route_msi() routes its MSI-X
 * vector 0 to @apic_id at @vector and returns its registers, which
 * vf_raise_msi() takes to raise that MSI once.
 */
#define VF_NONE         0xffffffffu
/* An MSI-X table entry (MMIO: volatile) to @dest, an APIC ID, with @data */
void msix_set_entry(volatile uint32_t *entry, uint32_t dest, uint32_t data);
uint32_t vf_find(void);
/* MMIO: volatile */
volatile uint32_t *vf_route_msi(uint32_t bdf, uint32_t apic_id,
                                uint8_t vector);
void vf_raise_msi(volatile uint32_t *regs);         /* MMIO: volatile */
/* vf-msis=N: @n MSIs of the VF to the first AP, each while it halts */
void vf_msis_to_halted_ap(uint32_t n);
void set_gate(int vec, void *handler);

/*
 * timer-view.c: the one-shot timer's registers across exits
 * ("tmict-check"), and the AP's timer due at an entry ("ap-timers")
 */
void tmict_check(void);
void ap_timers_init(void);
/* before the AP's @i-th HLT: a one-shot count from the sweep, an exit */
void ap_timer_before_halt(uint32_t i);

/* cr8.c: CR8 writes, and what the priority they set does ("cr8=N") */
void cr8_init(void);
void cr8_check(uint64_t writes);

/* bench.c: the micro-benchmarks ("bench=N") */
void bench_run(uint32_t ncpus, bool tsc_deadline);

/* wedge.c: a guest that tries to wedge its host ("wedge=N"); never returns */
void __attribute__((noreturn)) wedge(uint64_t rounds, uint32_t ncpus);

#endif
