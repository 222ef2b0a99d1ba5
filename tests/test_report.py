"""``sattr report``: the plain-text report of one verdict (``attribution.report``) and the
command that finds the job in a real store and applies the access policy.

Verdicts come from diagnosing the golden bundles under tests/cases with the shipped rules,
and, for the command, from the store ``sattr demo`` writes.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.access import HIDDEN, Caller, for_owner
from attribution.cli import main
from attribution.model import ChainRole, CoverageStatus, Verdict, verdict_to_dict
from attribution.report import MAX_ENTRIES, MIN_WIDTH, ascii_text, elapsed, report_text, utc
from attribution.store import Store
from attribution.verdictjson import verdict_from_dict

from .conftest import CASES, DemoStore, Diagnoses

ALL_CASES = sorted(p.parent for p in CASES.glob("*/job.json"))
REAL = CASES / "real-case11"  # a GPU off the bus: hardware, one responsible node
SHARED = CASES / "blind10-shared-c12-own-xid31-illegal-address-foreign-xid94"  # other job's XIDs
BIG = CASES / "blind4-site-registry-unavailable-for-64-node-pull"  # 64 nodes, 40 chain entries
IGNORED = CASES / "blind2-c23-importerror-one-node-jobstep"  # a signal outside the window
ROLE = re.compile(r"^\d+\. \[(root|downstream|context)\] ", re.M)


def verdict_of(diagnosed: Diagnoses, case: Path) -> Verdict:
    return diagnosed(case)[1]


def section(text: str, title: str) -> str:
    """The lines of one ``Title`` / ``-----`` section of a report."""
    start = text.index(f"\n{title}\n{'-' * len(title)}\n") + 2 * len(title) + 3
    end = text.find("\n\n", start)
    return text[start : end if end != -1 else None]


# --------------------------------------------------------------------- the text


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_every_line_fits_and_is_plain_ascii(diagnosed: Diagnoses, case: Path) -> None:
    verdict = verdict_of(diagnosed, case)
    for width in (80, 60, MIN_WIDTH):
        text = report_text(verdict, width=width)
        assert text.endswith("\n") and not text.endswith("\n\n")
        for line in text.splitlines():
            assert len(line) <= width, (width, line)
            assert line == line.rstrip(), line
            assert line.isascii() and all(c.isprintable() for c in line), line


def test_header_diagnosis_chain_and_coverage(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, REAL)
    job = verdict.job
    text = report_text(verdict)
    assert verdict.cause is not None and verdict.responsible
    header = text.split("\n\n", 1)[0]
    assert f"Job ID:         {job.job_id}\n" in header
    assert f"State:          {job.state} (exit code {job.exit_code})" in header
    assert f"Start:          {utc(job.start)}" in header
    assert f"Run time:       {elapsed(job.duration)}" in header
    diagnosis = section(text, "Diagnosis")
    assert f"terminal_state: {verdict.terminal_state.value}\n" in diagnosis
    assert f"sub_domain:     {verdict.sub_domain.value}\n" in diagnosis
    assert f"Cause:          {verdict.cause.id}: " in diagnosis
    blamed = verdict.responsible[0]
    assert f"Responsible:    {blamed.node}, {blamed.component} {blamed.device}" in diagnosis
    assert verdict.confidence is not None
    assert f"Confidence:     {verdict.confidence.level}: " in diagnosis
    assert " ".join(diagnosis.split()).count(" ".join(verdict.summary.split())) == 1
    assert verdict.action and " ".join(verdict.action.split()) in " ".join(diagnosis.split())
    # every chain entry, each with its count and the start of its example line
    chain = section(text, "What happened")
    assert len(ROLE.findall(chain)) == len(verdict.symptom_chain) <= MAX_ENTRIES
    for entry in verdict.symptom_chain:
        assert f"] {entry.count}x " in chain
        assert f"> {ascii_text(entry.example)[:30]}" in chain
    # every stream read or not, and what was not read named
    coverage = section(text, "Evidence read")
    for c in verdict.coverage:
        assert f"  {c.stream.value}: " in coverage
    unread = {c.stream.value for c in verdict.coverage if c.status is not CoverageStatus.OK}
    assert unread
    not_seen = " ".join(coverage[coverage.index("Not seen:") :].split())
    for stream in unread:
        assert stream in not_seen
    assert text.rstrip().splitlines()[-2].startswith(f"Full verdict: sattr show {job.display_id}")


def test_chain_is_root_first_then_downstream_then_context(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, SHARED)
    roles = {e.role for e in verdict.symptom_chain}
    assert {ChainRole.ROOT, ChainRole.CONTEXT} <= roles
    assert [e.role for e in verdict.symptom_chain] != sorted(
        (e.role for e in verdict.symptom_chain), key=list(ChainRole).index
    ), "this case's chain is not already in role order; pick one that is not"
    shown = ROLE.findall(report_text(verdict))
    order = ["root", "downstream", "context"]
    assert shown == sorted(shown, key=order.index)
    assert sorted(shown) == sorted(e.role.value for e in verdict.symptom_chain)


def test_long_chain_is_cut_and_counted(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, BIG)
    assert len(verdict.symptom_chain) > MAX_ENTRIES
    text = report_text(verdict)
    assert len(ROLE.findall(text)) == MAX_ENTRIES
    rest = len(verdict.symptom_chain) - MAX_ENTRIES
    assert f"... and {rest} more (" in text
    assert f"Nodes:          h100-r[129-192] ({len(verdict.job.nodes)} nodes)" in text
    assert len(ROLE.findall(report_text(verdict, max_entries=100))) == len(verdict.symptom_chain)


def test_ignored_signals_are_counted(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, IGNORED)
    assert verdict.ignored
    n = sum(e.count for e in verdict.ignored)
    assert f"{n} signal(s) outside the job's time window were not counted." in report_text(verdict)


def test_deterministic_and_the_same_after_the_store(diagnosed: Diagnoses, tmp_path: Path) -> None:
    verdict = verdict_of(diagnosed, SHARED)
    text = report_text(verdict)
    assert report_text(verdict) == text
    assert report_text(verdict_from_dict(verdict_to_dict(verdict))) == text
    with Store(tmp_path / "v.sqlite") as store:
        store.save(verdict)
        stored = store.get(verdict.job.key)
    assert stored is not None
    assert report_text(verdict_from_dict(stored)) == text


def test_array_task_sluid_account_url_and_fleet(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, REAL)
    job = dataclasses.replace(
        verdict.job,
        job_id="4242019",
        array_job_id="4242000",
        array_task_id="19",
        sluid="sabcdef0123456789",
        account="physics",
        name="train-\x1b[31mred\x1b[0m-\u00e9t\u00e9-\u6a21\u578b",
        time_limit=3600,
    )
    verdict = dataclasses.replace(verdict, job=job)
    node = verdict.responsible[0].node
    record = {"fleet": {node: {"jobs": 4, "users": 3, "since": "2018-04-05T01:36:10+00:00"}}}
    text = report_text(verdict, record, url="https://attr.example.org/jobs/4242000_19")
    assert "Job ID:         4242019\n" in text
    assert "Array task:     4242000_19\n" in text
    assert "SLUID:          sabcdef0123456789\n" in text
    assert f"User/Account:   {job.user}/physics\n" in text
    # an escape sequence is shown, not sent; accents dropped, other letters as '?'
    assert "Job name:       train-\\x1b[31mred\\x1b[0m-ete-??\n" in text
    assert f"Run time:       {elapsed(job.duration)} (time limit 01:00:00)\n" in text
    assert f"Elsewhere:      {node} was responsible for 4 other failed job(s) of 3" in text
    assert "since 2018-04-05" in text
    assert "Web page: https://attr.example.org/jobs/4242000_19\n" in text
    assert text.splitlines()[0].startswith("Job 4242000_19: ")
    assert "sattr show 4242000_19" in text


def test_bad_arguments(diagnosed: Diagnoses) -> None:
    verdict = verdict_of(diagnosed, REAL)
    with pytest.raises(ValueError, match="below 40"):
        report_text(verdict, width=MIN_WIDTH - 1)
    with pytest.raises(ValueError, match="max_entries"):
        report_text(verdict, max_entries=0)


def test_times_and_durations() -> None:
    assert utc(datetime(2026, 11, 30, 14, 2, 11, tzinfo=UTC)) == "2026-11-30 14:02:11Z"
    assert utc(None) == "unknown"
    assert elapsed(3 * 86400 + 4 * 3600 + 5 * 60 + 6) == "3-04:05:06"
    assert elapsed(59) == "00:00:59"
    assert elapsed(None) == "unknown"


# --------------------------------------------------------------------- the command


def report(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["report", *args], catch_exceptions=False)


def stored(demo_store: DemoStore, job: str) -> Verdict:
    with Store(demo_store.db, readonly=True) as store:
        return verdict_from_dict(store.find(job)[0])


def as_caller(monkeypatch: pytest.MonkeyPatch, caller: Caller) -> None:
    """Make ``Caller.current`` (what every command asks) return ``caller``."""
    monkeypatch.setattr(Caller, "current", classmethod(lambda cls, groups: caller))


def test_command_prints_the_report_of_the_stored_verdict(demo_store: DemoStore) -> None:
    verdict = stored(demo_store, "100011")
    result = report("100011", "--db", str(demo_store.db), "--url", "https://a.example/j/{job}")
    assert result.exit_code == 0, result.output
    assert result.output == report_text(
        for_owner(verdict), {"fleet": {}}, url="https://a.example/j/100011"
    )
    assert all(len(line) <= 80 for line in result.output.splitlines())


def test_command_refuses_unknown_and_other_users_jobs(
    demo_store: DemoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = report("999999999", "--db", str(demo_store.db))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("sattr: error: no verdict for job 999999999")
    assert result.stderr.count("\n") == 1
    verdict = stored(demo_store, "7104")
    assert verdict.job.uid is not None
    as_caller(monkeypatch, Caller(uid=verdict.job.uid + 1, name="someone-else", admin=False))
    result = report("7104", "--db", str(demo_store.db))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == "sattr: error: job 7104 belongs to another user\n"


def test_other_jobs_lines_are_hidden_from_everyone(
    demo_store: DemoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    verdict = stored(demo_store, "7104")
    foreign = [e for e in verdict.symptom_chain if e.owner == "foreign"]
    assert foreign and verdict.job.uid is not None
    owner = Caller(uid=verdict.job.uid, name=verdict.job.user, admin=False)
    for caller in (owner, Caller(uid=0, name="root", admin=True)):
        as_caller(monkeypatch, caller)
        result = report("7104", "--db", str(demo_store.db))
        assert result.exit_code == 0, result.output
        assert f"> {HIDDEN}" in result.output
        for entry in foreign:
            assert ascii_text(entry.example)[:40] not in result.output
