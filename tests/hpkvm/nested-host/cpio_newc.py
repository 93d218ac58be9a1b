# SPDX-License-Identifier: GPL-2.0-or-later
"""Write initramfs archives in the kernel's "newc" cpio format.

Linux unpacks several archives concatenated into one initrd, so the nested
host's boot image is built from independent pieces (kernel modules,
hpkvm's build, the payload) that are cached and rebuilt separately.
"""

import os
import stat


class NewcWriter:
    """Collect entries, then write them as one newc archive."""

    def __init__(self):
        self._entries = {}          # path in archive -> (mode, data)

    def _parents(self, path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            self._entries.setdefault(d, (stat.S_IFDIR | 0o755, b""))

    def add_dir(self, path, mode=0o755):
        path = path.strip("/")
        self._parents(path)
        self._entries[path] = (stat.S_IFDIR | mode, b"")

    def add_bytes(self, path, data, mode=0o644):
        path = path.strip("/")
        self._parents(path)
        self._entries[path] = (stat.S_IFREG | mode, data)

    def add_file(self, path, src, mode=None):
        """Add host file src (symlinks followed) as path."""
        st = os.stat(src)
        with open(src, "rb") as f:
            data = f.read()
        self.add_bytes(path, data, stat.S_IMODE(st.st_mode)
                       if mode is None else mode)

    def add_symlink(self, path, target):
        path = path.strip("/")
        self._parents(path)
        self._entries[path] = (stat.S_IFLNK | 0o777, target.encode())

    def write(self, out_path):
        tmp = out_path + ".tmp"
        with open(tmp, "wb") as out:
            ino = 1
            for path in sorted(self._entries):
                mode, data = self._entries[path]
                self._write_entry(out, path, mode, data, ino)
                ino += 1
            self._write_entry(out, "TRAILER!!!", 0, b"", 0)
            pad = (-out.tell()) % 512
            out.write(b"\0" * pad)
        os.replace(tmp, out_path)

    @staticmethod
    def _write_entry(out, path, mode, data, ino):
        name = path.encode() + b"\0"
        nlink = 2 if stat.S_ISDIR(mode) else 1
        fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0,
                  len(name), 0)
        header = b"070701" + b"".join(b"%08X" % v for v in fields)
        out.write(header + name)
        out.write(b"\0" * ((-(len(header) + len(name))) % 4))
        out.write(data)
        out.write(b"\0" * ((-len(data)) % 4))
