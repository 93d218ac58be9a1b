/*
 * Arm part of the hpkvm accelerator
 *
 * QEMU's target/arm has no KVM accel-CPU class (KVM's Arm vCPU set-up is
 * called from the CPU's own realize), so hpkvm's derives from the base
 * class.  Its realize hook checks the vCPU's placement and, when the
 * first vCPU is realized, negotiates: the machine's GIC is chosen by then
 * (virt resolves gic-version= before it creates CPUs) and no KVM vCPU
 * exists yet.
 *
 * The machine hooks have nothing to do on Arm: its KVM has no exit
 * controls such as x86's KVM_CAP_X86_DISABLE_EXITS (whether WFI and WFE
 * trap is the host kernel's decision) and no dedicated-vCPU hint for the
 * guest.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/module.h"
#include "qemu/cutils.h"
#include "qom/object.h"
#include "hw/boards.h"
#include "system/kvm.h"
#include "cpu.h"
#include "accel/accel-cpu-target.h"
#include "accel/hpkvm/hpkvm-internal.h"
#include "hpkvm-arm.h"

void hpkvm_arch_init_machine(HPKVMState *s, const char *device)
{
}

void hpkvm_arch_kvm_ready(HPKVMState *s)
{
}

void hpkvm_arch_kvm_failed(HPKVMState *s)
{
}

/*
 * The generic timer's frequency, which a KVM guest reads from the
 * hardware (KVM on Linux 6.1 cannot change it): the host's CNTFRQ_EL0,
 * which Linux lets user space read.  KVM for this target exists on
 * aarch64 hosts only, where this file alone is built.
 */
static int64_t hpkvm_arm_timer_khz(void)
{
    uint64_t hz;

    asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
    return hz / 1000;
}

static void hpkvm_arm_machine_facts(HpkvmArmFacts *arm)
{
    Object *m = OBJECT(current_machine);
    g_autofree char *gic = NULL;

    *arm = (HpkvmArmFacts) { 0 };
    if (!object_property_find(m, "gic-version")) {
        return;
    }
    /* Resolved by then: "2", "3" or "4", not "host" or "max". */
    gic = object_property_get_str(m, "gic-version", NULL);
    if (!gic || qemu_strtoui(gic, NULL, 10, &arm->gic_version) < 0) {
        arm->gic_version = 0;
    }
    arm->its = object_property_find(m, "its") &&
               object_property_get_bool(m, "its", NULL);
}

static bool hpkvm_arm_cpu_realize(CPUState *cs, Error **errp)
{
    HPKVMState *s = HPKVM_ACCEL(current_accel());
    HpkvmArmFacts arm;
    HpkvmGuestFacts facts;

    /* A hot-plugged CPU fails here, not its thread. */
    if (!hpkvm_placement_check_vcpu(s, cs, errp)) {
        return false;
    }
    if (s->negotiated) {
        return true;
    }
    hpkvm_arm_machine_facts(&arm);
    facts = (HpkvmGuestFacts) {
        .nr_vcpus = current_machine->smp.max_cpus,
        .irqchip_in_kernel = kvm_irqchip_in_kernel(),
        .host_timer_khz = hpkvm_arm_timer_khz(),
        .arch = &arm,
    };
    s->guest_timer_khz = facts.host_timer_khz;
    return hpkvm_negotiate(s, &facts, errp);
}

static void hpkvm_arm_cpu_accel_class_init(ObjectClass *oc, void *data)
{
    AccelCPUClass *acc = ACCEL_CPU_CLASS(oc);

    acc->cpu_target_realize = hpkvm_arm_cpu_realize;
}

static const TypeInfo hpkvm_arm_cpu_accel_type_info = {
    .name = ACCEL_CPU_NAME("hpkvm"),
    .parent = TYPE_ACCEL_CPU,
    .class_init = hpkvm_arm_cpu_accel_class_init,
    .abstract = true,
};

static void hpkvm_arm_cpu_accel_register_types(void)
{
    type_register_static(&hpkvm_arm_cpu_accel_type_info);
}

type_init(hpkvm_arm_cpu_accel_register_types);
