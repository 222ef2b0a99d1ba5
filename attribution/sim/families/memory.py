"""Out of memory (CHAINS.md §8): CUDA OOM on one rank, the job's cgroup limit, the whole node."""

from __future__ import annotations

from attribution.sim.cascade import (
    fail_job,
    traceback_lines,
    train_frames,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import Node, Result, Sim


def _oom_lines(sim: Sim, a: Node, t: float, rank: int, constraint: str) -> None:
    rng = sim.rng
    pid = sim.pid(rank)
    task = rank % sim.rpn
    memcg = f"/slurm/uid_{sim.sc.uid}/job_{sim.job_id}"
    sim.kernel(
        a,
        t,
        "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
        "oom_score_adj=0",
    )
    if constraint == "memcg":
        sim.kernel(
            a,
            t,
            f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"oom_memcg={memcg},task_memcg={memcg}/step_0/task_{task},task=python,pid={pid},uid={sim.sc.uid}",
        )
        head = "Memory cgroup out of memory"
    else:
        sim.kernel(
            a,
            t,
            f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"global_oom,task_memcg={memcg}/step_0/task_{task},task=python,pid={pid},uid={sim.sc.uid}",
        )
        head = "Out of memory"
    rss = rng.randrange(80_000_000, 400_000_000)
    sim.kernel(
        a,
        t + 0.01,
        f"{head}: Killed process {pid} (python) total-vm:{rss + 9_000_000}kB, "
        f"anon-rss:{rss}kB, file-rss:{rng.randrange(90000, 900000)}kB, shmem-rss:"
        f"{rng.randrange(0, 4000000)}kB, UID:{sim.sc.uid} pgtables:{rss // 1000}kB oom_score_adj:0",
    )


def _chain_gpu_oom(sim: Sim) -> Result:
    """CHAINS.md §8 (left column): CUDA out of memory on one rank -> peers chain 7.

    Option ``leftover_process``: another process (left over from an earlier job)
    holds most of the GPU, and the rank's own use is small -- the catalog's
    ``app.cuda.oom`` discriminator for infrastructure.
    """
    f = sim.sc.fault
    o = Options("gpu_oom", f.options, {"leftover_process": False})
    a = sim.node_named(f.node)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.02, 0.2)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[gpu]
    rng = sim.rng
    req = rng.uniform(1, 12)
    head = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB. "
        f"GPU {gpu} has a total capacity of 79.11 GiB of which "
    )
    if o["leftover_process"]:
        other = rng.uniform(55, 66)
        own = 79.0 - other
        text = (
            f"{head}{rng.randrange(2, 90)}.62 MiB is free. Process {rng.randrange(20000, 90000)} "
            f"has {other:.2f} GiB memory in use. Including non-PyTorch memory, this process has "
            f"{own:.2f} GiB memory in use. Of the allocated memory {own - 1.9:.2f} GiB is "
            "allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated."
        )
    else:
        text = (
            f"{head}{req / 3:.2f} GiB is free. Including non-PyTorch memory, this process has "
            f"78.{rng.randrange(10, 99)} GiB memory in use. Of the allocated memory 74.20 GiB "
            "is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )
    frame = (
        "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/linear.py",
        125,
        "forward",
        "return F.linear(input, self.weight, self.bias)",
    )
    sim.rank_block(origin, t, traceback_lines(train_frames(sim, frame), text))
    end = fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    if o["leftover_process"]:
        exp = expect(
            sim,
            "fail",
            "infrastructure",
            [a],
            "app.cuda.oom_foreign_process",
            f"Rank {origin} hit CUDA out of memory, but its own process used only a fraction of "
            f"the GPU: another process held most of GPU {gpu} on {a.name} (a leftover from an "
            "earlier job). catalog app.cuda.oom / CHAINS.md §8: memory held by a different "
            "process makes it infrastructure (the node was not clean), not the job's sizing.",
        )
    else:
        exp = expect(
            sim,
            "fail",
            "application",
            [],
            "app.cuda.oom",
            f"Rank {origin} ran out of GPU memory (torch.OutOfMemoryError, its own process "
            "holds nearly all of the GPU); the other ranks then lost it (CHAINS.md §8, "
            "GPU OOM column). The job's sizing is the cause; no node is to blame.",
        )
    return Result(end, "FAILED", "1:0", exp)


def _chain_cgroup_oom(sim: Sim) -> Result:
    """CHAINS.md §8 (middle column): the job's cgroup hit its memory limit."""
    f = sim.sc.fault
    Options("cgroup_oom", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.05, 0.5)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    _oom_lines(sim, a, t, origin, "memcg")
    sim.out(
        t + 2,
        f"slurmstepd: error: Detected 1 oom_kill event in StepId={sim.job_id}.0. Some of "
        "the step tasks have been OOM Killed.",
    )
    if sim.sc.launcher == "srun":
        sim.out(t + 2.5, f"srun: error: {a.name}: task {origin}: Out Of Memory")
    end = fail_job(sim, t + 1, [origin], -9, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "application",
        [],
        "kernel.oom_memcg",
        f"The kernel OOM killer acted inside the job's own cgroup on {a.name} "
        "(constraint=CONSTRAINT_MEMCG, task_memcg of this job) and Slurm recorded the "
        "oom_kill event: the job used more host memory than it requested "
        "(CHAINS.md §8, cgroup column).",
    )
    return Result(end, "OUT_OF_MEMORY", "0:125", exp)


def _chain_node_oom(sim: Sim) -> Result:
    """CHAINS.md §8 (right column): the whole node ran out of memory."""
    f = sim.sc.fault
    Options("node_oom", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.05, 0.5)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    _oom_lines(sim, a, t, origin, "global")
    end = fail_job(sim, t + 1, [origin], -9, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "infrastructure",
        [a],
        "kernel.oom_global",
        f"{a.name} as a whole ran out of memory (constraint=CONSTRAINT_NONE, global_oom) "
        "and the kernel killed one of the job's ranks: CHAINS.md §8 calls a node-wide "
        "OOM infrastructure (no cgroup limit held the job to its request), with the "
        "caveat that the job itself may have consumed the node, so application is "
        "acceptable.",
        acceptable=["application"],
    )
    return Result(end, "FAILED", "137:0", exp, needs=[("kernel", a.name)])


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "gpu_oom": _chain_gpu_oom,
    "cgroup_oom": _chain_cgroup_oom,
    "node_oom": _chain_node_oom,
}
