"""The whole path on a real Slurm 22.05: sbatch -> EpilogSlurmctld hook -> spool -> worker ->
SQLite + AdminComment -> ``sattr``.

One battery of real jobs runs once per session (about two minutes; the time-limit job
dominates): a job that succeeds, one that exits 1 after a Python traceback, one that
exceeds --mem (cgroup OOM), one that hits its 1-minute time limit, one cancelled while
running, one that loses its node (run alone: setting the node down hits every job on it),
one during which the node's kernel log gets an XID 79, and one whose AdminComment already
holds someone else's text. The worker is killed mid-job once and restarted.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import (
    Cluster,
    fresh_start,
    run_keys,
    sattr,
    sbatch,
    sh,
    wait_node_idle,
    wait_state,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FINAL = r"COMPLETED|FAILED|OUT_OF_MEMORY|TIMEOUT|CANCELLED.*|NODE_FAIL"
GPU_BUS_IDS = ["0000:18:00.0", "0000:3b:00.0"]
TRACEBACK = (
    "import sys\n"
    "def load(shape):\n"
    "    raise ValueError(f'bad shape {shape}')\n"
    "print('epoch 1 loss 0.5', flush=True)\n"
    "load((3, 4))\n"
)


def admin_comment(job: str) -> str:
    return sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment").strip()


def system_comment(job: str) -> str:
    return sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "SystemComment").strip()


def kill_worker_mid_job(config: Path, spool: Path) -> str | None:
    """Start the worker, SIGKILL it while an entry sits in work/; the key it held."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attribution", "worker", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    held: str | None = None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            names = [p for p in os.listdir(spool / "work") if not p.startswith(".")]
            if names:
                proc.send_signal(signal.SIGKILL)
                held = names[0]
                break
            time.sleep(0.001)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if held and (spool / "work" / held).exists():
        return held
    return None


class Battery:
    """The jobs, the config and the store of one run."""

    def __init__(self, cluster: Cluster) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.base = Path(f"/var/tmp/attribution-ci/run-{stamp}-{os.getpid()}")
        self.jobs_dir = self.base / "jobs"
        self.kern = self.base / "hosts" / cluster.node / "kern.log"
        self.kern.parent.mkdir(parents=True)
        self.jobs_dir.mkdir(parents=True)
        self.base.chmod(0o755)
        (self.base / "hosts").chmod(0o755)
        self.jobs_dir.chmod(0o1777)
        self.kern.write_text("")
        self.store = self.base / "verdicts.sqlite"
        self.config = self.base / "config.yaml"
        # the node's two fake GPUs (gres.conf's nvidia0 and nvidia1), by minor number
        self.gpus = self.base / "gpus.yaml"
        self.gpus.write_text(json.dumps({cluster.node: GPU_BUS_IDS}))
        self.settings: dict[str, Any] = {
            "spool": str(cluster.spool),
            "store": str(self.store),
            "settle_delay": 0,
            "window": {"before": 1, "after": 1},
            "retries": {"max_attempts": 3, "backoff": 1},
            "logs": {
                "kernel": [str(self.base / "hosts" / "{node}" / "kern.log*")],
                "slurmctld": ["/var/log/slurm/slurmctld.log"],
            },
            "admin_comment": {"enabled": True, "foreign": "skip"},
            # the entries fresh_start set aside are earlier tests' jobs: not to be swept back
            "reconcile": {"enabled": False},
            "gpus": {"bus_ids": str(self.gpus)},
        }
        self.write_config(self.config, self.settings)
        self.cluster = cluster
        self.ids: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.killed_key: str | None = None
        self.worker_log = ""

    @staticmethod
    def write_config(path: Path, settings: dict[str, Any]) -> None:
        path.write_text(json.dumps(settings, indent=2))  # JSON is YAML

    def submit(self, kind: str, *args: str, user: str | None = None) -> str:
        out = str(self.jobs_dir / f"{kind}-%j.out")
        job = sbatch("-J", kind, "-D", str(self.jobs_dir), "-o", out, *args, user=user)
        self.ids[kind] = job
        return job

    def run(self) -> None:
        c = self.cluster
        fresh_start(c.spool, self.base, c.node)

        # 1. the node is lost under a running job (alone on the node)
        nodefail = self.submit("nodefail", "--no-requeue", "--wrap", "sleep 300")
        wait_state(nodefail, "RUNNING")
        time.sleep(2)
        sh("scontrol", "update", f"nodename={c.node}", "state=down", "reason=attribution-ci")
        wait_state(nodefail, "NODE_FAIL")
        sh("scontrol", "update", f"nodename={c.node}", "state=resume", check=False)
        wait_node_idle(c.node)

        # 2. a GPU falls off the bus while a job that holds it runs (alone, so no other window
        # sees it; the GPU stays broken, but the later jobs are not given it)
        xid = self.submit(
            "xid", "--gres=gpu:2", "--wrap", "echo training; sleep 6; exit 1", user=c.user
        )
        wait_state(xid, "RUNNING")
        time.sleep(2)
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        with self.kern.open("a") as f:
            f.write(
                f"{now} {c.node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
                "name=python, GPU has fallen off the bus.\n"
            )
        wait_state(xid, FINAL)
        time.sleep(2.5)  # past the XID job's window (after: 1 s)

        # 3. the rest, side by side
        self.submit("timeout", "--time=1", "--wrap", "echo start; sleep 300", user=c.user)
        self.submit("ok", "--wrap", "echo fine; exit 0")
        self.submit("traceback", "--wrap", f'python3 -c "{TRACEBACK}"; exit 1', user=c.user)
        self.submit(
            "oom",
            "--mem=100M",
            "--wrap",
            "python3 -c 'a = [bytearray(50 << 20) for _ in range(20)]'",
        )
        self.submit("foreign", "--wrap", "exit 2")
        cancel = self.submit("cancel", "--wrap", "sleep 300", user=c.user)
        wait_state(cancel, "RUNNING")
        time.sleep(1)
        sh("scancel", cancel, user=c.user)
        wait_state(self.ids["foreign"], FINAL)
        sh(
            "sacctmgr",
            "-i",
            "modify",
            "job",
            "where",
            f"jobid={self.ids['foreign']}",
            "set",
            "AdminComment=JS1:Short",
        )
        for job in self.ids.values():
            wait_state(job, FINAL, timeout=180)
        self.wait_spooled()

        # 4. the worker is killed while it holds an entry, then runs to the end
        self.killed_key = kill_worker_mid_job(self.config, c.spool)
        done = sattr("worker", "--once", "--config", str(self.config))
        self.worker_log = done.stderr

    def key(self, kind: str) -> str:
        """The job's spool and store key (its SLUID where Slurm has them)."""
        if kind not in self.keys:
            (self.keys[kind],) = run_keys([f"testcluster_{self.ids[kind]}_0"])
        return self.keys[kind]

    def wait_spooled(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        want = {self.key(k) for k in self.ids}
        while time.monotonic() < end:
            have = set(os.listdir(self.cluster.spool / "new"))
            if want <= have:
                return
            time.sleep(0.5)
        raise AssertionError(f"not spooled by the hook: {sorted(want - have)}")

    def row(self, kind: str) -> dict[str, Any] | None:
        db = sqlite3.connect(self.store)
        db.row_factory = sqlite3.Row
        found = db.execute("SELECT * FROM verdicts WHERE key = ?", [self.key(kind)]).fetchall()
        assert len(found) <= 1
        return dict(found[0]) if found else None


@pytest.fixture(scope="module")
def battery(cluster: Cluster) -> Battery:
    b = Battery(cluster)
    b.run()
    return b


# --------------------------------------------------------------------------- the hook


def test_every_job_went_through_the_hook(battery: Battery) -> None:
    spool = battery.cluster.spool
    for kind in battery.ids:
        assert (spool / "done" / battery.key(kind)).is_file(), kind
    assert not list((spool / "work").iterdir())
    assert not [
        p
        for p in (spool / "failed").iterdir()
        if p.name.removesuffix(".error") in {battery.key(k) for k in battery.ids}
    ]


# --------------------------------------------------------------------------- verdicts


def test_success_is_dropped(battery: Battery) -> None:
    assert battery.row("ok") is None
    assert admin_comment(battery.ids["ok"]) == ""


def test_python_traceback(battery: Battery) -> None:
    row = battery.row("traceback")
    assert row is not None
    assert (row["state"], row["exit_code"]) == ("FAILED", "1:0")
    assert (row["terminal_state"], row["sub_domain"], row["cause_id"]) == (
        "fail",
        "application",
        "python-error",
    )
    assert "ValueError" in row["summary"]
    assert row["user"] == battery.cluster.user
    assert admin_comment(battery.ids["traceback"]) == "sattr1 fail application python-error"


def test_cgroup_out_of_memory(battery: Battery) -> None:
    row = battery.row("oom")
    assert row is not None
    assert row["state"] in ("OUT_OF_MEMORY", "FAILED")
    assert (row["terminal_state"], row["sub_domain"]) == ("fail", "application")
    assert row["cause_id"] in ("job-out-of-memory-state", "job-memory-limit", "node-out-of-memory")
    assert admin_comment(battery.ids["oom"]) == f"sattr1 fail application {row['cause_id']}"


def test_time_limit(battery: Battery) -> None:
    row = battery.row("timeout")
    assert row is not None
    assert row["state"] == "TIMEOUT"
    assert row["terminal_state"] == "timeout"
    assert row["sub_domain"] == "application"
    assert admin_comment(battery.ids["timeout"]).startswith("sattr1 timeout application ")


def test_cancelled_by_owner(battery: Battery) -> None:
    row = battery.row("cancel")
    assert row is not None
    assert row["state"] == "CANCELLED"
    assert row["terminal_state"] == "cancelled"
    assert row["sub_domain"] == "application"
    assert admin_comment(battery.ids["cancel"]).startswith("sattr1 cancelled application")


def test_node_failure(battery: Battery) -> None:
    row = battery.row("nodefail")
    assert row is not None
    assert row["state"] == "NODE_FAIL"
    assert row["terminal_state"] == "fail"
    assert row["sub_domain"] == "infrastructure"
    assert admin_comment(battery.ids["nodefail"]).startswith("sattr1 fail infrastructure")


def test_xid_79_in_the_node_kernel_log(battery: Battery) -> None:
    row = battery.row("xid")
    assert row is not None
    assert (row["terminal_state"], row["sub_domain"], row["cause_id"]) == (
        "fail",
        "hardware",
        "gpu-fell-off-bus",
    )
    assert row["responsible_nodes"] == battery.cluster.node
    assert admin_comment(battery.ids["xid"]) == (
        f"sattr1 fail hardware gpu-fell-off-bus nodes={battery.cluster.node}"
    )
    db = sqlite3.connect(battery.store)
    symptoms = db.execute(
        "SELECT role, event, nodes, stream FROM symptoms WHERE key = ? ORDER BY position",
        [battery.key("xid")],
    ).fetchall()
    roots = [s for s in symptoms if s[0] == "root"]
    assert roots == [("root", "gpu.xid", battery.cluster.node, "kernel")]
    # the node failure of the job before it is in the window too, as that job's
    earlier = [s for s in symptoms if s[1] == "slurmctld.job_on_failed_node"]
    assert all(s[0] == "context" for s in earlier)
    coverage = dict(
        db.execute(
            "SELECT stream, status FROM coverage WHERE key = ? AND node IS ?",
            [battery.key("xid"), battery.cluster.node],
        ).fetchall()
    )
    assert coverage["kernel"] == "ok"
    # the job's GPUs came from scontrol -d while slurmctld held it, the bus ids from gpus.yaml
    data = json.loads(
        db.execute("SELECT verdict FROM verdicts WHERE key = ?", [battery.key("xid")]).fetchone()[0]
    )
    assert data["job"]["gres_detail"] == {battery.cluster.node: "gpu:2(IDX:0-1)"}
    assert data["responsible"][0]["device"] == "0000:3b:00"
    assert [e["owner"] for e in data["symptom_chain"] if e["role"] == "root"] == ["job"]
    # XID 79 lasts until a reboot, but no later job was given that GPU: none of them is blamed
    for kind in ("timeout", "traceback", "cancel", "oom", "nodefail"):
        assert battery.row(kind)["cause_id"] != "gpu-fell-off-bus", kind  # type: ignore[index]


def test_foreign_admin_comment_is_left_alone(battery: Battery) -> None:
    row = battery.row("foreign")
    assert row is not None
    assert row["admin_comment_status"] == "skipped-foreign"
    assert admin_comment(battery.ids["foreign"]).lower() == "js1:short"


def test_killed_worker_gives_exactly_one_verdict(battery: Battery) -> None:
    assert battery.killed_key is not None, "the worker was never caught holding an entry"
    # the worker claims a whole batch at once: every entry it held is recovered, not one
    assert re.search(r"recovered [1-9]\d* entr\(ies\) left in work/", battery.worker_log)
    db = sqlite3.connect(battery.store)
    # the entry held may be the job that completed 0:0: dropped, no verdict
    once = 0 if battery.killed_key == battery.key("ok") else 1
    assert db.execute(
        "SELECT count(*) FROM verdicts WHERE key = ?", [battery.killed_key]
    ).fetchone() == (once,)
    keys = [battery.key(k) for k in battery.ids if k != "ok"]
    counts = dict(db.execute("SELECT key, count(*) FROM verdicts GROUP BY key").fetchall())
    assert {k: counts.get(k) for k in keys} == dict.fromkeys(keys, 1)
    positions = db.execute(
        "SELECT key, position, count(*) FROM symptoms GROUP BY key, position HAVING count(*) > 1"
    ).fetchall()
    assert positions == []


# --------------------------------------------------------------------------- sattr


def test_sattr_show_and_list(battery: Battery) -> None:
    shown = sattr(battery.ids["xid"], "--json", "--config", str(battery.config))
    data = json.loads(shown.stdout)
    assert data["cause"]["id"] == "gpu-fell-off-bus"
    assert data["job"]["job_id"] == battery.ids["xid"]
    assert data["record"]["admin_comment_status"] == "written"
    human = sattr(battery.ids["xid"], "--config", str(battery.config)).stdout
    assert "Symptom chain" in human
    assert "gpu-fell-off-bus" in human
    listed = json.loads(
        sattr("list", "--json", "--sub-domain", "hardware", "--config", str(battery.config)).stdout
    )
    assert [r["job_id"] for r in listed] == [battery.ids["xid"]]
    on_node = json.loads(
        sattr(
            "list", "--json", "--node", battery.cluster.node, "--config", str(battery.config)
        ).stdout
    )
    assert len(on_node) == len(battery.ids) - 1  # every stored job ran there


def run_as(user: str, args: list[str]) -> tuple[int, str]:
    """Run the sattr CLI in a forked child that has become ``user``.

    Everything the CLI may import lazily is imported first: after setuid the child may
    not be able to read the Python installation (e.g. under /root).
    """
    import importlib

    for name in (
        "pdb",
        "grp",
        "click.testing",
        "attribution.cli",
        "attribution.config",
        "attribution.store",
        "attribution.render",
        "attribution.verdictjson",
        "attribution.slurm.backend",
        "attribution.slurm.cli",
        "attribution.slurm.admincomment",
        "attribution.timeutil",
        "attribution.model",
        "attribution.lookup",
        "attribution.client",
        "attribution.munge",
        "httpx",
        "httpcore",
        "h11",
        "encodings.idna",
    ):
        importlib.import_module(name)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            os.close(read)
            pw = pwd.getpwnam(user)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.environ["HOME"] = pw.pw_dir
            from click.testing import CliRunner

            from attribution.cli import main

            result = CliRunner().invoke(main, args)
            output = result.output
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                output += f"\n{type(result.exception).__name__}: {result.exception}"
            os.write(write, json.dumps([result.exit_code, output]).encode())
            code = 0
        except BaseException as exc:
            os.write(write, json.dumps([98, f"{type(exc).__name__}: {exc}"]).encode())
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    rc, out = json.loads(b"".join(chunks).decode())
    return rc, out


def test_users_see_only_their_own_jobs(battery: Battery) -> None:
    user = battery.cluster.user
    cfg = ["--config", str(battery.config)]
    rc, out = run_as(user, ["list", "--json", "--since", "1d", *cfg])
    assert rc == 0, out
    rows = json.loads(out)
    assert rows
    assert {r["user"] for r in rows} == {user}
    rc, out = run_as(user, [battery.ids["traceback"], "--json", *cfg])
    assert rc == 0, out
    assert json.loads(out)["cause"]["id"] == "python-error"
    rc, out = run_as(user, [battery.ids["nodefail"], *cfg])  # root's job
    assert rc == 1
    assert "belongs to another user" in out


def test_reader_without_wal_files(battery: Battery) -> None:
    """With no writer open, SQLite removes a WAL database's -wal/-shm files; a user who may
    not write the directory must still be able to read it."""
    copy = battery.base / "snapshot" / "verdicts.sqlite"
    copy.parent.mkdir(mode=0o755)
    src = sqlite3.connect(battery.store)
    dst = sqlite3.connect(copy)
    src.backup(dst)
    dst.execute("PRAGMA journal_mode=WAL")
    src.close()
    dst.close()
    copy.chmod(0o644)
    assert not Path(f"{copy}-wal").exists()
    assert not Path(f"{copy}-shm").exists()
    rc, out = run_as(
        battery.cluster.user,
        [battery.ids["cancel"], "--json", "--db", str(copy), "--config", str(battery.config)],
    )
    assert rc == 0, out
    assert json.loads(out)["cause"]["id"] == "cancelled-by-owner"


def test_unreadable_store_falls_back_to_sacct(battery: Battery) -> None:
    user = battery.cluster.user
    cfg = ["--config", str(battery.config)]
    mode = battery.store.stat().st_mode
    battery.store.chmod(0o600)
    try:
        rc, out = run_as(user, [battery.ids["traceback"], *cfg])
        assert rc == 0, out
        assert "not readable" in out
        assert "sattr1 fail application python-error" in out
        rc, out = run_as(user, [battery.ids["xid"], "--json", *cfg])
        assert rc == 0, out
        data = json.loads(out[out.index("{") :])
        assert data["verdict"]["cause"] == "gpu-fell-off-bus"
        rc, out = run_as(user, [battery.ids["oom"], *cfg])  # root's job
        assert rc == 1
        assert "belongs to another user" in out
    finally:
        battery.store.chmod(mode & 0o7777)


def test_users_read_their_verdicts_through_the_server(battery: Battery) -> None:
    """Issue 15: with the store unreadable to users, 'sattr JOBID' and 'sattr list' on the
    login node (this machine, as the job's owner) ask 'sattr serve' with a MUNGE credential
    and get the full verdict of their own job, and a refusal for another user's."""
    import socket

    import httpx

    user = battery.cluster.user
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    settings = {**battery.settings, "server": {"listen": f"127.0.0.1:{port}", "url": url}}
    config = battery.base / "config-server.yaml"
    battery.write_config(config, settings)
    config.chmod(0o644)
    mode = battery.store.stat().st_mode
    battery.store.chmod(0o600)
    log = (battery.base / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "attribution", "serve", "--config", str(config), "--no-token"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, (battery.base / "serve.log").read_text()
            assert time.monotonic() < deadline, "sattr serve did not answer within 60 s"
            time.sleep(0.2)
        cfg = ["--config", str(config)]
        rc, out = run_as(user, [battery.ids["traceback"], "--json", *cfg])
        assert rc == 0, out
        data = json.loads(out)
        assert data["cause"]["id"] == "python-error"
        assert data["job"]["user"] == user
        assert data["symptom_chain"]  # the whole verdict, not the one-line AdminComment
        assert data["coverage"]
        assert data["record"]["server"] == url
        rc, out = run_as(user, [battery.ids["traceback"], *cfg])
        assert rc == 0, out
        assert f"(from the server at {url})" in out
        rc, out = run_as(user, [battery.ids["nodefail"], *cfg])  # root's job
        assert rc == 1
        assert "belongs to another user" in out
        rc, out = run_as(user, ["list", "--json", "--since", "1d", *cfg])
        assert rc == 0, out
        rows = json.loads(out)
        assert rows
        assert {r["user"] for r in rows} == {user}
        # without a credential the server answers nothing about jobs
        assert httpx.get(f"{url}/api/v1/jobs", timeout=5).status_code == 401
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
        battery.store.chmod(mode & 0o7777)


def test_enqueue_again_with_system_comment(battery: Battery) -> None:
    """Re-running a job (sattr enqueue) with foreign: system_comment keeps one verdict and
    writes SystemComment instead of the foreign AdminComment."""
    other = battery.base / "config-system.yaml"
    settings = json.loads(json.dumps(battery.settings))
    settings["admin_comment"]["foreign"] = "system_comment"
    battery.write_config(other, settings)
    job = battery.ids["foreign"]
    out = sattr("enqueue", job, "--config", str(other)).stdout
    assert battery.key("foreign") in out
    sattr("worker", "--once", "--config", str(other))
    row = battery.row("foreign")
    assert row is not None
    assert row["admin_comment_status"] == "system_comment"
    assert admin_comment(job).lower() == "js1:short"
    assert system_comment(job) == "sattr1 fail unattributed"
    # read back the same way: without a store to read and no server configured, the line
    # comes from SystemComment, the AdminComment being another tool's
    absent = battery.base / "no-store-here.sqlite"
    rc, out = run_as("root", [job, "--json", "--db", str(absent), "--config", str(other)])
    assert rc == 0, out
    data = json.loads(out[out.index("{") :])
    assert data["source"] == "sacct SystemComment"
    assert data["verdict"]["terminal_state"] == "fail"
    assert data["admin_comment"].lower() == "js1:short"


def test_rediagnose_is_stable(battery: Battery) -> None:
    out = sattr("rediagnose", "--all", "--config", str(battery.config)).stdout
    assert f"rediagnosed {len(battery.ids) - 1} job(s); 0 verdict(s) changed" in out


# --------------------------------------------------------------------------- the hook, by itself


@pytest.fixture
def slurm_dir() -> Iterator[Path]:
    """A scratch directory SlurmUser can reach (pytest's tmp_path is private to root)."""
    path = Path(f"/var/tmp/attribution-ci/hook-{os.getpid()}-{time.monotonic_ns()}")
    path.mkdir(parents=True, mode=0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_hook_burst_as_slurm_user(cluster: Cluster, slurm_dir: Path) -> None:
    """1,000 hook runs as SlurmUser with the environment slurmctld gives: all exit 0,
    all spooled."""
    spool = slurm_dir / "spool"
    for sub in ("tmp", "new"):
        (spool / sub).mkdir(parents=True)
    sh("chown", "-R", "slurm:slurm", str(spool))
    hook = "/usr/local/libexec/attribution-ci/epilog-slurmctld"
    script = (
        f"i=0; fails=0; while [ $i -lt 1000 ]; do "
        f"env -i ATTRIBUTION_SPOOL={spool} SLURM_JOB_ID=$((5000 + i)) "
        f"SLURM_CLUSTER_NAME=testcluster SLURM_JOB_RESTART_COUNT=0 {hook} || fails=$((fails + 1)); "
        f"i=$((i + 1)); done; echo $fails"
    )
    t0 = time.monotonic()
    fails = sh("bash", "-c", script, user="slurm", timeout=300).strip()
    elapsed = time.monotonic() - t0
    assert fails == "0"
    assert len(os.listdir(spool / "new")) == 1000
    assert os.listdir(spool / "tmp") == []
    print(f"1000 hook calls as slurm: {elapsed:.2f} s ({elapsed:.2f} ms per call with env -i)")


def test_hook_with_read_only_spool(cluster: Cluster, slurm_dir: Path) -> None:
    spool = slurm_dir / "spool"
    for sub in ("tmp", "new"):
        (spool / sub).mkdir(parents=True)
    sh("chown", "-R", "slurm:slurm", str(spool))
    for sub in ("tmp", "new"):
        (spool / sub).chmod(0o555)  # SlurmUser owns it but may not write
    done = subprocess.run(
        [
            "runuser",
            "-u",
            "slurm",
            "--",
            "env",
            "-i",
            f"ATTRIBUTION_SPOOL={spool}",
            "SLURM_JOB_ID=77",
            "/usr/local/libexec/attribution-ci/epilog-slurmctld",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1
    assert f"cannot write {spool}/tmp/cluster_77_0." in done.stderr
    assert os.listdir(spool / "new") == []
