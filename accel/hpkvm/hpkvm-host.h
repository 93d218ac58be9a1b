/*
 * hpkvm: the host as hpkvm's isolation sees it, through one root
 *
 * Every host path hpkvm reads or changes (/proc, /sys, the cgroup
 * mounts, /run/hpkvm) is taken relative to a root, "/" on a real host
 * and a fake tree in tests.  A path hpkvm changes is walked one
 * component at a time from the root, following no symbolic link and
 * refusing "." and "..", and a file is never created by a write: what
 * hpkvm is asked to change is exactly the kernel file its name says.
 * What cannot be done through files, setting another task's CPU
 * affinity, is an operation of the host: the real
 * syscall when the root is "/", none (refused, reported) in a fake tree
 * unless a test supplies one.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_HOST_H
#define ACCEL_HPKVM_HOST_H

#include "hpkvm-cpuset.h"

typedef struct HpkvmHost {
    char *root;                 /* "/" or a fake tree, without trailing / */
    bool real;                  /* root is "/": this host's processes */
    /* Returns 0 or -errno; NULL where the root is not the real one. */
    int (*set_affinity)(pid_t tid, const HpkvmCpuSet *cpus);
} HpkvmHost;

/* What /proc says about one task. */
typedef struct HpkvmTask {
    pid_t pid;                  /* its process */
    pid_t tid;
    uint64_t start;             /* start time: tells a reused tid apart */
    bool kthread;               /* PF_KTHREAD */
    bool pinned_by_kernel;      /* PF_NO_SETAFFINITY: per-CPU kthread */
    HpkvmCpuSet allowed;        /* Cpus_allowed_list */
    char comm[32];
} HpkvmTask;

/* A task's CPU affinity on this host (syscalls, whatever the root). */
int hpkvm_set_affinity(pid_t tid, const HpkvmCpuSet *cpus);
bool hpkvm_get_affinity(pid_t tid, HpkvmCpuSet *cpus);

void hpkvm_host_init(HpkvmHost *h, const char *root);
void hpkvm_host_cleanup(HpkvmHost *h);

/* @path, absolute on the host, inside the root. */
char *hpkvm_host_path(const HpkvmHost *h, const char *path);

/* Absolute, with no empty, "." or ".." component. */
bool hpkvm_host_path_is_clean(const char *path);

/*
 * The directory holding the last component of @path, opened (O_PATH)
 * without following symbolic links, and that component's name in
 * @name; -errno if a component is missing, a link, "." or "..".
 */
int hpkvm_host_open_parent(const HpkvmHost *h, const char *path,
                           char **name);
/* openat(2) of @path under the root, with the same walk: fd or -errno. */
int hpkvm_host_open(const HpkvmHost *h, const char *path, int flags,
                    mode_t mode);

/* File access under the root; each returns 0 or -errno. */
int hpkvm_host_read(const HpkvmHost *h, const char *path, char **text);
int hpkvm_host_write(const HpkvmHost *h, const char *path, const char *text);
/*
 * Adds a line: cgroup.procs on a real host, a log of moves in a fake
 * one.  Writes and appends need the file to exist (ENOENT otherwise).
 */
int hpkvm_host_append(const HpkvmHost *h, const char *path,
                      const char *text);
/* In a fake tree, also creates the control files cgroupfs would. */
int hpkvm_host_mkdir(const HpkvmHost *h, const char *path);
/* Removes a directory hpkvm created (a cgroup, or its fake stand-in). */
int hpkvm_host_rmdir(const HpkvmHost *h, const char *path);
bool hpkvm_host_exists(const HpkvmHost *h, const char *path);
/* The names in a directory, or NULL if it cannot be read. */
GStrv hpkvm_host_list(const HpkvmHost *h, const char *path);

bool hpkvm_host_read_cpus(const HpkvmHost *h, const char *path,
                          HpkvmCpuSet *cpus, Error **errp);
/* The cores the reference kernel may bind vCPUs to (kvm/patches/0004). */
#define HPKVM_HOST_KVM_CORES "/sys/module/kvm/parameters/hpkvm_cores"
/* The host's nohz_full= cores: empty if booted without, or unreadable. */
void hpkvm_host_nohz_full(const HpkvmHost *h, HpkvmCpuSet *cpus);
/*
 * Is IRQ @irq one of which every CPU has its own, which no affinity
 * moves?  Known for the Arm GIC's: its SGIs and PPIs (the IPIs, the
 * architected timers, the vGIC's maintenance interrupt, the PMU), as
 * /sys/kernel/irq/IRQ names its chip and hardware number.
 */
bool hpkvm_host_irq_per_cpu(const HpkvmHost *h, int irq);

/*
 * The cgroup hierarchy with the cpuset controller (a v1 one first, else
 * cgroup2 with cpuset available), NULL if none; *v2 says which.
 */
char *hpkvm_host_cpuset_mount(const HpkvmHost *h, bool *v2);

/* Processes (/proc/PID) and one process's threads, in numeric order. */
GArray *hpkvm_host_pids(const HpkvmHost *h);
GArray *hpkvm_host_tids(const HpkvmHost *h, pid_t pid);
/* Fills @task from /proc; false if the task is gone. */
bool hpkvm_host_task(const HpkvmHost *h, pid_t pid, pid_t tid,
                     HpkvmTask *task);
/* Does process @pid hold a KVM vCPU (an fd on "anon_inode:kvm-vcpu")? */
bool hpkvm_host_holds_kvm_vcpu(const HpkvmHost *h, pid_t pid);

#endif
