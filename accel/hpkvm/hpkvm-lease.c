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

static int lease_ofd_lock(int fd, int cmd, short type)
{
    struct flock fl = {
        .l_type = type,
        .l_whence = SEEK_SET,
    };

    return fcntl(fd, cmd, &fl) < 0 ? -errno : 0;
}

/* The pid a lease file names, 0 if none; whether it says "shared". */
static pid_t lease_owner(int fd, bool *shared)
{
    char buf[32] = "";
    const char *end = NULL;
    int pid = 0;

    if (pread(fd, buf, sizeof(buf) - 1, 0) > 0 &&
        qemu_strtoi(buf, &end, 10, &pid) == 0 && shared) {
        *shared = g_str_has_prefix(end, " shared");
    }
    return pid > 0 ? pid : 0;
}

/* Names @l's owner in the lease file @fd. */
static int lease_write_owner(const HpkvmLeases *l, int fd)
{
    g_autofree char *text = g_strdup_printf("%d%s\n", l->owner,
                                            l->shared ? " shared" : "");

    if (ftruncate(fd, 0) < 0 ||
        pwrite(fd, text, strlen(text), 0) != strlen(text)) {
        return -errno;
    }
    return 0;
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
    l->owner = getpid();
    l->shared = false;
}

bool hpkvm_leases_take(HpkvmLeases *l, const HpkvmHost *h,
                       const char *state_dir, const HpkvmCpuSet *cores,
                       Error **errp)
{
    ERRP_GUARD();
    g_autofree char *dir = NULL;
    int dfd = lease_dir(h, state_dir, &dir, errp);
    unsigned cpu;

    if (dfd < 0) {
        return false;
    }
    /* Ascending order; a refusal releases what was taken. */
    HPKVM_CPUSET_FOREACH(cpu, cores) {
        g_autofree char *name = g_strdup_printf("cpu%u", cpu);
        int fd = hpkvm_state_file_open(dfd, dir, name, O_RDWR | O_CREAT,
                                       errp);
        int ret;

        if (fd < 0) {
            error_prepend(errp, "cannot take the lease of host core "
                          "%u: ", cpu);
            goto fail;
        }
        ret = lease_ofd_lock(fd, F_OFD_SETLK, F_WRLCK);
        if (ret < 0) {
            pid_t owner = lease_owner(fd, NULL);

            close(fd);
            if (ret == -EAGAIN || ret == -EACCES) {
                error_setg(errp, "host core %u is leased by another "
                           "VM (pid %d): choose other cores in host-cpus=, "
                           "or stop that VM", cpu, owner);
            } else {
                error_setg_errno(errp, -ret, "cannot lock the lease "
                                 "of host core %u, %s/%s", cpu, dir, name);
            }
            goto fail;
        }
        ret = lease_write_owner(l, fd);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "cannot write the lease "
                             "of host core %u, %s/%s", cpu, dir, name);
            close(fd);
            goto fail;
        }
        l->fd[cpu] = fd;
        set_bit(cpu, l->held.bits);
        trace_hpkvm_lease_take(cpu, l->owner);
    }
    close(dfd);
    return true;

fail:
    close(dfd);
    hpkvm_leases_release(l);
    return false;
}

bool hpkvm_leases_adopt(HpkvmLeases *l, const HpkvmHost *h,
                        const char *state_dir, unsigned cpu, int fd,
                        Error **errp)
{
    ERRP_GUARD();
    g_autofree char *dir = NULL;
    g_autofree char *name = g_strdup_printf("cpu%u", cpu);
    int dfd = lease_dir(h, state_dir, &dir, errp);
    struct stat given, file;
    int own, ret;
    bool locked;

    if (dfd < 0) {
        return false;
    }
    own = hpkvm_state_file_open(dfd, dir, name, O_RDWR, errp);
    close(dfd);
    if (own < 0) {
        error_prepend(errp, "the lease of host core %u cannot be "
                      "handed over: ", cpu);
        return false;
    }
    /*
     * The file must be the lease itself, locked (seen from our own
     * description), and the lock the one of the description handed
     * over: locking again through it is then a no-op.
     */
    locked = lease_locked(own);
    ret = fstat(fd, &given) < 0 || fstat(own, &file) < 0 ? -errno : 0;
    close(own);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot check the lease of host "
                         "core %u handed over", cpu);
        return false;
    }
    if (given.st_dev == file.st_dev && given.st_ino == file.st_ino &&
        locked) {
        ret = lease_ofd_lock(fd, F_OFD_SETLK, F_WRLCK);
    }
    if (given.st_dev != file.st_dev || given.st_ino != file.st_ino ||
        !locked || ret < 0) {
        error_setg(errp, "the file handed over for host core %u is "
                   "not its lease, %s/%s, holding its lock", cpu, dir, name);
        return false;
    }
    ret = lease_write_owner(l, fd);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot write the lease of "
                         "host core %u", cpu);
        return false;
    }
    l->fd[cpu] = fd;
    set_bit(cpu, l->held.bits);
    trace_hpkvm_lease_adopt(cpu, l->owner);
    return true;
}

bool hpkvm_leases_set_shared(HpkvmLeases *l, bool shared, Error **errp)
{
    unsigned cpu;
    int ret;

    l->shared = shared;
    HPKVM_CPUSET_FOREACH(cpu, &l->held) {
        ret = lease_write_owner(l, l->fd[cpu]);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "cannot write the lease of "
                             "host core %u", cpu);
            return false;
        }
    }
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
            bool shared = false;

            set_bit(cpu, map->leased.bits);
            map->owner[cpu] = lease_owner(fd, &shared);
            if (shared) {
                set_bit(cpu, map->shared.bits);
            }
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
    ret = lease_ofd_lock(fd, F_OFD_SETLKW, F_WRLCK);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot lock %s/host.lock", dir);
        close(fd);
        return -1;
    }
    return fd;
}
