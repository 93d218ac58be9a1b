/*
 * hpkvm's aarch64 test guest: PCI configuration space, through the virt
 * machine's ECAM below 4 GiB (-M virt,highmem-ecam=off: the MMU is off,
 * and a 32-bit address is all this guest assumes), for bench.c's
 * pvpanic-pci and vnet.c's virtio-net (pci_read() and pci_write() of
 * vnet.h).  That ECAM holds buses 0-15.  No firmware enumerated them,
 * so no BAR is assigned and no bridge forwards anything unless the guest
 * does it itself: pci_setup_bridges() does the little of that which
 * vnet.c's failover primary, plugged behind a root port, needs, and
 * pci_msix_route() places that primary's BARs to reach its MSI-X table.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* hw/arm/virt.c's memory map, highmem-ecam=off: 16 MiB, 1 MiB a bus */
#define PCIE_ECAM_BASE      0x3f000000UL
#define PCIE_ECAM_BUSES     16

#define PCI_COMMAND         0x04
#define PCI_COMMAND_MEMORY  (1u << 1)
#define PCI_COMMAND_MASTER  (1u << 2)
#define PCI_BAR(n)          (0x10 + 4 * (n))
#define PCI_BAR_IO          (1u << 0)
#define PCI_BAR_64          (2u << 1)
#define PCI_BAR_PREFETCH    (1u << 3)
#define PCI_MEMORY_WINDOW   0x20        /* base and limit, 1 MiB grain */
#define PCI_PREF_WINDOW     0x24        /* and upper halves at 0x28, 0x2c */
#define PCI_MSIX_ENABLE     (1u << 31)  /* of the capability's first word */
#define PCI_MSIX_MASKALL    (1u << 30)

/*
 * Where pci_msix_route() puts a device's BARs: in the virt machine's
 * 32-bit MMIO window (0x10000000-0x3efeffff), past bench.c's pvpanic (at
 * its start), a MiB for its bridge's memory window, the next for its
 * prefetchable one.
 */
#define PCI_MMIO_BASE       0x11000000UL
#define PCI_PREF_BASE       0x11100000UL
#define PCI_WINDOW_SIZE     0x100000UL
#define PCI_HEADER_TYPE     0x0c        /* its byte 2 */
#define PCI_HEADER_BRIDGE   1
#define PCI_BUS_NUMBERS     0x18        /* primary, secondary, subordinate */
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
        cap = pci_find_cap(devfn, PCI_CAP_ID_EXP);
        if (cap && (pci_read(devfn, cap + PCI_EXP_SLTCAP) &
                    PCI_EXP_SLTCAP_PCP)) {
            /* Slot Status is written zero: its RW1C bits stay as they are */
            pci_write(devfn, cap + PCI_EXP_SLTCTL,
                      pci_read(devfn, cap + PCI_EXP_SLTCTL) & 0xffff &
                      ~PCI_EXP_SLTCTL_PCC);
        }
    }
}

/* The bridge on bus 0 whose secondary bus is @bus (pci_setup_bridges()) */
static uint32_t pci_bridge_to(uint32_t bus)
{
    uint32_t devfn;

    for (devfn = 0; devfn < 256; devfn++) {
        if ((pci_read(devfn, 0) & 0xffff) != 0xffff &&
            (pci_read(devfn, PCI_HEADER_TYPE) >> 16 & 0x7f) ==
            PCI_HEADER_BRIDGE &&
            (pci_read(devfn, PCI_BUS_NUMBERS) >> 8 & 0xff) == bus) {
            return devfn;
        }
    }
    fail("pci: no bridge to bus", bus);
}

/* A bridge window register's value for [base, base + PCI_WINDOW_SIZE) */
static uint32_t pci_window(uintptr_t base)
{
    return (base >> 16 & 0xfff0) |
           (uint32_t)((base + PCI_WINDOW_SIZE - 1) >> 16 & 0xfff0) << 16;
}

/* @bridge forwards pci_assign_bars()'s two windows */
static void pci_open_windows(uint32_t bridge)
{
    pci_write(bridge, PCI_MEMORY_WINDOW, pci_window(PCI_MMIO_BASE));
    pci_write(bridge, PCI_PREF_WINDOW, pci_window(PCI_PREF_BASE));
    pci_write(bridge, PCI_PREF_WINDOW + 4, 0);
    pci_write(bridge, PCI_PREF_WINDOW + 8, 0);
    pci_write(bridge, PCI_COMMAND, (pci_read(bridge, PCI_COMMAND) & 0xffff) |
              PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
}

/*
 * Size and place each memory BAR of @bdf, a device on bus 0 or behind a
 * bridge there, in the bridge's windows (which this opens); return BAR
 * @want's address.  I/O BARs are left unassigned.
 */
static uintptr_t pci_assign_bars(uint32_t bdf, unsigned want)
{
    uintptr_t next[2] = { PCI_MMIO_BASE, PCI_PREF_BASE }, addr, wanted = 0;
    uint32_t bar, size;
    unsigned n, pref;

    for (n = 0; n < 6; n++) {
        bar = pci_read(bdf, PCI_BAR(n));
        if (bar & PCI_BAR_IO) {
            continue;
        }
        pci_write(bdf, PCI_BAR(n), 0xffffffff);
        size = ~(pci_read(bdf, PCI_BAR(n)) & ~0xfu) + 1;
        if (size == 0) {            /* not implemented */
            continue;
        }
        pref = !!(bar & PCI_BAR_PREFETCH);
        addr = (next[pref] + size - 1) & ~((uintptr_t)size - 1);
        if (addr + size > (pref ? PCI_PREF_BASE : PCI_MMIO_BASE) +
            PCI_WINDOW_SIZE) {
            fail("pci: BARs beyond the window, BAR", n);
        }
        next[pref] = addr + size;
        pci_write(bdf, PCI_BAR(n), addr);
        if (n == want) {
            wanted = addr;
        }
        if (bar & PCI_BAR_64) {
            pci_write(bdf, PCI_BAR(++n), 0);
        }
    }
    if (!wanted) {
        fail("pci: no memory BAR", want);
    }
    if (bdf >> 8) {
        pci_open_windows(pci_bridge_to(bdf >> 8));
    }
    return wanted;
}

void pci_msix_route(uint32_t bdf, uintptr_t addr, uint32_t data)
{
    uint32_t cap = pci_find_cap(bdf, PCI_CAP_ID_MSIX), table;
    uintptr_t entry;

    if (!cap) {
        fail("pci: no MSI-X capability, device", bdf);
    }
    table = pci_read(bdf, cap + 4);
    entry = pci_assign_bars(bdf, table & 7) + (table & ~7u);
    /* Memory decoding for the table; bus master for the MSI's write */
    pci_write(bdf, PCI_COMMAND, (pci_read(bdf, PCI_COMMAND) & 0xffff) |
              PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
    mmio_write32(entry + 0, addr);
    mmio_write32(entry + 4, (uint64_t)addr >> 32);
    mmio_write32(entry + 8, data);
    mmio_write32(entry + 12, 0);                /* unmasked */
    pci_write(bdf, cap, (pci_read(bdf, cap) | PCI_MSIX_ENABLE) &
              ~PCI_MSIX_MASKALL);
}

uintptr_t pci_bar_address(uint32_t bdf, unsigned n)
{
    /* Below 4 GiB, where pci_assign_bars() puts each */
    return pci_read(bdf, PCI_BAR(n)) & ~0xfu;
}
