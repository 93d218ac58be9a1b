/*
 * qemu-hpkvm-recover: put the host back after hpkvm VMs that did not exit
 *
 * A VM killed with SIGKILL (or a host QEMU crash) leaves its host changes
 * behind; its leases go with it.  The next hpkvm VM to start or exit
 * reconciles the host with the leases alive, which undoes them; this tool
 * does the same without starting a VM: with no lease left it replays the
 * whole journal, otherwise it hands back what the dead VMs held.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "accel/hpkvm/hpkvm-isolate.h"

static void recover_usage(const char *name)
{
    printf("Usage: %s [--host-root=DIR] [--state-dir=DIR]\n"
           "Undo the host changes of hpkvm VMs that are gone.\n"
           "  --host-root=DIR  for tests: a fake tree standing for /proc, "
           "/sys and cgroups\n"
           "  --state-dir=DIR  for tests: leases and journal under a fake "
           "root (a real host\n"
           "                   has one, /run/hpkvm)\n", name);
}

int main(int argc, char **argv)
{
    g_autofree char *root = g_strdup("/");
    g_autofree char *state_dir = g_strdup("/run/hpkvm");
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(HpkvmIsolation) rep = NULL;
    g_autoptr(HpkvmJournal) j = NULL;
    g_autofree HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    g_autofree char *leased = NULL;
    HpkvmIsolateRequest req = { 0 };
    HpkvmHost host;
    Error *err = NULL;
    int i, lock;

    error_init(argv[0]);
    for (i = 1; i < argc; i++) {
        if (g_str_has_prefix(argv[i], "--host-root=")) {
            g_free(root);
            root = g_strdup(argv[i] + strlen("--host-root="));
        } else if (g_str_has_prefix(argv[i], "--state-dir=")) {
            g_free(state_dir);
            state_dir = g_strdup(argv[i] + strlen("--state-dir="));
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            recover_usage(argv[0]);
            return 0;
        } else {
            error_report("unknown option '%s' (see --help)", argv[i]);
            return 2;
        }
    }

    hpkvm_host_init(&host, root);
    lock = hpkvm_leases_lock_host(&host, state_dir, &error_fatal);
    j = hpkvm_journal_open(&host, state_dir, &error_fatal);
    hpkvm_leases_scan(&host, state_dir, map, &error_fatal);
    hpkvm_leases_isolated(map);
    leased = hpkvm_cpuset_format(&map->leased);
    printf("journal %s%s: %s\n", host.root, hpkvm_journal_path(j),
           hpkvm_journal_empty(j) ? "empty" : "has changes");
    printf("cores leased by running VMs: %s\n", *leased ? leased : "none");

    req.host = &host;
    req.journal = j;
    req.leases = map;
    req.self = getpid();
    rep = hpkvm_isolate_reconcile(&req, failures, &err);
    close(lock);
    hpkvm_host_cleanup(&host);
    if (!rep) {
        error_report_err(err);
        return 1;
    }
    for (i = 0; i < failures->len; i++) {
        error_report("could not restore %s",
                     (char *)g_ptr_array_index(failures, i));
    }
    printf("%s\n", *leased ? "host reconciled with the running VMs' leases" :
           "host restored: journal replayed");
    return failures->len ? 1 : 0;
}
