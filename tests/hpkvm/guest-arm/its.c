/*
 * hpkvm's aarch64 test guest: a device's MSI as an LPI, through the
 * virt machine's GICv3 ITS, the way a Linux guest maps one: LPIs on the
 * boot CPU's redistributor, the ITS's device and collection tables and
 * command queue, then MAPD, MAPC and MAPTI.  Only then does KVM find the
 * translation it needs when QEMU hands it the device's MSI route, and,
 * with GICv4 on the host, map the physical MSI to the guest as a vLPI
 * (kvm_vgic_v4_set_forwarding(): a route whose translation does not
 * resolve yet is left to irqfd delivery).
 *
 * The tables live in this guest's RAM, written with the MMU off: each is
 * synced (vnet_dma_sync()) before the ITS, that is KVM, reads it.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* hw/arm/virt.c's memory map; the boot CPU's redistributor */
#define GITS_BASE           0x08080000UL
#define GITS_TRANSLATER     (GITS_BASE + 0x10040)
#define GICR0_BASE          0x080a0000UL

#define GICR_CTLR           0x0000
#define GICR_CTLR_LPIS      (1u << 0)
#define GICR_TYPER          0x0008
#define GICR_TYPER_PLPIS    (1u << 0)
#define GICR_PROPBASER      0x0070
#define GICR_PENDBASER      0x0078
#define GICR_PENDBASER_PTZ  (1ull << 62)

#define GITS_CTLR           0x0000
#define GITS_CTLR_ENABLED   (1u << 0)
#define GITS_TYPER          0x0008
#define GITS_TYPER_PTA      (1ull << 19)
#define GITS_CBASER         0x0080
#define GITS_CWRITER        0x0088
#define GITS_CREADR         0x0090
#define GITS_BASER(n)       (0x0100 + 8 * (n))
#define GITS_BASER_VALID    (1ull << 63)
#define GITS_BASER_TYPE(v)  ((v) >> 56 & 7)
#define GITS_BASER_RO       (7ull << 56 | 0x1full << 48)  /* type, esize */
#define GITS_BASER_PAGE_64K (2ull << 8)
#define GITS_BASER_DEVICE   1
#define GITS_BASER_COLL     4

#define ITS_CMD_SYNC        0x05
#define ITS_CMD_MAPD        0x08
#define ITS_CMD_MAPC        0x09
#define ITS_CMD_MAPTI       0x0a
#define ITS_CMD_INVALL      0x0d

#define LPI_FIRST           8192
#define LPI_ID_BITS         14          /* LPIs 8192-16383 */
#define LPI_PRIORITY        0xa0
#define LPI_ENABLED         (1u << 0)
#define ITS_ICID            0

/*
 * The device and collection tables: flat, one page each of the only page
 * size KVM's ITS has, 64 KiB, whatever the guest asks (a BASER's bits
 * 15:12 are then address bits 51:48: the tables must be 64 KiB aligned).
 * The command queue: one 4 KiB page, 128 commands.
 */
static uint8_t lpi_config[(1u << LPI_ID_BITS) - LPI_FIRST]
    __attribute__((aligned(4096)));
static uint8_t lpi_pending[(1u << LPI_ID_BITS) / 8]
    __attribute__((aligned(65536)));
static uint8_t its_devices[65536] __attribute__((aligned(65536)));
static uint8_t its_collections[65536] __attribute__((aligned(65536)));
static uint64_t its_queue[4096 / 8] __attribute__((aligned(4096)));
static uint8_t its_itt[256] __attribute__((aligned(256)));
static uint32_t its_next;               /* the queue's next command, bytes */

static inline void mmio_write64(uintptr_t addr, uint64_t v)
{
    asm volatile("str %0, [%1]" : : "r"(v), "r"(addr) : "memory");
}

/* Queue one command and wait until the ITS has consumed it */
static void its_command(uint64_t dw0, uint64_t dw1, uint64_t dw2)
{
    /* volatile: only the ITS reads it, which the compiler cannot see */
    volatile uint64_t *cmd = &its_queue[its_next / 8];
    uint64_t end = vnet_deadline();

    cmd[0] = dw0;
    cmd[1] = dw1;
    cmd[2] = dw2;
    cmd[3] = 0;
    vnet_dma_sync(cmd, 32);
    its_next = (its_next + 32) % sizeof(its_queue);
    mmio_write64(GITS_BASE + GITS_CWRITER, its_next);
    while (mmio_read64(GITS_BASE + GITS_CREADR) != its_next) {
        if (vnet_expired(end)) {
            fail("its: command not consumed:", dw0 & 0xff);
        }
    }
}

/* LPIs on the boot CPU's redistributor, with an empty pending table */
static void its_enable_lpis(void)
{
    unsigned i;

    if (!(mmio_read64(GICR0_BASE + GICR_TYPER) & GICR_TYPER_PLPIS)) {
        fail("its: the redistributor has no LPIs", 0);
    }
    for (i = 0; i < sizeof(lpi_config); i++) {
        lpi_config[i] = LPI_PRIORITY;       /* each disabled */
    }
    vnet_dma_sync(lpi_config, sizeof(lpi_config));
    mmio_write64(GICR0_BASE + GICR_PROPBASER,
                 (uintptr_t)lpi_config | (LPI_ID_BITS - 1));
    mmio_write64(GICR0_BASE + GICR_PENDBASER,
                 (uintptr_t)lpi_pending | GICR_PENDBASER_PTZ);
    mmio_write32(GICR0_BASE + GICR_CTLR,
                 mmio_read32(GICR0_BASE + GICR_CTLR) | GICR_CTLR_LPIS);
}

/* The ITS's tables and command queue, then the ITS on */
static void its_enable(void)
{
    uint64_t baser, table;
    unsigned n;

    mmio_write32(GITS_BASE + GITS_CTLR, 0);
    for (n = 0; n < 8; n++) {
        baser = mmio_read64(GITS_BASE + GITS_BASER(n));
        switch (GITS_BASER_TYPE(baser)) {
        case GITS_BASER_DEVICE:
            table = (uintptr_t)its_devices;
            break;
        case GITS_BASER_COLL:
            table = (uintptr_t)its_collections;
            break;
        default:
            continue;
        }
        /* 64 KiB pages, one of them (Size 0), flat */
        mmio_write64(GITS_BASE + GITS_BASER(n),
                     GITS_BASER_VALID | (baser & GITS_BASER_RO) |
                     GITS_BASER_PAGE_64K | table);
    }
    /* Size: pages - 1 */
    mmio_write64(GITS_BASE + GITS_CBASER,
                 GITS_BASER_VALID | (uintptr_t)its_queue |
                 (sizeof(its_queue) / 4096 - 1));
    mmio_write64(GITS_BASE + GITS_CWRITER, 0);
    its_next = 0;
    mmio_write32(GITS_BASE + GITS_CTLR, GITS_CTLR_ENABLED);
}

uintptr_t its_map_msi(uint32_t devid, uint32_t event, uint32_t lpi)
{
    /*
     * The collection's target: the boot CPU's redistributor, by address
     * or, as KVM's ITS has it (PTA 0), by processor number.
     */
    uint64_t rdbase = mmio_read64(GITS_BASE + GITS_TYPER) & GITS_TYPER_PTA ?
                      GICR0_BASE >> 16 : 0;

    its_enable_lpis();
    its_enable();
    lpi_config[lpi - LPI_FIRST] = LPI_PRIORITY | LPI_ENABLED;
    vnet_dma_sync(&lpi_config[lpi - LPI_FIRST], 1);
    /* An ITT of 2 events (Size: event ID bits - 1) */
    its_command(ITS_CMD_MAPD | (uint64_t)devid << 32, 0,
                GITS_BASER_VALID | (uintptr_t)its_itt);
    its_command(ITS_CMD_MAPC, 0,
                GITS_BASER_VALID | rdbase << 16 | ITS_ICID);
    its_command(ITS_CMD_MAPTI | (uint64_t)devid << 32,
                event | (uint64_t)lpi << 32, ITS_ICID);
    its_command(ITS_CMD_INVALL, 0, ITS_ICID);
    its_command(ITS_CMD_SYNC, 0, rdbase << 16);
    return GITS_TRANSLATER;
}
