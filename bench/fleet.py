#!/usr/bin/env python3
"""The fleet view over a big verdict store: how long do ``sattr nodes`` and friends take?

Usage: uv run python bench/fleet.py [--verdicts 1000000] [--passes 2000000] [--nodes 4000]
                                    [--db /tmp/attribution-bench/fleet.sqlite] [--rebuild]

Builds (once, kept between runs) a verdict store through ``attribution.store.Store`` (its
schema and migrations) with ``--verdicts`` stored verdicts (failed, timed-out and cancelled
runs, as a worker stores them) and ``--passes`` runs that passed (``runs`` rows only), over 30
days on ``--nodes`` nodes: one-node jobs mostly, some up to 64 nodes; 3% of failures blame a
node (a few bad nodes get more), 1% carry peer errors naming a node, 1% GPU XIDs.

Then times, in the same run:

* **baseline**: one SQLite pass reading the same columns of every run in the window
  (``SELECT key, nodelist, ... FROM runs``) and doing nothing with them: the floor;
* **fleet**: ``Store.fleet_into`` (exposure summed in SQL, failed runs one by one) into ``attribution.fleet.Fleet`` and its ``report()``
  (every section: incidents, domains, nodes, silent nodes, links, GPUs, drains);
* **sattr nodes**: the command as an operator runs it (``--since all --json --no-events``), a
  fresh process (imports and all).

Prints seconds and the ratio to the baseline. Not a timed test: it exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0 = datetime(2026, 10, 1, tzinfo=UTC)
DAYS = 30
CHUNK = 50_000


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _nodelist(rng: random.Random, nodes: int) -> tuple[str, list[str]]:
    roll = rng.random()
    size = 1 if roll < 0.7 else rng.choice((2, 4, 8, 16, 32, 64))
    first = rng.randrange(1, nodes - size + 2)
    names = [f"gpu{i:05d}" for i in range(first, first + size)]
    text = names[0] if size == 1 else f"gpu[{first:05d}-{first + size - 1:05d}]"
    return text, names


def build(path: Path, verdicts: int, passes: int, nodes: int) -> None:
    from attribution.store import Store

    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    Store(path).close()  # the schema, by the real migrations
    rng = random.Random(14)
    bad = [f"gpu{rng.randrange(1, nodes):05d}" for _ in range(12)]
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    span = DAYS * 86400
    total = verdicts + passes
    users = [f"user{i:03d}" for i in range(500)]
    began = time.monotonic()
    for start in range(0, total, CHUNK):
        v_rows, r_rows, resp, sym, gpu = [], [], [], [], []
        for i in range(start, min(start + CHUNK, total)):
            key = f"bench_{i}_0"
            text, names = _nodelist(rng, nodes)
            end = _iso(T0 + timedelta(seconds=rng.randrange(span)))
            user = rng.choice(users)
            part = f"p{rng.randrange(4)}"
            if i >= verdicts:
                r_rows.append(
                    (key, "bench", str(i), user, part, "COMPLETED", "pass", "none", text, end)
                )
                continue
            roll = rng.random()
            terminal, state, sub = "fail", "FAILED", "application"
            cause = "python-exception"
            if roll < 0.15:
                terminal, state, sub, cause = "cancelled", "CANCELLED", "none", None
            elif roll < 0.25:
                terminal, state, sub, cause = "timeout", "TIMEOUT", "none", None
            elif roll < 0.28:
                sub, cause = "hardware", "xid-79"
                node = rng.choice(bad) if rng.random() < 0.3 else rng.choice(names)
                resp.append((key, node, "gpu", "0000:3b:00.0"))
            elif roll < 0.29:
                sub, cause = "infrastructure", "ib-peer-suspect"
                sym.append((key, 0, "downstream", "nccl.ib_completion_error", ",".join(names[:4])))
            elif roll < 0.30:
                sub, cause = "ambiguous", None
                gpu.append((key, names[0], "0000:1b:00.0", 13, "application"))
            elif roll < 0.34:
                sub, cause = "unattributed", None
            v_rows.append(
                (key, "bench", str(i), str(i), user, f"job{i % 97}", part, state, text, end,
                 terminal, sub, cause, "{}")
            )  # fmt: skip
            r_rows.append((key, "bench", str(i), user, part, state, terminal, sub, text, end))
        db.executemany(
            "INSERT INTO verdicts (key, cluster, job_id, display_id, user, name, partition, state,"
            ' nodelist, "end", terminal_state, sub_domain, cause_id, verdict)'
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            v_rows,
        )
        db.executemany(
            "INSERT INTO runs (key, cluster, job_id, user, partition, state, terminal_state,"
            ' sub_domain, nodelist, "end") VALUES (?,?,?,?,?,?,?,?,?,?)',
            r_rows,
        )
        db.executemany(
            "INSERT INTO responsible (key, node, component, device) VALUES (?,?,?,?)", resp
        )
        db.executemany(
            "INSERT INTO symptoms (key, position, role, event, nodes) VALUES (?,?,?,?,?)", sym
        )
        db.executemany(
            "INSERT INTO gpu_errors (key, node, device, code, xid_class) VALUES (?,?,?,?,?)", gpu
        )
        db.commit()
    db.execute("PRAGMA optimize")
    db.close()
    print(f"built {path}: {verdicts:,} verdicts, {passes:,} passed runs, {nodes:,} nodes"
          f" in {time.monotonic() - began:.0f} s ({path.stat().st_size / 2**20:.0f} MiB)")  # fmt: skip


def baseline(path: Path) -> float:
    began = time.monotonic()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        'SELECT key, job_id, user, partition, nodelist, "end", state, terminal_state FROM runs'
    )
    sum(1 for _ in rows)
    db.close()
    return time.monotonic() - began


def fleet(path: Path) -> tuple[float, dict[str, int]]:
    from attribution.fleet import Fleet
    from attribution.store import Store

    began = time.monotonic()
    with Store(path, readonly=True) as store:
        f = store.fleet_into(Fleet())
    report = f.report()
    took = time.monotonic() - began
    counts = {
        "runs": report.runs,
        "failed": report.failed,
        "suspect nodes": sum(r.status == "suspect" for r in report.nodes),
        "incidents": len(report.incidents),
    }
    return took, counts


def cli(path: Path) -> float:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "attribution", "nodes", "--db", str(path), "--since", "all",
         "--json", "--no-events"],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={**os.environ, "ATTRIBUTION_CONFIG": "/dev/null"},
    )  # fmt: skip
    took = time.monotonic() - began
    if done.returncode != 0:
        print(f"sattr nodes failed: {done.stderr.strip()}")
    else:
        json.loads(done.stdout)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verdicts", type=int, default=1_000_000)
    parser.add_argument("--passes", type=int, default=2_000_000)
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/attribution-bench/fleet.sqlite"))
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    marker = args.db.with_suffix(".json")
    shape = {"verdicts": args.verdicts, "passes": args.passes, "nodes": args.nodes}
    if (
        args.rebuild
        or not args.db.exists()
        or not marker.exists()
        or (json.loads(marker.read_text()) != shape)
    ):
        build(args.db, args.verdicts, args.passes, args.nodes)
        marker.write_text(json.dumps(shape))
    base = baseline(args.db)
    took, counts = fleet(args.db)
    command = cli(args.db)
    print(
        f"store: {args.verdicts:,} verdicts + {args.passes:,} passed runs on {args.nodes:,} nodes"
    )
    print(f"baseline (SQLite reads every run's columns): {base:6.1f} s")
    print(
        f"fleet report (Store.fleet_into + Fleet):      {took:6.1f} s  {took / base:5.1f}x baseline"
    )
    print(
        f"sattr nodes --json (a fresh process):         {command:6.1f} s  {command / base:5.1f}x baseline"
    )
    print("found: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
