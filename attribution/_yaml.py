"""The one strict YAML loader: safe types only, duplicate keys are errors, every key has a line.

``load_yaml`` returns the data and a ``LineMap`` from key paths (tuples of
keys and list indexes) to 1-based line numbers, so schema errors found later
can still cite ``file:line``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.errors import Location, RuleError

if TYPE_CHECKING:
    import yaml

# PyYAML is imported by the first document parsed (``_import_yaml``), not with this module: a
# command whose rules come from the cache (attribution.rules.cache) and whose bundle holds no
# YAML never needs it


def _import_yaml() -> type[yaml.SafeLoader]:
    """Bind the module global ``yaml`` (the helpers below use it); the fastest safe loader."""
    global yaml
    import yaml

    try:  # the C loader is much faster; fall back to pure Python when it is missing
        return yaml.CSafeLoader  # type: ignore[return-value]
    except AttributeError:  # pragma: no cover - depends on the PyYAML build
        return yaml.SafeLoader


Path_ = tuple[str | int, ...]


class LineMap:
    """Key path -> line number; ``line_for`` falls back to the nearest known parent."""

    def __init__(self) -> None:
        self._lines: dict[Path_, int] = {}

    def set(self, path: Path_, line: int) -> None:
        self._lines.setdefault(path, line)

    def line_for(self, path: Sequence[str | int]) -> int:
        key = tuple(path)
        while key:
            if key in self._lines:
                return self._lines[key]
            key = key[:-1]
        return self._lines.get((), 1)


class YamlError(RuleError):
    """A YAML document could not be parsed, or repeats a key."""


def load_yaml(text: str, path: str, *, error: type[RuleError] = YamlError) -> tuple[Any, LineMap]:
    """Parse one YAML document strictly.

    Args:
        text: the document.
        path: file name used in error messages.
        error: the exception class to raise (a ``RuleError`` subclass).

    Returns:
        ``(data, linemap)``; ``data`` is ``None`` for an empty document.

    Raises:
        error: on a syntax error, a duplicate key, a non-string key, an alias, an
            unsupported tag or a document of more than ``MAX_NODES`` values, with
            ``path:line`` of the problem.
    """
    loader = _import_yaml()(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        detail = exc.problem or str(exc)
        if exc.context and exc.context_mark is not None and exc.context_mark is not mark:
            detail += f" ({exc.context} on line {exc.context_mark.line + 1})"
        raise error(f"invalid YAML: {detail}", Location(path, line)) from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}", Location(path, 0)) from None
    finally:
        loader.dispose()
    lines = LineMap()
    if node is None:
        return None, lines
    lines.set((), node.start_mark.line + 1)
    return _construct(loader, node, (), lines, path, error, set()), lines


MAX_NODES = 2_000_000  # YAML nodes one document may hold (a 40 MB history is about 1M)


def _construct(
    loader: yaml.SafeLoader,
    node: yaml.Node,
    path: Path_,
    lines: LineMap,
    file: str,
    error: type[RuleError],
    seen: set[int],
) -> Any:
    # the composer hands an alias back as the anchored node itself: seeing a node twice means
    # an alias, and aliases are refused (a few lines of them expand to gigabytes)
    if id(node) in seen:
        raise error(
            "YAML aliases (*name) are not allowed: this anchored value is used again",
            Location(file, node.start_mark.line + 1),
        )
    seen.add(id(node))
    if len(seen) > MAX_NODES:
        raise error(
            f"the document is too large (more than {MAX_NODES:,} values)",
            Location(file, node.start_mark.line + 1),
        )
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise error("YAML merge keys (<<) are not allowed", Location(file, line))
            key = _scalar(loader, key_node, file, error)
            if not isinstance(key, str | int | bool) or isinstance(key, bool):
                raise error(f"mapping keys must be strings, got {key!r}", Location(file, line))
            key = str(key)
            if key in out:
                first = lines.line_for((*path, key))
                raise error(
                    f"duplicate key {key!r} (first defined on line {first})", Location(file, line)
                )
            lines.set((*path, key), line)
            out[key] = _construct(loader, value_node, (*path, key), lines, file, error, seen)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines.set((*path, index), item.start_mark.line + 1)
            items.append(_construct(loader, item, (*path, index), lines, file, error, seen))
        return items
    return _scalar(loader, node, file, error)


def _scalar(loader: yaml.SafeLoader, node: yaml.Node, file: str, error: type[RuleError]) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise error(
            "complex mapping keys are not allowed", Location(file, node.start_mark.line + 1)
        )
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        line = node.start_mark.line + 1
        raise error(f"invalid YAML value: {exc.problem}", Location(file, line)) from None
    except ValueError as exc:  # e.g. an integer longer than Python converts (4,300 digits)
        line = node.start_mark.line + 1
        raise error(f"invalid YAML value: {exc}", Location(file, line)) from None


def load_yaml_file(path: Path, *, error: type[RuleError] = YamlError) -> tuple[Any, LineMap]:
    """Read and parse a YAML file (UTF-8); see ``load_yaml``.

    Raises:
        error: when the file cannot be read or decoded, or on any parse error.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason})", Location(str(path), 0)) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", Location(str(path), 0)) from None
    return load_yaml(text, str(path), error=error)
