/*
 * hpkvm accelerator operations
 *
 * accel_init_ops_interfaces() looks the ops class up by the accelerator's
 * name, so hpkvm needs one of its own.  It inherits kvm-accel-ops: vCPU
 * threads run KVM's loop, once bound to their host cores.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/module.h"
#include "system/accel-ops.h"
#include "hpkvm-internal.h"

static void (*kvm_create_vcpu_thread)(CPUState *cpu);

static void hpkvm_create_vcpu_thread(CPUState *cpu)
{
    kvm_create_vcpu_thread(cpu);
    /* The thread waits, stopped, for its first run: bind it now. */
    hpkvm_placement_bind_vcpu(HPKVM_ACCEL(current_accel()), cpu);
}

static void hpkvm_accel_ops_class_init(ObjectClass *oc, void *data)
{
    AccelOpsClass *ops = ACCEL_OPS_CLASS(oc);

    /* Inherited from KVM's class by QOM's class copy. */
    kvm_create_vcpu_thread = ops->create_vcpu_thread;
    ops->create_vcpu_thread = hpkvm_create_vcpu_thread;
}

static const TypeInfo hpkvm_accel_ops_type = {
    .name = ACCEL_OPS_NAME("hpkvm"),
    .parent = ACCEL_OPS_NAME("kvm"),
    .class_init = hpkvm_accel_ops_class_init,
    .abstract = true,
};

static void hpkvm_accel_ops_register_types(void)
{
    type_register_static(&hpkvm_accel_ops_type);
}

type_init(hpkvm_accel_ops_register_types);
