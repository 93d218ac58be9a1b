/*
 * hpkvm: stubs for targets built without KVM
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "system/hpkvm.h"

void hpkvm_vfio_msi_routed(PCIDevice *dev, const MSIMessage *msg, int virq)
{
}

void hpkvm_vfio_msi_unrouted(int virq)
{
}
