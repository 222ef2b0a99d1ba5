"""``sattr show JOB`` (also plain ``sattr JOB``) and ``sattr list``: reading stored verdicts.

What a caller may see is ``attribution.access``'s decision; the rows come from ``Store``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from attribution.access import Caller
from attribution.cli.common import (
    When,
    config_option,
    console,
    db_option,
    emit_json,
    fail,
    load_config,
    node_list,
    since_option,
    store_path,
    until_option,
)
from attribution.errors import AttributionError
from attribution.model import SubDomain, TerminalState
from attribution.store import Store, VerdictFilter


def _show_from_sacct(job: str, caller: Caller, store_problem: str, as_json: bool) -> None:
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
    if not caller.owns(row.get("UID"), row.get("User")):
        fail(f"job {job} belongs to another user")
    comment = row.get("AdminComment") or ""
    parsed = parse_admin_comment(comment)
    if as_json:
        emit_json(
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


FLEET_DAYS = 7  # how far before the job's end 'sattr show' looks for other failures


def _fleet_line(store: Store, verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For each node the verdict holds responsible: other failed jobs it was responsible for
    in the ``FLEET_DAYS`` before this job ended (and since), when there is any."""
    from attribution.verdictjson import verdict_from_dict

    record = verdict_from_dict(verdict).job
    since = (record.end or datetime.now(UTC)) - timedelta(days=FLEET_DAYS)
    key = record.key
    out: dict[str, dict[str, Any]] = {}
    for blame in verdict.get("responsible") or ():
        node = blame.get("node") if isinstance(blame, dict) else None
        if not node or node in out:
            continue
        seen = store.responsible_elsewhere(node, since, key)
        if seen["jobs"]:
            out[node] = {"jobs": seen["jobs"], "users": seen["users"], "since": since.isoformat()}
    return out


@click.command()
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
    config = load_config(config_path)
    caller = Caller.current(config.admin_groups)
    path = store_path(db, config)
    try:
        store = Store(path, readonly=True)
    except AttributionError as exc:
        _show_from_sacct(job, caller, f"the verdict store is not readable ({exc})", as_json)
        return
    fleet: dict[str, dict[str, Any]] = {}
    try:
        with store:
            found = store.find(job)
            rows = {r["key"]: r for r in store.query(VerdictFilter(job=job))}
            mine = caller.visible(found)
            if mine:
                fleet = _fleet_line(store, mine[0])
    except AttributionError as exc:
        fail(str(exc))
    if not found:
        fail(
            f"no verdict for job {job} in {path} (not processed yet? "
            f"an administrator can run 'sattr enqueue {job}')"
        )
    if not mine:
        fail(f"job {job} belongs to another user")
    from attribution.render import verdict_view
    from attribution.verdictjson import verdict_from_dict

    verdict = caller.shown(verdict_from_dict(mine[0]))
    row: dict[str, Any] = rows.get(verdict.job.key) or {}
    if as_json:
        from attribution.model import verdict_to_dict

        out = verdict_to_dict(verdict)  # the same object as 'sattr diagnose --json'
        out["record"] = {  # what the store adds: the AdminComment write-back and spool time
            "admin_comment_status": row.get("admin_comment_status"),
            "admin_comment": row.get("admin_comment"),
            "spooled_at": row.get("spooled_at"),
            "fleet": fleet,
        }
        emit_json(out)
        return
    out_console = console()
    out_console.print(verdict_view(verdict, verbose=verbose))
    if row.get("admin_comment_status"):
        out_console.print(
            f"AdminComment: {row.get('admin_comment_status')}"
            + (f" ({row.get('admin_comment')})" if row.get("admin_comment") else ""),
            style="dim",
        )
    for node, seen in fleet.items():
        out_console.print(
            f"{node} was responsible for {seen['jobs']} other failed job(s) of"
            f" {seen['users']} user(s) since {seen['since'][:10]} (see 'sattr nodes').",
            style="yellow",
        )
    if len(mine) > 1:
        others = [verdict_from_dict(v).job for v in mine[1:]]
        same = [j for j in others if j.cluster == verdict.job.cluster]
        elsewhere = [j.key for j in others if j.cluster != verdict.job.cluster]
        if same:
            out_console.print(
                f"{len(same)} earlier run(s) of this job have verdicts too.", style="dim"
            )
        if elsewhere:
            out_console.print(
                f"Job id {job} names other jobs too ({', '.join(elsewhere[:5])}); show one"
                " with 'sattr show KEY'.",
                style="dim",
            )


# --state accepts the verdict's terminal_state or the Slurm job state (sacct's names)
LIST_STATES = [t.value for t in TerminalState] + [
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


@click.command("list")
@config_option
@db_option
@since_option
@until_option
@click.option(
    "--state",
    type=click.Choice(LIST_STATES, case_sensitive=False),
    help="Verdict terminal_state (fail, timeout, ...) or Slurm state (NODE_FAIL, ...).",
)
@click.option(
    "--sub-domain",
    type=click.Choice([s.value for s in SubDomain], case_sensitive=False),
    help="Verdict sub_domain.",
)
@click.option("--cause", help="Verdicts whose cause is this diagnosis rule id (xid-79, ...).")
@click.option(
    "--node",
    "nodes",
    metavar="NODELIST",
    callback=node_list,
    help="Jobs that ran on these nodes or blame one (a hostlist: gpu[01-08]).",
)
@click.option("--user", help="Jobs of USER (administrators only; users see their own).")
@click.option("--partition", help="Jobs of this Slurm partition.")
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
    since: When,
    until: When | None,
    state: str | None,
    sub_domain: str | None,
    cause: str | None,
    nodes: tuple[str, ...] | None,
    user: str | None,
    partition: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List stored verdicts, newest first."""
    config = load_config(config_path)
    caller = Caller.current(config.admin_groups)
    selection = caller.restrict(
        VerdictFilter(
            since=since.at,
            until=until.at if until else None,
            state=state,
            sub_domain=sub_domain,
            cause=cause,
            nodes=nodes or (),
            user=user,
            partition=partition,
            limit=limit,
        )
    )
    path = store_path(db, config)
    try:
        store = Store(path, readonly=True)
    except AttributionError as exc:
        fail(f"{exc} (users without access to the store can still run 'sattr JOBID')")
    try:
        with store:
            rows = store.query(selection)
    except AttributionError as exc:
        fail(str(exc))
    if as_json:
        emit_json(rows)
        return
    from attribution.render import list_view

    out = console()
    out.print(list_view(rows))
    hint = "" if rows or since.everything else f" since {since.text} (--since all for older)"
    out.print(f"{len(rows)} verdict(s){hint}", style="dim")


__all__ = ["list_", "show"]
