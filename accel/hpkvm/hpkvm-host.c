/*
 * hpkvm: the host as hpkvm's isolation sees it, through one root
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/ctype.h"
#include "qapi/error.h"
#include "hpkvm-host.h"
#include "hpkvm-host-fake.h"

/* include/linux/sched.h */
#define PF_KTHREAD              0x00200000
#define PF_NO_SETAFFINITY       0x04000000

int hpkvm_set_affinity(pid_t tid, const HpkvmCpuSet *cpus)
{
    cpu_set_t set;
    unsigned cpu;

    CPU_ZERO(&set);
    HPKVM_CPUSET_FOREACH(cpu, cpus) {
        CPU_SET(cpu, &set);
    }
    return sched_setaffinity(tid, sizeof(set), &set) < 0 ? -errno : 0;
}

bool hpkvm_get_affinity(pid_t tid, HpkvmCpuSet *cpus)
{
    cpu_set_t set;
    unsigned cpu;

    if (sched_getaffinity(tid, sizeof(set), &set) < 0) {
        return false;
    }
    hpkvm_cpuset_clear(cpus);
    for (cpu = 0; cpu < CPU_SETSIZE && cpu < HPKVM_MAX_HOST_CPUS; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            set_bit(cpu, cpus->bits);
        }
    }
    return true;
}

/*
 * The real host is whatever root names the same directory as "/": "//"
 * and "/tmp/.." are the real host too, and must not be taken for a fake
 * tree that tests may change freely.
 */
static bool host_root_is_real(const char *root)
{
    struct stat a, b;

    if (stat(root, &a) < 0 || stat("/", &b) < 0) {
        return false;
    }
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void hpkvm_host_init(HpkvmHost *h, const char *root)
{
    g_autofree char *canon = g_canonicalize_filename(root ?: "/", "/");
    g_autofree char *real = realpath(canon, NULL);

    h->real = host_root_is_real(canon);
    h->root = h->real ? g_strdup("") : g_strdup(real ?: canon);
    h->set_affinity = h->real ? hpkvm_set_affinity : NULL;
}

void hpkvm_host_cleanup(HpkvmHost *h)
{
    g_clear_pointer(&h->root, g_free);
}

char *hpkvm_host_path(const HpkvmHost *h, const char *path)
{
    return g_strconcat(h->root, path, NULL);
}

/*
 * g_file_error_from_errno() has no inverse in glib; the codes hpkvm's
 * callers tell apart are these.  Returns -errno.
 */
static int host_errno(const GError *err)
{
    static const struct {
        GFileError code;
        int err;
    } map[] = {
        { G_FILE_ERROR_NOENT, ENOENT }, { G_FILE_ERROR_ACCES, EACCES },
        { G_FILE_ERROR_PERM, EPERM }, { G_FILE_ERROR_ISDIR, EISDIR },
        { G_FILE_ERROR_NOTDIR, ENOTDIR }, { G_FILE_ERROR_LOOP, ELOOP },
        { G_FILE_ERROR_NOMEM, ENOMEM }, { G_FILE_ERROR_INVAL, EINVAL },
    };
    int i;

    for (i = 0; err && err->domain == G_FILE_ERROR && i < ARRAY_SIZE(map);
         i++) {
        if (map[i].code == err->code) {
            return -map[i].err;
        }
    }
    return -EIO;
}

int hpkvm_host_read(const HpkvmHost *h, const char *path, char **text)
{
    g_autofree char *full = hpkvm_host_path(h, path);
    g_autoptr(GError) err = NULL;

    *text = NULL;
    /* glib reads procfs and sysfs files, which have no size, to the end. */
    if (!g_file_get_contents(full, text, NULL, &err)) {
        return host_errno(err);
    }
    return 0;
}

/*
 * Every component of an absolute @path, checked: none empty (no "//"),
 * none "." or "..", so that a path hpkvm is asked to change cannot
 * leave the place its name says.
 */
static GStrv host_path_components(const char *path)
{
    g_auto(GStrv) parts = NULL;
    int i;

    if (!path || path[0] != '/' || !path[1]) {
        return NULL;
    }
    parts = g_strsplit(path + 1, "/", -1);
    for (i = 0; parts[i]; i++) {
        if (!*parts[i] || !strcmp(parts[i], ".") ||
            !strcmp(parts[i], "..")) {
            return NULL;
        }
    }
    return g_steal_pointer(&parts);
}

bool hpkvm_host_path_is_clean(const char *path)
{
    g_auto(GStrv) parts = host_path_components(path);

    return parts != NULL;
}

int hpkvm_host_open_parent(const HpkvmHost *h, const char *path,
                           char **name)
{
    g_auto(GStrv) parts = host_path_components(path);
    int dfd, i, n;

    *name = NULL;
    if (!parts) {
        return -EINVAL;
    }
    dfd = qemu_open_old(*h->root ? h->root : "/",
                        O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return -errno;
    }
    n = g_strv_length(parts);
    for (i = 0; i < n - 1; i++) {
        int next = openat(dfd, parts[i],
                          O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        close(dfd);
        if (next < 0) {
            /* O_DIRECTORY refuses a symlink that O_NOFOLLOW kept */
            return -errno;
        }
        dfd = next;
    }
    *name = g_strdup(parts[n - 1]);
    return dfd;
}

int hpkvm_host_open(const HpkvmHost *h, const char *path, int flags,
                    mode_t mode)
{
    g_autofree char *name = NULL;
    int dfd = hpkvm_host_open_parent(h, path, &name);
    int fd;

    if (dfd < 0) {
        return dfd;
    }
    fd = openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    fd = fd < 0 ? -errno : fd;
    close(dfd);
    return fd;
}

/*
 * One write(2): sysfs, procfs and cgroupfs take a value per write.  The
 * file must exist: hpkvm only changes the kernel's files, never creates
 * one (a fake tree's cgroups get theirs from hpkvm_host_mkdir()).
 */
static int host_write_once(const HpkvmHost *h, const char *path, int flags,
                           const char *text)
{
    size_t len = strlen(text);
    int fd = hpkvm_host_open(h, path, O_WRONLY | flags, 0);
    ssize_t ret;

    if (fd < 0) {
        return fd;
    }
    ret = write(fd, text, len);
    if (ret < 0) {
        ret = -errno;
        close(fd);
        return ret;
    }
    if (close(fd) < 0) {
        return -errno;
    }
    return ret == len ? 0 : -EIO;
}

int hpkvm_host_write(const HpkvmHost *h, const char *path, const char *text)
{
    int ret = h->real ? 0 : hpkvm_host_fake_check_write(h, path, text);

    return ret < 0 ? ret : host_write_once(h, path, O_TRUNC, text);
}

int hpkvm_host_append(const HpkvmHost *h, const char *path, const char *text)
{
    g_autofree char *line = g_strdup_printf("%s\n", text);
    int ret = host_write_once(h, path, O_APPEND, line);

    if (ret == 0 && !h->real) {
        hpkvm_host_fake_appended(h, path, text);
    }
    return ret;
}

int hpkvm_host_mkdir(const HpkvmHost *h, const char *path)
{
    g_autofree char *name = NULL;
    int dfd = hpkvm_host_open_parent(h, path, &name);
    int ret = 0;

    if (dfd < 0) {
        return dfd;
    }
    if (mkdirat(dfd, name, 0755) < 0) {
        ret = -errno;
    } else if (!h->real) {
        hpkvm_host_fake_cgroup_files(dfd, name, true);
    }
    close(dfd);
    return ret;
}

int hpkvm_host_rmdir(const HpkvmHost *h, const char *path)
{
    g_autofree char *name = NULL;
    int dfd = hpkvm_host_open_parent(h, path, &name);
    int ret = 0;

    if (dfd < 0) {
        return dfd == -ENOENT ? 0 : dfd;
    }
    ret = h->real ? 0 : hpkvm_host_fake_check_rmdir(h, path);
    if (ret < 0) {
        goto out;
    }
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
        goto out;
    }
    ret = -errno;
    if (ret == -ENOTEMPTY && !h->real) {
        hpkvm_host_fake_cgroup_files(dfd, name, false);
        ret = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
    }
out:
    close(dfd);
    return ret;
}

bool hpkvm_host_exists(const HpkvmHost *h, const char *path)
{
    g_autofree char *full = hpkvm_host_path(h, path);

    return access(full, F_OK) == 0;
}

GStrv hpkvm_host_list(const HpkvmHost *h, const char *path)
{
    g_autofree char *full = hpkvm_host_path(h, path);
    g_autoptr(GDir) dir = g_dir_open(full, 0, NULL);
    GPtrArray *names;
    const char *name;

    if (!dir) {
        return NULL;
    }
    names = g_ptr_array_new();
    while ((name = g_dir_read_name(dir))) {
        g_ptr_array_add(names, g_strdup(name));
    }
    g_ptr_array_add(names, NULL);
    return (GStrv)g_ptr_array_free(names, false);
}

bool hpkvm_host_read_cpus(const HpkvmHost *h, const char *path,
                          HpkvmCpuSet *cpus, Error **errp)
{
    g_autofree char *text = NULL;
    int ret = hpkvm_host_read(h, path, &text);

    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot read %s%s", h->root, path);
        return false;
    }
    return hpkvm_cpuset_parse(text, cpus, path, errp);
}

void hpkvm_host_nohz_full(const HpkvmHost *h, HpkvmCpuSet *cpus)
{
    /* Linux 6.1 reads "(null)" there when booted without nohz_full=. */
    if (!hpkvm_host_read_cpus(h, "/sys/devices/system/cpu/nohz_full", cpus,
                              NULL)) {
        hpkvm_cpuset_clear(cpus);
    }
}

bool hpkvm_host_irq_per_cpu(const HpkvmHost *h, int irq)
{
    g_autofree char *chip_path = g_strdup_printf("/sys/kernel/irq/%d/chip_name",
                                                 irq);
    g_autofree char *hwirq_path = g_strdup_printf("/sys/kernel/irq/%d/hwirq",
                                                  irq);
    g_autofree char *chip = NULL, *text = NULL;
    unsigned hwirq;

    if (hpkvm_host_read(h, chip_path, &chip) < 0 ||
        hpkvm_host_read(h, hwirq_path, &text) < 0 ||
        qemu_strtoui(g_strstrip(text), NULL, 10, &hwirq) < 0) {
        return false;
    }
    /* SGIs 0-15 and PPIs 16-31, GICv3.1's extended PPIs 1056-1119. */
    return g_str_has_prefix(chip, "GIC") &&
           (hwirq < 32 || (hwirq >= 1056 && hwirq < 1120));
}

char *hpkvm_host_cpuset_mount(const HpkvmHost *h, bool *v2)
{
    g_autofree char *mounts = NULL;
    g_auto(GStrv) lines = NULL;
    char *mount = NULL;
    int i;

    *v2 = false;
    if (hpkvm_host_read(h, "/proc/mounts", &mounts) < 0) {
        return NULL;
    }
    lines = g_strsplit(mounts, "\n", -1);
    for (i = 0; lines[i]; i++) {
        g_auto(GStrv) f = g_strsplit(lines[i], " ", 6);
        g_auto(GStrv) opts = NULL;

        if (g_strv_length(f) < 4) {
            continue;
        }
        if (!strcmp(f[2], "cgroup")) {
            opts = g_strsplit(f[3], ",", -1);
            if (g_strv_contains((const char * const *)opts, "cpuset")) {
                g_free(mount);
                *v2 = false;
                return g_strdup(f[1]);  /* a v1 cpuset is not in v2 */
            }
        } else if (!strcmp(f[2], "cgroup2") && !mount) {
            g_autofree char *ctl = g_strconcat(f[1], "/cgroup.controllers",
                                               NULL);
            g_autofree char *text = NULL;

            if (hpkvm_host_read(h, ctl, &text) == 0 &&
                strstr(text, "cpuset")) {
                mount = g_strdup(f[1]);
                *v2 = true;
            }
        }
    }
    return mount;
}

static gint host_compare_pid(gconstpointer a, gconstpointer b)
{
    return *(const pid_t *)a - *(const pid_t *)b;
}

static GArray *host_numeric_entries(const HpkvmHost *h, const char *path)
{
    g_auto(GStrv) names = hpkvm_host_list(h, path);
    GArray *ids = g_array_new(false, false, sizeof(pid_t));
    int i;

    for (i = 0; names && names[i]; i++) {
        int id;

        if (qemu_isdigit(names[i][0]) &&
            qemu_strtoi(names[i], NULL, 10, &id) == 0 && id > 0) {
            g_array_append_val(ids, id);
        }
    }
    g_array_sort(ids, host_compare_pid);
    return ids;
}

GArray *hpkvm_host_pids(const HpkvmHost *h)
{
    return host_numeric_entries(h, "/proc");
}

GArray *hpkvm_host_tids(const HpkvmHost *h, pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task", pid);
    GArray *tids = host_numeric_entries(h, path);

    if (!tids->len && !hpkvm_host_exists(h, path)) {
        /* A fake tree may describe a process without its threads. */
        g_array_append_val(tids, pid);
    }
    return tids;
}

bool hpkvm_host_holds_kvm_vcpu(const HpkvmHost *h, pid_t pid)
{
    g_autofree char *fds = g_strdup_printf("/proc/%d/fd", pid);
    g_auto(GStrv) names = hpkvm_host_list(h, fds);
    int i;

    for (i = 0; names && names[i]; i++) {
        g_autofree char *fd = g_strdup_printf("%s/%s", fds, names[i]);
        g_autofree char *full = hpkvm_host_path(h, fd);
        g_autofree char *target = g_file_read_link(full, NULL);

        if (target && g_str_has_prefix(target, "anon_inode:kvm-vcpu")) {
            return true;
        }
    }
    return false;
}

bool hpkvm_host_task(const HpkvmHost *h, pid_t pid, pid_t tid,
                     HpkvmTask *task)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/task/%d", pid, tid);
    g_autofree char *stat_path = NULL, *status_path = NULL;
    g_autofree char *stat = NULL, *status = NULL;
    g_auto(GStrv) fields = NULL;
    g_autofree char *allowed = NULL;
    const char *open, *close, *list;
    uint64_t flags;

    if (!hpkvm_host_exists(h, dir)) {
        g_free(dir);
        dir = g_strdup_printf("/proc/%d", tid);
    }
    stat_path = g_strconcat(dir, "/stat", NULL);
    status_path = g_strconcat(dir, "/status", NULL);
    if (hpkvm_host_read(h, stat_path, &stat) < 0 ||
        hpkvm_host_read(h, status_path, &status) < 0) {
        return false;
    }

    /* "tid (comm) state ppid ...": comm may hold spaces and parentheses */
    open = strchr(stat, '(');
    close = strrchr(stat, ')');
    if (!open || !close || close < open) {
        return false;
    }
    fields = g_strsplit(close + 2, " ", 0);
    if (g_strv_length(fields) < 20 ||
        qemu_strtou64(fields[6], NULL, 10, &flags) < 0 ||
        qemu_strtou64(fields[19], NULL, 10, &task->start) < 0) {
        return false;
    }
    list = strstr(status, "\nCpus_allowed_list:");
    if (!list) {
        return false;
    }
    list += strlen("\nCpus_allowed_list:");
    allowed = g_strndup(list, strcspn(list, "\n"));
    if (!hpkvm_cpuset_parse(allowed, &task->allowed, status_path, NULL)) {
        return false;
    }
    task->pid = pid;
    task->tid = tid;
    task->kthread = flags & PF_KTHREAD;
    task->pinned_by_kernel = flags & PF_NO_SETAFFINITY;
    pstrcpy(task->comm, sizeof(task->comm), open + 1);
    task->comm[MIN(close - open - 1, sizeof(task->comm) - 1)] = 0;
    return true;
}
