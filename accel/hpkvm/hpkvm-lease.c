/*
 * hpkvm: host-wide leases of host cores
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qapi/error.h"
#include "hpkvm-lease.h"
#include "hpkvm-state-dir.h"
#include "trace.h"

/* <state-dir>/leases, shown as in messages */
static int lease_dir(const HpkvmHost *h, const char *state_dir, char **shown,
                     Error **errp)
{
    *shown = g_strconcat(h->root, state_dir, "/leases", NULL);
    return hpkvm_state_dir_open(h, state_dir, "leases", errp);
}

static int ofd_lock(int fd, int cmd, short type)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
    };

    return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

/* The pid a lease file names, 0 if none. */
static pid_t lease_owner(int fd)
{
    char buf[32] = "";
    int pid = 0;

    if (pread(fd, buf, sizeof(buf) - 1, 0) > 0) {
        qemu_strtoi(buf, NULL, 10, &pid);
    }
    return pid > 0 ? pid : 0;
}

static bool lease_locked(int fd)
{
    struct flock fl = {
        .l_type = F_WRLCK,
        .l_whence = SEEK_SET,
    };

    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

void hpkvm_leases_init(HpkvmLeases *l)
{
    int i;

    hpkvm_cpuset_clear(&l->held);
    for (i = 0; i < HPKVM_MAX_HOST_CPUS; i++) {
        l->fd[i] = -1;
    }
}

bool hpkvm_leases_take(HpkvmLeases *l, const HpkvmHost *h,
                       const char *state_dir, const HpkvmCpuSet *cores,
                       Error **errp)
{
    g_autofree char *dir = NULL;
    int dfd = lease_dir(h, state_dir, &dir, errp);
    unsigned cpu;

    if (dfd < 0) {
        return false;
    }
    /* Ascending order; a refusal releases what was taken. */
    HPKVM_CPUSET_FOREACH(cpu, cores) {
        g_autofree char *name = g_strdup_printf("cpu%u", cpu);
        g_autofree char *pid = g_strdup_printf("%d\n", getpid());
        int fd = hpkvm_state_file_open(dfd, dir, name, O_RDWR | O_CREAT,
                                       errp);
        int ret;

        if (fd < 0) {
            error_prepend(errp, "hpkvm: cannot take the lease of host core "
                          "%u: ", cpu);
            goto fail;
        }
        ret = ofd_lock(fd, F_OFD_SETLK, F_WRLCK);
        if (ret < 0) {
            pid_t owner = lease_owner(fd);

            close(fd);
            if (ret == -EAGAIN || ret == -EACCES) {
                error_setg(errp, "hpkvm: host core %u is leased by another "
                           "VM (pid %d): choose other cores in host-cpus=, "
                           "or stop that VM", cpu, owner);
            } else {
                error_setg_errno(errp, -ret, "hpkvm: cannot lock the lease "
                                 "of host core %u, %s/%s", cpu, dir, name);
            }
            goto fail;
        }
        if (ftruncate(fd, 0) < 0 ||
            pwrite(fd, pid, strlen(pid), 0) != strlen(pid)) {
            error_setg_errno(errp, errno, "hpkvm: cannot write the lease "
                             "of host core %u, %s/%s", cpu, dir, name);
            close(fd);
            goto fail;
        }
        l->fd[cpu] = fd;
        set_bit(cpu, l->held.bits);
        trace_hpkvm_lease_take(cpu, getpid());
    }
    close(dfd);
    return true;

fail:
    close(dfd);
    hpkvm_leases_release(l);
    return false;
}

bool hpkvm_leases_adopt(HpkvmLeases *l, unsigned cpu, int fd, Error **errp)
{
    g_autofree char *pid = g_strdup_printf("%d\n", getpid());
    int ret;

    /* Our description holds the lock already: locking again is a no-op. */
    ret = ofd_lock(fd, F_OFD_SETLK, F_WRLCK);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "hpkvm: the lease of host core %u "
                         "handed over by the previous QEMU is not held",
                         cpu);
        return false;
    }
    if (ftruncate(fd, 0) < 0 ||
        pwrite(fd, pid, strlen(pid), 0) != strlen(pid)) {
        error_setg_errno(errp, errno, "hpkvm: cannot write the lease of "
                         "host core %u", cpu);
        return false;
    }
    l->fd[cpu] = fd;
    set_bit(cpu, l->held.bits);
    trace_hpkvm_lease_adopt(cpu, getpid());
    return true;
}

void hpkvm_leases_release(HpkvmLeases *l)
{
    unsigned cpu;

    HPKVM_CPUSET_FOREACH(cpu, &l->held) {
        /*
         * The file stays: removing it could let one VM lock a new file of
         * the same name while another has the old one open.  Its pid is
         * left too: only a locked file names an owner.
         */
        close(l->fd[cpu]);
        l->fd[cpu] = -1;
        trace_hpkvm_lease_release(cpu);
    }
    hpkvm_cpuset_clear(&l->held);
}

bool hpkvm_leases_scan(const HpkvmHost *h, const char *state_dir,
                       HpkvmLeaseMap *map, Error **errp)
{
    g_autofree char *dir = NULL;
    int dfd = lease_dir(h, state_dir, &dir, errp);
    g_autoptr(GDir) d = NULL;
    const char *name;

    memset(map, 0, sizeof(*map));
    if (dfd < 0) {
        return false;
    }
    d = g_dir_open(dir, 0, NULL);
    while (d && (name = g_dir_read_name(d))) {
        unsigned cpu;
        int fd;

        if (!g_str_has_prefix(name, "cpu") ||
            qemu_strtoui(name + 3, NULL, 10, &cpu) < 0 ||
            cpu >= HPKVM_MAX_HOST_CPUS) {
            continue;
        }
        /* Only the files hpkvm made count: a planted one leases nothing */
        fd = hpkvm_state_file_open(dfd, dir, name, O_RDWR, NULL);
        if (fd < 0) {
            continue;
        }
        /* Our own leases too: OFD locks conflict across descriptions. */
        if (lease_locked(fd)) {
            set_bit(cpu, map->leased.bits);
            map->owner[cpu] = lease_owner(fd);
        }
        close(fd);
    }
    close(dfd);
    return true;
}

int hpkvm_leases_lock_host(const HpkvmHost *h, const char *state_dir,
                           Error **errp)
{
    g_autofree char *dir = NULL;
    int dfd = lease_dir(h, state_dir, &dir, errp);
    int fd, ret;

    if (dfd < 0) {
        return -1;
    }
    fd = hpkvm_state_file_open(dfd, dir, "host.lock", O_RDWR | O_CREAT,
                               errp);
    close(dfd);
    if (fd < 0) {
        return -1;
    }
    ret = ofd_lock(fd, F_OFD_SETLKW, F_WRLCK);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "hpkvm: cannot lock %s/host.lock", dir);
        close(fd);
        return -1;
    }
    return fd;
}
