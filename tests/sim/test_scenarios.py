"""Named simulated scenarios (tests/sim/scenarios/*.yaml), diagnosed like real bundles.

Each scenario is generated with its fixed seed (once per run, into a session directory
shared with tests/test_chains.py), diagnosed through ``diagnose_bundle`` and scored with
``score_case`` against the expected.yaml the simulator decided from the scenario
(CHAINS.md / DESIGN.md §4); those of 256 nodes or more are slow tests. A scenario that
fails because a rule is missing or wrong is listed in KNOWN_GAPS with the reason:
it stays a strict xfail, so it turns into a failure the day the rule is fixed
and the entry must be removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from attribution.backtest import score_case
from attribution.hostlist import expand
from attribution.sim import CHAINS, Scenario, load_scenarios

if TYPE_CHECKING:
    from tests.conftest import Simulated

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIOS: list[tuple[Path, Scenario]] = [
    (path, scenario)
    for path in sorted(SCENARIO_DIR.glob("*.yaml"))
    for scenario in load_scenarios(path)
]

# name -> why the current rules get it wrong (see the simulator report for details)
KNOWN_GAPS: dict[str, str] = {}

# scenarios this big take seconds each to generate and diagnose: run with the slow tests
SLOW_NODES = 256


def _param(path: Path, scenario: Scenario):  # type: ignore[no-untyped-def]
    marks = []
    if len(expand(scenario.nodes)) >= SLOW_NODES:
        marks.append(pytest.mark.slow)
    if scenario.name in KNOWN_GAPS:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[scenario.name]))
    return pytest.param(scenario, id=scenario.name, marks=marks)


@pytest.mark.parametrize("scenario", [_param(p, s) for p, s in SCENARIOS])
def test_scenario(scenario: Scenario, simulated: Simulated) -> None:
    root, bundle, verdict = simulated(scenario)  # shared with tests/test_chains.py
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
