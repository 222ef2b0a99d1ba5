"""``sattr bundle``: a job's evidence saved as a bundle gives the worker's verdict again, and a
redacted copy of any bundle gives the same verdict with stand-in names."""

from __future__ import annotations

import json
import os
import pwd
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle
from attribution.capture import capture, redact_bundle
from attribution.cli import main
from attribution.config import Config
from attribution.model import JobRecord, OtherJob, Verdict
from attribution.rules.loader import RuleSet
from attribution.worker import Worker

from .conftest import CASES

BUNDLES = sorted(p.parent for p in CASES.glob("*/expected.yaml"))


def _shape(verdict: Verdict, names: dict[str, str]) -> tuple[object, ...]:
    """What must survive redaction: the answer, the blamed and suspect nodes (renamed), the
    chain's events and roles."""
    rename = lambda n: names.get(n, n)  # noqa: E731
    return (
        verdict.terminal_state,
        verdict.sub_domain,
        verdict.cause.id if verdict.cause else None,
        sorted(rename(r.node) for r in verdict.responsible),
        sorted(rename(r.node) for r in verdict.suspects),
        Counter((e.event, e.role.value, e.count) for e in verdict.symptom_chain),
    )


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_a_redacted_bundle_keeps_its_verdict(
    bundle: Path, tmp_path: Path, ruleset: RuleSet
) -> None:
    report = redact_bundle(bundle, tmp_path / "redacted")
    _, before = diagnose_bundle(bundle, ruleset)
    _, after = diagnose_bundle(tmp_path / "redacted", ruleset)
    assert _shape(after, {}) == _shape(before, report.redaction.hosts)


def test_redaction_leaves_no_name_behind(tmp_path: Path) -> None:
    src = CASES / "ib-link-flap-peer-vote"  # host names, IPs in NCCL lines, a user's paths
    record = json.loads((src / "job.json").read_text())
    report = redact_bundle(src, tmp_path / "r")
    red = report.redaction
    assert red.hosts and red.addresses and red.users
    text = "\n".join(p.read_text() for p in (tmp_path / "r").rglob("*") if p.is_file())
    for original in [*red.hosts, *red.addresses, record["user"]]:
        assert not re.search(rf"(?<![\w.-]){re.escape(original)}(?![\w-])", text), original
    assert sorted(p.name for p in (tmp_path / "r" / "nodes").iterdir()) == sorted(
        red.hosts[n] for n in (p.name for p in (src / "nodes").iterdir())
    )
    # the job record's node list and per-node keys are renamed too
    redacted = json.loads((tmp_path / "r" / "job.json").read_text())
    assert set(redacted["nodes"]) <= set(red.hosts.values())


def test_redaction_refuses_a_non_empty_target_and_loses_nothing(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    result = CliRunner().invoke(
        main, ["bundle", str(CASES / "python-valueerror-first-rank"), str(target), "--redact"]
    )
    assert result.exit_code == 1 and "not an empty directory" in result.output
    assert (target / "notes.txt").read_text() == "mine\n"
    result = CliRunner().invoke(
        main, ["bundle", str(CASES / "python-valueerror-first-rank"), str(tmp_path / "u")]
    )
    assert result.exit_code == 1 and "--redact" in result.output


T0 = datetime(2026, 6, 10, 10, 0, tzinfo=UTC)


def test_a_captured_job_gives_the_workers_verdict(tmp_path: Path, ruleset: RuleSet) -> None:
    """Capture reads what the worker reads (through collect), only the window, and keeps the
    ownership facts: diagnosing the bundle gives the worker's verdict."""
    me = pwd.getpwuid(os.getuid())
    hosts = tmp_path / "hosts" / "gpu012"
    hosts.mkdir(parents=True)
    stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00")  # noqa: E731
    hosts.joinpath("kern.log").write_text(
        "".join(
            f"{stamp(t)} gpu012 kernel: {m}\n"
            for t, m in [
                (T0 - timedelta(days=2), "audit: long before the window"),
                (T0 - timedelta(minutes=50), "audit: type=1400 apparmor=STATUS"),
                (
                    T0 + timedelta(minutes=6),
                    "NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                ),
                (
                    T0 + timedelta(minutes=7),
                    "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.",
                ),
                (T0 + timedelta(hours=1), "audit: type=1400 apparmor=STATUS"),
                (T0 + timedelta(days=2), "audit: long after the window"),
            ]
        )
    )
    out = tmp_path / "run" / "slurm-99.out"
    out.parent.mkdir()
    out.write_text("[rank0]: RuntimeError: CUDA error: unspecified launch failure\n")
    config = Config.model_validate(
        {
            "logs": {"kernel": [str(tmp_path / "hosts" / "{node}" / "kern.log*")]},
            "store": str(tmp_path / "v.sqlite"),
            "spool": str(tmp_path / "spool"),
        }
    )
    job = JobRecord(
        job_id="99",
        cluster="c1",
        state="FAILED",
        exit_code="1:0",
        nodes=("gpu012",),
        nodelist="gpu012",
        start=T0,
        end=T0 + timedelta(minutes=20),
        user=me.pw_name,
        uid=me.pw_uid,
        std_out=str(out),
        exclusive=False,
        gres_detail={"gpu012": "gpu:h100:1(IDX:0)"},
        gpu_bus_ids={"gpu012": ("0000:18:00.0", "0000:2a:00.0")},
        other_jobs={"gpu012": (OtherJob("98", T0 - timedelta(hours=1), None),)},
    )
    worker = Worker(config, ruleset=ruleset, backend=object())  # type: ignore[arg-type]
    direct = worker.diagnose(job)
    report = capture(job, config, tmp_path / "bundle")
    # the window's lines, and the last before and the first after it: not the others
    kept = (tmp_path / "bundle" / "nodes" / "gpu012" / "kernel.log").read_text()
    assert report.files["nodes/gpu012/kernel.log"] == 5 and "long after" not in kept
    assert (tmp_path / "bundle" / "job" / "stdout.log").read_text() == out.read_text()
    manifest = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert manifest["trust"]["kernel"] == "trusted" and manifest["trust"]["syslog"] == "untrusted"
    _, replay = diagnose_bundle(tmp_path / "bundle", ruleset)
    assert _shape(replay, {}) == _shape(direct, {})
    assert [(r.node, r.device) for r in replay.responsible] == [("gpu012", "0000:18:00")]
    # the XID on GPU 0000:2a:00, which was another job's, stayed context in the replay too
    other = [e for e in replay.symptom_chain if e.owner == "foreign"]
    assert other and other[0].role.value == "context"
    assert replay.job.other_jobs == job.other_jobs and replay.job.exclusive is False
