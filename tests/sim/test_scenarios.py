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
from attribution.rules.loader import RuleSet
from attribution.simulate import CHAINS, Scenario, expand_hostlist, load_scenarios, write_bundle

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIOS: list[tuple[Path, Scenario]] = [
    (path, scenario)
    for path in sorted(SCENARIO_DIR.glob("*.yaml"))
    for scenario in load_scenarios(path)
]

# name -> why the current rules get it wrong (see the simulator report for details)
KNOWN_GAPS: dict[str, str] = {
    "node-oom-8n": (
        "node-out-of-memory is application with blame none; CHAINS.md §8 makes a node-wide "
        "OOM (CONSTRAINT_NONE, global_oom) infrastructure on that node"
    ),
    "collective-hang-16n": (
        "process-aborted (p32) outranks collective-hang (p30): the SIGABRT in torchrun's "
        "summary is the watchdog's own abort (CHAINS.md §0.7), a symptom"
    ),
    "exit-unexplained-4n": (
        "the 'STEP ... CANCELLED' lines srun prints after a task failed make the verdict "
        "'cancelled' (terminal_state cancelled) although sacct says FAILED (CHAINS.md §11)"
    ),
    "peer-lost-no-evidence-8n": (
        "killed-unexplained (ambiguous) wins but blames no node, although srun's 'task N: "
        "Killed' line and the peers' 'Connection closed by remote peer' both name the node"
    ),
    "killed-unexplained-4n": (
        "killed-unexplained blames no node; the killed task's node is named by srun/torchrun"
    ),
    "node-failure-mce-8n": (
        "'Kernel panic - not syncing: Fatal machine check' after MCE lines is read as a kernel "
        "panic (system_software); CHAINS.md §10 upgrades a boot that ends in MCE to hardware"
    ),
    "gpu-oom-leftover-process-8n": (
        "cuda-out-of-memory is application and blames no node; the OOM message shows another "
        "process holds most of the GPU, which the catalog (app.cuda.oom) and CHAINS.md §8 make "
        "infrastructure on that node"
    ),
    "ib-init-config-32n": (
        "ib-peer-suspect blames one node although every node names its own ring neighbours "
        "(no dominant peer, no port error): CHAINS.md §6 reads that as RoCE/routing config"
    ),
    "ib-peer-vote-origin-missing-256n": (
        "ib-peer-vote counts status-5 (WR flush) completions as votes: the nodes that aborted "
        "first are named by more flush reports than the failed node is by status-12 reports; "
        "CHAINS.md §0.5 says status 5 is always secondary to an earlier 12/13/4"
    ),
}


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
    sizes = [len(expand_hostlist(s.nodes)) for _, s in SCENARIOS]
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
