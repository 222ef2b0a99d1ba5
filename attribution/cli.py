"""The ``sattr`` command line: thin commands over library calls, ``--json`` for machines.

Exit codes: 0 when the command did its job (a verdict was produced, even an
``unattributed`` one); 1 for unusable input or a failed check, with a
one-line error on stderr; 2 for usage errors.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from attribution import __version__
from attribution.errors import AttributionError, RuleErrors
from attribution.model import SubDomain, TerminalState

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _console(stderr: bool = False) -> Console:
    # piped into a file or less: wide enough for a verdict table, unless COLUMNS says otherwise
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


PIPE_WIDTH = 120


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
    sattr list                  list verdicts (--since --state --sub-domain --node --user)
    sattr worker                turn spooled jobs into verdicts (the systemd service)
    sattr enqueue JOBID         (re)queue a job for the worker
    sattr rediagnose JOBID      diagnose stored jobs again with the current rules
    sattr diagnose BUNDLE       diagnose an evidence bundle offline
    sattr bundle JOBID DIR      save what the worker reads for a job as a bundle (--redact)
    sattr backtest DIR...       score bundles against their expected.yaml
    sattr demo                  diagnose the bundled sample jobs
    sattr rules lint|test       check rules the way CI does
    sattr simulate ...          write simulated bundles with their expected answer
    """


# --------------------------------------------------------------------- diagnose


def _finite(value: float | None) -> float | None:
    """Refuse NaN, which every range check lets through."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("not a number")
    return value


@main.command()
@click.argument("bundle", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print exactly one verdict object as JSON.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Show examples, ignored signals and full coverage."
)
@click.option(
    "--margin",
    type=click.FloatRange(0, 30 * 86400),
    callback=lambda _ctx, _param, v: _finite(v),
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
    from attribution.render import verdict_view

    ruleset = _load_rules(rule_dirs)
    options = (
        AnalysisOptions()
        if margin is None
        else AnalysisOptions(margin_before=margin, margin_after=margin)
    )
    try:
        loaded, verdict = diagnose_bundle(bundle, ruleset, options=options)
    except AttributionError as exc:
        fail(str(exc))
    for note in loaded.notes:
        click.echo(f"sattr: note: {note}", err=True)
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
    from attribution.backtest import find_cases
    from attribution.bundle import score_bundles
    from attribution.render import backtest_view

    ruleset = _load_rules(rule_dirs)
    missing = [d for d in dirs if not Path(d).exists()]
    if missing:
        fail(f"{missing[0]}: no such directory")
    cases = find_cases(dirs)
    if not cases:
        fail("no bundles with an expected.yaml under " + ", ".join(dirs))
    report = score_bundles(cases, ruleset)
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
    example = next((b for b in bundles if b.name == "real-case11"), bundles[0])
    try:
        shown = example.relative_to(Path.cwd())
    except ValueError:
        shown = example
    # run through uv (the README's way), sattr is on PATH only inside uv run
    prefix = "uv run " if os.environ.get("UV_RUN_RECURSION_DEPTH") else ""
    console.print(f"Try: {prefix}sattr diagnose {shown}", style="dim", soft_wrap=True)
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
    "--force", is_flag=True, help="Write over bundles of the same names already in OUTDIR."
)
def simulate(args: tuple[str, ...], sweep_n: int | None, seed: int, force: bool) -> None:
    """Write simulated evidence bundles (with expected.yaml) into OUTDIR/<scenario>.

    \b
    sattr simulate SCENARIO.yaml OUTDIR      the scenario(s) in a YAML file
    sattr simulate --sweep N --seed S OUTDIR  N varied scenarios drawn from seed S
    Then score them: sattr backtest OUTDIR
    """
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
        for name in there:
            shutil.rmtree(out / name)
        for scenario in scenarios:
            write_bundle(scenario, out / scenario.name)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    click.echo(
        f"wrote {len(scenarios)} bundle(s) under {out}; score them with: sattr backtest {out}"
    )


# --------------------------------------------------------------------- live commands

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="ATTRIBUTION_CONFIG",
    default=None,
    help="Configuration file (default: /etc/attribution/config.yaml).",
)
db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False),
    envvar="ATTRIBUTION_DB",
    default=None,
    help="Verdict store (default: 'store' in the configuration).",
)


def _config(path: str | None) -> Any:
    from attribution.config import load_config

    try:
        return load_config(path)
    except AttributionError as exc:
        fail(str(exc))


class Viewer:
    """Who runs ``sattr``: uid, user name, and whether they may see every job."""

    def __init__(self, admin_groups: Sequence[str]) -> None:
        import grp
        import pwd

        self.uid = os.getuid()
        try:
            self.name: str | None = pwd.getpwuid(self.uid).pw_name
        except KeyError:
            self.name = None
        groups: set[str] = set()
        for gid in {os.getgid(), *os.getgroups()}:
            try:
                groups.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                continue
        self.admin = self.uid == 0 or bool(groups & set(admin_groups))

    def owns(self, uid: Any, user: Any) -> bool:
        if self.admin:
            return True
        if uid is not None and str(uid).isdecimal():
            return int(uid) == self.uid
        return user is not None and user == self.name


def _open_store(path: Path) -> Any:
    from attribution.store import Store

    return Store(path, readonly=True)


def _show_from_sacct(job: str, viewer: Viewer, store_problem: str, as_json: bool) -> None:
    """Fallback for users who cannot read the store: the AdminComment line from sacct."""
    from attribution.errors import SlurmError
    from attribution.slurm.admincomment import parse_admin_comment
    from attribution.slurm.backend import JobRef
    from attribution.slurm.cli import CliBackend

    try:
        row = CliBackend(retries=0).whoami_record(JobRef.parse(job))
    except SlurmError as exc:
        fail(f"{store_problem}; and sacct could not be asked: {exc}")
    if row is None:
        fail(f"{store_problem}; and sacct does not know job {job}")
    if not viewer.owns(row.get("UID"), row.get("User")):
        fail(f"job {job} belongs to another user")
    comment = row.get("AdminComment") or ""
    parsed = parse_admin_comment(comment)
    if as_json:
        _emit_json(
            {
                "schema": "attribution.admincomment/1",
                "source": "sacct AdminComment",
                "note": store_problem,
                "job_id": row.get("JobID"),
                "user": row.get("User"),
                "state": row.get("State"),
                "admin_comment": comment or None,
                "verdict": parsed,
            }
        )
        if parsed is None:
            sys.exit(1)
        return
    click.echo(f"Note: {store_problem}; showing the verdict line from sacct's AdminComment.")
    click.echo(f"Job {row.get('JobID')} · user {row.get('User')} · {row.get('State')}")
    if parsed is None:
        click.echo(
            "No verdict recorded in AdminComment yet (the worker may not have run, or "
            "AdminComment write-back is off at this site; ask your administrators)."
        )
        sys.exit(1)
    click.echo(comment)
    for name in ("terminal_state", "sub_domain", "cause", "nodes"):
        if name in parsed:
            click.echo(f"  {name}: {parsed[name]}")


@main.command()
@click.argument("job")
@config_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show examples and full coverage.")
def show(job: str, config_path: str | None, db: str | None, as_json: bool, verbose: bool) -> None:
    """Show the verdict of JOB (a job id, an array task A_T, or a SLUID).

    Administrators read the verdict store. Users see only their own jobs; when
    the store is not readable to them, the one-line verdict is taken from the
    job's AdminComment through sacct.
    """
    config = _config(config_path)
    viewer = Viewer(config.admin_groups)
    path = Path(db) if db else Path(config.store)
    try:
        with _open_store(path) as store:
            found = store.find(job)
            rows = {
                r["key"]: r
                for r in store.rows(
                    "job_id = ? OR display_id = ? OR key = ? OR sluid = ?", [job, job, job, job]
                )
            }
    except AttributionError as exc:
        _show_from_sacct(job, viewer, f"the verdict store is not readable ({exc})", as_json)
        return
    except sqlite3.Error as exc:
        fail(f"{path}: the verdict store cannot be read: {exc}")
    if not found:
        fail(
            f"no verdict for job {job} in {path} (not processed yet? "
            f"an administrator can run 'sattr enqueue {job}')"
        )
    mine = [
        v for v in found if viewer.owns(v.get("job", {}).get("uid"), v.get("job", {}).get("user"))
    ]
    if not mine:
        fail(f"job {job} belongs to another user")
    from attribution.render import verdict_view
    from attribution.verdictjson import verdict_from_dict

    data = mine[0]
    verdict = verdict_from_dict(data)
    if not viewer.admin:
        from attribution.render import for_owner

        verdict = for_owner(verdict)
    row: dict[str, Any] = rows.get(verdict.job.key) or {}
    if as_json:
        from attribution.model import verdict_to_dict

        out = verdict_to_dict(verdict)  # the same object as 'sattr diagnose --json'
        out["record"] = {  # what the store adds: the AdminComment write-back and spool time
            "admin_comment_status": row.get("admin_comment_status"),
            "admin_comment": row.get("admin_comment"),
            "spooled_at": row.get("spooled_at"),
        }
        _emit_json(out)
        return
    console = _console()
    console.print(verdict_view(verdict, verbose=verbose))
    if row.get("admin_comment_status"):
        console.print(
            f"AdminComment: {row.get('admin_comment_status')}"
            + (f" ({row.get('admin_comment')})" if row.get("admin_comment") else ""),
            style="dim",
        )
    if len(mine) > 1:
        console.print(f"{len(mine) - 1} earlier run(s) of this job have verdicts too.", style="dim")


def _since(value: str) -> str:
    from datetime import UTC, datetime, timedelta

    from attribution.model import to_jsonable
    from attribution.timeutil import parse_duration, parse_iso

    if value.strip().lower() == "all":
        return str(to_jsonable(datetime(1970, 1, 1, tzinfo=UTC)))
    try:
        start = datetime.now(UTC) - timedelta(seconds=parse_duration(value))
    except OverflowError:
        start = datetime(1970, 1, 1, tzinfo=UTC)  # further back than any job
    except ValueError:
        parsed = parse_iso(value)
        if parsed is None:
            fail(f"--since {value!r}: use a duration (12h, 7d), a date (2026-11-30) or 'all'")
        start = parsed
    return str(to_jsonable(start))


# --state accepts the verdict's terminal_state or the Slurm job state (sacct's names)
_LIST_STATES = [t.value for t in TerminalState] + [
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REQUEUED",
]


@main.command("list")
@config_option
@db_option
@click.option(
    "--since",
    default="7d",
    show_default=True,
    help="Jobs that ended since (7d, 2026-11-30, all).",
)
@click.option(
    "--state",
    type=click.Choice(_LIST_STATES, case_sensitive=False),
    help="Verdict terminal_state (fail, timeout, ...) or Slurm state (NODE_FAIL, ...).",
)
@click.option(
    "--sub-domain",
    type=click.Choice([s.value for s in SubDomain], case_sensitive=False),
    help="Verdict sub_domain.",
)
@click.option("--node", help="Jobs that ran on these nodes or blame one (a hostlist: gpu[01-08]).")
@click.option("--user", help="Jobs of USER (administrators only; users see their own).")
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=200,
    show_default=True,
    help="At most this many rows.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def list_(
    config_path: str | None,
    db: str | None,
    since: str,
    state: str | None,
    sub_domain: str | None,
    node: str | None,
    user: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List stored verdicts, newest first."""
    config = _config(config_path)
    viewer = Viewer(config.admin_groups)
    where = ['"end" >= ?']
    params: list[Any] = [_since(since)]
    if state:
        where.append("(terminal_state = ? OR state = ?)")
        params += [state.lower(), state.upper()]
    if sub_domain:
        where.append("sub_domain = ?")
        params.append(sub_domain.lower())
    if node:
        from attribution.hostlist import expand

        try:
            wanted = expand(node)
        except ValueError as exc:
            fail(f"--node {node!r}: {exc}")
        if len(wanted) > 10_000:
            fail(f"--node {node!r}: more than 10,000 nodes")
        marks = ", ".join("?" * len(wanted))
        where.append(
            f"(key IN (SELECT key FROM responsible WHERE node IN ({marks})) OR EXISTS "
            f"(SELECT 1 FROM json_each(verdicts.verdict, '$.job.nodes') WHERE value IN ({marks})))"
        )
        params += [*wanted, *wanted]
    if not viewer.admin:
        where.append("(uid = ? OR (uid IS NULL AND user = ?))")
        params += [viewer.uid, viewer.name]
    if user:
        where.append("user = ?")
        params.append(user)
    path = Path(db) if db else Path(config.store)
    try:
        with _open_store(path) as store:
            rows = list(store.rows(" AND ".join(where), params, limit=limit))
    except AttributionError as exc:
        fail(f"{exc} (users without access to the store can still run 'sattr JOBID')")
    except sqlite3.Error as exc:
        fail(f"{path}: the verdict store cannot be read: {exc}")
    if as_json:
        _emit_json(rows)
        return
    from attribution.render import list_view

    console = _console()
    console.print(list_view(rows))
    hint = (
        "" if rows or since.strip().lower() == "all" else f" since {since} (--since all for older)"
    )
    console.print(f"{len(rows)} verdict(s){hint}", style="dim")


@main.command()
@config_option
@click.option("--once", is_flag=True, help="Process what is ready, then exit.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def worker(config_path: str | None, once: bool, verbose: bool) -> None:
    """Run the worker: spool entries -> verdicts (the systemd service's command)."""
    import logging

    from attribution.worker import Worker

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = _config(config_path)
    try:
        w = Worker(config)
        w.install_signal_handlers()
        outcomes = w.run(once=once)
    except AttributionError as exc:
        fail(str(exc))
    if once:
        counts: dict[str, int] = {}
        for o in outcomes:
            counts[o.result] = counts.get(o.result, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing to do"
        click.echo(f"sattr worker: {summary}", err=True)
        if counts.get("failed"):
            sys.exit(1)


@main.command()
@click.argument("jobs", nargs=-1)
@config_option
@click.option("--retry-failed", is_flag=True, help="Move entries from failed/ back to new/.")
def enqueue(jobs: tuple[str, ...], config_path: str | None, retry_failed: bool) -> None:
    """Put JOBS (ids, A_T array tasks) into the spool, as the epilog hook would.

    An entry the hook wrote earlier (still in done/ or failed/) is reused, so
    the job's original output paths are kept.
    """
    from attribution.slurm.backend import JobRef
    from attribution.slurm.factory import make_backend
    from attribution.slurm.hookenv import format_entry
    from attribution.spool import read_spool_file
    from attribution.worker import make_spool

    config = _config(config_path)
    spool = make_spool(config)
    try:
        spool.check()
        if retry_failed:
            moved = spool.retry_failed(list(jobs) or None)
            click.echo(f"moved {len(moved)} failed entr(ies) back to new/")
            return
        if not jobs:
            fail("name at least one job (or use --retry-failed)")
        backend = make_backend(config.slurm, timezone=config.timezone)
        for text in jobs:
            job = backend.get_job(JobRef.parse(text))
            old = [spool.dir(d) / job.key for d in ("done", "failed")]
            body = next((t for p in old if (t := read_spool_file(p)) is not None), None)
            if body is None:
                env = {
                    "SLURM_JOB_ID": job.job_id,
                    "SLURM_CLUSTER_NAME": job.cluster or "",
                    "SLURM_JOB_RESTART_COUNT": str(job.restart_count),
                    "SLURM_SCRIPT_CONTEXT": "sattr_enqueue",
                }
                if job.array_job_id and job.array_task_id:
                    env["SLURM_ARRAY_JOB_ID"] = job.array_job_id
                    env["SLURM_ARRAY_TASK_ID"] = job.array_task_id
                for name, value in (
                    ("SLURM_JOB_USER", job.user),
                    ("SLURM_JOB_UID", None if job.uid is None else str(job.uid)),
                    ("SLURM_JOB_WORK_DIR", job.work_dir),
                    ("SLURM_JOB_NODELIST", job.nodelist),
                ):
                    if value:
                        env[name] = value
                body = format_entry({k: v for k, v in env.items() if v})
            spool.enqueue(job.key, body)
            click.echo(f"enqueued job {job.display_id} as {job.key}")
    except AttributionError as exc:
        fail(str(exc))


@main.command()
@click.argument("jobs", nargs=-1)
@config_option
@click.option("--all", "everything", is_flag=True, help="Every stored verdict (with --since).")
@click.option("--since", default=None, help="With --all: jobs that ended since (7d, 2026-11-30).")
@click.option("--write-comment", is_flag=True, help="Also rewrite the AdminComment (when enabled).")
@click.option(
    "--force", is_flag=True, help="Replace verdicts even when evidence read before is gone now."
)
def rediagnose(
    jobs: tuple[str, ...],
    config_path: str | None,
    everything: bool,
    since: str | None,
    write_comment: bool,
    force: bool,
) -> None:
    """Diagnose stored jobs again with the current rules (e.g. after a rules upgrade).

    The stored job record is reused; Slurm is asked only to rewrite AdminComments. A verdict
    whose evidence has since been rotated away or deleted is kept (say --force to replace it).
    """
    from attribution.store import Store
    from attribution.verdictjson import verdict_from_dict
    from attribution.worker import Worker

    config = _config(config_path)
    if not jobs and not everything:
        fail("name jobs, or use --all")
    if not Path(config.store).is_file():
        fail(f"{config.store}: no verdict store here (set 'store' in the config, or --config)")
    try:
        store = Store(config.store)
        if everything:
            where, params = ('"end" >= ?', [_since(since)]) if since else ("", [])
            keys = [r["key"] for r in store.rows(where, params)]
            records = [store.get(k) for k in keys]
        else:
            records = []
            for text in jobs:
                found = store.find(text)
                if not found:
                    fail(f"no stored verdict for job {text}")
                records.append(found[0])
        w = Worker(config, store=store)
        changed = kept = 0
        for data in records:
            if data is None:
                continue
            old = verdict_from_dict(data)
            new, why = w.rediagnose(old.job, write_comment=write_comment, old=old, force=force)
            if why:
                kept += 1
                click.echo(f"job {old.job.display_id}: {why}")
                continue
            before = (old.terminal_state, old.sub_domain, old.cause.id if old.cause else None)
            after = (new.terminal_state, new.sub_domain, new.cause.id if new.cause else None)
            if before != after:
                changed += 1
                click.echo(
                    f"job {old.job.display_id}: {'/'.join(str(x) for x in before)} -> "
                    f"{'/'.join(str(x) for x in after)}"
                )
        click.echo(
            f"rediagnosed {len(records)} job(s); {changed} verdict(s) changed"
            + (f"; {kept} kept because their evidence is gone" if kept else "")
        )
    except AttributionError as exc:
        fail(str(exc))


# --------------------------------------------------------------------- bundle


@main.command("bundle")
@click.argument("job")
@click.argument("directory", type=click.Path(file_okay=False))
@config_option
@db_option
@click.option(
    "--redact",
    is_flag=True,
    help="Replace user, host and directory names and IP addresses by consistent stand-ins.",
)
def bundle_(
    job: str, directory: str, config_path: str | None, db: str | None, redact: bool
) -> None:
    """Write what the worker reads for JOB as an evidence bundle in DIRECTORY (new or empty).

    \b
    JOB is a job id, an array task A_T or a SLUID: the job record comes from the verdict store,
    else from Slurm (while sacct has it); the node logs of its window, its output and the
    ownership facts (GPUs, exclusive use, other jobs on its nodes) are read as the worker reads
    them. 'sattr diagnose DIRECTORY' then gives the worker's verdict, for replay, a regression
    case or a support ticket. JOB may also be an existing bundle, to write a redacted copy.
    Administrators only: node logs hold every job's lines.
    """
    from attribution.capture import capture, redact_bundle

    target = Path(directory)
    source = Path(job)
    if source.is_dir() and (source / "job.json").is_file():
        if not redact:
            fail(f"{job} is a bundle already; say --redact to write a redacted copy")
        try:
            report = redact_bundle(source, target, note=None)
        except AttributionError as exc:
            fail(str(exc))
        _echo_redaction(report)
        return
    config = _config(config_path)
    if not Viewer(config.admin_groups).admin:
        fail("sattr bundle reads every node log of the job's window: administrators only")
    record = _bundle_job(job, config, Path(db) if db else Path(config.store))
    import tempfile

    try:
        if redact:
            with tempfile.TemporaryDirectory(prefix="sattr-bundle-") as tmp:
                captured = capture(record, config, Path(tmp) / "raw")
                report = redact_bundle(captured.path, target, note=None)
            _echo_captured(captured.files, captured.notes, target)
            _echo_redaction(report)
        else:
            captured = capture(record, config, target)
            _echo_captured(captured.files, captured.notes, target)
    except AttributionError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{target}: cannot write the bundle: {exc.strerror or exc}")


def _bundle_job(job: str, config: Any, store_path: Path) -> Any:
    """The job record for ``sattr bundle``: the stored verdict's, else Slurm's (with the
    ownership facts the worker adds)."""
    from attribution.analyze import AnalysisOptions, job_window
    from attribution.collect import ownership_facts
    from attribution.slurm.backend import JobRef
    from attribution.slurm.factory import make_backend
    from attribution.verdictjson import verdict_from_dict

    if store_path.is_file():
        try:
            with _open_store(store_path) as store:
                found = store.find(job)
        except (AttributionError, sqlite3.Error):
            found = []
        if found:
            return verdict_from_dict(found[0]).job
    try:
        backend = make_backend(config.slurm, timezone=config.timezone)
        record = backend.get_job(JobRef.parse(job))
        options = AnalysisOptions(
            margin_before=config.window.before, margin_after=config.window.after
        )
        return ownership_facts(record, config, backend, job_window(record, options))
    except AttributionError as exc:
        fail(f"job {job}: not in the verdict store, and Slurm could not give it: {exc}")


def _echo_captured(files: dict[str, int], notes: list[str], target: Path) -> None:
    lines = sum(files.values())
    click.echo(f"wrote {target}: {len(files)} file(s), {lines} line(s)")
    for note in notes:
        click.echo(f"sattr: note: {note}", err=True)


def _echo_redaction(report: Any) -> None:
    red = report.redaction
    for line in report.notes:
        click.echo(f"sattr: note: {line}", err=True)
    click.echo(
        f"redacted copy in {report.path}: {len(red.hosts)} host(s), {len(red.users)} user(s),"
        f" {len(red.clusters)} cluster(s), {len(red.paths)} directory(ies),"
        f" {len(red.addresses)} address(es) replaced"
    )


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
    total = len(ruleset.all_rules())
    scope = (
        f"{total} rule(s)"
        if ids is None
        else f"{directory}: {len(ids)} rule(s) linted, loaded with {total} in all"
    )
    click.echo(
        f"{scope}, {len(ruleset.tables)} table(s): "
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
