"""Named simulated scenarios (tests/sim/scenarios/*.yaml), diagnosed like real bundles.

Each scenario is generated into tmp_path with its fixed seed, diagnosed through
``diagnose_bundle`` and scored with ``score_case`` against the expected.yaml the
simulator decided from the scenario (CHAINS.md / DESIGN.md §4). A scenario that
fails because a rule is missing or wrong is listed in KNOWN_GAPS with the reason:
it stays a strict xfail, so it turns into a failure the day the rule is fixed
and the entry must be removed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.backtest import score_case
from attribution.bundle import diagnose_bundle
from attribution.hostlist import expand
from attribution.rules.compiled import RuleSet
from attribution.sim import CHAINS, Scenario, load_scenarios, write_bundle

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIOS: list[tuple[Path, Scenario]] = [
    (path, scenario)
    for path in sorted(SCENARIO_DIR.glob("*.yaml"))
    for scenario in load_scenarios(path)
]

# name -> why the current rules get it wrong (see the simulator report for details)
KNOWN_GAPS: dict[str, str] = {}


def _param(path: Path, scenario: Scenario):  # type: ignore[no-untyped-def]
    marks = []
    if scenario.name in KNOWN_GAPS:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[scenario.name]))
    return pytest.param(scenario, id=scenario.name, marks=marks)


@pytest.mark.parametrize("scenario", [_param(p, s) for p, s in SCENARIOS])
def test_scenario(scenario: Scenario, tmp_path: Path, ruleset: RuleSet) -> None:
    root = write_bundle(scenario, tmp_path / scenario.name)
    bundle, verdict = diagnose_bundle(root, ruleset)
    assert bundle.expected is not None
    result = score_case(scenario.name, str(root), bundle.expected, verdict)
    detail = (
        f"expected {result.expected_sub_domain} {result.expected_nodes} "
        f"{result.expected_terminal}; got {result.got_sub_domain} {result.got_nodes} "
        f"{result.got_terminal} via {result.cause}: {result.summary}"
    )
    assert result.score in ("exact", "acceptable"), detail
    assert result.nodes_ok, detail
    assert result.terminal_ok, detail


def test_every_chain_has_a_named_scenario() -> None:
    covered = {s.fault.chain for _, s in SCENARIOS}
    assert sorted(set(CHAINS) - covered) == []


def test_named_scenarios_span_2_to_1024_nodes() -> None:
    sizes = [len(expand(s.nodes)) for _, s in SCENARIOS]
    assert len(SCENARIOS) >= 40
    assert min(sizes) == 2
    assert max(sizes) == 1024


def test_scenario_files_are_named_after_their_scenario() -> None:
    for path, scenario in SCENARIOS:
        assert path.stem == scenario.name
    names = [s.name for _, s in SCENARIOS]
    assert len(names) == len(set(names))


def test_known_gaps_name_real_scenarios() -> None:
    assert set(KNOWN_GAPS) <= {s.name for _, s in SCENARIOS}
