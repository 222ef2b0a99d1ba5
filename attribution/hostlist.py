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
MAX_DIGITS = 9  # of one number in a node name or range bound (Slurm's node indexes are smaller)


def expand(nodelist: str | Iterable[str] | None) -> tuple[str, ...]:
    """Expand a Slurm hostlist (or a list of them) into node names, in Slurm's order.

    ``"gpu[001-003],login1"`` -> ``("gpu001", "gpu002", "gpu003", "login1")``.
    ``None``, ``""`` and ``"None assigned"`` (sacct for never-started jobs) give ``()``.
    A list keeps its own order (each item expanded in Slurm's), without repeats.

    Raises:
        HostlistError: when the expression is malformed, has a number of more than
            ``MAX_DIGITS`` digits, or names more than ``MAX_NODES`` nodes (a list: has more
            than ``MAX_NODES`` items). Checked in linear time before ClusterShell builds
            anything.
    """
    if nodelist is None:
        return ()
    parts = [nodelist] if isinstance(nodelist, str) else list(nodelist)
    if len(parts) > MAX_NODES:
        raise HostlistError(
            f"a list of {len(parts):,} node lists names more than {MAX_NODES:,} nodes"
        )
    out: list[str] = []
    seen: set[str] = set()
    for part in parts:
        part = str(part).strip()
        if not part or part.lower() in {"none", "none assigned", "(null)"}:
            continue
        if _LONG_NUMBER.search(part):  # no node index has that many digits
            raise HostlistError(
                f"invalid node list {_shown(part)}: a number of more than {MAX_DIGITS} digits"
            )
        if _PLAIN.fullmatch(part):  # one name: nothing to expand
            if part not in seen:
                seen.add(part)
                out.append(part)
            continue
        elements = _elements(part)
        if _upper_bound(elements) > MAX_NODES:  # before ClusterShell builds the ranges
            raise HostlistError(f"node list {_shown(part)} names more than {MAX_NODES:,} nodes")
        if _many_odd_names(elements):
            for name in sorted(dict.fromkeys(elements), key=_natural):
                if name not in seen:
                    seen.add(name)
                    out.append(name)
            if len(out) > MAX_NODES:
                raise HostlistError(f"node list {_shown(part)} names more than {MAX_NODES:,} nodes")
            continue
        try:
            nodeset = NodeSet(_folded(part, elements), resolver=RESOLVER_NOGROUP)
            if len(nodeset) + len(out) > MAX_NODES:
                raise HostlistError(f"node list {_shown(part)} names more than {MAX_NODES:,} nodes")
            names = list(nodeset)
        except (NodeSetParseError, RangeSetParseError, ValueError, AssertionError) as exc:
            # ClusterShell asserts on some ranges it cannot build
            message = " ".join(str(exc).split())
            raise HostlistError(
                f"invalid node list {_shown(part)}: {_shown(message, 120)[1:-1]}"
            ) from None
        for name in names:
            if name not in seen:
                seen.add(name)
                out.append(name)
    return tuple(out)


_PLAIN = re.compile(r"[A-Za-z0-9._-]+")  # a name ClusterShell would give back unchanged
_OPERATORS = re.compile(r"[!&^@]")
_LONG_NUMBER = re.compile(rf"\d{{{MAX_DIGITS + 1}}}")
# a bracket group (Slurm's do not nest) or a comma outside one; a '[' without its ']' is
# left for ClusterShell to refuse
_TOKEN = re.compile(r"\[[^\[\]]*\]|,")
_RANGE = re.compile(r"(\d+)-(\d+)(?:/(\d+))?")  # lo-hi, optionally with ClusterShell's /step


def _shown(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters and quoted, printable whatever it holds."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _elements(expr: str) -> list[str]:
    """``expr`` split at its commas outside brackets, in one pass."""
    out, start = [], 0
    for m in _TOKEN.finditer(expr):
        if m.group() == ",":
            out.append(expr[start : m.start()])
            start = m.end()
    out.append(expr[start:])
    return out


def _folded(expr: str, elements: list[str]) -> str:
    """``expr`` with its plain names folded into runs (``n1,n2,n3`` -> ``n[1-3]``), the same
    set of names for ClusterShell, which parses each name on its own (11 µs a name) and
    orders the set whatever the order it was given in. Lists with ClusterShell's own
    operators (``!``, ``&``, ``^``, ``@group``) are left as they are."""
    plain = [e for e in elements if _PLAIN.fullmatch(e)]
    if len(plain) < 2 or _OPERATORS.search(expr):
        return expr
    return ",".join([*_runs(plain), *(e for e in elements if not _PLAIN.fullmatch(e))])


def _upper_bound(elements: list[str]) -> int:
    """At most how many names the ``elements`` of a list can expand to: per element, the
    product of its bracket groups' sizes. Cheap (linear) and generous; only a guard against
    hostile lists, so it stops counting once past ``MAX_NODES``."""
    total = 0
    for element in elements:
        count = 1
        if "[" in element:
            for group in _TOKEN.finditer(element):
                items = group.group()[1:-1].split(",")
                size = sum(
                    abs(int(m.group(2)) - int(m.group(1))) // max(int(m.group(3) or 1), 1) + 1
                    if (m := _RANGE.fullmatch(item))
                    else 1
                    for item in items
                )
                count *= max(size, 1)
                if count > MAX_NODES:
                    return count
        total += count
        if total > MAX_NODES:
            return total
    return total


# a name of letters (and . _ -) then one number: most clusters' node names, folded here in
# runs before ClusterShell sees them (it parses each name on its own: 11 µs a name)
_SIMPLE = re.compile(r"([A-Za-z._-]*[A-Za-z._-])([0-9]{1,9})")
# any name that ends in a number, its prefix ending in something else (``r12n`` of ``r12n7``):
# runs are folded on the last number, which makes a two-dimensional list (``r[1-447]n[1-447]``)
# a few hundred items for ClusterShell instead of 200,000
_TAIL = re.compile(r"(.*[^0-9])([0-9]{1,9})")


_ODD_NAMES = 4096  # plain names with two numbers or more, beyond which ClusterShell is slow
_MULTI_RUNS = 256  # runs of such names compress leaves to ClusterShell at most


def _many_odd_names(elements: list[str]) -> bool:
    """Whether ``elements`` are all plain names, more than ``_ODD_NAMES`` of them with more
    than one number (``gpu-3x12``): ClusterShell folds those in several dimensions, which
    takes minutes for 150,000 of them. Such lists are only ordered here, number-aware."""
    if len(elements) <= _ODD_NAMES:
        return False
    odd = 0
    for element in elements:
        if not _PLAIN.fullmatch(element):
            return False
        odd += _SIMPLE.fullmatch(element) is None
    return odd > _ODD_NAMES


def _natural(name: str) -> list[tuple[int, int, str]]:
    """A sort key that orders the numbers in a name by value (``n2`` before ``n10``)."""
    return [(1, int(p), "") if p.isdecimal() else (0, 0, p) for p in _NUMBER_PARTS.split(name) if p]


_NUMBER_PARTS = re.compile(r"(\d+)")


def _runs(names: list[str]) -> list[str]:
    """``names`` with each run of consecutive numbers of one width under one prefix written
    as ``prefix[lo-hi]``: the same set of names, for ClusterShell to fold and order."""
    out: list[str] = []
    numbers: dict[tuple[str, int], list[int]] = {}
    for name in names:
        m = _TAIL.fullmatch(name)
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
    runs = _runs(names)
    if len(runs) > _MULTI_RUNS and any(_NUMBER_PARTS.search(r.split("[", 1)[0]) for r in runs):
        # hundreds of runs of names with several numbers: ClusterShell folds those in several
        # dimensions (447 runs of r[1-447]n[1-447]: 9 s); they are listed as runs, ordered
        # number-aware
        return ",".join(sorted(runs, key=_natural))
    try:
        return str(NodeSet.fromlist(runs, resolver=RESOLVER_NOGROUP))
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
