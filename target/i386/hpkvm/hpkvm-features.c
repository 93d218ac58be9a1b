/*
 * x86 part of hpkvm's feature negotiation
 *
 * What each feature needs of an x86 guest's CPU model, and what upstream
 * KVM on x86 does where the kernel does not grant a feature: the words
 * of query-hpkvm's report.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "accel/hpkvm/hpkvm-internal.h"
#include "hpkvm-x86.h"
#include "cpu.h"
#include "host-cpu.h"

const char *hpkvm_arch_unmet_requirement(HPKVMState *s, int f,
                                         const HpkvmGuestFacts *g,
                                         char **owned)
{
    const HpkvmX86Facts *x86 = g->arch;

    switch (f) {
    case HPKVM_FEATURE_TIMER_PASSTHROUGH:
        /*
         * What the kernel passes through is the one-shot x2APIC timer
         * (its count, written without an exit, counts on the core's own
         * timer); a guest offered TSC-deadline would use that instead,
         * which stays KVM's (its MSR is the host's TSC, offset).
         */
        if (x86->tsc_deadline) {
            return "needs the guest on the one-shot LAPIC timer: add "
                   "tsc-deadline=off to -cpu";
        }
        return x86->x2apic ? NULL : "needs x2APIC in the guest: add "
                                    "x2apic=on to -cpu";
    case HPKVM_FEATURE_IPI_FASTPATH:
        return x86->x2apic ? NULL : "needs x2APIC in the guest: add "
                                    "x2apic=on to -cpu";
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
                    "(host-cpus=) from user space, with upstream KVM's "
                    "KVM_CAP_X86_DISABLE_EXITS and KVM_HINTS_REALTIME where "
                    "they were granted";
            return HPKVM_MECHANISM_UPSTREAM;
        }
        if (s->disabled_exits || s->realtime_hint) {
            *text = "upstream KVM keeps the guest on its cores instead: "
                    "KVM_CAP_X86_DISABLE_EXITS and the KVM_HINTS_REALTIME "
                    "CPUID hint (vCPU threads are not pinned: no "
                    "host-cpus=)";
            return HPKVM_MECHANISM_UPSTREAM;
        }
        *text = "KVM's defaults: HLT and PAUSE exit, vCPUs may move";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_IRQ_PASSTHROUGH:
        *text = "KVM's in-kernel LAPIC injects external interrupts, each "
                "at a VM exit unless the host has posted interrupts";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_TIMER_PASSTHROUGH:
        *text = "KVM emulates the LAPIC timer (its writes and expiries "
                "exit)";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_IPI_FASTPATH:
        *text = "KVM's own ICR-write handling";
        return HPKVM_MECHANISM_NONE;
    case HPKVM_FEATURE_VFIO_IRTE:
    default:
        *text = "KVM's irqfd delivery (posted interrupts where the IOMMU "
                "has them)";
        return HPKVM_MECHANISM_NONE;
    }
}

/*
 * x86 grants on APIC virtualization: AMD's AVIC and AMD-Vi's posting
 * into it (kvm/'s SVM, avic_hpkvm_refusal()), or Intel's APICv and
 * VT-d's posted interrupts, by the host's vendor.
 */
bool hpkvm_arch_apicv_mechanism(int f, HpkvmUpstreamMechanism *m,
                                const char **name)
{
    char vendor[CPUID_VENDOR_SZ + 1];
    int family, model, stepping;
    bool amd, irte = f == HPKVM_FEATURE_VFIO_IRTE;

    host_cpu_vendor_fms(vendor, &family, &model, &stepping);
    amd = !strcmp(vendor, CPUID_VENDOR_AMD);
    if (amd) {
        *m = irte ? HPKVM_UPSTREAM_MECHANISM_AMD_VI_GA_POSTING
                  : HPKVM_UPSTREAM_MECHANISM_AVIC;
        *name = irte ? "AMD-Vi guest virtual APIC posting into AVIC"
                     : "AVIC (x2AVIC)";
    } else {
        *m = irte ? HPKVM_UPSTREAM_MECHANISM_VT_D_POSTING
                  : HPKVM_UPSTREAM_MECHANISM_APICV;
        *name = irte ? "VT-d posted interrupts" : "APICv";
    }
    return true;
}
