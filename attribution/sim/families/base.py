"""What every chain shares: its signature, its closed set of options, when its fault strikes,
and the expected answer it decides (from CHAINS.md and DESIGN.md §4, never from what the
tool currently says)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from attribution.sim.state import Expected, Node, Result, Sim

ChainFn = Callable[[Sim], Result]


def expect(
    sim: Sim,
    terminal: str,
    sub: str,
    nodes: Iterable[Node],
    cause: str,
    why: str,
    acceptable: Iterable[str] = (),
) -> Expected:
    return Expected(
        terminal_state=terminal,
        sub_domain=sub,
        responsible_nodes=sorted({n.name for n in nodes}),
        cause=cause,
        why=" ".join(why.split()),
        acceptable_sub_domains=list(acceptable),
    )


class Options:
    """Chain options with a closed set of keys."""

    def __init__(self, chain: str, given: dict[str, Any], allowed: dict[str, Any]) -> None:
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise ValueError(
                f"chain {chain}: unknown option(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(allowed)) or 'none'})"
            )
        self.values = {**allowed, **given}

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def fault_time(sim: Sim, ready: float, lo: float = 0.25, hi: float = 0.75) -> float:
    f = sim.sc.fault
    if f.at is not None:
        return sim.t0 + f.at
    span = min(sim.sc.time_limit - sim.sc.pg_timeout - 900, 6 * 3600)
    return ready + max(120.0, span * sim.rng.uniform(lo, hi))
