#!/usr/bin/env python3
"""Peak memory on hostile evidence: does RSS stay under the 256 MiB bound whatever the input?

Usage: uv run python bench/memory.py [--dir /tmp/attribution-bench/memory] [--scale 1.0]
       [--only CASE ...] [--delete]

Writes one bundle per case (kept between runs) and diagnoses each in a fresh process, which
prints its own peak RSS (getrusage ru_maxrss), wall time, verdict (cause and blamed nodes) and
how many signals were counted without their detail (the ``folded`` coverage notes: beyond the
memory bounds). A baseline in the same run: the peak RSS of a process that only imports
attribution and loads the rules. Cases:

* ``distinct-ranks``: 1,000,000 NCCL remote-error lines, each from a different rank
  (nothing folds by repetition; the rank and memory bounds must hold);
* ``distinct-xids``: 300,000 XID lines on 64 nodes with distinct PCI ids and messages;
* ``huge-line``: one 300 MB line without a newline, then an XID;
* ``binary``: 200 MB of random bytes with an XID line in the middle;
* ``many-nodes``: 4,096 nodes, each with a small kernel log and a few distinct events;
* ``ranks-12500-nodes``: a 100,000-GPU job, 100,000 ranks on 12,500 nodes (8 each), every rank
  printing its NCCL init line, an IB completion error, a watchdog timeout and a remote error
  with its own host and rank; one node's kernel log has the XID 79 that caused it;
* ``ranks-2-nodes``: the same 100,000 ranks on 2 nodes (the per-node bound does not help);
* ``distinct-10gb``: 10 GB of job output in which every line differs and matches an extractor
  (other hosts, ranks, sequence numbers, messages), around the same XID 79. ``--scale`` shrinks
  it (0.01: 100 MB); the size used is printed.

Not a timed test: it prints numbers and the bound, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOUND_MIB = 256
XID = "NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
START = "2026-05-20T08:00:00"
END = "2026-05-20T09:00:00"


def _job(root: Path, nodes: str) -> None:
    (root / "job").mkdir(parents=True, exist_ok=True)
    record = {"job_id": "1", "state": "FAILED", "exit_code": "1:0", "nodes": nodes}
    record |= {"start": START, "end": END, "timezone": "UTC"}
    (root / "job.json").write_text(json.dumps(record))


def _kern(ts: str, host: str, msg: str) -> str:
    return f"{ts} {host} kernel: {msg}\n"


def distinct_ranks(root: Path, scale: float) -> None:
    _job(root, "n[1-2]")
    n = int(1_000_000 * scale)
    with open(root / "job" / "stdout.log", "w") as out:
        for i in range(n):
            out.write(
                f"[rank{i}]: ncclRemoteError: A call failed possibly due to a network error or a"
                " remote process exiting prematurely.\n"
            )


def distinct_xids(root: Path, scale: float) -> None:
    _job(root, "n[001-064]")
    per_node = int(300_000 * scale) // 64
    for node in range(1, 65):
        host = f"n{node:03d}"
        path = root / "nodes" / host / "kern.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as out:
            for i in range(per_node):
                msg = XID.format(bus=i % 256).replace(
                    "GPU has fallen", f"event {i}: GPU has fallen"
                )
                out.write(_kern(f"2026-05-20T08:{10 + i % 40:02d}:00+00:00", host, msg))


def huge_line(root: Path, scale: float) -> None:
    _job(root, "n1")
    path = root / "nodes" / "n1" / "kern.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    block = b"x" * (1 << 20)
    with open(path, "wb") as out:
        for _ in range(int(300 * scale)):
            out.write(block)
        out.write(b"\n" + _kern("2026-05-20T08:30:00+00:00", "n1", XID.format(bus=0x3B)).encode())


def binary(root: Path, scale: float) -> None:
    _job(root, "n1")
    path = root / "nodes" / "n1" / "kern.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(7)
    half = int(100 * scale)
    with open(path, "wb") as out:
        for _ in range(half):
            out.write(rnd.randbytes(1 << 20))
        out.write(b"\n" + _kern("2026-05-20T08:30:00+00:00", "n1", XID.format(bus=0x3B)).encode())
        for _ in range(half):
            out.write(rnd.randbytes(1 << 20))


def many_nodes(root: Path, scale: float) -> None:
    count = int(4096 * scale)
    _job(root, f"n[0001-{count:04d}]")
    for node in range(1, count + 1):
        host = f"n{node:04d}"
        path = root / "nodes" / host / "kern.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            _kern(
                f"2026-05-20T08:{m:02d}:00+00:00", host, f"mlx5_core 0000:5c:00.0 ib{m}: Link down"
            )
            for m in range(5, 10)
        ]
        path.write_text("".join(lines))


RANKS = 100_000
XID_NODE = 6250  # the node whose GPU falls off the bus, in the middle of the job's nodes
IB_LINE = (
    "{host}:{pid}:{tid} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from"
    " peer 10.12.24.106<50112> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid"
    " fe80::12c4:ebfe:ffd2:{dev:x}ba remoteGids::ffff:10.12.24.106\n"
)
INIT_LINE = (
    "{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0x7f3a{rank:08x} rank {rank} nranks {nranks}"
    " cudaDev {dev} nvmlDev {dev} busId {bus:x}000 commId 0x5c1e9a7d41f2b3c0 - Init COMPLETE\n"
)
WATCHDOG_LINE = (
    "[rank{rank}]:[E520 08:41:{sec:02d}.{usec:06d}418 ProcessGroupNCCL.cpp:607] [Rank {rank}]"
    " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE,"
    " NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600012 milliseconds"
    " before timing out.\n"
)
REMOTE_LINE = (
    "[rank{rank}]: ncclRemoteError: A call failed possibly due to a network error or a remote"
    " process exiting prematurely.\n"
)


def _xid_node(root: Path, host: str) -> None:
    """The cause: one GPU of ``host`` falls off the bus ten minutes before the timeouts."""
    path = root / "nodes" / host / "kern.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        _kern("2026-05-20T08:10:00+00:00", host, "mlx5_core 0000:5c:00.0: Port module event"),
        _kern("2026-05-20T08:30:00+00:00", host, XID.format(bus=0x3B)),
    ]
    path.write_text("".join(lines))


def _rank_lines(rank: int, host: str, pid: int, nranks: int) -> tuple[str, ...]:
    """One rank's lines: its NCCL init line (at start-up), then an IB completion error, a
    watchdog timeout and a remote error (when the job fails)."""
    dev = rank % 8
    tid = pid + 400 + dev
    sec, usec = rank % 60, (rank * 7919) % 1_000_000
    return (
        INIT_LINE.format(host=host, pid=pid, dev=dev, rank=rank, nranks=nranks, bus=0x18 + dev),
        IB_LINE.format(host=host, pid=pid, tid=tid, dev=dev),
        WATCHDOG_LINE.format(rank=rank, sec=sec, usec=usec),
        REMOTE_LINE.format(rank=rank),
    )


def _write_ranks(root: Path, ranks: int, place: Callable[[int], tuple[str, int]]) -> None:
    """Every rank's start-up line first, then each kind of error from every rank in turn
    (``place``: a rank's host and pid)."""
    with open(root / "job" / "stdout.log", "w") as out:
        for phase in range(4):
            for rank in range(ranks):
                host, pid = place(rank)
                out.write(_rank_lines(rank, host, pid, ranks)[phase])


def ranks_many_nodes(root: Path, scale: float) -> None:
    ranks = int(RANKS * scale)
    nodes = max(1, ranks // 8)
    _job(root, f"n[00001-{nodes:05d}]")
    _xid_node(root, f"n{min(XID_NODE, nodes):05d}")
    _write_ranks(root, ranks, lambda rank: (f"n{rank // 8 + 1:05d}", 20_000 + rank % 8))


def ranks_two_nodes(root: Path, scale: float) -> None:
    ranks = int(RANKS * scale)
    _job(root, "n[1-2]")
    _xid_node(root, "n2")
    half = (ranks + 1) // 2
    _write_ranks(root, ranks, lambda rank: (f"n{rank // half + 1}", 20_000 + rank))


# distinct-10gb: a block of lines whose every line carries the block number (an 8-digit
# placeholder replaced per block) followed by its own index, so no two lines in the file are
# equal, and every line matches an extractor; hosts outside the job, ranks, pids, sequence
# numbers, peers and messages all differ
_BLOCK_ID = "@@BLOCK@"
_DISTINCT = (
    "x{id}:{pid}:{pid} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from"
    " peer peer{id}<50112> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid"
    " fe80::12c4:ebfe:ffd2:3fba remoteGids::ffff:10.12.24.106\n",
    "[rank{id}]:[E520 08:41:{sec:02d}.{usec:06d}418 ProcessGroupNCCL.cpp:607] [Rank {id}] Watchdog"
    " caught collective operation timeout: WorkNCCL(SeqNum={id}, OpType=ALLREDUCE,"
    " NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600012 milliseconds"
    " before timing out.\n",
    "[rank{id}]: ncclRemoteError: A call failed possibly due to a network error or a remote"
    " process exiting prematurely.\n",
    "n{node:05d}:{pid}:{pid} [{dev}] misc/socket.cc:538 NCCL WARN Net : Call to recv from"
    " 10.12.{dev}.{sec}<{id}> failed : Connection reset by peer (request {id} of communicator"
    " 0x7f3a5c1e9a7d, {usec} bytes pending in the proxy's receive queue)\n",
)


def _distinct_block(lines: int) -> bytes:
    out = []
    for i in range(lines):
        ident = f"{_BLOCK_ID}{i:05d}"
        out.append(
            _DISTINCT[i % len(_DISTINCT)].format(
                id=ident,
                pid=10_000 + i,
                dev=i % 8,
                node=i % 12_500 + 1,
                sec=i % 60,
                usec=(i * 7919) % 1_000_000,
            )
        )
    return "".join(out).encode()


def distinct_10gb(root: Path, scale: float) -> None:
    _job(root, "n[00001-12500]")
    _xid_node(root, f"n{XID_NODE:05d}")
    target = int(10 * 10**9 * scale)
    block = _distinct_block(16_384)
    placeholder = _BLOCK_ID.encode()
    written = 0
    with open(root / "job" / "stdout.log", "wb", buffering=0) as out:
        number = 0
        while written < target:
            data = block.replace(placeholder, b"%08d" % number)
            if written + len(data) > target:  # end on a whole line
                data = data[: data.rfind(b"\n", 0, target - written) + 1] or data
            out.write(data)
            written += len(data)
            number += 1


CASES = {
    "distinct-ranks": distinct_ranks,
    "distinct-xids": distinct_xids,
    "huge-line": huge_line,
    "binary": binary,
    "many-nodes": many_nodes,
    "ranks-12500-nodes": ranks_many_nodes,
    "ranks-2-nodes": ranks_two_nodes,
    "distinct-10gb": distinct_10gb,
}

PROBE = """
import json, resource, sys, time
t0 = time.perf_counter()
from attribution.rules.loader import load_ruleset
rules = load_ruleset()
verdict = None
if sys.argv[1] != "-":
    from attribution.bundle import diagnose_bundle
    _, verdict = diagnose_bundle(sys.argv[1], rules)
from attribution.hostlist import compress
folded = [n for c in verdict.coverage for n in c.notes if n.code == "folded"] if verdict else []
print(json.dumps({
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "seconds": time.perf_counter() - t0,
    "cause": verdict.cause.id if verdict and verdict.cause else None,
    "nodes": compress(sorted({r.node for r in verdict.responsible})) if verdict else "",
    "folded": sum(int(n.args["count"]) for n in folded),
}))
"""


def probe(bundle: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, bundle],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _write(name: str, root: Path, scale: float) -> None:
    """Write a case's bundle next to ``root`` and move it into place when it is whole (an
    interrupted run leaves no half bundle that a later run would take for a whole one)."""
    partial = root.with_name(root.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    started = time.perf_counter()
    CASES[name](partial, scale)
    partial.rename(root)
    print(f"  (wrote {name} in {time.perf_counter() - started:.0f} s)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/attribution-bench/memory")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink or grow every case")
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    parser.add_argument(
        "--delete", action="store_true", help="delete each case's bundle after its run"
    )
    args = parser.parse_args()
    base = Path(args.dir)
    baseline = probe("-")
    print(f"baseline (import + load rules): {baseline['rss_mib']:.0f} MiB; bound {BOUND_MIB} MiB")
    print(
        f"{'case':18} {'on disk':>9} {'peak RSS':>9} {'bound':>6} {'seconds':>8}  cause (nodes),"
        " signals counted without detail"
    )
    for name in args.only or CASES:
        root = base / f"{name}-{args.scale:g}"
        if not (root / "job.json").exists():
            _write(name, root, args.scale)
        disk = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / (1 << 20)
        got = probe(str(root))
        rss = float(got["rss_mib"])  # type: ignore[arg-type]
        mark = "ok" if rss < BOUND_MIB else "OVER"
        print(
            f"{name:18} {disk:7.0f}MB {rss:7.0f}MB {mark:>6} {float(got['seconds']):8.1f}"  # type: ignore[arg-type]
            f"  {got['cause']} ({got['nodes'] or '-'}), {got['folded']}",
            flush=True,
        )
        if args.delete:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
