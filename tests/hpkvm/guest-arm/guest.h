/*
 * hpkvm's aarch64 test guest: what its files share.  The C functions
 * boot.S calls and the one it provides to C (PSCI CPU_ON's entry point);
 * system register and MMIO accessors; the serial, PSCI, GIC and counter
 * helpers of guest.c; fw_cfg.c's option lookup; bench.c's bench mode;
 * pci.c's bridge setup; vnet.h, the shared virtio-net driver's needs,
 * which pci.c (PCI configuration access) and guest.c (the rest)
 * implement.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_ARM_H
#define HPKVM_GUEST_ARM_H

#include <stdbool.h>
#include <stdint.h>
#include "vnet.h"

#define MAX_CPUS        9

/* The interrupts the guest uses. */
#define INTID_VTIMER    27
#define SGI_PING        1
#define SGI_PONG        2
#define SGI_BENCH       3
#define INTID_SPURIOUS  1023

#define PSCI_VERSION    0x84000000UL

#define sysreg_read(r) ({ uint64_t v_; \
    asm volatile("mrs %0, " #r : "=r"(v_)); v_; })
#define sysreg_write(r, v) \
    asm volatile("msr " #r ", %0" : : "r"((uint64_t)(v)) : "memory")
#define isb() asm volatile("isb" : : : "memory")
#define dsb() asm volatile("dsb sy" : : : "memory")

/*
 * MMIO as single loads and stores without write-back: KVM emulates a
 * device access from the syndrome the fault gives it, which the
 * architecture provides only for those (the compiler, left alone,
 * emits pre-indexed stores, which KVM refuses with an external abort).
 */
static inline uint8_t mmio_read8(uintptr_t addr)
{
    uint32_t v;

    asm volatile("ldrb %w0, [%1]" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

static inline void mmio_write8(uintptr_t addr, uint8_t v)
{
    asm volatile("strb %w0, [%1]" : : "r"(v), "r"(addr) : "memory");
}

static inline void mmio_write16(uintptr_t addr, uint16_t v)
{
    asm volatile("strh %w0, [%1]" : : "r"(v), "r"(addr) : "memory");
}

static inline uint32_t mmio_read32(uintptr_t addr)
{
    uint32_t v;

    asm volatile("ldr %w0, [%1]" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

static inline void mmio_write32(uintptr_t addr, uint32_t v)
{
    asm volatile("str %w0, [%1]" : : "r"(v), "r"(addr) : "memory");
}

static inline uint64_t mmio_read64(uintptr_t addr)
{
    uint64_t v;

    asm volatile("ldr %0, [%1]" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

/* The virtual counter: one clock for every vCPU of the VM. */
static inline uint64_t now(void)
{
    isb();
    return sysreg_read(cntvct_el0);
}

/* boot.S */
void secondary_entry(void);

/*
 * guest.c.  The shared words are volatile: each is waited for in a loop
 * while another CPU or a handler writes it (the MMU is off: no
 * exclusives, so no atomics).
 */
extern volatile uint64_t cpu_mpidr[MAX_CPUS];   /* volatile: see above */
extern volatile uint32_t timer_irqs;            /* volatile: see above */
extern volatile uint64_t timer_irq_at;          /* volatile: see above */
void guest_main(void);
void secondary_main(uint64_t index);
void irq_exception(void);
void sync_exception(void);
void bad_exception(void);
void put(const char *s);
void put_dec(uint64_t v);
void __attribute__((noreturn)) fail(const char *why, uint64_t v);
long psci_call(uint64_t fn, uint64_t a1, uint64_t a2, uint64_t a3);
void send_sgi(unsigned intid, uint64_t mpidr);

/* pci.c; pci_read() and pci_write() are in vnet.h */
void pci_setup_bridges(void);
/*
 * Route @bdf's first MSI-X vector to @addr with @data, and enable it;
 * this places @bdf's memory BARs, whose addresses pci_bar_address() says
 */
void pci_msix_route(uint32_t bdf, uintptr_t addr, uint32_t data);
uintptr_t pci_bar_address(uint32_t bdf, unsigned n);
/*
 * Map device @devid's MSI @event to LPI @lpi on the boot CPU through the
 * ITS (its.c); return the address its MSIs are written to.
 */
uintptr_t its_map_msi(uint32_t devid, uint32_t event, uint32_t lpi);

/*
 * An igb VF's MSI on demand (vf.c): vf_find() says where the first VF
 * is (VF_NONE: nowhere); vf_route_msi() routes its MSI-X vector 0 to LPI
 * VF_MSI_LPI on the boot CPU and returns its registers' address, which
 * vf_raise_msi() takes to raise that MSI once.  The LPI's handler counts
 * vf_msis and stamps vf_msi_at (the virtual counter).
 */
#define VF_NONE         0xffffffffu
#define VF_MSI_LPI      8192
extern volatile uint32_t vf_msis;       /* volatile: see above */
extern volatile uint64_t vf_msi_at;     /* volatile: see above */
uint32_t vf_find(void);
uintptr_t vf_route_msi(uint32_t bdf);
void vf_raise_msi(uintptr_t regs);

/* fw_cfg.c */
bool fw_cfg_uint(const char *name, uint64_t *value);

/* bench.c */
extern volatile uint32_t secondary_spin;        /* volatile: as above */
extern volatile uint32_t wfi_entered[MAX_CPUS]; /* volatile: as above */
void bench_sgi(void);
void bench_run(unsigned cpus, uint64_t samples);

#endif
