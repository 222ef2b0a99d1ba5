"""Strict rule loading: every error names file:line; site rules extend and override shipped ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attribution.errors import RuleErrors
from attribution.rules.compiled import RuleSet
from attribution.rules.lint import lint
from attribution.rules.loader import load_ruleset, parse_rule_text

from .conftest import FIXTURES

BAD = FIXTURES / "rules-bad"

GOOD_RULE = """\
schema: 1
id: {id}
kind: extractor
version: 1
title: Site rule for the boom message
description: A site's own signature, used to test loading and overriding.
status: test
streams: [job]
match:
  contains: "{word}"
  regex: '{word} (?P<what>\\w+)'
emit:
  event: app.boom
  role: root
  label: "boom {{what}}"
  fields:
    what: what
examples:
  match:
    - line: "{word} now"
      fields: {{what: now}}
  no_match:
    - "nothing here"
"""


def _load_one(tmp_path: Path, name: str) -> RuleErrors:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(BAD / name, site / name)
    with pytest.raises(RuleErrors) as info:
        load_ruleset([site], include_shipped=False)
    return info.value


@pytest.mark.parametrize(
    ("name", "line", "needle"),
    [
        ("bad-yaml.yaml", 6, "while scanning a quoted scalar on line 5"),
        ("duplicate-key.yaml", 6, "duplicate key 'title' (first defined on line 5)"),
        ("unknown-key.yaml", 10, "unknown key 'match.regexp'"),
        ("bad-regex.yaml", 10, "invalid regex"),
        ("unnamed-group.yaml", 10, "unnamed groups"),
        ("bad-stream.yaml", 7, "unknown stream"),
    ],
)
def test_bad_rule_files_name_file_and_line(
    tmp_path: Path, name: str, line: int, needle: str
) -> None:
    err = _load_one(tmp_path, name)
    messages = [str(e) for e in err.errors]
    assert any(needle in m for m in messages), messages
    assert any(m.startswith(f"{tmp_path / 'site' / name}:{line}:") for m in messages), messages


def test_every_error_is_collected(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(BAD, site)
    with pytest.raises(RuleErrors) as info:
        load_ruleset([site], include_shipped=False)
    files = {Path(e.location.path).name for e in info.value.errors if e.location}
    assert files == {p.name for p in BAD.glob("*.yaml")}


def test_site_rules_extend_and_override(tmp_path: Path, ruleset: RuleSet) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "site-boom.yaml").write_text(GOOD_RULE.format(id="site-boom", word="boom"))
    shipped = ruleset  # the session's load_ruleset()
    both = load_ruleset([site])
    assert both.rule("site-boom") is not None
    assert len(both.all_rules()) == len(shipped.all_rules()) + 1
    # same id as a shipped rule: the site's version replaces it
    (site / "nvidia-xid.yaml").write_text(GOOD_RULE.format(id="nvidia-xid", word="bang"))
    replaced = load_ruleset([site])
    rule = replaced.rule("nvidia-xid")
    assert rule is not None and rule.title == "Site rule for the boom message"
    assert len(replaced.all_rules()) == len(both.all_rules())
    assert replaced.digest != both.digest


def test_one_id_twice_in_one_directory_is_an_error(tmp_path: Path) -> None:
    """Overriding is for a later directory; two files with one id in the same directory
    would silently lose one of them."""
    site = tmp_path / "site"
    for sub in ("a", "b"):
        (site / sub).mkdir(parents=True)
        (site / sub / "dup.yaml").write_text(GOOD_RULE.format(id="site-dup", word="boom"))
    with pytest.raises(RuleErrors) as info:
        load_ruleset([site], include_shipped=False)
    (message,) = [str(e) for e in info.value.errors]
    assert message.startswith(str(site / "b" / "dup.yaml"))
    assert "already defined in" in message and str(site / "a" / "dup.yaml") in message


def test_shipped_rules_lint_clean(ruleset: RuleSet) -> None:
    issues = lint(ruleset)  # the session's load_ruleset()
    assert not issues, "\n".join(map(str, issues))


def test_lint_catches_unknown_event_and_id_mismatch(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "diagnose").mkdir(parents=True)
    (site / "diagnose" / "wrong-name.yaml").write_text(
        """\
schema: 1
id: not-the-file-name
kind: diagnosis
version: 1
title: Uses an event nobody emits
description: The event below is not emitted by any extractor.
priority: 10
sub_domain: application
when:
  any:
    - {event: app.never_emitted}
summary: never
"""
    )
    issues = lint(load_ruleset([site]))
    checks = {i.check for i in issues if "wrong-name.yaml" in i.location.path}
    assert {"id-matches-filename", "event-known"} <= checks


def test_lint_wants_the_scope_of_node_stream_extractors(tmp_path: Path) -> None:
    """Whose a node line is depends on emit.scope; a site extractor reading the kernel log
    without one is a lint error, one reading only the job's output is fine."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site-boom.yaml").write_text(GOOD_RULE.format(id="site-boom", word="boom"))
    (site / "site-kboom.yaml").write_text(
        GOOD_RULE.format(id="site-kboom", word="kboom").replace("streams: [job]", "streams: [node]")
    )
    issues = [i for i in lint(load_ruleset([site])) if i.check == "scope-required"]
    assert [Path(i.location.path).name for i in issues] == ["site-kboom.yaml"]
    assert "emit.scope" in issues[0].message
    (site / "site-kboom.yaml").write_text(
        GOOD_RULE.format(id="site-kboom", word="kboom")
        .replace("streams: [job]", "streams: [node]")
        .replace("  role: root\n", "  role: root\n  scope: process\n")
    )
    assert not [i for i in lint(load_ruleset([site])) if i.check == "scope-required"]


def test_ratio_fields_must_name_filled_fields(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    rule = GOOD_RULE.format(id="site-boom", word="boom").replace(
        "    what: what\n", "    what: what\n    share: {ratio: [what, nowhere]}\n"
    )
    (site / "site-boom.yaml").write_text(rule)
    with pytest.raises(RuleErrors) as info:
        load_ruleset([site], include_shipped=False)
    messages = [str(e) for e in info.value.errors]
    assert any("'share' is a ratio of 'nowhere'" in m for m in messages), messages
    assert any(m.startswith(f"{site / 'site-boom.yaml'}:") for m in messages), messages


def test_bytes_and_ratio_fields_are_filled(tmp_path: Path) -> None:
    from attribution.rules.examples import run_all

    site = tmp_path / "site"
    site.mkdir()
    rule = """\
schema: 1
id: site-gpu-mem
kind: extractor
version: 1
title: A site's GPU memory line
description: Tests the bytes type and ratio fields.
status: test
streams: [job]
match:
  contains: "held"
  regex: 'held (?P<used>[\\d.]+ \\w+) of (?P<total>[\\d.]+ \\w+)'
emit:
  event: app.gpu_mem
  role: context
  label: "memory held"
  fields:
    used: {group: used, type: bytes}
    total: {group: total, type: bytes}
    share: {ratio: [used, total]}
examples:
  match:
    - line: "held 20 GiB of 80 GiB"
      fields: {used: 21474836480, total: 85899345920, share: 0.25}
    - line: "held 1.5 GB of 0 GB"
      fields: {used: 1500000000, total: 0, share: null}
    - line: "held 3 bananas of 8 KiB"
      fields: {used: 3 bananas, total: 8192, share: null}
  no_match:
    - "nothing here"
"""
    (site / "site-gpu-mem.yaml").write_text(rule)
    ruleset = load_ruleset([site], include_shipped=False)
    results = run_all(ruleset)
    assert len(results) == 4 and all(r.passed for r in results), [
        r for r in results if not r.passed
    ]


def test_a_backtracking_site_regex_is_flagged_and_bounded(tmp_path: Path) -> None:
    """A pattern like (a+)+b is reported by lint and, at run time, loses only the lines it
    runs out of time on (a coverage note), never the diagnosis."""
    from attribution.analyze import analyze
    from attribution.jobrecord import job_from_dict
    from attribution.model import LogLine, SourceRef, Stream

    site = tmp_path / "site"
    site.mkdir()
    rule = GOOD_RULE.format(id="site-slow", word="boom").replace(
        "regex: 'boom (?P<what>\\w+)'", "regex: 'boom (?P<what>(?:a+)+)b'"
    )
    (site / "site-slow.yaml").write_text(rule)
    ruleset = load_ruleset([site], include_shipped=False)
    issues = [i for i in lint(ruleset) if i.check == "regex-backtracking"]
    assert issues and not issues[0].error and "ms on a 6,000-character line" in issues[0].message
    text = "boom " + "a" * 30000
    line = LogLine(Stream.JOB_STDOUT, None, text, text, SourceRef("out.log", 1))
    job = job_from_dict({"job_id": "1", "state": "FAILED", "nodes": "n1"})
    from attribution.model import Coverage, CoverageNote, CoverageStatus

    cov = [Coverage(Stream.JOB_STDOUT, None, CoverageStatus.OK, ("out.log",), len(text), 1)]
    verdict = analyze(job, [line, line], ruleset, coverage=cov)
    (job_cov,) = verdict.coverage
    assert CoverageNote("regex_timeout", {"count": 2, "rule": "site-slow"}) in job_cov.notes


def test_yaml_aliases_are_refused_before_they_expand(tmp_path: Path) -> None:
    """A "billion laughs" document of a few lines would expand to gigabytes."""
    from attribution._yaml import YamlError, load_yaml

    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefghij":
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    with pytest.raises(YamlError) as info:
        load_yaml(bomb, "bomb.yaml")
    assert str(info.value).startswith("bomb.yaml:1: YAML aliases (*name) are not allowed")


_HEAD = """schema: 1
id: site-{kind}
kind: {kind}
version: 1
title: a site rule
description: a site rule for the test
status: test
"""
_DIAG = (
    _HEAD.replace("{kind}", "diagnosis")
    + """severity: error
priority: 10
sub_domain: application
when:
  job:
    signal: {signal}
summary: a site rule
"""
)
_CORR = (
    _HEAD.replace("{kind}", "correlation")
    + """severity: info
op: {op}
select:
  event: [torch.watchdog_timeout]
{extra}finding: site-y
"""
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_DIAG.format(signal="x"), "signal must be a signal number"),
        (_DIAG.format(signal="{in: [6, SIGSEGV]}"), "signal must be a signal number"),
        (_DIAG.format(signal="-5"), "signal must be a signal number"),
        (_CORR.format(op="outlier", extra="field: version\nsplit: 'yes'\n"), "valid boolean"),
        (_CORR.format(op="vote", extra="field: peer\nsplit: true\n"), "unknown key 'split'"),
        (_CORR.format(op="desync", extra="field: seq\n"), "unknown key 'field'"),
    ],
)
def test_new_rule_keys_reject_wrong_values_with_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    """The keys issue 10 added (a job's ending signal, an outlier's split, the desync op) are
    checked like every other: one error naming the file and line, never a silent coercion."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "rule.yaml").write_text(text)
    with pytest.raises(RuleErrors) as info:
        load_ruleset([site])
    shown = "\n".join(str(e) for e in info.value.errors)
    assert message in shown and "rule.yaml:" in shown, shown


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "op: sequence\ncause: {event: [a.b]}\neffect: {event: [c.d]}\nmin_voters: 3\n",
            "unknown key 'min_voters'",
        ),
        (
            "op: vote\nselect: {event: [a.b]}\nfield: peer\nfinding: f\nwithin: 5s\n",
            "unknown key 'within'",
        ),
        (
            "op: suppress\nsymptoms: [{event: [a.b]}]\nfinding: f\nsplit: true\n",
            "unknown key 'split'",
        ),
        ("op: straggler\nselect: {event: [a.b]}\nfinding: f\nfield: rank\n", "unknown key 'field'"),
        ("op: outlier\nselect: {event: [a.b]}\n", "finding"),
        ("op: teleport\nselect: {event: [a.b]}\nfinding: f\n", "teleport"),
    ],
)
def test_a_correlation_key_of_another_op_is_refused(body: str, message: str) -> None:
    """One schema per correlation op: options of another op do not lint clean."""
    text = (
        "schema: 1\nid: demo-corr\nkind: correlation\nversion: 1\ntitle: Demo\n"
        "description: A correlation rule for the schema test.\n" + body
    )
    with pytest.raises(RuleErrors) as info:
        parse_rule_text(text, "demo-corr.yaml")
    assert message in str(info.value)
    assert "demo-corr.yaml:" in str(info.value)
