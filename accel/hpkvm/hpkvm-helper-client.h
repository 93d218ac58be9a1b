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

#endif
