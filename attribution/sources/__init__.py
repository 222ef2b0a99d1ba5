"""Log sources: which file feeds which stream, and reading one source into ``LogLine``s.

A *source* is one stream of one node (or of the job) and may span several
files (rotations). ``SourceReader`` streams its lines, resolves their time
(including kernel uptime stamps, through a boot time learnt from lines that
carry both clocks) and keeps the counts that become the ``coverage`` entry.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import itertools
import os
import queue
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Protocol

from attribution.errors import SourceError
from attribution.hostlist import short_name
from attribution.model import (
    DEFAULT_TRUST,
    SYNTHETIC_IDENT,
    Coverage,
    CoverageStatus,
    LogLine,
    SourceRef,
    Stream,
    Trust,
)
from attribution.sources.prefix import Prefix, parse_prefix
from attribution.sources.reader import (
    DECODE_ERRORS,
    DEFAULT_MAX_LINE,
    LogHandle,
    ReadStats,
    decode_line,
    open_log,
)
from attribution.timeutil import shift

MAX_NOTES = 10  # notes kept in one coverage entry; the rest are counted

# The synthetic line that closes each job output file: when its last timed line was written.
# A job that stopped writing long before Slurm killed it at its time limit was hung, not slow
# (CHAINS.md 11). Lines in the last TEARDOWN seconds (SIGTERM handlers) do not count; only the
# last TAIL_BYTES of a file are searched. Its ident (SYNTHETIC_IDENT) cannot come from a log.
LAST_OUTPUT = "attribution: last timed output line"
LAST_OUTPUT_IDENT = SYNTHETIC_IDENT
TEARDOWN = 120.0
TAIL_BYTES = 256 << 10
CADENCE = 5  # timed lines before the last one that show the output was stamped regularly

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
    "nvidia-smi": Stream.DCGM,  # saved nvidia-smi output: GPU health, like DCGM's
    "slurmd": Stream.SLURMD,
}

# ``.log``, ``.1``, ``.gz`` and logrotate's ``dateext`` (``-20260101``, ``-2026-01-01``)
_SUFFIXES = re.compile(
    r"(\.(log|txt|out|err|gz|zst|zstd|\d+)|-\d{8}(\d{2})?|-\d{4}-\d{2}-\d{2})+$", re.IGNORECASE
)


def file_stem(name: str) -> str:
    """``kern.log.1.gz`` -> ``kern``; ``messages-20260101.gz`` -> ``messages``."""
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
    notes: list[str] = field(default_factory=list)
    problem: str | None = None
    trust: Trust | None = None  # None: what the stream is by default (``DEFAULT_TRUST``)
    kind: str = "file"  # "file": plain or compressed text; "journal": systemd journal files

    @property
    def trust_level(self) -> Trust:
        return self.trust or DEFAULT_TRUST[self.stream]


# Streams whose files are written in time order: they can be read by time window.
ORDERED_STREAMS = frozenset(
    {
        Stream.KERNEL,
        Stream.SYSLOG,
        Stream.FABRICMANAGER,
        Stream.DCGM,
        Stream.SLURMD,
        Stream.SLURMCTLD,
    }
)
CHUNK = 8 << 20  # bytes read per block
WINDOW_CHUNK = 16 << 10  # first block when reading by time window; doubles up to WINDOW_MAX
WINDOW_MAX = 256 << 10  # small blocks by time window: the read stops soon after the window
PROBE = 1 << 10  # bytes read at each bisection step (more if no timestamp is in them)
HEAD_LINES = 200  # lines at the start of a file always parsed (boot-time anchors)
_BANNER = b"] Linux version "  # a kernel boot banner after its uptime stamp


class LineSelector(Protocol):
    """Chooses the lines of a block worth parsing (``attribution.scan.LiteralScanner``)."""

    def line_starts(self, data: bytes, limit: int | None = None) -> list[int]: ...


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
    job's start and end (UTC); with it, each job output file ends with a
    synthetic ``last output`` line (see ``LAST_OUTPUT``).
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
    window: tuple[datetime | None, datetime | None] | None = None
    tolerance: float = 600.0
    seek_threshold: int = 1 << 20
    job_span: tuple[datetime, datetime] | None = None  # (start, end) UTC, for ``last output``


@dataclass(slots=True)
class Span:
    """The first and last time a source is known to have been recording (its stamped lines, or
    a journal's entries of any kind): ``Coverage.first_at``/``last_at``."""

    first: datetime | None = None
    last: datetime | None = None

    def add(self, when: datetime | None) -> None:
        if when is None:
            return
        if self.first is None or when < self.first:
            self.first = when
        if self.last is None or when > self.last:
            self.last = when


@dataclass(slots=True)
class _Tail:
    """The last ``TAIL_BYTES`` (or more: whole blocks) of a file, to find its last timed line."""

    # data, number of its first line (0: unknown), its byte offset, whether its first line is cut
    blocks: list[tuple[bytes, int, int, bool]] = field(default_factory=list)
    size: int = 0

    def push(self, block: bytes, lineno: int, offset: int, newlines: int) -> None:
        """Keep ``block`` (its first line is ``lineno``, 0 if unknown; it holds ``newlines``
        newlines, already counted by the reader) as far as the tail needs it."""
        cut = max(0, len(block) - TAIL_BYTES)
        if cut:
            kept = block[cut:]
            lineno = lineno + newlines - kept.count(b"\n") if lineno else 0
            self.blocks.append((kept, lineno, offset + cut, True))
        else:
            self.blocks.append((block, lineno, offset, False))
        self.size += len(block) - cut
        while len(self.blocks) > 1 and self.size - len(self.blocks[0][0]) >= TAIL_BYTES:
            self.size -= len(self.blocks.pop(0)[0])

    def last_time_before(
        self, cutoff: datetime, ctx: ReadContext, selector: LineSelector
    ) -> tuple[datetime, int, int, int, int, int] | None:
        """(time, line number or 0, byte offset, untimed lines after it, their bytes, timed
        lines before it) for the last line stamped before ``cutoff``. Untimed lines after it
        count only when no extractor's literal picks them: those are ordinary output (untimed
        progress), not the error and teardown messages a killed job prints. Timed lines before
        it are counted up to ``CADENCE`` (enough to show the output was stamped regularly)."""
        untimed = untimed_bytes = 0
        found: tuple[datetime, int, int] | None = None
        timed_before = 0
        for data, lineno, offset, cut in reversed(self.blocks):
            lines = data.split(b"\n")
            starts = [0]
            for chunk in lines[:-1]:
                starts.append(starts[-1] + len(chunk) + 1)
            picked = set(selector.line_starts(data))
            for index in range(len(lines) - 1, 0 if cut else -1, -1):  # a cut line is no line
                raw = decode_line(lines[index])
                if not raw.strip():
                    continue
                try:
                    when = parse_prefix(raw, tz=ctx.tz, reference=ctx.reference).time
                except Exception:
                    when = None
                if found is not None:
                    timed_before += when is not None
                    if timed_before >= CADENCE:
                        break
                elif when is None:
                    if starts[index] not in picked:
                        untimed += 1
                        untimed_bytes += len(lines[index])
                elif when < cutoff:
                    line = lineno + index if lineno else 0
                    found = (when, line, offset + starts[index])
            if found is not None and timed_before >= CADENCE:
                break
        if found is None:
            return None
        return (*found, untimed, untimed_bytes, timed_before)


@dataclass(slots=True)
class _Raw:
    lineno: int  # 0 when unknown (the read started mid-file)
    offset: int
    data: bytes
    emit: bool


class SourceReader:
    """Reads one ``SourceSpec`` into ``LogLine``s and reports its ``Coverage``.

    Iterate ``lines()`` fully, then call ``coverage()``. Errors never escape:
    they end up in the coverage entry. Files are read in large blocks; only
    the lines the stream's selector picks (plus the head of each file, for
    boot-time anchors, and ``follow`` lines after each pick) are decoded and
    parsed.
    """

    def __init__(self, spec: SourceSpec, ctx: ReadContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.stats: list[ReadStats] = []
        self.errors: list[str] = []
        self.unreadable: list[str] = [spec.problem] if spec.problem else []
        self.notes: list[str] = list(spec.notes)
        self.missing = not spec.paths and not spec.problem
        self.uptime_only = 0  # kernel uptime stamps we could not turn into wall-clock time
        self.earlier_boot = 0  # uptime-only lines of a boot that ended before the job window
        self.odd_prefixes = 0  # lines whose prefix could not be parsed (read as plain text)
        self.bytes_on_disk = 0
        self.span = Span()  # when the source is known to have been recording

    # ------------------------------------------------------------------ public

    def lines(self) -> Iterator[LogLine]:
        names = self._names()
        windowed = self.ctx.window is not None and self.spec.stream in ORDERED_STREAMS
        firsts: list[datetime | None] = []
        if windowed and len(self.spec.paths) > 1:
            firsts = [self._first_time(p) for p in self.spec.paths]
        known_boot = self.ctx.boot_times.get(self.spec.node) if self.spec.node else None
        state = _Clock(known_boot)
        if known_boot is not None:
            # the known boot time is the node's latest boot: lines before a later boot banner
            # in these files belong to an earlier boot and must not be placed with it
            state.expect_banners(sum(self._banners(p) for p in self.spec.paths))
        for index, (path, shown) in enumerate(zip(self.spec.paths, names, strict=True)):
            if firsts and self._outside(index, firsts):
                self.notes.append(f"{shown}: skipped, its lines are outside the job window")
                continue
            stats = ReadStats()
            self.stats.append(stats)
            try:
                handle = self._open(path)
            except SourceError as exc:
                self.unreadable.append(f"{shown}: {exc.message}")
                continue
            tail = _Tail() if self._wants_last_output() else None
            with handle:
                raws = self._blocks(handle, path, stats, shown, windowed, tail)
                yield from self._parse(raws, shown, state)
            if tail is not None:
                last = self._last_output(tail, shown)
                if last is not None:
                    yield last
            if stats.error:
                self.errors.append(f"{shown}: {stats.error}")

    def coverages(self) -> list[Coverage]:
        """This source's coverage entries (one; a journal of many hosts gives one per node)."""
        return [self.coverage()]

    def coverage(self) -> Coverage:
        """The coverage entry for this source (call after ``lines()`` is exhausted)."""
        total_bytes = sum(s.bytes for s in self.stats)
        total_lines = sum(s.lines for s in self.stats)
        reasons: list[str] = self.notes[:MAX_NOTES]
        if len(self.notes) > MAX_NOTES:
            reasons.append(f"and {len(self.notes) - MAX_NOTES} more such note(s)")
        truncated = sum(s.truncated for s in self.stats)
        binary = sum(s.binary_lines for s in self.stats)
        if truncated:
            reasons.append(f"{truncated} over-long line(s) cut at {self.ctx.max_line} bytes")
        if binary:
            reasons.append(f"{binary} line(s) with NUL bytes")
        if self.odd_prefixes:
            reasons.append(f"{self.odd_prefixes} line(s) with an unreadable prefix read as text")
        if self.earlier_boot:
            reasons.append(
                f"{self.earlier_boot} line(s) from a boot before the node's last one (which began"
                " before the job) were skipped as outside the job window"
            )
        if self.uptime_only:
            reasons.append(
                f"{self.uptime_only} line(s) carry only kernel uptime and no boot time is known:"
                " signals from them are untimed"
            )
        if self.missing:
            status = CoverageStatus.MISSING
            reasons.insert(0, "no file for this source")
        elif self.unreadable and len(self.unreadable) >= len(self.spec.paths):
            status = CoverageStatus.UNREADABLE
            reasons[:0] = self.unreadable
        elif self.errors:
            status = CoverageStatus.ERROR
            reasons[:0] = self.errors + self.unreadable
        elif total_lines == 0 and not self.notes:
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
            trust=self.spec.trust_level,
            first_at=self.span.first,
            last_at=self.span.last,
        )

    # ------------------------------------------------------------------ files

    def _names(self) -> list[str]:
        if len(self.spec.display) == len(self.spec.paths):
            return self.spec.display
        return [str(p) for p in self.spec.paths]

    def _open(self, path: Path) -> LogHandle:
        handle = open_log(path, nofollow=self.spec.nofollow)
        if (
            self.spec.owner_uid is not None
            and os.fstat(handle.fileno()).st_uid != self.spec.owner_uid
        ):
            handle.close()
            raise SourceError(f"not owned by uid {self.spec.owner_uid}")
        if self.spec.max_bytes is not None and isinstance(handle, io.FileIO):
            _skip_to_tail(handle, self.spec.max_bytes)
        with contextlib.suppress(OSError):
            self.bytes_on_disk += path.stat().st_size
        return handle

    def _first_time(self, path: Path) -> datetime | None:
        """The first wall-clock time in a file (from a few KiB of its head), or None."""
        try:
            with open_log(path, nofollow=self.spec.nofollow) as handle:
                head = handle.read(PROBE)
                stamp = _first_stamp(head.split(b"\n")[:-1] or [head], self.ctx)
                if stamp is None and len(head) == PROBE:
                    head += handle.read(16 * PROBE)
                    stamp = _first_stamp(head.split(b"\n")[:-1] or [head], self.ctx)
                return stamp
        except (SourceError, *DECODE_ERRORS):
            return None

    def _banners(self, path: Path) -> int:
        """Kernel boot banners ("Linux version ...") in a file whose lines carry no wall-clock
        time (a dmesg capture); 0 for files with wall-clock stamps or that cannot be read."""
        if self._first_time(path) is not None:
            return 0
        count, tail = 0, b""
        try:
            with open_log(path, nofollow=self.spec.nofollow) as handle:
                while chunk := handle.read(CHUNK):
                    data = tail + chunk
                    count += data.count(_BANNER)
                    tail = data[-len(_BANNER) + 1 :]
        except (SourceError, *DECODE_ERRORS):
            return 0
        return count

    def _outside(self, index: int, firsts: list[datetime | None]) -> bool:
        """A rotated file entirely before or after the window (judged by first timestamps)."""
        assert self.ctx.window is not None
        start, end = self.ctx.window
        tol = timedelta(seconds=self.ctx.tolerance)
        first = firsts[index]
        if end is not None and first is not None and first > end + tol:
            return True
        known = [t for t in firsts if t is not None]
        if any(b <= a for a, b in itertools.pairwise(known)):
            # not one log's rotations, oldest first (dmesg.log beside kern.log, or a copy):
            # a later file says nothing about where this one ends
            return False
        later = [t for t in firsts[index + 1 :] if t is not None]
        return bool(start is not None and later and later[0] < start - tol)

    def _wants_last_output(self) -> bool:
        return self.ctx.job_span is not None and self.spec.stream in (
            Stream.JOB_STDOUT,
            Stream.JOB_STDERR,
        )

    def _last_output(self, tail: _Tail, shown: str) -> LogLine | None:
        """The synthetic ``LAST_OUTPUT`` line for one job output file, or None when the
        file's tail holds no timed line before the job's teardown."""
        assert self.ctx.job_span is not None
        start, end = self.ctx.job_span
        cutoff = end - timedelta(seconds=TEARDOWN)
        selector = (
            self.ctx.notable.get(self.spec.stream)
            or self.ctx.selectors.get(self.spec.stream)
            or EveryLine()
        )
        found = tail.last_time_before(cutoff, self.ctx, selector)
        if found is None:
            return None
        when, lineno, offset, untimed, untimed_bytes, timed_before = found
        silent = (end - when).total_seconds()
        share = silent / max(1.0, (end - start).total_seconds())
        text = (
            f"{LAST_OUTPUT} at {when:%Y-%m-%dT%H:%M:%S}Z: silent for {silent / 60:.0f} min"
            f" ({silent:.0f} s, share {share:.2f} of the run) before the job ended;"
            f" {untimed} untimed ordinary line(s) ({untimed_bytes} bytes) after it;"
            f" {timed_before} timed line(s) before it"
        )
        return LogLine(
            stream=self.spec.stream,
            node=self.spec.node,
            text=text,
            raw=text,
            source=SourceRef(shown, lineno, None if lineno else offset),
            # untimed on purpose: it comes after lines later than ``when``, and a timed line
            # there would bound them ("no later than the next timed line") wrongly
            time=None,
            ident=LAST_OUTPUT_IDENT,
        )

    def _blocks(
        self,
        handle: LogHandle,
        path: Path,
        stats: ReadStats,
        shown: str,
        windowed: bool,
        tail: _Tail | None = None,
    ) -> Iterator[_Raw]:
        """Selected raw lines of one file, in order, with their line numbers or offsets."""
        ctx = self.ctx
        selector = ctx.selectors.get(self.spec.stream) or EveryLine()
        follow = ctx.follow.get(self.spec.stream, 0)
        base = 0
        if windowed and isinstance(handle, io.FileIO) and ctx.window and ctx.window[0]:
            target = ctx.window[0] - timedelta(seconds=ctx.tolerance)
            base = self._seek(handle, stats, target)
            if base:
                self.notes.append(f"{shown}: read from byte {base}, the start of the job window")
                self.span.add(target)  # the bisection found lines stamped before it
        stop = None
        if windowed and ctx.window and ctx.window[1]:
            stop = ctx.window[1] + timedelta(seconds=ctx.tolerance)
        lineno = 0
        known = base == 0
        carry = b""
        owed = 0  # follower lines still owed from the previous block
        head_left = HEAD_LINES if base == 0 else 0
        offset = base
        long_skip = False
        max_line = ctx.max_line
        size = WINDOW_CHUNK if stop is not None else CHUNK
        last_line: _Raw | None = None  # the file's last line, parsed (not emitted) for last_seen
        while True:
            try:
                data = handle.read(size)
                size = min(WINDOW_MAX if stop is not None else CHUNK, size * 2)
            except DECODE_ERRORS as exc:
                stats.error = f"read error after {stats.lines} lines: {exc}"
                return
            if b"\x00" in data:
                # a crash leaves NUL padding where lost data was, and the next message follows it
                # on the same "line": a NUL run ends a line (same length, so offsets hold)
                data, runs = _end_lines_at_nul_runs(data)
                stats.binary_lines += runs
            if long_skip:  # dropping the rest of an over-long line
                nl = data.find(b"\n")
                if nl < 0 and data:
                    stats.bytes += len(data)
                    offset += len(data)
                    continue
                stats.bytes += nl + 1 if data else 0
                offset += nl + 1 if data else 0
                data = data[nl + 1 :] if data else data
                long_skip = False
            eof = not data
            buf = carry + data
            if not buf:
                if last_line is not None:
                    yield last_line
                return
            cut = len(buf) if eof else buf.rfind(b"\n") + 1
            if cut == 0:  # no newline yet: one very long line
                if len(buf) > max_line:
                    carry = buf[:max_line] + b"\n"  # keep the head, drop the rest up to its newline
                    stats.bytes += len(buf) - max_line - 1
                    offset += len(buf) - max_line - 1
                    long_skip = True
                else:
                    carry = buf
                continue
            block, carry = buf[:cut], buf[cut:]
            stats.bytes += len(block)
            picked, owed = self._pick(block, selector, follow, owed, head_left)
            stats.truncated += sum(1 for _ in _long_lines(block, max_line))
            stats.binary_lines += _nul_lines(block)
            counted, pos = 0, 0  # newlines before the current pick: one pass over the block
            for start, emit in picked:
                counted += block.count(b"\n", pos, start)
                pos = start
                end = block.find(b"\n", start)
                raw = block[start : end if end >= 0 else len(block)]
                yield _Raw(
                    lineno + counted + 1 if known else 0, offset + start, raw[:max_line], emit
                )
            newlines = counted + block.count(b"\n", pos)
            n_lines = newlines + (0 if block.endswith(b"\n") else 1)
            tail_start = block.rfind(b"\n", 0, len(block) - 1) + 1
            if not picked or picked[-1][0] != tail_start:
                end_nl = block.find(b"\n", tail_start)
                last_line = _Raw(
                    lineno + n_lines if known else 0,
                    offset + tail_start,
                    block[tail_start : end_nl if end_nl >= 0 else len(block)][:max_line],
                    False,
                )
            else:
                last_line = None
            if tail is not None:
                tail.push(block, lineno + 1 if known else 0, offset, newlines)
            head_left = max(0, head_left - n_lines)
            lineno += n_lines
            stats.lines += n_lines
            offset += len(block)
            if stop is not None:
                last = _last_stamp(block, ctx)
                if last is not None and last > stop:
                    back = self._clock_goes_back(handle, offset, stop)
                    if back is None:
                        self.span.add(last)
                        first = _first_stamp(block.split(b"\n"), ctx) if base == 0 else None
                        if first is not None and first > stop and offset == len(block):
                            # nothing of this file lies in the window: say so, a node whose
                            # clock runs ahead would otherwise look merely quiet
                            self.notes.append(
                                f"{shown}: every line is stamped after the job window (from"
                                f" {first:%Y-%m-%d %H:%M}Z); if this node's clock runs ahead,"
                                " its events during the job are hidden"
                            )
                        else:
                            self.notes.append(
                                f"{shown}: stopped at byte {offset}, past the job window"
                            )
                        return
                    # a clock set ahead (a node booted with a wrong RTC, then NTP stepped it
                    # back): later lines are inside the window after all; read on to the end
                    self.notes.append(
                        f"{shown}: the clock went back after byte {offset} (lines stamped"
                        f" {last:%Y-%m-%d %H:%M}Z, later {back:%Y-%m-%d %H:%M}Z); read to the end"
                    )
                    stop = None

    def _clock_goes_back(
        self, handle: LogHandle, offset: int, stop: datetime, probes: int = 16
    ) -> datetime | None:
        """A time at or before ``stop`` found later in the file (evenly spaced probes), or
        None. Only plain files can be probed without reading them."""
        if not isinstance(handle, io.FileIO):
            return None
        try:
            size = os.fstat(handle.fileno()).st_size
        except OSError:
            return None
        if size <= offset:
            return None
        step = max(PROBE, (size - offset) // probes)
        tail = max(offset, size - 2 * PROBE)
        starts = [*range(offset + step // 2, size, step), tail]
        for at in starts:
            try:
                data = os.pread(handle.fileno(), 2 * PROBE, at)
            except OSError:
                return None
            # two whole lines per probe (the file's last two at its end): a clock that went back
            # stays back, and parsing every probed line cost seconds on a 1,024-node job
            whole = data.split(b"\n")[1:]
            for line in whole[-3:] if at == tail else whole[:-1][:2]:
                p = parse_prefix(
                    decode_line(line[: self.ctx.max_line]),
                    tz=self.ctx.tz,
                    reference=self.ctx.reference,
                )
                if p.time is not None and p.time <= stop:
                    return p.time
        return None

    def _pick(
        self, block: bytes, selector: LineSelector, follow: int, owed: int, head_left: int
    ) -> tuple[list[tuple[int, bool]], int]:
        """Line starts to parse, each with whether to emit it; and followers owed onward."""
        chosen: dict[int, bool] = {}
        starts = selector.line_starts(block)
        # lines owed from the previous block, and the file head (anchors only)
        pos, n = 0, 0
        while pos < len(block) and (n < owed or n < head_left):
            if n < owed:
                chosen[pos] = True
            else:
                chosen.setdefault(pos, False)
            nl = block.find(b"\n", pos)
            if nl < 0:
                break
            pos, n = nl + 1, n + 1
        left = 0
        for start in starts:
            chosen[start] = True
            pos, k = start, 0
            while k < follow:
                nl = block.find(b"\n", pos)
                if nl < 0 or nl + 1 >= len(block):
                    left = max(left, follow - k)
                    break
                pos = nl + 1
                chosen[pos] = True
                k += 1
        owed_next = left if starts or owed <= 0 else max(left, owed - (block.count(b"\n")))
        return sorted(chosen.items()), max(0, owed_next)

    def _seek(self, handle: io.FileIO, stats: ReadStats, target: datetime) -> int:
        """Offset of a line start at or before the first line timed >= ``target`` (bisection).

        Every probe reads ``PROBE`` bytes with ``pread`` (counted in ``stats.bytes``);
        a file whose probes carry no wall-clock time is read from the start.
        """
        fd = handle.fileno()
        try:
            size = os.fstat(fd).st_size
        except OSError:
            return 0
        if size < self.ctx.seek_threshold:
            return 0
        lo, hi = 0, size
        while hi - lo > 4 * PROBE:
            mid = (lo + hi) // 2
            stamp = self._stamp_at(fd, mid, stats)
            if stamp is None:  # lines without wall-clock time: cannot bisect, read it all
                return 0
            if stamp < target:
                lo = mid
            else:
                hi = mid
        if lo == 0:
            return 0
        tail = os.pread(fd, PROBE, lo)
        stats.bytes += len(tail)
        nl = tail.find(b"\n")
        start = lo + nl + 1 if nl >= 0 else lo
        handle.seek(start)
        return start

    def _stamp_at(self, fd: int, offset: int, stats: ReadStats) -> datetime | None:
        """The first wall-clock time in the full lines after ``offset``."""
        want = PROBE
        while want <= 256 * PROBE:
            probe = os.pread(fd, want, offset)
            stats.bytes += len(probe)
            stamp = _first_stamp(probe.split(b"\n")[1:-1], self.ctx)
            if stamp is not None or len(probe) < want:
                return stamp
            want *= 4
        return None

    # ------------------------------------------------------------------ lines

    def _parse(self, raws: Iterator[_Raw], shown: str, clock: _Clock) -> Iterator[LogLine]:
        ctx = self.ctx
        node = self.spec.node
        nodes = set(ctx.job_nodes)
        stream = self.spec.stream
        job_stream = stream in (Stream.JOB_STDOUT, Stream.JOB_STDERR)
        trusted = self.spec.trust_level is Trust.TRUSTED
        for item in raws:
            raw = decode_line(item.data)
            if not raw.strip():
                continue
            try:
                p = parse_prefix(raw, tz=ctx.tz, reference=ctx.reference)
            except Exception:  # a prefix we cannot read must not lose the rest of the file
                self.odd_prefixes += 1
                p = Prefix(text=raw)
            when = clock.place(p.time, p.uptime, p.text)
            self.span.add(when)
            if when is None and p.uptime is not None and item.emit:
                if clock.before_job(ctx.reference, ctx.tolerance):
                    self.earlier_boot += 1
                    continue
                self.uptime_only += 1
            if not item.emit:
                continue
            line_node = node
            if p.host:
                name = short_name(p.host)
                # another of the job's nodes in an aggregated file; a file of a node outside
                # the job keeps its lines there
                if (name in nodes and (node is None or node in nodes)) or (
                    node is None and not job_stream
                ):
                    line_node = name
            yield LogLine(
                stream=stream,
                node=line_node,
                text=p.text,
                raw=raw,
                source=SourceRef(shown, item.lineno, None if item.lineno else item.offset),
                time=when,
                host=p.host,
                rank=p.rank,
                pid=p.pid,
                device=p.device,
                task=p.task,
                ident=p.ident,
                trusted=trusted,
            )


@dataclass(slots=True)
class _Clock:
    """Turns kernel uptime into wall-clock time through the node's boot time.

    The boot time comes from the job record, or from a line carrying both
    clocks (syslog wrapping dmesg). A kernel boot banner or uptime running
    backwards means a reboot: the old boot time no longer applies.
    """

    boot: datetime | None
    last_uptime: float | None = None
    known_boot: datetime | None = None  # the node's latest boot, from the job record
    banners_ahead: int = 0  # boot banners still to come in the files being read

    def __post_init__(self) -> None:
        self.known_boot = self.boot

    def expect_banners(self, count: int) -> None:
        """``count`` boot banners lie ahead: until the last one, the known boot does not apply."""
        self.banners_ahead = count
        if count:
            self.boot = None

    def before_job(self, job_start: datetime | None, tol: float) -> bool:
        """The line just placed is from a boot before the known one, which itself began
        before the job: the line cannot be in the job, and a reboot clears any fault in it."""
        if not self.banners_ahead or self.known_boot is None or job_start is None:
            return False
        return self.known_boot < job_start - timedelta(seconds=tol)

    def place(self, wall: datetime | None, uptime: float | None, text: str) -> datetime | None:
        if uptime is None:
            return wall
        banner = text.startswith("Linux version")
        rebooted = banner or (self.last_uptime is not None and uptime + 1.0 < self.last_uptime)
        if rebooted:
            self.boot = None
            if banner and self.banners_ahead:
                self.banners_ahead -= 1
                if not self.banners_ahead:
                    self.boot = self.known_boot
        self.last_uptime = uptime
        if wall is not None:
            self.boot = shift(wall, -uptime)
            return wall
        if self.boot is not None:
            return shift(self.boot, uptime)
        return None


def _first_stamp(lines: Iterable[bytes], ctx: ReadContext) -> datetime | None:
    for line in itertools.islice(lines, 50):
        p = parse_prefix(decode_line(line[: ctx.max_line]), tz=ctx.tz, reference=ctx.reference)
        if p.time is not None:
            return p.time
    return None


def _last_stamp(block: bytes, ctx: ReadContext) -> datetime | None:
    """The wall-clock time of one of the last lines of a block, if any carries one."""
    tail = block[-16 * 1024 :].split(b"\n")
    for line in reversed(tail[-20:]):
        if line:
            p = parse_prefix(decode_line(line[: ctx.max_line]), tz=ctx.tz, reference=ctx.reference)
            if p.time is not None:
                return p.time
    return None


def _long_lines(block: bytes, max_line: int) -> Iterator[int]:
    """Start offsets of lines at least ``max_line`` bytes long (they are cut on reading).

    Any such line covers a multiple of ``max_line``, so probing only those
    offsets (and the line around each) finds them all in a few finds per block.
    """
    last = -1
    for probe in range(0, len(block), max_line):
        start = block.rfind(b"\n", 0, probe) + 1 if probe else 0
        if start <= last:
            continue
        end = block.find(b"\n", probe)
        if end < 0:
            end = len(block)
        if end - start >= max_line:
            last = start
            yield start


_NUL_RUN = re.compile(rb"\x00+")


def _end_lines_at_nul_runs(data: bytes) -> tuple[bytes, int]:
    """``data`` with each run of NUL bytes replaced by as many spaces ending in a newline, and
    how many runs there were (found with ``bytes.find``: a regex scan of every block was a
    tenth of the reading speed)."""
    parts: list[bytes] = []
    start = runs = 0
    pos = data.find(b"\x00")
    while pos != -1:
        m = _NUL_RUN.match(data, pos)
        assert m is not None
        parts += [data[start:pos], b" " * (m.end() - pos - 1), b"\n"]
        runs += 1
        start = m.end()
        pos = data.find(b"\x00", start)
    parts.append(data[start:])
    return b"".join(parts), runs


def _nul_lines(block: bytes) -> int:
    """How many lines of a block contain a NUL byte."""
    count, pos, line_end = 0, block.find(b"\0"), -1
    while pos != -1:
        if pos > line_end:
            count += 1
            nl = block.find(b"\n", pos)
            line_end = len(block) if nl < 0 else nl
        pos = block.find(b"\0", pos + 1)
    return count


def _skip_to_tail(handle: io.FileIO, max_bytes: int) -> None:
    """Position a plain file at the first full line of its last ``max_bytes`` bytes."""
    try:
        size = os.fstat(handle.fileno()).st_size
        if size <= max_bytes:
            return
        start = size - max_bytes
        head = os.pread(handle.fileno(), PROBE, start)
        nl = head.find(b"\n")
        handle.seek(start + nl + 1 if nl >= 0 else start)
    except (OSError, ValueError):
        return


class Reader(Protocol):
    """What ``read_sources`` gives for each source: its lines, then its coverage."""

    spec: SourceSpec
    errors: list[str]

    def lines(self) -> Iterator[LogLine]: ...

    def coverages(self) -> list[Coverage]: ...


def reader_for(spec: SourceSpec, ctx: ReadContext) -> Reader:
    """A ``SourceReader`` for files, a ``journal.JournalReader`` for journal files."""
    if spec.kind == "journal":
        from attribution.sources.journal import JournalReader

        return JournalReader(spec, ctx)
    return SourceReader(spec, ctx)


def read_sources(
    specs: Sequence[SourceSpec], ctx: ReadContext, *, workers: int = 1, queue_lines: int = 4096
) -> tuple[list[Reader], Iterator[LogLine]]:
    """Readers for ``specs`` and one iterator over all their lines, source by source.

    With ``workers`` > 1, up to that many sources are read ahead in threads
    (file reads and the pre-filter release the GIL, which pays off on slow or
    network file systems). Lines still come out in ``specs`` order, so the
    result is the same as reading one source after another; each read-ahead
    source buffers at most ``queue_lines`` lines (bounded memory).
    """
    readers = [reader_for(spec, ctx) for spec in specs]
    if workers <= 1 or len(readers) <= 1:

        def chain() -> Iterator[LogLine]:
            for reader in readers:
                try:
                    yield from reader.lines()
                except Exception as exc:  # a reader must never take the whole read down
                    reader.errors.append(f"reader failed: {exc}")

        return readers, chain()
    return readers, _read_ahead(readers, workers, queue_lines)


_DONE = object()


def _read_ahead(readers: list[Reader], workers: int, queue_lines: int) -> Iterator[LogLine]:
    """Yield every reader's lines in order while up to ``workers`` readers run ahead."""
    queues: list[queue.Queue[object]] = [queue.Queue(maxsize=queue_lines) for _ in readers]
    stop = threading.Event()

    def produce(index: int) -> None:
        out = queues[index]
        try:
            for line in readers[index].lines():
                while not stop.is_set():
                    try:
                        out.put(line, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except Exception as exc:  # a reader must never take the whole read down
            readers[index].errors.append(f"reader failed: {exc}")
        finally:
            with contextlib.suppress(queue.Full):
                out.put(_DONE, timeout=1.0 if stop.is_set() else None)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {i: pool.submit(produce, i) for i in range(min(workers, len(readers)))}
        try:
            for index in range(len(readers)):
                nxt = index + workers
                if nxt < len(readers):
                    futures[nxt] = pool.submit(produce, nxt)
                while True:
                    item = queues[index].get()
                    if item is _DONE:
                        break
                    yield item  # type: ignore[misc]
                futures.pop(index).result()
        finally:
            stop.set()
