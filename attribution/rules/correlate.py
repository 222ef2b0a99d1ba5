"""Correlation stage: events across nodes and time -> findings and role changes.

Five named operators (see ``CorrelationRule``): ``sequence``, ``vote``,
``straggler`` and ``outlier`` run first, in rule-id order, and may produce
findings; ``suppress`` runs last and demotes known symptoms when a candidate
root exists. Only events inside the job window (or untimed) take part.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from attribution.hostlist import compress, is_ip, short_name
from attribution.model import JOB_STREAMS, Event, EventRole, Finding, JobRecord, Standing
from attribution.rules.conditions import ROOT_ROLES, event_rank, named_nodes, selects
from attribution.rules.schema import (
    CorrelationBase,
    CorrelationRule,
    DesyncCorrelation,
    OutlierCorrelation,
    Selector,
    SequenceCorrelation,
    StragglerCorrelation,
    SuppressCorrelation,
    VoteCorrelation,
)
from attribution.rules.template import render


@dataclass(slots=True)
class Identity:
    """What the logs tell us about who is who: rank -> node, address -> node.

    Built one event at a time (``absorb``), as the events come: an ``EventCollector`` gives
    it every event, also those whose detail it does not keep, and says how many more facts
    its memory budget has room for."""

    rank_node: dict[int, str] = field(default_factory=dict)
    task_node: dict[int, str] = field(default_factory=dict)
    address_node: dict[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    rank_task: dict[int, int] = field(default_factory=dict)  # from lines carrying both
    block: tuple[int, int] | None = None  # the ranks-per-task range those pairs allow
    node_set: frozenset[str] = frozenset()  # ``nodes``, for membership
    # while absorbing one event: how many more facts may be learnt (-1: any), how many were
    # learnt and whether one was left out for want of room
    _room: int = -1
    _learnt: int = 0
    _dropped: bool = False
    _task_lists: set[tuple[str, str]] = field(default_factory=set)  # task lists learnt

    def __post_init__(self) -> None:
        if self.nodes and not self.node_set:
            self.node_set = frozenset(self.nodes)

    def infer_block_layout(self) -> None:
        """Launchers that start one agent per node (torchrun under srun) number ranks in
        blocks: rank = task * k + local rank, 0 <= local rank < k. The (rank, task) pairs seen
        on lines that carry both bound k; a rank never named is placed when every k in those
        bounds puts it on the same task. Needs pairs from at least two tasks."""
        if len(set(self.rank_task.values())) < 2:
            return
        low = max(r // (t + 1) + 1 for r, t in self.rank_task.items())
        high = min(r // t for r, t in self.rank_task.items() if t > 0)
        if low <= high:
            self.block = (low, high)

    def node_of_rank(self, rank: int) -> str | None:
        """The node of a global rank: named on a line, or placed by the block layout."""
        if rank in self.rank_node:
            return self.rank_node[rank]
        if rank in self.rank_task:
            return self.task_node.get(self.rank_task[rank])
        if self.block is not None:
            low, high = self.block
            tasks = {rank // k for k in range(low, min(high, low + 4096) + 1)}
            if len(tasks) == 1 and high <= low + 4096:
                return self.task_node.get(tasks.pop())
        return None

    def node_for_peer(self, value: str) -> str | None:
        """The node a peer string (IP, ``host<port>``, FQDN) refers to, if we can tell."""
        if not value:
            return None
        text = value.strip().split("<", 1)[0].strip("[]")
        if text.startswith("::ffff:"):
            text = text[7:]
        if text in self.address_node:
            return self.address_node[text]
        if is_ip(text):
            return None
        name = short_name(text)
        if not self.nodes or name in self.node_set:
            return name
        return None

    def _put(self, mapping: dict[Any, Any], key: Any, value: Any) -> bool:
        """``mapping.setdefault(key, value)`` while there is room; False once there is none."""
        if key in mapping:
            return True
        if self._room == 0:
            self._dropped = True
            return False
        mapping[key] = value
        self._learnt += 1
        if self._room > 0:
            self._room -= 1
        return True

    @staticmethod
    def tells(event: Event) -> bool:
        """Does ``event`` carry anything ``absorb`` learns from?"""
        fields = event.fields
        return (
            event.task is not None
            or event.name.startswith("identity.")
            or "tasks" in fields
            or ("host" in fields and "rank" in fields)
        )

    def absorb(self, event: Event, room: int = -1) -> tuple[int, bool]:
        """Learn what ``event`` tells of who is who, at most ``room`` new facts (-1: any).
        Returns how many facts were learnt and whether any was left out for want of room."""
        self._room, self._learnt, self._dropped = room, 0, False
        if event.name.startswith("identity."):
            self.learn(event)
        elif "tasks" in event.fields:
            self.learn_tasks(event)
        elif "host" in event.fields and "rank" in event.fields:
            self.learn_named_rank(event)
        if event.task is not None and event.node and event.stream in JOB_STREAMS:
            # a line carrying both an srun task label and its own host (NCCL prefix)
            self._put(self.task_node, event.task, event.node)
        if event.task is not None and event.rank is not None:
            self._put(self.rank_task, event.rank, event.task)
        return self._learnt, self._dropped

    def learn(self, event: Event) -> None:
        """Record identity facts carried by an ``identity.*`` event."""
        host = event.fields.get("host") or event.node
        if not host:
            return
        node = short_name(str(host))
        rank = event.fields.get("rank", event.rank)
        if event.name == "identity.rank" and rank is not None:
            try:
                self._put(self.rank_node, int(rank), node)
            except (TypeError, ValueError):
                return
        elif event.name == "identity.address" and event.fields.get("ip"):
            self._put(self.address_node, str(event.fields["ip"]), node)

    def learn_named_rank(self, event: Event) -> None:
        """A summary line that names a rank's host (torchrun's "host : H / rank : R" block)."""
        host, rank = event.fields.get("host"), event.fields.get("rank")
        if host and isinstance(rank, int):
            self._put(self.rank_node, rank, short_name(str(host)))

    def learn_tasks(self, event: Event) -> None:
        """srun names the node of a task range ("srun: error: node7: tasks 8-15: ...")."""
        tasks = event.fields.get("tasks")
        if not tasks or not event.node:
            return
        seen = (str(tasks), event.node)
        if seen in self._task_lists:
            return  # every task srun repeats a line for: learnt once
        for task in expand_ranges(str(tasks)):
            if not self._put(self.task_node, task, event.node):
                return
        if len(self._task_lists) >= 4096:
            self._task_lists.clear()
        self._task_lists.add(seen)

    def node_of(self, event: Event) -> str | None:
        """The node an event with no node of its own came from, by rank or task id."""
        if event.task is not None and event.task in self.task_node:
            return self.task_node[event.task]
        if event.rank is not None:
            return self.node_of_rank(event.rank)
        return None


def expand_ranges(text: str, limit: int = 100_000) -> list[int]:
    """``"0,4-7"`` -> ``[0, 4, 5, 6, 7]`` (at most ``limit`` numbers; junk is skipped)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdecimal() or (hi and not hi.isdecimal()):
            continue
        first, last = int(lo), int(hi) if hi else int(lo)
        out.extend(range(first, min(last, first + limit) + 1))
        if len(out) >= limit:
            break
    return out[:limit]


def job_identity(job: JobRecord) -> Identity:
    """What the job record tells: its nodes and their addresses (before any log line)."""
    identity = Identity(nodes=job.nodes)
    for node, addresses in job.node_addresses.items():
        for address in addresses:
            identity.address_node.setdefault(address, node)
    return identity


def build_identity(job: JobRecord, events: Iterable[Event]) -> Identity:
    identity = job_identity(job)
    for event in events:
        identity.absorb(event)
    identity.infer_block_layout()
    return identity


def _time_ok(cause: Event, effect: Event, rule: SequenceCorrelation) -> bool:
    if rule.within_lines is not None:
        # position in one file decides (a traceback belongs to the header above it)
        if cause.source.path != effect.source.path:
            return False
        gap = effect.source.line - cause.source.line
        return 0 <= gap <= rule.within_lines if cause.source.line else False
    if cause.time is None or effect.time is None:
        if rule.within is None:
            return True
        # untimed: only trust the order of lines inside one file
        if cause.source.path != effect.source.path:
            return False
        if rule.order == "after":
            return effect.source.line >= cause.source.line
        if rule.order == "before":
            return effect.source.line <= cause.source.line
        return True
    delta = (effect.time - cause.time).total_seconds()
    if rule.order == "after" and delta < 0:
        return False
    if rule.order == "before" and delta > 0:
        return False
    return rule.within is None or abs(delta) <= rule.within


def _distance(cause: Event, effect: Event) -> tuple[float, int]:
    if cause.source.path == effect.source.path and cause.source.line and effect.source.line:
        return (0.0, abs(effect.source.line - cause.source.line))
    if cause.time is not None and effect.time is not None:
        return (abs((effect.time - cause.time).total_seconds()), 0)
    return (float("inf"), effect.seq)


def _named(event: Event) -> frozenset[str]:
    """The nodes an event is about: its node, or each node its line names when it names
    several (a host list, ``named_nodes``)."""
    if event.node is not None:
        return frozenset((event.node,))
    return frozenset(named_nodes(event))


def _explains_all(causes: Sequence[Event], effect: Event, job_nodes: frozenset[str]) -> bool:
    """``nodes: named``: a line about several of the job's nodes pairs only when each of them
    has a cause of its own (an OOM on one of two nodes lost in one line explains one loss, not
    the line)."""
    wanted = _named(effect) & job_nodes if job_nodes else _named(effect)
    return bool(causes) and wanted <= {n for cause in causes for n in _named(cause)}


def _nodes_ok(cause: Event, effect: Event, relation: str) -> bool:
    if relation == "same":
        return cause.node is not None and cause.node == effect.node
    if relation == "named":
        return bool(_named(cause) & _named(effect))
    if relation == "other":
        return cause.node != effect.node
    return True


def _mark(event: Event, role: str, rule: CorrelationBase) -> None:
    if role == "downstream":
        event.demoted_by = event.demoted_by or rule.ref
    elif role == "context":
        event.context_by = event.context_by or rule.ref
    elif role == "root":
        event.role = EventRole.ROOT


def _cause_index(
    rule: SequenceCorrelation, causes: Sequence[Event]
) -> Callable[[Event], Iterable[int]]:
    """Which of ``causes`` (their positions, in order) may pair with an effect: those a few
    lines above it in its file (``within_lines``), on its node (``nodes: same``), else all.
    Only a pre-selection: ``_sequence`` still checks each pair, so a flood of thousands of
    causes and effects costs thousands of checks, not millions."""
    if rule.within_lines is not None:
        lines: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, cause in enumerate(causes):
            if cause.source.line:
                lines[cause.source.path].append((cause.source.line, i))
        for rows in lines.values():
            rows.sort()
        reach = rule.within_lines

        def above(effect: Event) -> Iterable[int]:
            rows = lines.get(effect.source.path)
            if not rows:
                return ()
            at = effect.source.line
            lo = bisect_left(rows, (at - reach, -1))
            hi = bisect_right(rows, (at, len(causes)))
            return sorted(i for _, i in rows[lo:hi])

        return above
    if rule.nodes == "same":
        nodes: dict[str, list[int]] = defaultdict(list)
        for i, cause in enumerate(causes):
            if cause.node is not None:
                nodes[cause.node].append(i)
        return lambda effect: nodes.get(effect.node, ()) if effect.node is not None else ()
    if rule.nodes == "named":
        named: dict[str, list[int]] = defaultdict(list)
        for i, cause in enumerate(causes):
            for node in _named(cause):
                named[node].append(i)
        return lambda effect: sorted({i for n in _named(effect) for i in named.get(n, ())})
    every = range(len(causes))
    return lambda _effect: every


def _sequence(
    rule: SequenceCorrelation, events: Sequence[Event], job_nodes: frozenset[str] = frozenset()
) -> list[Finding]:
    causes = [e for e in events if selects(rule.cause, e)]
    effects = [e for e in events if selects(rule.effect, e)]
    paired: dict[int, list[Event]] = defaultdict(list)
    cause_by_seq = {}
    candidates = _cause_index(rule, causes)
    for effect in effects if causes else ():
        fits = [
            cause
            for i in candidates(effect)
            if (cause := causes[i]) is not effect
            and _nodes_ok(cause, effect, rule.nodes)
            and _time_ok(cause, effect, rule)
        ]
        if rule.nodes == "named" and not _explains_all(fits, effect, job_nodes):
            continue
        for cause in fits:
            paired[cause.seq].append(effect)
            cause_by_seq[cause.seq] = cause
    if rule.nearest:
        for seq, matched in paired.items():
            paired[seq] = [min(matched, key=lambda e: _distance(cause_by_seq[seq], e))]
    findings: list[Finding] = []
    per_node: dict[str | None, list[Event]] = defaultdict(list)
    for seq, matched in paired.items():
        cause = cause_by_seq[seq]
        if "cause" in rule.mark:
            _mark(cause, rule.mark["cause"], rule)
        if "effect" in rule.mark:
            for effect in matched:
                _mark(effect, rule.mark["effect"], rule)
        per_node[cause.node].extend([cause, *matched])
    if rule.finding:
        for node, grouped in per_node.items():
            first = min(grouped, key=_order_key)
            findings.append(_finding(rule, (node,) if node else (), grouped, first.fields, first))
    return findings


def _order_key(event: Event) -> tuple[int, datetime | float, int]:
    if event.time is None:
        return (1, 0.0, event.seq)
    return (0, event.time, event.seq)


def _finding(
    rule: CorrelationBase,
    nodes: tuple[str, ...],
    events: list[Event],
    fields: dict[str, object],
    first: Event | None,
) -> Finding:
    assert rule.finding is not None
    values = {**fields, "node": nodes[0] if nodes else None, "nodes": ",".join(nodes)}
    summary = render(rule.summary or rule.title, values)
    return Finding(
        name=rule.finding,
        rule=rule.ref,
        nodes=nodes,
        fields=dict(fields),
        events=events,
        time=first.time if first else None,
        summary=summary,
        device=first.device if first else None,
        component=first.component if first else None,
    )


def _is_node(peer: str, identity: Identity) -> bool:
    """A resolved peer is a node name; an unmapped address or rank is not."""
    if is_ip(peer) or peer.startswith("rank "):
        return False
    return not identity.nodes or peer in identity.nodes


def _vote(rule: VoteCorrelation, events: Sequence[Event], identity: Identity) -> list[Finding]:
    voters: dict[str, set[str]] = defaultdict(set)
    votes: dict[str, int] = defaultdict(int)
    raw: dict[str, str] = {}
    members: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if not selects(rule.select, event):
            continue
        value = event.fields.get(rule.field)
        if value is None or value == "":
            continue
        if rule.peer_kind == "rank":
            try:
                peer = identity.node_of_rank(int(value)) or f"rank {int(value)}"
            except (TypeError, ValueError):
                continue
        else:
            peer = identity.node_for_peer(str(value)) or str(value).split("<", 1)[0]
        if peer == event.node:
            continue
        voters[peer].add(event.node or f"rank{event.rank}")
        votes[peer] += event.count
        raw.setdefault(peer, str(value))
        members[peer].append(event)
    if not voters:
        return []
    best = max(len(v) for v in voters.values())
    if best < rule.min_voters:
        return []
    winners = sorted(p for p, v in voters.items() if len(v) == best)
    if len(winners) > rule.max_suspects:
        return []
    findings = []
    for peer in winners:
        fields = {
            "peer": peer,
            "peer_address": raw[peer],
            "voters": len(voters[peer]),
            "votes": votes[peer],
            "peer_is_node": _is_node(peer, identity),
        }
        group = members[peer]
        first = min(group, key=_order_key)
        nodes = (peer,) if _is_node(peer, identity) else ()
        findings.append(_finding(rule, nodes, group, fields, first))
    return findings


def _ranked(
    rule: StragglerCorrelation | DesyncCorrelation, events: Sequence[Event]
) -> Iterator[tuple[Event, int]]:
    """The events the rule selects whose rank is known, with that rank."""
    for event in events:
        if selects(rule.select, event) and (rank := event_rank(event)) is not None:
            yield event, rank


def _straggler(
    rule: StragglerCorrelation, events: Sequence[Event], identity: Identity
) -> list[Finding]:
    failing = -1
    enqueued: dict[int, int] = {}
    node_of: dict[int, str | None] = {}
    members: list[Event] = []
    for event, rank in _ranked(rule, events):
        members.append(event)
        seq = event.fields.get("seq")
        if seq is not None:
            failing = max(failing, int(seq))
        enq = event.fields.get("last_enqueued")
        if enq is not None:
            enqueued[rank] = max(enqueued.get(rank, -1), int(enq))
        node_of.setdefault(rank, event.node or identity.rank_node.get(rank))
    if failing < 0 or not enqueued:
        return []
    stragglers = sorted(r for r, enq in enqueued.items() if enq < failing)
    if not stragglers or (len(stragglers) == len(enqueued) and len(enqueued) > 1):
        return []
    nodes = tuple(dict.fromkeys(n for r in stragglers if (n := node_of.get(r)) is not None))
    fields = {
        "ranks": ",".join(str(r) for r in stragglers),
        "rank": stragglers[0],
        "seq": failing,
        "last_enqueued": enqueued[stragglers[0]],
        "reporting_ranks": len(enqueued),
    }
    first = min(members, key=_order_key) if members else None
    return [_finding(rule, nodes, members, fields, first)]


#: ranks this many collectives apart or more are not one process group out of step
MAX_DESYNC_SPREAD = 8


def _desync(rule: DesyncCorrelation, events: Sequence[Event], identity: Identity) -> list[Finding]:
    """Ranks that timed out in different collectives: each rank's (``seq``, ``op``) from its
    timeout report; two or more distinct ones among two or more ranks is a finding. The
    ranks in the smallest group are named (the odd ones out), their nodes are the finding's.
    A rank reporting two collectives, or sequence numbers further apart than
    ``MAX_DESYNC_SPREAD``, means several process groups: no finding."""
    waiting: dict[int, tuple[int, str]] = {}
    node_of: dict[int, str | None] = {}
    members: list[Event] = []
    for event, rank in _ranked(rule, events):
        seq = event.fields.get("seq")
        if seq is None:
            continue
        members.append(event)
        key = (int(seq), str(event.fields.get("op") or "").upper())
        if waiting.setdefault(rank, key) != key:
            # one rank timing out in several collectives: several process groups (whose
            # sequence numbers are their own) or a group-local rank number; no verdict
            return []
        node_of.setdefault(rank, event.node or identity.rank_node.get(rank))
    seqs = {seq for seq, _ in waiting.values()}
    if seqs and max(seqs) - min(seqs) > MAX_DESYNC_SPREAD:
        return []  # so far apart they count different process groups' collectives
    groups: dict[tuple[int, str], list[int]] = {}
    for rank, key in sorted(waiting.items()):
        groups.setdefault(key, []).append(rank)
    if len(groups) < 2:
        return []
    odd_key, odd = min(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))
    nodes = tuple(dict.fromkeys(n for r in odd if (n := node_of.get(r)) is not None))
    fields = {
        "ranks": ",".join(map(str, odd)),
        "rank": odd[0],
        "seq": odd_key[0],
        "op": odd_key[1],
        "collectives": "; ".join(
            f"#{seq} {op or '?'} on rank(s) {','.join(map(str, ranks))}"
            for (seq, op), ranks in sorted(groups.items())
        ),
        "reporting_ranks": len(waiting),
    }
    first = min(members, key=_order_key)
    return [_finding(rule, nodes, members, fields, first)]


def _outlier(rule: OutlierCorrelation, events: Sequence[Event], job: JobRecord) -> list[Finding]:
    chosen = [e for e in events if selects(rule.select, e) and e.node]
    if not chosen:
        return []
    job_nodes = set(job.nodes) or {e.node for e in events if e.node}
    if len(job_nodes) < rule.min_job_nodes:
        return []
    if rule.field:
        return _outlier_value(rule, chosen, job_nodes)
    nodes = tuple(dict.fromkeys(e.node for e in sorted(chosen, key=_order_key) if e.node))
    if len(nodes) > rule.max_nodes:
        return []
    fields = {"job_nodes": len(job_nodes), "outlier_nodes": len(nodes)}
    first = min(chosen, key=_order_key)
    return [_finding(rule, nodes, chosen, {**first.fields, **fields}, first)]


def _outlier_value(
    rule: OutlierCorrelation, chosen: list[Event], job_nodes: set[str]
) -> list[Finding]:
    """Nodes whose ``field`` differs from what most nodes report (at most ``max_nodes`` of them,
    and fewer than the nodes that agree). With ``split``, nodes that disagree without a few
    standing out give a finding that names no node."""
    assert rule.field is not None
    values: dict[str, set[str]] = defaultdict(set)
    for e in chosen:
        value = e.fields.get(rule.field)
        if e.node and value is not None and value != "":
            values[e.node].add(str(value))
    per_value: dict[str, set[str]] = defaultdict(set)
    for node, seen in values.items():
        for value in seen:
            per_value[value].add(node)
    if len(per_value) < 2:
        return []
    common, agreeing = max(per_value.items(), key=lambda kv: (len(kv[1]), kv[0]))
    odd = sorted(n for n, seen in values.items() if seen != {common})
    if odd and rule.split and (len(odd) > rule.max_nodes or len(agreeing) <= len(odd)):
        # the nodes disagree but no few of them stand out: the disagreement is the finding,
        # with no node singled out
        fields: dict[str, object] = {
            rule.field: "; ".join(
                f"{v} on {compress(sorted(ns))}" for v, ns in sorted(per_value.items())
            ),
            "common_value": None,
            "job_nodes": len(job_nodes),
            "outlier_nodes": 0,
        }
        return [_finding(rule, (), chosen, fields, min(chosen, key=_order_key))]
    if not odd or len(odd) > rule.max_nodes or len(agreeing) <= len(odd):
        return []
    members = [e for e in chosen if e.node in odd]
    first = min(members, key=_order_key)
    fields = {
        rule.field: ", ".join(sorted({v for n in odd for v in values[n]})),
        "common_value": common,
        "job_nodes": len(job_nodes),
        "outlier_nodes": len(odd),
    }
    return [_finding(rule, tuple(odd), members, fields, first)]


def _suppress(rule: SuppressCorrelation, events: Sequence[Event], skew: float) -> None:
    def is_symptom(event: Event) -> bool:
        return any(selects(s, event) for s in rule.symptoms)

    # only events that may be causes can be roots (not what was logged before the job started)
    if rule.roots:
        roots = [
            e
            for e in events
            if e.standing is Standing.CAUSE and any(selects(r, e) for r in rule.roots)
        ]
    else:
        roots = [
            e
            for e in events
            if e.role in ROOT_ROLES
            and e.standing is Standing.CAUSE
            and not e.demoted_by
            and not e.context_by
            and not e.name.startswith("identity.")
            and not is_symptom(e)
        ]
    if not roots:
        return
    by_node: dict[str | None, list[Event]] = defaultdict(list)
    if rule.scope == "node":  # only a root of the symptom's own node can explain it
        for root in roots:
            by_node[root.node].append(root)
    for event in events:
        if event.demoted_by or not is_symptom(event):
            continue
        for root in by_node.get(event.node, ()) if rule.scope == "node" else roots:
            if root is event:
                continue
            if rule.scope == "node" and root.node != event.node:
                continue
            later = root.time is not None and event.time is not None
            if later and (root.time - event.time).total_seconds() > skew:  # type: ignore[operator]
                continue  # the "root" came clearly later: it cannot explain this
            event.demoted_by = rule.ref
            break


def correlate(
    rules: Sequence[CorrelationRule],
    events: Sequence[Event],
    job: JobRecord,
    identity: Identity,
    *,
    skew: float = 60.0,
) -> list[Finding]:
    """Run correlation rules over in-window events; mutates event roles, returns findings."""
    findings: list[Finding] = []
    ordered = sorted(rules, key=lambda r: (r.op == "suppress", r.id))
    for rule in ordered:
        if isinstance(rule, SequenceCorrelation):
            findings.extend(_sequence(rule, events, frozenset(job.nodes)))
        elif isinstance(rule, VoteCorrelation):
            findings.extend(_vote(rule, events, identity))
        elif isinstance(rule, StragglerCorrelation):
            findings.extend(_straggler(rule, events, identity))
        elif isinstance(rule, DesyncCorrelation):
            findings.extend(_desync(rule, events, identity))
        elif isinstance(rule, OutlierCorrelation):
            findings.extend(_outlier(rule, events, job))
        else:
            _suppress(rule, events, skew)
    return findings


def selector_events(selector: Selector, events: Iterable[Event]) -> list[Event]:
    return [e for e in events if selects(selector, e)]
