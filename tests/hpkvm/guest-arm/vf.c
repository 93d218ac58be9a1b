/*
 * hpkvm's aarch64 test guest: an igb VF (QEMU's igbvf, passed through
 * with vfio-pci) as a source of device interrupts on demand.  Its first
 * MSI-X vector is routed through the ITS to LPI VF_MSI_LPI (its.c,
 * pci.c), and setting its first interrupt cause raises that MSI: the
 * device interrupt whose delivery hpkvm's vfio-irte is about, without a
 * network in the way.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

#define IGBVF_ID        (0x10cau << 16 | 0x8086u)   /* device, vendor */
#define PCI_BUSES       16                          /* pci.c's ECAM */

/*
 * The VF's interrupt registers in its BAR 0 (hw/net/igb_regs.h): cause
 * set, mask set and cause (write 1 to clear).  With the PF in MSI-X mode,
 * cause 0 is MSI-X vector 0.
 */
#define IGBVF_EICS      0x1520
#define IGBVF_EIMS      0x1524
#define IGBVF_EICR      0x1580

/* volatile: written by the LPI's handler, waited for by the guest */
volatile uint32_t vf_msis;
volatile uint64_t vf_msi_at;    /* volatile: as vf_msis */

uint32_t vf_find(void)
{
    uint32_t bdf;

    for (bdf = 0; bdf < PCI_BUSES << 8; bdf++) {
        if (pci_read(bdf, 0) == IGBVF_ID) {
            return bdf;
        }
    }
    return VF_NONE;
}

uintptr_t vf_route_msi(uint32_t bdf)
{
    /* Its device ID is its requester ID, which QEMU gives KVM. */
    uintptr_t doorbell = its_map_msi(bdf, 0, VF_MSI_LPI), regs;

    pci_msix_route(bdf, doorbell, 0);
    regs = pci_bar_address(bdf, 0);
    mmio_write32(regs + IGBVF_EIMS, 1);
    return regs;
}

void vf_raise_msi(uintptr_t regs)
{
    /* A cause still set from the last MSI would raise none. */
    mmio_write32(regs + IGBVF_EICR, 1);
    mmio_write32(regs + IGBVF_EICS, 1);
}
