/*
 * Unit tests of hpkvm's host isolation over fake host trees: IRQs, tasks
 * and cpusets moved off leased cores and restored exactly, the journal
 * replayed after a simulated crash, several VMs' leases together, and the
 * leases themselves; and that none of it can be turned against the host:
 * forged or corrupted journals, planted symbolic links and an untrusted
 * state directory never make hpkvm write where it should not.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qapi/qapi-types-hpkvm.h"
#include "qemu/crc32c.h"
#include "accel/hpkvm/hpkvm-isolate.h"
#include "accel/hpkvm/hpkvm-state-dir.h"

#define PF_KTHREAD              0x00200000
#define PF_NO_SETAFFINITY       0x04000000

typedef enum Flavour { CGROUP_V1, CGROUP_V2, NO_CPUSET } Flavour;

typedef struct Fixture {
    char *root;
    HpkvmHost host;
    Flavour flavour;
} Fixture;

/* The fake affinity syscall edits the fake /proc, as the kernel would. */
static Fixture *current;

static void put(Fixture *f, const char *path, const char *text)
{
    g_autofree char *full = g_strconcat(f->root, path, NULL);
    g_autofree char *dir = g_path_get_dirname(full);

    g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
    g_assert_true(g_file_set_contents(full, text, -1, NULL));
}

static char *get(Fixture *f, const char *path)
{
    g_autofree char *full = g_strconcat(f->root, path, NULL);
    char *text = NULL;

    if (!g_file_get_contents(full, &text, NULL, NULL)) {
        return NULL;
    }
    return g_strstrip(text);
}

static bool exists(Fixture *f, const char *path)
{
    g_autofree char *full = g_strconcat(f->root, path, NULL);

    return access(full, F_OK) == 0;
}

static void put_task(Fixture *f, pid_t pid, const char *comm,
                     unsigned flags, const char *allowed, const char *cg)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d", pid);
    g_autofree char *stat = g_strdup_printf(
        "%d (%s) S 1 %d %d 0 -1 %u 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n",
        pid, comm, pid, pid, flags, 1000 + pid);
    g_autofree char *status = g_strdup_printf(
        "Name:\t%s\nCpus_allowed:\tf\nCpus_allowed_list:\t%s\n", comm,
        allowed);
    g_autofree char *p = NULL;

    p = g_strconcat(dir, "/stat", NULL);
    put(f, p, stat);
    g_free(p);
    p = g_strconcat(dir, "/status", NULL);
    put(f, p, status);
    g_free(p);
    p = g_strconcat(dir, f->flavour == CGROUP_V2 ? "/cgroup" : "/cpuset",
                    NULL);
    put(f, p, f->flavour == CGROUP_V2 ? g_strdup_printf("0::%s\n", cg) : cg);
}

static int fake_set_affinity(pid_t tid, const HpkvmCpuSet *cpus)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", tid);
    g_autofree char *list = hpkvm_cpuset_format(cpus);
    g_autofree char *status = g_strdup_printf(
        "Name:\tx\nCpus_allowed_list:\t%s\n", list);

    if (!exists(current, path)) {
        return -ESRCH;
    }
    put(current, path, status);
    return 0;
}

static char *affinity(Fixture *f, pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", pid);
    g_autofree char *status = get(f, path);
    const char *list = strstr(status, "Cpus_allowed_list:\t");

    g_assert_nonnull(list);
    return g_strstrip(g_strdup(list + strlen("Cpus_allowed_list:\t")));
}

static const char *const CG = "/sys/fs/cgroup/cpuset";

static char *cg_path(Fixture *f, const char *rel)
{
    return g_strconcat(f->flavour == CGROUP_V2 ? "/sys/fs/cgroup" : CG, rel,
                       NULL);
}

/*
 * Four cores; three IRQs, one of them (11) only on core 2; a user task
 * in the root cgroup (100) and one in /machine (101); cgroups /machine,
 * /machine/vm1 (on cores 2-3 only), /user and /user/a; kthreadd (2), a
 * per-CPU kthread on core 2 (20), an unbound workqueue worker (21).
 */
static void make_host(Fixture *f, Flavour flavour)
{
    g_autofree char *machine = NULL, *vm = NULL, *p = NULL;

    f->flavour = flavour;
    f->root = g_dir_make_tmp("hpkvm-isolate-XXXXXX", NULL);
    g_assert_nonnull(f->root);
    hpkvm_host_init(&f->host, f->root);
    g_assert_false(f->host.real);
    f->host.set_affinity = fake_set_affinity;
    current = f;

    put(f, "/sys/devices/system/cpu/online", "0-3\n");
    put(f, "/sys/devices/system/cpu/present", "0-3\n");
    put(f, "/sys/devices/system/cpu/nohz_full", "(null)\n");
    put(f, "/sys/devices/system/cpu/isolated", "3\n");
    put(f, "/sys/devices/virtual/workqueue/cpumask", "f\n");
    put(f, "/proc/irq/default_smp_affinity", "f\n");
    put(f, "/proc/irq/10/smp_affinity_list", "0-3\n");
    put(f, "/proc/irq/10/eth0-rx-0/.keep", "");
    put(f, "/proc/irq/11/smp_affinity_list", "2\n");
    put(f, "/proc/irq/12/smp_affinity_list", "0-1\n");

    switch (flavour) {
    case CGROUP_V1:
        put(f, "/proc/mounts", "proc /proc proc rw 0 0\n"
            "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
            "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n");
        break;
    case CGROUP_V2:
        put(f, "/proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n");
        put(f, "/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io\n");
        put(f, "/sys/fs/cgroup/cgroup.subtree_control", "cpu\n");
        break;
    case NO_CPUSET:
        put(f, "/proc/mounts", "proc /proc proc rw 0 0\n");
        break;
    }
    if (flavour != NO_CPUSET) {
        p = cg_path(f, "/cpuset.cpus");
        put(f, p, "0-3\n");
        g_free(p);
        p = cg_path(f, "/cpuset.mems");
        put(f, p, "0\n");
        g_free(p);
        p = cg_path(f, "/cgroup.procs");
        put(f, p, "");
        machine = cg_path(f, "/machine/cpuset.cpus");
        put(f, machine, flavour == CGROUP_V2 ? "\n" : "0-3\n");
        vm = cg_path(f, "/machine/vm1/cpuset.cpus");
        put(f, vm, "2-3\n");
        /*
         * A cgroup and its child on every core: on v1 the kernel takes
         * the child narrowed before its parent, widened after it.
         */
        p = cg_path(f, "/user/cpuset.cpus");
        put(f, p, flavour == CGROUP_V2 ? "\n" : "0-3\n");
        g_free(p);
        p = cg_path(f, "/user/a/cpuset.cpus");
        put(f, p, flavour == CGROUP_V2 ? "\n" : "0-3\n");
    }
    put_task(f, 100, "sshd", 0, "0-3", "/");
    put_task(f, 101, "qemu-other", 0, "0-3", "/machine");
    put_task(f, 2, "kthreadd", PF_KTHREAD, "0-3", "/");
    put_task(f, 20, "ksoftirqd/2", PF_KTHREAD | PF_NO_SETAFFINITY, "2", "/");
    put_task(f, 21, "kworker/u8:0", PF_KTHREAD | PF_NO_SETAFFINITY, "0-3",
             "/");
}

static void remove_tree(const char *path)
{
    g_autoptr(GDir) dir = g_dir_open(path, 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *sub = g_build_filename(path, name, NULL);

        if (g_file_test(sub, G_FILE_TEST_IS_DIR) &&
            !g_file_test(sub, G_FILE_TEST_IS_SYMLINK)) {
            remove_tree(sub);
        } else {
            unlink(sub);
        }
    }
    rmdir(path);
}

static void destroy_host(Fixture *f)
{
    remove_tree(f->root);
    hpkvm_host_cleanup(&f->host);
    g_free(f->root);
    current = NULL;
}

static void lease(HpkvmLeaseMap *map, const char *cores, pid_t owner)
{
    HpkvmCpuSet set;
    unsigned cpu;

    g_assert_true(hpkvm_cpuset_parse(cores, &set, "test", &error_abort));
    HPKVM_CPUSET_FOREACH(cpu, &set) {
        set_bit(cpu, map->leased.bits);
        map->owner[cpu] = owner;
    }
}

static HpkvmIsolation *reconcile(Fixture *f, const HpkvmLeaseMap *map,
                                 const char *report)
{
    g_autoptr(HpkvmJournal) j = hpkvm_journal_open(&f->host, "/run/hpkvm",
                                                    &error_abort);
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    HpkvmIsolateRequest req = {
        .host = &f->host,
        .journal = j,
        .leases = map,
    };
    HpkvmIsolation *rep;
    guint i;

    hpkvm_cpuset_parse(report, &req.report_cores, "report", &error_abort);
    rep = hpkvm_isolate_reconcile(&req, failures, &error_abort);
    for (i = 0; i < failures->len; i++) {
        g_test_message("failure: %s", (char *)failures->pdata[i]);
    }
    g_assert_cmpuint(failures->len, ==, 0);
    return rep;
}

static void assert_file(Fixture *f, const char *path, const char *want)
{
    g_autofree char *got = get(f, path);

    if (g_strcmp0(got, want)) {
        g_error("%s: got '%s', want '%s'", path, got, want);
    }
}

static bool str_in(strList *list, const char *prefix)
{
    for (; list; list = list->next) {
        if (g_str_has_prefix(list->value, prefix)) {
            return true;
        }
    }
    return false;
}

static bool task_in(HpkvmHostTaskList *list, int64_t pid, const char *comm)
{
    for (; list; list = list->next) {
        if (list->value->pid == pid && !g_strcmp0(list->value->comm, comm)) {
            return true;
        }
    }
    return false;
}

/* Is the task @pid (or, for pid 0, the cgroup @what) left with @why...? */
static bool left_in(HpkvmLeftBehindList *list, int64_t pid, const char *what,
                    const char *why)
{
    for (; list; list = list->next) {
        HpkvmLeftBehind *l = list->value;
        bool match = pid ? l->task && l->task->pid == pid &&
                           !g_strcmp0(l->task->comm, what) :
                           !g_strcmp0(l->cgroup, what);

        if (match && g_str_has_prefix(l->reason, why)) {
            return true;
        }
    }
    return false;
}

static bool irq_left_in(HpkvmIrqLeftList *list, int64_t irq)
{
    for (; list; list = list->next) {
        if (list->value->irq == irq && *list->value->reason) {
            return true;
        }
    }
    return false;
}

static bool int_in(intList *list, int64_t value)
{
    for (; list; list = list->next) {
        if (list->value == value) {
            return true;
        }
    }
    return false;
}

static bool line_in(Fixture *f, const char *path, const char *line)
{
    g_autofree char *text = get(f, path);
    g_auto(GStrv) lines = g_strsplit(text ?: "", "\n", -1);

    return g_strv_contains((const char * const *)lines, line);
}

/* The state of make_host(), which every restore must give back. */
static void assert_original(Fixture *f)
{
    g_autofree char *host = cg_path(f, "/hpkvm.host");
    g_autofree char *machine = cg_path(f, "/machine/cpuset.cpus");
    g_autofree char *kthreadd = affinity(f, 2);
    g_autofree char *sshd = affinity(f, 100);

    assert_file(f, "/proc/irq/default_smp_affinity", "f");
    assert_file(f, "/sys/devices/virtual/workqueue/cpumask", "f");
    assert_file(f, "/proc/irq/10/smp_affinity_list", "0-3");
    assert_file(f, "/proc/irq/11/smp_affinity_list", "2");
    assert_file(f, "/proc/irq/12/smp_affinity_list", "0-1");
    g_assert_cmpstr(kthreadd, ==, "0-3");
    g_assert_cmpstr(sshd, ==, "0-3");
    g_assert_false(exists(f, "/run/hpkvm/host.journal"));
    if (f->flavour != NO_CPUSET) {
        g_autofree char *user = cg_path(f, "/user/cpuset.cpus");
        g_autofree char *user_a = cg_path(f, "/user/a/cpuset.cpus");
        const char *all = f->flavour == CGROUP_V2 ? "" : "0-3";

        g_assert_false(exists(f, host));
        assert_file(f, machine, all);
        assert_file(f, user, all);
        assert_file(f, user_a, all);
    }
    if (f->flavour == CGROUP_V2) {
        /* cgroupfs would take "-cpuset" back out of "cpu cpuset" */
        assert_file(f, "/sys/fs/cgroup/cgroup.subtree_control", "-cpuset");
    }
}

/* Cores 2-3 leased by one VM: the state isolation must give. */
static void assert_isolated(Fixture *f, HpkvmIsolation *rep)
{
    HpkvmCoreIsolation *c2 = rep->cores->value;
    HpkvmCoreIsolation *c3 = rep->cores->next->value;
    g_autofree char *kthreadd = affinity(f, 2);

    g_assert_true(rep->active);
    assert_file(f, "/proc/irq/default_smp_affinity", "00000003");
    assert_file(f, "/sys/devices/virtual/workqueue/cpumask", "00000003");
    assert_file(f, "/proc/irq/10/smp_affinity_list", "0-1");
    /* Only on a leased core: to the cores no one leases. */
    assert_file(f, "/proc/irq/11/smp_affinity_list", "0-1");
    assert_file(f, "/proc/irq/12/smp_affinity_list", "0-1");
    g_assert_cmpstr(kthreadd, ==, "0-1");

    g_assert_cmpint(c2->host_cpu, ==, 2);
    g_assert_cmpint(c3->host_cpu, ==, 3);
    g_assert_true(int_in(c2->irqs_moved, 10));
    g_assert_true(int_in(c2->irqs_moved, 11));
    g_assert_false(int_in(c2->irqs_moved, 12));
    g_assert_true(int_in(c3->irqs_moved, 10));
    g_assert_false(int_in(c3->irqs_moved, 11));
    g_assert_true(task_in(c2->kthreads_left, 20, "ksoftirqd/2"));
    g_assert_false(task_in(c2->kthreads_left, 21, "kworker/u8:0"));
    g_assert_null(c3->kthreads_left);
    g_assert_false(c2->isolcpus);
    g_assert_true(c3->isolcpus);
    g_assert_cmpint(c2->nohz, ==, HPKVM_NOHZ_OFF);
    g_assert_true(exists(f, "/run/hpkvm/host.journal"));
}

static void assert_cpuset_isolated(Fixture *f, HpkvmIsolation *rep)
{
    g_autofree char *host_cpus = cg_path(f, "/hpkvm.host/cpuset.cpus");
    g_autofree char *host_procs = cg_path(f, "/hpkvm.host/cgroup.procs");
    g_autofree char *machine = cg_path(f, "/machine/cpuset.cpus");
    g_autofree char *vm = cg_path(f, "/machine/vm1/cpuset.cpus");
    g_autofree char *user = cg_path(f, "/user/cpuset.cpus");
    g_autofree char *user_a = cg_path(f, "/user/a/cpuset.cpus");
    g_autofree char *sshd = affinity(f, 100);

    g_assert_cmpint(rep->method, ==, f->flavour == CGROUP_V2 ?
                    HPKVM_TASK_ISOLATION_CGROUP_V2 :
                    HPKVM_TASK_ISOLATION_CGROUP_V1);
    assert_file(f, host_cpus, "0-1");
    /* The root cgroup's task moved; the one in /machine and kthreads not */
    g_assert_true(line_in(f, host_procs, "100"));
    g_assert_false(line_in(f, host_procs, "101"));
    g_assert_false(line_in(f, host_procs, "2"));
    g_assert_cmpstr(sshd, ==, "0-3");
    /* Other cgroups narrowed; one with only leased cores left alone. */
    assert_file(f, user, "0-1");
    assert_file(f, user_a, "0-1");
    g_assert_true(str_in(rep->groups_narrowed, "/user"));
    g_assert_true(str_in(rep->groups_narrowed, "/user/a"));
    assert_file(f, vm, "2-3");
    g_assert_true(left_in(rep->tasks_left, 0, "/machine/vm1", "its cpuset"));
    if (f->flavour == CGROUP_V1) {
        /* v1: a parent keeps its child's cores, so /machine cannot lose */
        assert_file(f, machine, "0-3");
        g_assert_true(left_in(rep->tasks_left, 0, "/machine",
                              "cpuset.cpus: "));
    } else {
        assert_file(f, machine, "0-1");
        g_assert_true(str_in(rep->groups_narrowed, "/machine"));
    }
    g_assert_cmpint(rep->tasks_moved, >=, 2);
}

static void test_isolate_restore(gconstpointer opaque)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, rep2 = NULL, off = NULL;
    g_autofree char *root_procs = NULL;

    make_host(&f, (Flavour)GPOINTER_TO_INT(opaque));
    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    assert_isolated(&f, rep);
    if (f.flavour == NO_CPUSET) {
        g_autofree char *sshd = affinity(&f, 100);
        g_autofree char *other = affinity(&f, 101);

        g_assert_cmpint(rep->method, ==, HPKVM_TASK_ISOLATION_AFFINITY);
        g_assert_cmpstr(sshd, ==, "0-1");
        g_assert_cmpstr(other, ==, "0-1");
    } else {
        assert_cpuset_isolated(&f, rep);
    }
    if (f.flavour == CGROUP_V2) {
        assert_file(&f, "/sys/fs/cgroup/cgroup.subtree_control", "+cpuset");
    }

    /* Again with the same leases: nothing more to do, same state. */
    rep2 = reconcile(&f, map, "2-3");
    assert_isolated(&f, rep2);

    /*
     * A task forked in hpkvm.host meanwhile (no journal record of its
     * own): it goes back to the root cgroup with the cgroup's removal.
     */
    if (f.flavour != NO_CPUSET) {
        g_autofree char *host_procs = cg_path(&f, "/hpkvm.host/cgroup.procs");
        g_autofree char *procs = get(&f, host_procs);
        g_autofree char *more = g_strdup_printf("%s\n102\n", procs);

        put_task(&f, 102, "sshd-child", 0, "0-1", "/hpkvm.host");
        put(&f, host_procs, more);
    }

    /* The last lease gone: everything back, exactly. */
    off = reconcile(&f, none, "");
    g_assert_cmpint(off->method, ==, HPKVM_TASK_ISOLATION_NONE);
    assert_original(&f);
    if (f.flavour != NO_CPUSET) {
        root_procs = cg_path(&f, "/cgroup.procs");
        g_assert_true(line_in(&f, root_procs, "100"));
        g_assert_true(line_in(&f, root_procs, "102"));
    }
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

/* A VM killed: its journal stays; whoever comes next replays it. */
static void test_crash_replay(void)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, off = NULL;
    g_autofree char *journal = NULL;

    make_host(&f, CGROUP_V1);
    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    assert_isolated(&f, rep);

    /* A crash while appending leaves a torn line: it is not a change. */
    journal = g_strconcat(f.root, "/run/hpkvm/host.journal", NULL);
    {
        FILE *fp = fopen(journal, "a");

        g_assert_nonnull(fp);
        fputs("W\t/proc/irq/12/smp_affinity_list\t9-", fp);
        fclose(fp);
    }
    /* A new process, a new journal object, no lease alive. */
    off = reconcile(&f, none, "");
    assert_original(&f);
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

/*
 * An arm64 host's per-CPU IRQs (GIC SGIs and PPIs) refuse an affinity
 * (EIO): reported as the core's own, not as left; a GIC SPI that refuses
 * it is left, with why; and none is touched.
 */
static void test_per_cpu_irqs(void)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, off = NULL;
    HpkvmCoreIsolation *c;

    make_host(&f, CGROUP_V2);
    /* The vGIC's maintenance PPI, an IPI (SGI 0), a moving SPI. */
    put(&f, "/proc/irq/20/smp_affinity_list", "0-3\n");
    put(&f, "/proc/irq/20/vgic/.keep", "");
    put(&f, "/sys/kernel/irq/20/chip_name", "GICv3\n");
    put(&f, "/sys/kernel/irq/20/hwirq", "25\n");
    put(&f, "/proc/irq/21/smp_affinity_list", "0-3\n");
    put(&f, "/sys/kernel/irq/21/chip_name", "GICv3\n");
    put(&f, "/sys/kernel/irq/21/hwirq", "0\n");
    put(&f, "/proc/irq/22/smp_affinity_list", "0-3\n");
    put(&f, "/sys/kernel/irq/22/chip_name", "GICv3\n");
    put(&f, "/sys/kernel/irq/22/hwirq", "40\n");

    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    c = rep->cores->value;
    g_assert_true(irq_left_in(c->irqs_per_cpu, 20));
    g_assert_true(irq_left_in(c->irqs_per_cpu, 21));
    g_assert_false(irq_left_in(c->irqs_left, 20));
    g_assert_false(irq_left_in(c->irqs_left, 21));
    g_assert_cmpstr(c->irqs_per_cpu->value->handlers, ==, "vgic");
    g_assert_true(int_in(c->irqs_moved, 22));
    g_assert_false(irq_left_in(c->irqs_per_cpu, 22));
    assert_file(&f, "/proc/irq/20/smp_affinity_list", "0-3");
    assert_file(&f, "/proc/irq/22/smp_affinity_list", "0-1");
    off = reconcile(&f, none, "");
    assert_file(&f, "/proc/irq/22/smp_affinity_list", "0-3");
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

/* Two VMs: each one's threads lose only the other's cores. */
static void test_two_vms(void)
{
    Fixture f;
    HpkvmLeaseMap *both = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *one = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) r1 = NULL, r2 = NULL, r3 = NULL;
    g_autofree char *a = NULL, *b = NULL, *a2 = NULL;
    g_autofree char *host_cpus = NULL;
    g_autofree char *user = g_strconcat(CG, "/user/cpuset.cpus", NULL);
    g_autofree char *user_a = g_strconcat(CG, "/user/a/cpuset.cpus", NULL);

    make_host(&f, CGROUP_V1);
    /* VM A (pid 500) on core 2, VM B (pid 600) on core 3, in the root. */
    put_task(&f, 500, "qemu-a", 0, "0-3", "/");
    put_task(&f, 600, "qemu-b", 0, "0-1,3", "/");
    lease(both, "2", 500);
    lease(both, "3", 600);
    lease(one, "2", 500);
    host_cpus = cg_path(&f, "/hpkvm.host/cpuset.cpus");

    r1 = reconcile(&f, both, "2");
    a = affinity(&f, 500);
    b = affinity(&f, 600);
    g_assert_cmpstr(a, ==, "0-2");          /* minus B's core */
    g_assert_cmpstr(b, ==, "0-1,3");        /* had none of A's */
    assert_file(&f, host_cpus, "0-1");
    assert_file(&f, "/proc/irq/10/smp_affinity_list", "0-1");

    /* B exits: its core comes back to the host, A's stays isolated. */
    r2 = reconcile(&f, one, "2");
    a2 = affinity(&f, 500);
    g_assert_cmpstr(a2, ==, "0-3");
    assert_file(&f, host_cpus, "0-1,3");
    assert_file(&f, "/proc/irq/10/smp_affinity_list", "0-1,3");
    assert_file(&f, "/proc/irq/11/smp_affinity_list", "0-1,3");
    assert_file(&f, "/proc/irq/default_smp_affinity", "0000000b");
    /* Widened on v1 as the kernel takes it: the parent first. */
    assert_file(&f, user, "0-1,3");
    assert_file(&f, user_a, "0-1,3");

    r3 = reconcile(&f, none, "");
    assert_original(&f);
    destroy_host(&f);
    g_free(both);
    g_free(one);
    g_free(none);
}

/* Without the fake syscall, a fake tree's affinities cannot change. */
static void test_no_affinity_op(void)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, off = NULL;
    g_autofree char *kthreadd = NULL;

    make_host(&f, CGROUP_V1);
    f.host.set_affinity = NULL;
    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    kthreadd = affinity(&f, 2);
    g_assert_cmpstr(kthreadd, ==, "0-3");
    g_assert_true(left_in(rep->tasks_left, 2, "kthreadd",
                          "its affinity can"));
    off = reconcile(&f, none, "");
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

static void test_leases(void)
{
    Fixture f;
    HpkvmLeases a, b;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmCpuSet cores;
    Error *err = NULL;
    g_autofree char *want = g_strdup_printf("host core 3 is leased by "
                                            "another VM (pid %d)", getpid());
    g_autofree char *list = NULL;

    make_host(&f, CGROUP_V1);
    hpkvm_leases_init(&a);
    hpkvm_leases_init(&b);
    hpkvm_cpuset_parse("2-3", &cores, "t", &error_abort);
    g_assert_true(hpkvm_leases_take(&a, &f.host, "/run/hpkvm", &cores,
                                    &error_abort));

    /* OFD locks conflict between open files, even in one process. */
    hpkvm_cpuset_parse("0-1,3", &cores, "t", &error_abort);
    g_assert_false(hpkvm_leases_take(&b, &f.host, "/run/hpkvm", &cores,
                                     &err));
    g_assert_nonnull(strstr(error_get_pretty(err), want));
    error_free(err);
    /* All or nothing: cores 0 and 1 were given back. */
    g_assert_true(hpkvm_cpuset_empty(&b.held));
    g_assert_true(hpkvm_leases_scan(&f.host, "/run/hpkvm", map,
                                    &error_abort));
    list = hpkvm_cpuset_format(&map->leased);
    g_assert_cmpstr(list, ==, "2-3");
    g_assert_cmpint(map->owner[2], ==, getpid());

    hpkvm_leases_release(&a);
    g_assert_true(hpkvm_leases_scan(&f.host, "/run/hpkvm", map,
                                    &error_abort));
    g_assert_true(hpkvm_cpuset_empty(&map->leased));
    g_assert_true(hpkvm_leases_take(&b, &f.host, "/run/hpkvm", &cores,
                                    &error_abort));
    hpkvm_leases_release(&b);
    destroy_host(&f);
    g_free(map);
}


/* A journal record as hpkvm writes it, checksum included. */
static char *record(char kind, const char *key, const char *old)
{
    g_autofree char *body = g_strdup_printf("%c\t%s\t%s", kind, key, old);

    return g_strdup_printf("%s\t%08x\n", body,
                           crc32c(0xffffffff, (const uint8_t *)body,
                                  strlen(body)));
}

static void put_journal(Fixture *f, const char *text)
{
    g_autofree char *dir = g_strconcat(f->root, "/run/hpkvm", NULL);

    g_assert_cmpint(g_mkdir_with_parents(dir, 0700), ==, 0);
    g_assert_cmpint(chmod(dir, 0700), ==, 0);
    put(f, "/run/hpkvm/host.journal", text);
}

static int count_lines(const char *text)
{
    int n = 0;

    for (; text && *text; text++) {
        n += *text == '\n';
    }
    return n;
}

/*
 * Forged and corrupted records: none is ever carried out, whatever its
 * path or value; the one genuine record still is.
 */
static void test_journal_forged(void)
{
    Fixture f;
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) off = NULL;
    g_autoptr(GString) j = g_string_new("");
    g_autofree char *flipped = record('W', "/proc/irq/10/smp_affinity_list",
                                      "0-3");
    g_autofree char *rejected = NULL;
    g_autofree char *shadow = NULL;
    static const char *const forged[][3] = {
        { "W", "/etc/shadow", "0-3" },
        { "W", "/proc/irq/10/../../../etc/shadow", "0-3" },
        { "W", "/proc/irq//10/smp_affinity_list", "0-3" },
        { "W", "/proc/irq/10/smp_affinity_list", "root::0:" },
        { "W", "/proc/irq/default_smp_affinity", "zz" },
        { "W", "/sys/fs/cgroup/cpuset/cpuset.cpus", "0-3" },
        { "W", "/sys/fs/cgroup/cpuset/../../../etc/cpuset.cpus", "0-3" },
        { "D", "/etc", "/sys/fs/cgroup/cpuset/cgroup.procs" },
        { "D", "/sys/fs/cgroup/cpuset/hpkvm.host", "/etc/shadow" },
        { "C", "/sys/fs/cgroup/cpuset/cgroup.subtree_control", "cpuset" },
        { "P", "100/100:1100", "/etc/shadow" },
        { "P", "100/100:1100x", "/sys/fs/cgroup/cpuset/cgroup.procs" },
        { "A", "2/2:1002", "" },
        { "A", "-1/2:1002", "0-3" },
        { "X", "/proc/irq/10/smp_affinity_list", "0-3" },
    };
    int i;

    make_host(&f, CGROUP_V1);
    put(&f, "/etc/shadow", "precious\n");
    for (i = 0; i < ARRAY_SIZE(forged); i++) {
        g_autofree char *line = record(forged[i][0][0], forged[i][1],
                                       forged[i][2]);

        g_string_append(j, line);
    }
    /* A flipped byte in a genuine record: its checksum fails. */
    flipped[strlen("W\t/proc/irq/10/smp_affinity_list\t0-")] = '1';
    g_string_append(j, flipped);
    /*
     * An older hpkvm's records, without a checksum: taken only if the
     * allow-list takes them.
     */
    g_string_append(j, "W\t/etc/shadow\t0-3\n");
    g_string_append(j, "W\t/proc/irq/11/smp_affinity_list\t1-2\n");
    /* A genuine record, for a file that exists and one that does not. */
    g_string_append(j, record('W', "/proc/irq/12/smp_affinity_list", "0"));
    g_string_append(j, record('W', "/sys/fs/cgroup/cpuset/gone/cpuset.cpus",
                              "0-1"));
    g_string_append(j, record('W', "/sys/fs/cgroup/cpuset/bare/cpuset.cpus",
                              "0-1"));
    put(&f, "/sys/fs/cgroup/cpuset/bare/.keep", "");
    put_journal(&f, j->str);

    off = reconcile(&f, none, "");
    shadow = get(&f, "/etc/shadow");
    g_assert_cmpstr(shadow, ==, "precious");
    assert_file(&f, "/proc/irq/10/smp_affinity_list", "0-3");
    assert_file(&f, "/proc/irq/default_smp_affinity", "f");
    assert_file(&f, "/sys/fs/cgroup/cpuset/cpuset.cpus", "0-3");
    assert_file(&f, "/proc/irq/12/smp_affinity_list", "0");
    assert_file(&f, "/proc/irq/11/smp_affinity_list", "1-2");
    /* Restoring never creates a file. */
    g_assert_false(exists(&f, "/sys/fs/cgroup/cpuset/gone"));
    g_assert_false(exists(&f, "/sys/fs/cgroup/cpuset/bare/cpuset.cpus"));
    g_assert_false(exists(&f, "/run/hpkvm/host.journal"));
    rejected = get(&f, "/run/hpkvm/host.journal.rejected");
    g_assert_cmpint(count_lines(rejected) + 1, ==, ARRAY_SIZE(forged) + 2);
    destroy_host(&f);
    g_free(none);
}

/* hpkvm refuses to journal, so to make, a change outside its list. */
static void test_journal_record_refused(void)
{
    Fixture f;
    g_autoptr(HpkvmJournal) j = NULL;
    Error *err = NULL;

    make_host(&f, CGROUP_V1);
    j = hpkvm_journal_open(&f.host, "/run/hpkvm", &error_abort);
    g_assert_false(hpkvm_journal_record(j, HPKVM_UNDO_WRITE, "/etc/shadow",
                                        "x", &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "refusing"));
    error_free(err);
    g_assert_true(hpkvm_journal_empty(j));
    destroy_host(&f);
}

/* A torn last line is dropped, so the next record is not merged into it */
static void test_journal_torn_then_append(void)
{
    Fixture f;
    g_autoptr(HpkvmJournal) j = NULL, again = NULL;
    const char *irq = "/proc/irq/12/smp_affinity_list";

    make_host(&f, CGROUP_V1);
    put_journal(&f, "W\t/proc/irq/10/smp_affinity_list\t0-");
    j = hpkvm_journal_open(&f.host, "/run/hpkvm", &error_abort);
    g_assert_true(hpkvm_journal_empty(j));
    g_assert_true(hpkvm_journal_record(j, HPKVM_UNDO_WRITE, irq, "0-1",
                                       &error_abort));
    again = hpkvm_journal_open(&f.host, "/run/hpkvm", &error_abort);
    g_assert_cmpstr(hpkvm_journal_original(again, HPKVM_UNDO_WRITE, irq),
                    ==, "0-1");
    destroy_host(&f);
}

/* Links planted where hpkvm writes are never followed. */
static void test_journal_links(void)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, off = NULL;
    g_autofree char *link = NULL, *target = NULL, *dirlink = NULL;
    g_autofree char *victim = NULL, *dirvictim = NULL;
    HpkvmCoreIsolation *c2;

    make_host(&f, CGROUP_V1);
    /* Contents that parse, so that only the link can stop the write. */
    put(&f, "/etc/victim", "0-3\n");
    put(&f, "/etc/irqdir/smp_affinity_list", "0-3\n");
    link = g_strconcat(f.root, "/proc/irq/10/smp_affinity_list", NULL);
    target = g_strconcat(f.root, "/etc/victim", NULL);
    g_assert_cmpint(unlink(link), ==, 0);
    g_assert_cmpint(symlink(target, link), ==, 0);
    dirlink = g_strconcat(f.root, "/proc/irq/13", NULL);
    g_free(target);
    target = g_strconcat(f.root, "/etc/irqdir", NULL);
    g_assert_cmpint(symlink(target, dirlink), ==, 0);

    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    c2 = rep->cores->value;
    g_assert_true(irq_left_in(c2->irqs_left, 10));
    g_assert_true(irq_left_in(c2->irqs_left, 13));
    off = reconcile(&f, none, "");
    victim = get(&f, "/etc/victim");
    dirvictim = get(&f, "/etc/irqdir/smp_affinity_list");
    g_assert_cmpstr(victim, ==, "0-3");
    g_assert_cmpstr(dirvictim, ==, "0-3");
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

/* A planted lease file is refused; its target is not truncated. */
static void test_lease_link(void)
{
    Fixture f;
    HpkvmLeases l;
    HpkvmCpuSet cores;
    Error *err = NULL;
    g_autofree char *link = NULL, *target = NULL, *victim = NULL;

    make_host(&f, CGROUP_V1);
    put(&f, "/etc/victim", "keep\n");
    g_assert_cmpint(hpkvm_state_dir_open(&f.host, "/run/hpkvm", "leases",
                                         &error_abort), >=, 0);
    link = g_strconcat(f.root, "/run/hpkvm/leases/cpu2", NULL);
    target = g_strconcat(f.root, "/etc/victim", NULL);
    g_assert_cmpint(symlink(target, link), ==, 0);
    hpkvm_leases_init(&l);
    hpkvm_cpuset_parse("2", &cores, "t", &error_abort);
    g_assert_false(hpkvm_leases_take(&l, &f.host, "/run/hpkvm", &cores,
                                     &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "cpu2"));
    error_free(err);
    victim = get(&f, "/etc/victim");
    g_assert_cmpstr(victim, ==, "keep");
    destroy_host(&f);
}

static void assert_state_dir_refused(Fixture *f, const char *want)
{
    Error *err = NULL;

    g_assert_null(hpkvm_journal_open(&f->host, "/run/hpkvm", &err));
    g_assert_nonnull(err);
    if (!strstr(error_get_pretty(err), want)) {
        g_error("'%s' does not say '%s'", error_get_pretty(err), want);
    }
    error_free(err);
}

/* The state directory is used only if it is ours and closed to others. */
static void test_state_dir_trust(void)
{
    Fixture f;
    g_autofree char *dir = NULL, *elsewhere = NULL;
    int fd;

    make_host(&f, CGROUP_V1);
    dir = g_strconcat(f.root, "/run/hpkvm", NULL);
    fd = hpkvm_state_dir_open(&f.host, "/run/hpkvm", NULL, &error_abort);
    g_assert_cmpint(fd, >=, 0);
    close(fd);

    g_assert_cmpint(chmod(dir, 0755), ==, 0);
    assert_state_dir_refused(&f, "mode 0755");
    g_assert_cmpint(chmod(dir, 0700), ==, 0);
    /* Needs root, which the CI machine has: not skipped there. */
    g_assert_cmpint(geteuid(), ==, 0);
    g_assert_cmpint(chown(dir, 65534, 65534), ==, 0);
    assert_state_dir_refused(&f, "belongs to uid 65534");
    g_assert_cmpint(chown(dir, 0, 0), ==, 0);
    /* A link, even to a directory that would pass. */
    elsewhere = g_strconcat(f.root, "/elsewhere", NULL);
    g_assert_cmpint(rename(dir, elsewhere), ==, 0);
    g_assert_cmpint(symlink(elsewhere, dir), ==, 0);
    assert_state_dir_refused(&f, "symbolic link");
    destroy_host(&f);
}

/* A root naming the real "/" in another way is the real host. */
static void test_host_root_real(void)
{
    static const char *const reals[] = { "/", "//", "/tmp/..", "/./" };
    g_autofree char *tmp = g_dir_make_tmp("hpkvm-root-XXXXXX", NULL);
    HpkvmHost h;
    Error *err = NULL;
    int i;

    for (i = 0; i < ARRAY_SIZE(reals); i++) {
        hpkvm_host_init(&h, reals[i]);
        g_assert_true(h.real);
        g_assert_nonnull(h.set_affinity);
        /* Where a second lease domain could lease a core twice. */
        g_assert_cmpint(hpkvm_state_dir_open(&h, "/tmp/hpkvm-elsewhere",
                                             NULL, &err), <, 0);
        g_assert_nonnull(strstr(error_get_pretty(err), "x-state-dir"));
        g_clear_pointer(&err, error_free);
        hpkvm_host_cleanup(&h);
    }
    hpkvm_host_init(&h, tmp);
    g_assert_false(h.real);
    g_assert_null(h.set_affinity);
    hpkvm_host_cleanup(&h);
    rmdir(tmp);
}

/*
 * A restore that fails is kept and retried: hpkvm.host cannot go while
 * something is in it; once it can, the next replay removes it, and only
 * then the journal.
 */
static void test_journal_retry(void)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) rep = NULL, off = NULL;
    g_autoptr(HpkvmJournal) j = NULL;
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *child = g_strconcat(CG, "/hpkvm.host/child", NULL);
    g_autofree char *full = NULL;
    HpkvmIsolateRequest req = { .host = &f.host };
    HpkvmLeaseMap none = { 0 };

    make_host(&f, CGROUP_V1);
    lease(map, "2-3", 4242);
    rep = reconcile(&f, map, "2-3");
    full = g_strconcat(f.root, child, NULL);
    g_assert_cmpint(mkdir(full, 0755), ==, 0);

    j = hpkvm_journal_open(&f.host, "/run/hpkvm", &error_abort);
    req.journal = j;
    req.leases = &none;
    off = hpkvm_isolate_reconcile(&req, failures, &error_abort);
    g_assert_cmpuint(failures->len, ==, 1);
    g_assert_nonnull(strstr(g_ptr_array_index(failures, 0), "hpkvm.host"));
    g_assert_nonnull(strstr(g_ptr_array_index(failures, 0), "retried"));
    /* Everything else is back; the failed one is still journaled. */
    assert_file(&f, "/proc/irq/10/smp_affinity_list", "0-3");
    g_assert_true(exists(&f, "/run/hpkvm/host.journal"));
    g_clear_pointer(&off, qapi_free_HpkvmIsolation);
    g_clear_pointer(&j, hpkvm_journal_close);

    g_assert_cmpint(rmdir(full), ==, 0);
    off = reconcile(&f, &none, "");
    assert_original(&f);
    destroy_host(&f);
    g_free(map);
}

/*
 * A QEMU started from a shell isolation moved into hpkvm.host is born
 * there, off its own cores: when it leases them it goes back to the root
 * cgroup (where restoring would put it), while the shell stays.
 */
static void test_owner_leaves_host_group(gconstpointer opaque)
{
    Fixture f;
    HpkvmLeaseMap *first = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *both = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) r1 = NULL, r2 = NULL, off = NULL;
    g_autofree char *root_procs = NULL;

    make_host(&f, (Flavour)GPOINTER_TO_INT(opaque));
    root_procs = cg_path(&f, "/cgroup.procs");
    lease(first, "2", 500);
    put_task(&f, 500, "qemu-a", 0, "0-3", "/");
    r1 = reconcile(&f, first, "2");
    g_assert_false(line_in(&f, root_procs, "700"));
    /* The shell (100) was moved; the second VM is its child. */
    put_task(&f, 700, "qemu-b", 0, "0-1", "/" "hpkvm.host");
    lease(both, "2", 500);
    lease(both, "3", 700);
    r2 = reconcile(&f, both, "3");
    g_assert_true(line_in(&f, root_procs, "700"));
    g_assert_false(line_in(&f, root_procs, "100"));
    off = reconcile(&f, none, "");
    assert_original(&f);
    destroy_host(&f);
    g_free(first);
    g_free(both);
    g_free(none);
}

/*
 * The QEMU handing its cores over in a cpr-transfer, once the next one
 * adopted its leases: it holds no lease, but a KVM vCPU, and a thread on
 * the leased core alone.  Moved (to hpkvm.host, or off the core), its
 * vCPU would stop: the kernel runs a bound vCPU only on its core alone.
 * It is left where it is, and reported; the shell beside it moves.
 */
static void test_handing_over_vcpu(gconstpointer opaque)
{
    Fixture f;
    HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmLeaseMap *none = g_new0(HpkvmLeaseMap, 1);
    g_autoptr(HpkvmIsolation) r = NULL, off = NULL;
    g_autofree char *host_procs = NULL, *fds = NULL, *vcpu = NULL;
    g_autofree char *old = NULL;

    make_host(&f, (Flavour)GPOINTER_TO_INT(opaque));
    host_procs = cg_path(&f, "/hpkvm.host/cgroup.procs");
    put_task(&f, 500, "qemu-new", 0, "0-3", "/");
    put_task(&f, 400, "qemu-old", 0, "2", "/");
    fds = g_strconcat(f.root, "/proc/400/fd", NULL);
    g_assert_cmpint(g_mkdir_with_parents(fds, 0755), ==, 0);
    vcpu = g_strconcat(fds, "/12", NULL);
    g_assert_cmpint(symlink("anon_inode:kvm-vcpu:0", vcpu), ==, 0);
    lease(map, "2", 500);
    r = reconcile(&f, map, "2");
    g_assert_true(left_in(r->tasks_left, 400, "qemu-old",
                          "it runs a vCPU bound to a leased core"));
    g_assert_false(line_in(&f, host_procs, "400"));
    old = affinity(&f, 400);
    g_assert_cmpstr(old, ==, "2");
    if (f.flavour != NO_CPUSET) {
        g_assert_true(line_in(&f, host_procs, "100"));
    }
    off = reconcile(&f, none, "");
    destroy_host(&f);
    g_free(map);
    g_free(none);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/hpkvm/isolate/cgroup-v1",
                         GINT_TO_POINTER(CGROUP_V1), test_isolate_restore);
    g_test_add_data_func("/hpkvm/isolate/cgroup-v2",
                         GINT_TO_POINTER(CGROUP_V2), test_isolate_restore);
    g_test_add_data_func("/hpkvm/isolate/affinity",
                         GINT_TO_POINTER(NO_CPUSET), test_isolate_restore);
    g_test_add_data_func("/hpkvm/isolate/owner-leaves-host-group/v1",
                         GINT_TO_POINTER(CGROUP_V1),
                         test_owner_leaves_host_group);
    g_test_add_data_func("/hpkvm/isolate/owner-leaves-host-group/v2",
                         GINT_TO_POINTER(CGROUP_V2),
                         test_owner_leaves_host_group);
    g_test_add_data_func("/hpkvm/isolate/handing-over-vcpu/v2",
                         GINT_TO_POINTER(CGROUP_V2), test_handing_over_vcpu);
    g_test_add_data_func("/hpkvm/isolate/handing-over-vcpu/affinity",
                         GINT_TO_POINTER(NO_CPUSET), test_handing_over_vcpu);
    g_test_add_func("/hpkvm/isolate/crash-replay", test_crash_replay);
    g_test_add_func("/hpkvm/isolate/two-vms", test_two_vms);
    g_test_add_func("/hpkvm/isolate/per-cpu-irqs", test_per_cpu_irqs);
    g_test_add_func("/hpkvm/isolate/no-affinity-op", test_no_affinity_op);
    g_test_add_func("/hpkvm/isolate/leases", test_leases);
    g_test_add_func("/hpkvm/journal/forged", test_journal_forged);
    g_test_add_func("/hpkvm/journal/record-refused",
                    test_journal_record_refused);
    g_test_add_func("/hpkvm/journal/torn-then-append",
                    test_journal_torn_then_append);
    g_test_add_func("/hpkvm/journal/retry", test_journal_retry);
    g_test_add_func("/hpkvm/journal/links", test_journal_links);
    g_test_add_func("/hpkvm/journal/lease-link", test_lease_link);
    g_test_add_func("/hpkvm/journal/state-dir-trust", test_state_dir_trust);
    g_test_add_func("/hpkvm/journal/host-root-real", test_host_root_real);
    return g_test_run();
}
