/*
 * Entry, secondary entry and exception vectors of hpkvm's aarch64 test
 * guest.  It runs at EL1 with the MMU off (so: no exclusives, no
 * unaligned accesses; see guest.c), one 16 KiB stack per CPU.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#define STACK_SIZE 0x4000

    .section .text.boot, "ax"
    .global _start
_start:
    /* The boot CPU: stack 0, a zeroed BSS, vectors, then C. */
    adrp    x1, stacks
    add     x1, x1, :lo12:stacks
    add     x1, x1, #STACK_SIZE
    mov     sp, x1
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
1:  cmp     x1, x2
    b.hs    2f
    str     xzr, [x1], #8
    b       1b
2:  bl      set_vectors
    bl      guest_main
    b       .

    /* PSCI CPU_ON's entry point; x0 is the CPU's index (context id). */
    .global secondary_entry
secondary_entry:
    adrp    x1, stacks
    add     x1, x1, :lo12:stacks
    add     x2, x0, #1
    mov     x3, #STACK_SIZE
    madd    x1, x2, x3, x1
    mov     sp, x1
    mov     x19, x0
    bl      set_vectors
    mov     x0, x19
    bl      secondary_main
    b       .

set_vectors:
    adrp    x1, vectors
    add     x1, x1, :lo12:vectors
    msr     vbar_el1, x1
    isb
    ret

/* x0-x18 and x29/x30 around a C handler: what a call may clobber. */
.macro entry handler
    .balign 0x80
    stp     x29, x30, [sp, #-176]!
    stp     x0, x1, [sp, #16]
    stp     x2, x3, [sp, #32]
    stp     x4, x5, [sp, #48]
    stp     x6, x7, [sp, #64]
    stp     x8, x9, [sp, #80]
    stp     x10, x11, [sp, #96]
    stp     x12, x13, [sp, #112]
    stp     x14, x15, [sp, #128]
    stp     x16, x17, [sp, #144]
    str     x18, [sp, #160]
    bl      \handler
    ldp     x0, x1, [sp, #16]
    ldp     x2, x3, [sp, #32]
    ldp     x4, x5, [sp, #48]
    ldp     x6, x7, [sp, #64]
    ldp     x8, x9, [sp, #80]
    ldp     x10, x11, [sp, #96]
    ldp     x12, x13, [sp, #112]
    ldp     x14, x15, [sp, #128]
    ldp     x16, x17, [sp, #144]
    ldr     x18, [sp, #160]
    ldp     x29, x30, [sp], #176
    eret
.endm

    /* VBAR_EL1: 2 KiB aligned; only "current EL with SP_ELx" is used. */
    .balign 0x800
vectors:
    entry   bad_exception       /* current EL, SP_EL0 */
    entry   bad_exception
    entry   bad_exception
    entry   bad_exception
    entry   sync_exception      /* current EL, SP_ELx: synchronous */
    entry   irq_exception       /* IRQ */
    entry   bad_exception       /* FIQ */
    entry   bad_exception       /* SError */
    entry   bad_exception       /* lower EL, AArch64 */
    entry   bad_exception
    entry   bad_exception
    entry   bad_exception
    entry   bad_exception       /* lower EL, AArch32 */
    entry   bad_exception
    entry   bad_exception
    entry   bad_exception

    .bss
    .balign 16
    .global stacks
stacks:
    .space  STACK_SIZE * 9      /* the boot CPU and up to 8 secondaries */
