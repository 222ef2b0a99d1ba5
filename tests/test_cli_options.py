"""sattr's options: a bad value is a usage error naming the option (exit 2, never a traceback),
and the filters of 'sattr list' select what they say."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from attribution.cli import main

from .conftest import CASES, DemoStore

SEED = CASES / "seed-nvlink-xid149-peers-nccl"


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "160"}).invoke(main, list(args), catch_exceptions=False)


def test_every_bad_option_value_is_a_usage_error(tmp_path: Path) -> None:
    """A value an option cannot take is click's one-line ``Error: Invalid value for '--X'``
    (exit 2), never a traceback: a malformed host list used to escape as HostlistError."""
    absent = str(tmp_path / "absent")
    cases = [
        (["list", "--node", "gpu[01-"], "--node"),
        (["list", "--node", "none"], "--node"),
        (["list", "--node", "n[1-20000]"], "--node"),
        (["list", "--since", "bogus"], "--since"),
        (["list", "--since", ""], "--since"),
        (["list", "--until", "all"], "--until"),
        (["list", "--state", "bogus"], "--state"),
        (["list", "--sub-domain", "hw"], "--sub-domain"),
        (["list", "--limit", "0"], "--limit"),
        (["list", "--config", absent], "--config"),
        (["show", "--config", absent, "1"], "--config"),
        (["rediagnose", "--all", "--since", "yesterday"], "--since"),
        (["backtest", "--fail-under", "nan", str(SEED)], "--fail-under"),
        (["backtest", "--fail-under", "1.5", str(SEED)], "--fail-under"),
        (["diagnose", "--rules", absent, str(SEED)], "--rules"),
        (["diagnose", "--margin", "nan", str(SEED)], "--margin"),
        (["demo", "--db", str(tmp_path)], "--db"),
        (["simulate", "--sweep", "0", str(tmp_path)], "--sweep"),
        (["simulate", "--seed", "x", "--sweep", "1", str(tmp_path)], "--seed"),
    ]
    for args, option in cases:
        result = CliRunner().invoke(main, args)
        errors = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert len(errors) == 1 and f"'{option}'" in errors[0], (args, result.output)
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert "Traceback" not in result.output, (args, result.output)


def test_list_filters_select_from_the_store(demo_store: DemoStore) -> None:
    """The filters of 'sattr list' reach the store's query: node lists (expanded), cause,
    partition, time range, state in either case, and the row limit."""
    db = demo_store.db  # the session's 'sattr demo' store, only read here
    assert demo_store.result.exit_code == 0

    def listed(*args: str) -> list[str]:
        result = run("list", "--db", str(db), "--since", "all", "--json", *args)
        assert result.exit_code == 0, result.output
        return [r["display_id"] for r in json.loads(result.output)]

    everything = listed("--limit", "1000000")
    assert len(everything) == len(list(CASES.glob("*/job.json")))
    assert listed("--node", "gb200-n[01-04]") == ["4242001"]
    assert "4242001" in listed("--cause", "nvlink-fault")
    on_gpu = listed("--partition", "gpu")
    assert 0 < len(on_gpu) < len(everything) and set(on_gpu) <= set(everything)
    assert listed("--limit", "3") == everything[:3]
    assert listed("--state", "FAIL") == listed("--state", "fail")
    assert listed("--until", "1971-01-01") == []
    before = listed("--until", "2020-01-01")
    assert before and "100011" in before and "4242001" not in before
    shown = run("list", "--db", str(db), "--since", "all", "--node", "gb200-n02")
    assert shown.exit_code == 0 and "1 verdict(s)" in shown.output
