/*
 * hpkvm test guests: what both guests do with PCI configuration space
 * over their own pci_read() (pci.h).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "pci.h"

#define PCI_STATUS_CAP_LIST (1u << 20)  /* of the command/status word */
#define PCI_CAPABILITIES    0x34

uint32_t pci_find_cap(uint32_t bdf, uint32_t id)
{
    uint32_t cap, hdr;

    if (!(pci_read(bdf, 0x04) & PCI_STATUS_CAP_LIST) ||
        (pci_read(bdf, 0) & 0xffff) == 0xffff) {
        return 0;
    }
    for (cap = pci_read(bdf, PCI_CAPABILITIES) & 0xfc; cap;
         cap = (hdr >> 8) & 0xfc) {
        hdr = pci_read(bdf, cap);
        if ((hdr & 0xff) == id) {
            return cap;
        }
    }
    return 0;
}
