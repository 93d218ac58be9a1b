/*
 * hpkvm: per-feature negotiation with the kernel, fallbacks, the report
 *
 * Once, before the first vCPU exists: probe the kernel's hpkvm extension,
 * drop the features whose requirements the guest does not meet (failing
 * for "on"), ask the kernel for the rest in one HPKVM_ENABLE, and record
 * per feature what the kernel answered and what stands in for refused
 * features.  A feature set to "on" that is not granted stops QEMU, after
 * undoing whatever was granted, so nothing stays half enabled.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qemu/error-report.h"
#include "qapi/qapi-visit-hpkvm.h"
#include "qapi/clone-visitor.h"
#include "hpkvm-internal.h"
#include "hpkvm-kernel.h"
#include "trace.h"

/* Halt polling with dedicated cores that keep HLT exits: 200 us. */
#define HPKVM_HALT_POLL_NS 200000

/* QAPI's HpkvmFeature order is the contract's bit order. */
QEMU_BUILD_BUG_ON(HPKVM_FEATURE__MAX != HPKVM_FEATURE_NR);
QEMU_BUILD_BUG_ON(1ULL << HPKVM_FEATURE_VFIO_IRTE != HPKVM_FEAT_VFIO_IRTE);
QEMU_BUILD_BUG_ON(1ULL << HPKVM_FEATURE_DYNAMIC_NOHZ !=
                  HPKVM_FEAT_DYNAMIC_NOHZ);

static uint64_t negotiate_feat_bit(int f)
{
    return 1ULL << f;
}

static void negotiate_set_result(HPKVMState *s, int f, bool granted,
                                 HpkvmMechanism mechanism, const char *fmt, ...)
    G_GNUC_PRINTF(5, 6);

static void negotiate_set_result(HPKVMState *s, int f, bool granted,
                                 HpkvmMechanism mechanism, const char *fmt, ...)
{
    HpkvmFeatureState *st = &s->feat[f];
    va_list ap;

    st->granted = granted;
    st->mechanism = mechanism;
    st->apicv = false;
    st->has_delivered_by = false;
    g_free(st->reason);
    va_start(ap, fmt);
    st->reason = g_strdup_vprintf(fmt, ap);
    va_end(ap);
}

/*
 * A grant that rests on APIC virtualization is upstream KVM's doing:
 * stock KVM delivers the same on the same hardware, and the kernel's
 * hpkvm code only checks that it is there.  The report names it.
 */
static void negotiate_set_apicv_grant(HPKVMState *s, int f)
{
    HpkvmFeatureState *st = &s->feat[f];
    const char *name = "APIC virtualization";
    HpkvmUpstreamMechanism m;
    bool named = hpkvm_arch_apicv_mechanism(f, &m, &name);

    negotiate_set_result(s, f, true, HPKVM_MECHANISM_UPSTREAM,
                         "granted by the kernel, delivered by upstream "
                         "KVM's %s, as stock KVM does: suspended while KVM "
                         "inhibits it (apicv-inhibits)", name);
    st->apicv = true;
    st->has_delivered_by = named;
    if (named) {
        st->delivered_by = m;
    }
}

/*
 * What stands in for a feature the kernel does not grant: its mechanism
 * and, through *text, the words for the report.  Only nohz is not a
 * matter of the architecture.
 */
static HpkvmMechanism negotiate_fallback(HPKVMState *s, int f,
                                         const char **text)
{
    if (f == HPKVM_FEATURE_DYNAMIC_NOHZ) {
        *text = "the host's static nohz_full/isolcpus settings";
        return HPKVM_MECHANISM_NONE;
    }
    return hpkvm_arch_fallback(s, f, text);
}

/*
 * Without host-cpus= the vCPUs share the host's cores: there is no core
 * to bind them to, a guest idling in HLT without exits would keep a core
 * busy that others need, and the dedicated hint would be untrue.
 */
bool hpkvm_wants_own_cores(HPKVMState *s)
{
    return s->feat[HPKVM_FEATURE_EXCLUSIVE_CORES].requested !=
           ON_OFF_AUTO_OFF && s->host_cpus_opt;
}

/* The first vCPU whose host core is not one of @cores, or -1. */
static int negotiate_vcpu_outside(HPKVMState *s, const HpkvmCpuSet *cores)
{
    unsigned i;

    for (i = 0; i < s->max_vcpus; i++) {
        if (!hpkvm_cpuset_has(cores, s->vcpu_core[i])) {
            return i;
        }
    }
    return -1;
}

/*
 * On a host booted with nohz_full=, the tick stops on those cores: Linux
 * fixes them at boot, and a kernel that grants dynamic-nohz there refuses
 * to bind the VM's vCPUs anywhere else (kvm/patches/0005), which would
 * stop the VM.  So ask for it only if every vCPU's core is one of them.
 * Without nohz_full= the kernel's answer says why not; with
 * host-cpus=pinned the cores are not known yet, and the bind decides.
 */
static const char *negotiate_nohz_cores(HPKVMState *s, char **owned)
{
    g_autofree char *list = NULL;
    HpkvmCpuSet nohz;
    int i;

    if (s->cores_pending) {
        return NULL;
    }
    hpkvm_host_nohz_full(&s->host, &nohz);
    if (hpkvm_cpuset_empty(&nohz)) {
        return NULL;
    }
    i = negotiate_vcpu_outside(s, &nohz);
    if (i < 0) {
        return NULL;
    }
    list = hpkvm_cpuset_format(&nohz);
    *owned = g_strdup_printf("needs the vCPUs' host cores within the host's "
                             "nohz_full= (%s), and host core %u is not: list "
                             "only those in host-cpus=", list,
                             s->vcpu_core[i]);
    return *owned;
}

/*
 * The reference kernel binds vCPUs only to the cores its hpkvm_cores
 * parameter names (kvm/patches/0004; every core unless the host's
 * administrator narrowed it), refusing others with EPERM, which would
 * stop the VM at the bind.  So ask for exclusive cores only if every
 * vCPU's core is one of them; a kernel without the parameter answers for
 * itself, and with host-cpus=pinned the bind decides.
 */
static const char *negotiate_bindable_cores(HPKVMState *s, char **owned)
{
    g_autofree char *list = NULL;
    HpkvmCpuSet bindable;
    int i;

    if (s->cores_pending ||
        !hpkvm_host_read_cpus(&s->host, HPKVM_HOST_KVM_CORES, &bindable,
                              NULL)) {
        return NULL;
    }
    i = negotiate_vcpu_outside(s, &bindable);
    if (i < 0) {
        return NULL;
    }
    list = hpkvm_cpuset_format(&bindable);
    *owned = g_strdup_printf("needs the vCPUs' host cores within those the "
                             "host's KVM may bind (%s: %s), and host core %u "
                             "is not: list only those in host-cpus=, or have "
                             "the host's administrator add it there",
                             HPKVM_HOST_KVM_CORES, *list ? list : "none",
                             s->vcpu_core[i]);
    return *owned;
}

/*
 * What builds on exclusive cores (the interrupt features, dynamic nohz)
 * cannot be asked for without them: why not, with the fix, or NULL.
 */
static const char *negotiate_needs_cores(HPKVMState *s, char **owned)
{
    g_autofree char *why = NULL;
    const char *unmet;

    if (!hpkvm_wants_own_cores(s)) {
        return "needs exclusive-cores, on cores of its own: give host-cpus= "
               "(and exclusive-cores auto or on)";
    }
    unmet = negotiate_bindable_cores(s, &why);
    if (!unmet) {
        return NULL;
    }
    *owned = g_strdup_printf("needs exclusive-cores, which %s", unmet);
    return *owned;
}

/*
 * Why the guest as configured cannot have feature f, with the fix; NULL
 * if it can.  The result is static or must be freed: it is returned
 * through *owned when allocated.
 */
static const char *negotiate_unmet_requirement(HPKVMState *s, int f,
                                     const HpkvmGuestFacts *g, char **owned)
{
    bool needs_irqchip = f == HPKVM_FEATURE_IRQ_PASSTHROUGH ||
                         f == HPKVM_FEATURE_TIMER_PASSTHROUGH ||
                         f == HPKVM_FEATURE_IPI_FASTPATH ||
                         f == HPKVM_FEATURE_VFIO_IRTE;
    const char *unmet;

    *owned = NULL;
    if (needs_irqchip && !g->irqchip_in_kernel) {
        return "needs the in-kernel irqchip: drop kernel-irqchip=off";
    }
    switch (f) {
    case HPKVM_FEATURE_EXCLUSIVE_CORES:
        return hpkvm_wants_own_cores(s) ? negotiate_bindable_cores(s, owned) :
               "needs cores of its own: give host-cpus=";
    case HPKVM_FEATURE_VFIO_IRTE:
    case HPKVM_FEATURE_TIMER_PASSTHROUGH:
        if (s->feat[HPKVM_FEATURE_IRQ_PASSTHROUGH].requested ==
            ON_OFF_AUTO_OFF) {
            return "needs irq-passthrough: set it to on or auto";
        }
        /*
         * fall through: vfio-irte's IRTEs name a vCPU's core; the timer's
         * interrupts are the core's own
         */
    case HPKVM_FEATURE_IRQ_PASSTHROUGH:
    case HPKVM_FEATURE_IPI_FASTPATH:
        /*
         * An interrupt or IPI reaches a vCPU without an exit only while
         * it is in the guest: on a core of its own (contract 2, which
         * refuses them without exclusive-cores).
         */
        unmet = hpkvm_arch_unmet_requirement(s, f, g, owned);
        return unmet ?: negotiate_needs_cores(s, owned);
    case HPKVM_FEATURE_DYNAMIC_NOHZ:
        unmet = negotiate_needs_cores(s, owned);
        return unmet ?: negotiate_nohz_cores(s, owned);
    default:
        return hpkvm_arch_unmet_requirement(s, f, g, owned);
    }
}

/* The kernel's answer for feature f, in words. */
static const char *negotiate_kernel_refusal(int f, int err)
{
    switch (err) {
    case -ENODEV:
        /*
         * What dynamic nohz lacks is a boot parameter: Linux fixes its
         * nohz_full cores at boot, and the fix is there, not in hardware.
         */
        if (f == HPKVM_FEATURE_DYNAMIC_NOHZ) {
            return "the host was booted without nohz_full=";
        }
        /* Interrupt features stand on APIC virtualization, a KVM option. */
        return "the hardware lacks what it needs, or the host's KVM does "
               "not use it";
    case -EOPNOTSUPP:
        return "this kernel does not implement it";
    case -EBUSY:
        return "a host core is not exclusively this VM's";
    case -E2BIG:
        return "more vCPUs than dedicated cores";
    case -EINVAL:
        return "the kernel finds the configuration invalid for it";
    case -EPERM:
        return "the host's policy refuses it";
    default:
        return strerror(-err);
    }
}

/*
 * The required feature of @refused to name: the first the kernel gave a
 * reason of its own for.  On EPERM the kernel reports -EPERM for every
 * feature it would have granted (all or nothing), which is not why.
 */
static int negotiate_first_refused(const struct hpkvm_enable *req,
                                   uint64_t refused)
{
    uint64_t own = 0;
    int f;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if ((refused & negotiate_feat_bit(f)) && req->reason[f] &&
            req->reason[f] != -EPERM) {
            own |= negotiate_feat_bit(f);
        }
    }
    return ctz64(own ?: refused);
}

static bool negotiate_rollback(HPKVMState *s, const char *why, Error **errp)
{
    ERRP_GUARD();
    int ret, f;

    trace_hpkvm_rollback(why);
    ret = hpkvm_kernel_disable(KVM_STATE(s));
    if (ret < 0) {
        /*
         * The kernel keeps grants QEMU will not use (interrupts, timer,
         * IRTEs the guest was not set up for): the VM must not run.
         */
        error_setg(errp, "cannot undo the kernel's hpkvm grants after %s: "
                   "HPKVM_DISABLE failed: %s", why, strerror(-ret));
        error_append_hint(errp, "The kernel breaks the hpkvm contract: run "
                          "one that keeps it, or use -accel kvm.\n");
        return false;
    }
    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if (s->feat[f].granted) {
            negotiate_set_result(s, f, false, HPKVM_MECHANISM_NONE,
                                 "granted, then undone: %s", why);
        }
    }
    return true;
}

/* Halt polling where HLT still exits on cores that are meant to be ours. */
static void negotiate_tune_halt_poll(HPKVMState *s)
{
    KVMState *k = KVM_STATE(s);
    int ret;

    if (!hpkvm_wants_own_cores(s) ||
        (s->disabled_exits & KVM_X86_DISABLE_EXITS_HLT) ||
        !kvm_check_extension(k, KVM_CAP_HALT_POLL)) {
        return;
    }
    ret = kvm_vm_enable_cap(k, KVM_CAP_HALT_POLL, 0, HPKVM_HALT_POLL_NS);
    trace_hpkvm_halt_poll(HPKVM_HALT_POLL_NS, ret);
    if (ret == 0) {
        s->halt_poll_ns = HPKVM_HALT_POLL_NS;
    }
}

static void negotiate_trace_features(HPKVMState *s)
{
    int f;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        trace_hpkvm_feature(HpkvmFeature_str(f),
                            OnOffAuto_str(s->feat[f].requested),
                            s->feat[f].granted,
                            HpkvmMechanism_str(s->feat[f].mechanism),
                            s->feat[f].reason);
    }
}

/* Every feature in @want to its upstream fallback, @why the reason. */
static void negotiate_fall_back_all(HPKVMState *s, uint64_t want,
                                    const char *why)
{
    const char *text;
    int f;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if (want & negotiate_feat_bit(f)) {
            HpkvmMechanism m = negotiate_fallback(s, f, &text);

            negotiate_set_result(s, f, false, m, "%s; %s", why, text);
        }
    }
}

bool hpkvm_negotiate(HPKVMState *s, const HpkvmGuestFacts *g, Error **errp)
{
    ERRP_GUARD();
    KVMState *k = KVM_STATE(s);
    struct hpkvm_caps caps;
    struct hpkvm_enable req = { 0 };
    uint64_t want = 0, need = 0;
    g_autofree char *nokernel = NULL;
    const char *text;
    int f, ret;

    if (s->negotiated) {
        return true;
    }
    s->negotiated = true;

    /*
     * A kernel without the extension, or one that claims it and cannot
     * say what it has: either way, features fall back as to upstream KVM.
     */
    ret = hpkvm_kernel_probe(k, &caps);
    if (ret < 0) {
        nokernel = g_strdup_printf("HPKVM_GET_CAPS failed: %s, though the "
                                   "kernel reports hpkvm (KVM_CAP_HPKVM)",
                                   strerror(-ret));
        ret = 0;
    } else if (!ret) {
        nokernel = g_strdup("the kernel has no hpkvm extension "
                            "(KVM_CAP_HPKVM is 0)");
    }
    s->kernel_version = ret;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        g_autofree char *owned = NULL;
        const char *unmet;

        if (s->feat[f].requested == ON_OFF_AUTO_OFF) {
            negotiate_set_result(s, f, false, HPKVM_MECHANISM_NONE,
                                 "not requested (%s=off)", HpkvmFeature_str(f));
            continue;
        }
        unmet = negotiate_unmet_requirement(s, f, g, &owned);
        if (unmet && s->feat[f].requested == ON_OFF_AUTO_ON) {
            error_setg(errp, "%s=on %s", HpkvmFeature_str(f), unmet);
            return false;
        }
        if (unmet) {
            HpkvmMechanism m = negotiate_fallback(s, f, &text);

            negotiate_set_result(s, f, false, m, "not requested: %s; %s", unmet,
                                 text);
            continue;
        }
        want |= negotiate_feat_bit(f);
        if (s->feat[f].requested == ON_OFF_AUTO_ON) {
            need |= negotiate_feat_bit(f);
        }
    }

    if (nokernel) {
        negotiate_fall_back_all(s, want, nokernel);
        if (need) {
            f = ctz64(need);
            error_setg(errp, "%s=on, but %s", HpkvmFeature_str(f),
                       nokernel);
            error_append_hint(errp, "Run a kernel with hpkvm, or use %s=auto "
                              "to fall back.\n", HpkvmFeature_str(f));
            return false;
        }
        goto upstream;
    }

    req.requested = want;
    req.required = need;
    req.nr_vcpus = g->nr_vcpus;
    req.guest_tsc_khz = g->guest_timer_khz ?: g->host_timer_khz;
    ret = want ? hpkvm_kernel_enable(k, &req) : 0;
    if (ret < 0 && ret != -EPERM) {
        /* Not an answer the contract allows: leave nothing behind. */
        g_autofree char *why = g_strdup_printf("HPKVM_ENABLE failed: %s",
                                               strerror(-ret));

        if (!negotiate_rollback(s, why, errp)) {
            return false;
        }
        negotiate_fall_back_all(s, want, why);
        if (need) {
            error_setg(errp, "%s=on, but %s",
                       HpkvmFeature_str(ctz64(need)), why);
            return false;
        }
        goto upstream;
    }
    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        if (!(want & negotiate_feat_bit(f))) {
            continue;
        }
        if (ret == 0 && (req.apicv & req.granted & negotiate_feat_bit(f))) {
            negotiate_set_apicv_grant(s, f);
        } else if (ret == 0 && (req.granted & negotiate_feat_bit(f))) {
            negotiate_set_result(s, f, true, HPKVM_MECHANISM_PATCHED_KERNEL,
                                 "granted by the kernel");
        } else {
            HpkvmMechanism m = negotiate_fallback(s, f, &text);

            negotiate_set_result(
                s, f, false, m, "refused by the kernel (%s); %s",
                negotiate_kernel_refusal(f, req.reason[f] ?: -EPERM), text);
        }
    }
    if (need & ~(ret == 0 ? req.granted : 0)) {
        f = negotiate_first_refused(&req, need & ~(ret == 0 ? req.granted
                                                             : 0));
        error_setg(errp, "%s=on, but the kernel refused it: %s",
                   HpkvmFeature_str(f),
                   negotiate_kernel_refusal(f, req.reason[f] ?: -EPERM));
        error_append_hint(errp, "Use %s=auto to fall back.\n",
                          HpkvmFeature_str(f));
        if (ret == 0 && req.granted) {
            /*
             * A kernel that ignored "required": undo its grants.  QEMU
             * exits, and the VM with it, whether that works or not.
             */
            Error *err = NULL;

            if (!negotiate_rollback(s, "a required feature was refused",
                                    &err)) {
                warn_report_err(err);
            }
        }
        return false;
    }

upstream:
    if (s->feat[HPKVM_FEATURE_VFIO_IRTE].granted) {
        hpkvm_vfio_irte_start(s);
    }
    negotiate_tune_halt_poll(s);
    negotiate_trace_features(s);
    return true;
}

/*
 * What suspends the grants that rest on APIC virtualization, now: the
 * kernel's mask, bit i being enum kvm_apicv_inhibit's i-th reason, which
 * HpkvmApicvInhibit lists in order up to its "other".
 */
static void negotiate_report_apicv(HPKVMState *s, HpkvmInfo *info)
{
    HpkvmApicvInhibitList **tail = &info->apicv_inhibits;
    bool on_apicv = false;
    uint64_t mask;
    int f, i;

    for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
        on_apicv |= s->feat[f].apicv;
    }
    /* Without the statistic the kernel cannot tell: absent, not "none". */
    if (!on_apicv || hpkvm_kernel_apicv_inhibits(&mask) < 0) {
        return;
    }
    info->has_apicv_inhibits = true;
    for (i = 0; i < HPKVM_APICV_INHIBIT_OTHER; i++) {
        if (mask & (1ULL << i)) {
            QAPI_LIST_APPEND(tail, i);
        }
    }
    if (mask >> HPKVM_APICV_INHIBIT_OTHER) {
        QAPI_LIST_APPEND(tail, HPKVM_APICV_INHIBIT_OTHER);
    }
}

HpkvmInfo *hpkvm_report(HPKVMState *s)
{
    HpkvmInfo *info = g_new0(HpkvmInfo, 1);
    HpkvmFeatureInfoList **tail = &info->features;
    HpkvmExitList **exits = &info->disabled_exits;
    HpkvmExit e;
    int f;

    info->enabled = true;
    info->has_kernel_version = true;
    info->kernel_version = s->kernel_version;
    info->has_negotiated = true;
    info->negotiated = s->negotiated;
    info->has_features = true;
    for (f = 0; f < HPKVM_FEATURE__MAX && s->negotiated; f++) {
        HpkvmFeatureInfo *fi = g_new0(HpkvmFeatureInfo, 1);

        fi->feature = f;
        fi->requested = s->feat[f].requested;
        fi->granted = s->feat[f].granted;
        fi->mechanism = s->feat[f].mechanism;
        fi->reason = g_strdup(s->feat[f].reason ?: "");
        fi->apicv = s->feat[f].apicv;
        fi->has_delivered_by = s->feat[f].has_delivered_by;
        fi->delivered_by = s->feat[f].delivered_by;
        QAPI_LIST_APPEND(tail, fi);
    }
    info->has_disabled_exits = true;
    for (e = 0; e < HPKVM_EXIT__MAX; e++) {
        if (s->disabled_exits & (1U << e)) {
            QAPI_LIST_APPEND(exits, e);
        }
    }
    info->has_realtime_hint = true;
    info->realtime_hint = s->realtime_hint;
    info->has_halt_poll_ns = s->halt_poll_ns >= 0;
    info->halt_poll_ns = s->halt_poll_ns;
    info->has_irte_direct = true;
    info->irte_direct = s->irte_direct;
    info->has_irte_fallback = true;
    info->irte_fallback = s->irte_fallback;
    hpkvm_placement_report(s, info);
    info->has_incoming_lost = s->incoming_lost != NULL;
    info->incoming_lost = QAPI_CLONE(HpkvmLostPromiseList, s->incoming_lost);
    negotiate_report_apicv(s, info);
    return info;
}
