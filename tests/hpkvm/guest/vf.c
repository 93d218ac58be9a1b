/*
 * hpkvm test guest: an igb VF (QEMU's igbvf, passed through with
 * vfio-pci) as a source of device interrupts on demand, for bench.c's
 * vf-msi.  Its MSI-X vector 0 goes to the BSP at a vector of the
 * caller's, and setting its first interrupt cause raises that MSI: the
 * device interrupt whose delivery hpkvm's vfio-irte and irq-passthrough
 * are about, without a network in the way.  The VF is there from boot,
 * so the firmware (SeaBIOS) placed its BARs, below 4 GiB.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

#define IGBVF_ID            (0x10cau << 16 | 0x8086u)   /* device, vendor */
#define PCI_COMMAND_MEM_BUS 0x6         /* memory space, bus master */
#define PCI_BAR(n)          (0x10 + 4 * (n))
#define MSIX_ENABLE         (1u << 31)  /* of the capability's first word */
#define MSIX_MASKALL        (1u << 30)

/*
 * The VF's interrupt registers in its BAR 0 (hw/net/igb_regs.h): cause
 * set, mask set and cause (write 1 to clear).  With the PF in MSI-X mode,
 * cause 0 is MSI-X vector 0.
 */
#define IGBVF_EICS          0x1520
#define IGBVF_EIMS          0x1524
#define IGBVF_EICR          0x1580

uint32_t vf_find(void)
{
    uint32_t bdf;

    for (bdf = 0; bdf < 256; bdf++) {
        if (pci_read(bdf, 0) == IGBVF_ID) {
            return bdf;
        }
    }
    return VF_NONE;
}

/* BAR @n (MMIO: volatile), where the firmware put it, below 4 GiB */
static volatile uint32_t *vf_bar(uint32_t bdf, unsigned n)
{
    return (volatile uint32_t *)(uintptr_t)  /* MMIO: volatile */
           (pci_read(bdf, PCI_BAR(n)) & ~0xfu);
}

/* MMIO, volatile: the table, the registers */
volatile uint32_t *vf_route_msi(uint32_t bdf, uint32_t apic_id,
                                uint8_t vector)
{
    uint32_t cap = pci_find_cap(bdf, PCI_CAP_ID_MSIX), table;
    volatile uint32_t *entry, *regs;    /* MMIO: volatile */

    if (!cap) {
        fail("vf: no MSI-X capability");
    }
    table = pci_read(bdf, cap + 4);
    pci_write(bdf, 4, pci_read(bdf, 4) | PCI_COMMAND_MEM_BUS);
    entry = vf_bar(bdf, table & 7) + (table & ~7u) / 4;
    msix_set_entry(entry, apic_id, vector);
    pci_write(bdf, cap, (pci_read(bdf, cap) | MSIX_ENABLE) & ~MSIX_MASKALL);
    regs = vf_bar(bdf, 0);
    regs[IGBVF_EIMS / 4] = 1;
    return regs;
}

/* @regs: MMIO, volatile */
void vf_raise_msi(volatile uint32_t *regs)
{
    /* A cause still set from the last MSI would raise none. */
    regs[IGBVF_EICR / 4] = 1;
    regs[IGBVF_EICS / 4] = 1;
}

/*
 * vf-msis=N.  Each MSI goes to the first AP while it halts, some
 * milliseconds after its HLT: long enough for a host whose HLT exits to
 * have put the vCPU to sleep, so that the interrupt must wake it (on
 * AMD, a posted interrupt for a vCPU that is not running goes through
 * the IOMMU's guest virtual APIC log).  One that does not come within
 * VF_MSI_WAIT_CYCLES fails the guest.
 */
#define VF_MSI_SETTLE_CYCLES    30000000ull
#define VF_MSI_WAIT_CYCLES      8000000000ull

static uint32_t vf_msis_taken;

__attribute__((interrupt))
static void vf_msi_handler(void *frame)
{
    __atomic_fetch_add(&vf_msis_taken, 1, __ATOMIC_RELEASE);
    lapic_write(LAPIC_EOI, 0);
}

void vf_msis_to_halted_ap(uint32_t n)
{
    uint32_t vf = vf_find(), halts, i;
    volatile uint32_t *regs;    /* MMIO: volatile */

    if (vf == VF_NONE) {
        fail("vf-msis: no igb VF");
    }
    set_gate(VEC_VF, vf_msi_handler);
    regs = vf_route_msi(vf, reported_apic_id[0], VEC_VF);
    /* The AP counts each HLT it enters, before it enters it. */
    if (!wait_for(&halts_entered, 1, VF_MSI_WAIT_CYCLES)) {
        fail("vf-msis: the AP does not halt");
    }
    for (i = 0; i < n; i++) {
        delay_cycles(VF_MSI_SETTLE_CYCLES);
        halts = __atomic_load_n(&halts_entered, __ATOMIC_ACQUIRE);
        vf_raise_msi(regs);
        if (!wait_for(&vf_msis_taken, i + 1, VF_MSI_WAIT_CYCLES)) {
            fail("vf-msis: an MSI to the halted AP did not come");
        }
        /* Back in HLT before the next one. */
        if (!wait_for(&halts_entered, halts + 1, VF_MSI_WAIT_CYCLES)) {
            fail("vf-msis: the AP does not halt again");
        }
    }
}
