"""Reading a bundle's GPU error history file (``history.yaml`` / ``history.json``).

The repeat logic itself is pure and lives in ``attribution.history``; this module is the
file side of it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from attribution._yaml import load_yaml_file
from attribution.errors import BundleError, Location, RuleError
from attribution.history import PriorGpuError, optional_text
from attribution.timeutil import MAX_YEAR, MIN_YEAR, parse_iso, plausible, to_utc

MAX_HISTORY_BYTES = 8 << 20  # about 40,000 entries


def read_history_file(path: Path) -> list[PriorGpuError]:
    """Read a bundle's ``history.yaml`` (or ``history.json``): a list of earlier GPU errors,
    each with ``job``, ``node``, ``device``, ``code`` and optionally ``user``, ``name``,
    ``xid_class``, ``unit`` and ``at`` (ISO 8601, UTC unless an offset is given).

    Raises:
        BundleError: the file is not a list of such mappings (names file and line), or is
            larger than ``MAX_HISTORY_BYTES``.
    """
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BundleError(f"cannot read: {exc.strerror or exc}", Location(str(path))) from None
    if size > MAX_HISTORY_BYTES:
        raise BundleError(
            f"larger than {MAX_HISTORY_BYTES >> 20} MiB; keep the last weeks of GPU errors only",
            Location(str(path)),
        )
    try:
        data, lines = load_yaml_file(path)
    except RuleError as exc:
        raise BundleError(exc.message, exc.location) from None
    if not isinstance(data, list):
        raise BundleError("history must be a list of GPU errors", Location(str(path), 1))
    out = []
    for index, item in enumerate(data):
        where = Location(str(path), lines.line_for([index]))
        if not isinstance(item, dict):
            raise BundleError("each history entry must be a mapping", where)
        missing = [k for k in ("job", "node", "device", "code") if item.get(k) in (None, "")]
        if missing:
            raise BundleError(f"history entry lacks {', '.join(missing)}", where)

        def at_line(key: str, index: int = index) -> Location:
            return Location(str(path), lines.line_for([index, key]))

        for key in ("job", "node", "device", "code", *_OPTIONAL):
            value = item.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, _SCALARS)):
                raise BundleError(
                    f"bad history entry: {key} must be text or a number, not"
                    f" {type(value).__name__}",
                    at_line(key),
                )
        raw_code = _text(item["code"])
        if not (raw_code.isascii() and raw_code.isdecimal() and len(raw_code) <= 6):
            shown = (
                f"a number of {len(raw_code)} digits"
                if raw_code.isdecimal() and len(raw_code) > 20
                else repr(raw_code[:20])
            )
            raise BundleError(f"bad history entry: code {shown} is not an XID", at_line("code"))
        at = _when(item.get("at"))
        if item.get("at") not in (None, "") and at is None:
            raise BundleError(
                f"bad history entry: at: {_text(item['at'])[:60]!r} is not a time between"
                f" {MIN_YEAR} and {MAX_YEAR} (ISO 8601, UTC unless an offset is given)",
                at_line("at"),
            )
        out.append(
            PriorGpuError(
                job=_text(item["job"]),
                node=_text(item["node"]),
                device=_text(item["device"]).lower(),
                code=int(raw_code),
                user=optional_text(item.get("user")),
                name=optional_text(item.get("name")),
                xid_class=optional_text(item.get("xid_class")),
                unit=optional_text(item.get("unit")),
                at=at,
            )
        )
    return out


_OPTIONAL = ("user", "name", "xid_class", "unit")
_SCALARS = (str, int, float)


def _text(value: Any) -> str:
    """A scalar as text, never an exception (a number Python will not print, of thousands of
    digits, is said in words)."""
    try:
        return str(value).strip()
    except ValueError:
        return "a number of thousands of digits"


def _when(value: Any) -> datetime | None:
    """``at`` as UTC: a YAML timestamp or date, or ISO 8601 text; None when unreadable or
    outside the years log times may have."""
    if value in (None, ""):
        return None
    try:
        if isinstance(value, datetime):
            return plausible(to_utc(value))
        if isinstance(value, date):
            return plausible(datetime(value.year, value.month, value.day, tzinfo=UTC))
        if isinstance(value, str):
            return parse_iso(value)
    except (ValueError, OverflowError):
        return None
    return None
