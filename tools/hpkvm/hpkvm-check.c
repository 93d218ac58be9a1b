/*
 * qemu-hpkvm-check: is this host ready for hpkvm, and if not, why
 *
 * The checks of the original system's troubleshooting list, each with a
 * verdict (ok, info, warn, fail) and, where something is missing, the
 * fix: KVM and the kernel's hpkvm extension, IOMMU and interrupt
 * remapping, isolated cores and nohz_full, where NIC interrupts run,
 * hugepages, the CPU frequency governor, the clocksource (a TSC the
 * kernel marked unstable), vhost-net, vhost-user sockets,
 * SR-IOV VFs on vfio-pci, NUMA placement, a cpuset controller, and host
 * changes left by a VM that did not exit.  "fail" is what stops hpkvm
 * from running at all; the exit status is 1 if there is one.  Host paths
 * go through --host-root, as QEMU's own probes do, so it is tested on
 * fake trees.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/sockets.h"
#include "qapi/error.h"
#include "qapi/qapi-types-hpkvm.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "qobject/qlist.h"
#include <getopt.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include "linux/kvm.h"
#include "linux/hpkvm.h"
#include "accel/hpkvm/hpkvm-host.h"
#include "hpkvm-helper-policy.h"
#include "accel/hpkvm/hpkvm-helper-proto.h"
#include "accel/hpkvm/hpkvm-lease.h"
#include "accel/hpkvm/hpkvm-state-dir.h"
#include "net/hpnet/hpnet-probe.h"

#define CPU_ONLINE "/sys/devices/system/cpu/online"

typedef enum Verdict { OK, INFO, WARN, FAIL } Verdict;
static const char *const verdict_names[] = { "ok", "info", "warn", "fail" };

typedef struct Check {
    char *id;
    Verdict verdict;
    char *message;
    char *fix;
} Check;

typedef struct Ctx {
    HpkvmHost host;
    const char *state_dir;
    HpkvmCpuSet cores;          /* --host-cpus, may be empty */
    bool have_cores;
    GPtrArray *sockets;         /* --vhost-user-socket */
    GPtrArray *checks;
    bool arm64;                 /* advice for an arm64 host (--arch) */
} Ctx;

static void G_GNUC_PRINTF(5, 6)
check_add(Ctx *c, const char *id, Verdict v, const char *fix, const char *fmt,
          ...)
{
    Check *k = g_new0(Check, 1);
    va_list ap;

    k->id = g_strdup(id);
    k->verdict = v;
    k->fix = g_strdup(fix);
    va_start(ap, fmt);
    k->message = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_ptr_array_add(c->checks, k);
}

static bool check_opens(Ctx *c, const char *node)
{
    g_autofree char *path = hpkvm_host_path(&c->host, node);
    int fd = qemu_open_old(path, O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        return false;
    }
    close(fd);
    return true;
}

static char *check_read_trimmed(Ctx *c, const char *path)
{
    char *text = NULL;

    if (hpkvm_host_read(&c->host, path, &text) < 0) {
        return NULL;
    }
    return g_strstrip(text);
}

static void check_kvm(Ctx *c)
{
    g_autofree char *path = hpkvm_host_path(&c->host, "/dev/kvm");
    struct hpkvm_caps caps = { 0 };
    int fd, version;

    if (!check_opens(c, "/dev/kvm")) {
        check_add(c, "kvm", FAIL, c->arm64 ?
                  "have the firmware enter the kernel at EL2 (arm64 KVM is "
                  "built in and needs it; dmesg | grep kvm says why not) "
                  "and give QEMU's user read-write access to /dev/kvm" :
                  "load kvm_intel or kvm_amd (enable "
                  "virtualization in the firmware) and give QEMU's user "
                  "read-write access to /dev/kvm", "no usable /dev/kvm");
        return;
    }
    check_add(c, "kvm", OK, NULL, "/dev/kvm opens");
    if (!c->host.real) {
        check_add(c, "hpkvm-kernel", INFO, NULL, "the kernel's hpkvm extension "
                  "is only probed on the real host (--host-root is not /)");
        return;
    }
    fd = qemu_open_old(path, O_RDWR | O_CLOEXEC);
    version = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_HPKVM);
    if (version > 0 && ioctl(fd, HPKVM_GET_CAPS, &caps) == 0) {
        g_autoptr(GString) names = g_string_new("");
        int f;

        /* QAPI's HpkvmFeature order is the contract's bit order. */
        for (f = 0; f < HPKVM_FEATURE__MAX; f++) {
            if (caps.supported & (1ULL << f)) {
                g_string_append_printf(names, "%s%s", names->len ? ", " : "",
                                       HpkvmFeature_str(f));
            }
        }
        check_add(c, "hpkvm-kernel", OK, NULL, "hpkvm contract version %d, "
                  "features 0x%" PRIx64 " (%s)", version,
                  (uint64_t)caps.supported, names->len ? names->str : "none");
    } else {
        check_add(c, "hpkvm-kernel", WARN, "run a kernel with the hpkvm "
                  "extension for exit-less timers, IPIs and interrupts",
                  "the kernel has no hpkvm extension: hpkvm falls back to "
                  "upstream KVM feature by feature (see query-hpkvm)");
    }
    close(fd);
}

/*
 * On arm64, a device's MSIs are translated by the GIC's ITS (no
 * interrupt remapping unit), and reach a running vCPU without an exit as
 * GICv4 vLPIs only where KVM is told to use them: kvm-arm.vgic_v4_enable
 * is off by default in Linux 6.1, and is a boot parameter.
 */
static void check_arm_gic(Ctx *c, const char *irqs)
{
    g_autofree char *cmdline = check_read_trimmed(c, "/proc/cmdline");
    g_auto(GStrv) words = g_strsplit(cmdline ?: "", " ", -1);

    if (!irqs || !strstr(irqs, "ITS-")) {
        check_add(c, "gic-its", WARN, "describe the GIC's ITS in the "
                  "firmware (device tree or ACPI MADT)", "no MSI goes "
                  "through a GIC ITS (no ITS- interrupts): passed-through "
                  "MSIs need one, and GICv4 vLPIs are ITS translations");
    } else {
        check_add(c, "gic-its", OK, NULL, "MSIs go through the GIC's ITS");
    }
    if (!g_strv_contains((const char * const *)words,
                         "kvm-arm.vgic_v4_enable=1")) {
        check_add(c, "gicv4", INFO, "on a GICv4 host, boot with "
                  "kvm-arm.vgic_v4_enable=1", "KVM does not map passed-"
                  "through MSIs as GICv4 vLPIs (kvm-arm.vgic_v4_enable is "
                  "off): each device interrupt exits to the host");
    } else {
        check_add(c, "gicv4", OK, NULL, "KVM maps passed-through MSIs as "
                  "GICv4 vLPIs where the GIC has them "
                  "(kvm-arm.vgic_v4_enable=1)");
    }
}

static void check_iommu(Ctx *c)
{
    g_auto(GStrv) units = hpkvm_host_list(&c->host, "/sys/class/iommu");
    g_autofree char *irqs = check_read_trimmed(c, "/proc/interrupts");

    if (c->arm64) {
        if (!units || !units[0]) {
            check_add(c, "iommu", WARN, "enable the SMMU (SMMUv3) in the "
                      "firmware and describe it (ACPI IORT or device tree)",
                      "no IOMMU: no VFIO, no SR-IOV VF for guests");
        } else {
            check_add(c, "iommu", OK, NULL, "IOMMU %s", units[0]);
        }
        check_arm_gic(c, irqs);
        return;
    }
    if (!units || !units[0]) {
        check_add(c, "iommu", WARN, "enable VT-d or AMD-Vi in the firmware and "
                  "boot with intel_iommu=on or amd_iommu=on", "no IOMMU: no "
                  "VFIO, no SR-IOV VF for guests");
    } else {
        check_add(c, "iommu", OK, NULL, "IOMMU %s", units[0]);
    }
    if (!irqs || !strstr(irqs, "IR-")) {
        check_add(c, "irq-remapping", WARN, "enable interrupt remapping "
                  "(intremap=on; x2APIC in the firmware)", "interrupt "
                  "remapping is not in use (no IR- interrupts): passed-through "
                  "MSIs and direct IRTE programming need it");
    } else {
        check_add(c, "irq-remapping", OK, NULL, "interrupts are remapped");
    }
}

/* The cores QEMU would lease: online, and not every one of them. */
static void check_host_cpus(Ctx *c)
{
    HpkvmCpuSet online, missing, left;
    g_autofree char *fix = NULL, *miss_s = NULL, *online_s = NULL;
    g_autofree char *cores_s = NULL, *left_s = NULL;

    if (!c->have_cores) {
        return;
    }
    if (!hpkvm_host_read_cpus(&c->host, CPU_ONLINE, &online, NULL)) {
        check_add(c, "host-cpus", WARN, NULL, "cannot read %s: the cores are "
                  "not checked", CPU_ONLINE);
        return;
    }
    online_s = hpkvm_cpuset_format(&online);
    hpkvm_cpuset_andnot(&missing, &c->cores, &online);
    if (!hpkvm_cpuset_empty(&missing)) {
        miss_s = hpkvm_cpuset_format(&missing);
        fix = g_strdup_printf("name online cores (online: %s) in "
                              "host-cpus=, or bring them online (echo 1 > "
                              "/sys/devices/system/cpu/cpuN/online)",
                              online_s);
        check_add(c, "host-cpus", FAIL, fix, "cores %s are not online", miss_s);
        return;
    }
    hpkvm_cpuset_andnot(&left, &online, &c->cores);
    if (hpkvm_cpuset_empty(&left)) {
        check_add(c, "host-cpus", FAIL, "leave at least one online core to the "
                  "host: QEMU's other threads and the host's housekeeping run "
                  "there", "host-cpus= names every online core (%s)", online_s);
        return;
    }
    cores_s = hpkvm_cpuset_format(&c->cores);
    left_s = hpkvm_cpuset_format(&left);
    check_add(c, "host-cpus", OK, NULL,
              "cores %s are online; %s stay the host's", cores_s, left_s);
}

/*
 * hpkvm's reference KVM binds vCPUs only to the cores its hpkvm_cores
 * parameter names (none unless the host's administrator opted them in):
 * a leased core outside is one whose vCPU the kernel will not bind.
 */
/* Where an operator sets kvm.hpkvm_cores: a format for the fix's tail. */
#define CHECK_KVM_CORES_WHERE "kvm.hpkvm_cores: in " HPKVM_HOST_KVM_CORES \
    " as root, and for good on the kernel command line (or in " \
    "/etc/modprobe.d where KVM is a module)"

static void check_kvm_cores(Ctx *c)
{
    g_autofree char *list = NULL, *miss_s = NULL, *fix = NULL;
    HpkvmCpuSet bindable, missing;

    if (!hpkvm_host_read_cpus(&c->host, HPKVM_HOST_KVM_CORES, &bindable,
                              NULL)) {
        check_add(c, "kvm-cores", INFO, NULL, "no kvm.hpkvm_cores that this "
                  "tool can read: the kernel is not hpkvm's reference KVM "
                  "(its own policy decides which cores it binds vCPUs to), "
                  "or the host has more CPUs than hpkvm handles");
        return;
    }
    list = hpkvm_cpuset_format(&bindable);
    if (!*list) {
        g_free(list);
        list = g_strdup("none");
    }
    if (!c->have_cores) {
        g_autofree char *opt_in = NULL;

        if (hpkvm_cpuset_empty(&bindable)) {
            opt_in = g_strdup("to let VMs have cores of their own, name "
                              "them in " CHECK_KVM_CORES_WHERE);
        }
        check_add(c, "kvm-cores", INFO, opt_in, "the kernel binds vCPUs to "
                  "cores %s (kvm.hpkvm_cores)", list);
        return;
    }
    hpkvm_cpuset_andnot(&missing, &c->cores, &bindable);
    if (hpkvm_cpuset_empty(&missing)) {
        check_add(c, "kvm-cores", OK, NULL, "the kernel binds vCPUs to the "
                  "cores (kvm.hpkvm_cores: %s)", list);
        return;
    }
    miss_s = hpkvm_cpuset_format(&missing);
    fix = g_strdup_printf("add %s to " CHECK_KVM_CORES_WHERE, miss_s);
    check_add(c, "kvm-cores", WARN, fix, "the kernel does not bind vCPUs to "
              "%s (kvm.hpkvm_cores: %s): exclusive-cores=auto goes without "
              "it, exclusive-cores=on does not start", miss_s, list);
}

static void check_cpus_file(Ctx *c, const char *name, HpkvmCpuSet *set)
{
    g_autofree char *path = g_strdup_printf("/sys/devices/system/cpu/%s",
                                            name);
    g_autofree char *text = check_read_trimmed(c, path);

    if (!text || !hpkvm_cpuset_parse(text, set, path, NULL)) {
        hpkvm_cpuset_clear(set);        /* "(null)": none */
    }
}

static void check_isolation(Ctx *c)
{
    HpkvmCpuSet isol, nohz, both, missing;
    g_autofree char *isol_s = NULL, *nohz_s = NULL, *miss_s = NULL;
    g_autofree char *fix = NULL;

    check_cpus_file(c, "isolated", &isol);
    check_cpus_file(c, "nohz_full", &nohz);
    isol_s = hpkvm_cpuset_format(&isol);
    nohz_s = hpkvm_cpuset_format(&nohz);
    if (!c->have_cores) {
        check_add(c, "isolated-cores", INFO, NULL,
                  "isolcpus: %s; nohz_full: %s", *isol_s ? isol_s : "none",
                  *nohz_s ? nohz_s : "none");
        return;
    }
    bitmap_and(both.bits, isol.bits, nohz.bits, HPKVM_MAX_HOST_CPUS);
    hpkvm_cpuset_andnot(&missing, &c->cores, &both);
    if (hpkvm_cpuset_empty(&missing)) {
        check_add(c, "isolated-cores", OK, NULL, "the cores are in isolcpus= "
                  "and nohz_full=");
        return;
    }
    miss_s = hpkvm_cpuset_format(&missing);
    fix = g_strdup_printf("add the cores to the kernel command line: "
                          "isolcpus=%s nohz_full=%s (without them hpkvm's "
                          "dynamic isolation moves tasks and IRQs, but the "
                          "tick and per-CPU threads stay)", miss_s, miss_s);
    check_add(c, "isolated-cores", WARN, fix, "cores %s are not all in "
              "isolcpus= and nohz_full=", miss_s);
}

static void check_nic_irqs(Ctx *c)
{
    g_auto(GStrv) nics = hpkvm_host_list(&c->host, "/sys/class/net");
    int i, j, bad = 0;

    for (i = 0; nics && nics[i]; i++) {
        g_autofree char *dir = g_strdup_printf("/sys/class/net/%s/device/"
                                               "msi_irqs", nics[i]);
        g_auto(GStrv) irqs = hpkvm_host_list(&c->host, dir);

        if (!irqs || !irqs[0]) {
            /* A virtio NIC's device is virtioN; its PCI parent has them. */
            g_free(dir);
            g_strfreev(irqs);
            dir = g_strdup_printf("/sys/class/net/%s/device/../msi_irqs",
                                  nics[i]);
            irqs = hpkvm_host_list(&c->host, dir);
        }

        for (j = 0; irqs && irqs[j] && c->have_cores; j++) {
            g_autofree char *path = g_strdup_printf(
                "/proc/irq/%s/smp_affinity_list", irqs[j]);
            HpkvmCpuSet aff;
            g_autofree char *fix = NULL;

            if (!hpkvm_host_read_cpus(&c->host, path, &aff, NULL) ||
                !hpkvm_cpuset_intersects(&aff, &c->cores)) {
                continue;
            }
            fix = g_strdup_printf("echo HOUSEKEEPING-CORES > %s (or let "
                                  "dynamic-isolation move it; stop "
                                  "irqbalance from moving it back)", path);
            check_add(c, "nic-irq-affinity", WARN, fix,
                      "IRQ %s of %s may run on " "the VMs' cores", irqs[j],
                      nics[i]);
            bad++;
        }
    }
    if (!bad) {
        check_add(c, "nic-irq-affinity", c->have_cores ? OK : INFO, NULL,
                  c->have_cores ? "no NIC interrupt on the VMs' cores" :
                  "give --host-cpus= to check where NIC interrupts run");
    }
}

static void check_hugepages(Ctx *c)
{
    const char *dir = "/sys/kernel/mm/hugepages";
    g_auto(GStrv) sizes = hpkvm_host_list(&c->host, dir);
    uint64_t total = 0;
    int i;

    for (i = 0; sizes && sizes[i]; i++) {
        g_autofree char *path = g_strdup_printf("%s/%s/nr_hugepages", dir,
                                                sizes[i]);
        g_autofree char *text = check_read_trimmed(c, path);
        uint64_t n = 0;

        if (text && qemu_strtou64(text, NULL, 10, &n) == 0) {
            total += n;
        }
    }
    if (total) {
        check_add(c, "hugepages", OK, NULL, "%" PRIu64 " huge pages reserved",
                  total);
    } else {
        check_add(c, "hugepages", WARN, "reserve them: echo N > /sys/kernel/mm/"
                  "hugepages/hugepages-1048576kB/nr_hugepages (or the 2048kB "
                  "size), and back guests with memory-backend-file,mem-path="
                  "/dev/hugepages,share=on", "no huge pages reserved: guest "
                  "memory and vhost-user peers use 4 KiB pages");
    }
}

static void check_governor(Ctx *c)
{
    g_auto(GStrv) cpus = hpkvm_host_list(&c->host, "/sys/devices/system/cpu");
    int i, seen = 0, bad = 0;

    for (i = 0; cpus && cpus[i]; i++) {
        g_autofree char *path = NULL, *gov = NULL, *fix = NULL;
        unsigned n;

        if (!g_str_has_prefix(cpus[i], "cpu") ||
            qemu_strtoui(cpus[i] + 3, NULL, 10, &n) < 0 ||
            (c->have_cores && !hpkvm_cpuset_has(&c->cores, n))) {
            continue;
        }
        path = g_strdup_printf("/sys/devices/system/cpu/%s/cpufreq/"
                               "scaling_governor", cpus[i]);
        gov = check_read_trimmed(c, path);
        if (!gov) {
            continue;
        }
        seen++;
        if (strcmp(gov, "performance")) {
            fix = g_strdup_printf("echo performance > %s", path);
            check_add(c, "cpufreq-governor", WARN, fix, "core %u runs the %s "
                      "governor: its clock and latency vary", n, gov);
            bad++;
        }
    }
    if (!seen) {
        check_add(c, "cpufreq-governor", INFO, NULL, "no cpufreq (a VM, or a "
                  "fixed frequency)");
    } else if (!bad) {
        check_add(c, "cpufreq-governor", OK, NULL, "performance governor");
    }
}

/*
 * A kernel that marked the TSC unstable keeps time with another clock,
 * and KVM then adjusts each guest's TSC whenever a vCPU moves between
 * cores: guest TSC-deadline timers and TSC readings lose their footing.
 */
static void check_clocksource(Ctx *c)
{
    g_autofree char *source = check_read_trimmed(c, "/sys/devices/system/"
                                                 "clocksource/clocksource0/"
                                                 "current_clocksource");

    if (!source) {
        check_add(c, "clocksource", INFO, NULL, "no clocksource in sysfs");
    } else if (c->arm64) {
        /* The guest's generic timer is the host's counter, offset. */
        if (!strcmp(source, "arch_sys_counter")) {
            check_add(c, "clocksource", OK, NULL, "the kernel keeps time "
                      "with the architected counter");
        } else {
            check_add(c, "clocksource", WARN, "see why with 'dmesg | grep "
                      "-i arch_timer'; the firmware must describe the "
                      "architected timer", "the kernel keeps time with %s, "
                      "not the architected counter (arch_sys_counter), "
                      "which guests' generic timers count", source);
        }
    } else if (!strcmp(source, "tsc")) {
        check_add(c, "clocksource", OK, NULL, "the kernel keeps time with the "
                  "TSC");
    } else {
        check_add(c, "clocksource", WARN, "see why with 'dmesg | grep -i tsc'; "
            "only if the TSCs are in fact synchronized (constant_tsc, one "
            "clock domain), boot with tsc=reliable", "the kernel keeps "
            "time with %s, not the TSC: KVM adjusts guest TSCs when a vCPU "
            "moves, and guest TSC-deadline timers drift", source);
    }
}

/*
 * Does a socket listen on @path, as /proc/net/unix of this network
 * namespace lists it ("Num RefCount Protocol Flags Type St Inode Path";
 * __SO_ACCEPTCON in Flags)?  Looking, unlike connecting, cannot take the
 * one session of a peer that serves only one.
 */
static bool check_unix_listener(Ctx *c, const char *path)
{
    g_autofree char *table = NULL;
    g_auto(GStrv) lines = NULL;
    int i;

    if (hpkvm_host_read(&c->host, "/proc/net/unix", &table) < 0) {
        return false;
    }
    lines = g_strsplit(table, "\n", -1);
    for (i = 1; lines[i]; i++) {
        g_auto(GStrv) f = g_strsplit_set(lines[i], " ", -1);
        const char *flags_field = NULL, *name = NULL;
        unsigned long flags;
        int n = 0, j;

        /* Fields 3 and 7; split_set() leaves "" between blanks. */
        for (j = 0; f[j]; j++) {
            if (*f[j]) {
                flags_field = n == 3 ? f[j] : flags_field;
                name = n == 7 ? f[j] : name;
                n++;
            }
        }
        if (name && !strcmp(name, path) &&
            !qemu_strtoul(flags_field, NULL, 16, &flags) &&
            (flags & 0x10000)) {
            return true;
        }
    }
    return false;
}

static void check_vhost(Ctx *c)
{
    int i;

    if (check_opens(c, "/dev/vhost-net")) {
        check_add(c, "vhost-net", OK, NULL, "/dev/vhost-net opens");
    } else {
        check_add(c, "vhost-net", WARN, "modprobe vhost_net, and give QEMU's "
                  "user access to /dev/vhost-net", "no usable /dev/vhost-net: "
                  "hpnet's throughput choice falls back to QEMU's virtio-net");
    }
    for (i = 0; i < c->sockets->len; i++) {
        const char *sock = g_ptr_array_index(c->sockets, i);
        g_autofree char *path = hpkvm_host_path(&c->host, sock);
        struct stat st;

        if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
            check_unix_listener(c, sock)) {
            check_add(c, "vhost-user", OK, NULL, "a peer listens on %s", sock);
        } else if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
            check_add(c, "vhost-user", WARN, "start the vhost-user peer (a "
                "peer that exited leaves its socket file behind)", "%s is "
                "a socket, but nothing in this network namespace listens "
                "on it (a peer in another one is not seen from here)",
                sock);
        } else {
            check_add(c, "vhost-user", FAIL, "start the vhost-user peer "
                      "(OVS-DPDK, testpmd) on that socket first",
                      "%s is not a socket", sock);
        }
    }
}

static void check_sriov(Ctx *c)
{
    const char *dir = "/sys/bus/pci/devices";
    g_auto(GStrv) devs = hpkvm_host_list(&c->host, dir);
    int i, pfs = 0;

    for (i = 0; devs && devs[i]; i++) {
        g_autofree char *path = g_strdup_printf("%s/%s/sriov_numvfs", dir,
                                                devs[i]);
        g_autofree char *text = check_read_trimmed(c, path);
        g_autofree char *why = NULL, *vf = NULL, *fix = NULL;

        if (!text) {
            continue;
        }
        pfs++;
        vf = hpnet_probe_pf(c->host.root, devs[i], &why);
        if (vf) {
            check_add(c, "sriov", OK, NULL, "%s", why);
        } else {
            fix = g_strdup_printf("create VFs (echo N > %s%s), bind them "
                                  "to vfio-pci (driver_override)", dir,
                                  strchr(path + strlen(dir), '/'));
            check_add(c, "sriov", WARN, fix, "%s", why);
        }
    }
    if (!pfs) {
        check_add(c, "sriov", INFO, NULL, "no SR-IOV capable device");
    }
}

static void check_numa(Ctx *c)
{
    const char *dir = "/sys/devices/system/node";
    g_auto(GStrv) nodes = hpkvm_host_list(&c->host, dir);
    int i, spanned = 0;

    if (!c->have_cores) {
        check_add(c, "numa", INFO, NULL, "give --host-cpus= to check NUMA "
                  "placement");
        return;
    }
    for (i = 0; nodes && nodes[i]; i++) {
        g_autofree char *path = g_strdup_printf("%s/%s/cpulist", dir,
                                                nodes[i]);
        HpkvmCpuSet node;

        if (g_str_has_prefix(nodes[i], "node") &&
            hpkvm_host_read_cpus(&c->host, path, &node, NULL) &&
            hpkvm_cpuset_intersects(&node, &c->cores)) {
            spanned++;
        }
    }
    if (spanned > 1) {
        check_add(c, "numa", WARN, "choose host-cpus= within one NUMA "
                  "node, the one of the guest's memory and NIC",
                  "the cores span %d NUMA nodes", spanned);
    } else {
        check_add(c, "numa", OK, NULL, "the cores are in one NUMA node");
    }
}

/* QEMU asks qemu-hpkvm-helper for host-cpus=: is it there, who may? */
static void check_helper(Ctx *c)
{
    g_autofree char *sock = hpkvm_host_path(&c->host, HPKVM_HELPER_SOCKET);
    g_autofree char *policy = hpkvm_host_path(&c->host, HPKVM_HELPER_POLICY);
    g_autoptr(HpkvmHelperPolicy) p = NULL;
    g_autoptr(GArray) groups = g_array_new(false, false, sizeof(gid_t));
    HpkvmPeer me = { .pid = getpid(), .uid = getuid(), .gid = getgid(),
                     .groups = groups };
    Error *err = NULL;
    gid_t list[256];
    int fd, n;

    fd = unix_connect(sock, NULL);
    if (fd < 0) {
        /* Needed for host-cpus= only: a shared-core VM runs without. */
        check_add(c, "helper", c->have_cores ? FAIL : WARN, "systemctl enable "
                  "--now qemu-hpkvm-helper.socket (see "
                  "docs/system/hpkvm-helper.rst)",
                  "qemu-hpkvm-helper does not answer on %s: QEMU refuses "
                  "host-cpus= without it", HPKVM_HELPER_SOCKET);
    } else {
        close(fd);
        check_add(c, "helper", OK, NULL, "qemu-hpkvm-helper answers on %s",
                  HPKVM_HELPER_SOCKET);
    }
    p = hpkvm_helper_policy_load(policy, &err);
    if (!p) {
        check_add(c, "helper-policy", FAIL, "fix the file; the helper does not "
                  "start with it", "%s", error_get_pretty(err));
        error_free(err);
        return;
    }
    if (!c->have_cores || geteuid() == 0) {
        check_add(c, "helper-policy", INFO, NULL, "%s read; root may lease any "
                  "core: run qemu-hpkvm-check as QEMU's user with --host-cpus= "
                  "to check that user", HPKVM_HELPER_POLICY);
        return;
    }
    n = getgroups(ARRAY_SIZE(list), list);
    if (n > 0) {
        g_array_append_vals(groups, list, n);
    }
    if (hpkvm_helper_policy_allows(p, &me, &c->cores, &err)) {
        check_add(c, "helper-policy", OK, NULL, "uid %u may lease the cores",
                  (unsigned)me.uid);
    } else {
        check_add(c, "helper-policy", FAIL, "add the allow line to the policy",
                  "%s", error_get_pretty(err));
        error_free(err);
    }
}

static void check_leftovers(Ctx *c)
{
    g_autofree char *journal = g_strconcat(c->state_dir, "/host.journal",
                                           NULL);
    g_autofree char *mounts = check_read_trimmed(c, "/proc/mounts");
    g_autofree HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    g_autofree char *leases = g_strconcat(c->state_dir, "/leases", NULL);
    g_autofree char *dir = hpkvm_host_path(&c->host, c->state_dir);
    Error *err = NULL;
    bool trusted;
    struct stat st;

    if (mounts && (strstr(mounts, "cpuset") || strstr(mounts, "cgroup2"))) {
        check_add(c, "cgroup-cpuset", OK, NULL,
                  "a cpuset controller is mounted");
    } else {
        check_add(c, "cgroup-cpuset", WARN, "mount the cgroup v2 hierarchy (or "
            "the v1 cpuset one)", "no cpuset controller: isolation narrows "
            "each task's affinity, and tasks that set their own are not "
            "kept off the VMs' cores");
    }
    if (stat(dir, &st) < 0 && errno == ENOENT) {
        check_add(c, "host-changes", OK, NULL, "no hpkvm VM has run: %s does "
                  "not exist", c->state_dir);
        return;
    }
    if (st.st_uid != geteuid() && geteuid() != 0) {
        /* hpkvm's own (root's) and closed to others, as it must be. */
        check_add(c, "host-changes", INFO, "run qemu-hpkvm-check as root "
                  "to see them", "the leases and the journal in %s belong "
                  "to uid %u: this user cannot read them", c->state_dir,
                  (unsigned)st.st_uid);
        return;
    }
    /*
     * Looking changes nothing: without a leases directory there is no
     * lease, and only the state directory itself is checked.
     */
    if (hpkvm_host_exists(&c->host, leases)) {
        trusted = hpkvm_leases_scan(&c->host, c->state_dir, map, &err);
    } else {
        int fd = hpkvm_state_dir_open(&c->host, c->state_dir, NULL, &err);

        trusted = fd >= 0;
        if (trusted) {
            close(fd);
        }
    }
    if (!trusted) {
        check_add(c, "host-changes", WARN, "let hpkvm recreate it: remove it "
                  "while no hpkvm VM runs", "the state directory is not "
                  "trusted: %s", error_get_pretty(err));
        error_free(err);
        return;
    }
    if (hpkvm_host_exists(&c->host, journal) &&
        hpkvm_cpuset_empty(&map->leased)) {
        check_add(c, "host-changes", WARN, "run qemu-hpkvm-recover (or "
                  "start an hpkvm VM, which does the same)",
                  "%s holds host changes of hpkvm VMs that are gone", journal);
    } else {
        g_autofree char *leased = hpkvm_cpuset_format(&map->leased);

        check_add(c, "host-changes", OK, NULL,
                  "cores leased by running VMs: %s", *leased ? leased : "none");
    }
}

static void check_print_human(Ctx *c)
{
    int i;

    for (i = 0; i < c->checks->len; i++) {
        Check *k = g_ptr_array_index(c->checks, i);

        printf("[%-4s] %s: %s\n", verdict_names[k->verdict], k->id,
               k->message);
        if (k->fix) {
            printf("       fix: %s\n", k->fix);
        }
    }
}

/* QEMU's JSON writer: paths and names in any bytes make valid JSON. */
static void check_print_json(Ctx *c, bool ready)
{
    g_autoptr(QDict) out = qdict_new();
    g_autoptr(GString) json = NULL;
    QList *checks = qlist_new();
    int i;

    for (i = 0; i < c->checks->len; i++) {
        Check *k = g_ptr_array_index(c->checks, i);
        QDict *check = qdict_new();

        qdict_put_str(check, "id", k->id);
        qdict_put_str(check, "verdict", verdict_names[k->verdict]);
        qdict_put_str(check, "message", k->message);
        if (k->fix) {
            qdict_put_str(check, "fix", k->fix);
        }
        qlist_append(checks, check);
    }
    qdict_put_bool(out, "ready", ready);
    qdict_put(out, "checks", checks);
    json = qobject_to_json_pretty(QOBJECT(out), true);
    printf("%s\n", json->str);
}

static void check_usage(const char *name)
{
    printf("Usage: %s [--host-cpus=LIST] [--vhost-user-socket=PATH]... "
           "[--json]\n"
           "          [--host-root=DIR] [--state-dir=DIR] "
           "[--arch=x86_64|aarch64]\n"
           "Tell whether this host is ready for hpkvm, and what to fix.\n"
           "Exit status 1 if something stops hpkvm from running.\n", name);
}

int main(int argc, char **argv)
{
    enum { OPT_HOST_ROOT = 256, OPT_STATE_DIR, OPT_HOST_CPUS,
           OPT_VHOST_USER_SOCKET, OPT_JSON, OPT_ARCH };
    static const struct option options[] = {
        { "host-root", required_argument, NULL, OPT_HOST_ROOT },
        { "state-dir", required_argument, NULL, OPT_STATE_DIR },
        { "host-cpus", required_argument, NULL, OPT_HOST_CPUS },
        { "vhost-user-socket", required_argument, NULL,
          OPT_VHOST_USER_SOCKET },
        { "json", no_argument, NULL, OPT_JSON },
        { "arch", required_argument, NULL, OPT_ARCH },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    Ctx c = { .state_dir = "/run/hpkvm" };
    const char *root = "/";
    bool json = false, ready = true;
    Error *err = NULL;
    struct utsname uts;
    int i, opt;

    error_init(argv[0]);
    /* Advice for this machine's architecture unless --arch says. */
    c.arm64 = uname(&uts) == 0 && !strcmp(uts.machine, "aarch64");
    c.checks = g_ptr_array_new();
    c.sockets = g_ptr_array_new();
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_HOST_ROOT:
            root = optarg;
            break;
        case OPT_STATE_DIR:
            c.state_dir = optarg;
            break;
        case OPT_HOST_CPUS:
            if (!hpkvm_cpuset_parse(optarg, &c.cores, "--host-cpus", &err)) {
                error_report_err(err);
                return 2;
            }
            c.have_cores = !hpkvm_cpuset_empty(&c.cores);
            break;
        case OPT_VHOST_USER_SOCKET:
            g_ptr_array_add(c.sockets, optarg);
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_ARCH:
            if (strcmp(optarg, "x86_64") && strcmp(optarg, "aarch64")) {
                error_report("--arch=%s: x86_64 or aarch64", optarg);
                return 2;
            }
            c.arm64 = !strcmp(optarg, "aarch64");
            break;
        case 'h':
            check_usage(argv[0]);
            return 0;
        default:
            /* getopt_long() said which option */
            error_report("see --help");
            return 2;
        }
    }
    if (optind < argc) {
        error_report("unexpected argument '%s' (see --help)", argv[optind]);
        return 2;
    }
    hpkvm_host_init(&c.host, root);

    check_host_cpus(&c);
    check_kvm(&c);
    check_kvm_cores(&c);
    check_iommu(&c);
    check_isolation(&c);
    check_nic_irqs(&c);
    check_hugepages(&c);
    check_governor(&c);
    check_clocksource(&c);
    check_vhost(&c);
    check_sriov(&c);
    check_numa(&c);
    check_helper(&c);
    check_leftovers(&c);

    for (i = 0; i < c.checks->len; i++) {
        ready &= ((Check *)g_ptr_array_index(c.checks, i))->verdict != FAIL;
    }
    if (json) {
        check_print_json(&c, ready);
    } else {
        check_print_human(&c);
        printf("%s\n", ready ? "ready for hpkvm" :
               "NOT ready for hpkvm: fix the [fail] items");
    }
    return ready ? 0 : 1;
}
