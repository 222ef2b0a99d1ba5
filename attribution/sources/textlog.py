"""``SourceReader``: one source of text log files (plain, gzip or zstd; rotations oldest
first) into ``LogLine``s and its ``Coverage`` entry.

It opens each file (``reader.open_log``), leaves out rotated files outside the job window
(``window``), takes the picked raw lines of each file (``blocks``), peels their prefixes
(``prefix``) and places them in time, kernel uptime included (``clock.BootClock``).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from attribution.errors import SourceError
from attribution.hostlist import short_name
from attribution.model import (
    Coverage,
    CoverageNote,
    CoverageStatus,
    LogLine,
    OutputSilence,
    SourceRef,
    Stream,
    Trust,
)
from attribution.sources.blocks import RawLine, read_blocks, skip_to_tail
from attribution.sources.clock import BootClock, count_banners, first_time
from attribution.sources.coverage import MAX_NOTES, Span
from attribution.sources.lastoutput import Tail, last_output, wants_last_output
from attribution.sources.prefix import Prefix, parse_prefix
from attribution.sources.reader import LogHandle, ReadStats, decode_line, open_log
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.streams import ORDERED_STREAMS
from attribution.sources.window import outside_window


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
        self.errors: list[CoverageNote] = []
        self.silences: list[OutputSilence] = []  # job output files only
        self.unreadable: list[CoverageNote] = [spec.problem] if spec.problem else []
        self.notes: list[CoverageNote] = list(spec.notes)
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
        nofollow = self.spec.nofollow
        firsts: list[datetime | None] = []
        if windowed and len(self.spec.paths) > 1:
            firsts = [first_time(p, self.ctx, nofollow=nofollow) for p in self.spec.paths]
        known_boot = self.ctx.boot_times.get(self.spec.node) if self.spec.node else None
        state = BootClock(known_boot)
        if known_boot is not None:
            # the known boot time is the node's latest boot: lines before a later boot banner
            # in these files belong to an earlier boot and must not be placed with it
            state.expect_banners(
                sum(count_banners(p, self.ctx, nofollow=nofollow) for p in self.spec.paths)
            )
        for index, (path, shown) in enumerate(zip(self.spec.paths, names, strict=True)):
            if firsts and outside_window(index, firsts, self.ctx):
                self.notes.append(CoverageNote("file_outside_window", {"file": shown}))
                continue
            stats = ReadStats()
            self.stats.append(stats)
            try:
                handle = self._open(path)
            except SourceError as exc:
                self.unreadable.append(
                    CoverageNote("unreadable", {"file": shown, "error": exc.message})
                )
                continue
            tail = Tail() if wants_last_output(self.spec, self.ctx) else None
            with handle:
                raws = read_blocks(
                    handle,
                    stats,
                    shown,
                    ctx=self.ctx,
                    stream=self.spec.stream,
                    windowed=windowed,
                    notes=self.notes,
                    span=self.span,
                    tail=tail,
                )
                yield from self._parse(raws, shown, state)
            if tail is not None:
                silence = last_output(tail, shown, self.spec, self.ctx)
                if silence is not None:
                    self.silences.append(silence)
            if stats.error:
                self.errors.append(stats.error)

    def coverages(self) -> list[Coverage]:
        """This source's coverage entries (one; a journal of many hosts gives one per node)."""
        return [self.coverage()]

    def coverage(self) -> Coverage:
        """The coverage entry for this source (call after ``lines()`` is exhausted)."""
        total_bytes = sum(s.bytes for s in self.stats)
        total_lines = sum(s.lines for s in self.stats)
        reasons: list[CoverageNote] = self.notes[:MAX_NOTES]
        if len(self.notes) > MAX_NOTES:
            reasons.append(CoverageNote("more_notes", {"count": len(self.notes) - MAX_NOTES}))
        truncated = sum(s.truncated for s in self.stats)
        binary = sum(s.binary_lines for s in self.stats)
        if truncated:
            reasons.append(
                CoverageNote("long_lines", {"count": truncated, "max_line": self.ctx.max_line})
            )
        if binary:
            reasons.append(CoverageNote("nul_bytes", {"count": binary}))
        if self.odd_prefixes:
            reasons.append(CoverageNote("odd_prefix", {"count": self.odd_prefixes}))
        if self.earlier_boot:
            reasons.append(CoverageNote("earlier_boot", {"count": self.earlier_boot}))
        if self.uptime_only:
            reasons.append(CoverageNote("uptime_only", {"count": self.uptime_only}))
        if self.missing:
            status = CoverageStatus.MISSING
            reasons.insert(0, CoverageNote("no_file"))
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
            notes=tuple(reasons),
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
        handle = open_log(
            path,
            nofollow=self.spec.nofollow,
            plain=self.spec.plain,
            budget=self.ctx.decode_budget,
        )
        if (
            self.spec.owner_uid is not None
            and os.fstat(handle.fileno()).st_uid != self.spec.owner_uid
        ):
            handle.close()
            raise SourceError(f"not owned by uid {self.spec.owner_uid}")
        if self.spec.max_bytes is not None and isinstance(handle, io.FileIO):
            skip_to_tail(handle, self.spec.max_bytes)
        with contextlib.suppress(OSError):
            self.bytes_on_disk += path.stat().st_size
        return handle

    # ------------------------------------------------------------------ lines

    def _parse(self, raws: Iterator[RawLine], shown: str, clock: BootClock) -> Iterator[LogLine]:
        ctx = self.ctx
        node = self.spec.node
        nodes = ctx.node_set
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
