"""Where the shipped ruleset and sample bundles live, in a wheel or in a source checkout.

A wheel carries them as ``attribution/_rules`` and ``attribution/_samples``
(see ``pyproject.toml``); a source checkout has ``rules/`` and ``tests/cases/``
beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def rules_dir() -> Path:
    """The shipped rules directory."""
    packaged = _PACKAGE / "_rules"
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / "rules"


def samples_dir() -> Path:
    """The bundled sample evidence bundles used by ``sattr demo``."""
    packaged = _PACKAGE / "_samples"
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / "tests" / "cases"
