"""The ``sattr`` command line: thin commands over library calls, ``--json`` for machines.

Exit codes: 0 when the command did its job (a verdict was produced, even an
``unattributed`` one); 1 for unusable input or a failed check, with a
one-line error on stderr; 2 for usage errors, a bad option value included.

This module holds the ``sattr`` group and the offline commands (diagnose, backtest, demo,
simulate); the others are its submodules: ``show`` (show, list), ``service`` (worker, enqueue,
rediagnose), ``status``, ``bundle`` and ``rules``; ``common`` has what they share. Policy, SQL
and spool files are not here: ``attribution.access``, ``attribution.store`` and
``attribution.spool``.
The reference is docs/cli.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from attribution import __version__
from attribution.cli.bundle import bundle_
from attribution.cli.common import (
    CONTEXT,
    DefaultGroup,
    console,
    emit_json,
    fail,
    finite,
    load_rules,
    note,
    rules_option,
)
from attribution.cli.fleet import gpus, incidents, links, nodes
from attribution.cli.report import report
from attribution.cli.rules import rules
from attribution.cli.serve import serve
from attribution.cli.service import enqueue, rediagnose, worker
from attribution.cli.show import list_, show
from attribution.cli.status import status
from attribution.errors import AttributionError


@click.group(cls=DefaultGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="sattr")
def main() -> None:
    """Diagnose failed Slurm GPU jobs: one honest verdict per job.

    \b
    sattr JOBID                 show a job's verdict (same as 'sattr show JOBID')
    sattr list                  list verdicts (--since --state --sub-domain --node --user)
    sattr report JOBID          a job's verdict as plain text, for a mail body
    sattr worker                turn spooled jobs into verdicts (the systemd service)
    sattr status                is the worker keeping up, is anything lost (--json)
    sattr enqueue JOBID         (re)queue a job for the worker
    sattr rediagnose JOBID      diagnose stored jobs again with the current rules
    sattr diagnose BUNDLE       diagnose an evidence bundle offline
    sattr bundle JOBID DIR      save what the worker reads for a job as a bundle (--redact)
    sattr backtest DIR...       score bundles against their expected.yaml (--fleet: histories)
    sattr nodes                 nodes, switches and silent nodes that keep failing jobs
    sattr incidents             failures of many jobs read as one event
    sattr links                 node pairs peer errors keep naming together
    sattr gpus                  each GPU's XIDs across jobs
    sattr serve                 web pages, REST API and /metrics over the store
    sattr demo                  diagnose the bundled sample jobs
    sattr rules lint|test|lock  check rules the way CI does; record rule versions
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
    "--margin",
    type=click.FloatRange(0, 30 * 86400),
    callback=finite,
    default=None,
    help="Seconds added before and after the job window (0 to 30 days).",
)
@rules_option
def diagnose(
    bundle: str, as_json: bool, verbose: bool, margin: float | None, rule_dirs: tuple[str, ...]
) -> None:
    """Diagnose the evidence bundle in BUNDLE (job.json, job/, nodes/<node>/)."""
    from attribution.analyze import AnalysisOptions
    from attribution.bundle import diagnose_bundle
    from attribution.model import verdict_to_dict

    ruleset = load_rules(rule_dirs)
    options = (
        AnalysisOptions()
        if margin is None
        else AnalysisOptions(margin_before=margin, margin_after=margin)
    )
    try:
        loaded, verdict = diagnose_bundle(bundle, ruleset, options=options)
    except AttributionError as exc:
        fail(str(exc))
    for text in loaded.notes:
        note(text)
    if as_json:
        emit_json(verdict_to_dict(verdict))
    else:
        from attribution.render import verdict_view

        console().print(verdict_view(verdict, verbose=verbose))


# --------------------------------------------------------------------- backtest


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--fail-under",
    type=click.FloatRange(0, 1),
    callback=finite,
    default=None,
    help="Exit 1 when exact-or-acceptable (with --fleet: recall) is below this rate (0-1).",
)
@click.option(
    "--fleet",
    is_flag=True,
    help="DIRS are fleet histories (jobs.jsonl, truth.yaml): score the fleet view on them.",
)
@rules_option
def backtest(
    dirs: tuple[str, ...],
    as_json: bool,
    fail_under: float | None,
    fleet: bool,
    rule_dirs: tuple[str, ...],
) -> None:
    """Score every bundle under DIRS that has an expected.yaml (or, with --fleet, the fleet
    view on each fleet history in DIRS)."""
    if fleet:
        _fleet_backtest(dirs, as_json, fail_under)
        return
    from attribution.backtest import find_cases
    from attribution.bundle import score_bundles
    from attribution.render import backtest_view

    ruleset = load_rules(rule_dirs)
    missing = [d for d in dirs if not Path(d).exists()]
    if missing:
        fail(f"{missing[0]}: no such directory")
    cases = find_cases(dirs)
    if not cases:
        fail("no bundles with an expected.yaml under " + ", ".join(dirs))
    report = score_bundles(cases, ruleset)
    if as_json:
        emit_json(report.to_dict())
    else:
        console().print(backtest_view(report))
    rate = report.rate("exact", "acceptable")
    if fail_under is not None and rate < fail_under:
        fail(f"exact-or-acceptable {rate:.1%} is below --fail-under {fail_under:g}")


def _simulate_fleet(
    args: tuple[str, ...],
    count: int,
    seed: int,
    nodes: int | None,
    days: float | None,
    noise: str | None,
    force: bool,
) -> None:
    """``sattr simulate --fleet N``: N fleet histories, seeds S to S+N-1 (docs/fleet.md)."""
    from attribution.sim import FleetSpec, write_fleet

    if len(args) != 1:
        raise click.UsageError("expected OUTDIR")
    out = Path(args[0])
    sizes: dict[str, int | float | str] = {}
    if noise is not None:
        sizes["noise"] = noise
    if nodes is not None:
        sizes["nodes"] = nodes
    if days is not None:
        sizes["days"] = days
    try:
        specs = [FleetSpec(seed=s, **sizes) for s in range(seed, seed + count)]  # type: ignore[arg-type]
        there = [s.seed for s in specs if (out / f"seed-{s.seed}").exists()]
        if there and not force:
            fail(
                f"{out}: already holds seed-{there[0]} (and {len(there) - 1} more): add --force"
                " to write over them, or choose another OUTDIR"
            )
        import shutil

        for s in there:
            shutil.rmtree(out / f"seed-{s}")
        for spec in specs:
            write_fleet(spec, out / f"seed-{spec.seed}")
    except (ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"wrote {count} fleet histor{'y' if count == 1 else 'ies'} under {out}; score them with:"
        f" sattr backtest --fleet {out}"
    )


def _fleet_backtest(dirs: tuple[str, ...], as_json: bool, fail_under: float | None) -> None:
    """``sattr backtest --fleet``: recall and false discovery of the fleet view per history."""
    from attribution.fleet import score
    from attribution.fleetfile import load_history, read_truth
    from attribution.fleetview import score_view

    histories = []
    for d in dirs:
        path = Path(d)
        if (path / "jobs.jsonl").is_file():
            histories.append(path)
        elif path.is_dir():
            histories += sorted(p.parent for p in path.glob("*/jobs.jsonl"))
    if not histories:
        fail("no fleet history (a directory with jobs.jsonl) under " + ", ".join(dirs))
    scores = []
    try:
        for path in histories:
            fleet = load_history(path)
            truth = read_truth(path / "truth.yaml")
            scores.append({"history": str(path), **score(fleet, fleet.report(), truth)})
    except AttributionError as exc:
        fail(str(exc))
    planted = sum(s["planted"] for s in scores)
    found = sum(s["found"] for s in scores)
    findable = sum(s["findable"] for s in scores)
    found_findable = sum(s["found_findable"] for s in scores)
    flagged = sum(s["flagged"] for s in scores)
    false = sum(s["false"] for s in scores)
    total = {
        "planted": planted,
        "found": found,
        "recall": found / planted if planted else 1.0,
        "findable": findable,
        "found_findable": found_findable,
        "recall_findable": found_findable / findable if findable else 1.0,
        "flagged": flagged,
        "false": false,
        "fdr": false / flagged if flagged else 0.0,
        "buggy_user_suspects": sum(len(s["buggy_user_suspects"]) for s in scores),
        "incidents_planted": sum(s["incidents_planted"] for s in scores),
        "incidents_recovered": sum(s["incidents_recovered"] for s in scores),
        "incidents_spurious": sum(s["incidents_spurious"] for s in scores),
    }
    if as_json:
        emit_json({"histories": scores, "total": total})
    else:
        out = console()
        out.print(score_view([*scores, {"history": "total", **total}]))
        for s in scores:
            for what in s["missed"]:
                seen = " (showed in too few runs)" if what in s["unfindable"] else ""
                out.print(f"missed {what} in {s['history']}{seen}", style="yellow")
            for what in s["false_flags"]:
                out.print(f"false {what} in {s['history']}", style="red")
            for node in s["buggy_user_suspects"]:
                out.print(f"a buggy user made {node} suspect in {s['history']}", style="red")
    if fail_under is not None and total["recall_findable"] < fail_under:
        fail(
            f"fleet recall of findable faults {total['recall_findable']:.1%} is below"
            f" --fail-under {fail_under:g}"
        )


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
    from attribution.store import Store, VerdictFilter

    ruleset = load_rules(rule_dirs)
    samples = samples_dir()
    bundles = sorted(p.parent for p in samples.glob("*/job.json"))
    if not bundles:
        fail(f"{samples}: no sample bundles found")
    path = Path(db) if db else _default_demo_db()
    report = Report()
    verdicts = []
    failed: list[str] = []
    try:
        store = Store(path)
    except AttributionError as exc:
        fail(str(exc))
    with store:
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
        rows = store.query(VerdictFilter(order="job"))
    if as_json:
        emit_json([verdict_to_dict(v) for v in verdicts])
        return
    out = console()
    out.print(list_view(rows))
    agree = sum(1 for c in report.cases if c.score in ("exact", "acceptable"))
    out.print(
        f"\nDiagnosed {len(verdicts)}/{len(bundles)} jobs into {path}"
        + (
            f"; {agree}/{len(report.cases)} agree with their hand-written labels"
            if report.cases
            else ""
        )
        + "."
    )
    example = next((b for b in bundles if b.name == "real-case11"), bundles[0])
    try:
        shown = example.relative_to(Path.cwd())
    except ValueError:
        shown = example
    # run through uv (the README's way), sattr is on PATH only inside uv run
    prefix = "uv run " if os.environ.get("UV_RUN_RECURSION_DEPTH") else ""
    out.print(f"Try: {prefix}sattr diagnose {shown}", style="dim", soft_wrap=True)
    for line in failed:
        click.echo(f"sattr: error: {line}", err=True)
    if failed:
        sys.exit(1)


# --------------------------------------------------------------------- simulate


@main.command()
@click.argument("args", nargs=-1, required=True, metavar="[SCENARIO.yaml] OUTDIR")
@click.option("--sweep", "sweep_n", type=click.IntRange(1), default=None, help="Draw N scenarios.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sweep.")
@click.option(
    "--fleet",
    "fleet_n",
    type=click.IntRange(1, 1000),
    default=None,
    help="Write N fleet histories (weeks of jobs, planted faults) instead of bundles.",
)
@click.option(
    "--nodes",
    type=click.IntRange(2, 100_000),
    default=None,
    help="With --fleet: nodes in each history (default 256).",
)
@click.option(
    "--days",
    type=click.FloatRange(0.1, 365),
    default=None,
    help="With --fleet: days in each history (default 14).",
)
@click.option(
    "--noise",
    type=click.Choice(["sweep", "blind"]),
    default=None,
    help="With --fleet: the verdict error rates, as measured on the simulator's sweep"
    " (default) or on the blind rounds of real reports (more misses).",
)
@click.option(
    "--force", is_flag=True, help="Write over bundles of the same names already in OUTDIR."
)
def simulate(
    args: tuple[str, ...],
    sweep_n: int | None,
    seed: int,
    fleet_n: int | None,
    nodes: int | None,
    days: float | None,
    noise: str | None,
    force: bool,
) -> None:
    """Write simulated evidence bundles (with expected.yaml) into OUTDIR/<scenario>.

    \b
    sattr simulate SCENARIO.yaml OUTDIR      the scenario(s) in a YAML file
    sattr simulate --sweep N --seed S OUTDIR  N varied scenarios drawn from seed S
    sattr simulate --fleet N --seed S OUTDIR  N fleet histories, OUTDIR/seed-S, ...
    Then score them: sattr backtest OUTDIR (sattr backtest --fleet OUTDIR)
    """
    if fleet_n is not None:
        _simulate_fleet(args, fleet_n, seed, nodes, days, noise, force)
        return
    if nodes is not None or days is not None or noise is not None:
        raise click.UsageError("--nodes, --days and --noise go with --fleet")
    from attribution.sim import load_scenarios, sweep, write_bundle

    want = 1 if sweep_n is not None else 2
    if len(args) != want:
        raise click.UsageError(
            "expected OUTDIR" if sweep_n is not None else "expected SCENARIO.yaml OUTDIR"
        )
    try:
        scenarios = sweep(sweep_n, seed) if sweep_n is not None else load_scenarios(args[0])
        out = Path(args[-1])
        there = [s.name for s in scenarios if (out / s.name).exists()]
        if there and not force:
            fail(
                f"{out}: already holds {len(there)} of these bundles ({there[0]}, ...): add"
                " --force to write over them, or choose another OUTDIR"
            )
        import shutil

        for name in there:
            shutil.rmtree(out / name)
        for scenario in scenarios:
            write_bundle(scenario, out / scenario.name)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"wrote {len(scenarios)} bundle(s) under {out}; score them with: sattr backtest {out}"
    )


for command in (
    show,
    list_,
    report,
    worker,
    status,
    enqueue,
    rediagnose,
    bundle_,
    rules,
    nodes,
    incidents,
    links,
    gpus,
    serve,
):
    main.add_command(command)
