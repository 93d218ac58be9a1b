/*
 * Arm part of the hpkvm accelerator: what its files share
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef TARGET_ARM_HPKVM_ARM_H
#define TARGET_ARM_HPKVM_ARM_H

/* An Arm guest's machine, as negotiation checks it (HpkvmGuestFacts.arch). */
typedef struct HpkvmArmFacts {
    unsigned gic_version;       /* 2, 3 or 4; 0: not a virt machine */
    bool its;                   /* the GIC has an ITS (MSIs as LPIs) */
} HpkvmArmFacts;

#endif
