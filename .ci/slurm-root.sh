#!/usr/bin/env bash
# .ci/slurm-root.sh: the live tests (tests/slurm) on another Slurm release, inside a Debian
# root file system made with debootstrap. No container engine is needed: the root is entered
# with chroot, in its own mount, network, UTS, IPC and PID namespaces (unshare), so its
# munged, mariadbd, slurmdbd, slurmctld and slurmd listen on a loopback of their own (no port
# clash with the host's Slurm) and all of them end when the run ends.
#
# Inside the root the host recipe runs unchanged: .ci/journal-up.sh, then .ci/slurm-up.sh
# (with this repository's hook as EpilogSlurmctld), then the tests with the root's own Python.
# The root's journald (its node name is the root's) records kernel lines from its start on
# only, as a node's journald that has run all along: it is told the kernel ring buffer's next
# sequence number first (else it reads the whole buffer again and stamps the host's old lines,
# OOM kills of other clusters' jobs among them, with its own start time).
#
#   .ci/slurm-root.sh build RELEASE        build the root, or reuse the cached one
#   .ci/slurm-root.sh test RELEASE [ARGS]  build, start the cluster, run pytest --slow
#                                          tests/slurm (or ARGS, given to pytest instead:
#                                          e.g. tests/slurm/test_versions_live.py -x)
#   .ci/slurm-root.sh shell RELEASE        a shell in the root next to its running cluster
#                                          (the tests: uv run pytest --slow tests/slurm)
#
# A run takes about 1.5 minutes to build a root (once), then 8 to 10 for tests/slurm. Each run
# starts from an empty cluster; the previous run's Slurm logs stay in the root until the next
# one, under $ATTRIBUTION_CI_CACHE/roots/RELEASE/var/log/slurm. Needs root, debootstrap (it
# is installed when missing), unshare and ip (util-linux, iproute2). To stop a run, kill its
# unshare process with SIGKILL: every process of the root ends with it.
#
# RELEASE is a Debian suite: trixie (Slurm 24.11) or sid (Slurm 26.05 at the time of
# writing); the Slurm version is whatever the suite carries (sinfo -V is printed).
# Every failure prints one line "[slurm-root RELEASE (Slurm X)] FAILED at STEP: reason".
#
# Settings (environment):
#   ATTRIBUTION_CI_CACHE   where roots are kept between runs (default /var/cache/attribution-ci);
#                          a root is rebuilt when the recipe below changes
#   DEBIAN_MIRROR          default http://deb.debian.org/debian
# Must run as root.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
ACTION=${1:-}
RELEASE=${2:-}
[ "$#" -ge 2 ] && shift 2
CACHE=${ATTRIBUTION_CI_CACHE:-/var/cache/attribution-ci}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOT=$CACHE/roots/$RELEASE
SRC=/src # where the repository appears inside the root
VENV=/opt/attribution-venv
START=$SECONDS
STEP="start"
SLURM_VERSION="Slurm ?"

# Packages of the root: the host recipe's (slurm-up.sh, journal-up.sh) and the tests'.
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client slurmdbd munge mariadb-server
    systemd python3 procps hostname ca-certificates)
# Changing this line (or the package list) rebuilds every cached root.
# slurmdbd 24.11.5 (trixie) and 26.05.5 (sid) cannot start against the libmariadb3 1:11.8.9
# both suites ship: every query with a result fails with client error 5027 ("Number of columns
# in result (=1) set exceeds maximum allowed number of columns (=0)"), the first being
# `select @var := concat('')`. The roots keep their release's MariaDB server and Slurm and take
# only the client library (Connector/C 3.3) from bookworm, in /usr/local/lib, where the
# dynamic linker looks first. Empty LIBMARIADB_FROM to try the release's own library.
LIBMARIADB_FROM=${LIBMARIADB_FROM-bookworm}
RECIPE="recipe 2: debootstrap --variant=minbase, ${PACKAGES[*]}, libmariadb3 from ${LIBMARIADB_FROM:-the release}"

say() { printf '[slurm-root %s %3ds] %s\n' "$RELEASE" "$((SECONDS - START))" "$*"; }
fail() {
    printf '[slurm-root %s (%s)] FAILED at %s: %s\n' "$RELEASE" "$SLURM_VERSION" "$STEP" "$*" >&2
    exit 1
}
on_error() { fail "command exited $1 (line $2 of .ci/slurm-root.sh; output above)"; }
trap 'on_error $? $LINENO' ERR

case $ACTION in build | test | shell) ;; *)
    echo "usage: $0 build|test|shell RELEASE [pytest args]" >&2
    exit 2
    ;;
esac
case $RELEASE in
    "" | */* | .*) echo "usage: $0 $ACTION RELEASE (a Debian suite such as trixie or sid)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || fail "run me as root"

# one run per root at a time: a run starts from wiped state, which would pull the files from
# under another run's daemons
mkdir -p "$CACHE/roots"
exec 9>"$CACHE/roots/$RELEASE.lock"
if ! flock -n 9; then
    say "waiting for another run of this root to end"
    flock -w 3600 9 || fail "another run held $CACHE/roots/$RELEASE.lock for an hour"
fi

# ------------------------------------------------------------------ build (cached)
build_root() {
    local stamp="$ROOT/.attribution-ci-recipe" tmp="$ROOT.building"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$RECIPE" ]; then
        say "reusing $ROOT"
        return 0
    fi
    STEP="debootstrap"
    command -v debootstrap >/dev/null 2>&1 || {
        say "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
            >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get \
            install -y -qq --no-install-recommends debootstrap >/dev/null; }
    }
    rm -rf "$tmp"
    mkdir -p "$CACHE/roots"
    say "debootstrap $RELEASE from $MIRROR"
    debootstrap --variant=minbase "$RELEASE" "$tmp" "$MIRROR" >"$CACHE/roots/$RELEASE.debootstrap.log" 2>&1 ||
        fail "debootstrap exited $? (log: $CACHE/roots/$RELEASE.debootstrap.log)"
    STEP="apt-get install"
    say "installing ${PACKAGES[*]}"
    cp /etc/resolv.conf "$tmp/etc/resolv.conf"
    printf '127.0.0.1\tlocalhost ci-%s\n::1\tlocalhost\n' "$RELEASE" >"$tmp/etc/hosts"
    # daemons must not start while packages install (the root has no init); slurm-up.sh starts them
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 0755 "$tmp/usr/sbin/policy-rc.d"
    # sid's Release file is valid for a week only; a mirror (or a snapshot) a little behind
    # must not stop the build
    echo 'Acquire::Check-Valid-Until "false";' >"$tmp/etc/apt/apt.conf.d/99attribution-ci"
    unshare --mount --fork -- bash -c '
        set -e
        mount -t proc proc "$1/proc"
        mount --rbind /dev "$1/dev"
        chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -qq &&
            apt-get install -y -qq --no-install-recommends $2 && apt-get clean"
    ' _ "$tmp" "${PACKAGES[*]}" >"$CACHE/roots/$RELEASE.apt.log" 2>&1 ||
        fail "apt-get install exited $? (log: $CACHE/roots/$RELEASE.apt.log)"
    if [ -n "$LIBMARIADB_FROM" ]; then
        STEP="libmariadb3 from $LIBMARIADB_FROM"
        say "libmariadb3 (the MariaDB client library) from $LIBMARIADB_FROM"
        echo "deb $MIRROR $LIBMARIADB_FROM main" >"$tmp/etc/apt/sources.list.d/libmariadb.list"
        unshare --mount --fork -- bash -c '
            set -e
            mount -t proc proc "$1/proc"
            chroot "$1" sh -c "mkdir -p /tmp/libmariadb && cd /tmp/libmariadb &&
                apt-get update -qq && apt-get download -qq libmariadb3/$2 &&
                dpkg-deb -x libmariadb3_*.deb x &&
                cp x/usr/lib/*/libmariadb.so.3 /usr/local/lib/ && ldconfig"
        ' _ "$tmp" "$LIBMARIADB_FROM" >>"$CACHE/roots/$RELEASE.apt.log" 2>&1 ||
            fail "exited $? (log: $CACHE/roots/$RELEASE.apt.log)"
        rm -rf "$tmp/tmp/libmariadb" "$tmp/etc/apt/sources.list.d/libmariadb.list"
        chroot "$tmp" apt-get update -qq >/dev/null 2>&1 || true
    fi
    [ -s "$tmp/etc/machine-id" ] || chroot "$tmp" systemd-machine-id-setup >/dev/null 2>&1 || true
    echo "$RECIPE" >"$tmp/.attribution-ci-recipe"
    rm -rf "$ROOT"
    mv "$tmp" "$ROOT"
    say "built $ROOT ($(du -sh "$ROOT" | cut -f1))"
}

# ------------------------------------------------------------------ Python environment
# The root's own Python, the project's locked dependencies: installed from the host side
# (the test run itself has no network), into a venv kept in the root between runs.
sync_venv() {
    STEP="uv sync"
    local uvbin
    uvbin=$(python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null || command -v uv) ||
        fail "uv not found on the host (.ci/run installs it)"
    install -m 0755 "$(readlink -f "$uvbin")" "$ROOT/usr/local/bin/uv"
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
    # the host's CA bundle (a site's TLS proxy may sign PyPI's certificate)
    local ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
    [ -f "$ca" ] && cp "$ca" "$ROOT/etc/ssl/certs/host-ca-certificates.crt"
    unshare --mount --fork -- bash -c '
        set -e
        mount -t proc proc "$1/proc"
        mount --rbind /dev "$1/dev"
        mkdir -p "$1$2"
        mount --bind "$3" "$1$2"
        chroot "$1" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
            UV_PROJECT_ENVIRONMENT="$4" UV_PYTHON=/usr/bin/python3 UV_PYTHON_DOWNLOADS=never \
            SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt UV_LINK_MODE=copy sh -c "cd $2 && uv sync --frozen --quiet"
    ' _ "$ROOT" "$SRC" "$REPO" "$VENV" || { rc=$?; fail "uv sync --frozen with the root's $(chroot "$ROOT" python3 -V 2>&1) exited $rc"; }
}

# ------------------------------------------------------------------ enter and run
# Runs as the namespaces' first process: mounts, hostname, loopback, then the root.
enter() {
    local inner=$1
    shift
    unshare --mount --uts --ipc --net --pid --fork --kill-child -- bash -c '
        set -e
        root=$1 src=$2 repo=$3 release=$4
        shift 4
        mount --make-rprivate /
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --rbind /dev "$root/dev"
        mount -t tmpfs -o mode=0755 tmpfs "$root/run"
        mkdir -p "$root$src"
        mount --bind "$repo" "$root$src"
        hostname "ci-$release"
        ip link set lo up
        # a non-loopback address: getaddrinfo(AI_ADDRCONFIG), which slurmdbd 24.11+ uses to
        # listen, returns nothing on a host with loopback only
        ip link add ci0 type veth peer name ci1
        ip addr add 10.251.0.1/24 dev ci0
        ip link set ci0 up
        ip link set ci1 up
        exec chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" "$@"
    ' _ "$ROOT" "$SRC" "$REPO" "$RELEASE" "$inner" "$@"
}


build_root
[ "$ACTION" = build ] && exit 0
SLURM_VERSION=$(chroot "$ROOT" dpkg-query -W -f='Slurm ${Version}' slurmctld 2>/dev/null || echo "Slurm ?")
sync_venv
STEP="tests"
say "$SLURM_VERSION, $(chroot "$ROOT" python3 -V): starting the cluster and the tests"
# job ids of their own: the roots and the host share one kernel log, whose OOM-kill lines
# name jobs by id (job_42 of one cluster must not read as job_42 of another)
first_job_id=$(( ($(printf '%s' "$RELEASE" | cksum | cut -d' ' -f1) % 90 + 10) * 100000 ))
rm -f "$ROOT/.attribution-ci-step"
rc=0
enter env SLURM_FIRST_JOB_ID="$first_job_id" bash "$SRC/.ci/slurm-root-inside.sh" "$ACTION" "$@" ||
    rc=$?
STEP=$(cat "$ROOT/.attribution-ci-step" 2>/dev/null || echo "entering the root (unshare, mounts, chroot)")
case $rc:$STEP:$ACTION in
    0:*:shell) say "shell ended" ;;
    0:*) say "passed" ;;
    *:tests:shell) say "shell ended (exit $rc)" ;;
    *:tests:*) fail "pytest exited $rc" ;;
    *) fail "exited $rc (see the output above)" ;;
esac
