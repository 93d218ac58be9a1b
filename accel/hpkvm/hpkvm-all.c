/*
 * hpkvm accelerator: KVM with dedicated host cores and (almost) no VM exits
 *
 * hpkvm-accel is a QOM subclass of kvm-accel.  It inherits everything KVM
 * does (properties, vCPU loop, kvm_enabled()) and adds one on|off|auto
 * property per feature it negotiates with a patched host KVM, around
 * KVM's own machine initialisation.  The negotiation itself happens when
 * the first vCPU is created (hpkvm-negotiate.c).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "qapi/qapi-visit-common.h"
#include "hw/boards.h"
#include "hpkvm-internal.h"
#include "trace.h"

static const char *const feature_descriptions[HPKVM_FEATURE__MAX] = {
    [HPKVM_FEATURE_EXCLUSIVE_CORES] =
        "each vCPU on its own host core, bound by the kernel (on|off|auto)",
    [HPKVM_FEATURE_IRQ_PASSTHROUGH] =
        "external interrupts to the guest without VM exits (on|off|auto)",
    [HPKVM_FEATURE_TIMER_PASSTHROUGH] =
        "the LAPIC timer passed to the guest, in one-shot mode: needs "
        "tsc-deadline=off in -cpu (on|off|auto)",
    [HPKVM_FEATURE_IPI_FASTPATH] =
        "minimal exit path for guest IPIs (on|off|auto)",
    [HPKVM_FEATURE_VFIO_IRTE] =
        "VFIO interrupts remapped straight to the vCPU (on|off|auto)",
    [HPKVM_FEATURE_DYNAMIC_NOHZ] =
        "host tick off while a vCPU runs (on|off|auto)",
};

/* Both getter and setter: the visitor's direction decides. */
static void hpkvm_visit_dynamic_isolation(Object *obj, Visitor *v,
                                          const char *name, void *opaque,
                                          Error **errp)
{
    HPKVMState *s = HPKVM_ACCEL(obj);

    visit_type_OnOffAuto(v, name, &s->dynamic_isolation, errp);
}

/* The string properties of host placement, by offset in HPKVMState. */
static const struct {
    const char *name;
    size_t offset;
    const char *description;
} str_props[] = {
    { "host-cpus", offsetof(HPKVMState, host_cpus_opt),
      "host cores for the vCPUs, vCPU i on the i-th (e.g. 2-5,8), or "
      "'pinned': each vCPU's core is the one a manager (libvirt's "
      "<vcpupin>) pinned it to by the guest's first run; leased "
      "host-wide" },
    { "housekeeping-cpus", offsetof(HPKVMState, housekeeping_opt),
      "host cores for QEMU's other threads (default: the online cores no "
      "VM leases)" },
    { "x-host-root", offsetof(HPKVMState, host_root),
      "for tests only: a fake tree standing for the host's /proc, /sys "
      "and cgroups (default /, the real host)" },
    { "helper", offsetof(HPKVMState, helper_opt),
      "the socket of qemu-hpkvm-helper, which leases host-cpus= and "
      "isolates the host (default /run/qemu-hpkvm-helper.sock, under "
      "x-host-root)" },
};

static void hpkvm_get_str(Object *obj, Visitor *v, const char *name,
                          void *opaque, Error **errp)
{
    char **field = (char **)((char *)obj + (uintptr_t)opaque);
    g_autofree char *value = g_strdup(*field ?: "");

    visit_type_str(v, name, &value, errp);
}

static void hpkvm_set_str(Object *obj, Visitor *v, const char *name,
                          void *opaque, Error **errp)
{
    char **field = (char **)((char *)obj + (uintptr_t)opaque);
    char *value;

    if (!visit_type_str(v, name, &value, errp)) {
        return;
    }
    g_free(*field);
    *field = value;
}

static void hpkvm_get_feature(Object *obj, Visitor *v, const char *name,
                              void *opaque, Error **errp)
{
    HPKVMState *s = HPKVM_ACCEL(obj);
    OnOffAuto value = s->feat[(uintptr_t)opaque].requested;

    visit_type_OnOffAuto(v, name, &value, errp);
}

static void hpkvm_set_feature(Object *obj, Visitor *v, const char *name,
                              void *opaque, Error **errp)
{
    HPKVMState *s = HPKVM_ACCEL(obj);
    OnOffAuto value;

    if (!visit_type_OnOffAuto(v, name, &value, errp)) {
        return;
    }
    s->feat[(uintptr_t)opaque].requested = value;
}

/*
 * KVM's own message for a missing device ("Could not access KVM kernel
 * module") names neither the device nor the fix.  Check first, so that
 * the user learns which node failed and QEMU falls back to the next
 * -accel entry without a half-initialised KVM behind it.
 */
static int hpkvm_check_device(const char *path)
{
    int fd = qemu_open_old(path, O_RDWR);
    int err = errno;

    if (fd < 0) {
        error_report("cannot open the KVM device %s for hpkvm: %s", path,
                     strerror(err));
        error_printf("hpkvm needs read-write access to %s: load the kvm "
                     "module (kvm_intel or kvm_amd), check the node's "
                     "permissions, or name another node with "
                     "-accel hpkvm,device=PATH\n", path);
        return -err;
    }
    close(fd);
    return 0;
}

static int hpkvm_init_machine(MachineState *ms)
{
    HPKVMAccelClass *hc = HPKVM_ACCEL_GET_CLASS(ms->accelerator);
    HPKVMState *s = HPKVM_ACCEL(ms->accelerator);
    KVMState *k = KVM_STATE(s);
    const char *device = k->device ?: "/dev/kvm";
    Error *err = NULL;
    int ret;

    /*
     * First: whatever fails below, QEMU goes on with the next -accel
     * entry, and hpkvm_arch_kvm_failed() puts back what this changed.
     */
    hpkvm_arch_init_machine(s, device);
    ret = hpkvm_check_device(device);
    if (ret < 0) {
        goto fail;
    }

    if (!hpkvm_placement_init(s, ms->smp.cpus, ms->smp.max_cpus, &err)) {
        error_report_err(err);
        ret = -EINVAL;
        goto fail;
    }
    hpkvm_migration_init(s);
    ret = hc->parent_init_machine(ms);
    if (ret < 0) {
        /*
         * QEMU goes on with the next -accel entry and frees this object:
         * nothing of hpkvm's may stay, on the host or registered.
         */
        hpkvm_migration_undo(s);
        hpkvm_placement_undo(s);
        goto fail;
    }
    hpkvm_arch_kvm_ready(s);
    trace_hpkvm_init_machine(device, k->fd, k->vmfd);
    return 0;

fail:
    hpkvm_arch_kvm_failed(s);
    return ret;
}

static HpkvmInfo *hpkvm_query(AccelState *accel)
{
    return hpkvm_report(HPKVM_ACCEL(accel));
}

static void hpkvm_accel_instance_init(Object *obj)
{
    HPKVMState *s = HPKVM_ACCEL(obj);
    int i;

    for (i = 0; i < HPKVM_FEATURE__MAX; i++) {
        s->feat[i].requested = ON_OFF_AUTO_AUTO;
    }
    s->halt_poll_ns = -1;
    s->dynamic_isolation = ON_OFF_AUTO_AUTO;
    s->host_root = g_strdup("/");
}

static void hpkvm_accel_instance_finalize(Object *obj)
{
    HPKVMState *s = HPKVM_ACCEL(obj);
    int i;

    for (i = 0; i < HPKVM_FEATURE__MAX; i++) {
        g_free(s->feat[i].reason);
    }
    hpkvm_placement_finalize(s);
}

static void hpkvm_accel_class_init(ObjectClass *oc, void *data)
{
    AccelClass *ac = ACCEL_CLASS(oc);
    HPKVMAccelClass *hc = HPKVM_ACCEL_CLASS(oc);
    uintptr_t i;

    ac->name = "hpkvm";
    hc->parent_init_machine = ac->init_machine;
    ac->init_machine = hpkvm_init_machine;
    hc->query = hpkvm_query;

    for (i = 0; i < HPKVM_FEATURE__MAX; i++) {
        const char *name = HpkvmFeature_str(i);

        object_class_property_add(oc, name, "OnOffAuto", hpkvm_get_feature,
                                  hpkvm_set_feature, NULL, (void *)i);
        object_class_property_set_description(oc, name,
                                              feature_descriptions[i]);
    }

    object_class_property_add(oc, "dynamic-isolation", "OnOffAuto",
                              hpkvm_visit_dynamic_isolation,
                              hpkvm_visit_dynamic_isolation, NULL, NULL);
    object_class_property_set_description(oc, "dynamic-isolation",
        "move host IRQs and host tasks off host-cpus= while the VM runs "
        "(on|off|auto)");
    for (i = 0; i < ARRAY_SIZE(str_props); i++) {
        object_class_property_add(oc, str_props[i].name, "str", hpkvm_get_str,
                                  hpkvm_set_str, NULL,
                                  (void *)str_props[i].offset);
        object_class_property_set_description(oc, str_props[i].name,
                                              str_props[i].description);
    }
}

static const TypeInfo hpkvm_accel_type = {
    .name = TYPE_HPKVM_ACCEL,
    .parent = TYPE_KVM_ACCEL,
    .instance_size = sizeof(HPKVMState),
    .instance_init = hpkvm_accel_instance_init,
    .instance_finalize = hpkvm_accel_instance_finalize,
    .class_size = sizeof(HPKVMAccelClass),
    .class_init = hpkvm_accel_class_init,
};

static void hpkvm_type_init(void)
{
    type_register_static(&hpkvm_accel_type);
}

type_init(hpkvm_type_init);
