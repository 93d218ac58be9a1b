/*
 * Unit tests of hpkvm's MSI decoding and vCPU mapping, which decide
 * whether a passed-through device's interrupt can be remapped straight to
 * one vCPU's core (direct VFIO IRTE) or stays with KVM's delivery.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "accel/hpkvm/hpkvm-msi.h"

/* Four vCPUs with APIC IDs 0, 1, 2 and 0x104; KVM vCPU id = APIC ID. */
static int vcpu_of_apic_id(uint32_t apic_id, void *opaque)
{
    static const uint32_t ids[] = { 0, 1, 2, 0x104 };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(ids); i++) {
        if (ids[i] == apic_id) {
            return apic_id;
        }
    }
    return -1;
}

static uint64_t addr(uint32_t dest, bool logical)
{
    return 0xfee00000u | (dest << 12) | (logical ? 1u << 2 : 0);
}

static uint32_t data(uint8_t vector, uint8_t dm, bool level)
{
    return vector | (dm << 8) | (level ? 1u << 15 : 0);
}

/* Decode and map; returns the vCPU, or -1 with *why set. */
static int target(uint64_t address, uint32_t d, bool ext, const char **why)
{
    HpkvmMsi msi;

    *why = NULL;
    if (!hpkvm_msi_decode(address, d, ext, &msi, why)) {
        return -1;
    }
    return hpkvm_msi_target(&msi, vcpu_of_apic_id, NULL, why);
}

static void test_decode_fields(void)
{
    HpkvmMsi msi;
    const char *why = NULL;

    /*
     * dest 0x2a, extended bits 0x05, remappable, RH, logical;
     * vector 0x91, lowest priority, level
     */
    g_assert(hpkvm_msi_decode(0xfee2a0bcull, 0x8191, true, &msi, &why));
    g_assert_cmphex(msi.dest, ==, 0x52a);
    g_assert_cmphex(msi.vector, ==, 0x91);
    g_assert_cmpint(msi.delivery_mode, ==, HPKVM_MSI_DM_LOWEST_PRIORITY);
    g_assert(msi.logical);
    g_assert(msi.level);
    g_assert(msi.remappable);

    /* Without the extended destination ID, bits 11:5 are ignored. */
    g_assert(hpkvm_msi_decode(0xfee2a0a0ull, 0x41, false, &msi, &why));
    g_assert_cmphex(msi.dest, ==, 0x2a);
    g_assert(!msi.logical && !msi.level && !msi.remappable);
    g_assert_cmpint(msi.delivery_mode, ==, HPKVM_MSI_DM_FIXED);
}

static void test_not_an_msi(void)
{
    HpkvmMsi msi;
    const char *why = NULL;

    g_assert(!hpkvm_msi_decode(0xfed00000ull, 0x41, false, &msi, &why));
    g_assert(strstr(why, "not an x86 MSI"));
    g_assert(!hpkvm_msi_decode(0x1fee00000ull, 0x41, false, &msi, &why));
    g_assert(strstr(why, "not an x86 MSI"));
}

static void test_fixed_physical_maps(void)
{
    const char *why;

    g_assert_cmpint(target(addr(0, false), data(0x41, 0, false), false, &why),
                    ==, 0);
    g_assert_cmpint(target(addr(2, false), data(0xef, 0, false), false, &why),
                    ==, 2);
    g_assert_null(why);
    /* APIC ID 0x104 is reachable only with the extended destination ID. */
    g_assert_cmpint(target(addr(0x04, false) | (1 << 5),
                           data(0x30, 0, false), true, &why), ==, 0x104);
    g_assert_cmpint(target(addr(0x04, false) | (1 << 5),
                           data(0x30, 0, false), false, &why), ==, -1);
    g_assert(strstr(why, "no vCPU has the destination APIC ID"));
}

static void test_vector_bounds(void)
{
    const char *why;

    g_assert_cmpint(target(addr(1, false), data(16, 0, false), false, &why),
                    ==, 1);
    g_assert_cmpint(target(addr(1, false), data(255, 0, false), false, &why),
                    ==, 1);
    g_assert_cmpint(target(addr(1, false), data(15, 0, false), false, &why),
                    ==, -1);
    g_assert(strstr(why, "reserved vector"));
}

static void test_falls_back(void)
{
    static const struct {
        uint64_t address;
        uint32_t data;
        const char *why;
    } cases[] = {
        { 0xfee01000ull, 0x141, "lowest-priority" },
        { 0xfee01000ull, 0x441, "not fixed delivery" },
        { 0xfee01000ull, 0x241, "not fixed delivery" },
        { 0xfee01000ull, 0x541, "not fixed delivery" },
        { 0xfee01000ull, 0x741, "not fixed delivery" },
        { 0xfee01004ull, 0x041, "logical destination" },
        { 0xfee03004ull, 0x041, "logical destination" },
        { 0xfeeff000ull, 0x041, "broadcast" },
        { 0xfee01000ull, 0x8041, "level-triggered" },
        { 0xfee01010ull, 0x041, "remappable format" },
        { 0xfee07000ull, 0x041, "no vCPU has" },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        const char *why;

        g_assert_cmpint(target(cases[i].address, cases[i].data, false,
                               &why), ==, -1);
        g_assert_nonnull(why);
        if (!strstr(why, cases[i].why)) {
            g_error("case %zu: reason '%s' lacks '%s'", i, why,
                    cases[i].why);
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpkvm/msi/decode-fields", test_decode_fields);
    g_test_add_func("/hpkvm/msi/not-an-msi", test_not_an_msi);
    g_test_add_func("/hpkvm/msi/fixed-physical-maps",
                    test_fixed_physical_maps);
    g_test_add_func("/hpkvm/msi/vector-bounds", test_vector_bounds);
    g_test_add_func("/hpkvm/msi/falls-back", test_falls_back);
    return g_test_run();
}
