"""Reading a bundle's GPU error history file (``history.yaml`` / ``history.json``).

The repeat logic itself is pure and lives in ``attribution.history``; this module is the
file side of it.
"""

from __future__ import annotations

from pathlib import Path

from attribution._yaml import load_yaml_file
from attribution.errors import BundleError, Location, RuleError
from attribution.history import PriorGpuError, optional_text
from attribution.timeutil import parse_iso

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
        raw_code = str(item["code"]).strip()
        if not (raw_code.isascii() and raw_code.isdecimal() and len(raw_code) <= 6):
            raise BundleError(f"bad history entry: code {raw_code[:20]!r} is not an XID", where)
        code = int(raw_code)
        try:
            at = parse_iso(str(item["at"])) if item.get("at") else None
        except (TypeError, ValueError, OverflowError) as exc:
            raise BundleError(f"bad history entry: {exc}", where) from None
        if item.get("at") and at is None:
            raise BundleError(f"bad time {item['at']!r}", where)
        out.append(
            PriorGpuError(
                job=str(item["job"]),
                node=str(item["node"]),
                device=str(item["device"]).lower(),
                code=code,
                user=optional_text(item.get("user")),
                name=optional_text(item.get("name")),
                xid_class=optional_text(item.get("xid_class")),
                unit=optional_text(item.get("unit")),
                at=at,
            )
        )
    return out
