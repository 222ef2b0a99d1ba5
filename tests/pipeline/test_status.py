"""``sattr status``: a real spool, a real verdict store and a real spool lock, read through the
command line; every health problem gives exit 1, a healthy worker exit 0, and what status
cannot tell exit 2."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from attribution.cli import main
from attribution.config import load_config
from attribution.model import (
    Coverage,
    CoverageStatus,
    JobRecord,
    Stream,
    SubDomain,
    TerminalState,
    Verdict,
)
from attribution.spool import LOCK_NAME, RetryPolicy, Spool
from attribution.status import collect, duration, percentile, render_text
from attribution.store import Store

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
    return Verdict(
        job=JobRecord(
            job_id=job_id, cluster="alpha", nodes=nodes, start=end - timedelta(hours=1), end=end
        ),
        terminal_state=TerminalState.FAIL,
        sub_domain=SubDomain.APPLICATION,
        cause=None,
        responsible=(),
        summary="s",
        action=None,
        symptom_chain=(),
        alternatives=(),
        coverage=coverage,
        ignored=(),
        window=(None, None),
        ruleset={},
        engine_version="0",
        diagnosed_at=diagnosed,
    )


def beat(store: Store, spool: Spool, *, at: datetime | None = None) -> None:
    store.beat(
        str(spool.root),
        pid=4242,
        host="head1",
        started_at=ago(hours=3),
        info={"processes": 8, "results": {"saved": 120, "retry": 3}, "reconciled": 2},
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
    assert "running (holds the spool lock)" in text
    assert "pid 4242 on head1" in text
    assert "processes: 8" in text and "results: retry=3, saved=120" in text
    assert "alpha: last sweep 3 min ago" in text and "40 seen, 1 enqueued" in text
    assert "1 found that never reached the spool" in text
    assert code == 0 and data["healthy"] is True and data["problems"] == []
    assert data["schema"] == "attribution.status/1"
    assert set(data) == {
        "schema", "now", "healthy", "problems", "spool", "store", "store_state", "worker",
        "queue", "throughput", "admin_comment", "reconciliation", "evidence",
    }  # fmt: skip
    assert data["worker"]["running"] is True and data["worker"]["pid"] == 4242
    assert data["worker"]["info"]["results"] == {"saved": 120, "retry": 3}
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
    with healthy.store() as store:
        sweep(store, ran_at=ago(minutes=1), error="sacct: slurmdbd not responding")
    with healthy.worker_lock():
        code, data = healthy.json()
    assert data["problems"] == [
        "reconciliation of cluster alpha failed: sacct: slurmdbd not responding"
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
        assert "disabled (failed writes are not tried again); 2 write(s) failing" in result.stdout
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
    status = collect(config, now=NOW)
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
    status = collect(load_config(site.config), now=NOW)
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
    text = render_text(status)
    assert "no kernel lines from gpu[001-010] for 26 h, though they ran jobs" in text
    assert "no syslog lines from gpu[001,003] in the last 7 d" in text
    assert "node logs missing for 40% of last day's jobs (2 of 5)" in text
    assert "syslog         missing 40% (of 5 jobs)" in text
    # evidence health is information, not a problem
    assert not any("lines" in p or "evidence" in p for p in status.problems)


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
