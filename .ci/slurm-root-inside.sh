#!/usr/bin/env bash
# .ci/slurm-root-inside.sh: run by .ci/slurm-root.sh inside a Debian root (chroot, own
# namespaces): the host recipe to start journald and a single-node Slurm with our hook, then
# the live tests with the root's Python. Exit 10 when the set-up failed (the step is written
# to /.attribution-ci-step for the outer script), else pytest's exit code.
set -uo pipefail
ACTION=$1
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
step() { # step NAME COMMAND...
    echo "$1" >/.attribution-ci-step
    "${@:2}" || exit 10
}
# Every run starts from an empty cluster: the namespaces end with SIGKILL to all daemons,
# and 26.05's slurmctld refuses to start on state it could not save ("No Assoc usage file").
# Job ids start again at 1 in an empty accounting database.
echo "fresh state" >/.attribution-ci-step
rm -rf /var/spool/slurmctld /var/spool/slurmd /var/lib/mysql /var/lib/mariadb \
    /var/tmp/attribution-ci /var/log/slurm.previous
[ -d /var/log/slurm ] && mv /var/log/slurm /var/log/slurm.previous  # the last run's, to look at
mkdir -p /var/lib/mysql /var/lib/mariadb
chown mysql:mysql /var/lib/mysql /var/lib/mariadb
# journald reads the kernel ring buffer from the sequence number in this file on: the next
# one, so that the host's (and other roots') old kernel lines are not recorded again now
kernel_seqnum() {
    mkdir -p /run/systemd/journal
    python3 - <<'EOP'
import os
import struct

fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
last = -1
while True:
    try:
        record = os.read(fd, 16384)
    except BlockingIOError:
        break  # read to the end
    except BrokenPipeError:
        continue  # a record overwritten while reading: go on with the next
    last = int(record.split(b";", 1)[0].split(b",")[1])
with open("/run/systemd/journal/kernel-seqnum", "wb") as out:
    out.write(struct.pack("<Q", last + 1))
EOP
}
step "kernel ring buffer position" kernel_seqnum
step "journald (.ci/journal-up.sh)" bash "$SRC/.ci/journal-up.sh"
step "Slurm (.ci/slurm-up.sh)" bash "$SRC/.ci/slurm-up.sh"
echo tests >/.attribution-ci-step
export ATTRIBUTION_REQUIRE_SLURM=1 ATTRIBUTION_REQUIRE_JOURNAL=1
export UV_PROJECT_ENVIRONMENT=/opt/attribution-venv UV_PYTHON=/usr/bin/python3
export UV_PYTHON_DOWNLOADS=never UV_OFFLINE=1 UV_FROZEN=1
cd "$SRC"
if [ "$ACTION" = shell ]; then
    echo "Slurm $(sinfo -V) on node $(hostname): exit the shell to stop the cluster"
    exec bash -i
fi
[ "$#" -gt 0 ] || set -- tests/slurm
# not exec'd: this shell is the namespace's PID 1 and must reap the daemons that slurm-up.sh
# started (they are reparented to it); a PID 1 that does not (pytest) leaves each stopped
# daemon a zombie, which kill -0 and the tests then take for a daemon still running
uv run pytest --slow -p no:cacheprovider "$@"
exit $?
