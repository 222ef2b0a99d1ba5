"""The worker on a real Slurm 22.05 under load and trouble (issue 12), one scenario after the
other with one worker as a site runs it (``sattr worker``, the pool, reconciliation on):

1. a burst of 500 failing jobs (an array of 250 tasks and 250 single jobs): every verdict
   within 90 s of the settle delay after its job ended;
2. the spool mounted read-only while 50 jobs end (the hook cannot spool them): once the spool
   is writable again, the reconciliation sweep finds all 50 in accounting, each gets exactly
   one verdict;
3. 20 ``kill -9`` of the worker during a drain of 150 jobs: exactly one verdict per job,
   nothing left in the spool;
4. slurmctld stopped: jobs that ended before get their verdicts from accounting, array tasks
   whose records slurmctld had not sent yet wait (not failed) until it is back;
5. slurmdbd stopped: a job still gets its verdict (from slurmctld's record), its AdminComment
   write fails, and it is written once slurmdbd is back;

and ``sattr status --json`` reports each. Together about five minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import Cluster, fresh_start, run_keys, sh

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SETTLE = 5.0
FINAL = {"COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "NODE_FAIL"}


class Site:
    """One worker with its own store over the CI spool, as a site runs it."""

    def __init__(self, cluster: Cluster) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.base = Path(f"/var/tmp/attribution-ci/worker-{stamp}-{os.getpid()}")
        self.jobs = self.base / "jobs"
        self.jobs.mkdir(parents=True)
        self.base.chmod(0o755)
        self.jobs.chmod(0o1777)
        kern = self.base / "hosts" / cluster.node / "kern.log"
        kern.parent.mkdir(parents=True)
        kern.write_text("")
        self.cluster = cluster
        self.store = self.base / "verdicts.sqlite"
        self.config = self.base / "config.yaml"
        self.log = self.base / "worker.log"
        settings: dict[str, Any] = {
            "spool": str(cluster.spool),
            "store": str(self.store),
            "settle_delay": SETTLE,
            "poll_interval": 1,
            "window": {"before": 1, "after": 1},
            "retries": {"max_attempts": 10, "backoff": 2, "backoff_max": 10},
            "logs": {"kernel": [str(self.base / "hosts" / "{node}" / "kern.log")]},
            "admin_comment": {"enabled": True},
            "reconcile": {"interval": 5, "grace": 2, "first_lookback": 5},
            "health": {"max_queue_age": 300, "max_heartbeat_age": 60},
        }
        self.config.write_text(json.dumps(settings, indent=2))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "attribution", "worker", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def submit(self, n: int, *, array: int = 0, tag: str = "j") -> list[str]:
        """Submit ``array`` array tasks and ``n - array`` single failing jobs; their names as
        ``<cluster>_<job>[_<task>]_0`` (``run_keys`` gives the keys once they started)."""
        keys = []
        user = self.cluster.user
        if array:
            job = sh(
                "sbatch", "--parsable", "-D", str(self.jobs), "-o", str(self.jobs / "a-%A_%a.out"),
                f"--array=0-{array - 1}", "-J", tag, "--wrap", "echo start; exit 3", user=user,
            ).strip().split(";")[0]  # fmt: skip
            keys += [f"testcluster_{job}_{t}_0" for t in range(array)]
        for _ in range(n - array):
            job = sh(
                "sbatch", "--parsable", "-D", str(self.jobs), "-o", str(self.jobs / "s-%j.out"),
                "-J", tag, "--wrap", "echo start; exit 1", user=user,
            ).strip().split(";")[0]  # fmt: skip
            keys.append(f"testcluster_{job}_0")
        return keys

    def wait_ended(self, tag: str, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not sh("squeue", "-h", "-n", tag, "-t", "PD,R,CG", "-o", "%i", check=False).strip():
                return
            time.sleep(1)
        raise AssertionError(f"jobs {tag} still queued or running after {timeout:.0f} s")

    def verdicts(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        if not self.store.exists():
            return {}
        db = sqlite3.connect(self.store)
        db.row_factory = sqlite3.Row
        rows: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" for _ in chunk)
            for row in db.execute(f"SELECT * FROM verdicts WHERE key IN ({marks})", chunk):
                assert row["key"] not in rows
                rows[row["key"]] = dict(row)
        db.close()
        return rows

    def wait_verdicts(self, keys: list[str], timeout: float) -> dict[str, dict[str, Any]]:
        end = time.monotonic() + timeout
        while True:
            rows = self.verdicts(keys)
            if len(rows) == len(keys) or time.monotonic() > end:
                return rows
            time.sleep(1)

    def status(self) -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "attribution", "status", "--json", "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    def saved_lines(self, key: str) -> int:
        return sum(1 for line in self.log.read_text().splitlines() if f"saved {key}:" in line)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` mounted read-only over itself (for everyone, root included) until the end."""
    sh("mount", "--bind", str(path), str(path))
    try:
        sh("mount", "-o", "remount,bind,ro", str(path))
        yield
    finally:
        sh("umount", "-l", str(path), check=False)


def slurmdbd_stop() -> None:
    pid = int(Path("/run/slurmdbd.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    for _ in range(120):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    raise AssertionError("slurmdbd did not stop")


def slurmdbd_start() -> None:
    subprocess.run(["setsid", "/usr/sbin/slurmdbd"], check=True, timeout=60)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if (
            subprocess.run(
                ["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True
            ).returncode
            == 0
        ):
            return
        time.sleep(1)
    raise AssertionError("slurmdbd did not come back")


@pytest.fixture(scope="module")
def site(cluster: Cluster) -> Iterator[Site]:
    s = Site(cluster)
    fresh_start(cluster.spool, s.base, cluster.node)
    # earlier runs' failures are theirs: sattr status must judge this run's
    aside = s.base / "stale-failed"
    aside.mkdir()
    for entry in (cluster.spool / "failed").iterdir():
        entry.rename(aside / entry.name)
    s.start()
    try:
        yield s
    finally:
        s.stop()
        if (
            not Path("/run/slurmdbd.pid").exists()
            or subprocess.run(
                ["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True
            ).returncode
        ):
            with contextlib.suppress(Exception):
                slurmdbd_start()


def test_a_burst_of_500_jobs_gets_every_verdict_within_90_s_of_the_settle_delay(
    site: Site,
) -> None:
    keys = site.submit(500, array=250, tag="burst")
    site.wait_ended("burst")
    keys = run_keys(keys)
    rows = site.wait_verdicts(keys, timeout=SETTLE + 180)
    assert len(rows) == 500, f"{500 - len(rows)} verdict(s) missing"
    late = []
    lags = []
    for key, row in rows.items():
        ended = datetime.fromisoformat(row["end"]).timestamp()
        lag = datetime.fromisoformat(row["diagnosed_at"]).timestamp() - ended
        lags.append(lag)
        if lag > SETTLE + 90:
            late.append((key, round(lag, 1)))
    lags.sort()
    print(
        f"500-job burst: time from job end to verdict p50 {lags[250]:.1f} s, "
        f"p95 {lags[475]:.1f} s, max {lags[-1]:.1f} s (settle delay {SETTLE:.0f} s)"
    )
    assert not late, f"{len(late)} verdict(s) later than settle + 90 s: {late[:5]}"
    assert all(site.saved_lines(k) == 1 for k in keys[:50])
    _, status = site.status()
    assert status["worker"]["running"] is True
    assert status["throughput"]["verdicts"] >= 500
    assert status["throughput"]["latency_max"] <= SETTLE + 90


def test_jobs_the_hook_could_not_spool_are_found_by_reconciliation(site: Site) -> None:
    spool = site.cluster.spool
    with read_only(spool):
        keys = site.submit(50, array=20, tag="rospool")
        site.wait_ended("rospool")
        keys = run_keys(keys)
        time.sleep(SETTLE + 4)  # the sweep runs meanwhile and cannot spool either
        assert not any((spool / "new" / k).exists() for k in keys)
        _, status = site.status()
        assert any(r["error"] for r in status["reconciliation"]["last"]), status["reconciliation"]
    rows = site.wait_verdicts(keys, timeout=120)
    assert len(rows) == 50, f"{50 - len(rows)} verdict(s) missing after the spool was fixed"
    assert all(site.saved_lines(k) == 1 for k in keys), "a job was diagnosed twice"
    _, status = site.status()
    assert sum(t["enqueued"] for t in status["reconciliation"]["totals"]) >= 50
    assert sum(t["errors"] for t in status["reconciliation"]["totals"]) >= 1


def test_twenty_kill_9_during_a_drain_give_exactly_one_verdict_per_job(site: Site) -> None:
    site.stop()
    keys = site.submit(150, array=75, tag="killed")
    site.wait_ended("killed")
    keys = run_keys(keys)
    time.sleep(SETTLE)
    spool = site.cluster.spool
    rng = random.Random(12)
    hits = 0

    def working() -> bool:
        return any((spool / "work" / k).exists() for k in keys)

    for _ in range(20):
        recovered = site.log.read_text().count("left in work/")
        left_over = working()
        site.start()
        end = time.monotonic() + 30
        # this worker's own claims: after it moved what the last one left back to new/
        while time.monotonic() < end and (
            (left_over and site.log.read_text().count("left in work/") == recovered)
            or not working()
        ):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.0))  # somewhere in the middle of a batch
        hits += working()
        site.stop(signal.SIGKILL)  # the worker only: its children finish their job and exit
    assert hits >= 10, f"only {hits} of 20 kills found entries being worked on"
    site.start()
    rows = site.wait_verdicts(keys, timeout=180)
    assert len(rows) == 150, f"{150 - len(rows)} verdict(s) missing"
    for sub in ("new", "work", "failed"):
        left = [k for k in keys if (spool / sub / k).exists()]
        assert not left, f"left in {sub}/: {left[:5]}"
    recovered = site.log.read_text().count("left in work/")
    print(f"20 kill -9: {hits} hit a batch in progress, {recovered} restart(s) recovered work/")
    assert recovered >= 10
    _, status = site.status()
    assert status["queue"]["failed"] == 0


def test_verdicts_keep_coming_while_slurmctld_is_down(site: Site) -> None:
    """slurmctld stopped after the jobs ended: accounting (slurmdbd) still has them, so the
    worker resolves and diagnoses them; scontrol is tried once, then left alone for a minute
    (before, every job waited for its own scontrol timeouts)."""
    site.stop()
    names = site.submit(20, array=10, tag="noctld")
    site.wait_ended("noctld")
    keys = run_keys(names)
    singles = [k for k, name in zip(keys, names, strict=True) if name.count("_") == 2]
    spool = site.cluster.spool
    end = time.monotonic() + 60
    while time.monotonic() < end and not all((spool / "new" / k).exists() for k in keys):
        time.sleep(0.5)
    pid = int(Path("/run/slurmctld.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    try:
        for _ in range(120):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        t0 = time.monotonic()
        site.start()
        rows = site.wait_verdicts(singles, timeout=120)
        took = time.monotonic() - t0
        assert len(rows) == 10, f"{10 - len(rows)} verdict(s) missing while slurmctld was down"
        print(f"slurmctld down: 10 single jobs' verdicts {took:.1f} s after the worker started")
    finally:
        repo = Path(__file__).resolve().parents[2]
        subprocess.run(["bash", str(repo / ".ci" / "slurm-up.sh")], check=True, timeout=300)
    # The array tasks' own records were still queued in slurmctld (22.05 sends them to
    # slurmdbd after the tasks end): they waited, were not failed, and come now.
    rows = site.wait_verdicts(keys, timeout=180)
    assert len(rows) == 20, f"{20 - len(rows)} verdict(s) missing after slurmctld came back"
    assert not any((spool / "failed" / k).exists() for k in keys)


def test_an_admin_comment_that_failed_while_slurmdbd_was_down_is_written_later(
    site: Site,
) -> None:
    slurmdbd_stop()
    try:
        (name,) = site.submit(1, tag="nodbd")
        site.wait_ended("nodbd")
        (key,) = run_keys([name])  # from slurmctld: accounting is down
        rows = site.wait_verdicts([key], timeout=120)
        assert key in rows, "no verdict while slurmdbd was down"
        assert rows[key]["admin_comment_status"].startswith("error:"), rows[key]
        _, status = site.status()
        assert status["admin_comment"]["failing"] >= 1
    finally:
        slurmdbd_start()
    job = name.split("_")[1]
    end = time.monotonic() + 180
    while time.monotonic() < end:
        row = site.verdicts([key])[key]
        if row["admin_comment_status"] == "written":
            break
        time.sleep(2)
    assert row["admin_comment_status"] == "written", row["admin_comment_status"]
    comment = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment").strip()
    assert comment.startswith("sattr1 "), comment
    code, status = site.status()
    assert status["admin_comment"]["failing"] == 0
    assert code == 0, status["problems"]
