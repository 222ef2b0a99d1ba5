"""The job spool between the EpilogSlurmctld hook and the worker (standard library only).

Layout (maildir style, all on one local file system)::

    <spool>/tmp/      the hook writes <key>.<pid> here ...
    <spool>/new/      ... and renames it to new/<key>: one entry per job run
    <spool>/work/     the worker claims an entry by renaming it here
    <spool>/done/     processed entries, pruned after ``retention`` seconds
    <spool>/failed/   entries that failed ``max_attempts`` times, with <key>.error beside them
    <spool>/retry/    <key>.json: attempts and next try time of entries waiting for a retry
    <spool>/alloc/    optional: <key> is ``scontrol show job -d -o`` at the job's start, written
                      by the same hook run as PrologSlurmctld (the GPUs it got on each node)

Every state change is one ``rename`` (or ``link`` + ``unlink`` where an existing
newer entry must win), so a worker killed at any point leaves each entry in
exactly one of ``new/``, ``work/``, ``done/`` or ``failed/``. On start,
``recover`` moves ``work/`` back to ``new/``; the verdict store upserts by key,
so running an entry twice still leaves one verdict.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attribution.errors import Location, SpoolError

SUBDIRS = ("tmp", "new", "work", "done", "failed", "retry")
# made by ``create``, used when present: a spool made before it existed still works
OPTIONAL_SUBDIRS = ("alloc",)
ALLOC_RETENTION = 60 * 86400.0  # a record of a job that never ended (lost epilog) goes then
LOCK_NAME = ".worker.lock"
STALE_TMP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how late a failing entry is retried.

    ``max_attempts``: tries before the entry moves to ``failed/``.
    ``backoff``: seconds before the second try; doubled after each failure,
    never more than ``backoff_max`` seconds.
    """

    max_attempts: int = 10
    backoff: float = 30.0
    backoff_max: float = 3600.0

    def delay(self, attempts: int) -> float:
        """Seconds to wait after ``attempts`` failed tries (1 -> ``backoff``)."""
        return float(min(self.backoff * (2 ** max(attempts - 1, 0)), self.backoff_max))


@dataclass(slots=True)
class Claimed:
    """An entry the worker owns: it sits in ``work/<key>``.

    ``spooled_at`` is the entry's mtime (epoch seconds), the time the hook ran;
    ``attempts`` counts earlier failed tries.
    """

    key: str
    path: Path
    text: str
    spooled_at: float
    attempts: int = 0
    errors: list[tuple[float, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Pending:
    """An entry in ``new/`` and the earliest time (epoch seconds) it may be processed."""

    key: str
    spooled_at: float
    ready_at: float


MAX_ENTRY_BYTES = 1 << 20  # a hook entry is the job's SLURM_* environment: a few KiB


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Spool:
    """A spool directory; see the module docstring for the layout.

    Args:
        root: the spool directory.
        policy: retry policy for failed entries.
        clock: returns the current epoch time in seconds (tests pass a fake).
    """

    def __init__(
        self,
        root: Path | str,
        *,
        policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = Path(root)
        self.policy = policy or RetryPolicy()
        self.clock = clock

    def dir(self, name: str) -> Path:
        return self.root / name

    # ------------------------------------------------------------------ setup

    def create(self, *, mode: int = 0o770, gid: int | None = None) -> None:
        """Create the spool and its subdirectories (``mode``, optionally group ``gid``).

        Raises:
            SpoolError: when a directory cannot be created.
        """
        for path in (self.root, *(self.dir(d) for d in (*SUBDIRS, *OPTIONAL_SUBDIRS))):
            try:
                path.mkdir(mode=mode, exist_ok=True)
                if gid is not None:
                    os.chown(path, -1, gid)
            except OSError as exc:
                raise SpoolError(
                    f"cannot create: {exc.strerror or exc}", Location(str(path))
                ) from None

    def repair(self) -> list[str]:
        """Recreate subdirectories that were deleted under an existing spool, with the owner,
        group and mode of the spool directory itself (what ``systemd-tmpfiles`` gave it).
        Returns the names created. A missing spool directory is left to ``check``: its owner
        and group are the site's choice (INSTALL.md step 3).

        Raises:
            SpoolError: when a directory cannot be created.
        """
        try:
            info = self.root.stat()
        except OSError:
            return []
        created = []
        for name in (*SUBDIRS, *OPTIONAL_SUBDIRS):
            path = self.dir(name)
            if path.is_dir() or path.is_symlink():
                continue
            mode = stat.S_IMODE(info.st_mode) & ~stat.S_ISVTX  # (the sticky bit: spool only)
            try:
                path.mkdir(mode=mode)
                os.chmod(path, mode)  # mkdir's mode passes the umask
                if os.geteuid() == 0:
                    os.chown(path, info.st_uid, info.st_gid)
            except FileExistsError:
                continue
            except OSError as exc:
                raise SpoolError(
                    f"cannot recreate: {exc.strerror or exc}", Location(str(path))
                ) from None
            created.append(name)
        return created

    def check(self, *, writable: bool = True) -> None:
        """Raise ``SpoolError`` unless every subdirectory exists, is a real directory (not a
        link) and, with ``writable``, is writable (a spool remounted read-only for a while
        is waited out by a running worker, not a reason to stop it)."""
        for name in (*SUBDIRS, *OPTIONAL_SUBDIRS):
            path = self.dir(name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                if name in OPTIONAL_SUBDIRS:
                    continue
                raise SpoolError(
                    "spool directory missing; create the spool as INSTALL.md step 3 says"
                    " (systemd-tmpfiles --create attribution.conf) and start the worker again",
                    Location(str(path)),
                ) from None
            except OSError as exc:
                raise SpoolError(
                    f"cannot read: {exc.strerror or exc}", Location(str(path))
                ) from None
            if not stat.S_ISDIR(info.st_mode):
                # SlurmUser may write the spool: a link put in place of a subdirectory would
                # have the root worker move, write and delete files wherever it points
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
                raise SpoolError(
                    f"spool subdirectory is {kind}: refusing to use it; remove it and run"
                    " systemd-tmpfiles --create attribution.conf (make the spool 1770, INSTALL.md"
                    " step 3, so SlurmUser cannot replace its subdirectories)",
                    Location(str(path)),
                )
            if writable and not os.access(path, os.W_OK | os.X_OK):
                raise SpoolError("spool directory not writable", Location(str(path)))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the spool's worker lock (one worker per spool).

        Raises:
            SpoolError: when another process holds it.
        """
        path = self.root / LOCK_NAME
        try:
            fd = _open_private(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise SpoolError(
                f"cannot open lock: {exc.strerror or exc}", Location(str(path))
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    raise SpoolError(
                        "another worker holds the spool lock", Location(str(path))
                    ) from None
                raise SpoolError(f"cannot lock: {exc.strerror}", Location(str(path))) from None
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ moves

    def _move_no_clobber(self, src: Path, dst: Path) -> bool:
        """Move ``src`` to ``dst`` unless ``dst`` exists (then drop ``src``); True if moved."""
        try:
            os.link(src, dst)
        except FileExistsError:
            src.unlink(missing_ok=True)
            return False
        src.unlink()
        return True

    def recover(self) -> list[str]:
        """Move entries left in ``work/`` by a killed worker back to ``new/``; their keys.

        A newer entry already in ``new/`` for the same key wins.
        """
        moved: list[str] = []
        for path in sorted(self.dir("work").iterdir()):
            if path.name.startswith("."):
                continue
            self._move_no_clobber(path, self.dir("new") / path.name)
            moved.append(path.name)
        return moved

    def pending(self, *, settle: float = 0.0) -> list[Pending]:
        """Entries in ``new/``, oldest first, with the time each may be processed.

        ``ready_at`` is the later of ``spooled_at + settle`` and the entry's
        retry time.
        """
        out: list[Pending] = []
        waiting = set(os.listdir(self.dir("retry")))
        for path in self.dir("new").iterdir():
            if path.name.startswith("."):
                continue
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                continue  # claimed meanwhile
            ready = mtime + settle
            if f"{path.name}.json" in waiting:
                state = self._retry_state(path.name)
                ready = max(ready, float(state.get("next_at", 0.0)))
            out.append(Pending(path.name, mtime, ready))
        out.sort(key=lambda p: (p.spooled_at, p.key))
        return out

    def claim(self, key: str) -> Claimed | None:
        """Rename ``new/<key>`` to ``work/<key>``; ``None`` when someone else was faster.

        Raises:
            SpoolError: when the entry cannot be read after the claim.
        """
        src, dst = self.dir("new") / key, self.dir("work") / key
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            return None
        try:
            # O_NONBLOCK: a FIFO put in the spool must not hang the worker
            fd = os.open(dst, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                info = os.fstat(fd)
                problem = None
                if not stat.S_ISREG(info.st_mode):
                    problem = "not a regular file"
                elif info.st_size > MAX_ENTRY_BYTES:
                    problem = f"larger than {MAX_ENTRY_BYTES >> 10} KiB: not a hook entry"
                data = b"" if problem else os.read(fd, MAX_ENTRY_BYTES + 1)
            finally:
                os.close(fd)
        except OSError as exc:
            problem = f"cannot read entry: {exc.strerror or exc}"
            info = None
        if problem is not None:
            self._quarantine(dst, key, problem)
            return None
        assert info is not None
        spooled_at = info.st_mtime
        text = data.decode("utf-8", errors="replace")
        state = self._retry_state(key)
        return Claimed(
            key=key,
            path=dst,
            text=text,
            spooled_at=spooled_at,
            attempts=int(state.get("attempts", 0)),
            errors=[(float(t), str(m)) for t, m in state.get("errors", [])],
        )

    def _quarantine(self, path: Path, key: str, problem: str) -> None:
        """Move an entry the worker cannot use (a FIFO, a directory, a huge file) to
        ``failed/`` with a readable ``.error``, so it never blocks or stops the worker."""
        lines = [f"key: {key}", f"failed: {_utc(self.clock())}: {problem}", ""]
        with contextlib.suppress(OSError):
            self._write_atomic(self.dir("failed") / f"{key}.error", "\n".join(lines))
        target = self.dir("failed") / key
        try:
            if target.exists() or target.is_symlink():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            os.replace(path, target)
        except OSError:
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def unclaim(self, claimed: Claimed) -> None:
        """Give a claimed entry back to ``new/`` untouched (no attempt counted): the worker
        stopped before it started on it. A newer entry for the key in ``new/`` wins."""
        self._move_no_clobber(claimed.path, self.dir("new") / claimed.key)

    def ack(self, claimed: Claimed) -> None:
        """The entry is done: ``work/<key>`` -> ``done/<key>`` (its mtime set to now)."""
        dst = self.dir("done") / claimed.key
        os.replace(claimed.path, dst)
        now = self.clock()
        with contextlib.suppress(OSError):
            os.utime(dst, (now, now))
        (self.dir("retry") / f"{claimed.key}.json").unlink(missing_ok=True)
        self.drop_alloc(claimed.key)  # the verdict's job record keeps what it said

    def retry(
        self, claimed: Claimed, error: str, *, permanent: bool = False, patience: float = 0.0
    ) -> bool:
        """Record a failed try. Returns True when the entry will be retried.

        Below ``max_attempts`` (and unless ``permanent``) the entry goes back to
        ``new/`` with its next try ``policy.delay(attempts)`` seconds away;
        otherwise it moves to ``failed/`` with a readable ``<key>.error``.
        ``patience``: for as long as the entry is younger than this many seconds, the try
        is not counted towards ``max_attempts`` (Slurm has no record of the job yet: it is
        down, or its records are still on their way); the wait still grows.
        """
        now = self.clock()
        waiting = patience > 0 and now - claimed.spooled_at < patience
        attempts = claimed.attempts + (0 if waiting else 1)
        errors = [*claimed.errors, (now, " ".join(error.split()))]
        if permanent or attempts >= self.policy.max_attempts:
            self._fail(claimed, attempts, errors, permanent)
            return False
        state = {
            "attempts": attempts,
            # (at least a second: an entry that is ready again at once must not spin)
            "next_at": now + max(1.0, self.policy.delay(max(attempts, min(len(errors), 10)))),
            "errors": errors[-10:],
        }
        self._write_atomic(self.dir("retry") / f"{claimed.key}.json", json.dumps(state))
        self._move_no_clobber(claimed.path, self.dir("new") / claimed.key)
        return True

    def _fail(
        self, claimed: Claimed, attempts: int, errors: list[tuple[float, str]], permanent: bool
    ) -> None:
        why = "a permanent error" if permanent else f"{attempts} attempt(s)"
        lines = [
            f"key: {claimed.key}",
            f"failed: {_utc(self.clock())} after {why}",
            f"spooled: {_utc(claimed.spooled_at)}",
            "errors:",
            *(f"  {_utc(t)} {msg}" for t, msg in errors),
            "",
            f"The entry is {self.dir('failed') / claimed.key}. After fixing the cause, retry it",
            "with 'sattr enqueue --retry-failed' (or move it back into new/).",
        ]
        self._write_atomic(self.dir("failed") / f"{claimed.key}.error", "\n".join(lines) + "\n")
        os.replace(claimed.path, self.dir("failed") / claimed.key)
        (self.dir("retry") / f"{claimed.key}.json").unlink(missing_ok=True)

    def retry_failed(self, keys: list[str] | None = None) -> list[str]:
        """Move failed entries (all, or ``keys``) back to ``new/`` with a fresh attempt count."""
        moved = []
        for path in sorted(self.dir("failed").iterdir()):
            if path.name.endswith(".error") or path.name.startswith("."):
                continue
            if keys is not None and path.name not in keys:
                continue
            self._move_no_clobber(path, self.dir("new") / path.name)
            (self.dir("failed") / f"{path.name}.error").unlink(missing_ok=True)
            moved.append(path.name)
        return moved

    def enqueue(self, key: str, text: str) -> Path:
        """Add an entry the way the hook does (``tmp/`` then rename into ``new/``)."""
        tmp = self.dir("tmp") / f"{key}.{os.getpid()}"
        dst = self.dir("new") / key
        try:
            _write_new(tmp, text)
            os.replace(tmp, dst)
        except OSError as exc:
            with contextlib.suppress(OSError):  # tmp/ itself may be what is broken
                tmp.unlink(missing_ok=True)
            raise SpoolError(f"cannot enqueue: {exc.strerror or exc}", Location(str(dst))) from None
        return dst

    def earlier_entry(self, key: str) -> str | None:
        """The text of the entry the hook wrote for ``key`` before, if it is still kept (in
        ``done/``, else ``failed/``), read as ``read_spool_file`` reads; None otherwise.
        Re-queueing it keeps the job's original environment (its output paths)."""
        for state in ("done", "failed"):
            text = read_spool_file(self.dir(state) / key)
            if text is not None:
                return text
        return None

    # ------------------------------------------------------------------ allocation records

    def read_alloc(self, key: str) -> str | None:
        """What the PrologSlurmctld run of the hook recorded for ``key`` (``scontrol show job
        -d -o`` at the job's start), or None. Never through a link, only a regular file, at
        most ``MAX_ENTRY_BYTES`` (SlurmUser writes this directory; the worker runs as root)."""
        return read_spool_file(self.dir("alloc") / key)

    def drop_alloc(self, key: str) -> None:
        """Forget the allocation record of a processed entry."""
        with contextlib.suppress(OSError):
            (self.dir("alloc") / key).unlink()

    # ------------------------------------------------------------------ housekeeping

    def prune(self, retention: float) -> int:
        """Delete ``done/`` entries older than ``retention`` seconds, stale ``tmp/`` files
        (older than an hour: a hook that died mid-write) and orphaned retry states.
        Returns how many files were removed."""
        now = self.clock()
        removed = 0
        dirs = [("done", retention), ("tmp", STALE_TMP_SECONDS)]
        if self.dir("alloc").is_dir():
            dirs.append(("alloc", max(retention, ALLOC_RETENTION)))
        for name, age in dirs:
            for path in self.dir(name).iterdir():
                try:
                    if now - path.lstat().st_mtime > age:
                        if path.is_dir() and not path.is_symlink():
                            shutil.rmtree(path)  # (rmtree never follows links out of the tree)
                        else:
                            path.unlink()
                        removed += 1
                except OSError:  # gone meanwhile, or not ours to remove: never stop the worker
                    continue
        for path in self.dir("retry").iterdir():
            key = path.name.removesuffix(".json")
            if not (self.dir("new") / key).exists() and not (self.dir("work") / key).exists():
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    def counts(self) -> dict[str, int]:
        """How many entries each state directory holds."""
        out = {}
        for name in ("new", "work", "done", "failed"):
            d = self.dir(name)
            out[name] = (
                sum(1 for p in d.iterdir() if not p.name.endswith(".error")) if d.is_dir() else 0
            )
        return out

    def _retry_state(self, key: str) -> dict[str, Any]:
        """The retry state of ``key``, with values of the right types (the spool is writable by
        SlurmUser: a hand-edited or planted file must not stop the worker)."""
        path = self.dir("retry") / f"{key}.json"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    return {}
                data = json.loads(fh.read(MAX_ENTRY_BYTES).decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(data, dict):
            return {}
        out: dict[str, Any] = {}
        attempts = data.get("attempts")
        if isinstance(attempts, int) and not isinstance(attempts, bool) and 0 <= attempts < 10**6:
            out["attempts"] = attempts
        next_at = data.get("next_at")
        if (
            isinstance(next_at, int | float)
            and not isinstance(next_at, bool)
            and math.isfinite(next_at)
        ):
            out["next_at"] = float(next_at)
        errors = data.get("errors")
        if isinstance(errors, list):
            out["errors"] = [
                (float(e[0]), str(e[1])[:2000])
                for e in errors[-10:]
                if isinstance(e, list | tuple)
                and len(e) == 2
                and isinstance(e[0], int | float)
                and math.isfinite(e[0])
            ]
        return out

    def _write_atomic(self, path: Path, text: str) -> None:
        """Write ``path`` through a new temporary file beside it (never through a link)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        _write_new(tmp, text)
        os.replace(tmp, path)


def read_spool_file(path: Path, limit: int = MAX_ENTRY_BYTES) -> str | None:
    """The text of a file SlurmUser may have written, or None: never through a link, only a
    regular file (a FIFO cannot block the open), at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(limit).decode("utf-8", errors="replace")


def _open_private(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a link: a link planted where we create a file is removed
    (the spool's directories are writable by SlurmUser; the worker runs as root)."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    path.unlink()  # a symbolic link: remove the link itself, then create the file
    return os.open(path, flags | os.O_EXCL, mode)


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` afresh (removing whatever is there, a link included) and write ``text``."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


__all__ = ["SUBDIRS", "Claimed", "Pending", "RetryPolicy", "Spool", "read_spool_file"]
