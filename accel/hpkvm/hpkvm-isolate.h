/*
 * hpkvm: dynamic host isolation of leased cores
 *
 * The host's isolation is a function of the leases alive host-wide: every
 * host IRQ's affinity and every host task's cpuset or affinity is its
 * original value (from the journal) minus the cores leased by others.
 * hpkvm_isolate_reconcile() brings the host there, journaling each
 * original value before the first change; with no lease left it replays
 * the journal instead, restoring the host exactly.  Starting VMs, exiting
 * VMs and the recovery tool all call it, under the host lock, so a
 * crashed VM's changes are undone by whoever comes next.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_ISOLATE_H
#define ACCEL_HPKVM_ISOLATE_H

#include "qapi/qapi-types-hpkvm.h"
#include "hpkvm-journal.h"
#include "hpkvm-lease.h"

typedef struct HpkvmIsolateRequest {
    const HpkvmHost *host;
    HpkvmJournal *journal;
    const HpkvmLeaseMap *leases;    /* host-wide, after this VM's change */
    HpkvmCpuSet report_cores;       /* the cores to report on */
    pid_t self;                     /* never moved (0: none) */
    bool dynamic_nohz;              /* granted by the kernel */
} HpkvmIsolateRequest;

/*
 * Reconcile the host with the leases; the report covers @report_cores.
 * Fails, having changed nothing more, if the journal cannot be written.
 * Undo failures of a replay go to @failures when it is not NULL.
 */
HpkvmIsolation *hpkvm_isolate_reconcile(const HpkvmIsolateRequest *req,
                                        GPtrArray *failures, Error **errp);

/* The report of a VM without isolation: why, and the static state. */
HpkvmIsolation *hpkvm_isolate_report_off(const HpkvmHost *h,
                                         const HpkvmCpuSet *cores,
                                         OnOffAuto requested,
                                         const char *reason);

#endif
