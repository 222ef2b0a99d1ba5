"""Hostile input found by a breaker run against the issue 11 work: host lists in job output,
site rules that crash the regex engines, a broken VERSIONS.lock, stale stamps at the end of a
job's output. Each must end as a one-line error or an honest verdict, never a traceback."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from attribution.bundle import diagnose_bundle
from attribution.errors import RuleErrors
from attribution.hostlist import HostlistError, expand
from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset
from attribution.rules.versions import lock_status, read_bodies, read_lock, write_lock

from .conftest import CASES

HUGE_LISTS = [
    "a[1-" + "9" * 5000 + "]",  # Python refuses to read the number
    "a[0-9999999999999/1]",  # ClusterShell asserts on it
    "a[0-20000000/1]",  # a step hid the size from the guard
    "a[0-99999999/1]",
]


@pytest.mark.parametrize("nodes", HUGE_LISTS)
def test_a_huge_host_list_is_refused_at_once(nodes: str) -> None:
    started = time.perf_counter()
    with pytest.raises(HostlistError):
        expand(nodes)
    assert time.perf_counter() - started < 1.0
    assert len(expand("a[0-10/2]")) == 6  # a step is still understood


@pytest.mark.parametrize("nodes", HUGE_LISTS[:2])
def test_a_host_list_in_the_job_output_cannot_crash_the_diagnosis(
    tmp_path: Path, ruleset: RuleSet, nodes: str
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(CASES / "time-limit-no-failure", bundle)
    with (bundle / "job" / "stdout.log").open("a") as out:
        out.write(f"error: Nodes {nodes} not responding, setting DOWN\n")
    _, verdict = diagnose_bundle(bundle, ruleset)  # no traceback
    assert not any(r.node.startswith("a") for r in [*verdict.responsible, *verdict.suspects])


def test_a_stale_stamp_at_the_end_of_the_output_is_not_silence(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """A line stamped an hour back near the end (a replayed log, a node whose clock is
    behind) does not make a job that wrote until its time limit look hung."""
    bundle = tmp_path / "b"
    shutil.copytree(CASES / "time-limit-no-failure", bundle)
    out = bundle / "job" / "stdout.log"
    lines = out.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "DUE TO TIME LIMIT" in line)
    lines.insert(at, "[2025-09-01 12:00:03,000] [INFO] config dump\n")
    out.write_text("".join(lines))
    _, verdict = diagnose_bundle(bundle, ruleset)
    assert verdict.cause is not None and verdict.cause.id == "time-limit"


def _extractor(regex: str) -> str:
    return (
        "schema: 1\nid: demo-x\nkind: extractor\nversion: 1\ntitle: Demo\n"
        "description: A site extractor for the hostile tests.\nstreams: [job]\n"
        f"match:\n  contains: [boom]\n  regex: '{regex}'\nemit:\n  event: demo.x\n"
        "  role: symptom\n  label: boom\n"
    )


@pytest.mark.parametrize(
    ("regex", "why"),
    [
        ("(?P<x>a{4294967296})", "a repeat count is too large"),
        ("(" * 1500 + "a" + ")" * 1500, "groups nested too deep"),
    ],
)
def test_a_regex_the_engine_cannot_build_is_a_rule_error(
    tmp_path: Path, regex: str, why: str
) -> None:
    (tmp_path / "demo-x.yaml").write_text(_extractor(regex))
    with pytest.raises(RuleErrors) as info:
        load_ruleset([tmp_path], include_shipped=False)
    shown = "\n".join(str(e) for e in info.value.errors)
    assert f"demo-x.yaml:10: invalid regex: {why}" in shown


def test_a_table_key_that_is_a_list_is_a_rule_error(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "t.yaml").write_text(
        "schema: 1\ntable: t\nkey: code\nversion: 1\ntitle: T\ndescription: A table.\n"
        "columns: {name: the name}\nrows:\n- {code: [1, 2], name: x}\n"
    )
    with pytest.raises(RuleErrors) as info:
        load_ruleset([tmp_path], include_shipped=False)
    assert "t.yaml" in str(info.value) and "must be a number or a string" in str(info.value)


@pytest.mark.parametrize(
    "line",
    [
        "demo-x " + "9" * 5000 + " 0123456789abcdef",
        "demo-x \u0661 0123456789abcdef",  # an Arabic-Indic one
        "a b 1 0123456789abcdef",
    ],
)
def test_a_bad_lock_line_is_an_error_not_a_crash(tmp_path: Path, line: str) -> None:
    (tmp_path / "VERSIONS.lock").write_text(line + "\n")
    with pytest.raises(RuleErrors) as info:
        read_lock(tmp_path / "VERSIONS.lock")
    assert "VERSIONS.lock:1:" in str(info.value)


def test_rule_ids_and_versions_the_lock_cannot_hold_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_extractor("boom").replace("id: demo-x", "id: '#x'"))
    (tmp_path / "b.yaml").write_text(_extractor("boom").replace("version: 1", "version: true"))
    (tmp_path / "c.yaml").write_text(_extractor("boom"))
    (tmp_path / "d.yaml").write_text(_extractor("boom"))  # the same id again
    with pytest.raises(RuleErrors) as info:
        read_bodies(tmp_path)
    shown = "\n".join(str(e) for e in info.value.errors)
    assert "a.yaml:2: id is not a rule id" in shown
    assert "b.yaml:4: version must be a whole number" in shown
    assert "demo-x is also defined in" in shown


def test_a_lock_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(_extractor("boom"))
    (tmp_path / "VERSIONS.lock.tmp").mkdir()
    status = lock_status(tmp_path)
    with pytest.raises(RuleErrors) as info:
        write_lock(tmp_path, status.lock)
    assert "VERSIONS.lock: cannot write" in str(info.value)
    assert not (tmp_path / "VERSIONS.lock").exists()
    json.dumps(status.added)  # plain data


@pytest.mark.parametrize("within", ["-5", ".nan", ".inf"])
def test_a_negative_or_endless_within_is_a_rule_error(tmp_path: Path, within: str) -> None:
    (tmp_path / "demo-c.yaml").write_text(
        "schema: 1\nid: demo-c\nkind: correlation\nversion: 1\ntitle: Demo\n"
        "description: A correlation rule for the hostile tests.\nop: sequence\n"
        f"cause: {{event: [a.b]}}\neffect: {{event: [a.c]}}\nwithin: {within}\n"
    )
    with pytest.raises(RuleErrors) as info:
        load_ruleset([tmp_path], include_shipped=False)
    assert "demo-c.yaml:10: within: " in "\n".join(str(e) for e in info.value.errors)


def test_rediagnose_since_without_all_is_an_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from attribution.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(f"store: {tmp_path / 'v.sqlite'}\nspool: {tmp_path / 'spool'}\n")
    result = CliRunner().invoke(main, ["rediagnose", "--config", str(config), "--since", "7d", "1"])
    assert result.exit_code == 1 and "--since selects jobs for --all" in result.output
