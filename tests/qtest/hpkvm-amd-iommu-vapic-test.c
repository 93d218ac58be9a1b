/*
 * qtests of the AMD IOMMU's guest virtual APIC mode (patches/0018)
 *
 * With amd-iommu,vapic=on (TCG only), a 128-bit IRTE in guest mode makes
 * a device's MSI set its vector in a vCPU's AVIC backing page instead of
 * reaching a local APIC; for a vCPU that does not run (IsRun clear) the
 * IOMMU also appends the IRTE's GATag to its GA log, where Linux's
 * amd_iommu driver finds which vCPU to wake.  The nested test host runs
 * this end to end (our-kvm-grants-vfio-irte-...), but a full GA log is
 * hard to reach there: these tests drive the IOMMU's registers and an
 * edu device's MSI directly, the log's overflow and restart included.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "libqtest.h"
#include "libqos/pci-pc.h"
#include "hw/i386/amd_iommu.h"
#include "hw/pci/pci_regs.h"

/* Guest-physical layout of what the tests put in RAM. */
#define DEVTAB_ADDR         0x100000
#define IRT_ADDR            0x110000
#define BACKING_PAGE_ADDR   0x120000
#define GALOG_ADDR          0x130000
#define GALOG_TAIL_ADDR     0x140000

/* GALogLen 1000b: 512 entries; the IOMMU stops with one slot free. */
#define GALOG_LEN_CODE      8ULL
#define GALOG_ENTRIES       512
#define GALOG_BYTES         (GALOG_ENTRIES * AMDVI_GALOG_ENTRY_SIZE)

#define EDU_DEVFN           QPCI_DEVFN(4, 0)
#define EDU_RAISE_IRQ       0x60

#define VAPIC_VECTOR        0x44
#define VAPIC_GA_TAG        0x00c0ffeeU
#define VAPIC_DEST          0

#define CONTROL_VAPIC (AMDVI_MMIO_CONTROL_AMDVIEN | \
                       AMDVI_MMIO_CONTROL_GAEN | \
                       ((uint64_t)AMDVI_MMIO_CONTROL_GAMEN_VAPIC << \
                        AMDVI_MMIO_CONTROL_GAMEN_SHIFT) | \
                       AMDVI_MMIO_CONTROL_GALOGEN | \
                       AMDVI_MMIO_CONTROL_GAINTEN)

typedef struct VapicTest {
    QTestState *qts;
    QPCIBus *bus;
    QPCIDevice *edu;
    QPCIBar bar;
    uint64_t control;
} VapicTest;

static uint64_t vapic_reg(VapicTest *t, uint64_t offset)
{
    return qtest_readq(t->qts, AMDVI_BASE_ADDR + offset);
}

static void vapic_set_reg(VapicTest *t, uint64_t offset, uint64_t val)
{
    qtest_writeq(t->qts, AMDVI_BASE_ADDR + offset, val);
}

static void vapic_set_control(VapicTest *t, uint64_t control)
{
    t->control = control;
    vapic_set_reg(t, AMDVI_MMIO_CONTROL, control);
}

/* The edu device's MSI, remapped through IRTE 0 of its device's table. */
static void vapic_setup_edu(VapicTest *t)
{
    uint8_t msi;
    uint16_t flags;

    t->bus = qpci_new_pc(t->qts, NULL);
    t->edu = qpci_device_find(t->bus, EDU_DEVFN);
    g_assert(t->edu);
    qpci_device_enable(t->edu);
    t->bar = qpci_iomap(t->edu, 0, NULL);

    msi = qpci_find_capability(t->edu, PCI_CAP_ID_MSI, 0);
    g_assert(msi);
    flags = qpci_config_readw(t->edu, msi + PCI_MSI_FLAGS);
    g_assert(flags & PCI_MSI_FLAGS_64BIT);
    qpci_config_writel(t->edu, msi + PCI_MSI_ADDRESS_LO, AMDVI_INT_ADDR_FIRST);
    qpci_config_writel(t->edu, msi + PCI_MSI_ADDRESS_HI, 0);
    /* IRTE index 0, fixed delivery (data bits 10:8) */
    qpci_config_writew(t->edu, msi + PCI_MSI_DATA_64, 0);
    qpci_config_writew(t->edu, msi + PCI_MSI_FLAGS,
                       flags | PCI_MSI_FLAGS_ENABLE);
}

/* A guest mode IRTE for the edu device, posting to BACKING_PAGE_ADDR. */
static void vapic_set_irte(VapicTest *t, bool is_run)
{
    uint64_t irte[2] = {
        1 |                                     /* RemapEn */
        (1ULL << 2) |                           /* GALogIntr */
        ((uint64_t)is_run << 6) |               /* IsRun */
        (1ULL << 7) |                           /* GuestMode */
        ((uint64_t)VAPIC_DEST << 8) |
        ((uint64_t)VAPIC_GA_TAG << 32),
        VAPIC_VECTOR | BACKING_PAGE_ADDR,       /* vector, GA root ptr */
    };

    irte[0] = cpu_to_le64(irte[0]);
    irte[1] = cpu_to_le64(irte[1]);
    qtest_memwrite(t->qts, IRT_ADDR, irte, sizeof(irte));
}

static VapicTest *vapic_start(const char *vapic, bool is_run)
{
    VapicTest *t = g_new0(VapicTest, 1);
    uint16_t devid = EDU_DEVFN;     /* bus 0 */
    uint64_t dte[4] = {
        0, 0,
        /* IV, IntTabLen 0 (one entry), the table, IntCtl: remapped */
        AMDVI_IR_REMAP_ENABLE | IRT_ADDR |
        ((uint64_t)AMDVI_IR_INTCTL_REMAP << AMDVI_IR_INTCTL_SHIFT),
        0,
    };
    int i;

    t->qts = qtest_initf("-M q35 -accel tcg -S "
                         "-device amd-iommu,intremap=on,vapic=%s "
                         "-device edu,addr=04.0", vapic);
    vapic_setup_edu(t);

    for (i = 0; i < ARRAY_SIZE(dte); i++) {
        dte[i] = cpu_to_le64(dte[i]);
    }
    qtest_memwrite(t->qts, DEVTAB_ADDR + devid * sizeof(dte), dte,
                   sizeof(dte));
    vapic_set_irte(t, is_run);
    qtest_memset(t->qts, BACKING_PAGE_ADDR, 0, 0x1000);
    qtest_memset(t->qts, GALOG_ADDR, 0, GALOG_BYTES);
    qtest_writeq(t->qts, GALOG_TAIL_ADDR, ~0ULL);

    /* Device table size 0: one 4 KiB page, devids 0-127 */
    vapic_set_reg(t, AMDVI_MMIO_DEVICE_TABLE, DEVTAB_ADDR);
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_BASE,
                  GALOG_ADDR | (GALOG_LEN_CODE << AMDVI_MMIO_GALOG_SIZE_SHIFT));
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_TAIL_ADDR, GALOG_TAIL_ADDR);
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_HEAD, 0);
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_TAIL, 0);
    vapic_set_control(t, CONTROL_VAPIC);
    return t;
}

static void vapic_end(VapicTest *t)
{
    qpci_iounmap(t->edu, t->bar);
    g_free(t->edu);
    qpci_free_pc(t->bus);
    qtest_quit(t->qts);
    g_free(t);
}

static void vapic_send_msi(VapicTest *t)
{
    qpci_io_writel(t->edu, t->bar, EDU_RAISE_IRQ, 1);
}

static bool vapic_irr_has(VapicTest *t, int vector)
{
    uint32_t irr = qtest_readl(t->qts, BACKING_PAGE_ADDR + AMDVI_VAPIC_IRR +
                               (vector / 32) * 0x10);

    return irr & (1U << (vector % 32));
}

static uint64_t vapic_galog_entry(VapicTest *t, uint32_t offset)
{
    return qtest_readq(t->qts, GALOG_ADDR + offset);
}

static uint64_t vapic_status(VapicTest *t)
{
    return vapic_reg(t, AMDVI_MMIO_STATUS);
}

/* IsRun: the vector is in the backing page's IRR, nothing is logged. */
static void test_vapic_posts_to_a_running_vcpu(void)
{
    VapicTest *t = vapic_start("on", true);

    g_assert(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_RUN);
    g_assert_false(vapic_irr_has(t, VAPIC_VECTOR));
    vapic_send_msi(t);
    g_assert(vapic_irr_has(t, VAPIC_VECTOR));
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==, 0);
    g_assert_cmphex(vapic_galog_entry(t, 0), ==, 0);
    g_assert_false(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_INT);
    vapic_end(t);
}

/*
 * IsRun clear: the vector is in the IRR and the GATag in the log, whose
 * tail the IOMMU writes to its register and to the tail address; GAInt
 * is set, and cleared by writing it back (write 1 to clear).
 */
static void test_vapic_logs_a_sleeping_vcpu(void)
{
    VapicTest *t = vapic_start("on", false);
    uint64_t entry = AMDVI_GALOG_GUEST_NR | VAPIC_GA_TAG;

    vapic_send_msi(t);
    g_assert(vapic_irr_has(t, VAPIC_VECTOR));
    g_assert_cmphex(vapic_galog_entry(t, 0), ==, entry);
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==,
                    AMDVI_GALOG_ENTRY_SIZE);
    g_assert_cmphex(qtest_readq(t->qts, GALOG_TAIL_ADDR), ==,
                    AMDVI_GALOG_ENTRY_SIZE);
    g_assert(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_INT);

    /* GALogRun is read-only: writing 0 to it leaves the log running. */
    vapic_set_reg(t, AMDVI_MMIO_STATUS, AMDVI_MMIO_STATUS_GALOG_INT);
    g_assert_cmphex(vapic_status(t) & (AMDVI_MMIO_STATUS_GALOG_INT |
                                       AMDVI_MMIO_STATUS_GALOG_RUN), ==,
                    AMDVI_MMIO_STATUS_GALOG_RUN);

    vapic_send_msi(t);
    g_assert_cmphex(vapic_galog_entry(t, AMDVI_GALOG_ENTRY_SIZE), ==, entry);
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==,
                    2 * AMDVI_GALOG_ENTRY_SIZE);

    /* A new log base starts the log over: head and tail read 0. */
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_HEAD, AMDVI_GALOG_ENTRY_SIZE);
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_BASE,
                  GALOG_ADDR | (GALOG_LEN_CODE << AMDVI_MMIO_GALOG_SIZE_SHIFT));
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_HEAD), ==, 0);
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==, 0);
    vapic_end(t);
}

/*
 * A full log stops: GALogOverflow set, GALogRun clear, nothing more
 * logged (the IRR still gets the vector), however else the control
 * register is written and while the overflow bit is set, until software
 * clears it and writes GALogEn 0, then 1 (Linux's
 * amd_iommu_restart_ga_log()); then the log goes on at its tail,
 * wrapping to its start.
 */
static void test_vapic_full_log_stops_until_restarted(void)
{
    VapicTest *t = vapic_start("on", false);
    uint64_t entry = AMDVI_GALOG_GUEST_NR | VAPIC_GA_TAG;
    uint32_t last = GALOG_BYTES - AMDVI_GALOG_ENTRY_SIZE;
    int i;

    for (i = 0; i < GALOG_ENTRIES - 1; i++) {
        vapic_send_msi(t);
    }
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==, last);
    g_assert_cmphex(vapic_galog_entry(t, last - AMDVI_GALOG_ENTRY_SIZE), ==,
                    entry);
    g_assert_cmphex(vapic_status(t) & (AMDVI_MMIO_STATUS_GALOG_RUN |
                                       AMDVI_MMIO_STATUS_GALOG_OVF), ==,
                    AMDVI_MMIO_STATUS_GALOG_RUN);

    /* One more would make the tail meet the head: it overflows. */
    qtest_writel(t->qts, BACKING_PAGE_ADDR + AMDVI_VAPIC_IRR + 0x20, 0);
    vapic_send_msi(t);
    g_assert(vapic_irr_has(t, VAPIC_VECTOR));
    g_assert_cmphex(vapic_status(t) & (AMDVI_MMIO_STATUS_GALOG_RUN |
                                       AMDVI_MMIO_STATUS_GALOG_OVF), ==,
                    AMDVI_MMIO_STATUS_GALOG_OVF);
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==, last);
    g_assert_cmphex(vapic_galog_entry(t, last), ==, 0);

    /* Software drains the log; a control write that keeps GALogEn set... */
    vapic_set_reg(t, AMDVI_MMIO_GA_LOG_HEAD, last);
    vapic_set_control(t, t->control);
    vapic_send_msi(t);
    /* ...does not restart it. */
    g_assert_false(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_RUN);
    g_assert_cmphex(vapic_galog_entry(t, last), ==, 0);

    /* GALogEn 0, then 1, with the overflow bit still set: nothing. */
    vapic_set_control(t, t->control & ~AMDVI_MMIO_CONTROL_GALOGEN);
    vapic_set_control(t, CONTROL_VAPIC);
    vapic_send_msi(t);
    g_assert_cmphex(vapic_galog_entry(t, last), ==, 0);

    /* amd_iommu_restart_ga_log() */
    vapic_set_control(t, t->control & ~(AMDVI_MMIO_CONTROL_GALOGEN |
                                        AMDVI_MMIO_CONTROL_GAINTEN));
    vapic_set_reg(t, AMDVI_MMIO_STATUS, AMDVI_MMIO_STATUS_GALOG_OVF);
    /* A write clears only the bits it sets: GAInt is still pending. */
    g_assert(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_INT);
    vapic_set_control(t, CONTROL_VAPIC);
    g_assert_cmphex(vapic_status(t) & (AMDVI_MMIO_STATUS_GALOG_RUN |
                                       AMDVI_MMIO_STATUS_GALOG_OVF), ==,
                    AMDVI_MMIO_STATUS_GALOG_RUN);

    vapic_send_msi(t);
    g_assert_cmphex(vapic_galog_entry(t, last), ==, entry);
    g_assert_cmphex(vapic_reg(t, AMDVI_MMIO_GA_LOG_TAIL), ==, 0);
    g_assert_cmphex(qtest_readq(t->qts, GALOG_TAIL_ADDR), ==, 0);
    vapic_end(t);
}

/* Without vapic=on, a guest mode IRTE is an error: nothing is posted. */
static void test_vapic_off_posts_nothing(void)
{
    VapicTest *t = vapic_start("off", false);

    g_assert_false(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_RUN);
    vapic_send_msi(t);
    g_assert_false(vapic_irr_has(t, VAPIC_VECTOR));
    g_assert_cmphex(vapic_galog_entry(t, 0), ==, 0);
    g_assert_false(vapic_status(t) & AMDVI_MMIO_STATUS_GALOG_INT);
    vapic_end(t);
}

/* vapic=on needs TCG's AVIC: another accelerator gets an error and a fix. */
static void test_vapic_needs_tcg(void)
{
    const char *qemu = g_getenv("QTEST_QEMU_BINARY");
    /* timeout(1): a QEMU that accepted the device would wait at -S. */
    const char *argv[] = {
        "timeout", "60", qemu, "-M", "q35", "-accel", "qtest", "-S",
        "-nodefaults", "-display", "none",
        "-device", "amd-iommu,intremap=on,vapic=on", NULL,
    };
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;
    int status;

    g_assert(qemu);
    g_assert(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH,
                          NULL, NULL, &out, &err, &status, &error));
    g_assert_no_error(error);
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    g_assert_nonnull(strstr(err, "vapic=on needs TCG"));
    g_assert_nonnull(strstr(err, "use -accel tcg or vapic=off"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (!qtest_has_machine("q35") || !qtest_has_device("amd-iommu") ||
        !qtest_has_device("edu") || !qtest_has_accel("tcg")) {
        g_printerr("hpkvm-amd-iommu-vapic-test: needs q35, amd-iommu, "
                   "edu and TCG in %s\n", g_getenv("QTEST_QEMU_BINARY"));
        return 1;
    }
    qtest_add_func("/hpkvm/amd-iommu-vapic/posts-to-a-running-vcpu",
                   test_vapic_posts_to_a_running_vcpu);
    qtest_add_func("/hpkvm/amd-iommu-vapic/logs-a-sleeping-vcpu",
                   test_vapic_logs_a_sleeping_vcpu);
    qtest_add_func("/hpkvm/amd-iommu-vapic/full-log-stops-until-restarted",
                   test_vapic_full_log_stops_until_restarted);
    qtest_add_func("/hpkvm/amd-iommu-vapic/off-posts-nothing",
                   test_vapic_off_posts_nothing);
    qtest_add_func("/hpkvm/amd-iommu-vapic/needs-tcg",
                   test_vapic_needs_tcg);
    return g_test_run();
}
