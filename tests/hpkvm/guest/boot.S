/*
 * hpkvm test guest: multiboot entry, switch to long mode, AP trampoline
 *
 * The guest runs in 64-bit mode with identity-mapped paging: that is the
 * mode every hypervisor runs natively, including paravirtual ones (PVM)
 * that emulate legacy modes instruction by instruction.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "layout.h"

#define MB_MAGIC        0x1BADB002
#define MB_FLAGS        0x00000003      /* page-align modules, memory info */

#define CR0_PE          (1 << 0)
#define CR0_PG          (1 << 31)
#define CR4_PAE         (1 << 5)
#define MSR_EFER        0xc0000080
#define EFER_LME        (1 << 8)
#define TSS_SIZE        104             /* a 64-bit TSS, without I/O map */

    .section .multiboot, "a"
    .balign 4
    .long MB_MAGIC
    .long MB_FLAGS
    .long -(MB_MAGIC + MB_FLAGS)

    .text
    .code32
    .globl _start
_start:
    /* Protected mode, paging off; EBX = multiboot information. */
    cli
    movl $(bsp_stack + STACK_SIZE), %esp
    movl %ebx, multiboot_info
    lgdt gdt_desc
    xorl %eax, %eax
    call load_tr
    call build_page_tables
    movl $1f, %edi
    jmp enter_long_mode
    .code64
1:  call bsp_main
halt_forever:
    cli
    hlt
    jmp halt_forever

    .code32
/* Identity-map the low 4 GiB with 2 MiB pages (RAM, LAPIC, IOAPIC). */
build_page_tables:
    movl $(pdpt + 3), pml4
    xorl %ecx, %ecx
1:  movl %ecx, %eax
    shll $12, %eax
    addl $(pd + 3), %eax
    movl %eax, pdpt(, %ecx, 8)
    incl %ecx
    cmpl $4, %ecx
    jb 1b
    xorl %ecx, %ecx
2:  movl %ecx, %eax
    shll $21, %eax
    orl $0x83, %eax                     /* present, writable, 2 MiB */
    movl %eax, pd(, %ecx, 8)
    incl %ecx
    cmpl $2048, %ecx
    jb 2b
    ret

/*
 * Load TR with TSS descriptor %eax (0: the BSP's, slot + 1: an AP's),
 * written here: a descriptor splits the base into three fields, which
 * no relocation can fill.  Clobbers %eax, %ecx, %edx.
 */
load_tr:
    shll $4, %eax
    movl $tss, %ecx
    movl %ecx, %edx
    shll $16, %edx
    orl $(TSS_SIZE - 1), %edx           /* base 15:0, limit 15:0 */
    movl %edx, gdt_tss(%eax)
    movl %ecx, %edx
    andl $0xff000000, %edx              /* base 31:24 */
    shrl $16, %ecx
    andl $0xff, %ecx                    /* base 23:16 */
    orl %ecx, %edx
    orl $0x8900, %edx                   /* present, available 32/64-bit TSS */
    movl %edx, gdt_tss + 4(%eax)
    movl $0, gdt_tss + 8(%eax)          /* base 63:32, in long mode */
    movl $0, gdt_tss + 12(%eax)
    addl $TSS_SEL, %eax
    ltr %ax
    ret

/* From 32-bit protected mode with the GDT loaded; jumps to %edi in 64-bit. */
enter_long_mode:
    movl %cr4, %eax
    orl $CR4_PAE, %eax
    movl %eax, %cr4
    movl $pml4, %eax
    movl %eax, %cr3
    movl $MSR_EFER, %ecx
    rdmsr
    orl $EFER_LME, %eax
    wrmsr
    movl %cr0, %eax
    orl $(CR0_PG | CR0_PE), %eax
    movl %eax, %cr0
    ljmp $CODE64_SEL, $1f
    .code64
1:  movl $DATA_SEL, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    movl %eax, %fs
    movl %eax, %gs
    movl %edi, %edi
    jmp *%rdi

/*
 * APs come here from the trampoline in 32-bit protected mode.  Each
 * takes the next slot, whose stack it runs on, and calls ap_main(slot).
 */
    .code32
ap_entry32:
    movl $DATA_SEL, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    movl $1, %eax
    lock xaddl %eax, ap_next_slot
    cmpl $MAX_CPUS, %eax
    jae 2f
    movl %eax, %esi
    movl %eax, %esp
    incl %esp
    shll $STACK_SHIFT, %esp
    addl $ap_stacks, %esp
    incl %eax
    call load_tr
    movl $1f, %edi
    jmp enter_long_mode
    .code64
1:  movl %esi, %edi
    call ap_main
    jmp halt_forever
    .code32
2:  cli
    hlt
    jmp 2b

/*
 * Real-mode start-up code, copied to TRAMPOLINE_ADDR; the SIPI vector is
 * TRAMPOLINE_ADDR >> 12.  Only references fixed up by their offset from
 * trampoline_start, or absolute ones below 4 GiB.
 */
#define T(sym) ((sym) - trampoline_start + TRAMPOLINE_ADDR)
    .globl trampoline_start, trampoline_end
    .code16
trampoline_start:
    cli
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl T(trampoline_gdt_desc)
    movl %cr0, %eax
    orl $CR0_PE, %eax
    movl %eax, %cr0
    ljmpl $CODE32_SEL, $ap_entry32
    .balign 4
trampoline_gdt_desc:
    .word gdt_end - gdt - 1
    .long gdt
trampoline_end:

    .data
    .balign 8
gdt:
    .quad 0
    .quad 0x00cf9a000000ffff            /* CODE32_SEL: flat 32-bit code */
    .quad 0x00cf92000000ffff            /* DATA_SEL: flat data */
    .quad 0x00af9a000000ffff            /* CODE64_SEL: 64-bit code */
gdt_tss:                                /* TSS_SEL: load_tr() writes them */
    .skip 16 * (MAX_CPUS + 1)
gdt_end:
gdt_desc:
    .word gdt_end - gdt - 1
    .quad gdt

ap_next_slot:
    .long 0

    .globl multiboot_info
multiboot_info:
    .long 0

    .bss
    .balign 16
tss:
    .skip TSS_SIZE
    .balign 4096
pml4:
    .skip 4096
pdpt:
    .skip 4096
pd:
    .skip 4096 * 4
bsp_stack:
    .skip STACK_SIZE
ap_stacks:
    .skip STACK_SIZE * MAX_CPUS

    .section .note.GNU-stack, "", @progbits
