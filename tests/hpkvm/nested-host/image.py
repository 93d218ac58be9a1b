# SPDX-License-Identifier: GPL-2.0-or-later
"""Build the nested test host's boot image from Debian's kernel package.

The image is a kernel and an initrd made of concatenated cpio pieces:

- base: busybox, /init, its helper.sh and the kernel modules the tests
  need; depends on the kernel package only, cached across builds in the
  cache directory;
- hpkvm: our built QEMU with its shared libraries and firmware, our
  guests and helpers; rebuilt when any of them changes;
- payload: the test's script, per run (see nested_host.py).
"""

import fcntl
import functools
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import threading

from cpio_newc import NewcWriter

HERE = os.path.dirname(os.path.abspath(__file__))

# The repository, not build/src: meson runs the tests from the overlay,
# whose files are links into the repository, and kvm/ is not overlaid.
REPO = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "../../.."))

# The kernel the nested host is tested with, and our KVM is built for
# (kvm/build.sh).  Debian replaces kernel ABI versions in its archive;
# when this one is gone, the kernel that linux-image-amd64 depends on is
# used, and a warning says so.
with open(os.path.join(REPO, "kvm", "tested-kernel")) as _f:
    TESTED_KERNEL = _f.read().strip()

# Modules to load, in this order (dependencies are added before each);
# /init loads kvm-amd or kvm-intel, whichever the CPU has (SVM or VMX).
MODULES = [
    "kvm", "kvm-amd", "kvm-intel", "irqbypass",
    "tun", "tap", "vhost_iotlb", "vhost", "vhost_net",
    "dca", "i2c-algo-bit", "igb",
    "vfio", "vfio_iommu_type1", "vfio_virqfd", "vfio-pci-core", "vfio-pci",
]


# The arm64 nested host boots Debian's arm64 build of the same kernel.
# Its KVM is built in (arm64 KVM cannot be a module); the modules are
# -netdev hpnet's backends: tap and vhost-net.
ARM64_KERNEL = TESTED_KERNEL.replace("-amd64", "-arm64")
ARM64_MODULES = [
    "tun", "tap", "vhost_iotlb", "vhost", "vhost_net",
    "igb", "vfio", "vfio_iommu_type1", "vfio-pci",
]
# What a host booted from a CD-ROM (the Bochs nested host,
# bochs_host.py) needs to read its build from the disc: PIIX's IDE and
# ISO 9660.  /init loads them only there (nested_host.medium=cdrom).
CDROM_MODULES = ["ata_piix", "sr_mod", "isofs"]
ARM64_LIB_DIRS = ["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"]


def log(msg):
    print(f"nested-host: {msg}", file=sys.stderr, flush=True)


def default_cache_dir():
    base = os.environ.get("HPKVM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "hpkvm")
    return os.path.join(base, "nested-host")


# Whether this thread holds the image lock (_image_lock.depth 1): flock()
# locks an open file description, so a nested call would wait on itself.
_image_lock = threading.local()


def _exclusive(fn):
    """Run fn holding the image lock (a flock() in the cache directory).

    meson runs the nested-host tests in parallel, and each builds the
    pieces it needs; two kvm/build.sh runs in one directory at once left
    an empty kvm.ko (seen in CI), and two writers of one cpio interleave.
    One builder at a time; the others wait, then find it current.
    """
    @functools.wraps(fn)
    def locked(*args, **kwargs):
        if getattr(_image_lock, "depth", 0):
            return fn(*args, **kwargs)
        os.makedirs(default_cache_dir(), exist_ok=True)
        path = os.path.join(default_cache_dir(), "image.lock")
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log(f"{fn.__name__}: waiting for another process building "
                    f"the image ({path})")
                fcntl.flock(f, fcntl.LOCK_EX)
            _image_lock.depth = 1
            try:
                return fn(*args, **kwargs)
            finally:
                _image_lock.depth = 0
    return locked


def _apt_has(pkg):
    r = subprocess.run(["apt-cache", "show", pkg], capture_output=True,
                       text=True)
    return r.returncode == 0 and "Package:" in r.stdout


def choose_kernel():
    if _apt_has(f"linux-image-{TESTED_KERNEL}"):
        return TESTED_KERNEL
    r = subprocess.run(["apt-cache", "depends", "linux-image-amd64"],
                       capture_output=True, text=True, check=False)
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("Depends: linux-image-"):
            kver = line.split("linux-image-", 1)[1]
            log(f"warning: kernel {TESTED_KERNEL}, the one the nested host "
                f"is tested with, is no longer in Debian's archive; using "
                f"{kver} (linux-image-amd64)")
            return kver
    raise RuntimeError(
        "apt knows no linux-image-amd64: run 'apt-get update' (as root), "
        "or check that Debian's archive is reachable")


def _download(pkg, dest_dir, version=None):
    """apt-get download pkg (pkg=version if given) into dest_dir, once
    (apt verifies it); return its path."""
    os.makedirs(dest_dir, exist_ok=True)
    # apt names it pkg_VERSION_arch.deb, an epoch's ':' as %3a.
    prefix = f"{pkg}_" + (f"{version.replace(':', '%3a')}_" if version
                          else "")
    for name in os.listdir(dest_dir):
        if name.startswith(prefix) and name.endswith(".deb"):
            return os.path.join(dest_dir, name)
    want = f"{pkg}={version}" if version else pkg
    log(f"downloading {want}")
    r = subprocess.run(["apt-get", "download", "-q", want], cwd=dest_dir,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"apt-get download {want} failed: "
                           f"{r.stderr.strip()}")
    return _download(pkg, dest_dir, version)


def _unpack(deb, dest):
    if not os.path.isdir(dest):
        tmp = dest + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        # The cache's first use may be an arm64 host's, whose packages
        # come from the sysroot's debs/, not the cache's.
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        os.replace(tmp, dest)
    return dest


def _modinfo(ko):
    """The .modinfo section of an ELF64 kernel module: {key: [values]}."""
    with open(ko, "rb") as f:
        elf = f.read()
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3a)

    def section(i):
        name, _, _, _, off, size = struct.unpack_from(
            "<IIQQQQ", elf, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    info = {}
    for i in range(shnum):
        name, off, size = section(i)
        if elf[stroff + name:].split(b"\0", 1)[0] != b".modinfo":
            continue
        for item in elf[off:off + size].split(b"\0"):
            key, sep, val = item.decode(errors="replace").partition("=")
            if sep:
                info.setdefault(key, []).extend(
                    v for v in val.split(",") if v)
    return info


def _module_closure(moddir, names):
    """Module paths to insmod, dependencies first.

    The package has no modules.dep (depmod makes it at install time), and
    kmod's modinfo may be missing, so the dependencies come from each
    module's own .modinfo section.
    """
    by_name = {}
    for root, _, files in os.walk(os.path.join(moddir, "kernel")):
        for f in files:
            if ".ko" in f:
                name = f.split(".ko")[0].replace("-", "_")
                by_name[name] = os.path.relpath(os.path.join(root, f),
                                                moddir)
    order = []

    def visit(name):
        path = by_name.get(name.replace("-", "_"))
        if not path:
            raise RuntimeError(f"kernel has no module {name}")
        if path in order:
            return
        for dep in _modinfo(os.path.join(moddir, path)).get("depends", []):
            visit(dep)
        order.append(path)

    for n in names:
        visit(n)
    return order


def _llvm(tool):
    """An LLVM tool (Debian keeps the unversioned ones in its own bin)."""
    found = shutil.which(tool)
    if found:
        return found
    for d in sorted(os.listdir("/usr/lib"), reverse=True):
        path = os.path.join("/usr/lib", d, "bin", tool)
        if d.startswith("llvm-") and os.path.exists(path):
            return path
    raise RuntimeError(f"no {tool}: scripts/hpkvm/install-deps.sh installs "
                       f"llvm")


def _walk_files(top):
    """Every file below top, as paths."""
    for d, _, names in os.walk(top):
        for n in names:
            yield os.path.join(d, n)


def _sha(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
    return h.hexdigest()[:16]


def arm64_firmware(cache):
    """Debian's UEFI firmware for QEMU's arm64 virt machine (arch: all);
    its path.  The arm64 nested host boots through it, with ACPI, when it
    has an SMMU: see nested_host.run."""
    deb = _download("qemu-efi-aarch64", os.path.join(cache, "debs"))
    pkg = _unpack(deb, os.path.join(cache, "qemu-efi-aarch64"))
    return os.path.join(pkg, "usr", "share", "qemu-efi-aarch64",
                        "QEMU_EFI.fd")


def arm64_sysroot():
    """The arm64 sysroot of the aarch64 cross build (configure makes it:
    scripts/hpkvm/arm64-sysroot.sh), where arm64 packages are also
    downloaded."""
    base = os.environ.get("HPKVM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "hpkvm")
    return os.path.join(base, "arm64-sysroot")


def _download_arm64(pkg):
    """An arm64 package through the sysroot's own apt view (the host's apt
    has no arm64); its path."""
    r = subprocess.run([os.path.join(REPO, "scripts/hpkvm/arm64-sysroot.sh"),
                        "--download", arm64_sysroot(), pkg],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cannot download {pkg} for arm64: "
                           f"{r.stderr.strip()}")
    return r.stdout.split()[-1]


@_exclusive
def build_base(cache, kver, arch="x86_64"):
    """Kernel image and base cpio (busybox, /init, modules); cached."""
    debs = os.path.join(cache, "debs")
    if arch == "aarch64":
        kver = ARM64_KERNEL
        kdeb = _download_arm64(f"linux-image-{kver}")
        bdeb = _download_arm64("busybox-static")
        modules = ARM64_MODULES
    else:
        kdeb = _download(f"linux-image-{kver}", debs)
        bdeb = _download("busybox-static", debs)
        modules = MODULES
    kpkg = _unpack(kdeb, os.path.join(cache, f"linux-image-{kver}"))
    bpkg = _unpack(bdeb, os.path.join(cache, f"busybox-static-{arch}"))
    with open(os.path.join(HERE, "init.sh"), "rb") as f:
        init = f.read()
    with open(os.path.join(HERE, "helper.sh"), "rb") as f:
        helper_sh = f.read()
    tag = _sha(kver, arch, init, helper_sh, " ".join(modules),
               " ".join(CDROM_MODULES))
    out = os.path.join(cache, f"base-{kver}-{tag}.cpio")
    vmlinuz = os.path.join(kpkg, "boot", f"vmlinuz-{kver}")
    if os.path.exists(out):
        return vmlinuz, out

    moddir = os.path.join(kpkg, "lib", "modules", kver)
    w = NewcWriter()
    for d in ("proc", "sys", "dev", "tmp", "run", "root", "etc", "sbin",
              "usr/bin", "usr/sbin"):
        w.add_dir(d)
    w.add_file("bin/busybox", os.path.join(bpkg, "bin", "busybox"), 0o755)
    w.add_bytes("init", init, 0o755)
    w.add_bytes("etc/nested-host/helper.sh", helper_sh)
    if arch == "aarch64":
        # Users as a Debian host has them, for what resolves names
        # (hpkvm's unit tests of the helper's policy); the x86 host gets
        # them with libvirt (build_libvirt).
        w.add_bytes("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"
                    b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
                    0o644)
        w.add_bytes("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
    order = _module_closure(moddir, modules)
    cdrom = [rel for rel in _module_closure(moddir, CDROM_MODULES)
             if rel not in order] if arch == "x86_64" else []
    for rel in order + cdrom:
        w.add_file(f"lib/modules/{kver}/{rel}", os.path.join(moddir, rel))
    for name, mods in (("modules", order), ("modules-cdrom", cdrom)):
        w.add_bytes(f"etc/nested-host/{name}",
                    "".join(f"/lib/modules/{kver}/{rel}\n" for rel in mods)
                    .encode())
    w.write(out)
    return vmlinuz, out


# The Linux guest's workloads: Debian's rt-tests, and libnuma, which
# cyclictest links (from its package, not the host, which need not have
# it installed).
LINUX_GUEST_PACKAGES = ("rt-tests", "libnuma1")
LINUX_GUEST_TOOLS = ("cyclictest", "hackbench")
# Its network driver, for the NICs make bench gives it (hpnet's
# backends), loaded by its /init in this order.
LINUX_GUEST_MODULES = ["virtio_pci", "virtio_net"]


@_exclusive
def build_kmod(cache):
    """Debian's kmod (depmod, modprobe, modinfo, lsmod, insmod, rmmod) as
    a cpio piece, with the libraries it links from this machine: for a
    payload that installs modules as a Debian host does (busybox's
    depmod, unlike kmod's, does not put updates/ first).  Its links are
    /bin/depmod and so on, which /init's "busybox --install" keeps; a
    payload calls them by path, as busybox's sh runs its own applets of
    the same names before it looks at PATH."""
    deb = _download("kmod", os.path.join(cache, "debs"))
    pkg = _unpack(deb, os.path.join(cache, "kmod"))
    kmod = os.path.join(pkg, "bin", "kmod")
    out = os.path.join(cache, f"kmod-{_sha(os.path.basename(deb))}.cpio")
    if os.path.exists(out):
        return out
    w = NewcWriter()
    w.add_file("bin/kmod", kmod, 0o755)
    for tool in ("depmod", "modprobe", "modinfo", "lsmod", "insmod",
                 "rmmod"):
        w.add_symlink(f"bin/{tool}", "kmod")
    for lib in _ldd(kmod):
        w.add_file(lib.lstrip("/"), lib, 0o755)
    w.write(out)
    return out


@_exclusive
def build_linux_guest(cache, kver):
    """The Linux guest, a cpio piece: Debian's kernel @kver (the nested
    host's own) and an initramfs of busybox, tests/hpkvm/guest-linux's
    /init and rt-tests' tools with the libraries they load, at
    hpkvm/guests/linux/{vmlinuz,initrd}, with virtio-net's modules;
    cached by its inputs."""
    debs = os.path.join(cache, "debs")
    # The nested host's own kernel package and busybox (build_base's).
    vmlinuz, _ = build_base(cache, kver)
    kpkg = os.path.join(cache, f"linux-image-{kver}")
    moddir = os.path.join(kpkg, "lib", "modules", kver)
    busybox = os.path.join(cache, "busybox-static-x86_64", "bin", "busybox")
    pkgs = [_download(p, debs) for p in LINUX_GUEST_PACKAGES]
    with open(os.path.join(REPO, "tests/hpkvm/guest-linux/init.sh"),
              "rb") as f:
        init = f.read()
    tag = _sha(kver, init, " ".join(LINUX_GUEST_MODULES),
               *[os.path.basename(p) for p in pkgs])
    out = os.path.join(cache, f"linux-guest-{kver}-{tag}.cpio")
    if os.path.exists(out):
        return out
    log("packing the Linux guest")
    trees = [_unpack(p, os.path.join(cache, os.path.basename(p)[:-4]))
             for p in pkgs]
    tools = [os.path.join(trees[0], "usr/bin", t) for t in LINUX_GUEST_TOOLS]
    numa = glob.glob(os.path.join(trees[1], "usr/lib/*/libnuma.so.1"))[0]
    w = NewcWriter()
    for d in ("proc", "sys", "dev", "tmp", "bin", "lib64",
              "lib/x86_64-linux-gnu"):
        w.add_dir(d)
    w.add_file("bin/busybox", busybox, 0o755)
    w.add_bytes("init", init, 0o755)
    libs = {}
    for tool in tools:
        w.add_file(f"bin/{os.path.basename(tool)}", tool, 0o755)
        # The host's glibc is Debian 12's, which rt-tests is built for.
        for lib in _ldd(tool):
            libs[lib] = os.path.realpath(lib)
    libs["/lib/x86_64-linux-gnu/libnuma.so.1"] = os.path.realpath(numa)
    for path, host in sorted(libs.items()):
        w.add_file(path.lstrip("/"), host, 0o755)
    modules = _module_closure(moddir, LINUX_GUEST_MODULES)
    for rel in modules:
        w.add_file(f"lib/modules/{rel}", os.path.join(moddir, rel))
    w.add_bytes("etc/modules-net", "".join(f"/lib/modules/{rel}\n"
                                           for rel in modules).encode())
    initrd = out + ".initrd"
    w.write(initrd)
    piece = NewcWriter()
    piece.add_file("hpkvm/guests/linux/vmlinuz", vmlinuz)
    piece.add_file("hpkvm/guests/linux/initrd", initrd)
    piece.write(out)
    os.unlink(initrd)
    return out


def _ldd(binary):
    r = subprocess.run(["ldd", binary], capture_output=True, text=True,
                       check=True)
    libs = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(parts[2])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])           # the dynamic loader
    return libs


def _needed(binary):
    """The DT_NEEDED libraries and the interpreter of an ELF, by name."""
    with open(binary, "rb") as f:
        elf = f.read()
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    interp, dyn, loads = None, None, []
    for i in range(phnum):
        ptype, _, off, vaddr, _, filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", elf, phoff + i * phentsize)
        if ptype == 3:
            interp = elf[off:off + filesz].split(b"\0")[0].decode()
        elif ptype == 2:
            dyn = (off, filesz)
        elif ptype == 1:
            loads.append((vaddr, off, filesz))
    if not dyn:
        return [], interp
    entries = [struct.unpack_from("<qQ", elf, dyn[0] + k)
               for k in range(0, dyn[1], 16)]
    strtab = next(v for t, v in entries if t == 5)
    stroff = next(off + strtab - va for va, off, sz in loads
                  if va <= strtab < va + sz)
    names = [elf[stroff + v:].split(b"\0", 1)[0].decode()
             for t, v in entries if t == 1]
    return names, interp


def _sysroot_libs(binaries, sysroot):
    """Every library the arm64 binaries load, from the sysroot, with the
    dynamic loader: [(path in image, file)]."""
    found, todo = {}, list(binaries)
    while todo:
        names, interp = _needed(todo.pop())
        if interp and interp not in found:
            found[interp] = os.path.realpath(sysroot + interp)
        for name in names:
            if any(p.endswith("/" + name) for p in found):
                continue
            for d in ARM64_LIB_DIRS:
                host = os.path.join(sysroot, d, name)
                if os.path.exists(host):
                    found[f"/{d}/{name}"] = os.path.realpath(host)
                    todo.append(os.path.realpath(host))
                    break
            else:
                raise RuntimeError(f"{name} is not in the arm64 sysroot "
                                   f"{sysroot}: run ./configure")
    return [(p.lstrip("/"), h) for p, h in sorted(found.items())]


def hpkvm_inputs_arm64(build):
    """What the arm64 nested host runs: the aarch64 cross build of QEMU
    (build/aarch64) with its libraries from the arm64 sysroot, its helper
    and payload tools, and the aarch64 test guest (of the x86 build)."""
    arm = os.path.join(build, "..", "aarch64")
    qemu = os.path.join(arm, "qemu-system-aarch64")
    helper = os.path.join(arm, "tools/hpkvm/qemu-hpkvm-helper")
    files = [("hpkvm/bin/qemu-system-aarch64", qemu),
             ("hpkvm/bin/qemu-hpkvm-helper", helper),
             ("hpkvm/bin/qemu-hpkvm-check",
              os.path.join(arm, "tools/hpkvm/qemu-hpkvm-check")),
             ("hpkvm/bin/qmp-exec",
              os.path.join(arm, "tests/hpkvm/nested-host/qmp-exec")),
             ("hpkvm/bin/vhost-user-bridge",
              os.path.join(arm, "tests/hpkvm/net/hpkvm-vhost-user-bridge")),
             # The contract's test against our KVM (kvm/, our kernel).
             ("hpkvm/bin/hpkvm-contract-test",
              os.path.join(arm, "tests/hpkvm/kernel/hpkvm-contract-test")),
             ("hpkvm/guests/hpkvm-guest-arm.elf",
              os.path.join(build, "tests/hpkvm/guest-arm",
                           "hpkvm-guest-arm.elf"))]
    # hpkvm's unit tests, built for aarch64 (what "make check" builds of
    # them: the Makefile's ARM_UNIT_TESTS), run inside.
    units = sorted(glob.glob(os.path.join(arm, "tests/unit/test-hpkvm-*")))
    files += [(f"hpkvm/tests/{os.path.basename(u)}", u) for u in units
              if os.path.isfile(u) and os.access(u, os.X_OK)]
    missing = [h for _, h in files if not os.path.exists(h)]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: build it first "
                           f"(make)")
    files += _sysroot_libs([h for _, h in files],
                           os.path.join(arm64_sysroot(), "root"))
    return files


def hpkvm_inputs(build):
    """Files of our build that go into the image: (path in image, host)."""
    qemu = os.path.join(build, "qemu-system-x86_64")
    helper = os.path.join(build, "tools/hpkvm/qemu-hpkvm-helper")
    files = [("hpkvm/bin/qemu-system-x86_64", qemu)]
    # The helper's libraries are QEMU's today (glib); both, in case.  A
    # binary not built yet is said missing by build_hpkvm().
    qtests = [os.path.join(build, "tests/qtest", name)
              for name in ("hpkvm-accel-test", "hpkvm-negotiate-test")]
    libs = []
    for binary in (qemu, helper, *qtests):
        if os.path.exists(binary):
            libs += [lib for lib in _ldd(binary) if lib not in libs]
    for lib in libs:
        files.append((lib.lstrip("/"), lib))
    # Firmware as the build tree sees it: qemu-bundle mirrors the installed
    # layout, relative to the binary's directory.
    bundle = os.path.join(build, "qemu-bundle")
    for top in ("usr/local/share/qemu", "usr/share/seabios",
                "usr/lib/ipxe/qemu"):
        src = os.path.join(bundle, top)
        if not os.path.isdir(src):
            continue
        for root, _, names in os.walk(src, followlinks=True):
            for n in names:
                host = os.path.join(root, n)
                rel = os.path.relpath(host, bundle)
                if rel.startswith("usr/local/share/qemu/trace-events"):
                    continue
                files.append((f"hpkvm/bin/qemu-bundle/{rel}", host))
    for name in ("hpkvm-guest.elf",):
        files.append((f"hpkvm/guests/{name}",
                      os.path.join(build, "tests/hpkvm/guest", name)))
    for tool in ("qmp-exec", "tap-open"):
        files.append((f"hpkvm/bin/{tool}",
                      os.path.join(build, "tests/hpkvm/nested-host", tool)))
    # The contract's test against our KVM (kvm/).
    files.append(("hpkvm/bin/hpkvm-contract-test",
                  os.path.join(build, "tests/hpkvm/kernel",
                               "hpkvm-contract-test")))
    # What binding costs the host past the first VM (static key flips).
    files.append(("hpkvm/bin/hpkvm-bind-loop",
                  os.path.join(build, "tests/hpkvm/kernel",
                               "hpkvm-bind-loop")))
    # Same libraries as QEMU's (glib).
    for tool in ("qemu-hpkvm-recover", "qemu-hpkvm-check"):
        files.append((f"hpkvm/bin/{tool}",
                      os.path.join(build, "tools/hpkvm", tool)))
    # The one owner of host changes, started by /init (see helper.sh).
    files.append(("hpkvm/bin/qemu-hpkvm-helper", helper))
    # The accelerator's qtests, which need a real KVM (see
    # test_nested_host.the_accelerators_qtests_pass_on_debians_kvm).
    for qtest in qtests:
        files.append((f"hpkvm/bin/{os.path.basename(qtest)}", qtest))
    # The test double of the patched kernel, for tests that LD_PRELOAD it.
    files.append(("hpkvm/lib/libhpkvm-fake-kernel.so",
                  os.path.join(build, "tests/hpkvm/fake-kernel",
                               "libhpkvm-fake-kernel.so")))
    return files


# libvirt for the tests that drive hpkvm through it: the daemons and
# virsh as this machine has them installed (scripts/hpkvm/install-deps.sh:
# bookworm-backports), with the libraries they load.
LIBVIRT_BINARIES = [
    "/usr/sbin/libvirtd", "/usr/sbin/virtlogd", "/usr/bin/virsh",
    "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/"
    "libvirt_driver_qemu.so",
    "/usr/lib/libvirt/libvirt_iohelper",
]
# The packages whose configuration files go in as Debian ships them.
LIBVIRT_CONF_PACKAGES = ["libvirt-common", "libvirt-daemon",
                         "libvirt-daemon-driver-qemu", "libvirt-daemon-log"]


def _installed_version(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                       capture_output=True, text=True)
    if r.returncode or not r.stdout:
        raise RuntimeError(f"{pkg} is not installed (scripts/hpkvm/"
                           f"install-deps.sh installs libvirt)")
    return r.stdout


@_exclusive
def build_libvirt(cache):
    """libvirt as a cpio piece: this machine's installed libvirtd,
    virtlogd, virsh and QEMU driver with their libraries; /etc/libvirt as
    the packages ship it, unpacked from their .debs of the installed
    version (never this machine's own, perhaps edited, files); and the
    users and groups the packages create (libvirt-qemu, in kvm)."""
    missing = [b for b in LIBVIRT_BINARIES if not os.path.exists(b)]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: scripts/hpkvm/"
                           f"install-deps.sh installs libvirt")
    versions = {p: _installed_version(p) for p in LIBVIRT_CONF_PACKAGES}
    tag = _sha(*(f"{p}={v}" for p, v in sorted(versions.items())))
    out = os.path.join(cache, f"libvirt-{tag}.cpio")
    if os.path.exists(out):
        return out
    files = {}
    for binary in LIBVIRT_BINARIES:
        files[binary] = binary
        for lib in _ldd(binary):
            files[lib] = lib
    for path in _walk_files("/usr/share/libvirt"):
        files[path] = path
    debs = os.path.join(cache, "debs", "libvirt")
    for pkg, ver in versions.items():
        deb = _download(pkg, debs, ver)
        tree = _unpack(deb, os.path.join(cache, f"{pkg}-{ver}"))
        for host in _walk_files(os.path.join(tree, "etc", "libvirt")):
            files["/" + os.path.relpath(host, tree)] = host
    w = NewcWriter()
    for path, host in sorted(files.items()):
        w.add_file(path.lstrip("/"), os.path.realpath(host),
                   0o755 if os.access(host, os.X_OK) else 0o644)
    passwd = subprocess.run(["getent", "passwd", "root", "libvirt-qemu"],
                            capture_output=True, text=True).stdout
    group = subprocess.run(["getent", "group", "root", "kvm",
                            "libvirt-qemu", "libvirt"],
                           capture_output=True, text=True).stdout
    if "libvirt-qemu" not in passwd or "kvm" not in group:
        raise RuntimeError("no libvirt-qemu user or kvm group: reinstall "
                           "libvirt-daemon-driver-qemu")
    w.add_bytes("etc/passwd", passwd.encode(), 0o644)
    w.add_bytes("etc/group", group.encode(), 0o644)
    w.add_bytes("etc/nsswitch.conf", b"passwd: files\ngroup: files\n",
                0o644)
    w.write(out)
    return out


def installed_bindir(build):
    """Where build_installed() puts the emulator: meson's prefix/bindir."""
    with open(os.path.join(build, "meson-info",
                           "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    return os.path.join(opts["prefix"], opts["bindir"])


@_exclusive
def build_installed(build, out):
    """QEMU's install of our build ("make install": meson install, here
    stripped) as a cpio piece at its real prefix, /usr/local unless
    configured otherwise; rebuilt when the emulator is newer."""
    qemu = os.path.join(build, "qemu-system-x86_64")
    if os.path.exists(out) and os.stat(out).st_mtime >= os.stat(qemu).st_mtime:
        return out
    log("installing hpkvm's build for the nested host (meson install)")
    root = out + ".root"
    shutil.rmtree(root, ignore_errors=True)
    r = subprocess.run([os.path.join(build, "pyvenv", "bin", "meson"),
                        "install", "-C", build, "--no-rebuild", "--quiet",
                        "--strip", "--destdir", root],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("meson install failed: "
                           + (r.stdout + r.stderr)[-2000:])
    w = NewcWriter()
    for host in _walk_files(root):
        # The manual and the man pages (22 MB) are of no use inside.
        if "/share/doc/" in host or "/share/man/" in host:
            continue
        w.add_file(os.path.relpath(host, root), host,
                   0o755 if os.access(host, os.X_OK) else 0o644)
    # What the installed QEMU depends on, as their packages install it:
    # SeaBIOS and iPXE on its firmware path (Debian's seabios and
    # ipxe-qemu, see configure).
    for top in ("/usr/share/seabios", "/usr/lib/ipxe/qemu"):
        for host in _walk_files(top):
            w.add_file(host.lstrip("/"), os.path.realpath(host))
    w.write(out)
    shutil.rmtree(root)
    return out


@_exclusive
def build_kvm(build, kver):
    """Our KVM (kvm/) for @kver, as a cpio piece; built once per process
    (kvm/build.sh itself rebuilds only what changed).

    /init loads hpkvm/kvm/*.ko instead of the stock kvm and kvm-amd (or
    kvm-intel) when the kernel command line says nested_host.kvm=hpkvm.
    """
    outdir = _run_kvm_script("build.sh", build, kver, "kvm")
    mods = [os.path.join(outdir, f"{m}.ko")
            for m in ("kvm", "kvm-amd", "kvm-intel")]
    out = os.path.join(outdir, "kvm.cpio")
    if (os.path.exists(out) and
            os.stat(out).st_mtime >= max(os.stat(m).st_mtime for m in mods)):
        return out
    w = NewcWriter()
    for m in mods:
        w.add_file(f"hpkvm/kvm/{os.path.basename(m)}", m)
    w.write(out)
    return out


@_exclusive
def build_kernel(build, kver, arch="x86_64", config="tiny"):
    """Our kernel (kvm/build-kernel.sh): Debian's source for @kver with our
    series, everything built in, configured over tinyconfig or, with
    @config "debian" (x86), with Debian's own config; its bzImage, or on
    aarch64 its Image.  Built once per process (the script itself
    rebuilds only when an input changed)."""
    karch, name = ("arm64", "Image") if arch == "aarch64" else \
        (None, "bzImage")
    return os.path.join(_run_kvm_script("build-kernel.sh", build, kver,
                                        "kernel", karch, config), name)


@_exclusive
def build_selftests(build, kver, arch):
    """Linux's KVM selftests from Debian's source for @kver
    (kvm/build-selftests.sh), for arch "x86" or "arm64"; their directory
    (bin/, built, unbuilt).  Built once per process."""
    return _run_kvm_script("build-selftests.sh", build, kver,
                           "kvm-selftests", arch)


# The (script, build, kver, arch, config) this process has run.
_kvm_built = set()


def _run_kvm_script(script, build, kver, subdir, arch=None, config="tiny"):
    """kvm/SCRIPT [--arch ARCH] [--config CONFIG] KVER into
    build/SUBDIR/KVER[-ARCH][-CONFIG] (CONFIG but the default "tiny"),
    once per process (each script rebuilds only what changed); that
    directory."""
    outdir = os.path.join(build, "..", subdir,
                          kver + (f"-{arch}" if arch else "") +
                          (f"-{config}" if config != "tiny" else ""))
    key = (script, build, kver, arch, config)
    if key not in _kvm_built:
        subprocess.run([os.path.join(REPO, "kvm", script),
                        *(("--arch", arch) if arch else ()),
                        *(("--config", config) if config != "tiny" else ()),
                        kver, outdir], check=True)
        _kvm_built.add(key)
    return outdir


@_exclusive
def build_hpkvm(build, out, arch="x86_64"):
    """The cpio of our build; rebuilt when an input is newer, or the
    inputs are other files than the cpio was packed from (out's .inputs
    lists those)."""
    files = hpkvm_inputs_arm64(build) if arch == "aarch64" else \
        hpkvm_inputs(build)
    for _, host in files:
        if not os.path.exists(host):
            raise RuntimeError(f"{host} is missing: build it first (make)")
    manifest = "".join(f"{path} {host}\n" for path, host in files)
    if os.path.exists(out) and _read_text(out + ".inputs") == manifest:
        newest = max(os.stat(h).st_mtime for _, h in files)
        if os.stat(out).st_mtime >= newest:
            return out
    log("packing hpkvm's build into the nested host image")
    w = NewcWriter()
    for path, host in files:
        w.add_file(path, host)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # Debug info is most of QEMU's size and of no use inside.
    stripped = out + ".qemu"
    subprocess.run([_llvm("llvm-objcopy") if arch == "aarch64" else
                    "objcopy", "--strip-debug", files[0][1], stripped],
                   check=True)
    w.add_file(files[0][0], stripped, 0o755)
    w.write(out)
    os.unlink(stripped)
    with open(out + ".inputs", "w") as f:
        f.write(manifest)
    return out


def _read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
