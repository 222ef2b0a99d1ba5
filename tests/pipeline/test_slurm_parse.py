"""Parsing what Slurm 22.05 printed (captured text), output patterns, and job records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from attribution.slurm.backend import JobRef
from attribution.slurm.parse import (
    NO_VAL,
    PatternFields,
    group_steps,
    parse_sacct,
    parse_scontrol,
    split_jobid,
)
from attribution.slurm.parse import expand_output_pattern as expand
from attribution.slurm.resolve import build_job_record, pick_record
from tests.pipeline.conftest import FIXTURES, env_dump


@pytest.fixture(scope="module")
def sacct_rows() -> list[dict[str, str]]:
    text = (FIXTURES / "sacct-P-all-jobs.txt").read_text()
    return parse_sacct(text.split("\n", 1)[1])  # the first line is the command


def test_captured_sacct_records(sacct_rows: list[dict[str, str]]) -> None:
    records = group_steps(sacct_rows)
    ids = [r.fields["JobID"] for r in records]
    assert ids == [str(i) for i in range(1, 15)] + ["14", "15", "16"]
    by_id = {r.fields["JobID"]: r for r in records}
    assert by_id["7"].fields["DerivedExitCode"] == "7:0"
    assert [s["JobID"] for s in by_id["7"].steps] == ["7.batch", "7.0"]
    assert by_id["15"].fields["SubmitLine"].count("\n") == 6  # a multi-line SubmitLine
    assert by_id["15"].fields["SubmitLine"].endswith('survived\\")\n"')
    assert by_id["15"].fields["State"] == "FAILED"
    assert by_id["15"].fields["ExitCode"] == "0:9"
    assert len(by_id["11"].fields["AdminComment"]) == 65535
    assert by_id["8"].fields["User"] == "alice"
    assert by_id["8"].fields["AdminComment"] == "sattr:v1 spaces and ;semicolons, commas=equals"


def test_newline_in_the_last_field_stays_in_that_record() -> None:
    fields = ["JobID", "State", "AdminComment"]
    text = "1|FAILED|line one\nline two\n1.batch|FAILED|\n2|COMPLETED|a|b\n"
    rows = parse_sacct(text, fields)
    assert [r["JobID"] for r in rows] == ["1", "1.batch", "2"]
    assert rows[0]["AdminComment"] == "line one\nline two"
    assert rows[2]["AdminComment"] == "a|b"


def test_other_delimiter() -> None:
    rows = parse_sacct("5\x1fFAILED\x1fhas|pipe\n", ["JobID", "State", "C"], delimiter="\x1f")
    assert rows == [{"JobID": "5", "State": "FAILED", "C": "has|pipe"}]


def test_split_jobid() -> None:
    assert split_jobid("23_1.batch") == ("23", "1", "batch")
    assert split_jobid("7") == ("7", None, None)
    assert split_jobid("12+0.0") == ("12", None, "0")
    assert split_jobid("None") is None


def test_scontrol_one_line() -> None:
    data = parse_scontrol((FIXTURES / "scontrol-job-10.txt").read_text())
    assert data["JobState"] == "COMPLETING"
    assert data["Reason"] == "TimeLimit"
    assert data["StdOut"] == "/tmp/jobs/timeout2-10.out"
    assert data["AllocNode:Sid"] == "localhost:2336"
    assert data["Power"] == ""
    assert parse_scontrol("JobId=1 Comment=two words here JobState=FAILED")["Comment"] == (
        "two words here"
    )


PAT = PatternFields(
    job_id="1", user="root", name="pat", first_node="vm", work_dir="/tmp/jt", array_job_id=None
)


def test_pattern_matches_slurmstepd_22_05() -> None:
    # Measured on Slurm 22.05.8: sbatch -o 'p-%J-%s-%a-%n-%t-%N-%u-%x-%5j-%A.out' as job 1
    # created /tmp/jt/p-1-batch-4294967294-0-0-vm-root-pat-00001-1.out
    got = expand("p-%J-%s-%a-%n-%t-%N-%u-%x-%5j-%A.out", PAT)
    assert got == "/tmp/jt/p-1-batch-4294967294-0-0-vm-root-pat-00001-1.out"
    assert str(NO_VAL) in got


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("/abs/%%j-%j.log", "/abs/%j-1.log"),
        ("out-%12j", "/tmp/jt/out-0000000001"),
        ("%3N-%4u-%2x", "/tmp/jt/vm-root-pat"),
        ("/x/a\\%j.out", "/x/a%j.out"),
        ("/x/%q-%", "/x/%q-%"),
        ("/x/%A_%a", "/x/7_3"),
    ],
)
def test_pattern_cases(pattern: str, expected: str) -> None:
    fields = PAT
    if "%A_%a" in pattern:
        fields = PatternFields(job_id="9", array_job_id="7", array_task_id="3")
    assert expand(pattern, fields) == expected


def test_job_record_from_captured_array_task(sacct_rows: list[dict[str, str]]) -> None:
    env = env_dump("epilog-env-job-23.env")
    job = build_job_record(None, None, env, timezone="UTC")
    assert job.display_id == "23_2"
    assert job.key == "testcluster_23_2_0"
    assert job.std_out == "/tmp/jobs/arr-23_2.out"
    assert job.std_err == job.std_out


def test_job_record_precedence(sacct_rows: list[dict[str, str]]) -> None:
    records = {r.fields["JobID"]: r for r in group_steps(sacct_rows)}
    ctl = parse_scontrol((FIXTURES / "scontrol-job-10.txt").read_text())
    job = build_job_record(records["10"], ctl, {}, timezone="UTC")
    assert job.state == "TIMEOUT"  # sacct's final state, not scontrol's COMPLETING
    assert job.exit_code == "0:0"
    assert job.reason == "TimeLimit"  # scontrol's reason is more precise
    assert job.std_out == "/tmp/jobs/timeout2-10.out"
    assert job.time_limit == 60
    alice = build_job_record(records["8"], None, env_dump("epilog-env-job-8.env"))
    assert (alice.user, alice.uid, alice.state, alice.exit_code) == ("alice", 1001, "FAILED", "3:0")
    assert alice.std_out == "/tmp/jobs/alice-alicejob-8.out"
    cancelled = build_job_record(records["5"], None, {"SLURM_JOB_ID": "5"})
    assert (cancelled.state, cancelled.cancelled_by) == ("CANCELLED", "0")


def test_no_output_pattern_means_the_default() -> None:
    job = build_job_record(
        None, None, {"SLURM_JOB_ID": "26", "SLURM_JOB_WORK_DIR": "/w", "SLURM_JOB_NAME": "n"}
    )
    assert job.std_out == "/w/slurm-26.out"
    arr = build_job_record(
        None,
        None,
        {"SLURM_JOB_ID": "30", "SLURM_ARRAY_JOB_ID": "29", "SLURM_ARRAY_TASK_ID": "4"},
    )
    assert arr.std_out == "slurm-29_4.out"


def test_requeued_job_picks_the_run_by_end_time() -> None:
    fields = ["JobID", "JobIDRaw", "State", "End"]
    text = "14|14|NODE_FAIL|1796019562\n14.batch|14.batch|CANCELLED|1796019562\n"
    text += "14|14|CANCELLED by 0|1796019574\n"
    records = group_steps(parse_sacct(text, fields))
    assert len(records) == 2
    first = pick_record(records, spooled_at=1796019563.2)
    assert first is not None
    assert first.fields["State"] == "NODE_FAIL"
    last = pick_record(records, spooled_at=None)
    assert last is not None
    assert last.fields["State"] == "CANCELLED by 0"


def test_job_refs() -> None:
    assert JobRef.parse("1234").query_id == "1234"
    assert JobRef.parse("23_1").query_id == "23_1"
    assert JobRef.parse("s2MNM8NJZ1NP03").sluid == "s2MNM8NJZ1NP03"
    with pytest.raises(Exception, match="not a job id"):
        JobRef.parse("12;rm -rf")
    env = env_dump("epilog-env-job-23.env")
    assert JobRef.from_env(env).query_id == "23_2"


def test_times_are_utc_epochs() -> None:
    fields = {"JobIDRaw": "3", "State": "FAILED", "Start": "1796019347", "End": "Unknown"}
    from attribution.slurm.parse import SacctRecord

    job = build_job_record(SacctRecord(fields=fields), None, {})
    assert job.start == datetime.fromtimestamp(1796019347, UTC)
    assert job.end is None


def test_a_job_name_cannot_forge_the_record_or_the_owner() -> None:
    """A job's owner controls its name (scontrol update JobName=...): a name holding sacct's
    delimiter and a newline, or imitating scontrol keys, must not change the state, nodes or
    owner the worker uses (adversarial review)."""
    from collections.abc import Mapping, Sequence

    from attribution.slurm.backend import JobRef
    from attribution.slurm.cli import DELIMITER, CliBackend, Completed
    from attribution.slurm.parse import parse_scontrol

    d = DELIMITER
    core = d.join(
        [
            "777",
            "777",
            "c1",
            "alice",
            "1001",
            "acct",
            "gpu",
            "FAILED",
            "1:0",
            "0:0",
            "None",
            "1767261600",
            "1767265200",
            "01:00:00",
            "gn1",
        ]
    )
    forged_name = f"x\n777{d}/tmp{d}y{d}\n"  # a second row for the same JobIDRaw
    text = d.join(["777", "/home/alice", forged_name, ""])

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        if argv[0].endswith("sacct") and list(argv[1:]) == ["-e"]:
            return Completed(1, "", "sacct: error: Problem talking to the database")
        if argv[0].endswith("sacct") and list(argv[1:]) == ["--version"]:
            return Completed(0, "slurm 22.05.8\n", "")
        if argv[0].endswith("sacct"):
            fields = argv[argv.index("-o") + 1]
            return Completed(0, (text if "JobName" in fields else core) + "\n", "")
        return Completed(1, "", "slurm_load_jobs error: Invalid job id specified")

    job = CliBackend(runner=runner, retries=0).get_job(
        JobRef.parse("777"), {"SLURM_JOB_UID": "1001", "SLURM_JOB_USER": "alice"}
    )
    assert (job.state, job.nodes, job.uid, job.user) == ("FAILED", ("gn1",), 1001, "alice")
    assert job.work_dir == "/home/alice"  # the real row, not the forged one
    ctl = parse_scontrol("JobId=5 JobName=x UserId=root(0) UserId=alice(1001) GroupId=a(1)")
    assert ctl["UserId"] == "alice(1001)" and ctl["JobId"] == "5"


# scontrol show job -d -o of one job on Slurm 22.05 while it runs, and after it ended (CI)
DURING = (
    "JobId=35 JobName=wrap UserId=slurmtest(1001) JobState=RUNNING NodeList=vm NumNodes=1"
    " JOB_GRES=gpu:1   Nodes=vm CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:0) MinCPUsNode=1"
    " OverSubscribe=OK WorkDir=/tmp/jt"
)
AFTER = DURING.replace("RUNNING", "COMPLETED").replace("GRES=gpu:1(IDX:0)", "GRES=")


def test_per_node_gres_of_scontrol() -> None:
    from attribution.slurm.parse import parse_node_gres

    two = (
        "JobId=5 JobName=x Nodes=gpu[01-02] CPU_IDs=0-3 Mem=1000 GRES=gpu:h100:2(IDX:0-1)"
        " Nodes=gpu03 CPU_IDs=0 Mem=500 GRES=gpu:h100:1(IDX:3) MinCPUsNode=1"
    )
    assert parse_node_gres(two) == {
        "gpu[01-02]": "gpu:h100:2(IDX:0-1)",
        "gpu03": "gpu:h100:1(IDX:3)",
    }
    assert parse_node_gres(AFTER) == {"vm": ""}
    # a job name imitating a node line comes before the real one, which wins
    forged = DURING.replace(
        "JobName=wrap", "JobName=a Nodes=vm CPU_IDs=0 Mem=1 GRES=gpu:2(IDX:0-1)"
    )
    assert parse_node_gres(forged) == {"vm": "gpu:1(IDX:0)"}


def test_the_gpus_recorded_at_the_start_win_over_the_empty_end_record() -> None:
    from attribution.slurm.resolve import with_allocation

    ended = build_job_record(
        None, {**parse_scontrol(AFTER), "NodeList": "vm"}, {"SLURM_JOB_ID": "35"}
    )
    assert ended.exclusive is False
    job = with_allocation(ended, DURING)
    assert job.gres_detail == {"vm": "gpu:1(IDX:0)"}
    # a record of another job changes nothing
    assert with_allocation(ended, DURING.replace("JobId=35", "JobId=36")) == ended


@pytest.mark.parametrize(
    ("tres", "sacct_tres", "expected"),
    [
        ("cpu=1,mem=500M,node=1,billing=1,gres/gpu=1", None, {}),  # had a GPU: not known
        (None, "billing=1,cpu=1,gres/gpu=1,mem=500M,node=1", {}),
        ("cpu=1,mem=500M,node=1,billing=1", None, {"vm": ""}),  # had none: none
        (None, None, {}),  # nothing says: not known
    ],
)
def test_an_ended_jobs_empty_gres_is_no_gpus_only_without_gpus_in_its_tres(
    tres: str | None, sacct_tres: str | None, expected: dict[str, str]
) -> None:
    from attribution.slurm.parse import NODE_GRES, SacctRecord, parse_node_gres

    ctl = parse_scontrol(AFTER)
    ctl[NODE_GRES] = "\n".join(f"{n}\t{g}" for n, g in parse_node_gres(AFTER).items())
    ctl["NodeList"] = "vm"
    if tres:
        ctl["TRES"] = tres
    acct = None
    if sacct_tres:
        acct = SacctRecord(fields={"JobIDRaw": "35", "State": "COMPLETED", "AllocTRES": sacct_tres})
    job = build_job_record(acct, ctl, {"SLURM_JOB_ID": "35"})
    assert dict(job.gres_detail) == expected
    running = {**ctl, NODE_GRES: "vm\tgpu:1(IDX:0)"}
    assert dict(build_job_record(acct, running, {}).gres_detail) == {"vm": "gpu:1(IDX:0)"}


@pytest.mark.parametrize(
    ("env", "shown", "exclusive"),
    [
        ({}, {"OverSubscribe": "OK"}, False),
        ({}, {"OverSubscribe": "NO"}, True),
        ({}, {}, None),
        ({"SLURM_JOB_OVERSUBSCRIBE": "NO"}, {"OverSubscribe": "OK"}, True),
        ({"SLURM_JOB_EXCLUSIVE": "1"}, {}, True),
        ({"SLURM_JOB_EXCLUSIVE": "user"}, {"OverSubscribe": "NO"}, False),
        # what 24.11 printed (tests/slurm roots): sbatch, --exclusive, --oversubscribe
        ({"SLURM_JOB_OVERSUBSCRIBE": "OK"}, {"OverSubscribe": "OK"}, False),
        ({"SLURM_JOB_OVERSUBSCRIBE": "NO"}, {"OverSubscribe": "NO"}, True),
        ({"SLURM_JOB_OVERSUBSCRIBE": "YES"}, {"OverSubscribe": "YES"}, False),
        # what 26.05 printed: OverSubscribe=NO for every job not oversubscribing, exclusive
        # use in Exclusive (NO, NODE); without the hook's environment (a reconciled job, an
        # on-demand lookup) scontrol's Exclusive decides, never its OverSubscribe=NO
        (
            {"SLURM_JOB_EXCLUSIVE": "NO", "SLURM_JOB_OVERSUBSCRIBE": "NO"},
            {"OverSubscribe": "NO", "Exclusive": "NO"},
            False,
        ),
        ({}, {"OverSubscribe": "NO", "Exclusive": "NO"}, False),
        ({}, {"OverSubscribe": "NO", "Exclusive": "NODE"}, True),
        ({}, {"OverSubscribe": "YES", "Exclusive": "NO"}, False),
        ({}, {"OverSubscribe": "NO", "Exclusive": "SOMETHING_NEW"}, None),
    ],
)
def test_exclusive_use_of_the_nodes(
    env: dict[str, str], shown: dict[str, str], exclusive: bool | None
) -> None:
    ctl = {"JobId": "9", "NodeList": "n1", **shown}
    job = build_job_record(None, ctl, {"SLURM_JOB_ID": "9", **env})
    assert job.exclusive is exclusive


def test_other_jobs_on_the_nodes_in_one_sacct_call() -> None:
    from collections.abc import Mapping, Sequence

    from attribution.slurm.cli import CliBackend, Completed

    calls: list[list[str]] = []
    d = "\x1f"

    def runner(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
        calls.append(list(argv))
        rows = [
            ["41", "1767261000", "1767262000", "gn[1-2]", "bob"],  # ran before, on both nodes
            ["42", "1767261600", "Unknown", "gn2,gn9", "carol"],  # still running, one shared
            ["43", "None", "None", "None assigned", "dave"],  # never started
            ["40", "1767261600", "1767265200", "gn[1-2]", "alice"],  # the job itself
        ]
        return Completed(0, "\n".join(d.join(r) for r in rows) + "\n", "")

    from attribution.model import JobRecord

    job = JobRecord(job_id="40", cluster="c1", nodes=("gn1", "gn2"), nodelist="gn[1-2]")
    start = datetime(2026, 1, 1, 9, 55, tzinfo=UTC)
    others = CliBackend(runner=runner, retries=0).other_jobs(job, start, start)
    assert len(calls) == 1 and calls[0][calls[0].index("-N") + 1] == "gn[1-2]"
    assert {n: [o.job_id for o in js] for n, js in others.items()} == {
        "gn1": ["41"],
        "gn2": ["41", "42"],
    }
    assert others["gn2"][1].end is None and others["gn2"][1].user == "carol"
