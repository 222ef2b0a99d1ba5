"""Every inline example of every shipped rule, one test id per example (rule-id/group/name)."""

from __future__ import annotations

import pytest

from attribution.rules.examples import ExampleCase, iter_examples, run_example

from .conftest import shipped_ruleset

_RULES = shipped_ruleset()
_CASES = list(iter_examples(_RULES))


def _param(case: ExampleCase):  # type: ignore[no-untyped-def]
    marks = []
    if case.group == "todo":
        marks.append(pytest.mark.xfail(strict=True, reason=case.reason or "known gap"))
    return pytest.param(case, id=case.test_id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in _CASES])
def test_rule_example(case: ExampleCase) -> None:
    result = run_example(_RULES, case)
    assert result.passed, result.detail


def test_every_rule_has_examples() -> None:
    ids = {c.rule_id for c in _CASES if c.group == "match"}
    missing = sorted(r.id for r in _RULES.all_rules() if r.id not in ids)
    assert not missing, f"rules without a match example: {missing}"
