/*
 * hpkvm: the wire protocol between QEMU and qemu-hpkvm-helper
 *
 * One request per connection: the client sends one JSON object on one
 * line, the helper answers with one, in QMP's shape ({"execute": ...,
 * "arguments": ...}; {"return": ...} or {"error": {"desc": ...}}).
 * Open files travel beside the line as SCM_RIGHTS (the leases, in the
 * order the message lists their cores), as qemu-bridge-helper passes
 * its tap.  A connection per request needs no session: the helper
 * knows its client by SO_PEERCRED, and a helper restarted in between
 * serves the next request all the same.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef ACCEL_HPKVM_HELPER_PROTO_H
#define ACCEL_HPKVM_HELPER_PROTO_H

#include "qobject/qdict.h"

/* Where the helper listens on a host (under x-host-root= in tests). */
#define HPKVM_HELPER_SOCKET "/run/qemu-hpkvm-helper.sock"

/* SCM_MAX_FD: the kernel's limit of files per message. */
#define HPKVM_HELPER_MAX_FDS 253

/* Longest message: an isolation report of many cores fits. */
#define HPKVM_HELPER_MAX_MSG (1024 * 1024)

/* Sends @msg as one line on @sock, @nfds files beside it. */
bool hpkvm_helper_send(int sock, QDict *msg, const int *fds, size_t nfds,
                       Error **errp);

/*
 * Receives one message from @sock, and the files that came with it into
 * @fds (at most HPKVM_HELPER_MAX_FDS; *@nfds says how many, each to be
 * closed by the caller); NULL on error, with no file left open, and
 * NULL without an error if the peer closed without sending anything.
 */
QDict *hpkvm_helper_recv(int sock, int *fds, size_t *nfds, Error **errp);

#endif
