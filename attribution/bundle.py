"""Evidence bundles: one directory per job, read into a job record and log sources.

Layout (docs/bundles.md)::

    <bundle>/job.json                      the JobRecord
    <bundle>/job/*.log                     the job's output (stderr if the name says so)
    <bundle>/nodes/<node>/kernel.log       also dmesg.log, kern.log
    <bundle>/nodes/<node>/syslog.log       also messages
    <bundle>/nodes/<node>/fabricmanager.log
    <bundle>/slurmctld.log                 optional, the controller's log
    <bundle>/expected.yaml                 optional, the hand-written answer
    <bundle>/history.yaml                  optional, earlier jobs' GPU errors (XID repeats)

Any file may be gzip or zstd compressed; rotated files (``kern.log.1.gz``) are
read oldest first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from attribution._yaml import load_yaml_file
from attribution.analyze import AnalysisOptions, analyze, read_window
from attribution.errors import BundleError, Location, RuleError
from attribution.history import PriorGpuError, read_history_file
from attribution.jobrecord import job_from_dict
from attribution.model import JobRecord, Stream, Verdict
from attribution.rules.loader import RuleSet
from attribution.scan import read_context
from attribution.sources import (
    SourceSpec,
    file_stem,
    job_stream_for,
    node_stream_for,
    read_sources,
)

# Streams every job node is expected to have; absent ones get a "missing" coverage entry.
EXPECTED_NODE_STREAMS = (Stream.KERNEL, Stream.SYSLOG, Stream.FABRICMANAGER)
_ROTATION = re.compile(r"\.(\d+)(?:\.(?:gz|zst|zstd))?$")


@dataclass(slots=True)
class Bundle:
    """A loaded bundle: where it is, its job record, its sources and optional expectation."""

    path: Path
    job: JobRecord
    specs: list[SourceSpec]
    expected: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    history: list[PriorGpuError] = field(default_factory=list)


def _rotation_key(path: Path) -> tuple[str, int]:
    m = _ROTATION.search(path.name)
    # higher rotation numbers are older: read them first
    return (file_stem(path.name), -(int(m.group(1)) if m else 0))


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        (p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")),
        key=_rotation_key,
    )


def _display(bundle: Path, path: Path) -> str:
    try:
        return str(path.relative_to(bundle))
    except ValueError:
        return str(path)


def read_job(path: Path) -> JobRecord:
    """Read ``job.json``.

    Raises:
        BundleError: missing, unreadable, invalid JSON (with its line) or no job id.
    """
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleError(
            "missing: a bundle needs a job record (see docs/bundles.md)", Location(source)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read job record: {exc}", Location(source)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"invalid JSON: {exc.msg}", Location(source, exc.lineno)) from None
    return job_from_dict(data, source)


def read_expected(path: Path) -> dict[str, Any] | None:
    """Read ``expected.yaml`` if present.

    Raises:
        BundleError: when it exists but is not a valid YAML mapping.
    """
    if not path.is_file():
        return None
    try:
        data, _ = load_yaml_file(path)
    except RuleError as exc:
        raise BundleError(exc.message, exc.location) from None
    if not isinstance(data, dict):
        raise BundleError("expected.yaml must be a mapping", Location(str(path), 1))
    return data


def load_bundle(path: Path | str) -> Bundle:
    """Load a bundle directory.

    Raises:
        BundleError: the directory, its ``job.json``, ``expected.yaml`` or ``history.yaml``
            is unusable.
    """
    root = Path(path)
    if not root.is_dir():
        raise BundleError("not a bundle directory", Location(str(root)))
    job = read_job(root / "job.json")
    specs: list[SourceSpec] = []
    notes: list[str] = []

    # job output
    by_stream: dict[Stream, list[Path]] = {Stream.JOB_STDOUT: [], Stream.JOB_STDERR: []}
    for file in _files(root / "job"):
        by_stream[job_stream_for(file.name)].append(file)
    for stream, paths in by_stream.items():
        specs.append(
            SourceSpec(
                stream=stream,
                node=None,
                paths=paths,
                display=[_display(root, p) for p in paths],
            )
        )

    # node logs
    nodes_dir = root / "nodes"
    seen_nodes = (
        sorted(p.name for p in nodes_dir.iterdir() if p.is_dir()) if nodes_dir.is_dir() else []
    )
    all_nodes = list(job.nodes) + [n for n in seen_nodes if n not in job.nodes]
    for node in all_nodes:
        grouped: dict[Stream, list[Path]] = {}
        for file in _files(nodes_dir / node):
            kind = node_stream_for(file.name)
            if kind is None:
                notes.append(f"{_display(root, file)}: unknown log name, not read")
                continue
            grouped.setdefault(kind, []).append(file)
        for stream in EXPECTED_NODE_STREAMS:
            grouped.setdefault(stream, [])
        for stream, paths in grouped.items():
            specs.append(
                SourceSpec(
                    stream=stream,
                    node=node,
                    paths=paths,
                    display=[_display(root, p) for p in paths],
                )
            )

    # controller log
    ctld = [p for p in (root / "slurmctld.log", root / "slurm" / "slurmctld.log") if p.is_file()]
    if ctld:
        specs.append(
            SourceSpec(
                stream=Stream.SLURMCTLD,
                node=None,
                paths=ctld,
                display=[_display(root, p) for p in ctld],
            )
        )
    expected = read_expected(root / "expected.yaml")
    history: list[PriorGpuError] = []
    for name in ("history.yaml", "history.json"):
        if (root / name).is_file():
            history = read_history_file(root / name)
            break
    return Bundle(path=root, job=job, specs=specs, expected=expected, notes=notes, history=history)


def diagnose_bundle(
    path: Path | str,
    ruleset: RuleSet,
    *,
    options: AnalysisOptions | None = None,
    diagnosed_at: datetime | None = None,
    engine: str | None = None,
    workers: int = 8,
    history: Sequence[PriorGpuError] | None = None,
) -> tuple[Bundle, Verdict]:
    """Load a bundle and diagnose it with ``analyze``.

    ``engine`` picks the line pre-filter (``hyperscan``, ``re2``, ``python``;
    default: the fastest available) and ``workers`` how many sources are read
    ahead in threads; neither changes the verdict. ``history`` (earlier jobs' GPU
    errors, e.g. from a verdict store) replaces the bundle's own ``history.yaml``.

    Raises:
        BundleError: when the bundle itself is unusable (the logs never raise).
    """
    bundle = load_bundle(path)
    job = bundle.job
    opts = options or AnalysisOptions()
    ctx = read_context(job, ruleset, window=read_window(job, opts), engine=engine)
    readers, lines = read_sources(bundle.specs, ctx, workers=workers)
    verdict = analyze(
        job,
        lines,
        ruleset,
        coverage=lambda: [r.coverage() for r in readers],
        options=opts,
        diagnosed_at=diagnosed_at,
        history=bundle.history if history is None else history,
    )
    return bundle, verdict
