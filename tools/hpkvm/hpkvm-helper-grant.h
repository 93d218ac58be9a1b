/*
 * qemu-hpkvm-helper: the kernel's grants of the cores it leases
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_HELPER_GRANT_H
#define HPKVM_HELPER_GRANT_H

#include "accel/hpkvm/hpkvm-cpuset.h"
#include "accel/hpkvm/hpkvm-host.h"

typedef struct HpkvmHelperGrants {
    const HpkvmHost *host;      /* a fake host tree: nothing granted */
    pid_t grantee[HPKVM_MAX_HOST_CPUS];     /* 0: not granted by us */
} HpkvmHelperGrants;

void hpkvm_helper_grants_init(HpkvmHelperGrants *g, const HpkvmHost *host);

/*
 * Grant @cores to the process @pid, which the helper leased them to:
 * its vCPUs may then bind there without CAP_SYS_NICE.  True also where
 * the host's KVM binds without grants.  False, with @errp, if a core
 * could not be granted or @pid is gone; the grants made are then taken
 * back.
 */
bool hpkvm_helper_grants_give(HpkvmHelperGrants *g, const HpkvmCpuSet *cores,
                              pid_t pid, Error **errp);

/* Take back what @pid was granted (it exited). */
void hpkvm_helper_grants_drop(HpkvmHelperGrants *g, pid_t pid);

#endif
