"""GPU metrics (NVIDIA dcgm-exporter's series, as a Prometheus range query returns them) as lines
of the ``metrics`` stream.

A metrics file (docs/bundles.md, "metrics.json") is the JSON body of ``/api/v1/query_range``, or
a list of such bodies. Each series is one GPU's value of one field over the job's window. What
carries evidence is a change, so each series becomes a few lines, one per change, which the
extractor rules in ``rules/extract/metrics/`` read like any log line (docs/metrics.md):

- a counter that rose (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL rose from 0 to 2``; rises less than
  ``FOLD_GAP`` apart are one line: a climbing NVLink counter is one line, not a thousand);
- a counter that fell (the GPU or its driver was reset);
- the last XID that changed (``DCGM_FI_DEV_XID_ERRORS set to 79 (was 0)``);
- clocks held down for power or thermal reasons (``clocks held down: hw_thermal ...``);
- a GPU whose series stopped while the node's other GPUs went on reporting, and a node whose
  series all stopped before the job's end (or before the other nodes').

Lines are placed at the sample's time, on the series' node, with the GPU's PCI bus id (or index)
as their device. Pure apart from reading the files: no network (``attribution.sources.promql``
fetches the bodies).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from attribution.errors import Location, SourceError, one_line
from attribution.hostlist import HostlistError, expand, short_name
from attribution.model import (
    BUS_LABEL,
    COUNTERS,
    GPU_LABEL,
    JOB_LABEL,
    LAST_VALUE,
    NODE_LABELS,
    REASONS,
    UUID_LABEL,
    Coverage,
    CoverageNote,
    CoverageStatus,
    LogLine,
    OutputSilence,
    SourceRef,
    Stream,
    Trust,
)
from attribution.ownership import bus_key
from attribution.sources.coverage import MAX_NOTES
from attribution.sources.reader import DECODE_ERRORS, open_log
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.topology import is_node_name

MAX_FILE_BYTES = 64 << 20  # one metrics file, decompressed; a job's window is far less
MAX_SERIES = 200_000  # series read from one source (the connector asks for far fewer)
MAX_LINES_PER_SERIES = 64  # change lines one series may give; the rest are counted
FOLD_GAP = 600.0  # rises of one counter less than this many seconds apart are one line
MIN_GAP = 120.0  # a series that ends this long before its peers' end stopped reporting
LAST_SECOND = 253402300800.0  # 10000-01-01: samples at or past it (or before 1970) are dropped
IDENT = "dcgm-exporter"

# NVML's nvmlClocksThrottleReasons bits that slow a GPU down against its will (idle, application
# clock settings, sync boost and display clock are not faults)
THROTTLE_BITS: Mapping[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
# the connector's notes for nodes the server gave nothing for, and the status they give
FAILURE_STATUS: Mapping[str, CoverageStatus] = {
    "prometheus_unreachable": CoverageStatus.UNREACHABLE,
    "prometheus_timeout": CoverageStatus.UNREACHABLE,
    "prometheus_error": CoverageStatus.ERROR,
    "prometheus_cap": CoverageStatus.MISSING,
}


class MetricsError(SourceError):
    """A metrics file that is not a Prometheus range query answer (one line; ``parse_bodies``
    names the file as its location)."""


@dataclass(slots=True)
class Series:
    """One series: its name, node, GPU (index, UUID, PCI bus id), the job its GPU was mapped to
    (dcgm-exporter's ``hpc_job``), and its samples (unix seconds, value), in time order."""

    name: str
    node: str | None
    gpu: str | None
    uuid: str | None
    bus: str | None
    job: str | None
    samples: list[tuple[float, float]]
    position: int = 0  # 1-based, in its file: where the lines it gives were read

    @property
    def device(self) -> str | None:
        return self.bus or self.gpu or self.uuid

    def describe(self) -> str:
        gpu = f"GPU {self.gpu}" if self.gpu is not None else "GPU"
        detail = self.bus or self.uuid
        return f"{gpu} ({detail})" if detail else gpu


def node_of(labels: Mapping[str, str], node_labels: Sequence[str] = NODE_LABELS) -> str | None:
    """A series' node from its labels: the first of ``node_labels`` present, port and domain
    removed (``gpu-a03.cluster:9400`` -> ``gpu-a03``)."""
    for name in node_labels:
        value = labels.get(name)
        if not value:
            continue
        host = value
        if host.startswith("["):  # [ipv6]:port
            host = host[1:].split("]", 1)[0]
        elif host.count(":") == 1:
            host = host.split(":", 1)[0]
        node = short_name(host)
        return node if is_node_name(node) else None
    return None


def _text(value: object, limit: int = 200) -> str | None:
    """A value from the file for a message: one line of printable text, at most ``limit``."""
    if not isinstance(value, str | int) or value == "":
        return None
    return one_line(str(value), limit) or None


def _samples(values: object) -> tuple[list[tuple[float, float]], int]:
    """A series' samples in time order, and how many had a time that is no date (before 1970
    or from the year 10000 on); samples whose value is not a number are left out too."""
    if not isinstance(values, list):
        raise ValueError("'values' is not a list")
    out: list[tuple[float, float]] = []
    undated = 0
    for pair in values:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("a sample is not a [time, value] pair")
        when, value = float(pair[0]), float(str(pair[1]))
        if not 0 <= when < LAST_SECOND:  # a time a datetime cannot hold
            undated += 1
        elif math.isfinite(value):
            out.append((when, value))
    out.sort()
    return out, undated


def parse_bodies(
    data: object,
    source: str,
    *,
    node_labels: Sequence[str] = NODE_LABELS,
    max_series: int = MAX_SERIES,
) -> tuple[list[Series], list[CoverageNote]]:
    """The series of one metrics file's JSON (one body or a list of bodies), and remarks.

    Raises:
        MetricsError: not a range query answer, or an error the server answered.
    """
    bodies = data if isinstance(data, list) else [data]
    where = Location(source)
    out: list[Series] = []
    notes: list[CoverageNote] = []
    left = undated = 0
    for body in bodies:
        if not isinstance(body, dict):
            raise MetricsError("not a Prometheus answer (a JSON object)", where)
        if body.get("status") == "error":
            kind = _text(body.get("errorType")) or "error"
            raise MetricsError(f"the server answered {kind}: {_text(body.get('error'))}", where)
        result = body.get("data")
        if body.get("status") != "success" or not isinstance(result, dict):
            raise MetricsError("not a Prometheus answer (no 'status': 'success' data)", where)
        if result.get("resultType") != "matrix":
            raise MetricsError(
                f"resultType {_text(result.get('resultType'))!r}, not 'matrix' (a range query's"
                " answer)",
                where,
            )
        series = result.get("result")
        if not isinstance(series, list):
            raise MetricsError("'result' is not a list", where)
        for item in series:
            if len(out) >= max_series:
                left += 1
                continue
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                raise MetricsError(f"series {len(out) + 1}: no 'metric' labels", where)
            labels = {str(k): str(v)[:256] for k, v in item["metric"].items()}
            try:
                samples, no_date = _samples(item.get("values"))
                undated += no_date
            except (TypeError, ValueError, OverflowError) as exc:
                raise MetricsError(f"series {len(out) + 1}: {exc}", where) from None
            out.append(
                Series(
                    name=labels.get("__name__", ""),
                    node=node_of(labels, node_labels),
                    gpu=_plain(labels.get(GPU_LABEL), _INDEX),
                    uuid=_plain(labels.get(UUID_LABEL), _UUID),
                    bus=_bus(labels.get(BUS_LABEL)),
                    job=_plain(labels.get(JOB_LABEL), _JOB),
                    samples=samples,
                    position=len(out) + 1,
                )
            )
    if left:
        notes.append(CoverageNote("metrics_series_cap", {"count": left, "limit": max_series}))
    if undated:
        notes.append(CoverageNote("metrics_bad_times", {"file": source, "count": undated}))
    return out, notes


# label values go into the lines the rules read: only their plain forms are kept, so a label
# cannot write words of its own into a line (the rest of a line is the reader's)
_INDEX = re.compile(r"\d{1,4}")
_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z-]{1,80}")
_JOB = re.compile(r"\d{1,20}(?:_\d{1,20})?")


def _plain(text: str | None, form: re.Pattern[str]) -> str | None:
    return text if text and form.fullmatch(text) else None


def _bus(text: str | None) -> str | None:
    """dcgm-exporter's ``00000000:3B:00.0`` in the kernel's form (``0000:3b:00``), so a GPU's
    metric lines and its XID lines name it alike; anything else is dropped."""
    return bus_key(text)


def _number(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e18 else f"{value:g}"


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Change:
    """One change of one series: when, and the words after the series' GPU."""

    at: float
    series: Series
    what: str
    named: bool = True  # the series' name goes before ``what``


def _counter(series: Series, already: bool) -> Iterator[Change]:
    samples = series.samples
    first_at, first = samples[0]
    if already and first > 0:
        yield Change(first_at, series, f"was already {_number(first)} at the first sample")
    start: tuple[float, float] | None = None  # (time, value before) of the open run of rises
    last_rise, steps, prev, prev_top = first_at, 0, first, first
    for when, value in samples[1:]:
        if value > prev:
            if start is not None and when - last_rise > FOLD_GAP:
                yield _rise(series, start, prev_top, steps, last_rise)
                start = None
            if start is None:
                start, steps = (when, prev), 0
            steps += 1
            last_rise, prev_top = when, value
        elif value < prev:
            if start is not None:
                yield _rise(series, start, prev_top, steps, last_rise)
                start = None
            yield Change(when, series, f"fell from {_number(prev)} to {_number(value)} (a reset)")
        prev = value
    if start is not None:
        yield _rise(series, start, prev_top, steps, last_rise)


def _rise(
    series: Series, start: tuple[float, float], top: float, steps: int, last: float
) -> Change:
    what = f"rose from {_number(start[1])} to {_number(top)} (+{_number(top - start[1])})"
    if steps > 1:
        what += f" in {steps} steps until {_iso(last)}"
    return Change(start[0], series, what)


def _last_value(series: Series) -> Iterator[Change]:
    first_at, prev = series.samples[0]
    if prev:
        yield Change(first_at, series, f"was already {_number(prev)} at the first sample")
    for when, value in series.samples[1:]:
        if value != prev and value:
            yield Change(when, series, f"set to {_number(value)} (was {_number(prev)})")
        prev = value


def _reasons(mask: float) -> list[str]:
    bits = int(mask) if 0 <= mask < 2**32 else 0
    return [name for bit, name in THROTTLE_BITS.items() if bits & bit]


def _why(reasons: Sequence[str]) -> str:
    """thermal (a thermal bit), power (the power brake), slowdown (the hardware slowdown bit,
    which heat or power can raise), or power_cap (the software power cap alone: a GPU at full
    load often sits there, so it is ordinary)."""
    if any("thermal" in r for r in reasons):
        return "thermal"
    if "hw_power_brake" in reasons:
        return "power"
    if "hw_slowdown" in reasons:
        return "slowdown"
    return "power_cap"


def _throttle(series: Series) -> Iterator[Change]:
    run: tuple[float, float, list[str]] | None = None  # start, mask, reasons
    last = 0.0
    for when, mask in [*series.samples, (math.inf, 0.0)]:
        names = _reasons(mask)
        if run is not None and (not names or mask != run[1]):
            start, shown, reasons = run
            seconds = max((last if when == math.inf else when) - start, 0.0)
            yield Change(
                start,
                series,
                f"clocks held down for {_why(reasons)} reasons: {', '.join(reasons)}"
                f" ({series.name} 0x{int(shown):x})"
                f" for {seconds:.0f} s",
                named=False,
            )
            run = None
        if names and run is None:
            run = (when, mask, names)
        last = when


def series_changes(series: Series, limit: int | None = None) -> list[Change]:
    """The changes of one series that carry evidence (none for series we do not interpret),
    the first ``limit`` of them at most (the rest are never made: a flapping series costs no
    more than its lines)."""
    if not series.samples:
        return []
    if series.name in COUNTERS:
        found: Iterator[Change] = _counter(series, COUNTERS[series.name])
    elif series.name in LAST_VALUE:
        found = _last_value(series)
    elif series.name in REASONS:
        found = _throttle(series)
    else:
        return []
    return list(itertools.islice(found, limit))


@dataclass(slots=True)
class _NodeSeen:
    """The series of one node: how many, samples, and when each GPU and the node last reported."""

    series: int = 0
    samples: int = 0
    first: float = math.inf
    last: float = -math.inf
    gpus: dict[str, tuple[float, Series]] = field(default_factory=dict)  # GPU -> last, a series

    def add(self, series: Series) -> None:
        self.series += 1
        self.samples += len(series.samples)
        if not series.samples:
            return
        first, last = series.samples[0][0], series.samples[-1][0]
        self.first, self.last = min(self.first, first), max(self.last, last)
        key = series.gpu or series.uuid or series.bus
        if key is not None:
            seen = self.gpus.get(key)
            if seen is None or last > seen[0]:
                self.gpus[key] = (last, series)


def _vanished(
    nodes: Mapping[str, _NodeSeen], job_end: float | None, gap: float
) -> Iterator[tuple[str, Change]]:
    """GPUs that stopped while their node's other GPUs went on; nodes that stopped before the
    job's end (or, without it, before every other node's last sample)."""
    ends = [seen.last for seen in nodes.values() if seen.series and seen.last > -math.inf]
    if not ends:
        return
    latest = max(ends)
    for node, seen in nodes.items():
        if seen.last == -math.inf:
            continue
        others = [last for last, _ in seen.gpus.values()]
        for _key, (last, series) in sorted(seen.gpus.items()):
            if len(others) > 1 and seen.last - last > gap:
                still = sum(1 for o in others if o - last > gap)
                yield (
                    node,
                    Change(
                        last,
                        series,
                        f"stopped reporting: its last sample was at {_iso(last)}; {still} other"
                        f" GPU(s) of the node reported until {_iso(seen.last)}",
                        named=False,
                    ),
                )
        # a lone node is judged against the job's end; several against each other too, so a
        # gap of the whole exporter (or of Prometheus) is not read as every node stopping
        if job_end is None or (len(nodes) > 1 and latest < job_end):
            until, basis = latest, "other nodes reported until"
        else:
            until, basis = job_end, "the job ended at"
        if until - seen.last > gap:
            what = (
                f"every series of the node stopped: its last sample was at {_iso(seen.last)};"
                f" {basis} {_iso(until)}"
            )
            yield node, Change(seen.last, _NODE_SERIES, what, named=False)


_NODE_SERIES = Series(name="", node=None, gpu=None, uuid=None, bus=None, job=None, samples=[])


def step_of(series: Iterable[Series]) -> float:
    """The typical time between samples (the query's step or the scrape interval)."""
    gaps = sorted(
        b[0] - a[0]
        for s in series
        for a, b in zip(s.samples[:8], s.samples[1:9], strict=False)
        if b[0] > a[0]
    )
    return gaps[len(gaps) // 2] if gaps else 0.0


def line_text(change: Change) -> str:
    """The text of one change's line (docs/metrics.md)."""
    series = change.series
    if series is _NODE_SERIES:
        return f"{IDENT}: {change.what}"
    head = f"{IDENT}: {series.describe()}"
    body = f"{series.name} {change.what}" if change.named else change.what
    tail = f" hpc_job={series.job}" if series.job else ""
    return f"{head} {body}{tail}"


class MetricsReader:
    """Reads one metrics source (a file per node, or one for the whole job) into lines.

    Series of hosts outside the job are left out (counted in a note); in a node's own file a
    series without a node label is that node's. Coverage: one entry per node (the source's node,
    or each job node and each node seen), with the series and samples read.
    """

    def __init__(self, spec: SourceSpec, ctx: ReadContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.errors: list[CoverageNote] = []
        self.silences: list[OutputSilence] = []
        self.notes: list[CoverageNote] = list(spec.notes)
        self.node_notes: dict[str, list[CoverageNote]] = {}  # remarks about one node's series
        self.nodes: dict[str, _NodeSeen] = {}
        self.lines_per_node: dict[str, int] = {}
        self.bytes_read = 0
        self.outside = 0
        self.unreadable: list[CoverageNote] = []

    def _load(self, index: int) -> object | None:
        path, shown = self.spec.paths[index], self.spec.display[index]
        try:
            with open_log(path, nofollow=self.spec.nofollow) as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
                if len(data) <= MAX_FILE_BYTES:
                    handle.read(1)  # the end: a truncated or damaged stream says so here
        except SourceError as exc:
            self.unreadable.append(
                CoverageNote("unreadable", {"file": shown, "error": exc.message})
            )
            return None
        except DECODE_ERRORS as exc:
            why = _text(str(exc)) or type(exc).__name__
            self.errors.append(CoverageNote("metrics_bad_file", {"file": shown, "why": why}))
            return None
        if len(data) > MAX_FILE_BYTES:
            self.errors.append(
                CoverageNote("metrics_too_large", {"file": shown, "limit": MAX_FILE_BYTES})
            )
            return None
        self.bytes_read += len(data)
        try:
            parsed: object = json.loads(data)
            return parsed
        except (ValueError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON that can be read"
            self.errors.append(CoverageNote("metrics_bad_file", {"file": shown, "why": why}))
            return None

    def _series(self) -> list[Series]:
        out: list[Series] = []
        members = self.ctx.node_set
        outside = unlabelled = 0
        for index in range(len(self.spec.paths)):
            data = self._load(index)
            if data is None:
                continue
            shown = self.spec.display[index]
            try:
                found, notes = parse_bodies(data, shown, max_series=MAX_SERIES - len(out))
            except MetricsError as exc:
                self.errors.append(
                    CoverageNote("metrics_bad_file", {"file": shown, "why": exc.message})
                )
                continue
            self.notes.extend(notes)
            for series in found:
                series.node = series.node or self.spec.node
                if series.node is None:
                    unlabelled += 1
                elif self.spec.node is not None and series.node != self.spec.node:
                    outside += 1  # another host's series in this node's file
                elif members and series.node not in members:
                    outside += 1
                else:
                    out.append(series)
        if outside:
            self.notes.append(CoverageNote("metrics_other_hosts", {"count": outside}))
        if unlabelled:
            self.notes.append(CoverageNote("metrics_no_node", {"count": unlabelled}))
        return out

    def lines(self) -> Iterator[LogLine]:
        series = self._series()
        changes: list[tuple[str, Change]] = []
        for one in series:
            assert one.node is not None
            self.nodes.setdefault(one.node, _NodeSeen()).add(one)
            found = series_changes(one, MAX_LINES_PER_SERIES + 1)
            if len(found) > MAX_LINES_PER_SERIES:  # a flapping series: its first lines only
                note = CoverageNote(
                    "metrics_folded", {"series": one.name, "limit": MAX_LINES_PER_SERIES}
                )
                self.node_notes.setdefault(one.node, []).append(note)
                found = found[:MAX_LINES_PER_SERIES]
            changes.extend((one.node, c) for c in found)
        span = self.ctx.job_span
        job_end = span[1].timestamp() if span else None
        gap = max(MIN_GAP, 3 * step_of(series))
        changes.extend(_vanished(self.nodes, job_end, gap))
        changes.sort(key=lambda item: (item[1].at, item[0], item[1].series.position))
        window = self.ctx.window
        low = window[0].timestamp() - self.ctx.tolerance if window and window[0] else -math.inf
        high = window[1].timestamp() + self.ctx.tolerance if window and window[1] else math.inf
        shown = self.spec.display[0] if self.spec.display else "metrics"
        trusted = self.spec.trust_level is Trust.TRUSTED  # a bundle may say users can write it
        for node, change in changes:
            if not low <= change.at <= high:
                self.outside += 1
                continue
            text = line_text(change)
            when = datetime.fromtimestamp(change.at, UTC)
            self.lines_per_node[node] = self.lines_per_node.get(node, 0) + 1
            yield LogLine(
                stream=Stream.METRICS,
                node=node,
                text=text,
                raw=f"{_iso(change.at)} {node} {text}",
                source=SourceRef(shown, change.series.position),
                time=when,
                host=node,
                device=change.series.device,
                ident=IDENT,
                trusted=trusted,
            )

    def _failures(self) -> dict[str, CoverageNote]:
        """Node -> why the server gave nothing for it (the connector's notes name the nodes)."""
        out: dict[str, CoverageNote] = {}
        for note in self.notes:
            if note.code in FAILURE_STATUS:
                try:
                    named = expand(str(note.args.get("nodes", "")))
                except HostlistError:
                    continue
                for node in named:
                    out.setdefault(node, note)
        return out

    def coverages(self) -> list[Coverage]:
        """One entry per node: ``ok`` with the series and samples read, ``empty`` for a job node
        without series, ``unreachable``/``error`` for one the server did not answer for, and
        ``error``/``unreadable`` for a file that could not be used."""
        nodes: list[str | None]
        if self.spec.node is not None:
            nodes = [self.spec.node]
        else:
            nodes = list(dict.fromkeys([*self.ctx.job_nodes, *sorted(self.nodes)])) or [None]
        failures = self._failures()
        general = [n for n in self.notes if n.code not in FAILURE_STATUS]
        shown = tuple(self.spec.display)
        out = []
        for node in nodes:
            seen = self.nodes.get(node) if node is not None else None
            failure = failures.get(node) if node is not None else None
            if failure is None and node is None and failures:
                failure = next(iter(failures.values()))
            notes = [
                *general,
                *(self.node_notes.get(node, []) if node is not None else []),
                *([failure] if failure else []),
            ]
            status = CoverageStatus.OK
            if seen is not None and seen.series:
                notes.insert(
                    0,
                    CoverageNote("metrics_read", {"series": seen.series, "samples": seen.samples}),
                )
                if self.errors:  # another file of the source could not be used
                    notes[1:1] = self.errors
                    status = CoverageStatus.ERROR
            elif failure is not None:
                status = FAILURE_STATUS[failure.code]
            elif self.spec.problem is not None:
                status = CoverageStatus.UNREADABLE
                notes.insert(0, self.spec.problem)
            elif self.unreadable and not self.errors:
                status = CoverageStatus.UNREADABLE
                notes[:0] = self.unreadable
            elif self.errors:
                status = CoverageStatus.ERROR
                notes[:0] = [*self.unreadable, *self.errors]
            elif not self.spec.paths:
                status = CoverageStatus.MISSING
                notes.insert(0, CoverageNote("no_file"))
            else:
                status = CoverageStatus.EMPTY
                notes.insert(0, CoverageNote("metrics_no_series"))
            if len(notes) > MAX_NOTES:
                notes = [
                    *notes[:MAX_NOTES],
                    CoverageNote("more_notes", {"count": len(notes) - MAX_NOTES}),
                ]
            out.append(
                Coverage(
                    stream=Stream.METRICS,
                    node=node,
                    status=status,
                    files=shown,
                    bytes=self.bytes_read if len(nodes) == 1 else 0,
                    lines=self.lines_per_node.get(node, 0) if node is not None else 0,
                    outside_window=self.outside if len(nodes) == 1 else 0,
                    notes=tuple(notes),
                    trust=self.spec.trust_level,
                    first_at=_when(seen.first) if seen and seen.samples else None,
                    last_at=_when(seen.last) if seen and seen.samples else None,
                )
            )
        return out


def _when(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, UTC)


def is_metrics_file(name: str) -> bool:
    """``metrics.json``, optionally compressed (``metrics.json.gz``, ``.zst``)."""
    return name in ("metrics.json", "metrics.json.gz", "metrics.json.zst", "metrics.json.zstd")


def dump_bodies(bodies: Sequence[Any]) -> bytes:
    """What a metrics file holds for ``bodies`` (one body, or a list of them)."""
    return json.dumps(bodies[0] if len(bodies) == 1 else list(bodies)).encode()
