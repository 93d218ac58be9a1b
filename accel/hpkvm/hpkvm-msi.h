/*
 * hpkvm: decode an x86 MSI message and map it to one vCPU
 *
 * Direct VFIO IRTE programming sends a device interrupt straight to the
 * host core of one vCPU with the guest's vector.  That is only possible
 * for a message with exactly one destination, fixed delivery and a valid
 * vector; everything else stays with KVM's default delivery (posted
 * interrupts where the IOMMU has them), and the reason says why.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_MSI_H
#define ACCEL_HPKVM_MSI_H

/* Delivery modes of the MSI data register (SDM 11.11.2). */
#define HPKVM_MSI_DM_FIXED              0
#define HPKVM_MSI_DM_LOWEST_PRIORITY    1
#define HPKVM_MSI_DM_SMI                2
#define HPKVM_MSI_DM_NMI                4
#define HPKVM_MSI_DM_INIT               5
#define HPKVM_MSI_DM_EXTINT             7

typedef struct HpkvmMsi {
    uint32_t dest;              /* APIC ID, extended bits included */
    uint8_t vector;
    uint8_t delivery_mode;      /* HPKVM_MSI_DM_* */
    bool logical;               /* logical destination mode */
    bool level;                 /* level-triggered */
    bool remappable;            /* interrupt-remapping format (a handle) */
} HpkvmMsi;

/*
 * Decode address/data of an x86 MSI.  ext_dest_id: the guest may use
 * address bits 11:5 for APIC ID bits 14:8 (KVM_FEATURE_MSI_EXT_DEST_ID).
 * Returns false, with the reason in *why, if it is not an x86 MSI.
 */
bool hpkvm_msi_decode(uint64_t address, uint32_t data, bool ext_dest_id,
                      HpkvmMsi *msi, const char **why);

/*
 * The KVM vCPU id the message goes to, or -1 with the reason in *why if it
 * cannot go to exactly one vCPU with its own vector.  vcpu_of_apic_id
 * returns the KVM vCPU id of the vCPU with that APIC ID, -1 if none.
 */
int hpkvm_msi_target(const HpkvmMsi *msi,
                     int (*vcpu_of_apic_id)(uint32_t apic_id, void *opaque),
                     void *opaque, const char **why);

#endif
