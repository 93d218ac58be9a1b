/*
 * hpkvm: QEMU's side of qemu-hpkvm-helper
 *
 * Leases and isolation are the helper's; QEMU asks for them and holds
 * the open leases it is given (see hpkvm-helper-proto.h).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_HELPER_CLIENT_H
#define ACCEL_HPKVM_HELPER_CLIENT_H

#include "qapi/qapi-types-hpkvm.h"
#include "hpkvm-lease.h"

/*
 * Lease @cores through the helper listening on @socket.  The leases @l
 * holds already (handed over by a previous QEMU, CPR) are adopted, the
 * others taken into @l.  @housekeeping is housekeeping-cpus= (NULL: the
 * cores no one leases); *@hk is what the helper chose, *@report its
 * report.
 */
bool hpkvm_helper_lease(const char *socket, const HpkvmCpuSet *cores,
                        const char *housekeeping, OnOffAuto isolation,
                        HpkvmLeases *l, HpkvmCpuSet *hk,
                        HpkvmIsolation **report, Error **errp);

/*
 * The helper brings the host in line with the leases alive (after this
 * QEMU closed its leases, or once KVM's threads for it exist); what it
 * could not restore goes to @failures.
 */
bool hpkvm_helper_reconcile(const char *socket, GPtrArray *failures,
                            Error **errp);

/*
 * What an hpkvm_helper_reconcile_async() came to: @failures as
 * hpkvm_helper_reconcile() fills them, or @err (the callee's to free).
 */
typedef void HpkvmHelperReconciled(GPtrArray *failures, Error *err,
                                   void *opaque);

/*
 * hpkvm_helper_reconcile() in a worker thread, for a caller in the main
 * loop that must not wait on the helper (a helper that is stopped or
 * busy would stop QMP and device emulation with it): @done runs in the
 * main loop once the helper answered or the call failed.
 */
void hpkvm_helper_reconcile_async(const char *socket,
                                  HpkvmHelperReconciled *done, void *opaque);

#endif
