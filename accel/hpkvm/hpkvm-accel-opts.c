/*
 * hpkvm: "-accel hpkvm" takes precedence over plain "-accel kvm"
 *
 * libvirt always emits its own "-accel kvm" ahead of anything a domain
 * passes through <qemu:commandline>, and QEMU initialises the first
 * accelerator that works, so without this "-accel hpkvm" from a domain's
 * XML would never run.  Folding the kvm entries into the hpkvm one keeps
 * what libvirt asked of KVM (kernel-irqchip, dirty-ring-size, ...) while
 * hpkvm, a KVM superset, is the accelerator in charge.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/option.h"
#include "qapi/error.h"
#include "system/hpkvm.h"

typedef struct CopyAccelProps {
    QemuOpts *dst;
    bool keep_existing;
} CopyAccelProps;

static int accel_opts_collect(void *opaque, QemuOpts *opts, Error **errp)
{
    g_ptr_array_add(opaque, opts);
    return 0;
}

static int accel_opts_copy_prop(void *opaque, const char *name,
                                const char *value, Error **errp)
{
    CopyAccelProps *c = opaque;

    if (g_str_equal(name, "accel")) {
        return 0;
    }
    if (c->keep_existing && qemu_opt_get(c->dst, name)) {
        return 0;
    }
    /* Appended: a later value of the same property wins when applied. */
    qemu_opt_set(c->dst, name, value, &error_abort);
    return 0;
}

static void accel_opts_copy_props(QemuOpts *dst, QemuOpts *src,
                                  bool keep_existing)
{
    CopyAccelProps c = { .dst = dst, .keep_existing = keep_existing };

    qemu_opt_foreach(src, accel_opts_copy_prop, &c, &error_abort);
}

static bool accel_opts_is(QemuOpts *opts, const char *name)
{
    return g_strcmp0(qemu_opt_get(opts, "accel"), name) == 0;
}

void hpkvm_fold_accel_opts(QemuOptsList *accel_opts)
{
    g_autoptr(GPtrArray) entries = g_ptr_array_new();
    QemuOpts *hpkvm = NULL;
    QemuOpts *target = NULL;
    guint i;

    qemu_opts_foreach(accel_opts, accel_opts_collect, entries, &error_abort);
    for (i = 0; i < entries->len; i++) {
        QemuOpts *opts = g_ptr_array_index(entries, i);

        if (!hpkvm && accel_opts_is(opts, "hpkvm")) {
            hpkvm = opts;
        }
        if (!target &&
            (accel_opts_is(opts, "kvm") || accel_opts_is(opts, "hpkvm"))) {
            target = opts;
        }
    }
    if (!hpkvm) {
        return;
    }

    if (target != hpkvm) {
        /*
         * A kvm entry comes first: it becomes the hpkvm entry, so hpkvm is
         * tried where kvm would have been.  Its properties stay and
         * hpkvm's, appended after them, win.
         */
        qemu_opt_unset(target, "accel");
        qemu_opt_set(target, "accel", "hpkvm", &error_abort);
        accel_opts_copy_props(target, hpkvm, false);
        qemu_opts_del(hpkvm);
    }

    for (i = 0; i < entries->len; i++) {
        QemuOpts *opts = g_ptr_array_index(entries, i);

        if (opts != target && opts != hpkvm && accel_opts_is(opts, "kvm")) {
            accel_opts_copy_props(target, opts, true);
            qemu_opts_del(opts);
        }
    }
}
