/*
 * Unit tests of hpkvm_fold_accel_opts(): "-accel hpkvm" takes precedence
 * over plain "-accel kvm", whatever the order on the command line.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/option.h"
#include "qapi/error.h"
#include "system/hpkvm.h"

/* The same list vl.c parses "-accel" into: any property accepted. */
static QemuOptsList accel_opts = {
    .name = "accel",
    .implied_opt_name = "accel",
    .head = QTAILQ_HEAD_INITIALIZER(accel_opts.head),
    .desc = { { } },
};

static int describe_prop(void *opaque, const char *name, const char *value,
                         Error **errp)
{
    GString *s = opaque;

    /* Properties in the order they will be applied, "accel" first. */
    g_string_append_printf(s, ",%s=%s", name, value);
    return 0;
}

static int describe_entry(void *opaque, QemuOpts *opts, Error **errp)
{
    GString *s = opaque;

    g_string_append_printf(s, "%s[%s", s->len ? " " : "",
                           qemu_opt_get(opts, "accel"));
    qemu_opt_foreach(opts, describe_prop, s, &error_abort);
    g_string_append_c(s, ']');
    return 0;
}

/*
 * Parse each "-accel" argument of @args (NULL-terminated), fold, and
 * describe the result: one "[accel,prop=value...]" per entry, in order.
 */
static char *fold(const char *first, ...)
{
    GString *s = g_string_new("");
    const char *arg;
    va_list ap;

    qemu_opts_reset(&accel_opts);
    va_start(ap, first);
    for (arg = first; arg; arg = va_arg(ap, const char *)) {
        g_assert(qemu_opts_parse(&accel_opts, arg, true, &error_abort));
    }
    va_end(ap);

    hpkvm_fold_accel_opts(&accel_opts);
    qemu_opts_foreach(&accel_opts, describe_entry, s, &error_abort);
    return g_string_free(s, false);
}

static void check(const char *expected, char *got)
{
    g_assert_cmpstr(got, ==, expected);
    g_free(got);
}

static void test_without_hpkvm_nothing_changes(void)
{
    check("[kvm,accel=kvm,kernel-irqchip=split] [tcg,accel=tcg]",
          fold("kvm,kernel-irqchip=split", "tcg", NULL));
    check("[tcg,accel=tcg]", fold("tcg", NULL));
}

static void test_hpkvm_alone(void)
{
    check("[hpkvm,accel=hpkvm,kernel-irqchip=on]",
          fold("hpkvm,kernel-irqchip=on", NULL));
}

/* libvirt's own "-accel kvm" comes first: hpkvm takes its place. */
static void test_kvm_then_hpkvm(void)
{
    check("[hpkvm,kernel-irqchip=split,accel=hpkvm]",
          fold("kvm,kernel-irqchip=split", "hpkvm", NULL));
}

static void test_kvm_props_carried_hpkvm_wins(void)
{
    /* Both set kernel-irqchip: hpkvm's value is applied last. */
    check("[hpkvm,kernel-irqchip=split,dirty-ring-size=4096,accel=hpkvm,"
          "kernel-irqchip=on]",
          fold("kvm,kernel-irqchip=split,dirty-ring-size=4096",
               "hpkvm,kernel-irqchip=on", NULL));
}

static void test_hpkvm_first_keeps_its_place(void)
{
    check("[hpkvm,accel=hpkvm,kernel-irqchip=on,dirty-ring-size=4096] "
          "[tcg,accel=tcg]",
          fold("hpkvm,kernel-irqchip=on",
               "kvm,kernel-irqchip=split,dirty-ring-size=4096", "tcg",
               NULL));
}

static void test_tcg_before_stays_before(void)
{
    /* Only kvm entries are displaced; an earlier tcg keeps precedence. */
    check("[tcg,accel=tcg] [hpkvm,accel=hpkvm]",
          fold("tcg", "kvm", "hpkvm", NULL));
}

static void test_every_kvm_entry_folded(void)
{
    check("[hpkvm,kernel-irqchip=split,accel=hpkvm,device=/dev/kvm2] "
          "[tcg,accel=tcg]",
          fold("kvm,kernel-irqchip=split", "tcg",
               "kvm,kernel-irqchip=off,device=/dev/kvm2", "hpkvm", NULL));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpkvm/accel-opts/without-hpkvm",
                    test_without_hpkvm_nothing_changes);
    g_test_add_func("/hpkvm/accel-opts/hpkvm-alone", test_hpkvm_alone);
    g_test_add_func("/hpkvm/accel-opts/kvm-then-hpkvm", test_kvm_then_hpkvm);
    g_test_add_func("/hpkvm/accel-opts/hpkvm-props-win",
                    test_kvm_props_carried_hpkvm_wins);
    g_test_add_func("/hpkvm/accel-opts/hpkvm-first",
                    test_hpkvm_first_keeps_its_place);
    g_test_add_func("/hpkvm/accel-opts/tcg-first",
                    test_tcg_before_stays_before);
    g_test_add_func("/hpkvm/accel-opts/all-kvm-entries",
                    test_every_kvm_entry_folded);
    return g_test_run();
}
