"""The verdict's JSON form reads back to the same verdict (attribution/verdictjson.py).

The store keeps verdicts as JSON; ``sattr show``, ``rediagnose`` and the repeat history
read them back with ``verdict_from_dict``. Random verdicts go ``verdict_to_dict`` -> JSON
text -> ``verdict_from_dict`` and must come back equal, field for field; and the same
through the SQLite store. The job record is built the way every verdict's job is built,
by ``job_from_dict`` from a job.json-like mapping, so it holds only values the reader can
produce (an "unknown" user is already None, a state already upper case).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from attribution.errors import BundleError
from attribution.hostlist import compress
from attribution.jobrecord import job_from_dict
from attribution.model import (
    SLURM_STATES,
    Alternative,
    Cause,
    ChainEntry,
    ChainRole,
    Confidence,
    Coverage,
    CoverageStatus,
    GpuError,
    JobRecord,
    Responsible,
    Stream,
    SubDomain,
    TerminalState,
    Trust,
    Verdict,
    verdict_to_dict,
)
from attribution.store import Store
from attribution.verdictjson import verdict_from_dict

# any text, lone surrogates excepted (the store writes UTF-8; the reader turns them into U+FFFD)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
# (built from parts: hypothesis draws these much faster than from a regex)
WORD = st.builds(
    str.__add__, st.sampled_from("abcxyz"), st.text("abcdefxyz0123456789_.-", max_size=12)
)
NODE = st.builds(
    "{}{:0{}d}".format,
    st.sampled_from(["gpu", "n", "dgx-a", "nid"]),
    st.integers(0, 9999),
    st.integers(1, 4),
)
TIME = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2199, 12, 31), timezones=st.just(UTC)
)
MAYBE_TIME = st.none() | TIME
COUNT = st.integers(min_value=0, max_value=2**53)
BUS_ID = st.builds(
    "0000:{:02x}:{:02x}.{}".format, st.integers(0, 255), st.integers(0, 31), st.integers(0, 7)
)


@st.composite
def other_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """One entry of job.json's ``other_jobs`` (another job on the node)."""
    start = draw(MAYBE_TIME)
    end = None
    if start is not None and draw(st.booleans()):
        end = start + timedelta(seconds=draw(st.integers(0, 10**6)))
    return {
        "job_id": str(draw(st.integers(1, 10**6))),
        "start": start.isoformat() if start else None,
        "end": end.isoformat() if end else None,
        "user": draw(st.none() | WORD),
    }


@st.composite
def jobs(draw: st.DrawFn) -> JobRecord:
    nodes = draw(st.lists(NODE, max_size=5, unique=True))
    data: dict[str, Any] = {
        "job_id": str(draw(st.integers(1, 10**9))),
        "nodes": nodes,
        "cluster": draw(st.none() | WORD),
        "sluid": draw(st.none() | WORD),
        "restart_count": draw(st.integers(0, 99)),
        "name": draw(st.none() | TEXT),
        "user": draw(st.none() | WORD),
        "uid": draw(st.none() | st.integers(0, 2**31)),
        "account": draw(st.none() | WORD),
        "partition": draw(st.none() | WORD),
        "reason": draw(st.none() | TEXT),
        "exit_code": draw(st.none() | st.builds("{}:{}".format, st.integers(0, 255), COUNT)),
        "derived_exit_code": draw(st.none() | st.just("0:0")),
        "time_limit": draw(st.none() | st.integers(0, 10**7)),
        "work_dir": draw(st.none() | TEXT),
        "std_out": draw(st.none() | TEXT),
        "std_err": draw(st.none() | TEXT),
        "admin_comment": draw(st.none() | TEXT),
        "failed_node": draw(st.none() | NODE),
        "timezone": draw(st.sampled_from([None, "UTC", "Europe/Berlin", "Asia/Tokyo"])),
        "exclusive": draw(st.none() | st.booleans()),
    }
    if draw(st.booleans()):
        data["array_job_id"], data["array_task_id"] = draw(WORD), str(draw(st.integers(0, 999)))
    state = draw(st.none() | st.sampled_from(sorted(SLURM_STATES)))
    if state and draw(st.booleans()):
        state = f"{state} by {draw(st.integers(0, 99999))}"
    data["state"] = state
    start = draw(MAYBE_TIME)
    data["start"] = start.isoformat() if start else None
    if start is not None and draw(st.booleans()):
        data["end"] = (start + timedelta(seconds=draw(st.integers(0, 10**6)))).isoformat()
    if nodes:
        some = st.lists(st.sampled_from(nodes), max_size=3, unique=True)
        data["node_addresses"] = {
            n: draw(st.lists(st.ip_addresses().map(str), min_size=1, max_size=2))
            for n in draw(some)
        }
        data["boot_times"] = {n: draw(TIME).isoformat() for n in draw(some)}
        data["gres_detail"] = {n: f"gpu:{draw(st.integers(1, 8))}" for n in draw(some)}
        data["gpu_bus_ids"] = {n: draw(st.lists(BUS_ID, max_size=3)) for n in draw(some)}
        if draw(st.booleans()):
            data["other_jobs"] = {n: draw(st.lists(other_jobs(), max_size=2)) for n in draw(some)}
    try:
        job = job_from_dict(data)
    except BundleError:  # e.g. a time outside the calendar the reader accepts
        assume(False)
        raise
    assert job.nodelist == compress(job.nodes)
    return job


def responsible(suspect: bool = False) -> st.SearchStrategy[Responsible]:
    return st.builds(
        Responsible,
        node=NODE,
        component=st.none() | WORD,
        device=st.none() | BUS_ID,
        confirmed_by=st.none() if suspect else st.none() | st.sampled_from(["kernel", "slurm"]),
    )


CAUSE = st.builds(Cause, id=WORD, title=TEXT, rule=WORD.map(lambda w: f"{w}@1"))
CHAIN = st.builds(
    ChainEntry,
    symptom=TEXT,
    event=WORD,
    role=st.sampled_from(ChainRole),
    count=COUNT,
    nodes=st.lists(NODE, max_size=4).map(tuple),
    node_count=COUNT,
    first_at=MAYBE_TIME,
    last_at=MAYBE_TIME,
    stream=st.sampled_from(Stream).map(str),
    example=TEXT,
    source=TEXT,
    rule=WORD,
    note=st.none() | TEXT,
    owner=st.none() | st.sampled_from(["job", "node", "foreign"]),
    trust=st.none() | st.sampled_from(Trust).map(str),
)
COVERAGE = st.builds(
    Coverage,
    stream=st.sampled_from(Stream),
    node=st.none() | NODE,
    status=st.sampled_from(CoverageStatus),
    files=st.lists(TEXT, max_size=3).map(tuple),
    bytes=COUNT,
    lines=COUNT,
    untimed=COUNT,
    outside_window=COUNT,
    reason=st.none() | TEXT,
    trust=st.none() | st.sampled_from(Trust),
    first_at=MAYBE_TIME,
    last_at=MAYBE_TIME,
)
GPU_ERROR = st.builds(
    GpuError,
    node=NODE,
    device=BUS_ID,
    code=st.integers(1, 200),
    xid_class=st.none() | WORD,
    unit=st.none() | TEXT,
    first_at=MAYBE_TIME,
    count=st.integers(1, 10**6),
)
ALTERNATIVE = st.builds(
    Alternative,
    cause=CAUSE,
    sub_domain=st.sampled_from(SubDomain),
    responsible=st.lists(responsible(), max_size=2).map(tuple),
    summary=TEXT,
    why_not=TEXT,
    priority=st.integers(-(2**31), 2**31),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORD, inner, max_size=3),
    max_leaves=8,
)


def tuples(strategy: st.SearchStrategy[Any], size: int = 3) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(strategy, max_size=size).map(tuple)


VERDICTS = st.builds(
    Verdict,
    job=jobs(),
    terminal_state=st.sampled_from(TerminalState),
    sub_domain=st.sampled_from(SubDomain),
    cause=st.none() | CAUSE,
    responsible=tuples(responsible()),
    summary=TEXT,
    action=st.none() | TEXT,
    symptom_chain=tuples(CHAIN),
    alternatives=tuples(ALTERNATIVE, 2),
    coverage=tuples(COVERAGE),
    ignored=tuples(CHAIN, 2),
    window=st.tuples(MAYBE_TIME, MAYBE_TIME),
    ruleset=st.dictionaries(WORD, TEXT, max_size=3),
    engine_version=WORD,
    diagnosed_at=MAYBE_TIME,
    gpu_errors=tuples(GPU_ERROR),
    suspects=tuples(responsible(suspect=True)),
    confidence=st.none()
    | st.builds(Confidence, level=st.sampled_from(["high", "medium", "low"]), reason=TEXT),
    ownership=st.dictionaries(WORD, JSON_VALUE, max_size=3),
)


def _differences(got: Verdict, want: Verdict) -> list[str]:
    """The fields that differ, for a readable failure."""
    return [
        f"{name}: {getattr(got, name)!r} != {getattr(want, name)!r}"
        for name in Verdict.__dataclass_fields__
        if getattr(got, name) != getattr(want, name)
    ]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VERDICTS)
def test_a_verdict_reads_back_from_its_json(verdict: Verdict) -> None:
    text = json.dumps(verdict_to_dict(verdict))
    again = verdict_from_dict(json.loads(text))
    assert again == verdict, _differences(again, verdict)
    assert json.dumps(verdict_to_dict(again)) == text


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store(tmp_path_factory.mktemp("store") / "v.sqlite") as opened:
        yield opened


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VERDICTS)
def test_a_verdict_reads_back_from_the_store(store: Store, verdict: Verdict) -> None:
    data = store.get(store.save(verdict))  # a job run saved again replaces its row
    assert data is not None
    again = verdict_from_dict(data)
    assert again == verdict, _differences(again, verdict)
