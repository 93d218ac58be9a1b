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
 * One statistic of the VM's binary statistics file (KVM_GET_STATS_FD):
 * the file is opened per call, as query-hpkvm is rare and the
 * descriptors are the kernel's to lay out.
 */
static int hpkvm_kernel_vm_stat(KVMState *s, const char *name,
                                uint64_t *value)
{
    struct kvm_stats_header hdr;
    g_autofree char *descs = NULL;
    size_t desc_size, len;
    int fd, ret = -EIO;
    uint32_t i;

    fd = kvm_vm_ioctl(s, KVM_GET_STATS_FD, NULL);
    if (fd < 0) {
        return fd;
    }
    if (pread(fd, &hdr, sizeof(hdr), 0) != sizeof(hdr)) {
        goto out;
    }
    desc_size = sizeof(struct kvm_stats_desc) + hdr.name_size;
    len = desc_size * hdr.num_desc;
    descs = g_malloc0(len);
    if (pread(fd, descs, len, hdr.desc_offset) != len) {
        goto out;
    }
    ret = -ENOENT;
    for (i = 0; i < hdr.num_desc; i++) {
        struct kvm_stats_desc *d = (void *)(descs + i * desc_size);

        if (strncmp(d->name, name, hdr.name_size)) {
            continue;
        }
        ret = -EIO;
        if (d->size == 1 &&
            pread(fd, value, sizeof(*value),
                  hdr.data_offset + d->offset) == sizeof(*value)) {
            ret = 0;
        }
        break;
    }
out:
    close(fd);
    trace_hpkvm_kernel_vm_stat(name, ret, ret ? 0 : *value);
    return ret;
}

int hpkvm_kernel_apicv_inhibits(KVMState *s, uint64_t *mask)
{
    return hpkvm_kernel_vm_stat(s, "apicv_inhibit_reasons", mask);
}
