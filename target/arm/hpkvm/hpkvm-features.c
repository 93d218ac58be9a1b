/*
 * Arm part of hpkvm's feature negotiation
 *
 * What each feature needs of an Arm guest's machine, and what upstream
 * KVM on arm64 (Linux 6.1) does where the kernel does not grant a
 * feature: the words of query-hpkvm's report.  The reference kernel
 * (kvm/, built for arm64) grants exclusive-cores and dynamic-nohz and
 * refuses the interrupt features, so on Arm these are what every hpkvm
 * VM gets of those.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "accel/hpkvm/hpkvm-internal.h"
#include "hpkvm-arm.h"

const char *hpkvm_arch_unmet_requirement(HPKVMState *s, int f,
                                         const HpkvmGuestFacts *g,
                                         char **owned)
{
    const HpkvmArmFacts *arm = g->arch;

    switch (f) {
    case HPKVM_FEATURE_IPI_FASTPATH:
        /* SGIs are sent by ICC_SGI1R_EL1 writes, a GICv3 register. */
        return arm->gic_version >= 3 ? NULL :
               "needs a GICv3 in the guest: use -M virt,gic-version=3";
    case HPKVM_FEATURE_VFIO_IRTE:
        /* A device's MSIs reach a vCPU directly as GICv4 vLPIs only. */
        return arm->gic_version >= 3 && arm->its ? NULL :
               "needs a GICv3 with an ITS in the guest: use "
               "-M virt,gic-version=3,its=on";
    default:
        return NULL;
    }
}

HpkvmMechanism hpkvm_arch_fallback(HPKVMState *s, int f, const char **text)
{
    switch (f) {
    case HPKVM_FEATURE_EXCLUSIVE_CORES:
        if (s->leases) {
            *text = "QEMU binds each vCPU thread to its leased core "
                    "(host-cpus=) from user space; KVM keeps WFE in the "
                    "guest of a vCPU alone on its core, WFI exits";
            return HPKVM_MECHANISM_UPSTREAM;
        }
        *text = "KVM's defaults: WFI exits, vCPUs may move";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_IRQ_PASSTHROUGH:
        *text = "KVM's vGIC injects interrupts through its list registers; "
                "every physical interrupt exits to the host";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_TIMER_PASSTHROUGH:
        *text = "the guest programs its virtual timer without exits; each "
                "expiry while it runs exits, and KVM injects it";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_IPI_FASTPATH:
        *text = "KVM emulates SGI sends (each ICC_SGI1R_EL1 write exits); "
                "with GICv4.1 the receiver takes a vSGI without an exit";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_VFIO_IRTE:
    default:
        *text = "KVM's irqfd delivery; GICv4 maps the device's MSIs as "
                "vLPIs where the host enables it (kvm-arm.vgic_v4_enable=1)";
        return HPKVM_MECHANISM_NONE;
    }
}

/*
 * The kernel grants no feature on Arm's interrupt virtualization (GICv4
 * vLPIs and vSGIs are upstream KVM's, and not hpkvm grants): nothing to
 * name.
 */
bool hpkvm_arch_apicv_mechanism(int f, HpkvmUpstreamMechanism *m,
                                const char **name)
{
    return false;
}
