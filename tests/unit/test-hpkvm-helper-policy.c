/*
 * Unit tests of qemu-hpkvm-helper's policy: which users and groups may
 * lease which host cores, and the refusals naming the fix.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "tools/hpkvm/hpkvm-helper-policy.h"

static HpkvmCpuSet cores(const char *list)
{
    HpkvmCpuSet set;

    g_assert_true(hpkvm_cpuset_parse(list, &set, "test", &error_abort));
    return set;
}

/* Whether a peer of @uid, groups @gid and @extra, may lease @list. */
static bool allows(const HpkvmHelperPolicy *p, uid_t uid, gid_t gid,
                   gid_t extra, const char *list, Error **errp)
{
    g_autoptr(GArray) groups = g_array_new(false, false, sizeof(gid_t));
    HpkvmPeer peer = { .pid = 1, .uid = uid, .gid = gid, .groups = groups };
    HpkvmCpuSet set = cores(list);

    if (extra) {
        g_array_append_val(groups, extra);
    }
    return hpkvm_helper_policy_allows(p, &peer, &set, errp);
}

static void test_rules(void)
{
    g_autoptr(HpkvmHelperPolicy) p = hpkvm_helper_policy_parse(
        "# a libvirt host\n"
        "allow 2-5 user 1000   # the VMs' user\n"
        "\n"
        "\tallow 8,9  group 2000\n"
        "allow 10 user root\n",
        "test.conf", &error_abort);
    Error *err = NULL;

    g_assert_true(allows(p, 1000, 100, 0, "2-5", &error_abort));
    g_assert_true(allows(p, 1000, 100, 0, "3", &error_abort));
    /* A supplementary group, or the primary one. */
    g_assert_true(allows(p, 1001, 100, 2000, "8-9", &error_abort));
    g_assert_true(allows(p, 1001, 2000, 0, "8", &error_abort));
    /* Rules add up for a user in both. */
    g_assert_true(allows(p, 1000, 2000, 0, "2-5,8-9", &error_abort));
    /* Root may lease any core. */
    g_assert_true(allows(p, 0, 0, 0, "0-63", &error_abort));

    g_assert_false(allows(p, 1000, 100, 0, "5-6", &err));
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "the host's policy does not let uid 1000 lease host "
                    "core 6: choose cores it allows, or ask the host's "
                    "administrator for an 'allow 6 user 1000' line in "
                    "test.conf");
    error_free(err);
    err = NULL;
    g_assert_false(allows(p, 1002, 100, 0, "8-9", &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "host cores 8-9:"));
    error_free(err);
}

static void test_empty_allows_only_root(void)
{
    g_autoptr(HpkvmHelperPolicy) p = hpkvm_helper_policy_parse(
        "# nothing yet\n", "empty.conf", &error_abort);
    Error *err = NULL;

    g_assert_true(allows(p, 0, 0, 0, "1", &error_abort));
    g_assert_false(allows(p, 1000, 1000, 0, "1", &err));
    error_free(err);
}

static void test_bad_lines(void)
{
    static const char *const cases[][2] = {
        { "deny 1 user 0\n", "bad.conf, line 1: not a rule" },
        { "allow 1 user\n", "bad.conf, line 1: not a rule" },
        { "allow 1 uid 0\n", "bad.conf, line 1: not a rule" },
        { "allow 1 user 0 extra\n", "bad.conf, line 1: not a rule" },
        { "\nallow x user 0\n", "bad.conf, line 2: 'x' is not a CPU list" },
        { "allow 1 user no-such-user-hpkvm\n",
          "bad.conf, line 1: no user named 'no-such-user-hpkvm'" },
        { "allow 1 group no-such-group-hpkvm\n",
          "bad.conf, line 1: no group named 'no-such-group-hpkvm'" },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        Error *err = NULL;

        g_assert_null(hpkvm_helper_policy_parse(cases[i][0], "bad.conf",
                                                &err));
        g_assert_nonnull(err);
        if (!g_str_has_prefix(error_get_pretty(err), cases[i][1])) {
            g_error("%s: got '%s'", cases[i][0], error_get_pretty(err));
        }
        error_free(err);
    }
}

static void test_file_checks(void)
{
    g_autofree char *dir = g_dir_make_tmp("hpkvm-policy-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "p.conf", NULL);
    g_autofree char *link = g_build_filename(dir, "link.conf", NULL);
    g_autofree char *missing = g_build_filename(dir, "none.conf", NULL);
    g_autoptr(HpkvmHelperPolicy) none = NULL;
    g_autoptr(HpkvmHelperPolicy) ok = NULL;
    Error *err = NULL;

    g_assert_true(g_file_set_contents(path, "allow 1 user 0\n", -1, NULL));
    g_assert_cmpint(chmod(path, 0644), ==, 0);
    ok = hpkvm_helper_policy_load(path, &error_abort);
    g_assert_nonnull(ok);
    none = hpkvm_helper_policy_load(missing, &error_abort);
    g_assert_nonnull(none);

    /* Others may change it: refused. */
    g_assert_cmpint(chmod(path, 0664), ==, 0);
    g_assert_null(hpkvm_helper_policy_load(path, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "only root may change"));
    error_free(err);
    err = NULL;

    g_assert_cmpint(chmod(path, 0644), ==, 0);
    g_assert_cmpint(symlink(path, link), ==, 0);
    g_assert_null(hpkvm_helper_policy_load(link, &err));
    g_assert_nonnull(err);
    error_free(err);

    unlink(link);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpkvm/helper-policy/rules", test_rules);
    g_test_add_func("/hpkvm/helper-policy/empty", test_empty_allows_only_root);
    g_test_add_func("/hpkvm/helper-policy/bad-lines", test_bad_lines);
    g_test_add_func("/hpkvm/helper-policy/file-checks", test_file_checks);
    return g_test_run();
}
