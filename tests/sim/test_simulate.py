"""Unit tests of the scenario simulator itself (the attribution.sim package)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle
from attribution.cli import main
from attribution.hostlist import compress, expand
from attribution.model import CoverageStatus, Stream
from attribution.rules.compiled import RuleSet
from attribution.sim import (
    CHAINS,
    FaultSpec,
    Scenario,
    format_line,
    generate,
    load_scenarios,
    sweep,
    write_bundle,
)
from attribution.sources.prefix import parse_prefix

START = datetime(2025, 3, 4, 9, 0, 0, tzinfo=UTC)


def _scenario(chain: str = "gpu_fell_off_bus", **kw: Any) -> Scenario:
    fault = {"chain": chain, "node": kw.pop("node", "gpu002"), **kw.pop("fault", {})}
    base: dict[str, Any] = {"name": "t", "seed": 7, "nodes": "gpu[001-004]", "fault": fault}
    return Scenario.model_validate({**base, **kw})


def _text(files: dict[str, str | bytes], path: str) -> str:
    content = files[path]
    if isinstance(content, bytes):
        return gzip.decompress(content).decode()
    return content


def _kernel_path(files: dict[str, str | bytes], node: str) -> str:
    (path,) = [
        p
        for p in files
        if p.startswith(f"nodes/{node}/")
        and p.split("/")[-1].split(".")[0] in ("kernel", "kern", "dmesg")
    ]
    return path


# --------------------------------------------------------------------- determinism


def test_same_seed_gives_identical_files() -> None:
    scenario = _scenario(skew={"max_seconds": 10}, compress=0.5, noise={"benign_xid_nodes": 1})
    assert generate(scenario).files == generate(scenario).files


def test_another_seed_gives_other_values() -> None:
    a = generate(_scenario())
    b = generate(_scenario(seed=8))
    assert a.files["job/stdout.log"] != b.files["job/stdout.log"]
    assert a.expected.sub_domain == b.expected.sub_domain == "hardware"


@pytest.mark.parametrize("chain", CHAINS)
def test_every_chain_generates_a_consistent_bundle(chain: str) -> None:
    platform = "gb200" if chain == "nvlink5_fault" else "h100"
    bundle = generate(_scenario(chain, platform=platform))
    exp = bundle.expected
    assert exp.terminal_state in {"fail", "cancelled", "timeout", "preempted"}
    allowed = {"hardware", "system_software", "infrastructure", "application"}
    allowed |= {"ambiguous", "unattributed"}
    assert exp.sub_domain in allowed
    assert set(exp.acceptable_sub_domains) <= allowed - {exp.sub_domain}
    assert set(exp.responsible_nodes) <= set(expand("gpu[001-004]"))
    assert exp.why
    assert exp.cause
    doc = yaml.safe_load(bundle.files["expected.yaml"])  # type: ignore[arg-type]
    assert doc["sub_domain"] == exp.sub_domain
    assert doc["simulated"]["chain"] == chain
    job = json.loads(bundle.files["job.json"])  # type: ignore[arg-type]
    assert job["nodes"] == "gpu[001-004]"
    assert job["start"] == "2025-03-04T09:00:00"
    assert datetime.fromisoformat(job["end"]) > datetime.fromisoformat(job["start"])


def test_sweep_is_deterministic() -> None:
    assert sweep(30, 3) == sweep(30, 3)
    assert sweep(30, 3) != sweep(30, 4)


# --------------------------------------------------------------------- hostlists and zones
# (the simulator parses node lists with attribution.hostlist, tested in tests/test_hostlist.py)


@pytest.mark.parametrize("bad", ["gpu[003-001]", "gpu[1-", "gpu]1["])
def test_bad_hostlists_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match=r"invalid node list .*(range|bracket)"):
        _scenario(nodes=bad)


def test_sweep_node_lists_fold_like_slurm() -> None:
    """A sweep's node list is folded by attribution.hostlist and expands back to its nodes."""
    for scenario in sweep(40, 11):
        names = expand(scenario.nodes)
        assert len(names) >= 2
        assert compress(names) == scenario.nodes


def test_unknown_timezones_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown timezone 'Mars/Olympus'"):
        _scenario(timezone="Mars/Olympus")
    assert _scenario(timezone="Europe/Berlin").timezone == "Europe/Berlin"


# --------------------------------------------------------------------- line formats

BERLIN = ZoneInfo("Europe/Berlin")
MARCH = datetime(2025, 3, 4, 10, 12, 1, 123456, tzinfo=BERLIN)
NOVEMBER = datetime(2025, 11, 14, 23, 59, 58, 5000, tzinfo=BERLIN)
TIMED_KINDS = [
    "dmesg_t",
    "syslog",
    "journal",
    "short_iso",
    "iso",
    "syslog_short",
    "fabricmanager",
    "torch_py",
    "torchrun_old",
    "bracket_iso",
    "slurmctld",
]


@pytest.mark.parametrize("when", [MARCH, NOVEMBER], ids=["march", "november"])
@pytest.mark.parametrize("kind", TIMED_KINDS)
def test_format_parses_back_to_its_time(kind: str, when: datetime) -> None:
    line = format_line(kind, when, "NVRM: hello", host="gpu007", uptime=1234.5)  # type: ignore[arg-type]
    got = parse_prefix(line, tz=BERLIN, reference=when)
    assert got.time is not None, line
    assert abs((got.time - when).total_seconds()) < 1.0, line
    assert got.text == "NVRM: hello"
    if kind in ("syslog", "journal", "short_iso", "iso", "syslog_short"):
        assert got.host == "gpu007"


def test_raw_dmesg_keeps_the_uptime() -> None:
    got = parse_prefix(format_line("raw", MARCH, "NVRM: hello", uptime=1234.5))
    assert got.uptime == pytest.approx(1234.5)
    assert got.text == "NVRM: hello"


def test_c10_line_in_october_to_december() -> None:
    line = format_line("c10", NOVEMBER, "Watchdog caught", rank=3)
    got = parse_prefix(line, tz=BERLIN, reference=NOVEMBER)
    assert got.rank == 3
    assert got.time is not None
    assert abs((got.time - NOVEMBER).total_seconds()) < 1.0


def test_c10_line_in_january_to_september() -> None:
    line = format_line("c10", MARCH, "Watchdog caught", rank=3)
    assert line.startswith("[rank3]:[E304 10:12:01.")
    got = parse_prefix(line, tz=BERLIN, reference=MARCH)
    assert got.time is not None
    assert abs((got.time - MARCH).total_seconds()) < 1.0


def test_rank_tag_wins_over_the_srun_task_label() -> None:
    assert parse_prefix("1: [rank11]: RuntimeError: CUDA error: unknown error").rank == 11


# --------------------------------------------------------------------- times, skew, window


@pytest.mark.parametrize("fmt", ["dmesg_t", "syslog", "journal", "short_iso", "iso", "raw"])
def test_root_line_has_the_intended_time_with_skew(fmt: str) -> None:
    scenario = _scenario(
        fault={"at": 1800.0},
        kernel_formats=[fmt],
        skew={"nodes": {"gpu002": 7.0}},
        timezone="America/Chicago",
    )
    bundle = generate(scenario)
    text = _text(bundle.files, _kernel_path(bundle.files, "gpu002"))
    (line,) = [x for x in text.splitlines() if ": 79, " in x]
    tz = ZoneInfo("America/Chicago")
    got = parse_prefix(line, tz=tz, reference=START)
    intended = START + timedelta(seconds=1800 + 7.0)
    if fmt == "raw":
        assert got.uptime is not None
        boot = datetime.fromisoformat(bundle.job["boot_times"]["gpu002"])
        got_time = boot + timedelta(seconds=got.uptime)
    else:
        assert got.time is not None
        got_time = got.time
    assert abs((got_time - intended).total_seconds()) < 1.0


def test_skew_moves_only_that_nodes_clock(tmp_path: Path, ruleset: RuleSet) -> None:
    scenario = _scenario(
        fault={"at": 1800.0}, kernel_formats=["iso"], skew={"nodes": {"gpu002": -30.0}}
    )
    files = generate(scenario).files
    line = next(x for x in _text(files, "nodes/gpu002/kernel.log").splitlines() if ": 79, " in x)
    assert line.startswith("2025-03-04T09:29:30.")  # 09:30:00 true time, clock 30 s behind
    _, verdict = diagnose_bundle(write_bundle(scenario, tmp_path / "b"), ruleset)
    assert [r.node for r in verdict.responsible] == ["gpu002"]


def test_out_of_window_signal_is_placed_outside_and_ignored(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    scenario = _scenario(
        "rank_exception",
        kernel_formats=["iso"],
        out_of_window=[
            {"signal": "xid79", "node": "gpu004", "before_start": 86400},
            {"signal": "xid48", "node": "gpu003", "after_end": 7200},
        ],
    )
    bundle = generate(scenario)
    end = datetime.fromisoformat(bundle.job["end"]).replace(tzinfo=UTC)
    before = [
        x for x in _text(bundle.files, "nodes/gpu004/kernel.log").splitlines() if ": 79," in x
    ]
    after = [x for x in _text(bundle.files, "nodes/gpu003/kernel.log").splitlines() if ": 48," in x]
    assert before
    assert after
    assert parse_prefix(before[0]).time == START - timedelta(days=1)
    after_time = parse_prefix(after[0]).time
    assert after_time is not None
    assert abs((after_time - (end + timedelta(hours=2))).total_seconds()) < 2
    _, verdict = diagnose_bundle(write_bundle(bundle, tmp_path / "b"), ruleset)
    assert verdict.sub_domain.value == "application"
    ignored_nodes = {n for entry in verdict.ignored for n in entry.nodes}
    assert {"gpu003", "gpu004"} <= ignored_nodes


# --------------------------------------------------------------------- sources


def test_missing_source_is_absent_and_reported(tmp_path: Path, ruleset: RuleSet) -> None:
    scenario = _scenario(missing={"kernel": ["gpu003"], "fabricmanager": ["*"]})
    files = generate(scenario).files
    assert not [p for p in files if p.startswith("nodes/gpu003/") and "sys" not in p]
    assert not [p for p in files if "fabricmanager" in p]
    _, verdict = diagnose_bundle(write_bundle(scenario, tmp_path / "b"), ruleset)
    status = {(c.stream, c.node): c.status for c in verdict.coverage}
    assert status[(Stream.KERNEL, "gpu003")] is CoverageStatus.MISSING
    assert status[(Stream.KERNEL, "gpu002")] is CoverageStatus.OK


def test_compressed_files_are_gzip(tmp_path: Path) -> None:
    files = generate(_scenario(compress=1.0)).files
    node_files = [p for p in files if p.startswith("nodes/")]
    assert node_files
    assert all(p.endswith(".gz") for p in node_files)
    root = write_bundle(_scenario(compress=1.0), tmp_path / "b")
    assert gzip.decompress((root / node_files[0]).read_bytes()).decode().endswith("\n")


def test_job_output_is_realistic() -> None:
    scenario = _scenario("rank_exception", noise={"level": "normal", "tqdm": True})
    out = _text(generate(scenario).files, "job/stdout.log")
    assert "\r" in out  # tqdm redraws
    assert "] NCCL INFO Bootstrap : Using " in out
    for i, name in enumerate(expand("gpu[001-004]")):
        assert f"\n{i}: {name}" in out  # srun --label, then NCCL's host:pid:tid prefix
    assert "Init COMPLETE" in out
    assert "Root Cause (first observed failure):" in out


def test_split_output_puts_nccl_on_stdout_and_tracebacks_on_stderr() -> None:
    files = generate(_scenario("rank_exception", split_output=True)).files
    assert "NCCL INFO" in _text(files, "job/stdout.log")
    assert "NCCL INFO" not in _text(files, "job/stderr.log")
    assert "Traceback (most recent call last):" in _text(files, "job/stderr.log")


def test_thousand_nodes_generate_fast() -> None:
    scenario = _scenario(nodes="gpu[0001-1024]", node="gpu0517", noise={"level": "normal"})
    t = time.perf_counter()
    bundle = generate(scenario)
    assert time.perf_counter() - t < 1.5
    assert len({p.split("/")[1] for p in bundle.files if p.startswith("nodes/")}) == 1024


# --------------------------------------------------------------------- validation


def test_unknown_keys_and_options_are_errors() -> None:
    with pytest.raises(ValueError, match="extra"):
        Scenario.model_validate({"name": "x", "fault": {"chain": "gpu_oom"}, "colour": "red"})
    with pytest.raises(ValueError, match="unknown option"):
        generate(_scenario(fault={"options": {"colour": "red"}}))
    with pytest.raises(ValueError, match="not one of the job's nodes"):
        generate(_scenario(node="gpu999"))


def test_chain_preconditions() -> None:
    with pytest.raises(ValueError, match="NVSwitch platform"):
        generate(_scenario("nvswitch_fatal", platform="gb200"))
    with pytest.raises(ValueError, match="at least 3 nodes"):
        generate(_scenario("ib_link_flap", nodes="gpu[001-002]"))


def test_removing_the_root_evidence_is_refused() -> None:
    with pytest.raises(ValueError, match="root evidence"):
        generate(_scenario(missing={"kernel": ["gpu002"]}))


def test_load_scenarios_accepts_one_or_many(tmp_path: Path) -> None:
    one = {"name": "a", "fault": {"chain": "gpu_oom"}}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(one))
    (tmp_path / "many.yaml").write_text(
        yaml.safe_dump({"scenarios": [one, {**one, "name": "b", "fault": {"chain": "gpu_oom"}}]})
    )
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**one, "nodez": "x"}))
    assert [s.name for s in load_scenarios(tmp_path / "one.yaml")] == ["a"]
    assert [s.name for s in load_scenarios(tmp_path / "many.yaml")] == ["a", "b"]
    with pytest.raises(ValueError, match=r"bad\.yaml:\d+: nodez: Extra inputs"):
        load_scenarios(tmp_path / "bad.yaml")
    # the line of the offending value, in the second scenario of a list
    (tmp_path / "line.yaml").write_text(
        "scenarios:\n  - name: a\n    fault: {chain: gpu_oom}\n"
        "  - name: b\n    fault: {chain: gpu_oom}\n    ranks_per_node: lots\n"
    )
    with pytest.raises(ValueError, match=r"line\.yaml:6: ranks_per_node: "):
        load_scenarios(tmp_path / "line.yaml")


def test_write_bundle_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    with pytest.raises(FileExistsError):
        write_bundle(_scenario(), tmp_path)


# --------------------------------------------------------------------- CLI


def test_cli_writes_a_scenario_and_a_sweep(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "one", "nodes": "n[1-3]", "fault": FaultSpec(chain="gpu_oom").model_dump()}
        )
    )
    runner = CliRunner()
    res = runner.invoke(main, ["simulate", str(spec), str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "one" / "expected.yaml").is_file()
    res = runner.invoke(main, ["simulate", "--sweep", "3", "--seed", "1", str(tmp_path / "sw")])
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "sw").iterdir())) == 3
    res = runner.invoke(main, ["backtest", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output


def test_cli_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["simulate", str(tmp_path)]).exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfault: {chain: nope}\n")
    res = runner.invoke(main, ["simulate", str(bad), str(tmp_path / "o")])
    assert res.exit_code == 1
    assert "sattr: error:" in res.output


def test_the_cli_loads_the_simulator_only_for_simulate() -> None:
    """attribution.sim is test tooling: importing the CLI (every sattr command) leaves it out."""
    code = (
        "import sys, attribution.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['attribution', 'sim']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
