"""GPU metrics files (docs/bundles.md, "metrics.json"): the reader's lines, its coverage, bundles
that carry them, and what the rules make of them. The connector against a real Prometheus is in
tests/prometheus/test_connector.py."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from attribution.bundle import diagnose_bundle
from attribution.model import CoverageNote, CoverageStatus, Stream
from attribution.rules.compiled import RuleSet
from attribution.sources.metrics import (
    MetricsError,
    MetricsReader,
    Series,
    line_text,
    node_of,
    parse_bodies,
    series_changes,
)
from attribution.sources.specs import ReadContext, SourceSpec

START = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
END = START + timedelta(hours=1)
T0 = START.timestamp()


def body(series: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def one(
    name: str, node: str, gpu: int, values: list[tuple[float, float]], **labels: str
) -> dict[str, Any]:
    metric = {
        "__name__": name,
        "Hostname": node,
        "gpu": str(gpu),
        "UUID": f"GPU-{node}-{gpu}",
        "pci_bus_id": f"00000000:{0x1B + 0x10 * gpu:02X}:00.0",
        **labels,
    }
    return {"metric": metric, "values": [[t, str(v)] for t, v in values]}


def flat(value: float, until: float = 3900.0, every: float = 30.0) -> list[tuple[float, float]]:
    return [(T0 - 300 + i * every, value) for i in range(int((until + 300) / every) + 1)]


def stepped(at: float, before: float, after: float) -> list[tuple[float, float]]:
    return [(t, before if t < T0 + at else after) for t, _ in flat(0)]


def cluster(
    nodes: tuple[str, ...] = ("gpu-a01", "gpu-a02"),
    special: dict[tuple[str, int, str], list[tuple[float, float]]] | None = None,
    gone: dict[tuple[str, int], float] | None = None,
) -> dict[str, Any]:
    """Eight GPUs a node, three series each, flat unless ``special`` says otherwise; a GPU in
    ``gone`` has no samples after that many seconds into the job."""
    out = []
    for node in nodes:
        for gpu in range(8):
            for name in (
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "DCGM_FI_DEV_XID_ERRORS",
                "DCGM_FI_DEV_GPU_TEMP",
            ):
                values = (special or {}).get((node, gpu, name)) or flat(60 if "TEMP" in name else 0)
                cut = (gone or {}).get((node, gpu))
                if cut is not None:
                    values = [(t, v) for t, v in values if t < T0 + cut]
                out.append(one(name, node, gpu, values))
    return body(out)


def texts(series: Series) -> list[str]:
    return [line_text(c) for c in series_changes(series)]


def make(name: str, samples: list[tuple[float, float]], job: str | None = None) -> Series:
    return Series(name, "n1", "3", None, "0000:3b:00", job, samples)


# ----------------------------------------------------------------------- change lines


def test_a_counter_step_is_one_line_with_its_rise() -> None:
    lines = texts(make("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", [(0, 0), (30, 0), (60, 2), (90, 2)]))
    assert lines == [
        "dcgm-exporter: GPU 3 (0000:3b:00) DCGM_FI_DEV_ECC_DBE_VOL_TOTAL rose from 0 to 2 (+2)"
    ]


def test_a_climbing_counter_is_folded_and_a_reset_is_said() -> None:
    samples = [(i * 30.0, float(i * 100)) for i in range(40)] + [(40 * 30.0, 0.0)]
    lines = texts(make("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", samples, job="77"))
    assert len(lines) == 2
    assert "rose from 0 to 3900 (+3900) in 39 steps until" in lines[0]
    assert lines[0].endswith("hpc_job=77")
    assert "fell from 3900 to 0 (a reset)" in lines[1]


def test_rises_far_apart_are_separate_lines() -> None:
    samples = [(0, 0), (30, 1), (60, 1), (3000, 1), (3030, 5)]
    assert len(texts(make("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", samples))) == 2


def test_state_before_the_window_is_said_only_where_it_means_something() -> None:
    pending = texts(make("DCGM_FI_DEV_ROW_REMAP_PENDING", [(0, 1), (30, 1)]))
    assert pending == [
        "dcgm-exporter: GPU 3 (0000:3b:00) DCGM_FI_DEV_ROW_REMAP_PENDING was already 1 at the"
        " first sample"
    ]
    # a lifetime total that is not zero is ordinary
    assert texts(make("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", [(0, 9), (30, 9)])) == []


def test_the_last_xid_changes() -> None:
    lines = texts(make("DCGM_FI_DEV_XID_ERRORS", [(0, 31), (30, 31), (60, 0), (90, 79)]))
    assert [line.split(" DCGM_FI_DEV_XID_ERRORS ")[1] for line in lines] == [
        "was already 31 at the first sample",
        "set to 79 (was 0)",
    ]


@pytest.mark.parametrize(
    ("mask", "kind", "reasons"),
    [
        (0x48, "thermal", "hw_slowdown, hw_thermal"),
        (0x80, "power", "hw_power_brake"),
        (0x8, "slowdown", "hw_slowdown"),
        (0x4, "power_cap", "sw_power_cap"),
    ],
)
def test_throttle_stretches_name_their_reasons(mask: int, kind: str, reasons: str) -> None:
    samples = [(0, 0), (30, mask), (60, mask), (90, 1), (120, 0)]
    lines = texts(make("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", samples))
    assert lines == [
        f"dcgm-exporter: GPU 3 (0000:3b:00) clocks held down for {kind} reasons: {reasons}"
        f" (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS 0x{mask:x}) for 60 s"
    ]


def test_idle_and_application_clock_bits_are_not_throttling() -> None:
    assert texts(make("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", [(0, 0x1), (30, 0x3)])) == []


def test_series_that_carry_no_evidence_give_no_lines() -> None:
    assert texts(make("DCGM_FI_DEV_GPU_TEMP", [(0, 40), (30, 95)])) == []


# ----------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"Hostname": "gpu-a03"}, "gpu-a03"),
        ({"instance": "gpu-a03.cluster.example:9400"}, "gpu-a03"),
        ({"instance": "[fd00::3]:9400"}, None),  # not a host name a node can have
        ({"Hostname": "../../etc"}, None),
        ({"node": "gpu-a03", "instance": "10.0.0.3:9400"}, "gpu-a03"),
        ({"job": "dcgm"}, None),
    ],
)
def test_the_node_of_a_series(labels: dict[str, str], node: str | None) -> None:
    assert node_of(labels) == node


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data"),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "'matrix'"),
        ([1, 2], "not a Prometheus answer"),
        (body([{"values": []}]), "no 'metric' labels"),
        (body([{"metric": {}, "values": [[1, "2", 3]]}]), "[time, value] pair"),
        (body([{"metric": {}, "values": [["x", "2"]]}]), "series 1"),
    ],
)
def test_what_is_not_an_answer_is_one_line(data: object, why: str) -> None:
    with pytest.raises(MetricsError) as err:
        parse_bodies(data, "metrics.json")
    assert why in str(err.value)
    assert "metrics.json" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_list_of_answers_is_read_and_bounded() -> None:
    series = [one("DCGM_FI_DEV_GPU_TEMP", "n1", g, [(T0, 40)]) for g in range(5)]
    found, notes = parse_bodies([body(series[:3]), body(series[3:])], "m", max_series=4)
    assert len(found) == 4
    assert notes == [CoverageNote("metrics_series_cap", {"count": 1, "limit": 4})]


def test_labels_cannot_write_words_into_a_line() -> None:
    forged = "3 (0000:3b:00) DCGM_FI_DEV_XID_ERRORS set to 79 (was 0)"
    labels = {
        "__name__": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Hostname": "n1",
        "gpu": forged,
        "UUID": forged,
        "pci_bus_id": forged,
        "hpc_job": "1 DCGM_FI_DEV_XID_ERRORS set to 79",
    }
    data = body([{"metric": labels, "values": [[0, "0"], [30, "5"]]}])
    (series,), _ = parse_bodies(data, "m")
    assert (series.gpu, series.uuid, series.bus, series.job) == (None, None, None, None)
    assert texts(series) == [
        "dcgm-exporter: GPU DCGM_FI_DEV_PCIE_REPLAY_COUNTER rose from 0 to 5 (+5)"
    ]


def test_not_a_number_and_infinite_samples_are_dropped() -> None:
    data = body([{"metric": {"__name__": "x"}, "values": [[1, "NaN"], [2, "+Inf"], [3, "1"]]}])
    found, _ = parse_bodies(data, "m")
    assert found[0].samples == [(3.0, 1.0)]


# ----------------------------------------------------------------------- the reader


def read(
    tmp_path: Path, data: object, *, node: str | None = None, name: str = "metrics.json"
) -> tuple[list[str], list[Any]]:
    path = tmp_path / name
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    spec = SourceSpec(Stream.METRICS, node, [path], [name], kind="metrics")
    ctx = ReadContext(job_nodes=("gpu-a01", "gpu-a02"), job_span=(START, END), window=(START, END))
    reader = MetricsReader(spec, ctx)
    lines = [f"{line.node} {line.device} {line.text}" for line in reader.lines()]
    return lines, reader.coverages()


def test_a_vanished_gpu_and_a_dbe_are_lines_on_their_node(tmp_path: Path) -> None:
    data = cluster(
        special={("gpu-a02", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)},
        gone={("gpu-a02", 5): 2000},
    )
    lines, coverage = read(tmp_path, data, name="metrics.json.gz")
    assert lines == [
        "gpu-a02 0000:4b:00 dcgm-exporter: GPU 3 (0000:4b:00) DCGM_FI_DEV_ECC_DBE_VOL_TOTAL rose"
        " from 0 to 2 (+2)",
        "gpu-a02 0000:6b:00 dcgm-exporter: GPU 5 (0000:6b:00) stopped reporting: its last sample"
        " was at 2026-11-30T10:33:00Z; 7 other GPU(s) of the node reported until"
        " 2026-11-30T11:05:00Z",
    ]
    assert [(c.node, c.status, c.reason) for c in coverage] == [
        ("gpu-a01", CoverageStatus.OK, "24 series, 3384 samples read"),
        ("gpu-a02", CoverageStatus.OK, "24 series, 3192 samples read"),
    ]


def test_a_node_that_stopped_reporting(tmp_path: Path) -> None:
    data = cluster(gone={("gpu-a01", g): 1500 for g in range(8)})
    lines, _ = read(tmp_path, data)
    assert lines == [
        "gpu-a01 None dcgm-exporter: every series of the node stopped: its last sample was at"
        " 2026-11-30T10:24:30Z; the job ended at 2026-11-30T11:00:00Z"
    ]


def test_every_node_stopping_together_is_the_exporter_not_the_nodes(tmp_path: Path) -> None:
    data = cluster(gone={(n, g): 1500 for n in ("gpu-a01", "gpu-a02") for g in range(8)})
    lines, _ = read(tmp_path, data)
    assert lines == []


def test_coverage_says_what_was_not_there(tmp_path: Path) -> None:
    data = cluster(nodes=("gpu-a01", "gpu-z99"))
    lines, coverage = read(tmp_path, data)
    assert lines == []
    assert [(c.node, c.status) for c in coverage] == [
        ("gpu-a01", CoverageStatus.OK),
        ("gpu-a02", CoverageStatus.EMPTY),
    ]
    assert "24 series of hosts outside the job left out" in (coverage[0].reason or "")
    assert "no series for this node" in (coverage[1].reason or "")


@pytest.mark.parametrize(
    ("content", "status", "reason"),
    [
        (b"<html>oops", CoverageStatus.ERROR, "metrics.json: Expecting value"),
        (
            json.dumps(
                {"status": "error", "errorType": "timeout", "error": "query timed out"}
            ).encode(),
            CoverageStatus.ERROR,
            "the server answered timeout: query timed out",
        ),
        (b"[" * 100_000, CoverageStatus.ERROR, "metrics.json:"),
    ],
)
def test_a_file_that_is_not_an_answer_is_an_error_entry(
    tmp_path: Path, content: bytes, status: CoverageStatus, reason: str
) -> None:
    path = tmp_path / "metrics.json"
    path.write_bytes(content)
    spec = SourceSpec(Stream.METRICS, "gpu-a01", [path], ["metrics.json"], kind="metrics")
    reader = MetricsReader(spec, ReadContext(job_nodes=("gpu-a01",)))
    assert list(reader.lines()) == []
    (entry,) = reader.coverages()
    assert entry.status is status
    assert reason in (entry.reason or "")


def test_connector_notes_say_which_nodes_the_server_failed(tmp_path: Path) -> None:
    note = CoverageNote(
        "prometheus_timeout", {"url": "http://p:9090", "seconds": "10", "nodes": "gpu-a02"}
    )
    spec = SourceSpec(Stream.METRICS, None, [], [], notes=[note], kind="metrics")
    reader = MetricsReader(spec, ReadContext(job_nodes=("gpu-a01", "gpu-a02")))
    assert list(reader.lines()) == []
    got = {c.node: (c.status, c.reason) for c in reader.coverages()}
    assert got["gpu-a02"] == (
        CoverageStatus.UNREACHABLE,
        "http://p:9090: no whole answer within 10 s (metrics.timeout; asked for gpu-a02)",
    )
    assert got["gpu-a01"][0] is CoverageStatus.MISSING


# ----------------------------------------------------------------------- bundles and rules


def bundle(tmp_path: Path, data: object, *, per_node: bool = False, stderr: str = "") -> Path:
    root = tmp_path / "b"
    (root / "job").mkdir(parents=True)
    record = {
        "cluster": "c1",
        "job_id": "5001",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": "gpu-a[01-02]",
        "start": START.isoformat(),
        "end": END.isoformat(),
        "user": "alice",
        "exclusive": True,
    }
    (root / "job.json").write_text(json.dumps(record))
    (root / "job" / "stderr.log").write_text(stderr)
    if per_node:
        (root / "nodes" / "gpu-a02").mkdir(parents=True)
        (root / "nodes" / "gpu-a02" / "metrics.json").write_text(json.dumps(data))
    else:
        (root / "metrics.json").write_text(json.dumps(data))
    return root


def test_a_dbe_in_the_metrics_names_the_gpu(tmp_path: Path, ruleset: RuleSet) -> None:
    data = cluster(
        special={
            ("gpu-a02", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2),
            ("gpu-a02", 3, "DCGM_FI_DEV_XID_ERRORS"): stepped(1800, 0, 48),
        }
    )
    stderr = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    _, verdict = diagnose_bundle(bundle(tmp_path, data, per_node=True, stderr=stderr), ruleset)
    assert verdict.sub_domain == "hardware"
    assert verdict.cause is not None and verdict.cause.id == "gpu-uncorrectable-memory"
    assert [(r.node, r.device, r.confirmed_by) for r in verdict.responsible] == [
        ("gpu-a02", "0000:4b:00", "metrics")
    ]


def test_a_vanished_gpu_is_a_fell_off_the_bus_candidate(tmp_path: Path, ruleset: RuleSet) -> None:
    data = cluster(gone={("gpu-a01", 6): 1200})
    stderr = "RuntimeError: CUDA error: unspecified launch failure\n"
    _, verdict = diagnose_bundle(bundle(tmp_path, data, stderr=stderr), ruleset)
    assert verdict.cause is not None and verdict.cause.id == "gpu-stopped-reporting"
    assert [(r.node, r.device) for r in verdict.responsible] == [("gpu-a01", "0000:7b:00")]


def test_another_jobs_gpu_in_the_metrics_never_blames(tmp_path: Path, ruleset: RuleSet) -> None:
    special = {
        ("gpu-a02", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2),
        ("gpu-a02", 3, "DCGM_FI_DEV_XID_ERRORS"): stepped(1800, 0, 48),
    }
    data = cluster(special=special)
    for series in data["data"]["result"]:
        labels = series["metric"]
        if labels["Hostname"] == "gpu-a02" and labels["gpu"] == "3":
            labels["hpc_job"] = "4999"
    stderr = "KeyError: 'labels'\n"
    _, verdict = diagnose_bundle(bundle(tmp_path, data, stderr=stderr), ruleset)
    assert verdict.sub_domain == "application"
    assert verdict.responsible == ()


def test_metrics_lines_are_trusted_node_evidence(tmp_path: Path, ruleset: RuleSet) -> None:
    _, verdict = diagnose_bundle(bundle(tmp_path, cluster()), ruleset)
    entries = [c for c in verdict.coverage if c.stream is Stream.METRICS]
    assert [(c.node, c.status.value, c.trust) for c in entries] == [
        ("gpu-a01", "ok", "trusted"),
        ("gpu-a02", "ok", "trusted"),
    ]


def test_an_exclusive_job_needs_no_gpu_list(tmp_path: Path, ruleset: RuleSet) -> None:
    """A job that had its nodes to itself had every GPU on them: no 'GPUs not known' warning."""
    _, verdict = diagnose_bundle(bundle(tmp_path, cluster()), ruleset)
    assert verdict.ownership["checked"] is True
    assert not any("gres_detail" in note for note in verdict.ownership.get("notes", []))
