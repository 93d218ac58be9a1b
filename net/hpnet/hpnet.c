/*
 * hpnet: one -netdev that chooses virtio-net, vhost-net, vhost-user or an
 * SR-IOV VF by need, probes the host, falls back, and reports
 *
 * -netdev hpnet,id=n0,need=latency,vhost-user-socket=/run/vs0 beside
 * -device virtio-net-pci,netdev=n0 creates, under the id n0, the backend
 * the decision tree picks among those the host really has: a tap (with or
 * without vhost-net) or vhost-user.  A backend whose probe passed but
 * that fails to come up is passed over too, with the error as its
 * reason, unless backend= forced it.  SR-IOV is a device, not a netdev:
 * hpnet then brings up the standby's backend under n0 and adds a
 * vfio-pci device for the VF with failover_pair_id= the virtio-net
 * device named by standby=, which must have failover=on.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/option.h"
#include "qemu/config-file.h"
#include "qemu/queue.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-hpnet.h"
#include "qapi/clone-visitor.h"
#include "qapi/qapi-visit-hpnet.h"
#include "chardev/char.h"
#include "chardev/char-socket.h"
#include "io/channel-socket.h"
#include "qemu/bswap.h"
#include "system/hostmem.h"
#include "hw/qdev-core.h"
#include "hw/virtio/virtio-net.h"
#include "monitor/monitor.h"
#include "monitor/hmp.h"
#include "net/net.h"
#include "net/vhost_net.h"
#include "system/system.h"
#include "../clients.h"
#include "hpnet-probe.h"
#include "trace.h"

typedef struct HpnetState {
    char *id;
    HpnetNeed need;
    bool forced;
    HpnetBackend backend;
    HpnetCandidateList *candidates;
    char *vf;
    char *standby;
    bool vhostfd_taken;         /* vhostfd= handed to tap, or closed */
    QTAILQ_ENTRY(HpnetState) next;
} HpnetState;

static QTAILQ_HEAD(, HpnetState) hpnets = QTAILQ_HEAD_INITIALIZER(hpnets);
static Notifier backend_check;

static void hpnet_state_free(HpnetState *s)
{
    qapi_free_HpnetCandidateList(s->candidates);
    g_free(s->id);
    g_free(s->vf);
    g_free(s->standby);
    g_free(s);
}

/*
 * Forget the hpnet netdevs netdev_del removed.  Net clients have no
 * removal notifier; a removed one is no longer found by its id, and its
 * id can only be taken again once it is gone, so looking at each
 * query and each creation is enough.
 */
static void hpnet_forget_removed(void)
{
    HpnetState *s, *tmp;

    QTAILQ_FOREACH_SAFE(s, &hpnets, next, tmp) {
        if (!qemu_find_netdev(s->id)) {
            QTAILQ_REMOVE(&hpnets, s, next);
            hpnet_state_free(s);
        }
    }
}

static int hpnet_find_unshared_ram(Object *obj, void *opaque)
{
    HostMemoryBackend *ram = (HostMemoryBackend *)
        object_dynamic_cast(obj, TYPE_MEMORY_BACKEND);
    bool *any = opaque;

    if (!ram || !host_memory_backend_is_mapped(ram)) {
        return 0;
    }
    *any = true;
    return !object_property_get_bool(obj, "share", NULL);
}

/*
 * vhost-user maps all of guest RAM: every memory backend that holds some
 * (-machine memory-backend=, each -numa node,memdev=, DIMMs) is shared.
 */
static bool hpnet_guest_ram_shared(void)
{
    bool any = false;

    return !object_child_foreach_recursive(object_get_objects_root(),
                                           hpnet_find_unshared_ram, &any) &&
           any;
}

/*
 * vhostfd= goes once: to the tap of a backend with vhost-net, or closed
 * unused by any other rather than kept open (or named in the monitor)
 * for the VM's life.  A fallback to the next backend after either must
 * not touch it: by then its number may be another file of QEMU's.
 */
static const char *hpnet_take_vhostfd(HpnetState *s,
                                      const NetdevHpnetOptions *o, bool use)
{
    int fd;

    if (!o->vhostfd || s->vhostfd_taken) {
        return NULL;
    }
    s->vhostfd_taken = true;
    if (use) {
        return o->vhostfd;
    }
    fd = monitor_fd_param(monitor_cur(), o->vhostfd, NULL);
    if (fd > STDERR_FILENO) {
        close(fd);
    }
    return NULL;
}

static int hpnet_tap_backend(HpnetState *s, const NetdevHpnetOptions *o,
                             const char *name, NetClientState *peer, bool vhost,
                             Error **errp)
{
    Netdev tap = {
        .id = (char *)name,
        .type = NET_CLIENT_DRIVER_TAP,
    };
    NetdevTapOptions *t = &tap.u.tap;

    t->ifname = o->ifname;
    t->fd = o->fd;
    /*
     * No host configuration unless asked: tap's own default runs one.
     * A tap given as fd= (as libvirt gives it) takes no script at all.
     */
    if (!o->fd) {
        t->script = o->script ?: (char *)"no";
        t->downscript = o->downscript ?: (char *)"no";
    }
    t->has_vhost = true;
    t->vhost = vhost;
    t->vhostfd = (char *)hpnet_take_vhostfd(s, o, vhost);
    return net_init_tap(&tap, name, peer, errp);
}

/* How long a vhost-user peer has to answer, by default (seconds). */
#define HPNET_VHOST_USER_TIMEOUT 5

/*
 * vhost-user is a build option of QEMU's (--disable-vhost-user): without
 * it hpnet_probe_all() rules it out, saying so, and nothing here is built.
 * The header is written out here because QEMU's (hw/virtio/vhost-user.c)
 * is private to that file.
 */
#ifdef CONFIG_VHOST_NET_USER
/* vhost-user's message header (docs/interop/vhost-user.rst). */
typedef struct QEMU_PACKED HpnetVhostUserMsg {
    uint32_t request;
    uint32_t flags;
    uint32_t size;
    uint64_t features;          /* GET_FEATURES' reply payload */
} HpnetVhostUserMsg;

#define HPNET_VHOST_USER_GET_FEATURES 1
#define HPNET_VHOST_USER_VERSION 0x1
#define HPNET_VHOST_USER_REPLY 0x4
#define HPNET_VHOST_USER_HDR_SIZE offsetof(HpnetVhostUserMsg, features)

/* Wait for @events on @fd until @deadline (g_get_monotonic_time()). */
static bool hpnet_poll_until(int fd, GIOCondition events, int64_t deadline)
{
    GPollFD pfd = { .fd = fd, .events = events };
    int64_t left;

    while ((left = deadline - g_get_monotonic_time()) > 0) {
        if (g_poll(&pfd, 1, MAX(left / 1000, 1)) > 0) {
            return true;
        }
    }
    return false;
}

/*
 * A listening chardev: wait, bounded, for its peer to connect.  QEMU's
 * vhost-user start-up waits for the peer (and then for each of its
 * answers) without a bound and without a word; a pending connection
 * means that wait ends at once.
 */
static bool hpnet_vhost_user_peer_connects(SocketChardev *sc, const char *what,
                                           uint32_t timeout, Error **errp)
{
    ERRP_GUARD();
    int64_t deadline = g_get_monotonic_time() + timeout * G_USEC_PER_SEC;

    if (!sc->listener || sc->listener->nsioc < 1 ||
        hpnet_poll_until(sc->listener->sioc[0]->fd, G_IO_IN, deadline)) {
        return true;
    }
    error_setg(errp, "no vhost-user peer connected to %s within %u s",
               what, timeout);
    error_append_hint(errp, "Start the peer (a switch such as OVS-DPDK or "
                      "testpmd) in client mode on that socket, or give it "
                      "longer with vhost-user-timeout=.\n");
    return false;
}

/*
 * Does the peer on @sc's connection answer?  It is asked GET_FEATURES,
 * which a front end may send at any time, before vhost-user uses the
 * connection (no reader is on it yet), and has @timeout seconds: a peer
 * whose backlog took the connection but that never accepts it, or that
 * accepted and never reads, would otherwise hang start-up.
 */
static bool hpnet_vhost_user_answers(SocketChardev *sc, const char *what,
                                     uint32_t timeout, Error **errp)
{
    ERRP_GUARD();
    int64_t deadline = g_get_monotonic_time() + timeout * G_USEC_PER_SEC;
    uint32_t ask[3] = {
        cpu_to_le32(HPNET_VHOST_USER_GET_FEATURES),
        cpu_to_le32(HPNET_VHOST_USER_VERSION), 0,
    };
    HpnetVhostUserMsg reply;
    size_t got = 0;
    int fd = sc->sioc->fd;

    if (send(fd, ask, sizeof(ask), MSG_DONTWAIT | MSG_NOSIGNAL) !=
        sizeof(ask)) {
        error_setg_errno(errp, errno, "cannot write to the vhost-user peer "
                         "on %s", what);
        return false;
    }
    while (got < sizeof(reply)) {
        ssize_t n;

        if (!hpnet_poll_until(fd, G_IO_IN, deadline)) {
            error_setg(errp, "the vhost-user peer on %s did not answer "
                       "within %u s", what, timeout);
            error_append_hint(errp, "Check that the peer (a switch such as "
                              "OVS-DPDK or testpmd) is running and serves "
                              "this socket, or give it longer with "
                              "vhost-user-timeout=.\n");
            return false;
        }
        n = recv(fd, (char *)&reply + got, sizeof(reply) - got, MSG_DONTWAIT);
        if (n == 0) {
            error_setg(errp, "the vhost-user peer on %s closed the "
                       "connection", what);
            return false;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            error_setg_errno(errp, errno, "cannot read from the vhost-user "
                             "peer on %s", what);
            return false;
        }
        got += MAX(n, 0);
        if (got >= HPNET_VHOST_USER_HDR_SIZE &&
            (le32_to_cpu(reply.request) != HPNET_VHOST_USER_GET_FEATURES ||
             !(le32_to_cpu(reply.flags) & HPNET_VHOST_USER_REPLY) ||
             le32_to_cpu(reply.size) != sizeof(reply.features))) {
            error_setg(errp, "%s answered, but not as a vhost-user back end",
                       what);
            return false;
        }
    }
    return true;
}

/* @chr's peer is there and answers, or @errp says why not. */
static bool hpnet_vhost_user_check_peer(Chardev *chr, const char *what,
                                        uint32_t timeout, Error **errp)
{
    SocketChardev *sc;

    if (!object_dynamic_cast(OBJECT(chr), TYPE_CHARDEV_SOCKET)) {
        return true;                /* vhost-user itself refuses it */
    }
    sc = SOCKET_CHARDEV(chr);
    if (sc->state != TCP_CHARDEV_STATE_CONNECTED) {
        /* Only a listener can wait: its peer connects by itself. */
        return hpnet_vhost_user_peer_connects(sc, what, timeout, errp);
    }
    return hpnet_vhost_user_answers(sc, what, timeout, errp);
}

static int hpnet_vhost_user_backend(const NetdevHpnetOptions *o,
                                    const char *name, NetClientState *peer,
                                    Error **errp)
{
    Netdev vu = {
        .id = (char *)name,
        .type = NET_CLIENT_DRIVER_VHOST_USER,
    };
    g_autofree char *label = NULL;
    QemuOpts *opts;
    Chardev *chr;
    int ret;

    uint32_t timeout = o->has_vhost_user_timeout ? o->vhost_user_timeout :
                       HPNET_VHOST_USER_TIMEOUT;
    g_autofree char *what = NULL;

    if (o->vhost_user_chardev) {
        chr = qemu_chr_find(o->vhost_user_chardev);
        what = g_strdup_printf("chardev %s", o->vhost_user_chardev);
        if (chr && !hpnet_vhost_user_check_peer(chr, what, timeout, errp)) {
            return -1;
        }
        vu.u.vhost_user.chardev = o->vhost_user_chardev;
        return net_init_vhost_user(&vu, name, peer, errp);
    }
    label = g_strdup_printf("hpnet-%s", name);
    /*
     * The path is one option, not pasted into "unix:PATH": a comma in it
     * would start options of its own (",server=on" listens and waits).
     */
    opts = qemu_opts_create(qemu_find_opts("chardev"), label, 1, errp);
    if (!opts) {
        return -1;
    }
    qemu_opt_set(opts, "backend", "socket", &error_abort);
    qemu_opt_set(opts, "path", o->vhost_user_socket, &error_abort);
    chr = qemu_chr_new_from_opts(opts, NULL, errp);
    qemu_opts_del(opts);
    if (!chr) {
        return -1;
    }
    if (!hpnet_vhost_user_check_peer(chr, o->vhost_user_socket, timeout,
                                     errp)) {
        object_unparent(OBJECT(chr));
        return -1;
    }
    vu.u.vhost_user.chardev = label;
    /* Once it is up, the netdev owns the chardev: netdev_del deletes it. */
    ret = net_init_vhost_user(&vu, name, peer, errp);
    if (ret < 0) {
        object_unparent(OBJECT(chr));
    }
    return ret;
}
#endif /* CONFIG_VHOST_NET_USER */

/* The VF as a vfio-pci device, created with the -device options. */
static bool hpnet_add_vf_device(HpnetState *s, const NetdevHpnetOptions *o,
                                Error **errp)
{
    g_autofree char *id = g_strdup_printf("%s-vf", s->id);
    QemuOpts *dev = qemu_opts_create(qemu_find_opts("device"), id, 1, errp);

    if (!dev) {
        return false;
    }
    qemu_opt_set(dev, "driver", "vfio-pci", &error_abort);
    qemu_opt_set(dev, "host", s->vf, &error_abort);
    qemu_opt_set(dev, "failover_pair_id", o->standby, &error_abort);
    if (o->vf_bus) {
        qemu_opt_set(dev, "bus", o->vf_bus, &error_abort);
    }
    return true;
}

static int hpnet_create(HpnetState *s, const NetdevHpnetOptions *o,
                        const HpnetProbe probes[HPNET_BACKEND__MAX],
                        const char *name, NetClientState *peer, Error **errp)
{
    switch (s->backend) {
    case HPNET_BACKEND_VIRTIO_NET:
        return hpnet_tap_backend(s, o, name, peer, false, errp);
    case HPNET_BACKEND_VHOST_NET:
        return hpnet_tap_backend(s, o, name, peer, true, errp);
    case HPNET_BACKEND_VHOST_USER:
#ifdef CONFIG_VHOST_NET_USER
        hpnet_take_vhostfd(s, o, false);
        return hpnet_vhost_user_backend(o, name, peer, errp);
#else
        g_assert_not_reached();     /* ruled out after the probe */
#endif
    case HPNET_BACKEND_SRIOV:
        /* The standby's data path: the kernel's where the host has it. */
        if (hpnet_tap_backend(s, o, name, peer,
                              probes[HPNET_BACKEND_VHOST_NET].available,
                              errp) < 0) {
            return -1;
        }
        if (!hpnet_add_vf_device(s, o, errp)) {
            /* The next backend takes the id: no standby left behind. */
            qemu_del_net_client(qemu_find_netdev(name));
            return -1;
        }
        return 0;
    default:
        g_assert_not_reached();
    }
}

/*
 * What start-up could not know when the netdevs were made, checked once
 * the machine exists: vhost-user needs guest RAM the peer can map, and an
 * SR-IOV standby must be a virtio-net device with failover=on.  (Netdevs
 * added at run time are probed against the machine as it is.)
 */
static void hpnet_check_backends(Notifier *n, void *data)
{
    bool shared = hpnet_guest_ram_shared();
    HpnetState *s;

    QTAILQ_FOREACH(s, &hpnets, next) {
        DeviceState *dev;

        if (s->backend == HPNET_BACKEND_VHOST_USER && !shared) {
            error_report("hpnet %s: vhost-user: " HPNET_RAM_NOT_SHARED,
                         s->id);
            exit(1);
        }
        if (s->backend != HPNET_BACKEND_SRIOV) {
            continue;
        }
        /* virtio-net-pci and its kin alias the device's "failover". */
        dev = qdev_find_recursive(sysbus_get_default(), s->standby);
        if (!dev || !object_property_find(OBJECT(dev), "failover") ||
            !object_property_get_bool(OBJECT(dev), "failover", NULL)) {
            error_report("hpnet %s: standby=%s must be a virtio-net device "
                         "with failover=on: -device virtio-net-pci,netdev=%s,"
                         "id=%s,failover=on (on a PCIe root port of a q35 "
                         "machine)", s->id, s->standby, s->id, s->standby);
            exit(1);
        }
    }
}

/*
 * fd= and vhostfd= are closed when they go unused or tap fails: never
 * one of QEMU's own streams, or the error would go with it.
 */
static bool hpnet_check_fd(const char *opt, const char *value,
                           const char *what, const char *name, Error **errp)
{
    ERRP_GUARD();
    int fd;

    if (value && !qemu_strtoi(value, NULL, 10, &fd) && fd >= 0 &&
        fd <= STDERR_FILENO) {
        error_setg(errp, "hpnet %s: %s=%d is QEMU's standard %s, not %s",
                   name, opt, fd, fd == STDIN_FILENO ? "input" :
                   fd == STDOUT_FILENO ? "output" : "error", what);
        error_append_hint(errp, "Pass it as a descriptor above 2, as "
                          "libvirt does, or by the name getfd gave it.\n");
        return false;
    }
    return true;
}

/* vf= and pf= become sysfs paths: only what names a device or a NIC. */
static bool hpnet_check_options(const NetdevHpnetOptions *o,
                                const char *name, Error **errp)
{
    ERRP_GUARD();
    if (!hpnet_check_fd("fd", o->fd, "a tap", name, errp) ||
        !hpnet_check_fd("vhostfd", o->vhostfd, "/dev/vhost-net", name,
                        errp)) {
        return false;
    }
    if (o->vf && !hpnet_pci_address_valid(o->vf)) {
        error_setg(errp, "hpnet %s: vf=%s is not a PCI address", name,
                   o->vf);
        error_append_hint(errp, "Give the VF as DDDD:BB:DD.F, e.g. "
                          "vf=0000:01:10.0 (lspci -D lists them).\n");
        return false;
    }
    if (o->pf && !hpnet_pci_address_valid(o->pf) &&
        !hpnet_ifname_valid(o->pf)) {
        error_setg(errp, "hpnet %s: pf=%s is neither a network interface "
                   "nor a PCI address", name, o->pf);
        error_append_hint(errp, "Give the PF's interface name (pf=eth1) or "
                          "its PCI address (pf=0000:01:00.0).\n");
        return false;
    }
    if (o->has_vhost_user_timeout && o->vhost_user_timeout == 0) {
        error_setg(errp, "hpnet %s: vhost-user-timeout=0 leaves the peer no "
                   "time to answer", name);
        error_append_hint(errp, "Give the seconds the vhost-user peer has "
                          "to answer, at least 1 (default %d).\n",
                          HPNET_VHOST_USER_TIMEOUT);
        return false;
    }
    return true;
}

int net_init_hpnet(const Netdev *netdev, const char *name,
                   NetClientState *peer, Error **errp)
{
    ERRP_GUARD();
    const NetdevHpnetOptions *o = &netdev->u.hpnet;
    g_autofree HpnetState *s = g_new0(HpnetState, 1);
    HpnetProbe probes[HPNET_BACKEND__MAX] = { 0 };
    bool running = phase_check(PHASE_MACHINE_READY);
    HpnetProbeConfig cfg = {
        .root = o->x_root ?: "",
        .tap_fd = o->fd != NULL,
        .vhost_fd = o->vhostfd != NULL,
        .vhost_user_socket = o->vhost_user_socket,
        .vhost_user_chardev = o->vhost_user_chardev != NULL,
        /*
         * At start-up guest RAM does not exist yet when netdevs are
         * made: whether it is shared is checked once it does.
         */
        .ram_can_be_shared = !running || hpnet_guest_ram_shared(),
        .at_run_time = running,
        .vf = o->vf,
        .pf = o->pf,
        .standby = o->standby != NULL,
    };
    HpnetState *done;
    Error *err = NULL;

    if (o->vhost_user_socket && o->vhost_user_chardev) {
        error_setg(errp, "hpnet %s: give vhost-user-socket= or "
                   "vhost-user-chardev=, not both", name);
        return -1;
    }
    if (o->vf && o->pf) {
        error_setg(errp, "hpnet %s: give vf= or pf=, not both", name);
        return -1;
    }
    if (!hpnet_check_options(o, name, errp)) {
        return -1;
    }
    hpnet_forget_removed();
    s->id = g_strdup(name);
    s->need = o->has_need ? o->need : HPNET_NEED_THROUGHPUT;
    s->forced = o->has_backend;
    s->standby = g_strdup(o->standby);
    hpnet_probe_all(&cfg, probes, &s->vf);

    for (;;) {
        qapi_free_HpnetCandidateList(s->candidates);
        s->candidates = NULL;
        if (!hpnet_choose(s->need, o->has_backend ? &o->backend : NULL,
                          probes, &s->backend, &s->candidates, errp)) {
            error_prepend(errp, "hpnet %s: ", name);
            goto fail;
        }
        trace_hpnet_try(name, HpnetBackend_str(s->backend));
        if (hpnet_create(s, o, probes, name, peer, &err) == 0) {
            break;
        }
        if (s->forced) {
            error_propagate_prepend(errp, err, "hpnet %s: backend=%s: ",
                                    name, HpnetBackend_str(s->backend));
            goto fail;
        }
        /* It probed well but would not come up: the next one. */
        trace_hpnet_failed(name, HpnetBackend_str(s->backend),
                           error_get_pretty(err));
        g_free(probes[s->backend].reason);
        probes[s->backend].reason = g_strdup_printf(
            "could not be brought up: %s", error_get_pretty(err));
        probes[s->backend].available = false;
        error_free(err);
        err = NULL;
    }
    if (s->backend != HPNET_BACKEND_SRIOV) {
        g_clear_pointer(&s->vf, g_free);
    }
    trace_hpnet_chosen(name, HpnetNeed_str(s->need),
                       HpnetBackend_str(s->backend), s->forced);
    hpnet_probes_free(probes);
    if (!backend_check.notify) {
        backend_check.notify = hpnet_check_backends;
        qemu_add_machine_init_done_notifier(&backend_check);
    }
    /* QTAILQ_INSERT_TAIL evaluates the element more than once. */
    done = g_steal_pointer(&s);
    QTAILQ_INSERT_TAIL(&hpnets, done, next);
    return 0;

fail:
    hpnet_probes_free(probes);
    hpnet_state_free(g_steal_pointer(&s));
    return -1;
}

/* True once the guest drove the device and vhost runs; NULL: no vhost */
static bool hpnet_vhost_started(HpnetState *s, bool *started)
{
    NetClientState *nc = qemu_find_netdev(s->id);
    VirtIONet *n;

    if (s->backend == HPNET_BACKEND_VIRTIO_NET ||
        s->backend == HPNET_BACKEND_SRIOV || !nc || !nc->peer) {
        return false;
    }
    n = qemu_get_nic_opaque(nc->peer);
    *started = n && object_dynamic_cast(OBJECT(n), TYPE_VIRTIO_NET) &&
               n->vhost_started;
    return true;
}

HpnetInfoList *qmp_query_hpnet(Error **errp)
{
    HpnetInfoList *list = NULL, **tail = &list;
    HpnetState *s;

    hpnet_forget_removed();
    QTAILQ_FOREACH(s, &hpnets, next) {
        HpnetInfo *info = g_new0(HpnetInfo, 1);

        info->id = g_strdup(s->id);
        info->need = s->need;
        info->forced = s->forced;
        info->backend = s->backend;
        info->candidates = QAPI_CLONE(HpnetCandidateList, s->candidates);
        info->vf = g_strdup(s->vf);
        info->has_vhost_started = hpnet_vhost_started(s, &info->vhost_started);
        QAPI_LIST_APPEND(tail, info);
    }
    return list;
}

void hmp_info_hpnet(Monitor *mon, const QDict *qdict)
{
    g_autoptr(HpnetInfoList) list = qmp_query_hpnet(&error_abort);
    HpnetInfoList *l;
    HpnetCandidateList *c;

    if (!list) {
        monitor_printf(mon, "no hpnet netdev\n");
    }
    for (l = list; l; l = l->next) {
        HpnetInfo *i = l->value;

        monitor_printf(mon, "%s: need %s, backend %s%s%s%s%s\n", i->id,
                       HpnetNeed_str(i->need), HpnetBackend_str(i->backend),
                       i->forced ? " (forced)" : "",
                       i->vf ? ", VF " : "", i->vf ?: "",
                       !i->has_vhost_started ? "" :
                       i->vhost_started ? ", vhost started" :
                       ", vhost not started yet");
        for (c = i->candidates; c; c = c->next) {
            monitor_printf(mon, "  %-10s %-13s %s\n",
                           HpnetBackend_str(c->value->backend),
                           c->value->taken ? "taken" :
                           c->value->available ? "available" :
                           "not available", c->value->reason);
        }
    }
}
