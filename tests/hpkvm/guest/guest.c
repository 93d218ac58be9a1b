/*
 * hpkvm test guest: a bare-metal x86 guest of our own
 *
 * It brings up every vCPU, has each report in to the boot CPU by IPI,
 * fires one LAPIC timer interrupt (TSC-deadline mode where the CPU has
 * it, one-shot otherwise), prints one result line on COM1 and ends QEMU
 * through isa-debug-exit.
 *
 * Options on the multiboot command line (-append):
 *   halts=N   then wake the first AP N times by IPI from HLT (a workload
 *             for counting halt exits)
 *   halt-cycles=N  with halts=, leave the AP halted N TSC cycles before
 *             each IPI, so that what the host does meanwhile (e.g. write
 *             protect memory for dirty logging) meets the IPI's delivery
 *   hold      after the result line, halt instead of ending QEMU, so the
 *             host can read statistics first
 *   msix      program the MSI-X table of the first PCI function that has
 *             one: entry 0 fixed to the BSP, entry 1 lowest priority; then
 *             mask entry 0, retarget it to the first AP and unmask it (what
 *             a driver does when it moves an interrupt)
 *   vf-msis=N then N MSIs of the first igb VF (vf.c) to the first AP,
 *             each sent while it halts: a workload for how a device's
 *             interrupt reaches a vCPU that is not running
 *   timers=N  then N more timer interrupts from the BSP, each one deadline
 *             (or count) written and waited for: a workload for where the
 *             host fires them
 *   bench=N   before the result line, the micro-benchmarks of bench.c with
 *             N samples each
 *   vnet=N    send N broadcast frames through the first virtio-net device
 *             (see guest-common/vnet.c); with vnet-standby, accept
 *             VIRTIO_NET_F_STANDBY and report the failover primary QEMU
 *             plugs then
 *   soak=N    before the result line, N rounds that each verify and rewrite
 *             256 KiB of memory with a round-specific pattern, take one
 *             timer interrupt and check the TSC never went back: a workload
 *             that checks itself across a live migration ("soak: started"
 *             is printed first, "soak: round K" every 8 rounds; a round
 *             takes ~0.5 s on a nested paravirtual KVM)
 *   pit=N     at start-up, re-arm the PIT at N Hz (19 to 1000) instead of
 *             stopping it; masked at the 8259 as always, and LINT0 masked,
 *             so only the host takes its ticks (KVM's in-kernel PIT is a
 *             host timer)
 *   apicid-write  at start-up, in xAPIC mode, write the BSP's APIC ID
 *             register with another ID and then its own again: what makes
 *             KVM inhibit APIC virtualization for the VM (for good, in
 *             Linux 6.1), as a guest that renumbers its APICs does
 *   ap-timers with halts=, before each HLT the first AP arms a one-shot
 *             timer from a sweep of counts, exits once and waits for it
 *             (timer-view.c; the reproducer of a loss still open under
 *             timer-passthrough, docs/devel/hpkvm-kvm.rst)
 *   tmict-check  read TMICT back across exits, the expiry and a switch to
 *             periodic: what the guest wrote each time (timer-view.c)
 *   cr8=N     N writes of CR8 up and down, then checks of what the
 *             priority masks and reads across exits (cr8.c)
 *   wedge=N   after the result line, with one vCPU: N rounds of ICR,
 *             self-IPI and TPR writes of any value with interrupts off,
 *             then IF=0 forever without halting (see wedge.c)
 *
 * It needs no firmware services beyond what SeaBIOS and QEMU's multiboot
 * loader leave behind, and few VM exits, so it finishes in well under a
 * second even under a nested KVM where one exit costs ~20k cycles.
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

#define COM1            0x3f8
#define PIC1_DATA       0x21
#define PIC2_DATA       0xa1
#define PIT_CH0         0x40
#define PIT_MODE        0x43
/* Channel 0, low then high byte, mode 0 (one-shot), binary. */
#define PIT_CH0_ONESHOT 0x30
/* Channel 0, low then high byte, mode 2 (rate generator), binary. */
#define PIT_CH0_PERIODIC 0x34
#define PIT_INPUT_HZ    1193182u
/* A 16-bit count at the low end; KVM's 200 us floor at the high one. */
#define PIT_MIN_HZ      19u
#define PIT_MAX_HZ      1000u
#define FW_CFG_CTL      0x510
#define FW_CFG_DATA     0x511
#define FW_CFG_NB_CPUS  0x05


/* Generous bounds in TSC cycles: seconds on any host, including TCG. */
#define AP_WAIT_CYCLES      20000000000ull
#define TIMER_WAIT_CYCLES   20000000000ull
#define TIMER_DELTA_CYCLES  2000000ull
#define VNET_WAIT_CYCLES    20000000000ull
#define ONESHOT_COUNT       100000u
#define WAKE_RETRY_CYCLES   1000000000ull
#define WAKE_STALL_RETRIES  5

/* The soak workload's memory: identity-mapped, above the guest image. */
#define SOAK_BASE           0x400000ull
#define SOAK_WORDS          (0x40000ull / 8)

/*
 * Shared between CPUs and interrupt handlers: accessed only through
 * __atomic builtins.
 */
static uint32_t reports;
static uint32_t report_lock;
uint32_t reported_apic_id[MAX_CPUS];
uint64_t timer_fired_tsc;
uint32_t timer_fired;
uint32_t halts_entered;
uint32_t ap_spin;                   /* bench: APs spin instead of HLT */

/* Written by the BSP before any AP starts. */
bool x2apic;
uint32_t bsp_apic_id;

/*
 * The local APIC, in x2APIC mode (MSRs) where the CPU has it, else in
 * xAPIC mode (MMIO).  Register offsets are the xAPIC ones.
 */
uint32_t lapic_read(uint32_t reg)
{
    if (x2apic) {
        return rdmsr(MSR_X2APIC_BASE + (reg >> 4));
    }
    /* MMIO: every access must reach the device. */
    return *(volatile uint32_t *)(uintptr_t)(LAPIC_BASE + reg);
}

void lapic_write(uint32_t reg, uint32_t v)
{
    if (x2apic) {
        wrmsr(MSR_X2APIC_BASE + (reg >> 4), v);
        return;
    }
    /* MMIO: every access must reach the device. */
    *(volatile uint32_t *)(uintptr_t)(LAPIC_BASE + reg) = v;
}

static inline uint32_t lapic_id(void)
{
    uint32_t id = lapic_read(LAPIC_ID);

    return x2apic ? id : id >> 24;
}

/* Serial output */

static void putc_serial(char c)
{
    while (!(inb(COM1 + 5) & 0x20)) {
        /* wait for the transmit holding register */
    }
    outb(COM1, c);
}

void puts_serial(const char *s)
{
    while (*s) {
        putc_serial(*s++);
    }
}

void putu_serial(uint64_t v)
{
    char buf[21];
    int i = sizeof(buf) - 1;

    buf[i] = 0;
    do {
        buf[--i] = '0' + v % 10;
        v /= 10;
    } while (v);
    puts_serial(&buf[i]);
}

void __attribute__((noreturn)) guest_exit(uint8_t code)
{
    outb(DEBUG_EXIT_PORT, code);
    for (;;) {
        __asm__ volatile("cli; hlt");
    }
}

void __attribute__((noreturn)) fail(const char *why)
{
    puts_serial("hpkvm-guest: FAIL ");
    puts_serial(why);
    puts_serial("\n");
    guest_exit(GUEST_FAIL);
}

/* Interrupts */

struct idt_gate {
    uint16_t offset_lo;
    uint16_t selector;
    uint8_t ist;
    uint8_t type_attr;
    uint16_t offset_mid;
    uint32_t offset_hi;
    uint32_t reserved;
} __attribute__((packed));

static struct idt_gate idt[256] __attribute__((aligned(8)));

static struct {
    uint16_t limit;
    uint64_t base;
} __attribute__((packed)) idt_desc = { sizeof(idt) - 1, (uint64_t)idt };

void set_gate(int vec, void *handler)
{
    uint64_t addr = (uint64_t)handler;

    idt[vec].offset_lo = addr & 0xffff;
    idt[vec].selector = CODE64_SEL;
    idt[vec].ist = 0;
    idt[vec].type_attr = 0x8e;          /* present, ring 0, interrupt gate */
    idt[vec].offset_mid = (addr >> 16) & 0xffff;
    idt[vec].offset_hi = addr >> 32;
}

static void __attribute__((noreturn))
exception(uint32_t vector, struct interrupt_frame *frame)
{
    puts_serial("hpkvm-guest: FAIL exception ");
    putu_serial(vector);
    puts_serial(" at rip ");
    putu_serial(frame->rip);
    puts_serial(" on apic ");
    putu_serial(lapic_id());
    puts_serial("\n");
    guest_exit(GUEST_FAIL);
}

/*
 * One handler per exception vector, so the report names it.  Vectors
 * that push an error code see it as frame->rip; they never return, so
 * only the report is off, by one word.
 */
#define EXCEPTION_HANDLER(n) \
    __attribute__((interrupt)) \
    static void exception_##n(struct interrupt_frame *frame) \
    { \
        exception(n, frame); \
    }
EXCEPTION_HANDLER(0) EXCEPTION_HANDLER(1) EXCEPTION_HANDLER(2)
EXCEPTION_HANDLER(3) EXCEPTION_HANDLER(4) EXCEPTION_HANDLER(5)
EXCEPTION_HANDLER(6) EXCEPTION_HANDLER(7) EXCEPTION_HANDLER(8)
EXCEPTION_HANDLER(9) EXCEPTION_HANDLER(10) EXCEPTION_HANDLER(11)
EXCEPTION_HANDLER(12) EXCEPTION_HANDLER(13) EXCEPTION_HANDLER(14)
EXCEPTION_HANDLER(15) EXCEPTION_HANDLER(16) EXCEPTION_HANDLER(17)
EXCEPTION_HANDLER(18) EXCEPTION_HANDLER(19)

static void (*const exception_handlers[])(struct interrupt_frame *) = {
    exception_0, exception_1, exception_2, exception_3, exception_4,
    exception_5, exception_6, exception_7, exception_8, exception_9,
    exception_10, exception_11, exception_12, exception_13, exception_14,
    exception_15, exception_16, exception_17, exception_18, exception_19,
};

__attribute__((interrupt))
static void report_handler(struct interrupt_frame *frame)
{
    __atomic_fetch_add(&reports, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

__attribute__((interrupt))
static void timer_handler(struct interrupt_frame *frame)
{
    __atomic_store_n(&timer_fired_tsc, rdtsc(), __ATOMIC_RELAXED);
    __atomic_store_n(&timer_fired, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

__attribute__((interrupt))
static void wake_handler(struct interrupt_frame *frame)
{
    /* The AP counts its wake-ups itself, in halts_entered. */
    lapic_write(LAPIC_EOI, 0);
}

__attribute__((interrupt))
static void spurious_handler(struct interrupt_frame *frame)
{
    /* Spurious interrupts take no EOI. */
}

static void load_idt(void)
{
    __asm__ volatile("lidt %0" : : "m"(idt_desc));
}

static void lapic_enable(void)
{
    if (x2apic) {
        wrmsr(MSR_APIC_BASE,
              rdmsr(MSR_APIC_BASE) | APIC_BASE_EN | APIC_BASE_EXTD);
    }
    lapic_write(LAPIC_SVR, SVR_ENABLE | VEC_SPURIOUS);
}

void send_ipi(uint32_t dest_apic_id, uint32_t icr_lo)
{
    if (x2apic) {
        /* One 64-bit write; no delivery status to wait for. */
        wrmsr(MSR_X2APIC_BASE + (LAPIC_ICR_LO >> 4),
              ((uint64_t)dest_apic_id << 32) | icr_lo);
        return;
    }
    lapic_write(LAPIC_ICR_HI, dest_apic_id << 24);
    lapic_write(LAPIC_ICR_LO, icr_lo);
    while (lapic_read(LAPIC_ICR_LO) & ICR_BUSY) {
        /* wait for delivery */
    }
}

void delay_cycles(uint64_t cycles)
{
    uint64_t end = rdtsc() + cycles;

    while (rdtsc() < end) {
        __asm__ volatile("pause");
    }
}

/* Wait with interrupts enabled until *flag reaches want or time runs out. */
bool wait_for(uint32_t *flag, uint32_t want, uint64_t cycles)
{
    uint64_t end = rdtsc() + cycles;

    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < want) {
        if (rdtsc() > end) {
            return false;
        }
        __asm__ volatile("sti; pause; cli");
    }
    return true;
}

static uint32_t fw_cfg_nb_cpus(void)
{
    uint32_t n;

    outw(FW_CFG_CTL, FW_CFG_NB_CPUS);
    n = inb(FW_CFG_DATA);
    n |= (uint32_t)inb(FW_CFG_DATA) << 8;
    return n;
}

/* Application processors */

void ap_main(uint32_t slot)
{
    /* Only the first AP is woken from HLT (wake_ap()). */
    bool ap_timers = slot == 0 && option("ap-timers");
    uint32_t before;

    load_idt();
    lapic_enable();
    __atomic_store_n(&reported_apic_id[slot], lapic_id(), __ATOMIC_RELAXED);

    /*
     * Fixed IPIs of one vector that arrive while one is pending merge
     * into one: report one AP at a time, each waiting for its IPI to be
     * counted.
     */
    while (__atomic_exchange_n(&report_lock, 1, __ATOMIC_ACQUIRE)) {
        __asm__ volatile("pause");
    }
    before = __atomic_load_n(&reports, __ATOMIC_ACQUIRE);
    send_ipi(bsp_apic_id, ICR_FIXED | VEC_REPORT);
    while (__atomic_load_n(&reports, __ATOMIC_ACQUIRE) == before) {
        __asm__ volatile("pause");
    }
    __atomic_store_n(&report_lock, 0, __ATOMIC_RELEASE);

    /*
     * Sleep in HLT, woken by IPIs.  Interrupts are off until "sti; hlt",
     * whose STI shadow covers the HLT: an IPI sent once halts_entered has
     * moved is taken only after this HLT, so every wake-up costs exactly
     * one HLT.
     */
    for (;;) {
        if (__atomic_load_n(&ap_spin, __ATOMIC_ACQUIRE)) {
            /* Running, not halted: IPIs land in a running vCPU. */
            __asm__ volatile("sti");
            while (__atomic_load_n(&ap_spin, __ATOMIC_ACQUIRE)) {
                /* no PAUSE: under KVM it may exit (pause-loop exiting) */
            }
            __asm__ volatile("cli");
            continue;
        }
        if (ap_timers) {
            ap_timer_before_halt(
                __atomic_load_n(&halts_entered, __ATOMIC_RELAXED));
        }
        __atomic_fetch_add(&halts_entered, 1, __ATOMIC_RELEASE);
        __asm__ volatile("sti; hlt; cli");
    }
}

static void start_aps(void)
{
    size_t len = trampoline_end - trampoline_start;
    uint8_t *dst = (uint8_t *)(uintptr_t)TRAMPOLINE_ADDR;
    size_t i;

    for (i = 0; i < len; i++) {
        dst[i] = trampoline_start[i];
    }
    /* INIT, then STARTUP twice, to every CPU but this one. */
    send_ipi(0, ICR_ALL_BUT_SELF | ICR_ASSERT | ICR_INIT);
    delay_cycles(10000000);
    send_ipi(0, ICR_ALL_BUT_SELF | ICR_ASSERT | ICR_STARTUP |
             (TRAMPOLINE_ADDR >> 12));
    delay_cycles(200000);
    send_ipi(0, ICR_ALL_BUT_SELF | ICR_ASSERT | ICR_STARTUP |
             (TRAMPOLINE_ADDR >> 12));
}

/* The multiboot command line */

#define MB_INFO_CMDLINE (1u << 2)

static const char *cmdline(void)
{
    const uint32_t *info = (const uint32_t *)(uintptr_t)multiboot_info;

    if (!info || !(info[0] & MB_INFO_CMDLINE)) {
        return "";
    }
    return (const char *)(uintptr_t)info[4];
}

/*
 * The value of option "name" (as "name=value" or a bare "name", which
 * counts as 1), or 0 if absent.
 */
uint64_t option(const char *name)
{
    const char *p = cmdline();

    while (*p) {
        const char *n = name;
        uint64_t v = 0;

        while (*p == ' ') {
            p++;
        }
        while (*n && *p == *n) {
            p++;
            n++;
        }
        if (!*n && (*p == ' ' || !*p)) {
            return 1;
        }
        if (!*n && *p == '=') {
            for (p++; *p >= '0' && *p <= '9'; p++) {
                v = v * 10 + (*p - '0');
            }
            return v;
        }
        while (*p && *p != ' ') {
            p++;
        }
    }
    return 0;
}

/*
 * Wake the first AP from HLT n times: each IPI only once the AP is on its
 * way into HLT, so that the AP executes exactly n HLTs that IPIs end.
 * An IPI the AP has not answered within WAKE_RETRY_CYCLES is sent again
 * and counted in *retries (a wake-up the platform lost, or a slow one);
 * a wake-up that WAKE_STALL_RETRIES IPIs more do not bring ends it.
 * Returns the number of HLTs the AP left: at least n, more if an HLT
 * ended without an IPI (e.g. a hypervisor re-entering the guest after a
 * native HLT).
 */
static uint32_t wake_ap(uint32_t n, uint64_t halt_cycles, uint32_t *retries)
{
    uint32_t apic_id = __atomic_load_n(&reported_apic_id[0], __ATOMIC_RELAXED);
    uint32_t i;

    *retries = 0;
    if (!wait_for(&halts_entered, 1, AP_WAIT_CYCLES)) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        uint32_t resent = 0;

        delay_cycles(halt_cycles);
        send_ipi(apic_id, ICR_FIXED | VEC_WAKE);
        while (!wait_for(&halts_entered, i + 2, WAKE_RETRY_CYCLES)) {
            /* One IPI after another lost: the AP is stuck, not slow. */
            if (++*retries > n || ++resent > WAKE_STALL_RETRIES) {
                return __atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE) - 1;
            }
            send_ipi(apic_id, ICR_FIXED | VEC_WAKE);
        }
    }
    return __atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE) - 1;
}

/* PCI configuration mechanism #1 and MSI-X */

#define PCI_CONFIG_ADDR     0xcf8
#define PCI_CONFIG_DATA     0xcfc
#define PCI_COMMAND_MEM_BUS 0x6         /* memory space, bus master */
#define MSIX_ENABLE         (1u << 15)
#define MSIX_FUNCTION_MASK  (1u << 14)
#define MSIX_ENTRY_MASKED   1u
#define VEC_MSIX_FIXED      0x50
#define VEC_MSIX_MOVED      0x51
#define VEC_MSIX_LOWPRI     0x52
#define MSI_DATA_LOWPRI     (1u << 8)

uint32_t pci_read(uint32_t bdf, uint32_t off)
{
    outl(PCI_CONFIG_ADDR, 0x80000000u | bdf << 8 | (off & 0xfc));
    return inl(PCI_CONFIG_DATA);
}

void pci_write(uint32_t bdf, uint32_t off, uint32_t v)
{
    outl(PCI_CONFIG_ADDR, 0x80000000u | bdf << 8 | (off & 0xfc));
    outl(PCI_CONFIG_DATA, v);
}

/* The rest of what vnet.c needs (vnet.h), over this guest's own */

const char vnet_guest[] = "hpkvm-guest";

void vnet_puts(const char *s)
{
    puts_serial(s);
}

void vnet_putu(uint64_t v)
{
    putu_serial(v);
}

void vnet_fail(const char *why)
{
    fail(why);
}

uint64_t vnet_deadline(void)
{
    return rdtsc() + VNET_WAIT_CYCLES;
}

bool vnet_expired(uint64_t deadline)
{
    return rdtsc() > deadline;
}

/*
 * DMA snoops the caches: only the compiler must not keep values across
 * this (@p is volatile as vnet.c's rings are).
 */
void vnet_dma_sync(const volatile void *p, uint32_t len)
{
    __asm__ volatile("" : : : "memory");
}

/* The first function on bus 0 with an MSI-X capability; false if none. */
static bool find_msix(uint32_t *bdf, uint32_t *cap)
{
    for (*bdf = 0; *bdf < 256; (*bdf)++) {
        *cap = pci_find_cap(*bdf, PCI_CAP_ID_MSIX);
        if (*cap) {
            return true;
        }
    }
    return false;
}

/* @entry: MMIO, volatile */
void msix_set_entry(volatile uint32_t *entry, uint32_t dest, uint32_t data)
{
    /* MMIO (volatile): every access must reach the device, masked first */
    volatile uint32_t *e = entry;

    e[3] = MSIX_ENTRY_MASKED;
    e[0] = LAPIC_BASE | dest << 12;
    e[1] = 0;
    e[2] = data;
    e[3] = 0;
}

/* Returns the bus/device/function programmed, or fails the run. */
static uint32_t program_msix(void)
{
    uint32_t bdf, cap, hdr, table, bar, bir;
    uint64_t base;
    uint32_t *entries;
    uint32_t ap = __atomic_load_n(&reported_apic_id[0], __ATOMIC_RELAXED);

    if (!find_msix(&bdf, &cap)) {
        fail("msix: no PCI function with MSI-X");
    }
    hdr = pci_read(bdf, cap);
    table = pci_read(bdf, cap + 4);
    bir = table & 7;
    bar = pci_read(bdf, 0x10 + 4 * bir);
    base = bar & ~0xfu;
    if ((bar & 6) == 4) {
        base |= (uint64_t)pci_read(bdf, 0x14 + 4 * bir) << 32;
    }
    entries = (uint32_t *)(uintptr_t)(base + (table & ~7u));
    pci_write(bdf, 4, pci_read(bdf, 4) | PCI_COMMAND_MEM_BUS);

    msix_set_entry(&entries[0], bsp_apic_id, VEC_MSIX_FIXED);
    msix_set_entry(&entries[4], bsp_apic_id,
                   MSI_DATA_LOWPRI | VEC_MSIX_LOWPRI);
    pci_write(bdf, cap, (hdr & 0xffff) |
              (((hdr >> 16) | MSIX_ENABLE) & ~MSIX_FUNCTION_MASK) << 16);
    /* Move entry 0 to the first AP, as a driver would. */
    msix_set_entry(&entries[0], ap, VEC_MSIX_MOVED);
    return bdf;
}

/* The LAPIC timer */

static bool has_feature_ecx1(int bit)
{
    uint32_t a, b, c, d;

    cpuid(1, &a, &b, &c, &d);
    return c & (1u << bit);
}

/*
 * Program one timer interrupt; returns the cycles from the deadline to
 * the handler (TSC-deadline) or from programming to the handler
 * (one-shot).
 */
/* Whether the LAPIC timer holds fire_timer()'s one-shot set-up. */
static bool oneshot_ready;

uint64_t fire_timer(bool tsc_deadline)
{
    uint64_t start, deadline, fired;

    __atomic_store_n(&timer_fired, 0, __ATOMIC_RELAXED);
    if (tsc_deadline) {
        lapic_write(LAPIC_LVT_TIMER, LVT_TSC_DEADLINE | VEC_TIMER);
        /* Order the LVT write before the MSR write (SDM 10.5.4.1). */
        __asm__ volatile("mfence" : : : "memory");
        deadline = rdtsc() + TIMER_DELTA_CYCLES;
        wrmsr(MSR_TSC_DEADLINE, deadline);
        start = deadline;
    } else {
        /* Set up once, as a guest kernel does: each write may exit. */
        if (!oneshot_ready) {
            lapic_write(LAPIC_TIMER_DCR, 0xb);  /* divide by 1 */
            lapic_write(LAPIC_LVT_TIMER, VEC_TIMER);
            oneshot_ready = true;
        }
        start = rdtsc();
        lapic_write(LAPIC_TIMER_ICR, ONESHOT_COUNT);
    }
    if (!wait_for(&timer_fired, 1, TIMER_WAIT_CYCLES)) {
        fail("timer interrupt never came");
    }
    fired = __atomic_load_n(&timer_fired_tsc, __ATOMIC_RELAXED);
    if (fired < start) {
        fail("timer interrupt came before its deadline");
    }
    return fired - start;
}

static uint64_t soak_pattern(uint64_t i, uint64_t round)
{
    uint64_t x = i * 0x9e3779b97f4a7c15ull ^
                 (round + 1) * 0xbf58476d1ce4e5b9ull;

    return x ^ (x >> 31);
}

/*
 * Memory and timer checks, round after round, meant to straddle a live
 * migration: a page the migration lost or a stale copy of it shows as a
 * word of the previous round's pattern; a lost timer interrupt as a
 * timeout; a TSC that jumped back as a smaller reading.
 */
static void soak(uint64_t rounds, bool tsc_deadline)
{
    /* volatile: each word must really be read from and written to RAM */
    volatile uint64_t *mem = (volatile uint64_t *)(uintptr_t)SOAK_BASE;
    uint64_t round, i, last_tsc = rdtsc(), now;

    for (i = 0; i < SOAK_WORDS; i++) {
        mem[i] = soak_pattern(i, 0);
    }
    puts_serial("hpkvm-guest: soak: started\n");
    for (round = 1; round <= rounds; round++) {
        for (i = 0; i < SOAK_WORDS; i++) {
            if (mem[i] != soak_pattern(i, round - 1)) {
                puts_serial("hpkvm-guest: FAIL soak: memory word ");
                putu_serial(i);
                puts_serial(" wrong in round ");
                putu_serial(round);
                puts_serial("\n");
                guest_exit(GUEST_FAIL);
            }
            mem[i] = soak_pattern(i, round);
        }
        fire_timer(tsc_deadline);
        now = rdtsc();
        if (now < last_tsc) {
            fail("soak: the TSC went back");
        }
        last_tsc = now;
        if (round % 8 == 0) {
            puts_serial("hpkvm-guest: soak: round ");
            putu_serial(round);
            puts_serial("\n");
        }
    }
}

void bsp_main(void)
{
    uint32_t ncpus, ipis, halts, woken = 0, retries = 0, i, msix_bdf = 0;
    bool tsc_deadline;
    uint64_t timer_cycles, soak_rounds, timers, pit_hz;
    uint32_t vnet_frames = 0, pit_count;

    for (i = 0; i < sizeof(exception_handlers) / sizeof(exception_handlers[0]);
         i++) {
        set_gate(i, exception_handlers[i]);
    }
    set_gate(VEC_REPORT, report_handler);
    set_gate(VEC_TIMER, timer_handler);
    set_gate(VEC_WAKE, wake_handler);
    set_gate(VEC_SPURIOUS, spurious_handler);
    ap_timers_init();
    cr8_init();
    load_idt();
    x2apic = has_feature_ecx1(21);
    /*
     * SeaBIOS leaves the PIT ticking through the 8259 PIC, whose IRQ 0
     * arrives at vector 8; only LAPIC interrupts are wanted here.
     */
    outb(PIC1_DATA, 0xff);
    outb(PIC2_DATA, 0xff);
    /*
     * Masked, the PIT still ticks in the host: KVM's in-kernel PIT is a
     * periodic host timer (18.2 Hz as SeaBIOS left it) on whichever host
     * core it was last armed or moved to, the BSP's own among them.  Stop
     * it as Linux does when it leaves the PIT: one last one-shot count;
     * or, with pit=N, re-arm it from here at N Hz, still masked.
     */
    pit_hz = option("pit");
    if (pit_hz) {
        if (pit_hz < PIT_MIN_HZ || pit_hz > PIT_MAX_HZ) {
            fail("pit=N needs N from 19 to 1000");
        }
        pit_count = PIT_INPUT_HZ / pit_hz;
        outb(PIT_MODE, PIT_CH0_PERIODIC);
        outb(PIT_CH0, pit_count & 0xff);
        outb(PIT_CH0, pit_count >> 8);
    } else {
        outb(PIT_MODE, PIT_CH0_ONESHOT);
        outb(PIT_CH0, 0);
        outb(PIT_CH0, 0);
    }
    if (option("apicid-write")) {
        /* Before lapic_enable(): the x2APIC ID cannot be written. */
        volatile uint32_t *id = (volatile uint32_t *)(uintptr_t)
                                (LAPIC_BASE + LAPIC_ID);
        uint32_t own = *id;

        *id = own + (1u << 24);
        *id = own;
    }
    lapic_enable();
    if (pit_hz) {
        /*
         * Off the 8259's virtual wire as well, as a guest that takes its
         * timer from the LAPIC does: while LINT0 takes ExtINT, KVM kicks
         * the vCPU at every update of the PIC, masked lines included.
         */
        lapic_write(LAPIC_LVT_LINT0, LVT_MASKED);
    }
    bsp_apic_id = lapic_id();

    ncpus = fw_cfg_nb_cpus();
    if (ncpus == 0 || ncpus > MAX_CPUS) {
        fail("fw_cfg reports an unusable CPU count");
    }
    if (ncpus > 1) {
        start_aps();
        if (!wait_for(&reports, ncpus - 1, AP_WAIT_CYCLES)) {
            puts_serial("hpkvm-guest: FAIL only ");
            putu_serial(__atomic_load_n(&reports, __ATOMIC_ACQUIRE) + 1);
            puts_serial(" of ");
            putu_serial(ncpus);
            puts_serial(" cpus reported in\n");
            guest_exit(GUEST_FAIL);
        }
    }

    ipis = __atomic_load_n(&reports, __ATOMIC_ACQUIRE);
    tsc_deadline = has_feature_ecx1(24);
    timer_cycles = fire_timer(tsc_deadline);

    halts = option("halts");
    if (halts) {
        if (ncpus < 2) {
            fail("halts= needs a second vCPU");
        }
        woken = wake_ap(halts, option("halt-cycles"), &retries);
        if (woken < halts) {
            puts_serial("hpkvm-guest: FAIL the AP stopped waking up from "
                        "HLT after ");
            putu_serial(woken);
            puts_serial(" of ");
            putu_serial(halts);
            puts_serial(" wake-ups\n");
            guest_exit(GUEST_FAIL);
        }
    }

    if (option("msix")) {
        if (ncpus < 2) {
            fail("msix needs a second vCPU");
        }
        msix_bdf = program_msix();
    }

    if (option("tmict-check")) {
        tmict_check();
    }
    if (option("cr8")) {
        cr8_check(option("cr8"));
    }

    /* More of the first: where each timer interrupt fires on the host. */
    timers = option("timers");
    for (i = 0; i < timers; i++) {
        fire_timer(tsc_deadline);
    }

    if (option("vf-msis")) {
        if (ncpus < 2) {
            fail("vf-msis needs a second vCPU");
        }
        vf_msis_to_halted_ap(option("vf-msis"));
    }

    if (option("bench")) {
        bench_run(ncpus, tsc_deadline);
    }

    if (option("vnet")) {
        vnet_frames = vnet_send(option("vnet"), option("vnet-standby"));
    }

    soak_rounds = option("soak");
    if (soak_rounds) {
        soak(soak_rounds, tsc_deadline);
    }

    puts_serial("hpkvm-guest: PASS cpus=");
    putu_serial(ipis + 1);
    puts_serial("/");
    putu_serial(ncpus);
    puts_serial(" ipis=");
    putu_serial(ipis);
    puts_serial(x2apic ? " apic=x2apic" : " apic=xapic");
    puts_serial(tsc_deadline ? " timer=tsc-deadline" : " timer=oneshot");
    puts_serial(" timer-cycles=");
    putu_serial(timer_cycles);
    if (option("msix")) {
        puts_serial(" msix-bdf=");
        putu_serial(msix_bdf);
    }
    if (option("vnet")) {
        puts_serial(" vnet=");
        putu_serial(vnet_frames);
    }
    if (soak_rounds) {
        puts_serial(" soak=");
        putu_serial(soak_rounds);
    }
    if (timers) {
        puts_serial(" timers=");
        putu_serial(timers);
    }
    if (option("vf-msis")) {
        puts_serial(" vf-msis=");
        putu_serial(option("vf-msis"));
    }
    if (option("tmict-check")) {
        puts_serial(" tmict-check=ok");
    }
    if (option("cr8")) {
        puts_serial(" cr8=");
        putu_serial(option("cr8"));
    }
    if (halts) {
        puts_serial(" halts=");
        putu_serial(woken);
        puts_serial(" wake-retries=");
        putu_serial(retries);
    }
    puts_serial("\n");
    if (option("wedge")) {
        wedge(option("wedge"), ncpus);
    }
    if (option("hold")) {
        for (;;) {
            __asm__ volatile("cli; hlt");
        }
    }
    guest_exit(GUEST_PASS);
}
