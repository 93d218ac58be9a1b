/*
 * x86 accel-CPU class of the hpkvm accelerator
 *
 * accel_init_cpu_interfaces() looks this class up by the accelerator's
 * name; without it, CPUs under hpkvm would miss KVM's CPU model set-up
 * (e.g. "-cpu host").  It inherits KVM's x86 hooks unchanged.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/module.h"
#include "cpu.h"
#include "accel/accel-cpu-target.h"

static const TypeInfo hpkvm_cpu_accel_type_info = {
    .name = ACCEL_CPU_NAME("hpkvm"),
    .parent = ACCEL_CPU_NAME("kvm"),
    .abstract = true,
};

static void hpkvm_cpu_accel_register_types(void)
{
    type_register_static(&hpkvm_cpu_accel_type_info);
}

type_init(hpkvm_cpu_accel_register_types);
