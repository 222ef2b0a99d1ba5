"""The job's own output before anything goes wrong: launch and NCCL initialisation lines,
then rank 0's training progress (megatron, hydra or plain lines, tqdm bars)."""

from __future__ import annotations

from attribution.sim.formats import format_line
from attribution.sim.state import Sim


def job_start(sim: Sim, *, init: bool = True) -> float:
    """Startup lines of the job: NCCL identity and init. Returns when init completed."""
    rng = sim.rng
    t = sim.t0 + rng.uniform(8, 20)
    sim.out(
        t - 5,
        f"{sim.bracket_stamp(t - 5)} Starting job {sim.job_id} on {len(sim.nodes)} "
        f"node(s), {sim.nranks} ranks",
        err=False,
    )
    if not init:
        return t
    if sim.sc.launcher == "torchrun":
        for node in sim.nodes[: min(len(sim.nodes), 4)]:
            sim.agent_log(
                node,
                t - 3,
                "WARNING",
                "run",
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                "default, to avoid your system being overloaded, please further tune the "
                "variable for optimal performance in your application as needed. ",
            )
    sim.nccl(0, t, "INFO", f"cudaDriverVersion {12040 + rng.randrange(0, 5) * 10}")
    sim.out(t, f"NCCL version {sim.nccl_version}+cuda12.4", err=False, task=sim.task(0))
    for node in sim.nodes:
        r0 = node.index * sim.rpn
        sim.nccl(r0, t + 0.2, "INFO", f"Bootstrap : Using {node.netdev}:{node.ip}<0>")
        if node.index < 4 or rng.random() < 0.05:
            sim.nccl(
                r0,
                t + 0.3,
                "INFO",
                "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
            )
            hcas = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(4))
            sim.nccl(
                r0,
                t + 0.9,
                "INFO",
                f"NET/IB : Using {hcas} [RO]; OOB {node.netdev}:{node.ip}<0>",
                tid_off=411,
            )
    done = t + rng.uniform(4, 15)
    for rank in range(sim.nranks):
        gpu = rank % sim.rpn
        comm = f"0x{0x55D4C8A00000 + (rank * 7919) % 0xFFFFF:x}"
        sim.nccl(
            rank,
            done + rank * 0.0001,
            "INFO",
            f"comm {comm} rank {rank} nranks {sim.nranks} cudaDev {gpu} nvmlDev {gpu} "
            f"busId {sim.nccl_busid(gpu)} commId 0x5e2f1a7b3c9d4e01 - Init COMPLETE",
            tid_off=409,
        )
    return done + 1


_TQDM_BAR = "█▏▎▍▌▋▊▉"


def progress(sim: Sim, t_from: float, t_to: float, *, steps_per_s: float = 0.5) -> int:
    """Rank 0's training progress between two times; returns the last step."""
    rng = sim.rng
    level = sim.sc.noise.level
    if t_to <= t_from:
        return 0
    n_lines = {"none": 2, "low": 6, "normal": 14, "high": 40}[level]
    every = max(5.0, (t_to - t_from) / n_lines)
    total = 20000
    style = rng.choice(["hydra", "megatron", "plain"])
    t = t_from
    step = 0
    loss = rng.uniform(6.5, 9.0)
    while t < t_to:
        step = int((t - t_from) * steps_per_s) + 1
        loss = max(1.2, loss * rng.uniform(0.985, 0.999))
        if style == "megatron":
            text = (
                f" [{sim.local(t):%Y-%m-%d %H:%M:%S}] iteration {step:>8d}/{total:>8d} | "
                f"consumed samples: {step * 1024:>12d} | elapsed time per iteration (ms): "
                f"{1000 / steps_per_s * rng.uniform(0.97, 1.03):.1f} | learning rate: "
                f"{3e-4 * min(1, step / 2000):.3E} | global batch size:  1024 | lm loss: "
                f"{loss:.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.2, 1.4):.3f} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
        elif style == "hydra":
            text = format_line("bracket_iso", sim.local(t), "[train][INFO] - ") + (
                f"step {step}/{total} | loss {loss:.4f} "
                f"| lr {3e-4 * min(1, step / 2000):.2e} | {rng.uniform(380, 460):.1f} "
                "TFLOP/s/GPU"
            )
        else:
            text = f"step {step:6d} | loss {loss:.4f} | tokens/s {rng.randrange(900000, 1200000)}"
        sim.out(t, text, err=False, task=sim.task(0))
        t += every * rng.uniform(0.8, 1.2)
    if sim.sc.noise.tqdm and level != "none":
        parts = []
        n = 12 if level != "high" else 60
        for i in range(n):
            done = (i + 1) * 100 // n
            full = done // 10
            bar = "█" * full + (_TQDM_BAR[rng.randrange(8)] if full < 10 else "")
            parts.append(
                f"Epoch 0: {done:3d}%|{bar:<10}| {i * 50}/{n * 50} "
                f"[{i // 60:02d}:{i % 60:02d}<{(n - i) // 60:02d}:{(n - i) % 60:02d}, "
                f" {rng.uniform(1.5, 2.5):.2f}it/s, loss={loss:.3f}]"
            )
        sim.out(t_from + 1, "\r".join(parts), task=sim.task(0))
    if level in ("normal", "high"):
        sim.out(
            t_from + 2,
            "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557: "
            "UserWarning: This DataLoader will create 16 worker processes in total. Our "
            "suggested max number of worker in current system is 12, which is smaller than "
            "what this DataLoader is going to create.",
            task=sim.task(0),
        )
        sim.out(t_from + 2, "  warnings.warn(_create_warning_msg(", task=sim.task(0))
    sim.last_seq = max(sim.last_seq, step * 3 + 7)
    return step
