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

QDict *hpkvm_helper_recv(int sock, int *fds, size_t *nfds, Error **errp)
{
    g_autoptr(GString) line = g_string_new(NULL);
    QObject *obj;
    QDict *msg;

    *nfds = 0;
    while (!line->len || line->str[line->len - 1] != '\n') {
        char control[CMSG_SPACE(sizeof(int) * HPKVM_HELPER_MAX_FDS)];
        char buf[4096];
        struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
        struct msghdr mh = {
            .msg_iov = &iov,
            .msg_iovlen = 1,
            .msg_control = control,
            .msg_controllen = sizeof(control),
        };
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error_setg_errno(errp, errno, "cannot read from "
                             "qemu-hpkvm-helper's peer");
            goto fail;
        }
        if (!proto_take_fds(&mh, fds, nfds)) {
            error_setg(errp, "more than %d files came with one message",
                       HPKVM_HELPER_MAX_FDS);
            goto fail;
        }
        if (!n && line->len) {
            error_setg(errp, "the peer closed the connection in the middle "
                       "of a message");
            goto fail;
        }
        if (!n) {
            goto fail;                  /* a probe, not a client */
        }
        if (memchr(buf, '\n', n) != buf + n - 1 &&
            memchr(buf, '\n', n)) {
            error_setg(errp, "more than one message on one connection");
            goto fail;
        }
        g_string_append_len(line, buf, n);
        if (line->len > HPKVM_HELPER_MAX_MSG) {
            error_setg(errp, "a message longer than %d bytes",
                       HPKVM_HELPER_MAX_MSG);
            goto fail;
        }
    }
    obj = qobject_from_json(line->str, errp);
    if (!obj) {
        goto fail;
    }
    msg = qobject_to(QDict, obj);
    if (!msg) {
        qobject_unref(obj);
        error_setg(errp, "a message that is not a JSON object");
        goto fail;
    }
    return msg;

fail:
    proto_close_fds(fds, nfds);
    return NULL;
}
