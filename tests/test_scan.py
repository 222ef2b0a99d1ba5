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
