"""``sattr bundle``: what the worker read for one job, written as an evidence bundle, and the
redaction of a bundle for a support ticket or a regression case.

A captured bundle holds the job record (``job.json`` with the ownership facts: ``exclusive``,
``gres_detail``, ``gpu_bus_ids``, ``other_jobs``), the job's output (read as its owner could),
every node log line of the job's read window (journals as ``journalctl -o json`` lines, which
keep the transport and uid that decide trust) and ``bundle.json`` (what wrote it and each
stream's trust at this site). ``sattr diagnose`` on it gives the verdict the worker gave.

Redaction replaces user names, host names, IPv4 addresses and the job's directories by
consistent stand-ins everywhere (file contents, ``job.json``, node directory names), so the
verdict on the redacted bundle is the same, with the stand-in names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from attribution import __version__
from attribution.analyze import AnalysisOptions, read_window
from attribution.collect import collect
from attribution.config import Config
from attribution.errors import AttributionError, BundleError, Location
from attribution.hostlist import short_name
from attribution.jobrecord import job_to_dict
from attribution.model import JOB_STREAMS, JobRecord, LogLine, Stream
from attribution.sources import ReadContext, SourceReader, SourceSpec
from attribution.sources.journal import journalctl
from attribution.sources.reader import open_log
from attribution.timeutil import zone

MANIFEST = "bundle.json"
NODE_FILE = {
    Stream.KERNEL: "kernel.log",
    Stream.SYSLOG: "syslog.log",
    Stream.FABRICMANAGER: "fabricmanager.log",
    Stream.DCGM: "dcgm.log",
    Stream.SLURMD: "slurmd.log",
}


@dataclass(slots=True)
class CaptureReport:
    """What ``capture`` wrote: files (relative paths) with their line counts, and notes."""

    path: Path
    files: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Writer:
    """Appends lines to files under the bundle root, counting them (files opened once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.counts: dict[str, int] = {}
        self._open: dict[str, Any] = {}

    def add(self, rel: str, line: str | bytes) -> None:
        handle = self._open.get(rel)
        if handle is None:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = self._open[rel] = path.open("ab")
        data = line if isinstance(line, bytes) else line.encode("utf-8", "surrogateescape")
        handle.write(data.rstrip(b"\n") + b"\n")
        self.counts[rel] = self.counts.get(rel, 0) + 1

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open.clear()


def _empty_dir(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BundleError(
            "exists and is not an empty directory; nothing written", Location(str(dest))
        )
    dest.mkdir(parents=True, exist_ok=True)


def capture(
    job: JobRecord, config: Config, dest: Path, *, options: AnalysisOptions | None = None
) -> CaptureReport:
    """Write what the worker reads for ``job`` as a bundle in ``dest`` (new or empty).

    Raises:
        BundleError: ``dest`` exists and is not empty, or cannot be written.
    """
    _empty_dir(dest)
    opts = options or AnalysisOptions(
        margin_before=config.window.before, margin_after=config.window.after
    )
    window = read_window(job, opts)
    ctx = ReadContext(
        tz=zone(job.timezone),
        reference=job.start or job.end,
        boot_times=dict(job.boot_times),
        job_nodes=job.nodes,
        window=window,
        seek_threshold=int(config.reading.seek_threshold),
        max_line=int(config.reading.max_line),
    )
    slack = timedelta(seconds=ctx.tolerance)
    lo = window[0] - slack if window[0] else None
    hi = window[1] + slack if window[1] else None
    report = CaptureReport(dest)
    out = _Writer(dest)
    try:
        with collect(job, config) as col:
            journals: set[tuple[tuple[str, ...], str | None]] = set()
            for spec in col.specs:
                if not spec.paths:
                    continue
                if spec.kind == "journal":
                    key = (tuple(map(str, spec.paths)), spec.node)
                    if key not in journals:
                        journals.add(key)
                        _export_journal(spec, job, lo, hi, out, report)
                elif spec.stream in JOB_STREAMS:
                    # the private copy collect() made, reading as the job's owner could
                    name = "stdout.log" if spec.stream is Stream.JOB_STDOUT else "stderr.log"
                    (dest / "job").mkdir(exist_ok=True)
                    shutil.copyfile(spec.paths[0], dest / "job" / name)
                    report.files[f"job/{name}"] = _count_lines(dest / "job" / name)
                else:
                    _copy_window(spec, job, ctx, lo, hi, out)
    finally:
        out.close()
    report.files.update(out.counts)
    record = job_to_dict(job)
    (dest / "job.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    manifest = {
        "created_by": f"sattr bundle {__version__}",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "job": job.display_id,
        "window": {
            "start": lo.isoformat().replace("+00:00", "Z") if lo else None,
            "end": hi.isoformat().replace("+00:00", "Z") if hi else None,
        },
        "redacted": False,
        # the site's trust of each stream read from files (journals carry their own)
        "trust": dict(config.logs.trust.model_dump()),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return report


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _in_window(when: datetime | None, lo: datetime | None, hi: datetime | None) -> bool:
    if when is None:
        return True  # untimed (a dmesg uptime stamp with no known boot): kept as read
    return (lo is None or when >= lo) and (hi is None or when <= hi)


def _copy_window(
    spec: SourceSpec,
    job: JobRecord,
    ctx: ReadContext,
    lo: datetime | None,
    hi: datetime | None,
    out: _Writer,
) -> None:
    """Every line of one node (or controller) log inside the window, as read. Of a node log
    also the last stamped line before the window and the first after it, per node: they show
    the log was recording around the job (which decides whether a line missing from it was
    there). Of the controller's log, only the lines naming this job or its nodes."""
    reader = SourceReader(spec, ctx)  # no selectors in ctx: every line
    if spec.stream is Stream.SLURMCTLD:
        ids = rf"(?:JobId|StepId|job)[= ]{re.escape(job.job_id)}(?!\d)"
        hosts = "|".join(re.escape(n) for n in job.nodes)
        mine = re.compile(ids + (rf"|(?<![\w-])(?:{hosts})(?![\w-])" if hosts else ""))
        for line in reader.lines():
            if _in_window(line.time, lo, hi) and mine.search(line.raw):
                out.add("slurmctld.log", line.raw)
        return
    nodes = set(job.nodes)
    before: dict[str | None, LogLine] = {}
    after: set[str | None] = set()
    for line in reader.lines():
        node = line.node or spec.node
        if line.time is not None and lo is not None and line.time < lo:
            before[node] = line  # the newest so far
            continue
        if line.time is not None and hi is not None and line.time > hi:
            if node in after:
                continue
            after.add(node)
        pending = before.pop(node, None)
        if pending is not None:
            _node_line(spec, pending, nodes, out)
        _node_line(spec, line, nodes, out)
    for line in before.values():  # a node with nothing in the window after it
        _node_line(spec, line, nodes, out)


def _node_line(spec: SourceSpec, line: LogLine, nodes: set[str], out: _Writer) -> None:
    node = line.node or spec.node
    if node is None or (nodes and node not in nodes):
        return
    out.add(f"nodes/{node}/{NODE_FILE[spec.stream]}", line.raw)


def _export_journal(
    spec: SourceSpec,
    job: JobRecord,
    lo: datetime | None,
    hi: datetime | None,
    out: _Writer,
    report: CaptureReport,
) -> None:
    """The window's entries of journal files, as ``journalctl -o json`` lines, per node, with
    the newest entry before the window and the first after it (they show the journal was
    recording)."""
    tool = journalctl()
    exported = all(p.suffix == ".jsonl" for p in spec.paths)
    if tool is None and not exported:
        report.notes.append(f"{spec.paths[0]}: journalctl is not installed; journal not saved")
        return
    nodes = set(job.nodes)
    for raw in _journal_lines(spec.paths, tool, lo, hi, exported):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        node = spec.node
        if node is None:
            node = short_name(str(entry.get("_HOSTNAME") or "")) if isinstance(entry, dict) else ""
            if not node or (nodes and node not in nodes):
                continue
        out.add(f"nodes/{node}/journal.jsonl", raw)


def _journal_lines(
    paths: list[Path], tool: str | None, lo: datetime | None, hi: datetime | None, exported: bool
) -> Iterator[bytes]:
    if exported:
        for path in paths:
            with path.open("rb") as handle:
                for raw in handle:
                    try:
                        stamp = int(json.loads(raw).get("__REALTIME_TIMESTAMP"))
                    except (ValueError, TypeError, AttributeError):
                        continue
                    when = datetime.fromtimestamp(stamp / 1e6, UTC)
                    if _in_window(when, lo, hi):
                        yield raw
        return
    assert tool is not None
    files = [f"--file={p}" for p in paths]
    base = [tool, "--no-pager", "-q", "-o", "json", *files]
    env = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
    runs: list[list[str]] = []
    if lo is not None:
        runs.append([*base, "--reverse", "-n", "1", f"--until=@{int(lo.timestamp())}"])
    window = [*base]
    if lo is not None:
        window.append(f"--since=@{int(lo.timestamp())}")
    if hi is not None:
        window.append(f"--until=@{int(hi.timestamp()) + 1}")
    runs.append(window)
    for argv in runs:
        yield from _output_lines(argv, env)
    if hi is not None:  # the first entry after the window: stop journalctl once it is read
        yield from _output_lines([*base, f"--since=@{int(hi.timestamp()) + 1}"], env, limit=1)


def _output_lines(
    argv: list[str], env: dict[str, str], limit: int | None = None
) -> Iterator[bytes]:
    """The non-empty lines a command prints, streamed (a journal window may be large); with
    ``limit``, the command is stopped after that many."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    count = 0
    try:
        for raw in proc.stdout:
            if raw.strip():
                yield raw.rstrip(b"\n")
                count += 1
                if limit is not None and count >= limit:
                    break
    finally:
        proc.kill()
        proc.stdout.close()
        proc.wait()


# --------------------------------------------------------------------------- redaction

_IPV4 = re.compile(
    r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?![\d.])"
)


@dataclass(slots=True)
class Redaction:
    """Consistent stand-ins: host, user, address and directory names, in a fixed order."""

    hosts: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    _pattern: re.Pattern[str] | None = None  # built when first needed, reset by ``host``

    def host(self, name: str) -> str:
        if name not in self.hosts:
            self.hosts[name] = f"node{len(self.hosts) + 1:03d}"
            self._pattern = None
        return self.hosts[name]

    def address(self, match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith(("0.", "127.", "255.")) or text == "0.0.0.0":
            return text  # not anybody's address
        if text not in self.addresses:
            n = len(self.addresses) + 1
            self.addresses[text] = f"10.254.{n // 250}.{n % 250 + 1}"
        return self.addresses[text]

    def _names(self) -> re.Pattern[str]:
        if self._pattern is None:
            words = {**self.users, **self.hosts}
            alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
            # a host name may carry a domain (gpu012.cluster.example.com): it goes too
            self._pattern = re.compile(
                rf"(?<![\w-])(?P<word>{alternatives})(?P<domain>(?:\.[A-Za-z][\w-]*)+)?(?![\w-])"
            )
        return self._pattern

    def text(self, value: str) -> str:
        for path, stand_in in sorted(self.paths.items(), key=lambda kv: -len(kv[0])):
            value = value.replace(path, stand_in)
        if self.hosts or self.users:

            def swap(m: re.Match[str]) -> str:
                word = m.group("word")
                if word in self.hosts:
                    return self.hosts[word]
                return self.users[word] + (m.group("domain") or "")

            value = self._names().sub(swap, value)
        return _IPV4.sub(self.address, value)

    def value(self, data: Any) -> Any:
        """A JSON value with every string (and mapping key) redacted."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, list):
            return [self.value(v) for v in data]
        if isinstance(data, dict):
            return {self.text(str(k)): self.value(v) for k, v in data.items()}
        return data


def redaction_for(record: Mapping[str, Any], node_dirs: Iterable[str] = ()) -> Redaction:
    """The stand-ins for one bundle: its nodes (job order first), its user, its directories."""
    from attribution.jobrecord import job_from_dict

    job = job_from_dict(record, "job.json")
    red = Redaction()
    for node in job.nodes:
        red.host(node)
    extra = [
        *job.gres_detail,
        *job.gpu_bus_ids,
        *job.node_addresses,
        *job.boot_times,
        *(job.other_jobs or {}),
        *([job.failed_node] if job.failed_node else []),
        *node_dirs,
    ]
    for node in sorted(set(extra) - set(job.nodes)):
        red.host(node)
    if job.user:
        red.users[job.user] = "user1"
    dirs = {os.path.dirname(p) for p in (job.std_out, job.std_err) if p}
    if job.work_dir:
        dirs.add(job.work_dir)
    for n, path in enumerate(sorted(d for d in dirs if d and d != "/"), 1):
        red.paths[path.rstrip("/")] = f"/redacted/dir{n}"
    return red


@dataclass(slots=True)
class RedactReport:
    path: Path
    redaction: Redaction
    files: int = 0


def redact_bundle(src: Path, dest: Path) -> RedactReport:
    """Write a redacted copy of the bundle ``src`` to ``dest`` (new or empty). Compressed logs
    are written decompressed; binary journal files cannot be redacted (save them as
    ``journalctl -o json`` lines, ``*.jsonl``, first).

    Raises:
        BundleError: ``src`` is not a bundle, holds a binary journal, or ``dest`` is not empty.
    """
    record_path = src / "job.json"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"not a bundle: {exc}", Location(str(record_path))) from None
    nodes_dir = src / "nodes"
    node_dirs = (
        sorted(p.name for p in nodes_dir.iterdir() if p.is_dir()) if nodes_dir.is_dir() else []
    )
    try:
        red = redaction_for(record, node_dirs)
    except AttributionError as exc:
        raise BundleError(str(exc), Location(str(record_path))) from None
    journals = [p for p in src.rglob("*.journal*") if p.is_file()]
    if journals:
        raise BundleError(
            "binary journal files cannot be redacted; save them with journalctl -o json as"
            " *.jsonl first",
            Location(str(journals[0])),
        )
    _empty_dir(dest)
    report = RedactReport(dest, red)
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(src)
        parts = list(rel.parts)
        if len(parts) >= 3 and parts[0] == "nodes":
            parts[1] = red.host(parts[1])
        name = parts[-1]
        for suffix in (".gz", ".zst", ".zstd"):
            if name.endswith(suffix):
                parts[-1] = name[: -len(suffix)]
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.as_posix() == "job.json":
            data: Any = _redacted_record(record, red)
            target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        elif rel.as_posix() == MANIFEST:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
            if isinstance(data, dict):
                data["redacted"] = True
            target.write_text(json.dumps(red.value(data), indent=2, ensure_ascii=False) + "\n")
        else:
            with open_log(path) as handle:
                text = handle.read().decode("utf-8", "surrogateescape")
            target.write_bytes(red.text(text).encode("utf-8", "surrogateescape"))
        report.files += 1
    return report


def _redacted_record(record: Mapping[str, Any], red: Redaction) -> dict[str, Any]:
    """``job.json`` with stand-ins: node lists expanded (a host list cannot be redacted as
    text), every other string through ``Redaction.text``."""
    from attribution.jobrecord import job_from_dict

    job = job_from_dict(record, "job.json")
    out = red.value(job_to_dict(job))
    out["nodes"] = [red.host(n) for n in job.nodes]
    return dict(out)


__all__ = [
    "CaptureReport",
    "RedactReport",
    "Redaction",
    "capture",
    "redact_bundle",
    "redaction_for",
]
