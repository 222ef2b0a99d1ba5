"""Hostile and odd inputs to the Slurm-version handling of the command-line backend, on
output recorded from 22.05, 24.11 and 26.05 (tests/pipeline/test_slurm_versions.py) with one
thing changed each: accounting that has not recorded the spooled run yet, a ``sacct -e`` or
``sacct --version`` that fails or prints nothing usable, numbers no Slurm prints, a job whose
own free text (name, comment, command) imitates ``scontrol``'s ``Key=value`` pairs, and a
heartbeat whose Slurm report holds newlines. Every Slurm command is a fake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.config import Config
from attribution.errors import SlurmError
from attribution.model import JobRecord
from attribution.reconcile import reconcile, spool_key
from attribution.slurm.backend import EndedJob, JobRef, NotReady
from attribution.slurm.cli import DELIMITER, FIELDS_RETRY, CliBackend, Completed
from attribution.slurm.hookenv import key_from_env
from attribution.slurm.resolve import with_allocation
from attribution.spool import Spool
from attribution.status import Status, WorkerState, render_text
from attribution.store import Store
from tests.pipeline.test_slurm_versions import ASKED, CTL_26, FIELDS, NOW, REQUEUED, VERSION

SINCE = datetime.fromtimestamp(1796179000, UTC)
UNTIL = datetime.fromtimestamp(1796180000, UTC)
# the two runs of the requeued job 1 on 26.05 (REQUEUED), as sacct and the hook name them
RUN0 = {"SLURM_JOB_SLUID": "s1H1M8TA88K400", "SLURM_JOB_RESTART_COUNT": "0"}
RUN1 = {"SLURM_JOB_SLUID": "s1H1M8TA8PFB00", "SLURM_JOB_RESTART_COUNT": "1"}
HOOK = {"SLURM_JOB_ID": "1", "SLURM_CLUSTER_NAME": "testcluster", "SLURM_JOB_NAME": "wrap"}


def recorded(version: str) -> list[dict[str, str]]:
    """The recorded rows of the requeued job (allocations and steps), by field name; Submit
    added (each run was submitted when it became eligible, its Start here)."""
    rows = []
    for line in REQUEUED[version].splitlines():
        row = dict(zip(ASKED.split(","), line.split("|"), strict=True))
        rows.append({**row, "Submit": row["Start"], "JobName": "wrap", "WorkDir": "/tmp"})
    return rows


class Slurm:
    """One Slurm's commands: ``sacct -e``, ``sacct --version``, ``scontrol show config`` and
    ``show job`` as given, and sacct rows as given (only the allocation rows and no REQUEUED
    one for the sweep's ``-S`` query, as sacct -X does). ``refuse``: fields sacct refuses."""

    def __init__(
        self,
        version: str,
        rows: list[dict[str, str]],
        *,
        ctl: str = "",
        fields: Completed | None = None,
        said: Completed | None = None,
        refuse: Sequence[str] = (),
    ) -> None:
        self.rows = rows
        self.ctl = ctl
        self.fields = fields or Completed(0, FIELDS[version], "")
        self.said = said or Completed(0, VERSION[version], "")
        self.refuse = set(refuse)
        self.calls: list[list[str]] = []

    def asked(self, *args: str) -> int:
        return sum(1 for c in self.calls if c[1:] == list(args))

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        args = list(argv[1:])
        self.calls.append([argv[0], *args])
        if argv[0] == "sacct" and args == ["-e"]:
            return self.fields
        if argv[0] == "sacct" and args == ["--version"]:
            return self.said
        if argv[0] == "scontrol":
            if args[:2] == ["show", "config"]:
                return Completed(0, "MinJobAge               = 600 sec\n", "")
            return Completed(0, self.ctl, "")
        fields = args[args.index("-o") + 1].split(",")
        for name in fields:
            if name in self.refuse:
                return Completed(1, "", f'sacct: error: Invalid field requested: "{name}"\n')
        out = []
        for row in self.rows:
            if "-X" in args and "." in row["JobID"]:
                continue
            if "-S" in args and row["State"] == "REQUEUED":
                continue
            out.append(DELIMITER.join(row.get(f, "") for f in fields))
        return Completed(0, "".join(r + "\n" for r in out), "")


def backend(slurm: Slurm, now: float = NOW) -> CliBackend:
    return CliBackend(runner=slurm, retries=0, clock=lambda: now)


# ------------------------------------------------------------------ which run accounting has

# slurmctld's record of the second run, with its times (scontrol prints epoch seconds under
# SLURM_TIME_FORMAT=%s)
CTL_26_TIMED = CTL_26.replace(" ExitCode=", " StartTime=1796179515 EndTime=1796179519 ExitCode=")


@pytest.mark.parametrize("refused", [(), ("SLUID",)])
def test_a_run_accounting_has_not_recorded_yet_is_not_read_from_an_earlier_run(
    refused: tuple[str, ...],
) -> None:
    """26.05: the hook spooled the second run; accounting has only the first run's record so
    far (records reach slurmdbd late). That record has another SLUID (or, when sacct gives no
    SLUIDs, another Restarts count): it is not the spooled run, whatever its End. The second
    run is described by slurmctld's own record, which is that run; never by the first run's
    state, exit code and times mixed with the second run's GPUs."""
    first_only = [r for r in recorded("26.05") if r["SLUID"] == RUN0["SLURM_JOB_SLUID"]]
    slurm = Slurm("26.05", first_only, ctl=CTL_26_TIMED, refuse=refused)
    env = {**HOOK, **RUN1}
    job = backend(slurm).get_job(JobRef.from_env(env), env, spooled_at=1796179519)
    assert (job.key, job.restart_count) == ("s1H1M8TA8PFB00", 1)
    assert (job.start, job.end) == (
        datetime.fromtimestamp(1796179515, UTC),
        datetime.fromtimestamp(1796179519, UTC),
    )
    assert dict(job.gres_detail) == {"ci-sid": "gpu:1(IDX:1)"}


def test_without_slurmctld_a_run_accounting_lacks_waits() -> None:
    first_only = [r for r in recorded("26.05") if r["SLUID"] == RUN0["SLURM_JOB_SLUID"]]
    slurm = Slurm("26.05", first_only)  # scontrol no longer holds the job
    env = {**HOOK, **RUN1}
    with pytest.raises(NotReady):
        backend(slurm).get_job(JobRef.from_env(env), env, spooled_at=1796179519)


def test_a_run_the_hook_spooled_without_a_sluid_keeps_the_hook_s_key() -> None:
    """26.05, a run the hook saw without a SLUID while accounting shows one: 26.05 gives a job
    that starts while slurmdbd is down no SLUID until slurmdbd has it (docs/compatibility.md),
    and a job that started before the upgrade to a Slurm whose hook gets SLUIDs has none in
    the hook either. The hook keyed the entry ``<cluster>_<job>_<restart>``; the verdict was
    stored under accounting's SLUID instead. A lookup by id (no entry) takes the SLUID."""
    second = [r for r in recorded("26.05") if r["SLUID"] == RUN1["SLURM_JOB_SLUID"]]
    slurm = Slurm("26.05", second)
    env = {**HOOK, "SLURM_JOB_RESTART_COUNT": "1"}
    cli = backend(slurm, now=NOW + 10_000)  # slurmctld has forgotten the job
    job = cli.get_job(JobRef.from_env(env), env, spooled_at=1796179519)
    assert job.key == key_from_env(env) == "testcluster_1_1"
    assert cli.get_job(JobRef.parse("1")).key == "s1H1M8TA8PFB00"


# ------------------------------------------------------------------ the sweep's keys


@pytest.mark.parametrize(
    "fields",
    [Completed(1, "", "sacct: error: Problem talking to the database\n"), Completed(0, "", "")],
)
def test_the_sweep_keys_runs_as_a_hook_that_keys_by_sluid_when_sacct_e_cannot_tell(
    fields: Completed,
) -> None:
    """26.05's hook keys every run by its SLUID. When ``sacct -e`` cannot tell the fields
    (it failed, as 22.05's does while slurmdbd is down, or listed nothing), the sweep keyed
    the runs ``<cluster>_<job>_<restart>`` with no other key to find the hook's entries by,
    and enqueued every run a second time."""
    slurm = Slurm("26.05", recorded("26.05"), fields=fields)
    ended = backend(slurm).ended_jobs(None, SINCE, UNTIL)
    assert [spool_key(e) for e in ended] == [RUN0["SLURM_JOB_SLUID"], RUN1["SLURM_JOB_SLUID"]]


def test_the_sweep_stops_rather_than_key_runs_without_the_sluid_the_hook_keys_by() -> None:
    slurm = Slurm("26.05", recorded("26.05"), refuse=("SLUID",))
    with pytest.raises(SlurmError, match="SLUID"):
        backend(slurm).ended_jobs(None, SINCE, UNTIL)


def test_an_empty_field_list_is_asked_again_only_after_the_retry_time() -> None:
    now = [NOW]
    slurm = Slurm("22.05", recorded("24.11"), fields=Completed(0, "", ""))
    cli = CliBackend(runner=slurm, retries=0, clock=lambda: now[0])
    for _ in range(3):
        cli.sacct(JobRef(job_id="1"))
    assert slurm.asked("-e") == 1
    now[0] += FIELDS_RETRY
    cli.sacct(JobRef(job_id="1"))
    assert slurm.asked("-e") == 2


@pytest.mark.parametrize("said", [Completed(0, "garbage\n", ""), Completed(1, "", "no\n")])
def test_a_version_sacct_cannot_tell_is_asked_again_only_after_the_retry_time(
    said: Completed,
) -> None:
    """Without a version, every job looked up by id with a SLUID in accounting asked
    ``sacct --version`` again: one more process per job of every batch."""
    now = [NOW]
    rows = []
    for job in range(2, 22):
        row = {**recorded("26.05")[2], "JobID": str(job), "JobIDRaw": str(job)}
        rows.append({**row, "SLUID": f"s1H1M8TA{job:06d}"})
    slurm = Slurm("26.05", rows, said=said)
    cli = CliBackend(runner=slurm, retries=0, clock=lambda: now[0])
    answers = cli.get_jobs([(JobRef(job_id=str(j)), None, None) for j in range(2, 22)])
    assert all(isinstance(a, JobRecord) for a in answers)
    assert cli.about()["version"] is None
    assert slurm.asked("--version") == 1
    now[0] += FIELDS_RETRY
    cli.about()
    assert slurm.asked("--version") == 2


@pytest.mark.parametrize(
    ("version", "field"),
    [("24.11", "Restarts"), ("24.11", "End"), ("24.11", "NNodes"), ("22.05", "Submit")],
)
def test_numbers_no_slurm_prints_do_not_stop_the_sweep(version: str, field: str) -> None:
    """A number Python will not read (more than 4,300 digits) raised ValueError out of
    ``ended_jobs``, and out of the worker's sweep: the worker stopped, and stopped again on
    every start, the window never passing. (22.05 has no Restarts: runs are numbered from
    every run's Submit time.)"""
    rows = recorded("24.11")
    rows[2] = {**rows[2], field: "9" * 5000}
    ended = backend(Slurm(version, rows)).ended_jobs(None, SINCE, UNTIL)
    assert [e.job_id for e in ended] == (["1"] if field != "End" else [])


def test_a_backend_bug_in_the_sweep_is_the_sweep_s_error(tmp_path: Path) -> None:
    config = Config.model_validate(
        {
            "spool": str(tmp_path / "spool"),
            "store": str(tmp_path / "v.sqlite"),
            "reconcile": {"clusters": ["c"]},
        }
    )
    spool = Spool(config.spool)
    spool.create(mode=0o755)

    class Broken:
        def ended_jobs(
            self, cluster: str | None, since: datetime, until: datetime
        ) -> list[EndedJob]:
            raise ValueError("a bug met on odd accounting data")

    (result,) = reconcile(config, Store(config.store), spool, Broken(), datetime.now(UTC))
    assert result.error is not None and "ValueError" in result.error
    assert result.enqueued == ()


# ------------------------------------------------------------------ a job's free text in scontrol


def ctl_line(
    version: str,
    *,
    name: str = "a",
    comment: str = "none",
    oversubscribe: str = "OK",
    exclusive: str = "NO",
    restarts: str = "0",
) -> str:
    """``scontrol show job -d -o 42`` as each version prints it, in Slurm's order
    (src/api/job_info.c): the job name right after JobId, its comment, command and work
    directory after OverSubscribe; 26.05 adds SLUID and Exclusive."""
    sluid = " SLUID=s1H1M8TA00004200" if version == "26.05" else ""
    excl = f" Exclusive={exclusive}" if version == "26.05" else ""
    return (
        f"JobId=42 JobName={name}{sluid} UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A"
        " Priority=1 Nice=0 Account=a QOS=normal JobState=FAILED Reason=NonZeroExitCode"
        f" Dependency=(null) Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=1:0"
        " DerivedExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A"
        " SubmitTime=1796179500 EligibleTime=1796179500 AccrueTime=1796179500"
        " StartTime=1796179502 EndTime=1796179505 Deadline=N/A Partition=debug"
        " AllocNode:Sid=h:1 ReqNodeList=(null) ExcNodeList=(null) NodeList=n1 BatchHost=n1"
        " NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*"
        " TRES=cpu=1,mem=500M,node=1,billing=1,gres/gpu=1 Socks/Node=*"
        " NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:1"
        "   Nodes=n1 CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:0)"
        " MinCPUsNode=1 MinMemoryNode=500M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00"
        f" OverSubscribe={oversubscribe}{excl} Contiguous=0 Licenses=(null) Network=(null)"
        f" Command=/home/alice/job.sh WorkDir=/home/alice Comment={comment} "
        " StdErr=/home/alice/o StdIn=/dev/null StdOut=/home/alice/o Power=\n"
    )


def job42(version: str, name: str) -> list[dict[str, str]]:
    row = {
        "JobID": "42",
        "JobIDRaw": "42",
        "Cluster": "testcluster",
        "User": "alice",
        "UID": "1001",
        "Account": "a",
        "Partition": "debug",
        "State": "FAILED",
        "ExitCode": "1:0",
        "DerivedExitCode": "0:0",
        "Reason": "None",
        "Start": "1796179502",
        "End": "1796179505",
        "Submit": "1796179500",
        "Timelimit": "UNLIMITED",
        "NodeList": "n1",
        "AllocTRES": "billing=1,cpu=1,gres/gpu=1,mem=500M,node=1",
        "JobName": name,
        "WorkDir": "/home/alice",
    }
    if version != "22.05":
        row |= {"Restarts": "0", "SLUID": "s1H1M8TA00004200"}
    return [row]


def looked_up(version: str, ctl: str, name: str, env: Mapping[str, str] | None) -> JobRecord:
    slurm = Slurm(version, job42(version, name), ctl=ctl)
    return backend(slurm, now=1796179530).get_job(JobRef(job_id="42", cluster=None), env)


def hook_env(version: str, name: str) -> dict[str, str]:
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_CLUSTER_NAME": "testcluster",
        "SLURM_JOB_NAME": name,
        "SLURM_JOB_RESTART_COUNT": "0",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1001",
    }
    if version == "24.11":
        env["SLURM_JOB_OVERSUBSCRIBE"] = "OK"
    if version == "26.05":
        env["SLURM_JOB_SLUID"] = "s1H1M8TA00004200"
    return env


FORGED = [
    # 22.05 and 24.11 print no Exclusive: a job named "a Exclusive=NODE" made one
    ("22.05", "a Exclusive=NODE", "none", True),
    ("24.11", "a Exclusive=NODE", "none", True),
    # a comment (printed after OverSubscribe) overrode the real OverSubscribe=OK
    ("22.05", "a", "x OverSubscribe=NO", True),
    # ... or added an Exclusive the version does not print
    ("24.11", "a", "x Exclusive=NODE", True),
    # 26.05, a run without the hook's environment (a reconciled entry, a lookup by id): the
    # comment overrode the real Exclusive=NO
    ("26.05", "a", "x Exclusive=NODE", False),
    # a newline in the name: the record read (the first line) is all the name's
    ("22.05", "a Restarts=0 OverSubscribe=NO\nJobId=43", "none", True),
]


@pytest.mark.parametrize(("version", "name", "comment", "hook"), FORGED)
def test_a_job_s_own_text_never_makes_it_exclusive(
    version: str, name: str, comment: str, hook: bool
) -> None:
    """A job had its nodes to itself is the fact that credits it with every other job's node
    evidence: no text a user writes may say it."""
    ctl = ctl_line(version, name=name, comment=comment)
    env = hook_env(version, name) if hook else None
    job = looked_up(version, ctl, name, env)
    assert job.state == "FAILED"
    assert job.exclusive is not True


def test_a_job_s_comment_cannot_give_it_gpus() -> None:
    ctl = ctl_line("22.05", comment="x Nodes=n1 CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:0-3)")
    job = looked_up("22.05", ctl, "a", hook_env("22.05", "a"))
    assert dict(job.gres_detail).get("n1") != "gpu:4(IDX:0-3)"


def test_a_job_s_name_cannot_make_it_an_array_task() -> None:
    """A plain job named ``x ArrayJobId=5 ArrayTaskId=3`` looked up while accounting is down
    was keyed ``<cluster>_5_3_0``: the key of another job's verdict."""
    name = "x ArrayJobId=5 ArrayTaskId=3"
    slurm = Slurm("22.05", [], ctl=ctl_line("22.05", name=name))
    slurm.fields = Completed(1, "", "sacct: error: Problem talking to the database\n")

    def down(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        if argv[0] == "sacct" and "-j" in argv:
            return Completed(1, "", "sacct: error: Problem talking to the database\n")
        return slurm(argv, timeout, env)

    cli = CliBackend(runner=down, retries=0, clock=lambda: 1796179530)
    env = {"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "testcluster", "SLURM_JOB_NAME": name}
    try:
        job = cli.get_job(JobRef.from_env(env), env, spooled_at=1796179506)
    except SlurmError:
        return  # no usable record: the entry waits for accounting
    assert job.key == "testcluster_42_0"


@pytest.mark.parametrize(
    ("version", "oversubscribe", "exclusive"),
    [("22.05", "NO", "NO"), ("24.11", "NO", "NO"), ("26.05", "NO", "NODE")],
)
def test_exclusive_use_each_version_reports_is_still_read(
    version: str, oversubscribe: str, exclusive: str
) -> None:
    ctl = ctl_line(version, oversubscribe=oversubscribe, exclusive=exclusive)
    job = looked_up(version, ctl, "a", None)
    assert job.exclusive is True
    assert dict(job.gres_detail) == {"n1": "gpu:1(IDX:0)"}
    plain = looked_up(version, ctl_line(version), "a", None)
    assert plain.exclusive is False


@pytest.mark.parametrize(
    "name", ["sweep lr=0.1 bs=32", "a Exclusive=NODE OverSubscribe=NO", "x\ny"]
)
@pytest.mark.parametrize(("oversubscribe", "exclusive"), [("NO", True), ("OK", False)])
@pytest.mark.parametrize("hook", [True, False])
def test_a_name_holding_key_value_pairs_is_read_as_the_name(
    name: str, oversubscribe: str, exclusive: bool, hook: bool
) -> None:
    """Where the name is known (the hook's environment, accounting), scontrol's text is read
    with the whole name as one value: a name such as ``sweep lr=0.1`` keeps slurmctld's
    record (its GPUs, its OverSubscribe), and a name imitating keys says nothing."""
    ctl = ctl_line("22.05", name=name, oversubscribe=oversubscribe)
    job = looked_up("22.05", ctl, name, hook_env("22.05", name) if hook else None)
    assert (job.name, job.exclusive) == (name, exclusive)
    assert dict(job.gres_detail) == {"n1": "gpu:1(IDX:0)"}
    alloc = with_allocation(replace(job, exclusive=None, gres_detail={}), ctl)
    assert (alloc.exclusive, dict(alloc.gres_detail)) == (exclusive, {"n1": "gpu:1(IDX:0)"})


@pytest.mark.parametrize(("version", "name", "comment", "hook"), FORGED)
def test_the_allocation_record_is_read_as_carefully(
    version: str, name: str, comment: str, hook: bool
) -> None:
    """The PrologSlurmctld's ``scontrol show job`` at the job's start (``with_allocation``)."""
    job = JobRecord(job_id="42", name=name, nodes=("n1",), state="FAILED")
    assert with_allocation(job, ctl_line(version, name=name, comment=comment)).exclusive is not True


def test_slurmctld_s_record_of_the_latest_run_needs_the_run_s_restart_count() -> None:
    """A SLUID in scontrol's text that its Slurm does not print (24.11: a comment imitating
    ``SLUID=<the first run's>``) made the requeued job's first run take the second run's
    GPUs; slurmctld's record is that run's only when the restart count agrees too."""
    rows = recorded("26.05")  # a first run that stayed final (as 26.05 keeps it)
    slurm = Slurm(
        "24.11",
        rows,
        ctl=CTL_26.replace("SLUID=s1H1M8TA8PFB00 ", "").replace(
            " StdOut=", f" Comment=x SLUID={RUN0['SLURM_JOB_SLUID']} StdOut="
        ),
    )
    env = {**HOOK, "SLURM_JOB_RESTART_COUNT": "0"}
    job = backend(slurm).get_job(JobRef.from_env(env), env, spooled_at=1796179505)
    assert job.restart_count == 0
    assert dict(job.gres_detail) == {} and job.exclusive is not True


# ------------------------------------------------------------------ sattr status


def test_the_slurm_report_cannot_add_lines_to_sattr_status() -> None:
    at = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    stamp = (at - timedelta(seconds=5)).isoformat()
    info = {
        "slurm": {
            "backend": "cli\nhealthy",
            "version": "26.05\nProblems:\n  - none",
            "tested": False,
            "sluid_keys": ["x"],
            "fields_missing": ["AllocTRES\nhealthy", {"a": "b\nc"}],
        },
        "odd\ncounter": "1\n2",
    }
    worker = WorkerState(
        running=True,
        lock="held",
        pid=7,
        host="h",
        started_at=stamp,
        beat_at=stamp,
        beat_age=5.0,
        info=info,
    )
    status = Status(
        now=at,
        config=None,
        spool="/s",
        store="/v",
        store_state="ok",
        worker=worker,
        queue=None,
        problems=["a problem"],
    )
    lines = render_text(status).split("\n")
    assert not any(line.strip() in ("healthy", "- none", "2", "c") for line in lines)
    assert sum(1 for line in lines if line.startswith("Problems:")) == 1
    slurm = [line for line in lines if "Slurm 26.05" in line]
    assert len(slurm) == 1 and "\\x0a" in slurm[0]
