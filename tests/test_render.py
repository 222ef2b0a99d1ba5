"""The human views, character for character: each view of a few sample bundles is rendered by rich
at 100 columns without colour and compared with a checked-in text in tests/fixtures/render/.

A deliberate change to a view (or to a verdict these bundles give) is accepted by regenerating:

    ATTRIBUTION_REGEN_RENDER=1 uv run pytest -q tests/test_render.py

then reading ``git diff tests/fixtures/render`` before committing it (docs/cli.md, "Output").
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from attribution.access import Caller
from attribution.bundle import diagnose_bundle, score_bundles
from attribution.model import Verdict
from attribution.render import backtest_view, list_view, verdict_view
from attribution.rules.compiled import RuleSet
from attribution.store import Store, VerdictFilter

from .conftest import CASES, FIXTURES

EXPECTED = FIXTURES / "render"
REGEN = os.environ.get("ATTRIBUTION_REGEN_RENDER") == "1"
WIDTH = 100

# a real failure (a GPU off the bus); one on a shared node with another job's XIDs in its chain;
# one with a suspect, an alternative and a signal outside the job window
REAL = "real-case11"
SHARED = "blind10-shared-c12-own-xid31-illegal-address-foreign-xid94"
IGNORED = "blind2-c23-importerror-one-node-jobstep"
BACKTEST = [REAL, "real-case07", SHARED, IGNORED, "blind11-h100-2node-unresolved"]


def render(renderable: Any) -> str:
    """What ``sattr`` prints for ``renderable`` into a 100-column pipe: no colour, no styles
    (the padding rich puts at the end of table rows is dropped, so that the expected files
    have no trailing blanks)."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=WIDTH,
        color_system=None,
        force_terminal=False,
        highlight=False,
        soft_wrap=False,
        legacy_windows=False,
        _environ={},
    )
    console.print(renderable)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def check(name: str, text: str) -> None:
    path = EXPECTED / f"{name}.txt"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: regenerate with ATTRIBUTION_REGEN_RENDER=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name}: the view changed; if that is intended, regenerate with "
        "ATTRIBUTION_REGEN_RENDER=1 and review the diff"
    )
    assert max(map(len, text.splitlines())) <= WIDTH


@pytest.fixture(scope="module")
def verdicts(ruleset: RuleSet) -> dict[str, Verdict]:
    return {name: diagnose_bundle(CASES / name, ruleset)[1] for name in (REAL, SHARED, IGNORED)}


def test_verdict_view(verdicts: dict[str, Verdict]) -> None:
    check("verdict-real-case11", render(verdict_view(verdicts[REAL])))


def test_verdict_view_verbose(verdicts: dict[str, Verdict]) -> None:
    text = render(verdict_view(verdicts[IGNORED], verbose=True))
    assert "Ignored (outside the job window)" in text and "Other candidates" in text
    check("verdict-verbose-ignored", text)


def test_verdict_view_for_the_owner(verdicts: dict[str, Verdict]) -> None:
    """What a user sees of their own job on a shared node: another job's lines keep their
    place and count, not their text."""
    verdict = verdicts[SHARED]
    user = Caller(uid=1000, name="someone", admin=False).shown(verdict)
    admin = Caller(uid=0, name="root", admin=True).shown(verdict)
    owner_text = render(verdict_view(user, verbose=True))
    assert "shown to administrators only" in " ".join(owner_text.split())
    assert render(verdict_view(admin, verbose=True)) == render(verdict_view(verdict, verbose=True))
    check("verdict-owner-shared-node", owner_text)


def test_list_view(tmp_path: Path, verdicts: dict[str, Verdict]) -> None:
    with Store(tmp_path / "v.sqlite") as store:
        for verdict in verdicts.values():
            store.save(verdict)
        rows = store.query(VerdictFilter(order="job"))
    check("list", render(list_view(rows)))


def test_backtest_view(ruleset: RuleSet) -> None:
    from attribution.backtest import find_cases

    report = score_bundles(find_cases([str(CASES / name) for name in BACKTEST]), ruleset)
    text = render(backtest_view(report))
    # the case paths are the checkout's: keep the expected text independent of where it is
    check("backtest", text.replace(str(CASES), "CASES"))
