/*
 * hpkvm-bind-loop: what binding a VM's vCPU costs the host once the first
 * VM has been bound, in kernel text pokes.
 *
 * A static key flip patches the kernel's code (text_poke_bp()), and each
 * patch batch synchronises every CPU with IPIs, the isolated ones
 * included.  hpkvm's reference kernel enables its key (hpkvm_claims,
 * kvm/patches/0012) at the first claim of a core and never disables it,
 * so the VMs after the first should poke nothing.  This tool checks that
 * with the kernel's own record of each poke (PERF_RECORD_TEXT_POKE, on
 * every CPU):
 *
 *   hpkvm-bind-loop CORE N [owned]
 *
 * creates a VM that stays for the whole run (its vCPU, never run, keeps
 * KVM's per-vCPU keys such as the LAPIC's apic_sw_disabled from
 * flipping between the VMs), then N + 1 VMs in turn, each granted
 * exclusive-cores (with "owned": dynamic-nohz, irq- and timer-passthrough
 * too, so that the bind claims the core's APIC), its one vCPU bound to
 * CORE from a thread of its own, then destroyed.  It prints
 *
 *   bind-loop: first=F loop=L vms=N granted=0xG
 *
 * F and L being the pokes during the first VM and during the N after it.
 * A failed step fails the run (exit 1).  Root, on hpkvm's reference
 * kernel, with CORE in kvm.hpkvm_cores (and nohz_full=, and no device
 * interrupt routed to it, for "owned").
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/cutils.h"
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>
#include "linux/kvm.h"
#include "linux/hpkvm.h"

/* Pages of each CPU's ring: thousands of pokes, more than any run has. */
#define LOOP_RING_PAGES 64

typedef struct LoopRing {
    struct perf_event_mmap_page *meta;
    uint64_t tail;
} LoopRing;

typedef struct LoopBind {
    int vcpu_fd;
    unsigned int core;
    int ret;
} LoopBind;

static void __attribute__((noreturn)) loop_die(const char *what)
{
    g_printerr("hpkvm-bind-loop: %s: %s\n", what, g_strerror(errno));
    exit(1);
}

static GArray *loop_rings_open(void)
{
    GArray *rings = g_array_new(false, true, sizeof(LoopRing));
    size_t page = qemu_real_host_page_size();
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    long cpu;

    for (cpu = 0; cpu < cpus; cpu++) {
        struct perf_event_attr attr = {
            .type = PERF_TYPE_SOFTWARE,
            .size = sizeof(attr),
            .config = PERF_COUNT_SW_DUMMY,
            .text_poke = 1,
        };
        LoopRing r = { 0 };
        int fd = syscall(SYS_perf_event_open, &attr, -1, (int)cpu, -1,
                         PERF_FLAG_FD_CLOEXEC);

        if (fd < 0 && errno == ENODEV) {
            continue;           /* offline: it pokes nothing */
        }
        if (fd < 0) {
            loop_die("perf_event_open (text_poke)");
        }
        /* The ring stays mapped, and so open, until the tool exits. */
        r.meta = mmap(NULL, (1 + LOOP_RING_PAGES) * page,
                      PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (r.meta == MAP_FAILED) {
            loop_die("mmap of a perf ring");
        }
        g_array_append_val(rings, r);
    }
    return rings;
}

/* The text pokes recorded since the last call, on every CPU. */
static unsigned loop_rings_count(GArray *rings)
{
    unsigned pokes = 0;
    guint i;

    for (i = 0; i < rings->len; i++) {
        LoopRing *r = &g_array_index(rings, LoopRing, i);
        const uint8_t *data = (const uint8_t *)r->meta + r->meta->data_offset;
        uint64_t size = r->meta->data_size;
        uint64_t head = qatomic_load_acquire(&r->meta->data_head);

        if (head - r->tail > size) {
            errno = ENOSPC;
            loop_die("a perf ring overflowed");
        }
        while (r->tail < head) {
            struct perf_event_header h;
            size_t k;

            /* A record may wrap around the ring's end. */
            for (k = 0; k < sizeof(h); k++) {
                ((uint8_t *)&h)[k] = data[(r->tail + k) % size];
            }
            if (h.type == PERF_RECORD_LOST) {
                errno = ENOSPC;
                loop_die("the kernel lost text poke records");
            }
            pokes += h.type == PERF_RECORD_TEXT_POKE;
            if (!h.size) {
                errno = EPROTO;
                loop_die("a perf record of size 0");
            }
            r->tail += h.size;
        }
        qatomic_store_release(&r->meta->data_tail, r->tail);
    }
    return pokes;
}

/* A VM with the in-kernel irqchip (which irq-passthrough needs). */
static int loop_vm_new(int kvm_fd)
{
    int vm_fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);

    if (vm_fd < 0) {
        loop_die("KVM_CREATE_VM");
    }
    if (ioctl(vm_fd, KVM_CREATE_IRQCHIP, 0)) {
        loop_die("KVM_CREATE_IRQCHIP");
    }
    return vm_fd;
}

/* The vCPU's thread: pinned to the core, as QEMU pins it, then bound. */
static gpointer loop_bind_thread(gpointer opaque)
{
    LoopBind *b = opaque;
    struct hpkvm_vcpu_bind bind = { .host_cpu = b->core };
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(b->core, &set);
    b->ret = sched_setaffinity(0, sizeof(set), &set) ||
             ioctl(b->vcpu_fd, HPKVM_BIND_VCPU, &bind) ? -errno : 0;
    return NULL;
}

/* One VM granted @requested, its vCPU bound to @core, then destroyed. */
static uint64_t loop_one_vm(int kvm_fd, uint64_t requested,
                            unsigned int core)
{
    struct hpkvm_enable req = {
        .requested = requested,
        .required = requested,
        .nr_vcpus = 1,
    };
    LoopBind b = { .core = core };
    int vm_fd = loop_vm_new(kvm_fd);

    if (ioctl(vm_fd, HPKVM_ENABLE, &req)) {
        loop_die("HPKVM_ENABLE");
    }
    b.vcpu_fd = ioctl(vm_fd, KVM_CREATE_VCPU, 0);
    if (b.vcpu_fd < 0) {
        loop_die("KVM_CREATE_VCPU");
    }
    g_thread_join(g_thread_new("bind", loop_bind_thread, &b));
    if (b.ret) {
        errno = -b.ret;
        loop_die("HPKVM_BIND_VCPU");
    }
    close(b.vcpu_fd);
    close(vm_fd);
    return req.granted;
}

int main(int argc, char **argv)
{
    uint64_t requested = HPKVM_FEAT_EXCLUSIVE_CORES, granted;
    unsigned int core, vms, first, loop, i;
    int kvm_fd, keep_fd, keep_vcpu;
    GArray *rings;

    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "owned")) ||
        qemu_strtoui(argv[1], NULL, 10, &core) < 0 ||
        qemu_strtoui(argv[2], NULL, 10, &vms) < 0) {
        g_printerr("usage: hpkvm-bind-loop CORE N [owned]: CORE a host "
                   "CPU, N the VMs after the first\n");
        return 2;
    }
    if (argc == 4) {
        requested |= HPKVM_FEAT_DYNAMIC_NOHZ | HPKVM_FEAT_IRQ_PASSTHROUGH |
                     HPKVM_FEAT_TIMER_PASSTHROUGH;
    }
    kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm_fd < 0) {
        loop_die("/dev/kvm");
    }
    keep_fd = loop_vm_new(kvm_fd);
    keep_vcpu = ioctl(keep_fd, KVM_CREATE_VCPU, 0);
    if (keep_vcpu < 0) {
        loop_die("KVM_CREATE_VCPU");
    }
    rings = loop_rings_open();
    loop_rings_count(rings);
    granted = loop_one_vm(kvm_fd, requested, core);
    first = loop_rings_count(rings);
    for (i = 0; i < vms; i++) {
        loop_one_vm(kvm_fd, requested, core);
    }
    loop = loop_rings_count(rings);
    printf("bind-loop: first=%u loop=%u vms=%u granted=0x%llx\n", first,
           loop, vms, (unsigned long long)granted);
    close(keep_vcpu);
    close(keep_fd);
    return 0;
}
