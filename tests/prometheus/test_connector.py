"""The PromQL connector against a real Prometheus (Debian's package, started by the harness with
dcgm-exporter-shaped series backfilled through promtool), the way the worker runs it: collect the
job's evidence with ``metrics.url`` set, read it, diagnose. Then the server down, slow, wrong or
flooding: coverage says so and the verdict still comes."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from attribution.bundle import diagnose_bundle
from attribution.capture import capture
from attribution.config import Config
from attribution.jobrecord import job_from_dict
from attribution.model import CoverageStatus, JobRecord, Stream, Verdict
from attribution.ownership import bus_key
from attribution.promql import fetch_metrics, query_for, step_for
from attribution.rules.compiled import RuleSet
from attribution.worker import Worker

from .conftest import PrometheusScenarios
from .dcgm import Scenario
from .harness import misbehaving_endpoint

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168,"
    " Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
)
OUTPUT = {
    "dbe": "RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
    "nvlink": WATCHDOG,
    "thermal": WATCHDOG,
    "gpu-vanished": "RuntimeError: CUDA error: unspecified launch failure\n",
    "node-vanished": "srun: error: Node failure on nod-n03\n",
    "healthy": "KeyError: 'labels'\n",
}


def job_for(scenario: Scenario, tmp_path: Path, *, state: str = "FAILED") -> JobRecord:
    out = tmp_path / f"slurm-{scenario.job_id}.out"
    out.write_text(OUTPUT.get(scenario.name, ""))
    record = {
        "cluster": "promtest",
        "job_id": scenario.job_id,
        "state": "NODE_FAIL" if scenario.name == "node-vanished" else state,
        "exit_code": "0:0" if scenario.name == "node-vanished" else "1:0",
        "nodes": ",".join(scenario.nodes),
        "start": scenario.start.isoformat(),
        "end": scenario.end.isoformat(),
        "user": "root",
        "uid": 0,
        "std_out": str(out),
        "std_err": str(out),
        "exclusive": True,
    }
    return job_from_dict(record, "test")


def config_for(tmp_path: Path, **metrics: Any) -> Config:
    return Config.model_validate(
        {
            "store": str(tmp_path / "verdicts.sqlite"),
            "spool": str(tmp_path / "spool"),
            "logs": {"kernel": [], "syslog": [], "fabricmanager": [], "slurmctld": []},
            "metrics": metrics,
        }
    )


def diagnose(job: JobRecord, config: Config, ruleset: RuleSet) -> Verdict:
    worker = Worker(config, backend=SimpleNamespace(), ruleset=ruleset)  # type: ignore[arg-type]
    try:
        return worker.diagnose(job)
    finally:
        worker.store.close()


def metrics_coverage(verdict: Verdict) -> dict[str | None, tuple[str, str]]:
    return {
        c.node: (c.status.value, c.reason or "")
        for c in verdict.coverage
        if c.stream is Stream.METRICS
    }


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("dbe", "gpu-uncorrectable-memory"),
        ("nvlink", "nvlink-errors-climbing"),
        ("thermal", "gpu-throttled-straggler"),
        ("gpu-vanished", "gpu-stopped-reporting"),
    ],
)
def test_each_gpu_fault_in_the_metrics_names_the_gpu(
    name: str,
    cause: str,
    dcgm_prometheus: PrometheusScenarios,
    tmp_path: Path,
    ruleset: RuleSet,
) -> None:
    scenario = dcgm_prometheus[name]
    (event,) = scenario.events
    gpu = scenario.gpu(event.node, event.gpu or 0)
    verdict = diagnose(
        job_for(scenario, tmp_path), config_for(tmp_path, url=dcgm_prometheus.url), ruleset
    )
    assert verdict.cause is not None and verdict.cause.id == cause, verdict.summary
    assert verdict.sub_domain == "hardware"
    assert [(r.node, r.device) for r in verdict.responsible] == [
        (event.node, bus_key(gpu.pci_bus_id))
    ]
    assert verdict.responsible[0].confirmed_by == "metrics"
    # the metric evidence is in the chain (the root, or context beside a straggler's timeout)
    assert any(s.stream == "metrics" for s in verdict.symptom_chain)
    coverage = metrics_coverage(verdict)
    assert set(coverage) == set(scenario.nodes)
    assert all(status == "ok" and "series" in why for status, why in coverage.values())


def test_a_node_whose_metrics_stopped_when_slurm_lost_it(
    dcgm_prometheus: PrometheusScenarios, tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = dcgm_prometheus["node-vanished"]
    verdict = diagnose(
        job_for(scenario, tmp_path), config_for(tmp_path, url=dcgm_prometheus.url), ruleset
    )
    assert [r.node for r in verdict.responsible] == ["nod-n03"]
    assert verdict.responsible[0].confirmed_by == "metrics"


def test_a_healthy_jobs_metrics_change_nothing(
    dcgm_prometheus: PrometheusScenarios, tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = dcgm_prometheus["healthy"]
    verdict = diagnose(
        job_for(scenario, tmp_path), config_for(tmp_path, url=dcgm_prometheus.url), ruleset
    )
    assert verdict.sub_domain == "application"
    assert verdict.responsible == ()
    assert not [s for s in verdict.symptom_chain if s.stream == "metrics"]
    assert {s for s, _ in metrics_coverage(verdict).values()} == {"ok"}


def test_the_instance_label_and_small_queries_give_the_same_answer(
    dcgm_prometheus: PrometheusScenarios, tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = dcgm_prometheus["dbe"]
    config = config_for(tmp_path, url=dcgm_prometheus.url, node_label="instance", nodes_per_query=1)
    verdict = diagnose(job_for(scenario, tmp_path), config, ruleset)
    assert verdict.cause is not None and verdict.cause.id == "gpu-uncorrectable-memory"
    assert [r.node for r in verdict.responsible] == ["dbe-n02"]
    assert len({c.files for c in verdict.coverage if c.stream is Stream.METRICS}) == 1


def test_sattr_bundle_keeps_the_metrics_and_replays_the_verdict(
    dcgm_prometheus: PrometheusScenarios, tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = dcgm_prometheus["gpu-vanished"]
    job = job_for(scenario, tmp_path)
    config = config_for(tmp_path, url=dcgm_prometheus.url, nodes_per_query=2)
    live = diagnose(job, config, ruleset)
    report = capture(job, config, tmp_path / "bundle")
    assert "metrics.json" in report.files
    saved = json.loads((tmp_path / "bundle" / "metrics.json").read_text())
    assert isinstance(saved, list) and len(saved) == 2  # one answer per query
    _, replayed = diagnose_bundle(tmp_path / "bundle", ruleset)
    assert replayed.cause == live.cause
    assert replayed.responsible == live.responsible


def test_the_query_is_bounded_by_the_window(dcgm_prometheus: PrometheusScenarios) -> None:
    scenario = dcgm_prometheus["dbe"]
    settings = config_for(Path("/nonexistent"), url=dcgm_prometheus.url).metrics
    assert step_for(settings, scenario.start, scenario.end) == 15.0
    day = step_for(settings, scenario.start, scenario.start + timedelta(days=30))
    assert day == 3600.0  # 30 days in 720 points
    query = query_for(settings, ["dbe-n01", "dbe.n02"])
    assert 'Hostname=~"(?:dbe\\\\-n01|dbe\\\\.n02)(?:[.:].*)?"' in query


# --------------------------------------------------------------- a server that is no help


def test_prometheus_down(tmp_path: Path, ruleset: RuleSet) -> None:
    from tests.server.conftest import free_port

    scenario = failing_job_scenario()
    url = f"http://127.0.0.1:{free_port()}"
    verdict = diagnose(job_for(scenario, tmp_path), config_for(tmp_path, url=url), ruleset)
    assert verdict.sub_domain == "application"  # the verdict still comes
    coverage = metrics_coverage(verdict)
    assert {s for s, _ in coverage.values()} == {"unreachable"}
    assert all(url in why and "asked for" in why for _, why in coverage.values())
    # sattr bundle keeps what the server did not give: the replay's coverage says the same
    config = config_for(tmp_path, url=url)
    capture(job_for(scenario, tmp_path), config, tmp_path / "bundle")
    assert not (tmp_path / "bundle" / "metrics.json").exists()
    _, replayed = diagnose_bundle(tmp_path / "bundle", ruleset)
    assert metrics_coverage(replayed) == coverage


@pytest.mark.parametrize(
    ("mode", "options", "settings", "status", "words"),
    [
        ("slow", {"delay": 5.0}, {"timeout": 1}, "unreachable", "no whole answer within 1 s"),
        ("error", {"status": 503}, {}, "error", "HTTP 503: unavailable: the query engine"),
        ("error", {"status": 422, "error_type": "execution"}, {}, "error", "HTTP 422: execution"),
        ("junk", {}, {}, "error", "not a range query's JSON"),
        ("huge", {"size": 4 << 20}, {"max_bytes": "1MiB"}, "error", "more than 1,048,576 bytes"),
    ],
)
def test_a_server_that_misbehaves_is_a_coverage_entry(
    mode: str,
    options: dict[str, Any],
    settings: dict[str, Any],
    status: str,
    words: str,
    tmp_path: Path,
    ruleset: RuleSet,
) -> None:
    scenario = failing_job_scenario()
    with misbehaving_endpoint(mode, **options) as url:
        began = time.monotonic()
        verdict = diagnose(
            job_for(scenario, tmp_path), config_for(tmp_path, url=url, **settings), ruleset
        )
        took = time.monotonic() - began
    assert verdict.sub_domain == "application"
    coverage = metrics_coverage(verdict)
    assert {s for s, _ in coverage.values()} == {status}, coverage
    assert all(words in why for _, why in coverage.values()), coverage
    assert took < 20


def test_an_absurd_number_of_series_stops_at_the_cap(
    flood_prometheus: PrometheusScenarios, tmp_path: Path
) -> None:
    scenario = flood_prometheus["flood"]
    settings = config_for(
        tmp_path, url=flood_prometheus.url, max_series=1000, series=["DCGM_FI_DEV_GPU_TEMP"]
    ).metrics
    began = time.monotonic()
    got = fetch_metrics(settings, list(scenario.nodes), scenario.start, scenario.end, tmp_path)
    assert time.monotonic() - began < 30
    assert got.series == 1000
    (note,) = got.problems
    assert note.code == "prometheus_cap"
    assert "more than 1000 series (metrics.max_series)" in note.text
    saved = json.loads(got.files[0].read_text())
    assert len(saved["data"]["result"]) == 1000


def test_a_flood_within_the_cap_is_read_whole(
    flood_prometheus: PrometheusScenarios, tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = flood_prometheus["flood"]
    job = job_for(scenario, tmp_path)
    config = config_for(tmp_path, url=flood_prometheus.url, series=["DCGM_FI_DEV_GPU_TEMP"])
    verdict = diagnose(job, config, ruleset)
    coverage = metrics_coverage(verdict)
    assert coverage["flood-n01"][0] == "ok"
    assert "20000 series" in coverage["flood-n01"][1]


def failing_job_scenario() -> Scenario:
    """A job with its own bug, for servers that give nothing."""
    from .dcgm import healthy_scenario

    return healthy_scenario()


def test_every_metrics_status_is_a_coverage_status() -> None:
    assert {"ok", "empty", "unreachable", "error", "missing"} <= {s.value for s in CoverageStatus}


def test_a_server_that_does_not_answer_is_asked_once(tmp_path: Path) -> None:
    """A large job must not wait the timeout once per group of nodes."""
    requests: list[str] = []
    nodes = [f"big-n{i:04d}" for i in range(1, 641)]  # ten groups of 64
    with misbehaving_endpoint("slow", delay=5.0, requests=requests) as url:
        settings = config_for(tmp_path, url=url, timeout=1).metrics
        began = time.monotonic()
        start = failing_job_scenario().start
        got = fetch_metrics(settings, nodes, start, start + timedelta(hours=1), tmp_path)
        took = time.monotonic() - began
    assert len(requests) == 1 and took < 5
    (note,) = got.problems
    assert note.code == "prometheus_timeout"
    assert note.args["nodes"] == "big-n[0001-0640]"
