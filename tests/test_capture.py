"""``sattr bundle``: a job's evidence saved as a bundle gives the worker's verdict again, and a
redacted copy of any bundle gives the same verdict with stand-in names."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import pwd
import re
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle, read_manifest
from attribution.capture import capture, redact_bundle, redaction_for
from attribution.cli import main
from attribution.config import Config
from attribution.errors import BundleError
from attribution.model import JobRecord, OtherJob, Verdict
from attribution.rules.compiled import RuleSet
from attribution.sources.reader import zstd
from attribution.worker import Worker

from .conftest import CASES, Diagnoses, bundle_params

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


@pytest.mark.parametrize("bundle", bundle_params(BUNDLES, every=4))
def test_a_redacted_bundle_keeps_its_verdict(
    bundle: Path, tmp_path: Path, ruleset: RuleSet, diagnosed: Diagnoses
) -> None:
    report = redact_bundle(bundle, tmp_path / "redacted")
    _, before = diagnosed(bundle)
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
    # every file written is counted, the job record and the manifest too
    written = {
        p.relative_to(tmp_path / "bundle").as_posix() for p in (tmp_path / "bundle").rglob("*")
    }
    assert set(report.files) == {w for w in written if (tmp_path / "bundle" / w).is_file()}
    assert report.files["job.json"] > 1 and report.files["bundle.json"] > 1
    _, replay = diagnose_bundle(tmp_path / "bundle", ruleset)
    assert _shape(replay, {}) == _shape(direct, {})
    assert [(r.node, r.device) for r in replay.responsible] == [("gpu012", "0000:18:00")]
    # the XID on GPU 0000:2a:00, which was another job's, stayed context in the replay too
    other = [e for e in replay.symptom_chain if e.owner == "foreign"]
    assert other and other[0].role.value == "context"
    assert replay.job.other_jobs == job.other_jobs and replay.job.exclusive is False


# --------------------------------------------------------------------------- redaction, hostile

BASE = "ownership-xid79-own-gpu"  # one node gpu012, user alice, ib0 address 10.1.0.12


def _case(tmp_path: Path, name: str = BASE) -> Path:
    src = tmp_path / "src"
    shutil.copytree(CASES / name, src)
    return src


def _edit_job(src: Path, **changes: object) -> None:
    record = json.loads((src / "job.json").read_text())
    record.update(changes)
    (src / "job.json").write_text(json.dumps(record))


def _same_verdict(src: Path, red_dir: Path, hosts: dict[str, str], ruleset: RuleSet) -> None:
    _, before = diagnose_bundle(src, ruleset)
    _, after = diagnose_bundle(red_dir, ruleset)
    assert _shape(after, {}) == _shape(before, hosts)


def _redact_cli(src: Path, dest: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["bundle", str(src), str(dest), "--redact"])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("packing", ["gzip", "zstd", "utf-16"])
def test_redaction_reads_a_packed_log_to_its_end(
    packing: str, tmp_path: Path, ruleset: RuleSet
) -> None:
    """A decoded log is read to its end, not to the reader's first MiB: the XID lines come
    after 1.6 MB of other lines."""
    src = _case(tmp_path)
    kernel = src / "nodes" / "gpu012" / "kernel.log"
    first, *rest = kernel.read_text().splitlines(keepends=True)
    stamp = "2026-06-10T09:{:02d}:00.000000+00:00 gpu012 kernel: filler {} " + "x" * 80 + "\n"
    body = first + "".join(stamp.format(i // 1000, i) for i in range(15000)) + "".join(rest)
    assert len(body) > 3 << 19
    kernel.unlink()
    if packing == "gzip":
        (kernel.parent / "kernel.log.gz").write_bytes(gzip.compress(body.encode()))
    elif packing == "zstd":
        (kernel.parent / "kernel.log.zst").write_bytes(zstd.compress(body.encode()))
    else:
        kernel.write_bytes(body.encode("utf-16"))
    report = redact_bundle(src, tmp_path / "r", note=None)
    out = (tmp_path / "r" / "nodes" / "node001" / "kernel.log").read_text()
    assert out == body.replace("gpu012", "node001")
    assert sorted(p.name for p in (tmp_path / "r" / "nodes" / "node001").iterdir()) == [
        "kernel.log"
    ]
    _same_verdict(src, tmp_path / "r", report.redaction.hosts, ruleset)


def test_bzip2_and_xz_logs_are_redacted_and_stay_packed(tmp_path: Path) -> None:
    """sattr reads neither; their content is redacted all the same, packed as it was."""
    src = _case(tmp_path)
    text = "2026-06-10T10:11:00 gpu012 kernel: alice on 10.1.0.12\n" * 3
    (src / "nodes" / "gpu012" / "old.log.bz2").write_bytes(bz2.compress(text.encode()))
    redact_bundle(src, tmp_path / "r", note=None)
    copy = tmp_path / "r" / "nodes" / "node001" / "old.log.bz2"
    assert bz2.decompress(copy.read_bytes()).decode() == (
        "2026-06-10T10:11:00 node001 kernel: user1 on 10.254.0.2\n" * 3
    )


def test_redaction_leaves_no_name_in_any_form(tmp_path: Path, ruleset: RuleSet) -> None:
    """Host lists, names with suffixes or in other letter case, addresses at a sentence's end,
    zero-padded, dashed or IPv6, names in file names and in journal exports (bytes, escapes)."""
    src = _case(tmp_path)
    _edit_job(src, node_addresses={"gpu012": ["10.1.0.12", "fe80::1234:5678"]})
    stdout = src / "job" / "stdout.log"
    stdout.write_text(
        stdout.read_text()
        + "hosts gpu012-ib0 gpu012_eth0 GPU012 Gpu012 gpu012:29500 gpu012.cluster.example.com\n"
        + "nodes gpu[012-013] gpu[011,012] SLURM_NODELIST=gpu[012] spare gpu[100-101]\n"
        + "connect to 10.1.0.12. then 010.001.000.012 and ip-10-1-0-12\n"
        + "ipv6 fe80::1234:5678 and [2001:db8::12]:29500 FE80:0:0:0:0:0:1234:5678\n"
        + "user ALICE Alice alice@example.com alice's\n"
        + "kept: python[4242]: std::vector c10::Error 0000:18:00.0 10:08:00\n"
    )
    stdout.rename(src / "job" / "slurm-5304-gpu012-alice.out")
    node = src / "nodes" / "gpu012"
    shutil.copy(node / "kernel.log", node / "kernel-gpu012.log")
    entries = [
        {"__REALTIME_TIMESTAMP": "1781085600000000", "_TRANSPORT": "syslog", "_HOSTNAME": "gpu012",
         "MESSAGE": list("login by alice from 10.1.0.12 on gpu012 \xff".encode("latin-1"))},
        {"__REALTIME_TIMESTAMP": "1781085601000000", "_TRANSPORT": "syslog", "_HOSTNAME": "X",
         "MESSAGE": "X"},
    ]  # fmt: skip
    lines = [json.dumps(e) for e in entries]
    lines[1] = lines[1].replace('"X", "MESSAGE": "X"', r'"\u0067pu012", "MESSAGE": "by \u0061lice"')
    (node / "journal.jsonl").write_text("\n".join(lines) + "\n")
    report = redact_bundle(src, tmp_path / "r", note=None)
    out = tmp_path / "r"

    leak = re.compile(
        r"gpu01\d|gpu\[|alice|10\.1\.0\.12|010\.001|ip-10-1-0-12|1234:5678|2001:db8::12|"
        r"cluster\.example",
        re.IGNORECASE,
    )
    for path in out.rglob("*"):
        assert not leak.search(path.relative_to(out).as_posix()), path
        if path.is_file():
            assert not leak.search(path.read_bytes().decode("latin-1")), path
    text = (out / "job" / "slurm-5304-node001-user1.out").read_text()
    assert "hosts node001-ib0 node001_eth0 node001 node001 node001:29500 node001\n" in text
    assert "nodes node[001-002] node[001,003] SLURM_NODELIST=node001 spare node[004-005]" in text
    assert "connect to 10.254.0.2. then 10.254.0.2 and ip-10-254-0-2\n" in text
    assert "ipv6 fe80::2 and [fd00::3]:29500 fe80::2\n" in text
    assert "user user1 user1 user1@example.com user1's\n" in text
    assert "kept: python[4242]: std::vector c10::Error 0000:18:00.0 10:08:00\n" in text
    assert (out / "nodes" / "node001" / "kernel-node001.log").is_file()
    first, second = (
        json.loads(line) for line in (out / "nodes" / "node001" / "journal.jsonl").open()
    )
    assert bytes(first["MESSAGE"]) == b"login by user1 from 10.254.0.2 on node001 \xff"
    assert (second["_HOSTNAME"], second["MESSAGE"]) == ("node001", "by user1")
    record = json.loads((out / "job.json").read_text())
    assert record["node_addresses"] == {"node001": ["10.254.0.2", "fe80::2"]}
    _same_verdict(src, out, report.redaction.hosts, ruleset)


def test_a_directory_is_replaced_only_as_whole_path_components() -> None:
    red = redaction_for(
        {"job_id": "1", "nodes": "gpu012", "work_dir": "/tmp", "std_out": "/home/al/run/o.out"}
    )
    assert red.text(
        "cd /tmp/x; ls /var/tmp/ci/y /tmpfoo '/tmp' TMPDIR=/tmp:/home/al/run/a /home/al/run.old"
    ) == (
        "cd /redacted/dir2/x; ls /var/tmp/ci/y /tmpfoo '/redacted/dir2'"
        " TMPDIR=/redacted/dir2:/redacted/dir1/a /home/al/run.old"
    )


@pytest.mark.parametrize(
    ("what", "name"), [("user", "kernel"), ("user", "trusted"), ("user", "syslog"), ("host", "gpu")]
)
def test_a_name_that_is_a_word_of_the_logs_is_kept(
    what: str, name: str, tmp_path: Path, ruleset: RuleSet
) -> None:
    """Replacing it would change what the rules or the manifest read: it is kept, and said."""
    src = _case(tmp_path)
    (src / "bundle.json").write_text('{"trust": {"syslog": "untrusted", "kernel": "trusted"}}')
    old = "alice" if what == "user" else "gpu012"
    for path in [p for p in src.rglob("*") if p.is_file()]:
        path.write_text(path.read_text().replace(old, name))
    if what == "host":
        (src / "nodes" / "gpu012").rename(src / "nodes" / name)
    code, _, stderr = _redact_cli(src, tmp_path / "r")
    assert code == 0, stderr
    assert f"sattr: note: not redacted: {what} {name!r} is also a word of the logs" in stderr
    assert read_manifest(tmp_path / "r" / "bundle.json") == read_manifest(src / "bundle.json")
    _same_verdict(src, tmp_path / "r", {"gpu012": "node001"} if what == "user" else {}, ruleset)


def test_links_inside_the_bundle_are_copied_and_links_out_of_it_are_not(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    src = _case(tmp_path)
    (src / "shared").mkdir()
    (src / "nodes" / "gpu012" / "kernel.log").rename(src / "shared" / "kernel.log")
    (src / "nodes" / "gpu012" / "kernel.log").symlink_to("../../shared/kernel.log")
    (tmp_path / "secret.log").write_text("2026-06-10T10:10:00 gpu012 kernel: SECRET\n")
    (src / "job" / "err.log").symlink_to(tmp_path / "secret.log")
    code, _, stderr = _redact_cli(src, tmp_path / "r")
    assert code == 0, stderr
    copy = tmp_path / "r" / "nodes" / "node001" / "kernel.log"
    assert not copy.is_symlink() and "Xid" in copy.read_text() and "gpu012" not in copy.read_text()
    assert not any("SECRET" in p.read_text() for p in (tmp_path / "r").rglob("*") if p.is_file())
    assert "sattr: note: job/err.log: a link out of the bundle, not copied" in stderr
    _same_verdict(src, tmp_path / "r", {"gpu012": "node001"}, ruleset)


def test_a_job_record_linked_from_outside_is_refused_as_diagnose_refuses_it(
    tmp_path: Path,
) -> None:
    src = _case(tmp_path)
    (src / "job.json").rename(tmp_path / "elsewhere.json")
    (src / "job.json").symlink_to(tmp_path / "elsewhere.json")
    code, stdout, stderr = _redact_cli(src, tmp_path / "r")
    diagnosed = CliRunner().invoke(main, ["diagnose", str(src)])
    assert code == 1 and diagnosed.exit_code == 1 and not stdout
    assert (
        stderr
        == diagnosed.stderr
        == f"sattr: error: {src}/job.json: a link out of the bundle, not followed\n"
    )
    assert not (tmp_path / "r").exists()


def test_other_jobs_users_the_cluster_and_cgroup_paths_are_redacted(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    src = _case(tmp_path)
    others = {"gpu012": [{"job_id": "4243", "user": "bob", "start": "2026-06-10T09:30:00Z"}]}
    _edit_job(src, cluster="borealis", other_jobs=others)
    (src / "nodes" / "gpu012" / "syslog.log").write_text(
        "2026-06-10T10:05:00.000000+00:00 gpu012 slurmstepd[777]: job 4243 of Bob on borealis:"
        " cgroup /slurm_gpu012/uid_1002/job_4243\n"
    )
    report = redact_bundle(src, tmp_path / "r", note=None)
    red = report.redaction
    assert (red.users, red.clusters) == (
        {"alice": "user1", "bob": "user2"},
        {"borealis": "cluster1"},
    )
    assert (tmp_path / "r" / "nodes" / "node001" / "syslog.log").read_text() == (
        "2026-06-10T10:05:00.000000+00:00 node001 slurmstepd[777]: job 4243 of user2 on cluster1:"
        " cgroup /slurm_node001/uid_1002/job_4243\n"
    )
    assert json.loads((tmp_path / "r" / "job.json").read_text())["cluster"] == "cluster1"
    _same_verdict(src, tmp_path / "r", red.hosts, ruleset)


@pytest.mark.parametrize(
    "trouble", ["inside", "under-a-file", "dangling-link", "proc", "bad-zstd", "truncated-gzip"]
)
def test_a_failed_redaction_says_one_line_and_leaves_nothing(trouble: str, tmp_path: Path) -> None:
    src = _case(tmp_path)
    dest = tmp_path / "out" / "r"
    kernel = src / "nodes" / "gpu012" / "kernel.log"
    if trouble == "inside":
        dest = src / "nodes" / "gpu099"
    elif trouble == "under-a-file":
        (tmp_path / "file").write_text("x\n")
        dest = tmp_path / "file" / "sub"
    elif trouble == "dangling-link":
        dest = tmp_path / "link"
        dest.symlink_to(tmp_path / "nowhere")
    elif trouble == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc")
        dest = Path("/proc/red")
    elif trouble == "bad-zstd":
        (kernel.parent / "kernel.log.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(50)))
    else:
        data = gzip.compress(kernel.read_bytes() * 50)
        (kernel.parent / "kernel.log.1.gz").write_bytes(data[: len(data) // 2])
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    code, stdout, stderr = _redact_cli(src, dest)
    assert code == 1 and not stdout
    assert stderr.startswith("sattr: error: ") and stderr.count("\n") == 1, stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    assert not dest.exists()


def test_streams_the_site_does_not_read_are_not_missing_in_its_bundle(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    src = tmp_path / "b"
    shutil.copytree(CASES / "ownership-xid79-own-gpu", src)
    before = {(c.stream.value, c.status.value) for c in diagnose_bundle(src, ruleset)[1].coverage}
    assert ("fabricmanager", "missing") in before and ("job_stderr", "missing") in before
    (src / "bundle.json").write_text(json.dumps({"streams": ["job_stdout", "kernel", "syslog"]}))
    after = {(c.stream.value, c.status.value) for c in diagnose_bundle(src, ruleset)[1].coverage}
    assert after == before - {("fabricmanager", "missing"), ("job_stderr", "missing")}
    (src / "bundle.json").write_text(json.dumps({"streams": ["kernal"]}))
    with pytest.raises(BundleError, match=r"streams: .* is not a list of stream names"):
        diagnose_bundle(src, ruleset)


def test_a_manifest_nested_too_deeply_is_a_one_line_error(tmp_path: Path) -> None:
    src = _case(tmp_path)
    (src / "bundle.json").write_text("[" * 100_000 + "]" * 100_000)
    result = CliRunner().invoke(main, ["bundle", str(src), str(tmp_path / "out"), "--redact"])
    assert result.exit_code == 1 and not (tmp_path / "out").exists()
    assert result.output.strip().endswith(
        "bundle.json: cannot read: nested too deeply; nothing written"
    )
