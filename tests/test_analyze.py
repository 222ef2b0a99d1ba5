"""analyze(): windows, folding, de-duplication, ranking, ambiguity, terminal states, the verdict's fields."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.analyze import AnalysisOptions, analyze
from attribution.jobrecord import job_from_dict
from attribution.model import (
    ChainRole,
    LogLine,
    SourceRef,
    Stream,
    SubDomain,
    TerminalState,
    verdict_to_dict,
)
from attribution.rules.compiled import RuleSet
from attribution.rules.loader import load_ruleset
from attribution.sources.prefix import parse_prefix

T0 = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)


def job(**kw: object):  # type: ignore[no-untyped-def]
    data: dict[str, object] = {
        "job_id": "1",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": "n[1-2]",
        "start": "2025-06-01T10:00:00Z",
        "end": "2025-06-01T11:00:00Z",
        "user": "u",
        "uid": 1000,
    }
    data.update(kw)
    return job_from_dict(data)


def lines(
    stream: Stream,
    node: str | None,
    texts: Iterable[str],
    path: str = "f",
    trusted: bool | None = None,
) -> list[LogLine]:
    out = []
    for i, raw in enumerate(texts, 1):
        p = parse_prefix(raw, reference=T0)
        out.append(
            LogLine(
                stream,
                node,
                p.text,
                raw,
                SourceRef(path, i),
                p.time,
                p.host,
                p.rank,
                p.pid,
                p.device,
                p.task,
                trusted=trusted,
            )
        )
    return out


def k(ts: datetime, msg: str) -> str:
    return f"{ts.strftime('%Y-%m-%dT%H:%M:%S')}+0000 n1 kernel: {msg}"


XID79 = (
    "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


XID13 = "NVRM: Xid (PCI:0000:91:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x50"
XID74 = (
    "NVRM: Xid (PCI:0000:91:00): 74, pid=4242, name=python, NVLink: fatal error detected on link 3"
)


def test_event_outside_the_window_is_ignored_not_blamed(ruleset: RuleSet) -> None:
    ev = lines(Stream.KERNEL, "n1", [k(T0 - timedelta(hours=2), XID13)])
    v = analyze(job(), ev, ruleset)
    assert v.sub_domain is SubDomain.UNATTRIBUTED
    assert v.ignored and v.ignored[0].event == "gpu.xid" and v.ignored[0].note
    inside = analyze(
        job(), lines(Stream.KERNEL, "n1", [k(T0 + timedelta(minutes=5), XID79)]), ruleset
    )
    assert inside.sub_domain is SubDomain.HARDWARE and [r.node for r in inside.responsible] == [
        "n1"
    ]
    # an XID that does not last (74) just before the start was the node's state before the job
    margin = analyze(
        job(), lines(Stream.KERNEL, "n1", [k(T0 - timedelta(minutes=4), XID74)]), ruleset
    )
    assert margin.sub_domain is SubDomain.UNATTRIBUTED
    assert margin.symptom_chain[0].note and "before the job started" in margin.symptom_chain[0].note
    narrow = analyze(
        job(),
        lines(Stream.KERNEL, "n1", [k(T0 - timedelta(minutes=4), XID74)]),
        ruleset,
        options=AnalysisOptions(margin_before=60),
    )
    assert narrow.sub_domain is SubDomain.UNATTRIBUTED and narrow.ignored


def test_a_gpu_that_fell_off_the_bus_before_the_job_is_still_broken(ruleset: RuleSet) -> None:
    """XID 79 lasts until the node reboots: logged two hours before the start, it is this job's
    evidence when the job was given that GPU (or nothing says which GPUs it had), and the
    node's history when the job's GPUs are known and that GPU is not one of them."""
    ev = lines(Stream.KERNEL, "n1", [k(T0 - timedelta(hours=2), XID79)])
    v = analyze(job(), ev, ruleset)
    assert v.sub_domain is SubDomain.HARDWARE and [r.node for r in v.responsible] == ["n1"]
    mine = {
        "gres_detail": {"n[1-2]": "gpu:h100:1(IDX:1)"},
        "gpu_bus_ids": {"n[1-2]": ["0000:18:00.0", "0000:91:00.0"]},
        "exclusive": False,
        "other_jobs": {},
    }
    v = analyze(job(**mine), ev, ruleset)
    assert v.sub_domain is SubDomain.HARDWARE and [r.node for r in v.responsible] == ["n1"]
    assert v.symptom_chain[0].owner == "job"
    theirs = {**mine, "gres_detail": {"n[1-2]": "gpu:h100:1(IDX:0)"}}
    v = analyze(job(**theirs), ev, ruleset)
    assert v.sub_domain is SubDomain.UNATTRIBUTED and v.responsible == ()
    assert v.ignored and v.ignored[0].owner == "foreign"
    # a reboot between the XID and the job clears it
    boot = k(T0 - timedelta(hours=1), "Linux version 6.8.0-45-generic (buildd@lcy02) #115-Ubuntu")
    v = analyze(
        job(), lines(Stream.KERNEL, "n1", [k(T0 - timedelta(hours=2), XID79), boot]), ruleset
    )
    assert v.sub_domain is SubDomain.UNATTRIBUTED


@pytest.mark.slow
def test_repeats_fold_into_one_symptom_with_a_count(ruleset: RuleSet) -> None:
    texts = [
        f"n2:{100 + i % 7}:{200 + i % 7} [{i % 8}] NCCL WARN Net : Connection closed by remote peer n1<4242>"
        for i in range(50_000)
    ]
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, texts), ruleset)
    closed = [e for e in v.symptom_chain if e.event == "nccl.connection_closed"]
    assert len(closed) == 1 and closed[0].count == 50_000 and closed[0].nodes == ("n2",)


def test_the_same_kernel_line_in_kern_log_and_syslog_counts_once(ruleset: RuleSet) -> None:
    when = T0 + timedelta(minutes=5)
    kern = lines(Stream.KERNEL, "n1", [k(when, XID79)], "kern.log")
    sysl = lines(
        Stream.SYSLOG, "n1", [f"{when.strftime('%b %d %H:%M:%S')} n1 kernel: {XID79}"], "syslog"
    )
    v = analyze(job(), kern + sysl, ruleset)
    xid = [e for e in v.symptom_chain if e.event == "gpu.xid"]
    assert len(xid) == 1 and xid[0].count == 1


def test_hardware_before_app_errors_wins_and_app_before_hardware_wins(ruleset: RuleSet) -> None:
    xid = lines(Stream.KERNEL, "n1", [k(T0 + timedelta(minutes=30), XID79)])
    app = lines(
        Stream.JOB_STDOUT,
        None,
        [
            f"[{(T0 + timedelta(minutes=20)).strftime('%Y-%m-%d %H:%M:%S')},000] ValueError: bad batch"
        ],
    )
    v = analyze(job(), app + xid, ruleset)
    assert v.sub_domain is SubDomain.APPLICATION, v.summary
    assert any(a.cause.id == "gpu-fell-off-bus" and "after" in a.why_not for a in v.alternatives)
    app_late = lines(
        Stream.JOB_STDOUT,
        None,
        [
            f"[{(T0 + timedelta(minutes=31)).strftime('%Y-%m-%d %H:%M:%S')},000] ValueError: bad batch"
        ],
    )
    v2 = analyze(job(), app_late + xid, ruleset)
    assert v2.sub_domain is SubDomain.HARDWARE


def test_cancel_after_failure_is_a_failure(ruleset: RuleSet) -> None:
    out = [k(T0 + timedelta(minutes=10), XID79)]
    cancel = [
        f"slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT {(T0 + timedelta(minutes=59)).strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***"
    ]
    v = analyze(
        job(state="TIMEOUT", exit_code="0:0"),
        lines(Stream.KERNEL, "n1", out) + lines(Stream.JOB_STDOUT, None, cancel),
        ruleset,
    )
    assert v.terminal_state is TerminalState.FAIL and v.sub_domain is SubDomain.HARDWARE
    only_timeout = analyze(
        job(state="TIMEOUT", exit_code="0:0"), lines(Stream.JOB_STDOUT, None, cancel), ruleset
    )
    assert (
        only_timeout.terminal_state is TerminalState.TIMEOUT
        and only_timeout.sub_domain is SubDomain.APPLICATION
    )


def test_equal_rank_candidates_from_two_domains_are_ambiguous(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    for rid, dom, event in (
        ("tie-a", "hardware", "gpu.xid"),
        ("tie-b", "infrastructure", "fs.nfs_not_responding"),
    ):
        (site / f"{rid}.yaml").write_text(
            f"schema: 1\nid: {rid}\nkind: diagnosis\nversion: 1\ntitle: Tie candidate {rid}\n"
            f"description: A test rule with the highest priority.\npriority: 999\nsub_domain: {dom}\n"
            f"when:\n  any:\n    - {{event: {event}}}\nsummary: {rid} on {{node}}\n"
        )
    rs = load_ruleset([site])
    ev = lines(
        Stream.KERNEL,
        "n1",
        [
            "2025-06-01T10:10:00+00:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 63, pid=1, Row Remapper: New row marked for remapping, reset gpu to activate."
        ],
    ) + lines(
        Stream.KERNEL,
        "n2",
        ["2025-06-01T10:10:00+00:00 n2 kernel: nfs: server home01 not responding, still trying"],
    )
    v = analyze(job(), ev, rs)
    assert v.sub_domain is SubDomain.AMBIGUOUS
    assert v.cause is not None and v.cause.id == "ambiguous"
    assert {a.cause.id for a in v.alternatives} >= {"tie-b"} or {
        a.cause.id for a in v.alternatives
    } >= {"tie-a"}
    assert {r.node for r in v.responsible} == {"n1", "n2"}
    assert any("fits equally" in a.why_not for a in v.alternatives)


def test_nothing_recognised_is_unattributed_and_passed_is_pass(ruleset: RuleSet) -> None:
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, ["hello", "world"]), ruleset)
    assert (
        v.sub_domain is SubDomain.UNATTRIBUTED
        and v.terminal_state is TerminalState.FAIL
        and v.cause is None
    )
    p = analyze(
        job(state="COMPLETED", exit_code="0:0"),
        lines(Stream.KERNEL, "n1", [k(T0 + timedelta(minutes=5), XID79)]),
        ruleset,
    )
    assert p.terminal_state is TerminalState.PASS and p.sub_domain is SubDomain.NONE
    assert p.symptom_chain  # what was seen is still reported
    derived = analyze(job(state="COMPLETED", exit_code="0:0", derived_exit_code="7:0"), [], ruleset)
    assert derived.terminal_state is TerminalState.FAIL


def test_json_has_every_design_field(ruleset: RuleSet) -> None:
    v = analyze(
        job(),
        lines(Stream.KERNEL, "n1", [k(T0 + timedelta(minutes=5), XID79)]),
        ruleset,
        diagnosed_at=T0,
    )
    data = verdict_to_dict(v)
    for name in (
        "terminal_state",
        "sub_domain",
        "cause",
        "responsible",
        "summary",
        "action",
        "symptom_chain",
        "alternatives",
        "coverage",
        "job",
        "ruleset",
        "engine_version",
        "diagnosed_at",
        "window",
    ):
        assert name in data, name
    assert (
        set(data["cause"]) == {"id", "title", "rule"}
        and data["cause"]["rule"] == ruleset.rule("gpu-fell-off-bus").ref  # type: ignore[union-attr]
    )
    assert set(data["responsible"][0]) == {"node", "component", "device", "confirmed_by"}
    assert data["responsible"][0]["confirmed_by"] == "kernel"
    for name in ("suspects", "confidence", "ownership"):
        assert name in data, name
    assert data["confidence"]["level"] == "high" and data["confidence"]["reason"]
    entry = data["symptom_chain"][0]
    for name in (
        "first_at",
        "last_at",
        "symptom",
        "role",
        "nodes",
        "node_count",
        "count",
        "stream",
        "example",
        "source",
        "owner",
        "trust",
    ):
        assert name in entry
    # no GPU allocation in the record: an XID's GPU cannot be placed, and nothing says the node
    # was shared, so it counts as the job's (and the coverage says ownership was not checked)
    assert (entry["owner"], entry["trust"]) == ("unknown", "trusted")
    assert data["ownership"]["checked"] is False
    assert data["symptom_chain"][0]["role"] == ChainRole.ROOT.value
    assert set(data["ruleset"]) == {"version", "digest"}
    assert data["diagnosed_at"] == "2025-06-01T10:00:00Z"


TORCHRUN_ROOT = [
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-06-01_10:05:00",
    "  host      : n2.cluster.local",
    "  rank      : 5 (local_rank: 1)",
    "  exitcode  : 1 (pid: 4242)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
]


def test_a_rank_named_by_torchrun_root_cause_block_is_placed_on_its_host(
    ruleset: RuleSet,
) -> None:
    """CUDA 214 printed by [rank5] with no host: torchrun's summary says rank 5 ran on n2. Only
    the job's output says so: n2 is a suspect, not blamed, until a trusted source agrees."""
    out = ["[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered", *TORCHRUN_ROOT]
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, out), ruleset)
    assert v.sub_domain is SubDomain.HARDWARE
    assert v.responsible == ()
    assert [r.node for r in v.suspects] == ["n2"]
    assert v.confidence is not None and v.confidence.level == "low"
    assert v.summary.startswith("Unconfirmed:") and "drain" in (v.action or "")
    # the XID 48 in n2's kernel log confirms it
    xid48 = "NVRM: Xid (PCI:0000:91:00): 48, pid=4242, name=python, An uncorrectable double bit"
    kernel = lines(Stream.KERNEL, "n2", [k(T0 + timedelta(minutes=5), xid48).replace("n1", "n2")])
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, out) + kernel, ruleset)
    assert v.sub_domain is SubDomain.HARDWARE and [r.node for r in v.responsible] == ["n2"]


def test_a_node_less_anchor_blames_the_node_of_the_other_evidence(ruleset: RuleSet) -> None:
    """CUDA 802 from ranks we cannot place, and Fabric Manager failed on n1: n1 is to blame
    when the line that says so comes from a trusted source (a syslog the site trusts, or the
    journal's entries of root's processes); from general syslog n1 is only a suspect."""
    out = ["RuntimeError: CUDA error: system not yet initialized"]
    fm = [
        k(
            T0 - timedelta(minutes=2),
            "nvidia-fabricmanager.service: Failed with result 'exit-code'.",
        ).replace("kernel:", "systemd[1]:")
    ]
    trusted = lines(Stream.SYSLOG, "n1", fm, trusted=True)
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, out) + trusted, ruleset)
    assert v.cause is not None and v.cause.id == "fabricmanager-not-running"
    assert [r.node for r in v.responsible] == ["n1"]
    forgeable = lines(Stream.SYSLOG, "n1", fm)
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, out) + forgeable, ruleset)
    assert v.cause is not None and v.cause.id == "fabricmanager-not-running"
    assert v.responsible == () and [r.node for r in v.suspects] == ["n1"]
    # with nothing that names a node, nobody is blamed
    alone = analyze(job(), lines(Stream.JOB_STDOUT, None, out), ruleset)
    assert alone.cause is not None and alone.cause.id == "fabricmanager-not-running"
    assert alone.responsible == ()


def _ib(node: str, peer: str, status: int = 12) -> str:
    return (
        f"{node}:1:2 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        f"{peer}<40000> with status={status} opcode=0 len=0 vendor err 129 (Recv)"
    )


def test_ib_vote_never_blames_an_address_and_needs_one_standout_peer(ruleset: RuleSet) -> None:
    four = job(nodes="n[1-4]")
    # n1 and n2 both name 10.9.9.9, which no node of the job is known by
    unknown = [_ib("n1", "10.9.9.9"), _ib("n2", "10.9.9.9")]
    v = analyze(four, lines(Stream.JOB_STDOUT, None, unknown), ruleset)
    assert v.sub_domain is SubDomain.INFRASTRUCTURE
    assert v.responsible == () and "10.9.9.9" in v.summary
    # known through the job record's addresses: the peer is named, as a suspect (only the job's
    # own output names it)
    known = job(nodes="n[1-4]", node_addresses={"n3": ["10.9.9.9"]})
    v = analyze(known, lines(Stream.JOB_STDOUT, None, unknown), ruleset)
    assert v.responsible == () and [r.node for r in v.suspects] == ["n3"]
    # every node names its own ring neighbours: no suspect, the fabric's configuration
    ring = [_ib(f"n{i}", f"10.0.0.{(i % 4) + 1}") for i in range(1, 5)]
    ring += [_ib(f"n{i}", f"10.0.0.{((i - 2) % 4) + 1}") for i in range(1, 5)]
    v = analyze(four, lines(Stream.JOB_STDOUT, None, ring), ruleset)
    assert v.cause is not None and v.cause.id == "ib-fabric-unreachable"
    assert v.sub_domain is SubDomain.SYSTEM_SOFTWARE and v.responsible == ()
    # flush completions (status 5) are what every queue pair reports after teardown: no votes
    flush = [_ib("n1", "n3", 5), _ib("n2", "n3", 5), _ib("n4", "n3", 5)]
    v = analyze(four, lines(Stream.JOB_STDOUT, None, flush), ruleset)
    assert all(r.node != "n3" for r in v.responsible)


def test_srun_step_cancel_after_a_task_failed_is_not_a_cancel(ruleset: RuleSet) -> None:
    stamp = (T0 + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S")
    out = [f"slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT {stamp} ***"]
    failed = analyze(job(), lines(Stream.JOB_STDOUT, None, out), ruleset)
    assert failed.terminal_state is TerminalState.FAIL
    assert failed.cause is None or failed.cause.id != "cancelled"
    # offline, with no sacct state, the cancel line is still read as a cancel
    unknown = analyze(job(state=None), lines(Stream.JOB_STDOUT, None, out), ruleset)
    assert unknown.cause is not None and unknown.cause.id == "cancelled"
    assert unknown.terminal_state is TerminalState.CANCELLED


def test_nccl_info_lines_are_never_a_cause(ruleset: RuleSet) -> None:
    """NCCL_DEBUG=INFO reports what NCCL tried; a missing optional plugin is not an error."""
    out = [
        "gpu-f01:372815:372815 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so:"
        " cannot open shared object file: No such file or directory : when loading libnccl-net.so",
        "gpu-f01:372815:372815 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
    ]
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, out), ruleset)
    assert v.cause is None and v.sub_domain is SubDomain.UNATTRIBUTED
    # the same words outside an INFO line are the job's missing library
    bare = [
        "python: error while loading shared libraries: libcudart.so.12: cannot open"
        " shared object file: No such file or directory"
    ]
    v = analyze(job(), lines(Stream.JOB_STDOUT, None, bare), ruleset)
    assert v.cause is not None and v.cause.id == "missing-library"


def test_an_untimed_traceback_is_dated_by_the_next_timed_line(ruleset: RuleSet) -> None:
    """The KeyError has no timestamp, but torchrun's timed line right after it bounds it: the
    XID 79 logged four minutes later did not kill the job."""
    after = T0 + timedelta(minutes=30)
    out = [
        "[rank6]: KeyError: 'shard-00417/000933'",
        f"E{after.strftime('%m%d %H:%M:%S')}.000000 140 torch/distributed/elastic/multiprocessing/"
        "api.py:897] failed (exitcode: 1) local_rank: 2 (pid: 4242) of binary: /usr/bin/python3",
    ]
    kern = [k(after + timedelta(minutes=4), XID79)]
    v = analyze(
        job(), lines(Stream.JOB_STDOUT, None, out) + lines(Stream.KERNEL, "n2", kern), ruleset
    )
    assert v.cause is not None and v.cause.id == "python-error", v.summary
    assert any("after python-error" in a.why_not for a in v.alternatives)
    # without the timed line there is nothing to order it by: the hardware fault stands
    v = analyze(
        job(), lines(Stream.JOB_STDOUT, None, out[:1]) + lines(Stream.KERNEL, "n2", kern), ruleset
    )
    assert v.cause is not None and v.cause.id == "gpu-fell-off-bus"


def test_slurmctld_node_loss_is_dated_back_by_its_detection_lag(ruleset: RuleSet) -> None:
    """slurmctld notices a dead node only after SlurmdTimeout: peers' IB errors logged four
    minutes before its message are the node's loss, not an earlier fault."""
    lost = T0 + timedelta(minutes=20)
    ctld = [
        f"[{(lost + timedelta(minutes=4)).strftime('%Y-%m-%dT%H:%M:%S')}.101] error: Nodes n3 not"
        " responding, setting DOWN"
    ]
    peers = [
        _ib("n1", "10.9.9.9"),
        _ib("n2", "10.9.9.9"),
        f"[rank0]:[E{lost.strftime('%m%d %H:%M:%S')}.000000000 ProcessGroupNCCL.cpp:1595]"
        " [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated"
        " with exception: NCCL error: remote process exited or there was a network error",
    ]
    v = analyze(
        job(nodes="n[1-3]"),
        lines(Stream.JOB_STDOUT, None, peers) + lines(Stream.SLURMCTLD, None, ctld),
        ruleset,
    )
    assert v.cause is not None and v.cause.id == "node-not-responding", v.summary
    assert [r.node for r in v.responsible] == ["n3"]


def test_a_fallback_rule_gives_way_to_the_specific_rule_on_the_same_evidence(
    ruleset: RuleSet,
) -> None:
    """gpu-hardware-xid is `fallback: true`: an XID a specific rule explains (79) is that
    rule's alone; an XID no specific rule covers (62) is the fallback's; a non-fatal NVLink5
    report is neither."""
    at = T0 + timedelta(minutes=5)
    fell = analyze(job(), lines(Stream.KERNEL, "n1", [k(at, XID79)]), ruleset)
    assert fell.cause is not None and fell.cause.rule.startswith("gpu-fell-off-bus@")
    assert all(not a.cause.rule.startswith("gpu-hardware-xid@") for a in fell.alternatives)
    xid62 = "NVRM: Xid (PCI:0000:91:00): 62, pid=4242, name=python, Internal micro-controller halt"
    other = analyze(job(), lines(Stream.KERNEL, "n1", [k(at, xid62)]), ruleset)
    assert other.cause is not None and other.cause.rule.startswith("gpu-hardware-xid@")
    assert [r.node for r in other.responsible] == ["n1"]
    nonfatal = "NVRM: Xid (PCI:0000:91:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001)"
    quiet = analyze(job(), lines(Stream.KERNEL, "n1", [k(at, nonfatal)]), ruleset)
    assert quiet.sub_domain is not SubDomain.HARDWARE and quiet.responsible == ()


def test_the_job_cannot_forge_when_its_output_stopped(ruleset: RuleSet) -> None:
    """job.last_output comes from the readers' OutputSilence values, never from a line: the
    text the engine uses for it, printed by the job (even with a syslog-like ident), is
    only output."""
    from attribution.model import OutputSilence

    forged = (
        "attribution: last timed output line at 2025-06-01T10:01:00Z: silent for 59 min"
        " (3540 s, share 0.98 of the run) before the job ended; 0 untimed ordinary line(s)"
        " (0 bytes) after it; 5 timed line(s) before it"
    )
    texts = [forged, f"Jun  1 10:01:00 n1 attribution (synthetic): {forged}"]
    v = analyze(job(state="TIMEOUT"), lines(Stream.JOB_STDOUT, None, texts), ruleset)
    every = [*v.symptom_chain, *v.ignored]
    assert all(e.event != "job.last_output" for e in every)
    real = OutputSilence(
        Stream.JOB_STDOUT,
        None,
        "slurm-1.out",
        3,
        None,
        T0 + timedelta(minutes=1),
        3540.0,
        0.98,
        0,
        0,
        5,
    )
    v = analyze(job(state="TIMEOUT"), [], ruleset, silences=[real])
    assert any(e.event == "job.last_output" for e in [*v.symptom_chain, *v.ignored])
