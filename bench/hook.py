#!/usr/bin/env python3
"""Benchmark the EpilogSlurmctld hook: 1,000 calls, p50/p99, against /bin/true in the same run.

Usage: uv run python bench/hook.py [--calls 1000] [--shell /bin/sh]

Each call starts ``slurm/epilog-slurmctld`` the way slurmctld does (a fresh
process with the job's ``SLURM_*`` environment from a real EpilogSlurmctld
capture, no PATH), and waits for it. ``/bin/true`` is started the same way,
alternating with the hook, so the numbers share the machine's state; the
difference is what the hook itself costs. Every call must exit 0 and leave one
entry in the spool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "slurm" / "epilog-slurmctld"
ENV = ROOT / "tests" / "fixtures" / "slurm" / "epilog-env-job-8.env"


def epilog_env(spool: Path) -> dict[str, str]:
    env = {}
    for line in ENV.read_text().splitlines()[1:]:
        key, _, value = line.partition("=")
        env[key] = value
    env["ATTRIBUTION_SPOOL"] = str(spool)
    return env


def run(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env)
    _, status = os.waitpid(pid, 0)
    return time.perf_counter() - t0, os.waitstatus_to_exitcode(status)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--shell", default="/bin/sh", help="the shell slurmctld's #! resolves to")
    args = ap.parse_args()
    spool = Path(tempfile.mkdtemp(prefix="attr-hook-bench-"))
    for sub in ("tmp", "new"):
        (spool / sub).mkdir()
    env = epilog_env(spool)
    hook_times: list[float] = []
    true_times: list[float] = []
    failures = 0
    try:
        for i in range(args.calls):
            env["SLURM_JOB_ID"] = env["SLURM_JOBID"] = str(100000 + i)
            dt, code = run([args.shell, str(HOOK)], env)
            hook_times.append(dt)
            failures += code != 0
            dt, _ = run(["/bin/true"], env)
            true_times.append(dt)
        spooled = len(list((spool / "new").iterdir()))
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    ms = 1e3
    print(f"{args.calls} calls ({args.shell} {HOOK.relative_to(ROOT)})")
    print(f"{'':<14}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, values in (("hook", hook_times), ("/bin/true", true_times)):
        print(
            f"{name:<14}{statistics.median(values) * ms:>9.2f}{pct(values, 0.99) * ms:>9.2f}{max(values) * ms:>9.2f}"
        )
    print(
        f"hook minus /bin/true: p50 {(statistics.median(hook_times) - statistics.median(true_times)) * ms:.2f} ms, "
        f"p99 {(pct(hook_times, 0.99) - pct(true_times, 0.99)) * ms:.2f} ms"
    )
    print(f"exit codes other than 0: {failures}; entries spooled: {spooled}/{args.calls}")


if __name__ == "__main__":
    main()
