"""Progress lines (training steps, progress bars) are sampled past a file's first picked lines:
every other line is still parsed, and the first and last progress, and progress after any
other line, are still seen (docs/performance.md, "Progress lines")."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attribution.bundle import diagnose_bundle
from attribution.model import Event, Stream
from attribution.rules.compiled import RuleSet
from attribution.rules.extract import Extractor
from attribution.scan import Literal, LiteralScanner, available_engines, reading_plan
from attribution.sources import blocks
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.textlog import SourceReader

ENGINES = available_engines()
LITS = [Literal(b"loss"), Literal(b"Epoch"), Literal(b"it/s"), Literal(b"nan", caseless=True)]
STEP = "[2026-05-20 08:{m:02d}:{s:02d},000] [INFO] step {i} loss {loss:.4f} lr 3.0e-04"
ERROR = "RuntimeError: CUDA error: an illegal memory access was encountered"


def _reference(data: bytes, literals: list[Literal]) -> list[int]:
    out, pos = [], 0
    for line in data.split(b"\n"):
        low = line.lower()
        if any((x.text.lower() in low) if x.caseless else (x.text in line) for x in literals):
            out.append(pos)
        pos += len(line) + 1
    return [p for p in out if p < len(data)]


def _lines(seed: int, n: int) -> bytes:
    rnd = random.Random(seed)
    words = [b"loss", b"Epoch", b"ok", b"it/s", b"NaN", b"step", b"x" * 40]
    rows = [b" ".join(rnd.choice(words) for _ in range(rnd.randrange(0, 5))) for _ in range(n)]
    return b"\n".join(rows) + b"\n"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("want", [0, 1, 7, 300, 10_000])
def test_first_line_starts_is_a_prefix_of_line_starts(engine: str, want: int) -> None:
    data = _lines(3, 4000)
    scanner = LiteralScanner(LITS, engine)
    every = _reference(data, LITS)
    starts, upto = scanner.first_line_starts(data, want)
    assert starts == every[:want]
    if want == 0:
        assert upto == 0
    elif want >= len(every):
        assert upto == len(data)
    else:  # searched up to the end of the last line returned
        assert upto == data.index(b"\n", starts[-1]) + 1
        assert not [s for s in every if starts[-1] < s < upto]


@pytest.mark.parametrize("engine", ENGINES)
def test_last_line_start_finds_the_last_hit_after_low(engine: str) -> None:
    data = _lines(5, 30_000)  # about 300 KiB: several growing windows
    scanner = LiteralScanner(LITS, engine)
    every = _reference(data, LITS)
    line_starts = [0] + [i + 1 for i, b in enumerate(data[:-1]) if b == 10]
    for low in [0, *random.Random(1).sample(line_starts, 40)]:
        after = [s for s in every if s >= low]
        assert scanner.last_line_start(data, low) == (after[-1] if after else -1)
    quiet = b"nothing here\n" * 50_000
    assert scanner.last_line_start(quiet) == -1
    assert scanner.last_line_start(quiet + b"loss 1.5\n" + quiet) == len(quiet)


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=0, max_value=8))
def test_sampling_helpers_agree_with_line_starts_on_any_bytes(data: bytes, want: int) -> None:
    for engine in ENGINES:
        scanner = LiteralScanner(LITS, engine)
        every = scanner.line_starts(data)
        assert scanner.first_line_starts(data, want)[0] == every[:want]
        assert scanner.last_line_start(data) == (every[-1] if every else -1)


def _events(path: Path, ruleset: RuleSet, *, full: int) -> tuple[list[Event], SourceReader]:
    selectors, follow, notable, sampling, heads = reading_plan(ruleset)
    ctx = ReadContext(
        selectors=selectors,
        follow=follow,
        notable=notable,
        sampling=sampling,
        heads=heads,
        progress_lines=full,
    )
    reader = SourceReader(SourceSpec(Stream.JOB_STDOUT, None, [path]), ctx)
    extractor = Extractor(ruleset)
    events = [e for line in reader.lines() for e in extractor.extract(line)]
    return events, reader


def _training_log(path: Path, steps: int, errors_at: set[int]) -> None:
    with path.open("w") as out:
        for i in range(steps):
            m, s = divmod(i // 10, 60)
            out.write(STEP.format(m=m % 60, s=s, i=i, loss=1 + (i % 97) / 100) + "\n")
            if i in errors_at:
                out.write(f"{ERROR} (step {i})\n")


def test_progress_is_sampled_and_other_lines_are_all_kept(
    tmp_path: Path, ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blocks, "CHUNK", 256 << 10)  # several blocks from a small file
    log = tmp_path / "stdout.log"
    steps = 20_000  # about 1.4 MB: six blocks
    errors_at = {150, 6_000, 12_001, steps - 2}
    _training_log(log, steps, errors_at)
    full, full_reader = _events(log, ruleset, full=10**9)
    sampled, reader = _events(log, ruleset, full=500)
    rules = Counter(e.name for e in full if e.name != "job.progress")
    assert rules == Counter(e.name for e in sampled if e.name != "job.progress")
    assert rules  # the CUDA errors were extracted
    progress = [e for e in sampled if e.name == "job.progress"]
    every = [e for e in full if e.name == "job.progress"]
    assert len(every) == steps
    # the first 500 picked lines and the 8 that follow the last of them (read for multi-line
    # messages, as after each error), then one per block
    assert 500 <= len(progress) <= 500 + 8 + 6 + 8 * len(errors_at)
    assert progress[0].source == every[0].source  # the first step
    assert progress[-1].source == every[-1].source  # and the last
    notes = [n for n in reader.coverage().notes if n.code == "progress_sampled"]
    assert [n.args for n in notes] == [{"file": str(log), "lines": 500}]
    assert not [n for n in full_reader.coverage().notes if n.code == "progress_sampled"]
    # what the file holds is still counted whole
    assert reader.coverage().lines == full_reader.coverage().lines == steps + len(errors_at)


def test_a_diagnosis_sees_progress_after_the_error(tmp_path: Path, ruleset: RuleSet) -> None:
    """The phase rules ask whether a job made progress; a sampled file still says so, and the
    coverage entry of the job's output says the progress lines were sampled."""
    bundle = tmp_path / "bundle"
    (bundle / "job").mkdir(parents=True)
    record = {
        "job_id": "77",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": "gpu01",
        "start": "2026-05-20T08:00:00",
        "end": "2026-05-20T13:00:00",
        "timezone": "UTC",
    }
    (bundle / "job.json").write_text(json.dumps(record))
    _training_log(bundle / "job" / "stdout.log", 140_000, {139_990})  # over 8 MiB
    _, verdict = diagnose_bundle(bundle, ruleset)
    out = next(c for c in verdict.coverage if c.stream is Stream.JOB_STDOUT)
    assert [n.code for n in out.notes].count("progress_sampled") == 1
    assert verdict.cause is not None and "illegal memory access" in json.dumps(
        dataclasses.asdict(verdict), default=str
    )


def test_only_a_progress_rule_that_folds_into_one_event_may_be_sampled() -> None:
    import yaml
    from pydantic import ValidationError

    from attribution.rules.schema import ExtractorRule

    text = (Path(__file__).parents[1] / "rules/extract/job/job-progress.yaml").read_text()
    rule = yaml.safe_load(text)
    assert ExtractorRule.model_validate(rule).match.sampled
    for change in ({"match": {"progress": False}}, {"emit": {"group_by": ["rank"]}}):
        broken = {k: dict(v) if isinstance(v, dict) else v for k, v in rule.items()}
        for key, values in change.items():
            broken[key].update(values)
        with pytest.raises(ValidationError, match=r"match\.sampled needs"):
            ExtractorRule.model_validate(broken)
