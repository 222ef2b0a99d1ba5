"""Reading a time-ordered log by the job window instead of whole (a month of syslog for a job
of an hour): which rotated files lie outside the window, where in a file the window starts
(bisection on the line stamps) and when a read has gone past its end."""

from __future__ import annotations

import io
import itertools
import os
from dataclasses import dataclass
from datetime import datetime, timedelta

from attribution.model import CoverageNote
from attribution.sources.clock import PROBE, clock_goes_back, first_stamp, last_stamp
from attribution.sources.reader import LogHandle, ReadStats
from attribution.sources.specs import ReadContext

WINDOW_CHUNK = 16 << 10  # first block when reading by time window; doubles up to WINDOW_MAX
WINDOW_MAX = 256 << 10  # small blocks by time window: the read stops soon after the window


def window_start(ctx: ReadContext) -> datetime | None:
    """The time a windowed read starts at: the window's start less the tolerance."""
    if ctx.window is None or ctx.window[0] is None:
        return None
    return ctx.window[0] - timedelta(seconds=ctx.tolerance)


def window_stop(ctx: ReadContext) -> datetime | None:
    """The time past which a windowed read stops: the window's end plus the tolerance."""
    if ctx.window is None or ctx.window[1] is None:
        return None
    return ctx.window[1] + timedelta(seconds=ctx.tolerance)


def outside_window(index: int, firsts: list[datetime | None], ctx: ReadContext) -> bool:
    """A rotated file entirely before or after the window (judged by the first timestamps of
    the source's files, ``firsts``, oldest file first)."""
    assert ctx.window is not None
    start, end = ctx.window
    tol = timedelta(seconds=ctx.tolerance)
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


def seek_window(handle: io.FileIO, stats: ReadStats, target: datetime, ctx: ReadContext) -> int:
    """Offset of a line start at or before the first line timed >= ``target`` (bisection);
    the file is left positioned there.

    Every probe reads ``PROBE`` bytes with ``pread`` (counted in ``stats.bytes``);
    a file whose probes carry no wall-clock time is read from the start.
    """
    fd = handle.fileno()
    try:
        size = os.fstat(fd).st_size
    except OSError:
        return 0
    if size < ctx.seek_threshold:
        return 0
    lo, hi = 0, size
    while hi - lo > 4 * PROBE:
        mid = (lo + hi) // 2
        stamp = _stamp_at(fd, mid, stats, ctx)
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


def _stamp_at(fd: int, offset: int, stats: ReadStats, ctx: ReadContext) -> datetime | None:
    """The first wall-clock time in the full lines after ``offset``."""
    want = PROBE
    while want <= 256 * PROBE:
        probe = os.pread(fd, want, offset)
        stats.bytes += len(probe)
        stamp = first_stamp(probe.split(b"\n")[1:-1], ctx)
        if stamp is not None or len(probe) < want:
            return stamp
        want *= 4
    return None


@dataclass(frozen=True, slots=True)
class PastWindow:
    """A block of a windowed read ends past the window: ``stop`` reading (the source recorded
    until ``last``), or read on to the end (the clock went back later in the file); ``note``
    says which, for the coverage entry."""

    stop: bool
    last: datetime
    note: CoverageNote


def past_window(
    handle: LogHandle,
    block: bytes,
    offset: int,
    stop: datetime,
    from_start: bool,
    ctx: ReadContext,
    shown: str,
) -> PastWindow | None:
    """Whether a windowed read of ``shown`` is past the window after ``block``, which ends at
    byte ``offset`` (``from_start``: the read began at byte 0); None while it is not."""
    last = last_stamp(block, ctx)
    if last is None or last <= stop:
        return None
    back = clock_goes_back(handle, offset, stop, ctx)
    if back is None:
        first = first_stamp(block.split(b"\n"), ctx) if from_start else None
        if first is not None and first > stop and offset == len(block):
            # nothing of this file lies in the window: say so, a node whose
            # clock runs ahead would otherwise look merely quiet
            return PastWindow(
                True,
                last,
                CoverageNote("clock_ahead", {"file": shown, "first": f"{first:%Y-%m-%d %H:%M}Z"}),
            )
        return PastWindow(
            True, last, CoverageNote("past_window", {"file": shown, "offset": offset})
        )
    # a clock set ahead (a node booted with a wrong RTC, then NTP stepped it
    # back): later lines are inside the window after all; read on to the end
    return PastWindow(
        False,
        last,
        CoverageNote(
            "clock_went_back",
            {
                "file": shown,
                "offset": offset,
                "last": f"{last:%Y-%m-%d %H:%M}Z",
                "back": f"{back:%Y-%m-%d %H:%M}Z",
            },
        ),
    )
