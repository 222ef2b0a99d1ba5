"""The job-wide memory bound (docs/performance.md, "Bounded memory"): whatever the shape of the
evidence (many ranks on few nodes, ranks spread over many nodes, every line distinct), what is
kept is bounded by ``AnalysisOptions.evidence_memory``, node-side evidence is never crowded out
by job output, the verdict stays right and coverage says detail was dropped.

Scaled-down shapes of bench/memory.py with a small budget; they count kept items, not RSS.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from attribution import analyze as analyze_module
from attribution.analyze import AnalysisOptions, analyze, extract_events
from attribution.jobrecord import job_from_dict
from attribution.model import (
    Coverage,
    CoverageStatus,
    JobRecord,
    LogLine,
    SourceRef,
    Stream,
    SubDomain,
    Verdict,
)
from attribution.rules.compiled import RuleSet
from attribution.rules.extract import (
    EVENT_COST,
    FACT_COST,
    RULE_FLOOR,
    RULE_SHARE,
    TRUSTED_RESERVE,
    EventCollector,
)
from attribution.sources.prefix import parse_prefix

T0 = datetime(2026, 5, 20, 8, 0, tzinfo=UTC)
BUDGET = 2 << 20  # 2 MiB: a few thousand events
XID79 = (
    "2026-05-20T08:30:00+00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>',"
    " name=<unknown>, GPU has fallen off the bus."
)
REMOTE = (
    "[rank{rank}]: ncclRemoteError: A call failed possibly due to a network error or a remote"
    " process exiting prematurely."
)
WATCHDOG = (
    "[rank{rank}]:[E520 08:41:02.123456418 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught"
    " collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4661,"
    " NumelOut=4661, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)
INIT = (
    "{host}:{pid}:{pid} [{dev}] NCCL INFO comm 0x7f3a{rank:08x} rank {rank} nranks {nranks}"
    " cudaDev {dev} nvmlDev {dev} busId 18000 commId 0x5c1e9a7d41f2b3c0 - Init COMPLETE"
)
IB = (
    "{host}:{pid}:{pid} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from"
    " peer 10.12.24.106<50112> with status=12 opcode=1 len=0 vendor err 129 (Send)"
)


def _job(nodes: str) -> JobRecord:
    return job_from_dict(
        {
            "job_id": "7",
            "state": "FAILED",
            "exit_code": "1:0",
            "nodes": nodes,
            "start": "2026-05-20T08:00:00Z",
            "end": "2026-05-20T09:00:00Z",
        }
    )


def _lines(stream: Stream, node: str | None, texts: Iterable[str], path: str) -> Iterator[LogLine]:
    for i, raw in enumerate(texts, 1):
        p = parse_prefix(raw, reference=T0)
        yield LogLine(
            stream, node, p.text, raw, SourceRef(path, i), p.time, p.host, p.rank, p.pid, p.device
        )


def _kernel(node: str) -> Iterator[LogLine]:
    return _lines(Stream.KERNEL, node, [XID79.format(node=node)], f"nodes/{node}/kern.log")


def _coverage(job: JobRecord) -> list[Coverage]:
    ok = CoverageStatus.OK
    out = [Coverage(Stream.JOB_STDOUT, None, ok, files=("job/stdout.log",))]
    out += [Coverage(Stream.KERNEL, n, ok, files=(f"nodes/{n}/kern.log",)) for n in job.nodes]
    return out


def _diagnose(
    job: JobRecord,
    lines: Iterable[LogLine],
    ruleset: RuleSet,
    monkeypatch: pytest.MonkeyPatch,
    budget: int = BUDGET,
) -> tuple[EventCollector, Verdict]:
    """The collector (what was kept) and the verdict of one pass over ``lines``."""
    kept: list[EventCollector] = []

    def collect(*args: Any, **kwargs: Any) -> EventCollector:
        kept.append(extract_events(*args, **kwargs))
        return kept[0]

    monkeypatch.setattr(analyze_module, "extract_events", collect)
    options = AnalysisOptions(evidence_memory=budget)
    verdict = analyze(job, lines, ruleset, coverage=_coverage(job), options=options)
    return kept[0], verdict


def _bounded(collector: EventCollector, budget: int = BUDGET) -> None:
    """Kept items are bounded by the budget (each event costs at least ``EVENT_COST``, each
    fact ``FACT_COST``), beyond the floor of ``RULE_FLOOR`` events per extractor and side."""
    floor = RULE_FLOOR * len({e.rule for e in collector.events})
    assert len(collector.events) <= budget // EVENT_COST + floor
    identity = collector.identity
    facts = len(identity.rank_node) + len(identity.task_node) + len(identity.rank_task)
    facts += sum(len(p) for p in collector.pids.values())
    assert facts <= budget // FACT_COST
    assert collector.used[False] <= budget - budget // TRUSTED_RESERVE + floor * 4 * EVENT_COST
    assert collector.used[True] + collector.used[False] <= budget + floor * 4 * EVENT_COST


def _folded(verdict: Verdict, stream: Stream = Stream.JOB_STDOUT) -> int:
    return sum(
        int(n.args["count"])
        for c in verdict.coverage
        if c.stream is stream
        for n in c.notes
        if n.code == "folded"
    )


def _xid_verdict(verdict: Verdict, node: str) -> None:
    assert verdict.cause is not None and verdict.cause.id == "gpu-fell-off-bus"
    assert verdict.sub_domain is SubDomain.HARDWARE
    assert [r.node for r in verdict.responsible] == [node]


def test_20000_ranks_on_2_nodes_keep_bounded_detail(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job("n[1-2]")
    ranks = 20_000

    def output() -> Iterator[str]:
        for rank in range(ranks):
            host = f"n{rank * 2 // ranks + 1}"
            yield INIT.format(host=host, pid=20_000 + rank, dev=rank % 8, rank=rank, nranks=ranks)
            yield REMOTE.format(rank=rank)

    lines = [*_lines(Stream.JOB_STDOUT, None, output(), "job/stdout.log"), *_kernel("n2")]
    collector, verdict = _diagnose(job, lines, ruleset, monkeypatch)
    _bounded(collector)
    # one extractor keeps at most a quarter of what job output may use (plus its floor)
    per_rule = (BUDGET - BUDGET // TRUSTED_RESERVE) // RULE_SHARE
    remote = [e for e in collector.events if e.name == "nccl.remote_error"]
    assert RULE_FLOOR < len(remote) <= per_rule // EVENT_COST + RULE_FLOOR
    # the node-side cause is kept although the job output came first, and every signal counted
    _xid_verdict(verdict, "n2")
    assert _folded(verdict) > 0
    chain = {c.event: c.count for c in verdict.symptom_chain}
    assert chain["nccl.remote_error"] == ranks  # every one counted
    # what was learnt of who is who is bounded too, and places the kept events of those ranks
    rank_node = collector.identity.rank_node
    assert 0 < len(rank_node) < ranks
    placed = [e for e in remote if e.rank in rank_node]
    assert placed and all(e.node == rank_node[e.rank] for e in placed if e.rank is not None)


def test_ranks_spread_over_many_nodes_are_bounded_too(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = 400  # 3,200 ranks, 8 per node: no per-node bound is reached
    job = _job(f"n[0001-{nodes:04d}]")
    budget = 512 << 10

    def output() -> Iterator[str]:
        for rank in range(nodes * 8):
            host, dev = f"n{rank // 8 + 1:04d}", rank % 8
            yield INIT.format(host=host, pid=20_000 + dev, dev=dev, rank=rank, nranks=nodes * 8)
            yield IB.format(host=host, pid=20_000 + dev, dev=dev)
            yield REMOTE.format(rank=rank)

    lines = [*_lines(Stream.JOB_STDOUT, None, output(), "job/stdout.log"), *_kernel("n0200")]
    collector, verdict = _diagnose(job, lines, ruleset, monkeypatch, budget)
    _bounded(collector, budget)
    assert len(collector.events) < nodes  # not one per node, not one per rank
    _xid_verdict(verdict, "n0200")
    assert _folded(verdict) > 0


def test_distinct_lines_from_hosts_outside_the_job_are_bounded(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job("n[1-4]")

    def output() -> Iterator[str]:
        for i in range(3_000):
            yield (
                f"x{i}:{10_000 + i}:{10_000 + i} [{i % 8}] misc/socket.cc:538 NCCL WARN Net : Call"
                f" to recv from 10.12.{i % 8}.{i % 250}<{i}> failed : Connection reset by peer"
                f" (request {i})"
            )
            yield f"n{i % 4 + 1}:{i}:{i} [0] NCCL WARN Cuda failure 'unspecified launch' ({i})"

    lines = [*_kernel("n3"), *_lines(Stream.JOB_STDOUT, None, output(), "job/stdout.log")]
    collector, verdict = _diagnose(job, lines, ruleset, monkeypatch, 512 << 10)
    _bounded(collector, 512 << 10)
    assert set(collector.pids) <= set(job.nodes)  # no other node's log is read
    assert len(collector.folded_beyond) <= 2  # per stream, not per host
    _xid_verdict(verdict, "n3")
    assert _folded(verdict) > 0


def test_a_root_cause_printed_after_a_flood_is_kept(
    ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job("n[1-2]")
    flood = [REMOTE.format(rank=r) for r in range(3_000)]
    flood += [WATCHDOG.format(rank=r) for r in range(3_000)]
    root = (
        "[rank17]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    ).strip()
    lines = list(_lines(Stream.JOB_STDOUT, None, [*flood, root], "job/stdout.log"))
    collector, verdict = _diagnose(job, lines, ruleset, monkeypatch, budget=512 << 10)
    _bounded(collector, 512 << 10)
    assert any(e.name == "cuda.illegal_address" for e in collector.events)
    assert verdict.cause is not None and verdict.cause.id == "illegal-memory-access"
    assert _folded(verdict) > 0


def test_job_output_cannot_crowd_out_node_logs(ruleset: RuleSet) -> None:
    """Floods of job output from several extractors use at most three quarters of the budget:
    the trusted kernel log read after them keeps what it would keep alone."""
    budget = 1 << 20
    options = AnalysisOptions(evidence_memory=budget)
    job = _job("n[1-2]")
    flood = []
    for rank in range(1_000):
        flood += [REMOTE.format(rank=rank), WATCHDOG.format(rank=rank)]
        flood.append(IB.format(host=f"h{rank}", pid=rank, dev=0))
        flood.append(f"h{rank}:1:1 [0] NCCL WARN Cuda failure 'x' ({rank})")
    kernel = [
        f"2026-05-20T08:{10 + i % 40:02d}:00+00:00 n{i % 2 + 1} kernel: NVRM: Xid"
        f" (PCI:0000:{i:02x}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
        for i in range(60)
    ]

    def node_logs() -> list[LogLine]:
        return [
            *_lines(Stream.KERNEL, "n1", kernel[0::2], "nodes/n1/kern.log"),
            *_lines(Stream.KERNEL, "n2", kernel[1::2], "nodes/n2/kern.log"),
        ]

    alone = extract_events(job, node_logs(), ruleset, options)
    after = extract_events(
        job,
        [*_lines(Stream.JOB_STDOUT, None, flood, "job/stdout.log"), *node_logs()],
        ruleset,
        options,
    )
    share = budget - budget // TRUSTED_RESERVE
    assert after.used[False] <= share + RULE_FLOOR * 2 * EVENT_COST * 6  # six extractors' floors
    assert after.folded_beyond[(Stream.JOB_STDOUT, None)] > 0
    xids = [e for e in after.events if e.stream is Stream.KERNEL]
    assert len(xids) == len(alone.events) == 60
