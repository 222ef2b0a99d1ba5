"""Shared-filesystem faults (CHAINS.md §12): Lustre eviction, NFS server not responding."""

from __future__ import annotations

from attribution.sim.cascade import (
    fail_job,
    straggler_cascade,
    teardown,
    traceback_lines,
    train_frames,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import Node, Result, Sim


def nfs_hang_lines(sim: Sim, a: Node, t: float, until: float, rank: int) -> None:
    server = sim.pick(["nfs01", "home-nfs", "10.0.0.40"])
    sim.kernel(a, t, f"nfs: server {server} not responding, still trying")
    k = t + 123
    n = 0
    while k < until and n < 6:
        sim.kernel(a, k, f"INFO: task python:{sim.pid(rank)} blocked for more than 120 seconds.")
        sim.kernel(a, k, f"      Tainted: P           OE     {sim.kernel_release} #115-Ubuntu")
        sim.kernel(
            a, k, '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.'
        )
        sim.kernel(
            a,
            k,
            f"task:python          state:D stack:0     pid:{sim.pid(rank)} "
            f"ppid:{sim.pid(rank) - 13} flags:0x00004002",
        )
        k += 122.9
        n += 1


def _chain_lustre_eviction(sim: Sim) -> Result:
    """CHAINS.md §12: Lustre clients are evicted; the checkpoint write fails with EIO.

    Option ``nodes``: how many nodes (the fault node first) lose the same OST at
    once -- CHAINS.md §12 notes several at once usually means the storage side.
    """
    f = sim.sc.fault
    o = Options("lustre_eviction", f.options, {"nodes": 1})
    a = sim.node_named(f.node)
    rng = sim.rng
    count = max(1, min(int(o["nodes"]), len(sim.nodes)))
    others = [n for n in sim.nodes if n is not a]
    hit = [a, *sorted(rng.sample(others, count - 1), key=lambda n: n.index)]
    sim.quiet.update(n.name for n in hit)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    ost = f"lustre-OST{rng.randrange(0, 64):04x}"
    nid = f"10.2.{rng.randrange(0, 8)}.{rng.randrange(2, 250)}@o2ib"
    for k, node in enumerate(hit):
        obd = f"{ost}-osc-ffff{rng.getrandbits(32):08x}{rng.getrandbits(16):04x}"
        dt = k * rng.uniform(0.0, 0.5)
        sim.kernel(
            node,
            t + dt,
            f"Lustre: {obd}: Connection to {ost} (at {nid}) was lost; in progress operations "
            "using this service will wait for recovery to complete",
        )
        sim.kernel(
            node,
            t + 40 + dt,
            f"LustreError: 167-0: {obd}: This client was evicted by {ost}; in progress "
            "operations using this service will fail.",
        )
        sim.kernel(node, t + 41 + dt, f"Lustre: {obd}: Connection restored to {nid} (at {nid})")
    origin = sim.ranks_of(a)[0]
    frame = (
        "/usr/local/lib/python3.10/dist-packages/torch/serialization.py",
        652,
        "save",
        "with _open_zipfile_writer(f) as opened_zipfile:",
    )
    sim.rank_block(
        origin,
        t + 41.5,
        traceback_lines(train_frames(sim, frame), "OSError: [Errno 5] Input/output error"),
    )
    end = fail_job(sim, t + 42, [origin], 1, "closed", first_node=a)
    where = a.name if count == 1 else f"{count} nodes (first {a.name})"
    exp = expect(
        sim,
        "fail",
        "infrastructure",
        hit,
        "fs.lustre_evicted",
        f"The Lustre client of {where} lost {ost} and was evicted; the checkpoint write on "
        f"{a.name} failed with EIO and the job died (CHAINS.md §12: the node(s) with the "
        "filesystem errors).",
    )
    return Result(end, "FAILED", "1:0", exp, needs=[("kernel", n.name) for n in hit])


def _chain_nfs_hang(sim: Sim) -> Result:
    """CHAINS.md §12: NFS server not responding -> the rank on A blocks -> peers' watchdog."""
    f = sim.sc.fault
    Options("nfs_hang", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    stuck = sim.ranks_of(a)[0]
    nfs_hang_lines(sim, a, t, t + sim.sc.pg_timeout, stuck)
    seq = sim.last_seq + 1
    tw, failed = straggler_cascade(sim, t, [stuck], seq)
    end = teardown(sim, tw, failed, first_node=a)
    exp = expect(
        sim,
        "fail",
        "infrastructure",
        [a],
        "fs.nfs_not_responding",
        f"{a.name}'s NFS server stopped responding, rank {stuck}'s I/O blocked (hung "
        "task) so it never issued the next collective, and the other ranks' watchdogs "
        "fired: a filesystem stall, not the job (CHAINS.md §12).",
    )
    return Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "lustre_eviction": _chain_lustre_eviction,
    "nfs_hang": _chain_nfs_hang,
}
