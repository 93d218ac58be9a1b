/*
 * hpnet: what the host really has for each network backend
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "hpnet-probe.h"

#define PCI_DEVICES "/sys/bus/pci/devices/"

/* vhost-user is a build option of QEMU's (--disable-vhost-user). */
#ifdef CONFIG_VHOST_NET_USER
static const bool probe_vhost_user_built = true;
#else
static const bool probe_vhost_user_built;
#endif

static char *probe_at(const char *root, const char *path)
{
    return g_strconcat(root, path, NULL);
}

/* A device node that opens read-write; NULL, or what went wrong. */
static char *probe_node_problem(const char *root, const char *node)
{
    g_autofree char *path = probe_at(root, node);
    int fd = qemu_open_old(path, O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        return g_strdup_printf("%s: %s", node, strerror(errno));
    }
    close(fd);
    return NULL;
}

/* The last component of a symbolic link's target, or NULL. */
static char *probe_link_name(const char *path)
{
    g_autofree char *target = g_file_read_link(path, NULL);

    return target ? g_path_get_basename(target) : NULL;
}

static bool probe_on_vfio(const char *dev)
{
    g_autofree char *driver = g_build_filename(dev, "driver", NULL);
    g_autofree char *name = probe_link_name(driver);

    return name && !strcmp(name, "vfio-pci");
}

bool hpnet_probe_vf(const char *root, const char *vf, char **why)
{
    g_autofree char *dev = g_strconcat(root, PCI_DEVICES, vf, NULL);
    g_autofree char *physfn = g_build_filename(dev, "physfn", NULL);
    g_autofree char *drv_link = g_build_filename(dev, "driver", NULL);
    g_autofree char *grp_link = g_build_filename(dev, "iommu_group", NULL);
    g_autofree char *driver = NULL, *group = NULL, *node = NULL;
    g_autofree char *members_dir = NULL, *problem = NULL;
    g_autoptr(GDir) members = NULL;
    const char *m;

    if (!g_file_test(dev, G_FILE_TEST_EXISTS)) {
        *why = g_strdup_printf("no PCI device %s", vf);
        return false;
    }
    if (!g_file_test(physfn, G_FILE_TEST_EXISTS)) {
        *why = g_strdup_printf("%s is not an SR-IOV VF (no physfn)", vf);
        return false;
    }
    driver = probe_link_name(drv_link);
    if (!driver || strcmp(driver, "vfio-pci")) {
        *why = g_strdup_printf("VF %s is bound to %s, not vfio-pci: echo "
                               "vfio-pci > %s%s/driver_override and "
                               "rebind it", vf, driver ?: "no driver",
                               PCI_DEVICES, vf);
        return false;
    }
    group = probe_link_name(grp_link);
    if (!group) {
        *why = g_strdup_printf("VF %s has no IOMMU group: enable the IOMMU "
                               "(intel_iommu=on or amd_iommu=on; on arm64 "
                               "the SMMU, in ACPI's IORT or the device "
                               "tree)", vf);
        return false;
    }
    node = g_strdup_printf("/dev/vfio/%s", group);
    problem = probe_node_problem(root, node);
    if (problem) {
        *why = g_strdup_printf("VF %s: %s%s", vf, problem,
                               errno == EBUSY ? " (in use by another VM)" :
                               "");
        return false;
    }
    members_dir = g_strdup_printf("%s/sys/kernel/iommu_groups/%s/devices",
                                  root, group);
    members = g_dir_open(members_dir, 0, NULL);
    while (members && (m = g_dir_read_name(members))) {
        g_autofree char *mdev = g_strconcat(root, PCI_DEVICES, m, NULL);

        /*
         * A port above the VF lands in its group when the port does not
         * isolate it (no ACS): Linux 6.1 booted from a device tree
         * enables ACS only after it has enumerated the ports, too late
         * (later kernels request it in time; ACPI's IORT always did).
         */
        if (!probe_on_vfio(mdev)) {
            *why = g_strdup_printf("IOMMU group %s of VF %s also holds %s, "
                                   "which is not on vfio-pci: a group "
                                   "passes through whole (a port above "
                                   "the VF without ACS joins it: boot an "
                                   "arm64 host with ACPI, where Linux 6.1 "
                                   "enables ACS in time)",
                                   group, vf, m);
            return false;
        }
    }
    *why = g_strdup_printf("VF %s on vfio-pci, IOMMU group %s, %s opens",
                           vf, group, node);
    return true;
}

char *hpnet_probe_pf(const char *root, const char *pf, char **why)
{
    g_autofree char *netdev = g_strdup_printf("%s/sys/class/net/%s/device",
                                              root, pf);
    g_autofree char *bdf = probe_link_name(netdev) ?: g_strdup(pf);
    g_autofree char *dev = g_strconcat(root, PCI_DEVICES, bdf, NULL);
    g_autofree char *numvfs_path = g_build_filename(dev, "sriov_numvfs",
                                                    NULL);
    g_autofree char *text = NULL, *last = NULL;
    unsigned numvfs = 0, k;

    if (!g_file_get_contents(numvfs_path, &text, NULL, NULL) ||
        qemu_strtoui(g_strstrip(text), NULL, 10, &numvfs) < 0 ||
        numvfs == 0) {
        *why = g_strdup_printf("PF %s has no VFs: echo N > %s%s/"
                               "sriov_numvfs", pf, PCI_DEVICES, bdf);
        return NULL;
    }
    for (k = 0; k < numvfs; k++) {
        g_autofree char *name = g_strdup_printf("virtfn%u", k);
        g_autofree char *link = g_build_filename(dev, name, NULL);
        g_autofree char *vf = probe_link_name(link);
        g_autofree char *vf_why = NULL;

        if (vf && hpnet_probe_vf(root, vf, &vf_why)) {
            *why = g_strdup_printf("PF %s: %s", pf, vf_why);
            return g_steal_pointer(&vf);
        }
        g_free(last);
        last = g_steal_pointer(&vf_why);
    }
    *why = g_strdup_printf("PF %s has no VF usable by vfio-pci among its "
                           "%u (last: %s)", pf, numvfs, last ?: "?");
    return NULL;
}

static bool probe_hex_digits(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!g_ascii_isxdigit(s[i])) {
            return false;
        }
    }
    return true;
}

bool hpnet_pci_address_valid(const char *s)
{
    /* DDDD:BB:DD.F, device below 0x20, function below 8 */
    return strlen(s) == 12 && probe_hex_digits(s, 4) && s[4] == ':' &&
           probe_hex_digits(s + 5, 2) && s[7] == ':' &&
           probe_hex_digits(s + 8, 2) &&
           g_ascii_xdigit_value(s[8]) < 2 && s[10] == '.' &&
           s[11] >= '0' && s[11] <= '7';
}

bool hpnet_ifname_valid(const char *s)
{
    const char *c;

    /* The kernel's dev_valid_name(), IFNAMSIZ 16 */
    if (!*s || strlen(s) >= 16 || !strcmp(s, ".") || !strcmp(s, "..")) {
        return false;
    }
    for (c = s; *c; c++) {
        if (*c == '/' || *c == ':' || g_ascii_isspace(*c)) {
            return false;
        }
    }
    return true;
}

static void probe_set(HpnetProbe *p, bool ok, char *reason)
{
    p->available = ok;
    p->reason = reason;
}

void hpnet_probe_all(const HpnetProbeConfig *cfg,
                     HpnetProbe probes[HPNET_BACKEND__MAX], char **vf)
{
    g_autofree char *tun = cfg->tap_fd ? NULL :
                           probe_node_problem(cfg->root, "/dev/net/tun");
    g_autofree char *vhost = cfg->vhost_fd ? NULL :
                             probe_node_problem(cfg->root, "/dev/vhost-net");
    char *why = NULL;

    *vf = NULL;
    probe_set(&probes[HPNET_BACKEND_VIRTIO_NET], !tun,
              tun ? g_strdup(tun) : g_strdup(cfg->tap_fd ? "tap fd= given" :
                                       "/dev/net/tun opens"));
    probe_set(&probes[HPNET_BACKEND_VHOST_NET], !tun && !vhost,
              tun ? g_strdup(tun) :
              vhost ? g_strdup_printf("%s (load the vhost_net module)", vhost) :
              g_strdup_printf("%s and %s", cfg->tap_fd ? "tap fd= given" :
                        "/dev/net/tun opens", cfg->vhost_fd ?
                        "vhostfd= given" : "/dev/vhost-net opens"));

    if (!probe_vhost_user_built) {
        probe_set(&probes[HPNET_BACKEND_VHOST_USER], false,
                  g_strdup("this QEMU is built without vhost-user "
                           "(--enable-vhost-user)"));
    } else if (!cfg->vhost_user_socket && !cfg->vhost_user_chardev) {
        probe_set(&probes[HPNET_BACKEND_VHOST_USER], false,
                  g_strdup("not configured: give vhost-user-socket= or "
                     "vhost-user-chardev="));
    } else if (!cfg->ram_can_be_shared) {
        probe_set(&probes[HPNET_BACKEND_VHOST_USER], false,
                  g_strdup(HPNET_RAM_NOT_SHARED));
    } else if (cfg->vhost_user_socket) {
        g_autofree char *path = probe_at(cfg->root, cfg->vhost_user_socket);
        struct stat st;

        if (stat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
            probe_set(&probes[HPNET_BACKEND_VHOST_USER], false,
                g_strdup_printf("%s is not a socket: start the vhost-user "
                                "peer first", cfg->vhost_user_socket));
        } else {
            probe_set(&probes[HPNET_BACKEND_VHOST_USER], true,
                      g_strdup_printf("socket %s", cfg->vhost_user_socket));
        }
    } else {
        probe_set(&probes[HPNET_BACKEND_VHOST_USER], true,
                  g_strdup("chardev given"));
    }

    if (!cfg->vf && !cfg->pf) {
        probe_set(&probes[HPNET_BACKEND_SRIOV], false,
                  g_strdup("not configured: give vf= or pf="));
    } else if (cfg->at_run_time) {
        probe_set(&probes[HPNET_BACKEND_SRIOV], false,
                  g_strdup("netdev_add at run time: hpnet plugs a VF only at "
                     "start-up; device_add vfio-pci,host=VF,"
                     "failover_pair_id=STANDBY plugs one by hand"));
    } else if (!cfg->standby) {
        probe_set(&probes[HPNET_BACKEND_SRIOV], false,
                  g_strdup("needs standby=ID, the id of a -device "
                     "virtio-net-pci,failover=on to pair the VF with"));
    } else if (cfg->vf) {
        bool ok = hpnet_probe_vf(cfg->root, cfg->vf, &why);

        probe_set(&probes[HPNET_BACKEND_SRIOV], ok, why);
        *vf = ok ? g_strdup(cfg->vf) : NULL;
    } else {
        *vf = hpnet_probe_pf(cfg->root, cfg->pf, &why);
        probe_set(&probes[HPNET_BACKEND_SRIOV], *vf != NULL, why);
    }
}

void hpnet_probes_free(HpnetProbe probes[HPNET_BACKEND__MAX])
{
    int i;

    for (i = 0; i < HPNET_BACKEND__MAX; i++) {
        g_clear_pointer(&probes[i].reason, g_free);
    }
}
