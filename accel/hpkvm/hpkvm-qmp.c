/*
 * hpkvm: QMP and HMP reports
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "monitor/hmp.h"
#include "monitor/monitor.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-hpkvm.h"
#include "system/hpkvm.h"

HpkvmInfo *qmp_query_hpkvm(Error **errp)
{
    AccelState *accel = current_accel();
    HpkvmInfo *info;

    if (hpkvm_enabled()) {
        info = HPKVM_ACCEL_GET_CLASS(accel)->query(accel);
    } else {
        info = g_new0(HpkvmInfo, 1);
    }
    info->present = accel_find("hpkvm") != NULL;
    return info;
}

void hmp_info_hpkvm(Monitor *mon, const QDict *qdict)
{
    g_autoptr(HpkvmInfo) info = qmp_query_hpkvm(&error_abort);
    HpkvmFeatureInfoList *f;
    strList *e;

    if (!info->enabled) {
        monitor_printf(mon, "hpkvm: not in use%s\n",
                       info->present ? "" : " (not in this binary)");
        return;
    }
    monitor_printf(mon, "hpkvm: in use; kernel hpkvm contract version %"
                   PRId64 "%s\n", info->kernel_version,
                   info->kernel_version ? "" : " (unpatched KVM)");
    if (!info->negotiated) {
        monitor_printf(mon, "features: not negotiated yet (no vCPU)\n");
        return;
    }
    monitor_printf(mon, "%-18s %-9s %-8s %-15s %s\n", "feature", "requested",
                   "granted", "mechanism", "reason");
    for (f = info->features; f; f = f->next) {
        monitor_printf(mon, "%-18s %-9s %-8s %-15s %s\n",
                       HpkvmFeature_str(f->value->feature),
                       OnOffAuto_str(f->value->requested),
                       f->value->granted ? "yes" : "no",
                       HpkvmMechanism_str(f->value->mechanism),
                       f->value->reason);
    }
    monitor_printf(mon, "disabled exits:");
    for (e = info->disabled_exits; e; e = e->next) {
        monitor_printf(mon, " %s", e->value);
    }
    monitor_printf(mon, "%s\n", info->disabled_exits ? "" : " none");
    monitor_printf(mon, "realtime hint: %s\n",
                   info->realtime_hint ? "yes" : "no");
    monitor_printf(mon, "VFIO MSI programmings: %" PRId64 " direct, %" PRId64
                   " left to KVM\n", info->irte_direct, info->irte_fallback);
    if (info->has_halt_poll_ns) {
        monitor_printf(mon, "halt polling: %" PRId64 " ns\n",
                       info->halt_poll_ns);
    }
}
