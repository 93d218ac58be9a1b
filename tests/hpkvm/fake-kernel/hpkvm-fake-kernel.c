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
 * $HPKVM_FAKE_KERNEL_LOG, if set, receives one line per hpkvm ioctl.
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

static struct {
    uint64_t supported;
    uint64_t grant;
    int refuse;
    int enable_errno;
    int disable_exits;          /* -1: the real KVM's answer */
    int bind_errno;
    uint64_t granted;           /* the fake VM's state */
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
        }
    }
    if (!grant_set) {
        fk.grant = fk.supported;
    }
    free(copy);
}

static int fake_enable(struct hpkvm_enable *req)
{
    /* __u64 is unsigned long long: print through uint64_t. */
    uint64_t requested = req->requested, required = req->required;
    uint64_t grant = requested & fk.grant & fk.supported;
    int f;

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
    fk.granted = grant;
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
 * The contract: from the vCPU's thread, with exclusive-cores granted.
 * The log shows the calling thread and its affinity, so tests can check
 * QEMU pinned the thread to the same core first.
 */
static int fake_bind(struct hpkvm_vcpu_bind *bind)
{
    cpu_set_t set;
    GString *cpus = g_string_new("");
    int cpu;

    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
            if (CPU_ISSET(cpu, &set)) {
                g_string_append_printf(cpus, "%s%d", cpus->len ? "," : "",
                                       cpu);
            }
        }
    }
    fake_log("HPKVM_BIND_VCPU host_cpu=%u tid=%d affinity=%s -> %d",
             bind->host_cpu, (int)syscall(SYS_gettid), cpus->str,
             !(fk.granted & HPKVM_FEAT_EXCLUSIVE_CORES) ? EPERM :
             fk.bind_errno);
    g_string_free(cpus, true);
    if (!(fk.granted & HPKVM_FEAT_EXCLUSIVE_CORES)) {
        errno = EPERM;
        return -1;
    }
    if (fk.bind_errno) {
        errno = fk.bind_errno;
        return -1;
    }
    return 0;
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
        if (request == HPKVM_GET_CAPS) {
            struct hpkvm_caps *caps = arg;

            memset(caps, 0, sizeof(*caps));
            caps->version = HPKVM_VERSION;
            caps->nr_features = HPKVM_FEATURE_NR;
            caps->supported = fk.supported;
            fake_log("HPKVM_GET_CAPS supported=0x%" PRIx64, fk.supported);
            return 0;
        }
        if (request == HPKVM_ENABLE) {
            return fake_enable(arg);
        }
        if (request == HPKVM_SET_IRTE) {
            struct hpkvm_irte *irte = arg;

            fake_log("HPKVM_SET_IRTE gsi=%u vcpu=%u vector=%u flags=0x%x",
                     irte->gsi, irte->vcpu_id, irte->vector, irte->flags);
            return 0;
        }
        if (request == HPKVM_BIND_VCPU) {
            return fake_bind(arg);
        }
        if (request == HPKVM_DISABLE) {
            fake_log("HPKVM_DISABLE (granted was 0x%" PRIx64 ")", fk.granted);
            fk.granted = 0;
            return 0;
        }
    }
    return real_ioctl(fd, request, arg);
}
