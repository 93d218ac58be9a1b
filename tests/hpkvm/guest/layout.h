/*
 * hpkvm test guest: memory layout and constants shared by boot.S and C
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_LAYOUT_H
#define HPKVM_GUEST_LAYOUT_H

#define CODE32_SEL      0x08
#define DATA_SEL        0x10
#define CODE64_SEL      0x18
/*
 * Each CPU's TSS descriptor (16 bytes in long mode): the BSP's first,
 * then each AP's by its slot.  All name one TSS, which nothing reads
 * (no IST, no privilege change); they exist because Intel CPUs refuse to
 * enter long mode with a 16-bit TSS in TR, which is what a vCPU's reset
 * state holds on SVM (Bochs's SVM model refuses it too).
 */
#define TSS_SEL         0x20

#define MAX_CPUS        64
#define STACK_SHIFT     12
#define STACK_SIZE      (1 << STACK_SHIFT)

/* Below 1 MiB, 4 KiB aligned, free under SeaBIOS. */
#define TRAMPOLINE_ADDR 0x8000

/* isa-debug-exit at this port: QEMU exits with status (value << 1) | 1. */
#define DEBUG_EXIT_PORT 0xf4
#define GUEST_PASS      0       /* QEMU exit status 1 */
#define GUEST_FAIL      1       /* QEMU exit status 3 */

#endif
