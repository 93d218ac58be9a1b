/*
 * hpkvm: the only interface to the kernel's hpkvm extension
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
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
                              req->granted);
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
