"""Extractor stage: ``LogLine`` -> ``Event``.

Per stream, one alternation of every extractor's literals runs first; only the
extractors whose literal occurs in the line run their regex. Repeats are folded
(``EventCollector``) so that a node logging the same line 800,000 times costs a
few events with a count, not 800,000 objects.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

import ahocorasick
from humanfriendly import InvalidSize, parse_size

from attribution.hostlist import HostlistError, expand, short_name
from attribution.model import (
    DEFAULT_TRUST,
    JOB_STREAMS,
    Event,
    EventRole,
    LogLine,
    Severity,
    Stream,
    Trust,
)
from attribution.rules.compiled import CompiledExtractor, RuleSet
from attribution.rules.correlate import Identity
from attribution.rules.schema import FieldSpec
from attribution.rules.template import placeholders, render
from attribution.timeutil import parse_iso

MAX_TEXT = 600
MAX_FIELD = 4096  # characters of one field value kept (the rest cut, like ``MAX_TEXT``)
REGEX_BUDGET = 0.25  # seconds one extractor's regex may spend on one line
_UNSEEN = object()
MAX_RULE_TIMEOUTS = 20  # lines one extractor may run out of time on before it is given up (5 s),
# counted apart for the streams users can write and the trusted ones
_NCCL_INFO = "NCCL INFO "
_SIZE = re.compile(r"\d+(?:\.\d+)?\s*(?:[KMGTPE]i?B?|B|bytes?)?", re.IGNORECASE)
_ROLE_VALUES = frozenset(r.value for r in EventRole)
_DEFAULT_TRUSTED = {stream: trust is Trust.TRUSTED for stream, trust in DEFAULT_TRUST.items()}


def _convert(value: str | None, spec: FieldSpec) -> Any:
    if value is None:
        return spec.default
    value = value.strip()
    try:
        if spec.type in ("int", "hex"):
            number = int(value, 16 if spec.type == "hex" else 10)
            if spec.bits is not None:
                lo, hi = spec.bits
                number = (number >> lo) & ((1 << (hi - lo + 1)) - 1)
            return number
        if spec.type == "float":
            return float(value)
        if spec.type == "bytes":
            if not _SIZE.fullmatch(value):  # humanfriendly ignores a unit it does not know
                raise ValueError(value)
            return int(parse_size(value))
    except (ValueError, OverflowError, InvalidSize):  # OverflowError: "1e400 GB"
        return spec.default if spec.default is not None else value
    if spec.type == "lower":
        return value.lower()
    if spec.type == "upper":
        return value.upper()
    return value


def _ratio(top: Any, bottom: Any) -> float | None:
    numbers = (top, bottom)
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
        return None
    return round(top / bottom, 4) if bottom else None


@dataclass(slots=True)
class _StreamMatcher:
    """Aho-Corasick automata over one stream's extractor literals (exact, and lower-cased for
    ``ignore_case`` extractors); each literal maps to the extractors that listed it."""

    exact: Any  # ahocorasick.Automaton or None
    folded: Any
    extractors: list[CompiledExtractor]
    max_continuation: int


def _automaton(words: dict[str, set[int]]) -> Any:
    if not words:
        return None
    automaton = ahocorasick.Automaton()
    for word, owners in words.items():
        automaton.add_word(word, tuple(sorted(owners)))
    automaton.make_automaton()
    return automaton


def _build_matcher(
    extractors: Sequence[CompiledExtractor], order: dict[str, int]
) -> _StreamMatcher:
    exact: dict[str, set[int]] = defaultdict(set)
    folded: dict[str, set[int]] = defaultdict(set)
    for ex in extractors:
        index = order[ex.id]
        if ex.rule.match.ignore_case:
            for lit in ex.literals_folded:
                folded[lit].add(index)
        else:
            for lit in ex.literals:
                exact[lit].add(index)
    return _StreamMatcher(
        exact=_automaton(exact),
        folded=_automaton(folded),
        extractors=list(extractors),
        max_continuation=max((ex.rule.match.continuation for ex in extractors), default=0),
    )


class Extractor:
    """Runs a ruleset's extractors over log lines.

    ``candidates(line)`` is the pre-filter (which extractors may match);
    ``extract(line, following)`` returns the events for one line, where
    ``following`` supplies continuation lines for multi-line extractors.
    """

    def __init__(self, ruleset: RuleSet, *, tz: tzinfo = UTC) -> None:
        self.ruleset = ruleset
        self.tz = tz
        self._order = {ex.id: i for i, ex in enumerate(ruleset.extractors)}
        self._by_index = list(ruleset.extractors)
        self.timeouts: dict[tuple[Stream, str | None, str], int] = defaultdict(int)
        # per extractor, apart for the streams users can write and those they cannot: a user's
        # slow lines must not use up the budget of a trusted log (nor grow with the node count)
        self._timeouts_by_rule: dict[tuple[str, bool], int] = defaultdict(int)
        # the regex result per (extractor, message text): a job repeats its messages (a million
        # ranks print the same NCCL error), and a match object can be read again
        self._matches: dict[tuple[str, str], Any] = {}
        self._severity: dict[str, Severity] = {}
        self._cleared_by = {ex.id: tuple(ex.rule.emit.cleared_by) for ex in ruleset.extractors}
        self._refs = {ex.id: ex.rule.ref for ex in ruleset.extractors}  # one string each
        self._label_names: dict[str, tuple[str, ...]] = {}
        self._labels: dict[tuple[Any, ...], str] = {}
        self._matchers: dict[Stream, _StreamMatcher] = {}
        for stream in Stream:
            chosen = [ex for ex in ruleset.extractors if stream in ex.streams]
            self._matchers[stream] = _build_matcher(chosen, self._order)

    def max_continuation(self, stream: Stream) -> int:
        return self._matchers[stream].max_continuation

    def candidates(self, stream: Stream, text: str) -> list[CompiledExtractor]:
        """Extractors whose literal occurs in ``text`` (ruleset order, no repeats)."""
        matcher = self._matchers[stream]
        found: set[int] = set()
        if matcher.exact is not None:
            for _, owners in matcher.exact.iter(text):
                found.update(owners)
        if matcher.folded is not None:
            for _, owners in matcher.folded.iter(text.lower()):
                found.update(owners)
        return [self._by_index[i] for i in sorted(found)]

    def extract(self, line: LogLine, following: Sequence[LogLine] = ()) -> list[Event]:
        """Events for one line. Fallback extractors are dropped when a specific one matched.

        ``following`` are the lines read after it (only those that directly follow it in
        the same file are joined, and only for multi-line extractors)."""
        found: list[tuple[bool, Event]] = []
        adjacent: list[LogLine] | None = None
        # NCCL_DEBUG=INFO output reports what NCCL tried ("Plugin load returned 2 : libnccl-net.so:
        # cannot open shared object file") and is never an error; only extractors written for
        # INFO lines read them
        info = _NCCL_INFO in line.text
        for ex in self.candidates(line.stream, line.text):
            if info and not ex.reads_info:
                continue
            allowed = ex.rule.match.ident
            if allowed and line.ident and line.ident not in allowed:
                continue  # e.g. "NVRM: Xid ..." written to syslog by a user's logger
            budget = (ex.id, _DEFAULT_TRUSTED.get(line.stream, False))
            if self._timeouts_by_rule[budget] >= MAX_RULE_TIMEOUTS:
                self.timeouts[(line.stream, line.node, ex.id)] += 1  # given up on for this job
                continue
            text = line.text
            if ex.rule.match.continuation and following:
                if adjacent is None:
                    adjacent = _adjacent(line, following)
                extra = [f.text for f in adjacent[: ex.rule.match.continuation]]
                text = "\n".join([text, *extra])
            key = (ex.id, text)
            m = self._matches.get(key, _UNSEEN)
            if m is _UNSEEN:
                try:
                    m = ex.regex.search(text, timeout=REGEX_BUDGET)
                except TimeoutError:
                    # a pattern that backtracks badly on this line: skip it, say so in coverage
                    self.timeouts[(line.stream, line.node, ex.id)] += 1
                    self._timeouts_by_rule[budget] += 1
                    continue
                if len(text) <= 512:  # a match keeps its text alive: short messages only
                    if len(self._matches) >= 4096:
                        self._matches.clear()
                    self._matches[key] = m
            if m is None:
                continue
            found.append((ex.rule.emit.fallback, self._event(ex, m, line)))
        if any(not fallback for fallback, _ in found):
            return [event for fallback, event in found if not fallback]
        return [event for _, event in found]

    def _label(self, template: str, values: dict[str, Any]) -> str:
        """``render`` with a bounded cache: repeated lines give the same label."""
        names = self._label_names.get(template)
        if names is None:
            names = self._label_names[template] = tuple(placeholders(template))
        key = (template, *(values.get(n) for n in names))
        try:
            label = self._labels.get(key)
        except TypeError:  # an unhashable field value
            return render(template, values)
        if label is None:
            if len(self._labels) >= 4096:
                self._labels.clear()
            label = self._labels[key] = render(template, values)
        return label

    def _event(self, ex: CompiledExtractor, m: Any, line: LogLine) -> Event:
        emit = ex.rule.emit
        fields: dict[str, Any] = {}
        ratios: list[tuple[str, tuple[str, str]]] = []
        for name, spec in ex.fields.items():
            if spec.ratio is not None:
                ratios.append((name, spec.ratio))
            elif spec.group is None:
                fields[name] = spec.value
            elif isinstance(spec.group, str):
                fields[name] = _convert(m.group(spec.group), spec)
            else:
                found = next((g for g in spec.group if m.group(g) is not None), None)
                fields[name] = _convert(m.group(found) if found else None, spec)
        for name, (top, bottom) in ratios:
            fields[name] = _ratio(fields.get(top), fields.get(bottom))
        for name, value in fields.items():
            if isinstance(value, str):
                # a flood repeats its peers and states: one copy of each short value; a long
                # one is cut (the line may be 64 KiB)
                if len(value) <= 64:
                    fields[name] = sys.intern(value)
                elif len(value) > MAX_FIELD:
                    fields[name] = value[:MAX_FIELD] + "…"
        role = emit.role
        persists = emit.persists
        severity = self._severity.get(ex.id)
        if severity is None:
            severity = self._severity[ex.id] = ex.rule.severity_level
        if emit.lookup is not None and ex.table is not None:
            row = ex.table.get(str(fields.get(emit.lookup.key)))
            if row is not None:
                for column, value in row.items():
                    if column != emit.lookup.key or emit.lookup.prefix:
                        fields[sys.intern(emit.lookup.prefix + column)] = value
                wanted = row.get(emit.lookup.role_from) if emit.lookup.role_from else None
                if wanted in _ROLE_VALUES:
                    role = EventRole(wanted)
                if emit.lookup.severity_from and row.get(emit.lookup.severity_from):
                    sev = str(row[emit.lookup.severity_from]).upper()
                    if sev in Severity.__members__:
                        severity = Severity[sev]
                if emit.lookup.persists_from:
                    persists = persists or row.get(emit.lookup.persists_from) is True
        # the line's own identity, unless the rule extracted a field of the same name
        values = {"node": line.node, "host": line.host, "rank": line.rank, **fields}
        node = line.node
        named = ""
        if emit.node:
            named = render(emit.node, values, unknown="")
            if named and ("[" in named or "," in named):
                # a host list ("c[013-014,023-024]", "a,b"): one node is that node; several
                # name no single node (the rule sees them in ``named_nodes``)
                try:
                    listed = expand(named)
                except HostlistError:
                    listed = ()
                node = short_name(listed[0]) if len(listed) == 1 else None
                if len(listed) > 1:
                    fields["named_nodes"] = ",".join(short_name(n) for n in listed)
            elif named:
                node = short_name(named)
        elif line.host and line.stream in (Stream.JOB_STDOUT, Stream.JOB_STDERR):
            node = short_name(line.host)
        rank = line.rank
        if emit.rank and fields.get(emit.rank) is not None:
            with contextlib.suppress(TypeError, ValueError):
                rank = int(fields[emit.rank])
        # the NCCL prefix's [n] is a CUDA device index: only meaningful for GPU events
        line_device = line.device if emit.component == "gpu" else None
        device = render(emit.device, values, unknown="") or None if emit.device else line_device
        when = line.time
        if when is None and emit.time_field and fields.get(emit.time_field):
            when = parse_iso(str(fields[emit.time_field]), self.tz)
        text = line.text if len(line.text) <= MAX_TEXT else line.text[:MAX_TEXT] + "…"
        if node is not None:
            node = sys.intern(node)
        return Event(
            name=emit.event,
            rule=self._refs[ex.id],
            stream=line.stream,
            node=node,
            time=when,
            fields=fields,
            source=line.source,
            text=text,
            role=role,
            label=self._label(emit.label, {**values, "node": node}),
            severity=severity,
            rank=rank,
            device=device,
            component=emit.component,
            task=line.task,
            persists=persists,
            cleared_by=self._cleared_by[ex.id],
            reported_late=emit.reported_late,
            scope=emit.scope,
            ident=line.ident,
            trusted=line.trusted if line.trusted is not None else _DEFAULT_TRUSTED[line.stream],
            named=bool(named),
        )


# The job-wide memory bound (docs/performance.md, "Bounded memory"): what a kept event costs is
# estimated, and the events of one job may cost at most ``budget`` bytes in all.
EVENT_COST = 1024  # an event beyond its strings: the object, its fields dict, keys, list slots
FIELD_COST = 64  # one field beyond its string's characters
FACT_COST = 128  # one learnt identity fact (rank -> node, task -> node, ...) or job pid
TRUSTED_RESERVE = 4  # 1/4 of the budget only trusted sources' events may use
RULE_SHARE = 4  # one extractor keeps at most 1/4 of what its side may use
RULE_FLOOR = 16  # each extractor's first events of each side are kept even over the budget
FOLDED_PLACES = 4096  # (stream, node) places ``folded_beyond`` names before it says "any node"
_FACTS = "identity facts"  # the budget's name for what ``Identity`` learns
_PIDS = "job pids"


def event_cost(event: Event) -> int:
    """What keeping ``event`` is estimated to cost, in bytes (``EventCollector`` budget)."""
    cost = EVENT_COST + len(event.text)
    for value in event.fields.values():
        cost += FIELD_COST + (len(value) if isinstance(value, str) else 0)
    return cost


class EventCollector:
    """Keeps events with bounded memory: identical repeats are folded into a count.

    Per (extractor, node, rank, task, identity fields) at most ``per_key`` events
    are kept; per (extractor, node, rank, task) at most ``per_rule_node`` distinct
    field combinations; per (extractor, node) at most ``per_rule_ranks`` distinct
    ranks/tasks; at most ``max_events`` in all, whose estimated size (``event_cost``) is at
    most ``budget`` bytes. Of the budget, untrusted sources' events (job output, general
    syslog) may use three quarters and trusted sources' all of it, so that job output never
    crowds out node-side evidence; one extractor keeps at most a quarter of what its side may
    use (but its first event on each of the job's nodes only counts against the side's), and
    its first ``RULE_FLOOR`` events of each side are kept whatever the budget (so a flood of
    one message cannot hide a root cause printed after it). Anything beyond is added
    to the count of the last kept event of that key (or of that extractor on that node), so
    counts and first/last times stay exact while memory stays bounded. ``folded_beyond``
    counts, per (stream, node), the events folded by the bounds other than ``per_key``: their
    rank and field detail is lost, and ``analyze`` says so in coverage.

    ``identity`` (see ``correlate.Identity``) learns who is who from every event as it comes,
    folded or not, within the same budget; ``identity.*`` events are not kept. ``pids`` are
    the processes that printed the job's own output (``note_pid``), within the budget too.
    """

    def __init__(
        self,
        ruleset: RuleSet,
        *,
        window: tuple[datetime | None, datetime | None] = (None, None),
        span: tuple[datetime | None, datetime | None] = (None, None),
        per_key: int = 3,
        per_rule_node: int = 64,
        per_rule_ranks: int = 16_384,
        max_events: int = 500_000,
        budget: int = 48 << 20,
        dedupe_memory: int = 100_000,
        identity: Identity | None = None,
    ) -> None:
        self._group_by: dict[str, list[str] | None] = {
            ex.rule.ref: ex.rule.emit.group_by for ex in ruleset.extractors
        }
        self.window = window
        self.span = span
        self.per_key = per_key
        self.per_rule_node = per_rule_node
        self.per_rule_ranks = per_rule_ranks
        self.max_events = max_events
        self.budget = budget
        self.folded_beyond: dict[tuple[Stream, str | None], int] = defaultdict(int)
        # lines an extractor's regex could not finish on (see Extractor.timeouts)
        self.regex_timeouts: dict[tuple[Stream, str | None, str], int] = {}
        self.identity = identity if identity is not None else Identity()
        # the budget: estimated bytes used by each side (trusted or not), and by each
        # extractor (or fact kind) on each side, with how many events it kept there
        self.used = {True: 0, False: 0}
        self._rule_used: dict[tuple[str, bool], int] = defaultdict(int)
        self._rule_kept: dict[tuple[str, bool], int] = defaultdict(int)
        # (rule, node, rank, task, in_window) -> the events of one identity-field combination;
        # the same prefix -> [distinct combinations, the last one's events]
        self._keys: dict[tuple[Any, ...], list[Event]] = {}
        self._rule_node: dict[tuple[Any, ...], list[Any]] = {}
        self._rule_ranks: dict[tuple[Any, ...], int] = {}
        self._last_of_rule: dict[tuple[str, str | None], Event] = {}
        # kernel lines seen, for the kern.log/syslog duplicates: a hash of each, in two
        # generations of at most half of ``dedupe_memory`` (the older one is dropped whole)
        self._seen: dict[int, bool] = {}
        self._seen_before: dict[int, bool] = {}
        self._dedupe_memory = dedupe_memory
        self.events: list[Event] = []
        self.seq = 0
        self.total = 0
        # node -> process ids that printed the job's own output (``ownership.assess``)
        self.pids: dict[str, set[int]] = {}

    def _in_window(self, when: datetime | None) -> bool | None:
        if when is None:
            return None
        start, end = self.window
        if start is not None and when < start:
            return False
        return not (end is not None and when > end)

    def room(self, trusted: bool, what: str, cost: int, new_node: bool = False) -> bool:
        """May something of ``what`` (an extractor's ref, or a kind of fact) that costs
        ``cost`` bytes be kept from a ``trusted`` (or untrusted) source? Counts it if so.
        ``new_node``: the extractor's first event on one of the job's nodes, which only its
        side's share bounds (a switch that fails takes the links of all 4,096 nodes down: which
        nodes saw it matters more than a fifth link of the first node)."""
        untrusted = self.budget - self.budget // TRUSTED_RESERVE
        # trusted sources may use what untrusted ones left: never less than the reserve (what
        # untrusted extractors kept over their share, by the floor, is not taken from it)
        share = self.budget - min(self.used[False], untrusted) if trusted else untrusted
        key = (what, trusted)
        if self._rule_kept[key] >= RULE_FLOOR or what in (_FACTS, _PIDS):
            if self.used[trusted] + cost > share:
                return False
            if not trusted and self.used[True] + self.used[False] + cost > self.budget:
                return False
            limit = self.budget if trusted else untrusted
            if not new_node and self._rule_used[key] + cost > limit // RULE_SHARE:
                return False
        self.used[trusted] += cost
        self._rule_used[key] += cost
        self._rule_kept[key] += 1
        return True

    def note_pid(self, node: str, pid: int) -> None:
        """A process ``pid`` on ``node`` printed the job's own output (untrusted). Only the
        job's nodes are kept (when they are known): no other node's log is read."""
        known = self.pids.get(node)
        if known is not None and pid in known:
            return
        nodes = self.identity.node_set
        if nodes and node not in nodes:
            return
        cost = FACT_COST if known is not None else 4 * FACT_COST  # a node's set is more
        if not self.room(False, _PIDS, cost):
            return  # not counted as folded: a pid is no signal
        if known is None:
            known = self.pids[node] = set()
        known.add(pid)

    def _fold_beyond(self, event: Event) -> None:
        node = None if event.stream in JOB_STREAMS else event.node
        key = (event.stream, node)
        if key not in self.folded_beyond and len(self.folded_beyond) >= FOLDED_PLACES:
            key = (event.stream, None)
        self.folded_beyond[key] += event.count

    def _learn(self, event: Event) -> None:
        if not Identity.tells(event):
            return
        trusted = event.trusted
        untrusted = self.budget - self.budget // TRUSTED_RESERVE
        if trusted:
            spare = self.budget - min(self.used[False], untrusted) - self.used[True]
            spare = min(spare, self.budget // RULE_SHARE - self._rule_used[(_FACTS, True)])
        else:
            spare = min(
                untrusted - self.used[False],
                self.budget - self.used[True] - self.used[False],
                untrusted // RULE_SHARE - self._rule_used[(_FACTS, False)],
            )
        learnt, dropped = self.identity.absorb(event, room=max(0, spare) // FACT_COST)
        if learnt:
            self.used[trusted] += learnt * FACT_COST
            self._rule_used[(_FACTS, trusted)] += learnt * FACT_COST
        if dropped:
            self._fold_beyond(event)

    def add(self, event: Event) -> None:
        """Add one event (folding repeats)."""
        self.total += 1
        event.in_window = self._in_window(event.time)
        event.during_job = during(event.time, self.span)
        self._learn(event)
        if event.name.startswith("identity."):
            return  # what it says is in ``identity``; the event itself is never evidence
        if event.time is not None and event.stream in (Stream.KERNEL, Stream.SYSLOG):
            # the same kernel line often reaches both kern.log and syslog: keep one copy, the
            # one from the more trusted source (an untrusted copy kept first is dropped later,
            # by ``ownership.assess``, when the trusted one arrives)
            dkey = (event.node, event.rule, event.time.replace(microsecond=0), event.text)
            for stream in (Stream.KERNEL, Stream.SYSLOG):
                if stream is event.stream:
                    continue
                other = hash((*dkey, stream))
                first = self._seen.get(other, self._seen_before.get(other))
                if first is not None and (first or not event.trusted):
                    return
            self._seen[hash((*dkey, event.stream))] = event.trusted
            if len(self._seen) > self._dedupe_memory // 2:
                self._seen_before, self._seen = self._seen, {}
        group = self._group_by.get(event.rule)
        names = group if group is not None else sorted(event.fields)
        ident = tuple(_hashable(event.fields.get(n)) for n in names)
        rn_key = (event.rule, event.node, event.rank, event.task, event.in_window)
        key = (rn_key, ident)
        slot = self._keys.get(key)
        if slot is None:
            known = self._rule_node.get(rn_key)
            if known is not None and known[0] >= self.per_rule_node:
                self._fold(known[1][-1], event)
                return
            ranks_key = (event.rule, event.node, event.in_window)
            crowded = known is None and self._rule_ranks.get(ranks_key, 0) >= self.per_rule_ranks
            new_node = (
                event.node in self.identity.node_set
                and (event.rule, event.node) not in self._last_of_rule
            )
            if (
                crowded
                or len(self.events) >= self.max_events
                or not self.room(event.trusted, event.rule, event_cost(event), new_node)
            ):
                last = self._last_of_rule.get((event.rule, event.node))
                if last is not None:
                    self._fold(last, event)
                self._fold_beyond(event)
                return
            if known is None:
                known = self._rule_node[rn_key] = [0, None]
                self._rule_ranks[ranks_key] = self._rule_ranks.get(ranks_key, 0) + 1
            slot = self._keys[key] = []
            known[0] += 1
            known[1] = slot
        elif len(slot) >= self.per_key or not self.room(
            event.trusted, event.rule, event_cost(event)
        ):
            self._fold(slot[-1], event)  # a repeat: its detail is that of the one kept
            return
        event.seq = self.seq
        self.seq += 1
        slot.append(event)
        self.events.append(event)
        self._last_of_rule[(event.rule, event.node)] = event

    @staticmethod
    def _fold(into: Event, event: Event) -> None:
        into.count += event.count
        if event.time is not None and (into.last_time is None or event.time > into.last_time):
            into.last_time = event.time

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.add(event)


def during(when: datetime | None, span: tuple[datetime | None, datetime | None]) -> bool | None:
    """Is ``when`` inside the job's own [start, end]? ``None`` when either side is unknown."""
    start, end = span
    if when is None or start is None or end is None:
        return None
    return start <= when <= end


def _hashable(value: Any) -> Any:
    if isinstance(value, list | dict | set):
        return repr(value)
    return value


def _adjacent(head: LogLine, following: Sequence[LogLine]) -> list[LogLine]:
    """The lines that directly follow ``head`` in its file (by line number when known)."""
    out: list[LogLine] = []
    for k, line in enumerate(following, 1):
        if line.source.path != head.source.path:
            break
        if head.source.line and line.source.line != head.source.line + k:
            break
        out.append(line)
    return out


def iter_with_following(
    lines: Iterable[LogLine], lookahead: int
) -> Iterator[tuple[LogLine, list[LogLine]]]:
    """Yield each line with the up to ``lookahead`` lines read after it (``Extractor.extract``
    keeps those that directly follow it in its file)."""
    if lookahead <= 0:
        for line in lines:
            yield line, []
        return
    buffer: deque[LogLine] = deque()
    for line in lines:
        buffer.append(line)
        if len(buffer) > lookahead:
            head = buffer.popleft()
            yield head, list(buffer)
    while buffer:
        head = buffer.popleft()
        yield head, list(buffer)
