"""GPU metrics on the whole live path: a real Slurm job that holds both GPUs of the node fails
with the CUDA error a double-bit ECC error gives; a real Prometheus holds dcgm-exporter series
of the node for the job's window (backfilled with promtool, as no GPU is here) in which one GPU's
DBE counter and last XID rise while the job runs. The worker, with ``metrics.url`` set, blames
that GPU, confirmed by the metrics; ``sattr bundle`` keeps the answers and replays the verdict.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.prometheus import dcgm
from tests.prometheus.harness import RunningPrometheus, missing, start_prometheus
from tests.slurm.conftest import Cluster, fresh_start, run_keys, sattr, sbatch, sh, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

GPU_BUS_IDS = ["0000:18:00.0", "0000:3b:00.0"]
FAILS = (
    "echo 'epoch 3 step 120 loss 1.92'; sleep 6; "
    "echo 'RuntimeError: CUDA error: uncorrectable ECC error encountered' >&2; exit 1"
)


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def prometheus_needed() -> None:
    problem = missing()
    if problem:
        if os.environ.get("ATTRIBUTION_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"ATTRIBUTION_REQUIRE_PROMETHEUS=1 but {problem}")
        pytest.skip(f"no Prometheus here: {problem}")


@pytest.fixture(scope="module")
def run(cluster: Cluster, prometheus_needed: None) -> Iterator[dict[str, object]]:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = Path(f"/var/tmp/attribution-ci/metrics-{stamp}-{os.getpid()}")
    (base / "jobs").mkdir(parents=True)
    base.chmod(0o755)
    fresh_start(cluster.spool, base, cluster.node)
    job = sbatch(
        "-J", "dbe", "-D", str(base / "jobs"), "-o", str(base / "jobs" / "dbe-%j.out"),
        "--gres=gpu:2", "--wrap", FAILS,
    )  # fmt: skip
    wait_state(job, "FAILED")
    start, end = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "Start,End").strip().split("|")
    began, ended = _when(start), _when(end)
    # the node's two GPUs as dcgm-exporter names them, GPU 1's DBE and XID 48 3 s into the job
    gpus = tuple(
        dcgm.Gpu(cluster.node, i, dcgm.gpu_uuid(cluster.node, i), f"0000{bus}".upper())
        for i, bus in enumerate(GPU_BUS_IDS)
    )
    at = began + timedelta(seconds=3)
    families = dcgm.dcgm_families(
        gpus,
        began - timedelta(minutes=2),
        min(ended + timedelta(seconds=30), datetime.now(UTC)),
        interval=2,
        overrides={
            (cluster.node, 1, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): dcgm.step(at, 0, 2),
            (cluster.node, 1, "DCGM_FI_DEV_XID_ERRORS"): dcgm.step(at, 0, 48),
        },
    )
    server: RunningPrometheus = start_prometheus(dcgm.render(families), base / "prometheus")
    try:
        (base / "gpus.yaml").write_text(json.dumps({cluster.node: GPU_BUS_IDS}))
        config = base / "config.yaml"
        config.write_text(
            json.dumps(
                {
                    "spool": str(cluster.spool),
                    "store": str(base / "verdicts.sqlite"),
                    "settle_delay": 0,
                    "window": {"before": 1, "after": 1},
                    "logs": {"kernel": [], "syslog": [], "slurmctld": []},
                    "reconcile": {"enabled": False},
                    "gpus": {"bus_ids": str(base / "gpus.yaml")},
                    "metrics": {"url": server.url, "timeout": "10s", "min_step": "2s"},
                    "fleet": {"topology": None},
                }
            )
        )
        sattr("worker", "--once", "--config", str(config))
        (key,) = run_keys([f"testcluster_{job}_0"])
        yield {"job": job, "key": key, "config": config, "base": base}
    finally:
        server.stop()


def test_the_worker_blames_the_gpu_the_metrics_name(
    run: dict[str, object], cluster: Cluster
) -> None:
    shown = sattr(str(run["job"]), "--json", "--config", str(run["config"]))
    verdict = json.loads(shown.stdout)
    assert verdict["cause"]["id"] == "gpu-uncorrectable-memory", verdict["summary"]
    assert [(r["node"], r["device"], r["confirmed_by"]) for r in verdict["responsible"]] == [
        (cluster.node, "0000:3b:00", "metrics")
    ]
    coverage = [c for c in verdict["coverage"] if c["stream"] == "metrics"]
    assert [(c["node"], c["status"]) for c in coverage] == [(cluster.node, "ok")]
    assert "series" in coverage[0]["reason"]


def test_sattr_bundle_keeps_the_answers_and_replays(run: dict[str, object]) -> None:
    dest = Path(str(run["base"])) / "bundle"
    sattr("bundle", str(run["job"]), str(dest), "--config", str(run["config"]))
    assert (dest / "metrics.json").is_file()
    replay = sattr("diagnose", str(dest), "--json", check=False)
    assert replay.returncode in (0, 1), replay.stderr  # 1: the job failed; a verdict either way
    verdict = json.loads(replay.stdout)
    assert verdict["cause"]["id"] == "gpu-uncorrectable-memory"
    assert [r["device"] for r in verdict["responsible"]] == ["0000:3b:00"]
