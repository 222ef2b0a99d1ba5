"""What to read and how: ``SourceSpec`` (one source: its stream, node, files and limits) and
``ReadContext`` (what every reader needs: time zone, job window, which lines to parse)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Protocol, runtime_checkable

from attribution.model import DEFAULT_TRUST, CoverageNote, Stream, Trust
from attribution.sources.reader import DEFAULT_MAX_LINE, DecodeBudget

# Picked lines of one file parsed in full before the lines only progress extractors read (a
# training step, a progress bar) are sampled: after these, each block gives its last progress
# line, which keeps the first progress, the last, and progress after any other line in the file.
PROGRESS_LINES = 2_000


# A job of more nodes than this without a log of a stream gets one missing coverage entry for
# them all (note ``nodes_folded``, its node a host list), not one per node: 200,000 nodes made
# 400,000 entries (bundle loading and the worker's collection both fold).
FOLD_NODES = 1000


@dataclass(slots=True)
class SourceSpec:
    """One source to read: a stream, its node (``None`` for job output), and its files.

    ``nofollow`` refuses symbolic links and non-regular files (for paths a job's
    owner controls); ``owner_uid``, when set, refuses files not owned by that uid;
    ``max_bytes`` caps how much of each file is read (the tail is kept).
    ``notes`` are remarks for the coverage entry (files left out and why);
    ``problem``, when set, makes the source unreadable with that reason; ``trust`` says
    whether users can write it (docs/verdict.md, "Ownership and trust").
    """

    stream: Stream
    node: str | None
    paths: list[Path] = field(default_factory=list)
    display: list[str] = field(default_factory=list)
    nofollow: bool = False
    owner_uid: int | None = None
    max_bytes: int | None = None
    notes: list[CoverageNote] = field(default_factory=list)
    problem: CoverageNote | None = None
    trust: Trust | None = None  # None: what the stream is by default (``DEFAULT_TRUST``)
    # "file": plain or compressed text; "journal": systemd journal files; "metrics": Prometheus
    # range query answers (``sources.metrics``)
    kind: str = "file"
    plain: bool = False  # read the bytes as they are, never decompressed (job output)

    @property
    def trust_level(self) -> Trust:
        return self.trust or DEFAULT_TRUST[self.stream]


class LineSelector(Protocol):
    """Chooses the lines of a block worth parsing (``attribution.scan.LiteralScanner``)."""

    def line_starts(self, data: bytes, limit: int | None = None) -> list[int]: ...


@runtime_checkable
class SamplingSelector(LineSelector, Protocol):
    """A selector that can also stop after some lines and find the last hit before an offset
    (``attribution.scan.LiteralScanner``), for streams whose progress lines are sampled."""

    def first_line_starts(self, data: bytes, lines: int) -> tuple[list[int], int]: ...

    def last_line_start(self, data: bytes, low: int = 0, high: int | None = None) -> int: ...


class Sampler(Protocol):
    """How a stream's sampled lines are told apart (``attribution.scan.Sampling``):
    ``sampled`` finds lines holding only sampled extractors' literals, ``kept`` the lines
    of every other extractor, and ``matches`` says whether a line's text (its prefix peeled)
    is one a sampled extractor reads."""

    @property
    def sampled(self) -> SamplingSelector: ...

    @property
    def kept(self) -> LineSelector: ...

    def matches(self, text: str) -> bool: ...


class EveryLine:
    """A selector that keeps every line (for tools that want all of them)."""

    def line_starts(self, data: bytes, limit: int | None = None) -> list[int]:
        starts = [0] if data else []
        pos = data.find(b"\n")
        while pos != -1 and pos + 1 < len(data):
            starts.append(pos + 1)
            pos = data.find(b"\n", pos + 1)
        return starts


@dataclass(slots=True)
class ReadContext:
    """Values every reader needs.

    ``tz``: timezone for stamps without an offset; ``reference``: the job start
    (a time near the lines, for formats without a year); ``boot_times``: node ->
    the node's latest boot time, for kernel uptime stamps (lines of an earlier
    boot that ended before ``reference`` are skipped); ``job_nodes``: names a syslog host may
    take; ``selectors``: per stream, which lines to parse (default: all);
    ``follow``: per stream, how many lines after a selected one to parse too
    (multi-line messages); ``window``: ``(start, end)`` UTC, when set, ordered
    streams are read only around it (``tolerance`` seconds either side; files
    smaller than ``seek_threshold`` bytes are read whole). ``job_span``: the
    job's start and end (UTC); with it, the reader of each job output file notes
    when the file last said something (``lastoutput``, an ``OutputSilence``).
    ``node_set``: ``job_nodes`` as a frozenset, made once here (a job of 16,000 nodes has
    48,000 sources; each asking whether a host is the job's must not rebuild it).
    """

    tz: tzinfo = UTC
    reference: datetime | None = None
    boot_times: dict[str, datetime] = field(default_factory=dict)
    job_nodes: tuple[str, ...] = ()
    max_line: int = DEFAULT_MAX_LINE
    selectors: Mapping[Stream, LineSelector] = field(default_factory=dict)
    # per stream, the lines that are more than progress output (the silence check's
    # "not ordinary" lines); default: the selectors
    notable: Mapping[Stream, LineSelector] = field(default_factory=dict)
    follow: Mapping[Stream, int] = field(default_factory=dict)
    # per stream with sampled extractors (``match.sampled``: progress lines), how to tell
    # their lines apart, and how many picked lines of each file are parsed before they are
    # sampled
    sampling: Mapping[Stream, Sampler] = field(default_factory=dict)
    progress_lines: int = PROGRESS_LINES
    # per stream, the lines that take ``follow`` lines after them (the literals of multi-line
    # extractors); a stream not here gives followers to every pick
    heads: Mapping[Stream, LineSelector] = field(default_factory=dict)
    window: tuple[datetime | None, datetime | None] | None = None
    tolerance: float = 600.0
    seek_threshold: int = 1 << 20
    job_span: tuple[datetime, datetime] | None = None  # (start, end) UTC, for ``last output``
    node_set: frozenset[str] = field(init=False, default=frozenset())
    # what the compressed and encoded files of this diagnosis may still decode, together
    decode_budget: DecodeBudget = field(default_factory=DecodeBudget)

    def __post_init__(self) -> None:
        self.job_nodes = tuple(self.job_nodes)  # and so node_set (``__setattr__``)

    def __setattr__(self, name: str, value: object) -> None:
        # the node set follows job_nodes, whoever changes it
        object.__setattr__(self, name, value)
        if name == "job_nodes":
            object.__setattr__(self, "node_set", frozenset(self.job_nodes))
