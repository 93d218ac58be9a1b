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
#include "qemu/error-report.h"
#include "qemu/option.h"
#include "qemu/config-file.h"
#include "qemu/queue.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-hpnet.h"
#include "qapi/clone-visitor.h"
#include "qapi/qapi-visit-hpnet.h"
#include "chardev/char.h"
#include "hw/boards.h"
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
    Chardev *chr;               /* the vhost-user socket hpnet opened */
    QTAILQ_ENTRY(HpnetState) next;
} HpnetState;

static QTAILQ_HEAD(, HpnetState) hpnets = QTAILQ_HEAD_INITIALIZER(hpnets);
static Notifier backend_check;

static int tap_backend(const NetdevHpnetOptions *o, const char *name,
                       NetClientState *peer, bool vhost, Error **errp)
{
    Netdev tap = {
        .id = (char *)name,
        .type = NET_CLIENT_DRIVER_TAP,
    };
    NetdevTapOptions *t = &tap.u.tap;

    t->ifname = o->ifname;
    t->fd = o->fd;
    /* No host configuration unless asked: tap's own default runs one. */
    t->script = o->script ?: (char *)"no";
    t->downscript = o->downscript ?: (char *)"no";
    t->has_vhost = true;
    t->vhost = vhost;
    return net_init_tap(&tap, name, peer, errp);
}

static int vhost_user_backend(HpnetState *s, const NetdevHpnetOptions *o,
                              const char *name, NetClientState *peer,
                              Error **errp)
{
    Netdev vu = {
        .id = (char *)name,
        .type = NET_CLIENT_DRIVER_VHOST_USER,
    };
    g_autofree char *label = NULL;
    QemuOpts *opts;
    int ret;

    if (o->vhost_user_chardev) {
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
    s->chr = qemu_chr_new_from_opts(opts, NULL, errp);
    qemu_opts_del(opts);
    if (!s->chr) {
        return -1;
    }
    vu.u.vhost_user.chardev = label;
    ret = net_init_vhost_user(&vu, name, peer, errp);
    if (ret < 0) {
        object_unparent(OBJECT(s->chr));
        s->chr = NULL;
    }
    return ret;
}

/* The VF as a vfio-pci device, created with the -device options. */
static bool add_vf_device(HpnetState *s, const NetdevHpnetOptions *o,
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

static int create(HpnetState *s, const NetdevHpnetOptions *o,
                  const HpnetProbe probes[HPNET_BACKEND__MAX],
                  const char *name, NetClientState *peer, Error **errp)
{
    switch (s->backend) {
    case HPNET_BACKEND_VIRTIO_NET:
        return tap_backend(o, name, peer, false, errp);
    case HPNET_BACKEND_VHOST_NET:
        return tap_backend(o, name, peer, true, errp);
    case HPNET_BACKEND_VHOST_USER:
        return vhost_user_backend(s, o, name, peer, errp);
    case HPNET_BACKEND_SRIOV:
        /* The standby's data path: the kernel's where the host has it. */
        if (tap_backend(o, name, peer,
                        probes[HPNET_BACKEND_VHOST_NET].available,
                        errp) < 0) {
            return -1;
        }
        return add_vf_device(s, o, errp) ? 0 : -1;
    default:
        g_assert_not_reached();
    }
}

/*
 * Once the machine exists: vhost-user needs guest RAM the peer can map,
 * and an SR-IOV standby must be a virtio-net device with failover=on.
 */
static void check_backends(Notifier *n, void *data)
{
    HostMemoryBackend *ram = current_machine->memdev;
    HpnetState *s;

    QTAILQ_FOREACH(s, &hpnets, next) {
        DeviceState *dev;

        if (s->backend == HPNET_BACKEND_VHOST_USER &&
            (!ram || !object_property_get_bool(OBJECT(ram), "share",
                                               NULL))) {
            error_report("hpnet %s: vhost-user: guest RAM is not shared "
                         "with the peer: add -object memory-backend-memfd,"
                         "id=mem,size=SIZE,share=on -machine "
                         "memory-backend=mem", s->id);
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

int net_init_hpnet(const Netdev *netdev, const char *name,
                   NetClientState *peer, Error **errp)
{
    ERRP_GUARD();
    const NetdevHpnetOptions *o = &netdev->u.hpnet;
    g_autofree HpnetState *s = g_new0(HpnetState, 1);
    HpnetProbe probes[HPNET_BACKEND__MAX] = { 0 };
    HpnetProbeConfig cfg = {
        .root = o->x_root ?: "",
        .tap_fd = o->fd != NULL,
        .vhost_user_socket = o->vhost_user_socket,
        .vhost_user_chardev = o->vhost_user_chardev != NULL,
        /*
         * The memory backend does not exist yet when netdevs are made:
         * whether guest RAM is shared is checked once it does.
         */
        .ram_can_be_shared = true,
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
        if (create(s, o, probes, name, peer, &err) == 0) {
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
        backend_check.notify = check_backends;
        qemu_add_machine_init_done_notifier(&backend_check);
    }
    /* QTAILQ_INSERT_TAIL evaluates the element more than once. */
    done = g_steal_pointer(&s);
    QTAILQ_INSERT_TAIL(&hpnets, done, next);
    return 0;

fail:
    hpnet_probes_free(probes);
    qapi_free_HpnetCandidateList(s->candidates);
    g_free(s->id);
    g_free(s->vf);
    g_free(s->standby);
    return -1;
}

/* True once the guest drove the device and vhost runs; NULL: no vhost */
static bool vhost_started(HpnetState *s, bool *started)
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

    QTAILQ_FOREACH(s, &hpnets, next) {
        HpnetInfo *info = g_new0(HpnetInfo, 1);

        info->id = g_strdup(s->id);
        info->need = s->need;
        info->forced = s->forced;
        info->backend = s->backend;
        info->candidates = QAPI_CLONE(HpnetCandidateList, s->candidates);
        info->vf = g_strdup(s->vf);
        info->has_vhost_started = vhost_started(s, &info->vhost_started);
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
