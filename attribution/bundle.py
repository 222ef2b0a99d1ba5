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
    <bundle>/bundle.json                   optional, what wrote it and each stream's trust
    <bundle>/topology.conf, groups.yaml    optional, the cluster's failure domains
    <bundle>/metrics.json                  optional, GPU metrics (also nodes/<node>/metrics.json)
    <bundle>/nodes/<node>/*.journal        systemd journal files (or journalctl -o json: *.jsonl)

Any file may be gzip or zstd compressed; rotated files (``kern.log.1.gz``) are
read oldest first.
"""

from __future__ import annotations

import dataclasses
import json
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from attribution._yaml import load_yaml_file
from attribution.analyze import AnalysisOptions, analyze, read_window
from attribution.backtest import Report, error_result, score_case
from attribution.errors import AttributionError, BundleError, Location, RuleError
from attribution.history import PriorGpuError
from attribution.historyfile import read_history_file
from attribution.hostlist import compress
from attribution.jobrecord import job_from_dict
from attribution.model import CoverageNote, JobRecord, Stream, Trust, Verdict
from attribution.rules.compiled import RuleSet
from attribution.scan import read_context
from attribution.sources.journal import is_journal_file, journal_specs
from attribution.sources.metrics import is_metrics_file
from attribution.sources.readahead import read_sources
from attribution.sources.specs import FOLD_NODES, SourceSpec
from attribution.sources.streams import file_stem, job_stream_for, node_stream_for
from attribution.topology import Topology

# Streams every job node is expected to have; absent ones get a "missing" coverage entry.
EXPECTED_NODE_STREAMS = (Stream.KERNEL, Stream.SYSLOG, Stream.FABRICMANAGER)
MAX_RECORD_BYTES = 16 << 20  # a job.json is a few KiB; anything this large is not one
_ROTATION = re.compile(r"\.(\d+)(?:\.(?:gz|zst|zstd))?$")
_DATEEXT = re.compile(r"-(\d{4})-?(\d{2})-?(\d{2})(\d{2})?(?:\.log)?(?:\.(?:gz|zst|zstd))?$")


@dataclass(slots=True)
class Bundle:
    """A loaded bundle: where it is, its job record, its sources and optional expectation."""

    path: Path
    job: JobRecord
    specs: list[SourceSpec]
    expected: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    history: list[PriorGpuError] = field(default_factory=list)
    expected_error: str | None = None  # why expected.yaml could not be used


def _rotation_key(path: Path) -> tuple[str, int]:
    """Oldest first: ``kern.log.2.gz``, ``kern.log.1``, ``kern.log``; dateext files
    (``kern.log-20260101``) by their date, before the live file."""
    dated = _DATEEXT.search(path.name)
    if dated:
        stamp = int("".join(dated.group(1, 2, 3)) + (dated.group(4) or "00"))
        return (file_stem(path.name), stamp - 10**12)
    m = _ROTATION.search(path.name)
    return (file_stem(path.name), -(int(m.group(1)) if m else 0))


_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def inside_bundle(root: Path, path: Path) -> bool:
    """``path``, links resolved, lies inside the bundle: a bundle never reads beyond itself."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


@dataclass(slots=True)
class _Listing:
    files: list[Path] = field(default_factory=list)
    notes: list[CoverageNote] = field(default_factory=list)
    problem: CoverageNote | None = None
    # entries that are no regular file, or links out of the bundle, by name: the caller says
    # so on the stream the name feeds (a directory named kernel.log is the kernel's problem)
    refused: list[tuple[str, CoverageNote]] = field(default_factory=list)
    # the names of refused entries that are directories (left alone when no stream's name)
    directories: set[str] = field(default_factory=set)


def _entries(
    directory: Path, root: Path, *, plain: bool = False
) -> tuple[list[Path], CoverageNote | None]:
    """The visible entries of a bundle directory, sorted by name, or why it cannot be listed
    (absent is not a problem: that source is just missing).

    ``plain``: the directory is a directory, not a link, listed in a directory inside the
    bundle (that listing's entry said so), so it is inside too and is not resolved again (a
    bundle of 16,000 nodes would resolve every path component of each)."""
    try:
        if not plain:
            if not directory.exists() and not directory.is_symlink():
                return [], None
            if not directory.is_dir() or not inside_bundle(root, directory):
                return [], CoverageNote("outside_bundle", {"file": _display(root, directory) + "/"})
        found = [p for p in directory.iterdir() if not p.name.startswith(".")]
    except FileNotFoundError:  # gone since its parent was listed
        return [], None
    except OSError as exc:  # e.g. a parent directory we may not enter
        shown = _display(root, directory) + "/"
        return [], CoverageNote("cannot_list", {"file": shown, "error": str(exc.strerror or exc)})
    found.sort(key=lambda p: p.name)  # siblings: as Path order, without comparing parts
    return found, None


def _files(directory: Path, root: Path, *, plain: bool = False) -> _Listing:
    """The regular files of a bundle directory (oldest rotation first), and what was left
    out: links that leave the bundle, FIFOs, sockets, subdirectories, hidden files
    (``plain``: see ``_entries``)."""
    out = _Listing()
    entries, out.problem = _entries(directory, root, plain=plain)
    for entry in entries:
        try:
            if entry.is_symlink() and not inside_bundle(root, entry):
                note = CoverageNote("link_out_of_bundle", {"file": _display(root, entry)})
                out.refused.append((entry.name, note))
            elif entry.is_file():
                out.files.append(entry)
            else:
                if entry.is_dir():
                    out.directories.add(entry.name)
                note = CoverageNote("not_regular_file", {"file": _display(root, entry)})
                out.refused.append((entry.name, note))
        except OSError as exc:
            out.notes.append(
                CoverageNote(
                    "unreadable",
                    {"file": _display(root, entry), "error": str(exc.strerror or exc)},
                )
            )
    out.files.sort(key=_rotation_key)
    return out


def _spec_notes(
    paths: list[Path], problem: CoverageNote | None, refused: list[CoverageNote]
) -> tuple[CoverageNote | None, list[CoverageNote]]:
    """A stream's problem and notes given the entries refused under its name: with nothing
    read, an entry that is no regular file makes it unreadable; a link out of the bundle is a
    note (the stream is missing: nothing of the bundle's own was there)."""
    if paths or problem is not None:
        return (None if paths else problem), list(refused)
    for index, note in enumerate(refused):
        if note.code == "not_regular_file":
            return note, refused[:index] + refused[index + 1 :]
    return None, list(refused)


def optional_file(root: Path, name: str, notes: list[CoverageNote] | None = None) -> Path | None:
    """The bundle's optional file ``name`` when it is a regular file inside the bundle; a
    link out of the bundle, a FIFO or a directory is left alone, with a note in ``notes``
    (a FIFO would block its reader forever)."""
    path = root / name
    try:
        # the whole path, links resolved: a directory on the way may be the link out
        # (``slurm/`` -> elsewhere, for ``slurm/slurmctld.log``)
        if (path.is_symlink() or path.exists()) and not inside_bundle(root, path):
            code = "link_out_of_bundle"
        elif path.is_file():
            return path
        elif path.exists():
            code = "not_regular_file"
        else:
            return None
    except OSError as exc:
        if notes is not None:
            notes.append(CoverageNote("unreadable", {"file": name, "error": str(exc.strerror)}))
        return None
    if notes is not None:
        notes.append(CoverageNote(code, {"file": name}))
    return None


def contained(root: Path, path: Path) -> Path:
    """``path`` when it (links resolved) stays inside the bundle.

    Raises:
        BundleError: a link that leads out of the bundle.
    """
    if path.is_symlink() and not inside_bundle(root, path):
        raise BundleError("a link out of the bundle, not followed", Location(str(path)))
    return path


def _nodes(nodes_dir: Path, root: Path) -> tuple[_Listing, set[str]]:
    """The node directories of a bundle (``files`` holds the directories here), and the names
    of those that are plain directories, no links (``_entries``)."""
    out = _Listing()
    plain: set[str] = set()
    entries, out.problem = _entries(nodes_dir, root)
    for entry in entries:
        if not _NODE_NAME.fullmatch(entry.name):
            out.notes.append(CoverageNote("not_host_name", {"file": _display(root, entry)}))
        elif entry.is_dir():
            out.files.append(entry)
            if not entry.is_symlink():
                plain.add(entry.name)
    return out, plain


def _display(bundle: Path, path: Path) -> str:
    """A path as shown in coverage: relative to the bundle, undecodable bytes escaped."""
    text, base = str(path), str(bundle)
    if base not in ("/", ".") and text.startswith(base) and text[len(base) : len(base) + 1] == "/":
        text = text[len(base) + 1 :]  # what relative_to gives, without parsing both paths
    else:
        try:
            text = str(path.relative_to(bundle))
        except ValueError:
            text = str(path)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def read_job(path: Path) -> JobRecord:
    """Read ``job.json``.

    Raises:
        BundleError: missing, unreadable, invalid JSON (with its line) or no job id.
    """
    source = str(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise BundleError("not a regular file", Location(source))
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise BundleError(
                f"larger than {MAX_RECORD_BYTES >> 20} MiB; not a job record", Location(source)
            )
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BundleError(
            "missing: a bundle needs a job record (see docs/bundles.md)", Location(source)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read job record: {exc}", Location(source)) from None
    return job_from_dict(parse_json(text, source), source)


def parse_json(text: str, source: str) -> Any:
    """JSON of a bundle file, or a one-line ``BundleError`` naming the file (and line)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"invalid JSON: {exc.msg}", Location(source, exc.lineno)) from None
    except RecursionError:
        raise BundleError("invalid JSON: nested too deeply", Location(source)) from None
    except ValueError:  # an integer of more digits than Python converts (4300)
        raise BundleError(
            "invalid JSON: a number of thousands of digits", Location(source)
        ) from None


MANIFEST = "bundle.json"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a bundle's ``bundle.json`` declares (``sattr bundle`` writes it from the site's
    configuration): each stream's trust (absent: its default), and the streams the site reads
    (a stream left out is not configured there, no Fabric Manager or StdErr in the StdOut file,
    so its absence is no "missing" entry; None: the manifest does not say)."""

    trust: dict[Stream, Trust] = field(default_factory=dict)
    streams: frozenset[Stream] | None = None
    # per stream, what the worker could not have (a Prometheus that did not answer)
    notes: dict[Stream, list[CoverageNote]] = field(default_factory=dict)


def read_manifest(path: Path) -> Manifest:
    """Read ``bundle.json``; without the file, every stream has its default trust.

    Raises:
        BundleError: a file that is not JSON, a trust entry that names no stream or level, or
            ``streams`` that is not a list of stream names.
    """
    if not path.is_file():
        if path.exists():  # what decides trust is never skipped: a FIFO here is refused
            raise BundleError("not a regular file", Location(str(path)))
        return Manifest()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"cannot read: {exc}", Location(str(path))) from None
    data = parse_json(text, str(path))
    declared = data.get("trust", {}) if isinstance(data, dict) else None
    if not isinstance(declared, dict):
        raise BundleError("'trust' must map stream names to trusted|untrusted", Location(str(path)))
    trust: dict[Stream, Trust] = {}
    for name, level in declared.items():
        try:
            trust[Stream(name)] = Trust(level)
        except ValueError:
            raise BundleError(
                f"trust: {name!r}: {level!r} is not a stream with trusted or untrusted",
                Location(str(path)),
            ) from None
    if any(s in trust for s in (Stream.JOB_STDOUT, Stream.JOB_STDERR)):
        raise BundleError("trust: the job's own output is always untrusted", Location(str(path)))
    notes = _manifest_notes(data.get("notes"), path)
    names = data.get("streams")
    if names is None:
        return Manifest(trust, notes=notes)
    try:
        if not isinstance(names, list):
            raise ValueError(names)
        return Manifest(trust, frozenset(Stream(str(n)) for n in names), notes)
    except ValueError:
        raise BundleError(
            f"streams: {names!r} is not a list of stream names", Location(str(path))
        ) from None


def _manifest_notes(data: object, path: Path) -> dict[Stream, list[CoverageNote]]:
    """``notes`` of ``bundle.json``: ``{stream: [{code, args}]}``, what ``sattr bundle`` could
    not have (docs/bundles.md). Only the metrics stream's are read.

    Raises:
        BundleError: not that shape.
    """
    if data is None:
        return {}
    where = Location(str(path))
    if not isinstance(data, dict):
        raise BundleError("notes: expected {stream: [{code, args}]}", where)
    out: dict[Stream, list[CoverageNote]] = {}
    for name, items in data.items():
        if name != Stream.METRICS.value:
            continue
        if not isinstance(items, list) or len(items) > 1000:
            raise BundleError(f"notes: {name}: expected a list of {{code, args}}", where)
        found = []
        for item in items:
            code = item.get("code") if isinstance(item, dict) else None
            args = item.get("args", {}) if isinstance(item, dict) else None
            if not isinstance(code, str) or not isinstance(args, dict):
                raise BundleError(f"notes: {name}: expected a list of {{code, args}}", where)
            found.append(
                CoverageNote(
                    code[:64], {str(k)[:64]: str(v)[:1024] for k, v in list(args.items())[:16]}
                )
            )
        out[Stream.METRICS] = found
    return out


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
    job = read_job(contained(root, root / "job.json"))
    manifest = read_manifest(contained(root, root / MANIFEST))
    trust, configured = manifest.trust, manifest.streams

    def site_reads(stream: Stream) -> bool:
        return configured is None or stream in configured

    specs: list[SourceSpec] = []
    notes: list[str] = []

    # job output
    listing = _files(root / "job", root)
    by_stream: dict[Stream, list[Path]] = {Stream.JOB_STDOUT: [], Stream.JOB_STDERR: []}
    job_refused: dict[Stream, list[CoverageNote]] = {}
    for file in listing.files:
        by_stream[job_stream_for(file.name)].append(file)
    for name, note in listing.refused:
        job_refused.setdefault(job_stream_for(name), []).append(note)
    for stream, paths in by_stream.items():
        if not paths and not site_reads(stream) and stream not in job_refused:
            continue
        problem, extra = _spec_notes(paths, listing.problem, job_refused.get(stream, []))
        specs.append(
            SourceSpec(
                stream=stream,
                node=None,
                paths=paths,
                display=[_display(root, p) for p in paths],
                notes=(listing.notes if stream is Stream.JOB_STDOUT else []) + extra,
                problem=problem,
            )
        )

    # node logs
    nodes_dir = root / "nodes"
    node_listing, plain = _nodes(nodes_dir, root)
    notes.extend(n.text for n in node_listing.notes)
    seen_nodes = [p.name for p in node_listing.files]
    in_job = set(job.nodes)
    all_nodes = list(job.nodes) + [n for n in seen_nodes if n not in in_job]
    # a job of thousands of nodes without logs here: one missing entry per stream for them
    # all, not one per node (200,000 nodes made 600,000 entries and 1.26 GiB)
    with_dir = set(seen_nodes)
    absent = [n for n in job.nodes if n not in with_dir and _NODE_NAME.fullmatch(n)]
    folded = set(absent) if len(absent) > FOLD_NODES and not node_listing.problem else set()
    for node in all_nodes:
        if node in folded:
            continue
        grouped: dict[Stream, list[Path]] = {}
        if _NODE_NAME.fullmatch(node):
            listing = _files(
                nodes_dir / node, root, plain=node in plain and not node_listing.problem
            )
        else:  # a job record's node name must never become a path ("../x", "/etc")
            listing = _Listing(problem=CoverageNote("bad_node_name", {"node": node}))
        if node_listing.problem and not listing.problem:
            listing.problem = node_listing.problem
        left_out = list(listing.notes)
        refused_by: dict[Stream, list[CoverageNote]] = {}
        for name, note in listing.refused:
            named = Stream.KERNEL if is_journal_file(name) else node_stream_for(name)
            if named is not None:
                refused_by.setdefault(named, []).append(note)
            elif name not in listing.directories:  # a directory of another name: not a log
                left_out.append(note)
        journals: list[Path] = []
        metrics: list[Path] = []
        for file in listing.files:
            if is_journal_file(file.name):
                journals.append(file)
                continue
            if is_metrics_file(file.name):
                metrics.append(file)
                continue
            kind = node_stream_for(file.name)
            if kind is None:
                left_out.append(CoverageNote("unknown_log_name", {"file": _display(root, file)}))
                continue
            grouped.setdefault(kind, []).append(file)
        if journals:
            # the journal feeds the kernel (its kernel transport) and syslog (the rest) streams
            specs.extend(journal_specs(journals, node, [_display(root, p) for p in journals]))
            for stream in (Stream.KERNEL, Stream.SYSLOG):
                if not grouped.get(stream):
                    grouped.pop(stream, None)
        if node in in_job or listing.problem:
            for stream in EXPECTED_NODE_STREAMS:
                if not (journals and stream in (Stream.KERNEL, Stream.SYSLOG)) and site_reads(
                    stream
                ):
                    grouped.setdefault(stream, [])
        elif not grouped and not journals and not refused_by:
            # a node outside the job, with nothing to read
            notes.extend(n.text for n in left_out)
            continue
        elif Stream.KERNEL not in grouped and not journals:
            grouped[Stream.KERNEL] = []
        for stream in refused_by:
            grouped.setdefault(stream, [])
        for stream, paths in grouped.items():
            problem, extra = _spec_notes(paths, listing.problem, refused_by.get(stream, []))
            specs.append(
                SourceSpec(
                    stream=stream,
                    node=node,
                    paths=paths,
                    display=[_display(root, p) for p in paths],
                    notes=(left_out if stream is Stream.KERNEL else []) + extra,
                    problem=problem,
                    trust=trust.get(stream),
                )
            )
        if metrics:
            specs.append(_metrics_spec(root, metrics, node, trust.get(Stream.METRICS)))

    if folded:
        label = compress(absent)
        count = CoverageNote("nodes_folded", {"count": len(absent)})
        specs.extend(
            SourceSpec(stream=stream, node=label, paths=[], notes=[count], trust=trust.get(stream))
            for stream in EXPECTED_NODE_STREAMS
            if site_reads(stream)
        )

    # controller log
    ctld: list[Path] = []
    ctld_refused: list[CoverageNote] = []
    for name in ("slurmctld.log", "slurm/slurmctld.log"):
        if (found := optional_file(root, name, ctld_refused)) is not None:
            ctld.append(found)
    if ctld or ctld_refused:
        problem, extra = _spec_notes(ctld, None, ctld_refused)
        specs.append(
            SourceSpec(
                stream=Stream.SLURMCTLD,
                node=None,
                paths=ctld,
                display=[_display(root, p) for p in ctld],
                notes=extra,
                problem=problem,
            )
        )
    # the job's metrics, all nodes in one file; one that cannot be read is said, not skipped
    job_metrics: list[Path] = []
    refused: list[CoverageNote] = []
    for candidate in sorted(root.glob("metrics.json*")):
        if not is_metrics_file(candidate.name):
            continue
        shown = _display(root, candidate)
        if candidate.is_symlink() and not inside_bundle(root, candidate):
            refused.append(CoverageNote("link_out_of_bundle", {"file": shown}))
        elif candidate.is_file():
            job_metrics.append(candidate)
        elif candidate.exists():
            refused.append(CoverageNote("not_regular_file", {"file": shown}))
        else:
            refused.append(CoverageNote("unreadable", {"file": shown, "error": "a dangling link"}))
    lacking = manifest.notes.get(Stream.METRICS, [])
    if job_metrics or lacking or refused:
        spec = _metrics_spec(root, job_metrics, None, trust.get(Stream.METRICS))
        spec.notes = list(lacking)
        if refused and not job_metrics:
            spec.problem = refused[0]
        spec.notes += refused[1:] if refused and not job_metrics else refused
        specs.append(spec)
    expected: dict[str, Any] | None = None
    expected_error: str | None = None
    skipped: list[CoverageNote] = []  # optional files that are no regular file: said
    try:  # diagnosing does not need the answer: a broken expected.yaml is kept as a note
        if (answer := optional_file(root, "expected.yaml", skipped)) is not None:
            expected = read_expected(answer)
    except BundleError as exc:
        expected_error = str(exc)
    history: list[PriorGpuError] = []
    for name in ("history.yaml", "history.json"):
        if (found := optional_file(root, name, skipped)) is not None:
            history = read_history_file(found)
            break
    for name in ("topology.conf", "groups.yaml"):  # read by bundle_topology; said here
        optional_file(root, name, skipped)
    notes.extend(n.text for n in skipped)
    return Bundle(
        path=root,
        job=job,
        specs=specs,
        expected=expected,
        notes=notes,
        history=history,
        expected_error=expected_error,
    )


def bundle_topology(root: Path) -> Topology | None:
    """The bundle's ``topology.conf`` and ``groups.yaml`` (docs/bundles.md), when it has them.

    Raises:
        BundleError: a file that cannot be read or parsed (its line named), or a link out of
            the bundle.
    """
    conf, groups = optional_file(root, "topology.conf"), optional_file(root, "groups.yaml")
    if conf is None and groups is None:  # absent, or no regular file (load_bundle said so)
        return None
    from attribution.fleetfile import load_topology  # and the fleet model: only for a topology

    try:
        found = load_topology(conf, groups)
    except BundleError:
        raise
    except AttributionError as exc:
        raise BundleError(exc.message, exc.location) from None
    return found or None


def _metrics_spec(
    root: Path, paths: list[Path], node: str | None, trust: Trust | None
) -> SourceSpec:
    """A bundle's metrics files (docs/bundles.md, "metrics.json"): one node's or the job's."""
    return SourceSpec(
        stream=Stream.METRICS,
        node=node,
        paths=paths,
        display=[_display(root, p) for p in paths],
        trust=trust,
        kind="metrics",
    )


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
    if opts.topology is None:
        opts = dataclasses.replace(opts, topology=bundle_topology(bundle.path))
    ctx = read_context(job, ruleset, window=read_window(job, opts), engine=engine)
    readers, lines = read_sources(bundle.specs, ctx, workers=workers)
    verdict = analyze(
        job,
        lines,
        ruleset,
        coverage=lambda: [c for r in readers for c in r.coverages()],
        options=opts,
        diagnosed_at=diagnosed_at,
        history=bundle.history if history is None else history,
        silences=lambda: [x for r in readers for x in r.silences],
    )
    return bundle, verdict


def score_bundles(paths: Sequence[Path], ruleset: RuleSet) -> Report:
    """Diagnose each bundle and score it against its ``expected.yaml`` (``sattr backtest``).

    A cause is scored when it names one of ``ruleset``'s diagnosis rules. A bundle that cannot
    be read or scored is an error result with a one-line reason; the others are still scored.
    """
    report = Report()
    known = {d.id for d in ruleset.diagnoses}
    for path in paths:
        try:
            expected = read_expected(path / "expected.yaml") or {}
            _, verdict = diagnose_bundle(path, ruleset)
            report.cases.append(score_case(path.name, str(path), expected, verdict, known))
        except (AttributionError, ValueError) as exc:
            report.cases.append(error_result(path.name, str(path), None, str(exc)))
        except Exception as exc:  # one broken case must not lose the others' results
            message = f"internal error ({type(exc).__name__}: {exc}); please report it"
            report.cases.append(error_result(path.name, str(path), None, message))
    return report
