"""The fleet view on a real Slurm: the worker records every run (the ones that passed as
exposure), ``sattr nodes`` reads them from the store and Slurm's node events from
``sacctmgr list events`` (tests/test_fleet.py checks that only administrators may)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.slurm.conftest import Cluster, fresh_start, run_keys, sh, wait_node_idle
from tests.slurm.test_worker_live import Site

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(cluster: Cluster) -> Iterator[Site]:
    s = Site(cluster)
    fresh_start(cluster.spool, s.base, cluster.node)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def submit(site: Site, command: str, tag: str) -> str:
    return sh(
        "sbatch", "--parsable", "-D", str(site.jobs), "-o", str(site.jobs / "f-%j.out"),
        "-J", tag, "--wrap", command, user=site.cluster.user,
    ).strip().split(";")[0]  # fmt: skip


def runs(site: Site) -> dict[str, str]:
    import sqlite3

    db = sqlite3.connect(site.store)
    try:
        return dict(db.execute("SELECT key, terminal_state FROM runs").fetchall())
    except sqlite3.OperationalError:
        return {}
    finally:
        db.close()


def sattr_nodes(
    site: Site, *args: str, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "attribution", "nodes", "--config", str(site.config), *args]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_the_fleet_view_counts_passed_runs_and_slurms_node_events(
    site: Site, cluster: Cluster
) -> None:
    began = datetime.now(UTC)
    tag = "fleet"
    jobs = [submit(site, "exit 0", tag) for _ in range(3)]
    jobs += [submit(site, "echo broken >&2; exit 2", tag) for _ in range(2)]
    site.wait_ended(tag)
    keys = run_keys([f"testcluster_{j}_0" for j in jobs])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(set(runs(site)) & set(keys)) < len(keys):
        time.sleep(1)
    recorded = runs(site)
    assert {recorded.get(k) for k in keys[:3]} == {"pass"}, recorded  # dropped, but counted
    assert {recorded.get(k) for k in keys[3:]} == {"fail"}, recorded
    assert set(site.verdicts(keys)) == set(keys[3:])  # no verdict for a job that passed

    # slurmctld's own reason for a node it lost, three times: Slurm's record of the node
    for _ in range(3):
        sh("scontrol", "update", f"nodename={cluster.node}", "state=down", "reason=Not responding")
        time.sleep(1.5)
        # 24.11 refuses RESUME of a node that is already back (ReturnToService): not an error
        sh("scontrol", "update", f"nodename={cluster.node}", "state=resume", check=False)
        wait_node_idle(cluster.node)
    since = began.strftime("%Y-%m-%dT%H:%M:%S")
    done = sattr_nodes(site, "--since", since, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["exposure"] == "all runs" and report["runs"] >= 5, report
    assert report["failed"] >= 2 and not report["notes"], report
    silent = {row["node"]: row for row in report["silent"]}
    assert silent[cluster.node]["events"] >= 3 and silent[cluster.node]["status"] == "suspect"
    text = sattr_nodes(site, "--since", since)
    assert text.returncode == 0 and "silent nodes" in text.stdout, text.stdout
    assert "3 not-responding events" in " ".join(text.stdout.split()), text.stdout
