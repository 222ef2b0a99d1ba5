#!/usr/bin/env python3
"""The worker's own reading path on jobs of many nodes without logs (issue 18, class 4).

Usage: uv run python bench/collect.py [--nodes 1000,20000,200000] [--dir /tmp/attribution-bench/collect]

For each node count, in a fresh process: a job record of that many nodes, a site config whose
kernel template is per node (``<dir>/hosts/{node}/kern.log*``, which no node has) and no syslog
template, and a job output with a Python traceback; then what ``Worker.diagnose`` runs:
``collect`` (the sources and their coverage), reading and ``analyze``. It prints the wall time of
``collect`` and of the whole diagnosis, the peak RSS, how many sources and coverage entries the
verdict carries, and the cause. The smallest count is the baseline of the same run; the last
column is the cost per node against it. Not a timed test: it prints numbers and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys, time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from attribution.analyze import AnalysisOptions, analyze
from attribution.collect import collect
from attribution.config import Config
from attribution.model import JobRecord
from attribution.rules.loader import load_ruleset
from attribution.scan import read_context
from attribution.sources.readahead import read_sources

count, site = int(sys.argv[1]), Path(sys.argv[2])
start = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
job = JobRecord(
    job_id="1", cluster="c", nodes=tuple(f"n{i:06d}" for i in range(1, count + 1)),
    nodelist=f"n[000001-{count:06d}]", start=start, end=start + timedelta(minutes=10),
    uid=os.getuid(), user="me", std_out=str(site / "out.log"), std_err=str(site / "out.log"),
    state="FAILED", exit_code="1:0",
)
config = Config.model_validate(
    {"logs": {"kernel": [str(site / "hosts/{node}/kern.log*")], "slurmctld": [str(site / "ctld.log")]}}
)
rules = load_ruleset()
t0 = time.perf_counter()
with collect(job, config) as col:
    t1 = time.perf_counter()
    readers, lines = read_sources(col.specs, read_context(job, rules))
    verdict = analyze(
        job, lines, rules, options=AnalysisOptions(),
        coverage=lambda: [col.adjust(c) for r in readers for c in r.coverages()],
    )
    sources = len(col.specs)
t2 = time.perf_counter()
print(json.dumps({
    "collect": t1 - t0, "total": t2 - t0, "sources": sources, "coverage": len(verdict.coverage),
    "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "cause": verdict.cause.id if verdict.cause else None,
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1000,20000,200000")
    parser.add_argument("--dir", default="/tmp/attribution-bench/collect")
    args = parser.parse_args()
    site = Path(args.dir)
    site.mkdir(parents=True, exist_ok=True)
    (site / "out.log").write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
    counts = sorted(int(n) for n in args.nodes.split(","))
    print(
        f"{'nodes':>8} {'collect s':>10} {'total s':>8} {'RSS MiB':>8} {'sources':>8}"
        f" {'coverage':>9}  cause  ms/node vs {counts[0]:,} nodes"
    )
    base = None
    for count in counts:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(count), str(site)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        per_node = r["total"] / count * 1000
        base = base or per_node
        print(
            f"{count:>8,} {r['collect']:>10.2f} {r['total']:>8.2f} {r['rss_mib']:>8.0f}"
            f" {r['sources']:>8,} {r['coverage']:>9,}  {r['cause']}  {per_node:.3f}"
            f" ({per_node / base:.2f}x)"
        )


if __name__ == "__main__":
    main()
