/*
 * hpkvm: dedicated host cores for the vCPUs, housekeeping cores for the
 * rest of QEMU, and the host's isolation around them
 *
 * At machine initialisation, before KVM creates anything: every check of
 * host-cpus= and housekeeping-cpus= (each refusal names the core and the
 * fix), then the leases (all or nothing) and the host's isolation, which
 * qemu-hpkvm-helper makes (tools/hpkvm; QEMU, as any user, holds the
 * open leases it is given), then QEMU's threads to the housekeeping
 * cores.  Each
 * vCPU thread is bound to its core from its own thread before it first
 * enters the guest (hot-plugged ones too: host-cpus= must cover
 * -smp maxcpus).  What cannot be so (a bind the kernel refuses, pinning
 * by a manager that contradicts host-cpus=) stops the VM, not QEMU,
 * with the reason and the fix; a CPU whose core is gone is refused at
 * device_add.  At exit the leases go and the helper reconciles the host
 * with the leases left; it does the same the moment QEMU dies.
 * If KVM's own initialisation fails after this, all of it is undone
 * before QEMU tries the next -accel entry.
 *
 * host-cpus=pinned is for managers that already give each vCPU a core of
 * its own (libvirt's <vcpupin>, as Nova's hw:cpu_policy=dedicated and
 * KubeVirt's dedicated CPU placement write it), so that nobody names the
 * cores twice.  They pin after QEMU started, before the guest first
 * runs: the leases, the isolation and the binds wait until then, take
 * the core each vCPU thread is pinned to, and make the same checks as
 * for a list.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "qapi/qapi-events-hpkvm.h"
#include "qapi/qapi-visit-hpkvm.h"
#include "qapi/clone-visitor.h"
#include "hw/core/cpu.h"
#include "system/system.h"
#include "system/runstate.h"
#include "qemu/timer.h"
#include "migration/cpr.h"
#include "hpkvm-internal.h"
#include "hpkvm-helper-client.h"
#include "hpkvm-helper-proto.h"
#include "hpkvm-isolate.h"
#include "hpkvm-kernel.h"
#include "trace.h"

#define CPU_SYSFS "/sys/devices/system/cpu"
/* host-cpus= taking each vCPU's core from its pinning at the first run */
#define HOST_CPUS_PINNED "pinned"
/* The name of the lease files' descriptors in CPR's state */
#define CPR_LEASE "hpkvm-lease"

/* Every core of @cores present and online; what is wrong, with the fix. */
static bool placement_check_cores(HPKVMState *s, const char *opt,
                        const HpkvmCpuSet *cores, const HpkvmCpuSet *present,
                        const HpkvmCpuSet *online, Error **errp)
{
    ERRP_GUARD();
    unsigned cpu;

    HPKVM_CPUSET_FOREACH(cpu, cores) {
        if (!hpkvm_cpuset_has(present, cpu)) {
            g_autofree char *list = hpkvm_cpuset_format(present);

            error_setg(errp, "%s= lists host core %u, which does not exist "
                       "(this host has %s)", opt, cpu, list);
            return false;
        }
        if (!hpkvm_cpuset_has(online, cpu)) {
            error_setg(errp, "%s= lists host core %u, which is offline",
                       opt, cpu);
            error_append_hint(errp, "Bring it online (echo 1 > %s/cpu%u/"
                              "online), or choose another.\n", CPU_SYSFS,
                              cpu);
            return false;
        }
    }
    return true;
}

/* A thread of this process onto @cpus; these are QEMU's own threads. */
static int placement_pin_thread(pid_t tid, const HpkvmCpuSet *cpus)
{
    g_autofree char *list = hpkvm_cpuset_format(cpus);
    int ret = hpkvm_set_affinity(tid, cpus);

    trace_hpkvm_pin_thread(tid, list, ret);
    return ret;
}

static bool placement_is_vcpu_thread(HPKVMState *s, pid_t tid)
{
    CPUState *cpu;

    CPU_FOREACH(cpu) {
        if (s->vcpu_tid[cpu->cpu_index] == tid) {
            return true;
        }
    }
    return false;
}

typedef struct BindWork {
    HPKVMState *s;
    bool may_defer;
    int ret;
    int kernel_ret;     /* HPKVM_BIND_VCPU's, if QEMU's own pin succeeded */
    bool deferred;
} BindWork;

/* On the vCPU's own thread, which has not entered the guest yet. */
static void placement_bind_on_vcpu_thread(CPUState *cpu, run_on_cpu_data data)
{
    BindWork *w = data.host_ptr;
    HPKVMState *s = w->s;
    unsigned core = s->vcpu_core[cpu->cpu_index];
    HpkvmCpuSet one;
    int kernel_ret = 0;

    if (s->cores_pending) {
        /* host-cpus=pinned: no core until the first run. */
        s->vcpu_tid[cpu->cpu_index] = qemu_get_thread_id();
        w->deferred = true;
        return;
    }
    hpkvm_cpuset_clear(&one);
    set_bit(core, one.bits);
    w->ret = placement_pin_thread(0, &one);
    if (w->ret == -EINVAL && w->may_defer) {
        /*
         * The thread's cpuset excludes its core: a manager (libvirt) put
         * QEMU in a cgroup of its own and moves each vCPU thread to its
         * vcpupin cgroup once QEMU reported it.  Bind at the first run.
         */
        w->deferred = true;
        w->ret = 0;
    } else if (!w->ret && w->may_defer && cpr_is_incoming()) {
        /*
         * cpr-transfer: the previous QEMU still runs the guest on this
         * core until the hand-over.  A bind now would take the core from
         * between two of its KVM_RUNs (an exit to user space is enough),
         * and its vCPU would fail with EBUSY.  Bind at the first run,
         * when it has stopped.
         */
        w->deferred = true;
    } else if (!w->ret &&
               s->feat[HPKVM_FEATURE_EXCLUSIVE_CORES].granted) {
        kernel_ret = hpkvm_kernel_bind_vcpu(cpu, core);
        w->ret = w->kernel_ret = kernel_ret;
    }
    s->vcpu_tid[cpu->cpu_index] = qemu_get_thread_id();
    trace_hpkvm_bind_vcpu(cpu->cpu_index, core, s->vcpu_tid[cpu->cpu_index],
                          kernel_ret);
}

/*
 * @cpu's thread onto its core and, where the kernel granted exclusive
 * cores, bound there by the kernel; or, if @may_defer, left for the first
 * run when its cpuset does not allow the core yet.
 */
static bool placement_bind(HPKVMState *s, CPUState *cpu, bool may_defer,
                           Error **errp)
{
    ERRP_GUARD();
    BindWork w = { .s = s, .may_defer = may_defer };

    run_on_cpu(cpu, placement_bind_on_vcpu_thread, RUN_ON_CPU_HOST_PTR(&w));
    /* Not bound yet: bound again before the guest runs. */
    s->vcpu_deferred[cpu->cpu_index] = w.deferred || w.ret < 0;
    if (w.ret < 0) {
        /* Neither a vCPU off its core nor one the kernel has not bound. */
        error_setg(errp, "cannot bind vCPU %d to host core %u: %s",
                   cpu->cpu_index, s->vcpu_core[cpu->cpu_index],
                   strerror(-w.ret));
        if (w.kernel_ret == -EPERM) {
            error_append_hint(errp, "The host's KVM binds vCPUs only to the "
                              "cores its policy allows (the reference "
                              "kernel: %s) and, for a QEMU without "
                              "CAP_SYS_NICE, only to cores "
                              "qemu-hpkvm-helper leased it; use host cores "
                              "within them, with the helper running, or "
                              "have the host's administrator add this one "
                              "there.\n", HPKVM_HOST_KVM_CORES);
        } else if (w.kernel_ret == -EBUSY) {
            error_append_hint(errp, "The core is another VM's, or, for a "
                              "guest granted its cores' APICs, a device "
                              "interrupt of the host is routed to it (the "
                              "kernel log names the IRQ): leave "
                              "dynamic-isolation on, or move it with "
                              "/proc/irq/N/smp_affinity_list.\n");
        }
        return false;
    }
    return true;
}

typedef enum PinMoment {
    AT_START,           /* a failure is worth a warning */
    AT_FIRST_RUN,       /* a manager confining one to leased cores: fail */
    SETTLED,            /* KVM's workers started since: best effort */
} PinMoment;

/*
 * QEMU's threads but the vCPUs' to the housekeeping cores.  At the start
 * (main loop, RCU, helpers) threads created later inherit it from their
 * creator; at the first run a manager may have confined one to leased
 * cores only, which contradicts host-cpus= (false, and @errp says what
 * to change); a second later the workers KVM started for the VM from the
 * first vCPU's first KVM_RUN (kvm-nx-lpage-recovery), which inherited
 * that vCPU's core, follow.
 */
static bool placement_pin_other_threads(HPKVMState *s, PinMoment when,
                                        Error **errp)
{
    ERRP_GUARD();
    g_autoptr(GDir) dir = g_dir_open("/proc/self/task", 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        pid_t tid = atoi(name);
        g_autofree char *list = NULL, *leased = NULL;
        HpkvmCpuSet cpus;
        int ret;

        if (placement_is_vcpu_thread(s, tid)) {
            continue;
        }
        ret = placement_pin_thread(tid, &s->housekeeping);
        if (!ret || when == SETTLED) {
            continue;
        }
        if (when == AT_START) {
            warn_report("cannot move QEMU thread %s to hpkvm's "
                        "housekeeping cores: %s", name, strerror(-ret));
            continue;
        }
        if (!hpkvm_get_affinity(tid, &cpus) ||
            !hpkvm_cpuset_intersects(&cpus, &s->leases->held)) {
            continue;
        }
        list = hpkvm_cpuset_format(&cpus);
        leased = hpkvm_cpuset_format(&s->leases->held);
        error_setg(errp, "QEMU thread %d is confined to host cores %s "
                   "(by libvirt's <emulatorpin>?), which include cores "
                   "leased for vCPUs (%s) and none of housekeeping-cpus=",
                   tid, list, leased);
        error_append_hint(errp, "Pin QEMU's other threads within "
                          "housekeeping-cpus=.\n");
        return false;
    }
    return true;
}

/*
 * The threads of QEMU back where they were before hpkvm moved them,
 * when KVM's initialisation failed after hpkvm's and QEMU goes on with
 * the next -accel entry.
 */
static void placement_unpin_threads(HPKVMState *s)
{
    g_autoptr(GDir) dir = g_dir_open("/proc/self/task", 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        placement_pin_thread(atoi(name), &s->start_affinity);
    }
}

#define SETTLE_MS 1000

static void placement_settled(GPtrArray *failures, Error *err, void *opaque)
{
    if (err) {
        warn_report_err(err);
    }
}

static void placement_settle(void *opaque)
{
    HPKVMState *s = opaque;

    placement_pin_other_threads(s, SETTLED, NULL);
    timer_free(s->settle_timer);
    s->settle_timer = NULL;
    /*
     * KVM's kernel threads for this VM (kvm-pit, kvm-nx-lpage-recovery
     * on Linux 6.1) exist by now, and are not QEMU's: the helper keeps
     * them off the leased cores as it keeps every host task.  The guest
     * runs: asked without waiting, so that a helper stopped or busy
     * stops neither QMP nor the guest's devices.
     */
    if (s->leases && !hpkvm_cpuset_empty(&s->leases->held) &&
        s->isolation && s->isolation->active) {
        hpkvm_helper_reconcile_async(s->helper_socket, placement_settled,
                                     NULL);
    }
}

/*
 * The guest must not run as placed: say why and stop the VM, not QEMU,
 * so that the manager sees it (query-status: internal-error) and QEMU
 * still undoes what it changed on the host when it quits.  From a VM
 * state change handler the vCPUs are resumed right after this, but when
 * "cont" started the VM (as under -S, which managers use) the main loop
 * handles the stop before it lets go of the BQL, which a vCPU needs to
 * enter the guest.  The checks are made again at the next run, once the
 * manager fixed the pinning and reset the VM.
 */
static void placement_stop_vm(Error *err)
{
    error_report_err(err);
    qemu_system_vmstop_request_prepare();
    qemu_system_vmstop_request(RUN_STATE_INTERNAL_ERROR);
}

/*
 * When the guest first runs: a manager (libvirt's <vcpupin> and
 * <emulatorpin>, its cpuset cgroups) may have pinned QEMU's threads since
 * they were created.  Pinning that agrees is accepted: a vCPU thread
 * allowed on its own core (narrowed back to that core alone, or bound
 * now if its cpuset excluded the core at its creation), QEMU's other
 * threads off the cores this VM leased.  Pinning that contradicts
 * host-cpus= fails, saying what to change.
 */
static bool placement_check_pinning(HPKVMState *s, Error **errp)
{
    ERRP_GUARD();
    HpkvmCpuSet cpus, one;
    CPUState *cpu;

    CPU_FOREACH(cpu) {
        unsigned core = s->vcpu_core[cpu->cpu_index];
        pid_t tid = s->vcpu_tid[cpu->cpu_index];
        g_autofree char *list = NULL;

        if (!tid || !hpkvm_get_affinity(tid, &cpus) ||
            hpkvm_cpuset_has(&cpus, core)) {
            hpkvm_cpuset_clear(&one);
            set_bit(core, one.bits);
            if (s->vcpu_deferred[cpu->cpu_index]) {
                /* Now allowed on its core: bind it as at creation. */
                if (!placement_bind(s, cpu, false, errp)) {
                    return false;
                }
            } else if (tid && !hpkvm_cpuset_equal(&cpus, &one)) {
                placement_pin_thread(tid, &one);
            }
            continue;
        }
        list = hpkvm_cpuset_format(&cpus);
        error_setg(errp, "vCPU %d was pinned to host cores %s since it "
                   "started (by libvirt's <vcpupin>?), but host-cpus= gives "
                   "it core %u", cpu->cpu_index, list, core);
        error_append_hint(errp, "Make the vCPU's pinning and host-cpus= "
                          "agree.\n");
        return false;
    }
    return placement_pin_other_threads(s, AT_FIRST_RUN, errp);
}

/* vCPUs whose bind failed while the VM was stopped: again, or fail. */
static bool placement_bind_deferred(HPKVMState *s, Error **errp)
{
    CPUState *cpu;

    CPU_FOREACH(cpu) {
        if (s->vcpu_deferred[cpu->cpu_index] &&
            !placement_bind(s, cpu, false, errp)) {
            return false;
        }
    }
    return true;
}

static bool placement_lease_as_pinned(HPKVMState *s, Error **errp);

/*
 * The kernel binds a vCPU to its core but does not hold the thread there:
 * root, the thread's owner or a cpuset change may move it, and the kernel
 * then refuses KVM_RUN (EPERM) rather than run the guest on a core it was
 * not given, until the thread is back on its core alone.  Pause the VM,
 * saying which vCPU moved and how to resume it: nothing of the guest's
 * state was touched.  Another refusal is KVM's to report (internal-error).
 */
static bool placement_run_refused(CPUState *cpu, int err)
{
    HPKVMState *s = HPKVM_ACCEL(current_accel());
    unsigned core = s->vcpu_core[cpu->cpu_index];
    pid_t tid = s->vcpu_tid[cpu->cpu_index];
    char **moved_to = &s->vcpu_moved_to[cpu->cpu_index];
    Error *local = NULL;
    HpkvmCpuSet cpus;

    if (err != EPERM || !s->feat[HPKVM_FEATURE_EXCLUSIVE_CORES].granted ||
        !tid || !hpkvm_get_affinity(tid, &cpus) ||
        (hpkvm_cpuset_count(&cpus) == 1 && hpkvm_cpuset_has(&cpus, core))) {
        return false;
    }
    g_free(*moved_to);
    *moved_to = hpkvm_cpuset_format(&cpus);
    trace_hpkvm_placement_vcpu_moved(cpu->cpu_index, tid, core);
    error_setg(&local, "vCPU %d paused: its thread %d was moved to host "
               "cores %s, and the kernel runs it only on its core %u alone",
               cpu->cpu_index, tid, *moved_to, core);
    error_append_hint(&local, "Pin the thread back to core %u alone "
                      "(taskset -p -c %u %d, or libvirt's vcpupin), then "
                      "resume the VM (cont).\n", core, core, tid);
    error_report_err(local);
    qapi_event_send_hpkvm_vcpu_moved(cpu->cpu_index, core, tid, *moved_to);
    vm_stop(RUN_STATE_PAUSED);
    return true;
}

static void placement_vm_state_change(void *opaque, bool running,
                                      RunState state)
{
    HPKVMState *s = opaque;
    Error *err = NULL;

    if (!running) {
        return;
    }
    /* Resumed: a vCPU still moved is refused, and reported, again. */
    for (unsigned i = 0; i < s->max_vcpus; i++) {
        g_clear_pointer(&s->vcpu_moved_to[i], g_free);
    }
    if (s->first_run_checked) {
        if (!placement_bind_deferred(s, &err)) {
            placement_stop_vm(err);
        }
        return;
    }
    if ((s->cores_pending && !placement_lease_as_pinned(s, &err)) ||
        !placement_check_pinning(s, &err)) {
        placement_stop_vm(err);
        return;
    }
    s->first_run_checked = true;
    s->settle_timer = timer_new_ms(QEMU_CLOCK_REALTIME, placement_settle, s);
    timer_mod(s->settle_timer,
              qemu_clock_get_ms(QEMU_CLOCK_REALTIME) + SETTLE_MS);
}

/* What the reconcile after a release came to; @opaque says what went. */
static void placement_released(GPtrArray *failures, Error *err, void *opaque)
{
    g_autofree char *released = opaque;
    int i;

    if (err) {
        /* The helper sees QEMU exit (its pidfd) and reconciles then. */
        warn_report_err(err);
        warn_report("%s, but the host's isolation of them stays until "
                    "qemu-hpkvm-helper sees QEMU exit", released);
        return;
    }
    for (i = 0; i < failures->len; i++) {
        warn_report("qemu-hpkvm-helper could not restore %s",
                    (char *)g_ptr_array_index(failures, i));
    }
}

void hpkvm_placement_release(HPKVMState *s, const char *why, bool wait)
{
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *cores = NULL;
    char *released;
    Error *err = NULL;
    unsigned cpu;

    if (!s->leases || hpkvm_cpuset_empty(&s->leases->held)) {
        return;
    }
    trace_hpkvm_placement_release(why);
    cores = hpkvm_cpuset_format(&s->leases->held);
    HPKVM_CPUSET_FOREACH(cpu, &s->leases->held) {
        cpr_delete_fd(CPR_LEASE, cpu);
    }
    /* After a CPR hand-over the new QEMU still holds them: nothing goes. */
    hpkvm_leases_release(s->leases);
    released = g_strdup_printf("hpkvm released host cores %s (%s)", cores,
                               why);
    if (!wait) {
        hpkvm_helper_reconcile_async(s->helper_socket, placement_released,
                                     released);
        return;
    }
    hpkvm_helper_reconcile(s->helper_socket, failures, &err);
    placement_released(failures, err, released);
}

static void placement_exit(Notifier *n, void *data)
{
    /*
     * The main loop is done: waited for, so that the host is as before
     * when QEMU has exited (at worst for the helper's timeout; the
     * helper sees the exit and reconciles anyway).
     */
    hpkvm_placement_release(container_of(n, HPKVMState, exit_notifier),
                            "QEMU exits", true);
}

static void placement_alloc_vcpus(HPKVMState *s, unsigned max_cpus)
{
    s->max_vcpus = max_cpus;
    s->vcpu_core = g_new0(unsigned, max_cpus);
    s->vcpu_tid = g_new0(int, max_cpus);
    s->vcpu_deferred = g_new0(bool, max_cpus);
    s->vcpu_moved_to = g_new0(char *, max_cpus);
}

/*
 * What the leases and isolation need, checked before anything changes;
 * @list is host-cpus= or, for host-cpus=pinned, the vCPUs' pinning.
 */
static bool placement_check(HPKVMState *s, const char *list,
                            unsigned max_cpus, HpkvmCpuSet *cores,
                            Error **errp)
{
    ERRP_GUARD();
    HpkvmCpuSet present, online, both;
    unsigned cpu, i = 0;
    g_autofree char *hk = NULL;

    if (!hpkvm_cpuset_parse(list, cores, "host-cpus", errp) ||
        !hpkvm_host_read_cpus(&s->host, CPU_SYSFS "/present", &present,
                              errp) ||
        !hpkvm_host_read_cpus(&s->host, CPU_SYSFS "/online", &online,
                              errp) ||
        !placement_check_cores(s, "host-cpus", cores, &present, &online,
                               errp)) {
        return false;
    }
    s->nr_cores = hpkvm_cpuset_count(cores);
    if (s->nr_cores < max_cpus) {
        error_setg(errp, "host-cpus=%s lists %u host core%s for %u "
                   "vCPUs (-smp maxcpus counts hot-pluggable ones)", list,
                   s->nr_cores, s->nr_cores == 1 ? "" : "s", max_cpus);
        error_append_hint(errp, "List %u more, or lower -smp.\n",
                          max_cpus - s->nr_cores);
        return false;
    }
    if (s->housekeeping_opt) {
        if (!hpkvm_cpuset_parse(s->housekeeping_opt, &s->housekeeping,
                                "housekeeping-cpus", errp) ||
            !placement_check_cores(s, "housekeeping-cpus", &s->housekeeping,
                                   &present, &online, errp)) {
            return false;
        }
        bitmap_and(both.bits, cores->bits, s->housekeeping.bits,
                   HPKVM_MAX_HOST_CPUS);
        if (!hpkvm_cpuset_empty(&both)) {
            error_setg(errp, "host core %u is in both host-cpus= and "
                       "housekeeping-cpus=", hpkvm_cpuset_next(&both, 0));
            error_append_hint(errp, "A vCPU's core runs nothing else: "
                              "remove it from one of them.\n");
            return false;
        }
    } else {
        hpkvm_cpuset_andnot(&s->housekeeping, &online, cores);
    }
    if (hpkvm_cpuset_empty(&s->housekeeping)) {
        error_setg(errp, "host-cpus=%s leaves no online core for QEMU's "
                   "other threads and the host", list);
        error_append_hint(errp, "Keep at least one online core out of "
                          "host-cpus=.\n");
        return false;
    }
    /* With host-cpus=pinned, vcpu_core[] is each vCPU's pinning already. */
    if (!s->cores_pending) {
        placement_alloc_vcpus(s, max_cpus);
        HPKVM_CPUSET_FOREACH(cpu, cores) {
            if (i < max_cpus) {
                s->vcpu_core[i++] = cpu;
            }
        }
    }
    hk = hpkvm_cpuset_format(&s->housekeeping);
    trace_hpkvm_placement(list, hk);
    return true;
}

/*
 * The helper leases the cores and isolates the host; the leases a
 * previous QEMU handed over (cpr-transfer) are adopted.  All are offered
 * to a next CPR hand-over.
 */
static bool placement_lease(HPKVMState *s, const HpkvmCpuSet *cores,
                            Error **errp)
{
    HpkvmCpuSet adopted, taken, hk;
    unsigned cpu;
    int fd;

    HPKVM_CPUSET_FOREACH(cpu, cores) {
        fd = cpr_is_incoming() ? cpr_find_fd(CPR_LEASE, cpu) : -1;
        if (fd >= 0) {
            s->leases->fd[cpu] = fd;
            set_bit(cpu, s->leases->held.bits);
        }
    }
    adopted = s->leases->held;
    if (!hpkvm_helper_lease(s->helper_socket, cores, s->housekeeping_opt,
                            s->dynamic_isolation, s->leases, &hk,
                            &s->isolation, errp)) {
        hpkvm_leases_release(s->leases);
        return false;
    }
    s->housekeeping = hk;
    hpkvm_cpuset_andnot(&taken, &s->leases->held, &adopted);
    HPKVM_CPUSET_FOREACH(cpu, &taken) {
        cpr_save_fd(CPR_LEASE, cpu, s->leases->fd[cpu]);
    }
    if (!s->isolation->active && s->dynamic_isolation == ON_OFF_AUTO_AUTO) {
        warn_report("hpkvm's dynamic isolation is off: %s",
                    s->isolation->reason);
    }
    return true;
}

/*
 * host-cpus=pinned, at the first run: each vCPU thread pinned to a core
 * of its own, which becomes its core; then the checks and the leases of
 * host-cpus= listing those cores.
 */
static bool placement_lease_as_pinned(HPKVMState *s, Error **errp)
{
    ERRP_GUARD();
    HpkvmCpuSet cores, cpus;
    g_autofree char *list = NULL;
    CPUState *cpu, *other;
    unsigned core;

    hpkvm_cpuset_clear(&cores);
    CPU_FOREACH(cpu) {
        int i = cpu->cpu_index;
        g_autofree char *allowed = NULL;

        if (!hpkvm_get_affinity(s->vcpu_tid[i], &cpus)) {
            error_setg(errp, "host-cpus=pinned: cannot read where "
                       "vCPU %d's thread %d may run", i, s->vcpu_tid[i]);
            return false;
        }
        if (hpkvm_cpuset_count(&cpus) != 1) {
            allowed = hpkvm_cpuset_format(&cpus);
            error_setg(errp, "host-cpus=pinned, but vCPU %d may run "
                       "on host cores %s: it has no core of its own", i,
                       allowed);
            error_append_hint(errp, "Pin each vCPU to one core (libvirt's "
                              "<vcpupin>, Nova's hw:cpu_policy=dedicated) "
                              "before the guest runs, or list the cores in "
                              "host-cpus=.\n");
            return false;
        }
        core = hpkvm_cpuset_next(&cpus, 0);
        if (hpkvm_cpuset_has(&cores, core)) {
            CPU_FOREACH(other) {
                if (s->vcpu_core[other->cpu_index] == core) {
                    break;
                }
            }
            error_setg(errp, "host-cpus=pinned, but vCPUs %d and %d "
                       "are both pinned to host core %u: each needs a core "
                       "of its own", other->cpu_index, i, core);
            return false;
        }
        set_bit(core, cores.bits);
        s->vcpu_core[i] = core;
    }
    list = hpkvm_cpuset_format(&cores);
    if (!placement_check(s, list, s->max_vcpus, &cores, errp)) {
        return false;
    }
    qapi_free_HpkvmIsolation(s->isolation);
    s->isolation = NULL;
    if (!placement_lease(s, &cores, errp)) {
        s->isolation = hpkvm_isolate_report_off(&s->host, &cores,
                                                s->dynamic_isolation,
                                                "the cores could not be "
                                                "leased");
        return false;
    }
    s->cores_pending = false;
    return true;
}

/* host-cpus=pinned: what can be known and checked before the first run */
static bool placement_init_as_pinned(HPKVMState *s, unsigned cpus,
                                     unsigned max_cpus, Error **errp)
{
    ERRP_GUARD();
    HpkvmCpuSet none;

    if (max_cpus > cpus) {
        error_setg(errp, "host-cpus=pinned takes the cores the vCPUs "
                   "are pinned to when the guest first runs, and "
                   "hot-pluggable vCPUs (-smp cpus=%u,maxcpus=%u) have "
                   "none", cpus, max_cpus);
        error_append_hint(errp, "List the cores in host-cpus=, or drop "
                          "maxcpus.\n");
        return false;
    }
    if (cpr_is_incoming()) {
        error_setg(errp, "host-cpus=pinned cannot take over the "
                   "leases of a CPR hand-over");
        error_append_hint(errp, "Give the new QEMU the cores its vCPUs "
                          "have in host-cpus= (query-hpkvm of the old "
                          "one lists them).\n");
        return false;
    }
    placement_alloc_vcpus(s, max_cpus);
    s->cores_pending = true;
    hpkvm_cpuset_clear(&none);
    s->isolation = hpkvm_isolate_report_off(&s->host, &none,
                                            s->dynamic_isolation,
                                            "host-cpus=pinned: the host is "
                                            "isolated when the guest first "
                                            "runs");
    return true;
}

bool hpkvm_placement_init(HPKVMState *s, unsigned cpus, unsigned max_cpus,
                          Error **errp)
{
    ERRP_GUARD();
    HpkvmCpuSet cores;

    hpkvm_host_init(&s->host, s->host_root);
    if (s->helper_opt && *s->helper_opt) {
        s->helper_socket = g_strdup(s->helper_opt);
    } else {
        s->helper_socket = hpkvm_host_path(&s->host, HPKVM_HELPER_SOCKET);
    }
    if (!s->host_cpus_opt) {
        if (s->housekeeping_opt) {
            error_setg(errp, "housekeeping-cpus= needs host-cpus=");
            error_append_hint(errp, "List the vCPUs' cores in host-cpus= "
                              "too.\n");
            return false;
        }
        if (s->dynamic_isolation == ON_OFF_AUTO_ON) {
            error_setg(errp, "dynamic-isolation=on needs host-cpus=");
            error_append_hint(errp, "List the host cores to isolate for the "
                              "vCPUs in host-cpus=.\n");
            return false;
        }
        hpkvm_cpuset_clear(&cores);
        s->isolation = hpkvm_isolate_report_off(&s->host, &cores,
                                                s->dynamic_isolation,
                                                "no host-cpus=: the vCPUs "
                                                "have no cores of their own");
        return true;
    }
    if (!strcmp(s->host_cpus_opt, HOST_CPUS_PINNED)) {
        if (!placement_init_as_pinned(s, cpus, max_cpus, errp)) {
            return false;
        }
    } else if (!placement_check(s, s->host_cpus_opt, max_cpus, &cores,
                                errp)) {
        return false;
    }

    s->leases = g_new0(HpkvmLeases, 1);
    hpkvm_leases_init(s->leases);
    if (!s->cores_pending && !placement_lease(s, &cores, errp)) {
        return false;
    }
    s->exit_notifier.notify = placement_exit;
    qemu_add_exit_notifier(&s->exit_notifier);
    s->vm_state_entry = qemu_add_vm_change_state_handler(
        placement_vm_state_change, s);
    KVM_STATE(s)->run_refused = placement_run_refused;
    /* host-cpus=pinned: no housekeeping cores known yet. */
    if (!s->cores_pending && hpkvm_get_affinity(0, &s->start_affinity)) {
        s->threads_pinned = true;
        placement_pin_other_threads(s, AT_START, NULL);
    }
    return true;
}

void hpkvm_placement_undo(HPKVMState *s)
{
    KVM_STATE(s)->run_refused = NULL;
    hpkvm_placement_release(s, "KVM's initialisation failed", true);
    if (s->vm_state_entry) {
        qemu_del_vm_change_state_handler(s->vm_state_entry);
        s->vm_state_entry = NULL;
    }
    if (s->exit_notifier.notify) {
        qemu_remove_exit_notifier(&s->exit_notifier);
        s->exit_notifier.notify = NULL;
    }
    if (s->threads_pinned) {
        placement_unpin_threads(s);
        s->threads_pinned = false;
    }
}

void hpkvm_placement_bind_vcpu(HPKVMState *s, CPUState *cpu)
{
    Error *err = NULL;

    if (!s->leases || placement_bind(s, cpu, !s->first_run_checked, &err)) {
        return;
    }
    if (runstate_is_running()) {
        /* Hot-plugged into a running guest, the check at realize passed */
        placement_stop_vm(err);
    } else {
        /* A stop now would be lost: the VM stops when it starts. */
        error_report_err(err);
    }
}

bool hpkvm_placement_check_vcpu(HPKVMState *s, CPUState *cpu, Error **errp)
{
    ERRP_GUARD();
    int index = cpu->cpu_index;
    HpkvmCpuSet online;
    unsigned core;

    /* Boot vCPUs: placement_check() checked their cores at start. */
    if (!s->leases || !DEVICE(cpu)->hotplugged) {
        return true;
    }
    if (index < 0 || (unsigned)index >= s->max_vcpus) {
        error_setg(errp, "vCPU %d has no host core: host-cpus=%s "
                   "covers vCPUs 0-%u", index, s->host_cpus_opt,
                   s->max_vcpus - 1);
        error_append_hint(errp, "Raise -smp maxcpus and list as many cores "
                          "in host-cpus= when QEMU starts.\n");
        return false;
    }
    core = s->vcpu_core[index];
    if (!hpkvm_cpuset_has(&s->leases->held, core)) {
        error_setg(errp, "vCPU %d cannot be plugged: its host core "
                   "%u is no longer leased to this VM", index, core);
        error_append_hint(errp, "The cores went with the guest when it "
                          "migrated: plug the CPU on the destination.\n");
        return false;
    }
    if (!hpkvm_host_read_cpus(&s->host, CPU_SYSFS "/online", &online,
                              errp)) {
        return false;
    }
    if (!hpkvm_cpuset_has(&online, core)) {
        error_setg(errp, "vCPU %d cannot be plugged: its host core "
                   "%u (host-cpus=%s) is offline", index, core,
                   s->host_cpus_opt);
        error_append_hint(errp, "Bring the core online (echo 1 > "
                          CPU_SYSFS "/cpu%u/online), then plug the CPU "
                          "again.\n", core);
        return false;
    }
    return true;
}

void hpkvm_placement_report(HPKVMState *s, HpkvmInfo *info)
{
    HpkvmVcpuPlacementList **tail = &info->placement;
    HpkvmCoreIsolationList *c;
    CPUState *cpu;

    if (s->isolation) {
        info->isolation = QAPI_CLONE(HpkvmIsolation, s->isolation);
        for (c = info->isolation->cores; c; c = c->next) {
            if (s->feat[HPKVM_FEATURE_DYNAMIC_NOHZ].granted) {
                c->value->nohz = HPKVM_NOHZ_DYNAMIC;
            }
        }
    }
    if (!s->leases || s->cores_pending) {
        return;
    }
    info->host_cpus = hpkvm_cpuset_format(&s->leases->held);
    info->housekeeping_cpus = hpkvm_cpuset_format(&s->housekeeping);
    info->has_placement = true;
    CPU_FOREACH(cpu) {
        HpkvmVcpuPlacement *p = g_new0(HpkvmVcpuPlacement, 1);

        p->cpu_index = cpu->cpu_index;
        p->host_cpu = s->vcpu_core[cpu->cpu_index];
        p->thread_id = s->vcpu_tid[cpu->cpu_index];
        p->moved_to = g_strdup(s->vcpu_moved_to[cpu->cpu_index]);
        QAPI_LIST_APPEND(tail, p);
    }
}

void hpkvm_placement_finalize(HPKVMState *s)
{
    g_free(s->host_cpus_opt);
    g_free(s->housekeeping_opt);
    g_free(s->host_root);
    g_free(s->helper_opt);
    g_free(s->helper_socket);
    g_free(s->vcpu_core);
    g_free(s->vcpu_tid);
    g_free(s->vcpu_deferred);
    for (unsigned i = 0; s->vcpu_moved_to && i < s->max_vcpus; i++) {
        g_free(s->vcpu_moved_to[i]);
    }
    g_free(s->vcpu_moved_to);
    if (s->settle_timer) {
        timer_free(s->settle_timer);
    }
    g_free(s->leases);
    qapi_free_HpkvmIsolation(s->isolation);
    hpkvm_host_cleanup(&s->host);
}
