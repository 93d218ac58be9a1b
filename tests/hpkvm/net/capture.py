#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Count the frames of the test guest's vnet workload arriving on an
interface (run inside the test's network namespace) or a UDP port.

  capture.py iface IFNAME SECONDS WANT   frames of EtherType 0x88b5
  capture.py udp PORT SECONDS WANT       datagrams (vhost-user-bridge's)

Prints "ready" once listening, then "frames N" once WANT arrived or
SECONDS passed."""

import socket
import sys
import time

MARK = b"hpkvm-vnet "


def main():
    kind, where, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    want = int(sys.argv[4])
    if kind == "iface":
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                          socket.htons(0x88b5))
        s.bind((where, 0))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", int(where)))
    s.settimeout(0.2)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end and count < want:
        try:
            data = s.recv(2048)
        except socket.timeout:
            continue
        if MARK in data:
            count += 1
    print(f"frames {count}", flush=True)


if __name__ == "__main__":
    main()
