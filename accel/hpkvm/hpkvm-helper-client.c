/*
 * hpkvm: QEMU's side of qemu-hpkvm-helper
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/sockets.h"
#include "block/thread-pool.h"
#include "qapi/error.h"
#include "qapi/qapi-visit-hpkvm.h"
#include "qapi/qobject-input-visitor.h"
#include "qobject/qlist.h"
#include "qobject/qnum.h"
#include "qobject/qstring.h"
#include "hpkvm-helper-client.h"
#include "hpkvm-helper-proto.h"
#include "trace.h"

/* A reconcile of a big host walks every task: give it time. */
#define CLIENT_REPLY_TIMEOUT_S 120

/*
 * One request, one reply: its "return", the files that came with it in
 * @rfds (*@rnfds of them), or NULL with the helper's error.
 */
static QDict *client_call(const char *socket, const char *cmd, QDict *args,
                          const int *fds, size_t nfds, int *rfds,
                          size_t *rnfds, Error **errp)
{
    ERRP_GUARD();
    struct timeval tv = { .tv_sec = CLIENT_REPLY_TIMEOUT_S };
    g_autoptr(QDict) req = qdict_new();
    g_autoptr(QDict) reply = NULL;
    Error *local_err = NULL;
    QDict *ret, *err;
    int sock;

    *rnfds = 0;
    sock = unix_connect(socket, errp);
    if (sock < 0) {
        error_prepend(errp, "host-cpus= needs qemu-hpkvm-helper, "
                      "which leases the cores and isolates the host: ");
        error_append_hint(errp, "Start it (systemctl enable --now "
                          "qemu-hpkvm-helper.socket), or set helper= to "
                          "the socket it listens on; see "
                          "docs/system/hpkvm-helper.rst.\n");
        return NULL;
    }
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    trace_hpkvm_helper_call(cmd, socket, nfds);
    qdict_put_str(req, "execute", cmd);
    qdict_put(req, "arguments", args);
    if (!hpkvm_helper_send(sock, req, fds, nfds, errp)) {
        close(sock);
        return NULL;
    }
    reply = hpkvm_helper_recv(sock, rfds, rnfds, &local_err);
    close(sock);
    if (!reply) {
        /* No error: it closed the connection (killed mid-request?). */
        error_setg(errp, "no answer from qemu-hpkvm-helper at %s%s%s",
                   socket, local_err ? ": " : "",
                   local_err ? error_get_pretty(local_err) : "");
        error_free(local_err);
        return NULL;
    }
    err = qdict_get_qdict(reply, "error");
    ret = qdict_get_qdict(reply, "return");
    trace_hpkvm_helper_reply(cmd, ret && !err, *rnfds);
    if (err || !ret) {
        error_setg(errp, "qemu-hpkvm-helper refused: %s",
                   err && qdict_get_try_str(err, "desc") ?
                   qdict_get_try_str(err, "desc") : "(no reason)");
        while (*rnfds) {
            close(rfds[--*rnfds]);
        }
        return NULL;
    }
    qobject_ref(ret);
    return ret;
}

/* Takes the leases of @ret's "leases" into @l, with their files. */
static bool client_take_leases(QDict *ret, int *fds, size_t nfds,
                               HpkvmLeases *l, const HpkvmCpuSet *cores,
                               Error **errp)
{
    QList *list = qdict_get_qlist(ret, "leases");
    const QListEntry *e;
    size_t i = 0;

    for (e = list ? qlist_first(list) : NULL; e; e = qlist_next(e)) {
        QNum *num = qobject_to(QNum, qlist_entry_obj(e));
        int64_t cpu;

        if (!num || !qnum_get_try_int(num, &cpu) || i >= nfds ||
            !hpkvm_cpuset_has(cores, cpu) || hpkvm_cpuset_has(&l->held, cpu)) {
            break;
        }
        l->fd[cpu] = fds[i++];
        set_bit(cpu, l->held.bits);
    }
    if (e || i != nfds) {
        error_setg(errp, "qemu-hpkvm-helper's leases do not match "
                   "host-cpus=");
        while (i < nfds) {
            close(fds[i++]);
        }
        return false;
    }
    if (!hpkvm_cpuset_equal(&l->held, cores)) {
        error_setg(errp, "qemu-hpkvm-helper leased fewer cores than "
                   "host-cpus= lists");
        return false;
    }
    return true;
}

bool hpkvm_helper_lease(const char *socket, const HpkvmCpuSet *cores,
                        const char *housekeeping, OnOffAuto isolation,
                        HpkvmLeases *l, HpkvmCpuSet *hk,
                        HpkvmIsolation **rep, Error **errp)
{
    int fds[HPKVM_HELPER_MAX_FDS], rfds[HPKVM_HELPER_MAX_FDS];
    g_autofree char *list = hpkvm_cpuset_format(cores);
    g_autoptr(QDict) ret = NULL;
    QDict *args = qdict_new();
    QList *adopt = qlist_new();
    Visitor *v;
    size_t nfds = 0, rnfds;
    unsigned cpu;
    bool ok;

    if (hpkvm_cpuset_count(&l->held) > HPKVM_HELPER_MAX_FDS) {
        error_setg(errp, "%u leased host cores to hand over, but "
                   "qemu-hpkvm-helper adopts at most %d for one VM",
                   hpkvm_cpuset_count(&l->held), HPKVM_HELPER_MAX_FDS);
        qobject_unref(args);
        qobject_unref(adopt);
        return false;
    }
    HPKVM_CPUSET_FOREACH(cpu, &l->held) {
        qlist_append_int(adopt, cpu);
        fds[nfds++] = l->fd[cpu];
    }
    qdict_put_str(args, "cores", list);
    if (housekeeping) {
        qdict_put_str(args, "housekeeping", housekeeping);
    }
    qdict_put_str(args, "isolation", OnOffAuto_str(isolation));
    qdict_put(args, "adopt", adopt);
    ret = client_call(socket, "lease", args, fds, nfds, rfds, &rnfds, errp);
    if (!ret || !client_take_leases(ret, rfds, rnfds, l, cores, errp) ||
        !hpkvm_cpuset_parse(qdict_get_try_str(ret, "housekeeping") ?: "",
                            hk, "qemu-hpkvm-helper's housekeeping", errp)) {
        return false;
    }
    if (!qdict_haskey(ret, "isolation")) {
        error_setg(errp, "qemu-hpkvm-helper sent no isolation report");
        return false;
    }
    v = qobject_input_visitor_new(qdict_get(ret, "isolation"));
    ok = visit_type_HpkvmIsolation(v, NULL, rep, errp);
    visit_free(v);
    return ok;
}

bool hpkvm_helper_reconcile(const char *socket, GPtrArray *failures,
                            Error **errp)
{
    int rfds[HPKVM_HELPER_MAX_FDS];
    g_autoptr(QDict) ret = NULL;
    const QListEntry *e;
    QList *list;
    size_t rnfds;

    ret = client_call(socket, "reconcile", qdict_new(), NULL, 0, rfds, &rnfds,
                      errp);
    if (!ret) {
        return false;
    }
    while (rnfds) {
        close(rfds[--rnfds]);
    }
    list = qdict_get_qlist(ret, "failures");
    for (e = list ? qlist_first(list) : NULL; e; e = qlist_next(e)) {
        QString *s = qobject_to(QString, qlist_entry_obj(e));

        g_ptr_array_add(failures, g_strdup(s ? qstring_get_str(s) : "?"));
    }
    return true;
}

typedef struct ClientReconcile {
    char *socket;
    GPtrArray *failures;
    Error *err;
    HpkvmHelperReconciled *done;
    void *opaque;
} ClientReconcile;

/* In a worker thread: nothing here touches QEMU's state. */
static int client_reconcile_work(void *opaque)
{
    ClientReconcile *r = opaque;

    return hpkvm_helper_reconcile(r->socket, r->failures, &r->err) ?
           0 : -EIO;
}

/* Back in the main loop. */
static void client_reconcile_done(void *opaque, int ret)
{
    ClientReconcile *r = opaque;

    trace_hpkvm_helper_reconciled(r->failures->len, !r->err);
    r->done(r->failures, r->err, r->opaque);
    g_ptr_array_unref(r->failures);
    g_free(r->socket);
    g_free(r);
}

void hpkvm_helper_reconcile_async(const char *socket,
                                  HpkvmHelperReconciled *done, void *opaque)
{
    ClientReconcile *r = g_new0(ClientReconcile, 1);

    r->socket = g_strdup(socket);
    r->failures = g_ptr_array_new_with_free_func(g_free);
    r->done = done;
    r->opaque = opaque;
    thread_pool_submit_aio(client_reconcile_work, r, client_reconcile_done,
                           r);
}
