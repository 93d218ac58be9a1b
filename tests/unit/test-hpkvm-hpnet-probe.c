/*
 * Unit tests of hpnet's probes over fake /dev and /sys trees: tap and
 * vhost-net nodes that open or not, vhost-user sockets and shared RAM,
 * SR-IOV VFs and PFs with each way they can be unusable; and what vf=
 * and pf= may name.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/socket.h>
#include <sys/un.h>
#include "qemu/cutils.h"
#include "net/hpnet/hpnet-probe.h"

static char *root;

static void put(const char *path, const char *text)
{
    g_autofree char *full = g_strconcat(root, path, NULL);
    g_autofree char *dir = g_path_get_dirname(full);

    g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
    g_assert_true(g_file_set_contents(full, text, -1, NULL));
}

static void mkdir_at(const char *path)
{
    g_autofree char *full = g_strconcat(root, path, NULL);

    g_assert_cmpint(g_mkdir_with_parents(full, 0755), ==, 0);
}

static void link_at(const char *path, const char *target)
{
    g_autofree char *full = g_strconcat(root, path, NULL);
    g_autofree char *dir = g_path_get_dirname(full);

    g_mkdir_with_parents(dir, 0755);
    unlink(full);
    g_assert_cmpint(symlink(target, full), ==, 0);
}

static void rm_at(const char *path)
{
    g_autofree char *full = g_strconcat(root, path, NULL);

    unlink(full);
}

#define DEV "/sys/bus/pci/devices/"

/* A PF 0000:01:00.0 (eth1) with two VFs; VF 0 fully on vfio-pci. */
static void make_tree(void)
{
    root = g_dir_make_tmp("hpnet-probe-XXXXXX", NULL);
    put("/dev/net/tun", "");
    put("/dev/vhost-net", "");
    put("/dev/vfio/7", "");
    put("/dev/vfio/8", "");
    link_at("/sys/class/net/eth1/device", "../../../devices/0000:01:00.0");
    put(DEV "0000:01:00.0/sriov_numvfs", "2\n");
    link_at(DEV "0000:01:00.0/virtfn0", "../0000:01:10.0");
    link_at(DEV "0000:01:00.0/virtfn1", "../0000:01:10.2");
    link_at(DEV "0000:01:00.0/driver", "../../bus/pci/drivers/igb");
    link_at(DEV "0000:01:10.0/physfn", "../0000:01:00.0");
    link_at(DEV "0000:01:10.0/driver", "../../bus/pci/drivers/vfio-pci");
    link_at(DEV "0000:01:10.0/iommu_group", "../../kernel/iommu_groups/7");
    mkdir_at("/sys/kernel/iommu_groups/7/devices/0000:01:10.0");
    link_at(DEV "0000:01:10.2/physfn", "../0000:01:00.0");
    link_at(DEV "0000:01:10.2/driver", "../../bus/pci/drivers/vfio-pci");
    link_at(DEV "0000:01:10.2/iommu_group", "../../kernel/iommu_groups/8");
    mkdir_at("/sys/kernel/iommu_groups/8/devices/0000:01:10.2");
}

static void rm_tree(const char *path)
{
    g_autoptr(GDir) d = g_dir_open(path, 0, NULL);
    const char *n;

    while (d && (n = g_dir_read_name(d))) {
        g_autofree char *sub = g_build_filename(path, n, NULL);

        if (g_file_test(sub, G_FILE_TEST_IS_DIR) &&
            !g_file_test(sub, G_FILE_TEST_IS_SYMLINK)) {
            rm_tree(sub);
        } else {
            unlink(sub);
        }
    }
    rmdir(path);
}

static void drop_tree(void)
{
    rm_tree(root);
    g_clear_pointer(&root, g_free);
}

static void vf_fails(const char *vf, const char *want)
{
    g_autofree char *why = NULL;

    g_assert_false(hpnet_probe_vf(root, vf, &why));
    if (!strstr(why, want)) {
        g_error("%s: got '%s', want '%s'", vf, why, want);
    }
}

static void test_vf(void)
{
    g_autofree char *why = NULL;

    make_tree();
    g_assert_true(hpnet_probe_vf(root, "0000:01:10.0", &why));
    g_assert_nonnull(strstr(why, "IOMMU group 7"));
    vf_fails("0000:09:00.0", "no PCI device 0000:09:00.0");
    vf_fails("0000:01:00.0", "is not an SR-IOV VF (no physfn)");

    link_at(DEV "0000:01:10.0/driver", "../../bus/pci/drivers/igbvf");
    vf_fails("0000:01:10.0", "is bound to igbvf, not vfio-pci");
    link_at(DEV "0000:01:10.0/driver", "../../bus/pci/drivers/vfio-pci");

    rm_at(DEV "0000:01:10.0/iommu_group");
    vf_fails("0000:01:10.0", "has no IOMMU group: enable the IOMMU");
    link_at(DEV "0000:01:10.0/iommu_group", "../../kernel/iommu_groups/7");

    rm_at("/dev/vfio/7");
    vf_fails("0000:01:10.0", "/dev/vfio/7: No such file or directory");
    put("/dev/vfio/7", "");

    /* Another device of the group on its host driver. */
    mkdir_at("/sys/kernel/iommu_groups/7/devices/0000:01:10.4");
    link_at(DEV "0000:01:10.4/driver", "../../bus/pci/drivers/igbvf");
    vf_fails("0000:01:10.0", "also holds 0000:01:10.4, which is not on "
             "vfio-pci");
    drop_tree();
}

static void test_pf(void)
{
    g_autofree char *why = NULL, *why2 = NULL, *why3 = NULL;
    g_autofree char *vf = NULL, *vf2 = NULL, *vf3 = NULL;

    make_tree();
    vf = hpnet_probe_pf(root, "eth1", &why);
    g_assert_cmpstr(vf, ==, "0000:01:10.0");
    /* The first is not usable: the next VF is taken. */
    link_at(DEV "0000:01:10.0/driver", "../../bus/pci/drivers/igbvf");
    vf2 = hpnet_probe_pf(root, "0000:01:00.0", &why2);
    g_assert_cmpstr(vf2, ==, "0000:01:10.2");
    put(DEV "0000:01:00.0/sriov_numvfs", "0\n");
    vf3 = hpnet_probe_pf(root, "eth1", &why3);
    g_assert_null(vf3);
    g_assert_nonnull(strstr(why3, "PF eth1 has no VFs: echo N >"));
    drop_tree();
}

static void probe(HpnetProbeConfig *cfg, HpnetProbe probes[], char **vf)
{
    cfg->root = root;
    hpnet_probe_all(cfg, probes, vf);
}

static void test_nodes_and_sockets(void)
{
    HpnetProbeConfig cfg = { 0 };
    HpnetProbe p[HPNET_BACKEND__MAX];
    g_autofree char *sock = NULL;
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    char *vf = NULL;
    int fd;

    make_tree();
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_VIRTIO_NET].available);
    g_assert_true(p[HPNET_BACKEND_VHOST_NET].available);
    g_assert_false(p[HPNET_BACKEND_VHOST_USER].available);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_VHOST_USER].reason,
                            "not configured"));
    g_assert_false(p[HPNET_BACKEND_SRIOV].available);
    hpnet_probes_free(p);

    /* A node that exists but does not open (a directory here). */
    rm_at("/dev/vhost-net");
    mkdir_at("/dev/vhost-net");
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_VIRTIO_NET].available);
    g_assert_false(p[HPNET_BACKEND_VHOST_NET].available);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_VHOST_NET].reason,
                            "load the vhost_net module"));
    hpnet_probes_free(p);

    rm_at("/dev/net/tun");
    probe(&cfg, p, &vf);
    g_assert_false(p[HPNET_BACKEND_VIRTIO_NET].available);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_VIRTIO_NET].reason,
                            "/dev/net/tun: No such file"));
    hpnet_probes_free(p);
    cfg.tap_fd = true;
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_VIRTIO_NET].available);
    g_assert_false(p[HPNET_BACKEND_VHOST_NET].available);
    hpnet_probes_free(p);
    /* A tap and a vhost-net device, both passed open (libvirt's way). */
    cfg.vhost_fd = true;
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_VHOST_NET].available);
    g_assert_cmpstr(p[HPNET_BACKEND_VHOST_NET].reason, ==,
                    "tap fd= given and vhostfd= given");
    hpnet_probes_free(p);
    cfg.vhost_fd = false;

    /* vhost-user: a socket, and RAM that can be shared. */
    cfg.vhost_user_socket = "/run/vs0";
    probe(&cfg, p, &vf);
    g_assert_false(p[HPNET_BACKEND_VHOST_USER].available);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_VHOST_USER].reason,
                            "guest RAM is not shared"));
    hpnet_probes_free(p);
    cfg.ram_can_be_shared = true;
    probe(&cfg, p, &vf);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_VHOST_USER].reason,
                            "/run/vs0 is not a socket"));
    hpnet_probes_free(p);
    sock = g_strconcat(root, "/run/vs0", NULL);
    mkdir_at("/run");
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    pstrcpy(addr.sun_path, sizeof(addr.sun_path), sock);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), ==, 0);
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_VHOST_USER].available);
    hpnet_probes_free(p);
    close(fd);

    /* SR-IOV: configured, paired, and a usable VF. */
    cfg.pf = "eth1";
    probe(&cfg, p, &vf);
    g_assert_false(p[HPNET_BACKEND_SRIOV].available);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_SRIOV].reason,
                            "needs standby=ID"));
    hpnet_probes_free(p);
    cfg.standby = true;
    probe(&cfg, p, &vf);
    g_assert_true(p[HPNET_BACKEND_SRIOV].available);
    g_assert_cmpstr(vf, ==, "0000:01:10.0");
    g_free(vf);
    hpnet_probes_free(p);

    /* netdev_add: the VF is usable, but nothing would plug it. */
    cfg.at_run_time = true;
    probe(&cfg, p, &vf);
    g_assert_false(p[HPNET_BACKEND_SRIOV].available);
    g_assert_null(vf);
    g_assert_nonnull(strstr(p[HPNET_BACKEND_SRIOV].reason,
                            "hpnet plugs a VF only at start-up"));
    hpnet_probes_free(p);
    drop_tree();
}

/* What vf= and pf= may be before they become sysfs paths. */
static void test_device_names(void)
{
    static const char *const pci_ok[] = {
        "0000:01:10.0", "ffff:ff:1f.7", "0000:00:00.0", "0001:Ab:0c.3",
    };
    static const char *const pci_bad[] = {
        "", "0000:01:10", "0000:01:20.0", "0000:01:10.8", "000:001:10.0",
        "0000:01:10.0/..", "../../../../etc", "0000-01-10.0", "0000:0g:10.0",
        "0000:01:10.00",
    };
    static const char *const if_ok[] = {
        "eth1", "enp1s0f0", "a", "x.y", "fifteen-chars-x",
    };
    static const char *const if_bad[] = {
        "", ".", "..", "a/b", "../eth0", "eth 1", "sixteen-chars-xx",
        "0000:01:00.0",
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(pci_ok); i++) {
        g_assert_true(hpnet_pci_address_valid(pci_ok[i]));
    }
    for (i = 0; i < ARRAY_SIZE(pci_bad); i++) {
        g_assert_false(hpnet_pci_address_valid(pci_bad[i]));
    }
    for (i = 0; i < ARRAY_SIZE(if_ok); i++) {
        g_assert_true(hpnet_ifname_valid(if_ok[i]));
    }
    for (i = 0; i < ARRAY_SIZE(if_bad); i++) {
        g_assert_false(hpnet_ifname_valid(if_bad[i]));
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/hpnet/probe/vf", test_vf);
    g_test_add_func("/hpnet/probe/pf", test_pf);
    g_test_add_func("/hpnet/probe/nodes-and-sockets", test_nodes_and_sockets);
    g_test_add_func("/hpnet/probe/device-names", test_device_names);
    return g_test_run();
}
