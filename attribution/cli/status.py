"""``sattr status``: is the worker keeping up, and is anything lost? (``attribution.status``)

Exit 0 when healthy, 1 when there is a problem (each one a line under ``Problems:``), 2 when
it cannot tell: a bad configuration, a caller who is no administrator, or a spool or store
the caller may not read.
"""

from __future__ import annotations

import sys

import click

from attribution.cli.common import config_option, emit_json, fail
from attribution.errors import AttributionError

CANNOT_TELL = 2


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def status(config_path: str | None, as_json: bool) -> None:
    """Show whether the worker keeps up and whether anything is lost.

    The worker (spool lock, heartbeat, counters), the spool queue, retries and failed
    entries, verdicts per minute over the last hour and time from job end to verdict,
    AdminComment write-backs, the reconciliation sweeps and evidence health; then the
    problems. Exit 0 when healthy, 1 with problems, 2 when it cannot tell: the
    configuration is bad or the caller may not read the spool or the store (root, or a
    member of admin_groups who may read them).
    """
    from attribution.access import Caller
    from attribution.config import config_path as find_config
    from attribution.config import load_config
    from attribution.status import StatusUnreadable, collect, render_text

    path, _ = find_config(config_path)
    try:
        config = load_config(config_path)
        config_file = str(path) if path.is_file() else None  # none: the defaults
    except AttributionError as exc:
        fail(str(exc), CANNOT_TELL)
    except OSError as exc:  # a directory on the way the caller may not enter
        fail(f"{path}: cannot read the configuration: {exc.strerror or exc}", CANNOT_TELL)
    if not Caller.current(config.admin_groups).admin:
        fail(
            "sattr status is for administrators: root or a member of a group in the"
            " configuration's admin_groups",
            CANNOT_TELL,
        )
    try:
        report = collect(config, config_file=config_file)
    except StatusUnreadable as exc:
        fail(str(exc), CANNOT_TELL)
    except OSError as exc:  # a read status did not foresee: still one line, and "cannot tell"
        fail(f"{exc.filename or config.spool}: cannot read: {exc.strerror or exc}", CANNOT_TELL)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(render_text(report))
    if report.problems:
        sys.exit(1)


__all__ = ["status"]
