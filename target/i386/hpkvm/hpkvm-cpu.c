/*
 * x86 part of the hpkvm accelerator
 *
 * The accel-CPU class (looked up by the accelerator's name; without it
 * CPUs under hpkvm would miss KVM's CPU model set-up such as "-cpu host")
 * inherits KVM's hooks and adds, when the first vCPU is realized, the
 * feature negotiation: only then are the guest's CPUID and TSC settings
 * final, and no KVM vCPU exists yet.
 *
 * Also here, the x86 upstream mechanisms hpkvm uses when its vCPUs own
 * their cores: KVM_CAP_X86_DISABLE_EXITS through QEMU's own cpu-pm switch
 * (-overcommit cpu-pm=on), and the KVM_HINTS_REALTIME CPUID hint.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include "qemu/module.h"
#include "qom/object_interfaces.h"
#include "hw/boards.h"
#include "hw/timer/i8254.h"
#include "hw/xen/xen.h"
#include "system/system.h"
#include "cpu.h"
#include "accel/accel-cpu-target.h"
#include "accel/hpkvm/hpkvm-internal.h"
#include "hpkvm-x86.h"

static bool (*kvm_cpu_target_realize)(CPUState *cpu, Error **errp);

static void hpkvm_cpu_set_default(const char *prop, const char *value)
{
    /* Registered before -cpu is parsed: the user's -cpu settings win. */
    object_register_sugar_prop(TYPE_X86_CPU, prop, value, false);
}

/*
 * Can KVM keep HLT in the guest?  Asked of the device before KVM is up:
 * with cpu-pm on, KVM's own initialisation fails on a kernel without
 * KVM_CAP_X86_DISABLE_EXITS, where hpkvm must fall back instead.
 */
static bool hpkvm_x86_can_disable_hlt_exits(const char *device)
{
    int fd = qemu_open_old(device, O_RDWR | O_CLOEXEC);
    int exits;

    if (fd < 0) {
        return false;
    }
    exits = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_X86_DISABLE_EXITS);
    close(fd);
    return exits > 0 && (exits & KVM_X86_DISABLE_EXITS_HLT);
}

void hpkvm_arch_init_machine(HPKVMState *s, const char *device)
{
    s->cpu_pm_before = enable_cpu_pm;
    if (hpkvm_wants_own_cores(s) && hpkvm_x86_can_disable_hlt_exits(device)) {
        /*
         * The guest owns its cores: let it idle and spin there without
         * exits, as -overcommit cpu-pm=on does (KVM_CAP_X86_DISABLE_EXITS,
         * masked by what KVM reports, before any vCPU exists; MWAIT in
         * CPUID).
         */
        enable_cpu_pm = true;
    }
}

void hpkvm_arch_kvm_ready(HPKVMState *s)
{
    /*
     * The CPU defaults only once KVM is up: with the next -accel entry
     * (TCG) they would ask for what it does not have.
     */
    if (hpkvm_wants_own_cores(s)) {
        /* Tell the guest its vCPUs are dedicated. */
        hpkvm_cpu_set_default("kvm-hint-dedicated", "on");
        /*
         * A vCPU on its own core is never descheduled, so the in-kernel
         * PIT's ticks are lost only where the guest itself keeps
         * interrupts off, as on hardware: reinjecting them has nothing
         * to make up for, and it inhibits AMD's AVIC for the whole VM
         * (KVM's PIT_REINJ inhibit).  -global kvm-pit.lost_tick_policy=
         * still wins.
         */
        object_register_sugar_prop(TYPE_KVM_I8254, "lost_tick_policy",
                                   "discard", false);
    }
    /* What "on" features need of the guest's CPU, unless -cpu says no. */
    if (s->feat[HPKVM_FEATURE_TIMER_PASSTHROUGH].requested == ON_OFF_AUTO_ON) {
        hpkvm_cpu_set_default("tsc-deadline", "off");
        hpkvm_cpu_set_default("x2apic", "on");
    }
    if (s->feat[HPKVM_FEATURE_IPI_FASTPATH].requested == ON_OFF_AUTO_ON) {
        hpkvm_cpu_set_default("x2apic", "on");
    }
    if (enable_cpu_pm) {
        /* What kvm_arch_init() asked for, as KVM reported it. */
        s->disabled_exits = kvm_check_extension(KVM_STATE(s),
                                                KVM_CAP_X86_DISABLE_EXITS) &
                            (KVM_X86_DISABLE_EXITS_MWAIT |
                             KVM_X86_DISABLE_EXITS_HLT |
                             KVM_X86_DISABLE_EXITS_PAUSE |
                             KVM_X86_DISABLE_EXITS_CSTATE);
    }
}

void hpkvm_arch_kvm_failed(HPKVMState *s)
{
    enable_cpu_pm = s->cpu_pm_before;
    /*
     * KVM's xen-version= switched QEMU to Xen emulation when it was set,
     * before any accelerator was tried; only KVM emulates Xen, and the
     * board would ask the next accelerator (TCG) for KVM's Xen state.
     */
    if (xen_mode == XEN_EMULATE) {
        xen_mode = XEN_DISABLED;
    }
}

static int64_t hpkvm_cpu_host_tsc_khz(KVMState *k)
{
    int ret;

    if (!kvm_check_extension(k, KVM_CAP_VM_TSC_CONTROL)) {
        return 0;
    }
    ret = kvm_vm_ioctl(k, KVM_GET_TSC_KHZ);
    return ret > 0 ? ret : 0;
}

static bool hpkvm_cpu_realize(CPUState *cs, Error **errp)
{
    HPKVMState *s = HPKVM_ACCEL(current_accel());
    CPUX86State *env = &X86_CPU(cs)->env;
    HpkvmX86Facts x86;
    HpkvmGuestFacts facts;

    /* Before KVM's part: a hot-plugged CPU fails here, not its thread. */
    if (!hpkvm_placement_check_vcpu(s, cs, errp) ||
        !kvm_cpu_target_realize(cs, errp)) {
        return false;
    }
    if (s->negotiated) {
        return true;
    }
    x86 = (HpkvmX86Facts) {
        .x2apic = env->features[FEAT_1_ECX] & CPUID_EXT_X2APIC,
        .tsc_deadline = env->features[FEAT_1_ECX] &
                        CPUID_EXT_TSC_DEADLINE_TIMER,
    };
    facts = (HpkvmGuestFacts) {
        .nr_vcpus = current_machine->smp.max_cpus,
        .irqchip_in_kernel = kvm_irqchip_in_kernel(),
        .guest_timer_khz = env->user_tsc_khz,
        .host_timer_khz = hpkvm_cpu_host_tsc_khz(KVM_STATE(s)),
        .arch = &x86,
    };
    s->realtime_hint = env->features[FEAT_KVM_HINTS] &
                       CPUID_KVM_HINTS_REALTIME;
    s->guest_timer_khz = facts.guest_timer_khz ?: facts.host_timer_khz;
    return hpkvm_negotiate(s, &facts, errp);
}

static void hpkvm_cpu_accel_class_init(ObjectClass *oc, void *data)
{
    AccelCPUClass *acc = ACCEL_CPU_CLASS(oc);

    /* Inherited from KVM's class by QOM's class copy. */
    kvm_cpu_target_realize = acc->cpu_target_realize;
    acc->cpu_target_realize = hpkvm_cpu_realize;
}

static const TypeInfo hpkvm_cpu_accel_type_info = {
    .name = ACCEL_CPU_NAME("hpkvm"),
    .parent = ACCEL_CPU_NAME("kvm"),
    .class_init = hpkvm_cpu_accel_class_init,
    .abstract = true,
};

static void hpkvm_cpu_accel_register_types(void)
{
    type_register_static(&hpkvm_cpu_accel_type_info);
}

type_init(hpkvm_cpu_accel_register_types);
