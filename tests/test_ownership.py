"""Whose an event is, whether its source can be trusted, and what it may do (ownership.assess):
the edges, one rule at a time. The golden ownership-* bundles and tests/slurm/test_shared_node.py
show the same rules end to end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from attribution.jobrecord import job_from_dict
from attribution.model import (
    Coverage,
    CoverageStatus,
    Event,
    EventRole,
    JobRecord,
    Owner,
    SourceRef,
    Standing,
    Stream,
    Trust,
)
from attribution.ownership import assess, bus_key, gres_gpu_indexes, job_gpu_count

T0 = datetime(2026, 6, 10, 10, 0, tzinfo=UTC)


def job(**kw: Any) -> JobRecord:
    data: dict[str, Any] = {
        "job_id": "4242",
        "nodes": "gpu012",
        "start": T0.isoformat(),
        "end": (T0 + timedelta(minutes=20)).isoformat(),
        "user": "alice",
        "uid": 1001,
        "exclusive": False,
        "gres_detail": {"gpu012": "gpu:h100:2(IDX:0-1)"},
        "gpu_bus_ids": {"gpu012": ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]},
        "other_jobs": {
            "gpu012": [{"job_id": "4243", "start": (T0 - timedelta(hours=1)).isoformat()}]
        },
    }
    data.update(kw)
    return job_from_dict(data)


def event(
    scope: str | None,
    *,
    at: float = 300.0,
    stream: Stream = Stream.KERNEL,
    device: str | None = None,
    trusted: bool = True,
    name: str = "test.event",
    ident: str | None = "kernel",
    path: str = "kernel.log",
    component: str | None = None,
    **fields: Any,
) -> Event:
    return Event(
        name=name,
        rule="test@1",
        stream=stream,
        node="gpu012",
        time=T0 + timedelta(seconds=at),
        fields=fields,
        source=SourceRef(path, 1),
        text=name,
        role=EventRole.ROOT,
        label=name,
        device=device,
        scope=scope,
        trusted=trusted,
        ident=ident,
        component=component,
    )


def run(
    events: list[Event], record: JobRecord | None = None, coverage: list[Coverage] | None = None
):  # type: ignore[no-untyped-def]
    kept, _view, result = assess(events, record or job(), coverage or [])
    return kept, result


def test_bus_ids_and_gres() -> None:
    assert (
        bus_key("PCI:0000:3B:00")
        == bus_key("00000000:3b:00.0")
        == bus_key("3b:00.0")
        == "0000:3b:00"
    )
    assert bus_key("GPU-1a2b") is None and bus_key("3") is None
    assert gres_gpu_indexes("gpu:h100:2(IDX:0-1),shard:gpu:4(IDX:0)") == {0, 1}
    assert gres_gpu_indexes("gpu:a100:1(IDX:3),gpu:v100:2(IDX:5,7)") == {3, 5, 7}
    assert gres_gpu_indexes("") == frozenset() and gres_gpu_indexes("(null)") == frozenset()
    assert job_gpu_count(job()) == 2
    assert job_gpu_count(job(gres_detail={})) is None


@pytest.mark.parametrize(
    ("device", "owner"),
    [
        ("0000:18:00", Owner.JOB),  # minor 0: the job's
        ("0000:3a:00", Owner.FOREIGN),  # minor 2: a GPU of the node, not the job's
        ("0000:00:03.1", Owner.NODE),  # not a GPU of the node: a root port
        ("1", Owner.JOB),  # an index: IDX 0-1
        ("2", Owner.FOREIGN),
        (None, Owner.UNKNOWN),
    ],
)
def test_a_gpu_event_is_owned_by_its_gpu(device: str | None, owner: Owner) -> None:
    (e,), _ = run([event("gpu", device=device)])
    assert e.owner is owner
    assert (e.standing is Standing.CONTEXT) is (owner is Owner.FOREIGN)


def test_a_process_event_is_owned_by_its_cgroup_uid_or_pid() -> None:
    mine = event("process", oom_memcg="/slurm/uid_1001/job_4242", pid=10)
    theirs = event(
        "process", task_memcg="/system.slice/slurmstepd.scope/job_4243/step_0/user/task_0"
    )
    other_user = event("process", uid=1002)
    printed = event("process", pid=61001)
    nobody = event("process", pid=7)
    kept, _result = run([mine, theirs, other_user, printed, nobody])
    assert [e.owner for e in kept] == [
        Owner.JOB,
        Owner.FOREIGN,
        Owner.FOREIGN,
        Owner.UNKNOWN,
        Owner.UNKNOWN,
    ]
    assert (
        theirs.owner_note
        == "job 4243's: cgroup /system.slice/slurmstepd.scope/job_4243/step_0/user/task_0"
    )
    # the job's own output named pid 61001 on gpu012 (NCCL's host:pid:tid prefix)
    kept, _ = assess([event("process", pid=61001)], job(), [], pids={"gpu012": {61001}})[:2]
    assert kept[0].owner is Owner.JOB


def test_lines_of_one_oom_report_take_the_owner_of_the_line_naming_the_cgroup() -> None:
    constraint = event(
        "process", at=300.0, component="memory", oom_memcg="/slurm/uid_1002/job_4243", pid=5
    )
    killed = event("process", at=300.1, component="memory", pid=5)  # "Killed process 5 (...)"
    invoked = event("process", at=299.9, component="memory")  # "python3 invoked oom-killer"
    elsewhere = event("process", at=299.9, component="memory", path="other.log")
    later = event("process", at=320.0, component="memory")
    kept, _ = run([invoked, constraint, killed, elsewhere, later])
    assert [e.owner for e in kept] == [
        Owner.FOREIGN,
        Owner.FOREIGN,
        Owner.FOREIGN,
        Owner.UNKNOWN,
        Owner.UNKNOWN,
    ]


def test_unknown_processes_only_corroborate_on_a_node_shared_at_that_moment() -> None:
    (e,), _ = run([event("process")])
    assert e.standing is Standing.SUPPORT and "4243" in (e.owner_note or "")
    # the other job had ended before: the node was the job's then
    ended = job(
        other_jobs={
            "gpu012": [
                {
                    "job_id": "4243",
                    "start": (T0 - timedelta(hours=1)).isoformat(),
                    "end": (T0 - timedelta(minutes=30)).isoformat(),
                }
            ]
        }
    )
    (e,), _ = run([event("process")], ended)
    assert e.standing is Standing.CAUSE and "no other job" in (e.owner_note or "")
    # exclusive: the job's
    (e,), _ = run([event("process")], job(exclusive=True, other_jobs=None))
    assert e.standing is Standing.CAUSE
    # not exclusive and nothing known about other jobs: shared
    (e,), _ = run([event("process")], job(other_jobs=None))
    assert e.standing is Standing.SUPPORT
    # nothing known at all: as before ownership existed, and the assessment says so
    (e,), result = run([event("process")], job(exclusive=None, other_jobs=None))
    assert e.standing is Standing.CAUSE and not result.checked


def test_what_was_logged_before_the_start_is_the_previous_jobs_unless_it_persists() -> None:
    early = event("node", at=-120.0)
    grace = event("node", at=-20.0)  # within the 30 s clock tolerance
    lasting = event("node", at=-120.0)
    lasting.persists = True
    own = event("process", at=-120.0, oom_memcg="/slurm/uid_1001/job_4242")
    kept, result = run([early, grace, lasting, own])
    assert [e.standing for e in kept] == [
        Standing.CONTEXT,
        Standing.CAUSE,
        Standing.CAUSE,
        Standing.CAUSE,
    ]
    assert early.earlier and result.counts["before_start"] == 1


def _kernel_recording(start: float, end: float) -> Coverage:
    return Coverage(
        stream=Stream.KERNEL,
        node="gpu012",
        status=CoverageStatus.OK,
        trust=Trust.TRUSTED,
        first_at=T0 + timedelta(seconds=start),
        last_at=T0 + timedelta(seconds=end),
    )


def test_a_kernel_line_only_syslog_has_is_forged_when_the_kernel_log_was_recording() -> None:
    forged = event("gpu", stream=Stream.SYSLOG, trusted=False, device="0000:18:00", name="gpu.xid")
    kept, result = run([forged], coverage=[_kernel_recording(-3600, 3600)])
    assert kept[0].standing is Standing.CONTEXT and (kept[0].owner_note or "").startswith("forged")
    assert result.counts["forged"] == 1
    # the kernel log stopped before the line: it cannot say; untrusted, but not called forged
    forged = event("gpu", stream=Stream.SYSLOG, trusted=False, device="0000:18:00", name="gpu.xid")
    kept, _ = run([forged], coverage=[_kernel_recording(-3600, 100)])
    assert kept[0].standing is Standing.CAUSE and not kept[0].trusted
    # another program's line is not claimed to be the kernel's
    other = event("node", stream=Stream.SYSLOG, trusted=False, ident="systemd")
    kept, _ = run([other], coverage=[_kernel_recording(-3600, 3600)])
    assert kept[0].standing is Standing.CAUSE


def test_the_syslog_copy_of_a_kernel_line_is_the_same_line() -> None:
    original = event("gpu", device="0000:18:00", name="gpu.xid", at=300.0)
    copy = event(
        "gpu", stream=Stream.SYSLOG, trusted=False, device="0000:18:00", name="gpu.xid", at=301.0
    )
    kept, result = run([original, copy], coverage=[_kernel_recording(-3600, 3600)])
    assert kept == [original] and result.counts["duplicate"] == 1


def test_the_jobs_own_output_is_the_jobs_except_a_gpu_it_was_not_given() -> None:
    out = event(None, stream=Stream.JOB_STDOUT, trusted=False, ident=None)
    smi = event("gpu", stream=Stream.JOB_STDOUT, trusted=False, ident=None, device="0000:3a:00")
    kept, _ = run([out, smi])
    assert [e.owner for e in kept] == [Owner.JOB, Owner.FOREIGN]
