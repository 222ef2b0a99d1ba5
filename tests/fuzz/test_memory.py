"""Memory and time on many distinct lines of job output: ``sattr diagnose`` in a fresh process
on a bundle whose job printed ``ATTRIBUTION_FUZZ_LINES`` (default 200,000) lines that each match
an extractor and each differ (host, rank, peer, sequence number), around one real XID 95 in a
node's kernel log. Its peak RSS (``getrusage`` of the finished child) may grow only a bounded
amount over the same command on a tiny bundle, and it ends in bounded time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .properties import JOB, JOB_NODES, TRACEBACK, clean_kernel_log, encode

LINES = int(os.environ.get("ATTRIBUTION_FUZZ_LINES", "200000"))
GROWTH_MIB = 160  # peak RSS over the tiny bundle's (docs/performance.md: 256 MiB in all)
SECONDS = 300
# runs the command and prints its peak RSS: a fresh process has no other children
WRAPPER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True)
sys.stdout.buffer.write(done.stdout)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "peak_kib": peak, "err": done.stderr.decode()[-2000:]}),
      file=sys.stderr)
"""
XID95 = (
    "2026-01-01T10:20:00+00:00 gpu-a02 kernel: NVRM: Xid (PCI:0000:3b:00): 95, pid=7062,"
    " name=python, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"
)


def distinct_line(i: int) -> str:
    """Line ``i`` of the job's output: one of four shapes, every field that varies in real
    output different from every other line's."""
    node = JOB_NODES[i % len(JOB_NODES)]
    a, b = divmod(i, 250)
    shape = i % 4
    if shape == 0:
        return (
            f"{node}:{10_000 + i}:{20_000 + i} [{i % 8}] transport/net_ib.cc:1696 NCCL WARN"
            f" NET/IB : Got completion from peer 10.{a % 250}.{b}.{i % 250}<{1024 + i % 60_000}>"
            f" with status=12 opcode=1 len={i} vendor err {i % 256} (Send)"
        )
    if shape == 1:
        return (
            f"[rank{i}]: ncclRemoteError: A call failed possibly due to a network error or a"
            f" remote process exiting prematurely. Last error: socket {i} closed by peer"
        )
    if shape == 2:
        return (
            f"[rank{i}]:[E101 10:41:02.{i:09d} ProcessGroupNCCL.cpp:607] [Rank {i}] Watchdog"
            f" caught collective operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE,"
            f" NumelIn={i}, NumelOut={i}, Timeout(ms)=600000) ran for {600_000 + i} milliseconds"
            " before timing out."
        )
    return (
        f"{node}:{10_000 + i}:{20_000 + i} [{i % 8}] misc/socket.cc:538 NCCL WARN Net :"
        f" Connection closed by remote peer gpu-a0{1 + (i + 1) % 4}<{1024 + i % 60_000}>"
    )


def write_bundle(root: Path, lines: int) -> Path:
    (root / "job").mkdir(parents=True)
    (root / "job.json").write_text(json.dumps(JOB))
    with (root / "job" / "stdout.log").open("w") as out:
        for start in range(0, lines, 10_000):
            out.write(
                "".join(distinct_line(i) + "\n" for i in range(start, min(lines, start + 10_000)))
            )
    (root / "job" / "stderr.log").write_bytes(encode(list(TRACEBACK)))
    for node in JOB_NODES:
        (root / "nodes" / node).mkdir(parents=True)
        log = clean_kernel_log(node)
        if node == "gpu-a02":
            log += (XID95 + "\n").encode()
        (root / "nodes" / node / "kernel.log").write_bytes(log)
    return root


def diagnose(bundle: Path) -> tuple[dict[str, Any], dict[str, Any], float]:
    """(the verdict, the child's exit code, peak RSS and stderr, seconds) of ``sattr diagnose
    --json`` on ``bundle``."""
    sattr = Path(sys.executable).with_name("sattr")
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(sattr), "diagnose", "--json", str(bundle)],
        capture_output=True,
        timeout=SECONDS * 2,
        check=True,
    )
    took = time.monotonic() - began
    run = json.loads(done.stderr.decode().strip().splitlines()[-1])
    assert run["rc"] == 0, run["err"]
    return json.loads(done.stdout), run, took


@pytest.mark.slow
def test_many_distinct_output_lines_keep_memory_and_time_bounded(tmp_path: Path) -> None:
    tiny = write_bundle(tmp_path / "tiny", 4)
    big = write_bundle(tmp_path / "big", LINES)
    _, base, _ = diagnose(tiny)
    verdict, run, took = diagnose(big)
    growth = (run["peak_kib"] - base["peak_kib"]) / 1024
    print(
        f"{LINES:,} lines: {took:.1f} s, peak RSS {run['peak_kib'] / 1024:.0f} MiB, {growth:+.0f} MiB"
    )
    assert growth < GROWTH_MIB, f"peak RSS grew {growth:.0f} MiB over a tiny bundle's"
    assert took < SECONDS, f"{took:.0f} s"
    # the node's own evidence is not crowded out by the job's output
    assert [r["node"] for r in verdict["responsible"]] == ["gpu-a02"], verdict["summary"]
