"""The cause->symptom chains (knowledge/signatures/CHAINS.md), one module per family.

A chain plays one fault through a :class:`~attribution.sim.state.Sim` and returns the
Slurm ending and the expected verdict; :data:`CHAIN_FUNCS` maps each chain name of
:data:`attribution.sim.scenario.CHAINS` to its function.
"""

from __future__ import annotations

from attribution.sim.families import app, fabric, gpu, memory, node, scheduler, storage, unexplained
from attribution.sim.families.base import ChainFn
from attribution.sim.scenario import CHAINS

CHAIN_FUNCS: dict[str, ChainFn] = {
    name: chain
    for family in (gpu, fabric, memory, app, node, storage, scheduler, unexplained)
    for name, chain in family.FAMILY.items()
}
assert set(CHAIN_FUNCS) == set(CHAINS)
