/*
 * hpkvm accelerator: KVM with dedicated host cores and (almost) no VM exits
 *
 * hpkvm-accel is a QOM subclass of kvm-accel.  It inherits everything KVM
 * does (properties, vCPU loop, kvm_enabled()) and adds, around KVM's own
 * machine initialisation, what hpkvm negotiates with the host.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/module.h"
#include "hw/boards.h"
#include "system/kvm_int.h"
#include "system/hpkvm.h"
#include "trace.h"

typedef struct HPKVMState {
    KVMState parent_obj;
} HPKVMState;

typedef struct HPKVMAccelClass {
    AccelClass parent_class;

    /* kvm-accel's machine initialisation, which ours wraps. */
    int (*parent_init_machine)(MachineState *ms);
} HPKVMAccelClass;

OBJECT_DECLARE_TYPE(HPKVMState, HPKVMAccelClass, HPKVM_ACCEL)

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
        error_report("hpkvm: cannot open the KVM device %s: %s", path,
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
    KVMState *s = KVM_STATE(ms->accelerator);
    const char *device = s->device ?: "/dev/kvm";
    int ret;

    ret = hpkvm_check_device(device);
    if (ret < 0) {
        return ret;
    }

    ret = hc->parent_init_machine(ms);
    if (ret < 0) {
        return ret;
    }
    trace_hpkvm_init_machine(device, s->fd, s->vmfd);
    return 0;
}

static void hpkvm_accel_class_init(ObjectClass *oc, void *data)
{
    AccelClass *ac = ACCEL_CLASS(oc);
    HPKVMAccelClass *hc = HPKVM_ACCEL_CLASS(oc);

    ac->name = "hpkvm";
    hc->parent_init_machine = ac->init_machine;
    ac->init_machine = hpkvm_init_machine;
}

static const TypeInfo hpkvm_accel_type = {
    .name = TYPE_HPKVM_ACCEL,
    .parent = TYPE_KVM_ACCEL,
    .instance_size = sizeof(HPKVMState),
    .class_size = sizeof(HPKVMAccelClass),
    .class_init = hpkvm_accel_class_init,
};

static void hpkvm_type_init(void)
{
    type_register_static(&hpkvm_accel_type);
}

type_init(hpkvm_type_init);
