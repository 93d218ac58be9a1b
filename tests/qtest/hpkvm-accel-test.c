/*
 * qtests of the hpkvm accelerator: the built-in guest boots under hpkvm
 * on /dev/kvm and under TCG, "-accel hpkvm" wins over "-accel kvm", and
 * bad input is refused with the offending name in the message.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "libqtest.h"
#include "qobject/qdict.h"

/*
 * The guest's bound: it needs ~3 s under a nested KVM, most of it SeaBIOS;
 * a loaded CI machine gets more.
 */
#define GUEST_TIMEOUT_US (30 * G_USEC_PER_SEC)

/*
 * The host's CPU model, less IA32_ARCH_CAPABILITIES: paravirtual nested
 * KVMs (PVM) advertise that MSR and then refuse the value QEMU writes.
 */
#define KVM_CPU "-cpu host,-arch-capabilities"

typedef struct GuestRun {
    bool kvm_enabled;
    bool hpkvm_enabled;
    char *ioapic_type;
    char *result;               /* the guest's serial output */
} GuestRun;

static void guest_run_free(GuestRun *run)
{
    g_free(run->ioapic_type);
    g_free(run->result);
    g_free(run);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC(GuestRun, guest_run_free)

static const char *guest_path(void)
{
    const char *path = g_getenv("HPKVM_GUEST");

    if (!path) {
        path = "tests/hpkvm/guest/hpkvm-guest.elf";
    }
    if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
        g_error("hpkvm test guest %s not found: build it (ninja) or set "
                "HPKVM_GUEST", path);
    }
    return path;
}

static bool query_enabled(QTestState *qts, const char *command)
{
    QDict *resp = qtest_qmp(qts, "{'execute': %s}", command);
    QDict *ret = qdict_get_qdict(resp, "return");
    bool enabled;

    g_assert(ret);
    enabled = qdict_get_bool(ret, "enabled");
    qobject_unref(resp);
    return enabled;
}

static char *qom_get_str(QTestState *qts, const char *path, const char *prop)
{
    QDict *resp = qtest_qmp(qts, "{'execute': 'qom-get', 'arguments':"
                            " {'path': %s, 'property': %s}}", path, prop);
    char *val = g_strdup(qdict_get_try_str(resp, "return"));

    qobject_unref(resp);
    return val;
}

/*
 * Boot the built-in guest with @args, paused; record what QMP says of
 * the accelerator, let the guest run to its end and collect its output.
 * The guest ends QEMU through isa-debug-exit: status 1 means it passed.
 */
static GuestRun *run_guest(const char *args)
{
    g_autofree char *dir = g_dir_make_tmp("hpkvm-accel-test-XXXXXX", NULL);
    g_autofree char *serial = g_build_filename(dir, "serial.log", NULL);
    GuestRun *run = g_new0(GuestRun, 1);
    gint64 deadline;
    QTestState *qts;

    /*
     * -nodefaults: no NIC, so no iPXE option ROM, which the guest never
     * uses and which now and then loops under a nested KVM on TCG.
     */
    qts = qtest_initf("-S -machine pc -smp 2 -nodefaults %s -kernel %s"
                      " -device isa-debug-exit,iobase=0xf4,iosize=0x04"
                      " -serial file:%s", args, guest_path(), serial);
    run->kvm_enabled = query_enabled(qts, "query-kvm");
    run->hpkvm_enabled = query_enabled(qts, "query-hpkvm");
    /* A partial QOM path: the IOAPIC hangs off the host bridge. */
    run->ioapic_type = qom_get_str(qts, "ioapic", "type");

    /* Don't wait for the reply: the guest may end QEMU before it. */
    qtest_set_expected_status(qts, 1);
    qtest_qmp_send(qts, "{'execute': 'cont'}");
    deadline = g_get_monotonic_time() + GUEST_TIMEOUT_US;
    while (qtest_probe_child(qts)) {
        if (g_get_monotonic_time() > deadline) {
            g_test_message("guest did not finish in time");
            break;
        }
        g_usleep(10 * 1000);
    }
    g_assert(g_file_get_contents(serial, &run->result, NULL, NULL));
    g_test_message("%s: %s", args, run->result);
    g_assert(strstr(run->result, "hpkvm-guest: PASS"));
    qtest_quit(qts);             /* checks the exit status */

    unlink(serial);
    rmdir(dir);
    return run;
}

static void assert_hpkvm_in_charge(GuestRun *run)
{
    g_assert_true(run->hpkvm_enabled);
    g_assert_true(run->kvm_enabled);       /* a KVM superset */
}

static bool skip_without_kvm(void)
{
    if (!qtest_has_accel("kvm")) {
        g_test_skip("KVM is not built for this target or /dev/kvm is "
                    "missing or not read-write here");
        return true;
    }
    return false;
}

static void test_boot_hpkvm(void)
{
    g_autoptr(GuestRun) run = NULL;

    if (skip_without_kvm()) {
        return;
    }
    run = run_guest("-accel hpkvm " KVM_CPU);
    assert_hpkvm_in_charge(run);
    g_assert(strstr(run->result, "cpus=2/2 ipis=1 apic=x2apic "));
    /* -cpu host has the TSC-deadline timer; KVM's LAPIC emulates it. */
    g_assert(strstr(run->result, "timer=tsc-deadline"));
}

static void test_boot_tcg(void)
{
    g_autoptr(GuestRun) run = run_guest("-accel tcg -cpu max");

    g_assert_false(run->hpkvm_enabled);
    g_assert_false(run->kvm_enabled);
    g_assert(strstr(run->result, "cpus=2/2 ipis=1 apic=x2apic "));
    /* TCG has no TSC-deadline mode: the guest falls back to one-shot. */
    g_assert(strstr(run->result, "timer=oneshot"));
}

static void test_plain_kvm_is_not_hpkvm(void)
{
    g_autoptr(GuestRun) run = NULL;

    if (skip_without_kvm()) {
        return;
    }
    run = run_guest("-accel kvm " KVM_CPU);
    g_assert_true(run->kvm_enabled);
    g_assert_false(run->hpkvm_enabled);
}

/* libvirt's order: its own -accel kvm, then ours from <qemu:commandline>. */
static void test_kvm_then_hpkvm(void)
{
    g_autoptr(GuestRun) run = NULL;

    if (skip_without_kvm()) {
        return;
    }
    run = run_guest("-accel kvm,kernel-irqchip=split -accel hpkvm "
                    KVM_CPU);
    assert_hpkvm_in_charge(run);
    /* kvm's kernel-irqchip=split was carried over: the IOAPIC is QEMU's. */
    g_assert_cmpstr(run->ioapic_type, ==, "ioapic");
}

static void test_hpkvm_props_win(void)
{
    g_autoptr(GuestRun) run = NULL;

    if (skip_without_kvm()) {
        return;
    }
    run = run_guest("-accel kvm,kernel-irqchip=split"
                    " -accel hpkvm,kernel-irqchip=on " KVM_CPU);
    assert_hpkvm_in_charge(run);
    g_assert_cmpstr(run->ioapic_type, ==, "kvm-ioapic");
}

static void test_hpkvm_then_tcg(void)
{
    g_autoptr(GuestRun) run = NULL;

    if (skip_without_kvm()) {
        return;
    }
    run = run_guest("-accel hpkvm -accel tcg " KVM_CPU);
    assert_hpkvm_in_charge(run);
}

/* Run QEMU to its end without qtest; returns its exit status. */
static int run_qemu(const char *args, char **out, char **err)
{
    g_autofree char *cmd = g_strdup_printf("%s %s",
                                           g_getenv("QTEST_QEMU_BINARY"),
                                           args);
    g_auto(GStrv) argv = NULL;
    g_autoptr(GError) error = NULL;
    int status;

    g_assert(g_shell_parse_argv(cmd, NULL, &argv, NULL));
    g_assert(g_spawn_sync(NULL, argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                          out, err, &status, &error));
    g_test_message("%s -> status %d", cmd, status);
    g_test_message("stdout: %s", *out);
    g_test_message("stderr: %s", *err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_accel_help_lists_hpkvm(void)
{
    g_autofree char *out = NULL, *err = NULL;

    g_assert_cmpint(run_qemu("-accel help", &out, &err), ==, 0);
    g_assert(g_regex_match_simple("^hpkvm$", out, G_REGEX_MULTILINE, 0));
}

static void test_accel_hpkvm_help_lists_props(void)
{
    /* hpkvm-accel's own properties, and their types. */
    static const char *const own[][2] = {
        { "exclusive-cores", "OnOffAuto" }, { "irq-passthrough", "OnOffAuto" },
        { "timer-passthrough", "OnOffAuto" }, { "ipi-fastpath", "OnOffAuto" },
        { "vfio-irte", "OnOffAuto" }, { "dynamic-nohz", "OnOffAuto" },
        { "dynamic-isolation", "OnOffAuto" }, { "host-cpus", "str" },
        { "housekeeping-cpus", "str" }, { "helper", "str" },
        { "x-host-root", "str" },
    };
    g_autofree char *out = NULL, *err = NULL;
    size_t i;

    g_assert_cmpint(run_qemu("-accel hpkvm,help", &out, &err), ==, 0);
    /* kvm-accel's properties, inherited, with their descriptions. */
    g_assert(strstr(out, "kernel-irqchip=<on|off|split>"));
    g_assert(strstr(out, "Path to the device node to use"));
    /* hpkvm's own, each with its type and a description. */
    for (i = 0; i < ARRAY_SIZE(own); i++) {
        g_autofree char *line = g_strdup_printf("^  %s=<%s> +- \\S",
                                                own[i][0], own[i][1]);

        g_test_message("looking for %s", line);
        g_assert(g_regex_match_simple(line, out, G_REGEX_MULTILINE, 0));
    }
    /* QEMU refuses timer-passthrough=on with tsc-deadline=on: said so. */
    g_assert(g_regex_match_simple("^  timer-passthrough=.* one-shot mode: "
                                  "needs tsc-deadline=off in -cpu ", out,
                                  G_REGEX_MULTILINE, 0));
}

static void test_bad_property_value(void)
{
    g_autofree char *out = NULL, *err = NULL;

    g_assert_cmpint(run_qemu("-machine none -accel hpkvm,kernel-irqchip=maybe"
                             " -display none", &out, &err), ==, 1);
    g_assert(strstr(err, "kernel-irqchip"));
    g_assert(strstr(err, "maybe"));
}

static void test_unknown_property(void)
{
    g_autofree char *out = NULL, *err = NULL;

    g_assert_cmpint(run_qemu("-machine none -accel hpkvm,no-such-prop=1"
                             " -display none", &out, &err), ==, 1);
    g_assert(strstr(err, "no-such-prop"));
}

/*
 * Without a usable KVM device: a clear error naming the node, then the
 * usual fall-back to the next -accel entry.  Runs on any host.
 */
static void test_missing_device_falls_back(void)
{
    g_autofree char *args = g_strdup_printf(
        "-machine pc -smp 1 -accel hpkvm,device=/nonexistent/kvm -accel tcg"
        " -kernel %s -device isa-debug-exit,iobase=0xf4,iosize=0x04"
        " -display none -serial stdio -monitor none", guest_path());
    g_autofree char *out = NULL, *err = NULL;

    g_assert_cmpint(run_qemu(args, &out, &err), ==, 1);
    g_assert(strstr(err, "cannot open the KVM device /nonexistent/kvm"));
    g_assert(strstr(err, "falling back to tcg"));
    g_assert(strstr(out, "hpkvm-guest: PASS"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    qtest_add_func("/hpkvm/boot/hpkvm", test_boot_hpkvm);
    qtest_add_func("/hpkvm/boot/tcg", test_boot_tcg);
    qtest_add_func("/hpkvm/precedence/plain-kvm", test_plain_kvm_is_not_hpkvm);
    qtest_add_func("/hpkvm/precedence/kvm-then-hpkvm", test_kvm_then_hpkvm);
    qtest_add_func("/hpkvm/precedence/hpkvm-props-win", test_hpkvm_props_win);
    qtest_add_func("/hpkvm/precedence/hpkvm-then-tcg", test_hpkvm_then_tcg);
    qtest_add_func("/hpkvm/cmdline/accel-help", test_accel_help_lists_hpkvm);
    qtest_add_func("/hpkvm/cmdline/accel-hpkvm-help",
                   test_accel_hpkvm_help_lists_props);
    qtest_add_func("/hpkvm/cmdline/bad-value", test_bad_property_value);
    qtest_add_func("/hpkvm/cmdline/unknown-property", test_unknown_property);
    qtest_add_func("/hpkvm/cmdline/missing-device",
                   test_missing_device_falls_back);
    return g_test_run();
}
