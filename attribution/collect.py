"""Decide which evidence a job's diagnosis reads, and read the job's own output safely.

From a ``JobRecord`` and the site configuration this builds the ``SourceSpec``s
of one job:

- node logs: for each job node and stream, the files matching the stream's path
  templates (``/var/log/hosts/{node}/kern.log*``), oldest first, skipping files
  whose mtime is older than the job's start minus ``logs.file_margin`` (more than
  ``FOLD_NODES`` nodes without a file for the same reason share one missing entry);
- the controller log (``logs.slurmctld``), read once;
- the job's StdOut/StdErr. These paths are chosen by the job's owner, so they
  are opened here as the job's user could (``_open_as_seen_by``: no symbolic link
  followed), must be regular files (no FIFO or device) owned by the job's user and
  must not be compressed. The readers then read that checked descriptor (through
  ``/proc/self/fd``), all of it as ``sattr diagnose`` reads a bundle, or only its last
  ``job_output.max_bytes`` bytes when a site sets that cap. Where ``/proc`` is missing,
  the same bytes are copied from the descriptor into a private temporary directory.

Nothing here raises for a missing or refused source: it becomes a coverage
entry with a reason (``Collection.adjust``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import logging
import os
import pwd
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attribution._yaml import load_yaml_file
from attribution.config import Config
from attribution.errors import AttributionError
from attribution.hostlist import compress
from attribution.jobrecord import job_from_dict
from attribution.model import Coverage, CoverageNote, CoverageStatus, JobRecord, Stream, Trust
from attribution.ownership import bus_key
from attribution.promql import fetch_metrics
from attribution.sources.journal import journal_specs
from attribution.sources.reader import GZIP_MAGIC, ZSTD_MAGIC
from attribution.sources.specs import FOLD_NODES, SourceSpec

if TYPE_CHECKING:
    from attribution.slurm.backend import SlurmBackend

log = logging.getLogger("attribution.collect")

NODE_STREAM_KEYS: tuple[tuple[Stream, str], ...] = (
    (Stream.KERNEL, "kernel"),
    (Stream.SYSLOG, "syslog"),
    (Stream.FABRICMANAGER, "fabricmanager"),
    (Stream.DCGM, "dcgm"),
    (Stream.SLURMD, "slurmd"),
)
# Streams every node should have; without a template they are reported as not configured.
EXPECTED = (Stream.KERNEL, Stream.SYSLOG)
_COPY_CHUNK = 1 << 20
_PROC_FD = Path("/proc/self/fd")  # a checked descriptor, opened again by the readers
_HOLES = 1 << 20  # bytes of holes that make job output "sparse" (read as the data it holds)


@dataclass(slots=True)
class Collection:
    """The specs to read plus coverage corrections for sources refused or not configured.

    Use as a context manager: leaving it deletes the private copies of job output.
    """

    specs: list[SourceSpec] = field(default_factory=list)
    notes: dict[tuple[str, str | None], tuple[CoverageStatus, CoverageNote]] = field(
        default_factory=dict
    )
    tmpdir: Path | None = None
    fds: list[int] = field(default_factory=list)  # checked job output files, open for reading

    def note(
        self, stream: Stream, node: str | None, status: CoverageStatus, note: CoverageNote
    ) -> None:
        self.notes[(stream.value, node)] = (status, note)

    def adjust(self, coverage: Coverage) -> Coverage:
        """Put the recorded status and reason on a coverage entry whose source had no file
        (or add the recorded note to one that was read)."""
        found = self.notes.get((coverage.stream.value, coverage.node))
        if found is None:
            return coverage
        status, note = found
        if coverage.status is CoverageStatus.MISSING:
            # an entry that stands for many nodes keeps saying how many (``_node_files``)
            kept = tuple(n for n in coverage.notes if n.code == "nodes_folded")
            return dataclasses.replace(
                coverage, status=status, notes=(note, *kept), reason=note.text
            )
        if status is CoverageStatus.OK:
            return coverage.noted(note)
        return coverage

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _matches(templates: list[str], values: dict[str, str]) -> list[str]:
    out: list[str] = []
    for template in templates:
        pattern = template.format(**values)
        out.extend(sorted(glob.glob(pattern)))
    return list(dict.fromkeys(out))


def _recent_files(paths: list[str], not_before: float | None) -> tuple[list[Path], int]:
    """Regular files among ``paths``, oldest mtime first; and how many were too old."""
    keep: list[tuple[float, str]] = []
    old = 0
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if not_before is not None and info.st_mtime < not_before:
            old += 1
            continue
        keep.append((info.st_mtime, path))
    keep.sort()
    return [Path(p) for _, p in keep], old


def _file_spec(
    col: Collection,
    stream: Stream,
    node: str | None,
    templates: list[str],
    values: dict[str, str],
    not_before: float | None,
    trust: Trust | None = None,
) -> None:
    shown = ", ".join(t.format(**values) for t in templates)
    files, old = _recent_files(_matches(templates, values), not_before)
    col.specs.append(SourceSpec(stream=stream, node=node, paths=files, trust=trust))
    if not files:
        note = CoverageNote("no_match", {"templates": shown})
        if old:
            note = CoverageNote("files_before_window", {"count": old, "templates": shown})
        col.note(stream, node, CoverageStatus.MISSING, note)


def _journal_specs(
    col: Collection,
    node: str | None,
    templates: list[str],
    values: dict[str, str],
    not_before: float | None,
) -> None:
    """The kernel-transport and syslog sources of the journal files the templates match."""
    shown = ", ".join(t.format(**values) for t in templates)
    files, old = _recent_files(_matches(templates, values), not_before)
    col.specs.extend(journal_specs(files, node))
    if not files:
        note = CoverageNote("no_journal_match", {"templates": shown})
        if old:
            note = CoverageNote("journal_files_before_window", {"count": old, "templates": shown})
        for stream in (Stream.KERNEL, Stream.SYSLOG):
            col.note(stream, node, CoverageStatus.MISSING, note)


def _node_files(
    col: Collection,
    nodes: Sequence[str],
    templates: list[str],
    cluster: str,
    not_before: float | None,
    make: Callable[[str, list[Path]], list[SourceSpec]],
    codes: tuple[str, str],
) -> None:
    """The sources (``make``) of each node's files matched by per-node ``templates``. A node
    with none gets missing entries saying why (``codes``: no file matches; only files older
    than the window). More than ``FOLD_NODES`` nodes without a file for the same reason share
    one entry per source, its node their host list (note ``nodes_folded``), as in a bundle:
    a 200,000-node job made 400,000 entries and 930 MiB before."""
    found = [
        (node, *_recent_files(_matches(templates, {"node": node, "cluster": cluster}), not_before))
        for node in dict.fromkeys(nodes)  # each node once, whatever the record repeats
    ]
    without: dict[str, list[tuple[str, int]]] = {}
    for node, files, old in found:
        if not files:
            without.setdefault(codes[1] if old else codes[0], []).append((node, old))
    folded = {code for code, group in without.items() if len(group) > FOLD_NODES}
    for node, files, old in found:
        if files or (codes[1] if old else codes[0]) not in folded:
            specs = make(node, files)
            col.specs.extend(specs)
            if not files:
                shown = ", ".join(t.format(node=node, cluster=cluster) for t in templates)
                args: dict[str, Any] = {"count": old} if old else {}
                note = CoverageNote(codes[1] if old else codes[0], {**args, "templates": shown})
                for spec in specs:
                    col.note(spec.stream, node, CoverageStatus.MISSING, note)
    for code in sorted(folded):
        group = without[code]
        label = compress([node for node, _ in group])
        shown = ", ".join(t.format(node="{node}", cluster=cluster) for t in templates)
        args = {"count": sum(old for _, old in group)} if code == codes[1] else {}
        note = CoverageNote(code, {**args, "templates": shown})
        for spec in make(label, []):
            spec.notes.append(CoverageNote("nodes_folded", {"count": len(group)}))
            col.specs.append(spec)
            col.note(spec.stream, label, CoverageStatus.MISSING, note)


def job_owner_uid(job: JobRecord) -> int | None:
    """The job owner's uid: from the record, else by looking up the user name."""
    if job.uid is not None:
        return job.uid
    if job.user:
        try:
            return pwd.getpwnam(job.user).pw_uid
        except KeyError:
            return None
    return None


class Refused(Exception):
    """A job output file that must not be read; the message is the coverage reason."""


def _groups_of(uid: int) -> set[int]:
    """The uid's primary and supplementary groups (empty when the user is unknown)."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return set()
    try:
        return set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        return {entry.pw_gid}


def _may(uid: int, groups: set[int], info: os.stat_result, bits: tuple[int, int, int]) -> bool:
    """Would ``uid`` pass the permission bits (owner, group, other) of ``info``? Root may."""
    if uid == 0:
        return True
    if info.st_uid == uid:
        return bool(info.st_mode & bits[0])
    if info.st_gid in groups:
        return bool(info.st_mode & bits[1])
    return bool(info.st_mode & bits[2])


_SEARCH = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
_READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def _open_as_seen_by(path: str, uid: int) -> int:
    """Open ``path`` for reading only if ``uid`` could: the file itself is not a symbolic
    link, every directory on its real path (links such as /home -> /gpfs/home resolved) must
    be searchable by ``uid``, and the directories are then opened one by one without
    following links (``O_NOFOLLOW``), so a link swapped in after the check cannot lead
    elsewhere. Returns the open descriptor.

    Raises:
        Refused: the reason, for a missing file, a denied step or any OS error.
    """
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise Refused("is a symbolic link; not followed")
    except FileNotFoundError:
        raise Refused("file does not exist") from None
    except OSError as exc:
        raise Refused(f"cannot open: {exc.strerror}") from None
    real = os.path.realpath(path)
    parts = [p for p in real.split(os.sep) if p]
    if not parts:
        raise Refused("not a regular file")
    groups = _groups_of(uid)
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(os.sep, dir_flags)
    except OSError as exc:
        raise Refused(f"cannot open: {exc.strerror}") from None
    try:
        where = ""
        for name in parts[:-1]:
            if not _may(uid, groups, os.fstat(fd), _SEARCH):
                raise Refused(f"the job's user (uid {uid}) cannot enter {where or '/'}")
            where = f"{where}/{name}"
            nxt = os.open(name, dir_flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if not _may(uid, groups, os.fstat(fd), _SEARCH):
            raise Refused(f"the job's user (uid {uid}) cannot enter {where or '/'}")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        return os.open(parts[-1], flags, dir_fd=fd)
    except FileNotFoundError:
        raise Refused("file does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link appeared on the way: not followed
            raise Refused("a symbolic link on its path changed; not followed") from None
        raise Refused(f"cannot open: {exc.strerror}") from None
    finally:
        os.close(fd)


def open_job_output(path: str, uid: int) -> int:
    """Open the job output file ``path`` for reading, as its user could, and check it.

    Read only what the job's user could read: the path's directories must be searchable and
    the file readable by ``uid`` (``_open_as_seen_by``; links on the way are resolved first,
    then every step is opened without following links, and a FIFO cannot block the open).
    Checked on the open descriptor: a regular file, owned by ``uid``, not gzip/zstd
    compressed. Returns the descriptor (the caller closes it).

    Raises:
        Refused: with the reason, for any check that fails or any OS error.
    """
    fd = _open_as_seen_by(path, uid)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_uid != uid:
            raise Refused(f"owned by uid {info.st_uid}, not by the job's user (uid {uid})")
        if not _may(uid, _groups_of(uid), info, _READ):
            raise Refused(f"not readable by the job's user (uid {uid})")
        head = os.pread(fd, 4, 0)
        if head.startswith(GZIP_MAGIC) or head.startswith(ZSTD_MAGIC):
            raise Refused("compressed job output is not read")
        return fd
    except OSError as exc:
        os.close(fd)
        raise Refused(f"cannot read: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise


def copy_job_output(path: str, uid: int, max_bytes: int | None, dest: Path) -> int:
    """Copy the job output file ``path`` (its last ``max_bytes``, when given) to ``dest``,
    from the descriptor ``open_job_output`` checked. Returns the number of bytes copied.

    Raises:
        Refused: with the reason, for any check that fails or any OS error.
    """
    fd = open_job_output(path, uid)
    try:
        return copy_tail(fd, max_bytes, dest)
    finally:
        os.close(fd)


def copy_data(fd: int, max_bytes: int | None, dest: Path) -> int:
    """Copy the data a sparse file holds (not its holes, found with ``SEEK_DATA``), its last
    ``max_bytes`` when given, to ``dest``; each run of data ends a line. Returns the bytes
    copied.

    Raises:
        Refused: for an OS error.
    """
    try:
        size = os.fstat(fd).st_size
        runs: list[tuple[int, int]] = []
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after pos
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            runs.append((start, end))
            pos = end
        left = size if max_bytes is None else max_bytes
        kept: list[tuple[int, int]] = []
        for start, end in reversed(runs):  # the last max_bytes of data
            if left <= 0:
                break
            kept.append((max(start, end - left), end))
            left -= end - kept[-1][0]
        copied = 0
        with open(dest, "wb") as out:
            for start, end in reversed(kept):
                copied += _copy_range(fd, out, start, end)
                out.write(b"\n")
        return copied
    except OSError as exc:
        raise Refused(f"cannot read: {exc.strerror}") from None


def copy_tail(fd: int, max_bytes: int | None, dest: Path) -> int:
    """Copy the open file ``fd`` (its last ``max_bytes``, when given) to ``dest``.

    Raises:
        Refused: for an OS error.
    """
    try:
        size = os.fstat(fd).st_size
        start = 0 if max_bytes is None else max(size - max_bytes, 0)
        with open(dest, "wb") as out:
            return _copy_range(fd, out, start, size)
    except OSError as exc:
        raise Refused(f"cannot read: {exc.strerror}") from None


def _copy_range(fd: int, out: BinaryIO, start: int, end: int) -> int:
    """Copy bytes ``start`` to ``end`` of ``fd`` to ``out`` (less, if the file is shorter now);
    returns how many were copied."""
    offset = start
    while offset < end:
        chunk = os.pread(fd, min(_COPY_CHUNK, end - offset), offset)
        if not chunk:
            break
        out.write(chunk)
        offset += len(chunk)
    return offset - start


def _job_output(col: Collection, job: JobRecord, config: Config) -> None:
    if not config.job_output.read:
        for stream in (Stream.JOB_STDOUT, Stream.JOB_STDERR):
            col.specs.append(SourceSpec(stream=stream, node=None))
            col.note(stream, None, CoverageStatus.MISSING, CoverageNote("job_output_off"))
        return
    outputs: list[tuple[Stream, str | None]] = [(Stream.JOB_STDOUT, job.std_out)]
    if job.std_err and job.std_err != job.std_out:
        outputs.append((Stream.JOB_STDERR, job.std_err))
    uid = job_owner_uid(job)
    for stream, path in outputs:
        spec = SourceSpec(stream=stream, node=None)
        col.specs.append(spec)
        if not path:
            col.note(stream, None, CoverageStatus.MISSING, CoverageNote("no_output_path"))
            continue
        if path == "/dev/null":
            col.note(stream, None, CoverageStatus.EMPTY, CoverageNote("dev_null"))
            continue
        if not path.startswith("/"):
            note = CoverageNote("relative_path", {"file": path})
            col.note(stream, None, CoverageStatus.UNREADABLE, note)
            continue
        if uid is None:
            note = CoverageNote("owner_unknown", {"file": path})
            col.note(stream, None, CoverageStatus.UNREADABLE, note)
            continue
        limit = config.job_output.max_bytes
        cap = None if limit is None else int(limit)
        spec.plain = True  # never decompressed: its owner may rewrite it after the checks
        try:
            fd = open_job_output(path, uid)
            col.fds.append(fd)
            info = os.fstat(fd)
            size = info.st_size
            holes = size - info.st_blocks * 512
            if holes > _HOLES or not _PROC_FD.is_dir():
                # a sparse file ('truncate -s 1T'): its holes read as NULs and cost no quota;
                # only the bytes it holds are copied, so reading costs what the user wrote
                if col.tmpdir is None:
                    col.tmpdir = Path(tempfile.mkdtemp(prefix="attribution-job-"))
                spec.paths = [col.tmpdir / stream.value]
                if holes > _HOLES:
                    size = copy_data(fd, cap, spec.paths[0])
                    note = CoverageNote("sparse_output", {"file": path, "holes": holes})
                    col.note(stream, None, CoverageStatus.OK, note)
                else:
                    copy_tail(fd, cap, spec.paths[0])
            else:  # read the checked descriptor itself, in place
                spec.paths = [_PROC_FD / str(fd)]
        except OSError as exc:
            col.note(
                stream,
                None,
                CoverageStatus.UNREADABLE,
                CoverageNote("refused", {"file": path, "why": f"cannot read: {exc.strerror}"}),
            )
            continue
        except Refused as exc:
            status = (
                CoverageStatus.MISSING
                if str(exc) == "file does not exist"
                else CoverageStatus.UNREADABLE
            )
            col.note(stream, None, status, CoverageNote("refused", {"file": path, "why": str(exc)}))
            continue
        spec.display = [path]
        spec.max_bytes = cap
        if cap is not None and size > cap and (stream.value, None) not in col.notes:
            col.note(stream, None, CoverageStatus.OK, CoverageNote("tail_only", {"bytes": cap}))


def collect(job: JobRecord, config: Config) -> Collection:
    """Build the ``Collection`` of one job (see the module docstring); never raises for
    missing or unreadable evidence."""
    col = Collection()
    not_before = (
        job.start.timestamp() - config.window.before - config.logs.file_margin
        if job.start
        else None
    )
    cluster = job.cluster or ""
    journal = config.logs.journal
    if any("{node}" in t for t in journal):
        per_node = [t for t in journal if "{node}" in t]
        _node_files(
            col,
            job.nodes,
            per_node,
            cluster,
            not_before,
            lambda node, files: journal_specs(files, node),
            ("no_journal_match", "journal_files_before_window"),
        )
    if any("{node}" not in t for t in journal):
        shared = [t for t in journal if "{node}" not in t]
        _journal_specs(col, None, shared, {"node": "", "cluster": cluster}, not_before)
    for stream, key in NODE_STREAM_KEYS:
        templates: list[str] = getattr(config.logs, key)
        trust = Trust(getattr(config.logs.trust, key))
        per_node = [t for t in templates if "{node}" in t]
        shared = [t for t in templates if "{node}" not in t]
        if not templates:
            if journal and stream in (Stream.KERNEL, Stream.SYSLOG):
                continue  # read from the journal
            if stream in EXPECTED:
                unset = CoverageNote("no_template", {"key": key})
                distinct = list(dict.fromkeys(job.nodes))
                many = len(distinct) > FOLD_NODES
                for node in [compress(distinct)] if many else job.nodes:
                    notes = [CoverageNote("nodes_folded", {"count": len(distinct)})] if many else []
                    col.specs.append(SourceSpec(stream=stream, node=node, notes=notes))
                    col.note(stream, node, CoverageStatus.MISSING, unset)
            continue
        if per_node:

            def one(
                node: str, files: list[Path], s: Stream = stream, t: Trust = trust
            ) -> list[SourceSpec]:
                return [SourceSpec(stream=s, node=node, paths=files, trust=t)]

            codes = ("no_match", "files_before_window")
            _node_files(col, job.nodes, per_node, cluster, not_before, one, codes)
        if shared:
            values = {"node": "", "cluster": cluster}
            _file_spec(col, stream, None, shared, values, not_before, trust)
    if config.logs.slurmctld:
        _file_spec(
            col,
            Stream.SLURMCTLD,
            None,
            config.logs.slurmctld,
            {"node": "", "cluster": cluster},
            not_before,
            Trust(config.logs.trust.slurmctld),
        )
    _job_output(col, job, config)
    _metrics(col, job, config)
    return col


def _metrics(col: Collection, job: JobRecord, config: Config) -> None:
    """The job's GPU metrics from Prometheus (``metrics.url``), saved in the collection's private
    directory; a server that is down, slow or wrong becomes a coverage note, never an error."""
    settings = config.metrics
    if not settings.url or not job.nodes or job.start is None or job.end is None:
        return
    if col.tmpdir is None:
        col.tmpdir = Path(tempfile.mkdtemp(prefix="attribution-job-"))
    dest = col.tmpdir / "metrics"
    dest.mkdir(exist_ok=True)
    # from before the job: a counter's rise during it shows only against a value from before
    start = job.start - timedelta(seconds=max(config.window.before, settings.baseline))
    end = job.end + timedelta(seconds=config.window.after)
    got = fetch_metrics(settings, job.nodes, start, end, dest)
    col.specs.append(
        SourceSpec(
            stream=Stream.METRICS,
            node=None,
            paths=got.files,
            # metrics-0003.json holds the third query's answer (a failed query saves none)
            display=[f"{settings.url} (query {int(p.stem.rpartition('-')[2])})" for p in got.files],
            notes=got.problems,
            kind="metrics",
        )
    )


def ownership_facts(
    job: JobRecord,
    config: Config,
    backend: SlurmBackend,
    window: tuple[datetime | None, datetime | None],
) -> JobRecord:
    """The job record with what ownership needs that sacct/scontrol's record lacks: the other
    jobs on its nodes during ``window`` (one sacct call) and each node's GPU bus ids (site
    files). What cannot be had stays unknown; the verdict's coverage then says so."""
    changes: dict[str, Any] = {}
    start, end = window
    if job.other_jobs is None and start is not None and end is not None:
        try:
            changes["other_jobs"] = backend.other_jobs(job, start, end)
        except AttributionError as exc:
            log.warning("job %s: other jobs on its nodes unknown: %s", job.display_id, exc)
    if not job.gpu_bus_ids and (config.gpus.bus_ids or config.gpus.bus_id_files):
        bus_ids, notes = read_bus_ids(config, job.nodes)
        for note in notes:
            log.warning("job %s: GPU bus ids: %s", job.display_id, note)
        changes["gpu_bus_ids"] = bus_ids
    return dataclasses.replace(job, **changes) if changes else job


def read_bus_ids(
    config: Config, nodes: Sequence[str]
) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Each node's GPU PCI bus ids by minor number (``gpus.bus_ids``, ``gpus.bus_id_files``),
    and what could not be read. Never raises: a problem is a note, and that node has no map."""
    out: dict[str, tuple[str, ...]] = {}
    notes: list[str] = []
    wanted = set(nodes)
    if config.gpus.bus_ids is not None:
        try:
            data, _ = load_yaml_file(config.gpus.bus_ids)
            if not isinstance(data, dict):
                raise ValueError("must map host lists to lists of PCI bus ids")
            mapped = job_from_dict({"job_id": "0", "gpu_bus_ids": data}, str(config.gpus.bus_ids))
            out.update({n: b for n, b in mapped.gpu_bus_ids.items() if n in wanted})
        except (AttributionError, OSError, ValueError) as exc:
            notes.append(f"{config.gpus.bus_ids}: {exc}")
    for node in nodes:
        if node in out or not config.gpus.bus_id_files:
            continue
        for path in _matches(config.gpus.bus_id_files, {"node": node, "cluster": ""}):
            try:
                out[node] = parse_bus_id_lines(Path(path).read_text(errors="replace"))
                break
            except (OSError, ValueError) as exc:
                notes.append(f"{path}: {exc}")
    return out, notes


_BUS_ID_LINE = re.compile(r"^\s*(\d+)\s*[,;\s]\s*(?:PCI:)?([0-9A-Fa-f:.]+)\s*$")


def parse_bus_id_lines(text: str) -> tuple[str, ...]:
    """``minor, bus id`` lines (``nvidia-smi --query-gpu=index,pci.bus_id --format=csv`` or the
    collector in INSTALL.md) -> bus ids by minor number.

    Raises:
        ValueError: a line that is neither a header nor ``minor, bus id``, or a minor missing.
    """
    found: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(("#", "index", "minor")):
            continue
        m = _BUS_ID_LINE.match(line)
        if m is None or bus_key(m.group(2)) is None:
            raise ValueError(f"line {number}: not 'minor, PCI bus id': {line[:60]!r}")
        found[int(m.group(1))] = m.group(2)
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"minor numbers {sorted(found)} are not 0..{len(found) - 1}")
    return tuple(found[i] for i in range(len(found)))


__all__ = [
    "Collection",
    "Refused",
    "collect",
    "copy_job_output",
    "job_owner_uid",
    "ownership_facts",
    "parse_bus_id_lines",
    "read_bus_ids",
]
