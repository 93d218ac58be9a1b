/*
 * hpkvm: a fake host tree's cgroups behave as cgroupfs would
 *
 * For hpkvm-host.c only, and only where the root is not the real host:
 * see hpkvm-host-fake.c.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_HOST_FAKE_H
#define ACCEL_HPKVM_HOST_FAKE_H

#include "hpkvm-host.h"

/* 0 if cgroupfs would take @text written to @path, else its -errno. */
int hpkvm_host_fake_check_write(const HpkvmHost *h, const char *path,
                                const char *text);
/* After @text was appended to @path: a pid leaves its old cgroup. */
void hpkvm_host_fake_appended(const HpkvmHost *h, const char *path,
                              const char *text);
/* 0 if cgroupfs would remove the cgroup @path, else its -errno. */
int hpkvm_host_fake_check_rmdir(const HpkvmHost *h, const char *path);
/* The control files cgroupfs gives a cgroup, made or removed with it. */
void hpkvm_host_fake_cgroup_files(int parent, const char *name, bool create);

#endif
