// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What the core kernel itself uses of struct kvm_vcpu, as offsets:
 * kvm_handle_signal_exit(), inlined in kernel/entry/kvm.c, writes
 * vcpu->run->exit_reason and counts vcpu->stat.signal_exits.  KVM
 * modules built apart from the kernel (kvm/build.sh) must keep both
 * where that kernel has them, or it writes into another field.
 * kvm/build.sh compiles this file against the kernel's headers and
 * against the patched ones and compares the two.
 *
 * Copyright (c) 2026 The hpkvm developers
 */
#include <linux/kbuild.h>
#include <linux/kvm_host.h>

static void __used hpkvm_abi_probe(void)
{
	OFFSET(HPKVM_ABI_VCPU_RUN, kvm_vcpu, run);
	OFFSET(HPKVM_ABI_VCPU_STAT, kvm_vcpu, stat);
	OFFSET(HPKVM_ABI_VCPU_SIGNAL_EXITS, kvm_vcpu, stat.signal_exits);
}
