"""Coverage notes: a code and args for programs, the same sentence as before for people."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

from attribution.analyze import analyze
from attribution.jobrecord import job_from_dict
from attribution.model import (
    COVERAGE_NOTES,
    Coverage,
    CoverageNote,
    CoverageStatus,
    Stream,
    verdict_to_dict,
)
from attribution.rules.compiled import RuleSet
from attribution.verdictjson import verdict_from_dict

ROOT = Path(__file__).resolve().parent.parent
_MADE = re.compile(r"CoverageNote\(\s*\"([a-z_]+)\"")


def _codes_made() -> set[str]:
    return {
        code
        for path in (ROOT / "attribution").rglob("*.py")
        for code in _MADE.findall(path.read_text())
    }


def test_every_code_made_has_a_sentence_and_every_sentence_is_made_and_documented() -> None:
    made = _codes_made()
    assert made - set(COVERAGE_NOTES) == set()
    assert set(COVERAGE_NOTES) - made == set()
    documented = set(
        re.findall(r"^\| `([a-z_]+)` \|", (ROOT / "docs/verdict.md").read_text(), re.M)
    )
    assert set(COVERAGE_NOTES) - documented == set()


def test_each_sentence_names_only_its_args() -> None:
    for code, template in COVERAGE_NOTES.items():
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        note = CoverageNote(code, dict.fromkeys(fields, "x"))
        assert "{" not in note.text, code


def test_the_sentences_are_the_ones_coverage_always_said() -> None:
    """The rendered coverage and the verdict's ``reason`` text did not change with the codes."""
    said = {
        CoverageNote("past_window", {"file": "kern.log", "offset": 42}): (
            "kern.log: stopped at byte 42, past the job window"
        ),
        CoverageNote("long_lines", {"count": 3, "max_line": 65536}): (
            "3 over-long line(s) cut at 65536 bytes"
        ),
        CoverageNote("bad_node_name", {"node": "../x"}): (
            "node name '../x' is not a host name; its logs not read"
        ),
        CoverageNote("not_journal_entry", {"file": "journal.jsonl", "line": 2}): (
            "journal.jsonl:2: not a journal entry, skipped"
        ),
        CoverageNote("regex_timeout", {"count": 2, "rule": "site-slow"}): (
            "2 line(s) skipped by site-slow: its pattern ran out of time (after 20 such lines a"
            " rule is not tried again in the job)"
        ),
        CoverageNote("no_file"): "no file for this source",
    }
    for note, text in said.items():
        assert note.text == text


def test_reason_is_made_from_the_notes_and_notes_add_to_it() -> None:
    cov = Coverage(
        Stream.KERNEL,
        "n1",
        CoverageStatus.OK,
        notes=(CoverageNote("nul_bytes", {"count": 2}), CoverageNote("odd_prefix", {"count": 1})),
    )
    assert cov.reason == (
        "2 line(s) with NUL bytes; 1 line(s) with an unreadable prefix read as text"
    )
    more = cov.noted(CoverageNote("folded", {"count": 5}))
    assert more.codes == ("nul_bytes", "odd_prefix", "folded")
    assert more.reason is not None and more.reason.startswith(cov.reason + "; 5 signal(s)")
    assert Coverage(Stream.KERNEL, "n1", CoverageStatus.OK).reason is None
    # a code of a newer version read back from its JSON still says something
    assert CoverageNote("from_the_future", {"n": 1}).text == "from_the_future (n=1)"


def test_the_verdict_json_carries_code_and_args_and_reads_back(ruleset: RuleSet) -> None:
    job = job_from_dict(
        {
            "job_id": "1",
            "state": "FAILED",
            "nodes": "n1",
            "start": "2025-06-01T10:00:00Z",
            "end": "2025-06-01T11:00:00Z",
        }
    )
    coverage = [
        Coverage(
            Stream.KERNEL,
            "n1",
            CoverageStatus.OK,
            notes=(CoverageNote("window_start", {"file": "kern.log", "offset": 4096}),),
        )
    ]
    verdict = analyze(job, [], ruleset, coverage=coverage)
    (kernel,) = [c for c in verdict.coverage if c.stream is Stream.KERNEL]
    # nothing says whether the node was shared: the analysis adds why ownership was not checked
    assert kernel.codes == ("window_start", "ownership_unchecked")
    data = json.loads(json.dumps(verdict_to_dict(verdict)))
    (entry,) = [c for c in data["coverage"] if c["stream"] == "kernel"]
    assert entry["notes"][0] == {
        "code": "window_start",
        "args": {"file": "kern.log", "offset": 4096},
    }
    assert entry["notes"][1]["code"] == "ownership_unchecked"
    assert entry["reason"] == kernel.reason
    assert entry["reason"].startswith("kern.log: read from byte 4096, the start of the job window")
    assert verdict_from_dict(data).coverage == verdict.coverage
    # a verdict stored before notes existed reads back with its reason and no notes
    for c in data["coverage"]:
        del c["notes"]
    old = verdict_from_dict(data)
    assert [c.reason for c in old.coverage] == [c.reason for c in verdict.coverage]
    assert all(c.notes == () for c in old.coverage)
