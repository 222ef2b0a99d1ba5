"""Hostile bundles: what a job's owner (or a careless copy) can put in front of `sattr`.

Each test builds a small real bundle on disk and runs it through the same entry points an
operator uses; none of them may crash, read outside the bundle or mislead the verdict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle, load_bundle
from attribution.cli import main
from attribution.errors import BundleError
from attribution.model import SubDomain, verdict_to_dict
from attribution.rules.compiled import RuleSet

JOB = {
    "cluster": "c1",
    "job_id": "777",
    "state": "FAILED",
    "exit_code": "1:0",
    "nodes": "n[1-2]",
    "start": "2026-01-01T10:00:00",
    "end": "2026-01-01T11:00:00",
    "user": "alice",
    "uid": 1001,
}
TRACEBACK = "Traceback (most recent call last):\nRuntimeError: step failed\n"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


def _bundle(root: Path, job: dict[str, object] | None = None) -> Path:
    (root / "job").mkdir(parents=True)
    (root / "job.json").write_text(json.dumps(job or JOB))
    (root / "job" / "stderr.log").write_text(TRACEBACK)
    for node in ("n1", "n2"):
        (root / "nodes" / node).mkdir(parents=True)
    return root


def test_a_link_out_of_the_bundle_is_not_followed(tmp_path: Path, ruleset: RuleSet) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET " + XID79 + "\n")
    bundle = _bundle(tmp_path / "b")
    (bundle / "job" / "stdout.log").symlink_to(secret)
    (bundle / "nodes" / "n1" / "kern.log").symlink_to(secret)
    _, verdict = diagnose_bundle(bundle, ruleset)
    text = json.dumps(verdict_to_dict(verdict))
    assert "TOPSECRET" not in text
    assert verdict.sub_domain is SubDomain.APPLICATION  # the XID behind the link was not read
    assert text.count("a link out of the bundle, not followed") == 2
    # the job record itself: a one-line error, never read through the link
    (bundle / "job.json").unlink()
    (bundle / "job.json").symlink_to(secret)
    with pytest.raises(BundleError, match="link out of the bundle"):
        load_bundle(bundle)


def test_a_link_inside_the_bundle_is_fine(tmp_path: Path, ruleset: RuleSet) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "raw.log").write_text(f"2026-01-01T10:30:00+00:00 n1 kernel: {XID79}\n")
    (bundle / "nodes" / "n1" / "kern.log").symlink_to(bundle / "raw.log")
    _, verdict = diagnose_bundle(bundle, ruleset)
    assert verdict.sub_domain is SubDomain.HARDWARE
    assert [r.node for r in verdict.responsible] == ["n1"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"nodes": 5}, "nodes"),
        ({"nodes": ["n1", "../../etc"]}, "not a host name"),
        ({"job_id": {"a": 1}}, "job_id"),
        ({"node_addresses": "10.0.0.1"}, "node_addresses"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"start": "2026-13-45T99:00:00"}, "start"),
        ({"end": "2025-12-31T00:00:00"}, "before"),
        ({"boot_times": ["n1"]}, "boot_times"),
    ],
)
def test_a_bad_job_record_is_a_one_line_error(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    bundle = _bundle(tmp_path / "b", {**JOB, **change})
    result = CliRunner().invoke(main, ["diagnose", str(bundle)])
    assert result.exit_code == 1
    message = result.output.strip()
    assert message.startswith(f"sattr: error: {bundle / 'job.json'}"), message
    assert words in message and "\n" not in message and "Traceback" not in message


def test_a_deeply_nested_or_huge_job_record_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "job.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleError, match=r"job\.json"):
        load_bundle(bundle)
    with (bundle / "job.json").open("wb") as fh:
        fh.truncate(17 << 20)
    with pytest.raises(BundleError, match="larger than 16 MiB"):
        load_bundle(bundle)


def test_terminal_escapes_in_logs_are_shown_escaped(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "job" / "stderr.log").write_text(
        "Traceback (most recent call last):\nRuntimeError: \x1b]0;pwned\x07\x1b[2Jboom\n"
    )
    result = CliRunner().invoke(main, ["diagnose", "--verbose", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\x1b" in result.output


def test_a_users_logger_line_is_not_a_kernel_xid(tmp_path: Path, ruleset: RuleSet) -> None:
    """`logger "NVRM: Xid ..."` lands in syslog under the user's program name; only the
    kernel's own lines are believed."""
    bundle = _bundle(tmp_path / "b")
    forged = f"2026-01-01T10:30:00+00:00 n2 alice[4242]: {XID79}\n"
    (bundle / "nodes" / "n2" / "syslog").write_text(forged)
    _, verdict = diagnose_bundle(bundle, ruleset)
    assert verdict.sub_domain is SubDomain.APPLICATION
    (bundle / "nodes" / "n2" / "syslog").write_text(forged.replace("alice[4242]", "kernel"))
    _, verdict = diagnose_bundle(bundle, ruleset)
    assert verdict.sub_domain is SubDomain.HARDWARE


def test_backtest_scores_a_broken_case_as_an_error_and_goes_on(tmp_path: Path) -> None:
    good = _bundle(tmp_path / "cases" / "good")
    (good / "expected.yaml").write_text("terminal_state: fail\nsub_domain: application\n")
    typo = _bundle(tmp_path / "cases" / "typo")
    (typo / "expected.yaml").write_text("terminal_state: fail\nsub_domain: hardwear\n")
    broken = _bundle(tmp_path / "cases" / "broken")
    (broken / "expected.yaml").write_text("sub_domain: application\n")
    (broken / "job.json").write_text("{not json")
    result = CliRunner().invoke(main, ["backtest", "--json", str(tmp_path / "cases")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["cases"], report["scored"], report["errors"]) == (3, 1, 2)
    assert report["exact_or_acceptable_rate"] == pytest.approx(1 / 3)  # errors count against
    scores = {c["case"]: c for c in report["results"]}
    assert scores["good"]["score"] == "exact"
    assert "hardwear" in scores["typo"]["error"]
    assert "job.json" in scores["broken"]["error"]
    # a broken expected.yaml does not stop diagnose: it does not need the answer
    (good / "expected.yaml").write_text("sub_domain: [")
    assert CliRunner().invoke(main, ["diagnose", str(good)]).exit_code == 0


def test_unreadable_node_directories_are_coverage_not_a_crash(
    tmp_path: Path, ruleset: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node directory (or the whole nodes/) the reader may not enter is an ``unreadable``
    coverage entry, never a traceback. Root may enter every directory, so as root the
    permission error is raised by a stand-in for the file system calls (an edge only)."""
    bundle = _bundle(tmp_path / "b")
    (bundle / "nodes" / "n1" / "kern.log").write_text("x\n")
    denied: set[Path] = set()
    if os.geteuid() == 0:
        real_stat, real_iterdir = Path.stat, Path.iterdir

        def guarded(path: Path) -> None:
            if any(path == d or d in path.parents for d in denied if path != d.parent):
                raise PermissionError(13, "Permission denied", str(path))

        def stat(self: Path, *, follow_symlinks: bool = True) -> os.stat_result:
            if any(d in self.parents for d in denied):
                raise PermissionError(13, "Permission denied", str(self))
            return real_stat(self, follow_symlinks=follow_symlinks)

        def iterdir(self: Path):  # type: ignore[no-untyped-def]
            guarded(self)
            return real_iterdir(self)

        monkeypatch.setattr(Path, "stat", stat)
        monkeypatch.setattr(Path, "iterdir", iterdir)
    for target in (bundle / "nodes" / "n1", bundle / "nodes"):
        denied = {target}
        if os.geteuid() != 0:
            target.chmod(0)
        try:
            _, verdict = diagnose_bundle(bundle, ruleset)
        finally:
            target.chmod(0o755)
        n1 = {c.status.value for c in verdict.coverage if c.node == "n1"}
        assert n1 == {"unreadable"}, (target, n1)


def test_host_lists_in_slurm_lines_never_crash_and_name_no_single_node(tmp_path: Path) -> None:
    """Real srun and slurmctld lines carry bracketed host lists with commas. They once cut the
    list at the comma and crashed the verdict's rendering; several nodes lost in one line are a
    shared cause, not the first node's fault."""
    bundle = tmp_path / "b"
    (bundle / "job").mkdir(parents=True)
    (bundle / "job.json").write_text(
        json.dumps(
            {
                "job_id": "7",
                "state": "NODE_FAIL",
                "exit_code": "0:0",
                "nodes": "c[013-014]",
                "start": "2022-07-31T02:15:40",
                "end": "2022-07-31T13:44:30",
            }
        )
    )
    (bundle / "job" / "stdout.log").write_text(
        "srun: error: c[013-014]: tasks 0-7: Terminated\n"
        "srun: error: dgx[001-011,013-064]: tasks 0-10,12-63: Terminated\n"
    )
    (bundle / "slurmctld.log").write_text(
        "[2022-07-31T13:38:02.114] error: Nodes c[013-014,023-024] not responding\n"
        "[2022-07-31T13:44:30.006] error: Nodes c[013-014,023-024] not responding, setting DOWN\n"
    )
    result = CliRunner().invoke(main, ["diagnose", "--json", str(bundle)])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)
    assert verdict["cause"]["id"] == "nodes-lost-together"
    assert verdict["responsible"] == []
    shown = CliRunner().invoke(main, ["diagnose", str(bundle)])
    assert shown.exit_code == 0 and "c013,c014,c023,c024" in shown.output


@pytest.mark.slow
def test_slow_user_lines_do_not_switch_an_extractor_off_for_trusted_logs(tmp_path: Path) -> None:
    """An extractor that runs out of time on 20 lines is given up, but the lines users can
    write (syslog here) and the trusted ones (the kernel log) keep separate budgets: a user's
    slow lines on one node must not hide another node's kernel line (a breaker's finding)."""
    site = tmp_path / "rules"
    site.mkdir()
    (site / "site-slow.yaml").write_text(
        "schema: 1\nid: site-slow\nkind: extractor\nversion: 1\ntitle: a slow site pattern\n"
        "description: backtracks badly on long runs of a\nstatus: test\nseverity: error\n"
        "streams: [kernel, syslog]\nmatch:\n  contains: [aaaa, TARGET]\n"
        "  regex: '^(?:(?:a|aa)+$|TARGET)'\nemit:\n  event: site.target\n  scope: node\n"
        "  role: root\n  label: the target\n"
    )
    (site / "site-target.yaml").write_text(
        "schema: 1\nid: site-target\nkind: diagnosis\nversion: 1\ntitle: the site target\n"
        "description: the kernel line was read\nstatus: test\nseverity: error\npriority: 99\n"
        "sub_domain: hardware\nwhen:\n  any:\n  - event: [site.target]\nsummary: read it\n"
    )
    bundle = tmp_path / "b"
    for node in ("n1", "n2"):
        (bundle / "nodes" / node).mkdir(parents=True)
    (bundle / "job.json").write_text(
        json.dumps(
            {
                "job_id": "9",
                "state": "FAILED",
                "exit_code": "1:0",
                "nodes": "n[1-2]",
                "start": "2026-01-01T10:00:00",
                "end": "2026-01-01T11:00:00",
            }
        )
    )
    slow = "".join(f"Jan  1 10:{i:02d}:00 n1 app: {'a' * 60}b\n" for i in range(25))
    (bundle / "nodes" / "n1" / "syslog.log").write_text(slow)
    (bundle / "nodes" / "n2" / "kernel.log").write_text(
        "2026-01-01T10:30:00+00:00 n2 kernel: TARGET\n"
    )
    result = CliRunner().invoke(main, ["diagnose", "--json", "--rules", str(site), str(bundle)])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)
    assert verdict["cause"]["id"] == "site-target", verdict["summary"]
