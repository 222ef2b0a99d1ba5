"""Golden cases: every bundle in tests/cases is diagnosed and compared with its hand-written expected.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attribution.backtest import score_case
from attribution.bundle import diagnose_bundle, read_expected
from attribution.model import verdict_to_dict
from attribution.rules.loader import RuleSet

from .conftest import CASES

BUNDLES = sorted(p.parent for p in CASES.glob("*/expected.yaml"))


def test_there_are_enough_cases() -> None:
    assert len(BUNDLES) >= 30
    assert sum(1 for b in BUNDLES if b.name.startswith("real-case")) == 10


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_golden_case(bundle: Path, ruleset: RuleSet) -> None:
    expected = read_expected(bundle / "expected.yaml")
    assert expected is not None
    _, verdict = diagnose_bundle(bundle, ruleset)
    result = score_case(bundle.name, str(bundle), expected, verdict)
    shown = json.dumps(verdict_to_dict(verdict), indent=1)[:6000]
    assert result.score in ("exact", "acceptable"), f"{result.score}: {verdict.summary}\n{shown}"
    if expected.get("terminal_state"):
        assert result.terminal_ok, f"terminal_state {verdict.terminal_state}\n{shown}"
    if expected.get("responsible_nodes") is not None:
        assert result.nodes_ok, f"responsible {result.got_nodes} != {expected['responsible_nodes']}"


def test_verdicts_are_deterministic(ruleset: RuleSet) -> None:
    bundle = CASES / "seed-128-nodes-nic-selection"
    first = verdict_to_dict(diagnose_bundle(bundle, ruleset)[1])
    second = verdict_to_dict(diagnose_bundle(bundle, ruleset)[1])
    assert first == second
