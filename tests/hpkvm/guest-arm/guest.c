/*
 * hpkvm's aarch64 test guest: a bare-metal program for QEMU's virt
 * machine (GICv3, PL011, PSCI over HVC) that checks what a guest on
 * hpkvm relies on and says so on the serial port:
 *
 *   hpkvm-arm-guest: boot el=1 cntfrq=... mpidr=...
 *   hpkvm-arm-guest: PASS cpus=N timer=T sgi=S spurious=X [vnet=K]
 *
 * (or "FAIL why"), then powers the machine off through PSCI.  Its
 * options come from fw_cfg ("-fw_cfg name=opt/org.hpkvm/NAME,string=N"):
 *
 *   bench=N         run bench.c's workloads with N samples instead
 *   vnet=N          before the PASS line, send N frames through the first
 *                   virtio-net-pci function on bus 0 (guest-common/vnet.c;
 *                   needs -M virt,highmem-ecam=off, see pci.c); fewer
 *                   fail the run
 *   vnet-standby=1  with vnet, accept VIRTIO_NET_F_STANDBY and report the
 *                   failover primary QEMU plugs then, on buses 1-15
 *   vf-msi=1        with vnet-standby, route that primary's (an igb VF's)
 *                   first MSI-X vector through the ITS (its.c) to LPI
 *                   8192, have the VF raise it once and say
 *                   "vf-msi: devid=D event=0 lpi=8192 taken=N"
 *   hold=1          after the PASS line, wait with interrupts masked
 *                   instead of powering off, so the host can read
 *                   statistics first
 *   hold=2          likewise, but spin instead of waiting in WFI: the
 *                   boot CPU then never exits to its host by itself, so
 *                   only the host's own interrupts bring it back to KVM
 *                   (as the x86 guest's wedge=)
 *
 * It brings up every secondary CPU with PSCI CPU_ON, takes virtual timer
 * interrupts (PPI 27) on the boot CPU, and bounces SGIs between the boot
 * CPU and each secondary, which waits for them in WFI: timer, IPI and WFI
 * wake-up, the operations hpkvm's features are about.
 *
 * The MMU stays off, so every data access is to Device memory: no
 * exclusives (CPUs share plain volatile words, one writer each), no
 * unaligned accesses (-mstrict-align), and the PL011's FIFO is polled
 * (TXFF) before each byte, since QEMU drops bytes written while it is
 * full.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* The virt machine's memory map (hw/arm/virt.c). */
#define UART_BASE       0x09000000UL
#define UART_DR         0x00
#define UART_FR         0x18
#define UART_FR_TXFF    (1u << 5)
#define GICD_BASE       0x08000000UL
#define GICD_CTLR       0x0000
#define GICD_CTLR_RWP   (1u << 31)
#define GICD_CTLR_ARE   (1u << 4)
#define GICD_CTLR_GRP1  (1u << 1)
#define GICR_BASE       0x080a0000UL
#define GICR_FRAME      0x20000UL       /* RD_base and SGI_base */
#define GICR_WAKER      0x0014
#define GICR_TYPER      0x0008
#define GICR_TYPER_LAST (1u << 4)
#define GICR_SGI        0x10000UL
#define GICR_IGROUPR0   0x0080
#define GICR_ISENABLER0 0x0100
#define GICR_IPRIORITYR 0x0400

#define PSCI_CPU_ON     0xc4000003UL
#define PSCI_SYSTEM_OFF 0x84000008UL
#define PSCI_ALREADY_ON (-4L)

#define TIMER_ROUNDS    20
#define SGI_ROUNDS      20
#define WAIT_SECONDS    20

#define BENCH_OPTION    "opt/org.hpkvm/bench"
#define VNET_OPTION     "opt/org.hpkvm/vnet"
#define STANDBY_OPTION  "opt/org.hpkvm/vnet-standby"
#define VF_MSI_OPTION   "opt/org.hpkvm/vf-msi"
#define HOLD_OPTION     "opt/org.hpkvm/hold"

/*
 * Shared between CPUs, volatile because each is waited for in a loop;
 * one writer per word: the CPU it describes, or the boot CPU.
 */
volatile uint64_t cpu_mpidr[MAX_CPUS];          /* set by the CPU */
static volatile uint32_t cpu_online[MAX_CPUS];  /* set by the CPU */
static volatile uint32_t pings[MAX_CPUS];       /* SGIs a CPU took */
static volatile uint32_t pongs;                 /* replies CPU 0 took */
volatile uint32_t timer_irqs;                   /* CPU 0's */
volatile uint64_t timer_irq_at;                 /* the last one's counter */
static volatile uint32_t spurious;

static inline void cpu_relax(void)
{
    asm volatile("yield");
}

static void put_char(char c)
{
    while (mmio_read32(UART_BASE + UART_FR) & UART_FR_TXFF) {
        cpu_relax();
    }
    mmio_write32(UART_BASE + UART_DR, (uint8_t)c);
}

void put(const char *s)
{
    while (*s) {
        if (*s == '\n') {
            put_char('\r');
        }
        put_char(*s++);
    }
}

void put_dec(uint64_t v)
{
    char buf[21];
    int i = sizeof(buf) - 1;

    buf[i] = 0;
    do {
        buf[--i] = '0' + v % 10;
        v /= 10;
    } while (v);
    put(&buf[i]);
}

static void put_hex(uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    char buf[19];
    int i = sizeof(buf) - 1;

    buf[i] = 0;
    do {
        buf[--i] = digits[v & 15];
        v >>= 4;
    } while (v);
    buf[--i] = 'x';
    buf[--i] = '0';
    put(&buf[i]);
}

long psci_call(uint64_t fn, uint64_t a1, uint64_t a2, uint64_t a3)
{
    register uint64_t x0 asm("x0") = fn;
    register uint64_t x1 asm("x1") = a1;
    register uint64_t x2 asm("x2") = a2;
    register uint64_t x3 asm("x3") = a3;

    /*
     * SMCCC: results in x0-x3 (KVM zeroes x1-x3), x4-x17 unpredictable
     * before SMCCC 1.1.
     */
    asm volatile("hvc #0" : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3) :
                 : "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12",
                   "x13", "x14", "x15", "x16", "x17", "memory");
    return (long)x0;
}

static void __attribute__((noreturn)) power_off(void)
{
    psci_call(PSCI_SYSTEM_OFF, 0, 0, 0);
    for (;;) {
        asm volatile("wfi");
    }
}

void __attribute__((noreturn)) fail(const char *why, uint64_t v)
{
    put("hpkvm-arm-guest: FAIL ");
    put(why);
    put(" ");
    put_dec(v);
    put("\n");
    power_off();
}

/* The rest of what vnet.c needs (vnet.h), besides pci.c's accessors */

const char vnet_guest[] = "hpkvm-arm-guest";

void vnet_puts(const char *s)
{
    put(s);
}

void vnet_putu(uint64_t v)
{
    put_dec(v);
}

void vnet_fail(const char *why)
{
    put("hpkvm-arm-guest: FAIL ");
    put(why);
    put("\n");
    power_off();
}

uint64_t vnet_deadline(void)
{
    return now() + WAIT_SECONDS * sysreg_read(cntfrq_el0);
}

bool vnet_expired(uint64_t deadline)
{
    return now() > deadline;
}

/*
 * With the MMU off the guest's accesses go to memory, uncached, while
 * QEMU's (or vhost's) go through the host's caches, which may hold a
 * stale copy of what the guest wrote or a dirty one of what the device
 * wrote: clean and invalidate those lines to the point of coherency
 * (not needed, but harmless, where the hypervisor forces the guest's
 * memory cacheable, FEAT_S2FWB, and under TCG, which has no caches).
 */
void vnet_dma_sync(const volatile void *p, uint32_t len)
{
    uint64_t line = 4ul << (sysreg_read(ctr_el0) >> 16 & 0xf);
    uintptr_t addr = (uintptr_t)p & ~(line - 1);

    dsb();
    for (; addr < (uintptr_t)p + len; addr += line) {
        asm volatile("dc civac, %0" : : "r"(addr) : "memory");
    }
    dsb();
}

/* The failover primary, an igb VF, raises its MSI once (vf.c) */
static void route_vf_msi(void)
{
    uint64_t end = vnet_deadline();
    uintptr_t regs;

    if (vnet_primary == VNET_NO_PRIMARY) {
        fail("vf-msi: no failover primary", 0);
    }
    regs = vf_route_msi(vnet_primary);
    asm volatile("msr daifclr, #2" : : : "memory");
    vf_raise_msi(regs);
    while (!vf_msis && !vnet_expired(end)) {
        cpu_relax();
    }
    asm volatile("msr daifset, #2" : : : "memory");
    put("hpkvm-arm-guest: vf-msi: devid=");
    put_dec(vnet_primary);
    put(" event=0 lpi=");
    put_dec(VF_MSI_LPI);
    put(" taken=");
    put_dec(vf_msis);
    put("\n");
}

/*
 * Masked and in WFI for good (@spin: spinning, without WFI's trap):
 * nothing ends the run but the host.
 */
static void __attribute__((noreturn)) hold(bool spin)
{
    asm volatile("msr daifset, #0xf" : : : "memory");
    for (;;) {
        if (!spin) {
            asm volatile("wfi");
        }
    }
}

/*
 * Wait until *word reaches want, or fail after WAIT_SECONDS: in WFI for
 * what an interrupt brings, else in WFE, which the writer's SEV ends
 * (or has ended before: WFE returns at once after an SEV).
 */
static void wait_for(volatile uint32_t *word, uint32_t want, bool irq,
                     const char *what)
{
    uint64_t end = now() + WAIT_SECONDS * sysreg_read(cntfrq_el0);

    while (*word < want) {
        if (now() > end) {
            fail(what, *word);
        }
        if (irq) {
            /*
             * Masked between the check and WFI, so that an interrupt
             * taken there cannot leave WFI waiting for the next one: WFI
             * ends at a pending interrupt, masked or not.
             */
            asm volatile("msr daifset, #2" : : : "memory");
            if (*word < want) {
                asm volatile("wfi");
            }
            asm volatile("msr daifclr, #2" : : : "memory");
        } else {
            asm volatile("wfe");
        }
    }
}

static unsigned cpu_index(void)
{
    return sysreg_read(tpidr_el1);
}

/* This CPU's redistributor: the one whose affinity is its MPIDR's. */
static uintptr_t gicr_of(uint64_t mpidr)
{
    uint64_t aff = (mpidr & 0xffffff) | ((mpidr >> 32 & 0xff) << 24);
    uintptr_t rd = GICR_BASE;

    for (;;) {
        uint64_t typer = mmio_read64(rd + GICR_TYPER);

        if ((typer >> 32) == aff) {
            return rd;
        }
        if (typer & GICR_TYPER_LAST) {
            fail("no redistributor for mpidr", mpidr);
        }
        rd += GICR_FRAME;
    }
}

/* Redistributor and CPU interface: SGIs and the virtual timer, group 1. */
static void gic_cpu_init(void)
{
    uintptr_t rd = gicr_of(sysreg_read(mpidr_el1));
    uintptr_t sgi = rd + GICR_SGI;
    int i;

    mmio_write32(rd + GICR_WAKER, mmio_read32(rd + GICR_WAKER) & ~2u);
    while (mmio_read32(rd + GICR_WAKER) & 4u) {
        cpu_relax();
    }
    mmio_write32(sgi + GICR_IGROUPR0, ~0u);
    for (i = 0; i < 32; i += 4) {
        mmio_write32(sgi + GICR_IPRIORITYR + i, 0xa0a0a0a0);
    }
    mmio_write32(sgi + GICR_ISENABLER0, 1u << INTID_VTIMER |
                 1u << SGI_PING | 1u << SGI_PONG | 1u << SGI_BENCH);
    dsb();
    sysreg_write(icc_sre_el1, sysreg_read(icc_sre_el1) | 1);
    isb();
    sysreg_write(icc_pmr_el1, 0xf0);
    sysreg_write(icc_bpr1_el1, 0);
    sysreg_write(icc_igrpen1_el1, 1);
    isb();
    asm volatile("msr daifclr, #2" : : : "memory");
}

static void gic_dist_init(void)
{
    mmio_write32(GICD_BASE + GICD_CTLR, GICD_CTLR_ARE);
    while (mmio_read32(GICD_BASE + GICD_CTLR) & GICD_CTLR_RWP) {
        cpu_relax();
    }
    mmio_write32(GICD_BASE + GICD_CTLR, GICD_CTLR_ARE | GICD_CTLR_GRP1);
    while (mmio_read32(GICD_BASE + GICD_CTLR) & GICD_CTLR_RWP) {
        cpu_relax();
    }
}

void send_sgi(unsigned intid, uint64_t mpidr)
{
    uint64_t v = (uint64_t)intid << 24 |
                 (mpidr >> 8 & 0xff) << 16 |        /* Aff1 */
                 (mpidr >> 16 & 0xff) << 32 |       /* Aff2 */
                 (mpidr >> 32 & 0xff) << 48 |       /* Aff3 */
                 (mpidr & 0xf0) << 40 |             /* RS: Aff0 / 16 */
                 1ull << (mpidr & 0xf);             /* target list */

    dsb();
    sysreg_write(icc_sgi1r_el1, v);
    isb();
}

void irq_exception(void)
{
    uint64_t iar = sysreg_read(icc_iar1_el1);
    unsigned intid = iar & 0xffffff;
    unsigned me = cpu_index();

    if (intid == INTID_SPURIOUS) {
        spurious++;
        return;
    }
    switch (intid) {
    case INTID_VTIMER:
        timer_irq_at = now();
        sysreg_write(cntv_ctl_el0, 0);
        isb();
        timer_irqs++;
        break;
    case SGI_PING:
        pings[me]++;
        send_sgi(SGI_PONG, cpu_mpidr[0]);
        break;
    case SGI_PONG:
        pongs++;
        break;
    case SGI_BENCH:
        bench_sgi();
        break;
    case VF_MSI_LPI:
        vf_msi_at = now();
        vf_msis++;
        break;
    default:
        fail("unexpected interrupt", intid);
    }
    sysreg_write(icc_eoir1_el1, iar);
    isb();
}

void sync_exception(void)
{
    put("hpkvm-arm-guest: FAIL exception esr=");
    put_hex(sysreg_read(esr_el1));
    put(" elr=");
    put_hex(sysreg_read(elr_el1));
    put(" far=");
    put_hex(sysreg_read(far_el1));
    put("\n");
    power_off();
}

void bad_exception(void)
{
    fail("unexpected exception, esr", sysreg_read(esr_el1));
}

void secondary_main(uint64_t index)
{
    sysreg_write(tpidr_el1, index);
    cpu_mpidr[index] = sysreg_read(mpidr_el1) & 0xff00ffffffull;
    gic_cpu_init();
    dsb();
    cpu_online[index] = 1;
    dsb();
    asm volatile("sev");
    /*
     * Pings come as SGIs; between them, the CPU waits in WFI, or spins
     * with interrupts enabled while bench mode asks it to.
     */
    for (;;) {
        while (secondary_spin) {
            /* no WFI, no exit: only the SGI's own */
        }
        wfi_entered[index]++;
        dsb();
        asm volatile("wfi");
    }
}

/*
 * Start every CPU the machine has: CPU_ON of the MPIDR after the last
 * one that came up, as QEMU's and KVM's virt numbers them (Aff0 within
 * clusters of 16), until PSCI says there is no such CPU.
 */
static unsigned start_secondaries(void)
{
    unsigned n;

    for (n = 1; n < MAX_CPUS; n++) {
        uint64_t mpidr = (n % 16) | (uint64_t)(n / 16) << 8;
        long ret = psci_call(PSCI_CPU_ON, mpidr,
                             (uint64_t)(uintptr_t)secondary_entry, n);

        if (ret != 0 && ret != PSCI_ALREADY_ON) {
            break;
        }
        wait_for(&cpu_online[n], 1, false, "secondary did not come up, cpu");
    }
    return n;
}

static void check_timer(void)
{
    uint64_t ticks = sysreg_read(cntfrq_el0) / 1000;   /* 1 ms */
    int i;

    for (i = 0; i < TIMER_ROUNDS; i++) {
        uint64_t start = now();

        sysreg_write(cntv_tval_el0, ticks);
        sysreg_write(cntv_ctl_el0, 1);
        isb();
        wait_for(&timer_irqs, i + 1, true, "timer interrupts taken:");
        if (now() - start < ticks) {
            fail("timer interrupt early, round", i);
        }
    }
}

static void check_sgis(unsigned cpus)
{
    unsigned cpu;
    int i;

    for (cpu = 1; cpu < cpus; cpu++) {
        for (i = 0; i < SGI_ROUNDS; i++) {
            uint32_t want = pongs + 1;

            send_sgi(SGI_PING, cpu_mpidr[cpu]);
            wait_for(&pongs, want, true, "SGI replies taken:");
        }
        if (pings[cpu] != SGI_ROUNDS) {
            fail("SGIs taken by a secondary:", pings[cpu]);
        }
    }
}

void guest_main(void)
{
    uint64_t samples, vnet = 0, standby = 0, vf_msi = 0, hold_on = 0;
    uint32_t vnet_frames = 0;
    unsigned cpus;

    sysreg_write(tpidr_el1, 0);
    cpu_mpidr[0] = sysreg_read(mpidr_el1) & 0xff00ffffffull;
    put("hpkvm-arm-guest: boot el=");
    put_dec(sysreg_read(currentel) >> 2 & 3);
    put(" cntfrq=");
    put_dec(sysreg_read(cntfrq_el0));
    put(" mpidr=");
    put_hex(cpu_mpidr[0]);
    put("\n");

    gic_dist_init();
    gic_cpu_init();
    cpus = start_secondaries();
    if (fw_cfg_uint(BENCH_OPTION, &samples)) {
        bench_run(cpus, samples);
        power_off();
    }
    check_timer();
    check_sgis(cpus);
    fw_cfg_uint(VNET_OPTION, &vnet);
    if (vnet) {
        fw_cfg_uint(STANDBY_OPTION, &standby);
        if (standby) {
            /* Where QEMU will plug the primary: no firmware did this */
            pci_setup_bridges();
        }
        vnet_frames = vnet_send(vnet, standby);
        if (vnet_frames < vnet) {
            fail("vnet: frames the device took:", vnet_frames);
        }
        fw_cfg_uint(VF_MSI_OPTION, &vf_msi);
        if (vf_msi) {
            route_vf_msi();
        }
    }

    put("hpkvm-arm-guest: PASS cpus=");
    put_dec(cpus);
    put(" timer=");
    put_dec(timer_irqs);
    put(" sgi=");
    put_dec(pongs);
    put(" spurious=");
    put_dec(spurious);
    if (vnet) {
        put(" vnet=");
        put_dec(vnet_frames);
    }
    put("\n");
    fw_cfg_uint(HOLD_OPTION, &hold_on);
    if (hold_on) {
        hold(hold_on == 2);
    }
    power_off();
}
