"""Human views of the fleet report (``sattr nodes``, ``incidents``, ``links``, ``gpus``):
rich tables with a short reason per row; ``--json`` uses ``fleet.report_to_dict`` instead.

Print them on a console without markup (``cli.common.console(markup=False)``): node names,
causes and reasons come from verdicts and files. The lines meant to be copied into a shell
(drain suggestions, nccl-tests runs) are plain text from ``drain_lines`` and ``confirm_lines``,
printed without wrapping."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rich.console import Group as Lines
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from attribution.config import Config
from attribution.fleet import Fleet, FleetOptions, FleetReport
from attribution.hostlist import compress

STATUS_STYLE = {
    "suspect": "bold red",
    "domain": "yellow",
    "one-user": "cyan",
    "node": "yellow",
    "gpu": "bold red",
    "application": "cyan",
}


def fleet_options(
    config: Config, q: float | None = None, min_failures: int | None = None
) -> FleetOptions:
    """The configuration's ``fleet:`` settings as the detector's options (``q`` and
    ``min_failures`` override theirs when given)."""
    settings = config.fleet
    return FleetOptions(
        q=q if q is not None else settings.q,
        min_failures=min_failures if min_failures is not None else settings.min_failures,
        min_ratio=settings.min_ratio,
        min_users=settings.min_users,
        incident_window=settings.incident_window,
        domain_window=settings.domain_window,
        max_drain_share=settings.max_drain_share,
    )


def fleet_from_store(
    store: Path,
    options: FleetOptions,
    topology: Path | None,
    groups: Path | None,
    since: datetime | None,
    until: datetime | None,
    partition: str | None,
) -> Fleet:
    """The runs of the verdict store that ended in ``[since, until)`` (of ``partition``)
    loaded into a ``Fleet`` over the failure domains of ``topology`` and ``groups``. Whether
    the caller may see every user's jobs is theirs to check first.

    Raises:
        AttributionError: a store, topology or group file that cannot be read.
    """
    from attribution.fleetfile import load_topology
    from attribution.store import Store

    fleet = Fleet(
        topology=load_topology(topology, groups),
        options=options,
        since=since,
        until=until,
        partition=partition,
    )
    with Store(store, readonly=True) as opened:
        opened.fleet_into(fleet, since, until, partition)
    if partition and not fleet.runs:
        fleet.notes.append(f"no run of partition {partition!r} ended in the window")
    return fleet


def existing(path: Path | None) -> Path | None:
    """``path`` when it exists (anything there, a directory or FIFO included, is then read
    and refused by the reader with a clear error), else None."""
    if path is None:
        return None
    try:
        return path if path.exists() or path.is_symlink() else None
    except OSError:
        return path  # cannot even look: the reader says why


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def _num(value: float) -> str:
    if math.isinf(value):
        return "inf"
    return f"{value:.1f}"


def _p(value: float) -> str:
    return f"{value:.1e}" if value < 0.001 else f"{value:.3f}"


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, "dim"))


TESTS = {
    "nodes": "nodes: one-sided binomial of the failed jobs a node was responsible for against its"
    " partition's rate without it, and of its top cause on one device against the fleet's rate"
    " of that cause; Benjamini-Hochberg q <= {q}; at least {min_failures} failures, rate ratio"
    " >= {min_ratio}, >= {min_users} users. Domains, silent nodes: the same test on their own"
    " counts",
    "incidents": "incidents: failures of >= {min_users} users (or one user's, when node-side)"
    " on >= 3 nodes within {window:g} s, or under one failure domain, whose Poisson tail"
    " corrected for every window of the period is below 0.01",
    "links": "links: node pairs named together by peer errors, one-sided binomial against the two"
    " nodes' own rates; Benjamini-Hochberg q <= {q}; at least {min_failures} failed jobs,"
    " >= {min_users} users",
    "gpus": "GPUs: gpu = hardware XIDs in >= 2 jobs, or XID 13/31/43 of one class from >= 2"
    " applications; application = the same application's XIDs on other GPUs too",
}


def method(report: FleetReport, section: str = "nodes") -> Text:
    """The header every fleet view starts with: the window, the counts and this view's test
    (docs/fleet.md)."""
    o = report.options
    text = Text()
    text.append(f"{_when(report.since)} .. {_when(report.until)} UTC: ", style="bold")
    exposure = report.exposure if report.runs else "none"
    text.append(
        f"{report.runs:,} job runs (exposure: {exposure}), {report.failed:,} failed,"
        f" {len(report.incidents)} incident(s)\n"
    )
    text.append(
        TESTS[section].format(
            q=o.q,
            min_failures=o.min_failures,
            min_ratio=o.min_ratio,
            min_users=o.min_users,
            window=o.incident_window,
        )
        + " (docs/fleet.md)",
        style="dim",
    )
    for line in report.notes:
        text.append(f"\nnote: {line}", style="yellow")
    return text


def nodes_view(report: FleetReport, show_all: bool = False) -> RenderableType:
    parts: list[RenderableType] = [method(report)]
    table = Table(box=None, pad_edge=False, title_justify="left", title="nodes")
    for col in ("node", "partition", "jobs", "failed", "ratio", "p", "q", "users", "last"):
        table.add_column(col, no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("reason", ratio=1)
    shown = 0
    for row in report.nodes:
        if not show_all and row.status in ("ok", "low-count"):
            continue
        shown += 1
        t = row.test
        table.add_row(
            row.node,
            row.partition or "-",
            str(t.n),
            str(t.k),
            _num(t.ratio),
            _p(t.p),
            _p(t.q),
            str(row.users),
            _when(row.last),
            _status(row.status),
            row.reason or ", ".join(f"{c} x{n}" for c, n in list(row.causes.items())[:2]),
        )
    parts.append(table if shown else Text("nodes: none stands out", style="dim"))
    domains = [d for d in report.domains if show_all or d.status != "ok"]
    if domains:
        dt = Table(box=None, pad_edge=False, title="failure domains", title_justify="left")
        for col in ("domain", "nodes", "jobs", "failed", "ratio", "p", "q", "status"):
            dt.add_column(col, no_wrap=True)
        dt.add_column("reason", ratio=1)
        for d in domains:
            t = d.test
            dt.add_row(
                d.group.label,
                str(len(d.group.nodes)),
                str(t.n),
                str(t.k),
                _num(t.ratio),
                _p(t.p),
                _p(t.q),
                _status(d.status),
                d.reason,
            )
        parts.append(dt)
    silent = [s for s in report.silent if show_all or s.status == "suspect"]
    if silent:
        st = Table(box=None, pad_edge=False, title="silent nodes", title_justify="left")
        for col in ("node", "jobs", "lost", "ratio", "p", "q", "events", "cohort", "last"):
            st.add_column(col, no_wrap=True)
        st.add_column("reason", ratio=1)
        for s in silent:
            t = s.test
            st.add_row(
                s.node,
                str(t.n),
                str(t.k),
                _num(t.ratio),
                _p(t.p),
                _p(t.q),
                str(s.events),
                str(s.cohort or "-"),
                _when(s.last),
                s.reason,
            )
        parts.append(st)
    return Lines(*parts)


def drain_lines(report: FleetReport) -> list[str]:
    """The drain suggestions as plain lines, with their heading (none: one line saying so)."""
    o = report.options
    if not report.drains and not report.held_back:
        return ["drain suggestions: none"]
    lines = [
        f"# drain suggestions (shadow mode: never run; at most {o.max_drain_share:.0%} of a"
        " partition at once; commented lines are user problems, not node ones):"
    ]
    lines += report.drains
    lines += [f"# held back: {held}" for held in report.held_back]
    return lines


def confirm_lines(report: FleetReport) -> list[str]:
    """For each suspect node pair, the nccl-tests run that would confirm it."""
    return [
        f"# confirm {r.a} <-> {r.b}: {r.confirm}"
        for r in report.links
        if r.status == "suspect" and r.confirm
    ]


def incidents_view(report: FleetReport) -> RenderableType:
    table = Table(box=None, pad_edge=False)
    for col in ("id", "start (UTC)", "span", "jobs", "users", "nodes", "cause", "p", "label"):
        table.add_column(col)
    for i in report.incidents:
        table.add_row(
            i.id,
            i.start.strftime("%Y-%m-%d %H:%M:%S"),
            f"{(i.end - i.start).total_seconds():.0f} s",
            str(len(i.jobs)),
            str(i.users),
            _short(compress(i.nodes)),
            i.cause,
            _p(i.p),
            i.label,
        )
    body: RenderableType = table if report.incidents else Text("no incidents", style="dim")
    return Lines(method(report, "incidents"), body)


def links_view(report: FleetReport, show_all: bool = False) -> RenderableType:
    rows = [r for r in report.links if show_all or r.status != "ok"]
    table = Table(box=None, pad_edge=False)
    for col in ("pair", "failed", "of runs", "p", "q", "users", "status", "reason"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            f"{r.a} <-> {r.b}",
            str(r.test.k),
            str(r.test.n),
            _p(r.test.p),
            _p(r.test.q),
            str(r.users),
            _status(r.status),
            r.reason,
        )
    body: list[RenderableType] = [method(report, "links")]
    body.append(table if rows else Text("links: no pair stands out", style="dim"))
    return Lines(*body)


def gpus_view(report: FleetReport, show_all: bool = False) -> RenderableType:
    rows = [r for r in report.gpus if show_all or r.status == "gpu"]
    table = Table(box=None, pad_edge=False)
    for col in ("node", "GPU", "jobs", "applications", "XIDs", "status", "reason"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.node,
            r.device,
            str(r.jobs),
            str(r.applications),
            " ".join(f"{code}x{n}" for code, n in r.codes.items()),
            _status(r.status),
            r.reason,
        )
    body = table if rows else Text("GPUs: none stands out", style="dim")
    return Lines(method(report, "gpus"), body)


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def score_view(scores: Sequence[dict[str, object]]) -> RenderableType:
    table = Table(box=None, pad_edge=False)
    cols = (
        "history",
        "planted",
        "found",
        "recall",
        "findable",
        "found*",
        "recall*",
        "flagged",
        "false",
        "FDR",
        "incidents",
    )
    for col in cols:
        table.add_column(col)
    for s in scores:
        table.add_row(
            str(s["history"]),
            str(s["planted"]),
            str(s["found"]),
            f"{s['recall']:.1%}",
            str(s["findable"]),
            str(s["found_findable"]),
            f"{s['recall_findable']:.1%}",
            str(s["flagged"]),
            str(s["false"]),
            f"{s['fdr']:.1%}",
            f"{s['incidents_recovered']}/{s['incidents_planted']}",
        )
    note = Text(
        "found, recall: of every planted fault; findable: planted faults that ended at least"
        " min_failures runs; found*, recall*: of those; flagged: suspect nodes, links, domains"
        " and silent nodes; false: flags no planted fault explains (docs/fleet.md)",
        style="dim",
    )
    return Lines(table, note)
