#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# hpkvm's Linux guest: /init of the initramfs that runs with Debian's own
# kernel as an L2 guest in the nested test hosts (image.build_linux_guest).
# The guest and its workloads are written elsewhere: Debian's kernel
# (SMP, its LAPIC timer, its IPIs), cyclictest and hackbench from Debian's
# rt-tests.  Only this script, the glue, is ours.
#
# Kernel parameters (read here, ignored by the kernel):
#   hpkvm.cpus=N   the vCPUs the guest must bring up (all of them)
#   hpkvm.nics=B1,B2,...  the VM's NICs, each named by the hpnet backend
#                  behind it: NIC i (from 1) has the MAC 52:54:00:00:0i:01,
#                  the guest 10.0.i.1/24, the host's side 10.0.i.2
#   hpkvm.bench=N  the workloads' size; each workload is framed by two
#                  writes to pvpanic's port (QEMU run with -device pvpanic
#                  -action panic=pause, as scripts/hpkvm/bench.py runs the
#                  test guest), at which the VM stops while the host reads
#                  KVM's statistics.  The frame's write runs on vCPU 0.
#
# It prints the bench lines that bench.py parses ("hpkvm-bench: ..."),
# latencies in ns (counter-khz=1000000), and a last line
# "hpkvm-linux-guest: PASS" or "hpkvm-linux-guest: FAIL WHY", then
# powers the VM off.

/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

param() {
    for p in $(cat /proc/cmdline); do
        case $p in "hpkvm.$1="*) echo "${p#*=}"; return;; esac
    done
    echo "$2"
}
cpus=$(param cpus 1)
samples=$(param bench 100)
failed=""
fail() { failed="$failed; $*"; }

PVPANIC_PORT=1285
# One frame boundary, from vCPU 0 (where bench.py takes the boundary's
# own exit to be).
frame() {
    printf '\001' |
        taskset -c 0 dd of=/dev/port bs=1 seek=$PVPANIC_PORT count=1 \
            conv=notrunc 2> /dev/null
}
# Seconds since boot, in ns (the clock's 10 ms resolution).
now_ns() { awk '{ printf "%.0f\n", $1 * 1000000000 }' /proc/uptime; }
result() { echo "hpkvm-bench: result $1 n=$2 min=$3 median=$4 p99=$5"; }
# Each CPU's count of one /proc/interrupts line ("LOC:"), space separated.
irqs() { awk -v n="$1:" -v c="$cpus" '$1 == n {
    for (i = 2; i <= c + 1; i++) printf "%s ", $i; print "" }' \
    /proc/interrupts; }

online=$(grep -c '^processor' /proc/cpuinfo)
[ "$online" = "$cpus" ] || fail "$online of $cpus vCPUs online"
echo "hpkvm-bench: counter-khz=1000000 source=linux-ns cpus=$online" \
     "samples=$samples"
echo "hpkvm-bench: note the Linux guest's latencies are in ns of its own" \
     "clock ($(cat /sys/devices/system/clocksource/clocksource0/current_clocksource));" \
     "sched's are hackbench's mean per message"

# What marking a frame costs this guest: two short processes.
frame
frame
result null 0 0 0 0

# Idle: every vCPU idle (the shell sleeps) for two seconds.
frame
t0=$(now_ns)
sleep 2
t1=$(now_ns)
frame
result idle 1 $((t1 - t0)) $((t1 - t0)) $((t1 - t0))

# Timer: one cyclictest thread on each vCPU, each sleeping 1 ms $samples
# times (clock_nanosleep on the LAPIC timer), its lateness in us.
loc0=$(irqs LOC)
frame
timeout 300 cyclictest -q -m -p 90 -t "$online" -a -i 1000 -l "$samples" \
    -h 20000 > /tmp/cyclictest 2>&1
status=$?
frame
loc1=$(irqs LOC)
# Sum the threads' histograms; nearest-rank percentiles, in ns.
set -- $(awk '/^[0-9]/ { n = 0; for (i = 2; i <= NF; i++) n += $i
                         if (n) { c[$1 + 0] += n; tot += n } }
              /^# Histogram Overflows:/ { for (i = 4; i <= NF; i++) o += $i }
              END { if (!tot) { print 0, 0, 0, 0, o + 0; exit }
                    m = -1; s = 0
                    for (k = 0; k <= 20000; k++) {
                        if (!(k in c)) continue
                        if (m < 0) m = k
                        s += c[k]
                        if (!med && s >= tot / 2) med = k
                        if (!p99 && s * 100 >= tot * 99) p99 = k
                    }
                    print tot + o, m * 1000, med * 1000, p99 * 1000, o + 0 }' \
        /tmp/cyclictest)
# A timer interrupt lost leaves its thread asleep for good: cyclictest
# that finished ran every thread's loops, and those are the operations.
# Its histogram may hold fewer (1 to 46 of 300 missing here, under every
# KVM, Debian's too): the percentiles are of the wake-ups it holds, and
# a shortfall is noted.
[ $status = 0 ] || fail "cyclictest: status $status" \
    "$(grep -v '^[0-9]' /tmp/cyclictest | tr '\n' ' ')"
result timer $((online * samples)) "$2" "$3" "$4"
[ "$5" = 0 ] || echo "hpkvm-bench: note timer: $5 wake-ups later than 20 ms"
[ "$1" = $((online * samples)) ] ||
    echo "hpkvm-bench: note timer: $1 wake-ups of $((online * samples))" \
         "in cyclictest's histogram:" \
         "$(grep '^# Total' /tmp/cyclictest)"
# Every vCPU took its own timer interrupts meanwhile.
set -- $loc1
for before in $loc0; do
    [ "$1" -gt "$before" ] || fail "LOC did not grow on a vCPU: $loc0 / $loc1"
    shift
done

# Sched: hackbench's groups of processes writing to each other through
# pipes across the vCPUs: wake-ups of one vCPU by another (IPIs).
loops=$((samples / 4 + 1))
frame
hackbench -g 2 -f 4 -l "$loops" > /tmp/hackbench 2>&1
status=$?
frame
messages=$((2 * 4 * 4 * loops))
secs=$(awk '/^Time:/ { print $2 }' /tmp/hackbench)
[ $status = 0 ] && [ -n "$secs" ] ||
    fail "hackbench: status $status: $(tr '\n' ' ' < /tmp/hackbench)"
per=$(awk -v s="${secs:-0}" -v m=$messages 'BEGIN { printf "%d", s * 1e9 / m }')
result sched $messages "$per" "$per" "$per"

# CPU: one vCPU hashing 64 KiB blocks, the others idle.
blocks=$((samples * 4))
frame
t0=$(now_ns)
dd if=/dev/zero bs=64k count=$blocks 2> /dev/null | md5sum > /dev/null
t1=$(now_ns)
frame
per=$(((t1 - t0) / blocks))
result cpu-md5 $blocks $per $per $per

# Net: through each NIC, ping round trips one at a time (-A: the next
# request as soon as the reply is in) to the host's side: a packet out
# and one in per operation, through hpnet's backend for that NIC.
# Latency is ping's, in its 1 us resolution: min, avg (as the median)
# and max (as the p99).
nics=$(param nics "")
if [ -n "$nics" ]; then
    for m in $(cat /etc/modules-net); do
        insmod "$m" || fail "insmod $m"
    done
    sleep 1
fi
i=0
for backend in $(echo "$nics" | tr ',' ' '); do
    i=$((i + 1))
    mac="52:54:00:00:0$i:01"
    ifc=""
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address")" = "$mac" ] && ifc=${d##*/}
    done
    if [ -z "$ifc" ]; then
        fail "no NIC $mac ($backend)"
        continue
    fi
    ip link set "$ifc" up
    ip addr add "10.0.$i.1/24" dev "$ifc"
    # The first reply also resolves the host's address (ARP).
    ping -c 1 -W 20 "10.0.$i.2" > /dev/null 2>&1 ||
        fail "$backend: no reply from 10.0.$i.2"
    frame
    ping -A -q -c "$samples" -W 10 "10.0.$i.2" > /tmp/ping 2>&1
    frame
    set -- $(awk '/packets transmitted/ { tx = $1; rx = $4 }
                  /round-trip/ { split($4, t, "/") }
                  END { printf "%d %d %.0f %.0f %.0f\n", tx, rx,
                        t[1] * 1e6, t[2] * 1e6, t[3] * 1e6 }' /tmp/ping)
    result "net-rr-$backend" "$2" "$3" "$4" "$5"
    [ "$1" = "$samples" ] && [ "$2" = "$samples" ] ||
        fail "$backend: $2 of $samples replies: $(tr '\n' ' ' < /tmp/ping)"
done

# What Linux itself says went wrong with its (virtual) hardware.
err=$(awk '$1 == "ERR:" { print $2 }' /proc/interrupts)
[ "${err:-0}" = 0 ] || fail "$err APIC errors"
bad=$(dmesg | grep -i -E 'WARNING:|BUG:|Call Trace|rcu.*stall|soft lockup|hung_task|APIC error|clocksource.*unstable|timer.*(lost|broken)' |
      head -n 5 | tr '\n' ' ')
[ -z "$bad" ] || fail "guest kernel: $bad"
grep -E '^ *(LOC|RES|CAL|TLB|NMI|ERR|SPU):' /proc/interrupts |
    sed 's/^/hpkvm-linux-guest: /'

if [ -z "$failed" ]; then
    echo "hpkvm-linux-guest: PASS"
else
    echo "hpkvm-linux-guest: FAIL${failed#;}"
fi
poweroff -f
