/*
 * Unit tests of hpnet's decision tree: every need against every
 * combination of available backends, and forced backends.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "net/hpnet/hpnet-select.h"

/* The decision tree, written out independently of the code's tables. */
static const char *const expected_order[HPNET_NEED__MAX] = {
    [HPNET_NEED_ISOLATION] = "sriov vhost-user vhost-net virtio-net",
    [HPNET_NEED_LATENCY] = "vhost-user vhost-net virtio-net",
    [HPNET_NEED_COMPATIBILITY] = "virtio-net vhost-net",
    [HPNET_NEED_THROUGHPUT] = "vhost-net vhost-user virtio-net",
};

static void probes_for(unsigned mask, HpnetProbe probes[HPNET_BACKEND__MAX])
{
    int b;

    for (b = 0; b < HPNET_BACKEND__MAX; b++) {
        probes[b].available = mask & (1u << b);
        probes[b].reason = (char *)(probes[b].available ? "found" :
                                    "missing");
    }
}

static void test_every_combination(void)
{
    int need;
    unsigned mask;

    for (need = 0; need < HPNET_NEED__MAX; need++) {
        g_auto(GStrv) order = g_strsplit(expected_order[need], " ", -1);

        for (mask = 0; mask < 1u << HPNET_BACKEND__MAX; mask++) {
            HpnetProbe probes[HPNET_BACKEND__MAX];
            g_autoptr(HpnetCandidateList) cands = NULL;
            HpnetCandidateList *c;
            HpnetBackend chosen = HPNET_BACKEND__MAX;
            Error *err = NULL;
            const char *want = NULL;
            int i, taken = 0;
            bool ok;

            probes_for(mask, probes);
            for (i = 0; order[i]; i++) {
                int b = qapi_enum_parse(&HpnetBackend_lookup, order[i], -1,
                                        &error_abort);

                if (mask & (1u << b)) {
                    want = order[i];
                    break;
                }
            }
            ok = hpnet_choose(need, NULL, probes, &chosen, &cands, &err);
            if (!want) {
                g_assert_false(ok);
                g_assert_nonnull(strstr(error_get_pretty(err),
                                        "no backend for need="));
                error_free(err);
            } else {
                g_assert_true(ok);
                g_assert_cmpstr(HpnetBackend_str(chosen), ==, want);
            }
            /* Every backend of the need's list was considered, in order. */
            for (c = cands, i = 0; c; c = c->next, i++) {
                g_assert_cmpstr(HpnetBackend_str(c->value->backend), ==,
                                order[i]);
                g_assert_cmpint(c->value->available, ==,
                                !!(mask & (1u << c->value->backend)));
                taken += c->value->taken;
                if (c->value->taken) {
                    g_assert_cmpstr(HpnetBackend_str(c->value->backend), ==,
                                    want);
                }
            }
            g_assert_null(order[i]);
            g_assert_cmpint(taken, ==, want ? 1 : 0);
        }
    }
}

static void test_forced(void)
{
    HpnetProbe probes[HPNET_BACKEND__MAX];
    g_autoptr(HpnetCandidateList) cands = NULL, cands2 = NULL;
    HpnetBackend forced = HPNET_BACKEND_VHOST_NET, chosen;
    Error *err = NULL;

    /* Only vhost-net missing: forcing it fails even for a need it is not */
    probes_for(~(1u << HPNET_BACKEND_VHOST_NET), probes);
    probes[HPNET_BACKEND_VHOST_NET].reason =
        (char *)"/dev/vhost-net: No such file or directory";
    g_assert_false(hpnet_choose(HPNET_NEED_COMPATIBILITY, &forced, probes,
                                &chosen, &cands, &err));
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "backend=vhost-net is not available: /dev/vhost-net: "
                    "No such file or directory");
    error_free(err);
    g_assert_nonnull(cands);
    g_assert_null(cands->next);

    /* Available: taken even where the need would choose another. */
    forced = HPNET_BACKEND_VIRTIO_NET;
    g_assert_true(hpnet_choose(HPNET_NEED_LATENCY, &forced, probes, &chosen,
                               &cands2, &error_abort));
    g_assert_cmpint(chosen, ==, HPNET_BACKEND_VIRTIO_NET);
    g_assert_true(cands2->value->taken);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpnet/select/every-combination",
                    test_every_combination);
    g_test_add_func("/hpnet/select/forced", test_forced);
    return g_test_run();
}
