#!/usr/bin/env bash
# .ci/slurm-up.sh: start a real single-node Slurm cluster for the tests in tests/slurm/,
# with this repository's slurm/epilog-slurmctld installed as EpilogSlurmctld (and as
# PrologSlurmctld, which records the GPUs each job gets).
#
# Debian 12 packages (Slurm 22.05), all daemons on loopback, no systemd needed:
# munged, mariadbd, slurmdbd, slurmctld and slurmd are started by hand and write PID files
# to /run. Safe to run again: it installs only what is missing, rewrites a config only when
# it changed (restarting the daemons that read it) and starts only what is not running.
# Exit 0 when the node is idle and sacct answers. Must run as root.
#
# The hook gets its spool from ATTRIBUTION_SPOOL. slurmctld passes its own environment to
# EpilogSlurmctld only partly (the script sees the SLURM_* job variables, not slurmctld's
# environment), so the hook is started through a two-line wrapper that sets the variable.
#
# Settings (environment):
#   ATTRIBUTION_CI_SPOOL   spool the hook writes to      (default /var/tmp/attribution-ci/spool)
#   SLURM_CLUSTER_NAME     cluster name                   (default testcluster)
#   SLURM_TEST_USER        unprivileged user with an association (default slurmtest)
#   SLURM_TEST_USER2       a second one, for jobs of two users sharing the node (default slurmtest2)
#   SLURM_CPUS             CPUs the node offers (default 8; more than the machine has is
#                          fine: the test jobs mostly sleep)
#   SLURM_FAKE_GPUS        gres/gpu devices the node offers (default 2): character devices with
#                          NVIDIA's major number 195, so jobs get real GRES=gpu:N(IDX:...) records
#   SLURM_FIRST_JOB_ID     FirstJobId (default 1): .ci/slurm-root.sh gives each root cluster
#                          its own range, since all of them share the machine's kernel log
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=${ATTRIBUTION_CI_SPOOL:-/var/tmp/attribution-ci/spool}
CLUSTER=${SLURM_CLUSTER_NAME:-testcluster}
TEST_USER=${SLURM_TEST_USER:-slurmtest}
TEST_USER2=${SLURM_TEST_USER2:-slurmtest2}
CPUS=${SLURM_CPUS:-8}
NGPU=${SLURM_FAKE_GPUS:-2}
FIRST_JOB_ID=${SLURM_FIRST_JOB_ID:-1}
LIBEXEC=/usr/local/libexec/attribution-ci
DBPASS=attribution-ci-db   # a loopback-only throwaway database
START=$SECONDS

say() { printf '[slurm-up %3ds] %s\n' "$((SECONDS - START))" "$*"; }
die() {
    say "ERROR: $*"
    for f in /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/slurm/slurmdbd.log; do
        [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
    exit 1
}
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
retry_until() { # retry_until SECONDS WHAT COMMAND...
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || die "gave up after ${limit}s waiting for $what"
        sleep 0.5
    done
}
stop_pidfile() {
    local pid
    running "$1" || return 0
    pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
}
# install_if_changed DEST MODE OWNER:GROUP < content; returns 0 when the file changed
install_if_changed() {
    local tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    install -D -m "$2" -o "${3%:*}" -g "${3#*:}" "$tmp" "$1"
    rm -f "$tmp"
}

[ "$(id -u)" = 0 ] || die "run me as root"

# ------------------------------------------------------------------ packages
pkgs=(slurm-wlm slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Without systemd the postinst scripts cannot start the daemons; that is expected.
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
HOST=$(hostname -s) # slurmctld only starts when SlurmctldHost is this name

# ------------------------------------------------------------------ directories and users
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown slurm:slurm /var/spool/slurmctld /var/log/slurm
chown munge:munge /run/munge
# MariaDB's data and socket directories from its own configuration: Debian 12 and 13 use
# /var/lib/mysql and /run/mysqld, sid /var/lib/mariadb and /run/mariadbd
mysqld_option() { my_print_defaults --mysqld 2>/dev/null | sed -n "s/^--$1=//p" | tail -n 1; }
DATADIR=$(mysqld_option datadir)
DATADIR=${DATADIR:-/var/lib/mysql}
SOCKET=$(mysqld_option socket)
SOCKDIR=$(dirname "${SOCKET:-/run/mysqld/mysqld.sock}")
mkdir -p "$SOCKDIR"
chown mysql:root "$SOCKDIR"
# a client library built for /run/mysqld (.ci/slurm-root.sh may bring bookworm's) finds the socket
[ "$SOCKDIR" = /run/mysqld ] || [ -e /run/mysqld ] || ln -s "$SOCKDIR" /run/mysqld
for u in "$TEST_USER" "$TEST_USER2"; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; done

# ------------------------------------------------------------------ the hook and its spool
install -d -m 0770 -o root -g slurm "$SPOOL"
for d in tmp new work done failed retry alloc; do install -d -m 0770 -o root -g slurm "$SPOOL/$d"; done
install -D -m 0755 "$REPO/slurm/epilog-slurmctld" "$LIBEXEC/epilog-slurmctld"
install_if_changed "$LIBEXEC/epilog-wrapper" 0755 root:root <<EOW || true
#!/bin/sh
ATTRIBUTION_SPOOL='$SPOOL' exec $LIBEXEC/epilog-slurmctld "\$@"
EOW

# ------------------------------------------------------------------ munge
[ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key missing (the munge package creates it)"
running /run/munge/munged.pid || { say "starting munged"; runuser -u munge -- /usr/sbin/munged; }
retry_until 15 "munge" bash -c 'munge -n | unmunge'

# ------------------------------------------------------------------ MariaDB
if ! mariadb-admin ping >/dev/null 2>&1; then
    say "starting mariadbd"
    [ -d "$DATADIR/mysql" ] || mariadb-install-db --user=mysql >/dev/null
    setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 \
        --pid-file="$SOCKDIR/mysqld.pid" --innodb-buffer-pool-size=64M --loose-innodb-snapshot-isolation=OFF \
        </dev/null >>/var/log/slurm/mariadbd.log 2>&1 &
fi
retry_until 60 "mariadb" mariadb-admin ping
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

# ------------------------------------------------------------------ configuration
dbd_changed=0
install_if_changed /etc/slurm/slurmdbd.conf 0600 slurm:slurm <<EOC && dbd_changed=1
# written by attribution's .ci/slurm-up.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DBPASS
EOC

ctld_changed=0
if [ -d /sys/fs/cgroup/memory ] && [ -d /sys/fs/cgroup/freezer ]; then
    # cgroup v1 (22.05's cgroup/v2 needs systemd): real OUT_OF_MEMORY job states
    cgroup_lines=$'ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup'
    install_if_changed /etc/slurm/cgroup.conf 0644 root:root <<EOC && ctld_changed=1
CgroupPlugin=autodetect
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
EOC
else
    # no usable cgroups: memory is enforced by polling, and such jobs end FAILED 0:9
    cgroup_lines=$'ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherParams=OverMemoryKill'
fi
gres_lines="" gres_node=""
if [ "$NGPU" -gt 0 ]; then
    # fake GPUs: gres/gpu only needs character devices; 195 is NVIDIA's major number
    mkdir -p /var/lib/slurm/fakegpu
    for g in $(seq 0 $((NGPU - 1))); do
        [ -c /var/lib/slurm/fakegpu/nvidia$g ] || mknod /var/lib/slurm/fakegpu/nvidia$g c 195 "$g"
    done
    gres_node="Gres=gpu:$NGPU"
    gres_lines=$'GresTypes=gpu\nAccountingStorageTRES=gres/gpu'
    install_if_changed /etc/slurm/gres.conf 0644 root:root <<EOC && ctld_changed=1
NodeName=$HOST Name=gpu File=/var/lib/slurm/fakegpu/nvidia[0-$((NGPU - 1))]
EOC
fi
mem=$(awk '/MemTotal/ {m = int($2 / 2048); print (m > 8000 ? 8000 : m)}' /proc/meminfo)
install_if_changed /etc/slurm/slurm.conf 0644 root:root <<EOC && ctld_changed=1
# written by attribution's .ci/slurm-up.sh: one node, everything on loopback
ClusterName=$CLUSTER
FirstJobId=$FIRST_JOB_ID
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$cgroup_lines
$gres_lines
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
MinJobAge=600
KillWait=5
OverTimeLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobCompType=jobcomp/none
EpilogSlurmctld=$LIBEXEC/epilog-wrapper
PrologSlurmctld=$LIBEXEC/epilog-wrapper
PrologEpilogTimeout=30
# bursts of short jobs (tests/slurm/test_worker_live.py): the event-triggered scheduler of
# 22.05 soon leaves them to the backfill pass, every 30 s by default, ~1 job/s on 8 CPUs
SchedulerParameters=bf_interval=1
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem $gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOC

# ------------------------------------------------------------------ slurmdbd and accounts
if [ "$dbd_changed" = 1 ]; then stop_pidfile /run/slurmdbd.pid; fi
running /run/slurmdbd.pid || { say "starting slurmdbd"; setsid /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1; }
retry_until 60 "slurmdbd" sacctmgr -n list cluster
sacctmgr -n -P list cluster format=Cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
sacctmgr -n -P list account format=Account | grep -qx ci ||
    sacctmgr -i add account ci Cluster="$CLUSTER" Description=ci Organization=ci >/dev/null
for u in root "$TEST_USER" "$TEST_USER2"; do
    sacctmgr -n -P list user format=User | grep -qx "$u" || sacctmgr -i add user "$u" Account=ci >/dev/null
done

# ------------------------------------------------------------------ slurmctld and slurmd
if [ "$ctld_changed" = 1 ]; then
    stop_pidfile /run/slurmd.pid
    stop_pidfile /run/slurmctld.pid
fi
running /run/slurmctld.pid || { say "starting slurmctld"; setsid /usr/sbin/slurmctld </dev/null >/dev/null 2>&1; }
retry_until 60 "slurmctld" bash -c 'scontrol ping | grep -q UP'
running /run/slurmd.pid || { say "starting slurmd"; setsid /usr/sbin/slurmd </dev/null >/dev/null 2>&1; }

state() { sinfo -h -N -n "$HOST" -o %T 2>/dev/null | head -n 1; }
for _ in $(seq 90); do
    case $(state) in
        idle | mixed | allocated) break ;;
        down* | drain*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
case $(state) in idle | mixed | allocated) ;; *) die "node $HOST is $(state), not idle" ;; esac
retry_until 30 "sacct" sacct -a -X -n -S now-1minutes
say "cluster $CLUSTER ready: node $HOST $(state), $(sinfo -V), hook spool $SPOOL"
