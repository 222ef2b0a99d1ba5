"""The service commands: ``sattr worker``, ``sattr enqueue`` and ``sattr rediagnose``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from attribution.cli.common import When, config_option, fail, load_config, when_option
from attribution.errors import AttributionError


@click.command()
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
    config = load_config(config_path)
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


@click.command()
@click.argument("jobs", nargs=-1)
@config_option
@click.option("--retry-failed", is_flag=True, help="Move entries from failed/ back to new/.")
def enqueue(jobs: tuple[str, ...], config_path: str | None, retry_failed: bool) -> None:
    """Put JOBS (ids, A_T array tasks) into the spool, as the epilog hook would.

    An entry the hook wrote earlier (still in done/ or failed/) is reused, so
    the job's original output paths are kept.
    """
    from attribution.reconcile import record_env, synthetic_entry
    from attribution.slurm.backend import JobRef
    from attribution.slurm.factory import make_backend
    from attribution.worker import make_spool

    config = load_config(config_path)
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
            body = spool.earlier_entry(job.key)
            if body is None:
                body = synthetic_entry(record_env(job), source="sattr-enqueue")
            spool.enqueue(job.key, body)
            click.echo(f"enqueued job {job.display_id} as {job.key}")
    except AttributionError as exc:
        fail(str(exc))


@click.command()
@click.argument("jobs", nargs=-1)
@config_option
@click.option("--all", "everything", is_flag=True, help="Every stored verdict (with --since).")
@click.option(
    "--since",
    metavar="WHEN",
    callback=when_option(),
    default=None,
    help="With --all: jobs that ended since (7d, 2026-11-30).",
)
@click.option("--write-comment", is_flag=True, help="Also rewrite the AdminComment (when enabled).")
@click.option(
    "--force", is_flag=True, help="Replace verdicts even when evidence read before is gone now."
)
def rediagnose(
    jobs: tuple[str, ...],
    config_path: str | None,
    everything: bool,
    since: When | None,
    write_comment: bool,
    force: bool,
) -> None:
    """Diagnose stored jobs again with the current rules (e.g. after a rules upgrade).

    The stored job record is reused; Slurm is asked only to rewrite AdminComments. A verdict
    whose evidence has since been rotated away or deleted is kept (say --force to replace it).
    """
    from attribution.store import Store, VerdictFilter
    from attribution.verdictjson import verdict_from_dict
    from attribution.worker import Worker

    config = load_config(config_path)
    if not jobs and not everything:
        fail("name jobs, or use --all")
    if since is not None and not everything:
        fail("--since selects jobs for --all; name jobs or add --all")
    if not Path(config.store).is_file():
        fail(f"{config.store}: no verdict store here (set 'store' in the config, or --config)")
    try:
        store = Store(config.store)
        if everything:
            rows = store.query(VerdictFilter(since=since.at if since else None))
            records = [store.get(r["key"]) for r in rows]
        else:
            records = []
            for text in jobs:
                found = store.find(text)
                if not found:
                    fail(f"no stored verdict for job {text}")
                records.append(found[0])
        w = Worker(config, store=store)
        changed = kept = 0
        older: dict[str, str] = {}  # rule id@version a stored verdict was made by -> now
        for data in records:
            if data is None:
                continue
            old = verdict_from_dict(data)
            made_by = old.cause.rule if old.cause else None
            now = w.ruleset.rule(old.cause.id) if old.cause else None
            if made_by and now is not None and now.ref != made_by:
                older[made_by] = now.ref
                click.echo(f"job {old.job.display_id}: made by {made_by}, now {now.ref}")
            new, why = w.rediagnose(old.job, write_comment=write_comment, old=old, force=force)
            if why:
                kept += 1
                click.echo(f"job {old.job.display_id}: {why}")
                continue
            before = (*_outcome(old), _blamed(old))
            after = (*_outcome(new), _blamed(new))
            if before != after:
                changed += 1
                click.echo(
                    f"job {old.job.display_id}: {'/'.join(str(x) for x in before if x)} -> "
                    f"{'/'.join(str(x) for x in after if x)}"
                )
        click.echo(
            f"rediagnosed {len(records)} job(s); {changed} verdict(s) changed"
            + (f"; {kept} kept because their evidence is gone" if kept else "")
        )
        if older:
            shown = ", ".join(f"{a} -> {b}" for a, b in sorted(older.items())[:5])
            more = f" and {len(older) - 5} more" if len(older) > 5 else ""
            click.echo(f"made by rule versions that have changed since: {shown}{more}")
    except AttributionError as exc:
        fail(str(exc))


__all__ = ["enqueue", "rediagnose", "worker"]


def _outcome(verdict: Any) -> tuple[str, str, str | None]:
    """terminal_state, sub_domain and cause of a verdict, as ``rediagnose`` compares them."""
    cause = verdict.cause.id if verdict.cause else None
    return (verdict.terminal_state.value, verdict.sub_domain.value, cause)


def _blamed(verdict: Any) -> str:
    """The responsible nodes and devices (``gpu02 0000:3b:00``): a verdict that names another
    GPU has changed too."""
    return ", ".join(" ".join(x for x in (r.node, r.device) if x) for r in verdict.responsible)
