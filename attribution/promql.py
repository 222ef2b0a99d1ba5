"""Ask a Prometheus-compatible server for a job's GPU metrics (``metrics:`` in the configuration;
docs/metrics.md).

One range query per group of ``nodes_per_query`` nodes, over the span the caller gives (the worker:
``metrics.baseline`` before the job's start, so counters have a value from before it, to
``window.after`` after its end), for the configured dcgm-exporter series of those nodes. Every
answer is saved in the shape it came, one file per query, for ``sources.metrics`` to read
(and ``sattr bundle`` to keep). Bounded: the step grows with the window (at most ``max_points``
points per series), each answer must come whole within ``timeout`` seconds and ``max_bytes``
bytes, and once ``max_series`` series are in, the remaining nodes are not asked. Nothing here
raises for a server that is down, slow, wrong or flooding: each becomes a coverage note naming
the nodes it cost.
"""

from __future__ import annotations

import json
import math
import os
import re
import ssl
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from attribution.config import Metrics
from attribution.errors import one_line
from attribution.hostlist import compress
from attribution.httpfetch import FetchError, fetch, tls_context
from attribution.model import NODE_LABELS, CoverageNote

QUERY_PATH = "/api/v1/query_range"
GIVE_UP = frozenset({"prometheus_unreachable", "prometheus_timeout"})  # no more queries after


@dataclass(slots=True)
class Fetched:
    """What the server gave for one job: the answers saved (``files``), how many ``series`` and
    ``queries``, and a note for each group of nodes whose answer is missing (``problems``)."""

    files: list[Path] = field(default_factory=list)
    series: int = 0
    queries: int = 0
    problems: list[CoverageNote] = field(default_factory=list)


def step_for(settings: Metrics, start: datetime, end: datetime) -> float:
    """Seconds between points: ``settings.step``, else the window over ``max_points``, never
    below ``min_step`` (whole seconds, so the query is the same on every run)."""
    if settings.step:
        return max(settings.step, 1.0)
    span = max((end - start).total_seconds(), 0.0)
    return float(max(math.ceil(settings.min_step), math.ceil(span / settings.max_points)))


def _quoted(text: str) -> str:
    """A PromQL string literal (Go's double-quoted syntax, which JSON's is a subset of)."""
    return json.dumps(text)


def query_for(settings: Metrics, nodes: Sequence[str]) -> str:
    """The selector for ``nodes``: the configured series whose node label is one of them,
    followed by a domain or a port (``gpu-a03``, ``gpu-a03.cluster``, ``gpu-a03:9400``)."""
    names = "|".join(re.escape(name) for name in settings.series)
    hosts = "|".join(re.escape(node) for node in nodes)
    matchers = [
        f"__name__=~{_quoted(names)}",
        f"{settings.node_label}=~{_quoted(f'(?:{hosts})(?:[.:].*)?')}",
    ]
    if settings.selector.strip():
        matchers.append(settings.selector.strip().strip("{}"))
    return "{" + ", ".join(matchers) + "}"


MAX_TOKEN_BYTES = 64 << 10


def _headers(settings: Metrics) -> dict[str, str]:
    """The request's headers, the bearer token read from its file.

    Raises:
        OSError: the token file cannot be read, is not a regular file, is larger than 64 KiB
            or is not ASCII text.
    """
    headers = {"Accept": "application/json", **settings.headers}
    if settings.bearer_token_file is not None:
        token = _read_token(settings.bearer_token_file)
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _read_token(path: Path) -> str:
    """A bearer token file: opened without blocking (a FIFO must not hang the worker), a regular
    file of printable ASCII."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        raw = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    token = raw.strip()
    if len(raw) > MAX_TOKEN_BYTES or not token.isascii() or not token.decode().isprintable():
        raise OSError(f"{path}: not a bearer token (printable ASCII, at most 64 KiB)")
    return token.decode()


def _error_of(body: bytes) -> str | None:
    """A Prometheus error answer's ``errorType: error`` as one bounded line, when the body is
    one."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and data.get("status") == "error":
        kind = one_line(str(data.get("errorType", "error")), 60)
        return f"{kind}: {one_line(str(data.get('error', '')), 240)}"
    return None


def fetch_metrics(
    settings: Metrics,
    nodes: Sequence[str],
    start: datetime,
    end: datetime,
    dest: Path,
) -> Fetched:
    """Ask ``settings.url`` for the series of ``nodes`` between ``start`` and ``end``; save each
    answer in ``dest`` (``metrics-0001.json``, ...)."""
    out = Fetched()
    if not settings.url or not nodes:
        return out
    url = settings.url + QUERY_PATH
    try:
        verify: ssl.SSLContext | bool = tls_context(settings.ca_file)
        headers = _headers(settings)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        out.problems.append(
            CoverageNote(
                "prometheus_error",
                {"url": settings.url, "error": str(exc), "nodes": compress(nodes)},
            )
        )
        return out
    step = step_for(settings, start, end)
    size = settings.nodes_per_query
    groups = [list(nodes[i : i + size]) for i in range(0, len(nodes), size)]
    for index, group in enumerate(groups):
        if out.series >= settings.max_series:
            left = [n for g in groups[index:] for n in g]
            out.problems.append(
                CoverageNote(
                    "prometheus_cap",
                    {"limit": settings.max_series, "count": len(left), "nodes": compress(left)},
                )
            )
            break
        form = {
            "query": query_for(settings, group),
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{step:g}",
        }
        out.queries += 1
        note = _ask(
            settings, url, headers, verify, form, group, dest / f"metrics-{index + 1:04d}.json", out
        )
        if note is not None and note.code in GIVE_UP:
            # a server that is down or too slow is not asked again for the other nodes: a large
            # job must not wait its timeout once per group
            rest = [n for g in groups[index:] for n in g]
            out.problems.append(CoverageNote(note.code, {**note.args, "nodes": compress(rest)}))
            break
        if note is not None:
            out.problems.append(note)
    return out


def _ask(
    settings: Metrics,
    url: str,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool,
    form: dict[str, str],
    group: list[str],
    path: Path,
    out: Fetched,
) -> CoverageNote | None:
    """One query; its answer saved to ``path`` and counted in ``out``, or the note why not."""
    where = {"url": settings.url or "", "nodes": compress(group)}
    try:
        answer = fetch(
            "POST",
            url,
            headers=headers,
            data=form,
            timeout=settings.timeout,
            max_bytes=settings.max_bytes,
            verify=verify,
        )
    except FetchError as exc:
        if exc.kind == "timeout":
            return CoverageNote("prometheus_timeout", {**where, "seconds": f"{settings.timeout:g}"})
        if exc.kind == "too_large":
            limit = f"{settings.max_bytes:,}"
            why = f"an answer of more than {limit} bytes (metrics.max_bytes)"
            return CoverageNote("prometheus_error", {**where, "error": why})
        if exc.kind == "refused":
            return CoverageNote("prometheus_error", {**where, "error": exc.message})
        return CoverageNote("prometheus_unreachable", {**where, "error": exc.message})
    if answer.status != 200:
        why = _error_of(answer.body) or one_line(answer.phrase, 80)
        return CoverageNote("prometheus_error", {**where, "error": f"HTTP {answer.status}: {why}"})
    try:
        data = json.loads(answer.body)
        result = data["data"]["result"] if data.get("status") == "success" else None
    except (ValueError, RecursionError, TypeError, KeyError, AttributeError):
        result = None
    if not isinstance(result, list):
        why = _error_of(answer.body) or "the answer is not a range query's JSON"
        return CoverageNote("prometheus_error", {**where, "error": why})
    room = settings.max_series - out.series
    note: CoverageNote | None = None
    if len(result) > room:
        data["data"]["result"] = result = result[:room]
        note = CoverageNote(
            "prometheus_cap",
            {"limit": settings.max_series, "count": len(group), "nodes": compress(group)},
        )
    label = settings.node_label
    if label not in NODE_LABELS:  # the reader knows the usual labels; this site's goes to "node"
        for series in result:
            labels = series.get("metric") if isinstance(series, dict) else None
            if isinstance(labels, dict) and label in labels:
                labels["node"] = labels[label]
    path.write_text(json.dumps(data))
    out.files.append(path)
    out.series += min(len(result), room)
    return note
