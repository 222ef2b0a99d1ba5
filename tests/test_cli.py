"""The sattr command line through click's runner: output, --json, exit codes, one-line errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from attribution.cli import main

from .conftest import CASES, DemoStore, Diagnoses

SEED = CASES / "seed-nvlink-xid149-peers-nccl"


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner(env={"COLUMNS": "160"}).invoke(main, list(args), catch_exceptions=False)


def test_diagnose_human_view_shows_verdict_then_chain() -> None:
    result = run("diagnose", str(SEED))
    assert result.exit_code == 0
    out = result.output
    assert out.index("hardware") < out.index("Symptom chain")
    assert "gb200-n02" in out and "nvlink-fault" in out
    assert "Connection closed" in out or "connection closed" in out


def test_diagnose_json_is_exactly_one_verdict() -> None:
    result = run("diagnose", "--json", str(SEED))
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["schema"] == "attribution.verdict/1"
    assert data["sub_domain"] == "hardware" and data["terminal_state"] == "fail"
    assert [r["node"] for r in data["responsible"]] == ["gb200-n02"]


def test_unattributed_is_still_exit_zero(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"job_id": "5", "state": "FAILED", "exit_code": "1:0"}')
    result = run("diagnose", "--json", str(tmp_path))
    assert result.exit_code == 0
    assert json.loads(result.output)["sub_domain"] == "unattributed"


def test_unusable_input_is_a_one_line_error(tmp_path: Path) -> None:
    for args, needle in [
        ((str(tmp_path / "nope"),), "not a bundle directory"),
        ((str(tmp_path),), "job.json: missing"),
    ]:
        result = CliRunner().invoke(main, ["diagnose", *args])
        assert result.exit_code == 1
        assert result.output.count("\n") == 1 and needle in result.output, result.output
    (tmp_path / "job.json").write_text('{"job_id": 1,\n "nodes": ]')
    result = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert result.exit_code == 1 and "job.json:2: invalid JSON" in result.output
    (tmp_path / "job.json").write_text('{"job_id": 1, "nodes": "gpu[01-"}')
    result = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert result.exit_code == 1 and "invalid node list" in result.output


def test_backtest_reports_scores_and_json(shared_diagnoses: Diagnoses) -> None:
    result = run("backtest", str(CASES / "real-case11"), str(CASES / "real-case07"))
    assert result.exit_code == 0
    assert "2 case(s): 2 exact" in result.output
    data = json.loads(run("backtest", "--json", str(CASES)).output)
    assert data["counts"]["exact"] + data["counts"]["acceptable"] == data["scored"]
    assert data["responsible_node_accuracy"]["judged"] >= 30
    assert "per_class" in data and "confusion" in data


def test_backtest_fail_under_and_missing_dir(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["backtest", str(tmp_path / "x")]).exit_code == 1
    assert CliRunner().invoke(main, ["backtest", str(tmp_path)]).exit_code == 1  # no cases


def test_demo_writes_a_store_and_summarises(demo_store: DemoStore) -> None:
    db, result = demo_store.db, demo_store.result
    assert result.exit_code == 0, result.output
    n = len(list(CASES.glob("*/job.json")))
    assert f"Diagnosed {n}/{n} jobs" in result.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from verdicts").fetchone()[0] == n
        assert conn.execute("select count(*) from symptoms").fetchone()[0] > n
    shown = run("show", "--db", str(db), "4242001")
    assert shown.exit_code == 0 and "nvlink-fault" in shown.output
    as_default = run("--help")
    assert "diagnose" in as_default.output


def test_bad_option_values_are_one_line_errors(tmp_path: Path) -> None:
    for margin in ("nan", "inf", "-1", "1e20"):
        result = run("diagnose", "--margin", margin, str(SEED))
        assert result.exit_code == 2 and "--margin" in result.output, (margin, result.output)
    assert run("diagnose", "--margin", "0", str(SEED)).exit_code == 0
    not_sqlite = tmp_path / "notes.sqlite"
    not_sqlite.write_text("my notes, not a database\n")
    result = run("demo", "--db", str(not_sqlite))
    assert result.exit_code == 1
    assert result.output.strip().startswith(f"sattr: error: {not_sqlite}")
    assert not_sqlite.read_text() == "my notes, not a database\n"  # nothing lost


def test_rules_lint_and_test_pass_on_shipped_rules() -> None:
    lint = run("rules", "lint")
    assert lint.exit_code == 0 and "0 error(s)" in lint.output
    test = run("rules", "test")
    assert test.exit_code == 0 and " 0 failed" in test.output


def test_rules_commands_fail_on_a_bad_site_dir(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken.yaml").write_text(
        "schema: 1\nid: broken\nkind: extractor\nversion: 1\ntitle: x\n"
    )
    result = CliRunner().invoke(main, ["rules", "lint", str(site)])
    assert result.exit_code == 1 and "broken.yaml" in result.output


def test_rediagnose_keeps_verdicts_whose_evidence_is_gone(
    tmp_path: Path, demo_store: DemoStore
) -> None:
    """After the logs are rotated away, re-running the rules must not replace a verdict made
    from them with one made from nothing."""
    assert demo_store.result.exit_code == 0
    db = demo_store.copy_to(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"store: {db}\nspool: {tmp_path / 'spool'}\n"
    )  # no log paths: nothing to read
    result = run("rediagnose", "--config", str(config), "4242001")
    assert result.exit_code == 0, result.output
    assert "kept: evidence read before is gone now" in result.output
    assert "1 kept because their evidence is gone" in result.output
    assert "nvlink-fault" in run("show", "--db", str(db), "4242001").output
    forced = run("rediagnose", "--config", str(config), "--force", "4242001")
    assert "1 verdict(s) changed" in forced.output
    assert "nvlink-fault" not in run("show", "--db", str(db), "4242001").output
    # no store: an error, and none is created
    absent = tmp_path / "absent.sqlite"
    config.write_text(f"store: {absent}\nspool: {tmp_path / 'spool'}\n")
    result = run("rediagnose", "--config", str(config), "4242001")
    assert result.exit_code == 1 and "no verdict store here" in result.output
    assert not absent.exists()


def test_backtest_scores_causes_and_counts_wrong_blame(tmp_path: Path) -> None:
    """A rule-id cause is scored, prose is not; a verdict blaming a node the answer does
    not blame is counted as wrong blame (the real run on real-case11, a GPU off the bus)."""
    import shutil

    case = tmp_path / "cases" / "xid79"
    shutil.copytree(CASES / "real-case11", case)
    text = (case / "expected.yaml").read_text()
    data = json.loads(run("backtest", "--json", str(case)).output)
    assert data["cause_accuracy"] == {"correct": 1, "judged": 1}
    assert set(data["wrong_blame"].values()) == {0}
    # the answer now says the user's code was at fault and no node is to blame
    lines = [
        ln
        for ln in text.splitlines()
        if not ln.startswith(("sub_domain:", "responsible_nodes:", "cause:", "acceptable"))
    ]
    (case / "expected.yaml").write_text(
        "\n".join(lines) + "\nsub_domain: application\nresponsible_nodes: []\ncause: python-error\n"
    )
    data = json.loads(run("backtest", "--json", str(case)).output)
    assert data["cause_accuracy"] == {"correct": 0, "judged": 1}
    assert data["wrong_blame"]["blamed_wrong_node"] == 1
    (case / "expected.yaml").write_text("\n".join(lines) + "\ncause: a GPU fell off the bus\n")
    data = json.loads(run("backtest", "--json", str(case)).output)
    assert data["cause_accuracy"]["judged"] == 0
    shown = run("backtest", str(case)).output
    assert "wrong blame:" in shown


def test_backtest_rejects_causes_and_nodes_of_the_wrong_type(tmp_path: Path) -> None:
    """A cause that is not text, node lists that hold other things, and a number too long for
    Python are one-line errors for that case; the other cases are still scored."""
    import shutil

    cases = tmp_path / "cases"
    bodies = {
        "list": "cause: [a, b]\n",
        "nodes": "responsible_nodes: [[a, [b]], {x: 1}]\n",
        "huge": "cause: " + "9" * 5000 + "\n",
    }
    for name, body in bodies.items():
        shutil.copytree(CASES / "real-case11", cases / name)
        (cases / name / "expected.yaml").write_text("sub_domain: hardware\n" + body)
    shutil.copytree(CASES / "real-case07", cases / "good")
    data = json.loads(run("backtest", "--json", str(cases)).output)
    errors = {r["case"]: r["error"] for r in data["results"]}
    assert "cause must be text" in errors["list"]
    assert "must be a list of node names" in errors["nodes"]
    assert "expected.yaml:2" in errors["huge"] and "\n" not in errors["huge"]
    assert errors["good"] is None and data["errors"] == 3


def test_backtest_below_fail_under_says_why() -> None:
    """--fail-under fails with a sattr: error line that gives the rate, as docs/cli.md says."""
    wrong = CASES / "real-case11"
    ok = run("backtest", "--fail-under", "0.5", str(wrong))
    assert ok.exit_code == 0
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        case = Path(tmp) / "c"
        shutil.copytree(wrong, case)
        text = (case / "expected.yaml").read_text()
        (case / "expected.yaml").write_text(
            "\n".join(
                "sub_domain: application" if ln.startswith("sub_domain:") else ln
                for ln in text.splitlines()
            )
            + "\n"
        )
        low = run("backtest", "--fail-under", "0.5", str(case))
    assert low.exit_code == 1
    assert "exact-or-acceptable 0.0% is below --fail-under 0.5" in low.output


def test_show_says_when_a_job_id_names_jobs_of_other_clusters(demo_store: DemoStore) -> None:
    """Job ids repeat across clusters: the newest job is shown, and the others are named by
    key, not called earlier runs of it."""
    result = run("show", "--db", str(demo_store.db), "9931")
    assert result.exit_code == 0, result.output
    assert "hpc1_9931_0" in result.output or "gpu_9931_0" in result.output
    assert "names other jobs too" in result.output
    assert "earlier run(s)" not in result.output
