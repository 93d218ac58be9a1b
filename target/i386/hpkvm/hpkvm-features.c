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

const char *hpkvm_arch_unmet_requirement(HPKVMState *s, int f,
                                         const HpkvmGuestFacts *g,
                                         char **owned)
{
    const HpkvmX86Facts *x86 = g->arch;

    switch (f) {
    case HPKVM_FEATURE_TIMER_PASSTHROUGH:
        if (!x86->tsc_deadline) {
            return "needs the TSC-deadline timer in the guest: add "
                   "tsc-deadline=on to -cpu";
        }
        if (!x86->invtsc) {
            return "needs an invariant TSC in the guest: add invtsc=on to "
                   "-cpu";
        }
        if (g->guest_timer_khz && g->host_timer_khz &&
            g->guest_timer_khz != g->host_timer_khz) {
            *owned = g_strdup_printf(
                "needs the guest's TSC at the host's frequency (%" PRId64
                " kHz), not %" PRId64 " kHz: drop tsc-frequency= from -cpu",
                g->host_timer_khz, g->guest_timer_khz);
            return *owned;
        }
        return NULL;
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
        *text = "KVM emulates the TSC-deadline timer (MSR writes and "
                "expiries exit)";
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
