"""The seam everything tests through: ``analyze(job, lines, ruleset) -> Verdict``.

Pure and deterministic: no I/O, no clock (``diagnosed_at`` is passed in).
Extraction, correlation and diagnosis all happen here, so rule examples,
golden cases, offline bundles and the live worker run exactly the same code.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution import __version__
from attribution.history import PriorGpuError, apply_history, gpu_errors
from attribution.hostlist import compress, expand, short_name
from attribution.model import (
    ENGINE_EVENTS,
    JOB_STREAMS,
    Cause,
    ChainEntry,
    ChainRole,
    Confidence,
    Coverage,
    CoverageNote,
    CoverageStatus,
    Event,
    EventRole,
    JobRecord,
    LogLine,
    OutputSilence,
    Owner,
    Placement,
    Responsible,
    Severity,
    SourceRef,
    Standing,
    Stream,
    SubDomain,
    TerminalState,
    Trust,
    Verdict,
)
from attribution.ownership import assess
from attribution.rules.compiled import RuleSet
from attribution.rules.conditions import timeouts_recorded
from attribution.rules.correlate import correlate, job_identity
from attribution.rules.diagnose import Candidate, Outcome, diagnose
from attribution.rules.extract import EventCollector, Extractor, iter_with_following
from attribution.timeutil import zone
from attribution.topology import Topology, place

ENGINE_VERSION = __version__
# the "rule" of the events the engine makes from observations (ENGINE_EVENTS); bump the
# version when what such an event holds changes
LAST_OUTPUT_RULE = "job-output-last-line@3"  # was an extractor of a synthetic line up to @2
# what the evidence kept of one job may use (estimated; config ``reading.evidence_memory``)
EVIDENCE_MEMORY = 48 << 20


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """Tunable limits of one analysis.

    ``margin_before``/``margin_after``: seconds added around the job's start and
    end; node events outside count as context only. ``skew``: seconds of clock
    difference tolerated when ordering events from different nodes.
    ``per_key``/``per_rule_node``/``per_rule_ranks``/``max_events``: how many
    distinct events are kept before repeats are folded into counts, and
    ``evidence_memory`` the estimated bytes all that is kept may use (the memory
    bound; see ``EventCollector``). ``lookback``: seconds before
    the window in which a *persisting* fault (one that lasts until the node
    reboots, such as a failed Fabric Manager) still counts, unless the node
    rebooted in between. ``start_grace``: see ``ownership.assess``.
    """

    margin_before: float = 300.0
    margin_after: float = 300.0
    skew: float = 60.0
    per_key: int = 3
    per_rule_node: int = 64
    per_rule_ranks: int = 16_384
    max_events: int = 500_000
    evidence_memory: int = EVIDENCE_MEMORY
    max_chain: int = 40
    lookback: float = 86400.0
    # seconds around the job's start (and around other jobs' spans) within which node clocks
    # and Slurm's are not trusted to say which side an event is on (``ownership.assess``)
    start_grace: float = 30.0
    # the cluster's failure domains (topology.conf, the site's group map): the verdict names
    # the one its nodes share (``Verdict.placement``)
    topology: Topology | None = None


def job_window(job: JobRecord, options: AnalysisOptions) -> tuple[datetime | None, datetime | None]:
    """``[start - margin_before, end + margin_after]``; open ends where Slurm did not say."""
    start = job.start - timedelta(seconds=options.margin_before) if job.start else None
    end = job.end + timedelta(seconds=options.margin_after) if job.end else None
    return start, end


def read_window(
    job: JobRecord, options: AnalysisOptions
) -> tuple[datetime | None, datetime | None]:
    """What to read of time-ordered node logs: the job window, reaching back far enough
    for persisting faults (at least an hour before the start)."""
    start, end = job_window(job, options)
    if job.start is not None:
        start = job.start - timedelta(seconds=max(options.margin_before, 3600.0))
    return start, end


def job_passed(job: JobRecord) -> bool:
    """COMPLETED with exit code 0:0 and no non-zero derived exit code (sacct semantics)."""
    if job.state != "COMPLETED":
        return False
    if job.exit_code not in (None, "0:0", "0"):
        return False
    return job.derived_exit_code in (None, "", "0:0", "0")


Silences = Sequence[OutputSilence] | Callable[[], Sequence[OutputSilence]]


def silence_event(silence: OutputSilence) -> Event:
    """The ``job.last_output`` event of one job output file (``ENGINE_EVENTS``): made from
    the reader's observation, never from a line, so a job cannot forge it by printing."""
    role, _ = ENGINE_EVENTS["job.last_output"]
    minutes = int(f"{silence.silent_s / 60:.0f}")
    return Event(
        name="job.last_output",
        rule=LAST_OUTPUT_RULE,
        stream=silence.stream,
        node=silence.node,
        # untimed on purpose: it describes the whole file, and a time would bound the
        # untimed lines before it ("no later than the next timed line") wrongly
        time=None,
        fields={
            "at": f"{silence.at:%Y-%m-%dT%H:%M:%S}Z",
            "minutes": minutes,
            "silent_s": int(f"{silence.silent_s:.0f}"),
            "share": float(f"{silence.share:.2f}"),
            "untimed_after": silence.untimed_after,
            "untimed_bytes": silence.untimed_bytes,
            "timed_before": silence.timed_before,
        },
        source=SourceRef(silence.file, silence.line, silence.offset),
        text=silence.text,
        role=role,
        label=f"Job output stopped {minutes} min before the end",
        severity=Severity.INFO,
        trusted=False,  # read from the job's own output
    )


def extract_events(
    job: JobRecord,
    lines: Iterable[LogLine],
    ruleset: RuleSet,
    options: AnalysisOptions = AnalysisOptions(),
    silences: Silences = (),
) -> EventCollector:
    """Run the extractor stage over ``lines`` and return the (folded) events, with the
    ``job.last_output`` events of ``silences`` (a callable is asked once ``lines`` has been
    consumed: the readers observe silences as they read)."""
    extractor = Extractor(ruleset, tz=zone(job.timezone))
    collector = EventCollector(
        ruleset,
        window=job_window(job, options),
        span=(job.start, job.end),
        per_key=options.per_key,
        per_rule_node=options.per_rule_node,
        per_rule_ranks=options.per_rule_ranks,
        max_events=options.max_events,
        budget=options.evidence_memory,
        identity=job_identity(job),
    )
    lookahead = max((ex.rule.match.continuation for ex in ruleset.extractors), default=0)
    # untimed events wait for the next timed line of their file, which bounds their time
    pending: dict[str, list[Event]] = {}
    for line, following in iter_with_following(lines, lookahead):
        path = line.source.path
        if line.pid is not None and line.stream in JOB_STREAMS:
            # a process that printed the job's own output (NCCL's host:pid:tid prefix)
            node = short_name(line.host) if line.host else line.node
            if node:
                collector.note_pid(node, line.pid)
        if line.time is not None and path in pending:
            for event in pending.pop(path):
                event.not_after = line.time
        found = extractor.extract(line, following)
        if line.time is None and path in pending:
            # a message that carries its own time ("failed at", "CANCELLED AT") bounds too
            stamped = [e.time for e in found if e.time is not None]
            if stamped:
                for event in pending.pop(path):
                    event.not_after = min(stamped)
        kept = len(collector.events)
        collector.extend(found)
        for event in collector.events[kept:]:
            if event.time is None:
                pending.setdefault(path, []).append(event)
    collector.extend([silence_event(x) for x in (silences() if callable(silences) else silences)])
    collector.regex_timeouts = dict(extractor.timeouts)
    return collector


def analyze(
    job: JobRecord,
    lines: Iterable[LogLine],
    ruleset: RuleSet,
    *,
    coverage: Sequence[Coverage] | Callable[[], Sequence[Coverage]] = (),
    options: AnalysisOptions = AnalysisOptions(),
    diagnosed_at: datetime | None = None,
    history: Sequence[PriorGpuError] = (),
    silences: Silences = (),
) -> Verdict:
    """Diagnose one job.

    Args:
        job: the Slurm job record (times UTC).
        lines: every evidence line, source by source (see ``sources``).
        ruleset: the compiled rules.
        coverage: per-source coverage, or a callable returning it once
            ``lines`` has been consumed (readers count as they go).
        options: window margins, skew tolerance and memory bounds.
        diagnosed_at: stored in the verdict; ``None`` keeps output reproducible.
        history: GPU errors earlier jobs recorded (the verdict store or a bundle's
            ``history.yaml``), for the XID 13/31 repeat logic (``attribution.history``).
        silences: when each job output file last said something (``OutputSilence``, from
            the readers), or a callable returning them once ``lines`` has been consumed.

    Returns:
        The ``Verdict``. Never raises on odd evidence; problems show up in
        ``coverage``.
    """
    collector = extract_events(job, lines, ruleset, options, silences)
    identity = collector.identity  # learnt from every event as it came
    identity.infer_block_layout()
    events = collector.events  # identity.* events are not kept: ``identity`` has what they say
    for event in events:
        if event.node is None:
            event.node = identity.node_of(event)
        if event.node is None and len(job.nodes) == 1:
            event.node = job.nodes[0]
        pid = event.fields.get("pid")
        if event.stream in JOB_STREAMS and event.node and isinstance(pid, int):
            collector.note_pid(event.node, pid)
    _carry_persisting(events, job, options)
    cov = list(coverage() if callable(coverage) else coverage)
    cov = _note_folded(cov, collector.folded_beyond)
    cov = _note_timeouts(cov, collector.regex_timeouts)
    active = [e for e in events if e.in_window is not False]
    ignored = [e for e in events if e.in_window is False]
    active, view, assessment = assess(
        active, job, cov, pids=collector.pids, grace=options.start_grace
    )
    # a lasting fault brought in from before the window that is not the job's goes back out
    for event in active:
        if event.carried and event.standing is Standing.CONTEXT:
            event.in_window = False
            ignored.append(event)
    active = [e for e in active if e.in_window is not False]
    causes = [e for e in active if e.standing is Standing.CAUSE]
    support = [e for e in active if e.standing is Standing.SUPPORT]
    apply_history(causes, job, history)
    # correlation also sees the node's earlier state (a reboot before the start explains the
    # link noise that followed it), but only cause-standing events may be its roots
    history_too = [e for e in active if e.standing is Standing.CAUSE or e.earlier]
    passed = job_passed(job)
    cov = _note_ownership(cov, job, assessment.notes)
    cov = _note_fields_missing(cov, job)
    with timeouts_recorded() as slow:
        findings = correlate(ruleset.correlations, history_too, job, identity, skew=options.skew)
        outcome = (
            Outcome(None, [], [])
            if passed
            else diagnose(
                ruleset.diagnoses,
                causes,
                findings,
                job,
                skew=options.skew,
                coverage=cov,
                support=support,
                others=[e for e in active if e.standing is not Standing.CAUSE],
            )
        )
    cov = _note_condition_timeouts(cov, slow)
    return _verdict(
        job,
        ruleset,
        options,
        outcome,
        passed,
        active,
        ignored,
        cov,
        diagnosed_at,
        ownership=assessment.summary(view),
    )


def _carry_persisting(events: list[Event], job: JobRecord, options: AnalysisOptions) -> None:
    """Decide which states logged before the job's start still held when it started: those are
    this job's evidence (the node was already broken), the rest is the node's history.

    A persisting fault (``emit.persists``: a GPU that fell off the bus, Fabric Manager down)
    holds until its node reboots, and is brought in from up to ``lookback`` before the window.
    A state with ``emit.cleared_by`` events (a link that went down) holds until one of those
    follows on the same node and device (the link came up again); without ``persists`` it
    counts only when logged inside the job's window. Whatever ended before the start has
    ``persists`` cleared, so that ``ownership.assess`` keeps it as context."""
    start = job.start
    if start is None:
        return
    boots: dict[str | None, list[datetime]] = defaultdict(list)
    clears: dict[tuple[str | None, str], list[Event]] = defaultdict(list)
    wanted = {name for e in events for name in e.cleared_by}
    for e in events:
        if e.name == "kernel.boot" and e.time is not None:
            boots[e.node].append(e.time)
        if e.name in wanted and e.time is not None:
            clears[(e.node, e.name)].append(e)
    earliest = start - timedelta(seconds=options.lookback)
    for e in events:
        stateful = e.persists or (e.cleared_by and e.in_window is not False)
        if not stateful or e.time is None or not earliest <= e.time < start:
            continue
        e.persists = False
        if any(e.time < b <= start for b in boots.get(e.node, ())):
            continue
        ended = [
            c
            for name in e.cleared_by
            for c in clears.get((e.node, name), ())
            if c.time is not None
            and e.time < c.time <= start
            and (not e.device or not c.device or c.device == e.device)
        ]
        if ended:
            first = min(ended, key=lambda c: (c.time, c.seq))
            e.note = f"ended before the job started ({first.label})"
            continue
        e.persists = True
        if e.in_window is False:
            e.in_window = True
            e.carried = True
            e.note = "logged before the job started; the state lasts until the node reboots"
        else:
            e.note = "logged before the job started; the state still held when it started"


# --------------------------------------------------------------------- verdict assembly


def _verdict(
    job: JobRecord,
    ruleset: RuleSet,
    options: AnalysisOptions,
    outcome: Outcome,
    passed: bool,
    active: list[Event],
    ignored: list[Event],
    coverage: list[Coverage],
    diagnosed_at: datetime | None,
    ownership: Mapping[str, Any] | None = None,
) -> Verdict:
    winner = outcome.winner
    chain = _chain(active, outcome, options, job.end)
    ignored_chain = sorted(
        _group(ignored, lambda _e: ChainRole.CONTEXT, note="outside the job window"),
        key=lambda c: (c.first_at is None, c.first_at or datetime.min.replace(tzinfo=UTC)),
    )
    coverage = _coverage_counts(coverage, active + ignored)
    responsible: tuple[Responsible, ...] = ()
    suspects: tuple[Responsible, ...] = ()
    action: str | None = None
    cause: Cause | None = None
    if passed:
        terminal, sub_domain = TerminalState.PASS, SubDomain.NONE
        warnings = sum(1 for e in active if e.severity >= 2 and e.role is not EventRole.SYMPTOM)
        summary = f"Job {job.display_id} completed successfully (exit code 0:0)."
        if warnings:
            summary += f" {warnings} warning signal(s) seen; see the symptom chain."
    elif winner is None:
        terminal, sub_domain = _terminal_without_cause(job), SubDomain.UNATTRIBUTED
        summary = _unattributed_summary(job, coverage, active)
        action = (
            "Check the coverage list for sources we could not read; add them (path templates "
            "in config.yaml) or attach them to the bundle, then re-run."
        )
    elif outcome.tied:
        everyone = [winner, *outcome.tied]
        terminal = winner.rule.terminal_state
        sub_domain = SubDomain.AMBIGUOUS
        names = " or ".join(f"{c.rule.title} ({c.rule.sub_domain.value})" for c in everyone)
        cause = Cause(
            id="ambiguous",
            title=f"Several causes fit equally: {names}",
            rule=f"engine@{ENGINE_VERSION}",
        )
        summary = "Several causes fit the evidence equally: " + "; ".join(
            f"{c.summary} [{c.rule.sub_domain.value}]" for c in everyone
        )
        responsible = _union(r for c in everyone for r in c.responsible)
        suspects = _union(r for c in everyone for r in c.suspects)
        # an unconfirmed candidate's own action (a drain) never stands: its "check first" does
        action = (
            " / ".join(
                dict.fromkeys(
                    _unconfirmed_action(c.suspects, [c]) if c.unconfirmed else c.action or ""
                    for c in everyone
                    if c.action or c.unconfirmed
                )
            )
            or None
        )
        if suspects and not responsible:
            action = _unconfirmed_action(suspects, everyone)
    else:
        terminal = winner.rule.terminal_state
        sub_domain = winner.rule.sub_domain
        cause = winner.cause
        summary = winner.summary
        action = winner.action
        responsible = winner.responsible
        suspects = winner.suspects
        if winner.unconfirmed:
            streams = " and ".join(winner.untrusted_streams) or "untrusted sources"
            summary = (
                f"Unconfirmed: {summary.rstrip()} No trusted source confirms it: it was read"
                f" only in {streams}, which users can write."
            )
            action = _unconfirmed_action(suspects, [winner])
    return Verdict(
        job=job,
        terminal_state=terminal,
        sub_domain=sub_domain,
        cause=cause,
        responsible=responsible,
        summary=summary,
        action=action,
        symptom_chain=tuple(chain),
        alternatives=tuple(outcome.alternatives),
        coverage=tuple(coverage),
        ignored=tuple(ignored_chain),
        window=job_window(job, options),
        ruleset=ruleset.info(),
        engine_version=ENGINE_VERSION,
        diagnosed_at=diagnosed_at,
        gpu_errors=gpu_errors([e for e in active if e.standing is Standing.CAUSE]),
        suspects=suspects,
        confidence=_capped(
            outcome, passed, _confidence(job, outcome, passed, coverage, ownership or {})
        ),
        ownership=dict(ownership or {}),
        placement=_placement(options.topology, responsible, suspects, chain),
    )


def _placement(
    topology: Topology | None,
    responsible: Sequence[Responsible],
    suspects: Sequence[Responsible],
    chain: Sequence[ChainEntry],
) -> Placement | None:
    """The failure domain of the verdict's nodes: the responsible ones, else the suspects, else
    the nodes of the chain's root symptoms."""
    if not topology:
        return None
    for basis, nodes in (
        ("responsible", [r.node for r in responsible]),
        ("suspects", [r.node for r in suspects]),
        ("root", [n for c in chain if c.role is ChainRole.ROOT for n in c.nodes]),
    ):
        if nodes:
            return place(topology, list(dict.fromkeys(nodes)), basis)
    return None


def _union(items: Iterable[Responsible]) -> tuple[Responsible, ...]:
    seen: dict[tuple[str, str | None], Responsible] = {}
    for r in items:
        seen.setdefault((r.node, r.device), r)
    return tuple(seen.values())


def _unconfirmed_action(suspects: Sequence[Responsible], cands: Sequence[Candidate]) -> str:
    nodes = compress([r.node for r in suspects])
    streams = sorted({s for c in cands for s in c.untrusted_streams}) or ["untrusted sources"]
    return (
        f"Do not drain on this alone: it comes only from {' and '.join(streams)}. Check {nodes}"
        " with a trusted source first (its kernel log or journal, nvidia-smi, dcgmi diag)."
    )


_OK = CoverageStatus.OK
_SLURM_ONLY = "Slurm's own record of the job (sacct)"


_LEVELS = {"low": 0, "medium": 1, "high": 2}
_NODE_SIDE = frozenset({SubDomain.HARDWARE, SubDomain.SYSTEM_SOFTWARE, SubDomain.INFRASTRUCTURE})


def _capped(outcome: Outcome, passed: bool, found: Confidence) -> Confidence:
    """The evidence's confidence (``found``), capped by what the deciding rule declares it can
    know (a family rule's ``confidence: low``); the reason names both."""
    winner = outcome.winner
    if passed or winner is None or outcome.tied:
        return found
    cap = winner.rule.confidence
    if cap is None or _LEVELS[cap] >= _LEVELS[found.level]:
        return found
    reason = winner.rule.confidence_reason or (
        "a family rule: it knows this kind of message, not this message"
    )
    return Confidence(
        cap,
        f"{reason} (the rule caps it at {cap}; the evidence alone: {found.level}, {found.reason})",
    )


def _confidence(
    job: JobRecord,
    outcome: Outcome,
    passed: bool,
    coverage: Sequence[Coverage],
    ownership: Mapping[str, Any],
) -> Confidence:
    """How far the evidence lets us trust the verdict, and why, in one line (docs/verdict.md)."""
    winner = outcome.winner
    if passed:
        return Confidence("high", "Slurm recorded COMPLETED with exit code 0:0")
    if winner is None:
        return Confidence("low", "no known failure signature in the evidence read")
    if outcome.tied:
        return Confidence("low", "several causes from different domains fit equally")
    if winner.unconfirmed:
        return Confidence(
            "low",
            "the node(s) it names are confirmed by no trusted source (only "
            + (", ".join(winner.untrusted_streams) or "untrusted lines")
            + ")",
        )
    evidence = winner.evidence
    trusted = sorted({e.stream.value for e in evidence if e.trusted})
    if winner.responsible:
        nodes = compress([r.node for r in winner.responsible])
        source = ", ".join(trusted) if trusted else _SLURM_ONLY
        return Confidence("high", f"confirmed on {nodes} by {source}")
    if not evidence:
        return Confidence("high", f"from {_SLURM_ONLY}")
    unknown = [e for e in evidence if e.owner is Owner.UNKNOWN and e.stream not in JOB_STREAMS]
    if unknown and not ownership.get("checked", True):
        return Confidence(
            "medium",
            "rests on node events of unknown processes, and whether the job shared its nodes"
            " is not known",
        )
    in_job = set(job.nodes)
    unread = sorted(
        {
            node
            for c in coverage
            if c.stream is Stream.KERNEL and c.status is not _OK
            for node in _entry_nodes(c, in_job)
        }
    )
    if winner.rule.sub_domain is SubDomain.APPLICATION and unread and not trusted:
        return Confidence(
            "medium",
            f"from the job's own output; the kernel log of {compress(unread)} was not read, so"
            " a node fault underneath cannot be ruled out",
        )
    if winner.rule.sub_domain in _NODE_SIDE and not trusted:
        return Confidence(
            "medium",
            "from the job's own output only: it points at the system, and no log users cannot"
            " write says so",
        )
    where = ", ".join(sorted({e.stream.value for e in evidence}))
    return Confidence("high", f"the evidence ({where}) points one way")


def _terminal_without_cause(job: JobRecord) -> TerminalState:
    return {
        "TIMEOUT": TerminalState.TIMEOUT,
        "CANCELLED": TerminalState.CANCELLED,
        "PREEMPTED": TerminalState.PREEMPTED,
    }.get(job.state or "", TerminalState.FAIL)


def _unattributed_summary(job: JobRecord, coverage: list[Coverage], active: list[Event]) -> str:
    read = [c for c in coverage if c.status is CoverageStatus.OK]
    absent = [c for c in coverage if c.status is not CoverageStatus.OK]
    state = job.state or "unknown state"
    text = (
        f"Job {job.display_id} ended {state}"
        + (f" (exit code {job.exit_code})" if job.exit_code else "")
        + f", but no known failure signature was found in the {len(read)} source(s) we read"
    )
    if absent:
        text += f"; {len(absent)} source(s) were missing, empty or unreadable"
    if active:
        text += f"; {len(active)} signal(s) were seen but none explains the failure"
    return text + "."


def _roles(
    active: list[Event], outcome: Outcome, skew: float, end: datetime | None = None
) -> dict[int, ChainRole]:
    winner = outcome.winner
    root_ids: set[int] = set()
    root_time: datetime | None = None
    for cand in [winner, *outcome.tied] if winner else []:
        assert cand is not None
        root_ids.update(id(e) for e in _root_events(cand))
        # supporting evidence of the root's own node that is a fault in itself (the root
        # port's AER Surprise Down behind an XID 79) is the same event seen from elsewhere
        blamed = {r.node for r in cand.responsible}
        root_ids.update(
            id(e)
            for e in cand.supporting
            if e.node in blamed
            and not e.demoted_by
            and e.role in (EventRole.ROOT, EventRole.EITHER)
        )
        if cand.first_at and (root_time is None or cand.first_at < root_time):
            root_time = cand.first_at
    roles: dict[int, ChainRole] = {}
    for e in active:
        if e.standing is not Standing.CAUSE:
            roles[id(e)] = ChainRole.CONTEXT  # another job's, forged, earlier, or only support
        elif id(e) in root_ids:
            roles[id(e)] = ChainRole.CONTEXT if e.role is EventRole.CONTEXT else ChainRole.ROOT
        elif e.context_by or e.role is EventRole.CONTEXT:
            roles[id(e)] = ChainRole.CONTEXT
        elif root_time and e.time and (root_time - e.time).total_seconds() > skew:
            roles[id(e)] = ChainRole.CONTEXT  # clearly before the root: cannot be its effect
        elif (
            end
            and e.time
            and (e.time - end).total_seconds() > skew
            and not e.demoted_by
            and e.role in (EventRole.ROOT, EventRole.EITHER)
        ):
            # a fault of its own logged after the job had ended: not something the root caused
            roles[id(e)] = ChainRole.CONTEXT
            e.note = e.note or "logged after the job ended"
        elif e.demoted_by or e.role is EventRole.SYMPTOM:
            roles[id(e)] = ChainRole.DOWNSTREAM
        elif winner is None:
            roles[id(e)] = ChainRole.CONTEXT
        else:
            roles[id(e)] = ChainRole.DOWNSTREAM
    return roles


def _root_events(cand: Candidate) -> list[Event]:
    if cand.anchor_finding is not None:
        nodes = set(cand.anchor_finding.nodes)
        own = [e for e in cand.anchor_finding.events if e.node in nodes]
        return own + cand.matched
    return cand.anchor_events + cand.matched


def _chain(
    active: list[Event], outcome: Outcome, options: AnalysisOptions, end: datetime | None = None
) -> list[ChainEntry]:
    roles = _roles(active, outcome, options.skew, end)
    entries = _group(active, lambda e: roles[id(e)])
    root_first = [e.first_at for e in entries if e.role is ChainRole.ROOT and e.first_at]
    pivot = min(root_first) if root_first else None

    def rank(entry: ChainEntry) -> tuple[Any, ...]:
        when = entry.first_at.timestamp() if entry.first_at else float("inf")
        if entry.role is ChainRole.ROOT:
            band = 1
        elif entry.role is ChainRole.DOWNSTREAM:
            band = 2
        elif pivot and entry.first_at and entry.first_at < pivot:
            band = 0  # upstream context, e.g. a reboot before the XID
        else:
            band = 3
        return (band, when, entry.symptom)

    entries.sort(key=rank)
    return entries[: options.max_chain]


def _event_note(event: Event) -> str | None:
    """The chain note of an event: why it has its owner or standing, then the engine's note
    (a carried state's "still held" is left out of an event that only stands as context)."""
    if event.owner_note and event.standing is Standing.CONTEXT:
        return event.owner_note
    return "; ".join(x for x in (event.owner_note, event.note) if x) or None


def _group(
    events: Iterable[Event], role_of: Callable[[Event], ChainRole], note: str | None = None
) -> list[ChainEntry]:
    groups: dict[tuple[ChainRole, str, str, Owner | None, bool], list[Event]] = defaultdict(list)
    for e in events:
        groups[(role_of(e), e.name, e.label, e.owner, e.trusted)].append(e)
    out: list[ChainEntry] = []
    for (role, name, label, owner, trusted), members in groups.items():
        members.sort(key=_event_order)
        first = members[0]
        times = [t for e in members for t in (e.time, e.last_time) if t is not None]
        nodes = sorted({e.node for e in members if e.node})
        streams = sorted({e.stream.value for e in members})
        out.append(
            ChainEntry(
                symptom=label,
                event=name,
                role=role,
                count=sum(e.count for e in members),
                nodes=tuple(nodes),
                node_count=len(nodes),
                first_at=min(times) if times else None,
                last_at=max(times) if times else None,
                stream=",".join(streams),
                example=first.text,
                source=str(first.source),
                rule=first.rule,
                note=note or _event_note(first),
                owner=owner.value if owner is not None else None,
                trust=(Trust.TRUSTED if trusted else Trust.UNTRUSTED).value,
            )
        )
    return out


def _note_fields_missing(coverage: list[Coverage], job: JobRecord) -> list[Coverage]:
    """Say on the job's output entries which sacct fields this Slurm refused (the job record
    itself is read from sacct: what it lacks, the verdict did not have)."""
    if not job.fields_missing:
        return coverage
    note = CoverageNote("slurm_fields_missing", {"fields": ", ".join(job.fields_missing)})
    return [c.noted(note) if c.stream is Stream.JOB_STDOUT else c for c in coverage]


def _note_ownership(
    coverage: list[Coverage], job: JobRecord, notes: Sequence[str]
) -> list[Coverage]:
    """Say in each job node's kernel coverage entry what ownership could not be checked."""
    if not notes:
        return coverage
    note = CoverageNote("ownership_unchecked", {"why": "; ".join(notes)})
    nodes = set(job.nodes)
    done: set[str] = set()
    out = []
    for c in coverage:
        node = c.node
        if c.stream is Stream.KERNEL and "nodes_folded" in c.codes:
            c = c.noted(note)  # the entry of the job's nodes without a log (specs.FOLD_NODES)
        elif node is not None and node in nodes and node not in done and c.stream is Stream.KERNEL:
            c = c.noted(note)
            done.add(node)
        out.append(c)
    return out


def _entry_nodes(c: Coverage, in_job: set[str]) -> tuple[str, ...]:
    """The job nodes a coverage entry is about: its node, or the host list of an entry that
    stands for many (``nodes_folded``)."""
    if c.node in in_job:
        return (c.node,)
    if c.node and "nodes_folded" in c.codes:
        return tuple(n for n in expand(c.node) if n in in_job)
    return ()


def _event_order(event: Event) -> tuple[Any, ...]:
    if event.time is None:
        return (1, 0.0, event.seq)
    return (0, event.time.timestamp(), event.seq)


def _note_folded(
    coverage: list[Coverage], folded: Mapping[tuple[Stream, str | None], int]
) -> list[Coverage]:
    """Say in coverage where the collector's bounds folded signals without their detail."""
    if not folded:
        return coverage
    per_source: dict[tuple[Stream, str | None], int] = defaultdict(int)
    for (stream, node), count in folded.items():
        per_source[(stream, None if stream in JOB_STREAMS else node)] += count
    out = []
    for c in coverage:
        count = per_source.get((c.stream, c.node), 0)
        if count:
            c = c.noted(CoverageNote("folded", {"count": count}))
        out.append(c)
    return out


def _note_condition_timeouts(
    coverage: list[Coverage], slow: Mapping[tuple[str | None, str | None, str], int]
) -> list[Coverage]:
    """Say in coverage which events a condition's pattern could not test in time: on the
    source of the event, or on every entry read for job and finding conditions."""
    if not slow:
        return coverage
    notes: dict[tuple[str | None, str | None], list[CoverageNote]] = defaultdict(list)
    for (stream, node, pattern), count in sorted(slow.items(), key=str):
        key = (stream, None if stream is None or Stream(stream) in JOB_STREAMS else node)
        shown = pattern if len(pattern) <= 60 else pattern[:60] + "…"
        notes[key].append(CoverageNote("condition_timeout", {"count": count, "pattern": shown}))
    out = []
    for c in coverage:
        extra = notes.get((c.stream.value, c.node))
        if extra is None and c.status is CoverageStatus.OK and c.node is None:
            extra = notes.get((None, None))
        if extra:
            c = c.noted(*extra)
        out.append(c)
    return out


def _note_timeouts(
    coverage: list[Coverage], timeouts: Mapping[tuple[Stream, str | None, str], int]
) -> list[Coverage]:
    """Say in coverage which lines a rule could not match within its time budget."""
    if not timeouts:
        return coverage
    notes: dict[tuple[Stream, str | None], list[CoverageNote]] = defaultdict(list)
    for (stream, node, rule), count in sorted(timeouts.items(), key=str):
        key = (stream, None if stream in JOB_STREAMS else node)
        notes[key].append(CoverageNote("regex_timeout", {"count": count, "rule": rule}))
    out = []
    for c in coverage:
        extra = notes.get((c.stream, c.node))
        if extra:
            c = c.noted(*extra)
        out.append(c)
    return out


def _coverage_counts(coverage: list[Coverage], events: list[Event]) -> list[Coverage]:
    untimed: dict[tuple[str, str | None], int] = defaultdict(int)
    outside: dict[tuple[str, str | None], int] = defaultdict(int)
    for e in events:
        key = (
            e.stream.value,
            e.node if e.stream.value not in ("job_stdout", "job_stderr") else None,
        )
        if e.time is None:
            untimed[key] += e.count
        elif e.in_window is False:
            outside[key] += e.count
    out = []
    for c in coverage:
        key = (c.stream.value, c.node)
        counts = (untimed.get(key, 0), outside.get(key, 0))
        if counts != (c.untimed, c.outside_window):  # one copy of 12,500 nodes' entries, not two
            c = dataclasses.replace(c, untimed=counts[0], outside_window=counts[1])
        out.append(c)
    return out


def nodes_text(nodes: Sequence[str]) -> str:
    """Compress node names for display (``node[001-128]``)."""
    return compress(nodes)
