"""Blind rounds 11-18 (docs/accuracy.md): real public reports, kept as written and scored.

Their "before" numbers are the headline and cannot change; these tests keep the "after" numbers
from sliding back (a rule change that loses a family shows up here) and keep wrong node blame
where it is. They are not accuracy: these rounds were fixed after they were scored.
"""

from __future__ import annotations

import pytest

from attribution.backtest import find_cases
from attribution.bundle import score_bundles
from attribution.rules.compiled import RuleSet

from .conftest import BLIND, Diagnoses

# round -> (bundles, at least this many exact or acceptable, at most this many wrongly blamed nodes)
FLOORS = {
    "round11": (34, 27, 0),
    "round12": (34, 24, 0),
    "round13": (36, 29, 1),
    "round14": (30, 24, 0),
    "round15": (30, 17, 0),
    "round16": (22, 21, 1),
    "round17": (24, 17, 0),
    "round18": (12, 9, 3),
}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_blind_round_keeps_its_after_numbers(
    name: str, ruleset: RuleSet, shared_diagnoses: Diagnoses
) -> None:
    cases = find_cases([BLIND / name])
    total, floor, wrong_nodes = FLOORS[name]
    assert len(cases) == total
    report = score_bundles(cases, ruleset)
    assert [c.error for c in report.cases if c.error] == []
    right = sum(1 for c in report.cases if c.score in ("exact", "acceptable"))
    misses = [
        (c.name, c.expected_sub_domain, c.got_sub_domain)
        for c in report.cases
        if c.score not in ("exact", "acceptable")
    ]
    assert right >= floor, misses
    assert report.blame_counts()["blamed_wrong_node"] <= wrong_nodes
