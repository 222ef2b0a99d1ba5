"""The ``sattr`` command line: thin commands over library calls, ``--json`` for machines.

Exit codes: 0 when the command did its job (a verdict was produced, even an
``unattributed`` one); 1 for unusable input or a failed check, with a
one-line error on stderr; 2 for usage errors.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from attribution import __version__
from attribution.errors import AttributionError, RuleErrors

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``sattr: error: <message>`` (one line) and exit."""
    click.echo(f"sattr: error: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False))


class DefaultGroup(click.Group):
    """A group where ``sattr 1234`` means ``sattr show 1234``."""

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def _load_rules(extra: Sequence[str], *, shipped: bool = True):  # type: ignore[no-untyped-def]
    from attribution.rules.loader import load_ruleset

    try:
        return load_ruleset([Path(d) for d in extra], include_shipped=shipped)
    except RuleErrors as exc:
        for err in exc.errors:
            click.echo(f"sattr: rule error: {err}", err=True)
        fail(f"{len(exc.errors)} rule error(s); fix them or run 'sattr rules lint'")


rules_option = click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Add a site rules directory (repeatable); its rules override shipped ones by id.",
)


@click.group(cls=DefaultGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="sattr")
def main() -> None:
    """Diagnose failed Slurm GPU jobs: one honest verdict per job.

    \b
    sattr JOBID                 show a job's verdict (same as 'sattr show JOBID')
    sattr diagnose BUNDLE       diagnose an evidence bundle offline
    sattr backtest DIR...       score bundles against their expected.yaml
    sattr demo                  diagnose the bundled sample jobs
    sattr rules lint|test       check rules the way CI does
    sattr simulate ...          write simulated bundles with their expected answer
    """


# --------------------------------------------------------------------- diagnose


@main.command()
@click.argument("bundle", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print exactly one verdict object as JSON.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Show examples, ignored signals and full coverage."
)
@click.option(
    "--margin", type=float, default=None, help="Seconds added before and after the job window."
)
@rules_option
def diagnose(
    bundle: str, as_json: bool, verbose: bool, margin: float | None, rule_dirs: tuple[str, ...]
) -> None:
    """Diagnose the evidence bundle in BUNDLE (job.json, job/, nodes/<node>/)."""
    from attribution.analyze import AnalysisOptions
    from attribution.bundle import diagnose_bundle
    from attribution.model import verdict_to_dict
    from attribution.render import verdict_view

    ruleset = _load_rules(rule_dirs)
    options = (
        AnalysisOptions()
        if margin is None
        else AnalysisOptions(margin_before=margin, margin_after=margin)
    )
    try:
        _, verdict = diagnose_bundle(bundle, ruleset, options=options)
    except AttributionError as exc:
        fail(str(exc))
    if as_json:
        _emit_json(verdict_to_dict(verdict))
    else:
        _console().print(verdict_view(verdict, verbose=verbose))


# --------------------------------------------------------------------- backtest


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--fail-under",
    type=float,
    default=None,
    help="Exit 1 when exact-or-acceptable is below this rate (0-1).",
)
@rules_option
def backtest(
    dirs: tuple[str, ...], as_json: bool, fail_under: float | None, rule_dirs: tuple[str, ...]
) -> None:
    """Score every bundle under DIRS that has an expected.yaml."""
    from attribution.backtest import Report, error_result, find_cases, score_case
    from attribution.bundle import diagnose_bundle, read_expected
    from attribution.render import backtest_view

    ruleset = _load_rules(rule_dirs)
    missing = [d for d in dirs if not Path(d).exists()]
    if missing:
        fail(f"{missing[0]}: no such directory")
    cases = find_cases(dirs)
    if not cases:
        fail("no bundles with an expected.yaml under " + ", ".join(dirs))
    report = Report()
    for path in cases:
        try:
            expected = read_expected(path / "expected.yaml") or {}
            _, verdict = diagnose_bundle(path, ruleset)
            report.cases.append(score_case(path.name, str(path), expected, verdict))
        except AttributionError as exc:
            report.cases.append(error_result(path.name, str(path), None, str(exc)))
    if as_json:
        _emit_json(report.to_dict())
    else:
        _console().print(backtest_view(report))
    if fail_under is not None and report.rate("exact", "acceptable") < fail_under:
        sys.exit(1)


# --------------------------------------------------------------------- demo


def _default_demo_db() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attribution" / "demo.sqlite"


@main.command()
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file to write (default: ~/.cache/attribution/demo.sqlite).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as a JSON list.")
@rules_option
def demo(db: str | None, as_json: bool, rule_dirs: tuple[str, ...]) -> None:
    """Diagnose the bundled sample jobs into a SQLite file and print a summary."""
    from attribution.backtest import Report, score_case
    from attribution.bundle import diagnose_bundle
    from attribution.model import verdict_to_dict
    from attribution.paths import samples_dir
    from attribution.render import list_view
    from attribution.store import Store

    ruleset = _load_rules(rule_dirs)
    samples = samples_dir()
    bundles = sorted(p.parent for p in samples.glob("*/job.json"))
    if not bundles:
        fail(f"{samples}: no sample bundles found")
    path = Path(db) if db else _default_demo_db()
    report = Report()
    verdicts = []
    failed: list[str] = []
    with Store(path) as store:
        for bundle in bundles:
            try:
                loaded, verdict = diagnose_bundle(bundle, ruleset)
            except AttributionError as exc:
                failed.append(f"{bundle.name}: {exc}")
                continue
            store.save(verdict)
            verdicts.append(verdict)
            if loaded.expected:
                report.cases.append(score_case(bundle.name, str(bundle), loaded.expected, verdict))
        rows = list(store.rows(order="display_id"))
    if as_json:
        _emit_json([verdict_to_dict(v) for v in verdicts])
        return
    console = _console()
    console.print(list_view(rows))
    agree = sum(1 for c in report.cases if c.score in ("exact", "acceptable"))
    console.print(
        f"\nDiagnosed {len(verdicts)}/{len(bundles)} jobs into {path}"
        + (
            f"; {agree}/{len(report.cases)} agree with their hand-written labels"
            if report.cases
            else ""
        )
        + "."
    )
    console.print(f"Try: sattr diagnose {bundles[0]}", style="dim")
    for line in failed:
        click.echo(f"sattr: error: {line}", err=True)
    if failed:
        sys.exit(1)


# --------------------------------------------------------------------- simulate


@main.command()
@click.argument("args", nargs=-1, required=True, metavar="[SCENARIO.yaml] OUTDIR")
@click.option("--sweep", "sweep_n", type=click.IntRange(1), default=None, help="Draw N scenarios.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sweep.")
def simulate(args: tuple[str, ...], sweep_n: int | None, seed: int) -> None:
    """Write simulated evidence bundles (with expected.yaml) into OUTDIR/<scenario>.

    \b
    sattr simulate SCENARIO.yaml OUTDIR      the scenario(s) in a YAML file
    sattr simulate --sweep N --seed S OUTDIR  N varied scenarios drawn from seed S
    Then score them: sattr backtest OUTDIR
    """
    from attribution.simulate import load_scenarios, sweep, write_bundle

    want = 1 if sweep_n is not None else 2
    if len(args) != want:
        raise click.UsageError(
            "expected OUTDIR" if sweep_n is not None else "expected SCENARIO.yaml OUTDIR"
        )
    try:
        scenarios = sweep(sweep_n, seed) if sweep_n is not None else load_scenarios(args[0])
        out = Path(args[-1])
        for scenario in scenarios:
            write_bundle(scenario, out / scenario.name)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"wrote {len(scenarios)} bundle(s) under {out}; score them with: sattr backtest {out}"
    )


# --------------------------------------------------------------------- show


@main.command()
@click.argument("job")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    envvar="ATTRIBUTION_DB",
    default=None,
    help="Verdict store (default: from the config file).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def show(job: str, db: str | None, as_json: bool) -> None:
    """Show the stored verdict of JOB (job id, A_T array task, or SLUID)."""
    from attribution.store import Store

    path = Path(db) if db else _default_demo_db()
    if not path.exists():
        fail(f"{path}: no verdict store (set --db or ATTRIBUTION_DB)")
    try:
        with Store(path, readonly=True) as store:
            found = store.find(job)
    except AttributionError as exc:
        fail(str(exc))
    if not found:
        fail(f"no verdict for job {job} in {path}")
    if as_json:
        _emit_json(found[0])
        return
    from attribution.render import verdict_view
    from attribution.verdictjson import verdict_from_dict

    _console().print(verdict_view(verdict_from_dict(found[0])))


# --------------------------------------------------------------------- rules


@main.group()
def rules() -> None:
    """Check rules: lint (structure and references) and test (inline examples)."""


def _site_ids(ruleset: Any, directory: str | None) -> set[str] | None:
    if directory is None:
        return None
    root = str(Path(directory).resolve())
    return {
        rid
        for rid, src in ruleset.sources.items()
        if str(Path(src.path).resolve()).startswith(root)
    }


@rules.command("lint")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--no-shipped", is_flag=True, help="Lint DIRECTORY alone, without the shipped rules.")
def rules_lint(directory: str | None, no_shipped: bool) -> None:
    """Load and lint the shipped rules, plus DIRECTORY (a site's own) when given."""
    from attribution.rules.lint import lint

    ruleset = _load_rules([directory] if directory else [], shipped=not no_shipped)
    ids = _site_ids(ruleset, directory)
    issues = [
        i
        for i in lint(ruleset)
        if ids is None or any(ruleset.sources[r].path == i.location.path for r in ids)
    ]
    for issue in issues:
        click.echo(str(issue))
    errors = sum(1 for i in issues if i.error)
    n = len(ruleset.all_rules()) if ids is None else len(ids)
    click.echo(
        f"{n} rule(s), {len(ruleset.tables)} table(s): "
        f"{errors} error(s), {len(issues) - errors} warning(s)"
    )
    if errors:
        sys.exit(1)


@rules.command("test")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--no-shipped", is_flag=True, help="Test DIRECTORY alone, without the shipped rules.")
@click.option("-v", "--verbose", is_flag=True, help="List every example, not only failures.")
def rules_test(directory: str | None, no_shipped: bool, verbose: bool) -> None:
    """Run the inline examples of every rule (or of DIRECTORY's rules)."""
    from attribution.rules.examples import iter_examples, run_example

    ruleset = _load_rules([directory] if directory else [], shipped=not no_shipped)
    ids = _site_ids(ruleset, directory)
    failed = passed = xfail = xpass = 0
    for case in iter_examples(ruleset):
        if ids is not None and case.rule_id not in ids:
            continue
        result = run_example(ruleset, case)
        if case.group == "todo":
            if result.passed:
                xpass += 1
                click.echo(f"XPASS {case.test_id}: now passes; promote it from todo to match")
            else:
                xfail += 1
            continue
        if result.passed:
            passed += 1
            if verbose:
                click.echo(f"ok    {case.test_id}")
        else:
            failed += 1
            source = ruleset.sources.get(case.rule_id)
            where = source.path if source else case.rule_id
            click.echo(f"FAIL  {case.test_id} ({where}): {result.detail}")
    click.echo(
        f"{passed} passed, {failed} failed, {xfail} known gaps (todo), {xpass} todo now passing"
    )
    if failed or xpass:
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
