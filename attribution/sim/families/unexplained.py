"""Failures whose cause is not in the evidence: the honest answer is unattributed or
ambiguous, never a guess (DESIGN §4).
"""

from __future__ import annotations

from attribution.sim.cascade import (
    fail_job,
    teardown,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import Result, Sim


def _chain_exit_unexplained(sim: Sim) -> Result:
    """A failed job that logged nothing recognisable: the honest answer is unattributed."""
    f = sim.sc.fault
    Options("exit_unexplained", f.options, {})
    a = sim.node_named(f.node)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[0]
    sim.rank_out(
        origin, t - 1, "early stopping criterion met: validation metric did not improve", err=False
    )
    failed = dict.fromkeys(sim.ranks_of(a), 2)
    end = teardown(sim, t, failed, first_node=a)
    exp = expect(
        sim,
        "fail",
        "unattributed",
        [],
        "unknown.exit",
        "The job's processes on one node exited with status 2 after an ordinary log "
        "line; no error, exception, kernel or network signal explains it. DESIGN §4: no "
        "evidence -> unattributed, never a guess.",
    )
    return Result(end, "FAILED", "2:0", exp)


def _chain_peer_lost_no_evidence(sim: Sim) -> Result:
    """Peers name node A as the one that went away, but A left no evidence we can read."""
    f = sim.sc.fault
    Options("peer_lost_no_evidence", f.options, {})
    if len(sim.nodes) < 3:
        raise ValueError("peer_lost_no_evidence needs at least 3 nodes")
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    sim.forced_missing.add(("kernel", a.name))
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[0]
    end = fail_job(sim, t, [origin], -9, "closed", first_node=a, killed_agents=[a])
    exp = expect(
        sim,
        "fail",
        "unattributed",
        [a],
        "peer.lost",
        f"Ranks on several nodes report 'Connection closed by remote peer {a.name}', so "
        f"{a.name} is where the failure started, but its kernel log is missing and its "
        "ranks printed nothing: why it went away is not in the evidence (DESIGN §4).",
        acceptable=["ambiguous"],
    )
    return Result(end, "FAILED", "137:0", exp)


def _chain_killed_unexplained(sim: Sim) -> Result:
    """A rank was SIGKILLed and the kernel log on its node shows no OOM or other cause."""
    f = sim.sc.fault
    Options("killed_unexplained", f.options, {})
    a = sim.node_named(f.node)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    if sim.sc.launcher == "srun":
        sim.out(t + 1, f"srun: error: {a.name}: task {origin}: Killed")
    end = fail_job(sim, t + 0.5, [origin], -9, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "ambiguous",
        [a],
        "signal.sigkill",
        f"Rank {origin} on {a.name} was killed by SIGKILL; its node's kernel log shows "
        "no OOM kill, and Slurm did not kill the job. An administrator, a health "
        "checker or an unlogged OOM all fit: ambiguous (or unattributed), and the "
        "evidence points at that node.",
        acceptable=["unattributed"],
    )
    return Result(end, "FAILED", "137:0", exp, needs=[("kernel", a.name)])


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "exit_unexplained": _chain_exit_unexplained,
    "peer_lost_no_evidence": _chain_peer_lost_no_evidence,
    "killed_unexplained": _chain_killed_unexplained,
}
