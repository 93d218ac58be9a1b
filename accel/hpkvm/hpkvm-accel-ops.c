/*
 * hpkvm accelerator operations
 *
 * accel_init_ops_interfaces() looks the ops class up by the accelerator's
 * name, so hpkvm needs one of its own.  It inherits kvm-accel-ops
 * unchanged: vCPU threads run KVM's loop.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/module.h"
#include "system/accel-ops.h"

static const TypeInfo hpkvm_accel_ops_type = {
    .name = ACCEL_OPS_NAME("hpkvm"),
    .parent = ACCEL_OPS_NAME("kvm"),
    .abstract = true,
};

static void hpkvm_accel_ops_register_types(void)
{
    type_register_static(&hpkvm_accel_ops_type);
}

type_init(hpkvm_accel_ops_register_types);
