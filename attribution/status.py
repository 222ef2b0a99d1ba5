"""What ``sattr status`` reports: is the worker keeping up, and is anything lost?

``collect`` reads the spool (entries and their retry and failure files), whether a worker
holds the spool lock, and the verdict store (the worker's heartbeat, recent verdicts, coverage,
AdminComment write-backs, reconciliation sweeps); it returns a ``Status``, which
``Status.to_dict`` turns into the ``--json`` object (``attribution.status/1``) and
``render_text`` into the operator's view. ``Status.problems`` holds one line per reason the
worker is unhealthy under the configuration's ``health`` thresholds; none means healthy.

Nothing here writes: the spool lock is tried on a descriptor opened read-only without
creating the file, and released at once. A spool directory the caller may not read raises
``StatusUnreadable`` (``sattr status`` exits 2: it cannot tell); a file in it the caller may
not read (a retry state, an ``.error`` file, the lock file) is counted and said, never guessed.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from attribution.config import DEFAULT_CONFIG, Config
from attribution.errors import AttributionError, Location, StoreError
from attribution.hostlist import HostlistError, compress, expand
from attribution.model import STREAM_GROUPS
from attribution.spool import LOCK_NAME, MAX_ENTRY_BYTES, SUBDIRS, Spool
from attribution.store import Store
from attribution.timeutil import parse_iso

SCHEMA = "attribution.status/1"
THROUGHPUT_WINDOW = 3600.0  # verdicts and latencies over the last hour
DAY = 86400.0  # reconciliation totals and evidence health over the last day
SILENT_AFTER = DAY  # a node that ran jobs but gave no lines from a node log this long is named
LINES_LOOKBACK = 7 * DAY  # how far back the last line of a silent node's log is looked for
NODE_LOG_STREAMS: tuple[str, ...] = tuple(s.value for s in STREAM_GROUPS["node"])
TOP_REASONS = 5
MAX_ERROR_FILES = 5000  # failed/ entries whose .error is read; the rest are only counted
MAX_REASON = 200  # characters of an error shown
SWEEP_ROWS = 20_000  # recorded sweeps read to find each cluster's last successful one


class StatusUnreadable(AttributionError):
    """The caller may not read the spool or the verdict store: ``sattr status`` cannot tell."""


# --------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class Reason:
    """Spool entries that failed for one reason: the ``reason`` (the latest message of the
    group; messages that differ only in numbers are one reason), how many ``entries``, the
    most ``attempts`` among them (entries waiting for a retry), and one entry's ``key``."""

    reason: str
    entries: int
    key: str
    attempts: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerState:
    """Whether a worker holds the spool lock (``running``: None when that cannot be told,
    ``lock`` says why) and its last heartbeat: ``pid``, ``host``, ``started_at``, ``beat_at``,
    ``beat_age`` (seconds) and ``info`` (its counters since it started, as it reported them:
    ``processes``, ``results`` (entries per outcome: ``saved``, ``dropped``, ``retry``,
    ``failed``, ``stuck``), ``children_lost``, ``comments_rewritten``, ``reconciled``)."""

    running: bool | None
    lock: str
    pid: int | None = None
    host: str | None = None
    started_at: str | None = None
    beat_at: str | None = None
    beat_age: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueState:
    """The spool: entries in ``new/`` that are ``ready``, still ``settling`` (younger than
    ``settle_delay``) or ``retry_wait`` (waiting for their next try); how long the oldest ready
    one has waited since it became ready (``oldest_ready_wait``, seconds, and its ``key``);
    entries in ``work/`` (and the oldest one's age), ``done/`` and ``failed/``; the entries
    that failed at least once and will be tried again (``retrying``, grouped in
    ``retry_reasons``) and the reasons of the failed ones (``failed_reasons``, from their
    ``.error`` files); ``top`` reasons are kept, ``*_more`` counts the rest. Entries in
    ``new/`` whose retry state the caller may not read are ``retry_unknown`` (neither ready,
    settling nor waiting: when they are due cannot be told); ``unreadable`` counts the files
    (retry states, ``.error`` files) the caller may not read."""

    path: str
    ready: int = 0
    settling: int = 0
    retry_wait: int = 0
    oldest_ready_wait: float | None = None
    oldest_ready_key: str | None = None
    work: int = 0
    oldest_work_age: float | None = None
    done: int = 0
    failed: int = 0
    retrying: int = 0
    retry_reasons: list[Reason] = field(default_factory=list)
    retry_reasons_more: int = 0
    failed_reasons: list[Reason] = field(default_factory=list)
    failed_reasons_more: int = 0
    retry_unknown: int = 0
    unreadable: int = 0


@dataclass(frozen=True, slots=True)
class Throughput:
    """Verdicts the worker made from spool entries in the last ``window`` seconds, per
    minute, and the seconds from the job's end to its verdict (``latency_*``, over the
    ``latency_jobs`` verdicts of jobs with an end time; None without any)."""

    window: float
    verdicts: int
    per_minute: float
    latency_jobs: int
    latency_p50: float | None
    latency_p95: float | None
    latency_max: float | None


@dataclass(frozen=True, slots=True)
class CommentState:
    """AdminComment write-backs not done: ``failing`` (written again by the worker until
    Slurm takes them), since ``failing_since`` (the oldest one's diagnosed_at) with the
    ``latest_error``; ``pending`` (saved, never written), the oldest since ``pending_since``.
    Ages are seconds."""

    enabled: bool
    failing: int = 0
    failing_since: str | None = None
    failing_age: float | None = None
    latest_error: str | None = None
    pending: int = 0
    pending_since: str | None = None
    pending_age: float | None = None


@dataclass(frozen=True, slots=True)
class Sweep:
    """The last reconciliation sweep of a cluster: when it ran (``age`` seconds ago), the
    window it covered, jobs ``seen``, jobs ``enqueued`` (they never reached the spool), and its
    ``error``; the cluster's last successful sweep (``last_ok_at``, ``last_ok_age``; None when
    none was found in the sweeps read, ``ReconcileState.looked_back``) and, when the last
    sweep failed, the oldest failure since that success (``failing_since``)."""

    cluster: str
    ran_at: str
    age: float | None
    since: str | None
    until: str | None
    seen: int
    enqueued: int
    error: str | None
    last_ok_at: str | None = None
    last_ok_age: float | None = None
    failing_since: str | None = None


@dataclass(frozen=True, slots=True)
class SweepTotals:
    """A cluster's sweeps of the last day: how many, jobs ``seen``, jobs ``enqueued`` (found
    by the sweep only: the hook's entry never reached the spool) and ``errors``."""

    cluster: str
    sweeps: int
    seen: int
    enqueued: int
    errors: int


@dataclass(frozen=True, slots=True)
class ReconcileState:
    """The reconciliation sweep: ``enabled`` in the configuration, the last sweep of each
    cluster and the totals of the last ``window`` seconds; ``looked_back``: how far back
    (seconds) the sweeps were read for each cluster's last successful one."""

    enabled: bool
    window: float = DAY
    last: list[Sweep] = field(default_factory=list)
    totals: list[SweepTotals] = field(default_factory=list)
    looked_back: float = DAY


@dataclass(frozen=True, slots=True)
class StreamHealth:
    """One source stream over the jobs that ended in the evidence window: ``jobs`` with a
    coverage row for it, and how many had it ``missing``, ``unreadable``, ``error`` or
    ``empty`` on at least one node; ``lost``: missing, unreadable or error (a job counted
    once). The stream ``node`` is the node logs (kernel, syslog) together."""

    stream: str
    jobs: int
    missing: int
    unreadable: int
    error: int
    empty: int
    lost: int


@dataclass(frozen=True, slots=True)
class SilentNodes:
    """Nodes that ran jobs in the evidence window but gave no lines from the node log
    ``stream`` for at least ``hours_min`` (up to ``hours_max``) hours; ``never``: none in the
    whole span the store covers (``EvidenceState.covered``), then the hours are None. ``nodes``
    is a hostlist."""

    stream: str
    nodes: str
    node_count: int
    never: bool
    hours_min: float | None = None
    hours_max: float | None = None


@dataclass(frozen=True, slots=True)
class EvidenceState:
    """Evidence health over the jobs that ended in the last ``window`` seconds; ``covered``:
    the seconds back to the oldest job end in the store, at most ``LINES_LOOKBACK`` (None
    without any): a node is called silent only for a span the store covers."""

    window: float
    streams: list[StreamHealth] = field(default_factory=list)
    node_logs: StreamHealth | None = None
    silent: list[SilentNodes] = field(default_factory=list)
    covered: float | None = None


@dataclass(slots=True)
class Status:
    """Everything ``sattr status`` says; ``problems`` empty means healthy. A section the
    store would fill is None when there is no store to read (``store_state`` says why).
    ``config``: the configuration file read, None when there was none (the defaults)."""

    now: datetime
    config: str | None
    spool: str
    store: str
    store_state: str
    worker: WorkerState
    queue: QueueState | None
    throughput: Throughput | None = None
    admin_comment: CommentState | None = None
    reconciliation: ReconcileState | None = None
    evidence: EvidenceState | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object: ``schema``, ``now``, ``healthy``, ``problems``, ``config``,
        ``spool``, ``store``, ``store_state`` and one object (or null) per section, with the
        field names of the section classes; times are UTC ISO text, durations seconds."""
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "now": _iso(self.now),
            "healthy": self.healthy,
            "problems": list(self.problems),
            "config": self.config,
            "spool": self.spool,
            "store": self.store,
            "store_state": self.store_state,
        }
        for name in ("worker", "queue", "throughput", "admin_comment", "reconciliation"):
            value = getattr(self, name)
            out[name] = None if value is None else dataclasses.asdict(value)
        evidence = self.evidence
        if evidence is None:
            out["evidence"] = None
        else:
            out["evidence"] = {
                "window": evidence.window,
                "streams": [dataclasses.asdict(s) for s in evidence.streams],
                "node_logs": (
                    dataclasses.asdict(evidence.node_logs) if evidence.node_logs else None
                ),
                "silent": [dataclasses.asdict(s) for s in evidence.silent],
                "covered": evidence.covered,
            }
        return out


# --------------------------------------------------------------------- collecting


def collect(config: Config, *, config_file: str | None, now: datetime | None = None) -> Status:
    """Read the spool, the spool lock and the verdict store the configuration names.

    Args:
        config: the site configuration (``spool``, ``store``, ``settle_delay``,
            ``reconcile``, ``admin_comment``, ``health``).
        config_file: the file ``config`` was read from; None when there was none (the
            defaults).
        now: the time to measure ages from (UTC; default: now).

    Returns:
        The status, its ``problems`` filled in.

    Raises:
        StatusUnreadable: when the spool, a spool directory or the store exists but the
            caller may not read it (or reading it fails).
    """
    now = now or datetime.now(UTC)
    spool = Spool(config.spool)
    store_path = Path(config.store)
    problems: list[str] = []
    worker = WorkerState(running=None, lock="no spool")
    queue = None
    if _spool_root(spool.root, problems):
        worker = _lock_state(spool.root)  # told apart from the subdirectories: one may be gone
        queue = _queue(spool, config, now, problems)
    status = Status(
        now=now,
        config=config_file,
        spool=str(spool.root),
        store=str(store_path),
        store_state="ok",
        worker=worker,
        queue=queue,
    )
    store = _open_store(store_path, status, problems)
    if store is not None:
        with store:
            _read_store(store, config, status, problems)
    status.problems = [*problems, *_judge(config, status)]
    return status


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _since(now: datetime, seconds: float) -> datetime:
    return now - timedelta(seconds=seconds)


def _age(now: datetime, stamp: str | None) -> float | None:
    """Seconds from the stored UTC time ``stamp`` to ``now`` (None when there is none)."""
    at = parse_iso(stamp) if stamp else None
    return None if at is None else round((now - at).total_seconds(), 3)


def _unreadable(path: Path | str, what: str, exc: OSError | None = None) -> StatusUnreadable:
    """The error for a spool or store ``path`` that cannot be read: the caller's rights
    (EACCES, EPERM) or the file system (``exc``'s own reason)."""
    if exc is None or isinstance(exc, PermissionError):
        text = (
            f"{what} is not readable to you; run 'sattr status' as root (or as a member of a"
            " group that may read it)"
        )
    else:
        text = f"cannot read {what}: {exc.strerror or exc}"
    return StatusUnreadable(text, Location(str(path)))


def _spool_root(root: Path, problems: list[str]) -> bool:
    """Whether the spool directory is there to read (a problem when it is not).

    Raises:
        StatusUnreadable: when it exists but the caller may not list or enter it.
    """
    try:
        info = root.stat()
    except FileNotFoundError:
        problems.append(
            f"spool {root} does not exist: create it as INSTALL.md step 3 says"
            " (systemd-tmpfiles --create attribution.conf)"
        )
        return False
    except OSError as exc:
        raise _unreadable(root, "the spool", exc) from None
    if not stat.S_ISDIR(info.st_mode):
        problems.append(f"spool {root} is not a directory: create it as INSTALL.md step 3 says")
        return False
    if not os.access(root, os.R_OK | os.X_OK):
        raise _unreadable(root, "the spool")
    return True


def _lock_state(root: Path) -> WorkerState:
    """Whether a worker holds ``<spool>/.worker.lock``: the lock is tried (never waited for)
    on a descriptor opened read-only, without creating the file, and released at once.
    A lock file the caller may not open leaves ``running`` None (the heartbeat tells).

    A worker starting in that very moment finds the lock taken and exits (systemd starts it
    again); reading the lock is that brief."""
    path = root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return WorkerState(running=False, lock=f"no lock file {path.name}")
    except PermissionError:
        return WorkerState(
            running=None,
            lock=f"cannot read the lock file {path}: not readable to you; the heartbeat tells",
        )
    except OSError as exc:
        return WorkerState(running=None, lock=f"cannot open {path}: {exc.strerror or exc}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return WorkerState(running=True, lock="held")
        return WorkerState(running=None, lock=f"cannot lock {path}: {exc.strerror or exc}")
    finally:
        os.close(fd)  # releases the lock when it was taken
    return WorkerState(running=False, lock="free")


# --------------------------------------------------------------------- the spool


@dataclass(frozen=True, slots=True)
class _Retry:
    """One ``retry/<key>.json`` as status reads it: the ``state`` (values of the right types
    only) or, when the caller may not read the file, why (``unreadable``)."""

    state: dict[str, Any]
    unreadable: str | None = None


def _queue(spool: Spool, config: Config, now: datetime, problems: list[str]) -> QueueState | None:
    """The spool's state; None (with a problem) when a subdirectory is missing.

    Raises:
        StatusUnreadable: when a spool directory may not be read.
    """
    root = spool.root
    missing = []
    for name in SUBDIRS:
        try:
            info = spool.dir(name).stat()
        except FileNotFoundError:
            missing.append(name)
            continue
        except OSError as exc:
            raise _unreadable(spool.dir(name), "the spool", exc) from None
        if not stat.S_ISDIR(info.st_mode):
            missing.append(name)
    if missing:
        problems.append(
            f"spool {root} lacks {', '.join(m + '/' for m in missing)}: create it as"
            " INSTALL.md step 3 says"
        )
        return None
    for name in ("new", "work", "retry", "failed", "done"):
        if not os.access(spool.dir(name), os.R_OK | os.X_OK):
            raise _unreadable(spool.dir(name), "the spool")
    clock = now.timestamp()
    try:
        new = _entries(spool.dir("new"))
        work = _entries(spool.dir("work"))
        failed = _entries(spool.dir("failed"))
        done = sum(1 for n in os.listdir(spool.dir("done")) if not _skipped(n))
        states = set(os.listdir(spool.dir("retry")))
    except OSError as exc:
        raise _unreadable(exc.filename or root, "the spool", exc) from None
    retried = {
        key: _retry_state(spool.dir("retry") / f"{key}.json")
        for key, _ in (*new, *work)
        if f"{key}.json" in states
    }
    ready: list[tuple[float, str]] = []
    settling = waiting = unknown = 0
    for key, mtime in new:
        retry = retried.get(key)
        if retry is not None and retry.unreadable:
            unknown += 1  # when it is due cannot be told
            continue
        next_at = retry.state.get("next_at", 0.0) if retry else 0.0
        ready_at = max(mtime + config.settle_delay, next_at)
        if ready_at <= clock:
            ready.append((ready_at, key))
        elif next_at > clock:
            waiting += 1
        else:
            settling += 1
    oldest = min(ready, default=None)
    retry_reasons, retry_more = _group(
        (key, _retry_reason(r), r.state.get("attempts")) for key, r in retried.items()
    )
    reasons = [(name, *_failed_reason(spool, name)) for name, _ in failed[:MAX_ERROR_FILES]]
    failed_reasons, failed_more = _group((name, why, None) for name, why, _ in reasons)
    return QueueState(
        path=str(root),
        ready=len(ready),
        settling=settling,
        retry_wait=waiting,
        oldest_ready_wait=round(clock - oldest[0], 3) if oldest else None,
        oldest_ready_key=oldest[1] if oldest else None,
        work=len(work),
        oldest_work_age=round(clock - min(t for _, t in work), 3) if work else None,
        done=done,
        failed=len(failed),
        retrying=len(retried),
        retry_reasons=retry_reasons,
        retry_reasons_more=retry_more,
        failed_reasons=failed_reasons,
        failed_reasons_more=failed_more,
        retry_unknown=unknown,
        unreadable=sum(1 for r in retried.values() if r.unreadable)
        + sum(1 for _, _, unreadable in reasons if unreadable),
    )


def _skipped(name: str) -> bool:
    """Not an entry: a hidden file (the lock, a worker's temporary) or an ``.error`` file."""
    return name.startswith(".") or name.endswith(".error")


def _entries(directory: Path) -> list[tuple[str, float]]:
    """``(key, mtime)`` of the entries in a spool directory (no ``.error`` or hidden files),
    oldest first.

    Raises:
        OSError: when the directory or an entry may not be read.
    """
    out: list[tuple[str, float]] = []
    for path in directory.iterdir():
        if _skipped(path.name):
            continue
        try:
            out.append((path.name, path.lstat().st_mtime))
        except FileNotFoundError:
            continue  # moved on meanwhile
    out.sort(key=lambda e: (e[1], e[0]))
    return out


def _read_private(path: Path, limit: int) -> tuple[str | None, str | None]:
    """A file SlurmUser may have written, as the worker reads it: never through a link,
    only a regular file (a FIFO cannot block the open), at most ``limit`` bytes.

    Returns:
        ``(text, None)``; ``(None, None)`` when there is no usable file (gone meanwhile, a
        link, not a regular file); ``(None, why)`` when the caller may not read it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError as exc:
        return None, exc.strerror or "permission denied"
    except OSError:
        return None, None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None, None
            return fh.read(limit).decode("utf-8", errors="replace"), None
    except OSError as exc:
        return None, exc.strerror or str(exc)


def _retry_state(path: Path) -> _Retry:
    """``attempts``, ``next_at`` and ``errors`` of a ``retry/<key>.json``, the values of the
    right types only (none when there is no file or it is unusable: SlurmUser may write
    there; the worker then treats the entry as never tried)."""
    text, unreadable = _read_private(path, MAX_ENTRY_BYTES)
    if text is None:
        return _Retry({}, unreadable)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return _Retry({})
    if not isinstance(data, dict):
        return _Retry({})
    out: dict[str, Any] = {}
    attempts, next_at, errors = data.get("attempts"), data.get("next_at"), data.get("errors")
    if isinstance(attempts, int) and not isinstance(attempts, bool):
        out["attempts"] = attempts
    if (
        isinstance(next_at, int | float)
        and not isinstance(next_at, bool)
        and math.isfinite(next_at)
    ):
        out["next_at"] = float(next_at)
    if isinstance(errors, list):
        out["errors"] = [  # as the worker keeps them: the last ten, 2,000 characters each
            (e[0], str(e[1])[:2000])
            for e in errors[-10:]
            if isinstance(e, list | tuple) and len(e) == 2
        ]
    return _Retry(out)


def _retry_reason(retry: _Retry) -> str:
    if retry.unreadable:
        return f"cannot read its retry state ({retry.unreadable}): run as root to see it"
    errors = retry.state.get("errors")
    return str(errors[-1][1]) if errors else "no error recorded"


_STAMP = re.compile(r"^\s*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+")


def _failed_reason(spool: Spool, key: str) -> tuple[str, bool]:
    """The last error a failed entry's ``.error`` file records (the one it failed on), and
    whether the caller may not read that file."""
    text, unreadable = _read_private(spool.dir("failed") / f"{key}.error", 64 * 1024)
    if unreadable:
        return f"cannot read its .error file ({unreadable}): run as root to see it", True
    if text is None:
        return "no .error file beside it", False
    lines = text.splitlines()
    if "errors:" in lines:
        listed = []
        for line in lines[lines.index("errors:") + 1 :]:
            if not line.startswith("  "):
                break
            listed.append(_STAMP.sub("", line).strip())
        if listed:
            return listed[-1], False
    for line in lines:  # a quarantined entry: "failed: <time>: <problem>"
        if line.startswith("failed: "):
            parts = line.split(": ", 2)
            return (parts[2] if len(parts) == 3 else line), False
    return "the .error file names no error", False


_NUMBER = re.compile(r"\d+")
# C0 controls but tab and newline, DEL and C1 controls (as in attribution.render): error texts
# come from files SlurmUser may write and from Slurm; an escape sequence must not drive the
# operator's terminal
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _group(items: Iterable[tuple[str, str, int | None]]) -> tuple[list[Reason], int]:
    """Group ``(key, message, attempts)`` by message (numbers ignored): the ``TOP_REASONS``
    largest groups, and how many groups were left out."""
    groups: dict[str, list[tuple[str, str, int | None]]] = {}
    for key, message, tries in items:
        message = " ".join(message.split())[:MAX_REASON] or "(empty message)"
        groups.setdefault(_NUMBER.sub("N", message), []).append((key, message, tries))
    reasons = []
    for members in groups.values():
        attempts = [a for _, _, a in members if a is not None]
        key, message, _ = members[-1]
        reasons.append(Reason(message, len(members), key, max(attempts) if attempts else None))
    reasons.sort(key=lambda r: (-r.entries, r.reason))
    return reasons[:TOP_REASONS], max(len(reasons) - TOP_REASONS, 0)


# --------------------------------------------------------------------- the store


def _open_store(path: Path, status: Status, problems: list[str]) -> Store | None:
    """The store opened for reading; None (with a problem) when there is none or it cannot
    be opened.

    Raises:
        StatusUnreadable: when the file exists but the caller may not read it.
    """
    try:
        path.stat()
    except FileNotFoundError:
        status.store_state = "missing"
        problems.append(
            f"no verdict store yet at {path} (the worker creates it when it first starts)"
        )
        return None
    except OSError as exc:
        raise _unreadable(path, "the verdict store", exc) from None
    if not os.access(path, os.R_OK):
        raise _unreadable(path, "the verdict store")
    try:
        return Store(path, readonly=True)
    except AttributionError as exc:
        status.store_state = f"error: {exc}"
        problems.append(f"the verdict store cannot be opened: {exc}")
        return None


def _read_store(store: Store, config: Config, status: Status, problems: list[str]) -> None:
    """Fill the sections the store holds; a read error becomes ``store_state`` and a
    problem (the sections not read stay None)."""
    now = status.now
    try:
        beat = store.heartbeat(status.spool)
        if beat is not None:
            status.worker = dataclasses.replace(
                status.worker,
                pid=beat.get("pid"),
                host=beat.get("host"),
                started_at=beat.get("started_at"),
                beat_at=beat.get("beat_at"),
                beat_age=_age(now, beat.get("beat_at")),
                info=beat.get("info") or {},
            )
        status.throughput = _throughput(store, now)
        status.admin_comment = _comments(store, config, now)
        status.reconciliation = _reconciliation(store, config, now)
        status.evidence = _evidence(store, now)
    except AttributionError as exc:
        status.store_state = f"error: {exc}"
        problems.append(f"the verdict store cannot be read: {exc}")


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of sorted ``values``; None when
    there are none."""
    if not values:
        return None
    rank = max(math.ceil(p / 100 * len(values)), 1)
    return values[rank - 1]


def _throughput(store: Store, now: datetime) -> Throughput:
    rows = store.verdict_times(_since(now, THROUGHPUT_WINDOW))
    latencies: list[float] = []
    for row in rows:
        end, made = parse_iso(row["end"] or ""), parse_iso(row["diagnosed_at"] or "")
        if end is not None and made is not None:
            latencies.append(max((made - end).total_seconds(), 0.0))
    latencies.sort()
    return Throughput(
        window=THROUGHPUT_WINDOW,
        verdicts=len(rows),
        per_minute=round(len(rows) / (THROUGHPUT_WINDOW / 60), 2),
        latency_jobs=len(latencies),
        latency_p50=percentile(latencies, 50),
        latency_p95=percentile(latencies, 95),
        latency_max=latencies[-1] if latencies else None,
    )


def _comments(store: Store, config: Config, now: datetime) -> CommentState:
    backlog = store.comment_backlog()
    error, pending = backlog.get("error", {}), backlog.get("pending", {})
    latest = error.get("latest")
    return CommentState(
        enabled=config.admin_comment.enabled,
        failing=error.get("count", 0),
        failing_since=error.get("oldest"),
        failing_age=_age(now, error.get("oldest")),
        latest_error=latest.removeprefix("error:").strip() if latest else None,
        pending=pending.get("count", 0),
        pending_since=pending.get("oldest"),
        pending_age=_age(now, pending.get("oldest")),
    )


def _reconciliation(store: Store, config: Config, now: datetime) -> ReconcileState:
    """The last sweep of each cluster, with its last successful one (looked for in the
    sweeps of the last day, or of twice ``health.max_reconcile_age`` when that is longer),
    and the totals of the last day."""
    back = max(DAY, 2 * config.health.max_reconcile_age)
    recent = store.reconciliations(_since(now, back), limit=SWEEP_ROWS)  # newest first
    last = []
    for r in store.last_reconciliations():
        ok_at = r["ran_at"] if r["error"] is None else None
        failing_since = None
        if ok_at is None:
            for earlier in recent:
                if earlier["cluster"] != r["cluster"]:
                    continue
                if earlier["error"] is None:
                    ok_at = earlier["ran_at"]
                    break
                failing_since = earlier["ran_at"]
        last.append(
            Sweep(
                cluster=r["cluster"],
                ran_at=r["ran_at"],
                age=_age(now, r["ran_at"]),
                since=r["since"],
                until=r["until"],
                seen=r["seen"] or 0,
                enqueued=r["enqueued"] or 0,
                error=r["error"],
                last_ok_at=ok_at,
                last_ok_age=_age(now, ok_at),
                failing_since=failing_since or (r["ran_at"] if r["error"] is not None else None),
            )
        )
    reached = _age(now, recent[-1]["ran_at"]) if len(recent) == SWEEP_ROWS else None
    if reached is not None:  # the rows read stop short of it
        back = min(back, reached)
    totals = [SweepTotals(**r) for r in store.reconciliation_totals(_since(now, DAY))]
    return ReconcileState(
        enabled=config.reconcile.enabled, window=DAY, last=last, totals=totals, looked_back=back
    )


def _oldest_end(store: Store) -> str | None:
    """The earliest job end in the store (UTC ISO text), None without any.

    Raises:
        StoreError: when the database cannot be read.
    """
    try:
        row = next(store.rows('"end" IS NOT NULL', order='"end"', limit=1), None)
    except Exception as exc:  # Store.rows passes SQLite's own errors on, unwrapped
        raise StoreError(
            f"the verdict store cannot be read: {exc}", Location(str(store.path))
        ) from None
    return row["end"] if row else None


def _entry_nodes(node: str) -> tuple[str, ...]:
    """The nodes of a coverage entry's ``node``: itself, or each node of the host list of an
    entry that stands for many (a node name holds no bracket or comma)."""
    if "[" not in node and "," not in node:
        return (node,)
    try:
        return expand(node)
    except HostlistError:
        return (node,)


def _evidence(store: Store, now: datetime) -> EvidenceState:
    since = _since(now, DAY)
    rows = store.coverage_by_stream(since, {"node": NODE_LOG_STREAMS})
    streams = [StreamHealth(**r) for r in rows if r["stream"] != "node"]
    node_logs = next((StreamHealth(**r) for r in rows if r["stream"] == "node"), None)
    streams.sort(key=lambda s: s.stream)
    oldest = _age(now, _oldest_end(store))
    covered = None if oldest is None else round(min(max(oldest, 0.0), LINES_LOOKBACK), 3)
    last: dict[tuple[str, str], str | None] = {}
    for r in store.coverage_by_node(since, NODE_LOG_STREAMS):
        # an entry that stood for many nodes without a log (``nodes_folded``) is each of them
        for node in _entry_nodes(r["node"]):
            at, seen = r["last_lines_at"], last.get((r["stream"], node))
            last[(r["stream"], node)] = max(at, seen) if at and seen else at or seen
    # only the sources with no lines in the window are looked for further back (a long read)
    earlier = store.last_lines(
        _since(now, LINES_LOOKBACK), since, [s for s, at in last.items() if at is None]
    )
    quiet: dict[tuple[str, bool], list[tuple[str, float | None]]] = {}
    for (stream, node), at in sorted(last.items()):
        age = _age(now, at or earlier.get((stream, node)))
        # a node with no lines at all is silent for as long as the store reaches back: named
        # only once that is SILENT_AFTER (a store two minutes old tells nothing yet)
        if age is None and (covered or 0.0) < SILENT_AFTER:
            continue
        if age is None or age >= SILENT_AFTER:
            quiet.setdefault((stream, age is None), []).append((node, age))
    silent = []
    for (stream, never), nodes in sorted(quiet.items()):
        ages = [a / 3600 for _, a in nodes if a is not None]
        silent.append(
            SilentNodes(
                stream=stream,
                nodes=compress(n for n, _ in nodes),
                node_count=len(nodes),
                never=never,
                hours_min=round(min(ages), 1) if ages else None,
                hours_max=round(max(ages), 1) if ages else None,
            )
        )
    return EvidenceState(
        window=DAY, streams=streams, node_logs=node_logs, silent=silent, covered=covered
    )


# --------------------------------------------------------------------- judging


def _judge(config: Config, status: Status) -> list[str]:
    """One line per reason the worker is unhealthy under ``config.health``."""
    health = config.health
    out: list[str] = []
    worker, queue = status.worker, status.queue
    beat = worker.beat_age
    if worker.running is False:
        last = f"; its last heartbeat was {duration(beat)} ago" if beat is not None else ""
        out.append(
            "no worker holds the spool lock: start it (systemctl start attribution-worker)" + last
        )
    elif status.store_state == "ok":
        if beat is None:
            out.append("the worker has recorded no heartbeat in the verdict store")
        elif beat > health.max_heartbeat_age:
            out.append(
                f"the worker's last heartbeat was {duration(beat)} ago"
                f" (health.max_heartbeat_age {duration(health.max_heartbeat_age)})"
            )
    if queue is not None:
        wait = queue.oldest_ready_wait
        if wait is not None and wait > health.max_queue_age:
            out.append(
                f"the oldest ready spool entry ({queue.oldest_ready_key}) has waited"
                f" {duration(wait)} (health.max_queue_age {duration(health.max_queue_age)})"
            )
        if queue.failed > health.max_failed:
            out.append(
                f"{queue.failed} spool entr{'y' if queue.failed == 1 else 'ies'} in failed/"
                f" (health.max_failed {health.max_failed}): read their .error files, then"
                " 'sattr enqueue --retry-failed'"
            )
    out += _judge_reconciliation(config, status)
    comments = status.admin_comment
    if comments is not None and comments.enabled:
        if comments.failing_age is not None and comments.failing_age > health.max_queue_age:
            out.append(
                f"{comments.failing} AdminComment write(s) failing for"
                f" {duration(comments.failing_age)} (health.max_queue_age"
                f" {duration(health.max_queue_age)}); latest: {comments.latest_error}"
            )
        if comments.pending_age is not None and comments.pending_age > health.max_queue_age:
            out.append(
                f"{comments.pending} AdminComment write(s) pending for"
                f" {duration(comments.pending_age)}: the worker stopped between saving the"
                " verdict and writing it; 'sattr rediagnose --write-comment JOB' writes it"
            )
    return out


def _judge_reconciliation(config: Config, status: Status) -> list[str]:
    """The reconciliation problems: a cluster without a successful sweep for longer than
    ``health.max_reconcile_age`` (one failed sweep alone is no problem: it is shown, and the
    next one may succeed), none ever recorded by a worker that has run that long, and a
    ``max_reconcile_age`` that every sweep interval would exceed."""
    if not config.reconcile.enabled:
        return []
    limit, interval = config.health.max_reconcile_age, config.reconcile.interval
    out: list[str] = []
    if limit <= interval:
        out.append(
            f"health.max_reconcile_age ({duration(limit)}) is not longer than"
            f" reconcile.interval ({duration(interval)}): the last sweep would be too old"
            " before every next one; set max_reconcile_age to at least twice the interval"
        )
    state = status.reconciliation
    if state is None:
        return out
    last = {s.cluster: s for s in state.last}
    wanted = list(config.reconcile.clusters) or list(last)
    started = _age(status.now, status.worker.started_at)
    # no sweep yet is no news when the worker is new (its first sweep may not have run) or
    # not running (that is the problem then)
    young = status.worker.running is False or (started is not None and started <= limit)
    if not wanted and not young:
        out.append(
            "reconciliation is enabled but no sweep was ever recorded (health.max_reconcile_age"
            f" {duration(limit)})"
        )
    for cluster in wanted:
        sweep = last.get(cluster)
        if sweep is None:
            if not young:
                out.append(f"reconciliation: no sweep of cluster {cluster} was ever recorded")
        elif sweep.error is None:
            if sweep.age is not None and sweep.age > limit:
                out.append(
                    f"reconciliation: the last sweep of cluster {cluster} was"
                    f" {duration(sweep.age)} ago (health.max_reconcile_age {duration(limit)})"
                )
        else:
            # without a success among the sweeps read, the cluster has gone without one
            # at least since the oldest failure read
            quiet = sweep.last_ok_age
            at_least = quiet is None
            if quiet is None:
                quiet = _age(status.now, sweep.failing_since)
            if quiet is not None and quiet > limit:
                out.append(
                    f"reconciliation of cluster {cluster}: no successful sweep for"
                    f" {'at least ' if at_least else ''}{duration(quiet)}"
                    f" (health.max_reconcile_age {duration(limit)}); latest error:"
                    f" {sweep.error}"
                )
    return out


# --------------------------------------------------------------------- the text view


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``5 h``, ``26 h``, ``3 d``: a duration as people read it."""
    if seconds is None:
        return "-"
    s = max(seconds, 0.0)
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def _stamp(text: str | None) -> str:
    """A stored UTC time to the second (``2026-12-01T10:00:00Z``), as given when unparsable."""
    at = parse_iso(text) if text else None
    return at.strftime("%Y-%m-%dT%H:%M:%SZ") if at else (text or "-")


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(v)}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def render_text(status: Status) -> str:
    """The operator's view: one block per section, then the problems (or ``healthy``);
    terminal control characters in it, and newlines within a line, are shown as ``\\xNN``."""
    lines: list[str] = []

    def put(label: str, *texts: str) -> None:
        for i, text in enumerate(texts):
            lines.append(f"{label + ':' if i == 0 and label else '':<16}{text}")

    verdict = "healthy" if status.healthy else f"{len(status.problems)} problem(s)"
    lines.append(f"sattr status: {verdict} (at {status.now.strftime('%Y-%m-%dT%H:%M:%SZ')})")
    put("Config", status.config or f"no config file ({DEFAULT_CONFIG}): defaults")
    put("Worker", *_worker_lines(status))
    put("Spool", *_queue_lines(status.queue, status.spool))
    put("Store", status.store + ("" if status.store_state == "ok" else f": {status.store_state}"))
    if status.throughput is not None:
        put("Throughput", *_throughput_lines(status.throughput))
    if status.admin_comment is not None:
        put("AdminComment", *_comment_lines(status.admin_comment))
    if status.reconciliation is not None:
        put("Reconciliation", *_reconcile_lines(status.reconciliation))
    if status.evidence is not None:
        put("Evidence", *_evidence_lines(status.evidence))
    if status.problems:
        lines.append("Problems:")
        lines += [f"  - {p}" for p in status.problems]
    else:
        lines.append("healthy")
    # one line each: a newline in what the worker or a store reported (its heartbeat, an
    # error) would start a line of its own that only looks like the status's
    text = "\n".join(line.replace("\n", "\\x0a") for line in lines)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _worker_lines(status: Status) -> list[str]:
    w = status.worker
    if w.running is True:
        head = "running (holds the spool lock)"
    elif w.running is False:
        head = f"not running ({w.lock})" if w.lock != "free" else "not running (lock free)"
    else:
        head = f"unknown ({w.lock})"
    out = [head]
    if w.beat_at is not None:
        out.append(
            f"last heartbeat {duration(w.beat_age)} ago: pid {w.pid} on {w.host},"
            f" started {_stamp(w.started_at)} ({duration(_age(status.now, w.started_at))} ago)"
        )
        out += _counter_lines(w.info)
    elif status.store_state == "ok":
        out.append("no heartbeat recorded")
    return out


# the worker's results per spool entry, in the order shown, with what each is called
_RESULTS = (
    ("saved", "saved"),
    ("dropped", "dropped (completed 0:0)"),
    ("retry", "retried"),
    ("failed", "failed for good"),
    ("stuck", "stuck in work/"),
)


def _counter_lines(info: dict[str, Any]) -> list[str]:
    """The worker's counters since it started (``attribution.worker``'s heartbeat), in
    words; a counter this version does not know (or of an unexpected type) is shown as
    ``name: value``, one a line."""
    out: list[str] = []
    shown: set[str] = set()

    def count(name: str) -> int | None:
        value = info.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            shown.add(name)
            return value
        return None

    processes, lost = count("processes"), count("children_lost")
    parts = []
    if processes is not None:
        parts.append(f"{processes} diagnosing at once")
    if lost is not None:
        parts.append(f"{lost} lost (killed or crashed) since start")
    if parts:
        out.append("processes: " + "; ".join(parts))
    results = info.get("results")
    if isinstance(results, dict):
        shown.add("results")
        labels = dict(_RESULTS)
        done = [f"{n} {labels[k]}" for k, n in _ordered(results) if k in labels and n]
        done += [f"{_value(v)} {k}" for k, v in sorted(results.items()) if k not in labels]
        out.append(f"since start: {', '.join(done) or 'no spool entry done yet'}")
    later, found = count("comments_rewritten"), count("reconciled")
    extra = []
    if later is not None:
        extra.append(f"{later} AdminComment(s) written on a later try")
    if found is not None:
        extra.append(f"{found} job(s) found by reconciliation")
    if extra:
        out.append(", ".join(extra))
    slurm = info.get("slurm")
    if isinstance(slurm, dict):
        shown.add("slurm")
        out.append(_slurm_line(slurm))
    out += [f"{k}: {_value(v)}" for k, v in sorted(info.items()) if k not in shown]
    return out


def _slurm_line(slurm: dict[str, Any]) -> str:
    """The worker's Slurm in words: version, backend, keys, untested, fields missing."""
    version = slurm.get("version")
    text = f"Slurm {_value(version) if version else '(version unknown: sacct --version failed)'}"
    text += f" ({_value(slurm.get('backend'))} backend)"
    text += ", runs keyed by SLUID" if slurm.get("sluid_keys") is True else ""
    if version and slurm.get("tested") is False:
        text += ", not a version attribution is tested on"
    missing = slurm.get("fields_missing")
    if isinstance(missing, list) and missing:
        text += f"; sacct has no {', '.join(_value(m) for m in missing)}"
    return text


def _ordered(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """The known results in the order shown (``_RESULTS``), the counts as reported."""
    return [(name, results[name]) for name, _ in _RESULTS if name in results]


def _queue_lines(queue: QueueState | None, path: str) -> list[str]:
    if queue is None:
        return [f"{path}: not usable (see Problems)"]
    wait = (
        f" (oldest waited {duration(queue.oldest_ready_wait)}: {queue.oldest_ready_key})"
        if queue.oldest_ready_wait is not None
        else ""
    )
    unknown = (
        f", {queue.retry_unknown} whose retry time cannot be read" if queue.retry_unknown else ""
    )
    out = [
        path,
        f"new/: {queue.ready} ready{wait}, {queue.settling} settling,"
        f" {queue.retry_wait} waiting for a retry{unknown}",
        f"work/: {queue.work}"
        + (f" (oldest {duration(queue.oldest_work_age)})" if queue.work else "")
        + f"; done/: {queue.done}; failed/: {queue.failed}",
    ]
    if queue.retrying:
        out.append(f"failed at least once, to be tried again: {queue.retrying}")
        out += _reason_lines(queue.retry_reasons, queue.retry_reasons_more)
    if queue.failed:
        out.append(f"failed for good (failed/): {queue.failed}")
        out += _reason_lines(queue.failed_reasons, queue.failed_reasons_more)
    if queue.unreadable:
        out.append(
            f"cannot read {queue.unreadable} file(s) here (retry states, .error files): not"
            " readable to you; run 'sattr status' as root to see them"
        )
    return out


def _reason_lines(reasons: list[Reason], more: int) -> list[str]:
    out = []
    for r in reasons:
        tries = f" (at most {r.attempts} attempt(s) so far)" if r.attempts else ""
        out.append(f"  {r.entries:>5} x {r.reason}{tries} [e.g. {r.key}]")
    if more:
        out.append(f"  and {more} more reason(s)")
    return out


def _throughput_lines(t: Throughput) -> list[str]:
    out = [f"last hour: {t.verdicts} verdict(s), {t.per_minute:g} per minute"]
    if t.latency_jobs:
        out.append(
            f"job end -> verdict: p50 {duration(t.latency_p50)}, p95 {duration(t.latency_p95)},"
            f" max {duration(t.latency_max)} ({t.latency_jobs} jobs)"
        )
    return out


def _comment_lines(c: CommentState) -> list[str]:
    counts = [
        f"{n} {what}" for n, what in ((c.failing, "write(s) failing"), (c.pending, "pending")) if n
    ]
    if not c.enabled:
        head = "disabled" + (
            f"; {', '.join(counts)} (not written while disabled)" if counts else ""
        )
    else:
        head = "enabled; " + (", ".join(counts) or "no write failing or pending")
    out = [head]
    if c.failing:
        out.append(
            f"failing since {_stamp(c.failing_since)} ({duration(c.failing_age)}); latest error:"
            f" {c.latest_error}"
        )
    if c.pending:
        out.append(f"pending since {_stamp(c.pending_since)} ({duration(c.pending_age)})")
    return out


def _reconcile_lines(r: ReconcileState) -> list[str]:
    out = ["enabled" if r.enabled else "disabled (reconcile.enabled is false)"]
    for s in r.last:
        what = f"{s.seen} seen, {s.enqueued} enqueued"
        if s.error:
            ok = (
                f"last successful sweep {duration(s.last_ok_age)} ago"
                if s.last_ok_age is not None
                else f"no successful sweep in the last {duration(r.looked_back)}"
            )
            what = f"failed: {s.error} ({ok})"
        out.append(
            f"{s.cluster}: last sweep {duration(s.age)} ago, window {_stamp(s.since)} to"
            f" {_stamp(s.until)}: {what}"
        )
    for t in r.totals:
        out.append(
            f"{t.cluster}, last 24 h: {t.sweeps} sweep(s), {t.seen} job(s) seen,"
            f" {t.enqueued} found that never reached the spool"
            + (f", {t.errors} failed sweep(s)" if t.errors else "")
        )
    if r.enabled and not r.last:
        out.append("no sweep recorded")
    return out


def _evidence_lines(e: EvidenceState) -> list[str]:
    if not e.streams:
        return ["no job with coverage ended in the last 24 h"]
    out = [
        "jobs that ended in the last 24 h, per source: the share of them where it was"
        " missing, unreadable, in error or empty"
    ]
    for s in e.streams:
        bad = [
            f"{name} {_share(n, s.jobs)}"
            for name, n in (
                ("missing", s.missing),
                ("unreadable", s.unreadable),
                ("error", s.error),
                ("empty", s.empty),
            )
            if n
        ]
        out.append(f"  {s.stream:<14} {', '.join(bad) or 'read'} (of {s.jobs} jobs)")
    n = e.node_logs
    if n is not None and n.lost:
        out.append(
            f"node logs missing for {_share(n.lost, n.jobs)} of last day's jobs"
            f" ({n.lost} of {n.jobs})"
        )
    if e.covered is not None and e.covered < SILENT_AFTER:
        out.append(
            f"nodes without kernel or syslog lines are named once the store covers"
            f" {duration(SILENT_AFTER)} (its oldest job ended {duration(e.covered)} ago)"
        )
    for q in e.silent:
        if q.never:
            span = LINES_LOOKBACK if e.covered is None else e.covered
            when = f"in the last {duration(span)}"
        elif q.hours_min is not None and q.hours_max is not None and q.hours_max - q.hours_min >= 1:
            when = f"for {q.hours_min:.0f}-{q.hours_max:.0f} h"
        else:
            when = f"for {q.hours_min:.0f} h"
        out.append(f"no {q.stream} lines from {q.nodes} {when}, though they ran jobs")
    return out


__all__ = [
    "SCHEMA",
    "CommentState",
    "EvidenceState",
    "QueueState",
    "Reason",
    "ReconcileState",
    "SilentNodes",
    "Status",
    "StatusUnreadable",
    "StreamHealth",
    "Sweep",
    "SweepTotals",
    "Throughput",
    "WorkerState",
    "collect",
    "duration",
    "percentile",
    "render_text",
]
