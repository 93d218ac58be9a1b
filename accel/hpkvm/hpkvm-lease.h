/*
 * hpkvm: host-wide leases of host cores
 *
 * A core belongs to at most one VM at a time.  The lease on core N is an
 * open file description locking <state-dir>/leases/cpuN (an OFD lock,
 * in the trusted state directory of hpkvm-state-dir.h):
 * taking it cannot race, and the kernel drops it when the owner exits,
 * however it exits, so a lease never outlives its VM.  The file holds the
 * owner's pid, for messages and for the isolation of its threads.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_LEASE_H
#define ACCEL_HPKVM_LEASE_H

#include "hpkvm-host.h"

typedef struct HpkvmLeases {
    HpkvmCpuSet held;
    int fd[HPKVM_MAX_HOST_CPUS];
} HpkvmLeases;

/* Who holds which core, host-wide. */
typedef struct HpkvmLeaseMap {
    HpkvmCpuSet leased;
    pid_t owner[HPKVM_MAX_HOST_CPUS];
} HpkvmLeaseMap;

void hpkvm_leases_init(HpkvmLeases *l);
/* All of @cores or none; the error names a core and its owner. */
bool hpkvm_leases_take(HpkvmLeases *l, const HpkvmHost *h,
                       const char *state_dir, const HpkvmCpuSet *cores,
                       Error **errp);
/* Take over the lease on @cpu whose open file @fd was handed over (CPR). */
bool hpkvm_leases_adopt(HpkvmLeases *l, unsigned cpu, int fd, Error **errp);
void hpkvm_leases_release(HpkvmLeases *l);

/*
 * Fills @map; false if the leases cannot be seen (then nothing may be
 * decided from them: a core might be leased).
 */
bool hpkvm_leases_scan(const HpkvmHost *h, const char *state_dir,
                       HpkvmLeaseMap *map, Error **errp);

/*
 * Serialises changes of the host's isolation between VMs (and the
 * recovery tool); returns the fd to close to unlock, or -1.
 */
int hpkvm_leases_lock_host(const HpkvmHost *h, const char *state_dir,
                           Error **errp);

#endif
