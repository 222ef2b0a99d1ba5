"""Diagnosis stage: events + findings + job record -> ranked candidates -> one outcome.

Ranking, in order: ``priority`` (higher wins); then time (a candidate whose
evidence is clearly earlier, by more than the clock-skew tolerance, wins: the
earliest root explains what follows); then severity; then rule id. A
lower-priority candidate that is clearly *earlier* than the top one also wins:
a hardware event that happens after the job already died did not kill it.
Candidates of equal priority from different sub_domains that time cannot
separate make the verdict ``ambiguous``.

Trust (docs/verdict.md, "Ownership and trust"): a candidate blames a node only when evidence
from a trusted source (the kernel, Fabric Manager, DCGM, Slurm) supports it on that node, or
trusted reports from other nodes name it. Nodes named only by untrusted lines (the job's own
output, general syslog) become ``suspects``, never ``responsible``. A hardware claim made only
by untrusted lines, on nodes whose trusted kernel log was recording throughout and shows
nothing, is contradicted and does not stand.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from attribution.hostlist import compress, is_ip, short_name
from attribution.model import (
    Alternative,
    Cause,
    Coverage,
    CoverageStatus,
    Event,
    Finding,
    JobRecord,
    Responsible,
    Severity,
    Stream,
    SubDomain,
)
from attribution.ownership import recording
from attribution.rules.conditions import (
    PatternTimeout,
    check_all,
    ending_signal,
    event_rank,
    job_matches,
    named_nodes,
    record_timeout,
    selects,
    signal_name,
)
from attribution.rules.schema import DiagnosisRule, EventCondition, FindingCondition
from attribution.rules.template import render

# The root band (docs/rules.md, "Priority bands"): candidates at or above this priority may
# win on time over a higher-priority candidate that came clearly later.
ROOT_BAND_MIN = 40
# coverage states in which a source told us nothing
UNREAD_STATUSES = frozenset(
    {
        CoverageStatus.MISSING,
        CoverageStatus.UNREADABLE,
        CoverageStatus.ERROR,
        CoverageStatus.EMPTY,
        CoverageStatus.UNREACHABLE,
    }
)


@dataclass(slots=True)
class Candidate:
    """One diagnosis rule that matched, with the evidence that made it match."""

    rule: DiagnosisRule
    anchor_events: list[Event]
    anchor_finding: Finding | None
    matched: list[Event]
    supporting: list[Event]
    findings: list[Finding]
    first_at: datetime | None
    responsible: tuple[Responsible, ...]
    summary: str
    action: str | None
    values: dict[str, Any] = field(default_factory=dict)
    # nodes the rule would blame that only untrusted evidence names (see the module docstring)
    suspects: tuple[Responsible, ...] = ()
    untrusted_streams: tuple[str, ...] = ()  # where the unconfirmed claim was read
    # nodes outside the job that only untrusted evidence names (dropped from the blame)
    outside: tuple[str, ...] = ()

    @property
    def unconfirmed(self) -> bool:
        """The rule blames nodes, but no trusted evidence confirms any of them."""
        return not self.responsible and bool(self.suspects)

    @property
    def evidence(self) -> list[Event]:
        """Every event the candidate rests on: anchors, matched, supporting, its findings'."""
        out = [*self.anchor_events, *self.matched, *self.supporting]
        for finding in self.findings:
            out.extend(finding.events)
        return list({id(e): e for e in out}.values())

    @property
    def priority(self) -> int:
        return self.rule.priority

    @property
    def earliest_at(self) -> datetime | None:
        """When the evidence may have happened at the earliest: ``first_at`` less the
        reporting lag of its messages (``reported_late``)."""
        if self.first_at is None:
            return None
        lag = max((e.reported_late for e in self.anchor_events), default=0.0)
        return self.first_at - timedelta(seconds=lag)

    @property
    def latest_at(self) -> datetime | None:
        """When the evidence happened at the latest: ``first_at``, or for untimed evidence
        the earliest time a later timed line of its file bounds it by."""
        if self.first_at is not None:
            return self.first_at
        bounds = [e.not_after for e in self.anchor_events if e.not_after is not None]
        return min(bounds) if bounds else None

    @property
    def cause(self) -> Cause:
        return Cause(id=self.rule.id, title=self.rule.title, rule=self.rule.ref)


@dataclass(slots=True)
class Outcome:
    """The ranked result: the winner (or none), an ambiguity set and the losers with reasons."""

    winner: Candidate | None
    tied: list[Candidate]
    alternatives: list[Alternative]


def _event_condition(cond: EventCondition, events: Sequence[Event]) -> list[Event] | None:
    chosen = [e for e in events if selects(cond, e)]
    if not chosen:
        return None
    if sum(e.count for e in chosen) < cond.min_count:
        return None
    nodes = {e.node for e in chosen if e.node}
    if len(nodes) < cond.min_nodes and not (cond.min_nodes == 1 and chosen):
        return None
    if cond.max_nodes is not None and len(nodes) > cond.max_nodes:
        return None
    if cond.min_ranks > 1:
        ranks = {r for e in chosen if (r := event_rank(e)) is not None}
        if len(ranks) < cond.min_ranks:
            return None
    return chosen


def _finding_condition(cond: FindingCondition, findings: Sequence[Finding]) -> list[Finding] | None:
    chosen = []
    for f in findings:
        if f.name != cond.finding:
            continue
        values = {**f.fields, "node": f.nodes[0] if f.nodes else None}
        try:
            if check_all(values, cond.where):
                chosen.append(f)
        except PatternTimeout as slow:
            record_timeout(None, values["node"], slow.pattern)
    return chosen or None


def _none_pool(
    cond: EventCondition, events: Sequence[Event], others: Sequence[Event]
) -> Sequence[Event]:
    """The events a ``none`` condition looks at: the possible causes, and also the events that
    may not be causes when the condition says whose it wants (another job's OOM kill can rule
    out "the job used up the node's memory", never make it)."""
    return [*events, *others] if others and "owner" in cond.where else events


def _order_key(event: Event) -> tuple[int, Any, int]:
    return (0, event.time, event.seq) if event.time is not None else (1, 0, event.seq)


def _unread_holds(
    rule: DiagnosisRule, anchors: list[Event], job: JobRecord, unread: frozenset[tuple[Stream, str]]
) -> bool:
    """None of ``when.unread`` was read on an anchor node (any job node if the anchors have
    none). A source counts as unread only when coverage says so (missing, unreadable, error,
    empty): with no coverage at all the condition does not hold."""
    streams = rule.when.unread_streams()
    nodes = {e.node for e in anchors if e.node} or set(job.nodes)
    return any(all((s, node) in unread for s in streams) for node in nodes)


def _evaluate(
    rule: DiagnosisRule,
    events: Sequence[Event],
    findings: Sequence[Finding],
    job: JobRecord,
    unread: frozenset[tuple[Stream, str]] = frozenset(),
    support: Sequence[Event] = (),
    others: Sequence[Event] = (),
) -> Candidate | None:
    when = rule.when
    if not job_matches(job, when.job):
        return None
    matched: list[Event] = []
    used_findings: list[Finding] = []
    anchor_events: list[Event] | None = None
    anchor_finding: Finding | None = None

    def satisfy(cond: EventCondition | FindingCondition) -> bool:
        nonlocal anchor_events, anchor_finding
        if isinstance(cond, FindingCondition):
            got_f = _finding_condition(cond, findings)
            if got_f is None:
                return False
            used_findings.extend(got_f)
            if anchor_events is None and anchor_finding is None:
                anchor_finding = got_f[0]
                anchor_events = list(got_f[0].events)
            return True
        got = _event_condition(cond, events)
        if got is None:
            return False
        matched.extend(got)
        if anchor_events is None and anchor_finding is None:
            anchor_events = got
        return True

    for cond in when.all:
        if not satisfy(cond):
            return None
    if when.any and not any([satisfy(cond) for cond in when.any]):
        return None
    for cond in when.none:
        if isinstance(cond, FindingCondition):
            if _finding_condition(cond, findings) is not None:
                return None
        elif _event_condition(cond, _none_pool(cond, events, others)) is not None:
            return None
    supporting: list[Event] = []
    for extra in when.also:
        # events that may only corroborate (an unknown process on a shared node) count here
        found = _event_condition(extra, [*events, *support] if support else events)
        if found:
            supporting.extend(found)

    anchors = anchor_events or []
    if rule.when.unread and not _unread_holds(rule, anchors, job, unread):
        return None
    rep = min(anchors, key=_order_key) if anchors else None
    # the cause's earliest evidence: any event its conditions matched, not only the anchor's
    times = [e.time for e in (*anchors, *matched) if e.time is not None]
    first_at = anchor_finding.time if anchor_finding and anchor_finding.time else None
    if first_at is None and times:
        first_at = min(times)
    responsible = _responsible(rule, anchors, anchor_finding, job)
    if not responsible and rule.blame == "anchor" and anchor_finding is None:
        # the anchor carries no node (a rank we could not place); blame the nodes named by the
        # rule's other matched evidence (the failed service behind CUDA 802), else by its
        # supporting evidence (the NVLink XIDs behind CUDA 220)
        responsible = _responsible(rule, matched, None, job) or _responsible(
            rule, supporting, None, job
        )
        if rule.device and anchors:
            # the device comes from the anchor (GPU 4 of the OOM), the node from elsewhere
            first = min(anchors, key=_order_key)
            device = render(rule.device, {**first.fields, "device": first.device}, unknown="")
            if device:
                responsible = tuple(
                    r if r.device else replace(r, device=device) for r in responsible
                )
    values = _values(rule, rep, anchors, anchor_finding, job, responsible)
    candidate = Candidate(
        rule=rule,
        anchor_events=anchors,
        anchor_finding=anchor_finding,
        matched=list({id(e): e for e in matched}.values()),
        supporting=list({id(e): e for e in supporting}.values()),
        findings=used_findings,
        first_at=first_at,
        responsible=responsible,
        summary=render(rule.summary, values),
        action=render(rule.action, values) if rule.action else None,
        values=values,
    )
    _confirm(candidate, job)
    return candidate


# Slurm's own record (sacct, slurmctld) says which node failed: trusted, like a trusted log
_SLURM_BLAME = frozenset({"job_nodes"})
CLAIMED = "the job's output (the pid it printed)"
# sub-domains whose verdict is about a node (the ones a drain would follow)
_NODE_DOMAINS = frozenset({SubDomain.HARDWARE, SubDomain.SYSTEM_SOFTWARE, SubDomain.INFRASTRUCTURE})


def _confirm(cand: Candidate, job: JobRecord) -> None:
    """Keep in ``responsible`` only nodes that trusted evidence supports: a trusted event of the
    candidate on that node, or trusted reports from other nodes behind a finding that names it.
    The rest move to ``suspects``. Nodes outside the job are dropped: nothing of theirs was
    read, and a process of the job reports on the job's nodes only; a node claim that names
    none of the job's nodes is kept in ``outside`` and does not stand (``_contradicted``)."""
    in_job = set(job.nodes)
    listed = cand.values.get("named_nodes")
    if (
        in_job
        and isinstance(listed, str)
        and any(n not in in_job for n in listed.split(","))
        and not any(e.trusted for e in cand.evidence)
    ):
        # an untrusted line's host list ({named_nodes}) as the verdict shows it: the job's
        # nodes in it (slurmctld's own list of nodes lost together is shown whole)
        kept = [n for n in listed.split(",") if n in in_job]
        cand.values = {**cand.values, "named_nodes": ",".join(kept) or None}
        _render_texts(cand)
    peer = cand.values.get("peer")
    if (
        in_job
        and isinstance(peer, str)
        and short_name(peer) not in in_job
        and not is_ip(short_name(peer))
        and not any(e.trusted for e in cand.evidence)
    ):
        # a peer the job's own lines name that is no node of the job: a process of the job
        # talks to the job's nodes; the texts say so and never name it
        cand.values = {**cand.values, "peer": None}
        _render_texts(cand)
    if in_job and cand.values.get("node") not in (None, "", *in_job) and not cand.responsible:
        # the node its summary names came from a line that names a node outside the job (a
        # host prefix, a Slurm line of another step): the verdict never names it
        _rerender(cand, [])
    if not cand.responsible:
        evidence = cand.evidence
        if (
            cand.rule.blame == "anchor"
            and cand.rule.sub_domain in _NODE_DOMAINS
            and job.nodes
            and evidence
            and not any(e.trusted for e in evidence)
        ):
            # a node fault that only untrusted lines claim: on the nodes they list (a host
            # list: ``named_nodes``), else on none of the job's nodes in particular (a
            # multi-node job's output without a host prefix): any of them
            named = _listed_nodes(cand.anchor_events)
            kept = [n for n in named if n in in_job] if named else list(job.nodes)
            cand.outside = tuple(n for n in named if n not in in_job)
            cand.suspects = tuple(Responsible(node=n, component=cand.rule.component) for n in kept)
            cand.untrusted_streams = tuple(sorted({e.stream.value for e in evidence}))
            if named:
                _rerender(cand, kept)
        return
    if cand.rule.blame in _SLURM_BLAME:
        cand.responsible = tuple(replace(r, confirmed_by="slurm") for r in cand.responsible)
        return
    evidence = cand.evidence
    by_node: dict[str, set[str]] = defaultdict(set)
    for e in evidence:
        if e.trusted and e.node and not e.owner_claimed:
            by_node[e.node].add(e.stream.value)
    finding = cand.anchor_finding
    if finding is not None:
        reporters = {e.stream.value for e in finding.events if e.trusted and not e.owner_claimed}
        for node in finding.nodes if reporters else ():
            by_node[node].update(reporters)  # cross-node evidence from trusted sources
    confirmed = tuple(
        replace(r, confirmed_by=",".join(sorted(by_node[r.node])))
        for r in cand.responsible
        if r.node in by_node
    )
    unconfirmed = [r for r in cand.responsible if r.node not in by_node]
    cand.suspects = tuple(r for r in unconfirmed if not in_job or r.node in in_job)
    # a node outside the job that the lines' words name (their host prefix may be a container's
    # name: that one is only dropped)
    dropped = [r.node for r in unconfirmed if in_job and r.node not in in_job]
    claimed = set(_listed_nodes(cand.anchor_events))
    cand.outside = tuple(dict.fromkeys(n for n in dropped if n in claimed))
    any_node = (
        bool(dropped)
        and not confirmed
        and not cand.suspects
        and not cand.outside
        and cand.rule.sub_domain in _NODE_DOMAINS
    )
    if any_node:
        # a node fault whose nodes came from lines around it (a host prefix, another line of
        # the step), none of the job's: as a claim that names no node, any of the job's nodes
        cand.suspects = tuple(Responsible(node=n, component=cand.rule.component) for n in job.nodes)
    if dropped:
        # the summary and action were written for every node the evidence named: name only
        # those that stand (confirmed, else suspects of the job), never one outside the job,
        # and none in particular when any of the job's nodes may be meant
        _rerender(cand, [] if any_node else [r.node for r in confirmed or cand.suspects])
    cand.responsible = confirmed
    untrusted = {e.stream.value for e in evidence if not e.trusted}
    if any(e.owner_claimed for e in evidence):
        untrusted.add(CLAIMED)  # a trusted line, made the job's by a pid the job printed
    cand.untrusted_streams = tuple(sorted(untrusted))


def _listed_nodes(events: Sequence[Event]) -> list[str]:
    """The nodes ``events`` name: their own node, or the host list a line named
    (``named_nodes``, see ``Extractor._event``), in order, once each."""
    out: dict[str, None] = {}
    for e in events:
        if not e.named:
            continue  # the host prefix of a job's line may be a container's name
        if e.node:
            out[e.node] = None
        out.update(dict.fromkeys(named_nodes(e)))
    return list(out)


def _rerender(cand: Candidate, nodes: Sequence[str]) -> None:
    """Render the summary and action again, naming only ``nodes`` (or none)."""
    values = dict(cand.values)
    values["node"] = nodes[0] if nodes else None
    values["nodes"] = compress(list(nodes)) if nodes else None
    values["node_count"] = len(set(nodes))
    cand.values = values
    _render_texts(cand)


def _render_texts(cand: Candidate) -> None:
    """Render the summary and action again from ``cand.values``. Where no node stands, a bare
    ``{node}`` reads "the job's nodes"; an optional ``[[ on {node}]]`` is left out."""
    stand_in = {"node": _ANY_NODE, "nodes": _ANY_NODE, "peer": _OUTSIDE_PEER}
    cand.summary = _possessive(render(cand.rule.summary, cand.values, stand_in=stand_in))
    cand.action = (
        _possessive(render(cand.rule.action, cand.values, stand_in=stand_in))
        if cand.rule.action
        else None
    )


def _possessive(text: str) -> str:
    """``{node}'s`` of a template, said of the job's nodes: "the job's nodes' kernel log"."""
    return text.replace(f"{_ANY_NODE}'s", f"{_ANY_NODE}'")


_ANY_NODE = "the job's nodes"
_OUTSIDE_PEER = "(a host outside this job)"


def _contradicted(
    cand: Candidate, job: JobRecord, coverage: Sequence[Coverage], skew: float
) -> str | None:
    """Why an unconfirmed node claim does not stand, or None.

    - It names only nodes outside the job, and no trusted source says anything of them: a
      process of the job reports on the job's own nodes, so the line was not written by Slurm
      or the driver for this job.
    - A hardware claim: every suspect node's trusted kernel log was read and recording before
      and after the claim, and shows nothing of it (the driver logs an XID, the kernel a PCIe
      or NIC error, for every such fault)."""
    if cand.outside and not cand.responsible and not cand.suspects:
        streams = ", ".join(cand.untrusted_streams) or "untrusted sources"
        return (
            f"contradicted: only {streams} name {compress(list(cand.outside))}, which is not a"
            " node of this job"
        )
    if not cand.unconfirmed or cand.rule.sub_domain is not SubDomain.HARDWARE:
        return None
    if cand.first_at is not None:
        moments = [
            cand.first_at - timedelta(seconds=skew),
            cand.first_at + timedelta(seconds=skew),
        ]
    elif job.start is not None and job.end is not None:
        moments = [job.start, job.end]
    else:
        return None
    for suspect in cand.suspects:
        if not all(recording(coverage, suspect.node, when) for when in moments):
            return None
    nodes = compress([s.node for s in cand.suspects])
    streams = ", ".join(cand.untrusted_streams) or "untrusted sources"
    return (
        f"contradicted: only {streams} claim it, and the trusted kernel log of {nodes}, recording"
        " throughout, shows no such fault"
    )


def _responsible(
    rule: DiagnosisRule, anchors: list[Event], finding: Finding | None, job: JobRecord
) -> tuple[Responsible, ...]:
    if rule.blame == "none":
        return ()
    if rule.blame == "job_nodes":
        if job.failed_node:
            return (Responsible(node=job.failed_node, component=rule.component),)
        return ()
    out: dict[str, Responsible] = {}
    if finding is not None:
        # a finding names its suspects; its events are the reporters, never to be blamed
        for node in finding.nodes:
            device = render(rule.device, finding.fields, unknown="") if rule.device else None
            out.setdefault(
                node,
                Responsible(
                    node=node,
                    component=rule.component or finding.component,
                    device=device or None,
                ),
            )
        return tuple(out.values())
    for event in sorted(anchors, key=_order_key):
        if not event.node:
            continue
        device = event.device
        if rule.device:
            device = (
                render(rule.device, {**event.fields, "device": event.device}, unknown="") or device
            )
        key = f"{event.node}\0{device or ''}"
        out.setdefault(
            key,
            Responsible(
                node=event.node, component=rule.component or event.component, device=device
            ),
        )
    return tuple(out.values())


def _values(
    rule: DiagnosisRule,
    rep: Event | None,
    anchors: list[Event],
    finding: Finding | None,
    job: JobRecord,
    responsible: tuple[Responsible, ...],
) -> dict[str, Any]:
    signal = ending_signal(job)
    values: dict[str, Any] = {
        "job_id": job.display_id,
        "state": job.state,
        "exit_code": job.exit_code,
        "user": job.user,
        "signal": signal,
        "signal_name": signal_name(signal),
    }
    if rep is not None:
        values.update(rep.fields)
        values.setdefault("rank", rep.rank)
        values.setdefault("device", rep.device)
        values["node"] = rep.node
        values["event_text"] = rep.text.strip()
        values["event_label"] = rep.label
    if finding is not None:
        values.update(finding.fields)
        values["finding"] = finding.summary
        if finding.nodes:
            values["node"] = finding.nodes[0]
    if finding is not None:
        # a finding names its nodes (the suspects); its events are the reporters
        nodes = [r.node for r in responsible] or list(finding.nodes)
    else:
        nodes = [r.node for r in responsible] or sorted({e.node for e in anchors if e.node})
    values["nodes"] = compress(nodes) if nodes else None
    values["node_count"] = len(set(nodes))
    values["count"] = sum(e.count for e in anchors) if anchors else None
    if not values.get("node") and nodes:
        values["node"] = nodes[0]
    return values


def _without_covered_fallbacks(found: list[Candidate]) -> list[Candidate]:
    """Drop a ``fallback`` rule's candidate when every event it rests on is also the
    evidence of a rule that is not a fallback (the specific rule explains it)."""
    specific = {id(e) for c in found if not c.rule.fallback for e in c.anchor_events}
    return [
        c
        for c in found
        if not (
            c.rule.fallback and c.anchor_events and all(id(e) in specific for e in c.anchor_events)
        )
    ]


def _separable(a: Candidate, b: Candidate, skew: float) -> bool:
    if a.first_at is None or b.first_at is None:
        return False
    return abs((a.first_at - b.first_at).total_seconds()) > skew


def _sort_key(c: Candidate) -> tuple[Any, ...]:
    when = c.first_at.timestamp() if c.first_at else float("inf")
    return (-c.priority, when, -Severity[c.rule.severity.upper()], c.rule.id)


def diagnose(
    rules: Sequence[DiagnosisRule],
    events: Sequence[Event],
    findings: Sequence[Finding],
    job: JobRecord,
    *,
    skew: float = 60.0,
    coverage: Sequence[Coverage] = (),
    support: Sequence[Event] = (),
    others: Sequence[Event] = (),
) -> Outcome:
    """Evaluate every diagnosis rule and rank the candidates (see the module docstring).

    ``events`` may be causes; ``support`` may only corroborate (``when.also``); ``others``
    (every event that may not be a cause: another job's, an unknown process's, forged) are
    seen only by a ``none`` condition that tests whose an event is (``where: {owner: ...}``),
    which can only keep a rule from matching. ``coverage``
    tells ``unread`` conditions which sources were not read, and whether a trusted kernel log
    was recording when an untrusted hardware claim says something happened."""
    unread = frozenset(
        (c.stream, c.node) for c in coverage if c.node and c.status in UNREAD_STATUSES
    )
    found = [
        c
        for rule in rules
        if (c := _evaluate(rule, events, findings, job, unread, support, others)) is not None
    ]
    found = _without_covered_fallbacks(found)
    candidates: list[Candidate] = []
    refuted: list[Alternative] = []
    for c in found:
        why = _contradicted(c, job, coverage, skew)
        if why is None:
            candidates.append(c)
        else:
            refuted.append(_alternative(c, why))
    if not candidates:
        return Outcome(None, [], refuted)
    candidates.sort(key=_sort_key)
    top = candidates[0]
    reasons: dict[str, str] = {}
    # time precedence: a root-band candidate clearly earlier than the top one wins, unless
    # correlation marked all its evidence downstream (a symptom that merely came first)
    # (untimed evidence counts by the timed line that follows it in its file)
    if (top_at := top.earliest_at) is not None:
        earlier = [
            c
            for c in candidates[1:]
            if c.priority >= ROOT_BAND_MIN
            and any(e.demoted_by is None for e in c.anchor_events)
            and (at := c.latest_at) is not None
            and (top_at - at).total_seconds() > skew
        ]
        if earlier:
            first = min(earlier, key=lambda c: (c.latest_at, _sort_key(c)))
            assert top.first_at is not None
            gap = int((top.first_at - (first.latest_at or top.first_at)).total_seconds())
            reasons[top.rule.id] = f"its first evidence came {gap} s after {first.rule.id}'s"
            top = first
    tied = [
        c
        for c in candidates
        if c is not top
        and c.priority == top.priority
        and c.rule.sub_domain != top.rule.sub_domain
        and not _separable(c, top, skew)
    ]
    alternatives: list[Alternative] = []
    for c in candidates:
        if c is top:
            continue
        if c.rule.id in reasons:
            why = reasons[c.rule.id]
        elif c in tied:
            why = f"fits equally (priority {c.priority}, {c.rule.sub_domain.value})"
        elif c.priority < top.priority:
            why = f"lower priority ({c.priority} < {top.priority})"
        elif c.first_at and top.first_at and c.first_at > top.first_at:
            gap = int((c.first_at - top.first_at).total_seconds())
            why = f"equal priority but its evidence came {gap} s later"
        else:
            why = "same sub_domain, ranked after the winner"
        alternatives.append(_alternative(c, why))
    return Outcome(top, tied, alternatives + refuted)


def _alternative(c: Candidate, why: str) -> Alternative:
    return Alternative(
        cause=c.cause,
        sub_domain=c.rule.sub_domain,
        responsible=c.responsible,
        summary=c.summary,
        why_not=why,
        priority=c.priority,
    )


__all__ = ["Candidate", "Outcome", "SubDomain", "diagnose"]
