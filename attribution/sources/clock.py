"""Line times: the wall-clock stamps found at a spot of a file, and a node's kernel clock.

``BootClock`` turns kernel uptime stamps into wall-clock time through the node's boot time
(and notices reboots); ``clock_goes_back`` finds a node clock stepped back later in a file.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from attribution.errors import SourceError
from attribution.sources.prefix import parse_prefix
from attribution.sources.reader import DECODE_ERRORS, LogHandle, decode_line, open_log
from attribution.sources.specs import ReadContext
from attribution.timeutil import shift

PROBE = 1 << 10  # bytes read at one spot of a file to find a time there (more if none is in them)
_BANNER = b"] Linux version "  # a kernel boot banner after its uptime stamp
_BANNER_CHUNK = 8 << 20  # bytes read at a time when counting boot banners


def first_stamp(lines: Iterable[bytes], ctx: ReadContext) -> datetime | None:
    """The wall-clock time of the first of (up to 50 of) ``lines`` that carries one."""
    for line in itertools.islice(lines, 50):
        p = parse_prefix(decode_line(line[: ctx.max_line]), tz=ctx.tz, reference=ctx.reference)
        if p.time is not None:
            return p.time
    return None


def last_stamp(block: bytes, ctx: ReadContext) -> datetime | None:
    """The wall-clock time of one of the last lines of a block, if any carries one."""
    tail = block[-16 * 1024 :].split(b"\n")
    for line in reversed(tail[-20:]):
        if line:
            p = parse_prefix(decode_line(line[: ctx.max_line]), tz=ctx.tz, reference=ctx.reference)
            if p.time is not None:
                return p.time
    return None


def first_time(path: Path, ctx: ReadContext, *, nofollow: bool = False) -> datetime | None:
    """The first wall-clock time in a file (from a few KiB of its head), or None."""
    try:
        with open_log(path, nofollow=nofollow, budget=ctx.decode_budget) as handle:
            head = handle.read(PROBE)
            stamp = first_stamp(head.split(b"\n")[:-1] or [head], ctx)
            if stamp is None and len(head) == PROBE:
                head += handle.read(16 * PROBE)
                stamp = first_stamp(head.split(b"\n")[:-1] or [head], ctx)
            return stamp
    except (SourceError, *DECODE_ERRORS):
        return None


def count_banners(path: Path, ctx: ReadContext, *, nofollow: bool = False) -> int:
    """Kernel boot banners ("Linux version ...") in a file whose lines carry no wall-clock
    time (a dmesg capture); 0 for files with wall-clock stamps or that cannot be read."""
    if first_time(path, ctx, nofollow=nofollow) is not None:
        return 0
    count, tail = 0, b""
    try:
        with open_log(path, nofollow=nofollow, budget=ctx.decode_budget) as handle:
            while chunk := handle.read(_BANNER_CHUNK):
                data = tail + chunk
                count += data.count(_BANNER)
                tail = data[-len(_BANNER) + 1 :]
    except (SourceError, *DECODE_ERRORS):
        return 0
    return count


def clock_goes_back(
    handle: LogHandle, offset: int, stop: datetime, ctx: ReadContext, probes: int = 16
) -> datetime | None:
    """A time at or before ``stop`` found after ``offset`` in the file (evenly spaced probes),
    or None. Only plain files can be probed without reading them."""
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
        # the first stamped line of two whole lines per probe (the file's last three at its
        # end): a clock that went back stays back, and parsing every probed line cost seconds
        # on a 1,024-node job (and half of a node log's reading at 12,500 nodes)
        whole = data.split(b"\n")[1:]
        for line in whole[-3:] if at == tail else whole[:-1][:2]:
            p = parse_prefix(
                decode_line(line[: ctx.max_line]),
                tz=ctx.tz,
                reference=ctx.reference,
            )
            if p.time is not None and p.time <= stop:
                return p.time
            if p.time is not None and at != tail:
                break
    return None


@dataclass(slots=True)
class BootClock:
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
