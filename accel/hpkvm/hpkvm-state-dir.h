/*
 * hpkvm: the state directory of the core leases and the journal
 *
 * What the leases and the journal say decides what hpkvm changes on the
 * host and undoes later, with the privileges of whoever runs it.  So the
 * state directory is trusted only if it is a directory (not a link),
 * owned by this user and closed to everyone else, checked with fstat(2)
 * on the opened directory; every file in it is opened relative to it,
 * never through a link, and checked the same way.  A planted link or a
 * file of someone else's is refused with the fix, never followed.
 *
 * On the real host there is one state directory, /run/hpkvm: two VMs
 * with different ones could lease the same core.  Another directory is
 * for fake host trees (tests) only.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_STATE_DIR_H
#define ACCEL_HPKVM_STATE_DIR_H

#include "hpkvm-host.h"

#define HPKVM_STATE_DIR "/run/hpkvm"

/*
 * Opens @state_dir (under the root) or, with @sub, its subdirectory
 * @sub, creating what is missing with mode 0700; an O_DIRECTORY fd, or
 * -1 with @errp set.
 */
int hpkvm_state_dir_open(const HpkvmHost *h, const char *state_dir,
                         const char *sub, Error **errp);

/*
 * Opens the regular file @name in the state directory @dfd (shown as
 * @dir in messages) with @flags (O_CREAT makes it 0600); a link, a
 * file that is not ours or that others may write is refused.  Returns
 * the fd or -errno; @errp is set unless it is NULL.
 */
int hpkvm_state_file_open(int dfd, const char *dir, const char *name,
                          int flags, Error **errp);

#endif
