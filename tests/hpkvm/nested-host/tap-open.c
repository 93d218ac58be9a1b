/*
 * tap-open: run a command with a new tap open on a given descriptor
 *
 *   tap-open IFNAME FD COMMAND [ARG]...
 *
 * Creates tap IFNAME (IFF_TAP, IFF_NO_PI, IFF_VNET_HDR, as libvirt opens
 * the taps it hands to QEMU), sets its link up, puts it on descriptor FD
 * and runs COMMAND there: e.g. "virsh qemu-monitor-command --pass-fds FD"
 * giving it to a QEMU.  The tap is not persistent: it goes when the last
 * holder of the descriptor (that QEMU) closes it.  The nested test host
 * has no Python and busybox cannot do the ioctl; built static, it needs
 * no library.
 *
 * Copyright (c) 2026 The hpkvm developers
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int tap_open_link_up(const char *ifname)
{
    struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
    int sock;
    int ok;

    sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (sock < 0) {
        return -1;
    }
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    ok = ioctl(sock, SIOCGIFFLAGS, &ifr) == 0;
    if (ok) {
        ifr.ifr_flags |= IFF_UP;
        ok = ioctl(sock, SIOCSIFFLAGS, &ifr) == 0;
    }
    close(sock);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
    char *end;
    long want;
    int fd;

    if (argc < 4 || strlen(argv[1]) >= IFNAMSIZ) {
        fprintf(stderr, "usage: tap-open IFNAME FD COMMAND [ARG]...\n");
        return 2;
    }
    /* Outside QEMU: no qemu_strtol here, and only 3-1023 is wanted. */
    want = 0;
    for (end = argv[2]; *end >= '0' && *end <= '9' && want <= 1023; end++) {
        want = want * 10 + (*end - '0');
    }
    if (*end || end == argv[2] || want <= STDERR_FILENO || want > 1023) {
        fprintf(stderr, "tap-open: FD %s: give a descriptor from 3 to "
                "1023\n", argv[2]);
        return 2;
    }
    fd = open("/dev/net/tun", O_RDWR);
    if (fd < 0) {
        perror("tap-open: /dev/net/tun");
        return 1;
    }
    strncpy(ifr.ifr_name, argv[1], IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        perror("tap-open: TUNSETIFF");
        return 1;
    }
    if (tap_open_link_up(argv[1]) < 0) {
        perror("tap-open: link up");
        return 1;
    }
    if (fd != want && (dup2(fd, want) < 0 || close(fd) < 0)) {
        perror("tap-open: dup2");
        return 1;
    }
    execvp(argv[3], argv + 3);
    perror("tap-open: exec");
    return 127;
}
