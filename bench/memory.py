#!/usr/bin/env python3
"""Peak memory on hostile evidence: does RSS stay under the 256 MiB bound whatever the input?

Usage: uv run python bench/memory.py [--dir /tmp/attribution-bench/memory] [--scale 1.0]

Writes one bundle per case (kept between runs) and diagnoses each in a fresh process, which
prints its own peak RSS (getrusage ru_maxrss) and wall time. A baseline in the same run: the
peak RSS of a process that only imports attribution and loads the rules. Cases:

* ``distinct-ranks``: 1,000,000 NCCL remote-error lines, each from a different rank
  (nothing folds by repetition; the per-node rank bound must hold);
* ``distinct-xids``: 300,000 XID lines on 64 nodes with distinct PCI ids and messages;
* ``huge-line``: one 300 MB line without a newline, then an XID;
* ``binary``: 200 MB of random bytes with an XID line in the middle;
* ``many-nodes``: 4,096 nodes, each with a small kernel log and a few distinct events.

Not a timed test: it prints numbers and the bound, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
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


CASES = {
    "distinct-ranks": distinct_ranks,
    "distinct-xids": distinct_xids,
    "huge-line": huge_line,
    "binary": binary,
    "many-nodes": many_nodes,
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
print(json.dumps({
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "seconds": time.perf_counter() - t0,
    "cause": verdict.cause.id if verdict and verdict.cause else None,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/attribution-bench/memory")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink or grow every case")
    parser.add_argument("--only", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    base = Path(args.dir)
    baseline = probe("-")
    print(f"baseline (import + load rules): {baseline['rss_mib']:.0f} MiB")
    print(f"{'case':16} {'on disk':>9} {'peak RSS':>9} {'bound':>6} {'seconds':>8}  cause")
    for name in args.only or CASES:
        root = base / f"{name}-{args.scale:g}"
        if not (root / "job.json").exists():
            started = time.perf_counter()
            CASES[name](root, args.scale)
            print(f"  (wrote {name} in {time.perf_counter() - started:.0f} s)", file=sys.stderr)
        disk = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / (1 << 20)
        got = probe(str(root))
        rss = float(got["rss_mib"])  # type: ignore[arg-type]
        mark = "ok" if rss < BOUND_MIB else "OVER"
        print(
            f"{name:16} {disk:7.0f}MB {rss:7.0f}MB {mark:>6} {float(got['seconds']):8.1f}"  # type: ignore[arg-type]
            f"  {got['cause']}"
        )


if __name__ == "__main__":
    main()
