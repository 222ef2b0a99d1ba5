"""The fleet-history simulator (attribution.sim.fleet): determinism, a consistent ground truth,
a schedule no node could not have run, and files of the documented shape.

The default spec (256 nodes x 14 days, what the fleet view is scored on) is generated once for
the module; the determinism tests write a smaller fleet twice.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from attribution.hostlist import expand
from attribution.sim.fleet import (
    COMPONENTS,
    GPU_BUS_IDS,
    HCA_PORTS,
    SLURM_STATES,
    SUB_DOMAINS,
    SWEEP_MEASURED,
    TERMINAL_STATE,
    FleetHistory,
    FleetSpec,
    generate_fleet,
    noise_rates,
    write_fleet,
    xid_class,
)

SMALL = FleetSpec(
    seed=7,
    nodes=64,
    users=20,
    days=3,
    bad_gpu_nodes=2,
    bad_hca_nodes=1,
    bad_memory_nodes=1,
    bad_links=2,
    silent_nodes=2,
    buggy_users=2,
    incident_nodes=10,
    benign_xid_nodes=2,
)

JOB_KEYS = [
    "key",
    "job_id",
    "user",
    "name",
    "partition",
    "nodes",
    "start",
    "end",
    "state",
    "terminal_state",
    "sub_domain",
    "cause",
    "responsible",
    "suspects",
    "links",
    "gpu_errors",
    "failed_node",
]
EVENT_KEYS = ["node", "at", "state", "reason", "end"]
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def epoch(stamp: str) -> int:
    """``YYYY-MM-DDTHH:MM:SSZ`` -> epoch seconds."""
    return int(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def topology_leaves(text: str) -> dict[str, list[str]]:
    """topology.conf -> leaf switch -> its nodes (asserting each line's form)."""
    leaves: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"SwitchName=(\S+) (Nodes|Switches)=(\S+)", line)
        assert m, line
        if m.group(2) == "Nodes":
            leaves[m.group(1)] = list(expand(m.group(3)))
    return leaves


@pytest.fixture(scope="module")
def fleet() -> FleetHistory:
    return generate_fleet(FleetSpec())


@pytest.fixture(scope="module")
def by_key(fleet: FleetHistory) -> dict[str, dict[str, Any]]:
    return {j["key"]: j for j in fleet.jobs}


@pytest.fixture(scope="module")
def held(fleet: FleetHistory) -> dict[str, tuple[str, ...]]:
    """Run key -> its nodes (expanded once: ClusterShell is slow on 50,000 lists)."""
    lists: dict[str, tuple[str, ...]] = {}
    return {j["key"]: lists.setdefault(j["nodes"], expand(j["nodes"])) for j in fleet.jobs}


@pytest.fixture(scope="module")
def all_nodes(fleet: FleetHistory) -> list[str]:
    return [n for nodes in topology_leaves(fleet.topology).values() for n in nodes]


# --------------------------------------------------------------------- determinism


def test_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    write_fleet(SMALL, tmp_path / "a")
    write_fleet(SMALL, tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["jobs.jsonl", "node_events.jsonl", "topology.conf", "truth.yaml"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_another_seed_gives_another_history() -> None:
    one = generate_fleet(SMALL).files()
    other = generate_fleet(FleetSpec(**{**SMALL.as_dict(), "seed": 8, **_tuples(SMALL)})).files()
    assert one["jobs.jsonl"] != other["jobs.jsonl"]
    # the fleet itself does not move (only the comment naming the seed differs)
    assert one["topology.conf"].splitlines()[1:] == other["topology.conf"].splitlines()[1:]


def _tuples(spec: FleetSpec) -> dict[str, Any]:
    """The spec's tuple fields as tuples again (as_dict gives lists)."""
    return {k: tuple(v) for k, v in spec.as_dict().items() if isinstance(v, list)}


def test_write_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(FileExistsError):
        write_fleet(SMALL, tmp_path)


def test_truth_yaml_is_what_write_fleet_returns(tmp_path: Path) -> None:
    truth = write_fleet(SMALL, tmp_path / "f")
    loaded = yaml.safe_load((tmp_path / "f" / "truth.yaml").read_text(encoding="utf-8"))
    assert loaded == truth.as_dict()
    assert loaded["spec"]["seed"] == 7 and loaded["spec"]["nodes"] == 64
    assert FleetSpec(**{**loaded["spec"], **_tuples(SMALL)}) == SMALL  # the spec round-trips


# --------------------------------------------------------------------- the ground truth


def test_every_planted_node_exists(fleet: FleetHistory, all_nodes: list[str]) -> None:
    truth, known = fleet.truth, set(all_nodes)
    spec = FleetSpec()
    planted = truth.bad_nodes + truth.silent_nodes + truth.benign_xid_nodes
    assert set(planted) <= known
    assert len(set(planted)) == len(planted)  # one planted role per node
    assert len(truth.bad_nodes) == spec.bad_gpu_nodes + spec.bad_hca_nodes + spec.bad_memory_nodes
    assert len(truth.silent_nodes) == spec.silent_nodes
    assert len(truth.bad_gpus) == spec.bad_gpu_nodes
    for gpu in truth.bad_gpus:
        assert gpu["node"] in truth.bad_nodes and gpu["device"] in GPU_BUS_IDS
    for fault in truth.bad_node_faults:
        assert fault["node"] in truth.bad_nodes
        assert fault["component"] in ("gpu", "nvlink", "hca", "memory")
        if fault["component"] == "hca":
            assert fault["device"] in HCA_PORTS


def test_bad_links_are_sorted_pairs_of_existing_nodes(
    fleet: FleetHistory, all_nodes: list[str]
) -> None:
    links = fleet.truth.bad_links
    assert len(links) == FleetSpec().bad_links
    for pair in links:
        assert len(pair) == 2 and pair[0] < pair[1] and set(pair) <= set(all_nodes)
    assert links == sorted(links)


def test_bad_domains_are_leaf_switches(fleet: FleetHistory) -> None:
    leaves = topology_leaves(fleet.topology)
    assert fleet.truth.bad_domains and set(fleet.truth.bad_domains) <= set(leaves)


def test_buggy_users_run_jobs_and_their_bugs_never_blame_a_node(
    fleet: FleetHistory, by_key: dict[str, dict[str, Any]]
) -> None:
    truth = fleet.truth
    users = {j["user"] for j in fleet.jobs}
    assert len(truth.buggy_users) == FleetSpec().buggy_users
    assert set(truth.buggy_users) <= users
    odd = 0
    for user in truth.buggy_users:
        runs = truth.fault_runs[f"user:{user}"]
        assert len(runs) >= 20, user  # a buggy user fails often
        for key in runs:
            job = by_key[key]
            assert job["user"] == user and job["terminal_state"] == "fail"
            assert job["responsible"] == [], key
            assert job["sub_domain"] in ("application", "ambiguous", "unattributed"), key
            odd += job["sub_domain"] != "application"
    # the engine is imperfect: a few of their failures come out ambiguous or unattributed
    total = sum(len(truth.fault_runs[f"user:{u}"]) for u in truth.buggy_users)
    assert 0 < odd < total * 0.1


def test_incidents_fail_many_users_within_two_seconds(
    fleet: FleetHistory, by_key: dict[str, dict[str, Any]]
) -> None:
    incidents = fleet.truth.incidents
    assert len(incidents) == FleetSpec().incidents
    assert {i.kind for i in incidents} == {"power", "filesystem"}
    for incident in incidents:
        jobs = [by_key[k] for k in incident.jobs]  # KeyError: a job that does not exist
        assert len(jobs) >= 5, incident.label
        assert all(j["terminal_state"] == "fail" for j in jobs)
        ends = [epoch(j["end"]) for j in jobs]
        assert max(ends) - min(ends) <= 2, incident.label
        assert min(ends) >= epoch(incident.at)
        assert len({j["user"] for j in jobs}) >= 3, incident.label
        held = set(expand(incident.nodes))
        for job in jobs:
            assert held & set(expand(job["nodes"])), job["key"]
            assert job["sub_domain"] in ("infrastructure", "unattributed", "ambiguous")


def test_power_incident_nodes_go_down_together(fleet: FleetHistory) -> None:
    (power,) = [i for i in fleet.truth.incidents if i.kind == "power"]
    nodes = expand(power.nodes)
    assert len(nodes) == FleetSpec().incident_nodes
    down = {
        e["node"]
        for e in fleet.node_events
        if e["at"] == power.at and e["state"] == "DOWN" and e["reason"] == "Not responding"
    }
    assert down == set(nodes)


def test_every_fault_run_is_a_run_the_fault_could_have_ended(
    fleet: FleetHistory, by_key: dict[str, dict[str, Any]], held: dict[str, tuple[str, ...]]
) -> None:
    truth = fleet.truth
    leaves = topology_leaves(fleet.topology)
    down_at = {(e["node"], e["at"]) for e in fleet.node_events if e["state"] == "DOWN"}
    for fault, runs in truth.fault_runs.items():
        kind, _, name = fault.partition(":")
        for key in runs:
            job = by_key[key]
            nodes = set(held[key])
            assert job["terminal_state"] == "fail", key
            if kind == "node":
                assert name in nodes and name in truth.bad_nodes
                assert {r["node"] for r in job["responsible"]} <= {name}, key
            elif kind == "silent":
                assert name in nodes and name in truth.silent_nodes
                assert job["state"] == "NODE_FAIL" and job["responsible"] == []
                assert (name, job["end"]) in down_at  # slurmctld marked it DOWN as the job ended
            elif kind == "link":
                a, b = name.split("-")
                assert [a, b] in truth.bad_links and {a, b} <= nodes
                assert job["responsible"] == []
                if job["sub_domain"] == "infrastructure":
                    assert any(set(link) == {a, b} for link in job["links"]), key
            elif kind == "domain":
                assert name in truth.bad_domains
                assert len(nodes & set(leaves[name])) >= 2
            else:
                assert kind == "user" and name in truth.buggy_users
    # every planted fault of the default spec bites at least once
    assert all(truth.fault_runs.values()), {k: len(v) for k, v in truth.fault_runs.items()}


def test_bad_gpu_verdicts_name_the_bad_gpu(
    fleet: FleetHistory, by_key: dict[str, dict[str, Any]]
) -> None:
    truth = fleet.truth
    devices = {f["node"]: f["device"] for f in truth.bad_node_faults}
    right = 0
    for fault, runs in truth.fault_runs.items():
        if not fault.startswith("node:"):
            continue
        node = fault[len("node:") :]
        for key in runs:
            for blamed in by_key[key]["responsible"]:
                assert blamed["device"] == devices[node], key
                right += 1
    assert right >= 20


def test_benign_xid_nodes_log_hardware_xids_on_passing_jobs(fleet: FleetHistory) -> None:
    for node in fleet.truth.benign_xid_nodes:
        passes = [
            j
            for j in fleet.jobs
            if j["terminal_state"] == "pass" and any(g["node"] == node for g in j["gpu_errors"])
        ]
        assert len(passes) >= 5, node
        assert all(j["responsible"] == [] for j in passes)


# --------------------------------------------------------------------- the schedule


def test_no_node_runs_two_jobs_at_once(
    fleet: FleetHistory, held: dict[str, tuple[str, ...]]
) -> None:
    # fixed-width UTC stamps order as strings do
    runs: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for job in fleet.jobs:
        for node in held[job["key"]]:
            runs[node].append((job["start"], job["end"], job["key"]))
    for node, spans in runs.items():
        spans.sort()
        for (_, end, key), (start, _, nxt) in itertools.pairwise(spans):
            assert start >= end, f"{node}: {nxt} starts before {key} ends"


def test_multi_node_jobs_mostly_fit_one_leaf(
    fleet: FleetHistory, held: dict[str, tuple[str, ...]]
) -> None:
    leaf_of = {n: leaf for leaf, nodes in topology_leaves(fleet.topology).items() for n in nodes}
    multi = [nodes for nodes in held.values() if len(nodes) > 1]
    assert len(multi) > 1000
    one_leaf = sum(1 for nodes in multi if len({leaf_of[n] for n in nodes}) == 1)
    assert one_leaf / len(multi) > 0.9


def test_fleet_size_and_mix_look_like_a_busy_cluster(
    fleet: FleetHistory, held: dict[str, tuple[str, ...]]
) -> None:
    jobs = fleet.jobs
    days = FleetSpec().days
    assert 2000 <= len(jobs) / days <= 8000  # several thousand runs a day
    states = defaultdict(int)
    for job in jobs:
        states[job["terminal_state"]] += 1
    assert states["pass"] / len(jobs) > 0.75
    app = sum(1 for j in jobs if j["sub_domain"] == "application" and j["state"] == "FAILED")
    assert 0.04 < app / len(jobs) < 0.15
    assert states["timeout"] and states["cancelled"] and states["preempted"]
    sizes = [len(nodes) for nodes in held.values()]
    assert sum(1 for s in sizes if s == 1) / len(sizes) > 0.8
    assert max(sizes) == 16


# --------------------------------------------------------------------- the files' shape


def test_jobs_have_the_documented_fields_and_types(
    fleet: FleetHistory, all_nodes: list[str], held: dict[str, tuple[str, ...]]
) -> None:
    known = set(all_nodes)
    keys: set[str] = set()
    last_end = ""
    for job in fleet.jobs:
        assert list(job) == JOB_KEYS
        assert isinstance(job["key"], str) and job["key"] not in keys
        keys.add(job["key"])
        assert re.fullmatch(r"sim_\d+(_\d+)?_\d+", job["key"]), job["key"]
        assert job["key"].startswith(f"sim_{job['job_id']}_")
        for field in ("user", "name", "partition"):
            assert isinstance(job[field], str) and job[field]
        assert job["partition"] in FleetSpec().partitions
        nodes = held[job["key"]]
        assert nodes and set(nodes) <= known
        assert STAMP.match(job["start"]) and STAMP.match(job["end"])
        assert job["start"] < job["end"]  # fixed-width UTC stamps order as strings do
        assert job["end"] >= last_end  # sorted by end time
        last_end = job["end"]
        assert job["state"] in SLURM_STATES
        assert job["terminal_state"] == TERMINAL_STATE[job["state"]]
        assert job["sub_domain"] in SUB_DOMAINS
        passed = job["terminal_state"] == "pass"
        assert passed == (job["sub_domain"] == "none") == (job["cause"] is None)
        assert job["cause"] is None or isinstance(job["cause"], str)
        for blamed in job["responsible"]:
            assert list(blamed) == ["node", "component", "device"]
            assert blamed["node"] in nodes and blamed["component"] in COMPONENTS
            assert blamed["device"] is None or isinstance(blamed["device"], str)
        assert not (passed and job["responsible"])
        assert all(isinstance(s, str) and s in nodes for s in job["suspects"])
        assert job["suspects"] == sorted(set(job["suspects"]))
        for link in job["links"]:
            assert len(link) == 2 and link[0] != link[1] and set(link) <= set(nodes)
        for xid in job["gpu_errors"]:
            assert list(xid) == ["node", "device", "code", "xid_class"]
            assert xid["node"] in nodes and xid["device"] in GPU_BUS_IDS
            assert isinstance(xid["code"], int) and xid["xid_class"] == xid_class(xid["code"])
        if job["failed_node"] is not None:
            assert job["state"] == "NODE_FAIL" and job["failed_node"] in nodes


def test_jobs_jsonl_parses_to_the_records(fleet: FleetHistory) -> None:
    text = fleet.files()["jobs.jsonl"]
    lines = text.splitlines()
    assert len(lines) == len(fleet.jobs)
    assert [json.loads(line) for line in lines[:500]] == fleet.jobs[:500]
    assert json.loads(lines[-1]) == fleet.jobs[-1]


def test_node_events_have_the_documented_fields(fleet: FleetHistory, all_nodes: list[str]) -> None:
    events = fleet.node_events
    assert events
    last = ""
    for event in events:
        assert list(event) == EVENT_KEYS
        assert event["node"] in all_nodes
        assert event["state"] in ("DOWN", "DRAIN")
        assert isinstance(event["reason"], str) and event["reason"]
        assert STAMP.match(event["at"]) and event["at"] >= last
        last = event["at"]
        assert event["end"] is None or event["end"] > event["at"]
    for node in fleet.truth.silent_nodes:
        assert any(e["node"] == node and e["reason"] == "Not responding" for e in events), node
    lines = fleet.files()["node_events.jsonl"].splitlines()
    assert [json.loads(line) for line in lines] == events


def test_topology_covers_every_node_once(fleet: FleetHistory) -> None:
    spec = FleetSpec()
    leaves = topology_leaves(fleet.topology)
    members = [n for nodes in leaves.values() for n in nodes]
    width = len(str(spec.nodes))
    assert sorted(members) == [f"gpu{i:0{width}d}" for i in range(1, spec.nodes + 1)]
    assert len(members) == len(set(members)) == spec.nodes
    assert all(len(nodes) == spec.nodes_per_leaf for nodes in leaves.values())
    (spine,) = [line for line in fleet.topology.splitlines() if line.startswith("SwitchName=spine")]
    assert sorted(expand(spine.split("Switches=")[1])) == sorted(leaves)


def test_big_fleets_get_four_digit_names_and_partial_leaves() -> None:
    spec = FleetSpec(nodes=1000, days=0.5, seed=3)
    history = generate_fleet(spec)
    leaves = topology_leaves(history.topology)
    members = [n for nodes in leaves.values() for n in nodes]
    assert members[0] == "gpu0001" and members[-1] == "gpu1000" and len(set(members)) == 1000
    assert len(leaves) == 63 and len(leaves["leaf63"]) == 1000 - 62 * 16
    assert len(history.jobs) > 3000


# --------------------------------------------------------------------- noise model and spec


def test_noise_rates_are_the_smoothed_measurements() -> None:
    rates = noise_rates("sweep")
    gpu = SWEEP_MEASURED["gpu"]
    assert rates["gpu"].right == pytest.approx((gpu.right + 1) / (gpu.jobs + 3))
    assert 0 < rates["gpu"].unattributed < 0.03  # a perfect sweep still leaves a miss rate
    silent = SWEEP_MEASURED["silent"]
    assert rates["silent"].ambiguous == pytest.approx((silent.ambiguous + 1) / (silent.jobs + 3))
    blind = noise_rates("blind")
    assert blind["application"].right < rates["application"].right
    for profile in (rates, blind):
        for rate in profile.values():
            assert rate.right + rate.ambiguous + rate.unattributed == pytest.approx(1.0)
    with pytest.raises(ValueError, match="noise profile"):
        noise_rates("guess")


def test_blind_noise_hides_more_bad_nodes_than_the_sweep() -> None:
    def named(spec: FleetSpec) -> float:
        history = generate_fleet(spec)
        by = {j["key"]: j for j in history.jobs}
        runs = [
            k for f, ks in history.truth.fault_runs.items() if f.startswith("node:") for k in ks
        ]
        return sum(1 for k in runs if by[k]["responsible"]) / len(runs)

    base = {**SMALL.as_dict(), **_tuples(SMALL), "days": 7, "bad_gpu_nodes": 6}
    sweep = named(FleetSpec(**base))
    blind = named(FleetSpec(**{**base, "noise": "blind"}))
    assert sweep > 0.9 and blind < sweep - 0.15


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bad_gpu_nodes": 100}, "planted nodes"),
        ({"buggy_users": 99}, "buggy users"),
        ({"bad_leaves": 99}, "bad leaves"),
        ({"incident_nodes": 999}, "incident"),
        ({"noise": "hopeful"}, "noise profile"),
        ({"start": "2026-11-02 00:00"}, "does not match format"),
        ({"nodes": 1}, "at least 2 nodes"),
    ],
)
def test_spec_that_does_not_fit_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FleetSpec(**{**SMALL.as_dict(), **_tuples(SMALL), **change})
