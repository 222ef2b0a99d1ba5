"""The reconciliation sweep with a real store, a real spool and a stand-in for ``ended_jobs``:
job runs accounting says ended that never reached the spool are spooled as the hook would."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from attribution.config import Config
from attribution.errors import SlurmError, SpoolError
from attribution.model import (
    JobRecord,
    OtherJob,
    Verdict,
)
from attribution.reconcile import (
    LOCAL_CLUSTER,
    SweepResult,
    reconcile,
    record_env,
    should_have_verdict,
    spool_key,
    synthetic_entry,
)
from attribution.rules.compiled import RuleSet
from attribution.slurm.backend import EndedJob, JobRef
from attribution.slurm.hookenv import key_from_env, parse_entry
from attribution.slurm.parse import SacctRecord
from attribution.slurm.resolve import pick_record
from attribution.spool import Spool
from attribution.store import Store
from tests.pipeline.conftest import HOOK, bare_verdict

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
# settle_delay 30 s + grace 120 s
UNTIL = NOW - timedelta(seconds=150)
FIRST_SINCE = UNTIL - timedelta(hours=1)  # the first sweep looks back from its own end


def ended(job_id: str, state: str = "FAILED", exit_code: str = "1:0", **kw: Any) -> EndedJob:
    fields: dict[str, Any] = {
        "cluster": "c",
        "derived_exit_code": "0:0",
        "end": NOW - timedelta(minutes=30),
        "user": "alice",
        "uid": "1001",
        "nodes": 1,
        "nodelist": "n1",
        "partition": "gpu",
    }
    fields.update(kw)
    return EndedJob(job_id=job_id, state=state, exit_code=exit_code, **fields)


class Accounting:
    """``ended_jobs`` from a list, like sacct: it may list runs outside the window (sacct -S/-E
    selects jobs that overlap it), so it returns every run and the sweep must filter. Also
    answers the worker's questions for the end-to-end tests."""

    name = "accounting"

    def __init__(self, jobs: list[EndedJob], records: Mapping[str, JobRecord] | None = None):
        self.jobs = jobs
        self.records = dict(records or {})
        self.calls: list[tuple[str | None, datetime, datetime]] = []
        self.error: SlurmError | None = None

    def ended_jobs(self, cluster: str | None, since: datetime, until: datetime) -> list[EndedJob]:
        self.calls.append((cluster, since, until))
        if self.error is not None:
            raise self.error
        return [j for j in self.jobs if cluster is None or j.cluster == cluster]

    def get_job(
        self, ref: JobRef, env: Mapping[str, str] | None = None, spooled_at: float | None = None
    ) -> JobRecord:
        return self.records[ref.query_id]

    def get_jobs(
        self, items: Sequence[tuple[JobRef, Mapping[str, str] | None, float | None]]
    ) -> list[JobRecord | SlurmError]:
        return [self.get_job(*item) for item in items]

    def other_jobs(
        self, job: JobRecord, start: datetime, end: datetime
    ) -> dict[str, tuple[OtherJob, ...]]:
        return {}

    def get_comment(self, job: JobRecord, field: str) -> str | None:
        return None

    def set_comment(self, job: JobRecord, field: str, text: str) -> None:
        pass


def make_config(tmp_path: Path, **kw: Any) -> Config:
    data: dict[str, Any] = {
        "spool": str(tmp_path / "spool"),
        "store": str(tmp_path / "v.sqlite"),
        "settle_delay": 30,
        "reconcile": {"grace": 120, "first_lookback": 3600, "clusters": ["c"]},
    }
    reconcile_kw = kw.pop("reconcile", {})
    data.update(kw)
    data["reconcile"] = {**data["reconcile"], **reconcile_kw}
    return Config.model_validate(data)


@pytest.fixture
def env(tmp_path: Path) -> tuple[Config, Store, Spool]:
    config = make_config(tmp_path)
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    return config, Store(config.store), spool


def only(results: list[SweepResult]) -> SweepResult:
    assert len(results) == 1
    return results[0]


def verdict_for(job: JobRecord) -> Verdict:
    return bare_verdict(job)  # type: ignore[no-any-return]


def run_hook(env: Mapping[str, str], spool: Path) -> str:
    """Run the real EpilogSlurmctld hook with ``env``; the name of the entry it spooled."""
    result = subprocess.run(
        [str(HOOK)],
        env={**env, "ATTRIBUTION_SPOOL": str(spool)},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert result.returncode == 0
    assert result.stderr == ""
    (entry,) = (spool / "new").iterdir()
    return entry.name


# ---------------------------------------------------------------------- what is spooled


def test_missing_failed_job_is_spooled_as_the_hook_would(
    env: tuple[Config, Store, Spool], tmp_path: Path
) -> None:
    config, store, spool = env
    job = ended("42", end=NOW - timedelta(minutes=30, seconds=0.5))
    result = only(reconcile(config, store, spool, Accounting([job]), NOW))
    assert result == SweepResult("c", FIRST_SINCE, UNTIL, ended=1, seen=1, enqueued=("c_42_0",))

    path = spool.dir("new") / "c_42_0"
    assert path.stat().st_mtime == pytest.approx(job.end.timestamp(), abs=1e-3)
    entry = parse_entry(path.read_text(), source=str(path), mtime=path.stat().st_mtime)
    assert entry.key == "c_42_0"
    assert entry.header["source"] == "reconcile"
    assert entry.header["key"] == "c_42_0"
    assert entry.spooled_at == int(job.end.timestamp())
    assert entry.env == job.env()
    assert JobRef.from_env(entry.env) == JobRef(job_id="42", cluster="c", restart_count=0)
    # the key is the one the real hook spools this job run under
    hook_spool = tmp_path / "hook-spool"
    Spool(hook_spool).create(mode=0o755)
    assert run_hook(job.env(), hook_spool) == "c_42_0"

    (row,) = store.reconciliations()
    assert (row["cluster"], row["seen"], row["enqueued"], row["keys"], row["error"]) == (
        "c",
        1,
        1,
        ["c_42_0"],
        None,
    )
    assert store.watermark("c") == UNTIL


def test_array_task_and_sluid_keys_match_the_hook(
    env: tuple[Config, Store, Spool], tmp_path: Path
) -> None:
    config, store, spool = env
    task = ended("25", array_job_id="23", array_task_id="1")
    with_sluid = ended("26", sluid="s2MNM8NJZ1NP03", sluid_in_hook=True)  # 25.11+
    # 24.11: sacct lists a SLUID, but the hook's environment has none, so it keys the run as
    # before (the first CI run on 24.11 enqueued every job a second time under its SLUID)
    sacct_only = ended("27", sluid="s8NNM8TAPHRX00")
    jobs = [task, with_sluid, sacct_only]
    result = only(reconcile(config, store, spool, Accounting(jobs), NOW))
    assert sorted(result.enqueued) == ["c_23_1_0", "c_27_0", "s2MNM8NJZ1NP03"]
    text = (spool.dir("new") / "c_23_1_0").read_text()
    assert JobRef.from_env(parse_entry(text).env).query_id == "23_1"
    assert "SLURM_JOB_SLUID" not in parse_entry((spool.dir("new") / "c_27_0").read_text()).env
    keys = ((task, "c_23_1_0"), (with_sluid, "s2MNM8NJZ1NP03"), (sacct_only, "c_27_0"))
    for job, key in keys:
        hook_spool = tmp_path / f"hook-{key}"
        Spool(hook_spool).create(mode=0o755)
        assert run_hook(job.env(), hook_spool) == key


def test_each_run_of_a_requeued_job_is_its_own_entry_timed_at_its_end(
    env: tuple[Config, Store, Spool],
) -> None:
    config, store, spool = env
    first = ended("7", "NODE_FAIL", "0:0", end=NOW - timedelta(minutes=50), restart_count=0)
    second = ended("7", "FAILED", "1:0", end=NOW - timedelta(minutes=20), restart_count=1)
    result = only(reconcile(config, store, spool, Accounting([second, first]), NOW))
    assert result.enqueued == ("c_7_0", "c_7_1")  # oldest first
    # the worker passes each entry's mtime as spooled_at: sacct -D lists both runs, and
    # pick_record must choose the run the entry is about
    runs = [
        SacctRecord({"End": str(int(j.end.timestamp())), "State": j.state}) for j in (first, second)
    ]
    for key, run in (("c_7_0", runs[0]), ("c_7_1", runs[1])):
        mtime = (spool.dir("new") / key).stat().st_mtime
        assert pick_record(runs, mtime) is run


@pytest.mark.parametrize(
    ("state", "exit_code", "derived", "due"),
    [
        ("COMPLETED", "0:0", "0:0", False),
        ("COMPLETED", "0:0", "", False),
        ("COMPLETED", "", "", False),
        ("COMPLETED", "0", "0", False),
        ("COMPLETED", "0:0", "7:0", True),  # the batch script exited 0, an srun step 7
        ("COMPLETED", "1:0", "0:0", True),
        ("FAILED", "1:0", "0:0", True),
        ("CANCELLED by 1001", "0:0", "0:0", True),
        ("TIMEOUT", "0:0", "0:0", True),
        ("NODE_FAIL", "0:0", "0:0", True),
        ("OUT_OF_MEMORY", "0:125", "0:0", True),
    ],
)
def test_which_runs_should_have_a_verdict(
    state: str, exit_code: str, derived: str, due: bool
) -> None:
    job = ended("1", state, exit_code, derived_exit_code=derived)
    assert should_have_verdict(job, record_pass=False) is due
    assert should_have_verdict(job, record_pass=True) is True


def test_passed_jobs_are_skipped_unless_record_pass(tmp_path: Path) -> None:
    jobs = [
        ended("1", "COMPLETED", "0:0"),
        ended("2", "COMPLETED", "0:0", derived_exit_code="7:0"),
        ended("3", "FAILED", "2:0"),
    ]
    for record_pass, expected in ((False, ("c_2_0", "c_3_0")), (True, ("c_1_0", "c_2_0", "c_3_0"))):
        root = tmp_path / str(record_pass)
        root.mkdir()
        config = make_config(root, record_pass=record_pass)
        spool = Spool(config.spool)
        spool.create(mode=0o755)
        result = only(reconcile(config, Store(config.store), spool, Accounting(jobs), NOW))
        assert (result.ended, result.seen) == (3, len(expected))
        assert tuple(sorted(result.enqueued)) == expected
        assert sorted(os.listdir(spool.dir("new"))) == list(expected)


def test_runs_the_hook_never_spools_are_ignored(env: tuple[Config, Store, Spool]) -> None:
    config, store, spool = env
    jobs = [
        ended("1", "CANCELLED by 1001", "0:0", nodes=0, nodelist=None),  # cancelled while pending
        ended("2", "REQUEUED", "0:0"),  # the worker cannot use a run that is not final
        ended("3"),
    ]
    result = only(reconcile(config, store, spool, Accounting(jobs), NOW))
    assert (result.ended, result.ignored, result.seen, result.enqueued) == (3, 2, 1, ("c_3_0",))


def test_a_row_without_a_job_id_does_not_stop_the_sweep(env: tuple[Config, Store, Spool]) -> None:
    config, store, spool = env
    result = only(reconcile(config, store, spool, Accounting([ended(""), ended("3")]), NOW))
    assert (result.ended, result.ignored, result.enqueued, result.error) == (2, 1, ("c_3_0",), None)
    assert store.watermark("c") == UNTIL


# ---------------------------------------------------------------------- what is not spooled


def test_job_with_a_verdict_is_not_spooled(env: tuple[Config, Store, Spool]) -> None:
    config, store, spool = env
    store.save(verdict_for(JobRecord(job_id="42", cluster="c", state="FAILED")))
    result = only(reconcile(config, store, spool, Accounting([ended("42"), ended("43")]), NOW))
    assert (result.seen, result.enqueued) == (2, ("c_43_0",))


@pytest.mark.parametrize("state", ["new", "work", "done", "failed"])
def test_job_anywhere_in_the_spool_is_not_spooled_again(
    env: tuple[Config, Store, Spool], state: str
) -> None:
    config, store, spool = env
    (spool.dir(state) / "c_42_0").write_text("the hook's entry\n")
    result = only(reconcile(config, store, spool, Accounting([ended("42")]), NOW))
    assert (result.seen, result.enqueued) == (1, ())
    assert (spool.dir(state) / "c_42_0").read_text() == "the hook's entry\n"
    assert sorted(
        p for s in ("new", "work", "done", "failed") for p in os.listdir(spool.dir(s))
    ) == ["c_42_0"]


def test_jobs_that_ended_outside_the_window_wait_or_are_past(
    env: tuple[Config, Store, Spool],
) -> None:
    """sacct may list runs that only overlap the window: one that ended within settle_delay +
    grace is left to the hook for now, and spooled by a later sweep if still missing."""
    config, store, spool = env
    recent = ended("1", end=NOW - timedelta(seconds=100))
    old = ended("2", end=FIRST_SINCE - timedelta(seconds=1))
    edge = ended("3", end=UNTIL)  # [since, until): the next sweep's
    accounting = Accounting([recent, old, edge])
    first = only(reconcile(config, store, spool, accounting, NOW))
    assert (first.ended, first.enqueued) == (0, ())
    later = NOW + timedelta(minutes=5)
    second = only(reconcile(config, store, spool, accounting, later))
    assert (second.since, second.until) == (UNTIL, later - timedelta(seconds=150))
    assert second.enqueued == ("c_3_0", "c_1_0")
    # a later sweep also asks again about the grace before its window (late records)
    grace = timedelta(seconds=config.reconcile.grace)
    assert accounting.calls == [("c", FIRST_SINCE, UNTIL), ("c", UNTIL - grace, second.until)]


def test_a_record_that_reaches_accounting_late_is_found_by_the_next_sweep(
    env: tuple[Config, Store, Spool],
) -> None:
    """A job that ended in the last sweep's window but whose record reached slurmdbd only
    after that sweep (slurmctld's queue sent late) is spooled by the next one, once."""
    config, store, spool = env
    accounting = Accounting([])
    only(reconcile(config, store, spool, accounting, NOW))
    accounting.jobs.append(ended("7", end=UNTIL - timedelta(seconds=30)))
    later = NOW + timedelta(minutes=1)
    assert only(reconcile(config, store, spool, accounting, later)).enqueued == ("c_7_0",)
    assert (
        only(reconcile(config, store, spool, accounting, later + timedelta(minutes=1))).enqueued
        == ()
    )


def test_a_watermark_in_the_future_does_not_switch_the_sweep_off(
    env: tuple[Config, Store, Spool],
) -> None:
    """One sweep while the clock was a year ahead: later sweeps start again from the lookback
    instead of waiting a year."""
    config, store, spool = env
    only(reconcile(config, store, spool, Accounting([]), NOW + timedelta(days=365)))
    accounting = Accounting([ended("8", end=NOW - timedelta(minutes=10))])
    result = only(reconcile(config, store, spool, accounting, NOW))
    assert result.enqueued == ("c_8_0",)
    assert store.watermark("c") == UNTIL


# ---------------------------------------------------------------------- watermark and errors


def test_watermark_advances_and_the_local_cluster_keeps_one(tmp_path: Path) -> None:
    config = make_config(tmp_path, reconcile={"clusters": []})
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    store = Store(config.store)
    accounting = Accounting([ended("1", cluster="real-name")])
    first = only(reconcile(config, store, spool, accounting, NOW))
    assert (first.cluster, first.enqueued) == (LOCAL_CLUSTER, ("real-name_1_0",))
    assert store.watermark(LOCAL_CLUSTER) == UNTIL
    assert store.watermark("real-name") is None
    # an empty window (the same time again, a clock that went back) is neither asked nor recorded
    for again in (NOW, NOW - timedelta(minutes=1)):
        idle = only(reconcile(config, store, spool, accounting, again))
        assert (idle.swept, idle.since, idle.error) == (False, UNTIL, None)
        assert "nothing to sweep" in idle.summary()
    later = NOW + timedelta(minutes=5)
    second = only(reconcile(config, store, spool, accounting, later))
    assert second.since == UNTIL
    assert store.watermark(LOCAL_CLUSTER) == second.until
    assert [c[0] for c in accounting.calls] == [None, None]
    assert len(store.reconciliations()) == 2


def test_slurm_error_is_recorded_and_keeps_the_watermark(env: tuple[Config, Store, Spool]) -> None:
    config, store, spool = env
    accounting = Accounting([])
    only(reconcile(config, store, spool, accounting, NOW))
    accounting.error = SlurmError("sacct failed: timed out after 60 s")
    accounting.jobs = [ended("9", end=NOW + timedelta(minutes=1))]
    later = NOW + timedelta(minutes=5)
    failed = only(reconcile(config, store, spool, accounting, later))
    assert failed.error == "sacct failed: timed out after 60 s"
    assert not failed.ok
    assert "the watermark stays" in failed.summary()
    assert store.watermark("c") == UNTIL
    assert store.reconciliations()[0]["error"] == "sacct failed: timed out after 60 s"
    # the next sweep covers the failed one's window too
    accounting.error = None
    again = only(reconcile(config, store, spool, accounting, later + timedelta(minutes=5)))
    assert (again.since, again.enqueued, again.error) == (UNTIL, ("c_9_0",), None)


@pytest.mark.parametrize("broken", ["tmp", "new"])
def test_unwritable_spool_is_recorded_and_keeps_the_watermark(tmp_path: Path, broken: str) -> None:
    """A spool directory that is a regular file fails for root too (a read-only mode would not)."""
    config = make_config(tmp_path)
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    store = Store(config.store)
    only(reconcile(config, store, spool, Accounting([]), NOW))
    shutil.rmtree(spool.dir(broken))
    spool.dir(broken).write_text("not a directory\n")
    accounting = Accounting([ended("1", end=NOW), ended("2", end=NOW + timedelta(seconds=1))])
    later = NOW + timedelta(minutes=5)
    failed = only(reconcile(config, store, spool, accounting, later))
    assert failed.error is not None
    assert "cannot enqueue" in failed.error
    assert "2 of 2 missing job run(s) not spooled" in failed.error
    assert (failed.seen, failed.enqueued) == (2, ())
    assert store.watermark("c") == UNTIL
    row = store.reconciliations()[0]
    assert (row["error"], row["enqueued"]) == (failed.error, 0)

    spool.dir(broken).unlink()
    spool.dir(broken).mkdir()
    again = only(reconcile(config, store, spool, accounting, later + timedelta(minutes=5)))
    assert (again.since, again.enqueued, again.error) == (UNTIL, ("c_1_0", "c_2_0"), None)


def test_an_unusable_store_is_an_error_not_an_exception(env: tuple[Config, Store, Spool]) -> None:
    config, store, spool = env
    store.close()
    accounting = Accounting([ended("1")])
    result = only(reconcile(config, store, spool, accounting, NOW))
    assert result.error is not None
    assert result.error.startswith("cannot read the watermark: ")
    assert (accounting.calls, os.listdir(spool.dir("new"))) == ([], [])


def test_one_cluster_failing_does_not_stop_the_others(tmp_path: Path) -> None:
    config = make_config(tmp_path, reconcile={"clusters": ["a", "b"]})
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    store = Store(config.store)

    class HalfDown(Accounting):
        def ended_jobs(
            self, cluster: str | None, since: datetime, until: datetime
        ) -> list[EndedJob]:
            if cluster == "a":
                raise SlurmError("sacct -M a: cluster a is not reachable")
            return super().ended_jobs(cluster, since, until)

    results = reconcile(config, store, spool, HalfDown([ended("5", cluster="b")]), NOW)
    assert [(r.cluster, r.error, r.enqueued) for r in results] == [
        ("a", "sacct -M a: cluster a is not reachable", ()),
        ("b", None, ("b_5_0",)),
    ]
    # a's first sweep failed: its watermark is pinned where that window began, so the next
    # sweep covers the same jobs and the window does not slide with each retry
    assert (store.watermark("a"), store.watermark("b")) == (FIRST_SINCE, UNTIL)
    later = NOW + timedelta(minutes=5)
    (again, _) = reconcile(config, store, spool, HalfDown([]), later)
    assert again.since == FIRST_SINCE and again.error is not None
    assert again.summary().endswith(
        "failed before any job was known, the watermark stays: "
        "sacct -M a: cluster a is not reachable"
    )


def test_disabled_sweeps_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path, reconcile={"enabled": False})
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    accounting = Accounting([ended("1")])
    assert reconcile(config, Store(config.store), spool, accounting, NOW) == []
    assert accounting.calls == []


# ---------------------------------------------------------------------- with the worker


def test_twice_spools_once_and_the_hooks_late_entry_leaves_one_verdict(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    from attribution.worker import Worker

    config = make_config(tmp_path)
    spool = Spool(config.spool)
    spool.create(mode=0o755)
    job = ended("42")
    record = JobRecord(
        job_id="42",
        cluster="c",
        state="FAILED",
        exit_code="1:0",
        derived_exit_code="0:0",
        nodes=("n1",),
        nodelist="n1",
        start=job.end - timedelta(minutes=5),
        end=job.end,
        user="alice",
        uid=1001,
    )
    accounting = Accounting([job], {"42": record})
    first = only(reconcile(config, Store(config.store), spool, accounting, NOW))
    assert first.enqueued == ("c_42_0",)
    # the same window again (a lost store, a watermark that stayed): the entry is in new/
    fresh = Store(tmp_path / "other.sqlite")
    assert only(reconcile(config, fresh, spool, accounting, NOW)).enqueued == ()

    # the worker takes it at once: its mtime (the job's end) is older than settle_delay
    worker = Worker(
        config,
        backend=accounting,  # type: ignore[arg-type]
        ruleset=ruleset,
        clock=lambda: NOW.timestamp(),
    )
    outcomes, _ = worker.run_ready()
    assert [(o.key, o.result) for o in outcomes] == [("c_42_0", "saved")]
    assert Store(config.store).get("c_42_0") is not None
    # in done/ now; with its verdict it is not spooled again even once done/ is pruned
    assert only(reconcile(config, fresh, spool, accounting, NOW)).enqueued == ()
    (spool.dir("done") / "c_42_0").unlink()
    assert only(reconcile(config, fresh, spool, accounting, NOW)).enqueued == ()
    assert only(
        reconcile(config, Store(tmp_path / "third.sqlite"), spool, accounting, NOW)
    ).enqueued == ("c_42_0",)
    (spool.dir("new") / "c_42_0").unlink()

    # the hook's own entry arrives late: processed too, still one verdict for the job run
    hook_text = synthetic_entry({**job.env(), "SLURM_JOB_NAME": "late"}, source="hook-test")
    late = spool.enqueue("c_42_0", hook_text)
    os.utime(late, (job.end.timestamp() + 1, job.end.timestamp() + 1))
    outcomes, _ = worker.run_ready()
    assert [(o.key, o.result) for o in outcomes] == [("c_42_0", "saved")]
    db = sqlite3.connect(config.store)
    assert db.execute("SELECT count(*) FROM verdicts WHERE key = 'c_42_0'").fetchone() == (1,)


# ---------------------------------------------------------------------- the entry writer


def test_synthetic_entry_round_trips_and_marks_its_source() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_CLUSTER_NAME": "c", "SLURM_JOB_NAME": 'it\'s a "job"\n2'}
    entry = parse_entry(synthetic_entry(env, source="reconcile", epoch=1796000000.7))
    assert entry.env == env
    assert (entry.header["source"], entry.spooled_at) == ("reconcile", 1796000000.0)
    assert parse_entry(synthetic_entry(env, source="x"), mtime=5.0).spooled_at == 5.0
    with pytest.raises(SpoolError, match="not a spool entry source"):
        synthetic_entry(env, source="re concile")
    with pytest.raises(SpoolError, match="SLURM_JOB_ID"):
        synthetic_entry({"SLURM_CLUSTER_NAME": "c"}, source="reconcile")


def test_sattr_enqueue_entry_names_the_job_runs_key() -> None:
    """``sattr enqueue`` spools under ``JobRecord.key``; its entry's own key is the same."""
    task = JobRecord(
        job_id="25", cluster="c", array_job_id="23", array_task_id="1", restart_count=2, uid=0
    )
    for job in (task, replace(task, sluid="s2MNM8NJZ1NP03"), JobRecord(job_id="8")):
        env = record_env(job)
        entry = parse_entry(synthetic_entry(env, source="sattr-enqueue"))
        assert entry.key == job.key == key_from_env(env)
        assert entry.header["source"] == "sattr-enqueue"
    assert record_env(task)["SLURM_JOB_UID"] == "0"


def test_summary_is_one_line() -> None:
    keys = tuple(f"c_{i}_0" for i in range(7))
    line = SweepResult(
        "c", FIRST_SINCE, UNTIL, ended=12, ignored=1, seen=9, enqueued=keys
    ).summary()
    assert line == (
        "reconcile c 2026-11-30T06:57:30Z..2026-11-30T07:57:30Z: 12 ended (1 ignored: never ran"
        " or not final), 9 should have a verdict, 7 never reached the spool: enqueued c_0_0,"
        " c_1_0, c_2_0, c_3_0, c_4_0 and 2 more"
    )
    quiet = SweepResult("c", FIRST_SINCE, UNTIL, ended=3, seen=1).summary()
    assert quiet.endswith(": 3 ended, 1 should have a verdict, none missing")
    assert spool_key(ended("4")) == "c_4_0"


def test_a_run_known_under_its_other_key_is_not_enqueued_again(
    env: tuple[Config, Store, Spool],
) -> None:
    """A cluster upgraded from 24.11 to 26.05 mid-window: the hook spooled a run under
    ``<cluster>_<job>_<restart>``, while the sweep (now on a Slurm whose hook gets SLUIDs)
    would key it by its SLUID; and the other way round. Either key counts as seen."""
    config, store, spool = env
    old = ended("40", sluid="s1H1M8TA88K400", sluid_in_hook=True)
    new = ended("41", sluid="s1H1M8TA88KX00")
    spool.enqueue("c_40_0", "# attribution-spool 1 key=c_40_0\nexport SLURM_JOB_ID='40'\n")
    spool.enqueue(
        "s1H1M8TA88KX00", "# attribution-spool 1 key=s1H1M8TA88KX00\nexport SLURM_JOB_ID='41'\n"
    )
    result = only(reconcile(config, store, spool, Accounting([old, new]), NOW))
    assert result.enqueued == ()
