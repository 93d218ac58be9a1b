/*
 * hpkvm: the wire protocol between QEMU and qemu-hpkvm-helper
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qobject/qjson.h"
#include "hpkvm-helper-proto.h"

bool hpkvm_helper_send(int sock, QDict *msg, const int *fds, size_t nfds,
                       Error **errp)
{
    g_autoptr(GString) json = qobject_to_json(QOBJECT(msg));
    size_t done = 0;

    assert(nfds <= HPKVM_HELPER_MAX_FDS);
    g_string_append_c(json, '\n');
    while (done < json->len) {
        char control[CMSG_SPACE(sizeof(int) * HPKVM_HELPER_MAX_FDS)] = { 0 };
        struct iovec iov = {
            .iov_base = json->str + done,
            .iov_len = json->len - done,
        };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        /* The files go with the first byte. */
        if (!done && nfds) {
            struct cmsghdr *cm;

            mh.msg_control = control;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
            cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error_setg_errno(errp, errno, "cannot send to qemu-hpkvm-helper's "
                             "peer");
            return false;
        }
        done += n;
    }
    return true;
}

static void proto_close_fds(int *fds, size_t *nfds)
{
    while (*nfds) {
        close(fds[--*nfds]);
    }
}

/* Keeps the files of @mh in @fds; false if there were too many. */
static bool proto_take_fds(struct msghdr *mh, int *fds, size_t *nfds)
{
    struct cmsghdr *cm;
    bool ok = !(mh->msg_flags & MSG_CTRUNC);

    for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        size_t n, i;
        int *in;

        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        in = (int *)CMSG_DATA(cm);
        for (i = 0; i < n; i++) {
            if (*nfds < HPKVM_HELPER_MAX_FDS) {
                fds[(*nfds)++] = in[i];
            } else {
                close(in[i]);
                ok = false;
            }
        }
    }
    return ok;
}

void hpkvm_helper_reader_init(HpkvmHelperReader *r)
{
    r->line = g_string_new(NULL);
    r->nfds = 0;
}

void hpkvm_helper_reader_cleanup(HpkvmHelperReader *r)
{
    proto_close_fds(r->fds, &r->nfds);
    if (r->line) {
        g_string_free(r->line, true);
        r->line = NULL;
    }
}

static bool proto_complete(HpkvmHelperReader *r)
{
    return r->line->len && r->line->str[r->line->len - 1] == '\n';
}

int hpkvm_helper_read(int sock, HpkvmHelperReader *r, Error **errp)
{
    char control[CMSG_SPACE(sizeof(int) * HPKVM_HELPER_MAX_FDS)];
    char buf[4096];
    struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
    struct msghdr mh = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = control,
        .msg_controllen = sizeof(control),
    };
    ssize_t n;

    assert(!proto_complete(r));
    do {
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return 0;
    }
    if (n < 0) {
        error_setg_errno(errp, errno, "cannot read from "
                         "qemu-hpkvm-helper's peer");
        return -1;
    }
    if (!proto_take_fds(&mh, r->fds, &r->nfds)) {
        error_setg(errp, "more than %d files came with one message",
                   HPKVM_HELPER_MAX_FDS);
        return -1;
    }
    if (!n && r->line->len) {
        error_setg(errp, "the peer closed the connection in the middle "
                   "of a message");
        return -1;
    }
    if (!n) {
        return -1;                      /* a probe, not a client */
    }
    if (memchr(buf, '\n', n) && memchr(buf, '\n', n) != buf + n - 1) {
        error_setg(errp, "more than one message on one connection");
        return -1;
    }
    g_string_append_len(r->line, buf, n);
    if (r->line->len > HPKVM_HELPER_MAX_MSG) {
        error_setg(errp, "a message longer than %d bytes",
                   HPKVM_HELPER_MAX_MSG);
        return -1;
    }
    return proto_complete(r);
}

QDict *hpkvm_helper_reader_take(HpkvmHelperReader *r, int *fds,
                                size_t *nfds, Error **errp)
{
    QObject *obj = qobject_from_json(r->line->str, errp);
    QDict *msg = qobject_to(QDict, obj);

    assert(proto_complete(r));
    if (obj && !msg) {
        qobject_unref(obj);
        error_setg(errp, "a message that is not a JSON object");
    }
    if (!msg) {
        return NULL;
    }
    memcpy(fds, r->fds, sizeof(int) * r->nfds);
    *nfds = r->nfds;
    r->nfds = 0;
    return msg;
}

QDict *hpkvm_helper_recv(int sock, int *fds, size_t *nfds, Error **errp)
{
    HpkvmHelperReader r;
    QDict *msg = NULL;
    int done;

    *nfds = 0;
    hpkvm_helper_reader_init(&r);
    do {
        size_t had = r.line->len;

        done = hpkvm_helper_read(sock, &r, errp);
        /* Blocking, @sock has nothing only once its SO_RCVTIMEO ran out. */
        if (!done && r.line->len == had) {
            error_setg(errp, "no message in time from qemu-hpkvm-helper's "
                       "peer");
            done = -1;
        }
    } while (!done);
    if (done > 0) {
        msg = hpkvm_helper_reader_take(&r, fds, nfds, errp);
    }
    hpkvm_helper_reader_cleanup(&r);
    return msg;
}
