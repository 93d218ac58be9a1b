/*
 * hpkvm: what the migration stream carries of hpkvm, and leases around it
 *
 * The "hpkvm" section carries what the source promised its guest: the
 * features the kernel granted and how each was requested, the exits
 * disabled (MWAIT shows in CPUID), the dedicated-vCPU CPUID hint and,
 * with timer passthrough, the TSC frequency the guest programs deadlines
 * in.  The destination negotiated with its own kernel before the stream
 * arrives; where it cannot keep a promise it refuses the migration if the
 * source had the feature "on", and degrades with a report if "auto".
 * The section is only sent when there is a promise, so a VM that made
 * none also migrates to plain -accel kvm, which does not know it.
 *
 * The source's leases and isolation stay until the migration completes,
 * then go as at exit; a failed migration changes nothing.  With CPR
 * (cpr-transfer) the lease files' open descriptions are handed to the new
 * QEMU, which has qemu-hpkvm-helper adopt them and owns the cores from
 * then on without a gap.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "migration/vmstate.h"
#include "migration/misc.h"
#include "hpkvm-internal.h"
#include "trace.h"

static uint64_t migration_granted_mask(HPKVMState *s)
{
    uint64_t mask = 0;
    int f;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if (s->feat[f].granted) {
            mask |= 1ULL << f;
        }
    }
    return mask;
}

static bool hpkvm_promised(void *opaque)
{
    HPKVMState *s = opaque;

    return migration_granted_mask(s) || s->disabled_exits || s->realtime_hint;
}

static int hpkvm_pre_save(void *opaque)
{
    HPKVMState *s = opaque;
    HpkvmMigState *m = &s->mig;
    int f;

    m->granted = migration_granted_mask(s);
    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        m->requested[f] = s->feat[f].requested;
    }
    m->disabled_exits = s->disabled_exits;
    m->realtime_hint = s->realtime_hint;
    m->tsc_khz = s->guest_timer_khz;
    return 0;
}

/* A promise this host cannot keep: refused under "on", noted under auto */
static void migration_lost(HPKVMState *s, GString *refused, int f,
                           const char *what)
{
    HpkvmLostPromise *p;

    trace_hpkvm_migration_lost(HpkvmFeature_str(f),
                               OnOffAuto_str(s->mig.requested[f]), what);
    if (s->mig.requested[f] == ON_OFF_AUTO_ON) {
        g_string_append_printf(refused, "%s%s (on on the source): %s",
                               refused->len ? "; " : "",
                               HpkvmFeature_str(f), what);
        return;
    }
    p = g_new0(HpkvmLostPromise, 1);
    p->feature = f;
    p->source_requested = s->mig.requested[f];
    p->reason = g_strdup(what);
    QAPI_LIST_PREPEND(s->incoming_lost, p);
}

static int hpkvm_post_load(void *opaque, int version_id)
{
    HPKVMState *s = opaque;
    HpkvmMigState *in = &s->mig;
    g_autoptr(GString) refused = g_string_new("");
    HpkvmLostPromiseList *l;
    int f, bit;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if (in->requested[f] > ON_OFF_AUTO_OFF) {
            error_report("incoming migration: invalid hpkvm state in the "
                         "stream (feature %d requested as %u)", f,
                         in->requested[f]);
            return -EINVAL;
        }
        if ((in->granted & (1ULL << f)) && !s->feat[f].granted) {
            g_autofree char *why = g_strdup_printf(
                "granted by the source's kernel, not here (%s)",
                s->feat[f].reason ?: "not negotiated");

            migration_lost(s, refused, f, why);
        }
    }
    if (in->realtime_hint && !s->realtime_hint) {
        migration_lost(s, refused, HPKVM_FEATURE_EXCLUSIVE_CORES,
                       "the guest was told its vCPUs are dedicated (KVM_HINTS_"
             "REALTIME); here they are not: add kvm-hint-dedicated=on to "
             "-cpu");
    }
    for (bit = 0; bit < HPKVM_EXIT__MAX; bit++) {
        if ((in->disabled_exits & ~s->disabled_exits) & (1U << bit)) {
            g_autofree char *why = g_strdup_printf(
                "%s exits were disabled on the source, KVM here does not "
                "disable them", HpkvmExit_str(bit));

            migration_lost(s, refused, HPKVM_FEATURE_EXCLUSIVE_CORES, why);
        }
    }
    if (refused->len) {
        error_report("incoming migration refused: this host cannot keep "
                     "the hpkvm features the source promised its guest: %s",
                     refused->str);
        error_printf("Migrate to a host that can, or set the feature to "
                     "auto on the source to allow a degraded "
                     "destination.\n");
        return -EPERM;
    }
    for (l = s->incoming_lost; l; l = l->next) {
        warn_report("incoming migration degraded: the guest loses hpkvm's "
                    "%s (%s on the source): %s",
                    HpkvmFeature_str(l->value->feature),
                    OnOffAuto_str(l->value->source_requested),
                    l->value->reason);
    }
    return 0;
}

static const VMStateDescription vmstate_hpkvm = {
    .name = "hpkvm",
    .version_id = 1,
    .minimum_version_id = 1,
    .needed = hpkvm_promised,
    .pre_save = hpkvm_pre_save,
    .post_load = hpkvm_post_load,
    .fields = (const VMStateField[]) {
        VMSTATE_UINT64(mig.granted, HPKVMState),
        VMSTATE_UINT8_ARRAY(mig.requested, HPKVMState, HPKVM_FEATURE__MAX),
        VMSTATE_UINT32(mig.disabled_exits, HPKVMState),
        VMSTATE_BOOL(mig.realtime_hint, HPKVMState),
        VMSTATE_INT64(mig.tsc_khz, HPKVMState),
        VMSTATE_END_OF_LIST()
    },
};

/* The source: its cores go once the guest runs elsewhere. */
static int hpkvm_migration_event(NotifierWithReturn *n, MigrationEvent *e,
                                 Error **errp)
{
    HPKVMState *s = container_of(n, HPKVMState, migration_notifier);

    if (e->type == MIG_EVENT_PRECOPY_DONE) {
        /* The source goes on answering QMP: asked without waiting. */
        hpkvm_placement_release(s, "the guest migrated", false);
    }
    return 0;
}

void hpkvm_migration_init(HPKVMState *s)
{
    vmstate_register(NULL, 0, &vmstate_hpkvm, s);
    migration_add_notifier(&s->migration_notifier, hpkvm_migration_event);
}

void hpkvm_migration_undo(HPKVMState *s)
{
    /* Both point into @s, which QEMU frees for the next -accel entry. */
    vmstate_unregister(NULL, &vmstate_hpkvm, s);
    migration_remove_notifier(&s->migration_notifier);
}
