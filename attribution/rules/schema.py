"""pydantic models for rule files (extractor, correlation, diagnosis) and data tables.

Every model forbids unknown keys. The vocabularies are closed: a field
condition is a scalar (equals) or one of ``in``, ``not_in``, ``gte``, ``lte``,
``gt``, ``lt``, ``contains``, ``matches``, ``exists``; correlation has five
named operators. Nothing here is ever evaluated as code. The format is
documented, with one example per kind, in ``rules/README.md``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    TypeAdapter,
    field_validator,
    model_validator,
)

from attribution.model import (
    STREAM_GROUPS,
    EventRole,
    Owner,
    RuleStatus,
    Severity,
    Stream,
    SubDomain,
    TerminalState,
)
from attribution.timeutil import parse_duration

SCHEMA_VERSION = 1
ID_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
MAX_RULE_FILE_BYTES = 2 << 20  # the largest shipped file (the XID table) is about 60 KiB
EVENT_PATTERN = r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+$"
FIELD_PATTERN = r"^[a-z][a-z0-9_]*$"
RESERVED_FIELDS = frozenset({"node", "time", "stream", "line", "rule", "event", "count"})


class Strict(BaseModel):
    # defer_build: a model's validator is built when it first validates, not at import; a
    # ruleset read from the cache (attribution/rules/cache.py) validates nothing. No model
    # instance is made at import either (default_factory below, not a default instance).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


Scalar = str | bool | int | float


class Ops(Strict):
    """The closed set of field operators; more than one means all must hold."""

    in_: list[Scalar] | None = Field(default=None, alias="in")
    not_in: list[Scalar] | None = None
    gte: float | None = None
    lte: float | None = None
    gt: float | None = None
    lt: float | None = None
    contains: str | None = None
    matches: str | None = None
    exists: bool | None = None
    ignore_case: bool = False

    @field_validator("matches")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex: {exc}") from None
            except (OverflowError, RecursionError) as exc:
                # a repeat count beyond the engine's limit, or groups nested too deep
                why = "groups nested too deep" if isinstance(exc, RecursionError) else "too large"
                raise ValueError(f"invalid regex: {why}") from None
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> Ops:
        used = [
            name
            for name in ("in_", "not_in", "gte", "lte", "gt", "lt", "contains", "matches", "exists")
            if getattr(self, name) is not None
        ]
        if not used:
            raise ValueError("a condition needs at least one operator")
        return self


Condition = Scalar | Ops


def _as_list(value: Any) -> Any:
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


BitIndex = Annotated[int, Field(ge=0, le=63)]


class FieldSpec(Strict):
    """How one event field is filled: from a regex group (or the first of several that
    matched), from a constant value, or as the ratio of two other numeric fields.

    ``type: bytes`` turns a size as logs print it (``63.31 GiB``, ``88 MiB``, ``1.2 GB``) into
    an int of bytes (IEC units binary, SI units decimal). ``ratio: [a, b]`` is ``a / b`` of the
    event's fields ``a`` and ``b`` after they are filled (a float, or unset when either is
    missing or ``b`` is 0), e.g. the share of a GPU's memory another process holds.
    ``bits: [lo, hi]`` keeps bits ``lo``..``hi`` (inclusive, 0 = least significant) of an
    ``int`` or ``hex`` value, e.g. the reason code packed into an NVLink5 XID's IntrInfo word.
    """

    group: str | list[str] | None = None
    value: Scalar | None = None
    ratio: tuple[str, str] | None = None
    type: Literal["str", "int", "float", "hex", "lower", "upper", "bytes"] = "str"
    bits: tuple[Annotated[int, Field(ge=0, le=63)], Annotated[int, Field(ge=0, le=63)]] | None = (
        None
    )
    default: Scalar | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FieldSpec:
        sources = [x for x in (self.group, self.value, self.ratio) if x is not None]
        if len(sources) != 1:
            raise ValueError("a field needs exactly one of 'group', 'value' or 'ratio'")
        if self.bits is not None and (
            self.type not in ("int", "hex") or self.bits[0] > self.bits[1]
        ):
            raise ValueError("'bits: [lo, hi]' needs type int or hex and lo <= hi")
        return self


class Lookup(Strict):
    """Merge a row of a data table into the event (``prefix`` + column name)."""

    table: str
    key: str
    prefix: str = ""
    role_from: str | None = None  # a column whose value overrides the event role
    severity_from: str | None = None
    persists_from: str | None = None  # a boolean column: the row's fault lasts until reboot


class Match(Strict):
    """The extractor's matcher.

    ``contains``: literal strings, at least one of which must occur in the line
    (a cheap pre-filter run before the regex). ``regex``: Python ``re`` with
    named groups only, applied with ``search`` to the message after prefix
    stripping. ``continuation``: join this many following lines before matching
    (for messages the producer splits over several lines). ``ident``: the syslog
    program names the message may carry (a kernel message in a syslog file says
    ``kernel``); lines without a program name are always considered.
    """

    contains: list[str]
    regex: str
    ignore_case: bool = False
    continuation: int = Field(default=0, ge=0, le=40)
    # syslog program names the message may come from (empty: any). Kernel messages say
    # ``kernel``; a user's ``logger`` line says the user's name and is not believed.
    ident: list[str] = []
    # the lines it reads are the job's ordinary progress output (steps, bars, results): the
    # silence check before a time limit counts them as output, not as error messages
    progress: bool = False
    # its lines are so many (a step line every second of a long run) and fold so completely
    # (``group_by: []``) that past a file's first picks the reader parses only the last line of
    # each block that the regex matches: the first, the last and progress after any other line
    # are still seen (docs/performance.md, "How it is fast"). Only for ``progress`` extractors.
    sampled: bool = False
    # reads lines NCCL prints at NCCL_DEBUG=INFO ("NCCL INFO ..."): they report what NCCL
    # tried and are never errors, so other event extractors do not see them (context
    # extractors always do)
    nccl_info: StrictBool = False

    normalise_contains = field_validator("contains", mode="before")(_as_list)

    @field_validator("contains")
    @classmethod
    def _literals(cls, value: list[str]) -> list[str]:
        if not value or any(not s for s in value):
            raise ValueError("contains needs at least one non-empty literal")
        return value


class Emit(Strict):
    """What an extractor produces for a matching line."""

    event: Annotated[str, Field(pattern=EVENT_PATTERN)]
    role: EventRole
    label: str
    fields: dict[Annotated[str, Field(pattern=FIELD_PATTERN)], FieldSpec | str] = {}
    lookup: Lookup | None = None
    node: str | None = None  # template: a node the line names (overrides the file's node)
    rank: str | None = None  # a field holding the global rank
    device: str | None = None  # template, e.g. "{pci}"
    component: str | None = None  # gpu, nvswitch, hca, pcie, cpu, memory, ...
    time_field: str | None = None  # a field holding the event's own ISO time (Slurm messages)
    group_by: list[str] | None = None  # fields that keep events apart when folding repeats
    fallback: bool = False  # dropped when a non-fallback extractor matched the same line
    persists: bool = False  # a broken state that lasts until the node reboots (see docs/rules.md)
    # events that end that state before a reboot, on the same node (and device, when both name
    # one): the link came up again, the service started
    cleared_by: list[Annotated[str, Field(pattern=EVENT_PATTERN)]] = []
    # the message is logged up to this many seconds after what it reports (slurmctld notices a
    # dead node only after SlurmdTimeout); time order with other evidence allows for it
    reported_late: float = Field(default=0.0, ge=0.0)
    # what the line is about, which decides whose it is on a shared node (docs/rules.md):
    # node (node-wide by nature), gpu (the GPU its device names), process (the cgroup, uid or
    # pid it names) or job (the job id it names). Every extractor of a node stream says which.
    scope: Literal["node", "gpu", "process", "job"] | None = None

    @field_validator("fields")
    @classmethod
    def _no_reserved(cls, value: dict[str, FieldSpec | str]) -> dict[str, FieldSpec | str]:
        clash = sorted(set(value) & RESERVED_FIELDS)
        if clash:
            raise ValueError(f"reserved field names: {', '.join(clash)}")
        return value

    def field_specs(self) -> dict[str, FieldSpec]:
        """Every field as a ``FieldSpec`` (a bare string is shorthand for ``{group: name}``)."""
        return {
            name: spec if isinstance(spec, FieldSpec) else FieldSpec(group=spec)
            for name, spec in self.fields.items()
        }


class LineExample(Strict):
    """An inline example line and, for ``match``, the fields it must yield."""

    line: str
    stream: Stream | None = None
    ident: str | None = None  # the line's syslog program name, when its prefix gives none
    fields: dict[str, Scalar | None] = {}
    reason: str | None = None  # for todo examples


class LineExamples(Strict):
    match: list[LineExample] = []
    no_match: list[LineExample | str] = []
    todo: list[LineExample] = []


class Header(Strict):
    """Keys every rule file has."""

    schema_: Literal[1] = Field(alias="schema")
    id: Annotated[str, Field(pattern=ID_PATTERN, max_length=64)]
    version: int = Field(ge=1)
    title: Annotated[str, Field(min_length=3, max_length=120)]
    description: Annotated[str, Field(min_length=10)]
    status: RuleStatus = RuleStatus.EXPERIMENTAL
    severity: Literal["info", "warning", "error", "critical"] = "warning"
    tags: list[str] = []
    references: list[str] = []
    replaced_by: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @property
    def severity_level(self) -> Severity:
        return Severity[self.severity.upper()]


class ExtractorRule(Header):
    """One log signature: stream(s) + pre-filter + regex -> one typed event."""

    kind: Literal["extractor"]
    streams: list[str]
    match: Match
    emit: Emit
    examples: LineExamples = Field(default_factory=LineExamples)

    normalise_streams = field_validator("streams", mode="before")(_as_list)

    @field_validator("streams")
    @classmethod
    def _known_streams(cls, value: list[str]) -> list[str]:
        known = {s.value for s in Stream} | set(STREAM_GROUPS)
        bad = [s for s in value if s not in known]
        if bad or not value:
            raise ValueError(
                f"unknown stream(s) {bad}; use {sorted(known)}" if bad else "streams is empty"
            )
        return value

    @model_validator(mode="after")
    def _sampled_folds(self) -> ExtractorRule:
        # a sampled extractor's lines are mostly not parsed: only one that is ordinary output
        # and whose events all fold into one may be
        if self.match.sampled and not (self.match.progress and self.emit.group_by == []):
            raise ValueError("match.sampled needs match.progress and emit.group_by: []")
        return self

    def stream_set(self) -> frozenset[Stream]:
        out: set[Stream] = set()
        for name in self.streams:
            out.update(STREAM_GROUPS.get(name) or (Stream(name),))
        return frozenset(out)


# --------------------------------------------------------------------- selectors


class Selector(Strict):
    """Which events a correlation or diagnosis condition is about."""

    event: list[Annotated[str, Field(pattern=EVENT_PATTERN)]]
    where: dict[str, Condition] = {}
    roles: list[EventRole] = []  # restrict to these base roles (empty: any)
    include_demoted: bool = False
    during_job: bool = False  # only events timed between the job's start and end (no margins)

    normalise_event = field_validator("event", mode="before")(_as_list)


class EventCondition(Selector):
    """A selector plus how many matching events/nodes are needed."""

    min_count: int = Field(default=1, ge=1)
    min_nodes: int = Field(default=1, ge=1)
    max_nodes: int | None = Field(default=None, ge=1)
    # distinct ranks among the events (unknown ranks: none)
    min_ranks: StrictInt = Field(default=1, ge=1, le=10_000_000)


class FindingCondition(Strict):
    """Requires (or, under ``none``, forbids) a correlation finding."""

    finding: Annotated[str, Field(pattern=ID_PATTERN)]
    where: dict[str, Condition] = {}


AnyCondition = Annotated[EventCondition | FindingCondition, Field(union_mode="left_to_right")]


class JobConditions(Strict):
    """Conditions on the Slurm job record (see ``docs/rules.md`` for each field)."""

    state: Condition | None = None
    exit_status: Condition | None = None
    exit_signal: Condition | None = None
    derived_status: Condition | None = None
    derived_signal: Condition | None = None
    # the signal that ended the job's program: the SIG of N:SIG, else 128+N in the exit status
    # (a shell reports a child killed by signal N as 128+N), else the derived exit code's
    signal: Condition | None = None
    num_nodes: Condition | None = None
    duration: Condition | None = None  # seconds
    cancelled_by_owner: bool | None = None
    reason: Condition | None = None
    gpus: Condition | None = None  # GPUs allocated (gres_detail); unknown matches nothing

    @field_validator("signal")
    @classmethod
    def _signal_numbers(cls, value: Condition | None) -> Condition | None:
        """A signal is a number (1-64): ``11``, ``{in: [6, 11]}``, ``{gte: 1}``."""
        if value is None:
            return None
        if isinstance(value, Ops):
            numbers = [
                *(value.in_ or []),
                *(value.not_in or []),
                *(v for v in (value.gte, value.lte, value.gt, value.lt) if v is not None),
            ]
            if value.contains is not None or value.matches is not None:
                raise ValueError("signal is a number: use a number, in/not_in or a bound")
        else:
            numbers = [value]
        for number in numbers:
            whole = isinstance(number, int) or (isinstance(number, float) and number.is_integer())
            if isinstance(number, bool | str) or not whole or not 1 <= number <= 64:
                raise ValueError(f"signal must be a signal number 1-64, got {number!r}")
        return value


class When(Strict):
    """``all`` must hold, at least one of ``any``, none of ``none``; ``also`` is optional
    supporting evidence that joins the root of the chain when present."""

    all: list[AnyCondition] = []
    any: list[AnyCondition] = []
    none: list[AnyCondition] = []
    also: list[EventCondition] = []
    job: JobConditions | None = None
    # streams (names or groups such as ``node``) of which none was read on the anchor's node
    # (on some job node when the anchor has none): the evidence that would decide is missing
    unread: list[str] = []

    normalise_unread = field_validator("unread", mode="before")(_as_list)

    @field_validator("unread")
    @classmethod
    def _streams_known(cls, value: list[str]) -> list[str]:
        known = {s.value for s in Stream} | set(STREAM_GROUPS)
        bad = [v for v in value if v not in known]
        if bad:
            raise ValueError(f"unknown stream(s) {bad}; known: {sorted(known)}")
        return value

    def unread_streams(self) -> frozenset[Stream]:
        out: set[Stream] = set()
        for name in self.unread:
            out.update(STREAM_GROUPS.get(name, ()) or (Stream(name),))
        return frozenset(out)

    @model_validator(mode="after")
    def _something(self) -> When:
        if not (self.all or self.any or self.job):
            raise ValueError("'when' needs at least one of all, any or job")
        return self


# --------------------------------------------------------------------- scenario examples


class ScenarioEvent(BaseModel):
    """An event in a correlation/diagnosis example: ``at`` (e.g. ``+30s``), node, event, fields."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    event: Annotated[str, Field(pattern=EVENT_PATTERN)]
    node: str | None = None
    at: str | None = None
    role: EventRole | None = None
    rank: int | None = None
    count: int = 1
    stream: Stream | None = None
    line: int | None = Field(default=None, ge=1)  # line in the example's one file (default: order)
    trusted: bool | None = None  # default: what the stream is (model.DEFAULT_TRUST)
    owner: Owner | None = None  # whose it is, as ``attribution.ownership`` would say

    @field_validator("at")
    @classmethod
    def _offset(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value.lstrip("+"))
        return value


class ScenarioExpect(Strict):
    finding: str | None = None
    nodes: list[str] | None = None
    demoted: list[int] | None = None  # indexes into events
    context: list[int] | None = None
    responsible: list[str] | None = None
    suspects: list[str] | None = None  # nodes named only by untrusted evidence
    sub_domain: SubDomain | None = None
    terminal_state: TerminalState | None = None
    summary_contains: str | None = None


class ScenarioCoverage(Strict):
    """A source the example says was (not) read: ``status`` missing, empty, ok, ..."""

    stream: Stream
    node: str | None = None
    status: Literal["ok", "empty", "missing", "unreadable", "error"] = "missing"


class Scenario(Strict):
    name: str
    job: dict[str, Any] = {}
    events: list[ScenarioEvent]
    coverage: list[ScenarioCoverage] = []
    expect: ScenarioExpect = Field(default_factory=ScenarioExpect)
    reason: str | None = None


class ScenarioExamples(Strict):
    match: list[Scenario] = []
    no_match: list[Scenario] = []
    todo: list[Scenario] = []


# --------------------------------------------------------------------- correlation


class CorrelationBase(Header):
    """Keys every correlation rule has; each operator adds its own (docs/rules.md).

    Operators (one class each, chosen by ``op``; a key of another operator is an error):
      suppress  - ``symptoms`` become downstream when a candidate root exists
                  (``roots``, default: any root/either event not itself a symptom).
      sequence  - ``cause`` then ``effect`` within ``within`` on ``nodes``
                  same/named/other/any (or ``within_lines`` lines later in the same
                  file; ``nearest``: only the closest effect of each cause);
                  ``mark`` changes roles; may produce a finding.
      vote      - reporters of ``select`` name a peer in ``field``; the peer named
                  by at least ``min_voters`` distinct reporters is the suspect. When
                  more than ``max_suspects`` peers tie for the most reporters, no
                  peer stands out (every node names its own neighbours) and there
                  is no finding. A peer address no node is known by is reported
                  as the address, never as a node.
      straggler - watchdog progress counters: ranks whose last enqueued work is
                  below the failing sequence number never issued the collective.
      desync    - ranks that timed out waiting in different collectives (another
                  sequence number or another operation): the ranks issued different
                  collectives, which the program's control flow decides.
      outlier   - ``select`` seen on at most ``max_nodes`` of a job with at least
                  ``min_job_nodes`` nodes: those nodes stand out. With ``field``:
                  the nodes whose value of it differs from the one most nodes
                  report (at most ``max_nodes``, fewer than those that agree); with
                  ``split``, nodes that disagree with no minority give a finding that
                  names no node.
    """

    kind: Literal["correlation"]
    finding: Annotated[str, Field(pattern=ID_PATTERN)] | None = None
    summary: str | None = None
    examples: ScenarioExamples = Field(default_factory=ScenarioExamples)


class _FindingRequired(CorrelationBase):
    finding: Annotated[str, Field(pattern=ID_PATTERN)]


class SuppressCorrelation(CorrelationBase):
    op: Literal["suppress"]
    symptoms: Annotated[list[Selector], Field(min_length=1)]
    roots: list[Selector] = []
    scope: Literal["job", "node"] = "job"


class SequenceCorrelation(CorrelationBase):
    op: Literal["sequence"]
    cause: Selector
    effect: Selector
    within: float | None = None  # seconds
    within_lines: int | None = Field(default=None, ge=0)  # same file, at most N lines after
    nearest: bool = False  # each cause pairs with its nearest effect only
    # named: the same node, counting each node a host-list line names (``named_nodes``)
    nodes: Literal["same", "named", "other", "any"] = "any"
    order: Literal["after", "before", "any"] = "after"
    mark: dict[Literal["cause", "effect"], Literal["root", "downstream", "context"]] = {}

    @field_validator("within", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("within must be a duration of zero or more")
        return seconds


class VoteCorrelation(_FindingRequired):
    op: Literal["vote"]
    select: Selector
    field: str
    min_voters: int = Field(default=2, ge=1)
    max_suspects: int = Field(default=1, ge=1)
    peer_kind: Literal["host", "rank"] = "host"  # what ``field`` names: a host/IP or a rank


class StragglerCorrelation(_FindingRequired):
    """Reads the events' rank, seq and op; takes no field."""

    op: Literal["straggler"]
    select: Selector


class DesyncCorrelation(_FindingRequired):
    """Reads the events' rank, seq and op; takes no field."""

    op: Literal["desync"]
    select: Selector


class OutlierCorrelation(_FindingRequired):
    op: Literal["outlier"]
    select: Selector
    field: str | None = None
    max_nodes: int = Field(default=1, ge=1)
    min_job_nodes: int = Field(default=2, ge=2)
    split: StrictBool = False  # with field: a disagreement without a minority is a finding

    @model_validator(mode="after")
    def _split_needs_field(self) -> OutlierCorrelation:
        if self.split and not self.field:
            raise ValueError("split applies only with a field")
        return self


CorrelationRule = (
    SuppressCorrelation
    | SequenceCorrelation
    | VoteCorrelation
    | StragglerCorrelation
    | DesyncCorrelation
    | OutlierCorrelation
)
# what the loader validates a correlation rule file with: ``op`` picks the class
CORRELATION_ADAPTER: TypeAdapter[CorrelationRule] = TypeAdapter(
    Annotated[CorrelationRule, Field(discriminator="op")], config=ConfigDict(defer_build=True)
)


# --------------------------------------------------------------------- diagnosis


class DiagnosisRule(Header):
    """Events/findings/job conditions -> one candidate cause with a rank."""

    kind: Literal["diagnosis"]
    priority: int = Field(ge=0, le=1000)
    sub_domain: SubDomain
    terminal_state: TerminalState = TerminalState.FAIL
    when: When
    blame: Literal["anchor", "none", "job_nodes"] = "anchor"
    component: str | None = None
    device: str | None = None  # template
    summary: str
    action: str | None = None
    # the most a verdict from this rule can be trusted: a family rule that knows the kind of
    # message but not the message itself says ``low`` (docs/rules.md, "Family rules")
    confidence: Literal["high", "medium", "low"] | None = None
    confidence_reason: str | None = None
    # a generic rule (e.g. "any other hardware XID"): dropped when a rule that is not a
    # fallback matched on the same evidence, instead of listing what the others cover
    fallback: StrictBool = False
    examples: ScenarioExamples = Field(default_factory=ScenarioExamples)

    @field_validator("sub_domain")
    @classmethod
    def _not_none(cls, value: SubDomain) -> SubDomain:
        if value is SubDomain.NONE:
            raise ValueError("'none' is reserved for jobs that passed")
        return value


Rule = ExtractorRule | CorrelationRule | DiagnosisRule


class Table(Strict):
    """A data table (e.g. every NVIDIA XID code) that extractors look rows up in."""

    schema_: Literal[1] = Field(alias="schema")
    table: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    key: str
    version: int = Field(ge=1)
    title: str
    description: str
    references: list[str] = []
    columns: dict[str, str]  # column -> meaning
    rows: list[dict[str, Any]]

    @model_validator(mode="after")
    def _rows_valid(self) -> Table:
        allowed = set(self.columns) | {self.key}
        seen: set[Any] = set()
        for index, row in enumerate(self.rows):
            if self.key not in row:
                raise ValueError(f"row {index} has no {self.key!r}")
            extra = set(row) - allowed
            if extra:
                raise ValueError(f"row {index} has unknown columns {sorted(extra)}")
            if not isinstance(row[self.key], str | int) or isinstance(row[self.key], bool):
                raise ValueError(f"row {index}: key {self.key!r} must be a number or a string")
            if row[self.key] in seen:
                raise ValueError(f"row {index}: duplicate key {row[self.key]!r}")
            seen.add(row[self.key])
        return self

    def index(self) -> dict[str, dict[str, Any]]:
        return {str(row[self.key]): row for row in self.rows}
