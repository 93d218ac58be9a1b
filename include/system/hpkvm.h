/*
 * hpkvm accelerator: KVM with dedicated host cores and (almost) no VM exits
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef SYSTEM_HPKVM_H
#define SYSTEM_HPKVM_H

#include "qemu/accel.h"

/*
 * hpkvm-accel is a subclass of kvm-accel: kvm_enabled() holds under it and
 * every KVM code path and kvm-accel property works unchanged.
 */
#define TYPE_HPKVM_ACCEL ACCEL_CLASS_NAME("hpkvm")

typedef struct HPKVMAccelClass {
    AccelClass parent_class;

    /* kvm-accel's machine initialisation, which hpkvm's wraps. */
    int (*parent_init_machine)(MachineState *ms);
    /*
     * The per-feature report of query-hpkvm and "info hpkvm".  By its tag:
     * the QAPI type exists only where the schema's condition holds (Linux),
     * and this header is included everywhere.
     */
    struct HpkvmInfo *(*query)(AccelState *accel);
} HPKVMAccelClass;

OBJECT_DECLARE_TYPE(HPKVMState, HPKVMAccelClass, HPKVM_ACCEL)

/**
 * hpkvm_enabled:
 *
 * Returns: true if the accelerator in use is hpkvm (then kvm_enabled()
 * is true as well).
 */
static inline bool hpkvm_enabled(void)
{
    AccelState *accel = current_accel();

    return accel && object_dynamic_cast(OBJECT(accel), TYPE_HPKVM_ACCEL);
}

/**
 * hpkvm_fold_accel_opts:
 * @accel_opts: the "-accel" option list
 *
 * Give "-accel hpkvm" precedence over every plain "-accel kvm": the first
 * hpkvm entry takes the place of the earliest kvm or hpkvm entry, carries
 * the kvm entries' properties over (its own win on conflict, then those of
 * earlier kvm entries), and the kvm entries are dropped.  Nothing changes
 * without an hpkvm entry.  Called before accelerators are configured.
 */
void hpkvm_fold_accel_opts(QemuOptsList *accel_opts);

#endif
