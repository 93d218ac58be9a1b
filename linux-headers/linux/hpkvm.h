/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * hpkvm: the contract between QEMU's hpkvm accelerator and a patched KVM.
 *
 * The full specification, with ordering rules and what the kernel must
 * refuse, is docs/devel/hpkvm-kernel-contract.rst.
 *
 * Copyright (c) 2026 The hpkvm developers
 */

#ifndef _LINUX_HPKVM_H
#define _LINUX_HPKVM_H

#include <linux/types.h>
#include <linux/ioctl.h>

/*
 * Detection: KVM_CHECK_EXTENSION(KVM_CAP_HPKVM) on /dev/kvm returns the
 * contract version the kernel implements, 0 on an unpatched KVM.
 * Upstream capability numbers are allocated in sequence from 0 (below
 * 250 in 2026); ours is 'H' 'P' << 16, which that sequence never reaches.
 */
#define KVM_CAP_HPKVM			0x48500000
#define HPKVM_VERSION			2

/*
 * hpkvm's ioctls use their own ioctl type, 'H': a KVM file descriptor
 * answers only KVM's type (KVMIO, 0xAE) and ours, so no upstream KVM
 * ioctl can ever collide with them.  An unpatched KVM refuses them:
 * ENOTTY on a VM fd, EINVAL on /dev/kvm and on a vCPU fd.
 */
#define HPKVMIO				0x48

/* Features, as bits of a __u64; HPKVM_FEATURE_NR of them since version 1. */
#define HPKVM_FEAT_EXCLUSIVE_CORES	(1ULL << 0)
#define HPKVM_FEAT_IRQ_PASSTHROUGH	(1ULL << 1)
#define HPKVM_FEAT_TIMER_PASSTHROUGH	(1ULL << 2)
#define HPKVM_FEAT_IPI_FASTPATH		(1ULL << 3)
#define HPKVM_FEAT_VFIO_IRTE		(1ULL << 4)
#define HPKVM_FEAT_DYNAMIC_NOHZ		(1ULL << 5)
#define HPKVM_FEATURE_NR		6

/* System ioctl (/dev/kvm): what this kernel and machine can grant. */
struct hpkvm_caps {
	__u32 version;			/* out: HPKVM_VERSION */
	__u32 nr_features;		/* out: HPKVM_FEATURE_NR */
	__u64 supported;		/* out: HPKVM_FEAT_* */
	__u64 reserved[6];		/* out: zero */
};

#define HPKVM_GET_CAPS			_IOR(HPKVMIO, 0x00, struct hpkvm_caps)

/*
 * VM ioctl: ask for features, before any vCPU of the VM exists.
 * The kernel grants a subset of @requested and says, per feature, why it
 * refused the rest.  If it cannot grant all of @required (a subset of
 * @requested) it grants nothing and fails with EPERM; @reason is filled
 * in either case.
 *
 * Since version 2, @apicv says which granted features rest on the CPU's
 * APIC virtualization (AMD's AVIC, Intel's APICv) rather than on the
 * kernel's own path: KVM suspends those for the whole VM while it
 * inhibits APIC virtualization, which the guest can cause (e.g. by
 * changing its APIC ID); the VM statistic apicv_inhibit_reasons says
 * when and why.  A version 1 kernel leaves it zero.
 */
struct hpkvm_enable {
	__u64 requested;		/* in: HPKVM_FEAT_* */
	__u64 required;			/* in: subset of requested */
	__u32 nr_vcpus;			/* in: vCPUs the VM will create */
	__u32 flags;			/* in: zero */
	__u64 guest_tsc_khz;		/* in: the guest's TSC frequency */
	__u64 granted;			/* out: HPKVM_FEAT_* */
	__s32 reason[HPKVM_FEATURE_NR];	/* out: 0 or a negative errno */
	__u32 pad[2];			/* in: zero */
	__u64 apicv;			/* in: zero; out: HPKVM_FEAT_* */
	__u64 reserved[3];		/* in/out: zero */
};

#define HPKVM_ENABLE			_IOWR(HPKVMIO, 0x01, struct hpkvm_enable)

/* VM ioctl: drop every granted feature; only before any vCPU exists. */
#define HPKVM_DISABLE			_IO(HPKVMIO, 0x02)

/*
 * vCPU ioctl, from the vCPU's own thread, before its first KVM_RUN, with
 * HPKVM_FEAT_EXCLUSIVE_CORES granted: run this vCPU on @host_cpu only.
 */
struct hpkvm_vcpu_bind {
	__u32 host_cpu;			/* in */
	__u32 flags;			/* in: zero */
	__u64 reserved[2];
};

#define HPKVM_BIND_VCPU			_IOW(HPKVMIO, 0x10, struct hpkvm_vcpu_bind)

/*
 * VM ioctl, with HPKVM_FEAT_VFIO_IRTE granted: program the IOMMU's
 * interrupt remapping entry of the device interrupt whose irqfd feeds
 * @gsi to deliver @vector straight to the host core of @vcpu_id.  Again
 * each time the guest reprograms the vector; HPKVM_IRTE_CLEAR returns the
 * entry to the kernel's default (remapped or posted) delivery.
 */
struct hpkvm_irte {
	__u32 gsi;			/* in: KVM GSI of the irqfd */
	__u32 vcpu_id;			/* in: destination vCPU */
	__u32 vector;			/* in: guest vector, 16..255 */
	__u32 flags;			/* in: HPKVM_IRTE_* */
	__u64 reserved[2];
};

#define HPKVM_IRTE_CLEAR		(1U << 0)
#define HPKVM_SET_IRTE			_IOW(HPKVMIO, 0x20, struct hpkvm_irte)

/*
 * System ioctl, with CAP_SYS_NICE: let the process @pid (a thread group
 * leader, in the caller's PID namespace) bind vCPUs to @host_cpu, which
 * without a grant needs CAP_SYS_NICE; @pid 0 takes the grant back.  A
 * core is granted to one process at a time; a bind made stays.
 */
struct hpkvm_core_grant {
	__u32 host_cpu;			/* in */
	__s32 pid;			/* in: 0 to revoke */
	__u64 reserved[2];		/* in: zero */
};

#define HPKVM_GRANT_CORE		_IOW(HPKVMIO, 0x03, struct hpkvm_core_grant)

#endif /* _LINUX_HPKVM_H */
