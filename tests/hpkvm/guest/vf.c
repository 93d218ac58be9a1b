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
