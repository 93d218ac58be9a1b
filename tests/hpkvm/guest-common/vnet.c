/*
 * hpkvm test guests: frames through a virtio-net device, the x86
 * guest's "vnet=N" and the aarch64 guest's opt/org.hpkvm/vnet
 *
 * A minimal virtio 1.0 driver of a virtio-net PCI device (vhost-user
 * peers refuse legacy devices): reset, acknowledge, VERSION_1 and MAC
 * (and STANDBY when asked, so that QEMU plugs a failover primary), both
 * queues set up, DRIVER_OK (where QEMU starts vhost), then N broadcast
 * frames of EtherType 0x88b5 (local experimental) carrying "hpkvm-vnet
 * K" on the transmit queue, each waited for.  The device's registers
 * are reached through its PCI configuration access capability, so
 * whether and where firmware put its 64-bit BAR does not matter (the
 * aarch64 guest has no firmware: nothing assigns BARs there).
 *
 * What it needs of the guest it is linked into is declared in vnet.h.
 * Both guests' memory is below 4 GiB, so ring addresses fit 32 bits.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "vnet.h"

#define VIRTIO_VENDOR       0x1af4
#define VIRTIO_NET_LEGACY   0x1000      /* transitional */
#define VIRTIO_NET_MODERN   0x1041

#define PCI_COMMAND         0x04
#define PCI_COMMAND_MASTER  0x4
#define PCI_CAP_VNDR        0x09
#define CAP_COMMON          1
#define CAP_NOTIFY          2
#define CAP_DEVICE          4
#define CAP_PCI_CFG         5

/* Common configuration, offsets */
#define CC_DFSELECT         0x00
#define CC_DF               0x04
#define CC_GFSELECT         0x08
#define CC_GF               0x0c
#define CC_STATUS           0x14
#define CC_Q_SELECT         0x16
#define CC_Q_SIZE           0x18
#define CC_Q_ENABLE         0x1c
#define CC_Q_NOFF           0x1e
#define CC_Q_DESC           0x20
#define CC_Q_AVAIL          0x28
#define CC_Q_USED           0x30

#define STATUS_ACK          1
#define STATUS_DRIVER       2
#define STATUS_DRIVER_OK    4
#define STATUS_FEATURES_OK  8
#define VIRTIO_NET_F_MAC    (1u << 5)
#define F_HI_VERSION_1      (1u << 0)       /* bit 32 */
#define F_HI_NET_STANDBY    (1u << 30)      /* bit 62 */
#define VRING_DESC_F_NEXT   1

#define QUEUE_MAX           256         /* what this driver sets up */
#define RX_QUEUE            0
#define TX_QUEUE            1

struct vring_desc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};

/*
 * A legacy split ring of the size the device dictates: descriptors,
 * then the available ring, then, at the next 4 KiB, the used ring.
 */
struct vring {
    struct vring_desc *desc;
    /* volatile: rings shared with the device */
    volatile uint16_t *avail;           /* flags, idx, ring[num] */
    /* volatile: the device advances it */
    volatile uint16_t *used_idx;
    uint32_t num;
    uint32_t notify_off;
};

static uint8_t ring_memory[2][32768] __attribute__((aligned(4096)));
static struct vring rings[2];

static void vring_init(struct vring *vr, uint8_t *mem, uint32_t num)
{
    uintptr_t used = ((uintptr_t)mem + 16 * num + 4 + 2 * num + 4095) &
                     ~(uintptr_t)4095;

    vr->num = num;
    vr->desc = (struct vring_desc *)mem;
    /* volatile: shared with the device, which writes behind our back */
    vr->avail = (volatile uint16_t *)(mem + 16 * num);
    /* volatile: likewise */
    vr->used_idx = (volatile uint16_t *)(used + 2);
}

static uint8_t net_hdr[12];    /* virtio_net_hdr_v1 (VERSION_1): zeroes */
static uint8_t frame[64];

struct cap {
    uint8_t bar;
    uint32_t offset;
};

static uint32_t bdf, cfg_cap;
static bool have_common;
static struct cap common, notify, device;
static uint32_t notify_mult;

static bool find_virtio_net(void)
{
    for (bdf = 0; bdf < 256; bdf++) {
        uint32_t id = pci_read(bdf, 0);

        if ((id & 0xffff) == VIRTIO_VENDOR &&
            ((id >> 16) == VIRTIO_NET_LEGACY ||
             (id >> 16) == VIRTIO_NET_MODERN)) {
            return true;
        }
    }
    return false;
}

static void find_caps(void)
{
    uint32_t cap;

    for (cap = pci_read(bdf, 0x34) & 0xfc; cap;
         cap = (pci_read(bdf, cap) >> 8) & 0xfc) {
        uint32_t hdr = pci_read(bdf, cap);
        struct cap c = { pci_read(bdf, cap + 4) & 0xff,
                         pci_read(bdf, cap + 8) };

        if ((hdr & 0xff) != PCI_CAP_VNDR) {
            continue;
        }
        switch (hdr >> 24) {
        case CAP_COMMON:
            common = c;
            have_common = true;
            break;
        case CAP_NOTIFY:
            notify = c;
            notify_mult = pci_read(bdf, cap + 16);
            break;
        case CAP_DEVICE:
            device = c;
            break;
        case CAP_PCI_CFG:
            cfg_cap = cap;
            break;
        }
    }
    if (!cfg_cap || !have_common) {
        vnet_fail("vnet: no virtio 1.0 capabilities");
    }
}

/* One BAR access through the PCI configuration access capability. */
static void window(const struct cap *c, uint32_t off, uint32_t len)
{
    pci_write(bdf, cfg_cap + 4,
              (pci_read(bdf, cfg_cap + 4) & ~0xffu) | c->bar);
    pci_write(bdf, cfg_cap + 8, c->offset + off);
    pci_write(bdf, cfg_cap + 12, len);
}

static uint32_t bar_read(const struct cap *c, uint32_t off, uint32_t len)
{
    uint32_t v;

    window(c, off, len);
    v = pci_read(bdf, cfg_cap + 16);
    return len == 4 ? v : v & ((1u << (len * 8)) - 1);
}

static void bar_write(const struct cap *c, uint32_t off, uint32_t len,
                      uint32_t v)
{
    window(c, off, len);
    pci_write(bdf, cfg_cap + 16, v);
}

static void set_status(uint8_t status)
{
    bar_write(&common, CC_STATUS, 1, status);
}

static void setup_queue(uint16_t q)
{
    struct vring *vr = &rings[q];
    uint64_t desc = (uintptr_t)ring_memory[q];

    bar_write(&common, CC_Q_SELECT, 2, q);
    if (bar_read(&common, CC_Q_SIZE, 2) < QUEUE_MAX) {
        vnet_fail("vnet: queue smaller than 256");
    }
    bar_write(&common, CC_Q_SIZE, 2, QUEUE_MAX);
    vring_init(vr, ring_memory[q], QUEUE_MAX);
    vr->notify_off = bar_read(&common, CC_Q_NOFF, 2);
    bar_write(&common, CC_Q_DESC, 4, desc);
    bar_write(&common, CC_Q_DESC + 4, 4, 0);
    bar_write(&common, CC_Q_AVAIL, 4, (uintptr_t)vr->avail);
    bar_write(&common, CC_Q_AVAIL + 4, 4, 0);
    bar_write(&common, CC_Q_USED, 4, (uintptr_t)vr->used_idx - 2);
    bar_write(&common, CC_Q_USED + 4, 4, 0);
    bar_write(&common, CC_Q_ENABLE, 2, 1);
}

static void put_text(uint8_t *p, const char *s)
{
    while (*s) {
        *p++ = *s++;
    }
}

/* The start of one of vnet.c's lines: "hpkvm-guest: vnet: " and @s */
static void say(const char *s)
{
    vnet_puts(vnet_guest);
    vnet_puts(": vnet: ");
    vnet_puts(s);
}

/*
 * With STANDBY accepted, QEMU plugs the failover primary (the VF) into
 * its PCIe root port: look for it on the buses behind the root ports.
 */
uint32_t vnet_primary = VNET_NO_PRIMARY;

static void find_primary(void)
{
    uint64_t end = vnet_deadline();
    uint32_t bus, id;

    while (!vnet_expired(end)) {
        for (bus = 1; bus < 16; bus++) {
            id = pci_read(bus << 8, 0);
            if ((id & 0xffff) != 0xffff && (id & 0xffff) != VIRTIO_VENDOR) {
                say("failover primary ");
                vnet_putu(id & 0xffff);
                vnet_puts(":");
                vnet_putu(id >> 16);
                vnet_puts(" on bus ");
                vnet_putu(bus);
                vnet_puts("\n");
                vnet_primary = bus << 8;
                return;
            }
        }
    }
    say("no failover primary appeared\n");
}

uint32_t vnet_send(uint32_t n, bool standby)
{
    uint32_t i, hi, want_hi;
    uint16_t q;
    uint64_t end;

    if (!find_virtio_net()) {
        vnet_fail("vnet: no virtio-net PCI device");
    }
    /*
     * Bus master for the rings; no memory space decoding, which the
     * configuration access capability does not need and which would map
     * BARs where no firmware put them (aarch64).
     */
    pci_write(bdf, PCI_COMMAND,
              (pci_read(bdf, PCI_COMMAND) & 0xffff) | PCI_COMMAND_MASTER);
    find_caps();

    set_status(0);
    set_status(STATUS_ACK);
    set_status(STATUS_ACK | STATUS_DRIVER);
    bar_write(&common, CC_DFSELECT, 4, 1);
    hi = bar_read(&common, CC_DF, 4);
    want_hi = F_HI_VERSION_1 | (standby ? F_HI_NET_STANDBY : 0);
    if ((hi & want_hi) != want_hi) {
        vnet_fail("vnet: the device lacks VERSION_1 (or STANDBY)");
    }
    bar_write(&common, CC_GFSELECT, 4, 0);
    bar_write(&common, CC_GF, 4, VIRTIO_NET_F_MAC);
    bar_write(&common, CC_GFSELECT, 4, 1);
    bar_write(&common, CC_GF, 4, want_hi);
    set_status(STATUS_ACK | STATUS_DRIVER | STATUS_FEATURES_OK);
    if (!(bar_read(&common, CC_STATUS, 1) & STATUS_FEATURES_OK)) {
        vnet_fail("vnet: the device refused the features");
    }
    for (q = RX_QUEUE; q <= TX_QUEUE; q++) {
        setup_queue(q);
    }
    set_status(STATUS_ACK | STATUS_DRIVER | STATUS_FEATURES_OK |
               STATUS_DRIVER_OK);

    for (i = 0; i < 6; i++) {
        frame[i] = 0xff;                        /* broadcast */
        frame[6 + i] = bar_read(&device, i, 1);
    }
    frame[12] = 0x88;
    frame[13] = 0xb5;
    put_text(&frame[14], "hpkvm-vnet ");

    for (i = 0; i < n; i++) {
        struct vring *tx = &rings[TX_QUEUE];
        uint16_t slot = i % (tx->num / 2) * 2;

        frame[25] = '0' + i % 10;
        tx->desc[slot] = (struct vring_desc) {
            (uintptr_t)net_hdr, sizeof(net_hdr), VRING_DESC_F_NEXT,
            slot + 1 };
        tx->desc[slot + 1] = (struct vring_desc) {
            (uintptr_t)frame, sizeof(frame), 0, 0 };
        tx->avail[2 + i % tx->num] = slot;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        tx->avail[1] = i + 1;                   /* avail idx */
        /* All the device is to read, then, each time, what it wrote */
        vnet_dma_sync(net_hdr, sizeof(net_hdr));
        vnet_dma_sync(frame, sizeof(frame));
        vnet_dma_sync(&tx->desc[slot], 2 * sizeof(struct vring_desc));
        vnet_dma_sync(&tx->avail[2 + i % tx->num], 2);
        vnet_dma_sync(tx->avail, 4);
        bar_write(&notify, tx->notify_off * notify_mult, 2, TX_QUEUE);
        end = vnet_deadline();
        for (;;) {
            vnet_dma_sync(tx->used_idx, 2);
            if (*tx->used_idx == (uint16_t)(i + 1)) {
                break;
            }
            if (vnet_expired(end)) {
                return i;
            }
        }
    }
    say("sent ");
    vnet_putu(n);
    vnet_puts(" frames\n");
    if (standby) {
        find_primary();
    }
    return n;
}
