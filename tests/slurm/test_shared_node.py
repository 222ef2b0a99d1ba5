"""Jobs of two users share one node on a real Slurm 22.05, with the kernel read from a real
journal (journald, started by .ci/journal-up.sh).

While five jobs run side by side, one is OOM-killed by the kernel in its own cgroup (a real
cgroup OOM), one segfaults (the kernel logs it), one fails with a Python error, one runs into
its time limit and one is cancelled by its owner; meanwhile a plain user forges a kernel line
with ``logger -p kern.err -t kernel "NVRM: Xid ... 79 ..."``. Every job's verdict names only its
own cause, TIMEOUT and CANCELLED keep their terminal_state, no verdict blames the node, the
forged line is shown as forged and the other jobs' kernel events as theirs.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import Cluster, fresh_start, run_keys, sattr, sbatch, sh, wait_state

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FINAL = r"COMPLETED|FAILED|OUT_OF_MEMORY|TIMEOUT|CANCELLED.*|NODE_FAIL"
SECOND_USER = os.environ.get("SLURM_TEST_USER2", "slurmtest2")
GPU_BUS_IDS = ["0000:18:00.0", "0000:3b:00.0"]
FORGED = "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python, GPU has fallen off the bus."


def journal_problem() -> str | None:
    if shutil.which("journalctl") is None:
        return "journalctl is not installed"
    if not Path("/run/systemd/journal/dev-log").is_socket():
        return "no journald is running (.ci/journal-up.sh starts one)"
    if not list(Path("/run/log/journal").glob("*/system.journal")) and not list(
        Path("/var/log/journal").glob("*/system.journal")
    ):
        return "journald writes no journal file"
    return None


class SharedNode:
    """Five jobs of two users on one node, a forged kernel line, one worker run."""

    def __init__(self, cluster: Cluster) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.base = Path(f"/var/tmp/attribution-ci/shared-{stamp}-{os.getpid()}")
        self.jobs_dir = self.base / "jobs"
        self.jobs_dir.mkdir(parents=True)
        self.base.chmod(0o755)
        self.jobs_dir.chmod(0o1777)
        self.store = self.base / "verdicts.sqlite"
        self.config = self.base / "config.yaml"
        gpus = self.base / "gpus.yaml"
        gpus.write_text(json.dumps({cluster.node: GPU_BUS_IDS}))
        journals = "/run/log/journal/*/*.journal"
        if not list(Path("/run/log/journal").glob("*/*.journal")):
            journals = "/var/log/journal/*/*.journal"
        settings: dict[str, Any] = {
            "spool": str(cluster.spool),
            "store": str(self.store),
            "settle_delay": 0,
            "window": {"before": 120, "after": 120},
            "retries": {"max_attempts": 3, "backoff": 1},
            # the kernel from the journal's kernel transport (trusted), syslog from the rest
            "logs": {"journal": [journals], "slurmctld": ["/var/log/slurm/slurmctld.log"]},
            "gpus": {"bus_ids": str(gpus)},
            "admin_comment": {"enabled": True, "foreign": "skip"},
            # the entries fresh_start set aside are earlier tests' jobs: not to be swept back
            "reconcile": {"enabled": False},
        }
        self.config.write_text(json.dumps(settings, indent=2))
        self.cluster = cluster
        self.ids: dict[str, str] = {}
        self.users: dict[str, str] = {}

    def submit(self, kind: str, user: str, *args: str) -> str:
        out = str(self.jobs_dir / f"{kind}-%j.out")
        job = sbatch("-J", kind, "-D", str(self.jobs_dir), "-o", out, *args, user=user)
        self.ids[kind] = job
        self.users[kind] = user
        return job

    def run(self) -> None:
        c = self.cluster
        fresh_start(c.spool, self.base, c.node)
        a, b = c.user, SECOND_USER
        # every job runs while the others' events happen, so each window holds all of them
        self.submit("timeout", b, "--time=1", "--wrap", "echo start; sleep 300")
        self.submit(
            "oom",
            a,
            "--mem=100M",
            "--gres=gpu:1",
            "--wrap",
            "sleep 12; python3 -c 'a = [bytearray(50 << 20) for _ in range(20)]'",
        )
        self.submit(
            "segfault",
            b,
            "--wrap",
            "sleep 16; python3 -c 'import ctypes; ctypes.string_at(0)'",
        )
        self.submit(
            "pyerror",
            a,
            "--gres=gpu:1",
            "--wrap",
            "sleep 20; python3 -c \"import sys; d = {}; print('epoch 1', flush=True); d['input_ids']\"",
        )
        cancel = self.submit("cancel", a, "--wrap", "sleep 300")
        for job in self.ids.values():
            wait_state(job, "RUNNING")
        time.sleep(4)
        # a plain user forges a kernel line: it lands in the journal as syslog, from uid 1002
        sh("logger", "-p", "kern.err", "-t", "kernel", FORGED, user=b)
        time.sleep(24)
        sh("scancel", cancel, user=a)
        for job in self.ids.values():
            wait_state(job, FINAL, timeout=180)
        time.sleep(1)
        end = time.monotonic() + 60
        want = {self.key(k) for k in self.ids}
        while time.monotonic() < end and not want <= set(os.listdir(c.spool / "new")):
            time.sleep(0.5)
        self.worker_log = sattr("worker", "--once", "--config", str(self.config)).stderr

    def key(self, kind: str) -> str:
        """The job's spool and store key (its SLUID where Slurm has them)."""
        (key,) = run_keys([f"testcluster_{self.ids[kind]}_0"])
        return key

    def verdict(self, kind: str) -> dict[str, Any]:
        db = sqlite3.connect(self.store)
        row = db.execute("SELECT verdict FROM verdicts WHERE key = ?", [self.key(kind)]).fetchone()
        assert row is not None, f"no verdict for {kind}: {self.worker_log}"
        data: dict[str, Any] = json.loads(row[0])
        return data


@pytest.fixture(scope="module")
def shared(cluster: Cluster) -> SharedNode:
    problem = journal_problem()
    if problem:
        if os.environ.get("ATTRIBUTION_REQUIRE_JOURNAL") == "1":
            pytest.fail(f"ATTRIBUTION_REQUIRE_JOURNAL=1 but {problem}")
        pytest.skip(f"no journal to read the kernel from: {problem}")
    try:
        sh("id", SECOND_USER)
    except AssertionError:
        pytest.skip(f"no second test user {SECOND_USER} (.ci/slurm-up.sh creates it)")
    node = SharedNode(cluster)
    node.run()
    return node


EXPECTED = {
    "oom": ("fail", "application", {"job-memory-limit", "job-out-of-memory-state"}),
    "segfault": ("fail", "application", {"program-crashed"}),
    "pyerror": ("fail", "application", {"python-error"}),
    "timeout": ("timeout", "application", {"job-timeout-state", "time-limit"}),
    "cancel": ("cancelled", "application", {"cancelled-by-owner"}),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_job_gets_its_own_cause(shared: SharedNode, kind: str) -> None:
    v = shared.verdict(kind)
    terminal, sub_domain, causes = EXPECTED[kind]
    assert (v["terminal_state"], v["sub_domain"]) == (terminal, sub_domain), v["summary"]
    assert v["cause"]["id"] in causes, v["summary"]
    assert v["responsible"] == [], v["responsible"]
    # the job's record carries what ownership was decided from
    job = v["job"]
    assert job["exclusive"] is False
    assert shared.cluster.node in job["gres_detail"]
    others = {o["job_id"] for o in job["other_jobs"][shared.cluster.node]}
    assert {shared.ids[k] for k in EXPECTED if k != kind} <= others
    assert v["ownership"]["checked"] is True


def test_no_verdict_blames_the_node_or_a_gpu(shared: SharedNode) -> None:
    db = sqlite3.connect(shared.store)
    keys = [shared.key(k) for k in EXPECTED]
    marks = ",".join("?" for _ in keys)
    assert db.execute(
        f"SELECT count(*) FROM responsible WHERE key IN ({marks})", keys
    ).fetchone() == (0,)
    for kind in EXPECTED:
        v = shared.verdict(kind)
        assert v["sub_domain"] not in ("hardware", "system_software", "infrastructure"), kind
        line = sh("sacct", "-n", "-X", "-P", "-j", shared.ids[kind], "-o", "AdminComment").strip()
        assert line.startswith(f"sattr1 {v['terminal_state']} application"), (kind, line)
        assert "nodes=" not in line


def _chain(v: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [e for e in v["symptom_chain"] if e["event"] == event]


def test_the_forged_kernel_line_is_shown_as_forged(shared: SharedNode) -> None:
    seen = 0
    for kind in EXPECTED:
        v = shared.verdict(kind)
        for entry in _chain(v, "gpu.xid"):
            assert entry["role"] == "context", (kind, entry)
            assert entry["trust"] == "untrusted", (kind, entry)
            assert entry["note"].startswith("forged"), (kind, entry)
            seen += 1
    assert seen >= 4, "the forged line was not in the windows of the jobs running then"


def test_the_oom_kill_is_its_jobs_alone(shared: SharedNode) -> None:
    own = shared.verdict("oom")
    kills = _chain(own, "kernel.oom_kill")
    mine = [e for e in kills if e["owner"] == "job"]
    assert mine and all(e["role"] == "root" and e["stream"] == "kernel" for e in mine), kills
    # (an OOM kill of an earlier run on this node may be in the window: another job's)
    assert all(e["owner"] == "foreign" and e["role"] == "context" for e in kills if e not in mine)
    for kind in ("pyerror", "cancel", "timeout", "segfault"):
        for entry in _chain(shared.verdict(kind), "kernel.oom_kill"):
            assert entry["owner"] == "foreign" and entry["role"] == "context", (kind, entry)


def test_the_segfault_on_the_shared_node_is_nobodys_cause(shared: SharedNode) -> None:
    for kind in EXPECTED:
        for entry in _chain(shared.verdict(kind), "kernel.segfault"):
            assert entry["role"] != "root" or kind == "segfault", (kind, entry)
            assert entry["trust"] == "trusted"


def test_kernel_evidence_came_from_the_journals_kernel_transport(shared: SharedNode) -> None:
    v = shared.verdict("oom")
    kernel = [
        c for c in v["coverage"] if c["stream"] == "kernel" and c["node"] == shared.cluster.node
    ]
    assert kernel and kernel[0]["status"] == "ok" and kernel[0]["trust"] == "trusted", kernel
    syslog = [c for c in v["coverage"] if c["stream"] == "syslog"]
    assert syslog and syslog[0]["trust"] == "untrusted"


def test_a_bundle_of_a_live_job_gives_its_verdict(shared: SharedNode) -> None:
    """sattr bundle saves what the worker read (the journal window as journalctl -o json
    lines); diagnosing it offline gives the stored verdict, redacted or not."""
    out = shared.base / "bundle-pyerror"
    sattr("bundle", shared.ids["pyerror"], str(out), "--config", str(shared.config))
    assert (out / "nodes" / shared.cluster.node / "journal.jsonl").is_file()
    stored = shared.verdict("pyerror")
    for target in (out, shared.base / "bundle-pyerror-redacted"):
        if target != out:
            sattr("bundle", str(out), str(target), "--redact")
        replay = json.loads(sattr("diagnose", str(target), "--json").stdout)
        assert (replay["sub_domain"], replay["cause"]["id"], replay["responsible"]) == (
            stored["sub_domain"],
            stored["cause"]["id"],
            stored["responsible"],
        )
        forged = _chain(replay, "gpu.xid")
        assert forged and forged[0]["note"].startswith("forged")
        # the same sources, with the same outcome (bundle.json lists the streams read)
        seen = {(c["stream"], c["status"]) for c in replay["coverage"]}
        assert seen == {(c["stream"], c["status"]) for c in stored["coverage"]}


def test_an_ended_jobs_gpus_are_unknown_without_the_start_record(shared: SharedNode) -> None:
    """Slurm 22.05 prints an empty ``GRES=`` for every node of an ended job, GPU or not: the
    job record then leaves a GPU job's GRES unknown (ownership says not checked) rather than
    reading it as "no GPUs", and keeps "no GPUs" for a job whose TRES counts none."""
    from attribution.ownership import assess
    from attribution.slurm.backend import JobRef
    from attribution.slurm.cli import CliBackend

    node = shared.cluster.node
    backend = CliBackend(timeout=10)
    gpu_job = backend.get_job(JobRef(job_id=shared.ids["pyerror"]))
    assert node not in gpu_job.gres_detail, gpu_job.gres_detail
    _, _, result = assess([], gpu_job, [])
    assert result.checked is False
    assert any("GPUs on" in n and "PrologSlurmctld" in n for n in result.notes), result.notes
    cpu_job = backend.get_job(JobRef(job_id=shared.ids["segfault"]))
    assert cpu_job.gres_detail == {node: ""}, cpu_job.gres_detail
    # the worker had the start record (PrologSlurmctld), so its verdict knew the GPU
    # (the oom job, also with one GPU, runs beside it: each has one of the node's two)
    known = shared.verdict("pyerror")["ownership"]["nodes"][node]["gpus"]
    other = shared.verdict("oom")["ownership"]["nodes"][node]["gpus"]
    assert len(known) == 1 and sorted(known + other) == ["0000:18:00", "0000:3b:00"]
