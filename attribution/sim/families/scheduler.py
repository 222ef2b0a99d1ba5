"""Endings the scheduler decides (CHAINS.md §11): preemption, the time limit (reached while
progressing, or long after a filesystem stall), cancel by the owner or an administrator.
"""

from __future__ import annotations

from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.families.storage import nfs_hang_lines
from attribution.sim.job import job_start, progress
from attribution.sim.state import Result, Sim


def _chain_preemption(sim: Sim) -> Result:
    """CHAINS.md §11: the scheduler preempted the job (SIGTERM to every task)."""
    f = sim.sc.fault
    Options("preemption", f.options, {})
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} DUE TO PREEMPTION ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} DUE TO PREEMPTION ***",
        )
        if sim.sc.launcher == "torchrun":
            sim.agent_log(
                node,
                t + 0.2,
                "WARNING",
                "elastic.agent.server.api",
                "Received 15 death signal, shutting down workers",
            )
    exp = expect(
        sim,
        "preempted",
        "infrastructure",
        [],
        "slurm.preemption",
        "Slurm preempted the job for a higher-priority one (DUE TO PREEMPTION, sacct "
        "PREEMPTED); nothing failed before it (CHAINS.md §11). A scheduler decision: "
        "infrastructure, no node to blame.",
    )
    return Result(t + 5, "PREEMPTED", "0:15", exp)


def _chain_time_limit(sim: Sim) -> Result:
    """CHAINS.md §11: the job was still making progress when it hit its time limit."""
    f = sim.sc.fault
    Options("time_limit", f.options, {})
    ready = job_start(sim)
    t = sim.t0 + sim.sc.time_limit
    progress(sim, ready, t - 5)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} DUE TO TIME LIMIT ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} DUE TO TIME LIMIT ***",
        )
    exp = expect(
        sim,
        "timeout",
        "application",
        [],
        "slurm.time_limit",
        "The job printed training progress until the end and was stopped by its own "
        "time limit (DUE TO TIME LIMIT, sacct TIMEOUT) with no failure before it: it "
        "asked for too little time (CHAINS.md §11).",
    )
    return Result(t + 3, "TIMEOUT", "0:0", exp)


def _chain_time_limit_hang(sim: Sim) -> Result:
    """CHAINS.md §11 + §12: progress stopped on an NFS stall long before the time limit."""
    f = sim.sc.fault
    Options("time_limit_hang", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = job_start(sim)
    end_t = sim.t0 + sim.sc.time_limit
    t = sim.t0 + (f.at if f.at is not None else sim.sc.time_limit * sim.rng.uniform(0.3, 0.6))
    progress(sim, ready, t)
    nfs_hang_lines(sim, a, t + 5, end_t, sim.ranks_of(a)[0])
    batch = sim.nodes[0]
    sim.out(
        end_t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(end_t, batch)} DUE TO TIME LIMIT ***",
    )
    exp = expect(
        sim,
        "fail",
        "infrastructure",
        [a],
        "fs.nfs_not_responding",
        f"Progress stopped {int(end_t - t)} s before the time limit when {a.name}'s NFS "
        "server stopped responding and the rank's I/O blocked (hung task); the time "
        "limit only ended a job that was already stuck (CHAINS.md §11 exception, §12).",
    )
    return Result(end_t + 3, "TIMEOUT", "0:0", exp, needs=[("kernel", a.name)])


def _chain_user_cancel(sim: Sim) -> Result:
    """CHAINS.md §11: scancel by the owner (or by an administrator)."""
    o = Options("user_cancel", sim.sc.fault.options, {"by": "owner"})
    if o["by"] not in ("owner", "admin"):
        raise ValueError("user_cancel: by owner|admin")
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} ***",
        )
    sim.out(t + 0.2, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    by = sim.sc.uid if o["by"] == "owner" else 0
    if o["by"] == "owner":
        exp = expect(
            sim,
            "cancelled",
            "application",
            [],
            "slurm.cancel_owner",
            "The job's owner cancelled it (sacct 'CANCELLED by <own uid>'); nothing "
            "failed before (CHAINS.md §11, DESIGN §4: own cancel is application).",
        )
    else:
        exp = expect(
            sim,
            "cancelled",
            "infrastructure",
            [],
            "slurm.cancel_admin",
            "An administrator (uid 0) cancelled the job with no failure before it: a "
            "site decision such as maintenance (DESIGN §4: infrastructure).",
        )
    return Result(t + 4, f"CANCELLED by {by}", "0:15", exp)


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "preemption": _chain_preemption,
    "time_limit": _chain_time_limit,
    "time_limit_hang": _chain_time_limit_hang,
    "user_cancel": _chain_user_cancel,
}
