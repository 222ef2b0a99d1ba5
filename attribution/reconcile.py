"""The reconciliation sweep: job runs accounting says ended that never reached the spool.

The EpilogSlurmctld hook is the only way a job reaches the worker, and it can fail: a full or
read-only spool, a failover slurmctld on a host without the hook, a hook killed by
PrologEpilogTimeout. Every ``reconcile.interval`` the worker calls ``reconcile``: for each cluster
it asks the backend which job runs ended since the last sweep (``ended_jobs``), keeps those that
should have a verdict, and spools the ones that have neither a stored verdict nor a spool entry,
in the hook's own entry format (``source=reconcile`` in the header). From there the worker
treats them like any hook entry. docs/reconcile.md says what the sweep can and cannot see.

``record_env`` and ``synthetic_entry`` are the one writer of entries the hook did not write:
the sweep uses them, and so does ``sattr enqueue``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from attribution.analyze import job_passed
from attribution.config import Config
from attribution.errors import SlurmError, SpoolError, StoreError
from attribution.model import JobRecord, to_jsonable
from attribution.slurm.backend import FINAL_STATES, EndedJob
from attribution.slurm.hookenv import format_entry, key_from_env
from attribution.spool import Spool
from attribution.store import Store

# The name the local cluster's sweeps and watermark are recorded under when
# ``reconcile.clusters`` is empty. Parentheses are not allowed in a Slurm cluster name, so it
# never shares a watermark with a cluster that is listed by name.
LOCAL_CLUSTER = "(local)"
SOURCE = "reconcile"
# the spool directories an entry lives in from the hook's rename until it is pruned
SPOOL_STATES = ("new", "work", "done", "failed")
_SOURCE_WORD = re.compile(r"[A-Za-z0-9._-]{1,40}\Z")
_SUMMARY_KEYS = 5


class EndedJobs(Protocol):
    """The one backend question the sweep asks (``SlurmBackend.ended_jobs``)."""

    def ended_jobs(self, cluster: str | None, since: datetime, until: datetime) -> list[EndedJob]:
        """See ``SlurmBackend.ended_jobs``."""
        ...


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep of one cluster did.

    ``cluster``: the name its sweeps and watermark are recorded under (``LOCAL_CLUSTER`` for
    the local cluster). ``since``/``until``: the window of job end times, ``[since, until)``.
    ``ended``: job runs accounting listed in the window. ``ignored``: of them, runs the hook
    never spools (the job never ran: cancelled while pending) or the worker cannot use (a
    state that is not final, such as REQUEUED; no job id). ``seen``: runs that should have a
    verdict. ``enqueued``: the keys of those that had neither a verdict nor a spool entry and were
    spooled now. ``error``: why the sweep stopped (the watermark did not move), else None.
    ``swept``: False when the window was empty and nothing was asked or recorded.
    """

    cluster: str
    since: datetime
    until: datetime
    ended: int = 0
    ignored: int = 0
    seen: int = 0
    enqueued: tuple[str, ...] = ()
    error: str | None = None
    swept: bool = True

    @property
    def ok(self) -> bool:
        """True when the sweep finished (or had nothing to do) and was recorded."""
        return self.error is None

    def summary(self) -> str:
        """One line for the worker's log, e.g. ``reconcile c1 2026-11-30T07:00:00Z..
        2026-11-30T07:05:00Z: 12 ended (1 ignored), 3 should have a verdict, 1 never reached
        the spool: enqueued c1_42_0``."""
        window = f"{to_jsonable(self.since)}..{to_jsonable(self.until)}"
        head = f"reconcile {self.cluster} {window}"
        if not self.swept:
            return f"{head}: nothing to sweep yet (the window is empty)"
        if self.error is not None and not self.ended and not self.enqueued:
            return f"{head}: failed before any job was known, the watermark stays: {self.error}"
        counts = f"{self.ended} ended"
        if self.ignored:
            counts += f" ({self.ignored} ignored: never ran or not final)"
        counts += f", {self.seen} should have a verdict"
        if self.enqueued:
            keys = ", ".join(self.enqueued[:_SUMMARY_KEYS])
            more = len(self.enqueued) - _SUMMARY_KEYS
            if more > 0:
                keys += f" and {more} more"
            counts += f", {len(self.enqueued)} never reached the spool: enqueued {keys}"
        else:
            counts += ", none missing"
        if self.error is not None:
            return f"{head}: {counts}; stopped, the watermark stays: {self.error}"
        return f"{head}: {counts}"


# ---------------------------------------------------------------------- synthetic entries


def record_env(job: JobRecord) -> dict[str, str]:
    """The SLURM_* variables of an EpilogSlurmctld run, as far as the job record ``job`` knows
    them (``sattr enqueue``; the worker resolves the rest through sacct, as for any entry)."""
    env = {
        "SLURM_JOB_ID": job.job_id,
        "SLURM_CLUSTER_NAME": job.cluster or "",
        "SLURM_JOB_RESTART_COUNT": str(job.restart_count),
    }
    if job.array_job_id and job.array_task_id:
        env["SLURM_ARRAY_JOB_ID"] = job.array_job_id
        env["SLURM_ARRAY_TASK_ID"] = job.array_task_id
    for name, value in (
        ("SLURM_JOB_SLUID", job.sluid),
        ("SLURM_JOB_USER", job.user),
        ("SLURM_JOB_UID", None if job.uid is None else str(job.uid)),
        ("SLURM_JOB_WORK_DIR", job.work_dir),
        ("SLURM_JOB_NODELIST", job.nodelist),
    ):
        if value:
            env[name] = value
    return {k: v for k, v in env.items() if v}


def synthetic_entry(env: Mapping[str, str], *, source: str, epoch: float | None = None) -> str:
    """A spool entry in the hook's format for ``env``, written by something other than the
    hook: the header says ``source=<source>`` (``parse_entry`` keeps it in ``header``) and
    ``epoch`` is when the job ended, when known.

    Raises:
        SpoolError: when ``env`` has no SLURM_JOB_ID or an invalid variable name, or
            ``source`` is not one word of ``[A-Za-z0-9._-]``.
    """
    if not _SOURCE_WORD.match(source):
        raise SpoolError(f"not a spool entry source: {source[:40]!r}")
    text = format_entry(env, epoch=None if epoch is None else int(epoch))
    header, _, body = text.partition("\n")
    return f"{header} source={source}\n{body}"


# ---------------------------------------------------------------------- the sweep


def should_have_verdict(job: EndedJob, *, record_pass: bool) -> bool:
    """Whether the worker stores a verdict for this job run: every run that did not pass
    (``analyze.job_passed``: COMPLETED with ExitCode and DerivedExitCode 0:0), and passed
    ones too when ``record_pass``."""
    if record_pass:
        return True
    record = JobRecord(
        job_id=job.job_id,
        state=_base_state(job.state),
        exit_code=job.exit_code or None,
        derived_exit_code=job.derived_exit_code or None,
    )
    return not job_passed(record)


def spool_key(job: EndedJob) -> str:
    """The key the hook would have spooled this job run under (``hookenv.key_from_env``).

    Raises:
        SpoolError: when the run has no job id.
    """
    return key_from_env(job.env())


def other_keys(job: EndedJob) -> list[str]:
    """The run's other possible key: ``<cluster>_<job>_<restart>`` when the hook keys it by
    its SLUID, and the SLUID when accounting has one the hook does not see (24.11). A run
    found under either is not enqueued again (a cluster upgraded to a Slurm whose hook gets
    SLUIDs keeps the older entries under the older key).

    Raises:
        SpoolError: when the run has no job id.
    """
    if not job.sluid:
        return []
    flipped = replace(job, sluid_in_hook=not job.sluid_in_hook)
    return [key_from_env(flipped.env())]


def spool_state(spool: Spool, key: str) -> str | None:
    """Which spool directory (``new``, ``work``, ``done`` or ``failed``) holds an entry for
    ``key``, or None. Any entry counts: a ``done/`` entry without a verdict is a job the worker
    dropped as passed, or one whose verdict is being saved."""
    for state in SPOOL_STATES:
        if os.path.lexists(spool.dir(state) / key):
            return state
    return None


def sweep_targets(config: Config) -> list[tuple[str, str | None]]:
    """``(recorded name, cluster for the backend)`` of each cluster to sweep:
    ``reconcile.clusters`` by name, else the local cluster as ``(LOCAL_CLUSTER, None)``."""
    if config.reconcile.clusters:
        return [(name, name) for name in dict.fromkeys(config.reconcile.clusters)]
    return [(LOCAL_CLUSTER, None)]


def reconcile(
    config: Config, store: Store, spool: Spool, backend: EndedJobs, now: datetime
) -> list[SweepResult]:
    """Sweep every configured cluster once (see ``sweep``); one result per cluster, in the
    order of ``sweep_targets``. Returns [] when ``reconcile.enabled`` is false.

    Never raises for Slurm, spool or store trouble: each is the ``error`` of its cluster's
    result (and recorded when the store can be written), and the next cluster is still swept.
    """
    if not config.reconcile.enabled:
        return []
    return [
        sweep(config, store, spool, backend, name, cluster, now)
        for name, cluster in sweep_targets(config)
    ]


def sweep(
    config: Config,
    store: Store,
    spool: Spool,
    backend: EndedJobs,
    name: str,
    cluster: str | None,
    now: datetime,
) -> SweepResult:
    """Sweep one cluster: spool each job run that ended in the window, should have a verdict
    and has neither a verdict nor a spool entry.

    The window is ``[since, until)`` of job end times: ``since`` is the cluster's watermark
    (``store.watermark(name)``), or ``until - reconcile.first_lookback`` before the first sweep
    (with a lookback of 0, the first sweep records an empty window: the watermark starts);
    ``until`` is ``now - settle_delay - reconcile.grace``, so the hook's own entry for a job
    that just ended wins. An entry's mtime (and header epoch) is the job's end time, which the
    worker takes as the spool time to pick the right run of a requeued job.

    Args:
        config: the worker's configuration (``reconcile``, ``settle_delay``, ``record_pass``).
        store: the verdict store: verdicts, watermarks and the record of each sweep.
        spool: the spool the hook writes to.
        backend: answers ``ended_jobs``.
        name: the name the sweep and watermark are recorded under.
        cluster: the cluster for the backend (None: the local one).
        now: the time of the sweep (UTC; a naive time is taken as UTC).

    Returns:
        The result; its ``error`` says why the sweep stopped, in which case the watermark was
        left where it was so the next sweep covers the window again. An empty window (``now``
        no later than the last sweep's, a clock that went back) is neither asked nor recorded:
        ``swept`` is False.
    """
    now = _utc(now)
    until = now - timedelta(seconds=config.settle_delay + config.reconcile.grace)
    lookback = timedelta(seconds=config.reconcile.first_lookback)
    try:
        mark = store.watermark(name)
    except StoreError as exc:
        since = until - lookback
        return SweepResult(name, since, until, error=f"cannot read the watermark: {exc}")
    # the first sweep looks ``first_lookback`` back from where every later one will stop
    since = _utc(mark) if mark is not None else until - lookback
    if since > now:
        # a watermark in the future (a sweep ran while the clock was wrong) would switch the
        # sweep off for good: start again as a first sweep would
        since = until - lookback
    # records can reach accounting late (slurmctld sends what it queued while slurmdbd was
    # away): each sweep also asks again about the ``grace`` before its window; what was found
    # before is known by its verdict or spool entry and not spooled twice
    overlap = timedelta(seconds=config.reconcile.grace) if mark is not None else timedelta(0)

    def done(result: SweepResult) -> SweepResult:
        return _record(store, now, result)

    if until <= since:
        if mark is None:  # first_lookback 0: no window yet, but the watermark starts here
            return done(SweepResult(name, since, until))
        return SweepResult(name, since, until, swept=False)

    try:
        listed = backend.ended_jobs(cluster, since - overlap, until)
    except SlurmError as exc:
        return done(SweepResult(name, since, until, error=str(exc)))
    except Exception as exc:  # a bug met on odd accounting data: this sweep's error, not the
        # worker's end (it would stop again at every start, the window never passing)
        problem = f"internal error {type(exc).__name__} reading what ended: {exc}"
        return done(SweepResult(name, since, until, error=problem))
    ended = sorted(
        (job for job in listed if since - overlap <= _utc(job.end) < until),
        key=lambda j: (_utc(j.end), j.job_id),
    )
    keyed: dict[str, EndedJob] = {}
    aliases: dict[str, list[str]] = {}
    ignored = 0
    for job in ended:
        key = _usable_key(job)
        if key is None:
            ignored += 1
        elif should_have_verdict(job, record_pass=config.record_pass):
            keyed[key] = job
            aliases[key] = [key, *other_keys(job)]
    base = SweepResult(name, since, until, ended=len(ended), ignored=ignored, seen=len(keyed))
    try:
        known = store.known_keys([k for names in aliases.values() for k in names])
    except StoreError as exc:
        return done(replace(base, error=str(exc)))
    missing = [
        (key, job)
        for key, job in keyed.items()
        if not any(k in known or spool_state(spool, k) is not None for k in aliases[key])
    ]
    enqueued: list[str] = []
    for key, job in missing:
        try:
            _enqueue(spool, key, job)
        except (SpoolError, OSError) as exc:
            # (Spool.enqueue lets an OSError through when tmp/ is not a directory)
            if isinstance(exc, OSError):
                where = exc.filename or spool.dir("new") / key
                problem = f"{where}: cannot enqueue: {exc.strerror or exc}"
            else:
                problem = str(exc)
            left = len(missing) - len(enqueued)
            why = f"{problem} ({left} of {len(missing)} missing job run(s) not spooled)"
            return done(replace(base, enqueued=tuple(enqueued), error=why))
        enqueued.append(key)
    return done(replace(base, enqueued=tuple(enqueued)))


def _enqueue(spool: Spool, key: str, job: EndedJob) -> None:
    """Spool one synthetic entry for ``job`` with its end time as mtime.

    Raises:
        SpoolError: the spool cannot take it (missing, read-only or full).
        OSError: the mtime cannot be set.
    """
    end = _utc(job.end).timestamp()
    path = spool.enqueue(key, synthetic_entry(job.env(), source=SOURCE, epoch=end))
    os.utime(path, (end, end))


def _record(store: Store, now: datetime, result: SweepResult) -> SweepResult:
    """Record ``result`` (the watermark moves to its ``until`` only without an error); a store
    that cannot be written becomes (part of) the result's error."""
    try:
        store.record_reconciliation(
            result.cluster,
            ran_at=now,
            since=result.since,
            until=result.until,
            seen=result.seen,
            enqueued=result.enqueued,
            error=result.error,
        )
    except StoreError as exc:
        prefix = "" if result.error is None else f"{result.error}; "
        return replace(result, error=f"{prefix}the sweep was not recorded: {exc}")
    return result


def _usable_key(job: EndedJob) -> str | None:
    """The spool key of a run the hook spools and the worker can use, else None: the job got
    nodes (EpilogSlurmctld runs from ``deallocate_nodes``: a job cancelled while pending never
    gets one), its state is final (a REQUEUED run stays NotReady for the worker) and it has a
    job id (one odd accounting row must not stop every later sweep)."""
    if job.nodes <= 0 or _base_state(job.state) not in FINAL_STATES:
        return None
    try:
        return spool_key(job)
    except SpoolError:
        return None


def _base_state(state: str) -> str:
    """sacct's base State word: ``CANCELLED`` for ``CANCELLED by 1001``."""
    words = state.split()
    return words[0].rstrip("+").upper() if words else ""


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


__all__ = [
    "LOCAL_CLUSTER",
    "SOURCE",
    "SPOOL_STATES",
    "EndedJobs",
    "SweepResult",
    "reconcile",
    "record_env",
    "should_have_verdict",
    "spool_key",
    "spool_state",
    "sweep",
    "sweep_targets",
    "synthetic_entry",
]
