#!/usr/bin/env python3
"""Time a tiny diagnosis through the real ``sattr`` entry point, each run a fresh process.

Usage: uv run python bench/cli.py [--runs 15] [--bundle tests/cases/benign-noise-completed]

What a user waits for when they type ``sattr diagnose BUNDLE --json`` (or ``sattr JOBID``) on a
small job is start-up: imports and the rules, not reading. This script measures it in one run,
beside two baselines from the same run:

* ``python -c pass``: the interpreter alone;
* ``python -c "import attribution"``: the interpreter and the package's ``__init__``;
* ``sattr JOBID --json``: the job's verdict from a store that holds it alone;
* ``sattr diagnose BUNDLE --json`` with the ruleset cache cold (removed before each run: the
  rules are loaded from their files and the cache written) and warm (read from the cache),
  each with the bytecode of every module compiled (.pyc) and with none (every module compiled
  from source at each start, as where ``PYTHONDONTWRITEBYTECODE`` is set and nothing compiled
  the install).

Each round runs each command once, so that other load on the machine falls on all alike.

The bytecode and the cache live in a temporary directory (``PYTHONPYCACHEPREFIX``,
``ATTRIBUTION_RULES_CACHE``), so the result does not depend on what this machine has compiled
or cached before, and the user's own cache is not touched. It prints the median (p50) and the
best wall time of each, the median CPU time (user + system: about what an idle machine would
wait), the target (150 ms, warm cache and compiled bytecode), whether every run printed the
same verdict, and where the time of a warm run goes (imports, rules, the diagnosis itself),
measured inside one process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 150.0

STORE = """
import sys
from attribution.bundle import diagnose_bundle
from attribution.rules.loader import load_ruleset
from attribution.store import Store
_, verdict = diagnose_bundle(sys.argv[1], load_ruleset())
with Store(sys.argv[2]) as store:
    store.save(verdict)
print(verdict.job.display_id)
"""

PHASES = """
import json, sys, time
clocks = (time.perf_counter, time.process_time)
t0 = [c() for c in clocks]
import attribution.cli
t1 = [c() for c in clocks]
from attribution.analyze import AnalysisOptions
from attribution.bundle import diagnose_bundle
from attribution.model import verdict_to_dict
t2 = [c() for c in clocks]
from attribution.cli.common import load_rules
ruleset = load_rules(())
t3 = [c() for c in clocks]
_, verdict = diagnose_bundle(sys.argv[1], ruleset, options=AnalysisOptions())
text = json.dumps(verdict_to_dict(verdict), indent=2)
t4 = [c() for c in clocks]
names = ("cli", "engine", "rules", "diagnosis")
marks = (t0, t1, t2, t3, t4)
print(json.dumps({
    "wall": {n: marks[i + 1][0] - marks[i][0] for i, n in enumerate(names)},
    # process_time counts from the start of the process: "start" is the interpreter's own
    "cpu": {"start": t0[1], **{n: marks[i + 1][1] - marks[i][1] for i, n in enumerate(names)}},
}))
"""


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall time, CPU time (user + system) and standard output of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu, done.stdout


def row(name: str, times: list[float], cpus: list[float]) -> str:
    p50, best = statistics.median(times) * 1e3, min(times) * 1e3
    return f"| {name} | {p50:.0f} | {best:.0f} | {statistics.median(cpus) * 1e3:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each (default 15)")
    parser.add_argument(
        "--bundle",
        default=str(ROOT / "tests" / "cases" / "benign-noise-completed"),
        help="the bundle to diagnose (default: a small golden case)",
    )
    parser.add_argument(
        "--sattr",
        default=str(Path(sys.executable).with_name("sattr")),
        help="the sattr entry point (default: the one beside this Python)",
    )
    args = parser.parse_args()
    if not Path(args.sattr).is_file():
        sys.exit(f"{args.sattr}: no sattr entry point (install the project: uv sync)")
    python = sys.executable
    diagnose = [args.sattr, "diagnose", args.bundle, "--json"]
    with tempfile.TemporaryDirectory(prefix="attribution-bench-cli-") as tmp:
        work = Path(tmp)
        cache = work / "rules-cache"
        unset = ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")
        base = {k: v for k, v in os.environ.items() if k not in unset}
        base["ATTRIBUTION_RULES_CACHE"] = str(cache)
        compiled = {**base, "PYTHONPYCACHEPREFIX": str(work / "pyc")}
        # an empty prefix that is never written: every module is compiled from source
        source = {**base, "PYTHONPYCACHEPREFIX": str(work / "none"), "PYTHONDONTWRITEBYTECODE": "1"}
        # first runs: fill the bytecode prefix (all of the diagnosis's modules) and the cache
        for _ in range(2):
            run(diagnose, compiled)  # the first compiles and caches, the second reads
        run([python, "-c", "import attribution"], compiled)
        db = work / "store.sqlite"  # one verdict, for 'sattr JOBID'
        _, _, job = run([python, "-c", STORE, args.bundle, str(db)], compiled)
        show = [args.sattr, job.decode().strip(), "--db", str(db), "--json"]
        run(show, compiled)
        if not any(cache.glob("rules-*.pickle")):
            print("note: the cache was not written yet (a rule file changed in the last seconds)")
            time.sleep(4)
            run(diagnose, compiled)
        conditions = [
            ("python -c pass", [python, "-c", "pass"], compiled, False),
            (
                "python -c 'import attribution'",
                [python, "-c", "import attribution"],
                compiled,
                False,
            ),
            ("sattr diagnose --json, warm cache, .pyc", diagnose, compiled, False),
            ("sattr diagnose --json, cold cache, .pyc", diagnose, compiled, True),
            ("sattr diagnose --json, warm cache, no .pyc", diagnose, source, False),
            ("sattr diagnose --json, cold cache, no .pyc", diagnose, source, True),
            ("sattr JOBID --json (a store of one verdict), .pyc", show, compiled, False),
        ]
        results: dict[str, tuple[list[float], list[float]]] = {c[0]: ([], []) for c in conditions}
        outputs: set[bytes] = set()
        for _ in range(args.runs):  # one run of each per round: the same load on each
            for name, cmd, env, cold in conditions:
                if cold:
                    shutil.rmtree(cache, ignore_errors=True)
                took, cpu, out = run(cmd, env)
                results[name][0].append(took)
                results[name][1].append(cpu)
                if cmd is diagnose:
                    outputs.add(out)
        phases = []
        for _ in range(max(3, args.runs // 3)):
            _, _, out = run([python, "-c", PHASES, args.bundle], compiled)
            phases.append(json.loads(out))
    print(f"bundle: {args.bundle}")
    print(f"python: {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs of each")
    print()
    print("| command | p50 ms | best ms | CPU p50 ms |")
    print("|---|---|---|---|")
    for name, (times, cpus) in results.items():
        print(row(name, times, cpus))
    print()
    warm = statistics.median(results["sattr diagnose --json, warm cache, .pyc"][0]) * 1e3
    verdict = "met" if warm <= TARGET_MS else "not met"
    print(f"target: {TARGET_MS:.0f} ms (warm cache, .pyc) p50 {warm:.0f} ms: {verdict}")
    print(f"every diagnosis printed the same verdict: {'yes' if len(outputs) == 1 else 'NO'}")
    for clock in ("wall", "cpu"):
        keys = phases[0][clock]
        parts = {k: statistics.median(p[clock][k] for p in phases) * 1e3 for k in keys}
        least = {k: min(p[clock][k] for p in phases) * 1e3 for k in keys}
        print(
            f"a warm run inside one process, {clock} time (p50 / least ms): "
            + ", ".join(f"{k} {parts[k]:.0f} / {least[k]:.0f}" for k in keys)
        )
    print(
        "(start: the interpreter before the first import; cli: import attribution.cli; engine:"
        " import analyze and bundle; rules: from the cache; diagnosis: read, extract, correlate,"
        " diagnose, JSON)"
    )


if __name__ == "__main__":
    main()
