"""rules/VERSIONS.lock: a rule's version names exactly one body."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from attribution.errors import RuleErrors
from attribution.paths import rules_dir
from attribution.rules.versions import (
    body_digest,
    check,
    format_lock,
    lock_path,
    read_bodies,
    read_lock,
)

from .conftest import DemoStore


def _sattr(*args: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from attribution.cli import main

    return CliRunner().invoke(main, list(args))


RULE = """\
schema: 1
id: demo-rule
kind: diagnosis
version: {version}
status: {status}
title: {title}
description: A rule for the versions tests, long enough.
priority: {priority}
sub_domain: application
when:
  any:
  - event: [python.exception]
summary: it failed
"""


def write_rule(directory: Path, **values: object) -> Path:
    fields = {"version": 1, "status": "test", "title": "Demo rule", "priority": 50}
    fields.update(values)
    path = directory / "diagnose" / "demo-rule.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RULE.format(**fields))
    return path


def problems_for(directory: Path, lock: dict[str, dict[int, str]]) -> list[str]:
    problems, _ = check(read_bodies(directory), lock)
    return [p.message for p in problems]


def test_every_shipped_rule_and_table_is_locked_at_its_version() -> None:
    shipped = rules_dir()
    lock = read_lock(lock_path(shipped))
    bodies = read_bodies(shipped)
    problems, updated = check(bodies, lock)
    assert [str(p) for p in problems] == []
    missing = sorted(set(updated) - set(lock)) + sorted(
        f"{k}@{v}" for k in lock for v in updated[k] if v not in lock[k]
    )
    assert missing == [], "run `sattr rules lock` and commit rules/VERSIONS.lock"
    assert len(bodies) > 300
    # the file on disk is exactly what the formatter writes: no hand edits that reorder it
    assert lock_path(shipped).read_text() == format_lock(lock)


def test_versions_are_not_all_one() -> None:
    """Versions were derived from history: rules that changed behaviour say so."""
    bodies = read_bodies(rules_dir())
    assert sum(1 for b in bodies if b.version > 1) > 100
    oom = next(b for b in bodies if b.key == "node-out-of-memory")
    assert oom.version >= 2  # it changed its sub_domain after it was added


def test_a_changed_body_without_a_bump_is_refused(tmp_path: Path) -> None:
    write_rule(tmp_path)
    (body,) = read_bodies(tmp_path)
    lock = {"demo-rule": {1: body.digest}}
    assert problems_for(tmp_path, lock) == []
    write_rule(tmp_path, priority=60)
    (message,) = problems_for(tmp_path, lock)
    assert "demo-rule@1 changed" in message
    assert "set version: 2" in message


def test_a_bump_is_added_and_the_old_line_kept(tmp_path: Path) -> None:
    write_rule(tmp_path)
    (old,) = read_bodies(tmp_path)
    write_rule(tmp_path, priority=60, version=2)
    problems, updated = check(read_bodies(tmp_path), {"demo-rule": {1: old.digest}})
    assert problems == []
    assert set(updated["demo-rule"]) == {1, 2}
    assert updated["demo-rule"][1] == old.digest


def test_words_and_maturity_are_not_the_body(tmp_path: Path) -> None:
    write_rule(tmp_path)
    (body,) = read_bodies(tmp_path)
    write_rule(tmp_path, title="A better title", status="stable")
    (after,) = read_bodies(tmp_path)
    assert after.digest == body.digest


def test_a_version_never_goes_back(tmp_path: Path) -> None:
    write_rule(tmp_path, version=1)
    (body,) = read_bodies(tmp_path)
    (message,) = problems_for(tmp_path, {"demo-rule": {1: body.digest, 2: "1" * 16}})
    assert "versions only go up" in message


def test_a_new_rule_starts_as_test(tmp_path: Path) -> None:
    write_rule(tmp_path, status="stable")
    (message,) = problems_for(tmp_path, {})
    assert "status: test" in message
    write_rule(tmp_path, status="test")
    assert problems_for(tmp_path, {}) == []


def test_body_digest_ignores_key_order_and_description() -> None:
    a = {"id": "x", "priority": 1, "when": {"any": []}, "description": "one"}
    b = {"description": "two", "when": {"any": []}, "priority": 1, "id": "x"}
    assert body_digest(a) == body_digest(b)
    assert body_digest(a) != body_digest({**a, "priority": 2})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("demo-rule 1\n", "line 1"),
        ("demo-rule one 0123456789abcdef\n", "line 1"),
        ("# c\ndemo-rule 1 0123456789abcdef\ndemo-rule 1 0123456789abcdef\n", "line 3"),
        ("demo-rule 1 0123456789ABCDEF\n", "line 1"),
    ],
)
def test_a_bad_lock_line_names_its_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "VERSIONS.lock"
    path.write_text(text)
    with pytest.raises(RuleErrors) as info:
        read_lock(path)
    assert f"{path}:{expected.split()[1]}" in str(info.value)


def test_sattr_rules_lock_adds_versions_and_refuses_a_silent_change(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from attribution.cli import main

    def lock(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, ["rules", "lock", str(tmp_path), *args])

    write_rule(tmp_path)
    checked = lock("--check")
    assert checked.exit_code == 1 and "not locked yet: demo-rule@1" in checked.output
    assert not (tmp_path / "VERSIONS.lock").exists()
    first = lock()
    assert first.exit_code == 0 and "locked demo-rule@1" in first.output
    assert lock("--check").exit_code == 0
    write_rule(tmp_path, priority=70)
    silent = lock()
    assert silent.exit_code == 1
    assert "demo-rule.yaml:4: error:" in silent.output and "set version: 2" in silent.output
    write_rule(tmp_path, priority=70, version=2)
    assert "locked demo-rule@2" in lock().output
    text = (tmp_path / "VERSIONS.lock").read_text()
    assert "demo-rule   1 " in text and "demo-rule   2 " in text


def test_rediagnose_names_verdicts_made_by_an_older_rule_version(
    tmp_path: Path, demo_store: DemoStore
) -> None:
    """A stored verdict keeps the rule version it was made with; rediagnose says which were
    made by a version that has changed since."""
    db = demo_store.copy_to(tmp_path)
    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT verdict FROM verdicts WHERE job_id = '4242001'").fetchone()
        data = json.loads(text)
        current = data["cause"]["rule"]
        rule_id = current.split("@")[0]
        data["cause"]["rule"] = f"{rule_id}@1"
        conn.execute(
            "UPDATE verdicts SET verdict = ?, cause_rule = ? WHERE job_id = '4242001'",
            (json.dumps(data), f"{rule_id}@1"),
        )
    assert current != f"{rule_id}@1"  # the demo's rule has changed since its first version
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {db}\nspool: {tmp_path / 'spool'}\n")
    result = _sattr("rediagnose", "--config", str(config), "4242001")
    assert result.exit_code == 0, result.output
    assert f"job 4242001: made by {rule_id}@1, now {current}" in result.output
    assert f"made by rule versions that have changed since: {rule_id}@1 -> {current}" in (
        result.output
    )
