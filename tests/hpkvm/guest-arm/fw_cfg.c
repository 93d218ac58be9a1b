/*
 * hpkvm's aarch64 test guest: options from QEMU's fw_cfg, the virt
 * machine's way to hand a bare-metal guest named values, here
 * "-fw_cfg name=opt/org.hpkvm/bench,string=N" (docs/specs/fw_cfg.rst):
 * select the file directory, find the name, read its decimal string.
 *
 * Byte-wide reads of the data register, each one MMIO exit: a few
 * hundred at boot, none while anything is measured.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "guest.h"

/* hw/arm/virt.c's fw_cfg, and the registers of hw/nvram/fw_cfg.c. */
#define FW_CFG_BASE         0x09020000UL
#define FW_CFG_DATA         0x0
#define FW_CFG_SELECTOR     0x8             /* 16 bits, big-endian */
#define FW_CFG_SIGNATURE    0x0000
#define FW_CFG_FILE_DIR     0x0019
#define FW_CFG_NAME_LEN     56
#define FW_CFG_VALUE_MAX    20

static void fw_cfg_select(uint16_t key)
{
    mmio_write16(FW_CFG_BASE + FW_CFG_SELECTOR, __builtin_bswap16(key));
}

static uint8_t fw_cfg_byte(void)
{
    return mmio_read8(FW_CFG_BASE + FW_CFG_DATA);
}

static uint32_t fw_cfg_be(unsigned bytes)
{
    uint32_t v = 0;

    while (bytes--) {
        v = v << 8 | fw_cfg_byte();
    }
    return v;
}

static bool fw_cfg_name_is(const char *got, const char *name)
{
    unsigned c;

    for (c = 0; c < FW_CFG_NAME_LEN; c++) {
        if (got[c] != name[c]) {
            return false;
        }
        if (!name[c]) {
            return true;
        }
    }
    return false;
}

/* The selector of file @name, or 0 (the signature's: never a file). */
static uint16_t fw_cfg_find(const char *name, uint32_t *size)
{
    uint32_t files, i;

    fw_cfg_select(FW_CFG_SIGNATURE);
    if (fw_cfg_be(4) != ('Q' << 24 | 'E' << 16 | 'M' << 8 | 'U')) {
        return 0;
    }
    fw_cfg_select(FW_CFG_FILE_DIR);
    files = fw_cfg_be(4);
    for (i = 0; i < files; i++) {
        uint32_t len = fw_cfg_be(4);
        uint16_t key = fw_cfg_be(2);
        char got[FW_CFG_NAME_LEN];
        unsigned c;

        fw_cfg_be(2);                       /* reserved */
        for (c = 0; c < FW_CFG_NAME_LEN; c++) {
            got[c] = fw_cfg_byte();
        }
        if (fw_cfg_name_is(got, name)) {
            *size = len;
            return key;
        }
    }
    return 0;
}

/*
 * The unsigned decimal in fw_cfg file @name: false if there is none;
 * fails the guest if the file holds anything else.
 */
bool fw_cfg_uint(const char *name, uint64_t *value)
{
    uint32_t size, i;
    uint16_t key = fw_cfg_find(name, &size);
    uint64_t v = 0;

    if (!key) {
        return false;
    }
    if (size == 0 || size > FW_CFG_VALUE_MAX) {
        fail("fw_cfg option not a number, length", size);
    }
    fw_cfg_select(key);
    for (i = 0; i < size; i++) {
        uint8_t c = fw_cfg_byte();

        if (c == 0 && i > 0) {
            break;                          /* a terminated string */
        }
        if (c < '0' || c > '9') {
            fail("fw_cfg option not a number, byte", c);
        }
        v = v * 10 + (c - '0');
    }
    *value = v;
    return true;
}
