"""Shared fixtures: the shipped ruleset (loaded once), paths to the golden cases, and
session-wide caches so that a bundle, a named scenario or the demo store is made once per run.

The golden and blind bundles are read-only and ``diagnose_bundle`` is deterministic
(tests/test_golden.py::test_verdicts_are_deterministic diagnoses one twice, uncached), so
each is diagnosed once with the default options and the verdict is handed to every test
that needs exactly that verdict. A test that diagnoses with other options, a copied or
changed bundle, or another ruleset still gets a fresh diagnosis.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import attribution.bundle
import attribution.rules.loader
from attribution.bundle import Bundle
from attribution.model import Verdict
from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset

TESTS = Path(__file__).resolve().parent
CASES = TESTS / "cases"
BLIND = TESTS / "blind"
FIXTURES = TESTS / "fixtures"

# the read-only bundle trees whose default verdicts are shared
_SHARED_TREES = (CASES, BLIND)

_diagnose_bundle = attribution.bundle.diagnose_bundle
_load_ruleset = attribution.rules.loader.load_ruleset


@pytest.fixture(scope="session", autouse=True)
def _private_caches(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The suite's ruleset and scan-database caches (``ATTRIBUTION_RULES_CACHE``) go to a
    directory of this run, never to the user's ``~/.cache/attribution`` (commands run in a
    subprocess inherit it); tests/test_rules_cache.py sets its own per test."""
    name = "ATTRIBUTION_RULES_CACHE"
    before = os.environ.get(name)
    os.environ[name] = str(tmp_path_factory.mktemp("attribution-cache"))
    yield
    if before is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = before


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (the 200-job sweep, the biggest scenarios); CI does",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests are skipped (not deselected: a run never ends with "no tests") unless
    ``--slow`` is given or ``-m`` names the mark."""
    if config.getoption("--slow") or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow test: run it with 'uv run pytest --slow'")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def bundle_params(bundles: list[Path], every: int = 1) -> list[Any]:
    """One pytest param per bundle, named after it. With ``every`` > 1, only every
    ``every``-th bundle (in sorted order) runs by default and the others are marked slow:
    for the tests that re-diagnose each bundle another way (another engine, a redacted
    copy), which CI (``--slow``) runs over every bundle."""
    return [
        pytest.param(b, id=b.name, marks=[] if i % every == 0 else [pytest.mark.slow])
        for i, b in enumerate(bundles)
    ]


@functools.cache
def shipped_ruleset() -> RuleSet:
    """The shipped rules, loaded once per run (for module-level use at collection time)."""
    return load_ruleset()


@pytest.fixture(scope="session")
def ruleset() -> RuleSet:
    return shipped_ruleset()


@dataclass
class Diagnoses:
    """Each golden or blind bundle diagnosed once, with the default options and ``ruleset``."""

    ruleset: RuleSet
    done: dict[Path, tuple[Bundle, Verdict]] = field(default_factory=dict)

    def shared(self, path: Path | str) -> bool:
        where = Path(path).resolve()
        return any(where.is_relative_to(tree) for tree in _SHARED_TREES)

    def __call__(self, path: Path | str) -> tuple[Bundle, Verdict]:
        """The default verdict of a bundle under tests/cases or tests/blind."""
        key = Path(path).resolve()
        if not self.shared(key):
            raise ValueError(f"{path}: only bundles in tests/cases and tests/blind are shared")
        if key not in self.done:
            self.done[key] = _diagnose_bundle(key, self.ruleset)
        return self.done[key]

    def diagnose_bundle(
        self, path: Path | str, ruleset: RuleSet, **options: Any
    ) -> tuple[Bundle, Verdict]:
        """A stand-in for ``attribution.bundle.diagnose_bundle``: the shared verdict when the
        call asks for exactly that (a shared bundle, no options, the same rules), else a fresh
        diagnosis."""
        if options or ruleset.digest != self.ruleset.digest or not self.shared(path):
            return _diagnose_bundle(path, ruleset, **options)
        return self(path)

    def installed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Let code that calls ``attribution.bundle.diagnose_bundle`` (``score_bundles``, the
        CLI's backtest and demo) use the shared verdicts."""
        monkeypatch.setattr(attribution.bundle, "diagnose_bundle", self.diagnose_bundle)


@pytest.fixture(scope="session")
def diagnosed(ruleset: RuleSet) -> Diagnoses:
    """``diagnosed(bundle)``: (bundle, verdict) of a golden or blind bundle, made once."""
    return Diagnoses(ruleset)


@pytest.fixture
def shared_diagnoses(diagnosed: Diagnoses, monkeypatch: pytest.MonkeyPatch) -> Diagnoses:
    """For one test, ``attribution.bundle.diagnose_bundle`` answers from ``diagnosed``."""
    diagnosed.installed(monkeypatch)
    return diagnosed


@pytest.fixture(autouse=True)
def shared_ruleset(ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch) -> RuleSet:
    """Code that looks ``attribution.rules.loader.load_ruleset`` up when it runs (each ``sattr``
    command, capture) gets the session's ruleset for the shipped rules alone instead of
    loading and compiling the files again; site directories are still loaded. Safe to share:
    the loader is the only code that changes a ``RuleSet`` and the rules in it are frozen
    models. Tests that import ``load_ruleset`` (tests/test_loader.py) call the real one."""

    def load(
        directories: Any = None, *, include_shipped: bool = True
    ) -> RuleSet:  # same signature as load_ruleset
        if include_shipped and not list(directories or ()):
            return ruleset
        return _load_ruleset(directories, include_shipped=include_shipped)

    monkeypatch.setattr(attribution.rules.loader, "load_ruleset", load)
    return ruleset


@dataclass(frozen=True)
class DemoStore:
    """One ``sattr demo`` run: what it printed and the SQLite file it wrote. Tests only read
    the file; one that changes verdicts works on ``copy_to``'s copy."""

    result: Result
    db: Path

    def copy_to(self, directory: Path) -> Path:
        for part in self.db.parent.glob(self.db.name + "*"):  # the file and any -wal/-shm
            shutil.copy2(part, directory / part.name)
        return directory / self.db.name


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory, diagnosed: Diagnoses) -> DemoStore:
    from attribution.cli import main

    db = tmp_path_factory.mktemp("demo") / "demo.sqlite"
    with pytest.MonkeyPatch.context() as monkeypatch:
        diagnosed.installed(monkeypatch)
        result = CliRunner(env={"COLUMNS": "160"}).invoke(
            main, ["demo", "--db", str(db)], catch_exceptions=False
        )
    return DemoStore(result, db)


@dataclass
class Simulated:
    """Each named scenario (tests/sim/scenarios) generated and diagnosed once per session."""

    ruleset: RuleSet
    root: Path
    done: dict[str, tuple[Path, Bundle, Verdict]] = field(default_factory=dict)
    scenarios: dict[str, Any] = field(default_factory=dict)

    def __call__(self, scenario: Any) -> tuple[Path, Bundle, Verdict]:
        """(bundle directory, bundle, verdict) of ``scenario`` (an ``attribution.sim.Scenario``)."""
        from attribution.sim import write_bundle

        name = scenario.name
        if name in self.done:
            if self.scenarios[name] != scenario:
                raise ValueError(f"two different scenarios are named {name!r}")
            return self.done[name]
        root = write_bundle(scenario, self.root / name)
        bundle, verdict = _diagnose_bundle(root, self.ruleset)
        self.scenarios[name] = scenario
        self.done[name] = (root, bundle, verdict)
        return self.done[name]


@pytest.fixture(scope="session")
def simulated(tmp_path_factory: pytest.TempPathFactory, ruleset: RuleSet) -> Simulated:
    """``simulated(scenario)``: a named scenario's bundle and default verdict, made once."""
    return Simulated(ruleset, tmp_path_factory.mktemp("scenarios"))
