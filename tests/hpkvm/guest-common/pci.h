/*
 * hpkvm test guests: PCI configuration space, as each guest reaches it
 * (pci_read() and pci_write(): x86's CF8/CFC ports, aarch64's ECAM), and
 * what the guests share on top of it (pci.c).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_PCI_H
#define HPKVM_GUEST_PCI_H

#include <stdint.h>

#define PCI_CAP_ID_EXP      0x10
#define PCI_CAP_ID_MSIX     0x11

/*
 * A 32-bit word of PCI configuration space: @bdf is bus << 8 | devfn,
 * @off a multiple of 4.  Reads of a function that is not there return
 * all ones.  Each guest implements these.
 */
uint32_t pci_read(uint32_t bdf, uint32_t off);
void pci_write(uint32_t bdf, uint32_t off, uint32_t v);

/* The offset of @bdf's capability @id, or 0 */
uint32_t pci_find_cap(uint32_t bdf, uint32_t id);

#endif
