"""Shared fixtures: the shipped ruleset (loaded once), paths to the golden cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset

TESTS = Path(__file__).resolve().parent
CASES = TESTS / "cases"
FIXTURES = TESTS / "fixtures"


@pytest.fixture(scope="session")
def ruleset() -> RuleSet:
    return load_ruleset()
