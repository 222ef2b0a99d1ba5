"""The worker's decisions with a stand-in Slurm (edge cases; the real path is in tests/slurm)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from attribution.config import Config
from attribution.errors import SlurmError
from attribution.model import JobRecord
from attribution.rules.compiled import RuleSet
from attribution.slurm.backend import JobRef, NotReady
from attribution.slurm.hookenv import format_entry
from attribution.store import Store
from attribution.worker import Worker, make_spool

T0 = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)


class StandIn:
    """Answers get_job from a dict; records comment writes."""

    name = "stand-in"

    def __init__(self, jobs: dict[str, JobRecord | Exception]) -> None:
        self.jobs = jobs
        self.comments: dict[tuple[str, str], str] = {}

    def get_job(
        self, ref: JobRef, env: Mapping[str, str] | None = None, spooled_at: float | None = None
    ) -> JobRecord:
        found = self.jobs[ref.query_id]
        if isinstance(found, Exception):
            raise found
        return found

    def get_jobs(self, items):  # type: ignore[no-untyped-def]
        self.batches = [*getattr(self, "batches", []), len(items)]
        out: list[JobRecord | Exception] = []
        for ref, env, spooled_at in items:
            try:
                out.append(self.get_job(ref, env, spooled_at))
            except Exception as exc:
                out.append(exc)
        return out

    def other_jobs_many(self, items):  # type: ignore[no-untyped-def]
        self.batched_other_jobs = [job.job_id for job, _, _ in items]
        return [{"n1": ()} for _ in items]

    def ended_jobs(self, cluster, since, until):  # type: ignore[no-untyped-def]
        return []  # accounting knows no job the hook missed

    def other_jobs(self, job: JobRecord, start: datetime, end: datetime) -> dict[str, tuple]:  # type: ignore[type-arg]
        self.asked_other_jobs = (job.job_id, start, end)
        return {}

    def get_comment(self, job: JobRecord, field: str) -> str | None:
        return self.comments.get((job.display_id, field))

    def set_comment(self, job: JobRecord, field: str, text: str) -> None:
        self.comments[(job.display_id, field)] = text


def make(tmp_path: Path, ruleset: RuleSet, jobs, **cfg):  # type: ignore[no-untyped-def]
    config = Config.model_validate(
        {
            "spool": str(tmp_path / "spool"),
            "store": str(tmp_path / "v.sqlite"),
            "settle_delay": 0,
            "admin_comment": {"enabled": True},
            **cfg,
        }
    )
    spool = make_spool(config)
    spool.create(mode=0o755)
    backend = StandIn(jobs)
    worker = Worker(config, backend=backend, ruleset=ruleset)  # type: ignore[arg-type]
    return worker, spool, backend


def record(job_id: str, state: str, exit_code: str = "0:0") -> JobRecord:
    return JobRecord(
        job_id=job_id,
        cluster="c",
        state=state,
        exit_code=exit_code,
        derived_exit_code="0:0",
        nodes=("n1",),
        nodelist="n1",
        start=T0,
        end=T0,
        uid=0,
        user="root",
    )


def enqueue(spool, job_id: str) -> str:  # type: ignore[no-untyped-def]
    key = f"c_{job_id}_0"
    spool.enqueue(key, format_entry({"SLURM_JOB_ID": job_id, "SLURM_CLUSTER_NAME": "c"}))
    return key


def test_outcomes(tmp_path: Path, ruleset: RuleSet) -> None:
    jobs = {
        "1": record("1", "COMPLETED"),
        "2": record("2", "FAILED", "1:0"),
        "3": NotReady("job 3 is RUNNING"),
        "4": SlurmError("sacct failed: timed out"),
    }
    worker, spool, backend = make(tmp_path, ruleset, jobs)
    for j in "1234":
        enqueue(spool, j)
    spool.enqueue("c_5_0", "garbage\n")
    outcomes = {o.key: o.result for o in worker.run(once=True)}
    assert outcomes == {
        "c_1_0": "dropped",
        "c_2_0": "saved",
        "c_3_0": "retry",
        "c_4_0": "retry",
        "c_5_0": "failed",
    }
    rows = {r["key"]: r for r in Store(tmp_path / "v.sqlite").rows()}
    assert list(rows) == ["c_2_0"]
    assert rows["c_2_0"]["admin_comment_status"] == "written"
    assert backend.comments[("2", "AdminComment")] == "sattr1 fail unattributed"
    assert "bad header" in (spool.dir("failed") / "c_5_0.error").read_text()
    assert spool.counts() == {"new": 2, "work": 0, "done": 2, "failed": 1}


def test_record_pass_and_foreign_comment(tmp_path: Path, ruleset: RuleSet) -> None:
    from dataclasses import replace

    # sacct's record carries the AdminComment jobstats wrote in its epilog: the worker keeps
    # it (without asking Slurm again)
    foreign = replace(record("2", "FAILED", "2:0"), admin_comment="JS1:Short")
    jobs = {"1": record("1", "COMPLETED"), "2": foreign}
    worker, spool, backend = make(tmp_path, ruleset, jobs, record_pass=True)
    backend.comments[("2", "AdminComment")] = "JS1:Short"
    enqueue(spool, "1")
    enqueue(spool, "2")
    worker.run(once=True)
    rows = {r["key"]: r for r in Store(tmp_path / "v.sqlite").rows()}
    assert rows["c_1_0"]["terminal_state"] == "pass"
    assert rows["c_1_0"]["admin_comment_status"] == "not-written-pass"
    assert rows["c_2_0"]["admin_comment_status"] == "skipped-foreign"
    assert backend.comments[("2", "AdminComment")] == "JS1:Short"


def test_twice_is_one_verdict(tmp_path: Path, ruleset: RuleSet) -> None:
    worker, spool, _ = make(tmp_path, ruleset, {"2": record("2", "FAILED", "1:0")})
    enqueue(spool, "2")
    worker.run(once=True)
    enqueue(spool, "2")
    worker.run(once=True)
    db = sqlite3.connect(tmp_path / "v.sqlite")
    assert db.execute("SELECT count(*) FROM verdicts").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM coverage").fetchone()[0] > 0


def test_store_migrates_an_m001_database(tmp_path: Path) -> None:
    from sqlite_utils import Database

    from attribution.store import m001_initial

    db = Database(tmp_path / "old.sqlite")
    m001_initial(db)
    db.execute("CREATE TABLE _sqlite_migrations (migration_set TEXT, name TEXT, applied_at TEXT)")
    db.execute(
        "INSERT INTO _sqlite_migrations VALUES ('attribution', 'm001_initial', '2026-11-30')"
    )
    db.close()
    store = Store(tmp_path / "old.sqlite")
    assert "admin_comment" in store.db.table("verdicts").columns_dict


@pytest.fixture(autouse=True)
def _no_real_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")


def test_the_gpus_recorded_at_the_start_reach_the_verdict(tmp_path: Path, ruleset: RuleSet) -> None:
    """The hook, as PrologSlurmctld, recorded scontrol -d at the job's start; at its end Slurm
    shows no GPU per node any more. The worker takes the start's record, asks for the other
    jobs on the nodes once, and forgets the record when the entry is done."""
    import dataclasses

    ended = dataclasses.replace(record("7", "FAILED", "1:0"), gres_detail={"n1": ""})
    worker, spool, backend = make(tmp_path, ruleset, {"7": ended})
    enqueue(spool, "7")
    (spool.dir("alloc") / "c_7_0").write_text(
        "JobId=7 JobName=x UserId=root(0) JobState=RUNNING NodeList=n1 JOB_GRES=gpu:1"
        "   Nodes=n1 CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:0) MinCPUsNode=1 OverSubscribe=OK\n"
    )
    assert [o.result for o in worker.run(once=True)] == ["saved"]
    stored = Store(tmp_path / "v.sqlite").find("7")[0]
    assert stored["job"]["gres_detail"] == {"n1": "gpu:1(IDX:0)"}
    assert stored["job"]["exclusive"] is False
    assert stored["job"]["other_jobs"] == {}
    assert backend.asked_other_jobs[0] == "7"
    assert not (spool.dir("alloc") / "c_7_0").exists()


def test_a_spool_deleted_under_the_worker_is_one_clear_error(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """The spool removed while the worker runs (an admin's rm -rf, a tmpfs remounted): the
    worker stops with one SpoolError that names the missing directory and how to create it,
    not with a FileNotFoundError traceback (issue 12)."""
    import shutil
    import threading

    from attribution.errors import SpoolError
    from attribution.spool import LOCK_NAME

    worker, spool, _ = make(tmp_path, ruleset, {}, poll_interval=0.05)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        for _ in range(100):  # wait until the loop holds the lock
            if (spool.root / LOCK_NAME).exists():
                break
            threading.Event().wait(0.02)
        shutil.rmtree(spool.root)
        thread.join(timeout=10)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    (exc,) = failure
    assert isinstance(exc, SpoolError), repr(exc)
    assert "spool directory missing" in str(exc) and "INSTALL.md step 3" in str(exc)
    assert str(spool.root) in str(exc)


class FlakyComments(StandIn):
    """set_comment fails while ``down`` (slurmdbd stopped), as the CLI backend reports it."""

    down = True
    attempts = 0

    def set_comment(self, job: JobRecord, field: str, text: str) -> None:
        self.attempts += 1
        if self.down:
            raise SlurmError("sacctmgr: error: Problem talking to the database")
        super().set_comment(job, field, text)


def test_a_failed_admin_comment_write_is_retried_until_it_succeeds(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """An AdminComment write that failed (slurmdbd down) is written once Slurm takes it
    again, with backoff, and a restarted worker picks it up from the store (issue 12)."""
    from attribution import worker as worker_module

    now = [time.time() + 1]  # after the entry is spooled
    worker, spool, _ = make(tmp_path, ruleset, {"2": record("2", "FAILED", "1:0")})
    flaky = FlakyComments(worker.backend.jobs)  # type: ignore[attr-defined]
    worker.backend = flaky
    worker.clock = lambda: now[0]
    enqueue(spool, "2")
    worker.run(once=True)
    store = Store(tmp_path / "v.sqlite")
    assert store.row("c_2_0")["admin_comment_status"].startswith("error:")  # type: ignore[index]
    # still down: tried again, and the next try waits longer
    now[0] += worker_module.COMMENT_RETRY_FIRST
    assert flaky.attempts == 1
    assert worker.retry_comments() == 0 and flaky.attempts == 2
    assert worker.retry_comments() == 0 and flaky.attempts == 2  # backoff: not at once
    # a restarted worker (no backoff in memory) with Slurm back: written on its first round
    flaky.down = False
    again = Worker(worker.config, backend=flaky, ruleset=ruleset)  # type: ignore[arg-type]
    again.clock = lambda: now[0]
    again.run(once=True)
    row = store.row("c_2_0")
    assert row is not None and row["admin_comment_status"] == "written"
    assert flaky.comments[("2", "AdminComment")] == row["admin_comment"]
    assert again.retry_comments() == 0  # nothing left to write


# ------------------------------------------------------------------ throughput and fairness


def test_fair_order_takes_one_entry_per_group_per_round() -> None:
    """A 1,000-task array (or one user's many jobs) gets one turn per round: the single job
    spooled after it is taken second, not after the whole array (issue 12)."""
    from attribution.spool import Pending
    from attribution.worker import fair_order

    items = [Pending(f"c_9_{t}_0", float(t), float(t)) for t in range(1000)]
    items.append(Pending("c_10_0", 2000.0, 2000.0))
    items.append(Pending("c_11_0", 2001.0, 2001.0))
    groups = {i.key: ("array:9" if i.key.startswith("c_9_") else i.key) for i in items}
    order = [p.key for p in fair_order(items, lambda p: groups[p.key])]
    assert order[:5] == ["c_9_0_0", "c_10_0", "c_11_0", "c_9_1_0", "c_9_2_0"]
    assert sorted(order) == sorted(groups)  # nothing lost or repeated


def test_entry_group_reads_the_array_job_or_the_user_from_any_shell() -> None:
    from attribution.worker import entry_group

    dash = (
        "# attribution-spool 1 key=k\nexport SLURM_ARRAY_JOB_ID='77'\nexport SLURM_JOB_ID='78'\n"
        "export SLURM_JOB_USER='ann'\n"
    )
    # a job name with a newline cannot forge a variable (it stays inside its quotes)
    forged = (
        "# attribution-spool 1 key=k\nexport SLURM_JOB_ID='5'\n"
        "export SLURM_JOB_NAME='x\nexport SLURM_ARRAY_JOB_ID=999'\nexport SLURM_JOB_USER='eve'\n"
    )
    bash = '# attribution-spool 1 key=k\ndeclare -x SLURM_JOB_ID="5"\ndeclare -x SLURM_JOB_USER="bob"\n'
    assert entry_group(dash, "k") == "array:77"
    assert entry_group(bash, "k") == "user:bob"
    assert entry_group(forged, "k") == "user:eve"
    assert entry_group("garbage", "k") == "key:k"
    assert entry_group(None, "k") == "key:k"


def test_small_jobs_go_before_large_ones_and_one_sacct_resolves_the_batch(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """A 4,096-node job spooled first does not hold back 1-node verdicts, and the batch is
    resolved with one get_jobs call (issue 12)."""
    from dataclasses import replace

    big = replace(
        record("1", "FAILED", "1:0"),
        nodes=tuple(f"n{i:04d}" for i in range(4096)),
        nodelist="n[0000-4095]",
    )
    jobs: dict[str, JobRecord | Exception] = {"1": big}
    for j in ("2", "3", "4"):
        jobs[j] = record(j, "FAILED", "1:0")
    worker, spool, backend = make(tmp_path, ruleset, jobs)
    for j in ("1", "2", "3", "4"):
        enqueue(spool, j)
        time.sleep(0.01)  # distinct spool times: job 1 is the oldest
    outcomes = worker.run(once=True)
    assert [o.key for o in outcomes] == ["c_2_0", "c_3_0", "c_4_0", "c_1_0"]
    assert {o.result for o in outcomes} == {"saved"}
    assert backend.batches == [4]
    # which other jobs shared the nodes: one batched question, none per job
    assert sorted(backend.batched_other_jobs) == ["1", "2", "3", "4"]
    assert not hasattr(backend, "asked_other_jobs")


def test_a_worker_stopped_with_claimed_entries_gives_them_back(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """Entries claimed in a batch but not started when the worker is asked to stop go back
    to new/ without an attempt counted."""
    jobs: dict[str, JobRecord | Exception] = {j: record(j, "FAILED", "1:0") for j in "123"}
    worker, spool, _ = make(tmp_path, ruleset, jobs)
    for j in "123":
        enqueue(spool, j)
    real = worker.complete

    def complete_then_stop(job: JobRecord):  # type: ignore[no-untyped-def]
        worker.stop()
        return real(job)

    worker.complete = complete_then_stop  # type: ignore[method-assign]
    outcomes = worker.run(once=True)
    assert [o.result for o in outcomes] == ["saved"]
    assert spool.counts() == {"new": 2, "work": 0, "done": 1, "failed": 0}
    assert not any(spool.dir("retry").iterdir())


def test_deleted_spool_subdirectories_are_recreated_like_the_spool(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """An admin's rm -rf of new/ and done/: the worker recreates them with the spool
    directory's own mode (and owner, as root) and goes on (issue 12)."""
    import shutil
    import stat

    worker, spool, _ = make(tmp_path, ruleset, {"2": record("2", "FAILED", "1:0")})
    spool.root.chmod(0o2770)
    shutil.rmtree(spool.dir("new"))
    shutil.rmtree(spool.dir("done"))
    worker.run(once=True)
    for name in ("new", "done"):
        info = spool.dir(name).stat()
        assert stat.S_IMODE(info.st_mode) == 0o2770
        assert (info.st_uid, info.st_gid) == (spool.root.stat().st_uid, spool.root.stat().st_gid)
    enqueue(spool, "2")
    assert [o.result for o in worker.run(once=True)] == ["saved"]


def test_a_heartbeat_is_recorded_for_sattr_status(tmp_path: Path, ruleset: RuleSet) -> None:
    worker, spool, _ = make(tmp_path, ruleset, {"2": record("2", "FAILED", "1:0")})
    enqueue(spool, "2")
    worker.run(once=True)
    beat = Store(tmp_path / "v.sqlite").heartbeat(str(spool.root))
    assert beat is not None and beat["pid"] > 0
    assert beat["info"]["results"] == {"saved": 1}
    assert beat["info"]["processes"] == 1


def test_a_round_of_admin_comment_retries_stops_at_the_first_failure(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """While Slurm still refuses, one failed write ends the round: the others wait for the
    next one, so a hanging slurmdbd costs one timeout per round, not one per job."""
    from attribution import worker as worker_module

    now = [time.time() + 1]
    jobs = {j: record(j, "FAILED", "1:0") for j in ("2", "3", "4")}
    worker, spool, _ = make(tmp_path, ruleset, jobs)
    flaky = FlakyComments(worker.backend.jobs)  # type: ignore[attr-defined]
    worker.backend = flaky
    worker.clock = lambda: now[0]
    for j in ("2", "3", "4"):
        enqueue(spool, j)
    worker.run(once=True)
    assert flaky.attempts == 3  # each job's first write, as it was diagnosed
    now[0] += worker_module.COMMENT_RETRY_FIRST
    assert worker.retry_comments() == 0
    assert flaky.attempts == 4  # one more try, then the round ended
    flaky.down = False
    now[0] += worker_module.COMMENT_RETRY_MAX
    assert worker.retry_comments() == 3


def test_a_spool_that_refuses_claims_is_not_hammered(
    tmp_path: Path, ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries that cannot be claimed (a spool remounted read-only) are tried again each
    poll_interval, not in a busy loop that floods the log."""
    import errno
    import threading

    worker, spool, _ = make(tmp_path, ruleset, {}, poll_interval=0.2)
    enqueue(spool, "2")
    tries = []

    def refuse(key: str):  # type: ignore[no-untyped-def]
        tries.append(key)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(spool, "claim", refuse)
    worker.spool = spool
    thread = threading.Thread(target=worker.run)
    thread.start()
    time.sleep(1.0)
    worker.stop()
    thread.join(timeout=10)
    assert 2 <= len(tries) <= 8, len(tries)


def test_a_job_name_with_a_separator_cannot_keep_the_verdict_out_of_the_admin_comment(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """A name with the field separator can shift sacct's line, so the AdminComment read with
    the job ("not-yours") is not trusted: Slurm is asked again, and the line is written."""
    from dataclasses import replace

    forged = replace(record("2", "FAILED", "1:0"), name="train\x1fx", admin_comment="not-yours")
    worker, spool, backend = make(tmp_path, ruleset, {"2": forged})
    enqueue(spool, "2")
    assert [o.result for o in worker.run(once=True)] == ["saved"]
    assert backend.comments[("2", "AdminComment")].startswith("sattr1 ")


def test_a_spool_subdirectory_replaced_by_a_link_is_refused(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """SlurmUser may write the spool: a link put in place of done/ (or alloc/, tmp/) would
    have the root worker prune or unlink files where it points. The worker refuses to start
    and touches nothing there."""
    import shutil

    from attribution.errors import SpoolError

    worker, spool, _ = make(tmp_path, ruleset, {"2": record("2", "FAILED", "1:0")})
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    old = time.time() - 30 * 86400
    os.utime(victim / "thesis.tex", (old, old))
    for name in ("done", "alloc"):
        shutil.rmtree(spool.dir(name))
        spool.dir(name).symlink_to(victim)
        enqueue(spool, "2")
        with pytest.raises(SpoolError, match="symbolic link"):
            worker.run(once=True)
        assert (victim / "thesis.tex").read_text() == "years of work"
        spool.dir(name).unlink()
        spool.dir(name).mkdir()


def test_a_job_slurm_has_no_record_of_yet_waits_instead_of_failing(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """slurmctld down with the job's records still queued: "not in sacct or scontrol (yet)"
    more often than max_attempts does not move the entry to failed/ within a day; other
    errors still count (and a day-old entry's tries count again)."""
    from attribution.worker import NOT_READY_PATIENCE

    now = [time.time() + 1]
    jobs: dict[str, JobRecord | Exception] = {
        "3": NotReady("job 3 is not in sacct or scontrol (yet)"),
        "4": SlurmError("sacct failed: timed out"),
    }
    worker, spool, _ = make(tmp_path, ruleset, jobs, retries={"max_attempts": 3, "backoff": 1})
    worker.clock = worker.spool.clock = lambda: now[0]
    enqueue(spool, "3")
    enqueue(spool, "4")
    for _ in range(6):
        worker.run(once=True)
        now[0] += 7200
    assert (spool.dir("new") / "c_3_0").exists()
    assert (spool.dir("failed") / "c_4_0").exists()
    now[0] += NOT_READY_PATIENCE
    for _ in range(4):
        worker.run(once=True)
        now[0] += 7200
    assert (spool.dir("failed") / "c_3_0").exists()
