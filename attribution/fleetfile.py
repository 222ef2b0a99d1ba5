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
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attribution._yaml import load_yaml
from attribution.errors import AttributionError, Location
from attribution.hostlist import HostlistError
from attribution.timeutil import parse_iso
from attribution.topology import (
    Topology,
    is_node_name,
    nodes_of,
    parse_groups,
    parse_topology,
)

if TYPE_CHECKING:  # imported where used: a bundle's topology needs none of the fleet model
    from attribution.fleet import Fleet, FleetJob, FleetOptions, NodeEvent, Truth

MAX_TOPOLOGY_BYTES = 64 * 1024 * 1024
MAX_LINE = 1024 * 1024  # one job's line


class FleetFileError(AttributionError):
    """A fleet history, topology or group file that cannot be read."""


def _str(value: Any, name: str, where: Location, *, required: bool = False) -> str | None:
    """A text field: a string (or a number, as JSON writes job ids); None when absent."""
    if value is None:
        if required:
            raise FleetFileError(f"{name}: missing", where)
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise FleetFileError(f"{name}: expected a string, got {type(value).__name__}", where)
    return str(value)


def _node(value: Any, name: str, where: Location) -> str:
    text = _str(value, name, where, required=True)
    assert text is not None
    if not is_node_name(text):
        raise FleetFileError(f"{name}: {text[:40]!r} is not a node name", where)
    return text


def _list(value: Any, name: str, where: Location) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FleetFileError(f"{name}: expected a list, got {type(value).__name__}", where)
    return value


def _map(value: Any, name: str, where: Location) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FleetFileError(f"{name}: expected an object, got {type(value).__name__}", where)
    return value


def _job(data: Any, where: Location) -> FleetJob:
    from attribution.fleet import Blame, FleetJob, GpuMark

    data = _map(data, "the line", where)
    nodelist = _str(data.get("nodes"), "nodes", where) or ""
    try:
        nodes = nodes_of(nodelist)
    except HostlistError as exc:
        raise FleetFileError(f"nodes: {exc}", where) from None
    bad = next((n for n in nodes if not is_node_name(n)), None)
    if bad is not None:
        raise FleetFileError(f"nodes: {bad[:40]!r} is not a node name", where)
    end = _str(data.get("end"), "end", where)
    when = parse_iso(end) if end is not None else None
    if end is not None and when is None:
        raise FleetFileError(f"end: not an ISO 8601 time: {end[:40]!r}", where)
    key = _str(data.get("key"), "key", where, required=True)
    assert key is not None
    responsible = []
    for item in _list(data.get("responsible"), "responsible", where):
        b = _map(item, "responsible[]", where)
        responsible.append(
            Blame(
                _node(b.get("node"), "responsible[].node", where),
                _str(b.get("component"), "responsible[].component", where),
                _str(b.get("device"), "responsible[].device", where),
            )
        )
    links = []
    for pair in _list(data.get("links"), "links", where):
        if not isinstance(pair, list) or len(pair) != 2:
            raise FleetFileError("links[]: expected [reporter, peer]", where)
        links.append((_node(pair[0], "links[][0]", where), _node(pair[1], "links[][1]", where)))
    marks = []
    for item in _list(data.get("gpu_errors"), "gpu_errors", where):
        g = _map(item, "gpu_errors[]", where)
        code = g.get("code")
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < 1_000_000:
            raise FleetFileError("gpu_errors[].code: expected an XID number", where)
        marks.append(
            GpuMark(
                _node(g.get("node"), "gpu_errors[].node", where),
                _str(g.get("device"), "gpu_errors[].device", where, required=True) or "",
                code,
                _str(g.get("xid_class"), "gpu_errors[].xid_class", where),
            )
        )
    failed_node = data.get("failed_node")
    return FleetJob(
        key=key,
        job_id=_str(data.get("job_id"), "job_id", where) or key,
        user=_str(data.get("user"), "user", where),
        partition=_str(data.get("partition"), "partition", where),
        nodes=nodes,
        end=when,
        terminal_state=_str(data.get("terminal_state"), "terminal_state", where) or "pass",
        sub_domain=_str(data.get("sub_domain"), "sub_domain", where) or "none",
        state=_str(data.get("state"), "state", where),
        cause=_str(data.get("cause"), "cause", where),
        name=_str(data.get("name"), "name", where),
        responsible=tuple(responsible),
        suspects=tuple(
            _node(n, "suspects[]", where) for n in _list(data.get("suspects"), "suspects", where)
        ),
        links=tuple(links),
        gpu_errors=tuple(marks),
        failed_node=None if failed_node is None else _node(failed_node, "failed_node", where),
    )


def _regular(path: Path) -> BinaryIO:
    """``path`` opened for reading when it is a regular file (a FIFO or device would hang or
    never end).

    Raises:
        FleetFileError: it is not a regular file, or cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise FleetFileError(f"cannot read: {exc.strerror}", Location(str(path))) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FleetFileError("not a regular file", Location(str(path)))
    return os.fdopen(fd, "rb")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a JSON-lines file (UTF-8, a BOM allowed), each at most
    ``MAX_LINE`` bytes (read no further than that)."""
    with _regular(path) as handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE + 1)
            except OSError as exc:
                raise FleetFileError(f"cannot read: {exc.strerror}", Location(str(path))) from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                raise FleetFileError(
                    f"line longer than {MAX_LINE:,} bytes", Location(str(path), number)
                )
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                yield number, text


def _json(text: str, where: Location) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FleetFileError(f"not JSON: {exc.msg}", where) from None
    except (ValueError, RecursionError) as exc:  # 5,000-digit numbers, 100,000 brackets
        raise FleetFileError(f"not usable JSON: {str(exc)[:80]}", where) from None


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
    from attribution.fleet import NodeEvent

    if not path.exists():
        return []
    events = []
    for number, text in _lines(path):
        where = Location(str(path), number)
        data = _map(_json(text, where), "the line", where)
        at = parse_iso(_str(data.get("at"), "at", where, required=True) or "")
        if at is None:
            raise FleetFileError("at: not an ISO 8601 time", where)
        events.append(
            NodeEvent(
                _node(data.get("node"), "node", where),
                at,
                _str(data.get("state"), "state", where) or "",
                _str(data.get("reason"), "reason", where) or "",
            )
        )
    return events


def read_truth(path: Path) -> Truth:
    """A ``truth.yaml`` file.

    Raises:
        FleetFileError: when it is missing or not the documented shape.
    """
    from attribution.fleet import Truth

    with _regular(path) as handle:
        raw = handle.read(MAX_TOPOLOGY_BYTES + 1)
    if len(raw) > MAX_TOPOLOGY_BYTES:
        raise FleetFileError(f"larger than {MAX_TOPOLOGY_BYTES // 2**20} MiB", Location(str(path)))
    data, _ = load_yaml(raw.decode("utf-8", errors="replace"), str(path))
    data = data or {}
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
    with _regular(path) as handle:
        raw = handle.read(MAX_TOPOLOGY_BYTES + 1)
    if len(raw) > MAX_TOPOLOGY_BYTES:
        raise FleetFileError(f"larger than {MAX_TOPOLOGY_BYTES // 2**20} MiB", Location(str(path)))
    return raw.decode("utf-8", errors="replace")


def load_topology(topology: Path | None, groups: Path | None) -> Topology:
    """The failure domains from a topology.conf and a group map (either may be None).

    Raises:
        FleetFileError, TopologyError: a file that cannot be read or parsed.
    """
    found = Topology()
    if topology is not None:
        found = parse_topology(_read_small(topology), str(topology))
    if groups is not None:
        data, _ = load_yaml(_read_small(groups), str(groups))  # no aliases: no YAML bombs
        if data is not None:
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
    from attribution.fleet import Fleet

    if topology is None:
        topo_file, groups_file = base / "topology.conf", base / "groups.yaml"
        topology = load_topology(
            topo_file if topo_file.exists() else None,
            groups_file if groups_file.exists() else None,
        )
    fleet = Fleet(topology=topology, options=options, since=since, until=until, partition=partition)
    timeless = 0
    for job in read_jobs(base / "jobs.jsonl"):
        if job.end is None:
            timeless += 1
            continue
        if partition and job.partition != partition:
            continue
        if (since is None or job.end >= since) and (until is None or job.end < until):
            fleet.add(job)
    if timeless:
        fleet.notes.append(f"{timeless:,} run(s) without an end time were left out")
    fleet.add_events(
        e
        for e in read_events(base / "node_events.jsonl")
        if (since is None or e.at >= since) and (until is None or e.at < until)
    )
    return fleet
