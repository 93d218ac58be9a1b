/*
 * hpnet: choosing a network backend by need
 *
 * The decision tree of the seed: hardware isolation → SR-IOV; else
 * lowest latency → vhost-user; else widest compatibility → virtio-net in
 * QEMU; else (throughput on a plain host) → vhost-net.  When the first
 * choice is not available the next one in the need's list is taken:
 * vhost-net before QEMU's own virtio-net wherever latency or throughput
 * count (its data path is in the kernel), QEMU's own last; a need for
 * compatibility only ever falls back to vhost-net.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "hpnet-select.h"

static const HpnetBackend preference[HPNET_NEED__MAX][HPNET_BACKEND__MAX] = {
    [HPNET_NEED_ISOLATION] = { HPNET_BACKEND_SRIOV, HPNET_BACKEND_VHOST_USER,
                               HPNET_BACKEND_VHOST_NET,
                               HPNET_BACKEND_VIRTIO_NET },
    [HPNET_NEED_LATENCY] = { HPNET_BACKEND_VHOST_USER,
                             HPNET_BACKEND_VHOST_NET,
                             HPNET_BACKEND_VIRTIO_NET },
    [HPNET_NEED_COMPATIBILITY] = { HPNET_BACKEND_VIRTIO_NET,
                                   HPNET_BACKEND_VHOST_NET },
    [HPNET_NEED_THROUGHPUT] = { HPNET_BACKEND_VHOST_NET,
                                HPNET_BACKEND_VHOST_USER,
                                HPNET_BACKEND_VIRTIO_NET },
};

static const size_t preference_len[HPNET_NEED__MAX] = {
    [HPNET_NEED_ISOLATION] = 4,
    [HPNET_NEED_LATENCY] = 3,
    [HPNET_NEED_COMPATIBILITY] = 2,
    [HPNET_NEED_THROUGHPUT] = 3,
};

size_t hpnet_preference(HpnetNeed need, HpnetBackend order[HPNET_BACKEND__MAX])
{
    memcpy(order, preference[need], sizeof(preference[need]));
    return preference_len[need];
}

static void select_consider(HpnetCandidateList ***tail, HpnetBackend b,
                            const HpnetProbe *p, bool taken, const char *why)
{
    HpnetCandidate *c = g_new0(HpnetCandidate, 1);

    c->backend = b;
    c->available = p->available;
    c->taken = taken;
    c->reason = why ? g_strdup_printf("%s; %s", p->reason ?: "", why) :
                      g_strdup(p->reason ?: "");
    QAPI_LIST_APPEND(*tail, c);
}

bool hpnet_choose(HpnetNeed need, const HpnetBackend *forced,
                  const HpnetProbe probes[HPNET_BACKEND__MAX],
                  HpnetBackend *chosen, HpnetCandidateList **candidates,
                  Error **errp)
{
    HpnetCandidateList **tail = candidates;
    HpnetBackend order[HPNET_BACKEND__MAX];
    size_t n = hpnet_preference(need, order), i;
    bool found = false;

    while (*tail) {
        tail = &(*tail)->next;
    }
    if (forced) {
        const HpnetProbe *p = &probes[*forced];

        select_consider(&tail, *forced, p, p->available, "forced by backend=");
        if (!p->available) {
            error_setg(errp, "backend=%s is not available: %s",
                       HpnetBackend_str(*forced), p->reason ?: "");
            return false;
        }
        *chosen = *forced;
        return true;
    }
    for (i = 0; i < n; i++) {
        const HpnetProbe *p = &probes[order[i]];
        bool take = !found && p->available;

        select_consider(&tail, order[i], p, take,
                        found ? "not needed: an earlier choice was taken" :
                        take ? NULL : "not available");
        if (take) {
            *chosen = order[i];
            found = true;
        }
    }
    if (!found) {
        g_autoptr(GString) why = g_string_new("");

        for (i = 0; i < n; i++) {
            g_string_append_printf(why, "%s%s: %s", i ? "; " : "",
                                   HpnetBackend_str(order[i]),
                                   probes[order[i]].reason ?: "");
        }
        error_setg(errp, "no backend for need=%s is available: %s",
                   HpnetNeed_str(need), why->str);
        return false;
    }
    return true;
}
