/*
 * Unit tests of hpkvm's CPU lists and masks: host-cpus= and what Linux
 * writes in cpuset.cpus, smp_affinity_list and default_smp_affinity.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "accel/hpkvm/hpkvm-cpuset.h"

static char *roundtrip(const char *list)
{
    HpkvmCpuSet set;

    g_assert_true(hpkvm_cpuset_parse(list, &set, "test", &error_abort));
    return hpkvm_cpuset_format(&set);
}

static void test_list(void)
{
    static const char *const cases[][2] = {
        { "2-5,8", "2-5,8" },
        { "8,2-5", "2-5,8" },
        { "0", "0" },
        { "1,2,3", "1-3" },
        { "3-3", "3" },
        { "0-1,1-2\n", "0-2" },
        { " 7 ", "7" },
        { "", "" },
        { "\n", "" },
        { "1023", "1023" },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *out = roundtrip(cases[i][0]);

        g_assert_cmpstr(out, ==, cases[i][1]);
    }
}

static void test_list_errors(void)
{
    static const char *const cases[][2] = {
        { "a", "expected a CPU number" },
        { "1-", "expected a CPU number" },
        { "-1", "expected a CPU number" },
        { "5-2", "backwards: write 2-5" },
        { "1,", "ends in a comma" },
        { "1;2", "unexpected ';'" },
        { "1024", "beyond the 1024 CPUs" },
        { "1 2", "unexpected ' '" },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        Error *err = NULL;
        HpkvmCpuSet set;

        g_assert_false(hpkvm_cpuset_parse(cases[i][0], &set, "host-cpus",
                                          &err));
        g_assert_nonnull(err);
        g_assert_nonnull(strstr(error_get_pretty(err), "host-cpus"));
        if (!strstr(error_get_pretty(err), cases[i][1])) {
            g_error("'%s': got '%s', want '%s'", cases[i][0],
                    error_get_pretty(err), cases[i][1]);
        }
        error_free(err);
    }
}

static void test_mask(void)
{
    HpkvmCpuSet set;
    g_autofree char *list = NULL, *one = NULL, *two = NULL;

    g_assert_true(hpkvm_cpuset_parse_mask("00000001,0000000c\n", &set, "m",
                                          &error_abort));
    list = hpkvm_cpuset_format(&set);
    g_assert_cmpstr(list, ==, "2-3,32");
    two = hpkvm_cpuset_format_mask(&set, 64);
    g_assert_cmpstr(two, ==, "00000001,0000000c");

    g_assert_true(hpkvm_cpuset_parse_mask("3", &set, "m", &error_abort));
    g_assert_cmpuint(hpkvm_cpuset_count(&set), ==, 2);
    one = hpkvm_cpuset_format_mask(&set, 2);
    g_assert_cmpstr(one, ==, "00000003");

    g_assert_false(hpkvm_cpuset_parse_mask("xyz", &set, "m", NULL));
    g_assert_false(hpkvm_cpuset_parse_mask("1,,2", &set, "m", NULL));
    g_assert_false(hpkvm_cpuset_parse_mask("100000000", &set, "m", NULL));
}

static void test_ops(void)
{
    HpkvmCpuSet a, b, c;
    unsigned cpu, n = 0;

    hpkvm_cpuset_parse("0-7", &a, "a", &error_abort);
    hpkvm_cpuset_parse("2-3,6", &b, "b", &error_abort);
    hpkvm_cpuset_andnot(&c, &a, &b);
    g_assert_cmpuint(hpkvm_cpuset_count(&c), ==, 5);
    g_assert_false(hpkvm_cpuset_intersects(&c, &b));
    hpkvm_cpuset_or(&c, &c, &b);
    g_assert_true(hpkvm_cpuset_equal(&c, &a));
    HPKVM_CPUSET_FOREACH(cpu, &b) {
        g_assert_true(cpu == 2 || cpu == 3 || cpu == 6);
        n++;
    }
    g_assert_cmpuint(n, ==, 3);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpkvm/cpuset/list", test_list);
    g_test_add_func("/hpkvm/cpuset/list-errors", test_list_errors);
    g_test_add_func("/hpkvm/cpuset/mask", test_mask);
    g_test_add_func("/hpkvm/cpuset/ops", test_ops);
    return g_test_run();
}
