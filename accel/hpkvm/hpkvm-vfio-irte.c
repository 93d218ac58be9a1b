/*
 * hpkvm: direct VFIO IRTE programming
 *
 * With vfio-irte granted, every MSI/MSI-X vector of a vfio-pci device that
 * KVM routes (a virq with an irqfd) is decoded, mapped to its vCPU and
 * handed to the kernel (HPKVM_SET_IRTE), so that the IOMMU delivers it
 * straight to that vCPU's core with the guest's vector; again whenever the
 * guest reprograms it.  A vector that cannot go to exactly one vCPU stays
 * with KVM's delivery (posted interrupts where the IOMMU has them), and
 * the count and a trace event say so.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "hw/core/cpu.h"
#include "hw/pci/msi.h"
#include "hpkvm-internal.h"
#include "hpkvm-kernel.h"
#include "hpkvm-msi.h"
#include "trace.h"

static int irte_vcpu_of_apic_id(uint32_t apic_id, void *opaque)
{
    CPUState *cpu;

    CPU_FOREACH(cpu) {
        if (CPU_GET_CLASS(cpu)->get_arch_id(cpu) == apic_id) {
            return kvm_arch_vcpu_id(cpu);
        }
    }
    return -1;
}

static HPKVMState *irte_owner(int virq)
{
    HPKVMState *s;

    if (!hpkvm_enabled() || virq < 0) {
        return NULL;
    }
    s = HPKVM_ACCEL(current_accel());
    return s->feat[HPKVM_FEATURE_VFIO_IRTE].granted ? s : NULL;
}

void hpkvm_vfio_msi_routed(PCIDevice *dev, const MSIMessage *msg, int virq)
{
    HPKVMState *s = irte_owner(virq);
    struct hpkvm_irte irte = { .gsi = virq };
    const char *why;
    HpkvmMsi msi;
    int vcpu;

    if (!s) {
        return;
    }
    /* QEMU offers the extended destination ID with the split irqchip. */
    if (hpkvm_msi_decode(msg->address, msg->data, kvm_irqchip_is_split(),
                         &msi, &why)) {
        vcpu = hpkvm_msi_target(&msi, irte_vcpu_of_apic_id, NULL, &why);
        if (vcpu >= 0) {
            irte.vcpu_id = vcpu;
            irte.vector = msi.vector;
            if (hpkvm_kernel_set_irte(KVM_STATE(s), &irte) == 0) {
                s->irte_direct++;
                return;
            }
            why = "HPKVM_SET_IRTE failed";
        }
    }
    /* Back to KVM's delivery: the vector may have been direct before. */
    irte.flags = HPKVM_IRTE_CLEAR;
    hpkvm_kernel_set_irte(KVM_STATE(s), &irte);
    s->irte_fallback++;
    trace_hpkvm_irte_fallback(virq, msg->address, msg->data, why);
}

void hpkvm_vfio_msi_unrouted(int virq)
{
    HPKVMState *s = irte_owner(virq);
    struct hpkvm_irte irte = { .gsi = virq, .flags = HPKVM_IRTE_CLEAR };

    if (s) {
        hpkvm_kernel_set_irte(KVM_STATE(s), &irte);
    }
}
