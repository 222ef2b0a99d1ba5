"""Many jobs with a few Slurm calls (``CliBackend.get_jobs``) and the reconciliation sweep's
query (``CliBackend.ended_jobs``), against sacct output recorded on Slurm 22.05 and fakes of
the commands' edges (a forged job name, a failing sacct, a down slurmctld)."""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import pytest

from attribution.errors import SlurmError
from attribution.hostlist import expand
from attribution.model import JobRecord
from attribution.slurm.backend import EndedJob, JobRef, NotReady
from attribution.slurm.cli import (
    BATCH_IDS,
    CTL_PAUSE,
    DELIMITER,
    OTHER_FIELDS,
    CliBackend,
    Completed,
)
from attribution.slurm.pyslurm_backend import PyslurmBackend
from tests.pipeline.conftest import FIXTURES

D = DELIMITER
INVALID = Completed(1, "", "slurm_load_jobs error: Invalid job id specified\n")
DOWN = Completed(
    1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
)
CONFIG = Completed(0, "ClusterName             = c1\nMinJobAge               = 600 sec\n", "")

Item = tuple[JobRef, Mapping[str, str] | None, float | None]


SACCT_FIELDS_22_05 = (FIXTURES / "sacct-e-22.05.txt").read_text()


class Fake:
    """A runner answering each Slurm command through ``answer`` and keeping every argv;
    ``sacct -e`` (which fields sacct has) and ``sacct --version`` it answers itself, with
    22.05's recorded list (unless given ``fields``) and version, and does not keep."""

    def __init__(
        self, answer: Callable[[list[str]], Completed], fields: str = SACCT_FIELDS_22_05
    ) -> None:
        self.answer = answer
        self.fields = fields
        self.fields_asked = 0
        self.calls: list[list[str]] = []
        self.envs: list[Mapping[str, str]] = []

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        if argv[0].endswith("sacct") and list(argv[1:]) == ["-e"]:
            self.fields_asked += 1
            return Completed(0, self.fields, "")
        if argv[0].endswith("sacct") and list(argv[1:]) == ["--version"]:
            return Completed(0, "slurm 22.05.8\n", "")
        self.calls.append(list(argv))
        self.envs.append(env)
        return self.answer(list(argv))

    def count(self, tool: str, *words: str) -> int:
        return sum(1 for c in self.calls if c[0].endswith(tool) and all(w in c for w in words))


def arg(argv: Sequence[str], flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


def outcome(result: JobRecord | Exception) -> object:
    """What a result says, comparable between get_jobs and get_job."""
    if isinstance(result, JobRecord):
        return result
    return (type(result).__name__, str(result))


def each(backend: CliBackend, items: Sequence[Item]) -> list[JobRecord | Exception]:
    out: list[JobRecord | Exception] = []
    for ref, env, spooled_at in items:
        try:
            out.append(backend.get_job(ref, env, spooled_at))
        except SlurmError as exc:
            out.append(exc)
    return out


# ------------------------------------------------------------------ recorded on 22.05


def recorded() -> dict[str, str]:
    """``$ command`` -> output from ``sacct-batch-22.05.txt`` (delimiter recorded as ``|``)."""
    out: dict[str, str] = {}
    key = None
    for line in (FIXTURES / "sacct-batch-22.05.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("$ "):
            key = line[2:]
            out[key] = ""
        elif key is not None:
            out[key] += line.replace("|", D) + "\n"
    return out


def replay(outputs: Mapping[str, str]) -> Fake:
    def answer(argv: list[str]) -> Completed:
        if argv[:3] == ["scontrol", "show", "job"]:
            return INVALID
        key = " ".join(argv).replace(D, "|")
        if key not in outputs:
            raise AssertionError(f"not recorded: {key}")
        return Completed(0, outputs[key], "")

    return Fake(answer)


LATER = 1796167907 + 30 * 86400  # a month after the recording: slurmctld holds none of them
IDS = ["429", "429_3", "441", "430", "431_2", "445", "432", "499", "500", "999999", "431_9"]


def test_a_batch_gives_what_each_job_alone_gives() -> None:
    """The recorded batch: an array (all its tasks), one task by A_T and by its raw id, a job
    requeued while running and one requeued after it ended (two runs each), a heterogeneous
    job and an unsplit array cancelled while pending, and jobs sacct does not know."""
    outputs = recorded()
    items: list[Item] = [(JobRef.parse(i), None, None) for i in IDS]
    items += [  # the two runs of job 430, told apart by when the hook spooled them
        (JobRef.parse("430"), None, 1796167373.6),
        (JobRef.parse("430"), None, 1796167524.2),
    ]
    batch_fake = replay(outputs)
    many = CliBackend(runner=batch_fake, retries=0, clock=lambda: LATER).get_jobs(items)
    assert batch_fake.count("sacct") == 2  # one of the fields nobody writes, one of the texts
    assert batch_fake.count("scontrol", "job") == 2  # only the two jobs sacct does not know
    assert batch_fake.count("scontrol", "config") == 1

    one = each(CliBackend(runner=replay(outputs), retries=0, clock=lambda: LATER), items)
    assert [outcome(r) for r in many] == [outcome(r) for r in one]

    got = dict(zip([*IDS, "430@run0", "430@run1"], many, strict=True))
    records = {k: v for k, v in got.items() if isinstance(v, JobRecord)}
    assert records["429"].display_id == "429_6"  # the array's newest record
    assert (records["429_3"].job_id, records["429_3"].array_job_id) == ("441", "429")
    assert records["441"] == records["429_3"]
    assert (records["430"].state, records["430"].start) == (
        "COMPLETED",
        datetime.fromtimestamp(1796167504, UTC),
    )
    assert records["430@run1"] == records["430"]
    assert isinstance(got["430@run0"], NotReady)  # that run is REQUEUED, not ended
    assert (records["499"].state, records["499"].exit_code) == ("FAILED", "2:0")
    assert records["445"].display_id == "446" and records["445"].nodes == ()
    assert (records["431_2"].work_dir, records["431_2"].name) == ("/tmp/batchjobs", "wrap")
    assert records["500"].state == "CANCELLED"
    for unknown in ("999999", "431_9"):
        assert isinstance(got[unknown], NotReady), got[unknown]


# ------------------------------------------------------------------ a forged job name


def two_users(text_output: str) -> Fake:
    """Jobs 777 (mallory) and 778 (alice), sacct's texts as given; alone, each job's own."""

    def core(job: str, user: str) -> str:
        values = [job, job, "c1", user, "1001", "acct", "gpu", "FAILED", "1:0", "0:0", "None"]
        values += ["1767261600", "1767265200", "01:00:00", "gn1", "cpu=1"]
        return D.join(values) + "\n"

    alone = {"777": f"777{D}/home/mallory{D}x{D}\n", "778": f"778{D}/home/alice{D}train{D}\n"}

    def answer(argv: list[str]) -> Completed:
        if argv[0] == "scontrol":
            return INVALID if "job" in argv else CONFIG
        ids, fields = arg(argv, "-j").split(","), arg(argv, "-o")
        if "JobName" not in fields:
            users = {"777": "mallory", "778": "alice"}
            return Completed(0, "".join(core(j, users[j]) for j in ids), "")
        return Completed(0, text_output if len(ids) > 1 else alone[ids[0]], "")

    return Fake(answer)


@pytest.mark.parametrize(
    "name",
    [
        f"x\n778{D}/tmp/evil{D}evil",  # adds a row for 778 before its real one
        f"x{D}y\n778",  # ends 777's row early and swallows 778's real row into a shifted one
        f"x{D}\n778{D}/tmp/evil{D}evil",  # a whole well-formed row for 778 before the real one
        f"x{D}y",  # no newline: the line has one field too many
    ],
)
def test_a_job_name_cannot_forge_another_jobs_texts_in_a_batch(name: str) -> None:
    """Mallory names job 777 so that the batched text output holds a row for alice's job 778
    before the real one: the batch is not trusted, each job is read alone (as get_job)."""
    forged = f"777{D}/home/mallory{D}{name}{D}\n778{D}/home/alice{D}train{D}\n"
    fake = two_users(forged)
    items: list[Item] = [(JobRef.parse("777"), None, None), (JobRef.parse("778"), None, None)]
    mallory, alice = CliBackend(runner=fake, retries=0, clock=lambda: 1767265200).get_jobs(items)
    assert isinstance(alice, JobRecord) and isinstance(mallory, JobRecord)
    assert (alice.work_dir, alice.name, alice.user) == ("/home/alice", "train", "alice")
    assert mallory.work_dir == "/home/mallory"
    assert fake.count("sacct") == 4  # the batch of two, then the texts of each job alone


def test_clean_texts_are_read_once_for_the_batch() -> None:
    clean = f"777{D}/home/mallory{D}x{D}\n778{D}/home/alice{D}train{D}\n"
    fake = two_users(clean)
    items: list[Item] = [(JobRef.parse("777"), None, None), (JobRef.parse("778"), None, None)]
    mallory, alice = CliBackend(runner=fake, retries=0, clock=lambda: 1767265200).get_jobs(items)
    assert isinstance(alice, JobRecord) and alice.work_dir == "/home/alice"
    assert isinstance(mallory, JobRecord) and mallory.name == "x"
    assert fake.count("sacct") == 2


# ------------------------------------------------------------------ failures and chunks


def synthetic(ended: int, *, fail_cluster: str | None = None, fail_texts: bool = False) -> Fake:
    """sacct knows every job id below 900000 (one FAILED allocation row each, ended at
    ``ended``); sacct fails on ``fail_cluster`` (and for the texts when ``fail_texts``)."""

    def answer(argv: list[str]) -> Completed:
        if argv[0] == "scontrol":
            return INVALID if "job" in argv else CONFIG
        if fail_cluster and "-M" in argv and arg(argv, "-M") == fail_cluster:
            return Completed(1, "", "sacct: error: Problem talking to the database\n")
        fields = arg(argv, "-o").split(",")
        if fail_texts and "JobName" in fields:
            return Completed(1, "", "sacct: error: slurmdbd: Connection refused\n")
        out = []
        for job in arg(argv, "-j").split(","):
            if int(job) >= 900000:
                continue
            values = {"JobID": job, "JobIDRaw": job, "Cluster": "c1", "User": "u", "UID": "7"}
            values |= {"State": "FAILED", "ExitCode": "1:0", "Start": str(ended - 60)}
            values |= {"End": str(ended), "NodeList": "n1", "WorkDir": f"/w/{job}"}
            out.append(D.join(values.get(f, "") for f in fields) + "\n")
        return Completed(0, "".join(out), "")

    return Fake(answer)


def test_a_failed_sacct_is_the_error_of_every_job_of_its_batch() -> None:
    fake = synthetic(1767265200, fail_cluster="c2")
    items: list[Item] = [
        (JobRef(job_id="11"), None, None),
        (JobRef(job_id="12", cluster="c2"), None, None),
        (JobRef(job_id="13", cluster="c2"), None, None),
        (JobRef(job_id="14"), None, None),
    ]
    out = CliBackend(runner=fake, retries=0, clock=lambda: 1767265200).get_jobs(items)
    assert [r.job_id for r in out if isinstance(r, JobRecord)] == ["11", "14"]
    assert out[1] is out[2]
    assert isinstance(out[1], SlurmError) and "Problem talking to the database" in str(out[1])
    with pytest.raises(SlurmError, match="Problem talking"):
        CliBackend(runner=fake, retries=0).get_job(JobRef(job_id="12", cluster="c2"))


def test_failed_texts_fail_only_the_jobs_sacct_knows() -> None:
    fake = synthetic(1767265200, fail_texts=True)
    items: list[Item] = [(JobRef(job_id="21"), None, None), (JobRef(job_id="900001"), None, None)]
    known, unknown = CliBackend(runner=fake, retries=0, clock=lambda: 1767265200).get_jobs(items)
    assert type(known) is SlurmError and "Connection refused" in str(known)
    assert isinstance(unknown, NotReady)


def test_many_jobs_are_asked_in_batches_of_at_most_batch_ids() -> None:
    ids = [str(1000 + i) for i in range(450)]
    fake = synthetic(1767265200)
    items: list[Item] = [(JobRef(job_id=i), None, None) for i in reversed(ids)]
    out = CliBackend(runner=fake, retries=0, clock=lambda: 1767265200 + 10_000).get_jobs(items)
    assert [r.job_id for r in out if isinstance(r, JobRecord)] == list(reversed(ids))
    assert [r.work_dir for r in out if isinstance(r, JobRecord)][:2] == ["/w/1449", "/w/1448"]
    sizes = [len(arg(c, "-j").split(",")) for c in fake.calls if c[0] == "sacct"]
    assert sizes == [BATCH_IDS, BATCH_IDS, BATCH_IDS, BATCH_IDS, 50, 50]  # fields, texts
    assert fake.count("scontrol", "job") == 0  # all ended long before: slurmctld forgot them


# ------------------------------------------------------------------ scontrol


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_scontrol_only_while_slurmctld_may_hold_the_job() -> None:
    """MinJobAge (600 s here) is read once an hour; a job that ended longer ago is not
    looked up in slurmctld."""
    clock = Clock(1767265200 + 500)
    fake = synthetic(1767265200)
    backend = CliBackend(runner=fake, retries=0, clock=clock)
    backend.get_jobs([(JobRef(job_id="31"), None, None)])
    assert fake.count("scontrol", "job") == 1
    clock.now += 200  # 700 s after the end
    backend.get_jobs([(JobRef(job_id="31"), None, None)])
    assert fake.count("scontrol", "job") == 1
    assert fake.count("scontrol", "config") == 1
    clock.now += 3600
    backend.get_jobs([(JobRef(job_id="31"), None, None)])
    assert fake.count("scontrol", "config") == 2


def test_min_job_age_defaults_to_300_seconds_when_slurmctld_cannot_tell() -> None:
    def answer(argv: list[str]) -> Completed:
        if argv[:3] == ["scontrol", "show", "config"]:
            return Completed(1, "", "scontrol: error: some other trouble\n")
        return synthetic(1767265200).answer(argv)

    fake = Fake(answer)
    clock = Clock(1767265200 + 299)
    backend = CliBackend(runner=fake, retries=0, clock=clock)
    backend.get_jobs([(JobRef(job_id="41"), None, None)])
    assert fake.count("scontrol", "job") == 1
    clock.now += 2  # 301 s
    backend.get_jobs([(JobRef(job_id="41"), None, None)])
    assert fake.count("scontrol", "job") == 1


@pytest.mark.parametrize("trouble", ["unreachable", "timeout"])
def test_a_down_slurmctld_costs_one_try_a_minute(trouble: str) -> None:
    """Jobs sacct does not know yet need scontrol; while slurmctld does not answer, one try a
    minute (not one per job, not retried), and each of those jobs stays NotReady."""

    def answer(argv: list[str]) -> Completed:
        if argv[0] == "scontrol":
            if trouble == "timeout":
                raise subprocess.TimeoutExpired(argv, 30)
            return DOWN
        return synthetic(1767265200).answer(argv)

    fake = Fake(answer)
    clock = Clock(1767265200)
    backend = CliBackend(runner=fake, retries=2, clock=clock)
    items: list[Item] = [(JobRef(job_id=str(900000 + i)), None, None) for i in range(5)]
    out = backend.get_jobs(items)
    assert all(isinstance(r, NotReady) for r in out)
    assert fake.count("scontrol") == 1
    clock.now += CTL_PAUSE / 2
    backend.get_jobs(items)
    assert fake.count("scontrol") == 1
    clock.now += CTL_PAUSE / 2 + 1
    backend.get_jobs(items)
    assert fake.count("scontrol") == 2


def test_known_jobs_are_read_from_sacct_while_slurmctld_is_down() -> None:
    def answer(argv: list[str]) -> Completed:
        return DOWN if argv[0] == "scontrol" else synthetic(1767265200).answer(argv)

    fake = Fake(answer)
    items: list[Item] = [(JobRef(job_id=str(50 + i)), None, None) for i in range(5)]
    out = CliBackend(runner=fake, retries=2, clock=lambda: 1767265210).get_jobs(items)
    assert [r.state for r in out if isinstance(r, JobRecord)] == ["FAILED"] * 5
    assert fake.count("scontrol") == 1


def test_pyslurm_backend_hands_batches_and_sweeps_to_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", types.ModuleType("pyslurm"))
    fake = synthetic(1767265200)
    backend = PyslurmBackend(CliBackend(runner=fake, retries=0, clock=lambda: 1767265200))
    out = backend.get_jobs([(JobRef(job_id="61"), None, None), (JobRef(job_id="62"), None, None)])
    assert [r.job_id for r in out if isinstance(r, JobRecord)] == ["61", "62"]
    assert fake.count("sacct") == 2


# ------------------------------------------------------------------ ended_jobs

# sacct -a -X -D -P -n -S -E -s <final states> -M testcluster -o ENDED_FIELDS on 22.05 (rows of
# the CI cluster; job 14's two runs are the NODE_FAIL-requeued job of the shared captures,
# admincomment-requeued.txt, with its times moved into this window)
SINCE, UNTIL = 1796167370, 1796167600
WINDOW = """\
432|432|testcluster|slurmtest|1001|debug|FAILED|1:0|0:0|1796167369|1796167369|1796167370|1|vm
14|14|testcluster|root|0|debug|NODE_FAIL|0:0|0:0|1796167369|1796167369|1796167380|1|vm
429_1|439|testcluster|slurmtest|1001|debug|FAILED|3:0|0:0|1796167369|1796167369|1796167370|1|vm
429_2|440|testcluster|slurmtest|1001|debug|FAILED|3:0|0:0|1796167369|1796167369|1796167370|1|vm
429_6|429|testcluster|slurmtest|1001|debug|FAILED|3:0|0:0|1796167369|1796167369|1796167370|1|vm
14|14|testcluster|root|0|debug|COMPLETED|0:0|0:0|1796167381|1796167390|1796167420|1|vm
430|430|testcluster|slurmtest|1001|debug|COMPLETED|0:0|0:0|1796167375|1796167504|1796167524|1|vm
445+0|445|testcluster|slurmtest|1001|debug|CANCELLED by 0|0:0|0:0|1796167511|None|1796167539|1|None assigned
500_[1-3]|500|testcluster|slurmtest|1001|debug|CANCELLED by 0|0:0|0:0|1796167511|1796167539|1796167539|1|None assigned
451|451|testcluster|slurmtest|1001|debug|RUNNING|0:0|0:0|1796167500|1796167500|Unknown|1|vm
452|452|testcluster|slurmtest|1001|debug|FAILED|2:0|0:0|1796167300|1796167300|1796167369|1|vm
453|453|testcluster|slurmtest|1001|debug|FAILED|2:0|0:0|1796167300|1796167300|1796167600|1|vm
454|454|testcluster|slurmtest|1001|debug|REQUEUED|0:0|0:0|1796167300|1796167300|1796167500|1|vm
"""
# sacct -a -X -D -j <those jobs> -o JobIDRaw,Submit: every run, also those before the window
# (430's first run ended at 1796167373; -j 429_6 is that task only)
RUNS = """\
430|1796167369
432|1796167369
14|1796167369
439|1796167369
440|1796167369
429|1796167369
14|1796167381
430|1796167375
445|1796167511
"""


def sweep_fake(fields_listed: str = "JobID JobIDRaw State End") -> Fake:
    def answer(argv: list[str]) -> Completed:
        assert argv[0] == "sacct", argv
        if "-S" in argv:
            return Completed(0, WINDOW.replace("|", D), "")
        return Completed(0, RUNS.replace("|", D), "")

    return Fake(answer, fields=fields_listed + "\n")


def test_ended_jobs_in_a_window() -> None:
    fake = sweep_fake()
    since = datetime.fromtimestamp(SINCE, UTC)
    until = datetime.fromtimestamp(UNTIL, UTC)
    ended = CliBackend(runner=fake, retries=0).ended_jobs("testcluster", since, until)
    got = {(e.job_id, e.restart_count): e for e in ended}
    assert sorted(got) == [
        ("14", 0),
        ("14", 1),
        ("429", 0),
        ("430", 1),
        ("432", 0),
        ("439", 0),
        ("440", 0),
        ("445", 0),
    ]
    # the running job, the ones that ended before or at the end of the window, a REQUEUED
    # run and the unsplit array record (no run of its own) are not there
    assert got["439", 0] == EndedJob(
        job_id="439",
        cluster="testcluster",
        state="FAILED",
        exit_code="3:0",
        derived_exit_code="0:0",
        end=datetime.fromtimestamp(1796167370, UTC),
        user="slurmtest",
        uid="1001",
        array_job_id="429",
        array_task_id="1",
        nodes=1,
        nodelist="vm",
        partition="debug",
    )
    assert (got["429", 0].array_job_id, got["429", 0].array_task_id) == ("429", "6")
    assert (got["14", 0].state, got["14", 1].state) == ("NODE_FAIL", "COMPLETED")
    assert got["445", 0].state == "CANCELLED"
    assert (got["445", 0].nodes, got["445", 0].nodelist) == (0, None)
    assert got["430", 1].env()["SLURM_JOB_RESTART_COUNT"] == "1"

    window, runs = fake.calls
    assert (arg(window, "-S"), arg(window, "-E")) == ("2026-12-01T23:22:50", "2026-12-01T23:26:40")
    assert arg(window, "-M") == "testcluster" and "-D" in window and "-X" in window
    assert set(arg(window, "-s").split(",")) >= {"COMPLETED", "FAILED", "NODE_FAIL", "TIMEOUT"}
    assert "RUNNING" not in arg(window, "-s") and "SLUID" not in arg(window, "-o")
    assert fake.envs[0]["TZ"] == "UTC0"  # -S/-E in UTC: no ambiguous daylight-saving hour
    assert arg(runs, "-j").split(",") == ["432", "14", "429_1", "429_2", "429_6", "430", "445"]


def test_ended_jobs_asks_for_the_sluid_where_sacct_has_it() -> None:
    fake = sweep_fake("JobID JobIDRaw SLUID State End")
    backend = CliBackend(runner=fake, retries=0)
    since = datetime.fromtimestamp(SINCE, UTC)
    backend.ended_jobs(None, since, datetime.fromtimestamp(UNTIL, UTC))
    backend.ended_jobs(None, since, datetime.fromtimestamp(UNTIL, UTC))
    window = next(c for c in fake.calls if "-S" in c)
    assert arg(window, "-o").endswith(",SLUID") and "-M" not in window
    assert fake.fields_asked == 1


def test_ended_jobs_raises_when_sacct_fails() -> None:
    fake = Fake(lambda argv: Completed(1, "", "sacct: error: Problem talking to the database\n"))
    since = datetime.fromtimestamp(SINCE, UTC)
    with pytest.raises(SlurmError, match="Problem talking"):
        CliBackend(runner=fake, retries=0).ended_jobs(None, since, since)


def test_jobs_slurmctld_still_holds_get_records_while_slurmdbd_is_down() -> None:
    """slurmdbd down: sacct fails, but a job that ended within MinJobAge is still in
    slurmctld's memory with its final state; its record comes from there, so the verdict is
    not held back (its AdminComment write waits for slurmdbd). A job slurmctld does not hold,
    or holds unfinished, keeps the sacct error (issue 12)."""
    now = 1767265200
    line = (FIXTURES / "scontrol-job-10.txt").read_text().splitlines()[0]
    ctl = {
        "10": line.replace("JobState=COMPLETING", "JobState=FAILED").replace(
            "ExitCode=0:15", "ExitCode=1:0"
        ),
        "11": line.replace("JobId=10", "JobId=11").replace(
            "JobState=COMPLETING", "JobState=RUNNING"
        ),
    }

    def answer(argv: list[str]) -> Completed:
        if argv[:3] == ["scontrol", "show", "job"]:
            found = ctl.get(argv[-1])
            return Completed(0, found + "\n", "") if found else INVALID
        if argv[0] == "scontrol":
            return CONFIG
        return Completed(
            1, "", "sacct: error: Problem talking to the database: Connection refused\n"
        )

    fake = Fake(answer)
    backend = CliBackend(runner=fake, retries=0, clock=lambda: now)
    env = {"SLURM_JOB_ID": "10", "SLURM_CLUSTER_NAME": "c1", "SLURM_JOB_RESTART_COUNT": "0"}
    items: list[Item] = [
        (JobRef(job_id="10"), env, now - 20.0),
        (JobRef(job_id="11"), None, now - 20.0),
        (JobRef(job_id="12"), None, now - 20.0),
        (JobRef(job_id="13"), None, now - 3600.0),  # past MinJobAge: slurmctld is not asked
    ]
    out = backend.get_jobs(items)
    assert isinstance(out[0], JobRecord)
    assert (out[0].job_id, out[0].state, out[0].exit_code) == ("10", "FAILED", "1:0")
    assert out[0].nodes == ("vm",)
    for result in out[1:]:
        assert isinstance(result, SlurmError) and "Problem talking" in str(result)
    assert fake.count("scontrol", "show", "job", "13") == 0
    # the spooled run 0 of a job slurmctld now holds as its run 1 (requeued): not its record
    run0 = {**env, "SLURM_JOB_ID": "14"}
    ctl["14"] = ctl["10"].replace("JobId=10", "JobId=14").replace("Restarts=0", "Restarts=1")
    (requeued,) = backend.get_jobs([(JobRef(job_id="14"), run0, now - 20.0)])
    assert isinstance(requeued, SlurmError) and "Problem talking" in str(requeued)


def test_other_jobs_of_a_batch_equal_each_jobs_own_answer() -> None:
    """One sacct for the whole batch's nodes and window gives each job exactly the other
    jobs its own question would: those on its nodes that overlapped its window."""
    t0 = 1767265200
    others = [  # JobIDRaw, start, end, nodes, user
        ("50", t0 - 500, t0 - 400, "n1", "a"),  # before every window
        ("51", t0 - 100, t0 + 10, "n[1-2]", "b"),  # on both nodes; overlaps job 1 only
        ("52", t0 + 150, t0 + 170, "n2", "c"),  # only job 2's window
        ("53", t0 + 5, 0, "n3", "d"),  # still running, on job 3's node
        ("54", 0, 0, "n1", "e"),  # never started
        ("1", t0, t0 + 60, "n1", "u"),  # job 1 itself
    ]

    def answer(argv: list[str]) -> Completed:
        s_at = datetime.fromisoformat(arg(argv, "-S")).replace(tzinfo=UTC).timestamp()
        e_at = datetime.fromisoformat(arg(argv, "-E")).replace(tzinfo=UTC).timestamp()
        asked = set(expand(arg(argv, "-N")))
        rows = []
        for raw, start, end, nodes, user in others:
            if not set(expand(nodes)) & asked:
                continue
            if start and (start > e_at or (end and end < s_at)):
                continue
            values = {"JobIDRaw": raw, "Start": str(start) if start else "Unknown"}
            values |= {"End": str(end) if end else "Unknown", "NodeList": nodes, "User": user}
            rows.append(D.join(values[f] for f in OTHER_FIELDS) + "\n")
        return Completed(0, "".join(rows), "")

    def job(job_id: str, nodes: tuple[str, ...]) -> JobRecord:
        return JobRecord(job_id=job_id, cluster="c1", nodes=nodes, nodelist=",".join(nodes))

    at = lambda x: datetime.fromtimestamp(x, UTC)  # noqa: E731
    items = [
        (job("1", ("n1",)), at(t0 - 60), at(t0 + 60)),
        (job("2", ("n2",)), at(t0 + 100), at(t0 + 200)),
        (job("3", ("n3",)), at(t0), at(t0 + 30)),
        (job("4", ()), at(t0), at(t0 + 30)),
    ]
    fake = Fake(answer)
    backend = CliBackend(runner=fake, retries=0)
    batched = backend.other_jobs_many(items)
    assert fake.count("sacct") == 1
    alone = [backend.other_jobs(j, s, e) for j, s, e in items]
    assert batched == alone
    assert {n: [o.job_id for o in js] for n, js in batched[0].items()} == {"n1": ["51"]}
    assert {n: [o.job_id for o in js] for n, js in batched[1].items()} == {"n2": ["52"]}
    assert {n: [o.job_id for o in js] for n, js in batched[2].items()} == {"n3": ["53"]}
    assert batched[3] == {}
