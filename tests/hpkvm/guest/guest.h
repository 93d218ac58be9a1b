/*
 * hpkvm test guest: what boot.S and guest.c share
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HPKVM_GUEST_H
#define HPKVM_GUEST_H

#include <stdint.h>
#include "layout.h"

/* boot.S */
extern char trampoline_start[], trampoline_end[];
extern uint32_t multiboot_info;     /* physical address, below 4 GiB */

/* guest.c, called from boot.S */
void bsp_main(void);
void ap_main(uint32_t slot);

#endif
