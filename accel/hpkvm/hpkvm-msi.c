/*
 * hpkvm: decode an x86 MSI message and map it to one vCPU
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "hpkvm-msi.h"

/* The MSI address (SDM 11.11.1). */
#define MSI_ADDR_BASE_MASK      0xfff00000u
#define MSI_ADDR_BASE           0xfee00000u
#define MSI_ADDR_DEST_SHIFT     12
#define MSI_ADDR_EXT_DEST_SHIFT 5       /* bits 11:5: APIC ID bits 14:8 */
#define MSI_ADDR_EXT_DEST_MASK  0x7f
#define MSI_ADDR_REMAPPABLE     (1u << 4)
#define MSI_ADDR_LOGICAL        (1u << 2)

/* The MSI data. */
#define MSI_DATA_VECTOR_MASK    0xff
#define MSI_DATA_DM_SHIFT       8
#define MSI_DATA_DM_MASK        0x7
#define MSI_DATA_LEVEL_TRIGGER  (1u << 15)

#define XAPIC_BROADCAST         0xff
#define FIRST_VALID_VECTOR      16      /* 0-15 are reserved */

bool hpkvm_msi_decode(uint64_t address, uint32_t data, bool ext_dest_id,
                      HpkvmMsi *msi, const char **why)
{
    uint32_t lo = address;

    if ((address >> 32) || (lo & MSI_ADDR_BASE_MASK) != MSI_ADDR_BASE) {
        *why = "not an x86 MSI address (0xfeexxxxx)";
        return false;
    }
    memset(msi, 0, sizeof(*msi));
    msi->dest = (lo >> MSI_ADDR_DEST_SHIFT) & 0xff;
    if (ext_dest_id) {
        msi->dest |= ((lo >> MSI_ADDR_EXT_DEST_SHIFT) &
                      MSI_ADDR_EXT_DEST_MASK) << 8;
    }
    msi->remappable = lo & MSI_ADDR_REMAPPABLE;
    msi->logical = lo & MSI_ADDR_LOGICAL;
    msi->vector = data & MSI_DATA_VECTOR_MASK;
    msi->delivery_mode = (data >> MSI_DATA_DM_SHIFT) & MSI_DATA_DM_MASK;
    msi->level = data & MSI_DATA_LEVEL_TRIGGER;
    return true;
}

int hpkvm_msi_target(const HpkvmMsi *msi,
                     int (*vcpu_of_apic_id)(uint32_t apic_id, void *opaque),
                     void *opaque, const char **why)
{
    int vcpu;

    if (msi->remappable) {
        *why = "remappable format: the guest's own IOMMU owns the entry";
        return -1;
    }
    switch (msi->delivery_mode) {
    case HPKVM_MSI_DM_FIXED:
        break;
    case HPKVM_MSI_DM_LOWEST_PRIORITY:
        *why = "lowest-priority delivery: the kernel picks the vCPU";
        return -1;
    default:
        *why = "not fixed delivery (NMI, SMI, INIT or ExtINT)";
        return -1;
    }
    if (msi->logical) {
        *why = "logical destination mode: possibly several vCPUs";
        return -1;
    }
    if (msi->dest == XAPIC_BROADCAST) {
        *why = "broadcast destination";
        return -1;
    }
    if (msi->level) {
        *why = "level-triggered: needs KVM's EOI handling";
        return -1;
    }
    if (msi->vector < FIRST_VALID_VECTOR) {
        *why = "reserved vector (below 16)";
        return -1;
    }
    vcpu = vcpu_of_apic_id(msi->dest, opaque);
    if (vcpu < 0) {
        *why = "no vCPU has the destination APIC ID";
        return -1;
    }
    return vcpu;
}
