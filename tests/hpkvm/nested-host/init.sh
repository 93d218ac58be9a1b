#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# /init of the nested test host: set up a minimal root, load the modules
# hpkvm's tests need, optionally create SR-IOV VFs and bind some of them to
# vfio-pci, start qemu-hpkvm-helper, run /payload/run.sh as root with its
# output on the second serial port (ttyS1; ttyAMA1 on arm64), report its
# exit status there,
# stop the helper, and power off.
#
# Kernel command line:
#   nested_host.vfs=N        create N VFs on the igb PF (0: none)
#   nested_host.vfio_vfs=M   bind the first M of them to vfio-pci
#   nested_host.kvm=hpkvm    load our KVM (/hpkvm/kvm/*.ko, from kvm/)
#                            instead of Debian's kvm and kvm-amd

/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:/hpkvm/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# Loopback, as on any host: vhost-user-bridge's UDP backend uses it.
ip link set lo up

# x86's 8250s, or the arm64 virt machine's two PL011s.
con=/dev/ttyS0
out=/dev/ttyS1
if [ -e /dev/ttyAMA1 ]; then
    con=/dev/ttyAMA0
    out=/dev/ttyAMA1
fi
log() {
    echo "nested-host: $*" > $con
}

param() {
    for arg in $(cat /proc/cmdline); do
        case "$arg" in
        "nested_host.$1="*) echo "${arg#*=}"; return ;;
        esac
    done
    echo 0
}

kvm=$(param kvm)
# Booted from a CD-ROM (the Bochs nested host, bochs_host.py): the initrd
# holds only this base, our KVM and the payload, as a BIOS reads a disc
# slowly and an emulated CPU copies an initrd slowly; our build is on the
# disc's root/, read by Linux's PIIX driver (DMA) when QEMU first maps
# a page, and linked into place here.
if [ "$(param medium)" = cdrom ]; then
    while read -r m; do
        insmod "$m" 2> $con || log "insmod $m failed"
    done < /etc/nested-host/modules-cdrom
    mkdir -p /medium
    i=0
    until mount -t iso9660 -o ro /dev/sr0 /medium 2> /dev/null; do
        sleep 0.1; i=$((i + 1))
        [ $i -ge 300 ] && { log "no CD-ROM to mount at /medium"; break; }
    done
    (cd /medium/root && find . -type f) | while read -r f; do
        mkdir -p "${f%/*}"
        ln -sf "/medium/root/${f#./}" "$f"
    done
fi
# kvm-amd's parameters, e.g. nested_host.kvm_amd=avic=1 (0: none).
kvm_amd=$(param kvm_amd)
[ "$kvm_amd" = 0 ] && kvm_amd=
# Our whole kernel has what the modules give built in (kvm/kernel.config).
[ "$(param kernel)" = hpkvm ] && : > /etc/nested-host/modules
# KVM takes the TSC's rate when it loads, as its guests' TSC rate: under
# TCG, Linux's early estimate can be far off, and a guest's TSC-deadline
# timer then fires seconds late or never.  Load KVM once Linux has
# refined the rate and switched to the "tsc" clocksource (x86; 30 s at
# most, then it loads anyway and says so).
cs=/sys/devices/system/clocksource/clocksource0/current_clocksource
if [ -s /etc/nested-host/modules ] && grep -q tsc $cs; then
    i=0
    until [ "$(cat $cs)" = tsc ] || [ $i -ge 300 ]; do
        sleep 0.1; i=$((i + 1))
    done
    [ "$(cat $cs)" = tsc ] || log "the TSC's rate is not refined yet"
fi
# The vendor module of the CPU's virtualization: kvm-amd (SVM) or
# kvm-intel (VMX; the Bochs nested host); the other one is not loaded.
vendor_ko="kvm-amd.ko"
grep -qw vmx /proc/cpuinfo && vendor_ko="kvm-intel.ko"
# nested_host.modules=kvm: KVM's modules and what they need only, the
# list up to kvm-intel (the Bochs host, which has no igb and no IOMMU,
# and whose emulated CPU takes seconds per module).
modules=/etc/nested-host/modules
if [ "$(param modules)" = kvm ]; then
    sed '/\/kvm-intel\.ko$/q' $modules > /tmp/modules-kvm
    modules=/tmp/modules-kvm
fi
while read -r m; do
    case "${m##*/}" in
    kvm-amd.ko|kvm-intel.ko) [ "${m##*/}" = $vendor_ko ] || continue ;;
    esac
    # Ours replace the stock ones (unsigned: the kernel loads them, tainted).
    case "$kvm:${m##*/}" in
    hpkvm:kvm.ko|hpkvm:kvm-amd.ko|hpkvm:kvm-intel.ko)
        m=/hpkvm/kvm/${m##*/} ;;
    esac
    args=
    [ "${m##*/}" = kvm-amd.ko ] && args=$kvm_amd
    # Our kvm.ko's kvm.* parameters on the command line, as modprobe
    # would pass them (insmod does not): kvm.hpkvm_cores= above all, as
    # it names no core by default.
    [ "$m" = /hpkvm/kvm/kvm.ko ] &&
        args=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^kvm\.//p')
    # shellcheck disable=SC2086 # one word per parameter
    insmod "$m" $args 2> $con || log "insmod $m $args failed"
done < $modules

vfs=$(param vfs)
vfio_vfs=$(param vfio_vfs)
if [ "$vfs" -gt 0 ]; then
    pf=
    for dev in /sys/bus/pci/devices/*; do
        if [ "$(basename "$(readlink "$dev/driver" 2>/dev/null)")" = igb ] &&
           [ -f "$dev/sriov_numvfs" ]; then
            pf=$dev
            break
        fi
    done
    if [ -z "$pf" ]; then
        log "no igb PF with SR-IOV"
    else
        echo "$vfs" > "$pf/sriov_numvfs" || log "cannot create $vfs VFs"
        i=0
        while [ "$i" -lt "$vfio_vfs" ]; do
            vf=$(basename "$(readlink "$pf/virtfn$i")")
            [ -e "/sys/bus/pci/devices/$vf/driver" ] &&
                echo "$vf" > "/sys/bus/pci/devices/$vf/driver/unbind"
            echo vfio-pci > "/sys/bus/pci/devices/$vf/driver_override"
            echo "$vf" > /sys/bus/pci/drivers_probe
            i=$((i + 1))
        done
    fi
fi

# The helper runs here, not in each payload: a real host's systemd has it
# up before any VM, so every payload (the tests', make bench's) finds it
# as a VM would, and none has to remember it.  A payload that needs
# another helper (a policy, a crash) uses helper.sh's functions.
. /etc/nested-host/helper.sh
helper_start > $con || log "qemu-hpkvm-helper did not start"

# The test guest of the host's architecture.
for HPKVM_GUEST in /hpkvm/guests/hpkvm-guest.elf \
                   /hpkvm/guests/hpkvm-guest-arm.elf; do
    [ -e $HPKVM_GUEST ] && break
done
export HPKVM_GUEST
# The Linux guest, where the run asked for it (nested_host.run's
# linux_guest).
if [ -e /hpkvm/guests/linux/vmlinuz ]; then
    export HPKVM_LINUX_KERNEL=/hpkvm/guests/linux/vmlinuz
    export HPKVM_LINUX_INITRD=/hpkvm/guests/linux/initrd
fi
cd /tmp
sh /payload/run.sh > "$out" 2>&1 < /dev/null
status=$?
helper_stop > $con
echo "NESTED-HOST-EXIT $status" > "$out"
sync
poweroff -f
