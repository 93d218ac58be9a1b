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
 *   apicv=MASK       of those granted, the ones it says rest on APIC
 *                    virtualization (hpkvm_enable.apicv; default 0)
 *   refuse=ERRNO     reason for the features it does not grant (default 95,
 *                    EOPNOTSUPP)
 *   enable=ERRNO     make HPKVM_ENABLE fail with ERRNO after granting
 *                    (a kernel failing part way; default 0, succeed)
 *   disable_exits=N  answer KVM_CHECK_EXTENSION(KVM_CAP_X86_DISABLE_EXITS)
 *                    with N instead of asking the real KVM
 *   bind=ERRNO       make HPKVM_BIND_VCPU fail with ERRNO (default 0)
 *   caps=ERRNO       make HPKVM_GET_CAPS fail with ERRNO (default 0)
 *   irte=ERRNO       make HPKVM_SET_IRTE fail with ERRNO (default 0)
 *   disable=ERRNO    make HPKVM_DISABLE fail with ERRNO, its grants kept
 *                    (a broken kernel: the contract says it must succeed)
 * $HPKVM_FAKE_KERNEL_LOG, if set, receives one line per hpkvm ioctl.
 *
 * It refuses what the reference kernel (kvm/patches/0003, 0004, 0007)
 * refuses, checking in the same order, per VM:
 *   HPKVM_ENABLE: EINVAL for non-zero flags, pad, apicv or reserved
 *     fields, feature bits version 2 does not have, required not a subset of
 *     requested, nr_vcpus 0 or above KVM_CAP_MAX_VCPUS; then EBUSY after
 *     the VM's first vCPU or a second time (even after HPKVM_DISABLE).
 *     Per feature: -ENOENT if not requested, -EINVAL for vfio-irte and
 *     timer-passthrough requested without irq-passthrough, and
 *     dynamic-nohz, irq-passthrough, timer-passthrough and ipi-fastpath
 *     without exclusive-cores, then the script (those four refused as
 *     exclusive-cores is, when it is).  Not modelled: that a grant not
 *     on APIC virtualization (apicv=) needs dynamic-nohz too.  If a
 *     required feature is not granted, EPERM: nothing is granted and
 *     every feature that would have been reports -EPERM.
 *   HPKVM_DISABLE: EINVAL for a non-zero argument, EBUSY after the VM's
 *     first vCPU.
 *   HPKVM_BIND_VCPU: ENOTTY on an fd that is not a vCPU's; EINVAL for
 *     non-zero flags or reserved fields, then without exclusive-cores
 *     granted; EBUSY after the vCPU's first KVM_RUN, for a vCPU already
 *     bound or a thread that bound one; EINVAL for a host_cpu outside
 *     the calling thread's affinity (which also covers offline and
 *     unknown CPUs); E2BIG beyond the nr_vcpus announced in HPKVM_ENABLE;
 *     then the script (bind=).
 *   KVM_RUN of a bound vCPU from another thread than the binder, and of
 *     a vCPU never bound in a VM granted exclusive-cores: EPERM (and the
 *     vCPU does not count as run).
 *   HPKVM_SET_IRTE: EINVAL without vfio-irte granted, for non-zero
 *     reserved fields or unknown flags, a vector outside 16-255 or a GSI
 *     without an irqfd (kvm/patches/0010); then the script (irte=).  Not
 *     the reference kernel's EINVAL for a request that disagrees with the
 *     irqfd's route where the grant rests on APIC virtualization (0011).
 * Each refusal is logged with its errno.  What it does not model: which
 * host cores are held (the reference kernel's table: a core held by
 * another VM's vCPU, the last core kept for the host, cores taken from a
 * stopped VM), E2BIG for exclusive-cores at HPKVM_ENABLE when nr_vcpus
 * exceeds this machine's cores (supported=, grant= and refuse= script
 * the machine), the host's list of cores VMs may have (kvm.hpkvm_cores:
 * EPERM at HPKVM_BIND_VCPU outside it), the pinning of the thread at
 * HPKVM_BIND_VCPU and the EPERM of a KVM_RUN whose thread was moved off
 * its core (QEMU pins the thread itself first), the
 * irqchip (the reference kernel refuses irq-passthrough and ipi-fastpath
 * without it, EINVAL on x86; QEMU checks it itself first), and
 * dynamic-nohz's rules in kvm/patches/0005 (ENODEV without nohz_full=,
 * E2BIG for more vCPUs than nohz_full cores, EINVAL for a bind outside
 * them).  The scripted failures (enable=, caps=, bind=, irte=) come after
 * every check.
 * tests/hpkvm/fake-kernel/test_contract.py runs the reference kernel's
 * contract test against this double.
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
    uint32_t announced;         /* HPKVM_ENABLE's nr_vcpus */
    unsigned nr_bound;          /* vCPUs bound, never counted off */
    GHashTable *irqfd_gsis;     /* GSIs with an irqfd assigned */
} FakeVm;

/* ... and of one vCPU. */
typedef struct FakeVcpu {
    FakeVm *vm;
    pid_t binder;               /* the thread that bound it; 0: unbound */
    bool ran;
} FakeVcpu;

static int (*real_ioctl)(int, unsigned long, ...);

static struct {
    uint64_t supported;
    uint64_t grant;
    uint64_t apicv;
    int refuse;
    int enable_errno;
    int disable_exits;          /* -1: the real KVM's answer */
    int bind_errno;
    int caps_errno;
    int irte_errno;
    int disable_errno;
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
        } else if (!strcmp(tok, "apicv")) {
            fk.apicv = g_ascii_strtoull(val, NULL, 0);
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
        } else if (!strcmp(tok, "disable")) {
            fk.disable_errno = atoi(val);
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

/*
 * What the reference kernel refuses of @req before it looks at the VM
 * (hpkvm_enable_valid()), or NULL.  Called without fk.lock: it asks the
 * real KVM for its vCPU limit, as KVM_MAX_VCPUS bounds nr_vcpus there.
 */
static const char *fake_enable_invalid(int fd, const struct hpkvm_enable *req)
{
    int max_vcpus;
    size_t i;

    if (req->flags || req->pad[0] || req->pad[1]) {
        return "with non-zero flags or pad";
    }
    if (req->apicv) {
        return "with a non-zero apicv";
    }
    for (i = 0; i < ARRAY_SIZE(req->reserved); i++) {
        if (req->reserved[i]) {
            return "with a non-zero reserved field";
        }
    }
    if (req->requested & ~ALL_FEATURES) {
        return "with a feature version 2 does not have";
    }
    if (req->required & ~req->requested) {
        return "with required not a subset of requested";
    }
    if (!req->nr_vcpus) {
        return "with nr_vcpus 0";
    }
    max_vcpus = real_ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
    if (max_vcpus > 0 && req->nr_vcpus > (unsigned)max_vcpus) {
        return "with nr_vcpus above KVM_CAP_MAX_VCPUS";
    }
    return NULL;
}

/* As the reference kernel's hpkvm_refusal(), with the script's answer. */
static int fake_reason(const struct hpkvm_enable *req, int f)
{
    uint64_t bit = 1ULL << f;

    if (!(req->requested & bit)) {
        return -ENOENT;
    }
    /* What a feature builds on must be asked for with it. */
    if (((bit == HPKVM_FEAT_VFIO_IRTE ||
          bit == HPKVM_FEAT_TIMER_PASSTHROUGH) &&
         !(req->requested & HPKVM_FEAT_IRQ_PASSTHROUGH)) ||
        ((bit == HPKVM_FEAT_DYNAMIC_NOHZ ||
          bit == HPKVM_FEAT_IRQ_PASSTHROUGH ||
          bit == HPKVM_FEAT_TIMER_PASSTHROUGH ||
          bit == HPKVM_FEAT_IPI_FASTPATH) &&
         !(req->requested & HPKVM_FEAT_EXCLUSIVE_CORES))) {
        return -EINVAL;
    }
    /*
     * What builds on exclusive cores is refused for their reason when
     * they are (the reference kernel's hpkvm_exclusive_refusal()).
     */
    if ((bit == HPKVM_FEAT_DYNAMIC_NOHZ ||
         bit == HPKVM_FEAT_IRQ_PASSTHROUGH ||
         bit == HPKVM_FEAT_TIMER_PASSTHROUGH ||
         bit == HPKVM_FEAT_IPI_FASTPATH) &&
        !(fk.grant & fk.supported & HPKVM_FEAT_EXCLUSIVE_CORES)) {
        bit = HPKVM_FEAT_EXCLUSIVE_CORES;
    }
    if (fk.grant & fk.supported & bit) {
        return 0;
    }
    /* refuse=0 would read as granted: not a refusal. */
    return fk.refuse > 0 ? -fk.refuse : -EOPNOTSUPP;
}

static int fake_enable(FakeVm *vm, struct hpkvm_enable *req)
{
    /* __u64 is unsigned long long: print through uint64_t. */
    uint64_t requested = req->requested, required = req->required;
    uint64_t grant = 0;
    int f;

    if (vm->nr_vcpus || vm->enable_called) {
        return fake_refuse(EBUSY, "HPKVM_ENABLE requested=0x%" PRIx64
                           " %s", requested, vm->nr_vcpus ?
                           "after a vCPU was created" : "a second time");
    }
    vm->enable_called = true;
    vm->announced = req->nr_vcpus;

    for (f = 0; f < HPKVM_FEATURE_NR; f++) {
        req->reason[f] = fake_reason(req, f);
        if (!req->reason[f]) {
            grant |= 1ULL << f;
        }
    }
    if (required & ~grant) {
        /* Nothing is granted: no reason may read as "granted". */
        for (f = 0; f < HPKVM_FEATURE_NR; f++) {
            if (!req->reason[f]) {
                req->reason[f] = -EPERM;
            }
        }
        req->granted = 0;
        req->apicv = 0;
        fake_log("HPKVM_ENABLE requested=0x%" PRIx64 " required=0x%" PRIx64
                 " -> EPERM", requested, required);
        errno = EPERM;
        return -1;
    }
    req->granted = grant;
    req->apicv = grant & fk.apicv;
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
 * The reference kernel's checks of hpkvm_bind_vcpu(), in its order, but
 * for the table of held cores: 0 or the refusal's -errno.
 */
static int fake_bind_refusal(FakeVcpu *vcpu,
                             const struct hpkvm_vcpu_bind *bind,
                             bool thread_bound, const cpu_set_t *affinity)
{
    if (!vcpu) {
        return -ENOTTY;         /* a VM's or /dev/kvm's fd */
    }
    if (bind->flags || bind->reserved[0] || bind->reserved[1] ||
        !(vcpu->vm->granted & HPKVM_FEAT_EXCLUSIVE_CORES)) {
        return -EINVAL;
    }
    if (vcpu->ran || vcpu->binder || thread_bound) {
        return -EBUSY;
    }
    /*
     * The kernel pins past no cpuset or sched_setaffinity() rule: the core
     * must be one the thread already may run on.  The kernel's own mask
     * holds no offline CPU, so this refuses those too.
     */
    if (!affinity || bind->host_cpu >= CPU_SETSIZE ||
        !CPU_ISSET(bind->host_cpu, affinity)) {
        return -EINVAL;
    }
    if (vcpu->vm->nr_bound >= vcpu->vm->announced) {
        return -E2BIG;
    }
    return -fk.bind_errno;
}

/*
 * From the vCPU's thread, with exclusive-cores granted, before the
 * vCPU's first KVM_RUN, once per vCPU and per thread.  The log shows the
 * calling thread and its affinity, so tests can check QEMU pinned the
 * thread to the same core first.
 */
static int fake_bind(FakeVcpu *vcpu, struct hpkvm_vcpu_bind *bind)
{
    static __thread bool thread_bound;
    pid_t tid = syscall(SYS_gettid);
    cpu_set_t set;
    bool have_set = sched_getaffinity(0, sizeof(set), &set) == 0;
    g_autoptr(GString) cpus = g_string_new("");
    int cpu, err;

    for (cpu = 0; have_set && cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            g_string_append_printf(cpus, "%s%d", cpus->len ? "," : "", cpu);
        }
    }
    err = -fake_bind_refusal(vcpu, bind, thread_bound,
                             have_set ? &set : NULL);
    fake_log("HPKVM_BIND_VCPU host_cpu=%u tid=%d affinity=%s -> %d",
             bind->host_cpu, (int)tid, cpus->str, err);
    if (err) {
        errno = err;
        return -1;
    }
    vcpu->binder = tid;
    vcpu->vm->nr_bound++;
    thread_bound = true;
    return 0;
}

/*
 * KVM_RUN, before the real one: a vCPU of a VM granted exclusive-cores
 * enters only bound, and from its own thread (EPERM).  One that may
 * enter counts as run from then on, for KVM_RUN returns only at the next
 * exit.
 */
static int fake_run(int fd)
{
    FakeVcpu *vcpu = g_hash_table_lookup(fk.vcpus, GINT_TO_POINTER(fd));
    pid_t tid;

    if (!vcpu) {
        return 0;
    }
    tid = syscall(SYS_gettid);
    if (!vcpu->binder && (vcpu->vm->granted & HPKVM_FEAT_EXCLUSIVE_CORES)) {
        return fake_refuse(EPERM, "KVM_RUN of a vCPU never bound, in a VM "
                           "granted exclusive-cores");
    }
    if (vcpu->binder && vcpu->binder != tid) {
        return fake_refuse(EPERM, "KVM_RUN of a vCPU bound by tid=%d from "
                           "tid=%d", (int)vcpu->binder, (int)tid);
    }
    vcpu->ran = true;
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
        /* A new VM, and not the vCPU of a closed fd of that number. */
        g_hash_table_remove(fk.vms, GINT_TO_POINTER(ret));
        g_hash_table_remove(fk.vcpus, GINT_TO_POINTER(ret));
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

/* Called with fk.lock held; -2 for an ioctl that is not the contract's. */
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

        if (arg) {
            return fake_refuse(EINVAL, "HPKVM_DISABLE with argument %p",
                               arg);
        }
        if (vm->nr_vcpus) {
            return fake_refuse(EBUSY, "HPKVM_DISABLE after a vCPU was "
                               "created");
        }
        fake_log("HPKVM_DISABLE (granted was 0x%" PRIx64 ") -> %d",
                 vm->granted, fk.disable_errno);
        if (fk.disable_errno) {
            errno = fk.disable_errno;
            return -1;
        }
        vm->granted = 0;
        return 0;
    }
    }
    return -2;                  /* not the contract's */
}

int ioctl(int fd, unsigned long request, ...)
{
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
        const char *invalid;
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
            g_mutex_lock(&fk.lock);
            ret = fake_run(fd);
            g_mutex_unlock(&fk.lock);
            return ret < 0 ? ret : real_ioctl(fd, request, arg);
        }
        /* Checked before the VM is looked at, as by the kernel. */
        invalid = request == HPKVM_ENABLE ?
                  fake_enable_invalid(fd, arg) : NULL;
        if (invalid) {
            struct hpkvm_enable *req = arg;

            return fake_refuse(EINVAL, "HPKVM_ENABLE requested=0x%" PRIx64
                               " required=0x%" PRIx64 " nr_vcpus=%u %s",
                               (uint64_t)req->requested,
                               (uint64_t)req->required, req->nr_vcpus,
                               invalid);
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
