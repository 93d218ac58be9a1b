/*
 * hpkvm: a fake host tree's cgroups behave as cgroupfs would
 *
 * Tests give hpkvm a fake host tree (x-host-root=, --host-root=): plain
 * directories and files standing for /proc, /sys and the cgroup mounts.
 * Plain files take any write in any order, so a change the kernel would
 * refuse, or an order of changes it would refuse, would pass there.  On
 * such a tree only, the cpuset hierarchy follows the kernel's rules that
 * hpkvm's isolation and its journal replay must respect:
 *
 * - a task is in one cgroup of a hierarchy: writing its pid to a
 *   cgroup.procs takes it out of the one it was in, and its
 *   /proc/PID/cpuset (v1) or /proc/PID/cgroup (v2) says where it is;
 * - a cgroup with a task in it cannot be removed (EBUSY);
 * - on cgroup v1, a cpuset's cpus are a subset of its parent's (EACCES)
 *   and a superset of each child's (EBUSY), so parents are narrowed after
 *   their children and widened before them (kernel/cgroup/cpuset.c,
 *   validate_change()).
 *
 * And an IRQ that /sys/kernel/irq/IRQ says is per-CPU (an Arm GIC SGI or
 * PPI) refuses a new affinity with EIO, as the kernel does.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "hpkvm-host.h"
#include "hpkvm-host-fake.h"

/* The cpuset hierarchy's mount, if @dir is one of its cgroups. */
static char *fake_hierarchy(const HpkvmHost *h, const char *dir, bool *v2)
{
    g_autofree char *mount = hpkvm_host_cpuset_mount(h, v2);
    size_t len = mount ? strlen(mount) : 0;

    if (!mount || strncmp(dir, mount, len) ||
        (dir[len] != '\0' && dir[len] != '/')) {
        return NULL;
    }
    return g_steal_pointer(&mount);
}

/* @path is @leaf of a cgroup of the cpuset hierarchy: that cgroup. */
static char *fake_cgroup(const HpkvmHost *h, const char *path,
                         const char *leaf, char **mount, bool *v2)
{
    g_autofree char *base = g_path_get_basename(path);
    g_autofree char *dir = g_path_get_dirname(path);

    if (strcmp(base, leaf)) {
        return NULL;
    }
    *mount = fake_hierarchy(h, dir, v2);
    return *mount ? g_steal_pointer(&dir) : NULL;
}

static bool fake_read_cpus(const HpkvmHost *h, const char *dir,
                           HpkvmCpuSet *cpus)
{
    g_autofree char *path = g_strconcat(dir, "/cpuset.cpus", NULL);
    g_autofree char *text = NULL;

    return hpkvm_host_read(h, path, &text) == 0 &&
           hpkvm_cpuset_parse(text, cpus, path, NULL);
}

static bool fake_subset(const HpkvmCpuSet *a, const HpkvmCpuSet *b)
{
    HpkvmCpuSet rest;

    hpkvm_cpuset_andnot(&rest, a, b);
    return hpkvm_cpuset_empty(&rest);
}

/* v1: within the parent's cpus, and holding every child's. */
static int fake_check_cpus(const HpkvmHost *h, const char *mount,
                           const char *dir, const char *text)
{
    g_auto(GStrv) names = NULL;
    HpkvmCpuSet want, other;
    int i;

    if (!hpkvm_cpuset_parse(text, &want, dir, NULL)) {
        return -EINVAL;
    }
    if (strcmp(dir, mount)) {
        g_autofree char *parent = g_path_get_dirname(dir);

        if (fake_read_cpus(h, parent, &other) && !fake_subset(&want, &other)) {
            return -EACCES;
        }
    }
    names = hpkvm_host_list(h, dir);
    for (i = 0; names && names[i]; i++) {
        g_autofree char *child = g_strdup_printf("%s/%s", dir, names[i]);

        if (fake_read_cpus(h, child, &other) && !fake_subset(&other, &want)) {
            return -EBUSY;
        }
    }
    return 0;
}

int hpkvm_host_fake_check_write(const HpkvmHost *h, const char *path,
                                const char *text)
{
    g_autofree char *mount = NULL;
    g_autofree char *dir = NULL;
    bool v2;
    int irq, end = 0;

    /* The kernel moves no per-CPU IRQ (irq_can_set_affinity_usr()). */
    if (sscanf(path, "/proc/irq/%d/smp_affinity_list%n", &irq, &end) == 1 &&
        end && !path[end] && hpkvm_host_irq_per_cpu(h, irq)) {
        return -EIO;
    }
    dir = fake_cgroup(h, path, "cpuset.cpus", &mount, &v2);
    if (!dir || v2) {
        return 0;               /* v2: the effective cpus follow by itself */
    }
    return fake_check_cpus(h, mount, dir, text);
}

/* Take @pid out of every cgroup.procs below @dir but @keep. */
static void fake_take_out(const HpkvmHost *h, const char *dir,
                          const char *keep, const char *pid)
{
    g_autofree char *procs = g_strconcat(dir, "/cgroup.procs", NULL);
    g_autofree char *text = NULL;
    g_auto(GStrv) names = NULL;
    int i;

    if (strcmp(procs, keep) && hpkvm_host_read(h, procs, &text) == 0) {
        g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
        g_autoptr(GString) left = g_string_new(NULL);

        for (i = 0; lines[i]; i++) {
            if (*lines[i] && strcmp(lines[i], pid)) {
                g_string_append_printf(left, "%s\n", lines[i]);
            }
        }
        if (strcmp(left->str, text)) {
            hpkvm_host_write(h, procs, left->str);
        }
    }
    names = hpkvm_host_list(h, dir);
    for (i = 0; names && names[i]; i++) {
        g_autofree char *sub = g_strdup_printf("%s/%s", dir, names[i]);
        g_autofree char *subprocs = g_strconcat(sub, "/cgroup.procs", NULL);

        if (hpkvm_host_exists(h, subprocs)) {
            fake_take_out(h, sub, keep, pid);
        }
    }
}

void hpkvm_host_fake_appended(const HpkvmHost *h, const char *path,
                              const char *text)
{
    g_autofree char *mount = NULL;
    g_autofree char *dir = NULL;
    g_autofree char *pid = g_strstrip(g_strdup(text));
    bool v2;

    dir = fake_cgroup(h, path, "cgroup.procs", &mount, &v2);
    if (dir) {
        const char *rel = dir + strlen(mount);
        g_autofree char *proc = g_strdup_printf("/proc/%s/%s", pid,
                                                v2 ? "cgroup" : "cpuset");
        g_autofree char *line = g_strdup_printf("%s%s\n", v2 ? "0::" : "",
                                                *rel ? rel : "/");

        fake_take_out(h, mount, path, pid);
        if (hpkvm_host_exists(h, proc)) {
            hpkvm_host_write(h, proc, line);
        }
    }
}

int hpkvm_host_fake_check_rmdir(const HpkvmHost *h, const char *path)
{
    g_autofree char *mount = NULL;
    g_autofree char *procs = g_strconcat(path, "/cgroup.procs", NULL);
    g_autofree char *text = NULL;
    bool v2;

    mount = fake_hierarchy(h, path, &v2);
    if (mount && hpkvm_host_read(h, procs, &text) == 0 &&
        *g_strstrip(text)) {
        return -EBUSY;
    }
    return 0;
}

void hpkvm_host_fake_cgroup_files(int parent, const char *name, bool create)
{
    static const char *const files[] = {
        "cgroup.procs", "cpuset.cpus", "cpuset.mems",
    };
    int dfd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
                     O_CLOEXEC);
    int i, fd;

    for (i = 0; dfd >= 0 && i < ARRAY_SIZE(files); i++) {
        if (!create) {
            unlinkat(dfd, files[i], 0);
            continue;
        }
        fd = openat(dfd, files[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                    0644);
        if (fd >= 0) {
            close(fd);
        }
    }
    if (dfd >= 0) {
        close(dfd);
    }
}
