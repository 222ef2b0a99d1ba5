"""The worker behind ``sattr worker``: spool entry -> Slurm job record -> evidence -> verdict.

Entries become ready ``settle_delay`` seconds after the hook spooled them (node logs arrive
late through syslog forwarding). The worker process (the parent) owns the spool and the
store; diagnoses run in a pool of ``pool.processes`` child processes:

1. the parent lists the ready entries in fair order (``fair_order``: round robin across
   array jobs and users, oldest first), claims a batch of up to ``pool.batch`` and parses
   them (``slurm.hookenv``);
2. it resolves the whole batch with one batched Slurm query (``backend.get_jobs``); a job
   Slurm has not finished recording is retried later;
3. it drops COMPLETED jobs with exit code and derived exit code 0:0, keeping only a ``runs``
   row for the fleet view's exposure (or records them as ``pass`` verdicts when
   ``record_pass`` is set, without reading logs);
4. each remaining job goes to a child: the small-jobs lane first; jobs on more than
   ``pool.large_nodes`` nodes never take every process. The child checks which other jobs
   shared the nodes, collects the evidence, runs ``analyze`` and writes the AdminComment;
5. the parent saves the verdict (SQLite upsert by key, so an entry processed twice still
   gives one row) and moves the entry to ``done/`` (or back to ``new/`` for a retry, or to
   ``failed/`` after ``retries.max_attempts``).

Between rounds it writes failed AdminComments again with backoff, runs the reconciliation
sweep (``attribution.reconcile``) and records a heartbeat for ``sattr status``. A worker
built with a backend, store or rule set passed in (tests, tools) diagnoses in its own
process: a child could not share those objects.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution.analyze import AnalysisOptions, analyze, job_passed, job_window, read_window
from attribution.collect import collect, ownership_facts
from attribution.config import Config
from attribution.errors import AttributionError, Location, SpoolError, StoreError
from attribution.fleetfile import load_topology
from attribution.history import DEFAULT_DAYS, PriorGpuError, priors_from_verdict_rows
from attribution.model import JobRecord, Verdict
from attribution.reconcile import SweepResult, reconcile
from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset
from attribution.scan import read_context
from attribution.slurm.admincomment import format_admin_comment, is_own_comment, plan_comment
from attribution.slurm.backend import JobRef, NotReady, SlurmBackend
from attribution.slurm.factory import make_backend
from attribution.slurm.hookenv import parse_entry
from attribution.slurm.resolve import with_allocation
from attribution.sources.readahead import read_sources
from attribution.spool import Claimed, Pending, RetryPolicy, Spool, read_spool_file
from attribution.store import Store
from attribution.topology import Topology
from attribution.verdictjson import verdict_from_dict

log = logging.getLogger("attribution.worker")
PRUNE_EVERY = 3600.0
# AdminComment writes that failed (slurmdbd down, a timeout) are tried again, first after
# COMMENT_RETRY_FIRST seconds, then twice as long each time up to COMMENT_RETRY_MAX. The
# failed status is kept in the store, so a restarted worker picks them up again.
COMMENT_RETRY_FIRST = 30.0
COMMENT_RETRY_MAX = 1800.0
HEARTBEAT_EVERY = 10.0
STOP_POLL = 0.2  # how soon a SIGTERM is noticed while idle
# a job Slurm has no record of yet (slurmctld down with its records queued, accounting
# behind) is tried again for this long before its tries start to count towards failed/
NOT_READY_PATIENCE = 86400.0
DEFAULT_MAX_PROCESSES = 8  # pool.processes 0: one per core, at most this many
# a child process is replaced after this many diagnoses (memory stays bounded per process)
TASKS_PER_CHILD = 500
# how far ahead of the batch the parent reads entries to order them fairly
LOOKAHEAD_BATCHES = 20


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one entry: ``saved``, ``dropped``, ``retry``, ``failed`` or ``stuck``
    (the spool could not record a retry: the entry stays in ``work/`` until the next start)."""

    key: str
    result: str
    detail: str = ""


class _Ask:
    """``write_comment``'s default: read the AdminComment from Slurm first."""


_ASK = _Ask()


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a child sends back for one job: the verdict and the AdminComment outcome, or
    ``error`` (the entry is retried)."""

    verdict: Verdict | None
    comment_status: str = "disabled"
    comment_line: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass(slots=True)
class _Task:
    """A claimed entry resolved to its job, waiting for (or in) a child process."""

    claimed: Claimed
    job: JobRecord
    large: bool
    pool: ProcessPoolExecutor | None = None  # the pool it was given to


@dataclass(slots=True)
class Counters:
    """What the worker did since it started (shown by ``sattr status``)."""

    started_at: float
    results: dict[str, int] = field(default_factory=dict)
    reconciled: int = 0
    comments_rewritten: int = 0
    children_lost: int = 0

    def count(self, result: str, n: int = 1) -> None:
        self.results[result] = self.results.get(result, 0) + n


def pool_size(config: Config) -> int:
    """Diagnoses at once: ``pool.processes``, or one per CPU core this process may use, at
    most ``DEFAULT_MAX_PROCESSES`` (the worker often shares its host with slurmctld and
    slurmdbd, and the unit's ``MemoryMax`` is sized for that many)."""
    if config.pool.processes:
        return config.pool.processes
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, DEFAULT_MAX_PROCESSES))


def entry_group(text: str | None, key: str) -> str:
    """The fairness group of a spool entry: its array job, else its user, else itself (read
    with the entry parser, so a job name with a newline cannot forge a variable)."""
    try:
        env = parse_entry(text or "", source=key).env
    except Exception:  # a malformed entry is found out properly when claimed
        return "key:" + key
    for var, kind in (("SLURM_ARRAY_JOB_ID", "array"), ("SLURM_JOB_USER", "user")):
        value = env.get(var)
        if value and len(value) <= 64:
            return f"{kind}:{value}"
    return "key:" + key


def fair_order(items: Sequence[Pending], group: Callable[[Pending], str]) -> list[Pending]:
    """``items`` (oldest first) taken round robin across their groups, the group with the
    oldest entry first: a 1,000-task array or one user's thousand jobs get one turn per
    round, like every other job."""
    queues: dict[str, deque[Pending]] = {}
    for item in items:
        queues.setdefault(group(item), deque()).append(item)
    out: list[Pending] = []
    active = list(queues.values())
    while active:
        nxt = []
        for q in active:
            out.append(q.popleft())
            if q:
                nxt.append(q)
        active = nxt
    return out


# -------------------------------------------------------------- child processes

_CHILD: Worker | None = None


def _child_init(config: Config) -> None:
    """Runs once in each child: its own Slurm backend, store connection and rules."""
    global _CHILD
    # the parent decides when to stop: it finishes the jobs in hand, then ends the pool
    # (systemd's KillMode=mixed sends SIGTERM to it alone; a Ctrl-C reaches the whole group)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _CHILD = Worker(config, processes=1)


def _child_task(job: JobRecord) -> TaskResult:
    assert _CHILD is not None, "child not initialised"
    return _CHILD.complete(job)


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
        processes: diagnoses at once (default ``pool_size(config)``; 1 when a backend,
            store or rule set is passed in).
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
        processes: int | None = None,
    ) -> None:
        self.config = config
        injected = store is not None or backend is not None or ruleset is not None
        self.processes = processes or (1 if injected else pool_size(config))
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
            topology=_site_topology(config),
        )
        self._stop = threading.Event()
        self._signalled = False
        # key -> (when the next AdminComment write may be tried, the wait that led to it)
        self._comment_backoff: dict[str, tuple[float, float]] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._groups: dict[tuple[str, float], str] = {}
        self.counters = Counters(started_at=clock())
        self._last_beat = float("-inf")
        self._last_reconcile = float("-inf")

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

    def write_comment(
        self, verdict: Verdict, *, current: str | _Ask | None = _ASK
    ) -> tuple[str, str | None]:
        """Write the AdminComment line if configured; returns ``(status, line)``.

        ``current``: the job's AdminComment as Slurm gave it when the job was resolved (after
        ``settle_delay``, when other tools' epilogs have written theirs); asked again when
        not given.

        Never raises: a Slurm error becomes an ``error: ...`` status.
        """
        settings = self.config.admin_comment
        if not settings.enabled:
            return "disabled", None
        job = verdict.job
        line = format_admin_comment(verdict, settings.max_length)
        try:
            admin = (
                self.backend.get_comment(job, "AdminComment")
                if isinstance(current, _Ask)
                else current
            )
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
                # Slurm is still not taking them: the rest wait for the next round, so a
                # hanging slurmdbd cannot hold the worker's loop for one timeout per job
                break
            else:
                self._comment_backoff.pop(key, None)
                written += 1
                log.info("AdminComment of %s written on a later try: %s", key, status)
        return written

    def process(self, claimed: Claimed) -> Outcome:
        """Process one claimed entry in this process and move it on; returns what happened."""
        outcomes, tasks = self.prepare([claimed])
        for task in tasks:
            outcomes.append(self.finish(task, self.complete(task.job)))
        return outcomes[0]

    def prepare(self, batch: Sequence[Claimed]) -> tuple[list[Outcome], list[_Task]]:
        """Parse a batch of claimed entries and resolve their jobs with one batched Slurm
        query. Entries that are done already (malformed, not ready, passed) are moved on
        here and returned as outcomes; the rest come back as tasks for ``complete``."""
        outcomes: list[Outcome] = []
        parsed: list[tuple[Claimed, dict[str, str]]] = []
        refs: list[tuple[JobRef, dict[str, str], float]] = []
        for claimed in batch:
            try:
                entry = parse_entry(
                    claimed.text, source=str(claimed.path), mtime=claimed.spooled_at
                )
                ref = JobRef.from_env(entry.env)
            except Exception as exc:  # SpoolError, or anything odd in a hand-made entry
                outcomes.append(self._retry(claimed, f"malformed entry: {exc}", permanent=True))
                continue
            parsed.append((claimed, dict(entry.env)))
            refs.append((ref, dict(entry.env), claimed.spooled_at))
        try:
            answers: Sequence[JobRecord | Exception] = self.backend.get_jobs(refs)
        except Exception as exc:  # a backend must not raise here; never lose the batch
            answers = [exc] * len(refs)
        tasks: list[_Task] = []
        for (claimed, _env), answer in zip(parsed, answers, strict=True):
            if isinstance(answer, NotReady):  # no record yet: Slurm down or records late
                outcomes.append(self._retry(claimed, str(answer), patience=NOT_READY_PATIENCE))
                continue
            if isinstance(answer, AttributionError):
                outcomes.append(self._retry(claimed, str(answer)))
                continue
            if isinstance(answer, BaseException):
                outcomes.append(self._retry(claimed, _internal(answer)))
                continue
            job = answer
            if job.key != claimed.key:
                log.debug("entry %s resolves to key %s", claimed.key, job.key)
            try:
                if job_passed(job) and not self.config.record_pass:
                    self.store.save_run(job)  # the fleet view's exposure
                    self.spool.ack(claimed)
                    outcomes.append(
                        Outcome(claimed.key, "dropped", f"job {job.display_id} completed 0:0")
                    )
                    continue
                if not job_passed(job):
                    alloc = self.spool.read_alloc(claimed.key)
                    if alloc is not None:
                        job = with_allocation(job, alloc)
            except Exception as exc:
                outcomes.append(self._retry(claimed, _internal(exc)))
                continue
            large = len(job.nodes) > self.config.pool.large_nodes
            tasks.append(_Task(claimed, job, large))
        self._share_other_jobs(tasks)
        return outcomes, tasks

    def _share_other_jobs(self, tasks: Sequence[_Task]) -> None:
        """Which other jobs shared each task's nodes, for the whole batch with one sacct per
        cluster (a child asks for a job on its own only when this could not be had)."""
        asked: list[tuple[_Task, datetime, datetime]] = []
        for task in tasks:
            start, end = job_window(task.job, self.options)
            if task.job.other_jobs is None and start is not None and end is not None:
                asked.append((task, start, end))
        if len(asked) < 2:
            return
        try:
            found = self.backend.other_jobs_many([(t.job, s, e) for t, s, e in asked])
        except Exception as exc:  # never lose the batch: each child asks on its own
            log.warning("other jobs on the batch's nodes unknown: %s", exc)
            return
        for (task, _, _), others in zip(asked, found, strict=True):
            if isinstance(others, dict):
                task.job = replace(task.job, other_jobs=others)

    def complete(self, job: JobRecord) -> TaskResult:
        """A job's verdict and its AdminComment write (in a child process, or here): which
        other jobs shared its nodes, its evidence, ``analyze``. Never raises."""
        began = time.monotonic()
        try:
            if not job_passed(job):
                job = self.ownership_facts(job)
            verdict = self.diagnose(job)
            if verdict.terminal_state.value == "pass":
                status, line = "not-written-pass", None
            else:
                # the AdminComment sacct gave when the job was resolved, moments ago; asked
                # again when a free text of the job could have spilled into it
                status, line = self.write_comment(verdict, current=_known_comment(job))
        except (NotReady, AttributionError) as exc:
            return TaskResult(None, error=str(exc), seconds=time.monotonic() - began)
        except Exception as exc:  # a bug: keep the entry, say where
            return TaskResult(None, error=_internal(exc), seconds=time.monotonic() - began)
        return TaskResult(verdict, status, line, seconds=time.monotonic() - began)

    def finish(self, task: _Task, result: TaskResult) -> Outcome:
        """Save what a child found and move the entry on (in the parent)."""
        claimed = task.claimed
        if result.verdict is None:
            return self._retry(claimed, result.error or "no verdict")
        verdict = result.verdict
        try:
            spooled = datetime.fromtimestamp(claimed.spooled_at, UTC)
            self.store.save(
                verdict,
                admin_comment_status=result.comment_status,
                admin_comment=result.comment_line,
                spooled_at=spooled,
            )
            self.spool.ack(claimed)
        except AttributionError as exc:
            return self._retry(claimed, str(exc))
        except OSError as exc:
            return self._retry(claimed, f"spool: {exc.strerror or exc}")
        cause = verdict.cause.id if verdict.cause else "-"
        return Outcome(
            claimed.key,
            "saved",
            f"job {verdict.job.display_id}: {verdict.terminal_state.value} "
            f"{verdict.sub_domain.value} {cause}; admin comment {result.comment_status} "
            f"({result.seconds:.2f}s)",
        )

    def _retry(
        self, claimed: Claimed, error: str, *, permanent: bool = False, patience: float = 0.0
    ) -> Outcome:
        try:
            if self.spool.retry(claimed, error, permanent=permanent, patience=patience):
                return Outcome(claimed.key, "retry", error)
        except OSError as exc:  # a full or read-only spool: the entry stays in work/ for now
            return Outcome(
                claimed.key, "stuck", f"{error}; and the spool cannot record it: {exc.strerror}"
            )
        return Outcome(claimed.key, "failed", error)

    # ------------------------------------------------------------------ the loop

    def run_ready(self) -> tuple[list[Outcome], float | None]:
        """Process every entry that is ready, in fair order, ``processes`` at a time.

        Batches are claimed and resolved as the lanes run short, so entries spooled
        meanwhile join in their fair place. Returns the outcomes and the epoch time the
        next waiting entry becomes ready (``None`` when nothing waits).
        """
        outcomes: list[Outcome] = []
        slots = self.processes
        max_large = max(1, slots - 1)  # with 2+ processes one always serves small jobs
        small: deque[_Task] = deque()
        large: deque[_Task] = deque()
        inflight: dict[Future[TaskResult], _Task] = {}
        next_ready: float | None = None
        listed_empty = False
        tried: set[str] = set()  # each entry once a pass: a retry that is ready at once waits
        try:
            while True:
                stopping = self._stopping()
                if not stopping and not listed_empty and len(small) + len(large) < slots:
                    batch, next_ready, stuck = self._claim_batch(tried)
                    tried.update(c.key for c in batch)
                    self._note(stuck, outcomes)
                    if batch:
                        done, tasks = self.prepare(batch)
                        self._note(done, outcomes)
                        for task in tasks:
                            (large if task.large else small).append(task)
                    else:
                        listed_empty = True
                running_large = sum(1 for t in inflight.values() if t.large)
                while not self._stopping() and len(inflight) < slots:
                    if small:
                        task = small.popleft()
                    elif large and running_large < max_large:
                        task = large.popleft()
                        running_large += 1
                    else:
                        break
                    inflight[self._submit(task)] = task
                if not inflight:
                    if stopping or (listed_empty and not small and not large):
                        break
                    continue
                finished, _ = wait(inflight, timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    task = inflight.pop(fut)
                    self._note([self.finish(task, self._result(fut, task))], outcomes)
                self.beat()
        finally:
            # stopped (or an error): what was claimed but never started goes back, unharmed
            for task in (*small, *large):
                try:
                    self.spool.unclaim(task.claimed)
                except OSError as exc:
                    log.warning("cannot give %s back to new/: %s", task.claimed.key, exc)
        return outcomes, next_ready

    def _claim_batch(
        self, tried: set[str] | frozenset[str] = frozenset()
    ) -> tuple[list[Claimed], float | None, list[Outcome]]:
        """Claim up to ``pool.batch`` ready entries in fair order, none of ``tried`` (already
        taken this pass); also the time the next waiting entry becomes ready and the entries
        that could not be claimed."""
        now = self.clock()
        items = self.spool.pending(settle=self.config.settle_delay)
        ready = [i for i in items if i.ready_at <= now and i.key not in tried]
        next_ready = min((i.ready_at for i in items if i.ready_at > now), default=None)
        live = {(i.key, i.spooled_at) for i in ready}
        self._groups = {k: v for k, v in self._groups.items() if k in live}
        batch: list[Claimed] = []
        stuck: list[Outcome] = []
        for item in fair_order(ready, self._group_of):
            if len(batch) >= self.config.pool.batch or self._stopping():
                break
            try:
                claimed = self.spool.claim(item.key)
            except (OSError, SpoolError) as exc:  # one entry must never stop the worker
                stuck.append(Outcome(item.key, "stuck", f"spool: {exc}"))
                continue
            if claimed is not None:
                batch.append(claimed)
        return batch, next_ready, stuck

    def _group_of(self, item: Pending) -> str:
        """The fairness group of a ready entry (read once per entry and cached)."""
        cache_key = (item.key, item.spooled_at)
        group = self._groups.get(cache_key)
        if group is None:
            text = read_spool_file(self.spool.dir("new") / item.key, limit=64 * 1024)
            group = self._groups[cache_key] = entry_group(text, item.key)
        return group

    def _submit(self, task: _Task, *, _retried: bool = False) -> Future[TaskResult]:
        """Start a task in a child process (or run it here with one process)."""
        if self.processes <= 1:
            fut: Future[TaskResult] = Future()
            fut.set_result(self.complete(task.job))
            return fut
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            # children start from a clean server process: no spool lock, store connection
            # or threads of the parent are inherited
            ctx.set_forkserver_preload(["attribution.worker"])
            self._pool = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=ctx,
                initializer=_child_init,
                initargs=(self.config,),
                max_tasks_per_child=TASKS_PER_CHILD,
            )
        task.pool = self._pool
        try:
            return self._pool.submit(_child_task, task.job)
        except BrokenProcessPool:  # a child (or the fork server) died since the last look
            self.counters.children_lost += 1
            self.close_pool(wait=False)
            if not _retried:
                return self._submit(task, _retried=True)
            failed: Future[TaskResult] = Future()
            failed.set_result(TaskResult(None, error="no diagnosing process could be started"))
            return failed

    def _result(self, fut: Future[TaskResult], task: _Task) -> TaskResult:
        try:
            return fut.result()
        except BrokenProcessPool:
            # a child was killed (OOM killer, a signal) or crashed: every task its pool held
            # is retried; the pool is replaced (once, however many of its tasks report it)
            if task.pool is not None and task.pool is self._pool:
                self.counters.children_lost += 1
                self.close_pool(wait=False)
            return TaskResult(None, error="the diagnosing process died (killed or crashed)")
        except Exception as exc:  # a result that could not be sent back
            return TaskResult(None, error=_internal(exc))

    def close_pool(self, *, wait: bool = True) -> None:
        """Stop the child processes (after their current job when ``wait``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None

    def _note(self, outcomes: Iterable[Outcome], into: list[Outcome]) -> None:
        for outcome in outcomes:
            level = (
                logging.WARNING if outcome.result in ("retry", "failed", "stuck") else logging.INFO
            )
            log.log(level, "%s %s: %s", outcome.result, outcome.key, outcome.detail)
            self.counters.count(outcome.result)
            into.append(outcome)

    def _slurm_about(self) -> dict[str, Any] | None:
        """The backend's ``about()`` (None for a backend without one, or when it fails)."""
        about = getattr(self.backend, "about", None)
        if about is None:
            return None
        try:
            info = about()
        except Exception:  # reporting must never stop the worker
            return None
        return info if isinstance(info, dict) else None

    def _log_slurm(self) -> None:
        """Log which Slurm this is, and warn when CI does not test that version."""
        info = self._slurm_about()
        if info is None:
            return
        version = info.get("version")
        keys = "SLUID" if info.get("sluid_keys") else "<cluster>_<job>_<restart>"
        log.info(
            "Slurm %s (%s backend), runs keyed by %s",
            version or "of unknown version",
            info.get("backend"),
            keys,
        )
        if not version:
            log.warning(
                "cannot tell the Slurm version ('sacct --version' failed: is slurm.bin_dir"
                " right?); runs are keyed as before 25.11"
            )
        elif not info.get("tested"):
            log.warning(
                "Slurm %s is not a version attribution is tested on (22.05, 24.11, 26.05):"
                " trying it; sacct fields it lacks are named here (docs/compatibility.md)",
                version,
            )

    def beat(self, *, force: bool = False) -> None:
        """Record the heartbeat ``sattr status`` reads, at most every ``HEARTBEAT_EVERY``
        seconds. Never raises: a store error only loses the beat."""
        now = self.clock()
        if not force and now - self._last_beat < HEARTBEAT_EVERY:
            return
        self._last_beat = now
        c = self.counters
        info = {
            "processes": self.processes,
            "results": dict(c.results),
            "reconciled": c.reconciled,
            "comments_rewritten": c.comments_rewritten,
            "children_lost": c.children_lost,
        }
        slurm = self._slurm_about()
        if slurm is not None:
            info["slurm"] = slurm
        try:
            self.store.beat(
                str(self.spool.root),
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=datetime.fromtimestamp(c.started_at, UTC),
                info=info,
            )
        except StoreError as exc:
            log.warning("%s", exc)

    def stop(self, *_: Any) -> None:
        """Ask ``run`` to return after the jobs in hand (from any thread)."""
        self._stop.set()

    def _on_signal(self, *_: Any) -> None:
        # only a plain flag: a second signal arriving while Event.set() holds its lock would
        # deadlock the handler (the loop polls the flag at least every STOP_POLL seconds)
        self._signalled = True

    def _stopping(self) -> bool:
        return self._signalled or self._stop.is_set()

    def run(self, *, once: bool = False) -> list[Outcome]:
        """Hold the spool lock, recover ``work/``, then process entries.

        With ``once``, process what is ready and return; otherwise loop until
        ``stop`` (SIGTERM/SIGINT in ``sattr worker``), sleeping up to
        ``poll_interval`` seconds while idle.

        Raises:
            SpoolError: when the spool is unusable or another worker holds it.
        """
        created = self.spool.repair()
        if created:
            log.warning("recreated spool director(ies) %s", ", ".join(created))
        self.spool.check()
        done: list[Outcome] = []
        with self.spool.locked():
            log.info(
                "worker %d started: spool %s, store %s, %d diagnosing process(es), "
                "reconciliation %s",
                os.getpid(),
                self.spool.root,
                self.config.store,
                self.processes,
                f"every {self.config.reconcile.interval:g} s"
                if self.config.reconcile.enabled
                else "off",
            )
            self._log_slurm()
            recovered = self.spool.recover()
            if recovered:
                log.warning("recovered %d entr(ies) left in work/", len(recovered))
            last_prune = 0.0
            last_comments = float("-inf")  # at start: writes a previous run left failed
            try:
                while not self._stopping():
                    # every round: a subdirectory replaced by a link ends the worker here,
                    # before it moves or deletes anything through it
                    self.spool.check(writable=False)
                    if self.clock() - last_prune >= PRUNE_EVERY:
                        try:
                            removed = self.spool.prune(self.config.retention)
                        except OSError as exc:
                            log.warning("cannot prune the spool: %s", exc)
                            removed = 0
                        if removed:
                            log.info("pruned %d old spool file(s)", removed)
                        last_prune = self.clock()
                    if self.clock() - last_comments >= COMMENT_RETRY_FIRST:  # cheap, rarely
                        self.counters.comments_rewritten += self.retry_comments()
                        last_comments = self.clock()
                    self.reconcile_due()
                    self.beat()
                    try:
                        outcomes, next_ready = self.run_ready()
                    except OSError as exc:
                        outcomes, next_ready = self._spool_trouble(exc), None
                    done.extend(outcomes)
                    if once:
                        break
                    if any(o.result != "stuck" for o in outcomes):
                        continue  # (entries stuck on a spool that refuses writes: wait)
                    wait = self.config.poll_interval
                    if next_ready is not None:
                        wait = max(0.05, min(wait, next_ready - self.clock()))
                    until = time.monotonic() + wait
                    while not self._stopping() and (left := until - time.monotonic()) > 0:
                        self._stop.wait(min(left, STOP_POLL))
            finally:
                self.beat(force=True)
                self.close_pool()
                results = ", ".join(f"{n} {k}" for k, n in sorted(self.counters.results.items()))
                log.info("worker %d stopped (%s)", os.getpid(), results or "nothing done")
        return done

    def _spool_trouble(self, exc: OSError) -> list[Outcome]:
        """The spool changed under the worker: subdirectories deleted are recreated and the
        loop goes on; a spool that is gone or unusable ends the worker with one line.

        Raises:
            SpoolError: when the spool cannot be used any more.
        """
        created = self.spool.repair()
        if created:
            log.warning("recreated spool director(ies) %s", ", ".join(created))
            return []
        self.spool.check()
        raise SpoolError(
            f"cannot read the spool: {exc.strerror or exc}", Location(str(self.spool.root))
        ) from None

    def reconcile_due(self) -> list[SweepResult]:
        """Run the reconciliation sweep (``attribution.reconcile``) when ``reconcile.interval``
        has passed since the last one; its results. Never raises: trouble is in the result
        and the store's record of the sweep."""
        settings = self.config.reconcile
        now = self.clock()
        if not settings.enabled or now - self._last_reconcile < settings.interval:
            return []
        self._last_reconcile = now
        results = reconcile(
            self.config, self.store, self.spool, self.backend, datetime.fromtimestamp(now, UTC)
        )
        for result in results:
            if result.error or result.enqueued:  # a missed job is worth a warning
                log.warning("%s", result.summary())
            else:
                log.debug("%s", result.summary())
            self.counters.reconciled += len(result.enqueued)
        return results

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop after the current entry."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

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


def _site_topology(config: Config) -> Topology | None:
    """The site's failure domains (``fleet.topology``, ``fleet.groups``) for verdicts to name;
    a file that cannot be read is logged and left out, it never stops the worker."""
    path = config.fleet.topology
    try:
        found = load_topology(
            path if path is not None and path.exists() else None, config.fleet.groups
        )
    except AttributionError as exc:
        log.warning("topology not used: %s", exc)
        return None
    return found or None


def _known_comment(job: JobRecord) -> str | _Ask | None:
    """The job's AdminComment as resolved, unless a text the job's owner chose (its name, its
    work directory) holds a field separator or a newline: then the line sacct printed may have
    been split in the wrong place, and Slurm is asked again."""
    for text in (job.name, job.work_dir, job.admin_comment):
        if text and any(c in text for c in "\x1f\n\r"):
            return _ASK
    return job.admin_comment


def _internal(exc: BaseException) -> str:
    """A bug's message for the retry record: type, text and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"internal error {type(exc).__name__}: {exc}{where}"


def _lost_sources(old: Verdict, new: Verdict) -> list[str]:
    """Sources (``stream@node``) the old verdict read lines from that the new one could not."""

    def read(v: Verdict) -> set[tuple[str, str | None]]:
        return {(c.stream.value, c.node) for c in v.coverage if c.lines > 0}

    gone = read(old) - read(new)
    return sorted(f"{stream}@{node}" if node else stream for stream, node in gone)


__all__ = [
    "Counters",
    "Outcome",
    "TaskResult",
    "Worker",
    "entry_group",
    "fair_order",
    "make_spool",
    "pool_size",
]
