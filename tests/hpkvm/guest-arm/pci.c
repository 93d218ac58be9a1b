/*
 * hpkvm's aarch64 test guest: PCI configuration space, through the virt
 * machine's ECAM below 4 GiB (-M virt,highmem-ecam=off: the MMU is off,
 * and a 32-bit address is all this guest assumes), for bench.c's
 * pvpanic-pci and vnet.c's virtio-net (pci_read() and pci_write() of
 * vnet.h).  That ECAM holds buses 0-15.  No firmware enumerated them,
 * so no BAR is assigned and no bridge forwards anything unless the guest
 * does it itself: pci_setup_bridges() does the little of that which
 * vnet.c's failover primary, plugged behind a root port, needs.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* hw/arm/virt.c's memory map, highmem-ecam=off: 16 MiB, 1 MiB a bus */
#define PCIE_ECAM_BASE      0x3f000000UL
#define PCIE_ECAM_BUSES     16

#define PCI_HEADER_TYPE     0x0c        /* its byte 2 */
#define PCI_HEADER_BRIDGE   1
#define PCI_CAPABILITIES    0x34
#define PCI_BUS_NUMBERS     0x18        /* primary, secondary, subordinate */
#define PCI_CAP_ID_EXP      0x10
#define PCI_EXP_SLTCAP      0x14
#define PCI_EXP_SLTCAP_PCP  (1u << 1)   /* power controller present */
#define PCI_EXP_SLTCTL      0x18        /* and Slot Status, RW1C, above */
#define PCI_EXP_SLTCTL_PCC  (1u << 10)  /* power controller: 1 is off */

/*
 * The word's address, or 0 beyond the ECAM's buses: the next bus's
 * would be RAM (0x40000000).
 */
static uintptr_t ecam(uint32_t bdf, uint32_t off)
{
    if ((bdf >> 8) >= PCIE_ECAM_BUSES) {
        return 0;
    }
    return PCIE_ECAM_BASE + ((uintptr_t)bdf << 12 | (off & 0xffc));
}

uint32_t pci_read(uint32_t bdf, uint32_t off)
{
    uintptr_t addr = ecam(bdf, off);

    return addr ? mmio_read32(addr) : 0xffffffff;
}

void pci_write(uint32_t bdf, uint32_t off, uint32_t v)
{
    uintptr_t addr = ecam(bdf, off);

    if (addr) {
        mmio_write32(addr, v);
    }
}

/* The function's PCI Express capability, or 0 */
static uint32_t pcie_cap(uint32_t bdf)
{
    uint32_t cap, hdr;

    for (cap = pci_read(bdf, PCI_CAPABILITIES) & 0xfc; cap;
         cap = (hdr >> 8) & 0xfc) {
        hdr = pci_read(bdf, cap);
        if ((hdr & 0xff) == PCI_CAP_ID_EXP) {
            return cap;
        }
    }
    return 0;
}

/*
 * Each bridge on bus 0, in devfn order, gets the next bus of the ECAM's
 * as its secondary and subordinate, so that configuration cycles reach
 * what is behind it; and the slot's power where it has a power
 * controller: QEMU resets an empty root port's slot to off, and keeps a
 * device plugged there later off, as unreadable as an empty slot, until
 * the guest turns the power on (what a hot-plug driver or, on x86,
 * ACPI PCI hot-plug does).
 */
void pci_setup_bridges(void)
{
    uint32_t devfn, bus = 1, cap;

    for (devfn = 0; devfn < 256 && bus < PCIE_ECAM_BUSES; devfn++) {
        if ((pci_read(devfn, 0) & 0xffff) == 0xffff ||
            (pci_read(devfn, PCI_HEADER_TYPE) >> 16 & 0x7f) !=
            PCI_HEADER_BRIDGE) {
            continue;
        }
        pci_write(devfn, PCI_BUS_NUMBERS, bus << 16 | bus << 8);
        bus++;
        cap = pcie_cap(devfn);
        if (cap && (pci_read(devfn, cap + PCI_EXP_SLTCAP) &
                    PCI_EXP_SLTCAP_PCP)) {
            /* Slot Status is written zero: its RW1C bits stay as they are */
            pci_write(devfn, cap + PCI_EXP_SLTCTL,
                      pci_read(devfn, cap + PCI_EXP_SLTCTL) & 0xffff &
                      ~PCI_EXP_SLTCTL_PCC);
        }
    }
}
