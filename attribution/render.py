"""Turn verdicts, back-test reports and rule-test results into rich renderables. Never prints."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from attribution.backtest import CLASSES, Report
from attribution.hostlist import compress
from attribution.model import ChainRole, Coverage, CoverageStatus, Placement, SubDomain, Verdict

DOMAIN_STYLE = {
    "hardware": "bold red",
    "system_software": "bold magenta",
    "infrastructure": "bold yellow",
    "application": "bold cyan",
    "ambiguous": "bold white",
    "unattributed": "dim",
    "none": "bold green",
}
ROLE_STYLE = {"root": "bold red", "downstream": "yellow", "context": "dim"}


def _time(value: datetime | None, *, date: bool = True) -> str:
    if value is None:
        return "untimed"
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def duration(seconds: float | None, sep: str = "", unknown: str = "?") -> str:
    """``1h30m0s`` (``sep`` between the parts: ``1h 30m 0s``); ``unknown`` for None."""
    if seconds is None:
        return unknown
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    parts = [f"{d}d"] if d else []
    if h or d:
        parts.append(f"{h}h")
    if m or h or d:
        parts.append(f"{m}m")
    parts.append(f"{s}s")
    return sep.join(parts)


def _nodes(nodes: Sequence[str], limit: int = 40) -> str:
    text = compress(nodes)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# C0 controls but tab and newline, DEL and C1 controls: evidence is text written by others
# (job output, job names), and an escape sequence in it must not drive the operator's terminal
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    """``text`` with terminal control characters shown as ``\\xNN`` instead of acting."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass's field names (() for other types)
_PLAIN = (type(None), bool, int, float, datetime, enum.Enum)  # kept as they are


def _scrub(value: Any) -> Any:
    """A copy of a verdict (dataclasses, lists, dicts) with every string made ``safe_text``.

    What has no control character is returned as it is, not copied: a verdict of a 16,000-node
    job holds a million strings (node names, coverage), and copying each dataclass around them
    cost seconds."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, tuple | list | dict):
        try:  # strings only (node names): one scan for all of them
            texts = "\n".join(value.values() if isinstance(value, dict) else value)
            if isinstance(value, dict):
                texts += "\n" + "\n".join(value)
            if _CONTROL.search(texts) is None:
                return value
        except TypeError:
            pass
        if isinstance(value, dict):
            pairs = [(k, v, _scrub(k), _scrub(v)) for k, v in value.items()]
            if all(k is a and v is b for k, v, a, b in pairs):
                return value
            return {a: b for _, _, a, b in pairs}
        items = [_scrub(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        dataclass = dataclasses.is_dataclass(value) and not isinstance(value, type)
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(value)) if dataclass else ()
    if not names:
        return value
    changes = {}
    for name in names:
        old = getattr(value, name)
        new = _scrub(old)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value


def verdict_view(verdict: Verdict, *, verbose: bool = False) -> RenderableType:
    """The human view: the verdict on top, the symptom chain below, then coverage."""
    coverage = verdict.coverage  # one entry per source: made safe where shown, not copied
    verdict = _scrub(dataclasses.replace(verdict, coverage=()))
    job = verdict.job
    head = Text()
    head.append(f"Job {job.display_id}", style="bold")
    if job.cluster:
        head.append(f" on {job.cluster}")
    if job.user:
        head.append(f" · user {job.user}")
    state = job.state or "state unknown"
    if job.cancelled_by:
        state += f" by {job.cancelled_by}"
    head.append(f" · {state}")
    if job.exit_code:
        head.append(f" {job.exit_code}")
    if job.nodes:
        head.append(
            f" · {_nodes(job.nodes)} ({len(job.nodes)} node{'s' if len(job.nodes) != 1 else ''})"
        )
    if job.start or job.end:
        head.append(
            f"\n{_time(job.start)} → {_time(job.end)} UTC ({duration(job.duration)})", style="dim"
        )

    body = Text()
    body.append(verdict.terminal_state.value.upper(), style="bold")
    body.append(" · ")
    body.append(verdict.sub_domain.value, style=DOMAIN_STYLE.get(verdict.sub_domain.value, ""))
    if verdict.cause:
        body.append(f" · {verdict.cause.id}", style="bold")
        if verdict.cause.rule and not verdict.cause.rule.startswith("engine@"):
            body.append(f" ({verdict.cause.rule})", style="dim")
    body.append("\n" + verdict.summary)
    if verdict.responsible:
        body.append("\nResponsible: ", style="bold")
        body.append(
            ", ".join(
                " ".join(x for x in (r.node, r.component, r.device) if x)
                + (f" (confirmed by {r.confirmed_by})" if r.confirmed_by else "")
                for r in verdict.responsible
            )
        )
    if verdict.suspects:
        body.append("\nSuspects (unconfirmed, not blamed): ", style="bold yellow")
        body.append(
            ", ".join(" ".join(x for x in (r.node, r.device) if x) for r in verdict.suspects)
        )
    if verdict.placement:
        body.append("\nWhere: ", style="bold")
        body.append(placement_text(verdict.placement))
    if verdict.confidence:
        body.append("\nConfidence: ", style="bold")
        body.append(f"{verdict.confidence.level}: {verdict.confidence.reason}")
    if verdict.action:
        body.append("\nAction: ", style="bold")
        body.append(verdict.action)
    parts: list[RenderableType] = [
        head,
        Panel(body, title="verdict", title_align="left", expand=True),
    ]

    if verdict.symptom_chain:
        parts.append(chain_table(verdict, verbose=verbose))
    else:
        parts.append(Text("No failure signals were extracted from the evidence.", style="dim"))
    if verdict.alternatives:
        alt = Table(title="Other candidates", title_justify="left", box=None, pad_edge=False)
        alt.add_column("cause")
        alt.add_column("sub_domain")
        alt.add_column("nodes")
        alt.add_column("why not")
        for a in verdict.alternatives[: 8 if not verbose else None]:
            alt.add_row(
                a.cause.id,
                a.sub_domain.value,
                _nodes([r.node for r in a.responsible]) or "-",
                a.why_not,
            )
        parts.append(alt)
    if verdict.ignored and verbose:
        ign = Table(title="Ignored (outside the job window)", title_justify="left", box=None)
        ign.add_column("first seen")
        ign.add_column("count", justify="right")
        ign.add_column("nodes")
        ign.add_column("symptom")
        for e in verdict.ignored:
            ign.add_row(_time(e.first_at), str(e.count), _nodes(e.nodes), e.symptom)
        parts.append(ign)
    elif verdict.ignored:
        n = sum(e.count for e in verdict.ignored)
        parts.append(
            Text(
                f"{n} signal(s) outside the job window were ignored (--verbose lists them).",
                style="dim",
            )
        )
    notes = verdict.ownership.get("notes") if verdict.ownership else None
    if notes:
        parts.append(Text("Ownership not checked: " + "; ".join(map(str, notes)), style="dim"))
    parts.append(_coverage_view(coverage, verbose=verbose))
    return Group(*parts)


def chain_table(verdict: Verdict, *, verbose: bool = False) -> Table:
    table = Table(title="Symptom chain", title_justify="left", box=None, pad_edge=False)
    table.add_column("role")
    table.add_column("first seen (UTC)")
    table.add_column("count", justify="right")
    table.add_column("nodes")
    table.add_column("whose")
    table.add_column("symptom")
    for entry in verdict.symptom_chain:
        nodes = _nodes(entry.nodes) if entry.nodes else "-"
        if entry.node_count > 1:
            nodes += f" ({entry.node_count})"
        whose = Text(entry.owner or "-")
        if entry.trust == "untrusted":
            whose.append(" untrusted", style="yellow")
        symptom = Text(entry.symptom)
        if entry.note:
            symptom.append(f" ({entry.note})", style="italic")
        if verbose or entry.role is ChainRole.ROOT:
            symptom.append(f"\n  {entry.example[:200]}", style="dim")
            symptom.append(f"\n  {entry.source}", style="dim italic")
        table.add_row(
            Text(entry.role.value, style=ROLE_STYLE[entry.role.value]),
            _time(entry.first_at),
            str(entry.count),
            nodes,
            whose,
            symptom,
        )
    return table


def coverage_view(verdict: Verdict, *, verbose: bool = False) -> RenderableType:
    return _coverage_view(verdict.coverage, verbose=verbose)


FOLD_COVERAGE = 1000  # coverage entries a verbose view lists one by one; above, nothing-read folds
_NOTHING_READ = (CoverageStatus.MISSING, CoverageStatus.EMPTY)


def _coverage_view(coverage: Sequence[Coverage], *, verbose: bool = False) -> RenderableType:
    counts: dict[str, int] = {}
    for c in coverage:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    summary = Text("Coverage: ", style="bold")
    summary.append(
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing read"
    )
    untimed = sum(c.untimed for c in coverage)
    if untimed:
        summary.append(f"; {untimed} signal(s) could not be placed in time", style="yellow")
    if not verbose:
        problems = [c for c in coverage if c.status is not CoverageStatus.OK]
        if problems:
            names = ", ".join(
                f"{c.stream.value}{'@' + safe_text(c.node) if c.node else ''}" for c in problems[:6]
            )
            more = f" and {len(problems) - 6} more" if len(problems) > 6 else ""
            summary.append(f" (not read: {names}{more}; --verbose for details)", style="dim")
        return summary
    table = Table(box=None, pad_edge=False)
    for col in ("stream", "node", "status", "trust", "bytes", "lines", "untimed", "reason"):
        table.add_column(
            col,
            justify="right" if col in ("bytes", "lines", "untimed") else "left",
            overflow="fold" if col == "node" else "ellipsis",  # a folded row's host list, whole
        )
    for row in _coverage_rows(coverage):
        table.add_row(*row)
    return Group(summary, table)


def _coverage_rows(coverage: Sequence[Coverage]) -> list[tuple[str, ...]]:
    """The verbose coverage table's rows: one per entry; for more than ``FOLD_COVERAGE``
    entries (a job of thousands of nodes), the node sources with nothing read that say the same
    (stream, status, trust, reason) fold into one row naming their nodes as a host list."""
    rows: list[tuple[str, ...]] = []
    folded: dict[tuple[str, str, str, str], list[str]] = {}
    fold = len(coverage) > FOLD_COVERAGE
    for c in coverage:
        trust = c.trust.value if c.trust else "-"
        reason = safe_text(c.reason or "")
        if fold and c.node and c.status in _NOTHING_READ and not (c.bytes or c.lines or c.untimed):
            key = (c.stream.value, c.status.value, trust, reason)
            if key not in folded:
                folded[key] = []
                rows.append(key)
            folded[key].append(c.node)
            continue
        rows.append(
            (
                c.stream.value,
                safe_text(c.node) if c.node else "-",
                c.status.value,
                trust,
                str(c.bytes),
                str(c.lines),
                str(c.untimed),
                reason,
            )
        )
    out: list[tuple[str, ...]] = []
    for row in rows:
        if len(row) == 4:
            stream, status, trust, reason = row
            nodes = folded[(stream, status, trust, reason)]
            shown = safe_text(compress(nodes)) if len(nodes) > 1 else safe_text(nodes[0])
            if len(nodes) > 1:
                reason = f"{len(nodes)} nodes: {reason}"
            out.append((stream, shown, status, trust, "0", "0", "0", reason))
        else:
            out.append(row)
    return out


def backtest_view(report: Report) -> RenderableType:
    report = _scrub(report)
    table = Table(title="Cases", title_justify="left", box=None, pad_edge=False)
    for col in ("case", "expected", "got", "score", "nodes", "cause", "blame"):
        table.add_column(col)
    style = {
        "exact": "green",
        "acceptable": "green",
        "ambiguous": "yellow",
        "unattributed": "yellow",
        "wrong": "bold red",
    }
    for c in report.cases:
        nodes = (
            "-"
            if c.nodes_ok is None
            else ("ok" if c.nodes_ok else f"got {','.join(c.got_nodes) or '[]'}")
        )
        table.add_row(
            c.name,
            c.expected_sub_domain or "?",
            c.got_sub_domain,
            Text(c.score, style=style.get(c.score, "")),
            nodes,
            c.error
            or (c.cause or "-")
            + (
                ""
                if c.cause_ok is None
                else (" ok" if c.cause_ok else f" (not {c.expected_cause})")
            ),
            Text(c.blame.replace("_", " "), style="bold red") if c.blame else "-",
        )
    data = report.to_dict()
    counts = data["counts"]
    n = data["scored"]
    totals = Text()
    totals.append(f"{n} case(s): ", style="bold")
    totals.append(", ".join(f"{counts[k]} {k}" for k in counts))
    totals.append(f"\nexact or acceptable: {data['exact_or_acceptable_rate']:.1%}")
    totals.append(f" · ambiguous instead of expected: {data['ambiguous_rate']:.1%}")
    totals.append(f" · unattributed instead: {data['unattributed_rate']:.1%}")
    totals.append(
        f"\nall verdicts ambiguous: {data['verdicts_ambiguous']:.1%}"
        f" · all verdicts unattributed: {data['verdicts_unattributed']:.1%}"
    )
    na = data["responsible_node_accuracy"]
    sa = data["suspect_node_accuracy"]
    ta = data["terminal_state_accuracy"]
    if na["judged"]:
        rate = na["correct"] / na["judged"]
        totals.append(f"\nresponsible node: {na['correct']}/{na['judged']} ({rate:.1%})")
    if sa["judged"]:
        rate = sa["correct"] / sa["judged"]
        totals.append(f" · suspect node: {sa['correct']}/{sa['judged']} ({rate:.1%})")
    if ta["judged"]:
        rate = ta["correct"] / ta["judged"]
        totals.append(f" · terminal_state: {ta['correct']}/{ta['judged']} ({rate:.1%})")
    ca = data["cause_accuracy"]
    if ca["judged"]:
        rate = ca["correct"] / ca["judged"]
        totals.append(
            f"\ncause: {ca['correct']}/{ca['judged']} ({rate:.1%}) of the cases whose answer"
            " names a rule id"
        )
    blame = data["wrong_blame"]
    totals.append("\nwrong blame: ")
    totals.append(
        " · ".join(f"{k.replace('_', ' ')} {v}" for k, v in blame.items()),
        style="bold red" if any(blame.values()) else "green",
    )
    if data["errors"]:
        totals.append(f"\n{data['errors']} case(s) could not be diagnosed", style="bold red")
    per = Table(title="Per sub_domain", title_justify="left", box=None, pad_edge=False)
    for col in ("sub_domain", "cases", "exact", "exact+acceptable", "precision", "recall"):
        per.add_column(col, justify="left" if col == "sub_domain" else "right")
    for label, row in data["per_class"].items():
        per.add_row(
            label,
            str(row["support"]),
            str(row["exact"]),
            str(row["exact_or_acceptable"]),
            f"{row['precision']:.2f}",
            f"{row['recall']:.2f}",
        )
    return Group(
        table, Text(""), per, Text(""), confusion_view(data["confusion"]), Text(""), totals
    )


def confusion_view(confusion: dict[str, dict[str, int]]) -> Table:
    got_cols = [c for c in CLASSES if any(c in row for row in confusion.values())]
    table = Table(title="Confusion (rows: expected, columns: got)", title_justify="left", box=None)
    table.add_column("expected \\ got")
    for col in got_cols:
        table.add_column(col, justify="right")
    for expected in sorted(confusion):
        row = confusion[expected]
        table.add_row(
            expected,
            *[
                Text(
                    str(row.get(col, 0)) if row.get(col) else ".",
                    style="bold" if col == expected else "",
                )
                for col in got_cols
            ],
        )
    return table


def list_view(rows: Sequence[dict[str, Any]]) -> Table:
    rows = _scrub(list(rows))
    table = Table(box=None, pad_edge=False)
    for col in ("job", "user", "end (UTC)", "state", "terminal", "sub_domain", "cause", "nodes"):
        table.add_column(col)
    for r in rows:
        end = (r.get("end") or "")[:19].replace("T", " ")
        table.add_row(
            r.get("display_id") or r.get("job_id") or "?",
            r.get("user") or "-",
            end or "-",
            r.get("state") or "-",
            r.get("terminal_state") or "-",
            Text(r.get("sub_domain") or "-", style=DOMAIN_STYLE.get(r.get("sub_domain") or "", "")),
            r.get("cause_id") or "-",
            r.get("responsible_nodes") or "-",
        )
    return table


__all__ = [
    "SubDomain",
    "backtest_view",
    "chain_table",
    "coverage_view",
    "list_view",
    "placement_text",
    "verdict_view",
]


def placement_text(placement: Placement) -> str:
    """``gpu[03-04] (responsible) share leaf switch s2 (16 nodes)``; one node: ``is under``."""
    many = "," in placement.nodes or "[" in placement.nodes
    verb = "share" if many else "is under"
    return (
        f"{placement.nodes} ({placement.basis}) {verb} {placement.label}"
        f" ({placement.size} node{'s' if placement.size != 1 else ''})"
    )
