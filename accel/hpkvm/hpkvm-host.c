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

void hpkvm_host_init(HpkvmHost *h, const char *root)
{
    g_autofree char *canon = g_canonicalize_filename(root ?: "/", "/");

    h->real = !strcmp(canon, "/");
    h->root = h->real ? g_strdup("") : g_steal_pointer(&canon);
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

int hpkvm_host_read(const HpkvmHost *h, const char *path, char **text)
{
    g_autofree char *full = hpkvm_host_path(h, path);
    g_autoptr(GString) buf = g_string_new("");
    char chunk[4096];
    ssize_t n;
    int fd;

    *text = NULL;
    fd = qemu_open_old(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    /* procfs and sysfs files have no size: read to the end. */
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        g_string_append_len(buf, chunk, n);
    }
    if (n < 0) {
        n = -errno;
        close(fd);
        return n;
    }
    close(fd);
    *text = g_string_free(g_steal_pointer(&buf), false);
    return 0;
}

/* One write(2): sysfs, procfs and cgroupfs take a value per write. */
static int write_once(const char *path, int flags, const char *text)
{
    size_t len = strlen(text);
    int fd = qemu_open_old(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags,
                           0644);
    ssize_t ret;

    if (fd < 0) {
        return -errno;
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
    g_autofree char *full = hpkvm_host_path(h, path);

    return write_once(full, O_TRUNC, text);
}

int hpkvm_host_append(const HpkvmHost *h, const char *path, const char *text)
{
    g_autofree char *full = hpkvm_host_path(h, path);
    g_autofree char *line = g_strdup_printf("%s\n", text);

    return write_once(full, O_APPEND, line);
}

int hpkvm_host_mkdir(const HpkvmHost *h, const char *path)
{
    g_autofree char *full = hpkvm_host_path(h, path);

    return mkdir(full, 0755) < 0 ? -errno : 0;
}

int hpkvm_host_rmdir(const HpkvmHost *h, const char *path)
{
    g_autofree char *full = hpkvm_host_path(h, path);
    g_auto(GStrv) names = NULL;
    int i;

    if (rmdir(full) == 0 || errno == ENOENT) {
        return 0;
    }
    if (errno != ENOTEMPTY || h->real) {
        return -errno;
    }
    /* A fake tree has plain files where cgroupfs has control files. */
    names = hpkvm_host_list(h, path);
    for (i = 0; names && names[i]; i++) {
        g_autofree char *file = g_build_filename(full, names[i], NULL);

        unlink(file);
    }
    return rmdir(full) < 0 ? -errno : 0;
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

static gint compare_pid(gconstpointer a, gconstpointer b)
{
    return *(const pid_t *)a - *(const pid_t *)b;
}

static GArray *numeric_entries(const HpkvmHost *h, const char *path)
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
    g_array_sort(ids, compare_pid);
    return ids;
}

GArray *hpkvm_host_pids(const HpkvmHost *h)
{
    return numeric_entries(h, "/proc");
}

GArray *hpkvm_host_tids(const HpkvmHost *h, pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task", pid);
    GArray *tids = numeric_entries(h, path);

    if (!tids->len && !hpkvm_host_exists(h, path)) {
        /* A fake tree may describe a process without its threads. */
        g_array_append_val(tids, pid);
    }
    return tids;
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
