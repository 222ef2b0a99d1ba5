"""A real Slurm for the tests in this directory (started by .ci/slurm-up.sh).

The tests skip, naming the reason, when no cluster is reachable; with
``ATTRIBUTION_REQUIRE_SLURM=1`` (set by .ci/run) they fail instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRE = os.environ.get("ATTRIBUTION_REQUIRE_SLURM") == "1"
SPOOL = Path(os.environ.get("ATTRIBUTION_CI_SPOOL", "/var/tmp/attribution-ci/spool"))
TEST_USER = os.environ.get("SLURM_TEST_USER", "slurmtest")


def sh(*argv: str, user: str | None = None, check: bool = True, timeout: float = 60) -> str:
    """Run a command (as ``user`` when given) and return its stdout."""
    if user:
        argv = ("runuser", "-u", user, "--", *argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def slurm_problem() -> str | None:
    if os.getuid() != 0:
        return "the Slurm tests run as root (they set nodes down and write AdminComments)"
    for tool in ("sbatch", "sacct", "scontrol", "sacctmgr", "squeue", "scancel"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        if "UP" not in sh("scontrol", "ping", check=False, timeout=15):
            return "slurmctld does not answer 'scontrol ping'"
        subprocess.run(
            ["sacct", "-n", "-X", "-S", "now-1minutes"], check=True, timeout=30, capture_output=True
        )
    except (subprocess.SubprocessError, AssertionError) as exc:
        return f"Slurm does not answer: {exc}"
    if not (SPOOL / "new").is_dir():
        return f"the hook's spool {SPOOL} does not exist (.ci/slurm-up.sh creates it)"
    conf = Path("/etc/slurm/slurm.conf")
    if not conf.is_file() or "attribution-ci" not in conf.read_text():
        return "this cluster was not started by .ci/slurm-up.sh (our hook is not installed)"
    return None


@dataclass
class Cluster:
    node: str
    spool: Path
    user: str


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    problem = slurm_problem()
    if problem:
        if REQUIRE:
            pytest.fail(f"ATTRIBUTION_REQUIRE_SLURM=1 but {problem}")
        pytest.skip(f"no usable Slurm cluster: {problem}")
    node = sh("hostname", "-s").strip()
    return Cluster(node=node, spool=SPOOL, user=TEST_USER)


def sbatch(*args: str, user: str | None = None) -> str:
    return sh("sbatch", "--parsable", *args, user=user).strip().split(";")[0]


def job_state(job: str) -> str:
    """The job's state: squeue while slurmctld holds it, else sacct."""
    out = sh("squeue", "-h", "-j", job, "-t", "all", "-o", "%T", check=False).strip()
    if out:
        return out.splitlines()[0]
    out = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "State", check=False).strip()
    return out.splitlines()[-1] if out else ""


def wait_state(job: str, pattern: str, timeout: float = 90) -> str:
    end = time.monotonic() + timeout
    state = ""
    while time.monotonic() < end:
        state = job_state(job)
        if re.fullmatch(pattern, state):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} never reached {pattern} (last state {state!r})")


def sattr(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``sattr`` as the operator would (this interpreter), failing on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "attribution", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"sattr {' '.join(args)} failed: {done.stderr}")
    return done


def fresh_start(spool: Path, base: Path, node: str) -> None:
    """Set aside spool entries of earlier runs (they would be processed with this test's
    config) into ``base``/stale, and wait for ``node`` to be free."""
    stale = base / "stale"
    stale.mkdir()
    for sub in ("new", "work"):
        for entry in (spool / sub).iterdir():
            entry.rename(stale / entry.name)
    wait_node_idle(node)


def wait_node_idle(node: str, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    state = ""
    while time.monotonic() < end:
        state = sh("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).strip()
        if state in ("idle", "mixed"):
            return
        if state.startswith(("down", "drain")):
            sh("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        time.sleep(1)
    raise AssertionError(f"node {node} is {state!r}, not idle")


_EXPORT = re.compile(r"^export (SLURM_\w+)='([^']*)'$", re.MULTILINE)


def _spooled_keys(runs: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """(job id or ``A_T``, restart count) -> the key the hook spooled that run under, for the
    entries of ``runs`` in the CI spool (any state)."""
    found: dict[tuple[str, int], str] = {}
    for sub in ("new", "work", "done", "failed"):
        for entry in (SPOOL / sub).iterdir():
            if entry.name.startswith(".") or entry.name.endswith(".error"):
                continue
            try:
                env = dict(_EXPORT.findall(entry.read_text(errors="replace")))
            except OSError:
                continue
            task = env.get("SLURM_ARRAY_TASK_ID")
            shown = f"{env.get('SLURM_ARRAY_JOB_ID')}_{task}" if task else env.get("SLURM_JOB_ID")
            restart = env.get("SLURM_JOB_RESTART_COUNT", "0")
            if shown and restart.isdecimal() and (shown, int(restart)) in runs:
                found[(shown, int(restart))] = entry.name
    return found


def requeue_and_wait(job: str, timeout: float = 90) -> list[str]:
    """Requeue an ended job, start it at once and wait for its second run to fail; the
    States of both runs (``sacct -D``)."""
    sh("scontrol", "requeue", job)  # a finished job runs again
    sh("scontrol", "update", f"jobid={job}", "StartTime=now")  # no 2 minutes' delay
    end = time.monotonic() + timeout
    runs: list[str] = []
    while time.monotonic() < end:
        runs = sh("sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State").split()
        if len(runs) == 2 and runs[1] == "FAILED":
            return runs
        time.sleep(0.5)
    raise AssertionError(f"job {job} did not run again: {runs}")


@functools.cache
def slurm_version() -> tuple[int, int]:
    """The cluster's Slurm (major, minor), from ``sinfo -V`` (``slurm 22.05.8``, ``slurm-wlm
    26.05.5``)."""
    m = re.search(r"(\d+)\.(\d+)", sh("sinfo", "-V"))
    assert m, "sinfo -V printed no version"
    return int(m.group(1)), int(m.group(2))


@functools.cache
def has_sluids() -> bool:
    """Whether the hook keys its spool entries by SLUID: EpilogSlurmctld gets
    ``SLURM_JOB_SLUID`` from 25.11 on (24.11's sacct lists SLUIDs, but its hook sees none)."""
    return slurm_version() >= (25, 11)


def run_keys(provisional: Sequence[str]) -> list[str]:
    """The spool and store keys of job runs named ``<cluster>_<job>[_<task>]_<restart>``:
    those names themselves on a Slurm without SLUIDs (22.05, 24.11), else the key the hook
    gave each run (its entry in the spool), else the run's SLUID from ``scontrol show job``
    while slurmctld holds the job, else from sacct (as reconciliation keys a run the hook could
    not spool). A run with none of these while accounting is down keeps its name. The jobs
    must have started."""
    if not has_sluids():
        return list(provisional)
    wanted: dict[str, tuple[str, int]] = {}
    for key in provisional:
        _, *ids, restart = key.split("_")
        wanted[key] = ("_".join(ids), int(restart))
    found: dict[tuple[str, int], str] = _spooled_keys(set(wanted.values()))
    for line in sh("scontrol", "show", "job", "-o", check=False).splitlines():
        f = dict(re.findall(r"(\w+)=(\S*)", line))
        if f.get("SLUID") and f.get("Restarts", "").isdecimal():
            task = f.get("ArrayTaskId", "")
            shown = f"{f['ArrayJobId']}_{task}" if task.isdecimal() else f.get("JobId", "")
            found.setdefault((shown, int(f["Restarts"])), f["SLUID"])  # the spool's first
    missing = sorted({ids for ids in wanted.values() if ids not in found})
    probe = ["sacct", "-n", "-X", "-S", "now-1minutes"]
    if missing and subprocess.run(probe, capture_output=True, timeout=30).returncode != 0:
        # slurmdbd is down: runs without a SLUID in slurmctld were spooled under their name
        return [found.get(ids, key) for key, ids in wanted.items()]
    for i in range(0, len(missing), 200):
        chunk = ",".join(dict.fromkeys(job for job, _ in missing[i : i + 200]))
        rows = sh("sacct", "-a", "-n", "-X", "-D", "-P", "-j", chunk, "-o", "JobID,Restarts,SLUID")
        for row in rows.splitlines():
            job, restarts, sluid = row.split("|")
            if restarts.isdecimal() and sluid:
                found.setdefault((job, int(restarts)), sluid)
    lost = [key for key, ids in wanted.items() if ids not in found]
    assert not lost, f"no SLUID found for {lost[:5]}"
    return [found[wanted[key]] for key in provisional]
