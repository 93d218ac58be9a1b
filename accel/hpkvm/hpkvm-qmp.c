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

static void hmp_print_strs(Monitor *mon, const char *what, strList *list)
{
    monitor_printf(mon, "  %s:", what);
    for (; list; list = list->next) {
        monitor_printf(mon, " %s%s", list->value, list->next ? ";" : "");
    }
    monitor_printf(mon, "\n");
}

static void hmp_print_tasks(Monitor *mon, const char *what,
                            HpkvmHostTaskList *list)
{
    monitor_printf(mon, "  %s:", what);
    for (; list; list = list->next) {
        monitor_printf(mon, " %" PRId64 " %s%s", list->value->pid,
                       list->value->comm, list->next ? ";" : "");
    }
    monitor_printf(mon, "\n");
}

/* "  IRQs left: 9 vgic: why; 10: why", with why unless @why is false. */
static void hmp_print_irqs(Monitor *mon, const char *label,
                           HpkvmIrqLeftList *list, bool why)
{
    monitor_printf(mon, "  %s:", label);
    for (; list; list = list->next) {
        HpkvmIrqLeft *irq = list->value;

        monitor_printf(mon, " %" PRId64 "%s%s%s%s%s", irq->irq,
                       *irq->handlers ? " " : "", irq->handlers,
                       why ? ": " : "", why ? irq->reason : "",
                       list->next ? (why ? ";" : ",") : "");
    }
    monitor_printf(mon, "\n");
}

/* One line per thing left: "task 12 kworker/1: why", "cgroup /a: why". */
static void hmp_print_left_behind(Monitor *mon, HpkvmLeftBehindList *list)
{
    monitor_printf(mon, "  left as they are:%s\n", list ? "" : " nothing");
    for (; list; list = list->next) {
        HpkvmLeftBehind *l = list->value;

        if (l->task) {
            monitor_printf(mon, "    task %" PRId64 " %s", l->task->pid,
                           l->task->comm);
        } else if (l->cgroup) {
            monitor_printf(mon, "    cgroup %s", l->cgroup);
        } else {
            monitor_printf(mon, "    file %s", l->file);
        }
        monitor_printf(mon, ": %s\n", l->reason);
    }
}

static void hmp_info_placement(Monitor *mon, HpkvmInfo *info)
{
    HpkvmVcpuPlacementList *p;
    HpkvmCoreIsolationList *c;
    intList *irq;
    HpkvmIsolation *iso = info->isolation;

    if (info->host_cpus) {
        monitor_printf(mon, "host cores: %s; housekeeping cores: %s\n",
                       info->host_cpus, info->housekeeping_cpus);
    }
    for (p = info->placement; p; p = p->next) {
        monitor_printf(mon, "vCPU %" PRId64 ": host core %" PRId64
                       ", thread %" PRId64, p->value->cpu_index,
                       p->value->host_cpu, p->value->thread_id);
        if (p->value->moved_to) {
            monitor_printf(mon, " moved to host cores %s (paused for it)",
                           p->value->moved_to);
        }
        monitor_printf(mon, "\n");
    }
    if (!iso) {
        return;
    }
    monitor_printf(mon, "dynamic isolation (%s): %s%s\n",
                   OnOffAuto_str(iso->requested),
                   iso->active ? "active, tasks by " : "off",
                   iso->active ? HpkvmTaskIsolation_str(iso->method) : "");
    if (*iso->reason) {
        monitor_printf(mon, "  %s\n", iso->reason);
    }
    if (!iso->active) {
        return;
    }
    monitor_printf(mon, "  tasks moved: %" PRId64 "; journal: %s\n",
                   iso->tasks_moved, iso->journal);
    hmp_print_left_behind(mon, iso->tasks_left);
    hmp_print_strs(mon, "cgroups narrowed", iso->groups_narrowed);
    for (c = iso->cores; c; c = c->next) {
        monitor_printf(mon, "host core %" PRId64 ": nohz %s%s; IRQs moved:",
                       c->value->host_cpu, HpkvmNohz_str(c->value->nohz),
                       c->value->isolcpus ? ", in isolcpus" : "");
        for (irq = c->value->irqs_moved; irq; irq = irq->next) {
            monitor_printf(mon, " %" PRId64, irq->value);
        }
        monitor_printf(mon, "\n");
        hmp_print_irqs(mon, "IRQs left", c->value->irqs_left, true);
        if (c->value->irqs_per_cpu) {
            hmp_print_irqs(mon, "per-CPU IRQs (each core has its own)",
                           c->value->irqs_per_cpu, false);
        }
        hmp_print_tasks(mon, "per-CPU kernel threads left",
                        c->value->kthreads_left);
    }
}

void hmp_info_hpkvm(Monitor *mon, const QDict *qdict)
{
    g_autoptr(HpkvmInfo) info = qmp_query_hpkvm(&error_abort);
    HpkvmFeatureInfoList *f;
    HpkvmExitList *e;
    HpkvmLostPromiseList *lost;
    HpkvmApicvInhibitList *inhibit;

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
    if (info->has_apicv_inhibits) {
        monitor_printf(mon, "APIC virtualization inhibited by:");
        for (inhibit = info->apicv_inhibits; inhibit;
             inhibit = inhibit->next) {
            monitor_printf(mon, " %s", HpkvmApicvInhibit_str(inhibit->value));
        }
        monitor_printf(mon, "%s\n", info->apicv_inhibits ? "" :
                       " nothing (in use)");
    }
    monitor_printf(mon, "disabled exits:");
    for (e = info->disabled_exits; e; e = e->next) {
        monitor_printf(mon, " %s", HpkvmExit_str(e->value));
    }
    monitor_printf(mon, "%s\n", info->disabled_exits ? "" : " none");
    monitor_printf(mon, "realtime hint: %s\n",
                   info->realtime_hint ? "yes" : "no");
    monitor_printf(mon, "VFIO MSI programmings: %" PRId64 " direct, %" PRId64
                   " left to KVM\n", info->irte_direct, info->irte_fallback);
    for (lost = info->incoming_lost; lost; lost = lost->next) {
        monitor_printf(mon, "lost by migration: %s (%s on the source): %s\n",
                       HpkvmFeature_str(lost->value->feature),
                       OnOffAuto_str(lost->value->source_requested),
                       lost->value->reason);
    }
    if (info->has_halt_poll_ns) {
        monitor_printf(mon, "halt polling: %" PRId64 " ns\n",
                       info->halt_poll_ns);
    }
    hmp_info_placement(mon, info);
}
