"""Build a ``JobRecord`` from a plain mapping (a bundle's ``job.json``, a spool entry).

Keys follow sacct's field names in snake case (``job_id``, ``state``,
``exit_code``, ``derived_exit_code``, ``nodes``, ``start``, ``end``, ...);
sacct's own spellings (``JobID``, ``NodeList``, ``ExitCode``) are accepted too.
Naive times are read in the record's ``timezone`` (default UTC).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from attribution.errors import BundleError, Location
from attribution.hostlist import HostlistError, compress, expand
from attribution.model import JobRecord, OtherJob
from attribution.timeutil import parse_epoch, parse_iso, zone

_ALIASES: dict[str, tuple[str, ...]] = {
    "job_id": ("job_id", "jobid", "JobID", "JobIDRaw", "id"),
    "cluster": ("cluster", "Cluster", "cluster_name"),
    "sluid": ("sluid", "SLUID"),
    "array_job_id": ("array_job_id", "ArrayJobID"),
    "array_task_id": ("array_task_id", "ArrayTaskID"),
    "restart_count": ("restart_count", "Restarts", "restarts"),
    "name": ("name", "job_name", "JobName"),
    "user": ("user", "User"),
    "uid": ("uid", "UID"),
    "account": ("account", "Account"),
    "partition": ("partition", "Partition"),
    "state": ("state", "State"),
    "reason": ("reason", "Reason"),
    "exit_code": ("exit_code", "ExitCode"),
    "derived_exit_code": ("derived_exit_code", "DerivedExitCode"),
    "nodes": ("nodes", "nodelist", "node_list", "NodeList"),
    "start": ("start", "Start", "start_time"),
    "end": ("end", "End", "end_time"),
    "time_limit": ("time_limit", "Timelimit", "timelimit"),
    "work_dir": ("work_dir", "WorkDir", "working_directory"),
    "std_out": ("std_out", "StdOut", "stdout"),
    "std_err": ("std_err", "StdErr", "stderr"),
    "admin_comment": ("admin_comment", "AdminComment"),
    "failed_node": ("failed_node", "FailedNode"),
    "node_addresses": ("node_addresses",),
    "boot_times": ("boot_times",),
    "timezone": ("timezone", "tz"),
    "exclusive": ("exclusive",),
    "gres_detail": ("gres_detail",),
    "gpu_bus_ids": ("gpu_bus_ids",),
    "other_jobs": ("other_jobs",),
    "fields_missing": ("fields_missing",),
}
_MAPPINGS = ("node_addresses", "boot_times", "gres_detail", "gpu_bus_ids", "other_jobs")
# a PCI address as the driver, nvidia-smi or lspci print it: [domain:]bus:device[.function]
_BUS_ID = re.compile(r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?")

_EMPTY = {"", "unknown", "none", "n/a", "(null)"}


def _get(data: Mapping[str, Any], key: str) -> Any:
    for alias in _ALIASES[key]:
        if alias in data and data[alias] is not None:
            value = data[alias]
            if isinstance(value, str) and value.strip().lower() in _EMPTY:
                return None
            return value
    return None


def parse_time(value: Any, tz_name: str | None = None) -> datetime | None:
    """A UTC time from ISO 8601 text, epoch seconds, or ``None``."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, int) and value.bit_length() > 64:
            return None  # seconds beyond any calendar (and too long for str())
        return parse_epoch(repr(value))
    text = _clean(value).strip()
    if text.isascii() and text.isdecimal():
        return parse_epoch(text[:20])
    return parse_iso(text, zone(tz_name))


def parse_state(value: Any) -> tuple[str | None, str | None]:
    """Split sacct State: ``"CANCELLED by 1001"`` -> ``("CANCELLED", "1001")``."""
    if value is None:
        return None, None
    words = str(value).strip().upper().replace("+", "").split()
    if not words:
        return None, None
    state = words[0]
    by = None
    if len(words) >= 3 and words[1] == "BY":
        by = str(value).split()[2]
    return state, by


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` quoted for a one-line error: cut, lone surrogates escaped, and a number of
    thousands of digits (which ``str`` refuses) said in words."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return "a number of thousands of digits" if value.bit_length() > 3000 else "a huge number"
    text = value if isinstance(value, str) else repr(value)
    cut = repr(text[:limit])
    return cut + "..." if len(text) > limit else cut


def _number(key: str, value: Any, high: int, bad: Any) -> int | None:
    """A uid or count: a whole number in 0..``high`` (JSON number or decimal text; sacct's
    empty spellings are None).

    Raises:
        BundleError: (through ``bad``) anything else, named with the field and the range.
    """
    if value is None:
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise bad(key, f"must be a finite number, not {value!r}")
        if not value.is_integer():
            raise bad(key, f"must be a whole number, not {value!r}")
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        digits = text.removeprefix("-")
        if not (digits.isascii() and digits.isdecimal()):
            raise bad(key, f"{_shown(value)} is not a number")
        if len(digits) > 20:
            raise bad(key, f"a number of {len(digits):,} digits is outside 0 to {high:,}")
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad(key, f"must be a number, not {type(value).__name__}")
    if not 0 <= value <= high:
        raise bad(key, f"{_shown(value)} is outside 0 to {high:,}")
    return value


UID_MAX = 2**32 - 1  # a uid_t
RESTARTS_MAX = 65_535  # Slurm's restart count is 16 bits
TIME_LIMIT_MAX = 100 * 365 * 86400  # seconds; Slurm's own limit is far below


def _time_field(
    data: Mapping[str, Any], key: str, tz_name: str | None, bad: Any
) -> datetime | None:
    value = _get(data, key)
    if value is None:
        return None
    when = parse_time(value, tz_name)
    if when is None:
        raise bad(key, f"not a time: {_shown(value)} (ISO 8601 such as 2026-01-01T10:00:00)")
    return when


def _time_limit(value: Any) -> int | None:
    """sacct Timelimit (``[D-]HH:MM:SS``, ``MM``) or seconds -> seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not 0 <= value <= TIME_LIMIT_MAX:
            raise ValueError(value)
        return int(value)
    text = str(value).strip()
    if text.upper() in {"UNLIMITED", "PARTITION_LIMIT", "INFINITE"}:
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d) if d.isascii() and d.isdecimal() and len(d) < 10 else 0
    parts = [int(p) for p in text.split(":") if p.isascii() and p.isdecimal() and len(p) < 10]
    if not parts:
        return None
    if len(parts) == 1:
        return days * 86400 + parts[0] * 60
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    seconds = days * 86400 + h * 3600 + m * 60 + s
    if seconds > TIME_LIMIT_MAX:
        raise ValueError(value)
    return seconds


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_SCALARS = (str, int, float)


def _clean(value: Any) -> str:
    """Text safe to store and print: lone surrogates (invalid Unicode) become U+FFFD."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_of(data: Mapping[str, Any], key: str) -> str | None:
    """Field ``key`` as clean text (None when absent or empty)."""
    value = _get(data, key)
    return None if value is None else _clean(value)


# fields read as numbers by their own rules; any other field given as a JSON number (an id, a
# time in epoch seconds) must still be a whole number in range
_NUMBERS = frozenset({"uid", "restart_count", "time_limit"})


def job_from_dict(data: Mapping[str, Any], source: str = "job.json") -> JobRecord:
    """Build a ``JobRecord``, checking every field it uses.

    Raises:
        BundleError: a missing ``job_id``; a field of the wrong type; a node list that cannot
            be parsed, names something that is not a host name, or more than 200,000 nodes;
            an unknown time zone; a time that cannot be read; an end before the start.
    """
    if not isinstance(data, Mapping):
        raise BundleError("job record must be a JSON object", Location(source))

    def bad(key: str, why: str) -> BundleError:
        return BundleError(f"{key}: {why}", Location(source))

    for key in _ALIASES:
        value = _get(data, key)
        if key in _MAPPINGS:
            if value is not None and not isinstance(value, Mapping):
                raise bad(key, "must be a mapping of node -> value")
        elif key == "exclusive":
            if value is not None and not isinstance(value, bool):
                raise bad(key, "must be true or false")
        elif key == "nodes":
            if value is not None and not isinstance(value, str | list):
                raise bad(key, "must be a Slurm node list or a list of node names")
        elif key == "fields_missing":
            if value is not None and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                raise bad(key, "must be a list of sacct field names")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, _SCALARS)):
            raise bad(key, f"must be text or a number, not {type(value).__name__}")
        elif isinstance(value, int | float) and key not in _NUMBERS:
            _number(key, value, 2**63 - 1, bad)  # an id or a time: a whole number, in range
    job_id = _get(data, "job_id")
    if job_id is None:
        raise BundleError("job record has no job_id", Location(source))
    tz_name = _get(data, "timezone")
    if tz_name is not None and zone(str(tz_name)) is UTC and str(tz_name).upper() != "UTC":
        raise bad(
            "timezone",
            f"unknown time zone {_shown(tz_name)} (an IANA name such as Europe/Berlin)",
        )
    state, cancelled_by = parse_state(text_of(data, "state"))
    raw_nodes = _get(data, "nodes")
    if isinstance(raw_nodes, list) and not all(isinstance(n, str) for n in raw_nodes):
        raise bad("nodes", "a list of nodes must hold node names (text)")
    try:
        nodes = expand(raw_nodes)
    except HostlistError as exc:
        raise BundleError(exc.message, Location(source)) from None
    odd = [n for n in nodes if not _HOST.fullmatch(n)]
    if odd:
        raise bad("nodes", f"{odd[0][:80]!r} is not a host name")
    addresses: dict[str, tuple[str, ...]] = {}
    for node, value in (_get(data, "node_addresses") or {}).items():
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in items):
            raise bad(f"node_addresses.{_clean(node)[:80]}", "must be an address or a list of them")
        addresses[_clean(node)] = tuple(_clean(v) for v in items)
    boots: dict[str, datetime] = {}
    for node, value in (_get(data, "boot_times") or {}).items():
        if not isinstance(node, str) or not _HOST.fullmatch(node):
            raise bad("boot_times", f"{_shown(node)} is not a host name")
        when = parse_time(value, tz_name)
        if when is None:
            raise bad(f"boot_times.{node}", f"not a time: {_shown(value)}")
        boots[node] = when
    gres_detail, bus_ids, others = _ownership_facts(data, tz_name, bad, frozenset(nodes))
    start, end = (_time_field(data, key, tz_name, bad) for key in ("start", "end"))
    if start is not None and end is not None and end < start:
        raise bad("end", f"{end:%Y-%m-%dT%H:%M:%S}Z is before start {start:%Y-%m-%dT%H:%M:%S}Z")
    uid = _number("uid", _get(data, "uid"), UID_MAX, bad)
    restart = _number("restart_count", _get(data, "restart_count"), RESTARTS_MAX, bad)
    try:
        limit = _time_limit(_get(data, "time_limit"))
    except (ValueError, OverflowError):
        raise bad(
            "time_limit",
            f"not a time limit of at most 100 years: {_shown(_get(data, 'time_limit'))}",
        ) from None

    def text(key: str) -> str | None:
        return text_of(data, key)

    return JobRecord(
        job_id=_clean(job_id),
        cluster=text("cluster"),
        sluid=text("sluid"),
        array_job_id=text("array_job_id"),
        array_task_id=text("array_task_id"),
        restart_count=restart or 0,
        name=text("name"),
        user=text("user"),
        uid=uid,
        account=text("account"),
        partition=text("partition"),
        state=state,
        cancelled_by=cancelled_by,
        reason=text("reason"),
        exit_code=text("exit_code"),
        derived_exit_code=text("derived_exit_code"),
        nodes=nodes,
        nodelist=compress(nodes),
        start=start,
        end=end,
        time_limit=limit,
        work_dir=text("work_dir"),
        std_out=text("std_out"),
        std_err=text("std_err"),
        admin_comment=text("admin_comment"),
        failed_node=text("failed_node"),
        node_addresses=addresses,
        boot_times=boots,
        timezone=tz_name,
        exclusive=_get(data, "exclusive"),
        gres_detail=gres_detail,
        gpu_bus_ids=bus_ids,
        other_jobs=others,
        fields_missing=tuple(_clean(f) for f in _get(data, "fields_missing") or ()),
    )


def _per_node(key: str, mapping: Mapping[str, Any], bad: Any) -> dict[str, Any]:
    """A node -> value mapping whose keys may be Slurm host lists (``gpu[01-04]``)."""
    out: dict[str, Any] = {}
    for name, value in mapping.items():
        try:
            nodes = expand(str(name))
        except HostlistError as exc:
            raise bad(key, exc.message) from None
        for node in nodes:
            if not _HOST.fullmatch(node):
                raise bad(key, f"{node[:80]!r} is not a host name")
            out[node] = value
    return out


def _job_nodes_only(key: str, mapping: dict[str, Any], nodes: frozenset[str], bad: Any) -> None:
    """A per-job fact about a node outside the job would leave the real node looking unshared
    (or its GPUs unknown) without a word: refuse it."""
    odd = sorted(n for n in mapping if nodes and n not in nodes)
    if odd:
        raise bad(f"{key}.{odd[0][:80]}", "not one of the job's nodes (see 'nodes')")


def _ownership_facts(
    data: Mapping[str, Any], tz_name: str | None, bad: Any, nodes: frozenset[str]
) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, tuple[OtherJob, ...]] | None]:
    """``gres_detail``, ``gpu_bus_ids`` and ``other_jobs``, checked (docs/bundles.md)."""
    gres: dict[str, str] = {}
    per_node = _per_node("gres_detail", _get(data, "gres_detail") or {}, bad)
    _job_nodes_only("gres_detail", per_node, nodes, bad)
    for node, value in per_node.items():
        if not isinstance(value, str):
            raise bad(f"gres_detail.{node}", "must be scontrol's GRES text, e.g. gpu:2(IDX:0-1)")
        gres[node] = _clean(value)
    bus_ids: dict[str, tuple[str, ...]] = {}
    for node, value in _per_node("gpu_bus_ids", _get(data, "gpu_bus_ids") or {}, bad).items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(f"gpu_bus_ids.{node}", "must be a list of PCI bus ids, GPU minor 0 first")
        odd = [v for v in value if not _BUS_ID.fullmatch(v.strip())]
        if odd:
            raise bad(f"gpu_bus_ids.{node}", f"{odd[0][:40]!r} is not a PCI bus id")
        bus_ids[node] = tuple(v.strip() for v in value)
    raw = _get(data, "other_jobs")
    if raw is None:
        return gres, bus_ids, None
    others: dict[str, tuple[OtherJob, ...]] = {}
    per_node = _per_node("other_jobs", raw, bad)
    _job_nodes_only("other_jobs", per_node, nodes, bad)
    for node, value in per_node.items():
        if not isinstance(value, list):
            raise bad(f"other_jobs.{node}", "must be a list of {job_id, start, end}")
        jobs = []
        for item in value:
            if not isinstance(item, Mapping) or item.get("job_id") in (None, ""):
                raise bad(f"other_jobs.{node}", "each entry needs a job_id")
            if not isinstance(item["job_id"], str):
                _number(f"other_jobs.{node}.job_id", item["job_id"], 2**63 - 1, bad)
            when = {}
            for edge in ("start", "end"):
                text = item.get(edge)
                when[edge] = parse_time(text, tz_name) if text not in (None, "") else None
                if text not in (None, "") and when[edge] is None:
                    raise bad(f"other_jobs.{node}", f"{edge}: not a time: {_shown(text)}")
            if when["start"] and when["end"] and when["end"] < when["start"]:
                # its job_id is text or a whole number in range (checked above): str() is safe
                raise bad(
                    f"other_jobs.{node}", f"job {_clean(item['job_id'])}: end is before start"
                )
            user = item.get("user")
            jobs.append(
                OtherJob(
                    _clean(item["job_id"]),
                    when["start"],
                    when["end"],
                    _clean(user) if isinstance(user, str) and user.strip() else None,
                )
            )
        others[node] = tuple(jobs)
    return gres, bus_ids, others


def job_to_dict(job: JobRecord) -> dict[str, Any]:
    """The inverse of ``job_from_dict`` (times as UTC ISO 8601)."""
    from attribution.model import to_jsonable

    out = to_jsonable(job)
    out["nodes"] = job.nodelist
    if job.state and job.cancelled_by:
        out["state"] = f"{job.state} by {job.cancelled_by}"
    out.pop("cancelled_by", None)
    out.pop("nodelist", None)
    kept = {k: v for k, v in out.items() if v not in (None, {}, [], "")}
    if job.other_jobs is not None:
        kept["other_jobs"] = out["other_jobs"]  # {} says "no other job", absent "not known"
    return kept


__all__ = ["UTC", "job_from_dict", "job_to_dict", "parse_state", "parse_time"]
