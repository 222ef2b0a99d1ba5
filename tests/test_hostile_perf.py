"""Hostile and odd input against the reading-speed work of issue 17 (progress sampling, the
scanner's sampling helpers, the worker's in-place read of job output, the rules cache).

Each xfail test is a reproducer of a real problem found by an adversarial review; it passes
once the problem is fixed (strict: an unexpected pass fails the run, so remove the mark)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from attribution import scan
from attribution.bundle import diagnose_bundle
from attribution.model import Stream
from attribution.rules.compiled import RuleSet


def _diagnose(bundle: Path, ruleset: RuleSet, *, full: bool, monkeypatch: pytest.MonkeyPatch):
    """The verdict of ``bundle``, with progress lines sampled (the default) or all parsed."""
    if full:
        made = scan.ReadContext
        monkeypatch.setattr(scan, "ReadContext", lambda **kw: made(progress_lines=10**9, **kw))
    try:
        return diagnose_bundle(bundle, ruleset)[1]
    finally:
        monkeypatch.undo()


def _job(bundle: Path, lines: list[str], state: str = "TIMEOUT") -> None:
    (bundle / "job").mkdir(parents=True)
    record = {
        "job_id": "88231",
        "state": state,
        "exit_code": "0:15",
        "nodes": "gpu01",
        "start": "2025-09-03T07:40:00",
        "end": "2025-09-03T08:40:22",
        "timezone": "UTC",
    }
    (bundle / "job.json").write_text(json.dumps(record))
    (bundle / "job" / "stdout.log").write_text("\n".join(lines) + "\n")


def _lightning_steps(n: int) -> list[str]:
    return [
        f"Epoch 0:  {i * 100 // n:2d}%|#   | {i}/{n} [00:{i % 60:02d}<03:10,  2.49it/s,"
        f" loss={2 + (i % 50) / 100:.2f}, v_num=0]"
        for i in range(n)
    ]


INIT_COMPLETE = (
    "gpu01:10398:10412 [0] NCCL INFO ncclCommInitRank comm 0x55b1f20c8a10 rank 0 nranks 2"
    " cudaDev 0 nvmlDev 0 busId 1000 commId 0x5b2e07f31c9d4a6e - Init COMPLETE"
)
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 88231 ON gpu01 CANCELLED AT 2025-09-03T08:40:15"
    " DUE TO TIME LIMIT ***"
)


def test_restart_startup_line_is_not_lost_to_sampling(
    tmp_path: Path, ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # run 1 trains (2,500 steps: past the 2,000 picks parsed in full), run 2 starts up, prints
    # Lightning's model summary (a loss module: holds "loss"/"Loss", is no progress), completes
    # NCCL's set-up and hangs until the time limit
    lines = [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1",
        *_lightning_steps(2_500),
        "`Trainer.fit` stopped: `max_epochs=1` reached.",
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
        "  | Name    | Type             | Params",
        "0 | model   | GPT              | 124 M",
        "1 | loss_fn | CrossEntropyLoss | 0",
        INIT_COMPLETE,
        TIME_LIMIT,
    ]
    _job(tmp_path / "b", lines)
    full = _diagnose(tmp_path / "b", ruleset, full=True, monkeypatch=monkeypatch)
    assert full.cause is not None and full.cause.id == "hang-in-first-collective"
    sampled = _diagnose(tmp_path / "b", ruleset, full=False, monkeypatch=monkeypatch)
    out = next(c for c in sampled.coverage if c.stream is Stream.JOB_STDOUT)
    assert "progress_sampled" in [n.code for n in out.notes]
    assert sampled.cause is not None and sampled.cause.id == full.cause.id


def test_progress_after_a_chatty_start_is_not_lost_to_sampling(
    tmp_path: Path, ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = []  # NCCL_DEBUG=INFO of 1,000 ranks: 4 picked lines each
    for rank in range(1000):
        head = f"gpu01:{1000 + rank}:{1000 + rank} [{rank % 8}] NCCL INFO"
        setup += [
            f"{head} NCCL version 2.25.1+cuda12.8",
            f"{head} Bootstrap : Using ib0:10.0.0.5<0>",
            f"{head} NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.5<0>",
            f"{head} comm 0x55b1f20c8a10 rank {rank} nRanks 1000 nNodes 125 localRanks 8",
        ]
    lines = [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1000",
        *setup,
        INIT_COMPLETE,
        *_lightning_steps(50),
        "Epoch 0, global step 50: 'val_loss' was not in top 1",
        TIME_LIMIT,
    ]
    _job(tmp_path / "b", lines)
    full = _diagnose(tmp_path / "b", ruleset, full=True, monkeypatch=monkeypatch)
    assert full.cause is not None and full.cause.id != "hang-in-first-collective"
    sampled = _diagnose(tmp_path / "b", ruleset, full=False, monkeypatch=monkeypatch)
    assert sampled.cause is not None and sampled.cause.id == full.cause.id


# ---------------------------------------------------------------------------- the worker's read


def _read_job_output(tmp_path: Path, between=None):  # type: ignore[no-untyped-def]
    """Collect a job whose output is ``tmp_path/out.log`` as the worker does, call
    ``between()`` after the checks, then read it; returns the stdout coverage and lines."""
    from attribution.collect import collect
    from tests.pipeline.test_collect import config, job, read_all

    j = job(tmp_path)
    with collect(j, config(tmp_path)) as col:
        if between is not None:
            between()
        cov = read_all(col, j)
    return cov[("job_stdout", None)], cov["_lines"]


def test_a_sparse_job_output_does_not_hold_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import os

    from attribution.sources import textlog

    out = tmp_path / "out.log"
    out.write_bytes(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    os.truncate(out, 1 << 40)  # 1 TiB apparent, a few KiB on disk (no quota is charged)
    budget = 512 << 20  # stop the test's read here instead of reading the terabyte
    opened = textlog.open_log
    over: list[Path] = []

    def guarded(path: Path, **kw: object):  # type: ignore[no-untyped-def]
        handle = opened(path, **kw)  # type: ignore[arg-type]
        if isinstance(handle, io.FileIO):
            real, seen = handle.read, [0]

            def read(size: int = -1) -> bytes:
                if seen[0] > budget:
                    over.append(path)
                    return b""  # end the test's read here
                data = real(size)
                seen[0] += len(data)
                return data

            handle.read = read  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(textlog, "open_log", guarded)
    _read_job_output(tmp_path)
    assert not over, "read more than 512 MiB of a file with a few KiB on disk"


def test_job_output_compressed_after_the_check_is_not_decompressed(tmp_path: Path) -> None:
    import gzip

    out = tmp_path / "out.log"
    out.write_text("plain text when checked\n")
    bomb = gzip.compress(b"x" * (64 << 20))  # 64 MiB from about 64 KiB

    def rewrite() -> None:  # same inode, new content: the user's own file
        with open(out, "r+b") as f:
            f.write(bomb)

    cov, _ = _read_job_output(tmp_path, rewrite)
    assert cov.bytes <= len(bomb) + 64  # type: ignore[attr-defined]


def test_capture_of_a_sparse_job_output_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    from datetime import UTC, datetime, timedelta

    from attribution import collect as collect_module
    from attribution.capture import capture
    from attribution.config import Config
    from attribution.model import JobRecord

    out = tmp_path / "run" / "slurm-99.out"
    out.parent.mkdir()
    out.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    os.truncate(out, 1 << 40)
    budget, copied, over = 256 << 20, [0], []
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        if copied[0] > budget:
            over.append(offset)
            return b""  # end the test's copy here instead of writing the terabyte
        data = real(fd, n, offset)
        copied[0] += len(data)
        return data

    monkeypatch.setattr(collect_module.os, "pread", pread)
    start = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
    config = Config.model_validate(
        {"store": str(tmp_path / "v.sqlite"), "spool": str(tmp_path / "spool")}
    )
    job = JobRecord(
        job_id="99",
        cluster="c",
        nodes=("gpu012",),
        nodelist="gpu012",
        state="FAILED",
        start=start,
        end=start + timedelta(minutes=10),
        uid=os.getuid(),
        user="me",
        std_out=str(out),
        std_err=str(out),
    )
    with contextlib.suppress(Exception):  # refusing the file is a fine answer too
        capture(job, config, tmp_path / "bundle")
    assert not over, "copied more than 256 MiB of a file with a few KiB on disk"


@pytest.mark.xfail(
    strict=True,
    reason="(not from issue 17: no sampling involved) progress-before-restart also demotes the"
    " progress a later run printed after its own start-up, so a job that restarted, trained and"
    " ran out of time is blamed on a hang in its first collective",
)
def test_progress_after_the_last_start_up_still_counts(tmp_path: Path, ruleset: RuleSet) -> None:
    lines = [
        *[f"step {i}/100 loss {2 + i / 100:.2f}" for i in range(50)],
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
        INIT_COMPLETE,
        "step 10/100 loss 1.75",
        TIME_LIMIT,
    ]
    _job(tmp_path / "b", lines)
    verdict = diagnose_bundle(tmp_path / "b", ruleset)[1]
    assert verdict.cause is not None and verdict.cause.id != "hang-in-first-collective"
