"""The worker's process pool end to end without a cluster: the real CLI backend runs stand-in
``sacct``, ``scontrol`` and ``sacctmgr`` programs (``slurm.bin_dir``) that answer from a JSON
file, so the batched queries, the child processes, their AdminComment writes and the loss of a
child are all exercised by ``uv run pytest`` (the real Slurm path is tests/slurm)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from attribution.config import Config
from attribution.slurm.hookenv import format_entry
from attribution.store import Store
from attribution.worker import Worker, make_spool

T_END = int(time.time()) - 3600  # ended an hour ago: slurmctld has forgotten them

# One program for the three tools: argv[0] says which. Jobs come from jobs.json beside it;
# every call is logged to calls.log (tool, the caller's parent pid, arguments).
FAKE = r"""#!__PYTHON__
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(json.dumps([tool, os.getppid(), args]) + "\n")
jobs = json.load(open(os.path.join(here, "jobs.json")))
D = "\x1f"
def opt(flag):
    return args[args.index(flag) + 1] if flag in args else None
if tool == "scontrol":
    if args[:2] == ["show", "config"]:
        print("MinJobAge               = 300 sec")
        sys.exit(0)
    sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
    sys.exit(1)
if tool == "sacctmgr":
    where = [a for a in args if a.startswith("jobid=")][0][6:]
    kill = os.path.join(here, "kill-" + where)
    if os.path.exists(kill):  # lose the child process that writes this comment, once
        os.unlink(kill)
        os.kill(os.getppid(), 9)
    if os.path.exists(os.path.join(here, "slow")):
        import time; time.sleep(0.5)
    sys.exit(0)
if args == ["-e"]:
    print("JobID JobIDRaw State ExitCode End")
    sys.exit(0)
fields = (opt("-o") or "").split(",")
ids = (opt("-j") or "").split(",") if "-j" in args else []
if "-N" in args or "-s" in args or fields == ["AdminComment"]:
    sys.exit(0)  # no other jobs on the nodes, nothing the hook missed, no comment yet
for job in ids:
    info = jobs.get(job)
    if info is None:
        continue
    row = {"JobID": job, "JobIDRaw": job, "Cluster": "c", "User": "ann", "UID": "1000",
           "Account": "a", "Partition": "gpu", "State": info["state"],
           "ExitCode": info["exit"], "DerivedExitCode": "0:0", "Reason": "None",
           "Start": str(info["end"] - 60), "End": str(info["end"]), "Timelimit": "01:00:00",
           "NodeList": info["nodes"], "AllocTRES": "cpu=1,mem=1G,node=1",
           "WorkDir": "/nonexistent", "JobName": "train", "AdminComment": ""}
    print(D.join(row.get(f, "") for f in fields))
"""


@pytest.fixture
def site(tmp_path: Path) -> tuple[Config, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "fake-slurm"
    program.write_text(FAKE.replace("__PYTHON__", sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    for tool in ("sacct", "scontrol", "sacctmgr"):
        (bin_dir / tool).symlink_to(program)
    config = Config.model_validate(
        {
            "spool": str(tmp_path / "spool"),
            "store": str(tmp_path / "v.sqlite"),
            "settle_delay": 0,
            "admin_comment": {"enabled": True},
            "slurm": {"backend": "cli", "bin_dir": str(bin_dir), "retries": 0},
            "pool": {"processes": 2, "batch": 4},
            "retries": {"backoff": 0.01},
            "reconcile": {"first_lookback": 0},
        }
    )
    make_spool(config).create(mode=0o755)
    return config, bin_dir


def jobs(bin_dir: Path, table: dict[str, dict[str, object]]) -> None:
    (bin_dir / "jobs.json").write_text(json.dumps(table))


def spool_jobs(config: Config, ids: list[str]) -> None:
    spool = make_spool(config)
    for job in ids:
        env = {"SLURM_JOB_ID": job, "SLURM_CLUSTER_NAME": "c", "SLURM_JOB_USER": "ann"}
        path = spool.enqueue(f"c_{job}_0", format_entry(env))
        os.utime(path, (T_END, T_END))


def calls(bin_dir: Path, tool: str) -> list[tuple[int, list[str]]]:
    lines = (bin_dir / "calls.log").read_text().splitlines()
    return [(ppid, args) for t, ppid, args in map(json.loads, lines) if t == tool]


def test_jobs_are_diagnosed_in_child_processes_with_batched_queries(
    site: tuple[Config, Path],
) -> None:
    config, bin_dir = site
    table: dict[str, dict[str, object]] = {
        str(j): {"state": "FAILED", "exit": "1:0", "end": T_END, "nodes": "n1"}
        for j in range(10, 16)
    }
    table.update({str(j): {"state": "COMPLETED", "exit": "0:0", "end": T_END, "nodes": "n1"}
                  for j in (20, 21)})  # fmt: skip
    jobs(bin_dir, table)
    spool_jobs(config, list(table))
    worker = Worker(config)
    assert worker.processes == 2
    outcomes = {o.key: o.result for o in worker.run(once=True)}
    assert outcomes == {
        **{f"c_{j}_0": "saved" for j in range(10, 16)},
        "c_20_0": "dropped",
        "c_21_0": "dropped",
    }
    rows = {r["key"]: r for r in Store(config.store).rows()}
    assert sorted(rows) == [f"c_{j}_0" for j in range(10, 16)]
    assert {r["admin_comment_status"] for r in rows.values()} == {"written"}
    # resolved in batches of 4 (two sacct calls each: fields users cannot write, then the
    # free texts), not one sacct per job
    resolving = [a for _, a in calls(bin_dir, "sacct") if "-j" in a and "-D" in a]
    assert [len(a[a.index("-j") + 1].split(",")) for a in resolving] == [4, 4, 4, 4]
    # the comments were written by the children, not by the worker process itself
    writers = {ppid for ppid, _ in calls(bin_dir, "sacctmgr")}
    assert len(calls(bin_dir, "sacctmgr")) == 6
    assert os.getpid() not in writers
    assert worker.counters.children_lost == 0


@pytest.mark.slow
def test_a_child_lost_mid_job_is_retried_and_the_pool_replaced(
    site: tuple[Config, Path],
) -> None:
    """A child killed while it works (the OOM killer, a signal): the jobs it held go back
    for a retry, the pool is replaced, and the next round saves every verdict."""
    config, bin_dir = site
    table: dict[str, dict[str, object]] = {
        str(j): {"state": "FAILED", "exit": "1:0", "end": T_END, "nodes": "n1"}
        for j in range(30, 34)
    }
    jobs(bin_dir, table)
    (bin_dir / "kill-31").write_text("")
    spool_jobs(config, list(table))
    worker = Worker(config)
    first = [(o.key, o.result) for o in worker.run(once=True)]
    assert ("c_31_0", "retry") in first
    assert worker.counters.children_lost >= 1
    assert {result for _, result in first} <= {"saved", "retry"}
    time.sleep(
        1.1
    )  # past the retry delay, never under 1 s (the same round may already have retried)
    second = {o.key: o.result for o in Worker(config).run(once=True)}
    assert set(second.values()) <= {"saved"}
    saved = {key for key, result in first if result == "saved"} | set(second)
    assert saved == {f"c_{j}_0" for j in range(30, 34)}
    assert len(list(Store(config.store).rows())) == 4
    retry_state = make_spool(config).dir("retry")
    assert not any(retry_state.iterdir())


@pytest.mark.slow
def test_a_stopped_worker_finishes_the_jobs_in_hand_and_gives_back_the_rest(
    site: tuple[Config, Path],
) -> None:
    """SIGTERM (``stop``) during a drain: the jobs the children hold are finished and saved,
    the claimed ones not started go back to new/ with no attempt counted, nothing fails."""
    import threading

    config, bin_dir = site
    table: dict[str, dict[str, object]] = {
        str(j): {"state": "FAILED", "exit": "1:0", "end": T_END, "nodes": "n1"}
        for j in range(40, 52)
    }
    jobs(bin_dir, table)
    (bin_dir / "slow").write_text("")
    spool_jobs(config, list(table))
    done: list[object] = []
    workers: list[Worker] = []

    def run() -> None:  # the worker's store connection belongs to the thread that runs it
        workers.append(Worker(config))
        done.extend(workers[0].run())

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log = bin_dir / "calls.log"
        if log.exists() and calls(bin_dir, "sacctmgr"):
            break
        time.sleep(0.02)
    workers[0].stop()
    thread.join(timeout=60)
    assert not thread.is_alive()
    results = [o.result for o in done]  # type: ignore[attr-defined]
    assert results and set(results) == {"saved"}
    spool = make_spool(config)
    counts = spool.counts()
    assert counts["work"] == 0 and counts["failed"] == 0
    assert counts["done"] == len(results) and counts["new"] == 12 - len(results)
    assert not any(spool.dir("retry").iterdir())
