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

/* A message on its way in: what came of its line so far, and its files. */
typedef struct HpkvmHelperReader {
    GString *line;
    int fds[HPKVM_HELPER_MAX_FDS];
    size_t nfds;
} HpkvmHelperReader;

void hpkvm_helper_reader_init(HpkvmHelperReader *r);

/* Frees @r, closing the files it still holds. */
void hpkvm_helper_reader_cleanup(HpkvmHelperReader *r);

/*
 * Reads once what @sock has of @r's message: 1 once the message is whole
 * (hpkvm_helper_reader_take()), 0 if a non-blocking @sock has nothing
 * yet, -1 on error, or without an error if the peer closed without
 * sending anything.  A server reads each client as its socket becomes
 * readable, so that no client waits behind another.
 */
int hpkvm_helper_read(int sock, HpkvmHelperReader *r, Error **errp);

/*
 * The whole message @r read, and its files into @fds (*@nfds of them,
 * each the caller's to close); NULL if it is no JSON object, the files
 * left in @r.
 */
QDict *hpkvm_helper_reader_take(HpkvmHelperReader *r, int *fds,
                                size_t *nfds, Error **errp);

/*
 * Receives one message from blocking @sock, and the files that came with
 * it into @fds (at most HPKVM_HELPER_MAX_FDS; *@nfds says how many, each
 * to be closed by the caller); NULL on error (a timeout of @sock's
 * included), with no file left open, and NULL without an error if the
 * peer closed without sending anything.
 */
QDict *hpkvm_helper_recv(int sock, int *fds, size_t *nfds, Error **errp);

#endif
