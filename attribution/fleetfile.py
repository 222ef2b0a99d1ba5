"""Files of the fleet view: a fleet history directory, topology.conf and group maps.

A **fleet history** (docs/fleet.md) is what ``sattr simulate --fleet`` writes and what the
fleet commands and ``sattr backtest --fleet`` read instead of the verdict store:

* ``jobs.jsonl``: one job run per line (``FleetJob``'s fields; ``nodes`` a Slurm host list,
  times ISO 8601);
* ``node_events.jsonl`` (optional): Slurm node events, ``{node, at, state, reason}``;
* ``topology.conf`` and ``groups.yaml`` (optional): the failure domains;
* ``truth.yaml`` (optional): what was planted, for scoring.

Every malformed line is a one-line error naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from attribution.errors import AttributionError, Location
from attribution.fleet import Blame, Fleet, FleetJob, FleetOptions, GpuMark, NodeEvent, Truth
from attribution.hostlist import HostlistError, expand
from attribution.timeutil import parse_iso
from attribution.topology import Topology, parse_groups, parse_topology

MAX_TOPOLOGY_BYTES = 64 * 1024 * 1024
MAX_LINE = 1024 * 1024  # one job's line


class FleetFileError(AttributionError):
    """A fleet history, topology or group file that cannot be read."""


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _job(data: Any, where: Location) -> FleetJob:
    if not isinstance(data, dict):
        raise FleetFileError("expected a JSON object", where)
    try:
        nodes = expand(data.get("nodes") or "")
    except HostlistError as exc:
        raise FleetFileError(f"nodes: {exc}", where) from None
    end = data.get("end")
    when = parse_iso(end) if isinstance(end, str) else None
    if end is not None and when is None:
        raise FleetFileError(f"end: not an ISO 8601 time: {str(end)[:40]!r}", where)
    try:
        return FleetJob(
            key=str(data["key"]),
            job_id=str(data.get("job_id", data["key"])),
            user=_text(data.get("user")),
            partition=_text(data.get("partition")),
            nodes=nodes,
            end=when,
            terminal_state=str(data.get("terminal_state", "pass")),
            sub_domain=str(data.get("sub_domain") or "none"),
            state=_text(data.get("state")),
            cause=_text(data.get("cause")),
            name=_text(data.get("name")),
            responsible=tuple(
                Blame(str(b["node"]), _text(b.get("component")), _text(b.get("device")))
                for b in data.get("responsible") or ()
            ),
            suspects=tuple(str(n) for n in data.get("suspects") or ()),
            links=tuple((str(a), str(b)) for a, b in data.get("links") or ()),
            gpu_errors=tuple(
                GpuMark(str(g["node"]), str(g["device"]), int(g["code"]), _text(g.get("xid_class")))
                for g in data.get("gpu_errors") or ()
            ),
            failed_node=_text(data.get("failed_node")),
        )
    except KeyError as exc:
        raise FleetFileError(f"missing field {exc}", where) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise FleetFileError(f"malformed field: {exc}", where) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if len(raw) > MAX_LINE:
                    raise FleetFileError(
                        f"line longer than {MAX_LINE:,} bytes", Location(str(path), number)
                    )
                text = raw.decode("utf-8", errors="replace").strip()
                if text:
                    yield number, text
    except OSError as exc:
        raise FleetFileError(f"cannot read: {exc.strerror}", Location(str(path))) from None


def _json(text: str, where: Location) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FleetFileError(f"not JSON: {exc.msg}", where) from None


def read_jobs(path: Path) -> Iterator[FleetJob]:
    """The runs of a ``jobs.jsonl`` file, one at a time.

    Raises:
        FleetFileError: a line that is not a job object (names the file and line).
    """
    for number, text in _lines(path):
        where = Location(str(path), number)
        yield _job(_json(text, where), where)


def read_events(path: Path) -> list[NodeEvent]:
    """The node events of a ``node_events.jsonl`` file (none when it does not exist).

    Raises:
        FleetFileError: a malformed line.
    """
    if not path.exists():
        return []
    events = []
    for number, text in _lines(path):
        where = Location(str(path), number)
        data = _json(text, where)
        at = parse_iso(str(data.get("at"))) if isinstance(data, dict) else None
        if not isinstance(data, dict) or at is None or not data.get("node"):
            raise FleetFileError("expected {node, at, state, reason}", where)
        events.append(
            NodeEvent(
                str(data["node"]), at, str(data.get("state", "")), str(data.get("reason", ""))
            )
        )
    return events


def read_truth(path: Path) -> Truth:
    """A ``truth.yaml`` file.

    Raises:
        FleetFileError: when it is missing or not the documented shape.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise FleetFileError(f"cannot read: {exc.strerror}", Location(str(path))) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
        raise FleetFileError("not YAML", Location(str(path), line)) from None
    if not isinstance(data, dict):
        raise FleetFileError("expected a map", Location(str(path)))
    try:
        return Truth(
            bad_nodes=frozenset(map(str, data.get("bad_nodes") or ())),
            bad_links=frozenset(
                (min(str(a), str(b)), max(str(a), str(b))) for a, b in data.get("bad_links") or ()
            ),
            bad_domains=frozenset(map(str, data.get("bad_domains") or ())),
            silent_nodes=frozenset(map(str, data.get("silent_nodes") or ())),
            buggy_users=frozenset(map(str, data.get("buggy_users") or ())),
            incidents=tuple(
                frozenset(map(str, i["jobs"] if isinstance(i, dict) else i))
                for i in data.get("incidents") or ()
            ),
            spec=data.get("spec") or {},
            fault_runs=(
                {str(k): len(v) for k, v in data["fault_runs"].items()}
                if isinstance(data.get("fault_runs"), dict)
                else None
            ),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise FleetFileError(f"malformed: {exc}", Location(str(path))) from None


def _read_small(path: Path) -> str:
    try:
        if not path.is_file():
            raise FleetFileError("not a regular file", Location(str(path)))
        if path.stat().st_size > MAX_TOPOLOGY_BYTES:
            raise FleetFileError(
                f"larger than {MAX_TOPOLOGY_BYTES // 2**20} MiB", Location(str(path))
            )
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise FleetFileError(f"cannot read: {exc.strerror}", Location(str(path))) from None


def load_topology(topology: Path | None, groups: Path | None) -> Topology:
    """The failure domains from a topology.conf and a group map (either may be None).

    Raises:
        FleetFileError, TopologyError: a file that cannot be read or parsed.
    """
    found = Topology()
    if topology is not None:
        found = parse_topology(_read_small(topology), str(topology))
    if groups is not None:
        try:
            data = yaml.safe_load(_read_small(groups))
        except yaml.YAMLError:
            raise FleetFileError("not YAML", Location(str(groups))) from None
        found = found.merged(parse_groups(data, str(groups)))
    return found


def load_history(
    base: Path,
    *,
    options: FleetOptions | None = None,
    topology: Topology | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    partition: str | None = None,
) -> Fleet:
    """A fleet history directory read into a ``Fleet`` (its topology.conf and groups.yaml
    unless ``topology`` is given), runs outside ``[since, until)`` or ``partition`` left out.

    Raises:
        FleetFileError, TopologyError: a file that cannot be read or parsed.
    """
    if topology is None:
        topo_file, groups_file = base / "topology.conf", base / "groups.yaml"
        topology = load_topology(
            topo_file if topo_file.exists() else None,
            groups_file if groups_file.exists() else None,
        )
    fleet = Fleet(topology=topology, options=options, since=since, until=until)
    for job in read_jobs(base / "jobs.jsonl"):
        if job.end is None or (partition and job.partition != partition):
            continue
        if (since is None or job.end >= since) and (until is None or job.end < until):
            fleet.add(job)
    fleet.add_events(
        e
        for e in read_events(base / "node_events.jsonl")
        if (since is None or e.at >= since) and (until is None or e.at < until)
    )
    return fleet
