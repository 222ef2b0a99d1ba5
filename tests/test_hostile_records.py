"""Hostile job records and history files (issue 18, problem 6): each ends in one line naming
the file (and field, and line where the format has lines), or is read with the bad text made
safe; never a traceback, never a hang.

The regression bundles are in tests/hostile/record-*/ (a job.json, and a history.yaml for the
history cases). The property test at the end feeds random JSON-ish records straight to
``job_from_dict``; ``ATTRIBUTION_FUZZ_EXAMPLES`` runs it longer (as tests/fuzz/ does).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution.cli import main
from attribution.errors import BundleError
from attribution.historyfile import read_history_file
from attribution.hostlist import MAX_NODES, HostlistError, compress, expand
from attribution.jobrecord import job_from_dict, job_to_dict
from attribution.model import JobRecord
from attribution.timeutil import UTC, zone

HOSTILE = Path(__file__).parent / "hostile"

# bundle -> (file the one-line error names, words it must hold); None: read, and diagnosed
ERRORS: dict[str, tuple[str, tuple[str, ...]] | None] = {
    "restart-count-5000-digit-text": ("job.json", ("restart_count",)),
    "restart-count-5000-digit-number": ("job.json", ("thousands of digits",)),
    "restart-count-negative": ("job.json", ("restart_count", "0 to 65,535")),
    "restart-count-nan": ("job.json", ("restart_count", "finite")),
    "uid-5000-digit-text": ("job.json", ("uid",)),
    "uid-5000-digit-number": ("job.json", ("thousands of digits",)),
    "uid-negative": ("job.json", ("uid", "0 to 4,294,967,295")),
    "uid-above-32-bits": ("job.json", ("uid", "0 to 4,294,967,295")),
    "uid-infinity": ("job.json", ("uid", "finite")),
    "uid-not-a-number": ("job.json", ("uid", "'alice'")),
    "state-surrogate": None,
    "user-surrogate": None,
    "fields-missing-surrogate": None,
    "boot-times-surrogate-node": ("job.json", ("boot_times", "\\ud800")),
    "timezone-america": ("job.json", ("timezone", "'America'")),
    "timezone-300-bytes": ("job.json", ("timezone", "Europe/BBB")),
    "timezone-dotdot": ("job.json", ("timezone", "../../../etc/passwd")),
    "nodes-5000-digit-bound": ("job.json", ("node list", "digits")),
    "nodes-11-digit-bound": ("job.json", ("node list", "digits")),
    "nodes-million": ("job.json", ("node list", "more than 200,000")),
    "time-limit-huge": ("job.json", ("time_limit",)),
    "history-code-inf": ("history.yaml:4", ("code", "'inf'")),
    "history-code-nan": ("history.yaml:8", ("code", "'nan'")),
    "history-code-5000-digits": ("history.yaml:4", ("5000 digits",)),
    "history-at-year-99999": ("history.yaml:5", ("at", "99999-01-01")),
    "history-at-end-of-calendar": ("history.yaml:5", ("at", "9999-12-31")),
}


def test_every_record_bundle_has_an_expectation() -> None:
    on_disk = sorted(p.name.removeprefix("record-") for p in HOSTILE.glob("record-*"))
    assert on_disk == sorted(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_hostile_record_ends_in_one_line_or_a_safe_verdict(name: str, as_json: bool) -> None:
    bundle = HOSTILE / f"record-{name}"
    began = time.monotonic()
    result = CliRunner().invoke(
        main, ["diagnose", *(["--json"] if as_json else []), str(bundle)], catch_exceptions=True
    )
    took = time.monotonic() - began
    assert took < 10, f"{name}: {took:.1f} s"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{name}: {result.exception!r}") from result.exception
    result.output.encode("utf-8")  # strict: no lone surrogate reaches the terminal
    expected = ERRORS[name]
    if expected is None:
        assert result.exit_code == 0, result.output[-500:]
        return
    lines = result.output.splitlines()
    assert result.exit_code == 1, result.output[-500:]
    assert len(lines) == 1, lines[:5]
    where, words = expected
    assert f"{bundle}/{where}" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert len(lines[0]) < 400, lines[0]
    assert "datetime.datetime(" not in lines[0]


# ---- the pieces, one by one

BASE: dict[str, Any] = {
    "cluster": "c1",
    "job_id": "777",
    "state": "FAILED",
    "nodes": "n[1-2]",
    "start": "2026-01-01T10:00:00",
    "end": "2026-01-01T11:00:00",
    "user": "alice",
    "uid": 1001,
}


def _job(**changes: Any) -> JobRecord:
    return job_from_dict({**BASE, **changes})


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("uid", 10**5000, "uid"),  # a number no JSON parser gave: str() of it raises
        ("uid", -1, "0 to 4,294,967,295"),
        ("uid", 2**32, "0 to 4,294,967,295"),
        ("uid", "١٠٠١", "uid"),  # Arabic-Indic digits are decimal to Python, not to Slurm
        ("uid", math.inf, "finite"),
        ("uid", "alice", "uid"),
        ("restart_count", 70_000, "0 to 65,535"),
        ("restart_count", "-1", "restart_count"),
        ("restart_count", math.nan, "finite"),
        ("job_id", 10**5000, "job_id"),
        ("job_id", -(10**40), "job_id"),
        ("start", 10**5000, "start"),
        ("time_limit", 1e300, "time_limit"),
        ("time_limit", -5, "time_limit"),
        ("boot_times", {"n1": 10**5000}, "boot_times"),
        ("node_addresses", {"n1": [10**5000]}, "node_addresses"),
        ("other_jobs", {"n1": [{"job_id": 10**5000}]}, "other_jobs"),
        ("timezone", "America", "timezone"),
        ("timezone", "__pycache__", "timezone"),
        ("timezone", "A" * 300, "timezone"),
        ("timezone", "Europe/\x00", "timezone"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 and v.isprintable() else "-",
)
def test_a_bad_number_or_zone_is_a_bundle_error(key: str, value: Any, words: str) -> None:
    with pytest.raises(BundleError) as caught:
        _job(**{key: value})
    message = str(caught.value)
    assert words in message and key.split(".")[0] in message, message
    assert "\n" not in message and len(message) < 400, message
    message.encode("utf-8")


def test_numbers_in_range_are_read() -> None:
    job = _job(uid="4294967295", restart_count=65535, time_limit="1-00:00:00")
    assert (job.uid, job.restart_count, job.time_limit) == (2**32 - 1, 65535, 86400)
    assert _job(uid=0, restart_count="0").uid == 0
    assert _job(uid=1001.0).uid == 1001  # a JSON writer that prints every number as a float
    assert _job(uid="unknown", restart_count="").uid is None  # sacct's empty spellings


@pytest.mark.parametrize(
    "key", ["state", "user", "name", "reason", "exit_code", "cluster", "job_id", "account"]
)
def test_a_lone_surrogate_in_a_shown_field_is_replaced(key: str) -> None:
    job = _job(**{key: "A\ud800B"})
    out = json.dumps(job_to_dict(job), ensure_ascii=False)
    out.encode("utf-8")
    assert "A\ufffdB" in out or "A\ufffdB".upper() in out


def test_every_text_of_a_record_is_valid_unicode() -> None:
    job = _job(
        state="CANCELLED by \udc80",
        fields_missing=["\ud800"],
        node_addresses={"\udfff": "\ud800"},
        other_jobs={"n1": [{"job_id": "\ud800", "user": "\udc00"}]},
        gres_detail={"n1": "gpu:\ud800"},
    )
    json.dumps(job_to_dict(job), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "name",
    ["America", "A" * 300, "../../etc/passwd", "__pycache__", "\ud800", "a\x00", "Europe//Berlin"],
)
def test_zone_never_raises_for_a_bad_name(name: str) -> None:
    assert zone(name) is UTC


def test_zone_reads_real_names() -> None:
    assert zone("Europe/Berlin") is not UTC and zone("Etc/GMT+5") is not UTC
    assert zone("America/Argentina/Buenos_Aires") is not UTC


# ---- host lists


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("n[0-" + "9" * 5000 + "]", "digits"),
        ("n[0-99999999999]", "digits"),
        ("n" + "1" * 5000, "digits"),
        ("n[0-999999]", "more than 200,000"),
        ("n[1-1000]-[1-1000]", "more than 200,000"),
        ("n[0-99999],m[0-99999],o[0-99999]", "more than 200,000"),
    ],
)
def test_a_hostlist_beyond_the_bounds_is_refused(text: str, words: str) -> None:
    with pytest.raises(HostlistError, match=words):
        expand(text)


@pytest.mark.parametrize(
    "text",
    [
        "n," * 300_000,  # 600 KB of commas: the bound was computed in quadratic time (45 s)
        "n[" + "1," * 300_000 + "1]",
        ",".join(f"a{i}" for i in range(150_000)),
        ",".join(f"gpu-{i % 7}x{i}" for i in range(150_000)),
    ],
)
def test_a_long_hostlist_is_quick(text: str) -> None:
    began = time.monotonic()
    try:
        names = expand(text)
    except HostlistError:
        names = ()
    assert len(names) <= MAX_NODES
    assert time.monotonic() - began < 5


def test_a_list_of_more_names_than_the_bound_is_refused_quickly() -> None:
    began = time.monotonic()
    with pytest.raises(HostlistError, match="more than 200,000"):
        expand(["n[1-2]"] * (MAX_NODES + 1))
    assert time.monotonic() - began < 2


def test_folding_plain_names_keeps_clustershell_order() -> None:
    names = ["b2", "a10", "a9", "a09", "x-1y", "a1", "b1", "c", "a[3-4]", "gpu-a07", "n01"]
    as_clustershell = tuple(NodeSet(",".join(names), resolver=RESOLVER_NOGROUP))
    assert expand(",".join(names)) == as_clustershell
    assert expand("n3,n1,n2") == ("n1", "n2", "n3")
    assert expand(["n3", "n1", "n2"]) == ("n3", "n1", "n2")  # a list keeps its order


# ---- history files


def _history(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "history.yaml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("code: .inf", "code"),
        ("code: -.inf", "code"),
        ("code: .nan", "code"),
        ("code: " + "9" * 4000, "code"),
        ("code: 79\n  at: 0001-01-01T00:00:00+14:00", "at"),
        ("code: 79\n  at: 0001-01-01", "at"),
        ("code: 79\n  at: " + "9" * 4000, "at"),
        ("code: 79\n  at: [1, 2]", "at"),
        ("code: 79\n  user: [a, b]", "user"),
        ("code: [79]", "code"),
    ],
)
def test_a_bad_history_entry_names_the_file_and_line(
    tmp_path: Path, entry: str, words: str
) -> None:
    path = _history(tmp_path, f"- job: '41'\n  node: n1\n  device: '0000:3b:00.0'\n  {entry}\n")
    with pytest.raises(BundleError) as caught:
        read_history_file(path)
    message = str(caught.value)
    line = 4 + entry.count("\n")  # the line of the entry's bad key, its last
    assert message.startswith(f"{path}:{line}: ") and words in message, message
    assert len(message) < 400 and "datetime" not in message, message


def test_a_history_date_is_read(tmp_path: Path) -> None:
    path = _history(
        tmp_path, "- {job: '41', node: n1, device: '0000:3b:00.0', code: 79, at: 2026-01-01}\n"
    )
    (prior,) = read_history_file(path)
    assert prior.at is not None and prior.at.isoformat() == "2026-01-01T00:00:00+00:00"


# ---- random records straight into the parser

KEYS = (
    "job_id", "JobID", "cluster", "sluid", "array_job_id", "array_task_id", "restart_count",
    "Restarts", "name", "user", "uid", "UID", "account", "partition", "state", "reason",
    "exit_code", "derived_exit_code", "nodes", "NodeList", "start", "end", "time_limit",
    "work_dir", "std_out", "std_err", "admin_comment", "failed_node", "node_addresses",
    "boot_times", "timezone", "exclusive", "gres_detail", "gpu_bus_ids", "other_jobs",
    "fields_missing",
)  # fmt: skip
ODD = (
    "", "unknown", "\ud800", "\udfff\x00\x1b[2J", "9" * 5000, "America", "A" * 300, "../etc",
    "Europe/Berlin", "2026-01-01T10:30:00", "9999-12-31T23:59:59-14:00", "1767261600",
    "CANCELLED by \ud800", "n[1-2]", "n[0-" + "9" * 5000 + "]", "n[0-99999999999]",
    "n[1-1000]-[1-1000]", "gpu:2(IDX:0-1)", "0000:3b:00.0", "1-00:00:00", "x" * 100_000,
)  # fmt: skip


def _big(spelled: str) -> int:
    """``"-10**5000"`` -> that number."""
    sign = -1 if spelled.startswith("-") else 1
    base, _, power = spelled.lstrip("-").partition("**")
    return sign * int(base) ** int(power or 1)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    # big numbers built when drawn: hypothesis prints its strategies, and str() refuses these
    st.sampled_from(("10**5000", "-10**5000", "2**32", "2**63", "-1")).map(_big),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(("n1", "n2", "n[1-2]", "\ud800", "job_id", "start")), inner, max_size=3
        ),
    ),
    max_leaves=10,
)
EXAMPLES = int(os.environ.get("ATTRIBUTION_FUZZ_EXAMPLES", "200"))


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _texts(v)]
    return []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=8), st.booleans())
def test_a_random_record_is_read_or_refused_in_one_line(
    changes: dict[str, Any], base: bool
) -> None:
    record = {**BASE, **changes} if base else changes
    began = time.monotonic()
    try:
        job = job_from_dict(record)
    except BundleError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 1000, message[:300]
        message.encode("utf-8")
    else:
        for f in fields(job):
            for text in _texts(getattr(job, f.name)):
                text.encode("utf-8")
        json.dumps(job_to_dict(job), ensure_ascii=False).encode("utf-8")
        assert job.uid is None or 0 <= job.uid < 2**32
        assert 0 <= job.restart_count <= 65535
    assert time.monotonic() - began < 5


def test_a_two_dimensional_node_list_is_compressed_quickly() -> None:
    """``r[1-447]n[1-447]`` (199,809 nodes, found by a breaker run): ClusterShell folded the
    names in two dimensions, 16 s a call and three calls a diagnosis."""
    names = expand("r[1-447]n[1-447]")
    began = time.monotonic()
    folded = compress(names)
    assert time.monotonic() - began < 5
    assert sorted(expand(folded)) == sorted(names)
    assert compress(["r1n1", "r1n2", "r2n1", "r2n2"]) == "r[1-2]n[1-2]"  # few: ClusterShell's
