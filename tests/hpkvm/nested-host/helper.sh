# SPDX-License-Identifier: GPL-2.0-or-later
#
# qemu-hpkvm-helper as the nested test host's service, in busybox sh:
# /init starts it before the payload and stops it after, as systemd does
# on a real host before any VM; a payload that needs another helper (a
# policy, a crash) stops it and starts its own with these functions
# (". /etc/nested-host/helper.sh").  One helper at a time, its pid in
# $HELPER_PID_FILE; every start appends its stderr to $HELPER_LOG.

HELPER_SOCK=/run/qemu-hpkvm-helper.sock
HELPER_PID_FILE=/run/qemu-hpkvm-helper.pid
HELPER_LOG=/tmp/helper.log

# Is the helper of $HELPER_PID_FILE running (not gone, not a zombie, its
# pid not reused by another program)?
helper_alive() {
    hpid=$(cat $HELPER_PID_FILE 2> /dev/null) || return 1
    [ "$(cat /proc/$hpid/comm 2> /dev/null)" = qemu-hpkvm-help ] &&
        [ "$(cut -d' ' -f3 /proc/$hpid/stat 2> /dev/null)" != Z ]
}

# Is our child $1 still there (not gone, not a zombie)?  Until it has
# exec'd the helper its comm is the shell's, so helper_alive would call a
# helper that is still starting dead.
helper_child_running() {
    state=$(cut -d' ' -f3 "/proc/$1/stat" 2> /dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# Start the helper with options "$@"; back once it serves (it listens,
# world-writable, only after its reconcile at start), within 60 s.
helper_start() {
    # A killed helper leaves its socket: wait for the new one.
    rm -f $HELPER_SOCK
    echo "--- qemu-hpkvm-helper${*:+ $*} ($(cut -d' ' -f1 /proc/uptime) s)" \
        >> $HELPER_LOG
    qemu-hpkvm-helper "$@" >> $HELPER_LOG 2>&1 < /dev/null &
    child=$!
    echo $child > $HELPER_PID_FILE
    i=0
    until [ -S $HELPER_SOCK ] && [ "$(stat -c %a $HELPER_SOCK)" = 666 ]; do
        helper_child_running $child || { echo "helper-exited: $(tail -n 3 $HELPER_LOG)"; return 1; }
        sleep 0.05; i=$((i + 1)); [ $i -gt 1200 ] && { echo "helper-no-socket: $HELPER_SOCK"; return 1; }
    done
    return 0
}

# Stop it with signal $1 (TERM, as systemd stops it; KILL, as a crash),
# and wait until it is gone (a zombie of /init's counts as gone).
helper_stop() {
    helper_alive || { rm -f $HELPER_PID_FILE; return 0; }
    kill -${1:-TERM} $hpid 2> /dev/null
    i=0
    while helper_alive; do
        sleep 0.05; i=$((i + 1)); [ $i -gt 1200 ] && { echo "helper-hang: $hpid"; return 1; }
    done
    rm -f $HELPER_PID_FILE
    return 0
}
