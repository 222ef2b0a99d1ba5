"""Expand and compress Slurm node lists (``gpu[001-016]``) through ClusterShell's NodeSet."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import (
    RESOLVER_NOGROUP,
    NodeSet,
    NodeSetParseError,
    RangeSetParseError,
)

from attribution.errors import AttributionError


class HostlistError(AttributionError):
    """A node list that ClusterShell cannot parse."""


MAX_NODES = 200_000  # far beyond any Slurm cluster; guards against hostile node lists


def expand(nodelist: str | Iterable[str] | None) -> tuple[str, ...]:
    """Expand a Slurm hostlist (or a list of them) into node names, in Slurm's order.

    ``"gpu[001-003],login1"`` -> ``("gpu001", "gpu002", "gpu003", "login1")``.
    ``None``, ``""`` and ``"None assigned"`` (sacct for never-started jobs) give ``()``.

    Raises:
        HostlistError: when the expression is malformed or names more than MAX_NODES nodes.
    """
    if nodelist is None:
        return ()
    parts = [nodelist] if isinstance(nodelist, str) else list(nodelist)
    out: list[str] = []
    seen: set[str] = set()
    for part in parts:
        part = str(part).strip()
        if not part or part.lower() in {"none", "none assigned", "(null)"}:
            continue
        if _LONG_NUMBER.search(part):  # no node index has that many digits
            raise HostlistError(f"invalid node list {part[:80]!r}: a number is too long")
        if _upper_bound(part) > MAX_NODES:  # before ClusterShell builds the ranges
            raise HostlistError(f"node list {part[:80]!r} names more than {MAX_NODES:,} nodes")
        try:
            nodeset = NodeSet(part, resolver=RESOLVER_NOGROUP)
            if len(nodeset) + len(out) > MAX_NODES:
                raise HostlistError(f"node list {part[:80]!r} names more than {MAX_NODES:,} nodes")
            names = list(nodeset)
        except (NodeSetParseError, RangeSetParseError, ValueError, AssertionError) as exc:
            # ClusterShell asserts on some ranges it cannot build
            raise HostlistError(f"invalid node list {part[:80]!r}: {exc}") from None
        for name in names:
            if name not in seen:
                seen.add(name)
                out.append(name)
    return tuple(out)


_BRACKET = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"(\d+)-(\d+)(?:/(\d+))?")  # lo-hi, optionally with ClusterShell's /step
_LONG_NUMBER = re.compile(r"\d{10}")


def _upper_bound(expr: str) -> int:
    """At most how many names ``expr`` can expand to: per comma-separated element, the product
    of its bracket groups' sizes. Cheap and generous; only a guard against hostile lists."""
    total = 0
    for element in re.split(r",(?![^\[]*\])", expr):
        count = 1
        for group in _BRACKET.findall(element):
            size = sum(
                abs(int(m.group(2)) - int(m.group(1))) // max(int(m.group(3) or 1), 1) + 1
                if (m := _RANGE.fullmatch(item))
                else 1
                for item in group.split(",")
            )
            count *= max(size, 1)
            if count > MAX_NODES:
                return count
        total += count
    return total


# a name of letters (and . _ -) then one number: most clusters' node names, folded here in
# runs before ClusterShell sees them (it parses each name on its own: 11 µs a name)
_SIMPLE = re.compile(r"([A-Za-z._-]*[A-Za-z._-])([0-9]{1,9})")


def _runs(names: list[str]) -> list[str]:
    """``names`` with each run of consecutive numbers of one width under one prefix written
    as ``prefix[lo-hi]``: the same set of names, for ClusterShell to fold and order."""
    out: list[str] = []
    numbers: dict[tuple[str, int], list[int]] = {}
    for name in names:
        m = _SIMPLE.fullmatch(name)
        if m is None:
            out.append(name)
        else:
            digits = m.group(2)
            numbers.setdefault((m.group(1), len(digits)), []).append(int(digits))
    for (prefix, width), values in numbers.items():
        values.sort()
        lo = prev = values[0]
        for value in [*values[1:], None]:
            if value is not None and value <= prev + 1:
                prev = value
                continue
            if lo == prev:
                out.append(f"{prefix}{lo:0{width}d}")
            else:
                out.append(f"{prefix}[{lo:0{width}d}-{prev:0{width}d}]")
            if value is not None:
                lo = prev = value
    return out


def compress(nodes: Iterable[str]) -> str:
    """Fold node names into a Slurm hostlist: ``("gpu001", "gpu002")`` -> ``"gpu[001-002]"``."""
    names = [n for n in nodes if n]
    if not names:
        return ""
    try:
        return str(NodeSet.fromlist(_runs(names), resolver=RESOLVER_NOGROUP))
    except (NodeSetParseError, RangeSetParseError, ValueError):
        # a name that is no host name (a fragment of a host list in a log line): list them
        return ",".join(dict.fromkeys(names))


def short_name(host: str) -> str:
    """The node name of a host string: domain, port tags and brackets removed.

    ``"node017.cluster.local"`` -> ``"node017"``; ``"node-3<34567>"`` -> ``"node-3"``.
    IP addresses are returned unchanged.
    """
    host = host.strip().strip("[]")
    host = host.split("<", 1)[0]
    if _looks_like_ip(host):
        return host
    return host.split(".", 1)[0]


def _looks_like_ip(text: str) -> bool:
    if ":" in text:  # IPv6 (NCCL prints ::ffff:10.0.0.1 forms)
        return True
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdecimal() for p in parts)


def is_ip(text: str) -> bool:
    """True for dotted IPv4 or anything with a colon (IPv6)."""
    return _looks_like_ip(text.strip())
