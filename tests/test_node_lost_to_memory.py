"""A node Slurm lost around a global OOM kill (rules node-lost-around-oom, node-lost-after-oom,
node-lost-to-job-memory) and the two engine pieces they use: ``owner`` in a condition's
``where`` and ``nodes: named`` in a sequence correlation.

The real reports behind them are blind bundles (round 17 ``n-nodefail-was-task-own-memory``,
round 18 ``n-osc-2node-job-exhausts-memory-and-swap``); these tests keep the shared-node variants
honest: another job's OOM, or a line the job printed, never makes the job's memory the cause.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.bundle import diagnose_bundle
from attribution.jobrecord import job_from_dict
from attribution.model import Event, EventRole, Owner, SourceRef, Stream, SubDomain
from attribution.rules.compiled import RuleSet
from attribution.rules.conditions import selects
from attribution.rules.correlate import build_identity, correlate
from attribution.rules.schema import Selector, SequenceCorrelation

from .conftest import BLIND

OWN = BLIND / "round17" / "n-nodefail-was-task-own-memory"
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _event(name: str, node: str | None, at: float, stream: Stream, **fields: object) -> Event:
    return Event(
        name=name,
        rule="test@1",
        stream=stream,
        node=node,
        time=T0 + timedelta(seconds=at),
        fields=dict(fields),
        source=SourceRef(f"{stream.value}.log", 1),
        text=name,
        role=EventRole.ROOT,
        label=name,
    )


@pytest.mark.parametrize(
    ("owner", "claimed", "picked"),
    [
        (Owner.JOB, False, True),
        (Owner.JOB, True, False),  # only the job's own output said it was the job's
        (Owner.FOREIGN, False, False),
        (Owner.UNKNOWN, False, False),
        (None, False, False),  # not assessed
    ],
)
def test_where_owner_tests_whose_the_event_is(
    owner: Owner | None, claimed: bool, picked: bool
) -> None:
    event = _event("kernel.oom_kill", "n1", 0, Stream.KERNEL, scope="Out of memory")
    event.owner, event.owner_claimed = owner, claimed
    selector = Selector.model_validate({"event": ["kernel.oom_kill"], "where": {"owner": "job"}})
    assert selects(selector, event) is picked


def test_nodes_named_pairs_a_host_list_line_only_when_each_job_node_has_a_cause() -> None:
    job = job_from_dict(
        {"job_id": "1", "nodes": "n[1-3]", "start": T0.isoformat(), "end": "2026-01-01T14:00:00Z"}
    )

    def findings(ooms: list[str], named: str, nodes: str = "named") -> list[str]:
        events = [_event("kernel.oom_kill", node, 0, Stream.KERNEL) for node in ooms]
        events.append(
            _event("slurmctld.node_not_responding", None, 200, Stream.SLURMCTLD, named_nodes=named)
        )
        for i, e in enumerate(events):
            e.seq, e.during_job = i, True
        rule = SequenceCorrelation.model_validate({**RULE, "nodes": nodes})
        got = correlate([rule], events, job, build_identity(job, events))
        return sorted(n for f in got for n in f.nodes)

    assert findings(["n1", "n2", "n3"], "n1,n2") == ["n1", "n2"]  # n3's OOM: not named
    assert findings(["n1"], "n1,n2") == []  # n2's loss has no cause: the line is not explained
    assert findings(["n1"], "n1,x99") == ["n1"]  # x99 is no node of the job
    assert findings(["n1", "n2"], "n1,n2", nodes="same") == []  # a host list is no single node


RULE = {
    "schema": 1,
    "id": "t",
    "kind": "correlation",
    "version": 1,
    "title": "OOM then lost",
    "description": "An OOM kill paired with a node loss.",
    "status": "test",
    "severity": "error",
    "op": "sequence",
    "cause": {"event": ["kernel.oom_kill"]},
    "effect": {"event": ["slurmctld.node_not_responding"]},
    "order": "any",
    "within": 600,
    "finding": "f",
}


def test_the_jobs_own_global_oom_then_the_node_lost_blames_no_node(ruleset: RuleSet) -> None:
    _, verdict = diagnose_bundle(OWN, ruleset, workers=1)
    assert verdict.cause is not None and verdict.cause.id == "node-lost-to-job-memory"
    assert verdict.sub_domain is SubDomain.APPLICATION
    assert verdict.responsible == () and "No node is at fault" in verdict.summary


def _variant(tmp_path: Path, old: str, new: str, record: dict[str, object] | None = None) -> Path:
    bundle = tmp_path / "b"
    shutil.copytree(OWN, bundle)
    kernel = bundle / "nodes" / "c0238" / "kernel.log"
    text = kernel.read_text()
    assert old in text
    kernel.write_text(text.replace(old, new))
    (bundle / "expected.yaml").unlink()
    if record:
        data = json.loads((bundle / "job.json").read_text())
        data.update(record)
        (bundle / "job.json").write_text(json.dumps(data))
    return bundle


def test_another_jobs_oom_on_a_shared_node_is_not_this_jobs_memory(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """The same node loss, but the OOM killed another user's job on the shared node."""
    bundle = _variant(
        tmp_path,
        "task_memcg=/slurm/uid_41188/job_2613377/step_batch/task_0,task=dorado,pid=77120,uid=41188",
        "task_memcg=/slurm/uid_5000/job_2613300/step_0/task_0,task=dorado,pid=77120,uid=5000",
        {"other_jobs": {"c0238": [{"job_id": "2613300", "start": "2024-01-30T12:00:00"}]}},
    )
    (bundle / "nodes" / "c0238" / "kernel.log").write_text(
        (bundle / "nodes" / "c0238" / "kernel.log").read_text().replace("UID:41188", "UID:5000")
    )
    _, verdict = diagnose_bundle(bundle, ruleset, workers=1)
    assert verdict.cause is not None and verdict.cause.id != "node-lost-to-job-memory"
    assert verdict.sub_domain is not SubDomain.APPLICATION


def test_a_cgroup_oom_of_the_job_is_not_a_node_wide_exhaustion(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    bundle = _variant(
        tmp_path,
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/slurm/uid_41188/job_2613377,",
    )
    _, verdict = diagnose_bundle(bundle, ruleset, workers=1)
    assert verdict.cause is not None
    assert verdict.cause.id not in ("node-lost-to-job-memory", "node-lost-after-oom")


def test_another_jobs_global_oom_beside_the_jobs_own_is_not_this_jobs_memory(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """Both a neighbour's process and the job's were OOM-killed before the node was lost: the
    neighbour's kill (which may never be a cause) still rules out "the job used up the node"."""
    hog = (
        "2024-01-30T14:16:40.100000-06:00 c0238 kernel: oom-kill:constraint=CONSTRAINT_NONE,"
        "nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/slurm/uid_5000/"
        "job_2613999/step_0/task_0,task=hog,pid=90001,uid=5000\n"
        "2024-01-30T14:16:40.100100-06:00 c0238 kernel: Out of memory: Killed process 90001 (hog)"
        " total-vm:201433812kB, anon-rss:185110320kB, file-rss:0kB, shmem-rss:0kB, UID:5000"
        " pgtables:371884kB oom_score_adj:0\n"
    )
    first = "2024-01-30T14:16:52.331870-06:00 c0238 kernel: dorado invoked oom-killer"
    bundle = _variant(
        tmp_path,
        first,
        hog + first,
        {"other_jobs": {"c0238": [{"job_id": "2613999", "start": "2024-01-30T12:00:00"}]}},
    )
    _, verdict = diagnose_bundle(bundle, ruleset, workers=1)
    assert verdict.cause is not None and verdict.cause.id == "node-lost-after-oom"
    assert verdict.sub_domain is SubDomain.INFRASTRUCTURE
