"""The fast pre-filter: every engine picks the same lines, and verdicts do not depend on the engine."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attribution.bundle import diagnose_bundle
from attribution.model import verdict_to_dict
from attribution.rules.compiled import RuleSet
from attribution.scan import Literal, LiteralScanner, available_engines, choose_engine

from .conftest import CASES, Diagnoses, bundle_params

ENGINES = available_engines()
BUNDLES = sorted(p.parent for p in CASES.glob("*/job.json"))
LITS = [
    Literal(b"NVRM: Xid"),
    Literal(b"NCCL WARN"),
    Literal(b"Error"),
    Literal(b"nan", caseless=True),
]


def _reference(data: bytes, literals: list[Literal]) -> list[int]:
    """The obvious per-line answer."""
    out, pos = [], 0
    for line in data.split(b"\n"):
        low = line.lower()
        if any(
            (lit.text.lower() in low) if lit.caseless else (lit.text in line) for lit in literals
        ):
            out.append(pos)
        pos += len(line) + 1
    return [p for p in out if p < len(data)]


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_pick_the_same_lines(engine: str) -> None:
    rnd = random.Random(7)
    words = [
        b"step",
        b"loss",
        b"NaN",
        b"NVRM: Xid",
        b"ok",
        b"NCCL WARN",
        b"Err",
        b"or",
        b"Error",
        b"\xff\xfe",
    ]
    lines = [b" ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 6))) for _ in range(5000)]
    data = b"\n".join(lines) + b"\n"
    scanner = LiteralScanner(LITS, engine)
    assert scanner.engine == engine
    assert scanner.line_starts(data) == _reference(data, LITS)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_engines_agree_on_random_bytes(data: bytes) -> None:
    answers = {e: LiteralScanner(LITS, e).line_starts(data) for e in ENGINES}
    assert len({tuple(v) for v in answers.values()}) == 1
    assert answers["python"] == _reference(data, LITS)


@pytest.mark.parametrize("bundle", BUNDLES[:12], ids=[b.name for b in BUNDLES[:12]])
def test_verdicts_do_not_depend_on_read_ahead(
    bundle: Path, ruleset: RuleSet, diagnosed: Diagnoses
) -> None:
    serial = verdict_to_dict(diagnose_bundle(bundle, ruleset, workers=1)[1])
    threaded = verdict_to_dict(diagnose_bundle(bundle, ruleset, workers=4)[1])
    default = verdict_to_dict(diagnosed(bundle)[1])  # diagnose_bundle's 8 read-ahead workers
    assert serial == threaded == default


@pytest.mark.skipif(len(ENGINES) < 2, reason="only the pure-Python engine is installed here")
@pytest.mark.parametrize("bundle", bundle_params(BUNDLES, every=4))
def test_verdicts_do_not_depend_on_the_engine(
    bundle: Path, ruleset: RuleSet, diagnosed: Diagnoses
) -> None:
    plain = verdict_to_dict(diagnose_bundle(bundle, ruleset, engine="python")[1])
    if choose_engine() == ENGINES[0]:  # the default engine is the fastest: its verdict is shared
        fast = verdict_to_dict(diagnosed(bundle)[1])
    else:
        fast = verdict_to_dict(diagnose_bundle(bundle, ruleset, engine=ENGINES[0])[1])
    assert plain == fast


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_one_scanner_is_safe_to_share_between_threads(engine: str) -> None:
    import concurrent.futures

    rnd = random.Random(3)
    blocks = [
        b"\n".join(
            rnd.choice([b"ok", b"NVRM: Xid 79", b"loss", b"NCCL WARN x"]) for _ in range(20000)
        )
        for _ in range(16)
    ]
    scanner = LiteralScanner(LITS, engine)
    expected = [_reference(b, LITS) for b in blocks]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            assert list(pool.map(scanner.line_starts, blocks)) == expected


# --------------------------------------------------------------------- hyperscan databases on disk

needs_hyperscan = pytest.mark.skipif("hyperscan" not in ENGINES, reason="hyperscan not installed")


def _corpus() -> bytes:
    rnd = random.Random(11)
    words = [b"step", b"NaN", b"NVRM: Xid", b"NCCL WARN", b"Error", b"ok", b"nAn"]
    return b"\n".join(b" ".join(rnd.choices(words, k=rnd.randrange(0, 5))) for _ in range(3000))


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the hyperscan compiles from now on."""
    import attribution.scan as scan

    made: list[int] = []
    real = scan._compile_hyperscan

    def counting(literals: list[Literal]) -> object:
        made.append(len(literals))
        return real(literals)

    monkeypatch.setattr(scan, "_compile_hyperscan", counting)
    return made


def _scanners(digest: str = "d" * 64) -> tuple[LiteralScanner, LiteralScanner]:
    """Two scanners of one plan (sharing its database store), as ``reading_plan`` makes them."""
    from attribution.scan import _Databases

    databases = _Databases(digest)
    first = LiteralScanner(LITS, "hyperscan", databases=databases)
    second = LiteralScanner(LITS[:2], "hyperscan", databases=databases)
    return first, second


@needs_hyperscan
def test_cached_databases_pick_the_same_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTRIBUTION_RULES_CACHE", str(tmp_path))
    data = _corpus()
    made = _compiles(monkeypatch)
    first, second = _scanners()
    assert first.line_starts(data) == _reference(data, LITS)  # a miss compiles the plan's two
    assert sorted(made) == [2, 4] and len(list(tmp_path.glob("scan-*.hsdb"))) == 1
    assert second.line_starts(data) == _reference(data, LITS[:2])
    assert len(made) == 2
    made.clear()
    first, second = _scanners()  # a new run: both from the file, none compiled
    assert first.line_starts(data) == _reference(data, LITS)
    assert second.first_line_starts(data, 5) == LiteralScanner(
        LITS[:2], "python"
    ).first_line_starts(data, 5)
    assert first.last_line_start(data) == _reference(data, LITS)[-1]
    assert made == []


@needs_hyperscan
def test_database_file_of_another_version_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hyperscan

    monkeypatch.setenv("ATTRIBUTION_RULES_CACHE", str(tmp_path))
    data = _corpus()
    _scanners()[0].line_starts(data)
    made = _compiles(monkeypatch)
    monkeypatch.setattr(hyperscan, "__version__", "0.0.0-other")
    first, _ = _scanners()
    assert first.line_starts(data) == _reference(data, LITS)
    assert sorted(made) == [2, 4]  # compiled again, and saved under the new key
    made.clear()
    _scanners()[0].line_starts(data)
    assert made == []


@needs_hyperscan
def test_database_file_writable_by_others_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTRIBUTION_RULES_CACHE", str(tmp_path))
    data = _corpus()
    _scanners()[0].line_starts(data)
    (path,) = tmp_path.glob("scan-*.hsdb")
    path.chmod(0o666)
    made = _compiles(monkeypatch)
    monkeypatch.setattr(
        "attribution.scan._unpack", lambda payload: pytest.fail("a foreign file was read")
    )
    first, _ = _scanners()
    assert first.line_starts(data) == _reference(data, LITS)
    assert sorted(made) == [2, 4]


@needs_hyperscan
@pytest.mark.parametrize("damage", ["truncated", "flipped", "bad database"])
def test_damaged_database_file_falls_back_to_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    from attribution.rules import cache
    from attribution.scan import _DB_MAGIC, _databases_key, _literal_key, _pack

    monkeypatch.setenv("ATTRIBUTION_RULES_CACHE", str(tmp_path))
    data = _corpus()
    _scanners()[0].line_starts(data)
    (path,) = tmp_path.glob("scan-*.hsdb")
    raw = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":
        path.write_bytes(raw[:-100] + bytes([raw[-100] ^ 0xFF]) + raw[-99:])
    else:  # a well-formed file whose database hyperscan refuses
        garbage = {_literal_key(sorted(LITS, key=lambda x: (-len(x.text), x.text))): b"x" * 64}
        cache.write_owned(tmp_path, path.name, _databases_key(), _pack(garbage), _DB_MAGIC)
    made = _compiles(monkeypatch)
    first, second = _scanners()
    assert first.line_starts(data) == _reference(data, LITS)
    assert second.line_starts(data) == _reference(data, LITS[:2])
    assert made  # compiled, not an error


def test_scanners_are_built_at_their_first_search(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan holds scanners of every stream; a run builds only those of what it reads."""
    from attribution.scan import reading_plan

    built: list[int] = []
    real = LiteralScanner._build

    def counting(self: LiteralScanner) -> object:
        built.append(len(self.literals))
        return real(self)

    monkeypatch.setattr(LiteralScanner, "_build", counting)
    selectors, *_ = reading_plan(ruleset, "python")
    assert built == []
    scanner = next(iter(selectors.values()))
    scanner.line_starts(b"nothing\n")
    scanner.line_starts(b"nothing\n")
    assert len(built) == 1


@needs_hyperscan
def test_without_a_cache_only_the_scanner_searched_with_is_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTRIBUTION_RULES_CACHE", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = _corpus()
    made = _compiles(monkeypatch)
    first, _ = _scanners()
    assert first.line_starts(data) == _reference(data, LITS)
    assert made == [4] and not list(tmp_path.rglob("*.hsdb"))
