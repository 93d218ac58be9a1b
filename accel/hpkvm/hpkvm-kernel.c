/*
 * hpkvm: the only interface to the kernel's hpkvm extension
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/qapi-commands-stats.h"
#include "hpkvm-kernel.h"
#include "trace.h"

int hpkvm_kernel_probe(KVMState *s, struct hpkvm_caps *caps)
{
    int version = kvm_check_extension(s, KVM_CAP_HPKVM);
    int ret;

    trace_hpkvm_kernel_probe(version);
    if (version <= 0) {
        return 0;
    }
    memset(caps, 0, sizeof(*caps));
    ret = kvm_ioctl(s, HPKVM_GET_CAPS, caps);
    trace_hpkvm_kernel_caps(ret, caps->version, caps->supported);
    return ret < 0 ? ret : version;
}

int hpkvm_kernel_enable(KVMState *s, struct hpkvm_enable *req)
{
    int ret = kvm_vm_ioctl(s, HPKVM_ENABLE, req);

    trace_hpkvm_kernel_enable(req->requested, req->required, ret,
                              req->granted, req->apicv);
    return ret;
}

int hpkvm_kernel_disable(KVMState *s)
{
    /*
     * The argument must be 0 (EINVAL otherwise): left out, kvm_vm_ioctl()
     * would pass on whatever its variadic register held.
     */
    int ret = kvm_vm_ioctl(s, HPKVM_DISABLE, NULL);

    trace_hpkvm_kernel_disable(ret);
    return ret;
}

int hpkvm_kernel_set_irte(KVMState *s, const struct hpkvm_irte *irte)
{
    int ret = kvm_vm_ioctl(s, HPKVM_SET_IRTE, irte);

    trace_hpkvm_kernel_set_irte(irte->gsi, irte->vcpu_id, irte->vector,
                                irte->flags, ret);
    return ret;
}

int hpkvm_kernel_bind_vcpu(CPUState *cpu, unsigned host_cpu)
{
    struct hpkvm_vcpu_bind bind = { .host_cpu = host_cpu };

    return kvm_vcpu_ioctl(cpu, HPKVM_BIND_VCPU, &bind);
}

/*
 * Through QEMU's own reader of KVM's statistics (query-stats, of the one
 * KVM VM there is), the statistic our kernel's patch 6 adds.
 */
int hpkvm_kernel_apicv_inhibits(uint64_t *mask)
{
    strList name = { .value = (char *)"apicv_inhibit_reasons" };
    StatsRequest kvm = { .provider = STATS_PROVIDER_KVM, .names = &name };
    StatsRequestList providers = { .value = &kvm };
    StatsFilter filter = {
        .target = STATS_TARGET_VM,
        .has_providers = true,
        .providers = &providers,
    };
    g_autoptr(StatsResultList) results = qmp_query_stats(&filter, NULL);
    StatsResultList *r;
    StatsList *st;
    int ret = -ENOENT;

    for (r = results; r && ret; r = r->next) {
        for (st = r->value->stats; st && ret; st = st->next) {
            if (st->value->value->type == QTYPE_QNUM) {
                *mask = st->value->value->u.scalar;
                ret = 0;
            }
        }
    }
    trace_hpkvm_kernel_apicv_inhibits(ret, ret ? 0 : *mask);
    return ret;
}
