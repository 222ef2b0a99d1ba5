"""Timestamp parsing and normalising: every time leaves this module as an aware UTC datetime.

Log formats that carry no year (syslog short, PyTorch/glog ``MMDD``) get the
year from a reference time (the job's start); formats without an offset are
read in the node's timezone (UTC unless the site says otherwise); kernel
uptime stamps become wall-clock time only through a known boot time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


@lru_cache(maxsize=64)
def zone(name: str | None) -> tzinfo:
    """The tzinfo for an IANA name (``UTC`` when ``name`` is empty or unknown)."""
    if not name or name.upper() == "UTC" or not _ZONE_NAME.fullmatch(name):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        # OSError: a directory of the zone database ("America"), a name too long for a path
        return UTC


# an IANA zone name: parts of letters, digits, '_', '+' and '-' joined by '/', never '..'
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]{0,40}(?:/[A-Za-z0-9_+-]{1,40}){0,3}")


# log times outside these years are corrupt or hostile, never evidence: they count as untimed
MIN_YEAR, MAX_YEAR = 1971, 2200


def to_utc(value: datetime, tz: tzinfo = UTC) -> datetime:
    """Attach ``tz`` to a naive datetime, then convert to UTC.

    Raises:
        OverflowError: for times at the very ends of the calendar (year 1, year 9999).
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(UTC)


def plausible(value: datetime | None) -> datetime | None:
    """``value`` when its year lies in [MIN_YEAR, MAX_YEAR], else None (an untimed line)."""
    if value is None or not MIN_YEAR <= value.year <= MAX_YEAR:
        return None
    return value


def shift(value: datetime, seconds: float) -> datetime | None:
    """``value + seconds``, or None when that leaves the calendar (huge kernel uptimes)."""
    try:
        return plausible(value + timedelta(seconds=seconds))
    except (OverflowError, ValueError):
        return None


def parse_iso(text: str, tz: tzinfo = UTC) -> datetime | None:
    """Parse ISO 8601 / RFC 3339 (``2024-05-01T10:00:00.123-05:00``, ``... 10:00:00,261``).

    Returns ``None`` instead of raising on anything unparsable.
    """
    text = text.strip()
    if not text:
        return None
    candidate = text.replace(",", ".", 1) if "," in text[17:24] else text
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    # "+0500" -> "+05:00" (journal short-iso)
    if len(candidate) > 5 and candidate[-5] in "+-" and candidate[-4:].isdecimal():
        candidate = candidate[:-2] + ":" + candidate[-2:]
    try:
        return plausible(to_utc(datetime.fromisoformat(candidate), tz))
    except (ValueError, OverflowError):
        return None


def parse_epoch(text: str) -> datetime | None:
    """Parse seconds since the Unix epoch (``1700000000`` or ``1700000000.5``)."""
    try:
        return plausible(datetime.fromtimestamp(float(text), UTC))
    except (ValueError, OverflowError, OSError):
        return None


def infer_year(month: int, day: int, reference: datetime | None) -> int:
    """The year that puts ``month/day`` closest to ``reference`` (handles Dec/Jan).

    Without a reference, the current UTC year is used.
    """
    ref = reference or datetime.now(UTC)
    best_year = ref.year
    best = None
    for year in (ref.year - 1, ref.year, ref.year + 1):
        try:
            candidate = datetime(year, month, min(day, 28 if month == 2 else day), tzinfo=UTC)
        except ValueError:
            continue
        distance = abs((candidate - ref).total_seconds())
        if best is None or distance < best:
            best, best_year = distance, year
    return best_year


def make_time(
    year: int | None,
    month: int,
    day: int,
    clock: str,
    tz: tzinfo,
    reference: datetime | None,
) -> datetime | None:
    """Build a UTC time from calendar parts and ``hh:mm:ss[.frac]``; ``None`` if invalid."""
    try:
        hh, mm, rest = clock.split(":", 2)
        if "." in rest:
            ss, frac = rest.split(".", 1)
            micro = int((frac + "000000")[:6])
        else:
            ss, micro = rest, 0
        if year is None:
            year = infer_year(month, day, reference)
        value = datetime(year, month, day, int(hh), int(mm), int(ss), micro)
        return plausible(to_utc(value, tz))
    except (ValueError, OverflowError):
        return None


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or ``"500ms"``.

    Raises:
        ValueError: for anything else.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 90, 90s, 15m, 2h)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def boot_time_from(wall: datetime, uptime: float) -> datetime | None:
    """The boot time implied by a line that carries both wall-clock time and uptime."""
    return shift(wall, -uptime)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """A duration back from now (``12h``, ``7d``), a date or time (``2026-11-30``), or ``all``
    (the epoch) as a UTC time: ``--since`` and ``--until``, and the server's ``since`` and
    ``until``.

    Raises:
        ValueError: for anything else.
    """
    if text.strip().lower() == "all":
        return EPOCH
    try:
        seconds = parse_duration(text)
    except ValueError:
        parsed = parse_iso(text)
        if parsed is None:
            raise ValueError(text) from None
        return parsed
    try:
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    except OverflowError:
        return EPOCH  # further back than any job
