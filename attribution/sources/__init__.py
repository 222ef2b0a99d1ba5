"""Log sources: which file feeds which stream, and reading one source into ``LogLine``s.

A *source* is one stream of one node (or of the job) and may span several
files (rotations). ``SourceReader`` streams its lines, resolves their time
(including kernel uptime stamps, through a boot time learnt from lines that
carry both clocks) and keeps the counts that become the ``coverage`` entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path

from attribution.errors import SourceError
from attribution.hostlist import short_name
from attribution.model import Coverage, CoverageStatus, LogLine, SourceRef, Stream
from attribution.sources.prefix import parse_prefix
from attribution.sources.reader import DEFAULT_MAX_LINE, ReadStats, iter_lines, open_log

# file stem -> stream, for node directories of an evidence bundle
NODE_FILE_STREAMS: dict[str, Stream] = {
    "kernel": Stream.KERNEL,
    "dmesg": Stream.KERNEL,
    "kern": Stream.KERNEL,
    "journal": Stream.KERNEL,
    "syslog": Stream.SYSLOG,
    "messages": Stream.SYSLOG,
    "fabricmanager": Stream.FABRICMANAGER,
    "nv-fabricmanager": Stream.FABRICMANAGER,
    "dcgm": Stream.DCGM,
    "nv-hostengine": Stream.DCGM,
    "slurmd": Stream.SLURMD,
}

_SUFFIXES = re.compile(r"(\.(log|txt|out|err|gz|zst|zstd|\d+))+$", re.IGNORECASE)


def file_stem(name: str) -> str:
    """``kern.log.1.gz`` -> ``kern``; ``syslog`` -> ``syslog``."""
    return _SUFFIXES.sub("", name)


def node_stream_for(name: str) -> Stream | None:
    """The stream a file in ``nodes/<node>/`` feeds, or ``None`` if we do not know it."""
    return NODE_FILE_STREAMS.get(file_stem(name).lower())


def job_stream_for(name: str) -> Stream:
    """The stream a file in ``job/`` feeds: stderr when its name says so, else stdout."""
    stem = file_stem(name).lower()
    return Stream.JOB_STDERR if "err" in stem else Stream.JOB_STDOUT


@dataclass(slots=True)
class SourceSpec:
    """One source to read: a stream, its node (``None`` for job output), and its files.

    ``nofollow`` refuses symbolic links and non-regular files (for paths a job's
    owner controls); ``owner_uid``, when set, refuses files not owned by that uid;
    ``max_bytes`` caps how much of each file is read (the tail is kept).
    """

    stream: Stream
    node: str | None
    paths: list[Path] = field(default_factory=list)
    display: list[str] = field(default_factory=list)
    nofollow: bool = False
    owner_uid: int | None = None
    max_bytes: int | None = None


@dataclass(slots=True)
class ReadContext:
    """Values every reader needs: timezone for naive stamps, a reference time, boot times, nodes."""

    tz: tzinfo = UTC
    reference: datetime | None = None
    boot_times: dict[str, datetime] = field(default_factory=dict)
    job_nodes: tuple[str, ...] = ()
    max_line: int = DEFAULT_MAX_LINE


class SourceReader:
    """Reads one ``SourceSpec`` into ``LogLine``s and reports its ``Coverage``.

    Iterate ``lines()`` fully, then call ``coverage()``. Errors never escape:
    they end up in the coverage entry.
    """

    def __init__(self, spec: SourceSpec, ctx: ReadContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.stats: list[ReadStats] = []
        self.errors: list[str] = []
        self.unreadable: list[str] = []
        self.missing = not spec.paths
        self.uptime_only = 0  # kernel uptime stamps we could not turn into wall-clock time

    def lines(self) -> Iterator[LogLine]:
        for path, shown in zip(self.spec.paths, self._names(), strict=True):
            stats = ReadStats()
            self.stats.append(stats)
            try:
                handle = self._open(path)
            except SourceError as exc:
                self.unreadable.append(f"{shown}: {exc.message}")
                continue
            with handle:
                yield from self._parse(iter_lines(handle, stats, max_line=self.ctx.max_line), shown)
            if stats.error:
                self.errors.append(f"{shown}: {stats.error}")

    def _names(self) -> list[str]:
        if len(self.spec.display) == len(self.spec.paths):
            return self.spec.display
        return [str(p) for p in self.spec.paths]

    def _open(self, path: Path):  # type: ignore[no-untyped-def]
        handle = open_log(path, nofollow=self.spec.nofollow)
        if self.spec.owner_uid is not None:
            import os

            info = os.fstat(handle.fileno()) if hasattr(handle, "fileno") else None
            if info is not None and info.st_uid != self.spec.owner_uid:
                handle.close()
                raise SourceError(f"not owned by uid {self.spec.owner_uid}")
        if self.spec.max_bytes is not None:
            _skip_to_tail(handle, path, self.spec.max_bytes)
        return handle

    def _parse(self, raw_lines: Iterator[str], shown: str) -> Iterator[LogLine]:
        ctx = self.ctx
        node = self.spec.node
        boot = ctx.boot_times.get(node) if node else None
        last_uptime: float | None = None
        nodes = set(ctx.job_nodes)
        stream = self.spec.stream
        for lineno, raw in enumerate(raw_lines, 1):
            if not raw.strip():
                continue
            p = parse_prefix(raw, tz=ctx.tz, reference=ctx.reference)
            when = p.time
            if p.uptime is not None:
                if last_uptime is not None and p.uptime + 1.0 < last_uptime:
                    boot = None  # uptime went backwards: the node rebooted
                last_uptime = p.uptime
                if when is not None:
                    boot = when - timedelta(seconds=p.uptime)
                elif boot is not None:
                    when = boot + timedelta(seconds=p.uptime)
                else:
                    self.uptime_only += 1
            line_node = node
            if p.host:
                name = short_name(p.host)
                if name in nodes or (
                    node is None
                    and stream
                    not in (
                        Stream.JOB_STDOUT,
                        Stream.JOB_STDERR,
                    )
                ):
                    line_node = name
            yield LogLine(
                stream=stream,
                node=line_node,
                text=p.text,
                raw=raw,
                source=SourceRef(shown, lineno),
                time=when,
                host=p.host,
                rank=p.rank,
                pid=p.pid,
                device=p.device,
                task=p.task,
            )

    def coverage(self) -> Coverage:
        """The coverage entry for this source (call after ``lines()`` is exhausted)."""
        total_bytes = sum(s.bytes for s in self.stats)
        total_lines = sum(s.lines for s in self.stats)
        reasons: list[str] = []
        truncated = sum(s.truncated for s in self.stats)
        binary = sum(s.binary_lines for s in self.stats)
        if truncated:
            reasons.append(f"{truncated} over-long line(s) cut at {self.ctx.max_line} bytes")
        if binary:
            reasons.append(f"{binary} line(s) with NUL bytes")
        if self.uptime_only:
            reasons.append(
                f"{self.uptime_only} line(s) carry only kernel uptime and no boot time is known:"
                " signals from them are untimed"
            )
        if self.missing:
            status = CoverageStatus.MISSING
            reasons.insert(0, "no file for this source")
        elif self.unreadable and len(self.unreadable) == len(self.spec.paths):
            status = CoverageStatus.UNREADABLE
            reasons[:0] = self.unreadable
        elif self.errors:
            status = CoverageStatus.ERROR
            reasons[:0] = self.errors + self.unreadable
        elif total_lines == 0:
            status = CoverageStatus.EMPTY
            reasons[:0] = self.unreadable
        else:
            status = CoverageStatus.OK
            reasons[:0] = self.unreadable
        return Coverage(
            stream=self.spec.stream,
            node=self.spec.node,
            status=status,
            files=tuple(self._names()),
            bytes=total_bytes,
            lines=total_lines,
            reason="; ".join(reasons) or None,
        )


def _skip_to_tail(handle: object, path: Path, max_bytes: int) -> None:
    """Seek a plain file to its last ``max_bytes`` bytes (compressed files are read whole)."""
    seek = getattr(handle, "seek", None)
    if seek is None:
        return
    try:
        size = path.stat().st_size
        if size > max_bytes:
            seek(size - max_bytes)
            handle.readline()  # type: ignore[attr-defined]  # drop the partial first line
    except (OSError, ValueError):
        return


def read_sources(
    specs: Sequence[SourceSpec], ctx: ReadContext
) -> tuple[list[SourceReader], Iterator[LogLine]]:
    """Readers for ``specs`` and one iterator over all their lines, source by source."""
    readers = [SourceReader(spec, ctx) for spec in specs]

    def chain() -> Iterator[LogLine]:
        for reader in readers:
            yield from reader.lines()

    return readers, chain()
