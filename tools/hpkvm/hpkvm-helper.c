/*
 * qemu-hpkvm-helper: the one owner of hpkvm's host changes
 *
 * QEMU, as whatever user runs it, asks this helper (root, started by
 * systemd like qemu-pr-helper) to lease host cores and isolate the host
 * from them.  The helper alone holds the state directory, the leases'
 * files, the journal and every isolation write; QEMU gets the open
 * leases (SCM_RIGHTS) and holds them, so a lease still dies with its VM
 * and a CPR hand-over still passes it on.  Each client is authenticated
 * (SO_PEERCRED) and held to the host's policy; its pidfd tells the helper
 * the moment it dies, and the host is reconciled at once.  Started anew,
 * the helper watches the owners of the leases alive and reconciles, so
 * nothing a crash of the helper missed stays.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <getopt.h>
#include <sys/syscall.h>
#include <glib-unix.h>
#include "qemu/config-file.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/help-texts.h"
#include "qemu/log.h"
#include "qemu/module.h"
#include "qemu/sockets.h"
#include "qemu/systemd.h"
#include "trace/control.h"
#include "qemu-version.h"
#include "qapi/error.h"
#include "qapi/qapi-visit-hpkvm.h"
#include "qapi/qobject-output-visitor.h"
#include "qobject/qlist.h"
#include "qobject/qnum.h"
#include "qobject/qstring.h"
#include "hpkvm-helper-grant.h"
#include "hpkvm-helper-policy.h"
#include "accel/hpkvm/hpkvm-helper-proto.h"
#include "accel/hpkvm/hpkvm-isolate.h"
#include "accel/hpkvm/hpkvm-state-dir.h"

#define CPU_ONLINE "/sys/devices/system/cpu/online"

/* A client's request may take this long to come; then it is dropped. */
#define HELPER_REQUEST_TIMEOUT_S 10

/*
 * Connections of one user whose request has not come yet: more are
 * closed at once, so that no user can take all the files the helper may
 * open, and with them the next VM's connection.
 */
#define HELPER_MAX_PENDING_PER_UID 16

/* Connections accepted at once, before the requests come in turn. */
#define HELPER_ACCEPT_BATCH 64

typedef struct Helper {
    HpkvmHost host;
    char *state_dir;
    HpkvmHelperPolicy *policy;
    HpkvmHelperGrants grants;   /* the kernel's, of the cores leased */
    GHashTable *watched;        /* the pids of the clients watched */
    GHashTable *pending;        /* uid: its connections waiting to be read */
    int64_t capped_at;          /* when a connection over that was last said */
    GMainLoop *loop;
} Helper;

static int helper_pidfd_open(pid_t pid)
{
    return syscall(SYS_pidfd_open, pid, 0);
}

/*
 * Under the host lock: the host as the leases alive say.  @self is not
 * moved (the client placing its own threads); the report covers
 * @report_cores.
 */
static HpkvmIsolation *helper_reconcile(Helper *h,
                                        const HpkvmCpuSet *report_cores,
                                        pid_t self, GPtrArray *failures,
                                        Error **errp)
{
    g_autoptr(HpkvmJournal) j = hpkvm_journal_open(&h->host, h->state_dir,
                                                    errp);
    g_autofree HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    HpkvmIsolateRequest req;

    if (!j || !hpkvm_leases_scan(&h->host, h->state_dir, map, errp)) {
        return NULL;
    }
    hpkvm_leases_isolated(map);
    req = (HpkvmIsolateRequest) {
        .host = &h->host,
        .journal = j,
        .leases = map,
        .report_cores = *report_cores,
        .self = self,
    };
    return hpkvm_isolate_reconcile(&req, failures, errp);
}

/* Reconcile with no report, saying what could not be restored. */
static bool helper_reconcile_all(Helper *h, const char *why,
                                 GPtrArray *failures)
{
    g_autoptr(GPtrArray) own = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(HpkvmIsolation) rep = NULL;
    Error *err = NULL;
    HpkvmCpuSet none;
    guint i;
    int lock;

    failures = failures ? failures : own;
    hpkvm_cpuset_clear(&none);
    lock = hpkvm_leases_lock_host(&h->host, h->state_dir, &err);
    if (lock >= 0) {
        rep = helper_reconcile(h, &none, 0, failures, &err);
        close(lock);
    }
    if (err) {
        error_report("%s: %s", why, error_get_pretty(err));
        g_ptr_array_add(failures, g_strdup(error_get_pretty(err)));
        error_free(err);
    }
    for (i = 0; i < failures->len; i++) {
        error_report("%s: could not restore %s", why,
                     (char *)g_ptr_array_index(failures, i));
    }
    return rep && !failures->len;
}

/* One client the helper watches, by its pidfd. */
typedef struct HelperWatch {
    Helper *h;
    pid_t pid;
} HelperWatch;

static gboolean helper_client_died(gint fd, GIOCondition cond, gpointer data)
{
    HelperWatch *w = data;
    g_autofree char *why = g_strdup_printf("pid %d exited", w->pid);

    g_hash_table_remove(w->h->watched, GINT_TO_POINTER(w->pid));
    hpkvm_helper_grants_drop(&w->h->grants, w->pid);
    /* Its leases died with it (the kernel dropped their locks). */
    if (helper_reconcile_all(w->h, why, NULL)) {
        info_report("%s: host reconciled", why);
    }
    close(fd);
    return G_SOURCE_REMOVE;
}

/* Undo what @pid's VM holds as soon as it dies, however it dies. */
static bool helper_watch(Helper *h, pid_t pid, Error **errp)
{
    HelperWatch *w;
    int fd;

    if (g_hash_table_contains(h->watched, GINT_TO_POINTER(pid))) {
        return true;
    }
    fd = helper_pidfd_open(pid);
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot watch pid %d", pid);
        return false;
    }
    w = g_new(HelperWatch, 1);
    *w = (HelperWatch) { .h = h, .pid = pid };
    g_unix_fd_add_full(G_PRIORITY_DEFAULT, fd, G_IO_IN, helper_client_died,
                       w, g_free);
    g_hash_table_add(h->watched, GINT_TO_POINTER(pid));
    return true;
}

/* The supplementary groups of @pid, as its /proc/PID/status says. */
static bool helper_peer_groups(HpkvmPeer *peer, Error **errp)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", peer->pid);
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    int i;

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        error_setg(errp, "cannot read %s", path);
        return false;
    }
    lines = g_strsplit(text, "\n", -1);
    for (i = 0; lines[i]; i++) {
        g_auto(GStrv) ids = NULL;
        unsigned uid, j;

        if (g_str_has_prefix(lines[i], "Uid:")) {
            /* Still the process that connected: the same real uid. */
            if (sscanf(lines[i] + 4, "%u", &uid) != 1 || uid != peer->uid) {
                error_setg(errp, "pid %d is not the client that connected",
                           peer->pid);
                return false;
            }
        }
        if (!g_str_has_prefix(lines[i], "Groups:")) {
            continue;
        }
        ids = g_strsplit_set(g_strstrip(lines[i] + 7), " \t", -1);
        for (j = 0; ids[j]; j++) {
            unsigned gid;

            if (*ids[j] && !qemu_strtoui(ids[j], NULL, 10, &gid)) {
                gid_t g = gid;

                g_array_append_val(peer->groups, g);
            }
        }
    }
    return true;
}

static const char *helper_arg_str(QDict *args, const char *key, bool need,
                                  Error **errp)
{
    QObject *o = qdict_get(args, key);

    if (!o && !need) {
        return NULL;
    }
    if (!qobject_to(QString, o)) {
        error_setg(errp, "'%s' must be a string", key);
        return NULL;
    }
    return qstring_get_str(qobject_to(QString, o));
}

/* What a "lease" asks, checked against the host and its policy. */
typedef struct LeaseAsk {
    HpkvmCpuSet cores;
    HpkvmCpuSet adopt;          /* handed over by a previous QEMU (CPR) */
    const char *housekeeping;   /* NULL: the cores no one leases */
    OnOffAuto isolation;
} LeaseAsk;

static bool helper_parse_lease(Helper *h, QDict *args, size_t nfds,
                               const HpkvmPeer *peer, LeaseAsk *ask,
                               Error **errp)
{
    const char *cores, *iso;
    QList *adopt = qdict_haskey(args, "adopt") ?
                   qdict_get_qlist(args, "adopt") : NULL;
    const QListEntry *e;
    size_t n = 0;
    int v;

    cores = helper_arg_str(args, "cores", true, errp);
    if (!cores ||
        !hpkvm_cpuset_parse(cores, &ask->cores, "host-cpus", errp)) {
        return false;
    }
    ask->housekeeping = helper_arg_str(args, "housekeeping", false, errp);
    iso = helper_arg_str(args, "isolation", true, errp);
    if (!iso) {
        return false;
    }
    v = qapi_enum_parse(&OnOffAuto_lookup, iso, -1, errp);
    if (v < 0) {
        return false;
    }
    ask->isolation = v;
    if (hpkvm_cpuset_empty(&ask->cores)) {
        error_setg(errp, "no host core to lease");
        return false;
    }
    if (hpkvm_cpuset_count(&ask->cores) > HPKVM_HELPER_MAX_FDS) {
        error_setg(errp, "%u host cores for one VM: the helper hands over "
                   "at most %d", hpkvm_cpuset_count(&ask->cores),
                   HPKVM_HELPER_MAX_FDS);
        return false;
    }
    hpkvm_cpuset_clear(&ask->adopt);
    for (e = adopt ? qlist_first(adopt) : NULL; e; e = qlist_next(e)) {
        QNum *num = qobject_to(QNum, qlist_entry_obj(e));
        int64_t cpu;

        if (!num || !qnum_get_try_int(num, &cpu) ||
            !hpkvm_cpuset_has(&ask->cores, cpu) ||
            hpkvm_cpuset_has(&ask->adopt, cpu)) {
            error_setg(errp, "'adopt' must list cores of 'cores', once each");
            return false;
        }
        set_bit(cpu, ask->adopt.bits);
        n++;
    }
    if (n != nfds) {
        error_setg(errp, "'adopt' lists %zu cores, but %zu files came", n,
                   nfds);
        return false;
    }
    return hpkvm_helper_policy_allows(h->policy, peer, &ask->cores, errp);
}

/* Under the host lock: the cores QEMU's other threads and the host keep. */
static bool helper_housekeeping(Helper *h, const LeaseAsk *ask,
                                const HpkvmLeaseMap *map, HpkvmCpuSet *hk,
                                Error **errp)
{
    HpkvmCpuSet online, taken;
    unsigned cpu;

    if (ask->housekeeping) {
        if (!hpkvm_cpuset_parse(ask->housekeeping, hk, "housekeeping-cpus",
                                errp)) {
            return false;
        }
    } else {
        if (!hpkvm_host_read_cpus(&h->host, CPU_ONLINE, &online, errp)) {
            return false;
        }
        hpkvm_cpuset_andnot(hk, &online, &ask->cores);
        hpkvm_cpuset_andnot(hk, hk, &map->leased);
    }
    bitmap_and(taken.bits, hk->bits, map->leased.bits, HPKVM_MAX_HOST_CPUS);
    if (!hpkvm_cpuset_empty(&taken)) {
        cpu = hpkvm_cpuset_next(&taken, 0);
        error_setg(errp, "housekeeping core %u is leased by another "
                   "VM (pid %d): choose other housekeeping-cpus=", cpu,
                   map->owner[cpu]);
        return false;
    }
    if (hpkvm_cpuset_empty(hk)) {
        error_setg(errp, "every core outside host-cpus= is leased by "
                   "other VMs: none is left for QEMU's other threads; set "
                   "housekeeping-cpus=");
        return false;
    }
    return true;
}

/*
 * Isolation failed part way (dynamic-isolation=auto goes on without
 * it): the leases become shared and the host is put back as if they
 * were not there, so that the report saying "off" is true; or, if that
 * fails too, it says what stays until the VM exits.  Takes @failed.
 */
static HpkvmIsolation *helper_isolation_rollback(Helper *h, HpkvmLeases *l,
                                                 const LeaseAsk *ask,
                                                 Error *failed)
{
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(HpkvmIsolation) back = NULL;
    g_autofree char *reason = NULL;
    Error *err = NULL;

    if (hpkvm_leases_set_shared(l, true, &err)) {
        back = helper_reconcile(h, &ask->cores, l->owner, failures, &err);
    }
    if (back && !failures->len) {
        reason = g_strdup_printf("%s; the changes already made were put "
                                 "back", error_get_pretty(failed));
    } else {
        g_autofree char *why = NULL;

        /* Its exit reconciles again. */
        if (err) {
            g_ptr_array_add(failures, g_strdup(error_get_pretty(err)));
        }
        g_ptr_array_add(failures, NULL);
        why = g_strjoinv("; ", (char **)failures->pdata);
        reason = g_strdup_printf("%s; some changes already made stay until "
                                 "QEMU exits: %s", error_get_pretty(failed),
                                 why);
    }
    error_free(err);
    error_free(failed);
    return hpkvm_isolate_report_off(&h->host, &ask->cores, ask->isolation,
                                    reason);
}

/* Under the host lock: the leases, then isolation as the client asks. */
static bool helper_grant(Helper *h, const LeaseAsk *ask, HpkvmLeases *l,
                         const int *fds, HpkvmCpuSet *hk,
                         HpkvmIsolation **rep, Error **errp)
{
    g_autofree HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    Error *local_err = NULL;
    HpkvmCpuSet rest;
    unsigned cpu;
    size_t i = 0;

    if (!hpkvm_leases_scan(&h->host, h->state_dir, map, errp) ||
        !helper_housekeeping(h, ask, map, hk, errp)) {
        return false;
    }
    HPKVM_CPUSET_FOREACH(cpu, &ask->adopt) {
        int fd = dup(fds[i++]);

        if (fd < 0 || !hpkvm_leases_adopt(l, &h->host, h->state_dir, cpu,
                                          fd, errp)) {
            if (fd >= 0) {
                close(fd);
            }
            return false;
        }
    }
    hpkvm_cpuset_andnot(&rest, &ask->cores, &ask->adopt);
    if (!hpkvm_leases_take(l, &h->host, h->state_dir, &rest, errp)) {
        return false;
    }
    if (ask->isolation == ON_OFF_AUTO_OFF) {
        *rep = hpkvm_isolate_report_off(&h->host, &ask->cores, ask->isolation,
                                        "dynamic-isolation=off");
        return true;
    }
    *rep = helper_reconcile(h, &ask->cores, l->owner, NULL, &local_err);
    if (*rep) {
        (*rep)->requested = ask->isolation;
        return true;
    }
    if (ask->isolation == ON_OFF_AUTO_ON) {
        error_setg(errp, "%s (dynamic-isolation=on): use "
                   "dynamic-isolation=auto to go on without isolation",
                   error_get_pretty(local_err));
        error_free(local_err);
        /* Put back what was changed, as if this VM had never asked. */
        hpkvm_leases_release(l);
        helper_reconcile_all(h, "after a refused isolation", NULL);
        return false;
    }
    *rep = helper_isolation_rollback(h, l, ask, local_err);
    warn_report("pid %d: dynamic isolation is off: %s", l->owner,
                (*rep)->reason);
    return true;
}

static QDict *helper_lease(Helper *h, const HpkvmPeer *peer, QDict *args,
                           int *fds, size_t *nfds, Error **errp)
{
    g_autofree HpkvmLeases *l = g_new0(HpkvmLeases, 1);
    g_autoptr(HpkvmIsolation) rep = NULL;
    g_autofree char *hk_list = NULL;
    g_autofree char *cores = NULL;
    Visitor *v;
    QObject *iso = NULL;
    QDict *ret;
    QList *taken;
    LeaseAsk ask;
    HpkvmCpuSet hk;
    unsigned cpu;
    bool ok, granted;
    int lock;

    if (!helper_parse_lease(h, args, *nfds, peer, &ask, errp) ||
        !helper_watch(h, peer->pid, errp)) {
        return NULL;
    }
    hpkvm_leases_init(l);
    l->owner = peer->pid;
    l->shared = ask.isolation == ON_OFF_AUTO_OFF;
    lock = hpkvm_leases_lock_host(&h->host, h->state_dir, errp);
    if (lock < 0) {
        return NULL;
    }
    ok = helper_grant(h, &ask, l, fds, &hk, &rep, errp);
    granted = ok &&
        hpkvm_helper_grants_give(&h->grants, &ask.cores, peer->pid, errp);
    if (!granted) {
        hpkvm_leases_release(l);
    }
    close(lock);
    if (ok && !granted) {
        /* Isolated for leases that are gone: as the others say. */
        helper_reconcile_all(h, "a lease not granted", NULL);
    }
    if (!granted) {
        return NULL;
    }

    /* The client keeps the leases; the files it handed over are its own. */
    while (*nfds) {
        close(fds[--*nfds]);
    }
    taken = qlist_new();
    HPKVM_CPUSET_FOREACH(cpu, &l->held) {
        if (!hpkvm_cpuset_has(&ask.adopt, cpu)) {
            qlist_append_int(taken, cpu);
            fds[(*nfds)++] = l->fd[cpu];
        } else {
            close(l->fd[cpu]);
        }
    }
    v = qobject_output_visitor_new(&iso);
    visit_type_HpkvmIsolation(v, NULL, &rep, &error_abort);
    visit_complete(v, &iso);
    visit_free(v);
    hk_list = hpkvm_cpuset_format(&hk);
    cores = hpkvm_cpuset_format(&ask.cores);
    info_report("pid %d (uid %u): host cores %s leased, isolation %s",
                peer->pid, (unsigned)peer->uid, cores,
                rep->active ? "on" : "off");
    ret = qdict_new();
    qdict_put_str(ret, "housekeeping", hk_list);
    qdict_put(ret, "leases", taken);
    qdict_put_obj(ret, "isolation", iso);
    return ret;
}

/*
 * The host as the leases alive say, now: after a VM gave its cores back,
 * or once KVM's own threads for a VM exist.  Any client may ask: it
 * changes nothing the leases do not call for.
 */
static QDict *helper_reconcile_now(Helper *h, const HpkvmPeer *peer,
                                   Error **errp)
{
    g_autoptr(GPtrArray) failures = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *why = g_strdup_printf("pid %d asked to reconcile",
                                        peer->pid);
    QList *list = qlist_new();
    QDict *ret = qdict_new();
    guint i;

    helper_reconcile_all(h, why, failures);
    for (i = 0; i < failures->len; i++) {
        qlist_append_str(list, g_ptr_array_index(failures, i));
    }
    qdict_put(ret, "failures", list);
    return ret;
}

static QDict *helper_dispatch(Helper *h, const HpkvmPeer *peer, QDict *req,
                              int *fds, size_t *nfds, Error **errp)
{
    const char *cmd = qdict_get_try_str(req, "execute");
    QDict *args = qdict_get_qdict(req, "arguments");
    g_autoptr(QDict) empty = qdict_new();

    args = args ? args : empty;
    if (cmd && !strcmp(cmd, "lease")) {
        return helper_lease(h, peer, args, fds, nfds, errp);
    }
    if (cmd && !strcmp(cmd, "reconcile") && !*nfds) {
        return helper_reconcile_now(h, peer, errp);
    }
    error_setg(errp, "unknown request '%s'", cmd ? cmd : "");
    return NULL;
}

/* The reply to a request that failed, in QMP's shape; takes @err. */
static QDict *helper_error_reply(const struct ucred *cred, Error *err)
{
    QDict *reply = qdict_new();
    QDict *e = qdict_new();

    error_report("pid %d (uid %u): %s", cred->pid, (unsigned)cred->uid,
                 error_get_pretty(err));
    qdict_put_str(e, "class", "GenericError");
    qdict_put_str(e, "desc", error_get_pretty(err));
    qdict_put(reply, "error", e);
    error_free(err);
    return reply;
}

/*
 * Answers @req from the client on @sock, @nfds files with it (closed
 * here).  The reply goes out on @sock made blocking again, with a
 * timeout: it is small unless the request was a lease the policy granted.
 */
static void helper_answer(Helper *h, int sock, const struct ucred *cred,
                          QDict *req, int *fds, size_t nfds)
{
    struct timeval tv = { .tv_sec = HELPER_REQUEST_TIMEOUT_S };
    g_autoptr(QDict) reply = NULL;
    g_autoptr(GArray) groups = g_array_new(false, false, sizeof(gid_t));
    HpkvmPeer peer = {
        .pid = cred->pid, .uid = cred->uid, .gid = cred->gid,
        .groups = groups,
    };
    QDict *ret = NULL;
    Error *err = NULL;

    if (helper_peer_groups(&peer, &err)) {
        ret = helper_dispatch(h, &peer, req, fds, &nfds, &err);
    }
    if (ret) {
        reply = qdict_new();
        qdict_put(reply, "return", ret);
    } else {
        reply = helper_error_reply(cred, err);
        while (nfds) {
            close(fds[--nfds]);
        }
    }
    /*
     * The leases go out with the reply, and our copies are closed: if
     * the client is gone by now, they die here and its pidfd says so.
     */
    err = NULL;
    qemu_socket_set_block(sock);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (!hpkvm_helper_send(sock, reply, fds, nfds, &err)) {
        error_report("pid %d: %s", peer.pid, error_get_pretty(err));
        error_free(err);
    }
    while (nfds) {
        close(fds[--nfds]);
    }
}

/*
 * One connection whose request is on its way.  Each is read as its
 * socket becomes readable, and dropped when its request is late: a
 * client that sends nothing, or sends slowly, holds up no other.
 */
typedef struct HelperClient {
    Helper *h;
    int sock;
    struct ucred cred;
    HpkvmHelperReader reader;
    guint watch;                /* the socket readable */
    guint timeout;              /* the request late */
} HelperClient;

static void helper_pending_add(Helper *h, uid_t uid, int delta)
{
    gpointer key = GUINT_TO_POINTER(uid);
    int n = GPOINTER_TO_INT(g_hash_table_lookup(h->pending, key)) + delta;

    if (n > 0) {
        g_hash_table_insert(h->pending, key, GINT_TO_POINTER(n));
    } else {
        g_hash_table_remove(h->pending, key);
    }
}

static void helper_client_close(HelperClient *c)
{
    g_source_remove(c->watch);
    g_source_remove(c->timeout);
    helper_pending_add(c->h, c->cred.uid, -1);
    hpkvm_helper_reader_cleanup(&c->reader);
    close(c->sock);
    g_free(c);
}

static gboolean helper_client_late(gpointer data)
{
    HelperClient *c = data;

    warn_report("pid %d (uid %u): no request within %d s; connection closed",
                c->cred.pid, (unsigned)c->cred.uid, HELPER_REQUEST_TIMEOUT_S);
    helper_client_close(c);
    return G_SOURCE_REMOVE;
}

static gboolean helper_client_readable(gint fd, GIOCondition cond,
                                       gpointer data)
{
    HelperClient *c = data;
    int fds[HPKVM_HELPER_MAX_FDS];
    g_autoptr(QDict) req = NULL;
    Error *err = NULL;
    size_t nfds = 0;
    int done = hpkvm_helper_read(c->sock, &c->reader, &err);

    if (!done) {
        return G_SOURCE_CONTINUE;
    }
    if (done > 0) {
        req = hpkvm_helper_reader_take(&c->reader, fds, &nfds, &err);
    }
    if (req) {
        helper_answer(c->h, c->sock, &c->cred, req, fds, nfds);
    } else if (err) {
        /* What could not be read gets an error, as a bad request does. */
        g_autoptr(QDict) reply = helper_error_reply(&c->cred, err);

        hpkvm_helper_send(c->sock, reply, NULL, 0, NULL);
    }
    helper_client_close(c);
    return G_SOURCE_REMOVE;
}

/* A connection accepted: read it as its request comes, or close it. */
static void helper_take_client(Helper *h, int sock)
{
    socklen_t len = sizeof(struct ucred);
    HelperClient *c = g_new0(HelperClient, 1);
    int64_t now = g_get_monotonic_time();

    c->h = h;
    c->sock = sock;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) < 0) {
        error_report("cannot tell who connected: %s", strerror(errno));
        close(sock);
        g_free(c);
        return;
    }
    if (GPOINTER_TO_INT(g_hash_table_lookup(h->pending,
                                            GUINT_TO_POINTER(c->cred.uid)))
        >= HELPER_MAX_PENDING_PER_UID) {
        /* Said once in a while: a flood of them must not flood the log. */
        if (now - h->capped_at > HELPER_REQUEST_TIMEOUT_S * G_USEC_PER_SEC) {
            warn_report("pid %d (uid %u): %d connections of this user wait "
                        "already; connection closed (and more, unsaid, for "
                        "%d s)", c->cred.pid, (unsigned)c->cred.uid,
                        HELPER_MAX_PENDING_PER_UID, HELPER_REQUEST_TIMEOUT_S);
            h->capped_at = now;
        }
        close(sock);
        g_free(c);
        return;
    }
    helper_pending_add(h, c->cred.uid, 1);
    qemu_socket_set_nonblock(sock);
    hpkvm_helper_reader_init(&c->reader);
    c->watch = g_unix_fd_add(sock, G_IO_IN | G_IO_HUP | G_IO_ERR,
                             helper_client_readable, c);
    c->timeout = g_timeout_add_seconds(HELPER_REQUEST_TIMEOUT_S,
                                       helper_client_late, c);
}

/*
 * The connections waiting on the (non-blocking) listening socket, a
 * batch of them: a flood of connections must not fill the backlog that
 * the next VM's connect waits in, nor keep the helper from reading the
 * requests of those it took.
 */
static gboolean helper_accept(gint fd, GIOCondition cond, gpointer data)
{
    int i, sock;

    for (i = 0; i < HELPER_ACCEPT_BATCH; i++) {
        sock = qemu_accept(fd, NULL, NULL);
        if (sock < 0) {
            break;
        }
        helper_take_client(data, sock);
    }
    return G_SOURCE_CONTINUE;
}

/* A helper (re)started: watch the VMs alive, undo what dead ones left. */
static bool helper_start(Helper *h, Error **errp)
{
    g_autofree HpkvmLeaseMap *map = g_new0(HpkvmLeaseMap, 1);
    unsigned cpu;
    int lock = hpkvm_leases_lock_host(&h->host, h->state_dir, errp);

    if (lock < 0) {
        return false;
    }
    if (!hpkvm_leases_scan(&h->host, h->state_dir, map, errp)) {
        close(lock);
        return false;
    }
    close(lock);
    HPKVM_CPUSET_FOREACH(cpu, &map->leased) {
        Error *err = NULL;

        if (!map->owner[cpu] || !helper_watch(h, map->owner[cpu], &err)) {
            /* Its lock is alive: its holder's exit goes unseen. */
            warn_report("host core %u is leased by pid %d, which cannot be "
                        "watched (%s): its host changes are undone when "
                        "another VM starts or exits", cpu, map->owner[cpu],
                        err ? error_get_pretty(err) : "no pid");
            error_free(err);
        }
    }
    helper_reconcile_all(h, "at start", NULL);
    return true;
}

static gboolean helper_quit(gpointer data)
{
    g_main_loop_quit(((Helper *)data)->loop);
    return G_SOURCE_REMOVE;
}

static void helper_usage(const char *name)
{
    printf("Usage: %s [OPTION]...\n"
           "Lease host cores to hpkvm VMs and isolate the host from them, "
           "for QEMU\nrunning as any user the policy allows.\n\n"
           "  -k, --socket=PATH      listen on PATH (default %s, under\n"
           "                         --x-host-root; systemd's socket if "
           "it gives one)\n"
           "  -p, --policy=PATH      the host's policy (default %s, "
           "under\n"
           "                         --x-host-root)\n"
           "      --x-host-root=DIR  for tests: a fake tree standing for "
           "/proc, /sys,\n"
           "                         cgroups and /run\n"
           "      --x-state-dir=DIR  for tests: leases and journal under a "
           "fake root\n"
           "  -f, --pidfile=PATH     write the helper's pid to PATH, "
           "removed at its exit\n"
           "  -T, --trace [[enable=]<pattern>][,events=<file>]"
           "[,file=<file>]\n"
           "                         specify tracing options\n"
           "  -V, --version          output version information and exit\n"
           "  -h, --help             this help\n",
           name, HPKVM_HELPER_SOCKET, HPKVM_HELPER_POLICY);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 'k' },
        { "policy", required_argument, NULL, 'p' },
        { "x-host-root", required_argument, NULL, 'R' },
        { "x-state-dir", required_argument, NULL, 'S' },
        { "pidfile", required_argument, NULL, 'f' },
        { "trace", required_argument, NULL, 'T' },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    g_autofree char *socket_path = NULL;
    g_autofree char *policy = NULL;
    g_autofree char *root = g_strdup("/");
    g_autofree char *pidfile = NULL;
    Helper h = { .state_dir = g_strdup(HPKVM_STATE_DIR) };
    Error *err = NULL;
    int c, listen_fd;

    error_init(argv[0]);
    /* -T as QEMU's other helpers have it: the host code's trace events. */
    module_call_init(MODULE_INIT_TRACE);
    qemu_add_opts(&qemu_trace_opts);
    while ((c = getopt_long(argc, argv, "k:p:f:T:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'k':
            g_free(socket_path);
            socket_path = g_strdup(optarg);
            break;
        case 'p':
            g_free(policy);
            policy = g_strdup(optarg);
            break;
        case 'R':
            g_free(root);
            root = g_strdup(optarg);
            break;
        case 'S':
            g_free(h.state_dir);
            h.state_dir = g_strdup(optarg);
            break;
        case 'f':
            g_free(pidfile);
            pidfile = g_strdup(optarg);
            break;
        case 'T':
            trace_opt_parse(optarg);
            break;
        case 'V':
            printf("%s " QEMU_FULL_VERSION "\n" QEMU_COPYRIGHT "\n",
                   argv[0]);
            return 0;
        case 'h':
            helper_usage(argv[0]);
            return 0;
        default:
            error_report("see --help");
            return 2;
        }
    }
    if (optind < argc) {
        error_report("unexpected argument '%s' (see --help)", argv[optind]);
        return 2;
    }
    if (!trace_init_backends()) {
        return 1;
    }
    trace_init_file();
    qemu_set_log(LOG_TRACE, &error_fatal);

    hpkvm_host_init(&h.host, root);
    hpkvm_helper_grants_init(&h.grants, &h.host);
    if (!policy) {
        policy = hpkvm_host_path(&h.host, HPKVM_HELPER_POLICY);
    }
    h.policy = hpkvm_helper_policy_load(policy, &err);
    if (!h.policy) {
        error_report_err(err);
        return 1;
    }
    h.watched = g_hash_table_new(NULL, NULL);
    h.pending = g_hash_table_new(NULL, NULL);
    h.loop = g_main_loop_new(NULL, false);
    if (!h.host.real && getuid() != 0) {
        /* Fake trees are for tests; nothing else relaxes. */
        warn_report("running unprivileged on a fake host tree");
    }
    if (!helper_start(&h, &err)) {
        error_report_err(err);
        return 1;
    }
    if (!socket_path && check_socket_activation() == 1) {
        listen_fd = FIRST_SOCKET_ACTIVATION_FD;
    } else {
        g_autofree char *path = socket_path ? g_strdup(socket_path) :
            hpkvm_host_path(&h.host, HPKVM_HELPER_SOCKET);
        SocketAddress addr = {
            .type = SOCKET_ADDRESS_TYPE_UNIX,
            .u.q_unix.path = path,
        };

        /* A backlog for every VM that connects while others are read. */
        listen_fd = socket_listen(&addr, SOMAXCONN, &err);
        if (listen_fd < 0) {
            error_report_err(err);
            return 1;
        }
        /* Any user may ask; the policy decides who gets what. */
        if (chmod(path, 0666) < 0) {
            error_report("cannot chmod %s: %s", path, strerror(errno));
            return 1;
        }
    }
    /* Once it serves: a supervisor reading the pid may send it requests. */
    if (pidfile && !qemu_write_pidfile(pidfile, &err)) {
        error_report_err(err);
        return 1;
    }
    qemu_socket_set_nonblock(listen_fd);
    g_unix_fd_add(listen_fd, G_IO_IN, helper_accept, &h);
    g_unix_signal_add(SIGTERM, helper_quit, &h);
    g_unix_signal_add(SIGINT, helper_quit, &h);
    g_main_loop_run(h.loop);
    /*
     * The leases live with their VMs, the journal on disk: a helper that
     * stops changes nothing, and its next start picks the watch up.
     */
    hpkvm_helper_policy_free(h.policy);
    g_hash_table_destroy(h.watched);
    g_hash_table_destroy(h.pending);
    g_main_loop_unref(h.loop);
    hpkvm_host_cleanup(&h.host);
    g_free(h.state_dir);
    if (pidfile) {
        unlink(pidfile);
    }
    return 0;
}
