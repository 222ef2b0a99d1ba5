"""The harness itself: the scenarios come back from a real Prometheus as they were written,
and the misbehaving endpoints misbehave as documented."""

from __future__ import annotations

import itertools
import re
import socket
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prometheus import dcgm, harness
from tests.prometheus.conftest import PrometheusScenarios
from tests.prometheus.harness import RunningPrometheus, query, query_range, values

# the series that carry errors: every default one but the four gauges of load and heat
ERROR_METRICS = tuple(m for m in dcgm.DEFAULT_METRICS if m not in dcgm.DEFAULT_METRICS[:4])


def t(when: datetime) -> float:
    return when.timestamp()


def job_range(
    prom: PrometheusScenarios, scenario: dcgm.Scenario, expr: str
) -> list[dict[str, Any]]:
    return query_range(prom.url, expr, t(scenario.start), t(scenario.end), scenario.interval)


def raw_samples(
    prom: PrometheusScenarios, expr: str, at: datetime, window: str
) -> list[dict[str, Any]]:
    """The stored samples of ``expr`` over ``window`` before ``at`` (a range selector)."""
    data = query(prom.url, f"{expr}[{window}]", t(at))
    assert data["resultType"] == "matrix"
    return list(data["result"])


# ------------------------------------------------------------------ the OpenMetrics text


def test_types_and_help_follow_dcgm_exporter() -> None:
    """Types as in dcgm-exporter's counters CSVs: the last XID and row-remap failure are
    gauges, error totals and violations counters."""
    gauges = {m for m, (kind, _) in dcgm.METRICS.items() if kind == "gauge"}
    assert gauges == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    }
    text = dcgm.render(*(s.families for s in dcgm.all_scenarios()[:2]))
    assert text.endswith("# EOF\n")
    types = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert [name for name, _ in types] == list(dcgm.DEFAULT_METRICS)  # each family once
    assert harness.time_span(text)[0] == t(dcgm.dbe_scenario().data_start)


def test_gpu_identities_are_deterministic() -> None:
    a, b = dcgm.gpus(["x-n01"], 8), dcgm.gpus(["x-n01"], 8)
    assert a == b
    assert len({g.uuid for g in a}) == 8
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", a[0].uuid
    )
    assert [g.pci_bus_id for g in a][:2] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert a[3].labels() == {
        "gpu": "3",
        "UUID": a[3].uuid,
        "pci_bus_id": "00000000:4E:00.0",
        "device": "nvidia3",
        "modelName": dcgm.MODEL,
        "Hostname": "x-n01",
        "instance": "x-n01:9400",
        "job": "dcgm-exporter",
    }


def test_require_prometheus_skips_or_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "binaries", lambda: (None, "/usr/bin/promtool"))
    monkeypatch.setattr(harness, "REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match="prometheus not found"):
        harness.require_prometheus()
    monkeypatch.setattr(harness, "REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match="ATTRIBUTION_REQUIRE_PROMETHEUS=1"):
        harness.require_prometheus()


# ------------------------------------------------------------------ the real Prometheus


def test_dbe_steps_at_t0(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["dbe"]
    (event,) = s.events
    t0 = t(event.at)
    for metric, after in (
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2),
        ("DCGM_FI_DEV_XID_ERRORS", 48),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1),
    ):
        result = job_range(dcgm_prometheus, s, f'{metric}{{Hostname=~"dbe-n.*"}}')
        assert len(result) == 4 * 8
        culprit = values(result, Hostname=event.node, gpu=str(event.gpu))
        assert culprit[0] == (t(s.start), 0)
        assert [v for when, v in culprit if when < t0] == [0] * 80
        assert [v for when, v in culprit if when >= t0] == [after] * 11  # t0 .. end
        culprit_key = (event.node, str(event.gpu))
        others = [r for r in result if (r["metric"]["Hostname"], r["metric"]["gpu"]) != culprit_key]
        assert len(others) == 4 * 8 - 1
        assert all(v == "0" for r in others for _, v in r["values"])
    assert event.pci_bus_id == "00000000:4E:00.0" and event.uuid == s.gpu(event.node, 3).uuid


def test_series_carry_dcgm_labels(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["dbe"]
    gpu = s.gpu("dbe-n02", 3)
    (series,) = job_range(dcgm_prometheus, s, f'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{UUID="{gpu.uuid}"}}')
    assert series["metric"] == {"__name__": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **gpu.labels()}


def test_nvlink_crc_climbs(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["nvlink"]
    (event,) = s.events
    t0 = t(event.at)
    metric = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    result = job_range(dcgm_prometheus, s, f'{metric}{{Hostname=~"nvl-n.*"}}')
    climbing = values(result, Hostname=event.node, gpu=str(event.gpu))
    assert all(v == 0 for when, v in climbing if when <= t0)
    after = [(when, v) for when, v in climbing if when >= t0]
    assert after == [(when, 4 * (when - t0)) for when, _ in after]
    assert after[-1] == (t(s.end), 4 * (t(s.end) - t0))
    assert sum(1 for r in result if any(v != "0" for _, v in r["values"])) == 1


def test_thermal_straggler(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["thermal"]
    (event,) = s.events
    t0 = t(event.at)
    where = {"Hostname": event.node, "gpu": str(event.gpu)}
    reasons = values(
        job_range(dcgm_prometheus, s, 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{Hostname=~"thr-n.*"}'),
        **where,
    )
    assert {v for when, v in reasons if when >= t0} == {0x48}
    assert {v for when, v in reasons if when < t0} == {0}
    clock = job_range(dcgm_prometheus, s, 'DCGM_FI_DEV_SM_CLOCK{Hostname=~"thr-n.*"}')
    assert {v for when, v in values(clock, **where) if when >= t0} == {705}
    assert {v for r in clock if r["metric"]["Hostname"] != event.node for _, v in r["values"]} == {
        "1410"
    }
    violation = values(
        job_range(dcgm_prometheus, s, f'DCGM_FI_DEV_THERMAL_VIOLATION{{Hostname="{event.node}"}}'),
        **where,
    )
    rising = [v for when, v in violation if when >= t0]
    assert rising[0] == 0 and all(b - a == 30_000_000 for a, b in itertools.pairwise(rising))


def test_vanished_gpu_has_no_samples_after_t(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["gpu-vanished"]
    (event,) = s.events
    gone = t(event.at)
    stored = raw_samples(
        dcgm_prometheus, f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{event.node}"}}', s.data_end, "2h"
    )
    last = {r["metric"]["gpu"]: float(r["values"][-1][0]) for r in stored}
    assert last.pop(str(event.gpu)) == gone - s.interval
    assert set(last.values()) == {t(s.data_end)}  # the seven siblings go on
    # no staleness marker in backfilled data: a range query still sees the last value for
    # the lookback delta (5 minutes) after it
    ranged = job_range(
        dcgm_prometheus, s, f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{event.node}",gpu="5"}}'
    )
    assert max(float(w) for w, _ in ranged[0]["values"]) == gone - s.interval + 300


def test_vanished_node_stops_entirely(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["node-vanished"]
    (event,) = s.events
    stored = raw_samples(
        dcgm_prometheus, f'{{__name__=~"DCGM_FI_DEV_.+",Hostname="{event.node}"}}', s.data_end, "3h"
    )
    assert len(stored) == 8 * len(dcgm.DEFAULT_METRICS)
    assert {float(r["values"][-1][0]) for r in stored} == {t(event.at) - s.interval}


def test_healthy_job_moves_no_error_series(dcgm_prometheus: PrometheusScenarios) -> None:
    s = dcgm_prometheus["healthy"]
    errors = "|".join(ERROR_METRICS)
    result = job_range(dcgm_prometheus, s, f'{{__name__=~"{errors}",Hostname=~"ok-n.*"}}')
    assert len(result) == 4 * 8 * len(ERROR_METRICS)
    assert {v for r in result for _, v in r["values"]} == {"0"}
    temps = job_range(dcgm_prometheus, s, 'DCGM_FI_DEV_GPU_TEMP{Hostname=~"ok-n.*"}')
    assert all(58 <= float(v) <= 64 for r in temps for _, v in r["values"])
    assert all(len(r["values"]) == 121 for r in temps)  # start to end every 30 s


def test_scenarios_keep_to_their_windows(dcgm_prometheus: PrometheusScenarios) -> None:
    """Each scenario's nodes have series only around its own job."""
    for s in dcgm_prometheus.scenarios.values():
        data = query(dcgm_prometheus.url, "count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", t(s.start))
        hosts = {r["metric"]["Hostname"] for r in data["result"]}
        assert hosts == set(s.nodes), s.name


def test_extra_prometheus_starts_and_stops(
    extra_prometheus: Callable[..., RunningPrometheus],
) -> None:
    gpu = dcgm.gpus(["extra-n01"], 1)
    text = dcgm.render(
        dcgm.dcgm_families(
            gpu, 1_700_000_000, 1_700_000_600, 60, metrics=["DCGM_FI_DEV_XID_ERRORS"]
        )
    )
    server = extra_prometheus(text, lookback_delta="1m")
    assert server.port != 9090 and server.span == (1_700_000_000, 1_700_000_600)
    (series,) = server.query_range("DCGM_FI_DEV_XID_ERRORS", 1_700_000_000, 1_700_000_600, 60)
    assert len(series["values"]) == 11
    server.stop()
    assert server.process.returncode is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_a_prometheus_that_cannot_start_is_reported(tmp_path: Path) -> None:
    harness.require_prometheus()
    text = dcgm.render(
        dcgm.dcgm_families(dcgm.gpus(["bad-n01"], 1), 1_700_000_000, 1_700_000_060, 60)
    )
    with pytest.raises(RuntimeError, match="no-such-flag"):
        harness.start_prometheus(text, tmp_path, extra_args=("--no-such-flag",))


def test_flood_answers_20000_series(flood_prometheus: PrometheusScenarios) -> None:
    s = flood_prometheus["flood"]
    (series,) = query_range(
        flood_prometheus.url,
        'count(DCGM_FI_DEV_GPU_TEMP{Hostname="flood-n01"})',
        t(s.start),
        t(s.end),
        60,
    )
    assert {v for _, v in series["values"]} == {"20000"}


# ------------------------------------------------------------------ misbehaving endpoints


def test_slow_endpoint_times_out_then_answers() -> None:
    seen: list[str] = []
    with harness.misbehaving_endpoint("slow", delay=5, requests=seen) as url:
        began = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{url}/api/v1/query_range?query=up", timeout=0.3)
        assert time.monotonic() - began < 2
    assert seen == ["GET /api/v1/query_range?query=up"]
    with harness.misbehaving_endpoint("slow", delay=0.2) as url:
        answer = httpx.post(f"{url}/api/v1/query_range", data={"query": "up"}, timeout=5)
    assert answer.json() == {"status": "success", "data": {"resultType": "matrix", "result": []}}


@pytest.mark.parametrize("status", [500, 503, 422])
def test_error_endpoint(status: int) -> None:
    with harness.misbehaving_endpoint(
        "error", status=status, error_type="execution", error="query timed out"
    ) as url:
        answer = httpx.get(f"{url}/api/v1/query_range", timeout=5)
    assert answer.status_code == status
    assert answer.json() == {
        "status": "error",
        "errorType": "execution",
        "error": "query timed out",
    }


def test_junk_endpoint() -> None:
    with harness.misbehaving_endpoint("junk") as url:
        answer = httpx.get(f"{url}/api/v1/query_range", timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    with pytest.raises(ValueError):  # noqa: PT011 - UnicodeDecodeError or JSONDecodeError
        answer.json()
    with harness.misbehaving_endpoint("junk", body=b'{"status":"success"}') as url:
        assert httpx.get(url, timeout=5).json() == {"status": "success"}


@pytest.mark.parametrize("content_length", [True, False])
def test_huge_endpoint(content_length: bool) -> None:
    size = 4 * 1024 * 1024
    with harness.misbehaving_endpoint("huge", size=size, content_length=content_length) as url:
        answer = httpx.get(f"{url}/api/v1/query_range", timeout=10)
        assert size - 64 < len(answer.content) <= size
        assert ("content-length" in answer.headers) is content_length
        body = answer.json()
        assert body["status"] == "success" and len(body["data"]["result"][0]["values"]) > 200_000
        # a client that stops reading early does not hold the server up
        with httpx.stream("GET", url, timeout=10) as partial:
            next(partial.iter_bytes(65536))
