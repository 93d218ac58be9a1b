/*
 * hpkvm: direct VFIO IRTE programming
 *
 * With vfio-irte granted, every MSI/MSI-X vector of a vfio-pci device that
 * an irqfd delivers through a KVM route is decoded as KVM delivers it
 * (after an emulated IOMMU's remapping), mapped to its vCPU and handed to
 * the kernel (HPKVM_SET_IRTE), so that the IOMMU delivers it straight to
 * that vCPU's core with the guest's vector; again whenever its route
 * changes, and cleared before its irqfd goes.  KVM's irqfd route
 * notifiers say when: hw/vfio knows nothing of hpkvm.  A vector that
 * cannot go to exactly one vCPU stays with KVM's delivery (posted
 * interrupts where the IOMMU has them), and the count and a trace event
 * say so.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "hw/core/cpu.h"
#include "hw/pci/pci_device.h"
#include "system/kvm.h"
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

/*
 * TYPE_VFIO_PCI, which hw/vfio keeps in its own headers.  Only VFIO's
 * irqfds are a device's interrupt the host's IOMMU remaps; virtio's and
 * ivshmem's are eventfds of QEMU's.
 */
#define IRTE_TYPE_VFIO_PCI "vfio-pci"

static void irte_program(HPKVMState *s, const KVMIrqfdRouteEvent *ev)
{
    struct hpkvm_irte irte = { .gsi = ev->virq };
    const char *why;
    HpkvmMsi msi;
    int vcpu;

    /* QEMU offers the extended destination ID with the split irqchip. */
    if (hpkvm_msi_decode(ev->msi_address, ev->msi_data,
                         kvm_irqchip_is_split(), &msi, &why)) {
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
    trace_hpkvm_irte_fallback(ev->virq, ev->msi_address, ev->msi_data, why);
}

static void irte_route_changed(Notifier *n, void *data)
{
    HPKVMState *s = container_of(n, HPKVMState, irte_route_notifier);
    const KVMIrqfdRouteEvent *ev = data;
    struct hpkvm_irte irte = { .gsi = ev->virq, .flags = HPKVM_IRTE_CLEAR };

    if (!ev->dev || !object_dynamic_cast(OBJECT(ev->dev),
                                         IRTE_TYPE_VFIO_PCI)) {
        return;
    }
    if (ev->delivering) {
        irte_program(s, ev);
    } else {
        hpkvm_kernel_set_irte(KVM_STATE(s), &irte);
    }
}

void hpkvm_vfio_irte_start(HPKVMState *s)
{
    if (!s->irte_route_notifier.notify) {
        s->irte_route_notifier.notify = irte_route_changed;
        kvm_irqfd_route_add_notifier(&s->irte_route_notifier);
    }
}
