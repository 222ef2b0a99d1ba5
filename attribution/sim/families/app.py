"""The job's own failures: a rank raises or segfaults (CHAINS.md §7); a collective never
completes because one rank never issued it, or for no visible reason (§9).
"""

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
from attribution.sim.state import Result, Sim

_EXCEPTIONS = [
    (
        "ValueError",
        "Expected input batch_size (2048) to match target batch_size (1024).",
        (
            "/home/{user}/run/model.py",
            141,
            "compute_loss",
            "return F.cross_entropy(logits, labels)",
        ),
    ),
    (
        "KeyError",
        "'attention_mask'",
        ("/home/{user}/run/data.py", 57, "__getitem__", "mask = sample['attention_mask']"),
    ),
    (
        "AssertionError",
        "sequence length 8192 exceeds max_position_embeddings 4096",
        ("/home/{user}/run/model.py", 203, "forward", "assert seq_len <= self.max_pos, msg"),
    ),
    (
        "ZeroDivisionError",
        "float division by zero",
        ("/home/{user}/run/schedule.py", 33, "lr_at", "return base_lr * step / warmup"),
    ),
    (
        "RuntimeError",
        "mat1 and mat2 shapes cannot be multiplied (4096x1024 and 2048x1024)",
        ("/home/{user}/run/model.py", 88, "forward", "return self.proj(x)"),
    ),
]


def _chain_rank_exception(sim: Sim) -> Result:
    """CHAINS.md §7: one rank raises a Python exception -> peers' connection closed."""
    o = Options("rank_exception", sim.sc.fault.options, {"exception": None, "at_start": False})
    f = sim.sc.fault
    a = sim.node_named(f.node)
    rng = sim.rng
    if o["exception"] == "ModuleNotFoundError" or o["at_start"]:
        # an import error at start hits every rank the same way
        t = sim.t0 + rng.uniform(6, 20)
        sim.out(t - 3, f"{sim.bracket_stamp(t - 3)} Starting job {sim.job_id}", err=False)
        mod = rng.choice(["flash_attn", "apex", "transformer_engine", "deepspeed"])
        failed: dict[int, int] = {}
        shown = [a, *sim.sample_peers([a])]
        for node in shown:
            for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
                sim.rank_block(
                    r,
                    t + rng.uniform(0, 1.5),
                    traceback_lines(
                        [
                            (
                                f"/home/{sim.sc.user}/run/train.py",
                                9,
                                "<module>",
                                f"from {mod} import ops",
                            )
                        ],
                        f"ModuleNotFoundError: No module named '{mod}'",
                    ),
                )
                failed[r] = 1
        end = teardown(sim, t + 2, failed, first_node=a)
        exp = expect(
            sim,
            "fail",
            "application",
            [],
            "python.ModuleNotFoundError",
            f"Every rank failed at import: ModuleNotFoundError: No module named "
            f"'{mod}'. The job's environment lacks a package it imports (CHAINS.md §7, "
            "application); nothing points at a node.",
        )
        return Result(end, "FAILED", "1:0", exp)
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.05, 0.6)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[f.gpu if f.gpu is not None else rng.randrange(sim.rpn)]
    pick = [e for e in _EXCEPTIONS if e[0] == o["exception"]] or [sim.pick(_EXCEPTIONS)]
    name, msg, frame = pick[0]
    frame = (frame[0].format(user=sim.sc.user), *frame[1:])
    sim.rank_block(origin, t, traceback_lines(train_frames(sim, frame), f"{name}: {msg}"))
    end = fail_job(sim, t + 0.5, [origin], 1, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "application",
        [],
        f"python.{name}",
        f"Rank {origin} on {a.name} raised {name}: {msg}; every other rank then saw "
        "'Connection closed by remote peer' / ncclRemoteError and was aborted "
        "(CHAINS.md §7). The exception is the job's own.",
    )
    return Result(end, "FAILED", "1:0", exp)


def _chain_rank_segfault(sim: Sim) -> Result:
    """CHAINS.md §7: a rank dies of SIGSEGV (in an extension, or inside libnccl)."""
    o = Options("rank_segfault", sim.sc.fault.options, {"library": "extension"})
    if o["library"] not in ("extension", "libnccl"):
        raise ValueError("rank_segfault: library is extension or libnccl")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.05, 0.6)
    progress(sim, ready, t)
    origin = sim.ranks_of(a)[rng.randrange(sim.rpn)]
    pid = sim.pid(origin)
    obj = (
        ("libnccl.so.2", "d3d3000")
        if o["library"] == "libnccl"
        else ("fused_kernels.cpython-310-x86_64-linux-gnu.so", "2f1000")
    )
    base = 0x7F7C7AC00000 + rng.randrange(0, 0x100000) * 0x1000
    comm = "pt_main_thread" if o["library"] == "libnccl" else "python"
    sim.kernel(
        a,
        t,
        f"{comm}[{pid}]: segfault at {rng.getrandbits(40):x} ip {base + 0x69996:016x} sp "
        f"{rng.getrandbits(44):016x} error 4 in {obj[0]}[{base:x}+{obj[1]}]",
    )
    sim.kernel(
        a,
        t,
        "Code: 48 8b 47 08 48 85 c0 74 0c 48 8b 57 10 48 89 10 48 89 42 08 c3 0f 1f 84 00 00 00 "
        "00 00",
    )
    if sim.sc.launcher == "srun":
        sim.out(t + 1, f"srun: error: {a.name}: task {origin}: Segmentation fault (core dumped)")
    end = fail_job(sim, t + 0.5, [origin], -11, "closed", first_node=a)
    if o["library"] == "libnccl":
        exp = expect(
            sim,
            "fail",
            "system_software",
            [a],
            "kernel.segfault_libnccl",
            f"Rank {origin} on {a.name} died of SIGSEGV inside libnccl.so.2 with no "
            "application frame; CHAINS.md §7 makes a crash inside the communication "
            "library system_software, while an application bug passing bad buffers "
            "remains possible.",
            acceptable=["application"],
        )
    else:
        exp = expect(
            sim,
            "fail",
            "application",
            [],
            "kernel.segfault",
            f"Rank {origin} on {a.name} died of SIGSEGV inside the job's own compiled "
            "extension (fused_kernels...so); peers lost it (CHAINS.md §7).",
        )
    needs = [("kernel", a.name)] if o["library"] == "libnccl" else []
    return Result(end, "FAILED", "139:0", exp, needs=needs)


def _chain_collective_straggler(sim: Sim) -> Result:
    """CHAINS.md §9: one rank never issued collective N (a rank-conditional code path)."""
    f = sim.sc.fault
    Options("collective_straggler", f.options, {})
    a = sim.node_named(f.node)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    stuck = sim.ranks_of(a)[f.gpu if f.gpu is not None else sim.rng.randrange(sim.rpn)]
    seq = sim.last_seq + 1
    tw, failed = straggler_cascade(sim, t, [stuck], seq)
    end = teardown(sim, tw, failed, first_node=a)
    if sim.sc.torch_style == "new":
        exp = expect(
            sim,
            "fail",
            "application",
            [],
            "torch.straggler",
            f"Every rank but {stuck} enqueued collective #{seq} and timed out waiting; rank "
            f"{stuck} reports last enqueued #{seq - 1}: it never issued the collective "
            "(rank-divergent code path, deadlock or stall). No hardware, network or "
            "filesystem signal exists anywhere (CHAINS.md §9, rule 0.6).",
        )
    else:
        exp = expect(
            sim,
            "fail",
            "ambiguous",
            [],
            "torch.collective_hang",
            f"All reporting ranks time out on collective #{seq}, but this PyTorch "
            "version prints no dump-signal line, so the rank that never issued it "
            "cannot be identified; no hardware/network/filesystem signal exists "
            "(CHAINS.md §9: ambiguous when the stuck rank cannot be identified).",
            acceptable=["application", "unattributed"],
        )
    return Result(end, "FAILED", "134:0", exp)


def _chain_collective_hang(sim: Sim) -> Result:
    """CHAINS.md §9: every rank issued the collective and none completed; nothing else."""
    f = sim.sc.fault
    Options("collective_hang", f.options, {})
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    seq = sim.last_seq + 1
    tw, failed = straggler_cascade(sim, t, [], seq)
    end = teardown(sim, tw, failed, first_node=sim.nodes[0])
    exp = expect(
        sim,
        "fail",
        "ambiguous",
        [],
        "torch.collective_hang",
        f"Every rank enqueued collective #{seq} and none completed it; no XID, SXid, "
        "AER, IB, OOM or filesystem signal exists. A deadlock, a library bug and a "
        "silent fabric stall all fit (CHAINS.md §9: ambiguous when the stuck rank "
        "cannot be identified).",
        acceptable=["unattributed"],
    )
    return Result(end, "FAILED", "134:0", exp)


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "rank_exception": _chain_rank_exception,
    "rank_segfault": _chain_rank_segfault,
    "collective_straggler": _chain_collective_straggler,
    "collective_hang": _chain_collective_hang,
}
