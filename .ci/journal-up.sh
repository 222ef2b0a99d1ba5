#!/usr/bin/env bash
# .ci/journal-up.sh: a running systemd-journald for the tests in tests/slurm/, started by hand
# where no systemd runs as PID 1 (the CI machine). journald reads the kernel's ring buffer
# (/dev/kmsg: the kernel transport, which users cannot write) and /dev/log (syslog: anyone can),
# and records which is which: the trusted kernel source the live tests read.
# Safe to run again. Must run as root.
set -euo pipefail
say() { printf '[journal-up] %s\n' "$*"; }
[ "$(id -u)" = 0 ] || { say "ERROR: run me as root"; exit 1; }

JOURNALD=$(command -v systemd-journald || true)
for p in /lib/systemd/systemd-journald /usr/lib/systemd/systemd-journald; do
    [ -n "$JOURNALD" ] || { [ -x "$p" ] && JOURNALD=$p; }
done
[ -n "$JOURNALD" ] || { say "ERROR: systemd-journald not found (Debian package systemd)"; exit 1; }

if [ ! -S /run/systemd/journal/dev-log ] || ! pgrep -x systemd-journal >/dev/null; then
    say "starting $JOURNALD"
    mkdir -p /run/systemd/journal
    [ -s /etc/machine-id ] || systemd-machine-id-setup >/dev/null 2>&1 || true
    setsid "$JOURNALD" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 100); do [ -S /run/systemd/journal/dev-log ] && break; sleep 0.1; done
    [ -S /run/systemd/journal/dev-log ] || { say "ERROR: journald did not create its sockets"; exit 1; }
fi
# logger and syslog(3) write to /dev/log; under systemd a socket unit makes this link
[ -e /dev/log ] || ln -s /run/systemd/journal/dev-log /dev/log
logger -t journal-up "journald is recording"
for _ in $(seq 50); do
    journalctl -q --no-pager -n 1 -t journal-up >/dev/null 2>&1 && break
    sleep 0.1
done
say "journald ready: $(journalctl --no-pager -q --header 2>/dev/null | sed -n 's/^File path: //p' | head -n 1)"
