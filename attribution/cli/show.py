"""``sattr show JOB`` (also plain ``sattr JOB``) and ``sattr list``: reading stored verdicts.

What a caller may see is ``attribution.access``'s decision; the rows come from ``Store``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

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

if TYPE_CHECKING:  # the store (SQLite) is imported by the commands that read it
    from attribution.access import Caller
    from attribution.lookup import Found
    from attribution.store import VerdictFilter


def _show_from_sacct(job: str, caller: Caller, store_problem: str, as_json: bool) -> None:
    """Fallback for users who cannot read the store and have no server: the verdict line
    from sacct, in the AdminComment or, where another tool owns that, the SystemComment."""
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
    field, comment, parsed = "AdminComment", row.get("AdminComment") or "", None
    for name in ("AdminComment", "SystemComment"):
        text = row.get(name) or ""
        found = parse_admin_comment(text)
        if found is not None:
            field, comment, parsed = name, text, found
            break
    if as_json:
        emit_json(
            {
                "schema": "attribution.admincomment/1",
                "source": f"sacct {field}",
                "note": store_problem,
                "job_id": row.get("JobID"),
                "user": row.get("User"),
                "state": row.get("State"),
                "admin_comment": row.get("AdminComment") or None,
                "system_comment": row.get("SystemComment") or None,
                "verdict": parsed,
            }
        )
        if parsed is None:
            sys.exit(1)
        return
    click.echo(f"Note: {store_problem}; showing the verdict line from sacct's {field}.")
    click.echo(f"Job {row.get('JobID')} · user {row.get('User')} · {row.get('State')}")
    if parsed is None:
        click.echo(
            "No verdict recorded in AdminComment or SystemComment yet (the worker may not have"
            " run, or write-back is off at this site; ask your administrators)."
        )
        sys.exit(1)
    click.echo(comment)
    for name in ("terminal_state", "sub_domain", "cause", "nodes"):
        if name in parsed:
            click.echo(f"  {name}: {parsed[name]}")


def fetch(job: str, config: Any, db: str | None) -> tuple[Found | None, str | None]:
    """The job's verdict for the current user: from the store when they can read it, else
    from the server (``server.url``) with a MUNGE credential. Returns ``(found, None)``, or
    ``(None, why)`` when neither can be asked (the caller then falls back to sacct); a job
    that is not there or not theirs ends the command."""
    from attribution.access import Caller
    from attribution.lookup import NotFound, lookup
    from attribution.store import Store

    caller = Caller.current(config.admin_groups)
    path = store_path(db, config)
    try:
        store = Store(path, readonly=True)
    except AttributionError as exc:
        problem = f"the verdict store is not readable ({exc})"
        if not config.server.url or db is not None:
            return None, problem
        return _fetch_remote(job, config), None
    try:
        with store:
            return lookup(store, job, caller), None
    except NotFound as exc:
        fail(f"{exc} [store: {path}]")
    except AttributionError as exc:
        fail(str(exc))


def _fetch_remote(job: str, config: Any) -> Found:
    """``fetch`` through the server; an answer that is not a verdict ends the command."""
    from attribution.client import Client, ClientError
    from attribution.lookup import Found

    try:
        data = Client(config.server).record(job)
    except ClientError as exc:
        fail(f"job {job}: {exc}")
    try:
        verdict, record = _remote_verdict(data)
    except (AttributionError, TypeError, KeyError, ValueError, AttributeError) as exc:
        fail(f"job {job}: the server's answer is not a verdict ({type(exc).__name__}: {exc})")
    record["server"] = config.server.url
    return Found(verdict, record)


def _remote_verdict(data: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The verdict and the record (checked: the fields ``show`` prints) in a server's answer.

    Raises:
        ValueError, TypeError, KeyError, AttributeError, AttributionError: not a verdict.
    """
    from attribution.verdictjson import verdict_from_dict

    data = dict(data)
    record = data.pop("record", None) or {}
    others = data.pop("others", None) or []
    if not isinstance(record, dict):
        raise ValueError("its record is not an object")
    if not isinstance(others, list) or not all(isinstance(k, str) for k in others):
        raise ValueError("its other runs are not a list of keys")
    fleet = record.get("fleet") or {}
    if not isinstance(fleet, dict) or not all(
        isinstance(seen, dict)
        and isinstance(seen.get("jobs"), int)
        and isinstance(seen.get("users"), int)
        and isinstance(seen.get("since"), str)
        for seen in fleet.values()
    ):
        raise ValueError("its fleet note is not {node: {jobs, users, since}}")
    if not isinstance(data.get("job"), dict) or not isinstance(data.get("terminal_state"), str):
        raise ValueError("it has no job or no terminal_state")
    verdict = verdict_from_dict(data)
    from attribution.render import verdict_view

    verdict_view(verdict, verbose=True)  # what cannot be shown is refused here, in one line
    record["fleet"] = fleet
    record["others"] = list(others)
    return verdict, record


@click.command()
@click.argument("job")
@config_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show examples and full coverage.")
def show(job: str, config_path: str | None, db: str | None, as_json: bool, verbose: bool) -> None:
    """Show the verdict of JOB (a job id, an array task A_T, or a SLUID).

    Administrators read the verdict store. Users see only their own jobs: from the
    store when they can read it, else from the server (server.url in the
    configuration, with a MUNGE credential), else the one-line verdict from the
    job's AdminComment (or SystemComment) through sacct.
    """
    config = load_config(config_path)
    found, problem = fetch(job, config, db)
    if found is None:
        from attribution.access import Caller

        _show_from_sacct(job, Caller.current(config.admin_groups), str(problem), as_json)
        return
    if as_json:
        emit_json(found.to_dict())  # the 'sattr diagnose --json' object, plus 'record'
        return
    from attribution.render import verdict_view

    verdict, row = found.verdict, found.record
    out_console = console()
    out_console.print(verdict_view(verdict, verbose=verbose))
    if row.get("admin_comment_status"):
        out_console.print(
            f"AdminComment: {row.get('admin_comment_status')}"
            + (f" ({row.get('admin_comment')})" if row.get("admin_comment") else ""),
            style="dim",
        )
    for node, seen in (row.get("fleet") or {}).items():
        out_console.print(
            f"{node} was responsible for {seen['jobs']} other failed job(s) of"
            f" {seen['users']} user(s) since {seen['since'][:10]} (see 'sattr nodes').",
            style="yellow",
        )
    if found.others or row.get("others"):
        same = [j for j in found.others if j.cluster == verdict.job.cluster]
        elsewhere = [j.key for j in found.others if j.cluster != verdict.job.cluster]
        elsewhere += row.get("others") or []
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
    if row.get("server"):
        out_console.print(f"(from the server at {row['server']})", style="dim")


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
    from attribution.access import Caller
    from attribution.store import Store, VerdictFilter

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
        if not config.server.url or db is not None:
            fail(f"{exc} (users without access to the store can still run 'sattr JOBID')")
        rows = _list_remote(config, since, until, selection, limit)
    else:
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


def _list_remote(
    config: Any, since: When, until: When | None, selection: VerdictFilter, limit: int
) -> list[dict[str, Any]]:
    """``sattr list`` through the server (``server.url``): the same filters, its rows."""
    from attribution.client import Client, ClientError
    from attribution.hostlist import compress

    params = {
        "since": since.text,
        "until": until.text if until else None,
        "state": selection.state,
        "sub_domain": selection.sub_domain,
        "cause": selection.cause,
        "node": compress(selection.nodes) if selection.nodes else None,
        "user": selection.user,
        "partition": selection.partition,
        "limit": limit,
    }
    try:
        return Client(config.server).jobs(params)
    except ClientError as exc:
        fail(str(exc))


__all__ = ["fetch", "list_", "show"]
