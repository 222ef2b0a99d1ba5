"""The fleet commands: ``sattr nodes``, ``incidents``, ``links`` and ``gpus`` (docs/fleet.md).

They read the verdict store (administrators only: the view spans every user's jobs) or, with
``--history DIR``, a fleet history directory (``sattr simulate --fleet`` writes them), run
``attribution.fleet`` and print one section of its report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from attribution.cli.common import (
    config_option,
    console,
    db_option,
    emit_json,
    fail,
    load_config,
    since_option,
    store_path,
    until_option,
)
from attribution.errors import AttributionError

SECTIONS = {
    "nodes": ("nodes", "domains", "silent", "cohorts", "drain_suggestions", "drains_held_back"),
    "incidents": ("incidents",),
    "links": ("links",),
    "gpus": ("gpus",),
}


def fleet_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options every fleet command takes."""
    options = [
        config_option,
        db_option,
        since_option,
        until_option,
        click.option("--partition", help="Only jobs of this Slurm partition."),
        click.option(
            "--history",
            type=click.Path(file_okay=False, exists=True),
            help="Read a fleet history directory (jobs.jsonl, ...) instead of the store.",
        ),
        click.option(
            "--topology",
            type=click.Path(dir_okay=False, exists=True),
            help="Slurm topology.conf (default: fleet.topology in the configuration).",
        ),
        click.option(
            "--groups",
            type=click.Path(dir_okay=False, exists=True),
            help="YAML map of racks / NVLink domains: {kind: {name: hostlist}}.",
        ),
        click.option(
            "--q",
            "q_level",
            type=click.FloatRange(0, 1, min_open=True),
            default=None,
            help="False discovery rate (Benjamini-Hochberg; default fleet.q, 0.05).",
        ),
        click.option(
            "--min-failures",
            type=click.IntRange(1),
            default=None,
            help="Fewest failed jobs before a node can be suspect (default 3).",
        ),
        click.option(
            "--all", "show_all", is_flag=True, help="Show every row, not only those that stand out."
        ),
        click.option(
            "--events/--no-events",
            default=True,
            show_default=True,
            help="Read Slurm's node events (sacctmgr list events) for silent nodes.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build(
    config_path: str | None,
    db: str | None,
    since: Any,
    until: Any,
    partition: str | None,
    history: str | None,
    topology: str | None,
    groups: str | None,
    q_level: float | None,
    min_failures: int | None,
    events: bool = True,
) -> Any:
    """Load the runs, the topology and the options; return the ``Fleet`` and its report."""
    from attribution.access import Caller
    from attribution.fleetfile import load_history, load_topology
    from attribution.fleetview import existing, fleet_from_store, fleet_options

    config = load_config(config_path)
    settings = config.fleet
    options = fleet_options(config, q_level, min_failures)
    base = Path(history) if history else None
    window = (None if since.everything else since.at, until.at if until else None)
    context = click.get_current_context(silent=True)
    given = context is not None and context.get_parameter_source("since") not in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    if base is not None and not given:
        window = (None, window[1])  # a history is read whole unless --since is given
    if window[0] is not None and window[1] is not None and window[1] <= window[0]:
        raise click.UsageError(f"--until {until.text} is not after --since {since.text}")
    topo_path = Path(topology) if topology else None
    group_path = Path(groups) if groups else None
    if base is not None:
        topo_path = topo_path or existing(base / "topology.conf")
        group_path = group_path or existing(base / "groups.yaml")
    else:
        topo_path = topo_path or existing(settings.topology)
        group_path = group_path or settings.groups
    try:
        if base is not None:
            fleet = load_history(
                base,
                options=options,
                topology=load_topology(topo_path, group_path),
                since=window[0],
                until=window[1],
                partition=partition,
            )
            if partition and not fleet.runs:
                fleet.notes.append(f"no run of partition {partition!r} ended in the window")
        else:
            if not Caller.current(config.admin_groups).admin:
                fail(
                    "the fleet view spans every user's jobs: administrators only"
                    " (root or admin_groups in the configuration)"
                )
            fleet = fleet_from_store(
                store_path(db, config),
                options,
                topo_path,
                group_path,
                window[0],
                window[1],
                partition,
            )
            if events:
                _slurm_events(fleet, config, window)
    except AttributionError as exc:
        fail(str(exc))
    return fleet, fleet.report()


def _slurm_events(fleet: Any, config: Any, window: tuple[Any, Any]) -> None:
    """Slurm's node events over the window (``sacctmgr list events``), or a note saying why
    there are none."""
    from datetime import UTC, datetime

    from attribution.slurm.cli import CliBackend

    since = window[0] or fleet.first
    until = window[1] or datetime.now(UTC)
    if since is None:
        return
    backend = CliBackend(
        timeout=config.slurm.timeout,
        retries=config.slurm.retries,
        bin_dir=config.slurm.bin_dir,
        timezone=config.timezone,
    )
    try:
        fleet.add_events(backend.node_events(since, until))
    except AttributionError as exc:
        fleet.notes.append(
            f"Slurm's node events were not read ({exc}): silent nodes from jobs only"
        )


def _run(section: str, args: dict[str, Any]) -> None:
    from attribution import fleetview
    from attribution.fleet import report_to_dict

    show_all, as_json = args.pop("show_all"), args.pop("as_json")
    _fleet, report = build(**args)
    if as_json:
        data = report_to_dict(report)
        keep = (
            "schema",
            "since",
            "until",
            "method",
            "runs",
            "failed",
            "exposure",
            "baselines",
            "notes",
        )
        emit_json({k: v for k, v in data.items() if k in keep or k in SECTIONS[section]})
        return
    out = console(markup=False)
    if section == "nodes":
        out.print(fleetview.nodes_view(report, show_all))
        for line in fleetview.drain_lines(report):
            click.echo(line)
    elif section == "incidents":
        out.print(fleetview.incidents_view(report))
    elif section == "links":
        out.print(fleetview.links_view(report, show_all))
        for line in fleetview.confirm_lines(report):
            click.echo(line)
    else:
        out.print(fleetview.gpus_view(report, show_all))


@click.command()
@fleet_options
def nodes(**args: Any) -> None:
    """Rank nodes by how much more often than their partition they fail jobs.

    Also prints failure domains (topology.conf switches and blocks, racks), silent nodes
    (NODE_FAIL with nobody responsible) and shadow-mode drain suggestions (never run).
    """
    _run("nodes", args)


@click.command()
@fleet_options
def incidents(**args: Any) -> None:
    """Failures of several jobs read as one event (same seconds, or one failure domain)."""
    _run("incidents", args)


@click.command()
@fleet_options
def links(**args: Any) -> None:
    """Node pairs that peer errors keep naming together, with the nccl-tests run to confirm."""
    _run("links", args)


@click.command()
@fleet_options
def gpus(**args: Any) -> None:
    """Each GPU's XIDs across jobs: the GPU (several applications) or the application."""
    _run("gpus", args)


__all__ = ["build", "gpus", "incidents", "links", "nodes"]
