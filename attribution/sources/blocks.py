"""Reading one file in large blocks and picking the lines worth parsing.

Only the lines the stream's selector picks (plus the head of each file, for boot-time
anchors, and ``follow`` lines after each pick) leave a block, as raw bytes with their line
number or byte offset. Damage is counted, never fatal: a run of NUL bytes (what a crash
leaves) ends a line, and a line longer than ``max_line`` is cut and the rest dropped.
"""

from __future__ import annotations

import functools
import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from attribution.model import CoverageNote, Stream
from attribution.sources.clock import PROBE
from attribution.sources.coverage import Span
from attribution.sources.lastoutput import Tail
from attribution.sources.prefix import parse_prefix
from attribution.sources.reader import DECODE_ERRORS, LogHandle, ReadStats, decode_line
from attribution.sources.specs import (
    EveryLine,
    LineSelector,
    ReadContext,
    Sampler,
    SamplingSelector,
)
from attribution.sources.window import (
    WINDOW_CHUNK,
    WINDOW_MAX,
    past_window,
    seek_window,
    window_start,
    window_stop,
)

CHUNK = 8 << 20  # bytes read per block
HEAD_LINES = 200  # lines at the start of a file always parsed (boot-time anchors)
SAMPLE_TRIES = 64  # lines with a sampled literal but not its message passed over per block
_VECTOR_COUNT = 1 << 20  # blocks at least this large count their newlines with numpy
_FEW_PICKS = 256  # more picks in a large block: find every newline once, not per gap
_NEWLINE = ord("\n")


@dataclass(slots=True)
class RawLine:
    """One picked line of a file, not yet decoded; ``emit``: False for a line parsed only
    for what it says about time (a head anchor, the file's last line)."""

    lineno: int  # 0 when unknown (the read started mid-file)
    offset: int
    data: bytes
    emit: bool


def read_blocks(
    handle: LogHandle,
    stats: ReadStats,
    shown: str,
    *,
    ctx: ReadContext,
    stream: Stream,
    windowed: bool,
    notes: list[CoverageNote],
    span: Span,
    tail: Tail | None = None,
) -> Iterator[RawLine]:
    """Selected raw lines of one file, in order, with their line numbers or offsets.

    Counts go to ``stats``; remarks for the coverage entry (where a windowed read started
    and stopped) to ``notes``; times the read learnt the source was recording to ``span``;
    every block to ``tail`` when one is given.
    """
    selector = ctx.selectors.get(stream) or EveryLine()
    follow = ctx.follow.get(stream, 0)
    sampler = ctx.sampling.get(stream)
    heads = ctx.heads.get(stream)
    full_left = ctx.progress_lines  # picked lines parsed before progress lines are sampled
    sampled = False  # whether progress lines of this file were sampled (noted once)
    sampled_note = CoverageNote("progress_sampled", {"file": shown, "lines": full_left})
    base = 0
    target = window_start(ctx) if windowed and isinstance(handle, io.FileIO) else None
    if target is not None:
        assert isinstance(handle, io.FileIO)
        base = seek_window(handle, stats, target, ctx)
        if base:
            notes.append(CoverageNote("window_start", {"file": shown, "offset": base}))
            span.add(target)  # the bisection found lines stamped before it
    stop = window_stop(ctx) if windowed else None
    lineno = 0
    known = base == 0
    carry = b""
    owed = 0  # follower lines still owed from the previous block
    head_left = HEAD_LINES if base == 0 else 0
    offset = base
    long_skip = False
    max_line = ctx.max_line
    size = WINDOW_CHUNK if stop is not None else CHUNK
    last_line: RawLine | None = None  # the file's last line, parsed (not emitted) for last_seen
    while True:
        try:
            data = handle.read(size)
            size = min(WINDOW_MAX if stop is not None else CHUNK, size * 2)
        except DECODE_ERRORS as exc:
            stats.error = CoverageNote(
                "read_error", {"file": shown, "lines": stats.lines, "error": str(exc)}
            )
            return
        if b"\x00" in data:
            # a crash leaves NUL padding where lost data was, and the next message follows it
            # on the same "line": a NUL run ends a line (same length, so offsets hold)
            data, runs = end_lines_at_nul_runs(data)
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
        if sampler is None or not isinstance(selector, SamplingSelector):
            starts = selector.line_starts(block)
        else:
            starts, upto = selector.first_line_starts(block, full_left)
            full_left -= len(starts)
            if upto < len(block):
                # past the lines parsed in full: every other line, and the block's last
                # progress line (so the first and last progress, and progress after any other
                # line, are still seen)
                starts += [s for s in sampler.kept.line_starts(block) if s >= upto]
                last = last_sampled(block, upto, sampler, ctx)
                if last >= 0:
                    starts.append(last)
                starts = sorted(set(starts))
                if not sampled:
                    notes.append(sampled_note)
                sampled = True
        led = None if heads is None else _heads(block, starts, heads) if follow else set()
        picked, owed = pick_lines(block, starts, follow, owed, head_left, led)
        stats.truncated += sum(1 for _ in long_lines(block, max_line))
        stats.binary_lines += nul_lines(block)
        before, newlines = newlines_before(block, [start for start, _ in picked])
        for (start, emit), counted in zip(picked, before, strict=True):
            end = block.find(b"\n", start)
            raw = block[start : end if end >= 0 else len(block)]
            yield RawLine(
                lineno + counted + 1 if known else 0, offset + start, raw[:max_line], emit
            )
        n_lines = newlines + (0 if block.endswith(b"\n") else 1)
        tail_start = block.rfind(b"\n", 0, len(block) - 1) + 1
        if not picked or picked[-1][0] != tail_start:
            end_nl = block.find(b"\n", tail_start)
            last_line = RawLine(
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
            past = past_window(handle, block, offset, stop, base == 0, ctx, shown)
            if past is not None:
                notes.append(past.note)
                if past.stop:
                    span.add(past.last)
                    return
                stop = None


def last_sampled(block: bytes, low: int, sampler: Sampler, ctx: ReadContext) -> int:
    """Start of the last line of ``block`` at or after ``low`` that a sampled extractor reads
    (its literal occurs and its regex matches the text past the prefix), or -1. A line with
    the literal but not the message (a checkpoint line that says "loss") is passed over; at
    most ``SAMPLE_TRIES`` such lines are, so a block cannot make this costly."""
    high: int | None = None
    for _ in range(SAMPLE_TRIES):
        start = sampler.sampled.last_line_start(block, low, high)
        if start < 0:
            return -1
        end = block.find(b"\n", start)
        raw = decode_line(block[start : end if end >= 0 else len(block)][: ctx.max_line])
        try:
            text = parse_prefix(raw, tz=ctx.tz, reference=ctx.reference).text
        except Exception:  # a prefix the reader cannot read is read as plain text, as here
            text = raw
        if sampler.matches(text):
            return start
        high = start
    return -1


def _heads(block: bytes, starts: list[int], heads: LineSelector) -> set[int]:
    """The picks whose line holds a multi-line extractor's literal (each picked line is
    searched alone: picks are few, and a second pass over the block costs more)."""
    out = set()
    for start in starts:
        end = block.find(b"\n", start)
        if heads.line_starts(block[start : end if end >= 0 else len(block)]):
            out.add(start)
    return out


def pick_lines(
    block: bytes,
    starts: list[int],
    follow: int,
    owed: int,
    head_left: int,
    led: set[int] | None = None,
) -> tuple[list[tuple[int, bool]], int]:
    """Line starts to parse (``starts``, the selector's picks, and the lines around them),
    each with whether to emit it; and followers owed onward. Only the picks in ``led`` (all,
    when it is None) take followers."""
    chosen: dict[int, bool] = {}
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
        if led is not None and start not in led:
            continue
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


def newlines_before(block: bytes, starts: list[int]) -> tuple[list[int], int]:
    """How many newlines of ``block`` lie before each of ``starts`` (ascending), and in all.

    ``bytes.count`` is about half of a plain read's cost, so a large block counts with
    numpy's vector compare: per gap between picks when they are few, else by finding every
    newline once and looking each pick up. numpy is imported only when a large block is read.
    """
    count: Callable[[int, int], int]
    if len(block) < _VECTOR_COUNT:
        count = functools.partial(block.count, b"\n")
    else:
        import numpy

        data = numpy.frombuffer(block, numpy.uint8)
        if len(starts) > _FEW_PICKS:
            where = numpy.flatnonzero(data == _NEWLINE)
            found = numpy.searchsorted(where, numpy.asarray(starts, dtype=numpy.int64))
            return [int(n) for n in found], len(where)

        def count(lo: int, hi: int) -> int:
            return int(numpy.count_nonzero(data[lo:hi] == _NEWLINE))

    out, counted, pos = [], 0, 0
    for start in starts:
        counted += count(pos, start)
        out.append(counted)
        pos = start
    return out, counted + count(pos, len(block))


def long_lines(block: bytes, max_line: int) -> Iterator[int]:
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


def end_lines_at_nul_runs(data: bytes) -> tuple[bytes, int]:
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


def nul_lines(block: bytes) -> int:
    """How many lines of a block contain a NUL byte."""
    count, pos, line_end = 0, block.find(b"\0"), -1
    while pos != -1:
        if pos > line_end:
            count += 1
            nl = block.find(b"\n", pos)
            line_end = len(block) if nl < 0 else nl
        pos = block.find(b"\0", pos + 1)
    return count


def skip_to_tail(handle: io.FileIO, max_bytes: int) -> None:
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
