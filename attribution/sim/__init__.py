"""Scenario simulator: realistic multi-node evidence bundles with a known answer.

Test tooling behind ``sattr simulate``, the named scenarios of tests/sim and the sweeps of
docs/accuracy.md; nothing in the diagnosis path imports it.

A :class:`Scenario` (YAML or Python) describes one Slurm GPU job: its nodes
(a Slurm hostlist), GPUs and ranks per node, its launcher, the root fault and
the cause-to-symptom chain it sets off (one of the families of
``knowledge/signatures/CHAINS.md``), background noise, per-node clock skew,
missing sources and signals placed outside the job window. :func:`generate`
turns it into the files of an evidence bundle (DESIGN §6) plus an
``expected.yaml`` decided from the scenario alone; :func:`write_bundle`
writes them; :func:`sweep` draws many varied scenarios from one seed.

Every random choice comes from one ``random.Random(scenario.seed)``, so a
scenario always produces byte-identical files. All times are UTC epoch
seconds internally; node clocks are ``true time + skew`` and local stamps are
rendered in the scenario's timezone, the way each producer prints them.

Simplification, stated once: in big jobs every rank of every node would print
its own copy of a peer error. To keep bundles small (a 1,024-node job
generates in well under a second), only a bounded sample of peer nodes
(``Scenario.peer_sample``) prints the full per-rank cascade; the other nodes
print their teardown lines only. Rank identity lines (NCCL ``Init COMPLETE``)
are printed for every rank, as NCCL does.

Modules: ``scenario`` (the model, YAML loading), ``formats`` (log line formats),
``state`` (one run's nodes, clocks and emitted lines), ``background`` (boot lines,
chatter, red herrings), ``job`` (start-up and progress output), ``cascade`` (peer
errors, watchdogs, teardown), ``families`` (the chains, one module per family),
``render`` and ``generate`` (the bundle in memory), ``writer`` (to disk),
``sweep`` (varied scenarios from one seed) and ``fleet`` (weeks of job verdicts on a
whole fleet with planted faults and their ground truth, for scoring the fleet view).
Host lists go through :mod:`attribution.hostlist`, time zones through
:mod:`attribution.timeutil`.
"""

from __future__ import annotations

from attribution.sim.fleet import FleetHistory, FleetSpec, FleetTruth, generate_fleet, write_fleet
from attribution.sim.formats import LineFormat, format_line
from attribution.sim.generate import SimBundle, generate
from attribution.sim.scenario import (
    CHAINS,
    FaultSpec,
    NoiseSpec,
    OutOfWindowSpec,
    Scenario,
    SkewSpec,
    load_scenarios,
    scenario_dict,
)
from attribution.sim.state import Expected
from attribution.sim.sweep import sweep
from attribution.sim.writer import write_bundle

__all__ = [
    "CHAINS",
    "Expected",
    "FaultSpec",
    "FleetHistory",
    "FleetSpec",
    "FleetTruth",
    "LineFormat",
    "NoiseSpec",
    "OutOfWindowSpec",
    "Scenario",
    "SimBundle",
    "SkewSpec",
    "format_line",
    "generate",
    "generate_fleet",
    "load_scenarios",
    "scenario_dict",
    "sweep",
    "write_bundle",
    "write_fleet",
]
