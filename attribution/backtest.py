"""Score verdicts against hand-written ``expected.yaml`` answers (``sattr backtest``).

Per case the score is one of ``exact`` (the expected sub_domain),
``acceptable`` (one of ``acceptable_sub_domains``), ``ambiguous``,
``unattributed`` or ``wrong``. Totals add a sub_domain confusion matrix,
per-class precision and recall, responsible-node accuracy (the blamed node
set equals ``responsible_nodes``), suspect-node accuracy (``suspect_nodes``: nodes only
untrusted evidence names, never blamed) and terminal_state accuracy.

The cause is scored too when ``cause`` names a diagnosis rule id (or ``ambiguous``,
``unattributed``, ``passed``): right when the verdict's cause id is it or one of
``acceptable_causes``. Free text in ``cause`` is kept as prose and counted as not scored.
Wrong blame is counted on its own: a verdict that blamed a node the answer does not blame
(``blamed_wrong_node``), one that blamed no node where the answer names one (``missed_node``),
and the sub_domain errors that move blame across the line between the job and the system
(``system_blamed_for_application``: expected application, got hardware, system_software or
infrastructure; ``application_blamed_for_system``: the reverse; an acceptable answer is neither).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attribution.model import CAUSE_DOMAINS, SubDomain, TerminalState, Verdict

SCORES = ("exact", "acceptable", "ambiguous", "unattributed", "wrong")
#: cause ids a verdict has without a diagnosis rule
ENGINE_CAUSES = frozenset({"ambiguous", "unattributed", "passed"})
BLAME_KINDS = (
    "blamed_wrong_node",
    "missed_node",
    "system_blamed_for_application",
    "application_blamed_for_system",
)
_SYSTEM = frozenset({"hardware", "system_software", "infrastructure"})
_RULE_ID = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")
CLASSES = [d.value for d in CAUSE_DOMAINS] + ["ambiguous", "unattributed", "none"]


@dataclass(slots=True)
class CaseResult:
    """One scored bundle."""

    name: str
    path: str
    expected_sub_domain: str | None
    got_sub_domain: str
    score: str
    expected_nodes: list[str] | None
    got_nodes: list[str]
    nodes_ok: bool | None
    expected_terminal: str | None
    got_terminal: str
    terminal_ok: bool | None
    cause: str | None
    summary: str
    error: str | None = None
    expected_suspects: list[str] | None = None
    got_suspects: list[str] = field(default_factory=list)
    suspects_ok: bool | None = None
    expected_cause: str | None = None
    cause_ok: bool | None = None
    blame: str | None = None


_DOMAINS = frozenset(s.value for s in SubDomain)
_TERMINALS = frozenset(t.value for t in TerminalState)


def check_expected(expected: Any) -> list[str]:
    """Problems with an expected.yaml's values (an unknown sub_domain, a wrong type)."""
    if not isinstance(expected, dict):
        return ["expected.yaml must be a mapping"]
    problems = []
    domains = [expected.get("sub_domain")]
    acceptable = expected.get("acceptable_sub_domains") or []
    if not isinstance(acceptable, list):
        problems.append("acceptable_sub_domains must be a list")
        acceptable = []
    for value in [*domains, *acceptable]:
        if value is not None and _normalise_domain(value) not in _DOMAINS:
            problems.append(f"unknown sub_domain {value!r} (one of {', '.join(sorted(_DOMAINS))})")
    term = expected.get("terminal_state")
    if term is not None and str(term) not in _TERMINALS:
        problems.append(f"unknown terminal_state {term!r}")
    cause = expected.get("cause")
    if cause is not None and not isinstance(cause, str):
        problems.append("cause must be text (a rule id or prose)")
    causes = expected.get("acceptable_causes")
    if causes is not None and not (
        isinstance(causes, list) and all(isinstance(c, str) for c in causes)
    ):
        problems.append("acceptable_causes must be a list of rule ids")
    for key in ("responsible_nodes", "suspect_nodes"):
        nodes = expected.get(key)
        if nodes is not None and not (
            isinstance(nodes, list) and all(isinstance(n, str) for n in nodes)
        ):
            problems.append(f"{key} must be a list of node names")
    return problems


def scored_cause(expected: dict[str, Any], known: Collection[str] | None = None) -> str | None:
    """The expected cause when it is a rule id we can score, else None (prose).

    With ``known`` (the loaded diagnosis rule ids) a kebab-case word that names no rule is
    prose too; without it any kebab-case word counts.
    """
    cause = expected.get("cause")
    if not isinstance(cause, str) or not _RULE_ID.match(cause.strip()):
        return None
    cause = cause.strip()
    if known is not None and cause not in known and cause not in ENGINE_CAUSES:
        return None
    return cause


def verdict_cause(verdict: Verdict) -> str:
    """The verdict's cause id; ``unattributed`` or ``passed`` when no rule decided it."""
    if verdict.cause is not None:
        return verdict.cause.id
    return "passed" if verdict.terminal_state is TerminalState.PASS else "unattributed"


def blame_error(
    exp_sd: str | None, got_sd: str, exp_nodes: Sequence[str] | None, got_nodes: Sequence[str]
) -> str | None:
    """The kind of wrong blame in one verdict, or None (see the module's docstring)."""
    if exp_nodes is not None and set(got_nodes) - set(exp_nodes):
        return "blamed_wrong_node"
    if exp_sd == "application" and got_sd in _SYSTEM:
        return "system_blamed_for_application"
    if exp_sd in _SYSTEM and got_sd == "application":
        return "application_blamed_for_system"
    if exp_nodes and not got_nodes:
        return "missed_node"
    return None


def score_case(
    name: str,
    path: str,
    expected: dict[str, Any],
    verdict: Verdict,
    known_causes: Collection[str] | None = None,
) -> CaseResult:
    """Compare one verdict with its expectation.

    Raises:
        ValueError: the expectation is malformed (see ``check_expected``).
    """
    problems = check_expected(expected)
    if problems:
        raise ValueError("expected.yaml: " + "; ".join(problems))
    exp_sd = expected.get("sub_domain")
    exp_sd = _normalise_domain(exp_sd)
    acceptable = {_normalise_domain(s) for s in expected.get("acceptable_sub_domains") or []}
    got = verdict.sub_domain.value
    if got == exp_sd:
        score = "exact"
    elif got in acceptable:
        score = "acceptable"
    elif got == SubDomain.AMBIGUOUS.value:
        score = "ambiguous"
    elif got == SubDomain.UNATTRIBUTED.value:
        score = "unattributed"
    else:
        score = "wrong"
    got_nodes = sorted({r.node for r in verdict.responsible})
    exp_nodes = expected.get("responsible_nodes")
    nodes_ok = None if exp_nodes is None else sorted(set(map(str, exp_nodes))) == got_nodes
    got_suspects = sorted({r.node for r in verdict.suspects})
    exp_suspects = expected.get("suspect_nodes")
    if exp_suspects is None and exp_nodes is not None:
        exp_suspects = []  # an answer that names the blamed nodes names every suspect too
    suspects_ok = (
        None if exp_suspects is None else sorted(set(map(str, exp_suspects))) == got_suspects
    )
    exp_term = expected.get("terminal_state")
    got_term = verdict.terminal_state.value
    exp_cause = scored_cause(expected, known_causes)
    got_cause = verdict_cause(verdict)
    cause_ok = None
    if exp_cause is not None:
        cause_ok = got_cause in {exp_cause, *(expected.get("acceptable_causes") or [])}
    return CaseResult(
        name=name,
        path=path,
        expected_sub_domain=exp_sd,
        got_sub_domain=got,
        score=score,
        expected_nodes=None if exp_nodes is None else [str(n) for n in exp_nodes],
        got_nodes=got_nodes,
        nodes_ok=nodes_ok,
        expected_terminal=exp_term,
        got_terminal=got_term,
        terminal_ok=None if exp_term is None else exp_term == got_term,
        cause=got_cause,
        summary=verdict.summary,
        expected_suspects=None if exp_suspects is None else [str(n) for n in exp_suspects],
        got_suspects=got_suspects,
        suspects_ok=suspects_ok,
        expected_cause=exp_cause,
        cause_ok=cause_ok,
        blame=blame_error(
            exp_sd,
            got if score not in ("exact", "acceptable") else (exp_sd or got),
            None if exp_nodes is None else [str(n) for n in exp_nodes],
            got_nodes,
        ),
    )


def _normalise_domain(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    return {"user_code": "application", "user": "application", "not_a_cause": "none"}.get(
        text, text
    )


@dataclass(slots=True)
class Report:
    """Totals over many cases."""

    cases: list[CaseResult] = field(default_factory=list)

    @property
    def scored(self) -> list[CaseResult]:
        return [c for c in self.cases if c.error is None]

    def counts(self) -> dict[str, int]:
        found = Counter(c.score for c in self.scored)
        return {s: found.get(s, 0) for s in SCORES}

    def rate(self, *scores: str) -> float:
        """The share of all cases with one of ``scores``; a case that could not be diagnosed
        or scored counts against every rate."""
        n = len(self.cases)
        return sum(1 for c in self.scored if c.score in scores) / n if n else 0.0

    def verdict_share(self, sub_domain: str) -> float:
        """The share of verdicts (whatever was expected) with this sub_domain."""
        n = len(self.scored)
        return sum(1 for c in self.scored if c.got_sub_domain == sub_domain) / n if n else 0.0

    def node_accuracy(self) -> tuple[int, int]:
        judged = [c for c in self.scored if c.nodes_ok is not None]
        return sum(1 for c in judged if c.nodes_ok), len(judged)

    def suspect_accuracy(self) -> tuple[int, int]:
        judged = [c for c in self.scored if c.suspects_ok is not None]
        return sum(1 for c in judged if c.suspects_ok), len(judged)

    def cause_accuracy(self) -> tuple[int, int]:
        """Right causes, and cases whose expected cause is a rule id (prose is not scored)."""
        judged = [c for c in self.scored if c.cause_ok is not None]
        return sum(1 for c in judged if c.cause_ok), len(judged)

    def blame_counts(self) -> dict[str, int]:
        """Wrong-blame errors by kind; every kind is listed, zero or not."""
        found = Counter(c.blame for c in self.scored if c.blame)
        return {k: found.get(k, 0) for k in BLAME_KINDS}

    def terminal_accuracy(self) -> tuple[int, int]:
        judged = [c for c in self.scored if c.terminal_ok is not None]
        return sum(1 for c in judged if c.terminal_ok), len(judged)

    def confusion(self) -> dict[str, dict[str, int]]:
        matrix: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for c in self.scored:
            matrix[c.expected_sub_domain or "?"][c.got_sub_domain] += 1
        return {k: dict(v) for k, v in matrix.items()}

    def per_class(self) -> dict[str, dict[str, float | int]]:
        """Precision and recall per expected sub_domain (acceptable counts as correct)."""
        out: dict[str, dict[str, float | int]] = {}
        labels = sorted({c.expected_sub_domain for c in self.scored if c.expected_sub_domain})
        for label in labels:
            support = [c for c in self.scored if c.expected_sub_domain == label]
            predicted = [c for c in self.scored if c.got_sub_domain == label]
            tp = sum(1 for c in support if c.got_sub_domain == label)
            ok = sum(1 for c in support if c.score in ("exact", "acceptable"))
            out[label] = {
                "support": len(support),
                "exact": tp,
                "exact_or_acceptable": ok,
                "precision": tp / len(predicted) if predicted else 0.0,
                "recall": tp / len(support) if support else 0.0,
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        node_ok, node_n = self.node_accuracy()
        sus_ok, sus_n = self.suspect_accuracy()
        term_ok, term_n = self.terminal_accuracy()
        cause_ok, cause_n = self.cause_accuracy()
        n = len(self.scored)
        return {
            "cases": len(self.cases),
            "scored": n,
            "errors": len(self.cases) - n,
            "counts": self.counts(),
            "exact_or_acceptable_rate": self.rate("exact", "acceptable"),
            "ambiguous_rate": self.rate("ambiguous"),
            "unattributed_rate": self.rate("unattributed"),
            "verdicts_ambiguous": self.verdict_share("ambiguous"),
            "verdicts_unattributed": self.verdict_share("unattributed"),
            "responsible_node_accuracy": {"correct": node_ok, "judged": node_n},
            "suspect_node_accuracy": {"correct": sus_ok, "judged": sus_n},
            "terminal_state_accuracy": {"correct": term_ok, "judged": term_n},
            "cause_accuracy": {"correct": cause_ok, "judged": cause_n},
            "wrong_blame": self.blame_counts(),
            "per_class": self.per_class(),
            "confusion": self.confusion(),
            "results": [
                {
                    "case": c.name,
                    "path": c.path,
                    "expected": c.expected_sub_domain,
                    "got": c.got_sub_domain,
                    "score": c.score,
                    "cause": c.cause,
                    "expected_cause": c.expected_cause,
                    "cause_ok": c.cause_ok,
                    "blame": c.blame,
                    "expected_nodes": c.expected_nodes,
                    "got_nodes": c.got_nodes,
                    "nodes_ok": c.nodes_ok,
                    "expected_suspects": c.expected_suspects,
                    "got_suspects": c.got_suspects,
                    "suspects_ok": c.suspects_ok,
                    "expected_terminal_state": c.expected_terminal,
                    "terminal_state": c.got_terminal,
                    "summary": c.summary,
                    "error": c.error,
                }
                for c in self.cases
            ],
        }


def find_cases(roots: Iterable[Path | str]) -> list[Path]:
    """Bundle directories with an ``expected.yaml`` under each root (or the root itself)."""
    out: list[Path] = []
    for root in roots:
        base = Path(root)
        if (base / "expected.yaml").is_file() and (base / "job.json").is_file():
            out.append(base)
            continue
        out.extend(
            sorted(
                p.parent for p in base.rglob("expected.yaml") if (p.parent / "job.json").is_file()
            )
        )
    return sorted(dict.fromkeys(out))


def error_result(name: str, path: str, expected: dict[str, Any] | None, message: str) -> CaseResult:
    exp = expected or {}
    return CaseResult(
        name=name,
        path=path,
        expected_sub_domain=_normalise_domain(exp.get("sub_domain")),
        got_sub_domain="error",
        score="wrong",
        expected_nodes=None,
        got_nodes=[],
        nodes_ok=None,
        expected_terminal=exp.get("terminal_state"),
        got_terminal="error",
        terminal_ok=None,
        cause=None,
        summary="",
        error=message,
    )


def summarise(results: Sequence[CaseResult]) -> Report:
    return Report(cases=list(results))
