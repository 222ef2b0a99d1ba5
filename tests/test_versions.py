"""rules/VERSIONS.lock: a rule's version names exactly one body."""

from __future__ import annotations

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
