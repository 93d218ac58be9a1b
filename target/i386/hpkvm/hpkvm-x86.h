/*
 * x86 part of the hpkvm accelerator: what its files share
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef TARGET_I386_HPKVM_X86_H
#define TARGET_I386_HPKVM_X86_H

/* An x86 guest's CPU, as negotiation checks it (HpkvmGuestFacts.arch). */
typedef struct HpkvmX86Facts {
    bool x2apic;
    bool tsc_deadline;
} HpkvmX86Facts;

#endif
