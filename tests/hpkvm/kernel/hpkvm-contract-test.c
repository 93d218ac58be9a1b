/*
 * hpkvm-contract-test: does a patched KVM keep the hpkvm kernel contract?
 *
 * One behaviour per test, as in the kernel's tools/testing/selftests/kvm:
 * that the KVM this runs on answers linux-headers/linux/hpkvm.h as
 * docs/devel/hpkvm-kernel-contract.rst says (what it grants or refuses,
 * with which errno, in which order the calls are allowed, how
 * HPKVM_BIND_VCPU hands out host cores).  The fake kernel of
 * tests/hpkvm/fake-kernel only plays the contract to QEMU; this checks
 * the real thing, kvm/patches.
 *
 * It runs as root inside the nested test host, on the real /dev/kvm with
 * kvm/'s kvm.ko loaded and two or more online CPUs.  Without /dev/kvm
 * every test fails rather than skips: there, a missing KVM is a broken
 * set-up, not a host to pass over.
 *
 * No guest code runs.  Every vCPU has kvm_run.immediate_exit set, so a
 * KVM_RUN that gets past the kernel's hpkvm checks (which come first)
 * returns EINTR at once: EINTR means "allowed to enter the guest", EBUSY
 * or EPERM a refusal, and no guest memory or way to stop a guest is
 * needed.
 *
 * One case (bind/host-cores) changes a host-wide setting, the kernel's
 * kvm.hpkvm_cores, and puts it back before it checks anything; it needs
 * the reference kernel's parameter, and the others need every core of
 * this process's affinity in it (the default, every core).
 *
 * A bind pins the calling thread to a core, so the main thread never
 * binds: a vCPU's thread is a ContractWorker, which runs what the test
 * hands it and ends with the test.  A vCPU keeps its core
 * until its VM is destroyed, i.e. until every fd and mapping of the VM is
 * gone, so each test releases all it opened: the tests share one process
 * and so the kernel's table of held cores.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* cpu_set_t, sched_getaffinity() */
#endif

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib.h>
#include <linux/capability.h>
#include <linux/kvm.h>
#include "linux/hpkvm.h"

#define CONTRACT_FEAT_ALL       ((1ULL << HPKVM_FEATURE_NR) - 1)
/* Granted by the architecture (kvm/patches/0007), with exclusive cores. */
#define CONTRACT_FEAT_ARCH      (HPKVM_FEAT_IRQ_PASSTHROUGH | \
                                 HPKVM_FEAT_IPI_FASTPATH)

/*
 * The kernel's answer for @feat, an HPKVM_FEAT_* bit: a macro, so that a
 * failed assertion names the feature rather than an index.
 */
#define CONTRACT_REASON(req, feat) ((req)->reason[__builtin_ctzll(feat)])

/* This process's CPUs at start, in order: the cores the tests bind. */
static cpu_set_t contract_cpuset;
static unsigned int contract_cpus[CPU_SETSIZE];
static unsigned int contract_nr_cpus;

typedef struct ContractVm {
    int kvm_fd;                 /* /dev/kvm */
    int fd;
} ContractVm;

typedef struct ContractVcpu {
    int fd;
    struct kvm_run *run;        /* mapped only to set immediate_exit */
    size_t run_size;
} ContractVcpu;

/* A thread that runs the jobs handed to it, one at a time. */
typedef struct ContractWorker {
    GThread *thread;
    GMutex lock;
    GCond cond;
    int (*job)(void *opaque);   /* NULL: none pending */
    void *opaque;
    bool quit;
    int ret;                    /* the last job's: >= 0 or -errno */
} ContractWorker;

typedef struct ContractBind {
    ContractVcpu *vcpu;
    struct hpkvm_vcpu_bind bind;
} ContractBind;

static int contract_open_kvm(void)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        g_error("cannot open /dev/kvm: %s; this test runs as root where "
                "hpkvm's patched kvm.ko (kvm/build.sh) is loaded",
                g_strerror(errno));
    }
    return fd;
}

/* A step every check after it relies on: fail, naming it, if it failed. */
static int contract_setup(int ret, const char *what)
{
    if (ret < 0) {
        g_error("%s: %s", what, g_strerror(errno));
    }
    return ret;
}

/* A call's result as the kernel returned it: >= 0, or -errno. */
static int contract_result(int ret)
{
    return ret < 0 ? -errno : ret;
}

static unsigned int contract_online(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    g_assert_cmpint(n, >=, 1);
    return n;
}

/* Binding needs a core for the vCPU and the one the host keeps. */
static void contract_need_two_cpus(void)
{
    g_assert_cmpuint(contract_nr_cpus, >=, 2);
}

static unsigned int contract_last_cpu(void)
{
    contract_need_two_cpus();
    return contract_cpus[contract_nr_cpus - 1];
}

/*
 * The host's nohz_full= CPUs into @set; false if it was booted without:
 * Linux 6.1 then reads "(null)" there, and a kernel without
 * CONFIG_NO_HZ_FULL has no file at all.
 */
static bool contract_nohz_full(cpu_set_t *set)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) ranges = NULL;
    unsigned int i;

    CPU_ZERO(set);
    if (!g_file_get_contents("/sys/devices/system/cpu/nohz_full", &text,
                             NULL, NULL)) {
        return false;
    }
    g_strstrip(text);
    if (!g_ascii_isdigit(text[0])) {
        return false;
    }
    ranges = g_strsplit(text, ",", -1);
    for (i = 0; ranges[i]; i++) {
        char *end;
        guint64 lo = g_ascii_strtoull(ranges[i], &end, 10);
        guint64 hi = *end == '-' ? g_ascii_strtoull(end + 1, NULL, 10) : lo;

        g_assert_cmpuint(hi, <, CPU_SETSIZE);
        for (; lo <= hi; lo++) {
            CPU_SET(lo, set);
        }
    }
    return CPU_COUNT(set) > 0;
}

static void contract_vm_new(ContractVm *vm)
{
    vm->kvm_fd = contract_open_kvm();
    vm->fd = contract_setup(ioctl(vm->kvm_fd, KVM_CREATE_VM, 0),
                            "KVM_CREATE_VM");
#ifdef __x86_64__
    /* The contract's order: HPKVM_ENABLE after the in-kernel irqchip. */
    contract_setup(ioctl(vm->fd, KVM_CREATE_IRQCHIP, 0),
                   "KVM_CREATE_IRQCHIP");
#endif
    /*
     * On arm64 the vGIC is a device QEMU creates after the vCPUs (its
     * redistributors are per vCPU), so HPKVM_ENABLE comes before it; the
     * contract's "On Arm" says so.
     */
}

/* The VM goes (and its vCPUs' cores with it) once its vCPUs are freed. */
static void contract_vm_free(ContractVm *vm)
{
    close(vm->fd);
    close(vm->kvm_fd);
}

static int contract_enable(ContractVm *vm, struct hpkvm_enable *req)
{
    return contract_result(ioctl(vm->fd, HPKVM_ENABLE, req));
}

static int contract_disable(ContractVm *vm)
{
    return contract_result(ioctl(vm->fd, HPKVM_DISABLE, 0));
}

/* A valid request for exclusive cores alone, not required. */
static struct hpkvm_enable contract_exclusive_req(unsigned int nr_vcpus)
{
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES,
        .nr_vcpus = nr_vcpus,
    };

    return req;
}

/* Have exclusive cores granted to @vm, as every bind needs. */
static void contract_vm_exclusive(ContractVm *vm, unsigned int nr_vcpus)
{
    struct hpkvm_enable req = contract_exclusive_req(nr_vcpus);

    req.required = HPKVM_FEAT_EXCLUSIVE_CORES;
    g_assert_cmpint(contract_enable(vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
}

static void contract_vcpu_new(ContractVm *vm, unsigned long id,
                              ContractVcpu *vcpu)
{
    int size = contract_setup(ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0),
                              "KVM_GET_VCPU_MMAP_SIZE");

    vcpu->fd = contract_setup(ioctl(vm->fd, KVM_CREATE_VCPU, id),
                              "KVM_CREATE_VCPU");
    vcpu->run_size = size;
    vcpu->run = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     vcpu->fd, 0);
    if (vcpu->run == MAP_FAILED) {
        g_error("mmap of a vCPU's kvm_run: %s", g_strerror(errno));
    }
    /* KVM_RUN then stops right after hpkvm's checks (see the top). */
    vcpu->run->immediate_exit = 1;
#ifdef __aarch64__
    {
        /*
         * arm64's KVM_RUN refuses a vCPU not yet initialised (ENOEXEC)
         * before it looks at immediate_exit; its hpkvm checks still come
         * first.
         */
        struct kvm_vcpu_init init;

        contract_setup(ioctl(vm->fd, KVM_ARM_PREFERRED_TARGET, &init),
                       "KVM_ARM_PREFERRED_TARGET");
        contract_setup(ioctl(vcpu->fd, KVM_ARM_VCPU_INIT, &init),
                       "KVM_ARM_VCPU_INIT");
    }
#endif
}

/* The mapping holds the VM as much as the fd does: both must go. */
static void contract_vcpu_free(ContractVcpu *vcpu)
{
    munmap(vcpu->run, vcpu->run_size);
    close(vcpu->fd);
}

static gpointer contract_worker_thread(gpointer opaque)
{
    ContractWorker *w = opaque;
    int (*job)(void *);
    void *job_opaque;
    int ret;

    g_mutex_lock(&w->lock);
    for (;;) {
        while (!w->job && !w->quit) {
            g_cond_wait(&w->cond, &w->lock);
        }
        job = w->job;
        job_opaque = w->opaque;
        if (!job) {
            break;
        }
        g_mutex_unlock(&w->lock);
        ret = job(job_opaque);
        g_mutex_lock(&w->lock);
        w->ret = ret;
        w->job = NULL;
        g_cond_broadcast(&w->cond);
    }
    g_mutex_unlock(&w->lock);
    return NULL;
}

/* A fresh thread: a bind marks its thread, so each vCPU needs its own. */
static ContractWorker *contract_worker_new(void)
{
    ContractWorker *w = g_new0(ContractWorker, 1);

    g_mutex_init(&w->lock);
    g_cond_init(&w->cond);
    w->thread = g_thread_new("contract-vcpu", contract_worker_thread, w);
    return w;
}

/* Run @job(@opaque) on @w's thread and return its result. */
static int contract_worker_call(ContractWorker *w, int (*job)(void *),
                                void *opaque)
{
    int ret;

    g_mutex_lock(&w->lock);
    w->job = job;
    w->opaque = opaque;
    g_cond_broadcast(&w->cond);
    while (w->job) {
        g_cond_wait(&w->cond, &w->lock);
    }
    ret = w->ret;
    g_mutex_unlock(&w->lock);
    return ret;
}

/* End @w's thread; a vCPU it bound keeps its core until its VM goes. */
static void contract_worker_free(ContractWorker *w)
{
    g_mutex_lock(&w->lock);
    w->quit = true;
    g_cond_broadcast(&w->cond);
    g_mutex_unlock(&w->lock);
    g_thread_join(w->thread);
    g_mutex_clear(&w->lock);
    g_cond_clear(&w->cond);
    g_free(w);
}

static int contract_job_bind(void *opaque)
{
    ContractBind *b = opaque;

    return contract_result(ioctl(b->vcpu->fd, HPKVM_BIND_VCPU, &b->bind));
}

static int contract_job_run(void *opaque)
{
    ContractVcpu *vcpu = opaque;

    return contract_result(ioctl(vcpu->fd, KVM_RUN, 0));
}

static int contract_job_get_affinity(void *opaque)
{
    return contract_result(sched_getaffinity(0, sizeof(cpu_set_t), opaque));
}

static int contract_job_set_affinity(void *opaque)
{
    return contract_result(sched_setaffinity(0, sizeof(cpu_set_t), opaque));
}

/*
 * Drop CAP_SYS_NICE from the calling thread's effective capabilities: a
 * raw capset() changes that thread only, so the test's other threads
 * keep root's.  The thread stays so until it ends.
 */
static int contract_job_drop_sys_nice(void *opaque)
{
    struct __user_cap_header_struct hdr = {
        .version = _LINUX_CAPABILITY_VERSION_3,
    };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    if (syscall(SYS_capget, &hdr, data)) {
        return -errno;
    }
    data[CAP_TO_INDEX(CAP_SYS_NICE)].effective &= ~CAP_TO_MASK(CAP_SYS_NICE);
    return contract_result(syscall(SYS_capset, &hdr, data));
}

static int contract_job_gettid(void *opaque)
{
    return syscall(SYS_gettid);
}

typedef struct ContractGrant {
    int kvm_fd;
    struct hpkvm_core_grant grant;
} ContractGrant;

static int contract_job_grant(void *opaque)
{
    ContractGrant *g = opaque;

    return contract_result(ioctl(g->kvm_fd, HPKVM_GRANT_CORE, &g->grant));
}

/* HPKVM_GRANT_CORE of @host_cpu to process @pid (0: revoke). */
static int contract_grant(int kvm_fd, uint32_t host_cpu, int32_t pid)
{
    ContractGrant g = {
        .kvm_fd = kvm_fd,
        .grant = { .host_cpu = host_cpu, .pid = pid },
    };

    return contract_job_grant(&g);
}

/* HPKVM_BIND_VCPU of @vcpu to @host_cpu, from @w's thread. */
static int contract_bind(ContractWorker *w, ContractVcpu *vcpu,
                         unsigned int host_cpu)
{
    ContractBind b = { .vcpu = vcpu, .bind.host_cpu = host_cpu };

    return contract_worker_call(w, contract_job_bind, &b);
}

/* The same from a thread that ends right after: the vCPU stays bound. */
static int contract_bind_once(ContractVcpu *vcpu, unsigned int host_cpu)
{
    ContractWorker *w = contract_worker_new();
    int r = contract_bind(w, vcpu, host_cpu);

    contract_worker_free(w);
    return r;
}

/* KVM_RUN of @vcpu from @w's thread: -EINTR if it may enter the guest. */
static int contract_run(ContractWorker *w, ContractVcpu *vcpu)
{
    return contract_worker_call(w, contract_job_run, vcpu);
}

static void test_caps(void)
{
    int kvm_fd = contract_open_kvm();
    struct hpkvm_caps caps;
    unsigned int i;

    g_assert_cmpint(ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_HPKVM), ==,
                    HPKVM_VERSION);

    /* All ones first, so that a field the kernel does not write shows. */
    memset(&caps, 0xff, sizeof(caps));
    g_assert_cmpint(contract_result(ioctl(kvm_fd, HPKVM_GET_CAPS, &caps)),
                    ==, 0);
    g_assert_cmpuint(caps.version, ==, HPKVM_VERSION);
    g_assert_cmpuint(caps.nr_features, ==, HPKVM_FEATURE_NR);
    /* This host has a core to give and one to keep. */
    g_assert_cmpuint(contract_online(), >=, 2);
    g_assert_cmphex(caps.supported & HPKVM_FEAT_EXCLUSIVE_CORES, ==,
                    HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmphex(caps.supported & ~CONTRACT_FEAT_ALL, ==, 0);
    for (i = 0; i < G_N_ELEMENTS(caps.reserved); i++) {
        g_assert_cmphex(caps.reserved[i], ==, 0);
    }
    close(kvm_fd);
}

/* Dynamic nohz is offered exactly where the host was booted nohz_full=. */
static void test_caps_dynamic_nohz(void)
{
    int kvm_fd = contract_open_kvm();
    struct hpkvm_caps caps;
    cpu_set_t nohz;

    g_assert_cmpint(contract_result(ioctl(kvm_fd, HPKVM_GET_CAPS, &caps)),
                    ==, 0);
    g_assert_cmphex(caps.supported & HPKVM_FEAT_DYNAMIC_NOHZ, ==,
                    contract_nohz_full(&nohz) ? HPKVM_FEAT_DYNAMIC_NOHZ : 0);
    close(kvm_fd);
}

/* HPKVM_GET_CAPS's supported, which the kernel must answer. */
static uint64_t contract_supported(void)
{
    int kvm_fd = contract_open_kvm();
    struct hpkvm_caps caps;

    g_assert_cmpint(contract_result(ioctl(kvm_fd, HPKVM_GET_CAPS, &caps)),
                    ==, 0);
    close(kvm_fd);
    return caps.supported;
}

/*
 * The answer for @feat, one of CONTRACT_FEAT_ARCH, asked for with
 * exclusive cores: granted where the kernel said it supports it, else
 * refused for the machine (ENODEV: on x86, no x2AVIC in use, and no
 * core-kernel support or nohz_full= for the guest to own its core's
 * APIC) or the architecture (EOPNOTSUPP); a grant on APIC
 * virtualization is a grant.
 */
static void contract_assert_arch_answer(const struct hpkvm_enable *req,
                                        uint64_t supported, uint64_t feat)
{
    int reason = req->reason[__builtin_ctzll(feat)];

    g_assert_cmphex(req->apicv & ~req->granted, ==, 0);
    if (supported & feat) {
        g_assert_cmpint(reason, ==, 0);
        g_assert_cmphex(req->granted & feat, ==, feat);
        return;
    }
    g_assert_true(reason == -ENODEV || reason == -EOPNOTSUPP);
    g_assert_cmphex(req->granted & feat, ==, 0);
}

/*
 * Everything asked for, nothing required: the kernel grants what it can,
 * exclusive cores, and says per feature why not the rest.  kvm/patches
 * implement exclusive cores, dynamic nohz (which depends on the host:
 * see test_enable_dynamic_nohz()) and, where the architecture can, the
 * interrupt features (test_enable_apicv(), test_enable_owned_apic()).
 */
static void test_enable_grants_exclusive(void)
{
    struct hpkvm_enable req = {
        .requested = CONTRACT_FEAT_ALL,
        .nr_vcpus = 1,
    };
    uint64_t supported = contract_supported();
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted & ~(HPKVM_FEAT_DYNAMIC_NOHZ |
                                    CONTRACT_FEAT_ARCH |
                                    HPKVM_FEAT_TIMER_PASSTHROUGH |
                                    HPKVM_FEAT_VFIO_IRTE), ==,
                    HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==, 0);
    contract_assert_arch_answer(&req, supported, HPKVM_FEAT_IRQ_PASSTHROUGH);
    contract_assert_arch_answer(&req, supported, HPKVM_FEAT_IPI_FASTPATH);
    /* Asked for with what it builds on: not EINVAL, just not there. */
    contract_assert_arch_answer(&req, supported, HPKVM_FEAT_VFIO_IRTE);
    contract_assert_arch_answer(&req, supported,
                                HPKVM_FEAT_TIMER_PASSTHROUGH);
    contract_vm_free(&vm);
}

/*
 * Dynamic nohz, with the exclusive cores it builds on: granted on a host
 * booted with nohz_full=, for as many vCPUs as it has nohz_full cores;
 * ENODEV on one booted without, whose ticks cannot stop on any core.
 */
static void test_enable_dynamic_nohz(void)
{
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES | HPKVM_FEAT_DYNAMIC_NOHZ,
        .nr_vcpus = 1,
    };
    unsigned int online = contract_online();
    cpu_set_t nohz;
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==, 0);
    if (!contract_nohz_full(&nohz)) {
        g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
        g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_DYNAMIC_NOHZ), ==,
                        -ENODEV);
        contract_vm_free(&vm);
        return;
    }
    g_assert_cmphex(req.granted, ==,
                    HPKVM_FEAT_EXCLUSIVE_CORES | HPKVM_FEAT_DYNAMIC_NOHZ);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_DYNAMIC_NOHZ), ==, 0);
    contract_vm_free(&vm);

    /* More vCPUs than nohz_full cores: some vCPU's tick would run. */
    req.nr_vcpus = CPU_COUNT(&nohz) + 1;
    if (req.nr_vcpus <= online - 1) {
        contract_vm_new(&vm);
        g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
        g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
        g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_DYNAMIC_NOHZ), ==,
                        -E2BIG);
        contract_vm_free(&vm);
    }

    /* Exclusive cores refused: dynamic nohz too, for the same reason. */
    req.nr_vcpus = online;
    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==,
                    -E2BIG);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_DYNAMIC_NOHZ), ==,
                    -E2BIG);
    contract_vm_free(&vm);
}

/* A feature not asked for is ENOENT, so that QEMU can tell it from a no. */
static void test_enable_not_requested(void)
{
    struct hpkvm_enable req = contract_exclusive_req(1);
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_IRQ_PASSTHROUGH), ==,
                    -ENOENT);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_TIMER_PASSTHROUGH), ==,
                    -ENOENT);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_IPI_FASTPATH), ==,
                    -ENOENT);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_VFIO_IRTE), ==,
                    -ENOENT);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_DYNAMIC_NOHZ), ==,
                    -ENOENT);
    contract_vm_free(&vm);
}

/*
 * A required feature refused: EPERM, and nothing granted, not even what
 * could have been (all or nothing), in the answer and in the VM itself.
 */
static void test_enable_required_refused(void)
{
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES |
                     HPKVM_FEAT_TIMER_PASSTHROUGH,
        .required = HPKVM_FEAT_EXCLUSIVE_CORES |
                    HPKVM_FEAT_TIMER_PASSTHROUGH,
        .nr_vcpus = 1,
    };
    ContractVcpu vcpu;
    ContractVm vm;
    unsigned int f;

    /* Impossible answers, to see that the kernel still copies out. */
    req.granted = UINT64_MAX;
    for (f = 0; f < HPKVM_FEATURE_NR; f++) {
        req.reason[f] = 1;
    }
    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EPERM);
    g_assert_cmphex(req.granted, ==, 0);
    /* It builds on irq-passthrough, not asked for. */
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_TIMER_PASSTHROUGH), ==,
                    -EINVAL);
    /* Grantable, but dropped with the rest: no reason reads "granted". */
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==,
                    -EPERM);
    for (f = 0; f < HPKVM_FEATURE_NR; f++) {
        g_assert_cmpint(req.reason[f], <, 0);
    }

    /* The VM agrees: it has no exclusive cores to bind a vCPU with. */
    contract_vcpu_new(&vm, 0, &vcpu);
    g_assert_cmpint(contract_bind_once(&vcpu, contract_last_cpu()), ==,
                    -EINVAL);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/* A feature without the one it builds on is invalid for the VM. */
static void test_enable_dependencies(void)
{
    struct hpkvm_enable irte = {
        .requested = HPKVM_FEAT_VFIO_IRTE,
        .nr_vcpus = 1,
    };
    struct hpkvm_enable nohz = {
        .requested = HPKVM_FEAT_DYNAMIC_NOHZ,
        .nr_vcpus = 1,
    };
    struct hpkvm_enable timer = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES |
                     HPKVM_FEAT_TIMER_PASSTHROUGH,
        .nr_vcpus = 1,
    };
    /* Interrupts without exits need the vCPU in the guest: its own core. */
    struct hpkvm_enable arch = {
        .requested = CONTRACT_FEAT_ARCH,
        .nr_vcpus = 1,
    };
    ContractVm vm;

    /* One VM each: HPKVM_ENABLE is once per VM. */
    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &irte), ==, 0);
    g_assert_cmphex(irte.granted, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&irte, HPKVM_FEAT_VFIO_IRTE), ==,
                    -EINVAL);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &nohz), ==, 0);
    g_assert_cmphex(nohz.granted, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&nohz, HPKVM_FEAT_DYNAMIC_NOHZ), ==,
                    -EINVAL);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &timer), ==, 0);
    g_assert_cmphex(timer.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmpint(CONTRACT_REASON(&timer, HPKVM_FEAT_TIMER_PASSTHROUGH),
                    ==, -EINVAL);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &arch), ==, 0);
    g_assert_cmphex(arch.granted, ==, 0);
    g_assert_cmphex(arch.apicv, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&arch, HPKVM_FEAT_IRQ_PASSTHROUGH), ==,
                    -EINVAL);
    g_assert_cmpint(CONTRACT_REASON(&arch, HPKVM_FEAT_IPI_FASTPATH), ==,
                    -EINVAL);
    contract_vm_free(&vm);
}

/*
 * Interrupt passthrough and the IPI fast path, required with exclusive
 * cores: granted exactly where HPKVM_GET_CAPS says (contract 2 marks in
 * apicv those resting on APIC virtualization, printed for the nested
 * host's test to check), else EPERM with nothing granted nor marked.
 */
static void test_enable_apicv(void)
{
    uint64_t supported = contract_supported();
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES | CONTRACT_FEAT_ARCH,
        .required = HPKVM_FEAT_EXCLUSIVE_CORES | CONTRACT_FEAT_ARCH,
        .nr_vcpus = 1,
    };
    ContractVm vm;
    int ret;

    contract_vm_new(&vm);
    ret = contract_enable(&vm, &req);
    g_test_message("arch-features supported=0x%llx granted=0x%llx "
                   "apicv=0x%llx", (unsigned long long)supported,
                   (unsigned long long)req.granted,
                   (unsigned long long)req.apicv);
    if ((supported & CONTRACT_FEAT_ARCH) == CONTRACT_FEAT_ARCH) {
        g_assert_cmpint(ret, ==, 0);
        g_assert_cmphex(req.granted, ==, req.requested);
        g_assert_cmphex(req.apicv & ~CONTRACT_FEAT_ARCH, ==, 0);
    } else {
        g_assert_cmpint(ret, ==, -EPERM);
        g_assert_cmphex(req.granted, ==, 0);
        g_assert_cmphex(req.apicv, ==, 0);
    }
    contract_vm_free(&vm);
}

/*
 * Interrupt and timer passthrough where the guest owns its core's APIC
 * (no APIC virtualization: kvm/patches/0013): the host lends the APIC
 * only while its own timer is off the core, so never without dynamic
 * nohz (EINVAL if not asked for).  Asked for with it, the timer is
 * granted exactly where HPKVM_GET_CAPS says, and never as APIC
 * virtualization.
 */
static void test_enable_owned_apic(void)
{
    uint64_t supported = contract_supported();
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES |
                     HPKVM_FEAT_IRQ_PASSTHROUGH |
                     HPKVM_FEAT_TIMER_PASSTHROUGH,
        .nr_vcpus = 1,
    };
    int reason;
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted & HPKVM_FEAT_TIMER_PASSTHROUGH, ==, 0);
    reason = CONTRACT_REASON(&req, HPKVM_FEAT_TIMER_PASSTHROUGH);
    if (supported & HPKVM_FEAT_TIMER_PASSTHROUGH) {
        g_assert_cmpint(reason, ==, -EINVAL);
    } else {
        g_assert_true(reason == -ENODEV || reason == -EOPNOTSUPP ||
                      reason == -EINVAL);
    }
    /* Without dynamic nohz, irq-passthrough only on APIC virtualization. */
    g_assert_cmphex(req.granted & ~req.apicv, ==,
                    HPKVM_FEAT_EXCLUSIVE_CORES);
    contract_vm_free(&vm);

    /* A fresh request: apicv, the kernel's answer, must be 0 going in. */
    req = (struct hpkvm_enable) {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES | HPKVM_FEAT_DYNAMIC_NOHZ |
                     HPKVM_FEAT_IRQ_PASSTHROUGH |
                     HPKVM_FEAT_TIMER_PASSTHROUGH,
        .nr_vcpus = 1,
    };
    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    contract_assert_arch_answer(&req, supported,
                                HPKVM_FEAT_TIMER_PASSTHROUGH);
    g_assert_cmphex(req.apicv & HPKVM_FEAT_TIMER_PASSTHROUGH, ==, 0);
    g_test_message("owned-apic supported=0x%llx granted=0x%llx "
                   "apicv=0x%llx", (unsigned long long)supported,
                   (unsigned long long)req.granted,
                   (unsigned long long)req.apicv);
    contract_vm_free(&vm);
}

static int contract_set_irte(ContractVm *vm, const struct hpkvm_irte *irte)
{
    return contract_result(ioctl(vm->fd, HPKVM_SET_IRTE, irte));
}

#define CONTRACT_IRTE_GSI       24
#define CONTRACT_IRTE_VECTOR    0x50

/* An x86 MSI with @data (vector, delivery mode) to APIC ID 0, at @gsi. */
static void contract_msi_route(ContractVm *vm, uint32_t gsi, uint32_t data)
{
    g_autofree struct kvm_irq_routing *routing =
        g_malloc0(sizeof(*routing) + sizeof(routing->entries[0]));

    routing->nr = 1;
    routing->entries[0].gsi = gsi;
    routing->entries[0].type = KVM_IRQ_ROUTING_MSI;
    routing->entries[0].u.msi.address_lo = 0xfee00000;
    routing->entries[0].u.msi.data = data;
    contract_setup(ioctl(vm->fd, KVM_SET_GSI_ROUTING, routing),
                   "KVM_SET_GSI_ROUTING");
}

/*
 * An irqfd for @gsi, routed as a fixed x86 MSI to the vCPU with APIC ID 0
 * (the first vCPU's) at @vector; its eventfd.
 */
static int contract_msi_irqfd(ContractVm *vm, uint32_t gsi, uint32_t vector)
{
    struct kvm_irqfd irqfd = { .gsi = gsi };

    contract_msi_route(vm, gsi, vector);
    irqfd.fd = contract_setup(eventfd(0, EFD_CLOEXEC), "eventfd");
    contract_setup(ioctl(vm->fd, KVM_IRQFD, &irqfd), "KVM_IRQFD");
    return irqfd.fd;
}

/*
 * HPKVM_SET_IRTE: EINVAL without vfio-irte granted; with it, for
 * non-zero reserved words, unknown flags, a vector outside 16-255 or a
 * GSI without an irqfd, and 0 otherwise, clearing too.  Where the grant
 * rests on APIC virtualization (x86: the IOMMU entry is KVM's own, which
 * it programs from the irqfd's route), also EINVAL for a request that
 * disagrees with that route: another vector, another vCPU, a route that
 * is not a fixed interrupt (lowest priority).
 */
static void test_set_irte(void)
{
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES |
                     HPKVM_FEAT_IRQ_PASSTHROUGH | HPKVM_FEAT_VFIO_IRTE,
        .nr_vcpus = 2,
    };
    const struct hpkvm_irte valid = {
        .gsi = CONTRACT_IRTE_GSI,
        .vector = CONTRACT_IRTE_VECTOR,
    };
    struct hpkvm_irte irte = valid;
    ContractVcpu vcpu[2];
    ContractVm vm;
    int efd;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_test_message("set-irte granted=0x%llx apicv=0x%llx vfio-irte=%d",
                   (unsigned long long)req.granted,
                   (unsigned long long)req.apicv,
                   CONTRACT_REASON(&req, HPKVM_FEAT_VFIO_IRTE));
    if (!(req.granted & HPKVM_FEAT_VFIO_IRTE)) {
        g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
        contract_vm_free(&vm);
        return;
    }
    contract_vcpu_new(&vm, 0, &vcpu[0]);
    contract_vcpu_new(&vm, 1, &vcpu[1]);
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    efd = contract_msi_irqfd(&vm, valid.gsi, valid.vector);
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, 0);

    irte.reserved[1] = 1;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    irte = valid;
    irte.flags = HPKVM_IRTE_CLEAR << 1;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    irte = valid;
    irte.vector = 15;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    irte.vector = 256;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    irte = valid;
    irte.gsi = valid.gsi + 1;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
    if (req.apicv & HPKVM_FEAT_VFIO_IRTE) {
        irte = valid;
        irte.vector = valid.vector + 1;
        g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
        irte = valid;
        irte.vcpu_id = 1;
        g_assert_cmpint(contract_set_irte(&vm, &irte), ==, -EINVAL);
        /* MSI data bits 10:8, the delivery mode: 001b, lowest priority. */
        contract_msi_route(&vm, valid.gsi, valid.vector | 1 << 8);
        g_assert_cmpint(contract_set_irte(&vm, &valid), ==, -EINVAL);
        contract_msi_route(&vm, valid.gsi, valid.vector);
        g_assert_cmpint(contract_set_irte(&vm, &valid), ==, 0);
    }
    irte = valid;
    irte.flags = HPKVM_IRTE_CLEAR;
    g_assert_cmpint(contract_set_irte(&vm, &irte), ==, 0);

    close(efd);
    contract_vcpu_free(&vcpu[1]);
    contract_vcpu_free(&vcpu[0]);
    contract_vm_free(&vm);
}

/*
 * Interrupt features need the in-kernel LAPIC: a VM created without
 * KVM_CREATE_IRQCHIP is refused them, EINVAL where HPKVM_GET_CAPS says
 * the kernel grants them, and exclusive cores stay its to have.  (On
 * arm64, whose vGIC comes after HPKVM_ENABLE, no kernel grants them.)
 */
static void test_enable_without_irqchip(void)
{
    uint64_t supported = contract_supported();
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES | CONTRACT_FEAT_ARCH,
        .nr_vcpus = 1,
    };
    ContractVm vm;

    vm.kvm_fd = contract_open_kvm();
    vm.fd = contract_setup(ioctl(vm.kvm_fd, KVM_CREATE_VM, 0),
                           "KVM_CREATE_VM");
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmphex(req.apicv, ==, 0);
    if (supported & HPKVM_FEAT_IRQ_PASSTHROUGH) {
        g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_IRQ_PASSTHROUGH),
                        ==, -EINVAL);
    }
    if (supported & HPKVM_FEAT_IPI_FASTPATH) {
        g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_IPI_FASTPATH),
                        ==, -EINVAL);
    }
    g_test_message("without-irqchip supported=0x%llx reasons=%d,%d",
                   (unsigned long long)supported,
                   CONTRACT_REASON(&req, HPKVM_FEAT_IRQ_PASSTHROUGH),
                   CONTRACT_REASON(&req, HPKVM_FEAT_IPI_FASTPATH));
    contract_vm_free(&vm);
}

/*
 * Malformed requests are EINVAL.  All on one VM: the kernel checks its
 * input before the once-per-VM rule, so a refused call does not use up
 * the VM's one HPKVM_ENABLE, which the valid call at the end shows.
 */
static void test_enable_invalid(void)
{
    struct hpkvm_enable req;
    ContractVm vm;
    unsigned int i;

    contract_vm_new(&vm);

    req = contract_exclusive_req(1);
    req.flags = 1;
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);

    /* Both words: the second is where a 64-bit ABI had an implicit hole. */
    for (i = 0; i < G_N_ELEMENTS(req.pad); i++) {
        req = contract_exclusive_req(1);
        req.pad[i] = 1;
        g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);
    }

    for (i = 0; i < G_N_ELEMENTS(req.reserved); i++) {
        req = contract_exclusive_req(1);
        req.reserved[i] = 1;
        g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);
    }

    /* apicv is the kernel's answer: zero on the way in. */
    req = contract_exclusive_req(1);
    req.apicv = HPKVM_FEAT_IRQ_PASSTHROUGH;
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);

    /* Required must be a subset of requested. */
    req = contract_exclusive_req(1);
    req.required = HPKVM_FEAT_IRQ_PASSTHROUGH;
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);

    /* A feature version 2 does not have. */
    req = contract_exclusive_req(1);
    req.requested |= 1ULL << HPKVM_FEATURE_NR;
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);

    req = contract_exclusive_req(0);
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EINVAL);

    req = contract_exclusive_req(1);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
    contract_vm_free(&vm);
}

/* A core for each vCPU and one left to the host, or E2BIG. */
static void test_enable_too_many_vcpus(void)
{
    unsigned int online = contract_online();
    struct hpkvm_enable req;
    ContractVm vm;

    g_assert_cmpuint(online, >=, 2);

    contract_vm_new(&vm);
    req = contract_exclusive_req(online);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==,
                    -E2BIG);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    req = contract_exclusive_req(online - 1);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    g_assert_cmphex(req.granted, ==, HPKVM_FEAT_EXCLUSIVE_CORES);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==, 0);
    contract_vm_free(&vm);
}

/* Once per VM, and HPKVM_DISABLE does not give the VM another go. */
static void test_enable_once(void)
{
    struct hpkvm_enable req = contract_exclusive_req(1);
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    req = contract_exclusive_req(1);
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EBUSY);
    g_assert_cmpint(contract_disable(&vm), ==, 0);
    req = contract_exclusive_req(1);
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EBUSY);
    contract_vm_free(&vm);
}

/*
 * Once a vCPU exists, HPKVM_ENABLE and HPKVM_DISABLE are EBUSY, and the
 * refused HPKVM_DISABLE leaves the grant in place.
 */
static void test_order_after_vcpu(void)
{
    struct hpkvm_enable req = contract_exclusive_req(1);
    ContractVcpu vcpu;
    ContractVm vm;

    /* No HPKVM_ENABLE before: the vCPU is the only reason to refuse. */
    contract_vm_new(&vm);
    contract_vcpu_new(&vm, 0, &vcpu);
    g_assert_cmpint(contract_enable(&vm, &req), ==, -EBUSY);
    g_assert_cmpint(contract_disable(&vm), ==, -EBUSY);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    g_assert_cmpint(contract_disable(&vm), ==, -EBUSY);
    g_assert_cmpint(contract_bind_once(&vcpu, contract_last_cpu()), ==, 0);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * Before any vCPU, HPKVM_DISABLE succeeds, with nothing granted too
 * (QEMU's rollback relies on it), and drops what was granted.
 */
static void test_order_disable_before_vcpu(void)
{
    ContractVcpu vcpu;
    ContractVm vm;

    contract_vm_new(&vm);
    g_assert_cmpint(contract_disable(&vm), ==, 0);
    contract_vm_free(&vm);

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    g_assert_cmpint(contract_disable(&vm), ==, 0);
    contract_vcpu_new(&vm, 0, &vcpu);
    g_assert_cmpint(contract_bind_once(&vcpu, contract_last_cpu()), ==,
                    -EINVAL);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

static void test_bind_without_grant(void)
{
    ContractVcpu vcpu;
    ContractVm vm;

    contract_vm_new(&vm);
    contract_vcpu_new(&vm, 0, &vcpu);
    g_assert_cmpint(contract_bind_once(&vcpu, contract_last_cpu()), ==,
                    -EINVAL);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * A VM granted dynamic nohz binds only to nohz_full cores: elsewhere its
 * tick would not stop (EINVAL, and the vCPU stays unbound: it then binds
 * to a nohz_full core).
 */
static void test_bind_dynamic_nohz_outside_nohz_full(void)
{
    struct hpkvm_enable req = {
        .requested = HPKVM_FEAT_EXCLUSIVE_CORES | HPKVM_FEAT_DYNAMIC_NOHZ,
        .required = HPKVM_FEAT_EXCLUSIVE_CORES | HPKVM_FEAT_DYNAMIC_NOHZ,
        .nr_vcpus = 1,
    };
    unsigned int i, ticking = CPU_SETSIZE, tickless = CPU_SETSIZE;
    ContractWorker *w;
    ContractVcpu vcpu;
    cpu_set_t nohz;
    ContractVm vm;

    if (!contract_nohz_full(&nohz)) {
        g_test_skip("the host was booted without nohz_full=");
        return;
    }
    for (i = 0; i < contract_nr_cpus; i++) {
        if (CPU_ISSET(contract_cpus[i], &nohz)) {
            tickless = contract_cpus[i];
        } else {
            ticking = contract_cpus[i];
        }
    }
    /* nohz_full= always leaves a housekeeping CPU; this test needs both. */
    g_assert_cmpuint(ticking, <, CPU_SETSIZE);
    g_assert_cmpuint(tickless, <, CPU_SETSIZE);

    contract_vm_new(&vm);
    g_assert_cmpint(contract_enable(&vm, &req), ==, 0);
    contract_vcpu_new(&vm, 0, &vcpu);
    w = contract_worker_new();
    g_assert_cmpint(contract_bind(w, &vcpu, ticking), ==, -EINVAL);
    g_assert_cmpint(contract_bind(w, &vcpu, tickless), ==, 0);
    contract_worker_free(w);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * A bind pins its thread to the core, and binding the vCPU again is
 * refused, from the same thread or another.  The thread stays an
 * ordinary one: a move (its own sched_setaffinity() here; root's,
 * another's of its user or a cpuset's alike) succeeds, and the vCPU then
 * runs no more (EPERM), wider or elsewhere, until its thread is pinned
 * back to its core alone.
 */
static void test_bind_pins_thread(void)
{
    unsigned int cpu = contract_last_cpu();
    ContractWorker *w;
    ContractVcpu vcpu;
    ContractVm vm;
    cpu_set_t set;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    w = contract_worker_new();
    g_assert_cmpint(contract_bind(w, &vcpu, cpu), ==, 0);

    g_assert_cmpint(contract_worker_call(w, contract_job_get_affinity, &set),
                    ==, 0);
    g_assert_cmpint(CPU_COUNT(&set), ==, 1);
    g_assert_true(CPU_ISSET(cpu, &set));

    set = contract_cpuset;
    g_assert_cmpint(contract_worker_call(w, contract_job_set_affinity, &set),
                    ==, 0);
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EPERM);
    CPU_ZERO(&set);
    CPU_SET(contract_cpus[0], &set);
    g_assert_cmpint(contract_worker_call(w, contract_job_set_affinity, &set),
                    ==, 0);
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EPERM);
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    g_assert_cmpint(contract_worker_call(w, contract_job_set_affinity, &set),
                    ==, 0);
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EINTR);

    g_assert_cmpint(contract_bind(w, &vcpu, cpu), ==, -EBUSY);
    g_assert_cmpint(contract_bind_once(&vcpu, cpu), ==, -EBUSY);

    contract_worker_free(w);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * Malformed binds are EINVAL and change nothing: the same thread then
 * binds the same vCPU.
 */
static void test_bind_invalid(void)
{
    static const uint32_t bad_cpus[] = { CPU_SETSIZE, 4096, UINT32_MAX };
    unsigned int cpu = contract_last_cpu();
    cpu_set_t others;
    ContractWorker *w;
    ContractVcpu vcpu;
    ContractBind b;
    ContractVm vm;
    unsigned int i;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    w = contract_worker_new();

    b = (ContractBind) { .vcpu = &vcpu, .bind.host_cpu = cpu };
    b.bind.flags = 1;
    g_assert_cmpint(contract_worker_call(w, contract_job_bind, &b), ==,
                    -EINVAL);

    for (i = 0; i < G_N_ELEMENTS(b.bind.reserved); i++) {
        b = (ContractBind) { .vcpu = &vcpu, .bind.host_cpu = cpu };
        b.bind.reserved[i] = 1;
        g_assert_cmpint(contract_worker_call(w, contract_job_bind, &b), ==,
                        -EINVAL);
    }

    /* Beyond any cpu_set_t, and CPUs this host does not have online. */
    for (i = 0; i < G_N_ELEMENTS(bad_cpus); i++) {
        g_assert_cmpint(contract_bind(w, &vcpu, bad_cpus[i]), ==, -EINVAL);
    }

    /*
     * A core outside the thread's affinity: the kernel does not pin past
     * the cpuset and sched_setaffinity() rules userspace pinned under.
     */
    CPU_ZERO(&others);
    CPU_SET(contract_cpus[0], &others);
    g_assert_cmpint(contract_worker_call(w, contract_job_set_affinity,
                                         &others), ==, 0);
    g_assert_cmpint(contract_bind(w, &vcpu, cpu), ==, -EINVAL);
    CPU_SET(cpu, &others);
    g_assert_cmpint(contract_worker_call(w, contract_job_set_affinity,
                                         &others), ==, 0);

    g_assert_cmpint(contract_bind(w, &vcpu, cpu), ==, 0);
    contract_worker_free(w);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * A VM binds no more vCPUs than it announced in HPKVM_ENABLE: E2BIG,
 * whichever core the extra one asks for.  The kernel counts before it
 * looks at the core: with two CPUs, the only other core is the host's.
 */
static void test_bind_more_than_announced(void)
{
    ContractVcpu vcpu0, vcpu1;
    ContractVm vm;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu0);
    contract_vcpu_new(&vm, 1, &vcpu1);
    g_assert_cmpint(contract_bind_once(&vcpu0, contract_last_cpu()), ==, 0);
    g_assert_cmpint(contract_bind_once(&vcpu1, contract_cpus[0]), ==,
                    -E2BIG);
    contract_vcpu_free(&vcpu1);
    contract_vcpu_free(&vcpu0);
    contract_vm_free(&vm);
}

/*
 * A vCPU of an exclusive-cores VM runs bound or not at all (EPERM): the
 * guest was promised a core per vCPU.  The refused KVM_RUN is no first
 * run, so the vCPU still binds, and then runs.  A VM without the grant
 * is not hpkvm's to refuse: its vCPU just runs.
 */
static void test_run_unbound(void)
{
    ContractVcpu vcpu, plain_vcpu;
    ContractVm vm, plain_vm;
    ContractWorker *w;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    w = contract_worker_new();
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EPERM);
    g_assert_cmpint(contract_bind(w, &vcpu, contract_last_cpu()), ==, 0);
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EINTR);
    contract_worker_free(w);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);

    contract_vm_new(&plain_vm);
    contract_vcpu_new(&plain_vm, 0, &plain_vcpu);
    w = contract_worker_new();
    g_assert_cmpint(contract_run(w, &plain_vcpu), ==, -EINTR);
    contract_worker_free(w);
    contract_vcpu_free(&plain_vcpu);
    contract_vm_free(&plain_vm);
}

/*
 * A thread has one affinity, so it binds one vCPU.  The second bind asks
 * for the first one's core: from another thread that would take it from
 * the stopped VM (see below), so only the one-per-thread rule refuses it,
 * and the first vCPU keeps its core.
 */
static void test_bind_one_vcpu_per_thread(void)
{
    unsigned int cpu = contract_last_cpu();
    ContractVcpu vcpu_a, vcpu_b;
    ContractVm vm_a, vm_b;
    ContractWorker *w;

    contract_vm_new(&vm_a);
    contract_vm_exclusive(&vm_a, 1);
    contract_vcpu_new(&vm_a, 0, &vcpu_a);
    contract_vm_new(&vm_b);
    contract_vm_exclusive(&vm_b, 1);
    contract_vcpu_new(&vm_b, 0, &vcpu_b);

    w = contract_worker_new();
    g_assert_cmpint(contract_bind(w, &vcpu_a, cpu), ==, 0);
    g_assert_cmpint(contract_bind(w, &vcpu_b, cpu), ==, -EBUSY);
    g_assert_cmpint(contract_run(w, &vcpu_a), ==, -EINTR);
    contract_worker_free(w);

    contract_vcpu_free(&vcpu_b);
    contract_vm_free(&vm_b);
    contract_vcpu_free(&vcpu_a);
    contract_vm_free(&vm_a);
}

/*
 * A live update (cpr-transfer) starts the next VMM while the old one
 * still has its VM, stopped: a vCPU may take a core from another VM's
 * vCPU that is in no ioctl (same euid here).  The old vCPU then cannot
 * run (EBUSY) until the core is free again, and then takes it back.
 */
static void test_bind_take_from_stopped_vm(void)
{
    unsigned int cpu = contract_last_cpu();
    ContractWorker *ta, *tb;
    ContractVcpu vcpu_a, vcpu_b;
    ContractVm vm_a, vm_b;

    contract_vm_new(&vm_a);
    contract_vm_exclusive(&vm_a, 1);
    contract_vcpu_new(&vm_a, 0, &vcpu_a);
    ta = contract_worker_new();
    g_assert_cmpint(contract_bind(ta, &vcpu_a, cpu), ==, 0);

    /* A's thread waits in this program, not in KVM. */
    contract_vm_new(&vm_b);
    contract_vm_exclusive(&vm_b, 1);
    contract_vcpu_new(&vm_b, 0, &vcpu_b);
    tb = contract_worker_new();
    g_assert_cmpint(contract_bind(tb, &vcpu_b, cpu), ==, 0);
    g_assert_cmpint(contract_run(tb, &vcpu_b), ==, -EINTR);

    g_assert_cmpint(contract_run(ta, &vcpu_a), ==, -EBUSY);

    /* B's VM goes: the core is free, and A's next KVM_RUN takes it. */
    contract_worker_free(tb);
    contract_vcpu_free(&vcpu_b);
    contract_vm_free(&vm_b);
    g_assert_cmpint(contract_run(ta, &vcpu_a), ==, -EINTR);

    contract_worker_free(ta);
    contract_vcpu_free(&vcpu_a);
    contract_vm_free(&vm_a);
}

/* The reference kernel's cores hpkvm may bind (kvm/patches/0004). */
#define CONTRACT_HOST_CORES "/sys/module/kvm/parameters/hpkvm_cores"

/* Write @text to the parameter file @path: 0 or -errno. */
static int contract_write_param(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    ssize_t n;
    int err;

    if (fd < 0) {
        return -errno;
    }
    n = write(fd, text, strlen(text));
    err = n < 0 ? -errno : 0;
    close(fd);
    return err;
}

/*
 * The host names the cores hpkvm may bind (kvm.hpkvm_cores, every core
 * by default): with none named, a bind is EPERM (and changes nothing: the
 * same thread binds once the core is named again) and exclusive-cores is
 * E2BIG, there being fewer cores than vCPUs; a list that does not parse
 * is EINVAL and changes nothing.  The parameter is restored before any
 * check, so that a failure leaves the host as it was.
 */
static void test_bind_host_cores(void)
{
    g_autofree char *saved = NULL, *emptied = NULL, *after_invalid = NULL;
    g_autofree char *restored = NULL;
    unsigned int cpu = contract_last_cpu();
    int set_empty, set_invalid, set_saved, bind_outside, bind_inside;
    struct hpkvm_enable req = contract_exclusive_req(1);
    ContractVm vm, vm_enable;
    GError *err = NULL;
    ContractVcpu vcpu;
    ContractWorker *w;
    int enable;

    g_file_get_contents(CONTRACT_HOST_CORES, &saved, NULL, &err);
    g_assert_no_error(err);
    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    contract_vm_new(&vm_enable);
    w = contract_worker_new();

    set_empty = contract_write_param(CONTRACT_HOST_CORES, "\n");
    g_file_get_contents(CONTRACT_HOST_CORES, &emptied, NULL, NULL);
    bind_outside = contract_bind(w, &vcpu, cpu);
    enable = contract_enable(&vm_enable, &req);
    set_invalid = contract_write_param(CONTRACT_HOST_CORES, "no-such-cpu");
    g_file_get_contents(CONTRACT_HOST_CORES, &after_invalid, NULL, NULL);
    set_saved = contract_write_param(CONTRACT_HOST_CORES, saved);
    g_file_get_contents(CONTRACT_HOST_CORES, &restored, NULL, NULL);
    bind_inside = contract_bind(w, &vcpu, cpu);

    g_assert_cmpint(set_saved, ==, 0);
    g_assert_cmpstr(restored, ==, saved);
    g_assert_cmpint(set_empty, ==, 0);
    g_assert_cmpstr(emptied, ==, "\n");
    g_assert_cmpint(bind_outside, ==, -EPERM);
    g_assert_cmpint(enable, ==, 0);
    g_assert_cmphex(req.granted, ==, 0);
    g_assert_cmpint(CONTRACT_REASON(&req, HPKVM_FEAT_EXCLUSIVE_CORES), ==,
                    -E2BIG);
    g_assert_cmpint(set_invalid, ==, -EINVAL);
    g_assert_cmpstr(after_invalid, ==, "\n");
    g_assert_cmpint(bind_inside, ==, 0);
    g_assert_cmpint(contract_run(w, &vcpu), ==, -EINTR);

    contract_worker_free(w);
    contract_vm_free(&vm_enable);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * A thread without CAP_SYS_NICE binds only to a core granted to its
 * process: EPERM before the grant, and after it is taken back; the grant
 * itself needs CAP_SYS_NICE, names a process (not another thread) that
 * exists, and a possible core.  Every grant made is taken back before
 * any check.
 */
static void test_bind_needs_grant(void)
{
    unsigned int cpu = contract_last_cpu();
    int kvm_fd = contract_open_kvm();
    ContractGrant unprivileged = {
        .kvm_fd = kvm_fd,
        .grant = { .host_cpu = cpu, .pid = getpid() },
    };
    int bind_ungranted, grant, bind_granted, run, grant_by_user;
    int revoke, bind_revoked, grant_thread, grant_gone, grant_cpu;
    int grant_reserved, grant_negative, revoke_again;
    ContractVcpu vcpu, vcpu_late;
    ContractWorker *w, *late;
    ContractVm vm, vm_late;
    pid_t gone;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    contract_vm_new(&vm_late);
    contract_vm_exclusive(&vm_late, 1);
    contract_vcpu_new(&vm_late, 0, &vcpu_late);
    w = contract_worker_new();
    late = contract_worker_new();
    contract_setup(contract_worker_call(w, contract_job_drop_sys_nice, NULL),
                   "capset");
    contract_setup(contract_worker_call(late, contract_job_drop_sys_nice,
                                        NULL), "capset");
    /* A process that is gone: a child, exited and reaped. */
    gone = contract_setup(fork(), "fork");
    if (!gone) {
        _exit(0);
    }
    contract_setup(waitpid(gone, NULL, 0), "waitpid");

    bind_ungranted = contract_bind(w, &vcpu, cpu);
    grant = contract_grant(kvm_fd, cpu, getpid());
    bind_granted = contract_bind(w, &vcpu, cpu);
    run = contract_run(w, &vcpu);
    grant_by_user = contract_worker_call(w, contract_job_grant,
                                         &unprivileged);
    revoke = contract_grant(kvm_fd, cpu, 0);
    /* The first VM still holds the core: a second bind is checked too. */
    bind_revoked = contract_bind(late, &vcpu_late, cpu);
    grant_thread = contract_grant(kvm_fd, cpu,
                                  contract_worker_call(w, contract_job_gettid,
                                                       NULL));
    grant_gone = contract_grant(kvm_fd, cpu, gone);
    grant_cpu = contract_grant(kvm_fd, UINT32_MAX, getpid());
    grant_negative = contract_grant(kvm_fd, cpu, -1);
    unprivileged.grant.reserved[1] = 1;
    grant_reserved = contract_job_grant(&unprivileged);
    revoke_again = contract_grant(kvm_fd, cpu, 0);

    g_assert_cmpint(revoke, ==, 0);
    g_assert_cmpint(revoke_again, ==, 0);
    g_assert_cmpint(bind_ungranted, ==, -EPERM);
    g_assert_cmpint(grant, ==, 0);
    g_assert_cmpint(bind_granted, ==, 0);
    g_assert_cmpint(run, ==, -EINTR);
    g_assert_cmpint(grant_by_user, ==, -EPERM);
    g_assert_cmpint(bind_revoked, ==, -EPERM);
    g_assert_cmpint(grant_thread, ==, -ESRCH);
    g_assert_cmpint(grant_gone, ==, -ESRCH);
    g_assert_cmpint(grant_cpu, ==, -EINVAL);
    g_assert_cmpint(grant_negative, ==, -EINVAL);
    g_assert_cmpint(grant_reserved, ==, -EINVAL);

    contract_worker_free(late);
    contract_worker_free(w);
    contract_vcpu_free(&vcpu_late);
    contract_vm_free(&vm_late);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
    close(kvm_fd);
}

/* A bound vCPU runs from its own thread only: EPERM from another. */
static void test_run_other_thread(void)
{
    ContractWorker *t1, *t2;
    ContractVcpu vcpu;
    ContractVm vm;

    contract_vm_new(&vm);
    contract_vm_exclusive(&vm, 1);
    contract_vcpu_new(&vm, 0, &vcpu);
    t1 = contract_worker_new();
    t2 = contract_worker_new();
    g_assert_cmpint(contract_bind(t1, &vcpu, contract_last_cpu()), ==, 0);
    g_assert_cmpint(contract_run(t2, &vcpu), ==, -EPERM);
    g_assert_cmpint(contract_run(t1, &vcpu), ==, -EINTR);
    contract_worker_free(t2);
    contract_worker_free(t1);
    contract_vcpu_free(&vcpu);
    contract_vm_free(&vm);
}

/*
 * However many VMs bind, one core stays without a vCPU, for the host:
 * with every other core held the last one is EBUSY, whichever it is, and
 * free again once one holder's VM is gone.
 */
static void test_bind_last_core_is_the_hosts(void)
{
    unsigned int n = contract_nr_cpus;
    ContractVcpu *vcpus;
    ContractWorker *w;
    ContractVm *vms;
    unsigned int i;

    contract_need_two_cpus();
    /* The kernel counts online CPUs: this needs to see them all. */
    g_assert_cmpuint(n, ==, contract_online());

    vms = g_new0(ContractVm, n);
    vcpus = g_new0(ContractVcpu, n);
    for (i = 0; i < n; i++) {
        contract_vm_new(&vms[i]);
        contract_vm_exclusive(&vms[i], 1);
        contract_vcpu_new(&vms[i], 0, &vcpus[i]);
    }
    for (i = 0; i < n - 1; i++) {
        g_assert_cmpint(contract_bind_once(&vcpus[i], contract_cpus[i]), ==,
                        0);
    }

    /* A refused bind leaves the thread unbound: it may try again. */
    w = contract_worker_new();
    g_assert_cmpint(contract_bind(w, &vcpus[n - 1], contract_cpus[n - 1]),
                    ==, -EBUSY);
    contract_vcpu_free(&vcpus[0]);
    contract_vm_free(&vms[0]);
    g_assert_cmpint(contract_bind(w, &vcpus[n - 1], contract_cpus[n - 1]),
                    ==, 0);
    contract_worker_free(w);

    for (i = 1; i < n; i++) {
        contract_vcpu_free(&vcpus[i]);
        contract_vm_free(&vms[i]);
    }
    g_free(vcpus);
    g_free(vms);
}

static void contract_list_cpus(void)
{
    unsigned int cpu;

    contract_setup(sched_getaffinity(0, sizeof(contract_cpuset),
                                     &contract_cpuset),
                   "sched_getaffinity");
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &contract_cpuset)) {
            contract_cpus[contract_nr_cpus++] = cpu;
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    contract_list_cpus();

    g_test_add_func("/hpkvm-contract/caps", test_caps);
    g_test_add_func("/hpkvm-contract/caps/dynamic-nohz",
                    test_caps_dynamic_nohz);
    g_test_add_func("/hpkvm-contract/enable/grants-exclusive-cores",
                    test_enable_grants_exclusive);
    g_test_add_func("/hpkvm-contract/enable/not-requested",
                    test_enable_not_requested);
    g_test_add_func("/hpkvm-contract/enable/required-refused",
                    test_enable_required_refused);
    g_test_add_func("/hpkvm-contract/enable/dynamic-nohz",
                    test_enable_dynamic_nohz);
    g_test_add_func("/hpkvm-contract/enable/apicv", test_enable_apicv);
    g_test_add_func("/hpkvm-contract/enable/owned-apic",
                    test_enable_owned_apic);
    g_test_add_func("/hpkvm-contract/enable/without-irqchip",
                    test_enable_without_irqchip);
    g_test_add_func("/hpkvm-contract/enable/dependencies",
                    test_enable_dependencies);
    g_test_add_func("/hpkvm-contract/enable/invalid", test_enable_invalid);
    g_test_add_func("/hpkvm-contract/set-irte", test_set_irte);
    g_test_add_func("/hpkvm-contract/enable/too-many-vcpus",
                    test_enable_too_many_vcpus);
    g_test_add_func("/hpkvm-contract/enable/once", test_enable_once);
    g_test_add_func("/hpkvm-contract/order/after-vcpu",
                    test_order_after_vcpu);
    g_test_add_func("/hpkvm-contract/order/disable-before-vcpu",
                    test_order_disable_before_vcpu);
    g_test_add_func("/hpkvm-contract/bind/without-grant",
                    test_bind_without_grant);
    g_test_add_func("/hpkvm-contract/bind/pins-thread",
                    test_bind_pins_thread);
    g_test_add_func("/hpkvm-contract/bind/dynamic-nohz-outside-nohz-full",
                    test_bind_dynamic_nohz_outside_nohz_full);
    g_test_add_func("/hpkvm-contract/bind/invalid", test_bind_invalid);
    g_test_add_func("/hpkvm-contract/bind/more-than-announced",
                    test_bind_more_than_announced);
    g_test_add_func("/hpkvm-contract/bind/one-vcpu-per-thread",
                    test_bind_one_vcpu_per_thread);
    g_test_add_func("/hpkvm-contract/bind/take-from-stopped-vm",
                    test_bind_take_from_stopped_vm);
    g_test_add_func("/hpkvm-contract/bind/last-core-is-the-hosts",
                    test_bind_last_core_is_the_hosts);
    g_test_add_func("/hpkvm-contract/bind/host-cores", test_bind_host_cores);
    g_test_add_func("/hpkvm-contract/bind/needs-grant", test_bind_needs_grant);
    g_test_add_func("/hpkvm-contract/run/unbound", test_run_unbound);
    g_test_add_func("/hpkvm-contract/run/other-thread",
                    test_run_other_thread);

    return g_test_run();
}
