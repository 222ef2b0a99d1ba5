"""One job's verdict as plain text: what ``sattr report JOBID`` prints and a site mails.

The shape is the one users know from Slurm's ``seff`` and Princeton's ``jobstats``: a block of
``Key: value`` lines about the job, then the diagnosis, what happened (the symptom chain, root
first), what evidence was read, and where to look further. It is plain ASCII without colour or
markup, no line is wider than ``width``, and the same verdict always gives the same text (no
clock is read), so that it can be the body of Slurm's job-end mail.

Nothing here reads files, the store or Slurm: ``attribution.cli.report`` finds the verdict.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from attribution.hostlist import compress
from attribution.model import ChainEntry, ChainRole, Coverage, CoverageStatus, Verdict
from attribution.render import safe_text

MIN_WIDTH = 40
LABEL = 16  # the key column of ``Key: value`` lines
MAX_ENTRIES = 8  # chain entries shown; the rest are counted
ROLE_ORDER = (ChainRole.ROOT, ChainRole.DOWNSTREAM, ChainRole.CONTEXT)
STATUS_ORDER = tuple(CoverageStatus)
# where a chain entry was read, in words (``Stream`` values)
STREAM_WORDS = {
    "kernel": "kernel log",
    "syslog": "syslog",
    "fabricmanager": "Fabric Manager log",
    "dcgm": "DCGM log",
    "slurmd": "slurmd log",
    "slurmctld": "slurmctld log",
    "metrics": "GPU metrics",
    "job_stdout": "job stdout",
    "job_stderr": "job stderr",
}


def ascii_text(text: str) -> str:
    """``text`` on one line in plain ASCII: control characters as ``\\xNN`` (``safe_text``),
    runs of white space as one blank, accents dropped, any other non-ASCII character as ``?``."""
    text = " ".join(safe_text(str(text)).split())
    decomposed = unicodedata.normalize("NFKD", text)
    kept = "".join(c for c in decomposed if not unicodedata.combining(c))
    return kept.encode("ascii", "replace").decode("ascii")


def utc(value: datetime | None) -> str:
    """A time as ``2026-11-30 14:02:11Z`` (UTC), ``unknown`` without one."""
    if value is None:
        return "unknown"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def elapsed(seconds: float | None) -> str:
    """Seconds the way Slurm shows elapsed time: ``HH:MM:SS``, ``D-HH:MM:SS`` past a day."""
    if seconds is None or seconds < 0:
        return "unknown"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    clock = f"{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{days}-{clock}" if days else clock


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in ``...`` when cut."""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


class _Page:
    """The lines of the report, each at most ``width`` characters."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []

    def blank(self) -> None:
        if self.lines and self.lines[-1]:
            self.lines.append("")

    def heading(self, title: str) -> None:
        self.blank()
        self.lines += [title, "-" * len(title)]

    def text(
        self, text: str, indent: int = 0, first: str | None = None, max_lines: int | None = None
    ) -> None:
        """``text`` wrapped to the width, every line indented ``indent`` blanks (the first one
        by ``first`` instead, when given), cut after ``max_lines`` lines."""
        lead = " " * indent
        self._add(self._wrap(text, lead if first is None else first, lead), max_lines)

    def field(self, label: str, value: str | None, max_lines: int | None = None) -> None:
        """A ``Label:  value`` line, the value wrapped under itself; none without a value."""
        if value is None or not str(value).strip():
            return
        self._add(self._wrap(value, f"{label}:".ljust(LABEL), " " * LABEL), max_lines)

    def _wrap(self, text: str, first: str, lead: str) -> list[str]:
        return textwrap.wrap(
            ascii_text(text),
            width=self.width,
            initial_indent=first,
            subsequent_indent=lead,
            break_long_words=True,
            break_on_hyphens=False,
        ) or [first.rstrip()]

    def _add(self, wrapped: list[str], max_lines: int | None) -> None:
        if max_lines is not None and len(wrapped) > max_lines:
            last = wrapped[max_lines - 1]
            wrapped = [*wrapped[: max_lines - 1], _cut(last + " ...", self.width)]
        self.lines += wrapped

    def render(self) -> str:
        return "\n".join(line.rstrip() for line in self.lines).rstrip() + "\n"


def _header(page: _Page, verdict: Verdict) -> None:
    job = verdict.job
    title = f"Job {ascii_text(job.display_id)}: {verdict.terminal_state.value}, "
    title += verdict.sub_domain.value
    if verdict.cause:
        title += f" ({ascii_text(verdict.cause.id)})"
    page.lines += [_cut(title, page.width), "=" * min(len(title), page.width)]
    page.field("Job ID", job.job_id)
    if job.array_job_id and job.array_task_id:
        page.field("Array task", f"{job.array_job_id}_{job.array_task_id}")
    page.field("SLUID", job.sluid)
    page.field("Cluster", job.cluster)
    user = job.user or (f"uid {job.uid}" if job.uid is not None else None)
    if user and job.account:
        page.field("User/Account", f"{user}/{job.account}")
    else:
        page.field("User", user)
    page.field("Job name", job.name)
    page.field("Partition", job.partition)
    if job.nodes:
        page.field("Nodes", f"{compress(job.nodes)} ({_plural(len(job.nodes), 'node')})", 4)
    else:
        page.field("Nodes", job.nodelist or None, 4)
    state = job.state or "unknown"
    if job.cancelled_by and " by " not in state:
        state += f" by {job.cancelled_by}"
    if job.exit_code:
        state += f" (exit code {job.exit_code})"
    page.field("State", state)
    page.field("Reason", job.reason if job.reason not in (None, "None") else None)
    page.field("Start", utc(job.start))
    page.field("End", utc(job.end))
    run = elapsed(job.duration)
    if job.time_limit:
        run += f" (time limit {elapsed(job.time_limit)})"
    page.field("Run time", run)


def _blame(items: Sequence[Any], confirmed: bool) -> str | None:
    """``gpu044, gpu 0000:2a:00 (confirmed by kernel); ...`` for ``Responsible`` entries."""
    parts = []
    for r in items:
        part = r.node
        detail = " ".join(x for x in (r.component, r.device) if x)
        if detail:
            part += f", {detail}"
        if confirmed and r.confirmed_by:
            part += f" (confirmed by {r.confirmed_by})"
        parts.append(part)
    return "; ".join(parts) or None


def _diagnosis(page: _Page, verdict: Verdict, record: Mapping[str, Any]) -> None:
    page.heading("Diagnosis")
    page.field("terminal_state", verdict.terminal_state.value)
    page.field("sub_domain", verdict.sub_domain.value)
    if verdict.cause:
        cause = verdict.cause.id
        if verdict.cause.title:
            cause += f": {verdict.cause.title}"
        if verdict.cause.rule and not verdict.cause.rule.startswith("engine@"):
            cause += f" (rule {verdict.cause.rule})"
        page.field("Cause", cause)
    else:
        page.field("Cause", "none named")
    page.field("Summary", verdict.summary)
    if verdict.confidence:
        page.field("Confidence", f"{verdict.confidence.level}: {verdict.confidence.reason}")
    page.field("Responsible", _blame(verdict.responsible, True))
    if verdict.suspects:
        page.field("Suspects", (_blame(verdict.suspects, False) or "") + " (unconfirmed)")
    page.field("Action", verdict.action)
    if verdict.alternatives:
        ids = [a.cause.id for a in verdict.alternatives]
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        page.field("Also matched", ", ".join(ids[:5]) + more + " (ranked lower)")
    fleet = record.get("fleet")
    if isinstance(fleet, Mapping):
        for node, seen in sorted(fleet.items()):
            if not isinstance(seen, Mapping):
                continue
            since = str(seen.get("since") or "")[:10]
            page.field(
                "Elsewhere",
                f"{node} was responsible for {seen.get('jobs')} other failed job(s) of"
                f" {seen.get('users')} user(s) since {since}",
            )


def _entries(chain: Iterable[ChainEntry]) -> list[ChainEntry]:
    """The chain root first, then downstream, then context; in chain order within a role."""
    entries = list(chain)
    return sorted(entries, key=lambda e: ROLE_ORDER.index(e.role))


def _chain(page: _Page, verdict: Verdict, max_entries: int) -> None:
    page.heading("What happened")
    entries = _entries(verdict.symptom_chain)
    if not entries:
        page.text("No failure signals were found in the evidence that was read.")
    for n, entry in enumerate(entries[:max_entries], 1):
        where = []
        if entry.nodes:
            nodes = compress(entry.nodes)
            count = max(entry.node_count, len(entry.nodes))
            where.append(f"on {nodes}" if count == 1 else f"on {count} nodes ({nodes})")
        if entry.stream:
            where.append(f"({STREAM_WORDS.get(entry.stream, entry.stream)})")
        seen = f"first seen {utc(entry.first_at)}" if entry.first_at else "time unknown"
        head = f"{n}. [{entry.role.value}] {entry.count}x " + " ".join(where) + f", {seen}"
        page.text(head, indent=len(f"{n}. "), first="")
        indent = " " * len(f"{n}. ")
        symptom = entry.symptom
        if entry.note:
            symptom += f" ({entry.note})"
        if entry.owner == "foreign":
            symptom += " [another job's]"
        page.text(symptom, indent=len(indent), max_lines=2)
        if entry.example:
            page.lines.append(_cut(f"{indent}> {ascii_text(entry.example)}", page.width))
    rest = entries[max_entries:]
    if rest:
        roles = ", ".join(
            f"{sum(1 for e in rest if e.role is role)} {role.value}"
            for role in ROLE_ORDER
            if any(e.role is role for e in rest)
        )
        page.text(
            f"... and {len(rest)} more ({roles}); 'sattr show {verdict.job.display_id} -v'"
            " lists them all."
        )
    if verdict.ignored:
        n = sum(e.count for e in verdict.ignored)
        page.text(f"{n} signal(s) outside the job's time window were not counted.")


def _coverage_line(stream: str, entries: list[Coverage]) -> str:
    """``kernel: ok on 62 nodes; missing on gpu[12,14] (no file for this source)``."""
    parts = []
    for status in STATUS_ORDER:
        group = [c for c in entries if c.status is status]
        if not group:
            continue
        nodes = [c.node for c in group if c.node]
        part = status.value
        if nodes:
            shown = compress(nodes)
            part += f" on {shown}" if len(nodes) == 1 else f" on {len(nodes)} nodes ({shown})"
        # the first remark of each entry: what was not read and why, not every note on it
        reasons = list(
            dict.fromkeys(c.notes[0].text if c.notes else c.reason for c in group if c.reason)
        )
        if status is not CoverageStatus.OK and reasons:
            part += f" ({reasons[0]}" + (
                f"; and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ")"
            )
        parts.append(part)
    return f"{stream}: " + "; ".join(parts)


def _coverage(page: _Page, verdict: Verdict) -> None:
    page.heading("Evidence read")
    if not verdict.coverage:
        page.text("No log source was read for this job.")
        return
    counts: dict[CoverageStatus, int] = {}
    for c in verdict.coverage:
        counts[c.status] = counts.get(c.status, 0) + 1
    total = ", ".join(f"{counts[s]} {s.value}" for s in STATUS_ORDER if s in counts)
    page.text(f"{_plural(len(verdict.coverage), 'source')} (log x node): {total}.")
    streams: dict[str, list[Coverage]] = {}
    for c in verdict.coverage:
        streams.setdefault(c.stream.value, []).append(c)
    for stream, entries in streams.items():
        page.text(_coverage_line(stream, entries), indent=4, first="  ", max_lines=2)
    unread = [
        s
        for s, entries in streams.items()
        if all(c.status is not CoverageStatus.OK for c in entries)
    ]
    partly = [
        s
        for s, entries in streams.items()
        if s not in unread and any(c.status is not CoverageStatus.OK for c in entries)
    ]
    if unread or partly:
        said = []
        if unread:
            said.append("nothing was read from " + ", ".join(unread))
        if partly:
            said.append("only part of " + ", ".join(partly))
        page.text(
            "Not seen: "
            + " and ".join(said)
            + "; a cause that shows only there cannot be in this verdict."
        )
    untimed = sum(c.untimed for c in verdict.coverage)
    if untimed:
        page.text(f"{untimed} line(s) could not be placed in time.")


def report_text(
    verdict: Verdict,
    record: Mapping[str, Any] | None = None,
    width: int = 80,
    url: str | None = None,
    *,
    max_entries: int = MAX_ENTRIES,
) -> str:
    """The plain-text report of one job's verdict, every line at most ``width`` characters.

    ``record`` is what the store keeps beside the verdict (the ``record`` object of
    ``sattr show --json``); its ``fleet`` entries (per blamed node: other failed ``jobs`` and
    their ``users`` ``since`` a date) become ``Elsewhere`` lines. ``url``: a web page of this
    job to point to at the end. ``max_entries``: chain entries shown (the rest are counted).

    Raises:
        ValueError: ``width`` below ``MIN_WIDTH`` or ``max_entries`` below 1.
    """
    if width < MIN_WIDTH:
        raise ValueError(f"report width {width} is below {MIN_WIDTH} columns")
    if max_entries < 1:
        raise ValueError(f"max_entries {max_entries} is below 1")
    page = _Page(width)
    _header(page, verdict)
    _diagnosis(page, verdict, record or {})
    _chain(page, verdict, max_entries)
    _coverage(page, verdict)
    page.blank()
    page.lines.append("-" * min(width, 40))
    page.text(
        f"Full verdict: sattr show {verdict.job.display_id} (add -v for every line of evidence)"
    )
    if url:
        page.text(f"Web page: {url}")
    made = f"Diagnosed {utc(verdict.diagnosed_at)}" if verdict.diagnosed_at else "Diagnosed"
    if verdict.engine_version:
        made += f" by attribution {verdict.engine_version}"
    page.text(made + ".")
    return page.render()


__all__ = ["MAX_ENTRIES", "MIN_WIDTH", "ascii_text", "elapsed", "report_text", "utc"]
