/*
 * hpkvm-fake-kernel: a TEST DOUBLE of the patched KVM, at the ioctl boundary
 *
 * LD_PRELOADed into QEMU by hpkvm's tests only, it answers the hpkvm
 * contract's ioctls (linux-headers/linux/hpkvm.h) as a patched kernel
 * would, per the script in $HPKVM_FAKE_KERNEL, and passes every other
 * ioctl to the real KVM.  It lets the tests check QEMU's side of the
 * negotiation (sequence, fallbacks, rollbacks, report) where no patched
 * kernel exists.  It is never used by "make run" or a benchmark, and no
 * figure may come from it.
 *
 * $HPKVM_FAKE_KERNEL, "key=value" pairs separated by commas:
 *   supported=MASK   HPKVM_FEAT_* it claims (default 0x3f, all)
 *   grant=MASK       HPKVM_FEAT_* it grants when asked (default: supported)
 *   refuse=ERRNO     reason for the features it does not grant (default 95,
 *                    EOPNOTSUPP)
 *   enable=ERRNO     make HPKVM_ENABLE fail with ERRNO after granting
 *                    (a kernel failing part way; default 0, succeed)
 *   disable_exits=N  answer KVM_CHECK_EXTENSION(KVM_CAP_X86_DISABLE_EXITS)
 *                    with N instead of asking the real KVM
 *   bind=ERRNO       make HPKVM_BIND_VCPU fail with ERRNO (default 0)
 *   caps=ERRNO       make HPKVM_GET_CAPS fail with ERRNO (default 0)
 *   irte=ERRNO       make HPKVM_SET_IRTE fail with ERRNO (default 0)
 * $HPKVM_FAKE_KERNEL_LOG, if set, receives one line per hpkvm ioctl.
 *
 * It keeps the contract's ordering rules and refusals
 * (docs/devel/hpkvm-kernel-contract.rst) as the reference kernel does,
 * per VM: HPKVM_ENABLE once, and it and HPKVM_DISABLE only before the
 * VM's first vCPU (EBUSY); HPKVM_BIND_VCPU only with exclusive-cores
 * granted and zero flags and reserved fields (EINVAL), once per vCPU and
 * per thread and before the vCPU's first KVM_RUN (EBUSY);
 * HPKVM_SET_IRTE only with vfio-irte granted, zero reserved fields and
 * known flags, a vector of 16-255 and an irqfd assigned to the GSI
 * (EINVAL).  Each refusal is logged with its errno.  What it does not
 * model: which host cores are held (the reference kernel's table), the
 * irqchip (the reference kernel does not check it either).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <dlfcn.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include "linux/kvm.h"
#include "linux/hpkvm.h"

#define ALL_FEATURES ((1ULL << HPKVM_FEATURE_NR) - 1)

/* What the fake kernel knows of one VM. */
typedef struct FakeVm {
    bool enable_called;
    uint64_t granted;
    unsigned nr_vcpus;          /* created */
    GHashTable *irqfd_gsis;     /* GSIs with an irqfd assigned */
} FakeVm;

/* ... and of one vCPU. */
typedef struct FakeVcpu {
    FakeVm *vm;
    bool bound;
    bool ran;
} FakeVcpu;

static struct {
    uint64_t supported;
    uint64_t grant;
    int refuse;
    int enable_errno;
    int disable_exits;          /* -1: the real KVM's answer */
    int bind_errno;
    int caps_errno;
    int irte_errno;
    GMutex lock;                /* vCPU threads call in at once */
    GHashTable *vms;            /* VM fd -> FakeVm */
    GHashTable *vcpus;          /* vCPU fd -> FakeVcpu */
} fk = {
    .supported = ALL_FEATURES,
    .grant = ALL_FEATURES,
    .refuse = EOPNOTSUPP,
    .disable_exits = -1,
};

static void G_GNUC_PRINTF(1, 2) fake_log(const char *fmt, ...)
{
    const char *path = getenv("HPKVM_FAKE_KERNEL_LOG");
    va_list ap;
    FILE *f;

    if (!path) {
        return;
    }
    f = fopen(path, "a");
    if (!f) {
        return;
    }
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static void __attribute__((constructor)) fake_init(void)
{
    const char *spec = getenv("HPKVM_FAKE_KERNEL");
    char *copy, *tok, *save;
    bool grant_set = false;

    if (!spec) {
        return;
    }
    copy = strdup(spec);
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *val = strchr(tok, '=');

        if (!val) {
            continue;
        }
        *val++ = '\0';
        if (!strcmp(tok, "supported")) {
            fk.supported = g_ascii_strtoull(val, NULL, 0);
        } else if (!strcmp(tok, "grant")) {
            fk.grant = g_ascii_strtoull(val, NULL, 0);
            grant_set = true;
        } else if (!strcmp(tok, "refuse")) {
            fk.refuse = atoi(val);
        } else if (!strcmp(tok, "enable")) {
            fk.enable_errno = atoi(val);
        } else if (!strcmp(tok, "disable_exits")) {
            fk.disable_exits = atoi(val);
        } else if (!strcmp(tok, "bind")) {
            fk.bind_errno = atoi(val);
        } else if (!strcmp(tok, "caps")) {
            fk.caps_errno = atoi(val);
        } else if (!strcmp(tok, "irte")) {
            fk.irte_errno = atoi(val);
        }
    }
    if (!grant_set) {
        fk.grant = fk.supported;
    }
    free(copy);
    /*
     * fds are reused: a new VM replaces the entry of its fd number, but
     * the old VM's state is never freed, for its vCPUs may outlive it.
     */
    fk.vms = g_hash_table_new(NULL, NULL);
    fk.vcpus = g_hash_table_new_full(NULL, NULL, NULL, g_free);
}

/* A refusal of the contract's: logged, then errno set. */
static int G_GNUC_PRINTF(2, 3) fake_refuse(int err, const char *fmt, ...)
{
    g_autofree char *what = NULL;
    va_list ap;

    va_start(ap, fmt);
    what = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fake_log("%s -> refused (errno %d)", what, err);
    errno = err;
    return -1;
}

static FakeVm *fake_vm(int fd)
{
    FakeVm *vm = g_hash_table_lookup(fk.vms, GINT_TO_POINTER(fd));

    if (!vm) {
        vm = g_new0(FakeVm, 1);
        vm->irqfd_gsis = g_hash_table_new(NULL, NULL);
        g_hash_table_insert(fk.vms, GINT_TO_POINTER(fd), vm);
    }
    return vm;
}

static int fake_enable(FakeVm *vm, struct hpkvm_enable *req)
{
    /* __u64 is unsigned long long: print through uint64_t. */
    uint64_t requested = req->requested, required = req->required;
    uint64_t grant = requested & fk.grant & fk.supported;
    int f;

    if (vm->nr_vcpus || vm->enable_called) {
        return fake_refuse(EBUSY, "HPKVM_ENABLE requested=0x%" PRIx64
                           " %s", requested, vm->nr_vcpus ?
                           "after a vCPU was created" : "a second time");
    }
    vm->enable_called = true;

    for (f = 0; f < HPKVM_FEATURE_NR; f++) {
        uint64_t bit = 1ULL << f;

        req->reason[f] = !(req->requested & bit) ? -ENOENT :
                         (grant & bit) ? 0 : -fk.refuse;
    }
    if (req->required & ~grant) {
        req->granted = 0;
        fake_log("HPKVM_ENABLE requested=0x%" PRIx64 " required=0x%" PRIx64
                 " -> EPERM", requested, required);
        errno = EPERM;
        return -1;
    }
    req->granted = grant;
    vm->granted = grant;
    if (fk.enable_errno) {
        /* Half applied: the state stays until HPKVM_DISABLE. */
        fake_log("HPKVM_ENABLE requested=0x%" PRIx64 " granted=0x%" PRIx64
                 " -> fails part way (errno %d)", requested, grant,
                 fk.enable_errno);
        errno = fk.enable_errno;
        return -1;
    }
    fake_log("HPKVM_ENABLE requested=0x%" PRIx64 " required=0x%" PRIx64
             " nr_vcpus=%u granted=0x%" PRIx64, requested, required,
             req->nr_vcpus, grant);
    return 0;
}

/*
 * The contract: from the vCPU's thread, with exclusive-cores granted,
 * before the vCPU's first KVM_RUN, once per vCPU and per thread.  The log
 * shows the calling thread and its affinity, so tests can check QEMU
 * pinned the thread to the same core first.
 */
static int fake_bind(FakeVcpu *vcpu, struct hpkvm_vcpu_bind *bind)
{
    static __thread bool thread_bound;
    cpu_set_t set;
    g_autoptr(GString) cpus = g_string_new("");
    int cpu, err;

    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
            if (CPU_ISSET(cpu, &set)) {
                g_string_append_printf(cpus, "%s%d", cpus->len ? "," : "",
                                       cpu);
            }
        }
    }
    if (!vcpu || !(vcpu->vm->granted & HPKVM_FEAT_EXCLUSIVE_CORES) ||
        bind->flags || bind->reserved[0] || bind->reserved[1]) {
        err = EINVAL;
    } else if (vcpu->ran || vcpu->bound || thread_bound) {
        err = EBUSY;
    } else {
        err = fk.bind_errno;
    }
    fake_log("HPKVM_BIND_VCPU host_cpu=%u tid=%d affinity=%s -> %d",
             bind->host_cpu, (int)syscall(SYS_gettid), cpus->str, err);
    if (err) {
        errno = err;
        return -1;
    }
    vcpu->bound = thread_bound = true;
    return 0;
}

static int fake_set_irte(FakeVm *vm, struct hpkvm_irte *irte)
{
    int err = 0;

    if (!(vm->granted & HPKVM_FEAT_VFIO_IRTE) ||
        (irte->flags & ~HPKVM_IRTE_CLEAR) || irte->reserved[0] ||
        irte->reserved[1] ||
        (!(irte->flags & HPKVM_IRTE_CLEAR) &&
         (irte->vector < 16 || irte->vector > 255)) ||
        !g_hash_table_contains(vm->irqfd_gsis,
                               GUINT_TO_POINTER(irte->gsi))) {
        err = EINVAL;
    } else {
        err = fk.irte_errno;
    }
    fake_log("HPKVM_SET_IRTE gsi=%u vcpu=%u vector=%u flags=0x%x -> %d",
             irte->gsi, irte->vcpu_id, irte->vector, irte->flags, err);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

/* What the real KVM did, as far as the contract's rules depend on it. */
static void fake_track(int fd, unsigned long request, void *arg, int ret)
{
    struct kvm_irqfd *irqfd = arg;
    FakeVcpu *vcpu;

    if (ret < 0) {
        return;
    }
    switch (request) {
    case KVM_CREATE_VM:
        g_hash_table_remove(fk.vms, GINT_TO_POINTER(ret));
        break;
    case KVM_CREATE_VCPU:
        vcpu = g_new0(FakeVcpu, 1);
        vcpu->vm = fake_vm(fd);
        vcpu->vm->nr_vcpus++;
        g_hash_table_insert(fk.vcpus, GINT_TO_POINTER(ret), vcpu);
        break;
    case KVM_IRQFD:
        if (irqfd->flags & KVM_IRQFD_FLAG_DEASSIGN) {
            g_hash_table_remove(fake_vm(fd)->irqfd_gsis,
                                GUINT_TO_POINTER(irqfd->gsi));
        } else {
            g_hash_table_add(fake_vm(fd)->irqfd_gsis,
                             GUINT_TO_POINTER(irqfd->gsi));
        }
        break;
    }
}

static int fake_hpkvm_ioctl(int fd, unsigned long request, void *arg)
{
    FakeVcpu *vcpu = g_hash_table_lookup(fk.vcpus, GINT_TO_POINTER(fd));

    switch (request) {
    case HPKVM_GET_CAPS: {
        struct hpkvm_caps *caps = arg;

        if (fk.caps_errno) {
            fake_log("HPKVM_GET_CAPS -> fails (errno %d)", fk.caps_errno);
            errno = fk.caps_errno;
            return -1;
        }
        memset(caps, 0, sizeof(*caps));
        caps->version = HPKVM_VERSION;
        caps->nr_features = HPKVM_FEATURE_NR;
        caps->supported = fk.supported;
        fake_log("HPKVM_GET_CAPS supported=0x%" PRIx64, fk.supported);
        return 0;
    }
    case HPKVM_ENABLE:
        return fake_enable(fake_vm(fd), arg);
    case HPKVM_SET_IRTE:
        return fake_set_irte(fake_vm(fd), arg);
    case HPKVM_BIND_VCPU:
        return fake_bind(vcpu, arg);
    case HPKVM_DISABLE: {
        FakeVm *vm = fake_vm(fd);

        if (vm->nr_vcpus) {
            return fake_refuse(EBUSY, "HPKVM_DISABLE after a vCPU was "
                               "created");
        }
        fake_log("HPKVM_DISABLE (granted was 0x%" PRIx64 ")", vm->granted);
        vm->granted = 0;
        return 0;
    }
    }
    return -2;                  /* not the contract's */
}

int ioctl(int fd, unsigned long request, ...)
{
    static int (*real_ioctl)(int, unsigned long, ...);
    va_list ap;
    void *arg;

    va_start(ap, request);
    arg = va_arg(ap, void *);
    va_end(ap);

    if (!real_ioctl) {
        real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT,
                                                             "ioctl");
    }
    if (getenv("HPKVM_FAKE_KERNEL")) {
        FakeVcpu *vcpu;
        int ret, err;

        if (request == KVM_CHECK_EXTENSION &&
            (uintptr_t)arg == KVM_CAP_HPKVM) {
            fake_log("KVM_CHECK_EXTENSION KVM_CAP_HPKVM -> %d",
                     HPKVM_VERSION);
            return HPKVM_VERSION;
        }
        if (request == KVM_CHECK_EXTENSION && fk.disable_exits >= 0 &&
            (uintptr_t)arg == KVM_CAP_X86_DISABLE_EXITS) {
            return fk.disable_exits;
        }
        if (request == KVM_RUN) {
            /* Marked before: KVM_RUN returns only at the next exit. */
            g_mutex_lock(&fk.lock);
            vcpu = g_hash_table_lookup(fk.vcpus, GINT_TO_POINTER(fd));
            if (vcpu) {
                vcpu->ran = true;
            }
            g_mutex_unlock(&fk.lock);
            return real_ioctl(fd, request, arg);
        }
        g_mutex_lock(&fk.lock);
        ret = fake_hpkvm_ioctl(fd, request, arg);
        g_mutex_unlock(&fk.lock);
        if (ret != -2) {
            return ret;
        }
        /* Never the lock across the real KVM: it may wait on vCPUs. */
        ret = real_ioctl(fd, request, arg);
        err = errno;
        g_mutex_lock(&fk.lock);
        fake_track(fd, request, arg, ret);
        g_mutex_unlock(&fk.lock);
        errno = err;
        return ret;
    }
    return real_ioctl(fd, request, arg);
}
