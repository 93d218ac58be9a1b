/*
 * hpkvm: dynamic host isolation of leased cores
 *
 * Three kinds of host state are reconciled, each to "original minus the
 * cores leased by others":
 * - IRQs: /proc/irq/N/smp_affinity_list and default_smp_affinity (new
 *   IRQs);
 * - kernel workers: the unbound workqueues' cpumask;
 * - host tasks: with a cpuset controller (cgroup v1 or v2), the tasks of
 *   the root cgroup move into "hpkvm.host", whose cpuset is the cores no
 *   VM leases, so their children are born there; the cpusets of other
 *   cgroups are narrowed.  Without one, every task's affinity is narrowed.
 *   Kernel threads are never moved between cgroups: unbound ones have
 *   their affinity narrowed, per-CPU ones stay and are reported;
 * - the threads of the VMs holding leases (QEMU pins them itself): only
 *   the cores leased by other VMs are taken from their affinity.
 * The original value of each is journaled before its first change.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qapi/error.h"
#include "hpkvm-isolate.h"
#include "trace.h"

#define HOST_GROUP "hpkvm.host"

typedef struct Reconcile {
    const HpkvmIsolateRequest *req;
    const HpkvmHost *h;
    HpkvmJournal *j;
    HpkvmCpuSet online;
    HpkvmCpuSet spare;          /* online, leased by no one */
    HpkvmIsolation *report;
    HpkvmCoreIsolation **core;  /* by host CPU, for report_cores */
    char *mount;                /* cgroup mount with the cpuset, or NULL */
    bool v2;
} Reconcile;

/* Cores leased by VMs other than @owner (0: by any VM). */
static void isolate_leased_by_others(const HpkvmLeaseMap *map, pid_t owner,
                                     HpkvmCpuSet *out)
{
    unsigned cpu;

    hpkvm_cpuset_clear(out);
    HPKVM_CPUSET_FOREACH(cpu, &map->leased) {
        if (!owner || map->owner[cpu] != owner) {
            set_bit(cpu, out->bits);
        }
    }
}

static bool isolate_is_owner(const HpkvmLeaseMap *map, pid_t pid)
{
    unsigned cpu;

    HPKVM_CPUSET_FOREACH(cpu, &map->leased) {
        if (map->owner[cpu] == pid) {
            return true;
        }
    }
    return false;
}

/* @orig minus @taken; where nothing is left, the cores no one leases. */
static void isolate_narrowed(const Reconcile *r, const HpkvmCpuSet *orig,
                             const HpkvmCpuSet *taken, HpkvmCpuSet *out)
{
    hpkvm_cpuset_andnot(out, orig, taken);
    if (hpkvm_cpuset_empty(out)) {
        *out = r->spare;
    }
}

/*
 * Write @value to @path, journaling what it held first; false if the
 * journal failed (nothing written), else the write's result in *ret.
 */
static bool isolate_change_file(Reconcile *r, const char *path,
                                const char *orig, const char *value, int *ret,
                                Error **errp)
{
    bool first = !hpkvm_journal_original(r->j, HPKVM_UNDO_WRITE, path);

    if (!hpkvm_journal_record(r->j, HPKVM_UNDO_WRITE, path, orig, errp)) {
        return false;
    }
    *ret = hpkvm_host_write(r->h, path, value);
    trace_hpkvm_isolate_write(path, value, *ret);
    /* Refused, the file as it was: the record goes where a retry is. */
    if (*ret < 0 && first) {
        hpkvm_journal_forget(r->j, HPKVM_UNDO_WRITE, path);
    }
    return true;
}

/* A file's value before hpkvm first changed it, and its value now. */
static char *isolate_original_text(Reconcile *r, const char *path, char **now)
{
    const char *orig = hpkvm_journal_original(r->j, HPKVM_UNDO_WRITE, path);

    if (hpkvm_host_read(r->h, path, now) < 0) {
        return NULL;
    }
    g_strstrip(*now);
    return g_strdup(orig ?: *now);
}

static HpkvmHostTask *isolate_host_task(const HpkvmTask *t)
{
    HpkvmHostTask *ht = g_new0(HpkvmHostTask, 1);

    ht->pid = t->tid;
    ht->comm = g_strdup(t->comm);
    return ht;
}

/* Report a task, a cgroup or a control file that stays as it was. */
static void isolate_left_behind(Reconcile *r, const HpkvmTask *t,
                                const char *cgroup, const char *file,
                                const char *why)
{
    HpkvmLeftBehind *l = g_new0(HpkvmLeftBehind, 1);

    l->task = t ? isolate_host_task(t) : NULL;
    l->cgroup = g_strdup(cgroup);
    l->file = g_strdup(file);
    l->reason = g_strdup(why);
    QAPI_LIST_PREPEND(r->report->tasks_left, l);
}

static void isolate_note_irq(Reconcile *r, const HpkvmCpuSet *cores, int irq,
                             const char *name, int err)
{
    unsigned cpu;

    HPKVM_CPUSET_FOREACH(cpu, cores) {
        HpkvmCoreIsolation *c = r->core[cpu];
        HpkvmIrqLeft *left;

        if (!c) {
            continue;
        }
        if (err == -EIO && hpkvm_host_irq_per_cpu(r->h, irq)) {
            /* The core's own: nothing to move, nothing that failed. */
            left = g_new0(HpkvmIrqLeft, 1);
            left->irq = irq;
            left->handlers = g_strdup(name);
            left->reason = g_strdup("per-CPU: each core has its own");
            QAPI_LIST_PREPEND(c->irqs_per_cpu, left);
        } else if (err) {
            left = g_new0(HpkvmIrqLeft, 1);
            left->irq = irq;
            left->handlers = g_strdup(name);
            /*
             * EIO is how the kernel refuses an IRQ it cannot move (the
             * PIT's, a cascade, a per-CPU one): say that, not the errno.
             */
            left->reason = err == -EIO ?
                g_strdup("the kernel does not move it (smp_affinity: EIO)") :
                g_strdup_printf("smp_affinity: %s", strerror(-err));
            QAPI_LIST_PREPEND(c->irqs_left, left);
        } else {
            QAPI_LIST_PREPEND(c->irqs_moved, irq);
        }
    }
}

/* The names of an IRQ's handlers: the directories /proc/irq/N holds. */
static char *isolate_irq_name(Reconcile *r, const char *dir)
{
    g_auto(GStrv) names = hpkvm_host_list(r->h, dir);
    g_autoptr(GString) out = g_string_new("");
    int i;

    for (i = 0; names && names[i]; i++) {
        g_autofree char *sub = g_strdup_printf("%s/%s", dir, names[i]);
        g_autofree char *full = hpkvm_host_path(r->h, sub);

        if (g_file_test(full, G_FILE_TEST_IS_DIR)) {
            g_string_append_printf(out, "%s%s", out->len ? "," : "",
                                   names[i]);
        }
    }
    return g_string_free(g_steal_pointer(&out), false);
}

/*
 * A hexadecimal CPU mask file: default_smp_affinity (where new IRQs go)
 * or the workqueue cpumask (where unbound kernel workers run).
 */
static bool isolate_reconcile_mask(Reconcile *r, const char *path,
                                   const HpkvmCpuSet *leased, Error **errp)
{
    g_autofree char *now = NULL;
    g_autofree char *orig = isolate_original_text(r, path, &now);
    g_autofree char *mask = NULL;
    HpkvmCpuSet o, cur, want;
    int ret;

    if (!orig || !hpkvm_cpuset_parse_mask(orig, &o, path, NULL) ||
        !hpkvm_cpuset_parse_mask(now, &cur, path, NULL)) {
        return true;
    }
    isolate_narrowed(r, &o, leased, &want);
    if (hpkvm_cpuset_equal(&cur, &want)) {
        return true;
    }
    /* As many 32-bit words as the kernel wrote. */
    mask = hpkvm_cpuset_format_mask(&want, (strlen(orig) + 1) / 9 * 32);
    if (!isolate_change_file(r, path, orig, mask, &ret, errp)) {
        return false;
    }
    if (ret < 0) {
        isolate_left_behind(r, NULL, NULL, path, strerror(-ret));
    }
    return true;
}

static bool isolate_reconcile_irqs(Reconcile *r, const HpkvmCpuSet *leased,
                                   Error **errp)
{
    g_auto(GStrv) irqs = hpkvm_host_list(r->h, "/proc/irq");
    HpkvmCpuSet o, cur, want;
    int i, ret;

    if (!isolate_reconcile_mask(r, "/proc/irq/default_smp_affinity", leased,
                                errp)) {
        return false;
    }
    for (i = 0; irqs && irqs[i]; i++) {
        g_autofree char *dir = g_strdup_printf("/proc/irq/%s", irqs[i]);
        g_autofree char *path = g_strconcat(dir, "/smp_affinity_list", NULL);
        g_autofree char *text = NULL, *first = NULL, *name = NULL;
        g_autofree char *list = NULL;
        HpkvmCpuSet moved;
        int irq;

        if (qemu_strtoi(irqs[i], NULL, 10, &irq) < 0) {
            continue;
        }
        first = isolate_original_text(r, path, &text);
        if (!first || !hpkvm_cpuset_parse(first, &o, path, NULL) ||
            !hpkvm_cpuset_parse(text, &cur, path, NULL)) {
            continue;
        }
        isolate_narrowed(r, &o, leased, &want);
        if (hpkvm_cpuset_equal(&cur, &want)) {
            /* Already where it should be: report what it was moved off. */
            bitmap_and(moved.bits, o.bits, leased->bits,
                       HPKVM_MAX_HOST_CPUS);
            if (hpkvm_journal_original(r->j, HPKVM_UNDO_WRITE, path)) {
                isolate_note_irq(r, &moved, irq, "", 0);
            }
            continue;
        }
        list = hpkvm_cpuset_format(&want);
        name = isolate_irq_name(r, dir);
        if (!isolate_change_file(r, path, first, list, &ret, errp)) {
            return false;
        }
        bitmap_and(moved.bits, o.bits, leased->bits, HPKVM_MAX_HOST_CPUS);
        isolate_note_irq(r, &moved, irq, name, ret);
    }
    return true;
}

/* The cgroup of a process in the cpuset hierarchy, "/" for the root. */
static char *isolate_task_cgroup(Reconcile *r, pid_t pid)
{
    g_autofree char *path = g_strdup_printf(r->v2 ? "/proc/%d/cgroup" :
                                            "/proc/%d/cpuset", pid);
    g_autofree char *text = NULL;
    char *line;

    if (hpkvm_host_read(r->h, path, &text) < 0) {
        return NULL;
    }
    if (!r->v2) {
        return g_strdup(g_strstrip(text));
    }
    line = strstr(text, "0::");
    if (!line) {
        return NULL;
    }
    line += 3;
    return g_strndup(line, strcspn(line, "\n"));
}

/* Does the cgroup @rel (relative to the mount) hold a lease owner? */
static void isolate_owners_inside(Reconcile *r, const char *rel,
                                  HpkvmCpuSet *cores)
{
    const HpkvmLeaseMap *map = r->req->leases;
    unsigned cpu;

    hpkvm_cpuset_clear(cores);
    HPKVM_CPUSET_FOREACH(cpu, &map->leased) {
        g_autofree char *cg = isolate_task_cgroup(r, map->owner[cpu]);

        if (cg && g_str_has_prefix(cg, rel) &&
            (cg[strlen(rel)] == '/' || !cg[strlen(rel)])) {
            set_bit(cpu, cores->bits);
        }
    }
}

typedef struct Group {
    char *rel;                  /* "/a/b" under the mount */
    char *path;                 /* its cpuset.cpus on the host */
    char *orig;
    bool widen;                 /* the new value holds the current one */
    HpkvmCpuSet want;
} Group;

static void isolate_group_free(gpointer p)
{
    Group *g = p;

    g_free(g->rel);
    g_free(g->path);
    g_free(g->orig);
    g_free(g);
}

/* Existing cgroups below @rel, parents before children. */
static void isolate_collect_groups(Reconcile *r, const char *rel,
                                   const HpkvmCpuSet *leased, GPtrArray *out)
{
    g_autofree char *dir = g_strconcat(r->mount, rel, NULL);
    g_auto(GStrv) names = hpkvm_host_list(r->h, dir);
    int i;

    for (i = 0; names && names[i]; i++) {
        g_autofree char *sub = g_strdup_printf("%s/%s", rel, names[i]);
        g_autofree char *cpus = g_strdup_printf("%s%s/cpuset.cpus",
                                                r->mount, sub);
        g_autofree char *now = NULL;
        HpkvmCpuSet o, cur, inside, taken;
        char *orig;
        Group *g;

        if (!strcmp(sub, "/" HOST_GROUP) ||
            !hpkvm_host_exists(r->h, cpus)) {
            continue;
        }
        orig = isolate_original_text(r, cpus, &now);
        if (!orig) {
            /* Unreadable: left as it is, its children are not. */
            isolate_collect_groups(r, sub, leased, out);
            continue;
        }
        g = g_new0(Group, 1);
        g->rel = g_steal_pointer(&sub);
        g->orig = orig;
        g->path = g_steal_pointer(&cpus);
        g_ptr_array_add(out, g);
        if (!hpkvm_cpuset_parse(now, &cur, g->path, NULL) ||
            !hpkvm_cpuset_parse(g->orig, &o, g->path, NULL)) {
            g->widen = true;
            g->want = cur;
        } else {
            /* v2: empty means the parent's; a top-level parent is root. */
            if (hpkvm_cpuset_empty(&o)) {
                o = r->online;
            }
            if (hpkvm_cpuset_empty(&cur)) {
                cur = r->online;
            }
            isolate_owners_inside(r, g->rel, &inside);
            hpkvm_cpuset_andnot(&taken, leased, &inside);
            hpkvm_cpuset_andnot(&g->want, &o, &taken);
            if (hpkvm_cpuset_equal(&g->want, &o) && !*g->orig) {
                hpkvm_cpuset_clear(&g->want);   /* back to inheriting */
            }
            hpkvm_cpuset_andnot(&taken, &cur, &g->want);
            g->widen = hpkvm_cpuset_empty(&taken);
        }
        isolate_collect_groups(r, g->rel, leased, out);
    }
}

static bool isolate_write_group(Reconcile *r, Group *g, Error **errp)
{
    g_autofree char *now = NULL;
    g_autofree char *list = NULL;
    HpkvmCpuSet cur;
    int ret;

    if (hpkvm_host_read(r->h, g->path, &now) < 0 ||
        !hpkvm_cpuset_parse(now, &cur, g->path, NULL) ||
        hpkvm_cpuset_equal(&cur, &g->want)) {
        return true;
    }
    if (hpkvm_cpuset_empty(&g->want) && !*g->orig) {
        list = g_strdup("");
    } else if (hpkvm_cpuset_empty(&g->want)) {
        isolate_left_behind(r, NULL, g->rel, NULL,
                            "its cpuset has only leased cores; left as it is");
        return true;
    } else {
        list = hpkvm_cpuset_format(&g->want);
    }
    if (!isolate_change_file(r, g->path, g->orig, list, &ret, errp)) {
        return false;
    }
    if (ret < 0) {
        g_autofree char *why = g_strdup_printf("cpuset.cpus: %s",
                                               strerror(-ret));

        isolate_left_behind(r, NULL, g->rel, NULL, why);
    }
    return true;
}

/* Narrowed cgroups: children first; widened ones: parents first. */
static bool isolate_reconcile_groups(Reconcile *r, const HpkvmCpuSet *leased,
                                     Error **errp)
{
    g_autoptr(GPtrArray) groups =
        g_ptr_array_new_with_free_func(isolate_group_free);
    int i;

    isolate_collect_groups(r, "", leased, groups);
    for (i = 0; i < groups->len; i++) {
        Group *g = g_ptr_array_index(groups, i);

        if (g->widen && !isolate_write_group(r, g, errp)) {
            return false;
        }
    }
    for (i = groups->len - 1; i >= 0; i--) {
        Group *g = g_ptr_array_index(groups, i);

        if (!g->widen && !isolate_write_group(r, g, errp)) {
            return false;
        }
        if (hpkvm_journal_original(r->j, HPKVM_UNDO_WRITE, g->path)) {
            QAPI_LIST_PREPEND(r->report->groups_narrowed, g_strdup(g->rel));
        }
    }
    return true;
}

/* hpkvm.host: the cores no VM leases, for the root cgroup's tasks. */
static bool isolate_host_group(Reconcile *r, Error **errp)
{
    g_autofree char *dir = g_strconcat(r->mount, "/" HOST_GROUP, NULL);
    g_autofree char *root_procs = g_strconcat(r->mount, "/cgroup.procs",
                                              NULL);
    g_autofree char *cpus_path = g_strconcat(dir, "/cpuset.cpus", NULL);
    g_autofree char *spare = hpkvm_cpuset_format(&r->spare);
    int ret;

    if (r->v2) {
        g_autofree char *ctl = g_strconcat(r->mount,
                                           "/cgroup.subtree_control", NULL);
        g_autofree char *enabled = NULL;

        if (hpkvm_host_read(r->h, ctl, &enabled) == 0 &&
            !strstr(enabled, "cpuset")) {
            if (!hpkvm_journal_record(r->j, HPKVM_UNDO_CONTROLLER, ctl,
                                      "cpuset", errp)) {
                return false;
            }
            ret = hpkvm_host_write(r->h, ctl, "+cpuset");
            trace_hpkvm_isolate_write(ctl, "+cpuset", ret);
        }
    }
    if (!hpkvm_host_exists(r->h, dir)) {
        if (!hpkvm_journal_record(r->j, HPKVM_UNDO_MKDIR, dir, root_procs,
                                  errp)) {
            return false;
        }
        ret = hpkvm_host_mkdir(r->h, dir);
        trace_hpkvm_isolate_write(dir, "mkdir", ret);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "cannot create the cgroup "
                             "%s%s", r->h->root, dir);
            return false;
        }
        if (!r->v2) {
            /* A v1 cpuset takes no task before it has memory nodes. */
            g_autofree char *mems = g_strconcat(r->mount, "/cpuset.mems",
                                                NULL);
            g_autofree char *dir_mems = g_strconcat(dir, "/cpuset.mems",
                                                    NULL);
            g_autofree char *text = NULL;

            if (hpkvm_host_read(r->h, mems, &text) == 0) {
                hpkvm_host_write(r->h, dir_mems, g_strstrip(text));
            }
        }
    }
    ret = hpkvm_host_write(r->h, cpus_path, spare);
    trace_hpkvm_isolate_write(cpus_path, spare, ret);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot set %s%s to %s",
                         r->h->root, cpus_path, spare);
        return false;
    }
    return true;
}

static void isolate_task_left(Reconcile *r, const HpkvmTask *t, const char *why)
{
    isolate_left_behind(r, t, NULL, NULL, why);
}

/* Narrow one thread's affinity to its original minus @taken. */
static bool isolate_narrow_affinity(Reconcile *r, const HpkvmTask *t,
                                    const HpkvmCpuSet *taken, Error **errp)
{
    g_autofree char *key = hpkvm_journal_task_key(t->pid, t->tid, t->start);
    const char *first = hpkvm_journal_original(r->j, HPKVM_UNDO_AFFINITY,
                                               key);
    g_autofree char *orig = first ? g_strdup(first) :
                            hpkvm_cpuset_format(&t->allowed);
    HpkvmCpuSet o, want;
    int ret;

    if (!hpkvm_cpuset_parse(orig, &o, "journal", NULL)) {
        return true;
    }
    hpkvm_cpuset_andnot(&want, &o, taken);
    if (hpkvm_cpuset_empty(&want)) {
        want = r->spare;
    }
    if (hpkvm_cpuset_equal(&want, &t->allowed)) {
        if (first) {
            r->report->tasks_moved++;
        }
        return true;
    }
    if (!r->h->set_affinity) {
        isolate_task_left(r, t,
                          "its affinity can only be set on the real host");
        return true;
    }
    if (!hpkvm_journal_record(r->j, HPKVM_UNDO_AFFINITY, key, orig, errp)) {
        return false;
    }
    ret = r->h->set_affinity(t->tid, &want);
    trace_hpkvm_isolate_affinity(t->tid, t->comm, ret);
    if (ret < 0) {
        isolate_task_left(r, t, strerror(-ret));
    } else {
        r->report->tasks_moved++;
    }
    return true;
}

static void isolate_note_kthread(Reconcile *r, const HpkvmTask *t)
{
    unsigned cpu;

    HPKVM_CPUSET_FOREACH(cpu, &t->allowed) {
        if (r->core[cpu]) {
            QAPI_LIST_PREPEND(r->core[cpu]->kthreads_left,
                              isolate_host_task(t));
        }
    }
}

static bool isolate_move_process(Reconcile *r, const HpkvmTask *t, Error **errp)
{
    g_autofree char *cg = isolate_task_cgroup(r, t->pid);
    g_autofree char *key = NULL, *from = NULL, *to = NULL, *pid = NULL;
    int ret;

    if (!cg || strcmp(cg, "/")) {
        /* Another cgroup: its narrowed cpuset keeps it off. */
        return true;
    }
    key = hpkvm_journal_task_key(t->pid, t->tid, t->start);
    from = g_strconcat(r->mount, "/cgroup.procs", NULL);
    to = g_strconcat(r->mount, "/" HOST_GROUP "/cgroup.procs", NULL);
    pid = g_strdup_printf("%d", t->pid);
    if (!hpkvm_journal_record(r->j, HPKVM_UNDO_MOVE, key, from, errp)) {
        return false;
    }
    ret = hpkvm_host_append(r->h, to, pid);
    trace_hpkvm_isolate_move(t->pid, t->comm, ret);
    if (ret < 0) {
        isolate_task_left(r, t, strerror(-ret));
    } else {
        r->report->tasks_moved++;
    }
    return true;
}

/*
 * A VM's QEMU started from a shell that isolation had moved into
 * hpkvm.host was born there, off the cores it now leases, and could
 * never bind its vCPUs: it goes back to the root cgroup, where it would
 * have been born without isolation.  That is where the restore puts
 * every task of hpkvm.host anyway, so there is nothing to journal.
 */
static void isolate_owner_leave_host_group(Reconcile *r, const HpkvmTask *t)
{
    g_autofree char *cg = isolate_task_cgroup(r, t->pid);
    g_autofree char *root = NULL, *pid = NULL;
    int ret;

    if (g_strcmp0(cg, "/" HOST_GROUP)) {
        return;
    }
    root = g_strconcat(r->mount, "/cgroup.procs", NULL);
    pid = g_strdup_printf("%d", t->pid);
    ret = hpkvm_host_append(r->h, root, pid);
    trace_hpkvm_isolate_move(t->pid, t->comm, ret);
    if (ret < 0) {
        isolate_task_left(r, t, "a VM born in " HOST_GROUP " cannot leave it");
    }
}

/*
 * Does process @pid, which holds no lease, run a vCPU the kernel bound to
 * a leased core?  Such a vCPU runs only while its thread is allowed that
 * core alone (kvm/patches/0004): moving the thread, or its process to
 * another cgroup, would stop it.  It is the QEMU handing its cores over
 * in a cpr-transfer, between the next QEMU's adoption of its leases and
 * its own exit, or a VMM other than QEMU: a thread on a single leased
 * core, in a process holding a KVM vCPU.
 */
static bool isolate_runs_bound_vcpu(Reconcile *r, pid_t pid,
                                    const HpkvmCpuSet *leased)
{
    g_autoptr(GArray) tids = hpkvm_host_tids(r->h, pid);
    int k;

    for (k = 0; k < tids->len; k++) {
        HpkvmTask th;

        if (hpkvm_host_task(r->h, pid, g_array_index(tids, pid_t, k), &th) &&
            hpkvm_cpuset_count(&th.allowed) == 1 &&
            hpkvm_cpuset_has(leased, hpkvm_cpuset_next(&th.allowed, 0))) {
            return hpkvm_host_holds_kvm_vcpu(r->h, pid);
        }
    }
    return false;
}

static bool isolate_reconcile_tasks(Reconcile *r, const HpkvmCpuSet *leased,
                                    Error **errp)
{
    const HpkvmLeaseMap *map = r->req->leases;
    g_autoptr(GArray) pids = hpkvm_host_pids(r->h);
    int i, k;

    if (!isolate_reconcile_mask(r, "/sys/devices/virtual/workqueue/cpumask",
                                leased, errp)) {
        return false;
    }
    if (r->mount && !isolate_host_group(r, errp)) {
        return false;
    }
    if (r->mount && !isolate_reconcile_groups(r, leased, errp)) {
        return false;
    }
    for (i = 0; i < pids->len; i++) {
        pid_t pid = g_array_index(pids, pid_t, i);
        bool owner = isolate_is_owner(map, pid);
        g_autoptr(GArray) tids = NULL;
        HpkvmCpuSet taken;
        HpkvmTask t;

        if (!hpkvm_host_task(r->h, pid, pid, &t)) {
            continue;
        }
        if (owner && r->mount) {
            isolate_owner_leave_host_group(r, &t);
        }
        if (pid == r->req->self) {
            continue;
        }
        if (t.kthread) {
            if (hpkvm_cpuset_count(&t.allowed) == 1) {
                isolate_note_kthread(r, &t);
            } else if (!t.pinned_by_kernel &&
                       !isolate_narrow_affinity(r, &t, leased, errp)) {
                return false;
            }
            /*
             * Kernel-pinned ones on several CPUs are unbound workqueue
             * workers and IRQ threads: they follow the workqueue cpumask
             * and their IRQ's affinity.
             */
            continue;
        }
        if (!owner && isolate_runs_bound_vcpu(r, pid, leased)) {
            isolate_task_left(r, &t, "it runs a vCPU bound to a leased core "
                              "(a QEMU handing its cores over, or another "
                              "VMM's): moved, the vCPU would stop");
            continue;
        }
        if (r->mount && !owner) {
            if (!isolate_move_process(r, &t, errp)) {
                return false;
            }
            continue;
        }
        /* A VM's own threads, or any task without a cpuset. */
        isolate_leased_by_others(map, owner ? pid : 0, &taken);
        tids = hpkvm_host_tids(r->h, pid);
        for (k = 0; k < tids->len; k++) {
            HpkvmTask th;

            if (hpkvm_host_task(r->h, pid, g_array_index(tids, pid_t, k),
                                &th) &&
                !isolate_narrow_affinity(r, &th, &taken, errp)) {
                return false;
            }
        }
    }
    return true;
}

static HpkvmIsolation *isolate_new_report(const HpkvmHost *h,
                                          const HpkvmCpuSet *cores,
                                          HpkvmCoreIsolation **index)
{
    HpkvmIsolation *rep = g_new0(HpkvmIsolation, 1);
    HpkvmCoreIsolationList **tail = &rep->cores;
    HpkvmCpuSet nohz, isol;
    unsigned cpu;

    hpkvm_host_nohz_full(h, &nohz);
    if (!hpkvm_host_read_cpus(h, "/sys/devices/system/cpu/isolated", &isol,
                              NULL)) {
        hpkvm_cpuset_clear(&isol);
    }
    rep->reason = g_strdup("");
    rep->journal = g_strdup("");
    HPKVM_CPUSET_FOREACH(cpu, cores) {
        HpkvmCoreIsolation *c = g_new0(HpkvmCoreIsolation, 1);

        c->host_cpu = cpu;
        c->nohz = hpkvm_cpuset_has(&nohz, cpu) ? HPKVM_NOHZ_STATIC :
                                                HPKVM_NOHZ_OFF;
        c->isolcpus = hpkvm_cpuset_has(&isol, cpu);
        QAPI_LIST_APPEND(tail, c);
        if (index) {
            index[cpu] = c;
        }
    }
    return rep;
}

HpkvmIsolation *hpkvm_isolate_report_off(const HpkvmHost *h,
                                         const HpkvmCpuSet *cores,
                                         OnOffAuto requested,
                                         const char *reason)
{
    HpkvmIsolation *rep = isolate_new_report(h, cores, NULL);

    rep->requested = requested;
    rep->method = HPKVM_TASK_ISOLATION_NONE;
    g_free(rep->reason);
    rep->reason = g_strdup(reason);
    return rep;
}

HpkvmIsolation *hpkvm_isolate_reconcile(const HpkvmIsolateRequest *req,
                                        GPtrArray *failures, Error **errp)
{
    g_autofree HpkvmCoreIsolation **index =
        g_new0(HpkvmCoreIsolation *, HPKVM_MAX_HOST_CPUS);
    g_autoptr(HpkvmIsolation) rep = isolate_new_report(req->host,
                                                       &req->report_cores,
                                                       index);
    const HpkvmCpuSet *leased = &req->leases->leased;
    Reconcile r = {
        .req = req,
        .h = req->host,
        .j = req->journal,
        .report = rep,
        .core = index,
    };
    HpkvmCoreIsolationList *c;
    bool ok;

    rep->requested = ON_OFF_AUTO_ON;
    g_free(rep->journal);
    rep->journal = g_strdup(hpkvm_journal_path(req->journal));
    if (hpkvm_cpuset_empty(leased)) {
        hpkvm_journal_replay(req->journal, failures);
        rep->method = HPKVM_TASK_ISOLATION_NONE;
        return g_steal_pointer(&rep);
    }
    if (!hpkvm_host_read_cpus(req->host, "/sys/devices/system/cpu/online",
                              &r.online, errp)) {
        return NULL;
    }
    hpkvm_cpuset_andnot(&r.spare, &r.online, leased);
    if (hpkvm_cpuset_empty(&r.spare)) {
        error_setg(errp, "every online host core is leased: leave "
                   "one for the host");
        return NULL;
    }
    /* The hierarchy the journal's allow-list takes cgroup records in. */
    r.mount = g_strdup(hpkvm_journal_cpuset_mount(r.j, &r.v2));
    rep->method = !r.mount ? HPKVM_TASK_ISOLATION_AFFINITY :
                  r.v2 ? HPKVM_TASK_ISOLATION_CGROUP_V2 :
                  HPKVM_TASK_ISOLATION_CGROUP_V1;
    ok = isolate_reconcile_irqs(&r, leased, errp) &&
         isolate_reconcile_tasks(&r, leased, errp);
    g_free(r.mount);
    if (!ok) {
        return NULL;
    }
    rep->active = true;
    for (c = rep->cores; c; c = c->next) {
        if (req->dynamic_nohz) {
            c->value->nohz = HPKVM_NOHZ_DYNAMIC;
        }
    }
    return g_steal_pointer(&rep);
}
