/*
 * AMD's AVIC and x2AVIC for TCG's SVM
 *
 * Copyright (c) 2026 hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * With AVIC (AMD64 APM vol. 2, "Advanced Virtual Interrupt Controller"),
 * a guest's local APIC lives in a backing page the hypervisor owns.  The
 * processor delivers the interrupts of that page's IRR through the
 * guest's IDT, does the guest's TPR, EOI, ICR and (x2APIC) self-IPI
 * writes itself, and another processor's doorbell write (MSR C001_011Bh
 * with this processor's APIC ID) makes it look at the IRR again, all
 * without a #VMEXIT.  An access it does not accelerate ends in
 * #VMEXIT(AVIC_NOACCEL), as a fault (before the access: the hypervisor
 * emulates the instruction) or as a trap (after it: the value is in the
 * backing page); an IPI it cannot deliver alone ends in
 * #VMEXIT(AVIC_INCOMPLETE_IPI), a trap, after setting what IRR bits it
 * could.
 *
 * Emulating it lets a hypervisor that runs under TCG use its AVIC code
 * (Linux's kvm_amd.avic=1), so that the exits AVIC removes on hardware
 * are removed there too: the nested test hosts of hpkvm count them.
 *
 * Not emulated, each ending where the hypervisor copes already:
 * broadcasts, and logical destinations in x2APIC mode, end in
 * AVIC_INCOMPLETE_IPI as invalid targets (the hypervisor sends them); the
 * guest's CR8 stays V_TPR, as without AVIC; the IOMMU's guest virtual
 * APIC mode (posted device interrupts) and its GA log.
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "cpu.h"
#include "exec/address-spaces.h"
#include "exec/cpu_ldst.h"
#include "exec/exec-all.h"
#include "exec/memory.h"
#include "exec/translation-block.h"
#include "hw/core/cpu.h"
#include "tcg/helper-tcg.h"
#include "target/i386/trace.h"

/* Registers of the backing page, by offset (the xAPIC's MMIO layout). */
#define AVIC_REG_ID         0x020
#define AVIC_REG_TPR        0x080
#define AVIC_REG_PPR        0x0a0
#define AVIC_REG_EOI        0x0b0
#define AVIC_REG_RRR        0x0c0
#define AVIC_REG_LDR        0x0d0
#define AVIC_REG_DFR        0x0e0
#define AVIC_REG_SPIV       0x0f0
#define AVIC_REG_ISR        0x100
#define AVIC_REG_TMR        0x180
#define AVIC_REG_IRR        0x200
#define AVIC_REG_ESR        0x280
#define AVIC_REG_ICR        0x300
#define AVIC_REG_ICR2       0x310
#define AVIC_REG_LVTT       0x320
#define AVIC_REG_LVTERR     0x370
#define AVIC_REG_TMICT      0x380
#define AVIC_REG_TMCCT      0x390
#define AVIC_REG_TDCR       0x3e0
#define AVIC_REG_SELF_IPI   0x3f0

#define AVIC_ADDR_MASK              0x000ffffffffff000ULL
#define AVIC_PHYS_MAX_INDEX_MASK    0x1ffULL
#define AVIC_PHYS_HOST_ID_MASK      0xfffULL
#define AVIC_PHYS_IS_RUNNING        (1ULL << 62)
#define AVIC_PHYS_VALID             (1ULL << 63)
#define AVIC_LOGICAL_VALID          (1U << 31)

/* #VMEXIT(AVIC_INCOMPLETE_IPI)'s EXITINFO2[63:32] */
enum {
    AVIC_IPI_INVALID_INT_TYPE,
    AVIC_IPI_TARGET_NOT_RUNNING,
    AVIC_IPI_INVALID_TARGET,
};

/* Where a guest's xAPIC accesses to its APIC page go (see below). */
#define SVM_AVIC_MMIO_BASE  (1ULL << TARGET_PHYS_ADDR_SPACE_BITS)

/* What becomes of a guest's access to an APIC register. */
typedef enum AvicAccess {
    AVIC_DONE,      /* accelerated */
    AVIC_TRAP,      /* done, then #VMEXIT (avic_exit_* are set) */
    AVIC_FAULT,     /* #VMEXIT(AVIC_NOACCEL) before the access */
} AvicAccess;

static bool svm_avic_on(CPUX86State *env)
{
    return (env->hflags & HF_GUEST_MASK) && env->avic_backing_page;
}

bool svm_avic_x2apic(CPUX86State *env)
{
    return svm_avic_on(env) && (env->int_ctl & V_X2APIC_MODE_MASK);
}

static uint32_t avic_reg(CPUState *cs, uint64_t page, uint32_t offset)
{
    return x86_ldl_phys(cs, page + offset);
}

static void avic_set_reg(CPUState *cs, uint64_t page, uint32_t offset,
                         uint32_t val)
{
    x86_stl_phys(cs, page + offset, val);
}

/*
 * Set or clear one bit of a 256-bit register (IRR, ISR) atomically: the
 * hypervisor, on other processors, sets IRR bits of a running guest's
 * page with locked instructions, and so do other guests' IPIs.
 */
static void avic_vector_bit(CPUState *cs, uint64_t page, uint32_t reg,
                            int vector, bool set)
{
    hwaddr addr = page + reg + (vector / 32) * 16;
    uint32_t mask = cpu_to_le32(1U << (vector % 32));
    hwaddr len = 4;
    uint32_t *p;

    p = address_space_map(cs->as, addr, &len, true, MEMTXATTRS_UNSPECIFIED);
    if (p && len == 4) {
        if (set) {
            qatomic_or(p, mask);
        } else {
            qatomic_and(p, ~mask);
        }
    }
    if (p) {
        address_space_unmap(cs->as, p, len, true, len);
    }
}

static bool avic_vector_test(CPUState *cs, uint64_t page, uint32_t reg,
                             int vector)
{
    return avic_reg(cs, page, reg + (vector / 32) * 16) &
           (1U << (vector % 32));
}

static int avic_highest_vector(CPUState *cs, uint64_t page, uint32_t reg)
{
    int i;

    for (i = 7; i >= 0; i--) {
        uint32_t w = avic_reg(cs, page, reg + i * 16);

        if (w) {
            return i * 32 + 31 - clz32(w);
        }
    }
    return -1;
}

static uint32_t avic_ppr(CPUState *cs, uint64_t page)
{
    uint32_t tpr = avic_reg(cs, page, AVIC_REG_TPR) & 0xff;
    int isrv = avic_highest_vector(cs, page, AVIC_REG_ISR);

    if (isrv >= 0 && (isrv & 0xf0) > (tpr & 0xf0)) {
        return isrv & 0xf0;
    }
    return tpr;
}

/* The IRR's highest vector if its priority class beats the PPR's, or -1. */
static int avic_deliverable(CPUState *cs, uint64_t page)
{
    int irrv = avic_highest_vector(cs, page, AVIC_REG_IRR);

    if (irrv < 0 || (irrv & 0xf0) <= (avic_ppr(cs, page) & 0xf0)) {
        return -1;
    }
    return irrv;
}

/*
 * Request a virtual interrupt of @cs if its guest runs with AVIC and has
 * one to take; the caller holds the BQL.  Nothing is requested for a
 * processor outside its guest: its next VMRUN looks at the IRR.
 */
static void avic_kick(CPUState *cs)
{
    CPUX86State *env = cpu_env(cs);

    if (svm_avic_on(env) &&
        avic_deliverable(cs, env->avic_backing_page) >= 0) {
        cpu_interrupt(cs, CPU_INTERRUPT_AVIC);
    }
}

void svm_avic_doorbell(CPUX86State *env, uint64_t apic_id)
{
    CPUState *cs = cpu_by_arch_id(apic_id & AVIC_PHYS_HOST_ID_MASK);

    trace_svm_avic_doorbell(env_cpu(env)->cpu_index, apic_id);
    if (cs) {
        avic_kick(cs);
    }
}

/* A #VMEXIT with both exit infos (cpu_vmexit() writes only the first). */
static G_NORETURN void avic_vmexit(CPUX86State *env, uint64_t code,
                                   uint64_t info1, uint64_t info2,
                                   uintptr_t retaddr)
{
    x86_stq_phys(env_cpu(env),
                 env->vm_vmcb + offsetof(struct vmcb, control.exit_info_2),
                 info2);
    cpu_vmexit(env, code, info1, retaddr);
}

/* A #VMEXIT to take once the current instruction has completed. */
static AvicAccess avic_trap(CPUX86State *env, uint64_t code,
                            uint64_t info1, uint64_t info2)
{
    env->avic_exit_code = code;
    env->avic_exit_info_1 = info1;
    env->avic_exit_info_2 = info2;
    cpu_interrupt(env_cpu(env), CPU_INTERRUPT_AVIC);
    return AVIC_TRAP;
}

static uint64_t avic_noaccel_info(uint32_t offset, bool write)
{
    return ((uint64_t)write << 32) | (offset & 0xff0);
}

/* #VMEXIT(AVIC_NOACCEL) as a fault: before the access, at @retaddr. */
static G_NORETURN void avic_fault(CPUX86State *env, uint32_t offset,
                                  bool write, uintptr_t retaddr)
{
    avic_vmexit(env, SVM_EXIT_AVIC_NOACCEL, avic_noaccel_info(offset, write),
                0, retaddr);
}

/*
 * Set @vector in the IRR of the guest whose physical APIC ID is @index and
 * ring its doorbell; return an AVIC_IPI_* failure or -1.
 */
static int avic_ipi_physical(CPUX86State *env, uint32_t index, int vector)
{
    CPUState *cs = env_cpu(env);
    uint64_t table = env->avic_physical_id & AVIC_ADDR_MASK;
    uint64_t entry;

    if (index > (env->avic_physical_id & AVIC_PHYS_MAX_INDEX_MASK)) {
        return AVIC_IPI_INVALID_TARGET;
    }
    entry = x86_ldq_phys(cs, table + index * 8);
    if (!(entry & AVIC_PHYS_VALID)) {
        return AVIC_IPI_INVALID_TARGET;
    }
    avic_vector_bit(cs, entry & AVIC_ADDR_MASK, AVIC_REG_IRR, vector, true);
    if (!(entry & AVIC_PHYS_IS_RUNNING)) {
        return AVIC_IPI_TARGET_NOT_RUNNING;
    }
    svm_avic_doorbell(env, entry & AVIC_PHYS_HOST_ID_MASK);
    return -1;
}

/* The physical table index of xAPIC logical ID table entry @index. */
static int avic_logical_to_physical(CPUX86State *env, uint32_t index)
{
    uint64_t table = env->avic_logical_id & AVIC_ADDR_MASK;
    uint32_t entry = x86_ldl_phys(env_cpu(env), table + index * 4);

    return entry & AVIC_LOGICAL_VALID ? (entry & 0xff) : -1;
}

/* The guest wrote @icr to its ICR: send the IPI the way AVIC does. */
static AvicAccess avic_send_ipi(CPUX86State *env, uint64_t icr, bool x2apic)
{
    CPUState *cs = env_cpu(env);
    uint32_t icrl = icr, icrh = icr >> 32;
    int vector = icrl & 0xff;
    bool fixed_edge = !(icrl & (7 << 8)) && !(icrl & (1 << 15));
    bool logical = icrl & (1 << 11);
    uint32_t shorthand = (icrl >> 18) & 3;
    uint32_t dest = x2apic ? icrh : icrh >> 24;
    int failure = -1, failed_index = 0, i;

    trace_svm_avic_ipi(cs->cpu_index, icr);
    if (!fixed_edge) {
        return avic_trap(env, SVM_EXIT_AVIC_INCOMPLETE_IPI, icr,
                         (uint64_t)AVIC_IPI_INVALID_INT_TYPE << 32);
    }
    if (shorthand == 1) {
        avic_vector_bit(cs, env->avic_backing_page, AVIC_REG_IRR, vector,
                        true);
        avic_kick(cs);
        return AVIC_DONE;
    }
    if (shorthand || dest == (x2apic ? UINT32_MAX : 0xff) ||
        (logical && x2apic)) {
        failure = AVIC_IPI_INVALID_TARGET;
    } else if (!logical) {
        failure = avic_ipi_physical(env, dest, vector);
        failed_index = dest;
    } else {
        bool flat = (avic_reg(cs, env->avic_backing_page, AVIC_REG_DFR)
                     >> 28) == 0xf;
        uint32_t cluster = flat ? 0 : (dest >> 4) * 4;
        uint32_t bits = flat ? dest & 0xff : dest & 0xf;

        if (!flat && cluster >= 0xf * 4) {
            bits = 0;
            failure = AVIC_IPI_INVALID_TARGET;
        }
        for (i = 0; bits; i++, bits >>= 1) {
            int index, f;

            if (!(bits & 1)) {
                continue;
            }
            index = avic_logical_to_physical(env, cluster + i);
            f = index < 0 ? AVIC_IPI_INVALID_TARGET
                          : avic_ipi_physical(env, index, vector);
            if (f >= 0 && failure != AVIC_IPI_INVALID_TARGET) {
                failure = f;
                failed_index = cluster + i;
            }
        }
    }
    if (failure < 0) {
        return AVIC_DONE;
    }
    return avic_trap(env, SVM_EXIT_AVIC_INCOMPLETE_IPI, icr,
                     ((uint64_t)failure << 32) | failed_index);
}

static AvicAccess avic_eoi(CPUX86State *env, uint32_t offset)
{
    CPUState *cs = env_cpu(env);
    uint64_t page = env->avic_backing_page;
    int isrv = avic_highest_vector(cs, page, AVIC_REG_ISR);

    if (isrv < 0) {
        return AVIC_DONE;
    }
    /* A level-triggered vector's EOI is the hypervisor's (its IOAPIC). */
    if (avic_vector_test(cs, page, AVIC_REG_TMR, isrv)) {
        return avic_trap(env, SVM_EXIT_AVIC_NOACCEL,
                         avic_noaccel_info(offset, true), isrv);
    }
    avic_vector_bit(cs, page, AVIC_REG_ISR, isrv, false);
    avic_set_reg(cs, page, AVIC_REG_PPR, avic_ppr(cs, page));
    avic_kick(cs);
    return AVIC_DONE;
}

/* Writes that AVIC stores and then traps on, as the hypervisor expects. */
static bool avic_write_traps(uint32_t offset, bool x2apic)
{
    switch (offset) {
    case AVIC_REG_ID:
    case AVIC_REG_RRR:
    case AVIC_REG_LDR:
    case AVIC_REG_DFR:
        return !x2apic;     /* read-only in x2APIC mode: a fault */
    case AVIC_REG_SPIV:
    case AVIC_REG_ESR:
    case AVIC_REG_LVTT ... AVIC_REG_LVTERR:
    case AVIC_REG_TMICT:
    case AVIC_REG_TDCR:
        return !(offset & 0xf);
    default:
        return false;
    }
}

/*
 * The guest writes @val to its APIC register at @offset: @val is 64 bits
 * for the x2APIC's ICR, 32 otherwise.  The caller holds the BQL.
 */
static AvicAccess avic_write(CPUX86State *env, uint32_t offset, uint64_t val,
                             bool x2apic)
{
    CPUState *cs = env_cpu(env);
    uint64_t page = env->avic_backing_page;

    trace_svm_avic_write(cs->cpu_index, offset, val);
    if (offset == AVIC_REG_ICR && x2apic) {
        avic_set_reg(cs, page, AVIC_REG_ICR2, val >> 32);
    } else if (val >> 32) {
        return AVIC_FAULT;  /* reserved bits: the hypervisor's #GP */
    }
    switch (offset) {
    case AVIC_REG_TPR:
        avic_set_reg(cs, page, AVIC_REG_TPR, val & 0xff);
        avic_set_reg(cs, page, AVIC_REG_PPR, avic_ppr(cs, page));
        avic_kick(cs);
        return AVIC_DONE;
    case AVIC_REG_EOI:
        if (x2apic && val) {
            return AVIC_FAULT;
        }
        avic_set_reg(cs, page, AVIC_REG_EOI, val);
        return avic_eoi(env, offset);
    case AVIC_REG_ICR:
        avic_set_reg(cs, page, AVIC_REG_ICR, val);
        if (!x2apic) {
            val |= (uint64_t)avic_reg(cs, page, AVIC_REG_ICR2) << 32;
        }
        return avic_send_ipi(env, val, x2apic);
    case AVIC_REG_ICR2:
        if (x2apic) {
            return AVIC_FAULT;
        }
        avic_set_reg(cs, page, AVIC_REG_ICR2, val);
        return AVIC_DONE;
    case AVIC_REG_SELF_IPI:
        if (!x2apic) {
            return AVIC_FAULT;
        }
        avic_vector_bit(cs, page, AVIC_REG_IRR, val & 0xff, true);
        avic_kick(cs);
        return AVIC_DONE;
    }
    if (!avic_write_traps(offset, x2apic)) {
        return AVIC_FAULT;
    }
    avic_set_reg(cs, page, offset, val);
    return avic_trap(env, SVM_EXIT_AVIC_NOACCEL,
                     avic_noaccel_info(offset, true), 0);
}

/* The guest reads its APIC register at @offset; false: a fault. */
static bool avic_read(CPUX86State *env, uint32_t offset, bool x2apic,
                      uint64_t *val)
{
    CPUState *cs = env_cpu(env);
    uint64_t page = env->avic_backing_page;

    switch (offset) {
    case AVIC_REG_PPR:
        *val = avic_ppr(cs, page);
        return true;
    case AVIC_REG_ICR:
        *val = avic_reg(cs, page, AVIC_REG_ICR);
        if (x2apic) {
            *val |= (uint64_t)avic_reg(cs, page, AVIC_REG_ICR2) << 32;
        }
        return true;
    case AVIC_REG_ICR2:
    case AVIC_REG_DFR:
        if (x2apic) {
            return false;
        }
        /* fall through */
    case AVIC_REG_ID:
    case 0x030:                             /* version */
    case AVIC_REG_TPR:
    case AVIC_REG_LDR:
    case AVIC_REG_SPIV:
    case AVIC_REG_ISR ... AVIC_REG_IRR + 0x70:
    case AVIC_REG_ESR:
    case AVIC_REG_LVTT ... AVIC_REG_LVTERR:
    case AVIC_REG_TMICT:
    case AVIC_REG_TDCR:
        *val = avic_reg(cs, page, offset);
        return true;
    default:
        /* the current count, APR, RRR, EOI, self-IPI, reserved */
        return false;
    }
}

/* x2APIC MSRs the MSR permission map lets through, in x2AVIC mode. */
uint64_t svm_avic_msr_read(CPUX86State *env, uint32_t index,
                           uintptr_t retaddr)
{
    uint32_t offset = index << 4;
    uint64_t val;

    if (!avic_read(env, offset, true, &val)) {
        avic_fault(env, offset, false, retaddr);
    }
    return val;
}

/*
 * WRMSR ends its translation block, so a trap is taken right after it,
 * with RIP past the instruction.
 */
void svm_avic_msr_write(CPUX86State *env, uint32_t index, uint64_t val,
                        uintptr_t retaddr)
{
    uint32_t offset = index << 4;
    AvicAccess access;

    bql_lock();
    access = avic_write(env, offset, val, true);
    bql_unlock();
    if (access == AVIC_FAULT) {
        avic_fault(env, offset, true, retaddr);
    }
}

/*
 * In xAPIC mode the guest reaches its APIC through the guest-physical
 * page at AVIC_APIC_BAR: the translation of that page (svm_avic_mmio_addr)
 * sends it to this region, and the region's handlers to the backing page
 * of the processor that made the access.
 */
static bool svm_avic_mmio_valid(CPUState *cs, hwaddr addr, unsigned size)
{
    return cs && svm_avic_on(cpu_env(cs)) &&
           !(cpu_env(cs)->int_ctl & V_X2APIC_MODE_MASK) &&
           size == 4 && !(addr & 0xf);
}

static uint64_t svm_avic_mmio_read(void *opaque, hwaddr addr, unsigned size)
{
    CPUState *cs = current_cpu;
    uint64_t val;

    if (!svm_avic_mmio_valid(cs, addr, size) ||
        !avic_read(cpu_env(cs), addr, false, &val)) {
        if (cs && svm_avic_on(cpu_env(cs))) {
            avic_fault(cpu_env(cs), addr, false, cs->mem_io_pc);
        }
        return 0;
    }
    return val;
}

static void svm_avic_mmio_write(void *opaque, hwaddr addr, uint64_t val,
                                unsigned size)
{
    CPUState *cs = current_cpu;
    CPUX86State *env;

    if (!svm_avic_mmio_valid(cs, addr, size)) {
        if (cs && svm_avic_on(cpu_env(cs))) {
            avic_fault(cpu_env(cs), addr, true, cs->mem_io_pc);
        }
        return;
    }
    env = cpu_env(cs);
    /*
     * A trap must be taken right after the instruction that wrote, but an
     * MMIO access does not end its translation block: run the instruction
     * again, alone and uninterrupted, and do the write then (as
     * watchpoints that stop after the access do).
     */
    if (!env->avic_replay) {
        env->avic_replay = true;
        cpu_restore_state(cs, cs->mem_io_pc);
        cs->cflags_next_tb = 1 | CF_NOIRQ | cs->tcg_cflags;
        cpu_loop_exit_noexc(cs);
    }
    env->avic_replay = false;
    if (avic_write(env, addr, val, false) == AVIC_FAULT) {
        avic_fault(cpu_env(cs), addr, true, cs->mem_io_pc);
    }
}

static const MemoryRegionOps svm_avic_mmio_ops = {
    .read = svm_avic_mmio_read,
    .write = svm_avic_mmio_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid.min_access_size = 1,
    .valid.max_access_size = 8,
    .impl.min_access_size = 1,
    .impl.max_access_size = 8,
};

void svm_avic_init(void)
{
    static MemoryRegion mmio;

    if (memory_region_size(&mmio)) {
        return;
    }
    memory_region_init_io(&mmio, NULL, &svm_avic_mmio_ops, NULL,
                          "svm-avic-apic", TARGET_PAGE_SIZE);
    memory_region_add_subregion(get_system_memory(), SVM_AVIC_MMIO_BASE,
                                &mmio);
}

bool svm_avic_mmio_addr(CPUX86State *env, hwaddr gpa, hwaddr *paddr)
{
    if (!svm_avic_on(env) || (env->int_ctl & V_X2APIC_MODE_MASK) ||
        (gpa & AVIC_ADDR_MASK) != env->avic_vapic_bar) {
        return false;
    }
    *paddr = SVM_AVIC_MMIO_BASE | (gpa & ~TARGET_PAGE_MASK);
    return true;
}

void svm_avic_vmrun(CPUX86State *env)
{
    CPUState *cs = env_cpu(env);
    uint64_t vmcb = env->vm_vmcb;

    env->avic_backing_page = 0;
    env->avic_exit_code = 0;
    env->avic_replay = false;
    if (!(env->int_ctl & V_AVIC_ENABLE_MASK) ||
        !(env->features[FEAT_SVM] & CPUID_SVM_AVIC)) {
        env->int_ctl &= ~(V_AVIC_ENABLE_MASK | V_X2APIC_MODE_MASK);
        return;
    }
    if (!(env->features[FEAT_SVM] & CPUID_SVM_X2AVIC)) {
        env->int_ctl &= ~V_X2APIC_MODE_MASK;
    }
    env->avic_vapic_bar = x86_ldq_phys(cs, vmcb +
            offsetof(struct vmcb, control.avic_vapic_bar)) & AVIC_ADDR_MASK;
    env->avic_logical_id = x86_ldq_phys(cs, vmcb +
            offsetof(struct vmcb, control.avic_logical_id));
    env->avic_physical_id = x86_ldq_phys(cs, vmcb +
            offsetof(struct vmcb, control.avic_physical_id));
    env->avic_backing_page = x86_ldq_phys(cs, vmcb +
            offsetof(struct vmcb, control.avic_backing_page)) & AVIC_ADDR_MASK;
    trace_svm_avic_vmrun(cs->cpu_index, env->avic_backing_page,
                         !!(env->int_ctl & V_X2APIC_MODE_MASK));
    bql_lock();
    avic_kick(cs);
    bql_unlock();
}

void svm_avic_vmexit(CPUX86State *env)
{
    env->avic_backing_page = 0;
    env->avic_exit_code = 0;
    env->avic_replay = false;
    env_cpu(env)->interrupt_request &= ~CPU_INTERRUPT_AVIC;
}

/* CPU_INTERRUPT_AVIC, with the BQL held: a trap to take, or an interrupt. */
bool svm_avic_exec_interrupt(CPUX86State *env)
{
    CPUState *cs = env_cpu(env);
    uint64_t page = env->avic_backing_page;
    int vector;

    if (env->avic_exit_code) {
        uint64_t code = env->avic_exit_code;

        env->avic_exit_code = 0;
        cs->interrupt_request &= ~CPU_INTERRUPT_AVIC;
        trace_svm_avic_vmexit(cs->cpu_index, code, env->avic_exit_info_1,
                              env->avic_exit_info_2);
        avic_vmexit(env, code, env->avic_exit_info_1,
                    env->avic_exit_info_2, 0);
    }
    cs->interrupt_request &= ~CPU_INTERRUPT_AVIC;
    if (!svm_avic_on(env)) {
        return false;
    }
    vector = avic_deliverable(cs, page);
    if (vector < 0) {
        return false;
    }
    avic_vector_bit(cs, page, AVIC_REG_IRR, vector, false);
    avic_vector_bit(cs, page, AVIC_REG_ISR, vector, true);
    avic_set_reg(cs, page, AVIC_REG_PPR, avic_ppr(cs, page));
    qemu_log_mask(CPU_LOG_INT, "Servicing AVIC INT=0x%02x\n", vector);
    do_interrupt_x86_hardirq(env, vector, 1);
    avic_kick(cs);
    return true;
}
