"""The cluster's shape: Slurm's ``topology.conf`` and optional rack / NVLink-domain maps.

The fleet view (``attribution.fleet``) asks one question of it: which groups of nodes share a
failure domain (a leaf switch, a block, a rack, an NVLink domain), so that failures on several
nodes under one of them can be read as one common cause rather than several bad nodes.

``topology.conf`` (slurm.conf's ``TopologyPlugin``; man topology.conf):

* tree: ``SwitchName=s1 Nodes=gpu[001-016] LinkSpeed=...``, ``SwitchName=s9 Switches=s[1-8]``;
  a switch with ``Nodes=`` is a leaf, one with ``Switches=`` holds the nodes of its children;
* block: ``BlockName=b1 Nodes=gpu[001-018]`` and ``BlockSizes=...`` (ignored here).

Parsing is pure: callers read the file and pass its text, with the path for error messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from attribution.errors import AttributionError, Location
from attribution.hostlist import HostlistError, compress, expand
from attribution.model import Placement

MAX_TOPOLOGY_NODES = 1_000_000  # nodes one file may name in all (a typo like n[1-99999999])


_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_node_name(text: str) -> bool:
    """Whether ``text`` is a plain host name (letters, digits, ``.``, ``_``, ``-``): the only
    names the fleet view puts into a line an operator may paste into a shell."""
    return _NODE_NAME.fullmatch(text) is not None


MAX_LIST_NODES = 200_000  # the host list module's own bound


def nodes_of(nodelist: str | None) -> tuple[str, ...]:
    """A run's node list as node names, in no particular order (the fleet view only counts):
    plain comma-separated names are split directly (ClusterShell's parser grows
    quadratically with them), each bracketed piece goes through ``hostlist.expand``.

    Raises:
        HostlistError: a malformed piece, or more than ``MAX_LIST_NODES`` nodes.
    """
    if not nodelist:
        return ()
    out: dict[str, None] = {}
    depth, start, pieces = 0, 0, []
    for i, char in enumerate(nodelist):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            pieces.append(nodelist[start:i])
            start = i + 1
    pieces.append(nodelist[start:])
    for piece in pieces:
        piece = piece.strip()
        if _NODE_NAME.fullmatch(piece):
            out[piece] = None
        elif piece:
            out.update(dict.fromkeys(expand(piece)))
        if len(out) > MAX_LIST_NODES:
            raise HostlistError(f"node list names more than {MAX_LIST_NODES:,} nodes")
    return tuple(out)


class TopologyError(AttributionError):
    """A topology file or group map that cannot be used (names the file and line)."""


@dataclass(frozen=True, slots=True)
class Group:
    """One failure domain: ``kind`` (``switch``, ``block``, ``rack``, ``nvlink_domain``, ...),
    its ``name``, its nodes, and for a switch whether it is a leaf (has ``Nodes=``)."""

    kind: str
    name: str
    nodes: frozenset[str]
    leaf: bool = True

    @property
    def label(self) -> str:
        kind = "leaf switch" if self.kind == "switch" and self.leaf else self.kind.replace("_", " ")
        return f"{kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Topology:
    """Every failure domain known, and for each node the groups it is in (smallest first)."""

    groups: tuple[Group, ...] = ()
    of_node: Mapping[str, tuple[Group, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, groups: Iterable[Group]) -> Topology:
        kept = tuple(g for g in groups if g.nodes)
        index: dict[str, list[Group]] = {}
        for group in kept:
            for node in group.nodes:
                index.setdefault(node, []).append(group)
        return cls(
            groups=kept,
            of_node={n: tuple(sorted(gs, key=lambda g: len(g.nodes))) for n, gs in index.items()},
        )

    def merged(self, other: Topology) -> Topology:
        return Topology.of((*self.groups, *other.groups))

    def __bool__(self) -> bool:
        return bool(self.groups)

    def smallest_common(self, nodes: Iterable[str]) -> Group | None:
        """The smallest group holding every one of ``nodes`` (None when none does, or when
        the only one holds every node the topology knows: that says nothing)."""
        wanted = set(nodes)
        if not wanted:
            return None
        first = next(iter(wanted))
        everyone = len(self.of_node)
        for group in self.of_node.get(first, ()):
            if wanted <= group.nodes and len(group.nodes) < everyone:
                return group
        return None

    def containing(self, nodes: Sequence[str]) -> tuple[Group, ...]:
        """The tested groups (``leaves``) that hold every one of ``nodes``: where a job placed
        on them ran wholly."""
        if not nodes:
            return ()
        wanted = None if len(nodes) == 1 else set(nodes)
        return tuple(
            g
            for g in self.of_node.get(nodes[0], ())
            if (g.kind != "switch" or g.leaf) and (wanted is None or wanted <= g.nodes)
        )

    def leaves(self) -> tuple[Group, ...]:
        """The groups a fleet test runs on: leaf switches, blocks and mapped groups (racks,
        NVLink domains); upper switches are not tested (they hold too much to point at)."""
        return tuple(g for g in self.groups if g.kind != "switch" or g.leaf)


_PAIR = re.compile(r"(\w+)=(\S+)")


def parse_topology(text: str, path: str = "topology.conf") -> Topology:
    """``topology.conf`` text as a ``Topology`` (tree and block plugins; comments, blank
    lines and unknown keys ignored).

    Raises:
        TopologyError: a malformed host list, a switch naming an unknown switch, a cycle, or
            more than ``MAX_TOPOLOGY_NODES`` nodes; the message names the file and line.
    """
    leaves: dict[str, frozenset[str]] = {}
    parents: dict[str, tuple[tuple[str, ...], int]] = {}
    blocks: list[Group] = []
    total = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {k.lower(): v for k, v in _PAIR.findall(line)}
        name = pairs.get("switchname") or pairs.get("blockname")
        if not name:
            continue
        try:
            nodes = nodes_of(pairs.get("nodes", ""))
            children = nodes_of(pairs.get("switches", ""))
        except HostlistError as exc:
            raise TopologyError(str(exc), Location(path, number)) from None
        total += len(nodes)
        if total > MAX_TOPOLOGY_NODES:
            raise TopologyError(
                f"names more than {MAX_TOPOLOGY_NODES:,} nodes", Location(path, number)
            )
        if "blockname" in pairs:
            blocks.append(Group("block", name, frozenset(nodes)))
        elif name in leaves or name in parents:
            raise TopologyError(f"switch {name!r} is defined twice", Location(path, number))
        elif nodes:
            leaves[name] = frozenset(nodes)
        elif children:
            parents[name] = (children, number)
    groups = [Group("switch", n, nodes) for n, nodes in leaves.items()]
    resolved: dict[str, frozenset[str]] = dict(leaves)
    members = [total]  # every switch's and block's nodes, counted against the bound

    def members_of(switch: str, seen: tuple[str, ...]) -> frozenset[str]:
        if switch in resolved:
            return resolved[switch]
        if switch not in parents:
            line = parents[seen[-1]][1] if seen else 0
            raise TopologyError(f"switch {switch!r} is not defined", Location(path, line))
        if switch in seen:
            raise TopologyError(
                f"switch {switch!r} contains itself", Location(path, parents[switch][1])
            )
        children, line = parents[switch]
        found = frozenset().union(*(members_of(c, (*seen, switch)) for c in children))
        members[0] += len(found)
        if members[0] > MAX_TOPOLOGY_NODES:
            raise TopologyError(
                f"its switches hold more than {MAX_TOPOLOGY_NODES:,} nodes in all",
                Location(path, line),
            )
        resolved[switch] = found
        return found

    for name in parents:
        groups.append(Group("switch", name, members_of(name, ()), leaf=False))
    return Topology.of([*groups, *blocks])


def parse_groups(data: object, path: str = "groups.yaml") -> Topology:
    """A map of more failure domains, ``{kind: {name: hostlist}}`` (for example racks and
    NVLink domains: ``{rack: {r01: "gpu[001-008]"}, nvlink_domain: {nvl1: "gb[01-18]"}}``).

    Raises:
        TopologyError: when it is not that shape or a host list is malformed.
    """
    if not isinstance(data, Mapping):
        raise TopologyError("expected a map of kind -> {name: hostlist}", Location(path))
    groups = []
    total = 0
    for kind, members in data.items():
        if not isinstance(members, Mapping):
            raise TopologyError(f"{kind!r}: expected a map of name -> hostlist", Location(path))
        for name, hostlist in members.items():
            if not isinstance(hostlist, str) or not isinstance(name, str | int):
                raise TopologyError(f'{kind}: expected name: "hostlist" pairs', Location(path))
            try:
                nodes = nodes_of(hostlist)
            except HostlistError as exc:
                raise TopologyError(f"{kind} {name}: {exc}", Location(path)) from None
            total += len(nodes)
            if total > MAX_TOPOLOGY_NODES:
                raise TopologyError(
                    f"its groups hold more than {MAX_TOPOLOGY_NODES:,} nodes in all", Location(path)
                )
            groups.append(Group(str(kind), str(name), frozenset(nodes)))
    return Topology.of(groups)


def place(topology: Topology, nodes: Sequence[str], basis: str) -> Placement | None:
    """The smallest failure domain holding all of ``nodes`` (for one node: the smallest that
    holds it), or None when the topology knows none that says something."""
    if not topology or not nodes:
        return None
    group = topology.smallest_common(nodes)
    if group is None:
        return None
    return Placement(
        kind=group.kind,
        name=group.name,
        label=group.label,
        nodes=compress(nodes),
        basis=basis,
        size=len(group.nodes),
    )
