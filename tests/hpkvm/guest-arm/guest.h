/*
 * hpkvm's aarch64 test guest: the C functions boot.S calls, and the one
 * it provides to C (PSCI CPU_ON's entry point).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_ARM_H
#define HPKVM_GUEST_ARM_H

#include <stdint.h>

void guest_main(void);
void secondary_main(uint64_t index);
void secondary_entry(void);
void irq_exception(void);
void sync_exception(void);
void bad_exception(void);

#endif
