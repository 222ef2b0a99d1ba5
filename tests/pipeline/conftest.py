"""Helpers for the pipeline tests (no Slurm needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "slurm" / "epilog-slurmctld"
FIXTURES = REPO / "tests" / "fixtures" / "slurm"


def env_dump(name: str) -> dict[str, str]:
    """An ``env | sort`` capture from a real EpilogSlurmctld (first line is a comment)."""
    out: dict[str, str] = {}
    for line in (FIXTURES / name).read_text().splitlines()[1:]:
        key, _, value = line.partition("=")
        out[key] = value
    return out


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    from attribution.spool import Spool

    root = tmp_path / "spool"
    Spool(root).create(mode=0o755)
    return root


def bare_verdict(job: Any, **fields: Any) -> Any:
    """A Verdict for ``job`` with nothing in it (a failure, unattributed, no chain, no
    coverage) but the ``fields`` a test sets: for tests of what is done with verdicts."""
    from attribution.model import SubDomain, TerminalState, Verdict

    base: dict[str, Any] = {
        "job": job,
        "terminal_state": TerminalState.FAIL,
        "sub_domain": SubDomain.UNATTRIBUTED,
        "cause": None,
        "responsible": (),
        "summary": "s",
        "action": None,
        "symptom_chain": (),
        "alternatives": (),
        "coverage": (),
        "ignored": (),
        "window": (None, None),
        "ruleset": {},
        "engine_version": "0",
    }
    return Verdict(**{**base, **fields})
