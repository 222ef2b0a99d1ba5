"""Golden cases: every bundle in tests/cases is diagnosed and compared with its hand-written expected.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attribution.backtest import ENGINE_CAUSES, score_case
from attribution.bundle import diagnose_bundle, read_expected, score_bundles
from attribution.model import verdict_to_dict
from attribution.rules.compiled import RuleSet

from .conftest import CASES, Diagnoses

BUNDLES = sorted(p.parent for p in CASES.glob("*/expected.yaml"))


def test_there_are_enough_cases() -> None:
    assert len(BUNDLES) >= 30
    assert sum(1 for b in BUNDLES if b.name.startswith("real-case")) == 10


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_golden_case(bundle: Path, diagnosed: Diagnoses) -> None:
    expected = read_expected(bundle / "expected.yaml")
    assert expected is not None
    _, verdict = diagnosed(bundle)
    result = score_case(bundle.name, str(bundle), expected, verdict)
    shown = json.dumps(verdict_to_dict(verdict), indent=1)[:6000]
    assert result.score in ("exact", "acceptable"), f"{result.score}: {verdict.summary}\n{shown}"
    if expected.get("terminal_state"):
        assert result.terminal_ok, f"terminal_state {verdict.terminal_state}\n{shown}"
    if expected.get("responsible_nodes") is not None:
        assert result.nodes_ok, f"responsible {result.got_nodes} != {expected['responsible_nodes']}"


def test_every_answer_names_a_rule_and_blame_is_never_wrong(
    ruleset: RuleSet, shared_diagnoses: Diagnoses
) -> None:
    """Each golden answer names the diagnosis rule it expects (prose is not scored); over the
    suite no verdict blames a node the answer does not, or moves blame across the line
    between the job and the system, and at least 98 % of causes are the expected rule."""
    known = {d.id for d in ruleset.diagnoses} | ENGINE_CAUSES
    for bundle in BUNDLES:
        expected = read_expected(bundle / "expected.yaml")
        assert expected is not None
        for cause in [expected.get("cause"), *(expected.get("acceptable_causes") or [])]:
            assert cause in known, f"{bundle.name}: cause {cause!r} names no diagnosis rule"
    report = score_bundles(BUNDLES, ruleset)
    assert [c.error for c in report.cases if c.error] == []
    assert report.blame_counts() == dict.fromkeys(report.blame_counts(), 0), [
        (c.name, c.blame) for c in report.cases if c.blame
    ]
    right, judged = report.cause_accuracy()
    assert judged == len(BUNDLES)
    misses = [(c.name, c.cause, c.expected_cause) for c in report.cases if not c.cause_ok]
    assert right / judged >= 0.98, misses


def test_verdicts_are_deterministic(ruleset: RuleSet, diagnosed: Diagnoses) -> None:
    """Two fresh diagnoses agree, and agree with the verdict the other tests share (made
    once per run, whenever the first test asked for it)."""
    bundle = CASES / "seed-128-nodes-nic-selection"
    first = verdict_to_dict(diagnose_bundle(bundle, ruleset)[1])
    second = verdict_to_dict(diagnose_bundle(bundle, ruleset)[1])
    assert first == second
    assert verdict_to_dict(diagnosed(bundle)[1]) == first


def _trusted_support(verdict, node: str) -> bool:  # type: ignore[no-untyped-def]
    """A chain entry from a trusted source, not another job's and not forged, on ``node``."""
    for entry in [*verdict.symptom_chain]:
        if node not in entry.nodes or entry.trust != "trusted" or entry.owner == "foreign":
            continue
        if entry.note and ("forged" in entry.note or "the previous job's" in entry.note):
            continue
        return True
    return False


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_no_node_is_blamed_without_trusted_evidence(bundle: Path, diagnosed: Diagnoses) -> None:
    """Every blamed node has trusted evidence of its own in the chain, or Slurm's record; nodes
    only untrusted lines name are suspects."""
    _, verdict = diagnosed(bundle)
    for r in verdict.responsible:
        assert r.confirmed_by, r
        if r.confirmed_by != "slurm":
            assert _trusted_support(verdict, r.node), (r, verdict.symptom_chain)
    for s in verdict.suspects:
        assert s.confirmed_by is None
        assert s.node in verdict.job.nodes
