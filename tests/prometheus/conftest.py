"""Fixtures of the Prometheus tests: one real Prometheus for the whole session over every
dcgm-exporter scenario of ``tests/prometheus/dcgm.py`` (backfilled from one OpenMetrics file),
one over 20,000 series of a single node (started only if a test asks), and a factory for a
test's own dataset.

Without ``prometheus`` and ``promtool`` (Debian package ``prometheus``) the tests that use
them are skipped, unless ``ATTRIBUTION_REQUIRE_PROMETHEUS=1`` asks for a failure instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.prometheus import dcgm
from tests.prometheus.harness import RunningPrometheus, start_prometheus


@dataclass(frozen=True)
class PrometheusScenarios:
    """A running Prometheus and the scenarios backfilled into it, by name."""

    url: str  # http://127.0.0.1:PORT
    scenarios: dict[str, dcgm.Scenario]
    server: RunningPrometheus

    def __getitem__(self, name: str) -> dcgm.Scenario:
        return self.scenarios[name]


@pytest.fixture(scope="session")
def dcgm_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusScenarios]:
    """Every scenario of ``dcgm.all_scenarios()`` in one real Prometheus: ``dbe``,
    ``nvlink``, ``thermal``, ``gpu-vanished``, ``healthy``, ``node-vanished``."""
    scenarios = dcgm.all_scenarios()
    text = dcgm.render(*(s.families for s in scenarios))
    server = start_prometheus(text, tmp_path_factory.mktemp("prometheus"))
    try:
        yield PrometheusScenarios(server.url, {s.name: s for s in scenarios}, server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def prometheus_url(dcgm_prometheus: PrometheusScenarios) -> str:
    """The base URL of the scenarios' Prometheus."""
    return dcgm_prometheus.url


@pytest.fixture(scope="session")
def flood_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusScenarios]:
    """A Prometheus whose only node, ``flood-n01``, has 20,000 ``DCGM_FI_DEV_GPU_TEMP``
    series (scenario ``flood``)."""
    scenario = dcgm.flood_scenario()
    server = start_prometheus(scenario.openmetrics, tmp_path_factory.mktemp("prometheus-flood"))
    try:
        yield PrometheusScenarios(server.url, {scenario.name: scenario}, server)
    finally:
        server.stop()


@pytest.fixture
def extra_prometheus(tmp_path: Path) -> Iterator[Callable[..., RunningPrometheus]]:
    """``extra_prometheus(openmetrics, **options)``: one more real Prometheus over the test's
    own dataset (options as ``start_prometheus``'s); each is stopped when the test ends."""
    started: list[RunningPrometheus] = []

    def start(openmetrics: str | Path, **options: Any) -> RunningPrometheus:
        server = start_prometheus(openmetrics, tmp_path / f"prometheus-{len(started)}", **options)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
