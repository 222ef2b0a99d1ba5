"""``sattr status``: a real spool, a real verdict store and a real spool lock, read through the
command line; every health problem gives exit 1, a healthy worker exit 0, and what status
cannot tell exit 2 (a spool the caller may not read is tried for real, as user nobody)."""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from attribution.cli import main
from attribution.config import Config, load_config
from attribution.model import (
    Coverage,
    CoverageStatus,
    JobRecord,
    Stream,
    SubDomain,
    Verdict,
)
from attribution.spool import LOCK_NAME, RetryPolicy, Spool
from attribution.status import collect, duration, percentile, render_text
from attribution.store import Store
from attribution.timeutil import parse_iso
from tests.pipeline.conftest import bare_verdict

NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def _now() -> None:
    """``NOW`` is each test's start: the commands under test read the real clock, and a test
    run minutes after this module was collected (a long suite) must not see its stamps age."""
    global NOW
    NOW = datetime.now(UTC)


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


@dataclass
class Site:
    """A spool, a store and the config naming them (``health`` thresholds of the defaults:
    queue 15 min, heartbeat 5 min, reconciliation 30 min, no failed entry)."""

    root: Path
    spool: Spool
    store_path: Path
    config: Path

    def write_config(self, **extra: Any) -> None:
        data: dict[str, Any] = {
            "spool": str(self.spool.root),
            "store": str(self.store_path),
            "settle_delay": 60,
            "reconcile": {"clusters": ["alpha"]},
            **extra,
        }
        self.config.write_text(json.dumps(data))  # JSON is YAML

    def store(self) -> Store:
        return Store(self.store_path)

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(
            main, ["status", "--config", str(self.config), *args], catch_exceptions=False
        )

    def json(self) -> tuple[int, dict[str, Any]]:
        result = self.run("--json")
        return result.exit_code, json.loads(result.stdout)

    @contextlib.contextmanager
    def worker_lock(self) -> Iterator[None]:
        """Hold the spool lock as a running worker does."""
        fd = os.open(self.spool.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            yield
        finally:
            os.close(fd)


def verdict(
    job_id: str,
    *,
    end: datetime,
    diagnosed: datetime,
    nodes: tuple[str, ...] = ("gpu001",),
    coverage: tuple[Coverage, ...] = (),
) -> Verdict:
    job = JobRecord(
        job_id=job_id, cluster="alpha", nodes=nodes, start=end - timedelta(hours=1), end=end
    )
    return bare_verdict(  # type: ignore[no-any-return]
        job, sub_domain=SubDomain.APPLICATION, coverage=coverage, diagnosed_at=diagnosed
    )


def beat(store: Store, spool: Spool, *, at: datetime | None = None) -> None:
    store.beat(
        str(spool.root),
        pid=4242,
        host="head1",
        started_at=ago(hours=3),
        info={
            "processes": 8,
            "results": {"saved": 120, "dropped": 30, "retry": 3},
            "reconciled": 2,
            "comments_rewritten": 12,
            "children_lost": 0,
        },
    )
    if at is not None:  # the store stamps beats with the time now: move it back
        store.db.execute("UPDATE heartbeat SET beat_at = ?", [at.isoformat()])
        store.db.conn.commit()


def sweep(
    store: Store, *, ran_at: datetime, error: str | None = None, cluster: str = "alpha"
) -> None:
    store.record_reconciliation(
        cluster,
        ran_at=ran_at,
        since=ran_at - timedelta(minutes=5),
        until=ran_at - timedelta(minutes=2),
        seen=40,
        enqueued=["alpha_77_0"],
        error=error,
    )


@pytest.fixture
def site(tmp_path: Path) -> Site:
    spool = Spool(tmp_path / "spool")
    spool.create(mode=0o755)
    s = Site(tmp_path, spool, tmp_path / "verdicts.sqlite", tmp_path / "config.yaml")
    s.write_config()
    return s


@pytest.fixture
def healthy(site: Site) -> Site:
    """A worker that keeps up: fresh heartbeat and sweep, a verdict, nothing waiting."""
    with site.store() as store:
        beat(store, site.spool)
        sweep(store, ran_at=ago(minutes=3))
        store.save(
            verdict("1", end=ago(minutes=10), diagnosed=ago(minutes=9)),
            admin_comment_status="written",
            spooled_at=ago(minutes=10),
        )
    return site


def test_a_worker_that_keeps_up_is_healthy(healthy: Site) -> None:
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.splitlines()[-1] == "healthy"
    lines = text.splitlines()
    assert f"Config:         {healthy.config}" in lines
    assert "running (holds the spool lock)" in text
    assert "pid 4242 on head1" in text
    # the worker's counters in words (docs/cli.md says what each is)
    assert (
        "                processes: 8 diagnosing at once; 0 lost (killed or crashed) since start"
        in lines
    )
    assert "                since start: 120 saved, 30 dropped (completed 0:0), 3 retried" in lines
    assert (
        "                12 AdminComment(s) written on a later try, 2 job(s) found by reconciliation"
        in lines
    )
    assert "children_lost" not in text and "results:" not in text
    assert "AdminComment:   disabled" in lines  # nothing failing or pending: no counts
    assert "alpha: last sweep 3 min ago" in text and "40 seen, 1 enqueued" in text
    assert "1 found that never reached the spool" in text
    assert code == 0 and data["healthy"] is True and data["problems"] == []
    assert data["schema"] == "attribution.status/1"
    assert set(data) == {
        "schema", "now", "healthy", "problems", "config", "spool", "store", "store_state",
        "worker", "queue", "throughput", "admin_comment", "reconciliation", "evidence",
    }  # fmt: skip
    assert data["config"] == str(healthy.config)
    assert data["worker"]["running"] is True and data["worker"]["pid"] == 4242
    assert data["worker"]["info"]["results"] == {"saved": 120, "dropped": 30, "retry": 3}
    assert 0 <= data["worker"]["beat_age"] < 60
    assert data["throughput"]["verdicts"] == 1
    assert data["throughput"]["latency_p50"] == pytest.approx(60, abs=1)
    assert data["reconciliation"]["last"][0]["cluster"] == "alpha"
    assert data["reconciliation"]["totals"] == [
        {"cluster": "alpha", "sweeps": 1, "seen": 40, "enqueued": 1, "errors": 0}
    ]


def test_no_worker_holding_the_lock_is_a_problem(healthy: Site) -> None:
    with healthy.worker_lock():
        pass  # a worker ran and stopped: the lock file is there, nobody holds it
    result = healthy.run()
    assert result.exit_code == 1
    assert "not running (lock free)" in result.stdout
    assert "no worker holds the spool lock" in result.stdout
    # the lock file exists and was not held: status took it for a moment and let it go
    fd = os.open(healthy.spool.root / LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_status_never_creates_the_lock_file(site: Site) -> None:
    result = site.run()
    assert "not running (no lock file .worker.lock)" in result.stdout
    assert not (site.spool.root / LOCK_NAME).exists()


def test_a_stale_heartbeat_is_a_problem(healthy: Site) -> None:
    with healthy.store() as store:
        beat(store, healthy.spool, at=ago(minutes=12))
    with healthy.worker_lock():
        code, data = healthy.json()
    assert code == 1
    assert data["problems"] == [
        "the worker's last heartbeat was 12 min ago (health.max_heartbeat_age 5 min)"
    ]


def test_queue_ready_settling_and_retry_waits(healthy: Site) -> None:
    spool = Spool(healthy.spool.root, policy=RetryPolicy(backoff=600))
    old = spool.enqueue("alpha_10_0", "SLURM_JOB_ID=10\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # ready for 59 min
    spool.enqueue("alpha_11_0", "SLURM_JOB_ID=11\n")  # younger than settle_delay
    for job in ("12", "13"):  # tried and failed: waiting for the next try
        path = spool.enqueue(f"alpha_{job}_0", f"SLURM_JOB_ID={job}\n")
        os.utime(path, (time.time() - 300, time.time() - 300))
        claimed = spool.claim(f"alpha_{job}_0")
        assert claimed is not None
        spool.retry(claimed, f"job {job} is not in sacct yet")
    claimed = spool.claim("alpha_13_0")
    assert claimed is not None
    spool.retry(claimed, "job 13 is not in sacct yet")  # a second attempt
    (spool.dir("work") / "alpha_14_0").write_text("SLURM_JOB_ID=14\n")
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 1 == result.exit_code
    q = data["queue"]
    assert (q["ready"], q["settling"], q["retry_wait"], q["work"]) == (1, 1, 2, 1)
    assert q["oldest_ready_key"] == "alpha_10_0"
    assert q["oldest_ready_wait"] == pytest.approx(3540, abs=30)
    assert q["retrying"] == 2
    assert q["retry_reasons"] == [
        {"reason": "job 13 is not in sacct yet", "entries": 2, "key": "alpha_13_0", "attempts": 2}
    ]
    assert data["problems"] == [
        "the oldest ready spool entry (alpha_10_0) has waited 59 min (health.max_queue_age 15 min)"
    ]
    assert "new/: 1 ready (oldest waited 59 min: alpha_10_0), 1 settling, 2 waiting" in (
        result.stdout
    )
    assert "2 x job 13 is not in sacct yet (at most 2 attempt(s) so far)" in result.stdout


def test_failed_entries_are_counted_with_their_reasons(healthy: Site) -> None:
    spool = healthy.spool
    for job, why in (("20", "malformed entry: no SLURM_JOB_ID"), ("21", "malformed entry: x")):
        spool.enqueue(f"alpha_{job}_0", "junk\n")
        claimed = spool.claim(f"alpha_{job}_0")
        assert claimed is not None
        spool.retry(claimed, why, permanent=True)
    (spool.dir("failed") / "alpha_22_0").write_text("a hand-made entry without .error\n")
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 1
    assert data["queue"]["failed"] == 3
    reasons = {r["reason"]: r["entries"] for r in data["queue"]["failed_reasons"]}
    assert reasons == {
        "malformed entry: no SLURM_JOB_ID": 1,
        "malformed entry: x": 1,
        "no .error file beside it": 1,
    }
    assert data["problems"] == [
        "3 spool entries in failed/ (health.max_failed 0): read their .error files, then"
        " 'sattr enqueue --retry-failed'"
    ]
    assert "failed for good (failed/): 3" in result.stdout
    healthy.write_config(health={"max_failed": 3})
    with healthy.worker_lock():
        assert healthy.run().exit_code == 0


def test_reconciliation_old_failed_missing_or_disabled(healthy: Site) -> None:
    with healthy.store() as store:
        sweep(store, ran_at=ago(hours=2))
        store.db.execute("DELETE FROM reconciliations WHERE ran_at > ?", [ago(hours=1).isoformat()])
        store.db.conn.commit()
    with healthy.worker_lock():
        code, data = healthy.json()
    assert code == 1
    assert data["problems"] == [
        "reconciliation: the last sweep of cluster alpha was 2 h ago"
        " (health.max_reconcile_age 30 min)"
    ]
    with healthy.store() as store:  # failing now, and no success since the one 2 h ago
        sweep(store, ran_at=ago(minutes=1), error="sacct: slurmdbd not responding")
    with healthy.worker_lock():
        code, data = healthy.json()
    assert data["problems"] == [
        "reconciliation of cluster alpha: no successful sweep for 2 h"
        " (health.max_reconcile_age 30 min); latest error: sacct: slurmdbd not responding"
    ]
    healthy.write_config(reconcile={"clusters": ["alpha", "beta"]})
    with healthy.worker_lock():
        code, data = healthy.json()
    assert "reconciliation: no sweep of cluster beta was ever recorded" in data["problems"]
    healthy.write_config(reconcile={"enabled": False})
    with healthy.worker_lock():
        result = healthy.run()
    assert result.exit_code == 0, result.output
    assert "disabled (reconcile.enabled is false)" in result.stdout


def test_one_failed_sweep_is_no_problem_until_max_reconcile_age(healthy: Site) -> None:
    """A slurmdbd blip fails one sweep: shown, but a problem only once the cluster has gone
    without a successful sweep for longer than health.max_reconcile_age."""
    with healthy.store() as store:  # the fixture's sweep 3 min ago succeeded
        sweep(store, ran_at=ago(minutes=1), error="sacct: slurmdbd not responding")
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 0 == result.exit_code, result.output
    assert (
        "alpha: last sweep" in result.stdout
        and ": failed: sacct: slurmdbd not responding (last successful sweep 3 min ago)"
        in result.stdout
    )
    last = data["reconciliation"]["last"][0]
    assert last["error"] == "sacct: slurmdbd not responding"
    assert last["last_ok_age"] == pytest.approx(180, abs=30)
    assert last["failing_since"] == last["ran_at"]
    assert data["reconciliation"]["looked_back"] == 86400


def test_sweeps_failing_with_no_success_at_all(site: Site) -> None:
    with site.store() as store:
        beat(store, site.spool)  # a worker up for 3 h: not new
        sweep(store, ran_at=ago(minutes=5), error="sacct: connection refused")
    with site.worker_lock():
        code, data = site.json()
    assert code == 0, data["problems"]  # failing for 5 min only: no problem yet
    with site.store() as store:  # sweeps are recorded in the order they ran
        store.db.execute("DELETE FROM reconciliations")
        store.db.conn.commit()
        for minutes in (40, 20, 1):
            sweep(store, ran_at=ago(minutes=minutes), error="sacct: connection refused")
    with site.worker_lock():
        result = site.run()
        code, data = site.json()
    assert code == 1
    assert data["problems"] == [
        "reconciliation of cluster alpha: no successful sweep for at least 40 min"
        " (health.max_reconcile_age 30 min); latest error: sacct: connection refused"
    ]
    last = data["reconciliation"]["last"][0]
    assert last["last_ok_at"] is None and last["last_ok_age"] is None
    failing_since = parse_iso(last["failing_since"])
    assert failing_since is not None
    assert abs((failing_since - ago(minutes=40)).total_seconds()) < 1
    assert "(no successful sweep in the last 24 h)" in result.stdout


def test_max_reconcile_age_not_longer_than_the_interval_is_a_problem(healthy: Site) -> None:
    healthy.write_config(
        reconcile={"clusters": ["alpha"], "interval": "30m"}, health={"max_reconcile_age": "30m"}
    )
    with healthy.worker_lock():
        code, data = healthy.json()
    assert code == 1
    assert data["problems"] == [
        "health.max_reconcile_age (30 min) is not longer than reconcile.interval (30 min): the"
        " last sweep would be too old before every next one; set max_reconcile_age to at least"
        " twice the interval"
    ]
    healthy.write_config(
        reconcile={"clusters": ["alpha"], "interval": "30m"}, health={"max_reconcile_age": "1h"}
    )
    with healthy.worker_lock():
        assert healthy.json()[0] == 0
    healthy.write_config(  # without sweeps, their thresholds do not matter
        reconcile={"enabled": False, "interval": "30m"}, health={"max_reconcile_age": "5m"}
    )
    with healthy.worker_lock():
        assert healthy.json()[0] == 0


def test_admin_comment_writes_failing_too_long(healthy: Site) -> None:
    with healthy.store() as store:
        for job, minutes in (("5", 40), ("6", 20)):
            store.save(
                verdict(job, end=ago(minutes=minutes + 1), diagnosed=ago(minutes=minutes)),
                admin_comment_status=f"error: sacctmgr: job {job}: slurmdbd down",
                spooled_at=ago(minutes=minutes + 1),
            )
    with healthy.worker_lock():
        result = healthy.run()
        assert result.exit_code == 0  # write-back disabled: nothing will be written anyway
        assert (
            "AdminComment:   disabled; 2 write(s) failing (not written while disabled)"
            in result.stdout.splitlines()
        )
        healthy.write_config(admin_comment={"enabled": True})
        code, data = healthy.json()
    assert code == 1
    c = data["admin_comment"]
    assert (c["failing"], c["pending"], c["latest_error"]) == (
        2,
        0,
        "sacctmgr: job 6: slurmdbd down",
    )
    assert c["failing_age"] == pytest.approx(2400, abs=30)
    assert data["problems"] == [
        "2 AdminComment write(s) failing for 40 min (health.max_queue_age 15 min); latest:"
        " sacctmgr: job 6: slurmdbd down"
    ]
    with healthy.store() as store:  # a worker killed between saving and writing
        store.set_admin_comment("alpha_5_0", "written", "sattr1 ...")
        store.set_admin_comment("alpha_6_0", "pending", None)
    with healthy.worker_lock():
        code, data = healthy.json()
    assert data["admin_comment"]["pending"] == 1
    assert (
        len(data["problems"]) == 1
        and "1 AdminComment write(s) pending for 20 min" in (data["problems"][0])
    )


def test_throughput_counts_worker_verdicts_of_the_last_hour(site: Site) -> None:
    with site.store() as store:
        for i, lag in enumerate([30, 60, 80, 120, 600]):
            store.save(
                verdict(str(i), end=ago(minutes=30, seconds=lag), diagnosed=ago(minutes=30)),
                spooled_at=ago(minutes=31),
            )
        # older than an hour, and a rediagnosis (no spool time): not the worker's last hour
        store.save(verdict("8", end=ago(hours=3), diagnosed=ago(hours=2)), spooled_at=ago(hours=3))
        store.save(verdict("9", end=ago(days=3), diagnosed=ago(minutes=5)))
    config = load_config(site.config)
    status = collect(config, config_file=str(site.config), now=NOW)
    t = status.throughput
    assert t is not None
    assert (t.verdicts, t.latency_jobs, t.per_minute) == (5, 5, 0.08)
    assert (t.latency_p50, t.latency_p95, t.latency_max) == (80.0, 600.0, 600.0)
    assert "job end -> verdict: p50 80 s, p95 10 min, max 10 min (5 jobs)" in render_text(status)


def cov(stream: Stream, node: str | None, status: CoverageStatus, lines: int = 0) -> Coverage:
    return Coverage(stream=stream, node=node, status=status, lines=lines)


def test_evidence_health_names_silent_nodes_and_missing_logs(site: Site) -> None:
    nodes = tuple(f"gpu{i:03d}" for i in range(1, 11))
    ok, empty, missing = CoverageStatus.OK, CoverageStatus.EMPTY, CoverageStatus.MISSING
    with site.store() as store:
        # 26 h ago the kernel logs of gpu[001-010] had lines; since then none
        store.save(
            verdict(
                "100",
                end=ago(hours=26),
                diagnosed=ago(hours=26),
                nodes=nodes,
                coverage=tuple(cov(Stream.KERNEL, n, ok, 50) for n in nodes),
            )
        )
        for i in range(5):
            node = nodes[i * 2]
            coverage = [
                cov(Stream.KERNEL, node, empty),
                cov(Stream.SYSLOG, node, missing if i < 2 else ok, 0 if i < 2 else 9),
                cov(Stream.JOB_STDOUT, None, ok, 3),
            ]
            store.save(
                verdict(
                    str(200 + i),
                    end=ago(hours=2),
                    diagnosed=ago(hours=2),
                    nodes=(node, nodes[i * 2 + 1]),
                    coverage=(*coverage, cov(Stream.KERNEL, nodes[i * 2 + 1], empty)),
                )
            )
    status = collect(load_config(site.config), config_file=str(site.config), now=NOW)
    e = status.evidence
    assert e is not None
    by_stream = {s.stream: s for s in e.streams}
    assert (by_stream["kernel"].jobs, by_stream["kernel"].empty) == (5, 5)
    assert (by_stream["syslog"].jobs, by_stream["syslog"].missing) == (5, 2)
    assert by_stream["job_stdout"].lost == 0
    assert e.node_logs is not None and (e.node_logs.jobs, e.node_logs.lost) == (5, 2)
    kernel = [q for q in e.silent if q.stream == "kernel"]
    assert len(kernel) == 1 and kernel[0].nodes == "gpu[001-010]" and kernel[0].node_count == 10
    assert kernel[0].hours_min == kernel[0].hours_max == 26.0 and not kernel[0].never
    syslog = [q for q in e.silent if q.stream == "syslog"]
    assert len(syslog) == 1 and syslog[0].never and syslog[0].nodes == "gpu[001,003]"
    assert e.covered == 26 * 3600  # the oldest job in the store ended 26 h ago
    text = render_text(status)
    assert (
        "Evidence:       jobs that ended in the last 24 h, per source: the share of them where"
        " it was missing, unreadable, in error or empty"
    ) in text
    assert "..." not in text
    assert "no kernel lines from gpu[001-010] for 26 h, though they ran jobs" in text
    # silent only for as long as the store reaches back
    assert "no syslog lines from gpu[001,003] in the last 26 h, though they ran jobs" in text
    assert "node logs missing for 40% of last day's jobs (2 of 5)" in text
    assert "syslog         missing 40% (of 5 jobs)" in text
    # evidence health is information, not a problem
    assert not any("lines" in p or "evidence" in p for p in status.problems)
    with site.store() as store:  # a job that ended 8 days ago: the store covers the week
        store.save(verdict("50", end=ago(days=8), diagnosed=ago(days=8)))
    status = collect(load_config(site.config), config_file=str(site.config), now=NOW)
    assert status.evidence is not None and status.evidence.covered == 7 * 86400
    assert "no syslog lines from gpu[001,003] in the last 7 d, though" in render_text(status)


def test_a_young_store_names_no_silent_node(site: Site) -> None:
    """Two minutes of verdicts tell nothing about a node's kernel log falling silent."""
    with site.store() as store:
        store.save(
            verdict(
                "300",
                end=ago(minutes=2),
                diagnosed=ago(minutes=1),
                coverage=(cov(Stream.KERNEL, "gpu001", CoverageStatus.EMPTY),),
            )
        )
    status = collect(load_config(site.config), config_file=str(site.config), now=NOW)
    e = status.evidence
    assert e is not None and e.silent == [] and e.covered == pytest.approx(120, abs=1)
    text = render_text(status)
    assert "no kernel lines" not in text and "7 d" not in text
    assert (
        "nodes without kernel or syslog lines are named once the store covers 24 h (its oldest"
        " job ended 2 min ago)"
    ) in text
    data = status.to_dict()
    assert data["evidence"]["covered"] == pytest.approx(120, abs=1)
    assert data["evidence"]["silent"] == []


def test_a_fresh_install_without_store_or_spool(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"spool: {tmp_path / 'spool'}\nstore: {tmp_path / 'v.sqlite'}\n")
    result = CliRunner().invoke(main, ["status", "--config", str(config)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stdout.splitlines()[-2:] == [
        f"  - spool {tmp_path / 'spool'} does not exist: create it as INSTALL.md step 3 says"
        " (systemd-tmpfiles --create attribution.conf)",
        f"  - no verdict store yet at {tmp_path / 'v.sqlite'} (the worker creates it when it"
        " first starts)",
    ]
    assert not (tmp_path / "v.sqlite").exists() and not (tmp_path / "spool").exists()
    result = CliRunner().invoke(main, ["status", "--config", str(config), "--json"])
    data = json.loads(result.stdout)
    assert data["store_state"] == "missing" and data["queue"] is None
    assert data["throughput"] is None and data["worker"]["running"] is None


def test_what_status_cannot_tell_exits_2(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.config.write_text("spool: [not, a, path]\n")
    result = site.run()
    assert result.exit_code == 2 and result.stderr.startswith("sattr: error: ")
    assert result.stderr.count("\n") == 1
    site.write_config()
    Store(site.store_path).close()
    real_access = os.access
    monkeypatch.setattr(
        "attribution.status.os.access",
        lambda path, mode: False if Path(path) == site.store_path else real_access(path, mode),
    )
    result = site.run()
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"sattr: error: {site.store_path}: the verdict store is not readable to you; run"
        " 'sattr status' as root (or as a member of a group that may read it)\n"
    )


def test_a_store_that_cannot_be_read_is_a_problem(site: Site) -> None:
    """A store that opens but cannot be read (here: a schema from before the worker's health
    tables) is said, never taken for a healthy worker."""
    conn = sqlite3.connect(site.store_path)
    conn.execute("CREATE TABLE verdicts (key TEXT)")
    conn.close()
    with site.worker_lock():
        code, data = site.json()
    assert code == 1
    assert data["store_state"].startswith("error: ") and "heartbeat" in data["store_state"]
    assert [p for p in data["problems"] if p.startswith("the verdict store cannot be read")]


def test_status_is_for_administrators(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("attribution.access.os.getuid", lambda: 4321)
    monkeypatch.setattr("attribution.access.os.getgid", lambda: 4321)
    monkeypatch.setattr("attribution.access.os.getgroups", lambda: [4321])
    result = site.run()
    assert result.exit_code == 2 and result.stdout == ""
    assert "sattr status is for administrators" in result.stderr
    site.write_config(admin_groups=["ops"])
    monkeypatch.setattr(
        "attribution.access.grp.getgrgid", lambda gid: type("G", (), {"gr_name": "ops"})
    )
    assert site.run().exit_code == 1  # an administrator now: the report (with its problems)


def test_units() -> None:
    assert [duration(s) for s in (0, 45, 89, 90, 3599, 5400, 26 * 3600, 3 * 86400)] == [
        "0 s", "45 s", "89 s", "2 min", "60 min", "2 h", "26 h", "3 d",
    ]  # fmt: skip
    assert percentile([], 50) is None
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (
        50.0,
        95.0,
        100.0,
    )


def test_control_characters_in_error_texts_do_not_reach_the_terminal(healthy: Site) -> None:
    spool = healthy.spool
    spool.enqueue("alpha_30_0", "SLURM_JOB_ID=30\n")
    claimed = spool.claim("alpha_30_0")
    assert claimed is not None
    spool.retry(claimed, "sacct said \x1b[2J\x1b]0;owned\x07 nothing")
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 0 == result.exit_code  # an entry waiting for a retry is no problem
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "sacct said \\x1b[2J\\x1b]0;owned\\x07 nothing" in result.stdout
    assert (
        data["queue"]["retry_reasons"][0]["reason"] == "sacct said \x1b[2J\x1b]0;owned\x07 nothing"
    )


def test_odd_files_in_the_spool_do_not_stop_status(healthy: Site) -> None:
    """The spool is writable by SlurmUser: hand-edited retry states and .error files, a
    directory where an entry should be, are counted, never a traceback."""
    spool = healthy.spool
    for key, state in (
        ("alpha_40_0", "not json"),
        ("alpha_41_0", "[1, 2]"),
        ("alpha_42_0", '{"attempts": true, "next_at": NaN, "errors": [[1, "x", 3], "y"]}'),
        ("alpha_43_0", '{"attempts": 4, "errors": [[1.5, "job 43 vanished"]]}'),
    ):
        spool.enqueue(key, "SLURM_JOB_ID=4\n")
        (spool.dir("retry") / f"{key}.json").write_text(state)
    (spool.dir("failed") / "alpha_44_0").mkdir()
    (spool.dir("failed") / "alpha_44_0.error").write_bytes(b"\xff\xfe garbage\n")
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 1 == result.exit_code  # the failed entry
    q = data["queue"]
    assert q["failed"] == 1 and q["settling"] == 4
    assert q["failed_reasons"][0]["reason"] == "the .error file names no error"
    reasons = {r["reason"]: r["attempts"] for r in q["retry_reasons"]}
    assert reasons == {"no error recorded": None, "job 43 vanished": 4}


def test_the_lock_is_read_even_when_a_subdirectory_is_missing(healthy: Site) -> None:
    (healthy.spool.dir("retry")).rmdir()
    with healthy.worker_lock():
        result = healthy.run()
        code, data = healthy.json()
    assert code == 1 == result.exit_code
    assert "Worker:         running (holds the spool lock)" in result.stdout.splitlines()
    assert data["worker"]["running"] is True and data["queue"] is None
    assert data["problems"] == [
        f"spool {healthy.spool.root} lacks retry/: create it as INSTALL.md step 3 says"
    ]
    code, data = healthy.json()  # nobody holds the lock now
    assert data["worker"]["running"] is False
    assert any(p.startswith("no worker holds the spool lock") for p in data["problems"])


def test_help_says_what_the_output_says() -> None:
    result = CliRunner().invoke(main, ["status", "--help"])
    help_text = " ".join(result.stdout.split())
    assert "verdicts per minute over the last hour" in help_text
    assert "per hour" not in help_text


def test_no_config_file_means_the_defaults(site: Site) -> None:
    config = load_config(site.config)
    status = collect(config, config_file=None, now=NOW)
    assert "Config:         no config file (/etc/attribution/config.yaml): defaults" in (
        render_text(status).splitlines()
    )
    assert status.to_dict()["config"] is None


@pytest.mark.skipif(
    any(Path(p).exists() for p in ("/etc/attribution", "/var/spool/attribution")),
    reason="this host has an attribution install: the defaults would read its spool",
)
def test_the_command_without_a_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTRIBUTION_CONFIG", raising=False)
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 1, result.output  # no spool, no store: the defaults' paths
    data = json.loads(result.stdout)
    assert data["config"] is None and data["spool"] == str(Config().spool)
    text = CliRunner().invoke(main, ["status"]).stdout
    assert "Config:         no config file (/etc/attribution/config.yaml): defaults" in text


# ------------------------------------------------- a caller who may not read the spool
#
# Run for real as user nobody (setpriv), with nobody's group in admin_groups: an operator in
# admin_groups who is not in the spool's group. pytest's tmp_path lies under a directory only
# root may enter (/tmp/pytest-of-root, 0700), so these sites are made in a directory of
# their own under /tmp that everybody may enter.

NOBODY = 65534
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")


class OpenSite(Site):
    """A spool, store and config under a directory nobody may enter; nobody's group is an
    admin group."""

    def write_config(self, **extra: Any) -> None:
        super().write_config(admin_groups=[grp.getgrgid(NOBODY).gr_name], **extra)
        self.config.chmod(0o644)

    def as_nobody(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *AS_NOBODY,
                sys.executable,
                "-c",
                "from attribution.cli import main; main()",
                "status",
                "--config",
                str(self.config),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            check=False,
        )


@pytest.fixture
def open_site() -> Iterator[OpenSite]:
    if os.geteuid() != 0:
        pytest.skip("needs root: the command is run as user nobody through setpriv")
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    try:
        grp.getgrgid(NOBODY)
    except KeyError:
        pytest.skip(f"no group with gid {NOBODY} (nobody's)")
    root = Path(tempfile.mkdtemp(prefix="sattr-status-", dir="/tmp"))
    try:
        root.chmod(0o755)
        probe = subprocess.run(
            [*AS_NOBODY, sys.executable, "-c", "import attribution.cli"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(f"user nobody cannot run this Python: {probe.stderr.strip()[-200:]}")
        spool = Spool(root / "spool")
        spool.create(mode=0o755)
        site = OpenSite(root, spool, root / "verdicts.sqlite", root / "config.yaml")
        site.write_config()
        yield site
    finally:
        shutil.rmtree(root)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("sattr: error: ")
    return result.stderr


def test_a_spool_nobody_may_enter_exits_2(open_site: OpenSite) -> None:
    open_site.spool.root.chmod(0o700)  # INSTALL step 3's 0770 root:slurm, caller not in slurm
    for args in ((), ("--json",)):
        line = one_error_line(open_site.as_nobody(*args))
        assert line == (
            f"sattr: error: {open_site.spool.root}: the spool is not readable to you; run"
            " 'sattr status' as root (or as a member of a group that may read it)\n"
        )


def test_a_spool_directory_nobody_may_read_exits_2(open_site: OpenSite) -> None:
    open_site.spool.dir("failed").chmod(0o700)
    line = one_error_line(open_site.as_nobody())
    assert line.startswith(f"sattr: error: {open_site.spool.dir('failed')}: the spool is not")
    open_site.spool.dir("failed").chmod(0o755)
    open_site.spool.dir("new").chmod(0o711)  # may enter, may not list
    line = one_error_line(open_site.as_nobody())
    assert line.startswith(f"sattr: error: {open_site.spool.dir('new')}: the spool is not")


def test_a_store_nobody_may_read_exits_2(open_site: OpenSite) -> None:
    store_dir = open_site.root / "lib"
    store_dir.mkdir(mode=0o700)  # INSTALL step 3: /var/lib/attribution 0750 root root
    open_site.store_path = store_dir / "verdicts.sqlite"
    open_site.write_config()
    Store(open_site.store_path).close()
    line = one_error_line(open_site.as_nobody("--json"))
    assert "the verdict store is not readable to you" in line


def test_files_nobody_may_read_are_said_not_guessed(open_site: OpenSite) -> None:
    """Directories readable, files not (the worker writes retry states, .error files and
    the lock for root): the report is made, and says what it could not read."""
    spool = open_site.spool
    with Store(open_site.store_path) as store:
        beat(store, spool)
        sweep(store, ran_at=ago(minutes=3))
    open_site.store_path.chmod(0o644)
    path = spool.enqueue("alpha_60_0", "SLURM_JOB_ID=60\n")
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    claimed = spool.claim("alpha_60_0")
    assert claimed is not None
    spool.retry(claimed, "job 60 is not in sacct yet")  # waits, in new/, for its next try
    spool.enqueue("alpha_61_0", "junk\n")
    claimed = spool.claim("alpha_61_0")
    assert claimed is not None
    spool.retry(claimed, "malformed entry: no SLURM_JOB_ID", permanent=True)
    for private in (
        spool.dir("retry") / "alpha_60_0.json",
        spool.dir("failed") / "alpha_61_0.error",
    ):
        private.chmod(0o600)
    open_site.write_config(health={"max_failed": 1})
    lock = os.open(spool.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a running worker
        result = open_site.as_nobody()
        as_json = open_site.as_nobody("--json")
        as_root = CliRunner().invoke(
            main, ["status", "--json", "--config", str(open_site.config)], catch_exceptions=False
        )
    finally:
        os.close(lock)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stderr == "" and as_json.returncode == 0
    text = result.stdout
    assert (
        f"Worker:         unknown (cannot read the lock file {spool.root / LOCK_NAME}: not"
        " readable to you; the heartbeat tells)"
    ) in text.splitlines()
    assert "1 whose retry time cannot be read" in text
    assert "cannot read its retry state (Permission denied): run as root to see it" in text
    assert "cannot read its .error file (Permission denied): run as root to see it" in text
    assert "cannot read 2 file(s) here (retry states, .error files)" in text
    data = json.loads(as_json.stdout)
    q = data["queue"]
    assert (q["ready"], q["retry_wait"], q["retry_unknown"], q["unreadable"]) == (0, 0, 1, 2)
    assert data["worker"]["running"] is None and data["problems"] == []
    # root reads every file: the same spool, nothing unknown
    root_data = json.loads(as_root.stdout)
    rq = root_data["queue"]
    assert (rq["retry_wait"], rq["retry_unknown"], rq["unreadable"]) == (1, 0, 0)
    assert root_data["worker"]["running"] is True
    assert rq["failed_reasons"][0]["reason"] == "malformed entry: no SLURM_JOB_ID"


def test_a_folded_entry_counts_for_each_of_its_nodes(site: Site) -> None:
    """A coverage entry that stood for many nodes without a log (``nodes_folded``, its node a
    host list) is each of those nodes in the silent-node view, not one node named
    ``gpu[003-010]``; a node's own entry with lines in another job still counts."""
    nodes = tuple(f"gpu{i:03d}" for i in range(1, 11))
    ok, missing = CoverageStatus.OK, CoverageStatus.MISSING
    runs = [
        ("100", 26, [("gpu001", ok, 5), ("gpu002", ok, 5), ("gpu[003-010]", missing, 0)]),
        ("101", 2, [("gpu003", ok, 5), ("gpu[001-002,004-010]", missing, 0)]),
    ]
    with site.store() as store:
        for job_id, hours, entries in runs:
            coverage = tuple(cov(Stream.KERNEL, n, status, lines) for n, status, lines in entries)
            when = ago(hours=hours)
            store.save(verdict(job_id, end=when, diagnosed=when, nodes=nodes, coverage=coverage))
    status = collect(load_config(site.config), config_file=str(site.config), now=NOW)
    e = status.evidence
    assert e is not None
    kernel = {q.never: q for q in e.silent if q.stream == "kernel"}
    assert kernel[True].nodes == "gpu[004-010]" and kernel[True].node_count == 7
    assert kernel[False].nodes == "gpu[001-002]" and kernel[False].hours_min == 26.0
