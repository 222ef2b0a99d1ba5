"""Run every rule's inline examples. The same code serves pytest and ``sattr rules test``.

Extractor examples are log lines: a ``match`` line must yield the rule's
event with at least the given fields; a ``no_match`` line must not. Correlation
and diagnosis examples are small scenarios (a job and timed events) run
through the real correlation and diagnosis code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution.jobrecord import job_from_dict
from attribution.model import (
    DEFAULT_TRUST,
    ENGINE_EVENTS,
    Coverage,
    CoverageStatus,
    Event,
    EventRole,
    JobRecord,
    LogLine,
    Severity,
    SourceRef,
    Stream,
    Trust,
)
from attribution.rules.compiled import CompiledExtractor, RuleSet
from attribution.rules.conditions import check
from attribution.rules.correlate import build_identity, correlate
from attribution.rules.diagnose import diagnose
from attribution.rules.extract import Extractor, during
from attribution.rules.schema import (
    CorrelationRule,
    DiagnosisRule,
    ExtractorRule,
    LineExample,
    Scenario,
    ScenarioEvent,
)
from attribution.rules.template import render
from attribution.sources.prefix import parse_prefix
from attribution.timeutil import parse_duration

BASE_TIME = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ExampleCase:
    """One runnable example: ``rule_id/kind/name`` plus how to run it."""

    rule_id: str
    group: str  # match | no_match | todo
    name: str
    payload: Any
    reason: str | None = None

    @property
    def test_id(self) -> str:
        return f"{self.rule_id}/{self.group}/{self.name}"


@dataclass(frozen=True, slots=True)
class ExampleResult:
    case: ExampleCase
    passed: bool
    detail: str


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out[:60] or "example"


def iter_examples(ruleset: RuleSet) -> Iterator[ExampleCase]:
    """Every example of every rule, in rule-id order, with stable test ids."""
    for rule in sorted(ruleset.all_rules(), key=lambda r: r.id):
        if isinstance(rule, ExtractorRule):
            for group in ("match", "no_match", "todo"):
                for index, item in enumerate(getattr(rule.examples, group)):
                    yield ExampleCase(
                        rule.id,
                        group,
                        str(index),
                        item,
                        reason=getattr(item, "reason", None),
                    )
        else:
            for group in ("match", "no_match", "todo"):
                names: set[str] = set()
                for scenario in getattr(rule.examples, group):
                    name = _slug(scenario.name)
                    while name in names:
                        name += "-x"
                    names.add(name)
                    yield ExampleCase(rule.id, group, name, scenario, reason=scenario.reason)


def run_example(ruleset: RuleSet, case: ExampleCase) -> ExampleResult:
    """Run one example; ``passed`` tells whether the rule behaved as the example says.

    For ``todo`` examples ``passed`` is the result of the *match* expectation,
    so a test marks them as expected failures.
    """
    rule = ruleset.rule(case.rule_id)
    if rule is None:
        return ExampleResult(case, False, "rule not loaded")
    try:
        if isinstance(rule, ExtractorRule):
            ok, detail = _run_line(ruleset, rule, case)
        elif isinstance(rule, CorrelationRule):
            ok, detail = _run_correlation(ruleset, rule, case)
        else:
            assert isinstance(rule, DiagnosisRule)
            ok, detail = _run_diagnosis(ruleset, rule, case)
    except Exception as exc:  # an example must never crash the runner
        return ExampleResult(case, False, f"error: {type(exc).__name__}: {exc}")
    return ExampleResult(case, ok, detail)


def run_all(ruleset: RuleSet) -> list[ExampleResult]:
    return [run_example(ruleset, case) for case in iter_examples(ruleset)]


# --------------------------------------------------------------------- extractor lines


def _single(ruleset: RuleSet, rule_id: str) -> RuleSet:
    chosen: list[CompiledExtractor] = [e for e in ruleset.extractors if e.id == rule_id]
    return RuleSet(extractors=chosen, tables=ruleset.tables, digest=ruleset.digest)


def example_lines(text: str, stream: Stream, node: str = "node001") -> list[LogLine]:
    """``LogLine`` objects for the lines of ``text``, with prefixes parsed as in real logs
    (a year-less stamp takes the examples' base time, 2026-01-01 12:00 UTC, as reference)."""
    return [
        LogLine(
            stream=stream,
            node=node,
            text=(p := parse_prefix(raw, reference=BASE_TIME)).text,
            raw=raw,
            source=SourceRef("example", i + 1),
            time=p.time,
            host=p.host,
            rank=p.rank,
            pid=p.pid,
            device=p.device,
            task=p.task,
            ident=p.ident,
        )
        for i, raw in enumerate(text.split("\n"))
    ]


def line_events(
    ruleset: RuleSet,
    rule: ExtractorRule,
    text: str,
    stream: Stream | None,
    ident: str | None = None,
) -> list[Event]:
    """Events one extractor yields for one example line (prefixes parsed as in real logs;
    ``ident`` stands for a syslog program name the line's prefix does not give)."""
    chosen = stream or sorted(rule.stream_set(), key=lambda s: list(Stream).index(s))[0]
    parsed = example_lines(text, chosen)
    if ident is not None:
        parsed[0].ident = ident
    extractor = Extractor(_single(ruleset, rule.id))
    return extractor.extract(parsed[0], parsed[1:])


def _run_line(ruleset: RuleSet, rule: ExtractorRule, case: ExampleCase) -> tuple[bool, str]:
    item = case.payload
    example = item if isinstance(item, LineExample) else LineExample(line=str(item))
    events = line_events(ruleset, rule, example.line, example.stream, example.ident)
    if case.group == "no_match":
        if events:
            return False, f"matched but should not: fields {events[0].fields}"
        return True, "no match, as expected"
    if not events:
        return False, f"no match for: {example.line[:160]}"
    fields = events[0].fields
    wrong = []
    for name, expected in example.fields.items():
        actual = fields.get(name)
        if expected is None:
            if actual is not None:
                wrong.append(f"{name}={actual!r} (expected nothing)")
        elif not check(actual, expected):
            wrong.append(f"{name}={actual!r} (expected {expected!r})")
    if wrong:
        return False, "wrong fields: " + ", ".join(wrong)
    return True, "matched"


# --------------------------------------------------------------------- scenarios


def scenario_job(data: dict[str, Any]) -> JobRecord:
    base = {
        "job_id": "1",
        "state": "FAILED",
        "exit_code": "1:0",
        "start": "2026-01-01T11:00:00Z",
        "end": "2026-01-01T13:00:00Z",
    }
    base.update(data)
    return job_from_dict(base, "example")


def _emitter(ruleset: RuleSet, name: str) -> CompiledExtractor | None:
    for ex in ruleset.extractors:
        if ex.rule.emit.event == name:
            return ex
    return None


def scenario_events(ruleset: RuleSet, scenario: Scenario) -> list[Event]:
    """Build events for a scenario; roles and table columns come from the emitting extractor."""
    job = scenario_job(scenario.job)
    out: list[Event] = []
    for index, spec in enumerate(scenario.events):
        event = _scenario_event(ruleset, spec, index)
        event.during_job = during(event.time, (job.start, job.end))
        out.append(event)
    return out


_KNOWN = {"event", "node", "at", "role", "rank", "count", "stream", "line", "trusted", "owner"}


def _scenario_event(ruleset: RuleSet, spec: ScenarioEvent, index: int) -> Event:
    fields: dict[str, Any] = {k: v for k, v in (spec.model_extra or {}).items() if k not in _KNOWN}
    ex = _emitter(ruleset, spec.event)
    role = EventRole.EITHER
    label = spec.event
    severity = Severity.WARNING
    component = None
    device = None
    stream = spec.stream
    if ex is None and spec.event in ENGINE_EVENTS:
        role = ENGINE_EVENTS[spec.event][0]  # made by the engine from an observation
        severity = Severity.INFO
    if ex is not None:
        emit = ex.rule.emit
        role = emit.role
        component = emit.component
        severity = ex.rule.severity_level
        # by default the line comes from the most trusted stream its extractor reads
        stream = (
            stream
            or sorted(
                ex.streams,
                key=lambda s: (DEFAULT_TRUST[s] is not Trust.TRUSTED, list(Stream).index(s)),
            )[0]
        )
        if emit.lookup is not None and ex.table is not None:
            row = ex.table.get(str(fields.get(emit.lookup.key)))
            if row:
                for column, value in row.items():
                    if column != emit.lookup.key or emit.lookup.prefix:
                        fields.setdefault(emit.lookup.prefix + column, value)
                wanted = row.get(emit.lookup.role_from) if emit.lookup.role_from else None
                if wanted in {r.value for r in EventRole}:
                    role = EventRole(wanted)
        label = render(emit.label, {**fields, "node": spec.node})
        if emit.device:
            device = render(emit.device, fields, unknown="") or None
    if spec.role is not None:
        role = spec.role
    when = None
    if spec.at is not None:
        when = BASE_TIME + timedelta(seconds=parse_duration(spec.at.lstrip("+")))
    trusted = spec.trusted
    if trusted is None:
        trusted = DEFAULT_TRUST[stream or Stream.KERNEL] is Trust.TRUSTED
    return Event(
        trusted=trusted,
        name=spec.event,
        rule=f"{ex.id}@{ex.rule.version}" if ex else "example@1",
        stream=stream or Stream.KERNEL,
        node=spec.node,
        time=when,
        fields=fields,
        source=SourceRef("example", spec.line or index + 1),
        text=f"{spec.event} {fields}",
        role=role,
        label=label,
        severity=severity,
        rank=spec.rank,
        device=device,
        component=component,
        in_window=None if when is None else True,
        seq=index,
        count=spec.count,
        owner=spec.owner,
    )


def _run_correlation(
    ruleset: RuleSet, rule: CorrelationRule, case: ExampleCase
) -> tuple[bool, str]:
    scenario: Scenario = case.payload
    job = scenario_job(scenario.job)
    events = scenario_events(ruleset, scenario)
    identity = build_identity(job, events)
    findings = correlate([rule], events, job, identity)
    demoted = [i for i, e in enumerate(events) if e.demoted_by]
    context = [i for i, e in enumerate(events) if e.context_by]
    expect = scenario.expect
    if case.group == "no_match":
        if findings or demoted or context:
            return False, f"fired: findings={[f.name for f in findings]} demoted={demoted}"
        return True, "did not fire, as expected"
    problems = []
    if rule.finding and not findings:
        problems.append("no finding")
    if expect.finding and not any(f.name == expect.finding for f in findings):
        problems.append(f"finding {expect.finding!r} missing")
    if expect.nodes is not None:
        got = sorted({n for f in findings for n in f.nodes})
        if got != sorted(expect.nodes):
            problems.append(f"finding nodes {got} != {sorted(expect.nodes)}")
    if expect.demoted is not None and demoted != sorted(expect.demoted):
        problems.append(f"demoted {demoted} != {sorted(expect.demoted)}")
    if expect.context is not None and context != sorted(expect.context):
        problems.append(f"context {context} != {sorted(expect.context)}")
    if (
        not rule.finding
        and expect.demoted is None
        and expect.context is None
        and not (demoted or context)
    ):
        problems.append("changed no roles")
    return (not problems), "; ".join(problems) or "fired as expected"


def _run_diagnosis(ruleset: RuleSet, rule: DiagnosisRule, case: ExampleCase) -> tuple[bool, str]:
    scenario: Scenario = case.payload
    job = scenario_job(scenario.job)
    events = scenario_events(ruleset, scenario)
    identity = build_identity(job, events)
    findings = correlate(ruleset.correlations, events, job, identity)
    coverage = [
        Coverage(stream=c.stream, node=c.node, status=CoverageStatus(c.status))
        for c in scenario.coverage
    ]
    outcome = diagnose([rule], events, findings, job, coverage=coverage)
    winner = outcome.winner
    if case.group == "no_match":
        if winner is not None:
            return False, f"matched but should not: {winner.summary}"
        return True, "did not match, as expected"
    if winner is None:
        return False, "did not match"
    expect = scenario.expect
    problems = []
    if expect.responsible is not None:
        got = [r.node for r in winner.responsible]
        if sorted(got) != sorted(expect.responsible):
            problems.append(f"responsible {got} != {expect.responsible}")
    if expect.suspects is not None:
        got = [r.node for r in winner.suspects]
        if sorted(got) != sorted(expect.suspects):
            problems.append(f"suspects {got} != {expect.suspects}")
    if expect.sub_domain is not None and rule.sub_domain != expect.sub_domain:
        problems.append(f"sub_domain {rule.sub_domain} != {expect.sub_domain}")
    if expect.summary_contains and expect.summary_contains not in winner.summary:
        problems.append(f"summary {winner.summary!r} lacks {expect.summary_contains!r}")
    return (not problems), "; ".join(problems) or f"matched: {winner.summary}"
