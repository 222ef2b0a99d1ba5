"""The spool's state machine and what a killed worker leaves behind."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attribution.errors import SpoolError
from attribution.slurm.hookenv import format_entry
from attribution.spool import RetryPolicy, Spool


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def add(spool: Spool, job: int, mtime: float | None = None) -> str:
    env = {"SLURM_JOB_ID": str(job), "SLURM_CLUSTER_NAME": "c"}
    key = f"c_{job}_0"
    path = spool.enqueue(key, format_entry(env))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return key


def where(spool: Spool, key: str) -> list[str]:
    return [d for d in ("new", "work", "done", "failed") if (spool.dir(d) / key).exists()]


def test_claim_ack_in_order(spool_dir: Path) -> None:
    clock = Clock()
    spool = Spool(spool_dir, clock=clock)
    add(spool, 2, mtime=clock.now - 5)
    add(spool, 1, mtime=clock.now - 10)
    add(spool, 3, mtime=clock.now - 1)
    pending = spool.pending(settle=3)
    assert [p.key for p in pending] == ["c_1_0", "c_2_0", "c_3_0"]
    assert [p.ready_at <= clock.now for p in pending] == [True, True, False]
    claimed = spool.claim("c_1_0")
    assert claimed is not None
    assert spool.claim("c_1_0") is None  # someone else already has it
    assert where(spool, "c_1_0") == ["work"]
    spool.ack(claimed)
    assert where(spool, "c_1_0") == ["done"]
    assert spool.counts() == {"new": 2, "work": 0, "done": 1, "failed": 0}


def test_retry_backoff_then_failed(spool_dir: Path) -> None:
    clock = Clock()
    spool = Spool(spool_dir, policy=RetryPolicy(max_attempts=3, backoff=10), clock=clock)
    key = add(spool, 7, mtime=clock.now)
    delays = []
    for attempt in range(3):
        item = spool.pending()[0]
        delays.append(item.ready_at - clock.now)
        clock.now = item.ready_at
        claimed = spool.claim(key)
        assert claimed is not None
        assert claimed.attempts == attempt
        again = spool.retry(claimed, f"sacct down ({attempt})")
        assert again is (attempt < 2)
    assert delays == [0, 10, 20]
    assert where(spool, key) == ["failed"]
    error = (spool.dir("failed") / f"{key}.error").read_text()
    assert "after 3 attempt(s)" in error
    assert "sacct down (0)" in error
    assert "sacct down (2)" in error
    assert spool.retry_failed() == [key]
    assert where(spool, key) == ["new"]
    assert spool.claim(key).attempts == 0  # type: ignore[union-attr]


def test_permanent_failure_goes_straight_to_failed(spool_dir: Path) -> None:
    spool = Spool(spool_dir)
    key = add(spool, 8)
    claimed = spool.claim(key)
    assert claimed is not None
    assert spool.retry(claimed, "malformed", permanent=True) is False
    assert where(spool, key) == ["failed"]


def test_recover_prefers_a_newer_hook_entry(spool_dir: Path) -> None:
    spool = Spool(spool_dir)
    key = add(spool, 9)
    assert spool.claim(key) is not None
    assert spool.recover() == [key]
    assert where(spool, key) == ["new"]
    spool.claim(key)
    (spool.dir("new") / key).write_text("newer")
    spool.recover()
    assert (spool.dir("new") / key).read_text() == "newer"
    assert where(spool, key) == ["new"]


def test_prune(spool_dir: Path) -> None:
    clock = Clock()
    spool = Spool(spool_dir, clock=clock)
    for job in (1, 2):
        key = add(spool, job)
        claimed = spool.claim(key)
        assert claimed is not None
        spool.ack(claimed)
    os.utime(spool.dir("done") / "c_1_0", (clock.now - 100, clock.now - 100))
    stale = spool.dir("tmp") / "c_3_0.123"
    stale.write_text("half")
    os.utime(stale, (clock.now - 7200, clock.now - 7200))
    (spool.dir("retry") / "c_4_0.json").write_text("{}")
    assert spool.prune(retention=50) == 3
    assert sorted(p.name for p in spool.dir("done").iterdir()) == ["c_2_0"]


def test_lock_allows_one_worker(spool_dir: Path) -> None:
    spool = Spool(spool_dir)
    with spool.locked(), pytest.raises(SpoolError, match="another worker"), spool.locked():
        pass


def test_check_names_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SpoolError) as err:
        Spool(tmp_path / "none").check()
    assert "tmp" in str(err.value)


# A tiny worker: claim, upsert a row into SQLite, ack, for every entry; killed at random.
WORKER = r"""
import sqlite3, sys, time
from attribution.spool import Spool
spool = Spool(sys.argv[1])
db = sqlite3.connect(sys.argv[2], timeout=30)
db.execute("CREATE TABLE IF NOT EXISTS v (key TEXT PRIMARY KEY, n INTEGER)")
spool.recover()
for item in spool.pending():
    claimed = spool.claim(item.key)
    if claimed is None:
        continue
    time.sleep(0.002)
    with db:
        db.execute("INSERT INTO v VALUES (?, 1) ON CONFLICT(key) DO UPDATE SET n = n + 1",
                   (claimed.key,))
    time.sleep(0.002)
    spool.ack(claimed)
"""


def test_killed_worker_loses_nothing_and_keeps_one_row(spool_dir: Path, tmp_path: Path) -> None:
    spool = Spool(spool_dir)
    keys = {add(spool, job) for job in range(60)}
    db = tmp_path / "v.sqlite"
    rng = random.Random(7)
    kills = 0
    for _ in range(40):
        proc = subprocess.Popen([sys.executable, "-c", WORKER, str(spool_dir), str(db)])
        time.sleep(rng.uniform(0.05, 0.4))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        for key in keys:
            assert len(where(spool, key)) == 1, key
        if spool.counts()["done"] == len(keys):
            break
    subprocess.run([sys.executable, "-c", WORKER, str(spool_dir), str(db)], check=True)
    assert kills > 0
    assert spool.counts() == {"new": 0, "work": 0, "done": len(keys), "failed": 0}
    rows = dict(sqlite3.connect(db).execute("SELECT key, 1 FROM v").fetchall())
    assert set(rows) == keys


def test_entries_that_are_not_files_go_to_failed_without_blocking(spool_dir: Path) -> None:
    """A FIFO, a directory or a huge file put in new/ never hangs or stops the worker."""
    spool = Spool(spool_dir, clock=Clock())
    os.mkfifo(spool.dir("new") / "c_1_0")
    (spool.dir("new") / "c_2_0").mkdir()
    (spool.dir("new") / "c_3_0").write_bytes(b"x" * (2 << 20))
    good = add(spool, 4)
    for key in ("c_1_0", "c_2_0", "c_3_0"):
        assert spool.claim(key) is None
        assert where(spool, key) == ["failed"]
    assert "not a regular file" in (spool.dir("failed") / "c_1_0.error").read_text()
    assert "not a hook entry" in (spool.dir("failed") / "c_3_0.error").read_text()
    claimed = spool.claim(good)
    assert claimed is not None and "SLURM_JOB_ID" in claimed.text


def test_links_and_junk_planted_by_slurm_user_are_not_followed(spool_dir: Path) -> None:
    """The spool's directories are writable by SlurmUser and the worker runs as root: a link
    where the worker creates a file, a directory in tmp/, or a retry state of the wrong
    types must neither be followed nor stop the worker (adversarial review)."""
    import json

    clock = Clock()
    spool = Spool(spool_dir, clock=clock)
    victim = spool_dir.parent / "victim"
    victim.write_text("precious\n")
    lock_target = spool_dir.parent / "made-by-lock"
    (spool_dir / ".worker.lock").symlink_to(lock_target)
    with spool.locked():
        pass
    assert not lock_target.exists() and not (spool_dir / ".worker.lock").is_symlink()
    key = add(spool, 7, mtime=clock.now - 100)
    claimed = spool.claim(key)
    assert claimed is not None
    planted = spool.dir("retry") / f".{key}.json.{os.getpid()}"
    planted.symlink_to(victim)
    assert spool.retry(claimed, "slurmdbd down")
    assert victim.read_text() == "precious\n"
    # wrong types in a retry state read as no state
    (spool.dir("retry") / f"{key}.json").write_text(json.dumps({"attempts": "x", "next_at": [1]}))
    again = spool.claim(key)
    assert again is not None and again.attempts == 0
    # a directory left in tmp/ long ago is pruned, not a crash
    (spool.dir("tmp") / "olddir" / "sub").mkdir(parents=True)
    os.utime(spool.dir("tmp") / "olddir", (clock.now - 7200, clock.now - 7200))
    assert spool.prune(retention=60) >= 1
    assert not (spool.dir("tmp") / "olddir").exists()


def test_an_epoch_of_unicode_digits_is_not_a_crash() -> None:
    """'²'.isdigit() is True but float('²') fails: header numbers must be ASCII decimals."""
    from attribution.errors import SlurmError
    from attribution.slurm.backend import JobRef
    from attribution.slurm.hookenv import parse_entry

    text = "# attribution-spool 1 key=c_1_0 pid=1 epoch=\u00b2\nexport SLURM_JOB_ID='1'\n"
    assert parse_entry(text, source="x", mtime=5.0).spooled_at == 5.0
    with pytest.raises(SlurmError, match="not a job id"):
        JobRef.from_env({"SLURM_JOB_ID": "--help"})
    with pytest.raises(SlurmError, match="not a job id"):
        JobRef.from_env({"SLURM_JOB_ID": "\u00b2"})


def test_earlier_entry_is_the_kept_hook_entry_never_through_a_link(
    spool_dir: Path, tmp_path: Path
) -> None:
    """What 'sattr enqueue' re-queues: the hook's entry still in done/ (else failed/), read as
    a regular file only."""
    spool = Spool(spool_dir)
    key = add(spool, 7)
    assert spool.earlier_entry(key) is None  # only in new/
    claimed = spool.claim(key)
    assert claimed is not None
    spool.ack(claimed)
    assert spool.earlier_entry(key) == claimed.text
    (spool.dir("failed") / key).write_text("older\n")
    assert spool.earlier_entry(key) == claimed.text  # done/ first
    (spool.dir("done") / key).unlink()
    assert spool.earlier_entry(key) == "older\n"
    secret = tmp_path / "secret"
    secret.write_text("not an entry\n")
    (spool.dir("failed") / key).unlink()
    (spool.dir("failed") / key).symlink_to(secret)
    os.mkfifo(spool.dir("done") / key)
    assert spool.earlier_entry(key) is None
