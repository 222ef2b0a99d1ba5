"""The fleet view (attribution.fleet): node ranking, domains, incidents, links, silent nodes,
GPU history and drain suggestions, on hand-built runs whose answer is known; the store's
fleet rows from real verdicts; the CLI on a fleet history directory."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.errors import AttributionError
from attribution.fleet import (
    Blame,
    Fleet,
    FleetJob,
    FleetOptions,
    FleetReport,
    GpuMark,
    Truth,
    score,
)
from attribution.fleetfile import read_jobs
from attribution.hostlist import compress
from attribution.rules.compiled import RuleSet
from attribution.store import Store
from attribution.topology import TopologyError, parse_groups, parse_topology

from .conftest import CASES, Diagnoses

T0 = datetime(2026, 11, 2, tzinfo=UTC)
NODES = [f"gpu{i:03d}" for i in range(1, 65)]
USERS = [f"u{i:02d}" for i in range(20)]


def background(rng: random.Random, count: int = 4000, nodes: list[str] = NODES) -> list[FleetJob]:
    """Ordinary traffic: mostly passes, 6% application failures, a few one-off hardware
    faults on random nodes (never the same node often enough to matter)."""
    jobs = []
    for i in range(count):
        size = rng.choice((1, 1, 1, 2, 4))
        picked = tuple(rng.sample(nodes, size))
        end = T0 + timedelta(seconds=i * 150 + rng.random())
        roll = rng.random()
        job = FleetJob(f"bg{i}", str(i), rng.choice(USERS), "gpu", picked, end, "pass")
        if roll < 0.06:
            job = dataclasses.replace(job, terminal_state="fail", sub_domain="application")
        elif roll < 0.065:
            job = dataclasses.replace(
                job,
                terminal_state="fail",
                sub_domain="hardware",
                cause="xid-79",
                responsible=(Blame(picked[0], "gpu"),),
            )
        jobs.append(job)
    return jobs


def failing(
    key: str, node: str, user: str, at: datetime, *, cause: str = "xid-79", **extra: Any
) -> FleetJob:
    base = FleetJob(
        key,
        key,
        user,
        "gpu",
        (node,),
        at,
        "fail",
        sub_domain="hardware",
        cause=cause,
        responsible=(Blame(node, "gpu", "0000:3b:00.0"),),
    )
    return dataclasses.replace(base, **extra)


def report_of(jobs: list[FleetJob], **kwargs: Any) -> tuple[Fleet, FleetReport]:
    fleet = Fleet(**kwargs).add_all(jobs)
    return fleet, fleet.report()


def test_a_node_that_fails_many_users_jobs_is_suspect_and_nothing_else_is() -> None:
    rng = random.Random(1)
    jobs = background(rng)
    for i in range(8):  # gpu017 fails 8 jobs of 5 users over the fortnight
        jobs.append(failing(f"bad{i}", "gpu017", USERS[i % 5], T0 + timedelta(hours=30 * i)))
    _, report = report_of(jobs)
    suspects = [r for r in report.nodes if r.status == "suspect"]
    assert [r.node for r in suspects] == ["gpu017"]
    row = suspects[0]
    assert row.test.k >= 8 and row.test.q <= 0.05 and row.test.ratio > 2
    assert row.users >= 5 and row.devices["0000:3b:00.0"] == 8
    assert "xid-79 on 0000:3b:00.0" in row.reason
    drains = report.drains
    assert len(drains) == 1 and drains[0].startswith("scontrol update nodename=gpu017 state=drain")
    assert 'reason="attribution node problem: xid-79' in drains[0]


def test_one_users_failures_never_make_a_node_suspect() -> None:
    rng = random.Random(2)
    jobs = background(rng)
    # a buggy user: application failures on every node
    for i, node in enumerate(NODES):
        jobs.append(
            FleetJob(
                f"bug{i}",
                f"b{i}",
                "buggy",
                "gpu",
                (node,),
                T0 + timedelta(minutes=37 * i),
                "fail",
                sub_domain="application",
                cause="python-exception",
            )
        )
    # and one user whose jobs keep dying on gpu030 with a hardware verdict: one user only
    for i in range(6):
        jobs.append(failing(f"solo{i}", "gpu030", "carol", T0 + timedelta(hours=20 * i)))
    _, report = report_of(jobs)
    by_node = {r.node: r for r in report.nodes}
    assert not [r for r in report.nodes if r.status == "suspect"]
    assert by_node["gpu030"].status == "one-user"
    assert "user problem" in by_node["gpu030"].reason
    # its drain line is commented out: a user problem is not drained
    assert report.drains == [line for line in report.drains if line.startswith("# ")]


def test_twenty_nodes_failing_in_one_second_are_one_incident_without_node_blame() -> None:
    rng = random.Random(3)
    jobs = background(rng)
    when = T0 + timedelta(days=3, seconds=17)
    for i, node in enumerate(NODES[:20]):
        jobs.append(
            failing(
                f"pow{i}",
                node,
                USERS[i % 7],
                when + timedelta(milliseconds=40 * i),
                cause="unattributed",
                sub_domain="infrastructure",
            )
        )
    fleet, report = report_of(jobs)
    incidents = report.incidents
    assert len(incidents) == 1
    (incident,) = incidents
    assert set(incident.jobs) == {f"pow{i}" for i in range(20)}
    assert len(incident.nodes) == 20 and incident.users == 7 and incident.p < 1e-4
    # the incident's jobs leave the node counts: no node carries that blame
    assert all(not any(k.startswith("pow") for k in r.jobs) for r in report.nodes)
    truth = Truth(incidents=(frozenset(incident.jobs),))
    assert score(fleet, report, truth)["incidents_recovered"] == 1


def test_coincident_failures_of_one_user_are_not_an_incident() -> None:
    """An array job whose tasks all crash in the same second is one user's problem."""
    jobs = background(random.Random(4))
    for i, node in enumerate(NODES[:12]):
        jobs.append(
            FleetJob(
                f"arr{i}",
                f"9_{i}",
                "dave",
                "gpu",
                (node,),
                T0 + timedelta(days=2),
                "fail",
                sub_domain="unattributed",
            )
        )
    _, report = report_of(jobs)
    assert report.incidents == []


TOPOLOGY = """\
# two leaves under one spine
SwitchName=leaf1 Nodes=gpu[001-032] LinkSpeed=400
SwitchName=leaf2 Nodes=gpu[033-064]
SwitchName=spine Switches=leaf[1-2]
"""


def test_a_bad_leaf_switch_explains_its_nodes() -> None:
    topo = parse_topology(TOPOLOGY)
    rng = random.Random(5)
    jobs = background(rng)
    for i in range(40):  # link failures spread over leaf2's nodes, hours apart
        node = NODES[32 + i % 32]
        jobs.append(
            failing(
                f"leaf{i}",
                node,
                USERS[i % 9],
                T0 + timedelta(hours=7 * i, minutes=i),
                cause="ib-link-down",
                sub_domain="infrastructure",
                responsible=(Blame(node, "hca", "mlx5_0:1"),),
            )
        )
    fleet, report = report_of(jobs, topology=topo)
    domains = {d.group.name: d for d in report.domains}
    assert domains["leaf2"].status == "suspect" and domains["leaf1"].status == "ok"
    assert not [r for r in report.nodes if r.status == "suspect"]
    assert not [d for d in report.drains if not d.startswith("#")]
    result = score(fleet, report, Truth(bad_domains=frozenset({"leaf2"})))
    assert result["recall"] == 1.0 and result["fdr"] == 0.0


def test_a_bad_node_under_a_bad_switch_still_stands_out() -> None:
    topo = parse_topology(TOPOLOGY)
    jobs = background(random.Random(6))
    for i in range(24):
        node = NODES[32 + i % 32]
        jobs.append(failing(f"leaf{i}", node, USERS[i % 9], T0 + timedelta(hours=11 * i)))
    for i in range(14):
        jobs.append(
            failing(f"bad{i}", "gpu040", USERS[i % 6], T0 + timedelta(hours=23 * i, minutes=5))
        )
    _, report = report_of(jobs, topology=topo)
    by_node = {r.node: r for r in report.nodes}
    assert by_node["gpu040"].status == "suspect"


def test_a_flapping_link_is_a_pair_and_a_node_named_by_everyone_is_not() -> None:
    jobs = background(random.Random(7))
    for i in range(6):
        a, b = ("gpu010", "gpu011") if i % 2 else ("gpu011", "gpu010")
        jobs.append(
            FleetJob(
                f"link{i}",
                f"l{i}",
                USERS[i % 4],
                "gpu",
                ("gpu010", "gpu011", "gpu012"),
                T0 + timedelta(hours=25 * i),
                "fail",
                sub_domain="infrastructure",
                cause="ib-peer-suspect",
                suspects=(b,),
                links=((a, b),),
            )
        )
    for i in range(8):  # gpu050's HCA: every peer names it
        peers = NODES[(i * 3) % 40 : (i * 3) % 40 + 3]
        jobs.append(
            FleetJob(
                f"hca{i}",
                f"h{i}",
                USERS[i % 5],
                "gpu",
                (*peers, "gpu050"),
                T0 + timedelta(hours=19 * i, minutes=3),
                "fail",
                sub_domain="infrastructure",
                suspects=("gpu050",),
                links=tuple((p, "gpu050") for p in peers),
            )
        )
    _, report = report_of(jobs)
    links = report.links
    suspect = [(r.a, r.b) for r in links if r.status == "suspect"]
    assert suspect == [("gpu010", "gpu011")]
    assert "all_reduce_perf" in links[0].confirm and "-w gpu010,gpu011" in links[0].confirm
    assert not any("gpu050" in (r.a, r.b) for r in links if r.status == "suspect")
    by_node = {r.node: r for r in report.nodes}
    assert by_node["gpu050"].named == 8 and by_node["gpu050"].status != "suspect"


def test_silent_nodes_form_a_cohort() -> None:
    jobs = background(random.Random(8))
    cohort = ["gpu020", "gpu021", "gpu022"]
    for i in range(15):
        node = cohort[i % 3]
        others = (NODES[40 + i % 7], NODES[50 + i % 5])  # bystanders vary
        jobs.append(
            FleetJob(
                f"nf{i}",
                f"n{i}",
                USERS[i % 6],
                "gpu",
                (node, *others[: i % 3]),
                T0 + timedelta(hours=9 * i),
                "fail",
                state="NODE_FAIL",
                sub_domain="unattributed",
                failed_node=node if i % 2 else None,
            )
        )
    _, report = report_of(jobs)
    silent = [r.node for r in report.silent if r.status == "suspect"]
    assert sorted(silent) == cohort
    assert report.cohorts == [tuple(sorted(cohort))] or sorted(report.cohorts[0]) == cohort


def test_gpu_history_tells_the_gpu_from_the_application() -> None:
    jobs = background(random.Random(9))
    at = T0 + timedelta(days=1)
    for i, user in enumerate(("ann", "bob")):  # two applications, one GPU
        jobs.append(
            FleetJob(
                f"x{i}",
                f"x{i}",
                user,
                "gpu",
                ("gpu005",),
                at + timedelta(hours=i),
                "fail",
                sub_domain="ambiguous",
                name=f"app{i}",
                gpu_errors=(GpuMark("gpu005", "0000:3b:00.0", 13, "application"),),
            )
        )
    for i, node in enumerate(("gpu006", "gpu007", "gpu008")):  # one application, three GPUs
        jobs.append(
            FleetJob(
                f"y{i}",
                f"y{i}",
                "cy",
                "gpu",
                (node,),
                at + timedelta(hours=3 + i),
                "fail",
                sub_domain="application",
                name="sim",
                gpu_errors=(GpuMark(node, "0000:1b:00.0", 31, "application"),),
            )
        )
    _, report = report_of(jobs)
    rows = {(r.node, r.device): r for r in report.gpus}
    assert rows[("gpu005", "0000:3b:00.0")].status == "gpu"
    assert {rows[(n, "0000:1b:00.0")].status for n in ("gpu006", "gpu007", "gpu008")} == {
        "application"
    }


def test_drain_suggestions_are_capped_per_partition() -> None:
    jobs = background(random.Random(10), nodes=NODES[:20], count=3000)
    for n, node in enumerate(NODES[:5]):
        for i in range(10):
            jobs.append(
                failing(
                    f"b{n}_{i}", node, USERS[i % 5], T0 + timedelta(hours=31 * i + n, minutes=n)
                )
            )
    _, report = report_of(jobs, options=FleetOptions(max_drain_share=0.1))
    drains = [d for d in report.drains if not d.startswith("#")]
    assert len(drains) == 2  # 10% of 20 nodes
    assert len(report.held_back) == 3
    for line in drains:  # a shell-safe reason, never run by us
        assert line.count('"') == 2 and "$" not in line and "`" not in line


# ----------------------------------------------------------------------------- topology


def test_topology_tree_and_block() -> None:
    topo = parse_topology(TOPOLOGY + "BlockName=b1 Nodes=gpu[001-016]\n")
    group = topo.smallest_common(["gpu001", "gpu002"])
    assert group is not None and group.label == "block b1"
    leaf = topo.smallest_common(["gpu001", "gpu020"])
    assert leaf is not None and leaf.label == "leaf switch leaf1"
    assert topo.smallest_common(["gpu001", "gpu064"]) is None  # the spine holds everyone
    assert {g.name for g in topo.leaves()} == {"leaf1", "leaf2", "b1"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s1 Nodes=gpu[1-\n", "topology.conf:1"),
        ("SwitchName=s1 Nodes=a\nSwitchName=s2 Switches=s9\n", "'s9' is not defined"),
        ("SwitchName=s1 Switches=s2\nSwitchName=s2 Switches=s1\n", "contains itself"),
    ],
)
def test_topology_errors_name_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message.replace("[", r"\[")) as caught:
        parse_topology(text)
    assert "topology.conf" in str(caught.value)


def test_group_maps() -> None:
    topo = parse_groups({"rack": {"r1": "gpu[001-004]"}, "nvlink_domain": {"nvl": "gpu[001-072]"}})
    group = topo.smallest_common(["gpu001", "gpu003"])
    assert group is not None and group.label == "rack r1"
    with pytest.raises(TopologyError):
        parse_groups({"rack": "gpu1"})


# ----------------------------------------------------------------------------- the store


def test_store_serves_fleet_rows_from_real_verdicts(
    tmp_path: Path, ruleset: RuleSet, diagnosed: Diagnoses
) -> None:
    _, ib = diagnosed(CASES / "blind-ib-status12-voting-no-node-logs")
    _, xid = diagnosed(CASES / "xid13-application-fault")
    store = Store(tmp_path / "v.sqlite")
    store.save(ib)
    store.save(xid)
    passed = dataclasses.replace(xid.job, job_id="99", state="COMPLETED", exit_code="0:0")
    store.save_run(passed)
    rows = {j.key: j for j in store.fleet_jobs(None, None, None)}
    assert set(rows) == {ib.job.key, xid.job.key}  # the failed runs, one by one
    ib_row = rows[ib.job.key]
    assert ib_row.failed and ib_row.suspects == ("a100-14",) and not ib_row.responsible
    assert {peer for _, peer in ib_row.links} == {"a100-14"}
    assert {rep for rep, _ in ib_row.links} == {
        "a100-11",
        "a100-12",
        "a100-13",
        "a100-15",
        "a100-16",
    }
    assert rows[xid.job.key].gpu_errors
    # a window that ends before every job keeps none
    assert not list(store.fleet_jobs(None, datetime(2000, 1, 1, tzinfo=UTC), None))
    fleet = store.fleet_into(Fleet())
    assert fleet.runs == 3 and fleet.passes == 1 and len(fleet.failures) == 2
    assert fleet.exposure["gpu-a01"] == 2  # the failed and the passed run there
    assert fleet.report().exposure == "all runs"
    store.close()


# ----------------------------------------------------------------------------- the CLI


def write_history(base: Path, jobs: list[FleetJob], topology: str | None = None) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    with (base / "jobs.jsonl").open("w") as out:
        for job in jobs:
            data = {
                "key": job.key,
                "job_id": job.job_id,
                "user": job.user,
                "partition": job.partition,
                "nodes": compress(job.nodes),
                "end": job.end.isoformat() if job.end else None,
                "terminal_state": job.terminal_state,
                "sub_domain": job.sub_domain,
                "state": job.state,
                "cause": job.cause,
                "responsible": [dataclasses.asdict(b) for b in job.responsible],
                "suspects": list(job.suspects),
                "links": [list(pair) for pair in job.links],
                "gpu_errors": [dataclasses.asdict(g) for g in job.gpu_errors],
                "failed_node": job.failed_node,
            }
            out.write(json.dumps(data) + "\n")
    if topology:
        (base / "topology.conf").write_text(topology)
    (base / "truth.yaml").write_text("bad_nodes: [gpu017]\n")
    return base


def test_cli_on_a_fleet_history(tmp_path: Path) -> None:
    jobs = background(random.Random(11))
    for i in range(8):
        jobs.append(failing(f"bad{i}", "gpu017", USERS[i % 5], T0 + timedelta(hours=30 * i)))
    base = write_history(tmp_path / "h", jobs, TOPOLOGY)
    runner = CliRunner()
    result = runner.invoke(main, ["nodes", "--history", str(base), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "attribution.fleet/1" and data["exposure"] == "all runs"
    suspects = [r for r in data["nodes"] if r["status"] == "suspect"]
    assert [r["node"] for r in suspects] == ["gpu017"]
    assert suspects[0]["test"]["q"] <= 0.05 and data["method"]["q"] == 0.05
    text = runner.invoke(main, ["nodes", "--history", str(base)])
    assert text.exit_code == 0 and "gpu017" in text.output and "scontrol update" in text.output
    for command in ("incidents", "links", "gpus"):
        assert runner.invoke(main, [command, "--history", str(base)]).exit_code == 0
    scored = runner.invoke(main, ["backtest", "--fleet", "--json", str(base)])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output)["total"]["recall"] == 1.0


def test_a_malformed_history_line_is_one_error_naming_the_file_and_line(tmp_path: Path) -> None:
    base = write_history(tmp_path / "h", background(random.Random(12), count=3))
    with (base / "jobs.jsonl").open("a") as out:
        out.write('{"key": "x", "nodes": "gpu[1-"}\n')
    result = CliRunner().invoke(main, ["nodes", "--history", str(base)])
    assert result.exit_code == 1
    assert f"{base / 'jobs.jsonl'}:4" in result.output and "Traceback" not in result.output
    with pytest.raises(AttributionError, match=r"jobs\.jsonl:4"):
        list(read_jobs(base / "jobs.jsonl"))


def test_the_statistics_match_scipy_stats() -> None:
    """The light scipy.special calls and the Benjamini-Hochberg loop give scipy.stats' numbers."""
    from scipy.stats import binom, false_discovery_control, poisson

    from attribution.fleet import bh, binomial_sf, poisson_sf

    rng = random.Random(13)
    pvalues = [rng.random() ** 3 for _ in range(200)] + [0.0, 1.0, 0.5, 0.5]
    assert bh(pvalues) == pytest.approx(list(false_discovery_control(pvalues)), rel=1e-12)
    for k, n, p in ((9, 133, 0.0018), (1, 10, 0.5), (40, 40, 0.9), (3, 1000, 1e-4)):
        assert binomial_sf(k, n, p) == pytest.approx(float(binom.sf(k - 1, n, p)), rel=1e-9)
    assert poisson_sf(20, 0.01) == pytest.approx(float(poisson.sf(19, 0.01)), rel=1e-9)
    assert binomial_sf(0, 10, 0.1) == 1.0 and binomial_sf(11, 10, 0.1) == 0.0


def test_only_administrators_read_the_fleet_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet view spans every user's jobs: a user is refused before the store is opened."""
    from attribution.access import Caller

    Store(tmp_path / "v.sqlite").close()
    monkeypatch.setattr(
        Caller, "current", classmethod(lambda cls, groups: cls(uid=4242, name="eve", admin=False))
    )
    runner = CliRunner()
    for command in ("nodes", "incidents", "links", "gpus"):
        result = runner.invoke(main, [command, "--db", str(tmp_path / "v.sqlite"), "--no-events"])
        assert result.exit_code == 1 and "administrators only" in result.output
    # an administrator reads the (empty) store
    monkeypatch.setattr(
        Caller, "current", classmethod(lambda cls, groups: cls(uid=0, name="root", admin=True))
    )
    result = runner.invoke(main, ["nodes", "--db", str(tmp_path / "v.sqlite"), "--no-events"])
    assert result.exit_code == 0 and "0 job runs" in result.output


def test_show_says_when_the_responsible_node_failed_other_jobs(
    tmp_path: Path, diagnosed: Diagnoses, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attribution.access import Caller

    _, verdict = diagnosed(CASES / "blind10-shared-c03-xid79-own-gpu-midrun")
    assert verdict.responsible, "the case blames a node"
    node = verdict.responsible[0].node
    db = tmp_path / "v.sqlite"
    with Store(db) as store:
        store.save(verdict)
        for job_id, user in (("9001", "ann"), ("9002", "bob"), ("9003", "ann")):
            job = dataclasses.replace(verdict.job, job_id=job_id, user=user)
            store.save(dataclasses.replace(verdict, job=job))
    monkeypatch.setattr(
        Caller, "current", classmethod(lambda cls, groups: cls(uid=0, name="root", admin=True))
    )
    runner = CliRunner()
    result = runner.invoke(main, ["show", verdict.job.job_id, "--db", str(db)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{node} was responsible for 3 other failed job(s) of 2 user(s)" in text
    data = json.loads(runner.invoke(main, ["show", "9001", "--db", str(db), "--json"]).output)
    # seen from 9001: the first job (its own user), 9002 (bob) and 9003 (ann)
    assert data["record"]["fleet"][node] == {
        "jobs": 3,
        "users": len({verdict.job.user, "bob", "ann"}),
        "since": data["record"]["fleet"][node]["since"],
    }


def test_one_users_jobs_killed_together_with_node_side_evidence_are_an_incident() -> None:
    """A power trip under one user's campaign: Slurm lost the nodes, an incident all the same
    (the array-crash test above is the same shape without node-side evidence)."""
    jobs = background(random.Random(14))
    when = T0 + timedelta(days=4, seconds=3)
    for i, node in enumerate(NODES[20:30]):
        jobs.append(
            FleetJob(
                f"pdu{i}",
                f"77_{i}",
                "erin",
                "gpu",
                (node,),
                when + timedelta(milliseconds=90 * i),
                "fail",
                state="NODE_FAIL",
                sub_domain="unattributed",
                failed_node=node,
            )
        )
    _, report = report_of(jobs)
    (incident,) = report.incidents
    assert set(incident.jobs) == {f"pdu{i}" for i in range(10)} and incident.users == 1


def test_the_same_cause_on_the_same_device_is_a_stronger_signal_than_the_count() -> None:
    """Three failures of a rare cause on one GPU stand out; three of a common one-off fault on
    three different GPUs do not (one-off faults land anywhere)."""
    jobs = background(random.Random(15))
    # a common one-off fault: 60 of them over the fleet, on random nodes and GPUs
    rng = random.Random(16)
    for i in range(60):
        node = rng.choice(NODES)
        jobs.append(
            failing(
                f"gsp{i}",
                node,
                USERS[i % 20],
                T0 + timedelta(minutes=200 * i + 7),
                cause="gpu-gsp-failure",
                sub_domain="system_software",
                responsible=(Blame(node, "gpu", f"0000:{rng.randrange(8):02x}:00.0"),),
            )
        )
    for i, device in enumerate(("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0")):
        jobs.append(
            failing(
                f"spread{i}",
                "gpu044",
                USERS[i],
                T0 + timedelta(days=2 + 3 * i),
                cause="gpu-gsp-failure",
                sub_domain="system_software",
                responsible=(Blame("gpu044", "gpu", device),),
            )
        )
    for i in range(3):
        jobs.append(
            failing(
                f"dimm{i}",
                "gpu045",
                USERS[i + 3],
                T0 + timedelta(days=1 + 4 * i),
                cause="node-memory-uncorrectable",
                responsible=(Blame("gpu045", "memory", "DIMM_B1"),),
            )
        )
    _, report = report_of(jobs)
    by_node = {r.node: r for r in report.nodes}
    assert by_node["gpu045"].status == "suspect"
    assert "node-memory-uncorrectable on DIMM_B1" in by_node["gpu045"].reason
    assert by_node["gpu044"].status != "suspect"


def test_a_flapping_link_inside_a_leaf_is_the_links_not_the_switches() -> None:
    topo = parse_topology(TOPOLOGY)
    jobs = background(random.Random(17))
    for i in range(8):
        a, b = ("gpu040", "gpu041") if i % 2 else ("gpu041", "gpu040")
        jobs.append(
            FleetJob(
                f"l{i}",
                f"l{i}",
                USERS[i % 5],
                "gpu",
                ("gpu040", "gpu041"),
                T0 + timedelta(hours=30 * i),
                "fail",
                sub_domain="infrastructure",
                cause="ib-peer-suspect",
                suspects=(b,),
                links=((a, b),),
            )
        )
    _, report = report_of(jobs, topology=topo)
    assert [(r.a, r.b) for r in report.links if r.status == "suspect"] == [("gpu040", "gpu041")]
    assert not [d for d in report.domains if d.status == "suspect"]


def test_simulate_fleet_and_score_it_from_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "fleet"
    made = runner.invoke(
        main, ["simulate", "--fleet", "1", "--seed", "3", "--nodes", "64", "--days", "3", str(out)]
    )
    assert made.exit_code == 0, made.output
    assert (out / "seed-3" / "jobs.jsonl").is_file() and (out / "seed-3" / "truth.yaml").is_file()
    again = runner.invoke(main, ["simulate", "--fleet", "1", "--seed", "3", str(out)])
    assert again.exit_code == 1 and "--force" in again.output
    scored = runner.invoke(main, ["backtest", "--fleet", "--json", str(out)])
    assert scored.exit_code == 0, scored.output
    total = json.loads(scored.output)["total"]
    assert total["planted"] > 0 and total["buggy_user_suspects"] == 0
    assert 0.0 <= total["fdr"] <= 1.0 and total["findable"] <= total["planted"]
    wrong = runner.invoke(main, ["simulate", "--nodes", "8", str(out)])
    assert wrong.exit_code == 2 and "--fleet" in wrong.output


# ----------------------------------------------------------------------------- hostile input


def test_node_names_that_are_not_host_names_never_reach_a_shell_line(tmp_path: Path) -> None:
    """A drain or nccl-tests line is pasted into a shell: a node name with shell characters is
    refused in a history (file and line named) and held back from a store."""
    jobs = background(random.Random(18), count=50)
    base = write_history(tmp_path / "h", jobs)
    with (base / "jobs.jsonl").open("a") as out:
        out.write(json.dumps({"key": "x", "nodes": "gpu1;touch /tmp/pwned;#", "end": None}) + "\n")
    result = CliRunner().invoke(main, ["nodes", "--history", str(base)])
    assert result.exit_code == 1 and "jobs.jsonl:51: nodes:" in result.output
    assert "is not a node name" in result.output

    from attribution.fleet import Fleet as F

    evil = "gpu9$(reboot)"
    fleet = F()
    for i in range(400):
        fleet.add(FleetJob(f"ok{i}", str(i), USERS[i % 9], "gpu", (f"n{i % 40}",), T0, "pass"))
    for i in range(8):
        fleet.add(failing(f"e{i}", evil, USERS[i % 4], T0 + timedelta(days=i)))
    report = fleet.report()
    assert any(r.node == evil and r.status == "suspect" for r in report.nodes)
    assert not any(evil in line for line in report.drains)
    assert any("not a plain host name" in held for held in report.held_back)


def test_special_files_and_yaml_bombs_are_refused_not_read(tmp_path: Path) -> None:
    import os

    base = write_history(tmp_path / "h", background(random.Random(19), count=10))
    (base / "node_events.jsonl").unlink(missing_ok=True)
    os.mkfifo(base / "node_events.jsonl")  # would block a reader forever
    result = CliRunner().invoke(main, ["nodes", "--history", str(base)])
    assert result.exit_code == 1 and "node_events.jsonl: not a regular file" in result.output
    (base / "node_events.jsonl").unlink()
    bomb = 'a: &a ["x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n'
    (base / "groups.yaml").write_text(bomb + "rack: {r1: gpu001}\n")
    result = CliRunner().invoke(main, ["nodes", "--history", str(base)])
    assert result.exit_code == 1 and "aliases" in result.output


def test_a_run_given_twice_counts_once_and_says_so(tmp_path: Path) -> None:
    jobs = background(random.Random(20), count=400)
    jobs += [failing(f"d{i}", "gpu005", USERS[i], T0 + timedelta(days=i)) for i in range(2)]
    base = write_history(tmp_path / "h", jobs + jobs[-2:])
    data = json.loads(
        CliRunner().invoke(main, ["nodes", "--history", str(base), "--json", "--all"]).output
    )
    assert data["runs"] == 402 and "2 run(s) given twice were counted once" in data["notes"]
    row = next(r for r in data["nodes"] if r["node"] == "gpu005")
    assert row["status"] != "suspect"


def test_old_and_hand_edited_stores_are_read_with_a_note(
    tmp_path: Path, diagnosed: Diagnoses
) -> None:
    import sqlite3

    _, verdict = diagnosed(CASES / "blind10-shared-c03-xid79-own-gpu-midrun")
    db = tmp_path / "v.sqlite"
    with Store(db) as store:
        store.save(verdict)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE runs")  # as a store written before the fleet view
    conn.execute('UPDATE verdicts SET "end" = substr("end", 1, 19)')  # no zone
    conn.execute("INSERT INTO responsible (key, node) VALUES ('nobody', NULL)")
    conn.commit()
    conn.close()
    with Store(db, readonly=True) as store:
        fleet = store.fleet_into(Fleet())
    report = fleet.report()
    assert report.failed == 1 and "no runs table yet" in report.notes[0]
    assert report.since is not None and report.since.tzinfo is not None


def test_text_from_verdicts_is_never_read_as_markup(tmp_path: Path) -> None:
    jobs = background(random.Random(21), count=100)
    jobs.append(failing("m1", "gpu001", "ann", T0, cause="[/bold][red]x[/]", sub_domain="hardware"))
    base = write_history(tmp_path / "h", jobs)
    for command in ("nodes", "incidents", "links", "gpus"):
        result = CliRunner().invoke(main, [command, "--history", str(base), "--all"])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["nodes", "--history", str(base), "--all"])
    assert "[/bold][red]x[/]" in result.output


def test_a_history_is_read_whole_and_until_alone_is_not_checked_against_the_default_since(
    tmp_path: Path,
) -> None:
    base = write_history(tmp_path / "h", background(random.Random(22), count=100))
    runner = CliRunner()
    whole = json.loads(runner.invoke(main, ["nodes", "--history", str(base), "--json"]).output)
    assert whole["runs"] == 100
    early = runner.invoke(
        main, ["nodes", "--history", str(base), "--until", "2026-11-02T02:00:00Z", "--json"]
    )
    assert early.exit_code == 0 and 0 < json.loads(early.output)["runs"] < 100
    wrong = runner.invoke(
        main, ["nodes", "--history", str(base), "--since", "2026-11-05", "--until", "2026-11-03"]
    )
    assert wrong.exit_code == 2 and "is not after --since" in wrong.output
    (base / "topology.conf").mkdir()  # something there that is not a file: said, not skipped
    odd = runner.invoke(main, ["nodes", "--history", str(base)])
    assert odd.exit_code == 1 and "topology.conf: not a regular file" in odd.output


def test_human_views_show_bus_ids_and_say_what_they_tested(tmp_path: Path) -> None:
    """A PCI bus id holds ':ab:' (an emoji code to rich); each view names its own test."""
    jobs = background(random.Random(23), count=600)
    for i in range(6):
        jobs.append(
            failing(
                f"ab{i}",
                "gpu017",
                USERS[i],
                T0 + timedelta(hours=5 * i),
                responsible=(Blame("gpu017", "gpu", "0000:ab:00.0"),),
            )
        )
    base = write_history(tmp_path / "h", jobs)
    runner = CliRunner()
    nodes_out = runner.invoke(main, ["nodes", "--history", str(base)]).output
    assert "0000:ab:00.0" in nodes_out and "nodes: one-sided binomial" in nodes_out
    assert (
        "incidents: failures" in runner.invoke(main, ["incidents", "--history", str(base)]).output
    )
    assert "links: node pairs" in runner.invoke(main, ["links", "--history", str(base)]).output
    nobody = runner.invoke(main, ["nodes", "--history", str(base), "--partition", "nosuch"])
    assert nobody.exit_code == 0 and "no run of partition 'nosuch'" in nobody.output
    assert "scontrol" not in nobody.output
