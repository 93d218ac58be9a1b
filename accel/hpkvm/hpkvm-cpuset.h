/*
 * hpkvm: sets of host CPUs, and the two ways Linux writes them
 *
 * A list ("2-5,8": -accel hpkvm,host-cpus=, cpuset.cpus, smp_affinity_list,
 * Cpus_allowed_list) and a mask ("00000000,0000000c": default_smp_affinity).
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_CPUSET_H
#define ACCEL_HPKVM_CPUSET_H

#include "qemu/bitmap.h"

/* As cpu_set_t: sched_setaffinity() takes no more without CPU_ALLOC. */
#define HPKVM_MAX_HOST_CPUS 1024

typedef struct HpkvmCpuSet {
    DECLARE_BITMAP(bits, HPKVM_MAX_HOST_CPUS);
} HpkvmCpuSet;

/*
 * Parse a CPU list; blanks around it and an empty list are allowed.
 * @what names the list in the error ("host-cpus", a file's path).
 */
bool hpkvm_cpuset_parse(const char *list, HpkvmCpuSet *set,
                        const char *what, Error **errp);
/* Parse a hexadecimal mask, 32-bit words separated by commas. */
bool hpkvm_cpuset_parse_mask(const char *mask, HpkvmCpuSet *set,
                             const char *what, Error **errp);
/* The shortest list ("" for the empty set) and a mask of @nbits bits. */
char *hpkvm_cpuset_format(const HpkvmCpuSet *set);
char *hpkvm_cpuset_format_mask(const HpkvmCpuSet *set, unsigned nbits);

static inline void hpkvm_cpuset_clear(HpkvmCpuSet *set)
{
    bitmap_zero(set->bits, HPKVM_MAX_HOST_CPUS);
}

static inline bool hpkvm_cpuset_has(const HpkvmCpuSet *set, unsigned cpu)
{
    return cpu < HPKVM_MAX_HOST_CPUS && test_bit(cpu, set->bits);
}

static inline bool hpkvm_cpuset_empty(const HpkvmCpuSet *set)
{
    return bitmap_empty(set->bits, HPKVM_MAX_HOST_CPUS);
}

static inline unsigned hpkvm_cpuset_count(const HpkvmCpuSet *set)
{
    return bitmap_count_one(set->bits, HPKVM_MAX_HOST_CPUS);
}

static inline bool hpkvm_cpuset_equal(const HpkvmCpuSet *a,
                                      const HpkvmCpuSet *b)
{
    return bitmap_equal(a->bits, b->bits, HPKVM_MAX_HOST_CPUS);
}

static inline bool hpkvm_cpuset_intersects(const HpkvmCpuSet *a,
                                           const HpkvmCpuSet *b)
{
    return bitmap_intersects(a->bits, b->bits, HPKVM_MAX_HOST_CPUS);
}

/* dst = a & ~b, which may alias either */
static inline void hpkvm_cpuset_andnot(HpkvmCpuSet *dst, const HpkvmCpuSet *a,
                                       const HpkvmCpuSet *b)
{
    bitmap_andnot(dst->bits, a->bits, b->bits, HPKVM_MAX_HOST_CPUS);
}

static inline void hpkvm_cpuset_or(HpkvmCpuSet *dst, const HpkvmCpuSet *a,
                                   const HpkvmCpuSet *b)
{
    bitmap_or(dst->bits, a->bits, b->bits, HPKVM_MAX_HOST_CPUS);
}

/* The next CPU in @set from @cpu on; HPKVM_MAX_HOST_CPUS when none. */
static inline unsigned hpkvm_cpuset_next(const HpkvmCpuSet *set,
                                         unsigned cpu)
{
    return find_next_bit(set->bits, HPKVM_MAX_HOST_CPUS, cpu);
}

#define HPKVM_CPUSET_FOREACH(cpu, set)                              \
    for ((cpu) = hpkvm_cpuset_next((set), 0);                       \
         (cpu) < HPKVM_MAX_HOST_CPUS;                               \
         (cpu) = hpkvm_cpuset_next((set), (cpu) + 1))

#endif
