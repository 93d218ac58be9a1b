/*
 * qemu-hpkvm-helper: which users may lease which host cores
 *
 * The host's policy, in the manner of qemu-bridge-helper's bridge.conf:
 * one rule per line, "#" starts a comment.
 *
 *   allow CPULIST user NAME|UID
 *   allow CPULIST group NAME|GID
 *
 * A client may lease a core if a rule allows it to its user, or to one
 * of its groups; root may lease any core.  Without rules no one else
 * may lease anything.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef TOOLS_HPKVM_HELPER_POLICY_H
#define TOOLS_HPKVM_HELPER_POLICY_H

#include "accel/hpkvm/hpkvm-cpuset.h"

#define HPKVM_HELPER_POLICY "/etc/qemu/hpkvm-helper.conf"

typedef struct HpkvmHelperPolicy HpkvmHelperPolicy;

/* Who asks, as the kernel says (SO_PEERCRED, /proc/PID/status). */
typedef struct HpkvmPeer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    GArray *groups;             /* of gid_t: the supplementary groups */
} HpkvmPeer;

/* The rules of @text; @shown names it in errors (with the line). */
HpkvmHelperPolicy *hpkvm_helper_policy_parse(const char *text,
                                             const char *shown,
                                             Error **errp);

/*
 * The policy file @path: a missing file is no rule; one that is not a
 * regular file of root's (or of the helper's user) closed to writes by
 * others is refused, as is any line that is not a rule.
 */
HpkvmHelperPolicy *hpkvm_helper_policy_load(const char *path, Error **errp);

/* Whether @peer may lease every core of @cores; the error says why not. */
bool hpkvm_helper_policy_allows(const HpkvmHelperPolicy *p,
                                const HpkvmPeer *peer,
                                const HpkvmCpuSet *cores, Error **errp);

void hpkvm_helper_policy_free(HpkvmHelperPolicy *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(HpkvmHelperPolicy, hpkvm_helper_policy_free)

#endif
