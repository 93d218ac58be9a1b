/*
 * hpkvm: QMP commands
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/qapi-commands-hpkvm.h"
#include "system/hpkvm.h"

HpkvmInfo *qmp_query_hpkvm(Error **errp)
{
    HpkvmInfo *info = g_new0(HpkvmInfo, 1);

    info->enabled = hpkvm_enabled();
    info->present = accel_find("hpkvm") != NULL;
    return info;
}
