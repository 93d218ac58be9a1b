/*
 * hpkvm test guests: vnet.c's virtio-net driver, shared by the x86 and
 * the aarch64 guest.  vnet_send() is what it offers; the rest is what it
 * needs of the guest it is linked into, which each guest implements over
 * its own configuration access, serial port and clock.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_VNET_H
#define HPKVM_GUEST_VNET_H

#include <stdbool.h>
#include <stdint.h>

/* pci_read() and pci_write() */
#include "pci.h"

/* The guest's name, which starts each of vnet.c's lines: "hpkvm-guest" */
extern const char vnet_guest[];

/* Text and unsigned decimals on the guest's console */
void vnet_puts(const char *s);
void vnet_putu(uint64_t v);

/* A FAIL line saying @why, then the end of the run */
void __attribute__((noreturn)) vnet_fail(const char *why);

/*
 * vnet.c's patience: vnet_deadline() is a moment about 20 seconds from
 * now, which vnet_expired() says whether it has passed.
 */
uint64_t vnet_deadline(void);
bool vnet_expired(uint64_t deadline);

/*
 * Make @len bytes at @p coherent with the device before it reads them or
 * after it wrote them: nothing where DMA snoops the CPU's caches (x86);
 * where the guest's accesses bypass caches that the device's (QEMU's)
 * go through, the cached copies must go (aarch64 with the MMU off).
 */
void vnet_dma_sync(const volatile void *p, uint32_t len);

/*
 * Send @n frames through the first virtio-net function on bus 0; with
 * @standby, accept VIRTIO_NET_F_STANDBY and report the failover primary
 * QEMU plugs then.  Returns how many frames the device took in time.
 */
uint32_t vnet_send(uint32_t n, bool standby);

/*
 * Where vnet_send() found the failover primary (bus << 8 | devfn), or
 * VNET_NO_PRIMARY.
 */
#define VNET_NO_PRIMARY 0xffffffffu
extern uint32_t vnet_primary;

#endif
