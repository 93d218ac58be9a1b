/*
 * hpkvm: host-wide leases of host cores
 *
 * A core belongs to at most one VM at a time.  The lease on core N is an
 * open file description locking <state-dir>/leases/cpuN (an OFD lock,
 * in the trusted state directory of hpkvm-state-dir.h):
 * taking it cannot race, and the kernel drops it when the owner exits,
 * however it exits, so a lease never outlives its VM.  The file holds the
 * owner's pid, for messages and for the isolation of its threads, and
 * "shared" after it if the VM runs without isolation.
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
    pid_t owner;                /* the VM's QEMU; this process by default */
    bool shared;                /* the host is not isolated from them */
} HpkvmLeases;

/* Who holds which core, host-wide. */
typedef struct HpkvmLeaseMap {
    HpkvmCpuSet leased;
    HpkvmCpuSet shared;         /* leased by VMs without isolation */
    pid_t owner[HPKVM_MAX_HOST_CPUS];
} HpkvmLeaseMap;

void hpkvm_leases_init(HpkvmLeases *l);
/* All of @cores or none; the error names a core and its owner. */
bool hpkvm_leases_take(HpkvmLeases *l, const HpkvmHost *h,
                       const char *state_dir, const HpkvmCpuSet *cores,
                       Error **errp);
/*
 * Take over the lease on @cpu whose open file @fd was handed over (CPR):
 * it must be <state-dir>/leases/cpuN and hold its lock.  @l keeps @fd.
 */
bool hpkvm_leases_adopt(HpkvmLeases *l, const HpkvmHost *h,
                        const char *state_dir, unsigned cpu, int fd,
                        Error **errp);
/* Whether the host is isolated from the cores of @l, for every scan. */
bool hpkvm_leases_set_shared(HpkvmLeases *l, bool shared, Error **errp);
void hpkvm_leases_release(HpkvmLeases *l);

/*
 * Fills @map; false if the leases cannot be seen (then nothing may be
 * decided from them: a core might be leased).
 */
bool hpkvm_leases_scan(const HpkvmHost *h, const char *state_dir,
                       HpkvmLeaseMap *map, Error **errp);

/* What isolation takes from @map: the leases of VMs isolated. */
static inline void hpkvm_leases_isolated(HpkvmLeaseMap *map)
{
    hpkvm_cpuset_andnot(&map->leased, &map->leased, &map->shared);
}

/*
 * Serialises changes of the host's isolation between VMs (and the
 * recovery tool); returns the fd to close to unlock, or -1.
 */
int hpkvm_leases_lock_host(const HpkvmHost *h, const char *state_dir,
                           Error **errp);

#endif
