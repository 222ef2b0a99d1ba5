"""Fill ``{name}`` placeholders in rule texts. No attribute access, no format specs, no code.

``{{`` and ``}}`` produce literal braces. A placeholder whose value is unknown
renders as ``?`` so a summary never silently drops a word, except inside an
optional segment ``[[ ... ]]``, which is left out entirely unless every
placeholder in it has a value: ``"out of memory[[ on GPU {gpu}]]"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([a-z_][a-z0-9_]*)\}")
_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
UNKNOWN = "?"


def render(
    template: str,
    values: Mapping[str, Any],
    *,
    unknown: str = UNKNOWN,
    stand_in: Mapping[str, str] | None = None,
) -> str:
    """Replace ``{name}`` with ``values[name]``.

    ``None`` or missing values become ``stand_in[name]`` (outside optional parts; an optional
    part with a missing value is dropped as always), else ``unknown``; floats that are whole
    numbers print without ``.0``.
    """

    def known(name: str) -> bool:
        value = values.get(name)
        return value is not None and value != ""

    def optional(match: re.Match[str]) -> str:
        inner = match.group(1)
        names = [m.group(1) for m in _PLACEHOLDER.finditer(inner) if m.group(1)]
        return inner if all(known(n) for n in names) else ""

    template = _OPTIONAL.sub(optional, template)

    def sub(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = values.get(match.group(1))
        if value is None or value == "":
            return (stand_in or {}).get(match.group(1), unknown)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    return _PLACEHOLDER.sub(sub, template)


def placeholders(template: str) -> list[str]:
    """The names a template refers to, in order."""
    return [m.group(1) for m in _PLACEHOLDER.finditer(template) if m.group(1)]
