"""A job of thousands of nodes costs what its nodes cost, not their square (issue 17).

Not timed: the cost per node is measured by ``bench/job.py --nodes 1000,...,16000``. These tests
pin what made it quadratic once (a node set rebuilt for every file read, every node directory
resolved path component by path component) and check that a 16,000-node job still gets its
verdict, its coverage and its views.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from rich.console import Console

import attribution.bundle
from attribution.bundle import diagnose_bundle, load_bundle
from attribution.hostlist import compress, expand
from attribution.model import CoverageStatus, Stream, SubDomain
from attribution.render import verdict_view
from attribution.rules.compiled import RuleSet
from attribution.sources import textlog
from attribution.sources.readahead import read_sources
from attribution.sources.specs import ReadContext, SourceSpec

NODES = 16_000
BAD = "node08001"
XID = (
    "May 20 11:00:00 {node} kernel: [1641600.000000] NVRM: Xid (PCI:0000:91:00): 79, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)
CHATTER = "May 20 {hh}:00:00 {node} systemd[1]: Started Session {i} of User slurm.\n"


def _job(count: int) -> dict[str, object]:
    return {
        "cluster": "big",
        "job_id": "777",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": f"node[00001-{count:05d}]",
        "start": "2026-05-20T08:00:00+00:00",
        "end": "2026-05-20T14:00:00+00:00",
        "exclusive": True,
    }


def _big_bundle(root: Path, count: int, with_logs: int) -> Path:
    """``count`` nodes in the job; every ``count // with_logs``-th node (and the bad one) has a
    directory with a tiny kernel log; the job output ends with the NCCL errors of a lost peer."""
    (root / "job").mkdir(parents=True)
    (root / "job.json").write_text(json.dumps(_job(count)))
    lines = [
        f"node{r:05d}:{3000 + r}:{3100 + r} [0] misc/socket.cc:538 NCCL WARN Net : Connection "
        f"closed by remote peer {BAD}<{40000 + r}>\n"
        for r in range(1, 33)
    ]
    (root / "job" / "stdout.log").write_text("".join(lines))
    step = max(1, count // with_logs)
    for i in sorted({*range(1, count + 1, step), int(BAD[4:])} & {*range(1, count + 1)}):
        node = f"node{i:05d}"
        (root / "nodes" / node).mkdir(parents=True)
        text = "".join(CHATTER.format(hh=f"{h:02d}", node=node, i=h) for h in (9, 10, 12))
        if node == BAD:
            text = text.replace("May 20 12:", XID.format(node=node) + "May 20 12:", 1)
        (root / "nodes" / node / "kern.log").write_text(text)
    return root


def test_a_16000_node_job_gets_its_verdict_coverage_and_views(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    bundle = _big_bundle(tmp_path / "big", NODES, 64)
    _, verdict = diagnose_bundle(bundle, ruleset)
    assert verdict.sub_domain is SubDomain.HARDWARE
    assert verdict.cause is not None and verdict.cause.id == "gpu-fell-off-bus"
    assert [r.node for r in verdict.responsible] == [BAD]
    kernel = {c.node: c for c in verdict.coverage if c.stream is Stream.KERNEL}
    # the 64 nodes with a log have their own entries; the 15,936 without one share an entry
    # whose node is their host list (bundle.FOLD_NODES)
    (rest,) = [c for c in kernel.values() if "nodes_folded" in c.codes]
    assert len(kernel) == 64 + 1
    assert kernel[BAD].status is CoverageStatus.OK and rest.status is CoverageStatus.MISSING
    assert rest.node is not None and len(expand(rest.node)) == NODES - 64
    assert "node00002" in expand(rest.node) and BAD not in expand(rest.node)
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(verdict_view(verdict, verbose=True))
    text = out.getvalue()
    assert f"{NODES - 64} nodes of the job" in text  # the folded entry's note
    assert "node00001-00250" not in text and "00252-00500" in text  # the host list, whole
    assert len(text.splitlines()) < 400


def test_reading_never_rebuilds_the_job_node_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ReadContext`` carries the job's nodes as a frozenset made once: the source reader of
    each file must not make a set of them again (48,000 sources of a 16,000-node job)."""
    nodes = tuple(f"node{i:05d}" for i in range(1, 2001))
    ctx = ReadContext(job_nodes=nodes)
    assert ctx.node_set == frozenset(nodes)
    made = ctx.node_set
    rebuilt: list[int] = []

    def counting(kind: type) -> object:
        def build(*args: object) -> object:
            if args and isinstance(args[0], tuple) and len(args[0]) == len(nodes):
                rebuilt.append(len(args[0]))
            return kind(*args)

        return build

    monkeypatch.setattr(textlog, "set", counting(set), raising=False)
    monkeypatch.setattr(textlog, "frozenset", counting(frozenset), raising=False)
    specs = []
    for node in nodes[:200]:
        path = tmp_path / f"{node}.log"
        path.write_text(CHATTER.format(hh="09", node=node, i=1) * 3)
        specs.append(SourceSpec(Stream.SYSLOG, node, [path]))
    readers, lines = read_sources(specs, ctx)
    assert len(list(lines)) == 0 or all(r.coverages() for r in readers)
    assert rebuilt == []
    assert ctx.node_set is made
    # the set follows the node list if a caller changes it
    ctx.job_nodes = ("a", "b")
    assert ctx.node_set == frozenset({"a", "b"})


def test_loading_a_bundle_does_not_resolve_each_node_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node directories listed as plain directories inside the bundle are not resolved again
    (resolving walks every path component: seconds at 16,000 nodes); links still are."""
    bundle = _big_bundle(tmp_path / "b", 600, 600)
    (bundle / "nodes" / "node00002" / "kern.log").unlink()
    (bundle / "nodes" / "node00002" / "kern.log").symlink_to(tmp_path / "elsewhere.log")
    calls: list[Path] = []
    real = attribution.bundle.inside_bundle

    def counted(root: Path, path: Path) -> bool:
        calls.append(path)
        return real(root, path)

    monkeypatch.setattr(attribution.bundle, "inside_bundle", counted)
    loaded = load_bundle(bundle)
    assert len(calls) < 10, calls[:10]
    assert any(p.name == "kern.log" for p in calls)  # the link was checked
    kernel = [s for s in loaded.specs if s.stream is Stream.KERNEL]
    assert len(kernel) == 600
    left_out = [n.code for s in kernel if s.node == "node00002" for n in s.notes]
    assert left_out == ["link_out_of_bundle"]
    assert next(s for s in kernel if s.node == "node00003").display == ["nodes/node00003/kern.log"]


def test_compress_gives_clustershells_text() -> None:
    """``compress`` folds runs of numbered names itself before ClusterShell: the text must be
    what ClusterShell gives for the names as they are."""
    rng = random.Random(17)
    prefixes = ["gpu", "node", "n", "a-b", "x.y", "c_", "r1n", "login", "Gpu-a"]
    for _ in range(500):
        names = []
        for _ in range(rng.randint(1, 50)):
            prefix, width, value = rng.choice(prefixes), rng.randint(0, 5), rng.randint(0, 1200)
            shape = rng.random()
            if shape < 0.05:
                names.append(prefix)
            elif shape < 0.1:
                names.append(f"{prefix}{value}x")
            elif shape < 0.13:
                names.append(f"{prefix}{value:0{width}d}.dom")
            else:
                names.append(f"{prefix}{value:0{width}d}")
        assert compress(names) == str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP)), names
    many = [f"node{i:05d}" for i in range(1, NODES + 1) if i != 77]
    assert compress(many) == "node[00001-00076,00078-16000]"
    assert compress(["gpu٣"]) == str(NodeSet.fromlist(["gpu٣"], resolver=RESOLVER_NOGROUP))


def test_the_workers_collection_of_a_16000_node_job_folds_nodes_without_logs(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """The worker's own path (``collect`` from the site's path templates, not a bundle): the
    nodes without a log share one missing entry per stream, the XID on the bad node decides.
    Before, each of the 16,000 nodes had two entries (200,000 nodes: 17 s and 930 MiB)."""
    from datetime import UTC, datetime

    from attribution.analyze import analyze
    from attribution.collect import collect
    from attribution.config import Config
    from attribution.model import JobRecord
    from attribution.scan import read_context

    bundle = _big_bundle(tmp_path / "big", NODES, 64)
    job = JobRecord(
        job_id="777",
        cluster="big",
        nodes=tuple(expand(f"node[00001-{NODES:05d}]")),
        state="FAILED",
        exit_code="1:0",
        start=datetime(2026, 5, 20, 8, tzinfo=UTC),
        end=datetime(2026, 5, 20, 14, tzinfo=UTC),
        exclusive=True,
    )
    config = Config.model_validate(
        {"logs": {"kernel": [str(bundle / "nodes/{node}/kern.log")], "syslog": []}}
    )
    with collect(job, config) as col:
        assert len(col.specs) < 64 + 10
        readers, lines = read_sources(col.specs, read_context(job, ruleset))
        verdict = analyze(
            job,
            lines,
            ruleset,
            coverage=lambda: [col.adjust(c) for r in readers for c in r.coverages()],
        )
    assert verdict.cause is not None and verdict.cause.id == "gpu-fell-off-bus"
    assert [r.node for r in verdict.responsible] == [BAD]
    kernel = [c for c in verdict.coverage if c.stream is Stream.KERNEL]
    (rest,) = [c for c in kernel if "nodes_folded" in c.codes]
    assert len(kernel) == 64 + 1 and rest.codes == ("no_match", "nodes_folded")
    assert rest.node is not None and len(expand(rest.node)) == NODES - 64
    assert BAD not in expand(rest.node)
