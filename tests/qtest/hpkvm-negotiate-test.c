/*
 * qtests of hpkvm's feature negotiation
 *
 * On this host's own KVM (unpatched): query-hpkvm reports what the kernel
 * answered and the fallbacks, with reasons, on shared cores and on cores
 * of the VM's own (host-cpus=, leased through qemu-hpkvm-helper, which
 * the nested test host runs); "on" features fail clearly;
 * bad property values and impossible combinations are refused with the
 * fix.  With the stand-in for the patched kernel (hpkvm-fake-kernel,
 * LD_PRELOADed; a test double, see its source): features granted,
 * refused under auto and under on, and a kernel failing part way, whose
 * grants QEMU must undo.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include "libqtest.h"
#include "qobject/qdict.h"
#include "qobject/qlist.h"
#include "qobject/qstring.h"
#include "linux/kvm.h"

#define FAKE_KERNEL "tests/hpkvm/fake-kernel/libhpkvm-fake-kernel.so"
#define CPU "-cpu host,-arch-capabilities"
#define HELPER_SOCKET "/run/qemu-hpkvm-helper.sock"
/* Cores 2-3 of the VM's own; the host's tasks and IRQs left as they are. */
#define OWN_CORES "host-cpus=2-3,housekeeping-cpus=0-1,dynamic-isolation=off"

static const char *const features[] = {
    "exclusive-cores", "irq-passthrough", "timer-passthrough",
    "ipi-fastpath", "vfio-irte", "dynamic-nohz",
};

static bool skip_without_kvm(void)
{
    if (!qtest_has_accel("kvm")) {
        g_test_skip("KVM is not built for this target or /dev/kvm is "
                    "missing or not read-write here");
        return true;
    }
    return false;
}

/*
 * The features a guest of TIMER_CPU can have, for the fake kernel to
 * grant: all (timer-passthrough needs the one-shot LAPIC timer).
 */
#define GRANTABLE 0x3fu
#define TIMER_CPU CPU ",tsc-deadline=off"

/*
 * The features the reference kernel refuses, for its reason, when it
 * refuses exclusive-cores: all but vfio-irte (which needs
 * irq-passthrough).
 */
static bool builds_on_exclusive(size_t f)
{
    return f == 1 || f == 2 || f == 3 || f == 5;
}

/* OWN_CORES needs a helper to lease them from, and four cores. */
static bool skip_without_own_cores(void)
{
    if (skip_without_kvm()) {
        return true;
    }
    if (access(HELPER_SOCKET, F_OK) != 0 ||
        sysconf(_SC_NPROCESSORS_ONLN) < 4) {
        g_test_skip("host-cpus=2-3 needs qemu-hpkvm-helper on "
                    HELPER_SOCKET " and four online cores");
        return true;
    }
    return false;
}

/*
 * QEMU's command, on the real kernel if spec is NULL, else on the stand-in
 * for the patched kernel, scripted by spec, logging to log (emptied
 * first).  The fake kernel's variables are given to that one QEMU only,
 * through env(1): this test's own environment never holds LD_PRELOAD, so
 * no later case runs on the fake kernel, whatever happened to this one.
 */
static char *qemu_command(const char *spec, const char *log)
{
    const char *qemu = g_getenv("QTEST_QEMU_BINARY");
    g_autofree char *lib = NULL;
    g_autofree char *q_lib = NULL, *q_spec = NULL, *q_log = NULL;

    if (!spec) {
        return g_strdup(qemu);
    }
    lib = g_canonicalize_filename(FAKE_KERNEL, NULL);
    g_assert(g_file_test(lib, G_FILE_TEST_EXISTS));
    unlink(log);
    q_lib = g_shell_quote(lib);
    q_spec = g_shell_quote(spec);
    q_log = g_shell_quote(log);
    return g_strdup_printf("env LD_PRELOAD=%s HPKVM_FAKE_KERNEL=%s "
                           "HPKVM_FAKE_KERNEL_LOG=%s %s",
                           q_lib, q_spec, q_log, qemu);
}

/*
 * Read by qtest_init_with_env() only, and set only while it starts a
 * QEMU: that QEMU's command.
 */
#define QEMU_VAR "HPKVM_NEGOTIATE_TEST_QEMU"

/* qtest_init(), with spec and log as for qemu_command(). */
static QTestState *qtest_init_on_fake(const char *spec, const char *log,
                                      const char *args)
{
    g_autofree char *qemu = qemu_command(spec, log);
    QTestState *qts;

    g_setenv(QEMU_VAR, qemu, true);
    qts = qtest_init_with_env(QEMU_VAR, args, true);
    g_unsetenv(QEMU_VAR);
    return qts;
}

/* query-hpkvm's answer; spec and log as for qemu_command(). */
static QDict *query_hpkvm_on_fake(const char *spec, const char *log,
                                  const char *args)
{
    g_autofree char *qemu_args = g_strdup_printf("-S -machine pc -smp 2 %s",
                                                 args);
    QTestState *qts = qtest_init_on_fake(spec, log, qemu_args);
    QDict *resp, *ret;

    resp = qtest_qmp(qts, "{'execute': 'query-hpkvm'}");
    ret = qdict_get_qdict(resp, "return");
    g_assert(ret);
    qobject_ref(ret);
    qobject_unref(resp);
    qtest_quit(qts);
    return ret;
}

static QDict *query_hpkvm(const char *args)
{
    return query_hpkvm_on_fake(NULL, NULL, args);
}

static QDict *feature(QDict *info, const char *name)
{
    QList *list = qdict_get_qlist(info, "features");
    QListEntry *e;

    g_assert(list);
    QLIST_FOREACH_ENTRY(list, e) {
        QDict *f = qobject_to(QDict, qlist_entry_obj(e));

        if (g_str_equal(qdict_get_str(f, "feature"), name)) {
            return f;
        }
    }
    g_assert_not_reached();
}

static bool has_exit(QDict *info, const char *name)
{
    QList *list = qdict_get_qlist(info, "disabled-exits");
    QListEntry *e;

    if (!list) {
        return false;
    }
    QLIST_FOREACH_ENTRY(list, e) {
        if (g_str_equal(qstring_get_str(qobject_to(QString,
                                                   qlist_entry_obj(e))),
                        name)) {
            return true;
        }
    }
    return false;
}

/* Is this host's CPU AMD's (whose APIC virtualization is AVIC)? */
static bool host_is_amd(void)
{
    g_autofree char *cpuinfo = NULL;

    g_assert(g_file_get_contents("/proc/cpuinfo", &cpuinfo, NULL, NULL));
    return strstr(cpuinfo, "AuthenticAMD") != NULL;
}

static void assert_feature(QDict *info, const char *name, bool granted,
                           const char *mechanism, const char *reason_part)
{
    QDict *f = feature(info, name);

    g_test_message("%s: %s", name, qdict_get_str(f, "reason"));
    g_assert_cmpint(qdict_get_bool(f, "granted"), ==, granted);
    g_assert_cmpstr(qdict_get_str(f, "mechanism"), ==, mechanism);
    g_assert(strstr(qdict_get_str(f, "reason"), reason_part));
}

/*
 * Run QEMU to its end; returns its exit status, stderr in *err; spec and
 * log as for qemu_command().
 */
static int run_qemu_on_fake(const char *spec, const char *log,
                            const char *args, char **err)
{
    g_autofree char *qemu = qemu_command(spec, log);
    g_autofree char *cmd = g_strdup_printf("%s -machine pc -display none "
                                           "-S -monitor none %s",
                                           qemu, args);
    g_auto(GStrv) argv = NULL;
    g_autofree char *out = NULL;
    int status;

    g_assert(g_shell_parse_argv(cmd, NULL, &argv, NULL));
    /* -S with no monitor would wait forever: give it a deadline. */
    g_assert(g_spawn_sync(NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                          &out, err, &status, NULL));
    g_test_message("%s -> %d: %s", cmd, status, *err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_qemu(const char *args, char **err)
{
    return run_qemu_on_fake(NULL, NULL, args, err);
}

static char *read_log(const char *log)
{
    char *text = NULL;

    g_file_get_contents(log, &text, NULL, NULL);
    g_test_message("fake kernel log: %s", text ?: "(none)");
    return text ?: g_strdup("");
}

/* This host's KVM, as it answers KVM_CAP_X86_DISABLE_EXITS. */
static int host_disable_exits(void)
{
    int fd = open("/dev/kvm", O_RDWR);
    int ret;

    g_assert(fd >= 0);
    ret = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_X86_DISABLE_EXITS);
    close(fd);
    return ret < 0 ? 0 : ret;
}

static void test_unpatched_kernel_report(void)
{
    g_autoptr(QDict) info = NULL;
    size_t i;

    if (skip_without_kvm()) {
        return;
    }
    info = query_hpkvm("-accel hpkvm " CPU);
    g_assert(qdict_get_bool(info, "enabled"));
    g_assert(qdict_get_bool(info, "negotiated"));
    g_assert_cmpint(qdict_get_int(info, "kernel-version"), ==, 0);
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        g_assert(!qdict_get_bool(feature(info, features[i]), "granted"));
    }
    /* Interrupts without exits need a core of the guest's own. */
    assert_feature(info, "irq-passthrough", false, "none",
                   "needs exclusive-cores, on cores of its own");
    /* On TSC-deadline the guest cannot have timer passthrough. */
    assert_feature(info, "timer-passthrough", false, "none",
                   "add tsc-deadline=off to -cpu");
    /* Shared cores: KVM's defaults, and why. */
    g_assert(!has_exit(info, "hlt") && !has_exit(info, "pause") &&
             !has_exit(info, "mwait"));
    g_assert(!qdict_get_bool(info, "realtime-hint"));
    assert_feature(info, "exclusive-cores", false, "none",
                   "needs cores of its own: give host-cpus=");
    assert_feature(info, "dynamic-nohz", false, "none",
                   "needs exclusive-cores, on cores of its own");
}

/* On cores of its own, the upstream means, as far as KVM has them. */
static void test_unpatched_own_cores(void)
{
    g_autoptr(QDict) info = NULL;
    int exits;

    if (skip_without_own_cores()) {
        return;
    }
    info = query_hpkvm("-accel hpkvm," OWN_CORES " " CPU);
    exits = host_disable_exits();
    /* What KVM answered, nothing more. */
    g_assert_cmpint(has_exit(info, "hlt"), ==,
                    !!(exits & KVM_X86_DISABLE_EXITS_HLT));
    g_assert_cmpint(has_exit(info, "pause"), ==,
                    !!(exits & KVM_X86_DISABLE_EXITS_PAUSE));
    g_assert_cmpint(has_exit(info, "mwait"), ==,
                    !!(exits & KVM_X86_DISABLE_EXITS_MWAIT));
    assert_feature(info, "exclusive-cores", false, "upstream",
                   "KVM_CAP_HPKVM is 0");
    g_assert(qdict_get_bool(info, "realtime-hint"));
}

static void test_exclusive_cores_off(void)
{
    g_autoptr(QDict) info = NULL;
    g_autoptr(QDict) pm = NULL;

    if (skip_without_kvm()) {
        return;
    }
    info = query_hpkvm("-accel hpkvm,exclusive-cores=off " CPU);
    assert_feature(info, "exclusive-cores", false, "none", "=off");
    g_assert(!has_exit(info, "hlt") && !has_exit(info, "pause"));
    g_assert(!qdict_get_bool(info, "realtime-hint"));
    /* The user's own -overcommit cpu-pm=on still applies, and shows. */
    pm = query_hpkvm("-accel hpkvm,exclusive-cores=off "
                     "-overcommit cpu-pm=on " CPU);
    g_assert_cmpint(has_exit(pm, "hlt"), ==,
                    !!(host_disable_exits() & KVM_X86_DISABLE_EXITS_HLT));
}

static void test_on_without_patched_kernel_fails(void)
{
    g_autofree char *err = NULL;

    if (skip_without_own_cores()) {
        return;
    }
    g_assert_cmpint(run_qemu("-accel hpkvm," OWN_CORES ",irq-passthrough=on "
                             CPU, &err), ==, 1);
    g_assert(strstr(err, "irq-passthrough=on, but the kernel has no hpkvm "
                    "extension (KVM_CAP_HPKVM is 0)\n"));
    g_assert(strstr(err, "Run a kernel with hpkvm, or use "
                    "irq-passthrough=auto to fall back.\n"));
}

/* Where HLT still exits, hpkvm sets halt polling for dedicated cores. */
static void test_halt_poll_where_hlt_exits(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    g_autoptr(QDict) info = NULL;
    int fd;
    bool has_halt_poll;

    if (skip_without_own_cores()) {
        return;
    }
    fd = open("/dev/kvm", O_RDWR);
    has_halt_poll = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_HALT_POLL) > 0;
    close(fd);
    /* A KVM that cannot disable any exit. */
    info = query_hpkvm_on_fake("supported=0,disable_exits=0", log,
                               "-accel hpkvm," OWN_CORES " " CPU);
    g_assert(!has_exit(info, "hlt"));
    g_assert_cmpint(qdict_haskey(info, "halt-poll-ns"), ==, has_halt_poll);
    if (has_halt_poll) {
        g_assert_cmpint(qdict_get_int(info, "halt-poll-ns"), ==, 200000);
    }
    assert_feature(info, "exclusive-cores", false, "upstream",
                   "KVM_HINTS_REALTIME");
    unlink(log);
}

static void test_info_hpkvm(void)
{
    QTestState *qts;
    g_autofree char *out = NULL;

    if (skip_without_kvm()) {
        return;
    }
    qts = qtest_initf("-S -machine pc -smp 2 -accel hpkvm " CPU);
    out = qtest_hmp(qts, "info hpkvm");
    qtest_quit(qts);
    g_test_message("%s", out);
    g_assert(strstr(out, "hpkvm: in use; kernel hpkvm contract version 0 "
                    "(unpatched KVM)"));
    /* Shared cores: interrupts without exits are not even asked for. */
    g_assert(g_regex_match_simple("^irq-passthrough +auto +no +none +not "
                                  "requested: needs exclusive-cores", out,
                                  G_REGEX_MULTILINE, 0));
    /* Shared cores: the guest is not told they are its own. */
    g_assert(strstr(out, "realtime hint: no"));
    g_assert(strstr(out, "VFIO MSI programmings: 0 direct, 0 left to KVM"));
}

static void test_bad_values(void)
{
    size_t i;

    for (i = 0; i < ARRAY_SIZE(features); i++) {
        g_autofree char *args = g_strdup_printf("-accel hpkvm,%s=maybe",
                                                features[i]);
        g_autofree char *err = NULL;

        g_assert_cmpint(run_qemu(args, &err), ==, 1);
        g_assert(strstr(err, features[i]));
        g_assert(strstr(err, "maybe"));
    }
}

static void test_impossible_combinations(void)
{
    g_autofree char *e1 = NULL, *e2 = NULL, *e3 = NULL, *e4 = NULL;
    g_autofree char *e5 = NULL;

    if (skip_without_kvm()) {
        return;
    }
    g_assert_cmpint(run_qemu("-accel hpkvm,ipi-fastpath=on "
                             "-cpu host,-arch-capabilities,x2apic=off", &e1),
                    ==, 1);
    g_assert(strstr(e1, "ipi-fastpath=on needs x2APIC in the guest: add "
                    "x2apic=on to -cpu"));
    g_assert_cmpint(run_qemu("-accel hpkvm,irq-passthrough=on,"
                             "kernel-irqchip=off " CPU, &e2), ==, 1);
    g_assert(strstr(e2, "irq-passthrough=on needs the in-kernel irqchip"));
    g_assert_cmpint(run_qemu("-accel hpkvm,vfio-irte=on,irq-passthrough=off "
                             CPU, &e3), ==, 1);
    g_assert(strstr(e3, "vfio-irte=on needs irq-passthrough"));
    /* No cores to bind without host-cpus=: "on" cannot be honoured. */
    g_assert_cmpint(run_qemu("-accel hpkvm,exclusive-cores=on " CPU, &e4),
                    ==, 1);
    g_assert(strstr(e4, "exclusive-cores=on needs cores of its own: give "
                    "host-cpus="));
    g_assert_cmpint(run_qemu("-accel hpkvm,irq-passthrough=on " CPU, &e5),
                    ==, 1);
    g_assert(strstr(e5, "irq-passthrough=on needs exclusive-cores, on cores "
                    "of its own: give host-cpus="));
}

static void test_fake_grants_all(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    g_autoptr(QDict) info = NULL;
    g_autofree char *text = NULL, *enable = NULL;
    g_autoptr(QDict) apicv = NULL;
    unsigned want = GRANTABLE;
    size_t i;

    if (skip_without_own_cores()) {
        return;
    }
    info = query_hpkvm_on_fake("supported=0x3f", log,
                               "-accel hpkvm," OWN_CORES " " TIMER_CPU);
    text = read_log(log);
    g_assert_cmpint(qdict_get_int(info, "kernel-version"), ==, 2);
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        assert_feature(info, features[i], true, "patched-kernel",
                       "granted by the kernel");
    }
    enable = g_strdup_printf("HPKVM_ENABLE requested=0x%x required=0x0 "
                             "nr_vcpus=2 granted=0x%x", want, want);
    g_assert(strstr(text, enable));
    g_assert(!strstr(text, "HPKVM_DISABLE"));
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        g_assert(!qdict_get_bool(feature(info, features[i]), "apicv"));
    }

    /* A kernel granting interrupts on APIC virtualization says so. */
    apicv = query_hpkvm_on_fake("supported=0x3f,apicv=0xa", log,
                                "-accel hpkvm," OWN_CORES " " TIMER_CPU);
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        bool on_apicv = !strcmp(features[i], "irq-passthrough") ||
                        !strcmp(features[i], "ipi-fastpath");

        g_assert_cmpint(qdict_get_bool(feature(apicv, features[i]), "apicv"),
                        ==, on_apicv);
        /* Upstream's mechanism, named: AVIC on AMD hosts, APICv else. */
        if (on_apicv) {
            assert_feature(apicv, features[i], true, "upstream",
                           "granted by the kernel, delivered by upstream "
                           "KVM's ");
            g_assert_cmpstr(qdict_get_str(feature(apicv, features[i]),
                                          "delivered-by"), ==,
                            host_is_amd() ? "avic" : "apicv");
        } else {
            g_assert(!qdict_haskey(feature(apicv, features[i]),
                                   "delivered-by"));
        }
    }
    unlink(log);
}

static void test_fake_refuses_under_auto(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    size_t i, j;

    if (skip_without_own_cores()) {
        return;
    }
    /* Each feature in turn refused (EBUSY), the others granted. */
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        g_autofree char *spec = g_strdup_printf("grant=0x%x,refuse=16",
                                                GRANTABLE & ~(1u << i));
        g_autoptr(QDict) info = NULL;

        info = query_hpkvm_on_fake(spec, log, "-accel hpkvm," OWN_CORES " "
                                   TIMER_CPU);
        g_free(read_log(log));
        for (j = 0; j < ARRAY_SIZE(features); j++) {
            if (j == i || (i == 0 && builds_on_exclusive(j))) {
                /*
                 * QEMU binds the vCPU threads itself then; what builds on
                 * exclusive cores is refused with them, for their reason.
                 */
                assert_feature(info, features[j], false,
                               j == 0 ? "upstream" : "none",
                               "refused by the kernel (a host core is not "
                               "exclusively this VM's)");
            } else {
                assert_feature(info, features[j], true, "patched-kernel",
                               "granted");
            }
        }
    }
    unlink(log);
}

static void test_fake_refuses_under_on(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    size_t i;

    if (skip_without_own_cores()) {
        return;
    }
    for (i = 0; i < ARRAY_SIZE(features); i++) {
        g_autofree char *spec = g_strdup_printf("grant=0x%x,refuse=16",
                                                GRANTABLE & ~(1u << i));
        g_autofree char *args = g_strdup_printf("-accel hpkvm,%s,%s=on " CPU,
                                                OWN_CORES, features[i]);
        g_autofree char *required = g_strdup_printf("required=0x%x -> EPERM",
                                                    1u << i);
        g_autofree char *msg = g_strdup_printf(
            "%s=on, but the kernel refused it: a host core is not "
            "exclusively this VM's", features[i]);
        g_autofree char *err = NULL, *text = NULL;

        g_assert_cmpint(run_qemu_on_fake(spec, log, args, &err), ==, 1);
        text = read_log(log);
        /* "on" is required: the kernel grants nothing rather than a part. */
        g_assert(strstr(text, required));
        g_assert(strstr(err, msg));
    }
    unlink(log);
}

static void test_fake_fails_part_way(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    g_autofree char *err = NULL, *text = NULL, *text2 = NULL;
    g_autofree char *undo = g_strdup_printf("HPKVM_DISABLE (granted was 0x%x)",
                                            GRANTABLE);
    g_autoptr(QDict) info = NULL;

    if (skip_without_own_cores()) {
        return;
    }
    /* auto: QEMU undoes the half-applied grants and falls back. */
    info = query_hpkvm_on_fake("enable=5", log,
                               "-accel hpkvm," OWN_CORES " " TIMER_CPU);
    text = read_log(log);
    g_assert(strstr(text, "fails part way"));
    g_assert(strstr(text, undo));
    assert_feature(info, "irq-passthrough", false, "none",
                   "HPKVM_ENABLE failed: Input/output error");

    /* on: the same undo, then QEMU stops with the reason. */
    g_assert_cmpint(run_qemu_on_fake("enable=5", log, "-accel hpkvm,"
                                     OWN_CORES ",irq-passthrough=on " CPU,
                                     &err), ==, 1);
    text2 = read_log(log);
    g_assert(strstr(text2, "HPKVM_DISABLE"));
    g_assert(strstr(err, "irq-passthrough=on, but HPKVM_ENABLE failed"));
    unlink(log);
}

/*
 * A kernel that claims hpkvm but cannot say what it has: auto features
 * fall back as on a kernel without it, on ones stop QEMU; nothing is
 * enabled, so nothing is undone.
 */
static void test_fake_caps_fail(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    g_autofree char *err = NULL;
    g_autofree char *text = NULL;
    g_autoptr(QDict) info = NULL;

    if (skip_without_own_cores()) {
        return;
    }
    info = query_hpkvm_on_fake("caps=5", log,
                               "-accel hpkvm," OWN_CORES " " CPU);
    text = read_log(log);
    g_assert(strstr(text, "HPKVM_GET_CAPS -> fails (errno 5)"));
    g_assert(!strstr(text, "HPKVM_ENABLE"));
    g_assert(!strstr(text, "HPKVM_DISABLE"));
    assert_feature(info, "irq-passthrough", false, "none",
                   "HPKVM_GET_CAPS failed: Input/output error");
    assert_feature(info, "exclusive-cores", false, "upstream",
                   "HPKVM_GET_CAPS failed: Input/output error");

    g_assert_cmpint(run_qemu_on_fake("caps=5", log, "-accel hpkvm,"
                                     OWN_CORES ",irq-passthrough=on " CPU,
                                     &err), ==, 1);
    g_assert(strstr(err, "irq-passthrough=on, but HPKVM_GET_CAPS failed: "
                    "Input/output error, though the kernel reports hpkvm "
                    "(KVM_CAP_HPKVM)\nRun a kernel with hpkvm"));
    unlink(log);
}

/* A process's environment, one variable a line. */
static char *environ_of(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/environ", (int)pid);
    char *env = NULL;
    gsize len, i;

    g_assert(g_file_get_contents(path, &env, &len, NULL));
    for (i = 0; i < len; i++) {
        if (!env[i]) {
            env[i] = '\n';
        }
    }
    return env;
}

/*
 * The fake kernel's variables reach the QEMU run on it and no other
 * process: neither this test nor a QEMU started after it.  Needs no KVM.
 */
static void test_fake_kernel_env_scoped(void)
{
    g_autofree char *log = g_strdup_printf("%s/hpkvm-fake-%d.log",
                                           g_get_tmp_dir(), getpid());
    g_autofree char *faked = NULL, *plain = NULL;
    g_autofree char *err = NULL;
    QTestState *qts;

    qts = qtest_init_on_fake("supported=0x3f", log, "-machine none");
    faked = environ_of(qtest_pid(qts));
    qtest_quit(qts);
    g_assert(strstr(faked, "\nLD_PRELOAD=/"));
    g_assert(strstr(faked, "\nHPKVM_FAKE_KERNEL=supported=0x3f\n"));
    g_assert(strstr(faked, "\nHPKVM_FAKE_KERNEL_LOG="));
    /* run_qemu's way: env(1) found on PATH, QEMU runs. */
    g_assert_cmpint(run_qemu_on_fake("caps=5", log, "-version", &err), ==, 0);

    g_assert_null(g_getenv("LD_PRELOAD"));
    g_assert_null(g_getenv("HPKVM_FAKE_KERNEL"));
    g_assert_null(g_getenv(QEMU_VAR));
    qts = qtest_init("-machine none");
    plain = environ_of(qtest_pid(qts));
    qtest_quit(qts);
    g_assert(!strstr(plain, "LD_PRELOAD"));
    g_assert(!strstr(plain, "HPKVM_FAKE_KERNEL"));
    unlink(log);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    qtest_add_func("/hpkvm/negotiate/unpatched-report",
                   test_unpatched_kernel_report);
    qtest_add_func("/hpkvm/negotiate/unpatched-own-cores",
                   test_unpatched_own_cores);
    qtest_add_func("/hpkvm/negotiate/exclusive-cores-off",
                   test_exclusive_cores_off);
    qtest_add_func("/hpkvm/negotiate/on-needs-patched-kernel",
                   test_on_without_patched_kernel_fails);
    qtest_add_func("/hpkvm/negotiate/halt-poll",
                   test_halt_poll_where_hlt_exits);
    qtest_add_func("/hpkvm/negotiate/info-hpkvm", test_info_hpkvm);
    qtest_add_func("/hpkvm/negotiate/bad-values", test_bad_values);
    qtest_add_func("/hpkvm/negotiate/impossible-combinations",
                   test_impossible_combinations);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/env-scoped",
                   test_fake_kernel_env_scoped);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/grants-all",
                   test_fake_grants_all);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/refuses-auto",
                   test_fake_refuses_under_auto);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/refuses-on",
                   test_fake_refuses_under_on);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/caps-fail",
                   test_fake_caps_fail);
    qtest_add_func("/hpkvm/negotiate/fake-kernel/fails-part-way",
                   test_fake_fails_part_way);
    return g_test_run();
}
