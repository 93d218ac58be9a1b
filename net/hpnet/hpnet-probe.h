/*
 * hpnet: what the host really has for each network backend
 *
 * Every probe reads through a root ("" for the host, a fake tree in
 * tests): /dev nodes must open, sockets must be sockets, VFs must be on
 * vfio-pci with their whole IOMMU group.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NET_HPNET_PROBE_H
#define NET_HPNET_PROBE_H

#include "hpnet-select.h"

typedef struct HpnetProbeConfig {
    const char *root;               /* "" or a fake tree */
    bool tap_fd;                    /* fd= given: no /dev/net/tun needed */
    bool vhost_fd;                  /* vhostfd= given: nor /dev/vhost-net */
    const char *vhost_user_socket;
    bool vhost_user_chardev;        /* a chardev was named */
    bool ram_can_be_shared;         /* every guest RAM backend shared */
    bool at_run_time;               /* netdev_add: no VF can be plugged */
    const char *vf;
    const char *pf;
    bool standby;                   /* standby= given */
} HpnetProbeConfig;

/* Why vhost-user cannot run, and the fix. */
#define HPNET_RAM_NOT_SHARED \
    "guest RAM is not shared with the peer: give each memory backend " \
    "of guest RAM share=on, e.g. -object memory-backend-memfd,id=mem," \
    "size=SIZE,share=on -machine memory-backend=mem (or -numa node," \
    "memdev=mem)"

/*
 * What may become a sysfs path: a PCI address DDDD:BB:DD.F (vf=, pf=)
 * or a network interface name (pf=), never a path of its own.
 */
bool hpnet_pci_address_valid(const char *s);
bool hpnet_ifname_valid(const char *s);

/* Probe every backend; *vf is the VF SR-IOV would use (or NULL). */
void hpnet_probe_all(const HpnetProbeConfig *cfg,
                     HpnetProbe probes[HPNET_BACKEND__MAX], char **vf);
void hpnet_probes_free(HpnetProbe probes[HPNET_BACKEND__MAX]);

/* One VF usable by vfio-pci; else false and *why. */
bool hpnet_probe_vf(const char *root, const char *vf, char **why);
/* The first usable VF of a PF (interface name or PCI address). */
char *hpnet_probe_pf(const char *root, const char *pf, char **why);

#endif
