/*
 * qemu-hpkvm-helper: the kernel's grants of the cores it leases
 *
 * hpkvm's reference KVM (kvm/patches/0017) binds a vCPU to a core, which
 * makes its thread immovable there and keeps the core from every other
 * VM, only for a caller with CAP_SYS_NICE or a process the core was
 * granted to (HPKVM_GRANT_CORE, which itself needs CAP_SYS_NICE).  A
 * QEMU running as an ordinary user gets its cores from this helper, so
 * the helper grants them with the lease, and takes them back when that
 * QEMU dies.  A KVM without hpkvm (Debian's: KVM_CAP_HPKVM is 0, and an
 * unknown /dev/kvm ioctl is EINVAL there) binds nothing, and one of
 * ours from before grants (ENOTTY) binds without them.
 *
 * /dev/kvm is opened for each change only: an open /dev/kvm holds the
 * vendor module (kvm_amd, kvm_intel), which the host must stay free to
 * reload.  The kernel drops every grant when that module goes; the
 * helper's record of them is then stale, which costs a redundant revoke.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "linux/hpkvm.h"
#include "linux/kvm.h"
#include "hpkvm-helper-grant.h"

static int grants_ioctl(int kvm_fd, unsigned cpu, pid_t pid)
{
    struct hpkvm_core_grant grant = { .host_cpu = cpu, .pid = pid };

    return ioctl(kvm_fd, HPKVM_GRANT_CORE, &grant) < 0 ? -errno : 0;
}

/* The host's KVM, or -1 where there is none to grant anything. */
static int grants_open_kvm(HpkvmHelperGrants *g)
{
    return g->host->real ? open("/dev/kvm", O_RDWR | O_CLOEXEC) : -1;
}

void hpkvm_helper_grants_init(HpkvmHelperGrants *g, const HpkvmHost *host)
{
    memset(g, 0, sizeof(*g));
    g->host = host;
}

bool hpkvm_helper_grants_give(HpkvmHelperGrants *g, const HpkvmCpuSet *cores,
                              pid_t pid, Error **errp)
{
    ERRP_GUARD();
    int kvm_fd = grants_open_kvm(g);
    int pidfd = -1;
    unsigned cpu;
    int r = 0;

    if (kvm_fd < 0) {
        if (!g->host->real || errno == ENOENT) {
            return true;        /* no KVM: no bind to grant */
        }
        error_setg_errno(errp, errno, "cannot open /dev/kvm to grant pid "
                         "%d its host cores", pid);
        return false;
    }
    if (ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_HPKVM) <= 0) {
        close(kvm_fd);
        return true;            /* no hpkvm: no bind at all */
    }
    /*
     * The kernel takes the number: the process must outlive the grant,
     * for the number to have named it and no process that reuses it.
     */
    pidfd = syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        error_setg_errno(errp, errno, "cannot grant host cores to pid %d",
                         pid);
        goto out;
    }
    HPKVM_CPUSET_FOREACH(cpu, cores) {
        r = grants_ioctl(kvm_fd, cpu, pid);
        if (r == -ENOTTY) {
            /* A KVM that binds without grants. */
            break;
        } else if (r < 0) {
            error_setg_errno(errp, -r, "cannot grant host core %u to pid %d",
                             cpu, pid);
            if (r == -EPERM) {
                error_append_hint(errp, "Granting cores needs CAP_SYS_NICE: "
                                  "run qemu-hpkvm-helper as root.\n");
            }
            break;
        }
        g->grantee[cpu] = pid;
    }
    if (!*errp && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) {
        error_setg(errp, "pid %d exited before its cores were granted", pid);
    } else if (!*errp && r == 0) {
        g_autofree char *list = hpkvm_cpuset_format(cores);

        info_report("pid %d: host cores %s granted in KVM", pid, list);
    }
out:
    if (pidfd >= 0) {
        close(pidfd);
    }
    close(kvm_fd);
    if (*errp) {
        hpkvm_helper_grants_drop(g, pid);
        return false;
    }
    return true;
}

void hpkvm_helper_grants_drop(HpkvmHelperGrants *g, pid_t pid)
{
    int kvm_fd = -1;
    unsigned cpu;
    int r;

    for (cpu = 0; pid > 0 && cpu < HPKVM_MAX_HOST_CPUS; cpu++) {
        if (g->grantee[cpu] != pid) {
            continue;
        }
        g->grantee[cpu] = 0;
        if (kvm_fd < 0) {
            kvm_fd = grants_open_kvm(g);
            if (kvm_fd < 0) {
                /* KVM unloaded: its grants went with it. */
                memset(g->grantee, 0, sizeof(g->grantee));
                return;
            }
        }
        r = grants_ioctl(kvm_fd, cpu, 0);
        if (r < 0) {
            warn_report("cannot take host core %u back from pid %d: %s",
                        cpu, pid, strerror(-r));
        }
    }
    if (kvm_fd >= 0) {
        close(kvm_fd);
    }
}
