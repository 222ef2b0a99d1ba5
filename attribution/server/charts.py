"""The geometry of the two charts on the job list, drawn as inline SVG by the templates.

No JavaScript: the numbers are laid out here (bars, ticks, labels), and
``templates/_charts.html`` writes the SVG and a table of the same numbers beside it.

* ``failures_over_time``: failed jobs per day (per week, month or year when the window is
  long) stacked by sub_domain, from ``Store.daily``;
* ``top_causes``: horizontal bars of the causes of the most failed jobs, from
  ``Store.top_causes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from attribution.model import SubDomain
from attribution.timeutil import EPOCH

# the stacking order, bottom up: node-side blame first, then the job's, then the outcomes
DOMAINS: tuple[str, ...] = tuple(s.value for s in SubDomain)

WIDTH = 760  # the time chart's SVG user units; the page scales it to its column
CAUSE_WIDTH = 540  # the cause chart's (it sits in the narrower column)
LEFT, RIGHT, TOP, BOTTOM = 48, 14, 14, 44
MAX_LABELS = 8
CHAR = 7.0  # width of one label character at the charts' 12px font, roughly


@dataclass(frozen=True, slots=True)
class Rect:
    """One bar (or a stacked part of one): its box, CSS class and tooltip."""

    x: float
    y: float
    width: float
    height: float
    css: str
    tip: str
    href: str | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """An axis label at ``at`` (x for the time axis, y for the counts)."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Period:
    """One bar of the time chart: its label and the failed jobs per sub_domain."""

    label: str
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class TimeChart:
    """Failed jobs per ``unit`` stacked by sub_domain."""

    unit: str  # day | week | month | year
    periods: tuple[Period, ...]
    domains: tuple[str, ...]  # the sub_domains that occur, in stacking order
    bars: tuple[Rect, ...] = ()
    x_ticks: tuple[Tick, ...] = ()
    y_ticks: tuple[Tick, ...] = ()
    width: int = WIDTH
    height: int = 280
    plot: tuple[float, float, float, float] = (0, 0, 0, 0)  # left, top, right, bottom

    @property
    def total(self) -> int:
        return sum(p.total for p in self.periods)

    @property
    def totals(self) -> dict[str, int]:
        """Failed jobs per sub_domain over the whole window."""
        out = dict.fromkeys(self.domains, 0)
        for period in self.periods:
            for domain, n in period.counts.items():
                out[domain] = out.get(domain, 0) + n
        return out

    @property
    def title(self) -> str:
        return f"Failed jobs per {self.unit} by sub_domain"


@dataclass(frozen=True, slots=True)
class CauseRow:
    """One cause of the top-causes chart."""

    cause: str | None
    sub_domain: str
    jobs: int
    users: int
    nodes: int

    @property
    def label(self) -> str:
        return self.cause or f"no cause ({self.sub_domain})"


@dataclass(frozen=True, slots=True)
class CauseChart:
    """Horizontal bars, one per cause, longest first."""

    rows: tuple[CauseRow, ...]
    bars: tuple[Rect, ...] = ()
    labels: tuple[Tick, ...] = ()  # y of each row's label
    values: tuple[Tick, ...] = ()  # x after each bar, its count
    label_x: float = 0
    width: int = CAUSE_WIDTH
    height: int = 0
    short: tuple[str, ...] = field(default=())  # the labels as drawn (long ones cut)

    title: str = "Top causes of failed jobs"


def nice_step(most: float, ticks: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) that covers ``most`` in about ``ticks``
    steps."""
    if most <= 0:
        return 1.0
    raw = most / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    return max(1.0, step)


def _unit(days: int) -> str:
    if days <= 92:
        return "day"
    if days <= 2 * 366:
        return "week"
    if days <= 12 * 366:
        return "month"
    return "year"


def _bucket(unit: str) -> Callable[[date], date]:
    if unit == "day":
        return lambda d: d
    if unit == "week":
        return lambda d: d - timedelta(days=d.weekday())  # weeks start on Monday
    if unit == "month":
        return lambda d: d.replace(day=1)
    return lambda d: d.replace(month=1, day=1)


def _following(unit: str, day: date) -> date:
    if unit == "day":
        return day + timedelta(days=1)
    if unit == "week":
        return day + timedelta(days=7)
    if unit == "month":
        return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return day.replace(year=day.year + 1)


def _label(unit: str, day: date) -> str:
    if unit == "month":
        return day.strftime("%Y-%m")
    if unit == "year":
        return str(day.year)
    return day.isoformat()


def _day(text: Any) -> date | None:
    try:
        return date.fromisoformat(str(text)[:10])
    except ValueError:
        return None


def failures_over_time(
    rows: Iterable[Mapping[str, Any]],
    since: datetime | None = None,
    until: datetime | None = None,
    today: date | None = None,
) -> TimeChart:
    """The time chart over ``Store.daily`` rows (``day``, ``sub_domain``, ``jobs``).

    The window is the filter's (``since`` .. ``until``) where given, else the days the rows
    span; its length picks the bar: a day up to three months, a week up to two years, a month
    up to twelve, else a year.
    """
    per_day: dict[date, dict[str, int]] = {}
    for row in rows:
        day = _day(row.get("day"))
        if day is None:
            continue
        domain = str(row.get("sub_domain") or "none")
        counts = per_day.setdefault(day, {})
        counts[domain] = counts.get(domain, 0) + int(row.get("jobs") or 0)
    if not per_day:
        return TimeChart(unit="day", periods=(), domains=())
    first, last = min(per_day), max(per_day)
    if since is not None and since > EPOCH:
        first = min(first, since.astimezone(UTC).date())
    if until is not None:
        last = max(last, (until.astimezone(UTC) - timedelta(microseconds=1)).date())
    elif since is not None and since > EPOCH:
        last = max(last, today or datetime.now(UTC).date())
    unit = _unit((last - first).days + 1)
    bucket = _bucket(unit)
    merged: dict[date, dict[str, int]] = {}
    for day, counts in per_day.items():
        into = merged.setdefault(bucket(day), {})
        for domain, n in counts.items():
            into[domain] = into.get(domain, 0) + n
    periods: list[tuple[date, dict[str, int]]] = []
    cursor, end = bucket(first), bucket(last)
    while cursor <= end:
        periods.append((cursor, merged.get(cursor, {})))
        cursor = _following(unit, cursor)
    seen = {d for _, counts in periods for d in counts}
    domains = tuple(d for d in DOMAINS if d in seen) + tuple(sorted(seen - set(DOMAINS)))
    return _layout_time(unit, [Period(_label(unit, d), c) for d, c in periods], domains)


def _layout_time(unit: str, periods: Sequence[Period], domains: tuple[str, ...]) -> TimeChart:
    height = 280
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, height - BOTTOM
    most = max((p.total for p in periods), default=0)
    step = nice_step(most)
    ceiling = step * max(1, math.ceil(most / step))
    scale = (bottom - top) / ceiling
    slot = (right - left) / len(periods)
    gap = min(slot * 0.2, 6.0) if slot >= 3 else 0.0
    bars: list[Rect] = []
    for i, period in enumerate(periods):
        x = left + i * slot + gap / 2
        y = float(bottom)
        for domain in domains:
            n = period.counts.get(domain, 0)
            if not n:
                continue
            h = n * scale
            y -= h
            bars.append(
                Rect(
                    round(x, 2),
                    round(y, 2),
                    round(max(slot - gap, 0.8), 2),
                    round(h, 2),
                    f"d-{domain}",
                    f"{period.label}: {n} {domain} (of {period.total})",
                )
            )
    every = max(1, math.ceil(len(periods) / MAX_LABELS))
    x_ticks = tuple(
        Tick(round(left + (i + 0.5) * slot, 2), periods[i].label)
        for i in range(0, len(periods), every)
    )
    y_ticks = tuple(
        Tick(round(bottom - v * scale, 2), f"{v:g}")
        for v in (k * step for k in range(int(ceiling / step) + 1))
    )
    return TimeChart(
        unit=unit,
        periods=tuple(periods),
        domains=domains,
        bars=tuple(bars),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        height=height,
        plot=(left, top, right, bottom),
    )


def top_causes(
    rows: Iterable[Mapping[str, Any]], href: Callable[[str], str] | None = None
) -> CauseChart:
    """The cause chart over ``Store.top_causes`` rows; ``href(cause)``: where a bar links
    (the job list filtered by that cause), None for no links."""
    causes = tuple(
        CauseRow(
            cause=r.get("cause_id") or None,
            sub_domain=str(r.get("sub_domain") or "none"),
            jobs=int(r.get("jobs") or 0),
            users=int(r.get("users") or 0),
            nodes=int(r.get("nodes") or 0),
        )
        for r in rows
    )
    if not causes:
        return CauseChart(rows=())
    longest = 30
    short = tuple(
        c.label if len(c.label) <= longest else c.label[: longest - 1] + "…" for c in causes
    )
    label_x = min(max(len(s) for s in short) * CHAR + 10, 230)
    row_h, top = 24, 6
    height = top * 2 + row_h * len(causes)
    room = CAUSE_WIDTH - label_x - 8 - 36  # space for the count after the longest bar
    most = max(c.jobs for c in causes) or 1
    bars, labels, values = [], [], []
    for i, c in enumerate(causes):
        y = top + i * row_h
        w = max(c.jobs / most * room, 2.0)
        tip = f"{c.label}: {c.jobs} failed job(s), {c.users} user(s), {c.nodes} responsible node(s)"
        link = href(c.cause) if href is not None and c.cause else None
        bars.append(
            Rect(
                round(label_x + 8, 2), y + 4, round(w, 2), row_h - 8, f"d-{c.sub_domain}", tip, link
            )
        )
        labels.append(Tick(y + row_h / 2, short[i]))
        values.append(Tick(round(label_x + 8 + w + 6, 2), str(c.jobs)))
    return CauseChart(
        rows=causes,
        bars=tuple(bars),
        labels=tuple(labels),
        values=tuple(values),
        label_x=label_x,
        height=height,
        short=short,
    )


__all__ = [
    "DOMAINS",
    "CauseChart",
    "CauseRow",
    "Period",
    "Rect",
    "Tick",
    "TimeChart",
    "failures_over_time",
    "nice_step",
    "top_causes",
]
