#!/usr/bin/env python3
"""``sattr serve`` over a big verdict store: how long do the API, the pages and /metrics take?

Usage: uv run python bench/server.py [--verdicts 1000000] [--nodes 4000]
                                     [--db /tmp/attribution-bench/server.sqlite] [--rebuild]
                                     [--repeat 5]

Builds (once, kept between runs) a store of ``--verdicts`` verdicts with bench/fleet.py's
builder (30 days, ``--nodes`` nodes, 3% of failures blaming a node) plus one real verdict (a
sample bundle's) for the job routes, then serves it with the real application on uvicorn
(loopback, a thread) and asks it over HTTP with httpx, as a client would. Each request runs
``--repeat`` times; the median is printed, and its ratio to the baseline measured in the same
run: the bare SQLite queries behind the first page of the list (the page's rows and the
count), on a connection of their own. ``/metrics`` is timed uncached (its 10 s cache off).

Not a timed test: it exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import socket
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKEN = "bench-token"


def _fleet_builder() -> Callable[[Path, int, int, int], None]:
    spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    builder: Callable[[Path, int, int, int], None] = module.build
    return builder


def build(path: Path, verdicts: int, nodes: int) -> str:
    """The store, and the job id of its one real verdict."""
    from attribution.bundle import diagnose_bundle
    from attribution.rules.loader import load_ruleset
    from attribution.store import Store

    _fleet_builder()(path, verdicts, 0, nodes)
    _, verdict = diagnose_bundle(ROOT / "tests" / "cases" / "real-case11", load_ruleset())
    with Store(path) as store:
        store.save(verdict)
    return verdict.job.display_id


def timed(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def baseline(path: Path) -> None:
    """The queries behind the list's first page, bare: its rows and the count."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.execute('SELECT * FROM verdicts ORDER BY "end" DESC, key LIMIT 50').fetchall()
    db.execute("SELECT count(*) FROM verdicts").fetchall()
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verdicts", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/attribution-bench/server.sqlite"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import httpx
    import uvicorn

    import attribution.server.metrics as metrics
    from attribution.config import Config
    from attribution.server.app import create_app
    from attribution.store import Store

    job_file = args.db.with_suffix(".job")
    if args.rebuild or not args.db.exists() or not job_file.exists():
        args.db.parent.mkdir(parents=True, exist_ok=True)
        job_file.write_text(build(args.db, args.verdicts, args.nodes))
    job = job_file.read_text().strip()
    Store(args.db).close()  # the store's migrations (its indexes), as the worker applies them
    with Store(args.db, readonly=True) as store:
        count = store.count()
        node = store.responsible_totals()[0]["node"]
    metrics.CACHE = 0.0  # every scrape reads the store
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(Config(), args.db, None, token=TOKEN)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    http = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=600,
    )

    def get(path: str) -> Callable[[], object]:
        def call() -> object:
            answer = http.get(path)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:200])
            return answer

        return call

    print(f"store: {args.db} ({count:,} verdicts, {args.db.stat().st_size / 2**20:.0f} MiB)")
    base = timed(lambda: baseline(args.db), args.repeat)
    print(f"{'baseline: bare SQLite, first page + count':52s} {base * 1000:9.1f} ms     1.0x")
    cases = [
        ("GET /api/v1/jobs (first 50, every job)", "/api/v1/jobs?since=all"),
        (
            f"GET /api/v1/jobs (offset {count // 2:,})",
            f"/api/v1/jobs?since=all&offset={count // 2}",
        ),
        ("GET /api/v1/jobs (node=one blamed node)", f"/api/v1/jobs?since=all&node={node}"),
        ("GET /api/v1/jobs (7 days, sub_domain=hardware)", "/api/v1/jobs?sub_domain=hardware"),
        ("GET /api/v1/jobs/{job} (one verdict)", f"/api/v1/jobs/{job}"),
        ("GET / (list page + 2 charts, every job)", "/"),
        ("GET /?since=7d (list page + 2 charts, 7 days)", "/?since=7d"),
        ("GET /jobs/{job} (job page)", f"/jobs/{job}"),
        ("GET /metrics (uncached)", "/metrics"),
    ]
    for label, path in cases:
        took = timed(get(path), args.repeat)
        ratio = took / base if base > 0 else float("inf")
        print(f"{label:52s} {took * 1000:9.1f} ms {ratio:8.1f}x")
    server.should_exit = True
    thread.join(timeout=10)


if __name__ == "__main__":
    main()
