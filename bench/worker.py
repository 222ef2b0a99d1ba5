#!/usr/bin/env python3
"""Benchmark the worker on a burst of real Slurm jobs: the pool against one job at a time.

Usage (as root, on the cluster .ci/slurm-up.sh starts):
    uv run python bench/worker.py [--jobs 200] [--processes 0] [--batch 200]

1. submits ``--jobs`` failing jobs as the test user (half of them one array, the other half
   single jobs, so both the batched sacct and the fair order are exercised) and waits until
   all have ended and the real EpilogSlurmctld hook has spooled every one;
2. moves those entries out of the CI spool into two private spools, identical copies;
3. runs ``sattr worker --once`` on the first copy as the worker ran before issue 12 (one
   process, one entry per Slurm query: ``pool.processes: 1, pool.batch: 1``): the baseline;
4. runs it on the second copy with the pool (``--processes``, 0 = one per core) and batches
   of ``--batch``.

Both runs read the same jobs from the same Slurm, in the same run of this script, and write
AdminComments as a site would. Printed: wall time, jobs/s and time to verdict (from the start
of the run to each verdict's ``diagnosed_at``: p50, p95, max) for both, and the ratio. Not a
test: it prints numbers (docs/performance.md keeps the latest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

CI_SPOOL = Path(os.environ.get("ATTRIBUTION_CI_SPOOL", "/var/tmp/attribution-ci/spool"))
USER = os.environ.get("SLURM_TEST_USER", "slurmtest")
CLUSTER = os.environ.get("SLURM_CLUSTER_NAME", "testcluster")
SUBDIRS = ("tmp", "new", "work", "done", "failed", "retry", "alloc")


def sh(*argv: str, user: str | None = None) -> str:
    if user:
        argv = ("runuser", "-u", user, "--", *argv)
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        sys.exit(f"bench/worker.py: {' '.join(argv[:6])} failed: {done.stderr.strip()}")
    return done.stdout


def submit(jobs: int, workdir: Path) -> list[str]:
    """Submit the burst; returns the spool keys the hook will write."""
    out = str(workdir / "job-%j.out")
    array = jobs // 2
    keys: list[str] = []
    if array:
        first = sh(
            "sbatch", "--parsable", "-D", str(workdir), "-o", str(workdir / "arr-%A_%a.out"),
            f"--array=0-{array - 1}", "--wrap", "echo start; exit 3", user=USER,
        ).strip().split(";")[0]  # fmt: skip
        keys += [f"{CLUSTER}_{first}_{t}_0" for t in range(array)]
    for _ in range(jobs - array):
        job = sh(
            "sbatch", "--parsable", "-D", str(workdir), "-o", out,
            "--wrap", "echo start; exit 1", user=USER,
        ).strip().split(";")[0]  # fmt: skip
        keys.append(f"{CLUSTER}_{job}_0")
    return keys


def wait_spooled(keys: list[str], timeout: float) -> None:
    end = time.monotonic() + timeout
    want = set(keys)
    while time.monotonic() < end:
        have = set(os.listdir(CI_SPOOL / "new"))
        if want <= have:
            return
        time.sleep(1)
    missing = sorted(want - set(os.listdir(CI_SPOOL / "new")))
    sys.exit(f"bench/worker.py: {len(missing)} job(s) never spooled, e.g. {missing[:3]}")


def make_spool(root: Path, entries: Path, keys: list[str]) -> None:
    for sub in SUBDIRS:
        (root / sub).mkdir(parents=True)
    for key in keys:
        shutil.copy2(entries / key, root / "new" / key)


def run_worker(base: Path, name: str, pool: dict[str, int], logs: Path) -> dict[str, float]:
    spool, store = base / f"spool-{name}", base / f"{name}.sqlite"
    config = base / f"{name}.yaml"
    settings = {
        "spool": str(spool),
        "store": str(store),
        "settle_delay": 0,
        "logs": {"kernel": [str(logs / "{node}" / "kern.log")]},
        "admin_comment": {"enabled": True},
        "reconcile": {"enabled": False},
        "pool": pool,
    }
    config.write_text(json.dumps(settings))
    t0 = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "attribution", "worker", "--once", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.time() - t0
    if done.returncode != 0:
        sys.exit(f"bench/worker.py: the {name} worker failed: {done.stderr[-2000:]}")
    db = sqlite3.connect(store)
    stamps = sorted(
        datetime.fromisoformat(r[0]).timestamp() - t0
        for r in db.execute("SELECT diagnosed_at FROM verdicts")
    )
    if not stamps:
        sys.exit(f"bench/worker.py: the {name} worker stored no verdict")

    def pct(q: float) -> float:
        return stamps[min(len(stamps) - 1, int(len(stamps) * q))]

    return {
        "verdicts": len(stamps),
        "wall": wall,
        "rate": len(stamps) / wall,
        "p50": pct(0.5),
        "p95": pct(0.95),
        "max": stamps[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--processes", type=int, default=0, help="0: one per core")
    ap.add_argument("--batch", type=int, default=200)
    args = ap.parse_args()
    if os.getuid() != 0:
        sys.exit("bench/worker.py: run as root on the cluster .ci/slurm-up.sh starts")
    base = Path(tempfile.mkdtemp(prefix="attr-worker-bench-", dir="/var/tmp"))
    base.chmod(0o755)
    workdir = base / "jobs"
    workdir.mkdir()
    workdir.chmod(0o1777)
    logs = base / "hosts"
    node = sh("hostname", "-s").strip()
    (logs / node).mkdir(parents=True)
    (logs / node / "kern.log").write_text("")
    print(f"submitting {args.jobs} failing jobs as {USER} ...", flush=True)
    t0 = time.monotonic()
    keys = submit(args.jobs, workdir)
    wait_spooled(keys, timeout=max(300.0, args.jobs * 2.0))
    print(f"all {len(keys)} ended and spooled after {time.monotonic() - t0:.1f} s", flush=True)
    entries = base / "entries"
    entries.mkdir()
    for key in keys:
        os.replace(CI_SPOOL / "new" / key, entries / key)
        (CI_SPOOL / "alloc" / key).unlink(missing_ok=True)
    make_spool(base / "spool-baseline", entries, keys)
    make_spool(base / "spool-pool", entries, keys)
    baseline = run_worker(base, "baseline", {"processes": 1, "batch": 1}, logs)
    pooled = run_worker(base, "pool", {"processes": args.processes, "batch": args.batch}, logs)
    print(
        f"\n{'':<28}{'verdicts':>9}{'wall s':>9}{'jobs/s':>9}{'p50 s':>9}{'p95 s':>9}{'max s':>9}"
    )
    for name, r in (("one at a time (baseline)", baseline), ("pool", pooled)):
        print(
            f"{name:<28}{r['verdicts']:>9.0f}{r['wall']:>9.1f}{r['rate']:>9.2f}"
            f"{r['p50']:>9.1f}{r['p95']:>9.1f}{r['max']:>9.1f}"
        )
    print(
        f"\npool vs baseline: {pooled['rate'] / baseline['rate']:.2f}x jobs/s, "
        f"last verdict {baseline['max'] / pooled['max']:.2f}x sooner "
        f"({os.cpu_count()} CPU cores; pool.processes={args.processes or 'one per core'})"
    )
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
