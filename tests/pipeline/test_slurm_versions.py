"""What differs between Slurm 22.05, 24.11 and 26.05 for the command-line backend, on output
recorded from each (the CI roots of .ci/slurm-root.sh): which fields sacct has, how runs of a
requeued job are numbered and keyed, which run slurmctld's record describes, and a field a
version refuses. The live tests (tests/slurm) run the same paths on each real version."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pytest

from attribution.analyze import analyze
from attribution.jobrecord import job_from_dict
from attribution.model import Coverage, CoverageStatus, Stream, verdict_to_dict
from attribution.reconcile import spool_key
from attribution.rules.compiled import RuleSet
from attribution.slurm.backend import JobRef
from attribution.slurm.cli import DELIMITER, CliBackend, Completed
from attribution.verdictjson import verdict_from_dict
from tests.pipeline.conftest import FIXTURES

FIELDS = {v: (FIXTURES / f"sacct-e-{v}.txt").read_text() for v in ("22.05", "24.11", "26.05")}
VERSION = {
    "22.05": "slurm 22.05.8\n",
    "24.11": "slurm-wlm 24.11.5\n",
    "26.05": "slurm-wlm 26.05.5\n",
}

# sacct -P -n -D -j 1 -o <SACCT_FIELDS>,SLUID,Restarts after `scontrol requeue 1` of a job that
# had ended FAILED, then ran and failed again (SLURM_TIME_FORMAT=%s)
ASKED = (
    "JobID,JobIDRaw,Cluster,User,UID,Account,Partition,State,ExitCode,DerivedExitCode,Reason,"
    "Start,End,Timelimit,NodeList,AllocTRES,SLUID,Restarts"
)
REQUEUED = {
    # 26.05: the first run keeps its FAILED record, each run its own SLUID
    "26.05": """\
1|1|testcluster|slurmtest|1000|ci|debug|FAILED|1:0|0:0|None|1796179502|1796179505|365-00:00:00|ci-sid|billing=1,cpu=1,mem=500M,node=1|s1H1M8TA88K400|0
1.batch|1.batch|testcluster|||ci||FAILED|1:0|||1796179502|1796179505||ci-sid|cpu=1,mem=500M,node=1|s1H1M8TA88K400|
1|1|testcluster|slurmtest|1000|ci|debug|FAILED|1:0|0:0|None|1796179515|1796179519|UNLIMITED|ci-sid|billing=1,cpu=1,mem=500M,node=1|s1H1M8TA8PFB00|1
1.batch|1.batch|testcluster|||ci||FAILED|1:0|||1796179515|1796179519||ci-sid|cpu=1,mem=500M,node=1|s1H1M8TA8PFB00|
""",
    # 24.11: sacct has SLUIDs too, but the first run becomes REQUEUED (as on 22.05)
    "24.11": """\
1|1|testcluster|slurmtest|1000|ci|debug|REQUEUED|1:0|0:0|None|1796179970|1796179984|365-00:00:00|ci-trixie|billing=1,cpu=1,mem=500M,node=1|s8NNM8TAPHRX00|0
1.batch|1.batch|testcluster|||ci||FAILED|1:0|||1796179970|1796179973||ci-trixie|cpu=1,mem=500M,node=1|s8NNM8TAPHRX00|
1|1|testcluster|slurmtest|1000|ci|debug|FAILED|1:0|0:0|None|1796179984|1796179987|365-00:00:00|ci-trixie|billing=1,cpu=1,mem=500M,node=1|s8NNM8TAPZMG00|1
1.batch|1.batch|testcluster|||ci||FAILED|1:0|||1796179984|1796179987||ci-trixie|cpu=1,mem=500M,node=1|s8NNM8TAPZMG00|
""",
}
# scontrol show job -o -d 1 on 26.05 after the second run (abridged): it holds only that run
CTL_26 = (
    "JobId=1 JobName=wrap SLUID=s1H1M8TA8PFB00 UserId=slurmtest(1000) JobState=FAILED "
    "Restarts=1 ExitCode=1:0 NodeList=ci-sid BatchHost=ci-sid AllocTRES=cpu=1,gres/gpu=1 "
    "JOB_GRES=gpu:1 Nodes=ci-sid CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:1) OverSubscribe=NO "
    "Exclusive=NODE StdOut=/tmp/n-1.out\n"
)
NOW = 1796179530.0  # within MinJobAge of both runs: scontrol is asked


class Slurm:
    """A runner answering as one recorded version."""

    def __init__(
        self,
        version: str,
        *,
        refuse: str | None = None,
        fields_fail: bool = False,
        rows: str | None = None,
    ) -> None:
        self.version = version
        self.rows = REQUEUED.get(version, "") if rows is None else rows
        self.refuse = refuse
        self.fields_fail = fields_fail
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        args = list(argv[1:])
        self.calls.append([argv[0], *args])
        if argv[0] == "sacct" and args == ["-e"]:
            if self.fields_fail:  # slurmdbd down a moment
                return Completed(1, "", "sacct: error: Problem talking to the database\n")
            return Completed(0, FIELDS[self.version], "")
        if argv[0] == "sacct" and args == ["--version"]:
            return Completed(0, VERSION[self.version], "")
        if argv[0] == "scontrol":
            if args[:2] == ["show", "config"]:
                return Completed(0, "MinJobAge               = 600 sec\n", "")
            return Completed(0, CTL_26 if self.version == "26.05" else "", "")
        fields = args[args.index("-o") + 1].split(",")
        if self.refuse and self.refuse in fields:
            return Completed(1, "", f'sacct: error: Invalid field requested: "{self.refuse}"\n')
        rows = []
        for line in self.rows.splitlines():
            values = dict(zip(ASKED.split(","), line.split("|"), strict=True))
            if "-S" in args and (values["State"] == "REQUEUED" or "." in values["JobID"]):
                continue
            rows.append(DELIMITER.join(values.get(f, "") for f in fields))
        return Completed(0, "".join(r + "\n" for r in rows), "")


@pytest.mark.parametrize(
    ("version", "listed"),
    [("22.05", False), ("24.11", True), ("26.05", True)],
)
def test_sluid_and_restarts_are_asked_for_where_sacct_lists_them(
    version: str, listed: bool
) -> None:
    slurm = Slurm(version)
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    backend.sacct(JobRef(job_id="1"))
    query = next(c for c in slurm.calls if "-j" in c)
    asked = query[query.index("-o") + 1].split(",")
    assert ("SLUID" in asked, "Restarts" in asked) == (listed, listed)


@pytest.mark.parametrize(
    ("version", "keys"),
    [
        # 26.05: both runs ended FAILED, each keyed by its SLUID as the hook keyed it
        ("26.05", ["s1H1M8TA88K400", "s1H1M8TA8PFB00"]),
        # 24.11: the first run is REQUEUED (no verdict); the hook sees no SLUID
        ("24.11", ["testcluster_1_1"]),
    ],
)
def test_runs_of_a_requeued_job_are_numbered_by_sacct_and_keyed_as_the_hook(
    version: str, keys: list[str]
) -> None:
    slurm = Slurm(version)
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    since, until = datetime.fromtimestamp(1796179000, UTC), datetime.fromtimestamp(1796180000, UTC)
    ended = backend.ended_jobs(None, since, until)
    assert [spool_key(e) for e in ended] == keys
    assert [e.restart_count for e in ended] == [0, 1][-len(keys) :]
    # Restarts numbers the runs: no second query for every run's Submit time
    assert sum(1 for c in slurm.calls if c[0] == "sacct" and "-S" not in c and "-j" in c) == 0


def test_the_spooled_sluid_picks_its_run_and_slurmctld_describes_only_the_latest() -> None:
    """26.05: the hook spooled the first run (its SLUID), but its entry is read after the
    second run ended, with a spool time nearer the second run's end. The SLUID picks the
    first run's record; slurmctld's record (the second run's GPU and exclusive flag) is not
    mixed into it. The second run gets both."""
    slurm = Slurm("26.05")
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    first_env = {"SLURM_JOB_ID": "1", "SLURM_JOB_SLUID": "s1H1M8TA88K400"}
    first_env |= {"SLURM_JOB_RESTART_COUNT": "0", "SLURM_CLUSTER_NAME": "testcluster"}
    first = backend.get_job(JobRef.from_env(first_env), first_env, spooled_at=1796179518)
    assert (first.key, first.restart_count) == ("s1H1M8TA88K400", 0)
    assert first.start == datetime.fromtimestamp(1796179502, UTC)
    assert dict(first.gres_detail) == {} and first.exclusive is None
    second_env = {**first_env, "SLURM_JOB_SLUID": "s1H1M8TA8PFB00", "SLURM_JOB_RESTART_COUNT": "1"}
    second = backend.get_job(JobRef.from_env(second_env), second_env, spooled_at=1796179519)
    assert (second.key, second.restart_count) == ("s1H1M8TA8PFB00", 1)
    assert dict(second.gres_detail) == {"ci-sid": "gpu:1(IDX:1)"} and second.exclusive is True


def test_a_sluid_is_looked_up_as_itself() -> None:
    slurm = Slurm("26.05")
    ref = JobRef.parse("s1H1M8TA88K400")
    assert ref.sluid == "s1H1M8TA88K400"
    CliBackend(runner=slurm, retries=0, clock=lambda: NOW).sacct(ref)
    query = next(c for c in slurm.calls if "-j" in c)
    assert query[query.index("-j") + 1] == "s1H1M8TA88K400"


def test_a_field_sacct_refuses_is_left_out_and_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A future sacct that renamed or dropped a field refuses the whole query: the backend
    asks again without it, reads the job, and logs which field once."""
    slurm = Slurm("26.05", refuse="AllocTRES")
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_SLUID": "s1H1M8TA88K400"}
    with caplog.at_level(logging.WARNING, logger="attribution.slurm.cli"):
        job = backend.get_job(JobRef.from_env(env), env)
        again = backend.get_job(JobRef.from_env(env), env)
    assert job == again and job.state == "FAILED" and job.key == "s1H1M8TA88K400"
    assert backend.missing_fields == {"AllocTRES"} and job.fields_missing == ("AllocTRES",)
    named = [r for r in caplog.records if "no field AllocTRES" in r.getMessage()]
    assert len(named) == 1
    refused = [c for c in slurm.calls if c[0] == "sacct" and "AllocTRES" in ",".join(c)]
    assert len(refused) == 1  # asked once, then never again


def test_a_sacct_that_refuses_every_field_is_an_error() -> None:
    from attribution.errors import SlurmError

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        if list(argv[1:]) == ["-e"]:
            return Completed(1, "", "sacct: error: Problem talking to the database\n")
        if list(argv[1:]) == ["--version"]:
            return Completed(0, "slurm 22.05.8\n", "")
        fields = argv[list(argv).index("-o") + 1].split(",")
        return Completed(1, "", f'sacct: error: Invalid field requested: "{fields[0]}"\n')

    with pytest.raises(SlurmError, match="refused every field"):
        CliBackend(runner=runner, retries=0).sacct(JobRef(job_id="1"))


@pytest.mark.parametrize(
    ("version", "key"),
    [("26.05", "s1H1M8TA8PFB00"), ("24.11", "testcluster_1_1")],
)
def test_a_job_looked_up_by_id_gets_the_key_the_hook_gave_its_latest_run(
    version: str, key: str
) -> None:
    """``sattr enqueue 1`` and on-demand lookups have no hook environment: the key is the
    latest run's SLUID where the hook keys by SLUID (26.05), else ``<cluster>_<job>_<run>``
    with the run from sacct's Restarts (24.11, whose SLUIDs the hook never sees)."""
    backend = CliBackend(runner=Slurm(version), retries=0, clock=lambda: NOW)
    assert backend.get_job(JobRef.parse("1")).key == key


@pytest.mark.parametrize(
    ("said", "about"),
    [
        ("slurm 22.05.8\n", {"version": "22.05", "tested": True, "sluid_keys": False}),
        ("slurm-wlm 24.11.5\n", {"version": "24.11", "tested": True, "sluid_keys": False}),
        ("slurm 25.11.2\n", {"version": "25.11", "tested": False, "sluid_keys": True}),
        ("slurm-wlm 26.05.5\n", {"version": "26.05", "tested": True, "sluid_keys": True}),
        # a version from the future is tried and reported, never refused
        ("slurm 27.11.0-pre1\n", {"version": "27.11", "tested": False, "sluid_keys": True}),
        ("", {"version": None, "tested": False, "sluid_keys": False}),
    ],
)
def test_what_the_worker_reports_of_its_slurm(said: str, about: dict[str, object]) -> None:
    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        return Completed(0 if said else 1, said, "" if said else "sacct: command failed\n")

    got = CliBackend(runner=runner, retries=0).about()
    assert got == {"backend": "cli", "fields_missing": [], **about}


def test_the_status_names_an_untested_slurm_and_the_fields_it_lacks() -> None:
    from attribution.status import _counter_lines

    slurm = {"backend": "cli", "version": "27.11", "tested": False, "sluid_keys": True}
    lines = _counter_lines({"slurm": {**slurm, "fields_missing": ["AllocTRES"]}})
    assert lines == [
        "Slurm 27.11 (cli backend), runs keyed by SLUID, not a version attribution is tested"
        " on; sacct has no AllocTRES"
    ]
    tested = {**slurm, "version": "22.05", "tested": True, "sluid_keys": False}
    assert _counter_lines({"slurm": {**tested, "fields_missing": []}}) == [
        "Slurm 22.05 (cli backend)"
    ]


def test_the_verdict_says_which_sacct_fields_were_missing(ruleset: RuleSet) -> None:
    data = {"job_id": "1", "state": "FAILED", "exit_code": "1:0", "nodes": "n1"}
    data |= {"start": "2026-12-02T02:45:02Z", "end": "2026-12-02T02:45:05Z"}
    job = job_from_dict({**data, "fields_missing": ["AllocTRES", "Reason"]})
    read = [Coverage(Stream.JOB_STDOUT, None, CoverageStatus.OK)]
    verdict = analyze(job, [], ruleset, coverage=read)
    (out,) = [c for c in verdict.coverage if c.stream is Stream.JOB_STDOUT]
    assert [(n.code, dict(n.args)) for n in out.notes] == [
        ("slurm_fields_missing", {"fields": "AllocTRES, Reason"})
    ]
    assert "this Slurm's sacct has no AllocTRES, Reason" in (out.reason or "")
    again = verdict_from_dict(verdict_to_dict(verdict))
    assert again.job.fields_missing == ("AllocTRES", "Reason")
    plain = analyze(job_from_dict(data), [], ruleset, coverage=read)
    assert not any(n.code == "slurm_fields_missing" for c in plain.coverage for n in c.notes)


def test_a_26_05_sweep_keys_by_sluid_even_when_sacct_cannot_list_its_fields() -> None:
    """``sacct -e`` failed a moment (it needs slurmdbd): the version says SLUID and Restarts
    exist, so the sweep still asks for them and keys each run as the hook did; without them
    every job would be spooled a second time under another key."""
    slurm = Slurm("26.05", fields_fail=True)
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    since, until = datetime.fromtimestamp(1796179000, UTC), datetime.fromtimestamp(1796180000, UTC)
    ended = backend.ended_jobs(None, since, until)
    assert [spool_key(e) for e in ended] == ["s1H1M8TA88K400", "s1H1M8TA8PFB00"]


def test_a_26_05_sweep_without_sluids_waits_instead_of_keying_runs_otherwise() -> None:
    from attribution.errors import SlurmError

    backend = CliBackend(runner=Slurm("26.05", refuse="SLUID"), retries=0, clock=lambda: NOW)
    since, until = datetime.fromtimestamp(1796179000, UTC), datetime.fromtimestamp(1796180000, UTC)
    with pytest.raises(SlurmError, match="no SLUID field now, and runs are keyed by it"):
        backend.ended_jobs(None, since, until)


def test_a_26_05_run_without_a_sluid_is_keyed_as_the_hook_keyed_it() -> None:
    """26.05 gives a job that ran while slurmdbd was down no SLUID (seen in the live tests):
    the hook keyed it ``<cluster>_<job>_<restart>``, and so does the sweep; it does not wait
    for a SLUID that may never come (its watermark would stay put)."""
    first = REQUEUED["26.05"].splitlines()[0]
    slurm = Slurm("26.05", rows=first.replace("s1H1M8TA88K400", "") + "\n")
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    since = datetime.fromtimestamp(1796179000, UTC)
    ended = backend.ended_jobs(None, since, datetime.fromtimestamp(1796180000, UTC))
    assert [spool_key(e) for e in ended] == ["testcluster_1_0"]


def test_a_refused_field_is_asked_again_after_a_while() -> None:
    """A sacct that refused a field (a mistake mended later, a slurmdbd mid-upgrade) is asked
    for it again after FIELDS_RETRY seconds, not never again; the log names it once."""
    from attribution.slurm.cli import FIELDS_RETRY

    now = [NOW]
    slurm = Slurm("26.05", refuse="AllocTRES")
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: now[0])
    backend.sacct(JobRef(job_id="1"))
    assert backend.missing_fields == {"AllocTRES"}
    slurm.refuse = None
    backend.sacct(JobRef(job_id="1"))
    assert backend.missing_fields == {"AllocTRES"}  # not asked yet
    now[0] += FIELDS_RETRY
    backend.sacct(JobRef(job_id="1"))
    assert backend.missing_fields == set()
    last = [c for c in slurm.calls if "-j" in c][-1]
    assert "AllocTRES" in last[last.index("-o") + 1]


@pytest.mark.parametrize("refused", ["WorkDir", "JobName", "AdminComment"])
def test_a_refused_text_field_does_not_fail_a_batch(refused: str) -> None:
    """The free texts of a batch (WorkDir, JobName, AdminComment) are one more sacct call: a
    field it refuses is left out there too, not made the error of every job in the batch."""
    slurm = Slurm("26.05", refuse=refused)
    backend = CliBackend(runner=slurm, retries=0, clock=lambda: NOW)
    envs = [
        {"SLURM_JOB_ID": "1", "SLURM_JOB_SLUID": sluid, "SLURM_JOB_RESTART_COUNT": str(n)}
        for n, sluid in enumerate(["s1H1M8TA88K400", "s1H1M8TA8PFB00"])
    ]
    out = backend.get_jobs([(JobRef.from_env(e), e, None) for e in envs])
    assert [getattr(r, "key", r) for r in out] == ["s1H1M8TA88K400", "s1H1M8TA8PFB00"]
    assert backend.missing_fields == {refused}
