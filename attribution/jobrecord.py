"""Build a ``JobRecord`` from a plain mapping (a bundle's ``job.json``, a spool entry).

Keys follow sacct's field names in snake case (``job_id``, ``state``,
``exit_code``, ``derived_exit_code``, ``nodes``, ``start``, ``end``, ...);
sacct's own spellings (``JobID``, ``NodeList``, ``ExitCode``) are accepted too.
Naive times are read in the record's ``timezone`` (default UTC).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from attribution.errors import BundleError, Location
from attribution.hostlist import HostlistError, compress, expand
from attribution.model import JobRecord
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
}

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
        return parse_epoch(str(value))
    text = str(value).strip()
    if text.isdigit():
        return parse_epoch(text)
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


def _time_limit(value: Any) -> int | None:
    """sacct Timelimit (``[D-]HH:MM:SS``, ``MM``) or seconds -> seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip()
    if text.upper() in {"UNLIMITED", "PARTITION_LIMIT", "INFINITE"}:
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d) if d.isdigit() else 0
    parts = [int(p) for p in text.split(":") if p.isdigit()]
    if not parts:
        return None
    if len(parts) == 1:
        return days * 86400 + parts[0] * 60
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return days * 86400 + h * 3600 + m * 60 + s


def job_from_dict(data: Mapping[str, Any], source: str = "job.json") -> JobRecord:
    """Build a ``JobRecord``.

    Raises:
        BundleError: when ``job_id`` is missing or the node list cannot be parsed.
    """
    if not isinstance(data, Mapping):
        raise BundleError("job record must be a JSON object", Location(source))
    job_id = _get(data, "job_id")
    if job_id is None:
        raise BundleError("job record has no job_id", Location(source))
    tz_name = _get(data, "timezone")
    state, cancelled_by = parse_state(_get(data, "state"))
    raw_nodes = _get(data, "nodes")
    try:
        nodes = expand(
            raw_nodes if not isinstance(raw_nodes, list) else [str(n) for n in raw_nodes]
        )
    except HostlistError as exc:
        raise BundleError(exc.message, Location(source)) from None
    addresses: dict[str, tuple[str, ...]] = {}
    for node, value in (_get(data, "node_addresses") or {}).items():
        addresses[str(node)] = tuple(value) if isinstance(value, list) else (str(value),)
    boots: dict[str, datetime] = {}
    for node, value in (_get(data, "boot_times") or {}).items():
        when = parse_time(value, tz_name)
        if when is not None:
            boots[str(node)] = when
    uid = _get(data, "uid")
    restart = _get(data, "restart_count")

    def text(key: str) -> str | None:
        value = _get(data, key)
        return None if value is None else str(value)

    return JobRecord(
        job_id=str(job_id),
        cluster=text("cluster"),
        sluid=text("sluid"),
        array_job_id=text("array_job_id"),
        array_task_id=text("array_task_id"),
        restart_count=int(restart) if str(restart or "").isdigit() else 0,
        name=text("name"),
        user=text("user"),
        uid=int(uid) if str(uid or "").isdigit() else None,
        account=text("account"),
        partition=text("partition"),
        state=state,
        cancelled_by=cancelled_by,
        reason=text("reason"),
        exit_code=text("exit_code"),
        derived_exit_code=text("derived_exit_code"),
        nodes=nodes,
        nodelist=compress(nodes),
        start=parse_time(_get(data, "start"), tz_name),
        end=parse_time(_get(data, "end"), tz_name),
        time_limit=_time_limit(_get(data, "time_limit")),
        work_dir=text("work_dir"),
        std_out=text("std_out"),
        std_err=text("std_err"),
        admin_comment=text("admin_comment"),
        failed_node=text("failed_node"),
        node_addresses=addresses,
        boot_times=boots,
        timezone=tz_name,
    )


def job_to_dict(job: JobRecord) -> dict[str, Any]:
    """The inverse of ``job_from_dict`` (times as UTC ISO 8601)."""
    from attribution.model import to_jsonable

    out = to_jsonable(job)
    out["nodes"] = job.nodelist
    if job.state and job.cancelled_by:
        out["state"] = f"{job.state} by {job.cancelled_by}"
    out.pop("cancelled_by", None)
    out.pop("nodelist", None)
    return {k: v for k, v in out.items() if v not in (None, {}, [], "")}


__all__ = ["UTC", "job_from_dict", "job_to_dict", "parse_state", "parse_time"]
