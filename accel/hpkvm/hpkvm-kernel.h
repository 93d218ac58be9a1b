/*
 * hpkvm: the only interface to the kernel's hpkvm extension
 *
 * Every ioctl of the contract in linux-headers/linux/hpkvm.h goes through
 * these functions, as does the read of the VM statistic the contract
 * names; nothing else in QEMU issues them.  Each returns 0 or a negative
 * errno, as kvm_ioctl() and friends do.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_KERNEL_H
#define ACCEL_HPKVM_KERNEL_H

#include "system/kvm.h"
#include "linux/hpkvm.h"

/* The contract version (0: unpatched KVM); fills caps when non-zero. */
int hpkvm_kernel_probe(KVMState *s, struct hpkvm_caps *caps);
int hpkvm_kernel_enable(KVMState *s, struct hpkvm_enable *req);
int hpkvm_kernel_disable(KVMState *s);
int hpkvm_kernel_set_irte(KVMState *s, const struct hpkvm_irte *irte);
/* From @cpu's own thread, before its first KVM_RUN. */
int hpkvm_kernel_bind_vcpu(CPUState *cpu, unsigned host_cpu);
/*
 * The VM's APIC virtualization inhibits now, as a mask of Linux's enum
 * kvm_apicv_inhibit: the VM statistic apicv_inhibit_reasons, which a
 * kernel that grants features on APIC virtualization has (-ENOENT if
 * the kernel does not).
 */
int hpkvm_kernel_apicv_inhibits(uint64_t *mask);

#endif
