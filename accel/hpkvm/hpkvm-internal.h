/*
 * hpkvm accelerator: state shared by its parts
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_INTERNAL_H
#define ACCEL_HPKVM_INTERNAL_H

#include "system/kvm_int.h"
#include "system/hpkvm.h"
#include "qapi/qapi-types-hpkvm.h"
#include "qemu/notify.h"
#include "hpkvm-lease.h"

/* What the migration stream carries (hpkvm-migration.c) */
typedef struct HpkvmMigState {
    uint64_t granted;           /* 1 << HpkvmFeature the kernel granted */
    uint8_t requested[HPKVM_FEATURE__MAX];  /* OnOffAuto */
    uint32_t disabled_exits;
    bool realtime_hint;
    int64_t tsc_khz;            /* the guest's TSC frequency */
} HpkvmMigState;

typedef struct HpkvmFeatureState {
    OnOffAuto requested;        /* the property */
    bool granted;               /* by the kernel's hpkvm extension */
    HpkvmMechanism mechanism;
    char *reason;
    bool apicv;                 /* the grant rests on APIC virtualization */
    bool has_delivered_by;      /* with apicv: the upstream mechanism */
    HpkvmUpstreamMechanism delivered_by;
} HpkvmFeatureState;

struct HPKVMState {
    KVMState parent_obj;

    HpkvmFeatureState feat[HPKVM_FEATURE__MAX];
    bool negotiated;
    int kernel_version;         /* 0: unpatched KVM */
    uint32_t disabled_exits;    /* KVM_X86_DISABLE_EXITS_* granted */
    bool realtime_hint;
    bool cpu_pm_before;         /* enable_cpu_pm before hpkvm set it */
    int64_t halt_poll_ns;       /* -1: the kernel's default */
    uint64_t irte_direct;       /* VFIO MSI programmings sent direct */
    uint64_t irte_fallback;     /* ... and left to KVM's delivery */
    Notifier irte_route_notifier; /* KVM's irqfd routes, for vfio-irte */

    /* Host cores and isolation (hpkvm-placement.c) */
    char *host_cpus_opt;        /* host-cpus= */
    char *housekeeping_opt;     /* housekeeping-cpus= */
    char *host_root;            /* x-host-root=, "/" by default */
    char *helper_opt;           /* helper=: qemu-hpkvm-helper's socket */
    char *helper_socket;        /* ... or its default, under the root */
    OnOffAuto dynamic_isolation;
    HpkvmHost host;
    HpkvmCpuSet housekeeping;
    unsigned max_vcpus;         /* -smp maxcpus */
    unsigned *vcpu_core;        /* by cpu_index: the i-th of host-cpus */
    int *vcpu_tid;              /* by cpu_index; 0 until bound */
    bool *vcpu_deferred;        /* not bound yet: bind before it runs */
    char **vcpu_moved_to;       /* its thread's cores, while paused for it */
    unsigned nr_cores;
    HpkvmLeases *leases;        /* NULL without host-cpus= */
    HpkvmIsolation *isolation;
    bool first_run_checked;     /* pinning by others checked at first run */
    bool cores_pending;         /* host-cpus=pinned, not leased yet */
    QEMUTimer *settle_timer;    /* KVM's own workers to housekeeping */
    HpkvmCpuSet start_affinity; /* QEMU's threads' before hpkvm's moves */
    bool threads_pinned;        /* ... which moved them */
    Notifier exit_notifier;
    VMChangeStateEntry *vm_state_entry;

    /* Migration (hpkvm-migration.c) */
    int64_t guest_timer_khz;    /* guest's TSC/generic timer; 0: unknown */
    HpkvmMigState mig;
    HpkvmLostPromiseList *incoming_lost; /* promises not kept here */
    NotifierWithReturn migration_notifier;
};

/*
 * HpkvmExit lists KVM_X86_DISABLE_EXITS_* in the order of their bits, so
 * that one table, the QAPI enum's, names both the report and the stream.
 */
QEMU_BUILD_BUG_ON(KVM_X86_DISABLE_EXITS_MWAIT != 1 << HPKVM_EXIT_MWAIT);
QEMU_BUILD_BUG_ON(KVM_X86_DISABLE_EXITS_HLT != 1 << HPKVM_EXIT_HLT);
QEMU_BUILD_BUG_ON(KVM_X86_DISABLE_EXITS_PAUSE != 1 << HPKVM_EXIT_PAUSE);
QEMU_BUILD_BUG_ON(KVM_X86_DISABLE_EXITS_CSTATE != 1 << HPKVM_EXIT_CSTATE);

/*
 * What the guest's CPUs look like, for the checks negotiation makes; the
 * target's own facts (x86: x2APIC, TSC-deadline) are behind @arch, for
 * hpkvm_arch_unmet_requirement().
 */
typedef struct HpkvmGuestFacts {
    unsigned nr_vcpus;
    bool irqchip_in_kernel;
    /* The timer the guest counts in: the TSC (x86), CNTFRQ (Arm) */
    int64_t guest_timer_khz;    /* 0: unset, the host's */
    int64_t host_timer_khz;     /* 0: unknown */
    const void *arch;
} HpkvmGuestFacts;

/*
 * hpkvm-negotiate.c: ask the kernel for the features, once, before the
 * first vCPU exists; fall back feature by feature; fail for "on" features
 * the kernel refused, undoing what was granted.
 */
bool hpkvm_negotiate(HPKVMState *s, const HpkvmGuestFacts *guest,
                     Error **errp);
HpkvmInfo *hpkvm_report(HPKVMState *s);

/*
 * hpkvm-vfio-irte.c: with vfio-irte granted, follow KVM's irqfd routes of
 * vfio-pci devices and have the kernel program their IRTEs.
 */
void hpkvm_vfio_irte_start(HPKVMState *s);

/*
 * hpkvm-placement.c: at machine initialisation, before KVM creates
 * anything, check host-cpus= and housekeeping-cpus=, lease the cores,
 * isolate them, and move QEMU's threads to the housekeeping cores; bind
 * each vCPU thread to its core when it is created; undo at exit.  With
 * host-cpus=pinned, the leases and isolation wait for the guest's first
 * run, and take the cores a manager pinned the vCPUs to by then.
 */
bool hpkvm_placement_init(HPKVMState *s, unsigned cpus, unsigned max_cpus,
                          Error **errp);
/*
 * What a vCPU's bind needs and can be checked before its thread exists
 * (its core, still leased and online), for device_add to fail instead.
 */
bool hpkvm_placement_check_vcpu(HPKVMState *s, CPUState *cpu, Error **errp);
/* A bind that fails stops the VM (internal-error), saying why. */
void hpkvm_placement_bind_vcpu(HPKVMState *s, CPUState *cpu);
void hpkvm_placement_report(HPKVMState *s, HpkvmInfo *info);
/*
 * Give the cores back and have the helper reconcile the host: waiting
 * for it if @wait (QEMU is on its way out), else from the main loop
 * without waiting, the outcome warned about when it comes.
 */
void hpkvm_placement_release(HPKVMState *s, const char *why, bool wait);
/*
 * KVM's initialisation failed after hpkvm_placement_init(): undo it all
 * (leases, host, QEMU's threads) and unregister, before QEMU drops the
 * accelerator for the next -accel entry.
 */
void hpkvm_placement_undo(HPKVMState *s);
/* Frees what placement holds, when the accelerator object goes. */
void hpkvm_placement_finalize(HPKVMState *s);

/* hpkvm-migration.c: the "hpkvm" migration section, lease hand-over. */
void hpkvm_migration_init(HPKVMState *s);
/* Unregisters both, when KVM's initialisation failed. */
void hpkvm_migration_undo(HPKVMState *s);

/*
 * hpkvm-negotiate.c: does the VM get cores of its own?  Only with
 * host-cpus= and exclusive-cores not off.  What keeps a guest on its
 * cores (no HLT exits, the dedicated hint, the kernel's binding) is for
 * such VMs only.
 */
bool hpkvm_wants_own_cores(HPKVMState *s);

/*
 * Per target: called before and after KVM's machine initialisation, and
 * instead of the latter if it, or hpkvm's own checks, failed.  @device is
 * the KVM device KVM will open.
 */
void hpkvm_arch_init_machine(HPKVMState *s, const char *device);
void hpkvm_arch_kvm_ready(HPKVMState *s);
void hpkvm_arch_kvm_failed(HPKVMState *s);
/*
 * Per target, for negotiation: why the guest as configured cannot have
 * feature @f on this architecture, with the fix, or NULL if it can (the
 * result is static, or allocated and returned through *owned too); and
 * what stands in for @f, any feature but dynamic-nohz, when the kernel
 * does not grant it (its mechanism, and through *text the words for the
 * report).
 */
const char *hpkvm_arch_unmet_requirement(HPKVMState *s, int f,
                                         const HpkvmGuestFacts *g,
                                         char **owned);
HpkvmMechanism hpkvm_arch_fallback(HPKVMState *s, int f, const char **text);
/*
 * Per target: the upstream mechanism that delivers feature @f where the
 * kernel granted it on APIC virtualization, into *@m, and its name for
 * the report into *@name; false if this target has none to name.
 */
bool hpkvm_arch_apicv_mechanism(int f, HpkvmUpstreamMechanism *m,
                                const char **name);

#endif
