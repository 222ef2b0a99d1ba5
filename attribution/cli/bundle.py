"""``sattr bundle``: save what the worker reads for a job as an evidence bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from attribution.cli.common import (
    config_option,
    db_option,
    fail,
    load_config,
    note,
    store_path,
)
from attribution.errors import AttributionError


@click.command("bundle")
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
    from attribution.access import Caller

    config = load_config(config_path)
    if not Caller.current(config.admin_groups).admin:
        fail("sattr bundle reads every node log of the job's window: administrators only")
    record = _bundle_job(job, config, store_path(db, config))
    try:
        if redact:
            import tempfile

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


def _bundle_job(job: str, config: Any, path: Path) -> Any:
    """The job record for ``sattr bundle``: the stored verdict's, else Slurm's (with the
    ownership facts the worker adds)."""
    from attribution.analyze import AnalysisOptions, job_window
    from attribution.collect import ownership_facts
    from attribution.slurm.backend import JobRef
    from attribution.slurm.factory import make_backend
    from attribution.store import Store
    from attribution.verdictjson import verdict_from_dict

    if path.is_file():
        try:
            with Store(path, readonly=True) as store:
                found = store.find(job)
        except AttributionError:
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
    for text in notes:
        note(text)


def _echo_redaction(report: Any) -> None:
    red = report.redaction
    for line in report.notes:
        note(line)
    click.echo(
        f"redacted copy in {report.path}: {len(red.hosts)} host(s), {len(red.users)} user(s),"
        f" {len(red.clusters)} cluster(s), {len(red.paths)} directory(ies),"
        f" {len(red.addresses)} address(es) replaced"
    )


__all__ = ["bundle_"]
