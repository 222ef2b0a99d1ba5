"""Whole-ruleset checks, each a small named check that returns issues with file:line.

Checks: ``id-matches-filename``, ``kind-matches-directory``, ``event-known``,
``finding-known``, ``examples-required``, ``replaced-by-known``,
``template-fields``, ``regex-backtracking`` (a warning), ``scope-required``. ``sattr rules
lint`` and the test suite run the same list.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from attribution.errors import Location
from attribution.model import ENGINE_EVENTS, NODE_STREAMS, RuleStatus, Stream
from attribution.rules.compiled import CompiledExtractor, RuleSet
from attribution.rules.schema import (
    CorrelationBase,
    DiagnosisRule,
    EventCondition,
    ExtractorRule,
    FindingCondition,
    Rule,
    Selector,
    SequenceCorrelation,
    SuppressCorrelation,
)
from attribution.rules.template import placeholders


@dataclass(frozen=True, slots=True)
class Issue:
    """One lint finding: the check's name, where, what, and whether it fails the build."""

    check: str
    location: Location
    message: str
    error: bool = True

    def __str__(self) -> str:
        level = "error" if self.error else "warning"
        return f"{self.location}: {level}: {self.message} [{self.check}]"


_DIRS = {"extract": "extractor", "correlate": "correlation", "diagnose": "diagnosis"}


def _loc(ruleset: RuleSet, rule: Rule, *path: str | int) -> Location:
    source = ruleset.sources.get(rule.id)
    if source is None:
        return Location(rule.id)
    return Location(source.path, source.lines.line_for(list(path)))


def _selectors(rule: Rule) -> Iterator[tuple[Selector, tuple[str | int, ...]]]:
    if isinstance(rule, SuppressCorrelation):
        for i, s in enumerate(rule.symptoms):
            yield s, ("symptoms", i)
        for i, s in enumerate(rule.roots):
            yield s, ("roots", i)
    elif isinstance(rule, SequenceCorrelation):
        yield rule.cause, ("cause",)
        yield rule.effect, ("effect",)
    elif isinstance(rule, CorrelationBase):
        yield rule.select, ("select",)
    elif isinstance(rule, DiagnosisRule):
        for part in ("all", "any", "none"):
            for i, cond in enumerate(getattr(rule.when, part)):
                if isinstance(cond, EventCondition):
                    yield cond, ("when", part, i)


def check_ids(ruleset: RuleSet) -> list[Issue]:
    issues = []
    for rule in ruleset.all_rules():
        source = ruleset.sources.get(rule.id)
        if source is None:
            continue
        path = Path(source.path)
        if path.stem != rule.id:
            issues.append(
                Issue(
                    "id-matches-filename",
                    _loc(ruleset, rule, "id"),
                    f"id {rule.id!r} but file is {path.name}",
                )
            )
        for part in path.parts:
            if part in _DIRS and _DIRS[part] != rule.kind:
                issues.append(
                    Issue(
                        "kind-matches-directory",
                        _loc(ruleset, rule, "kind"),
                        f"a {rule.kind} rule in the {part}/ directory",
                    )
                )
    return issues


def check_references(ruleset: RuleSet) -> list[Issue]:
    emitted = {ex.rule.emit.event for ex in ruleset.extractors} | set(ENGINE_EVENTS)
    produced = {r.finding for r in ruleset.correlations if r.finding}
    issues = []
    for rule in ruleset.all_rules():
        for selector, path in _selectors(rule):
            for name in selector.event:
                if name not in emitted:
                    issues.append(
                        Issue(
                            "event-known",
                            _loc(ruleset, rule, *path, "event"),
                            f"no extractor emits event {name!r}",
                        )
                    )
        if isinstance(rule, DiagnosisRule):
            for part in ("all", "any", "none"):
                for i, cond in enumerate(getattr(rule.when, part)):
                    if isinstance(cond, FindingCondition) and cond.finding not in produced:
                        issues.append(
                            Issue(
                                "finding-known",
                                _loc(ruleset, rule, "when", part, i, "finding"),
                                f"no correlation rule produces finding {cond.finding!r}",
                            )
                        )
        if rule.replaced_by and ruleset.rule(rule.replaced_by) is None:
            issues.append(
                Issue(
                    "replaced-by-known",
                    _loc(ruleset, rule, "replaced_by"),
                    f"replaced_by names unknown rule {rule.replaced_by!r}",
                )
            )
    return issues


STABLE_MATCH_EXAMPLES = 2  # and one no_match: what a rule needs to be called stable


def check_examples(ruleset: RuleSet) -> list[Issue]:
    issues = []
    for rule in ruleset.all_rules():
        if rule.status not in (RuleStatus.TEST, RuleStatus.STABLE):
            continue
        ex = rule.examples
        if not ex.match or not ex.no_match:
            issues.append(
                Issue(
                    "examples-required",
                    _loc(ruleset, rule, "status"),
                    f"a {rule.status.value} rule needs at least one match and one no_match example",
                )
            )
        elif rule.status is RuleStatus.STABLE and len(ex.match) < STABLE_MATCH_EXAMPLES:
            issues.append(
                Issue(
                    "examples-required",
                    _loc(ruleset, rule, "status"),
                    f"a stable rule needs at least {STABLE_MATCH_EXAMPLES} match examples and one"
                    " no_match example; keep it status: test until it has them",
                )
            )
    return issues


_TEMPLATE_BASE = {
    "node",
    "nodes",
    "node_count",
    "count",
    "rank",
    "device",
    "job_id",
    "state",
    "exit_code",
    "user",
    "finding",
    "host",
}


def check_templates(ruleset: RuleSet) -> list[Issue]:
    """Placeholders in an extractor label must name one of its fields (warning only)."""
    issues = []
    for ex in ruleset.extractors:
        rule: ExtractorRule = ex.rule
        known = set(ex.fields) | _TEMPLATE_BASE
        if rule.emit.lookup is not None and rule.emit.lookup.table in ruleset.tables:
            table = ruleset.tables[rule.emit.lookup.table]
            known |= {rule.emit.lookup.prefix + c for c in table.columns}
        for name in placeholders(rule.emit.label):
            if name not in known:
                issues.append(
                    Issue(
                        "template-fields",
                        _loc(ruleset, rule, "emit", "label"),
                        f"label uses {{{name}}}, which is not a field of this event",
                    )
                )
    return issues


# a group that repeats something already repeated: (a+)+, (\w*)*, (x+|y)+ ...; or a repeated
# group of alternatives that can overlap: (?:a|aa)+
_NESTED = re.compile(
    r"\((?:\?[:P]?(?:<\w+>)?)?(?:[^()\\]|\\.)*[+*}]\)[+*]"
    r"|\((?:\?[:P]?(?:<\w+>)?)?(?:[^()\\]|\\.)*\|(?:[^()\\]|\\.)*\)[+*{]"
)
# an unbounded wildcard: .* .+ .*? .+? (not [^x]* and not .{0,N})
_WILD = re.compile(r"(?<!\\)\.[+*]")


def _branches(pattern: str) -> list[str]:
    """The top-level alternatives of a pattern (``a.*b|c.*d`` has two)."""
    out, depth, start, escaped, in_class = [], 0, 0, False, False
    for i, ch in enumerate(pattern):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
    out.append(pattern[start:])
    return out


_FILLERS = ("a", " ", ",", "a ", "a,", "=,", ": ", "0.", "\t")


def _slowest(ex: CompiledExtractor, length: int = 6000, budget: float = 0.2) -> float:
    """Seconds the extractor's regex takes on the worst of some hostile lines: one of its
    literals followed (directly or after a space) by a long run of a filler, with or without a
    character that fails the match at the end (capped at ``budget``)."""
    worst = 0.0
    for literal in ex.literals[:4] or ("",):
        for filler in _FILLERS:
            for joint in ("", " "):
                for end in ("", "!"):  # a run that fails only at its very end backtracks most
                    text = literal + joint + filler * (length // len(filler)) + end
                    started = time.perf_counter()
                    try:
                        ex.regex.search(text, timeout=budget)
                    except TimeoutError:
                        return budget
                    worst = max(worst, time.perf_counter() - started)
    return worst


def check_regex(ruleset: RuleSet) -> list[Issue]:
    """Patterns prone to catastrophic backtracking (warning). A pattern that looks risky (a
    repeated group whose body is itself repeated, e.g. ``(a+)+``, or two unbounded ``.*`` in one
    alternative) is timed on hostile lines; it is reported when one takes over 50 ms. Each line
    gets a time budget at run time anyway, and a slow pattern loses the lines it runs out on."""
    issues = []
    for ex in ruleset.extractors:
        pattern = ex.rule.match.regex
        problem = None
        risky = _NESTED.search(pattern) or any(
            len(_WILD.findall(branch)) >= 2 for branch in _branches(pattern)
        )
        # a busy machine can slow one measurement: a pattern is slow only if it stays slow
        # (measured again, up to three times in all, only when a measurement is over 50 ms)
        took = float("inf") if risky else 0.0
        for _ in range(3 if risky else 0):
            took = min(took, _slowest(ex))
            if took <= 0.05:
                break
        if took > 0.05:
            problem = (
                f"{took * 1000:.0f} ms on a 6,000-character line; bound repeated parts"
                " ([^,]*, .{0,200}?) and avoid nested repeats such as (a+)+"
            )
        if problem:
            issues.append(
                Issue(
                    "regex-backtracking",
                    _loc(ruleset, ex.rule, "match", "regex"),
                    f"the regex may backtrack badly on long lines: {problem}",
                    error=False,
                )
            )
    return issues


# streams a line of which may be about a node, a GPU, a process or a job (not the job's output)
_NODE_SIDE = frozenset({*NODE_STREAMS, Stream.SLURMCTLD})


def check_scope(ruleset: RuleSet) -> list[Issue]:
    """An extractor that reads a node stream must say what its line is about (``emit.scope``):
    without it, its events on a shared node cannot be told from another job's."""
    issues = []
    for ex in ruleset.extractors:
        if ex.rule.emit.scope is None and ex.streams & _NODE_SIDE:
            issues.append(
                Issue(
                    "scope-required",
                    _loc(ruleset, ex.rule, "emit"),
                    f"{ex.id} reads {', '.join(sorted(s.value for s in ex.streams & _NODE_SIDE))}:"
                    " set emit.scope (node, gpu, process or job; docs/rules.md)",
                )
            )
    return issues


def check_nccl_info(ruleset: RuleSet) -> list[Issue]:
    """An event extractor written for NCCL INFO lines must say so (``match.nccl_info``):
    without it the lines are hidden from it and it can never match."""
    issues = []
    for ex in ruleset.extractors:
        if ex.reads_info:
            continue
        texts = [ex.rule.match.regex, *ex.literals]
        if any("NCCL INFO" in text for text in texts):
            issues.append(
                Issue(
                    "nccl-info",
                    _loc(ruleset, ex.rule, "match"),
                    f"{ex.id} looks for NCCL INFO lines, which only context extractors and"
                    " extractors with match.nccl_info: true read; set it (docs/rules.md)",
                )
            )
    return issues


CHECKS: dict[str, Callable[[RuleSet], list[Issue]]] = {
    "ids": check_ids,
    "references": check_references,
    "examples": check_examples,
    "templates": check_templates,
    "regex": check_regex,
    "scope": check_scope,
    "nccl-info": check_nccl_info,
}


def lint(ruleset: RuleSet) -> list[Issue]:
    """Every check over the whole ruleset, sorted by location."""
    issues: list[Issue] = []
    for check in CHECKS.values():
        issues.extend(check(ruleset))
    return sorted(issues, key=lambda i: (i.location.path, i.location.line, i.check))
