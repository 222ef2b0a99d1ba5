"""The worker behind ``sattr worker``: spool entry -> Slurm job record -> evidence -> verdict.

For each entry in the spool, oldest first, once it is ``settle_delay`` seconds
old (node logs arrive late through syslog forwarding):

1. parse the hook's entry (``slurm.hookenv``);
2. resolve the job through the Slurm backend; a job Slurm has not finished
   recording is retried later;
3. drop COMPLETED jobs with exit code and derived exit code 0:0, or record
   them as ``pass`` when ``record_pass`` is set (without reading logs);
4. collect the evidence (``collect``), run ``analyze`` and save the verdict
   (SQLite upsert by key, so an entry processed twice still gives one row);
5. optionally write the one-line AdminComment, and record what happened;
6. move the entry to ``done/`` (or back to ``new/`` for a retry, or to
   ``failed/`` after ``retries.max_attempts``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution.analyze import AnalysisOptions, analyze, job_passed, job_window, read_window
from attribution.collect import collect, ownership_facts
from attribution.config import Config
from attribution.errors import AttributionError, Location, SpoolError, StoreError
from attribution.history import DEFAULT_DAYS, PriorGpuError, priors_from_verdict_rows
from attribution.model import JobRecord, Verdict
from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset
from attribution.scan import read_context
from attribution.slurm.admincomment import format_admin_comment, is_own_comment, plan_comment
from attribution.slurm.backend import JobRef, NotReady, SlurmBackend
from attribution.slurm.factory import make_backend
from attribution.slurm.hookenv import parse_entry
from attribution.slurm.resolve import with_allocation
from attribution.sources.readahead import read_sources
from attribution.spool import Claimed, RetryPolicy, Spool
from attribution.store import Store
from attribution.verdictjson import verdict_from_dict

log = logging.getLogger("attribution.worker")
PRUNE_EVERY = 3600.0
# AdminComment writes that failed (slurmdbd down, a timeout) are tried again, first after
# COMMENT_RETRY_FIRST seconds, then twice as long each time up to COMMENT_RETRY_MAX. The
# failed status is kept in the store, so a restarted worker picks them up again.
COMMENT_RETRY_FIRST = 30.0
COMMENT_RETRY_MAX = 1800.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one entry: ``saved``, ``dropped``, ``retry``, ``failed`` or ``stuck``
    (the spool could not record a retry: the entry stays in ``work/`` until the next start)."""

    key: str
    result: str
    detail: str = ""


def make_spool(config: Config) -> Spool:
    """The spool the configuration names, with its retry policy."""
    policy = RetryPolicy(
        max_attempts=config.retries.max_attempts,
        backoff=config.retries.backoff,
        backoff_max=config.retries.backoff_max,
    )
    return Spool(config.spool, policy=policy)


class Worker:
    """Turns spool entries into stored verdicts (see the module docstring).

    Args:
        config: the site configuration.
        store: the verdict store (opened from ``config.store`` when omitted).
        backend: the Slurm backend (``make_backend`` when omitted).
        ruleset: the rules (shipped plus ``config.rules`` when omitted).
        spool: the spool (``config.spool`` when omitted).
        clock: epoch seconds now (tests pass a fake).
    """

    def __init__(
        self,
        config: Config,
        *,
        store: Store | None = None,
        backend: SlurmBackend | None = None,
        ruleset: RuleSet | None = None,
        spool: Spool | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store or Store(config.store)
        self.backend = backend or make_backend(config.slurm, timezone=config.timezone)
        self.ruleset = ruleset or load_ruleset(list(config.rules))
        self.spool = spool or make_spool(config)
        self.clock = clock
        self.options = AnalysisOptions(
            margin_before=config.window.before,
            margin_after=config.window.after,
            per_rule_ranks=config.reading.max_ranks,
            max_events=config.reading.max_events,
        )
        self._stop = threading.Event()
        # key -> (when the next AdminComment write may be tried, the wait that led to it)
        self._comment_backoff: dict[str, tuple[float, float]] = {}

    # ------------------------------------------------------------------ one job

    def diagnose(self, job: JobRecord) -> Verdict:
        """Collect the job's evidence and run ``analyze`` (never raises for bad evidence)."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        if job_passed(job):
            return analyze(job, (), self.ruleset, options=self.options, diagnosed_at=now)
        with collect(job, self.config) as col:
            reading = self.config.reading
            ctx = read_context(
                job,
                self.ruleset,
                window=read_window(job, self.options),
                engine=None if reading.engine == "auto" else reading.engine,
            )
            ctx.seek_threshold = int(reading.seek_threshold)
            ctx.max_line = int(reading.max_line)
            readers, lines = read_sources(col.specs, ctx, workers=reading.workers)
            return analyze(
                job,
                lines,
                self.ruleset,
                coverage=lambda: [col.adjust(c) for r in readers for c in r.coverages()],
                options=self.options,
                diagnosed_at=now,
                history=self._history(job),
                silences=lambda: [x for r in readers for x in r.silences],
            )

    def ownership_facts(self, job: JobRecord) -> JobRecord:
        """``collect.ownership_facts`` with this worker's Slurm backend and window."""
        return ownership_facts(job, self.config, self.backend, job_window(job, self.options))

    def _history(self, job: JobRecord) -> list[PriorGpuError]:
        """Earlier jobs' GPU errors on this job's nodes (and its user's), for the XID 13/31
        repeat logic; an unreadable store only loses the history, never the verdict."""
        since = job.start - timedelta(days=DEFAULT_DAYS) if job.start else None
        try:
            rows = self.store.gpu_history(job.nodes, job.user, since)
        except StoreError as exc:
            log.warning("%s", exc)
            return []
        return priors_from_verdict_rows(rows)

    def write_comment(self, verdict: Verdict) -> tuple[str, str | None]:
        """Write the AdminComment line if configured; returns ``(status, line)``.

        Never raises: a Slurm error becomes an ``error: ...`` status.
        """
        settings = self.config.admin_comment
        if not settings.enabled:
            return "disabled", None
        job = verdict.job
        line = format_admin_comment(verdict, settings.max_length)
        try:
            admin = self.backend.get_comment(job, "AdminComment")
            system = None
            if settings.foreign == "system_comment" and not is_own_comment(admin):
                system = self.backend.get_comment(job, "SystemComment")
            plan = plan_comment(line, admin, system, settings.foreign)
            if plan.field is not None:
                self.backend.set_comment(job, plan.field, line)
        except AttributionError as exc:
            return f"error: {exc}", line
        return plan.status, line

    def retry_comments(self) -> int:
        """Write again the AdminComments whose write failed, when their backoff has passed;
        returns how many were written now. Never raises: a store or Slurm error waits for the
        next round."""
        if not self.config.admin_comment.enabled:
            return 0
        now = self.clock()
        try:
            pending = self.store.failed_comments()
        except StoreError as exc:
            log.warning("cannot read failed AdminComment writes: %s", exc)
            return 0
        written = 0
        for data in pending:
            verdict = verdict_from_dict(data)
            key = verdict.job.key
            due, wait = self._comment_backoff.get(key, (0.0, COMMENT_RETRY_FIRST / 2))
            if now < due:
                continue
            status, line = self.write_comment(verdict)
            try:
                self.store.set_admin_comment(key, status, line)
            except StoreError as exc:
                log.warning("cannot record the AdminComment of %s: %s", key, exc)
                continue
            if status.startswith("error:"):
                wait = min(wait * 2, COMMENT_RETRY_MAX)
                self._comment_backoff[key] = (now + wait, wait)
                log.info(
                    "AdminComment of %s still not written (%s); next try in %.0f s",
                    key,
                    status,
                    wait,
                )
            else:
                self._comment_backoff.pop(key, None)
                written += 1
                log.info("AdminComment of %s written on a later try: %s", key, status)
        return written

    def process(self, claimed: Claimed) -> Outcome:
        """Process one claimed entry and move it on; returns what happened."""
        key = claimed.key
        try:
            entry = parse_entry(claimed.text, source=str(claimed.path), mtime=claimed.spooled_at)
            ref = JobRef.from_env(entry.env)
        except Exception as exc:  # SpoolError, or anything odd in a hand-made entry
            return self._retry(claimed, f"malformed entry: {exc}", permanent=True)
        try:
            job = self.backend.get_job(ref, entry.env, spooled_at=claimed.spooled_at)
            if job.key != key:
                log.debug("entry %s resolves to key %s", key, job.key)
            if job_passed(job) and not self.config.record_pass:
                self.spool.ack(claimed)
                return Outcome(key, "dropped", f"job {job.display_id} completed 0:0")
            if not job_passed(job):
                alloc = self.spool.read_alloc(key)
                if alloc is not None:
                    job = with_allocation(job, alloc)
                job = self.ownership_facts(job)
            verdict = self.diagnose(job)
            spooled = datetime.fromtimestamp(claimed.spooled_at, UTC)
            self.store.save(verdict, admin_comment_status="pending", spooled_at=spooled)
            if verdict.terminal_state.value == "pass":
                status, line = "not-written-pass", None
            else:
                status, line = self.write_comment(verdict)
            self.store.set_admin_comment(verdict.job.key, status, line)
        except (NotReady, AttributionError) as exc:
            return self._retry(claimed, str(exc))
        except Exception as exc:  # a bug: keep the entry, say where
            where = traceback.extract_tb(exc.__traceback__)[-1]
            return self._retry(
                claimed,
                f"internal error {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})",
            )
        self.spool.ack(claimed)
        cause = verdict.cause.id if verdict.cause else "-"
        return Outcome(
            key,
            "saved",
            f"job {job.display_id}: {verdict.terminal_state.value} {verdict.sub_domain.value} "
            f"{cause}; admin comment {status}",
        )

    def _retry(self, claimed: Claimed, error: str, *, permanent: bool = False) -> Outcome:
        try:
            if self.spool.retry(claimed, error, permanent=permanent):
                return Outcome(claimed.key, "retry", error)
        except OSError as exc:  # a full or read-only spool: the entry stays in work/ for now
            return Outcome(
                claimed.key, "stuck", f"{error}; and the spool cannot record it: {exc.strerror}"
            )
        return Outcome(claimed.key, "failed", error)

    # ------------------------------------------------------------------ the loop

    def run_ready(self) -> tuple[list[Outcome], float | None]:
        """Process every entry that is ready now, oldest first.

        Returns the outcomes and the epoch time the next waiting entry becomes
        ready (``None`` when nothing waits).
        """
        outcomes: list[Outcome] = []
        next_ready: float | None = None
        for item in self.spool.pending(settle=self.config.settle_delay):
            if self._stop.is_set():
                break
            if item.ready_at > self.clock():
                next_ready = item.ready_at if next_ready is None else min(next_ready, item.ready_at)
                continue
            try:
                claimed = self.spool.claim(item.key)
                if claimed is None:
                    continue
                outcome = self.process(claimed)
            except (OSError, SpoolError) as exc:  # one entry must never stop the worker
                outcome = Outcome(item.key, "stuck", f"spool: {exc}")
            level = (
                logging.WARNING if outcome.result in ("retry", "failed", "stuck") else logging.INFO
            )
            log.log(level, "%s %s: %s", outcome.result, outcome.key, outcome.detail)
            outcomes.append(outcome)
        return outcomes, next_ready

    def stop(self, *_: Any) -> None:
        """Ask ``run`` to return after the entry it is working on."""
        self._stop.set()

    def run(self, *, once: bool = False) -> list[Outcome]:
        """Hold the spool lock, recover ``work/``, then process entries.

        With ``once``, process what is ready and return; otherwise loop until
        ``stop`` (SIGTERM/SIGINT in ``sattr worker``), sleeping up to
        ``poll_interval`` seconds while idle.

        Raises:
            SpoolError: when the spool is unusable or another worker holds it.
        """
        self.spool.check()
        done: list[Outcome] = []
        with self.spool.locked():
            recovered = self.spool.recover()
            if recovered:
                log.warning("recovered %d entr(ies) left in work/", len(recovered))
            last_prune = 0.0
            last_comments = float("-inf")  # at start: writes a previous run left failed
            while not self._stop.is_set():
                if self.clock() - last_prune >= PRUNE_EVERY:
                    try:
                        removed = self.spool.prune(self.config.retention)
                    except OSError as exc:
                        log.warning("cannot prune the spool: %s", exc)
                        removed = 0
                    if removed:
                        log.info("pruned %d old spool file(s)", removed)
                    last_prune = self.clock()
                if self.clock() - last_comments >= COMMENT_RETRY_FIRST:  # a cheap query, rarely
                    self.retry_comments()
                    last_comments = self.clock()
                try:
                    outcomes, next_ready = self.run_ready()
                except OSError as exc:
                    # the spool went away or became unusable under the worker: say what is
                    # missing in one line (SpoolError) instead of a traceback
                    self.spool.check()
                    raise SpoolError(
                        f"cannot read the spool: {exc.strerror or exc}",
                        Location(str(self.spool.root)),
                    ) from None
                done.extend(outcomes)
                if once:
                    break
                if outcomes:
                    continue
                wait = self.config.poll_interval
                if next_ready is not None:
                    wait = max(0.05, min(wait, next_ready - self.clock()))
                self._stop.wait(wait)
        return done

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop after the current entry."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # ------------------------------------------------------------------ re-runs

    def rediagnose(
        self,
        job: JobRecord,
        *,
        write_comment: bool = False,
        old: Verdict | None = None,
        force: bool = False,
    ) -> tuple[Verdict, str | None]:
        """Diagnose a stored job again with the current rules and save the new verdict.

        The AdminComment is rewritten only with ``write_comment``; otherwise
        the earlier write-back status is kept. When ``old`` (the stored verdict)
        read a source that can no longer be read (logs rotated away or deleted),
        the old verdict is kept unless ``force``.

        Returns:
            ``(verdict, kept)``: the verdict now stored, and why the old one was
            kept (``None`` when the new one was saved).
        """
        previous = self.store.row(job.key) or {}
        verdict = self.diagnose(job)
        lost = _lost_sources(old, verdict) if old is not None and not force else []
        if lost:
            shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
            assert old is not None
            return old, f"kept: evidence read before is gone now ({shown}); --force replaces it"
        status = previous.get("admin_comment_status")
        line = previous.get("admin_comment")
        self.store.save(verdict, admin_comment_status=status, admin_comment=line)
        if write_comment and verdict.terminal_state.value != "pass":
            status, line = self.write_comment(verdict)
            self.store.set_admin_comment(job.key, status, line)
        return verdict, None


def _lost_sources(old: Verdict, new: Verdict) -> list[str]:
    """Sources (``stream@node``) the old verdict read lines from that the new one could not."""

    def read(v: Verdict) -> set[tuple[str, str | None]]:
        return {(c.stream.value, c.node) for c in v.coverage if c.lines > 0}

    gone = read(old) - read(new)
    return sorted(f"{stream}@{node}" if node else stream for stream, node in gone)


__all__ = ["Outcome", "Worker", "make_spool"]
