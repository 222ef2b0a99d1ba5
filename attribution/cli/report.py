"""``sattr report JOB``: one job's verdict as plain text, 80 columns, for a mail body.

The text is ``attribution.report.report_text``'s. The job is found, and what the caller may
see decided, by ``sattr show``'s ``fetch``: users get their own jobs only; from the server
when the store is not readable to them, else the verdict line sacct has (``sattr show``'s
fallback, printed as it prints it). Lines about other jobs are hidden from administrators
too (``access.for_owner``): the report is what its job's owner may read, ready to mail.
"""

from __future__ import annotations

from urllib.parse import quote

import click

from attribution.cli.common import config_option, db_option, load_config
from attribution.cli.show import _show_from_sacct, fetch

WIDTH = 80


@click.command()
@click.argument("job")
@config_option
@db_option
@click.option(
    "--url",
    metavar="URL",
    help="A web page of the job to point to at the end; {job} in it becomes the job id"
    " (default: the job's page on server.url, when one is configured).",
)
def report(job: str, config_path: str | None, db: str | None, url: str | None) -> None:
    """Print the verdict of JOB as a plain-text report (a mail body): the job, the diagnosis,
    what happened, the evidence read.

    Who may see which job is decided as for 'sattr show'; lines about other jobs are hidden
    from everyone, administrators too, so that the text can be mailed to the job's owner.
    """
    from attribution.access import Caller, for_owner
    from attribution.report import report_text

    config = load_config(config_path)
    found, problem = fetch(job, config, db)
    if found is None:  # neither the store nor a server: the verdict line sacct has
        _show_from_sacct(job, Caller.current(config.admin_groups), str(problem), False)
        return
    # what the job's owner may read, whoever asks: the text is meant to be mailed to them
    verdict = for_owner(found.verdict)
    if url is None and config.server.url:
        url = config.server.url + "/jobs/{job}"  # the job's page on 'sattr serve'
    page = url.replace("{job}", quote(verdict.job.display_id, safe="")) if url else None
    click.echo(report_text(verdict, found.record, width=WIDTH, url=page), nl=False)


__all__ = ["report"]
