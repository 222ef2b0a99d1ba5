"""``sattr bundle``: what the worker read for one job, written as an evidence bundle, and the
redaction of a bundle for a support ticket or a regression case.

A captured bundle holds the job record (``job.json`` with the ownership facts: ``exclusive``,
``gres_detail``, ``gpu_bus_ids``, ``other_jobs``), the job's output (read as its owner could),
every node log line of the job's read window (journals as ``journalctl -o json`` lines, which
keep the transport and uid that decide trust) and ``bundle.json`` (what wrote it and each
stream's trust at this site). ``sattr diagnose`` on it gives the verdict the worker gave.

Redaction replaces user, host and cluster names, IPv4 and IPv6 addresses and the job's
directories by consistent stand-ins everywhere (file contents, file and node directory names,
``job.json``), so the verdict on the redacted bundle is the same, with the stand-in names. Both
write into a new directory beside the target and rename it at the end: a failure leaves
nothing behind.
"""

from __future__ import annotations

import bz2
import functools
import ipaddress
import json
import lzma
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from attribution import __version__
from attribution.analyze import AnalysisOptions, read_window
from attribution.bundle import contained, inside_bundle, read_job
from attribution.collect import collect, copy_tail
from attribution.config import Config
from attribution.errors import AttributionError, BundleError, Location, SourceError
from attribution.fleetfile import load_topology
from attribution.hostlist import compress, expand, short_name
from attribution.jobrecord import job_from_dict, job_to_dict
from attribution.model import (
    JOB_STREAMS,
    CoverageNote,
    EventRole,
    JobRecord,
    LogLine,
    Owner,
    Standing,
    Stream,
    SubDomain,
    TerminalState,
    Trust,
)
from attribution.sources.journal import journalctl, journalctl_window_lines
from attribution.sources.metrics import dump_bodies
from attribution.sources.reader import DECODE_ERRORS, open_log
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.streams import NODE_FILE_STREAMS, file_stem, job_stream_for
from attribution.sources.textlog import SourceReader
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


def capture(
    job: JobRecord, config: Config, dest: Path, *, options: AnalysisOptions | None = None
) -> CaptureReport:
    """Write what the worker reads for ``job`` as a bundle in ``dest`` (new or empty), all at
    once: on any error nothing is written. ``CaptureReport.files`` counts every file written
    (``job.json`` and ``bundle.json`` too) with its lines.

    Raises:
        BundleError: ``dest`` exists and is not empty, or cannot be written.
    """
    with _staged(dest) as stage:
        return _capture(job, config, stage, Path(dest), options)


def _capture(
    job: JobRecord, config: Config, stage: Path, dest: Path, options: AnalysisOptions | None
) -> CaptureReport:
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
    out = _Writer(stage)
    read: set[str] = set()
    kept_notes: list[CoverageNote] = []
    try:
        with collect(job, config) as col:
            journals: set[tuple[tuple[str, ...], str | None]] = set()
            for spec in col.specs:
                read.add(spec.stream.value)
                if spec.kind == "metrics":
                    _save_metrics(spec, stage, report)
                    kept_notes.extend(spec.notes)  # what the server did not give, for the replay
                    continue
                if not spec.paths:
                    continue
                if spec.kind == "journal":
                    key = (tuple(map(str, spec.paths)), spec.node)
                    if key not in journals:
                        journals.add(key)
                        _export_journal(spec, job, lo, hi, out, report)
                elif spec.stream in JOB_STREAMS:
                    # the descriptor collect() checked, reading as the job's owner could (its
                    # tail, when the site caps job output)
                    name = "stdout.log" if spec.stream is Stream.JOB_STDOUT else "stderr.log"
                    (stage / "job").mkdir(exist_ok=True)
                    fd = os.open(spec.paths[0], os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        copy_tail(fd, spec.max_bytes, stage / "job" / name)
                    finally:
                        os.close(fd)
                    report.files[f"job/{name}"] = _count_lines(stage / "job" / name)
                else:
                    _copy_window(spec, job, ctx, lo, hi, out)
    finally:
        out.close()
    report.files.update(out.counts)
    _save_topology(config, stage, report)
    record = job_to_dict(job)
    _save_json(stage / "job.json", record, report)
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
        # the streams the worker reads at this site: the others are not "missing" here
        "streams": sorted(read),
        # why the worker could not have some evidence (Prometheus down): the replay says so too
        "notes": {"metrics": [{"code": n.code, "args": dict(n.args)} for n in kept_notes]},
    }
    _save_json(stage / MANIFEST, manifest, report)
    return report


def _save_topology(config: Config, stage: Path, report: CaptureReport) -> None:
    """The site's failure domains (``fleet.topology``, ``fleet.groups``), so that the bundle's
    verdict names the same switch or block the worker's did."""
    for source, name in (
        (config.fleet.topology, "topology.conf"),
        (config.fleet.groups, "groups.yaml"),
    ):
        if source is None or not source.is_file():
            continue
        try:  # the worker leaves out a file it cannot parse; so does the bundle
            if name == "topology.conf":
                load_topology(source, None)
            else:
                load_topology(None, source)
        except AttributionError as exc:
            report.notes.append(f"{name} not saved: {exc}")
            continue
        shutil.copyfile(source, stage / name)
        report.files[name] = _count_lines(stage / name)


def _save_metrics(spec: SourceSpec, stage: Path, report: CaptureReport) -> None:
    """Prometheus's answers for the job (one per query) as the bundle's ``metrics.json``: one
    answer in the shape it came, several as a list (docs/bundles.md, "metrics.json")."""
    if not spec.paths:
        return
    bodies = [json.loads(path.read_bytes()) for path in spec.paths]
    with (stage / "metrics.json").open("w", encoding="utf-8") as handle:
        handle.write(dump_bodies(bodies).decode())
    report.files["metrics.json"] = 1


def _save_json(path: Path, data: Any, report: CaptureReport) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    report.files[path.name] = text.count("\n")


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
    yield from journalctl_window_lines(paths, tool, lo, hi)


# --------------------------------------------------------------------------- staging


@contextmanager
def _staged(dest: Path) -> Iterator[Path]:
    """A new directory beside ``dest`` to write into, renamed to ``dest`` (new or an empty
    directory) when the block ends; on any failure it is removed, with the parent directories
    made for it: nothing is left half-written.

    Raises:
        BundleError: ``dest`` exists and is not an empty directory, or cannot be written.
    """
    dest = Path(os.path.abspath(dest))
    refused = BundleError(
        "exists and is not an empty directory; nothing written", Location(str(dest))
    )
    try:
        if dest.is_symlink():
            raise BundleError(
                "is a symbolic link, not a new or empty directory; nothing written",
                Location(str(dest)),
            )
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise refused
    except OSError as exc:
        raise BundleError(
            f"cannot write: {exc.strerror or exc}; nothing written", Location(str(dest))
        ) from None
    made: list[Path] = []  # parent directories this made, outermost last
    parent = dest.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        made.append(parent)
        parent = parent.parent
    stage = dest.parent / f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
    try:
        for directory in reversed(made):
            directory.mkdir()
        stage.mkdir()
    except OSError as exc:
        _remove(None, made)
        raise BundleError(
            f"cannot write: {exc.strerror or exc}; nothing written", Location(str(dest))
        ) from None
    try:
        yield stage
        try:
            os.replace(stage, dest)  # over an empty directory too
        except OSError as exc:
            raise BundleError(
                f"cannot write: {exc.strerror or exc}; nothing written", Location(str(dest))
            ) from None
    except BaseException:
        _remove(stage, made)
        raise


def _remove(stage: Path | None, made: list[Path]) -> None:
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)
    for directory in made:  # innermost first
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            break


# --------------------------------------------------------------------------- redaction

# Words that must survive redaction because the logs, the rules or the bundle's own layout use
# them: a user or host with such a name keeps it (``redaction_for`` says so).
_LOG_WORDS_TEXT = """
kernel dmesg kern journal syslog messages fabricmanager nv fabric manager dcgm hostengine
nvidia smi slurmd slurmctld slurm slurmstepd srun sbatch salloc scontrol sacct job jobs step
stdout stderr out err log logs node nodes host hosts bundle expected history readme json
jsonl yaml gz zst zstd trust trusted untrusted redacted created window start end user users
uid gid root admin daemon nobody systemd localhost local gpu gpus cpu cpus cuda nccl nvrm
xid sxid python torch error errors warning warn info debug notice fatal failed fail failure
crit critical alert emerg cluster partition account state reason name
"""
_LOG_WORDS = frozenset(_LOG_WORDS_TEXT.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# a host name followed by one of these is a file name, not a domain: the suffix stays
_EXTENSIONS = re.compile(
    r"log|out|err|txt|gz|zst|zstd|bz2|xz|json|jsonl|journal|yaml|yml|py|sh|csv|pid|lock", re.I
)
_TOP_LEVEL = frozenset(
    {
        "job.json",
        MANIFEST,
        "expected.yaml",
        "history.yaml",
        "history.json",
        "README.md",
        "topology.conf",
        "groups.yaml",
        "metrics.json",
    }
)
_MAX_HOSTLIST = 4096  # names a host list in text may expand to and still be renamed one by one
_BLOCK = 1 << 20
_MAX_PENDING = 16 << 20  # a "line" longer than this is redacted in pieces
_READ_ERRORS = (*DECODE_ERRORS, lzma.LZMAError, SourceError)
_COMPRESSED_NAME = re.compile(r"\.(?:gz|zst|zstd)$", re.IGNORECASE)


@functools.cache
def log_words() -> frozenset[str]:
    """Lower-case words that logs, rules and bundles rely on: the fixed vocabulary above, every
    stream, trust, domain and state name, and the words of the shipped rules' patterns,
    literals, conditions and ids. A name that is one of them cannot be replaced without
    changing what the rules see."""
    words = set(_LOG_WORDS)
    for enum_type in (Stream, Trust, SubDomain, TerminalState, Owner, Standing, EventRole):
        for member in enum_type:
            words.update(w.lower() for w in _WORD.findall(str(member.value)))
    words.update(NODE_FILE_STREAMS)
    try:
        from attribution.rules.loader import load_ruleset

        rules = load_ruleset()
    except AttributionError:  # no rules to learn words from: the fixed vocabulary only
        return frozenset(words)
    texts: list[str] = []
    for extractor in rules.extractors:
        pattern = str(extractor.regex.pattern)
        pattern = re.sub(r"\[([A-Za-z])[A-Za-z]\]", r"\1", pattern)  # [Kk]ernel -> Kernel
        pattern = re.sub(r"\[(?:\\.|[^\]\\])*\]|\\[A-Za-z]|\(\?P?<[^>]*>", " ", pattern)
        texts.append(pattern)
        texts.extend(extractor.literals)
        dumped = extractor.rule.model_dump(mode="json", include={"match", "emit", "streams"})
        dumped.get("emit", {}).pop("label", None)
        texts.append(json.dumps(dumped))
    for rule in rules.all_rules():
        texts.append(rule.id)
        when = getattr(rule, "when", None)
        if when is not None:
            texts.append(json.dumps(when.model_dump(mode="json")))
    for text in texts:
        words.update(w.lower() for w in _WORD.findall(text))
    return frozenset(words)


def _ipv4(text: str) -> str | None:
    """Dotted IPv4 with its octets read as numbers (``010.001.000.012`` is ``10.1.0.12``)."""
    parts = [int(p) for p in re.split(r"[.-]", text)]
    return ".".join(map(str, parts)) if all(p <= 255 for p in parts) else None


_HEX4 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = (
    rf"(?:{_HEX4}:){{7}}{_HEX4}"
    rf"|(?:{_HEX4}(?::{_HEX4}){{0,6}})?::(?:{_HEX4}(?::{_HEX4}){{0,6}})?"
)
_PATH_CHARS = r"\w.~@+%-"


def _trie(words: Iterable[str]) -> str:
    """An alternation of ``words`` as a prefix tree (``gpu(?:01(?:1|2))``): it matches what
    the plain alternation longest first matches, in time that does not grow with the number
    of words."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(c) + emit(sub) for c, sub in sorted(node.items()) if c]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


@dataclass(slots=True)
class Redaction:
    """Consistent stand-ins: host, user, cluster, address and directory names.

    Names are matched in any letter case between characters that are not letters or digits
    (``gpu012-ib0``, ``slurm_gpu012``, ``GPU012``); directories only as whole path components;
    IPv4 also zero-padded or as ``ip-10-1-0-12``, IPv6 in any spelling; a bracketed host list
    (``gpu[011-013]``) when it names one of the bundle's hosts or uses a job node's prefix.
    ``kept`` holds the names left as they are, with the reason.
    """

    hosts: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    clusters: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    prefixes: set[str] = field(default_factory=set)  # job-node prefixes (``gpu``), lower case
    _names: dict[str, tuple[str, bool]] = field(default_factory=dict)  # lower -> (stand-in, host)
    _pattern: re.Pattern[str] | None = None  # rebuilt when a name was added
    _done: dict[tuple[str, bool], str] = field(default_factory=dict)  # text -> its stand-in

    # ------------------------------------------------------------------ the stand-ins

    def keep(self, name: str, why: str) -> None:
        """Leave ``name`` as it is (a word the logs use, a number)."""
        self.kept.setdefault(name, why)

    def host(self, name: str) -> str:
        return self._stand_in(name, self.hosts, "node{:03d}", host=True)

    def user(self, name: str) -> str:
        return self._stand_in(name, self.users, "user{}", host=False)

    def cluster(self, name: str) -> str:
        return self._stand_in(name, self.clusters, "cluster{}", host=False)

    def _stand_in(self, name: str, table: dict[str, str], form: str, *, host: bool) -> str:
        """The stand-in of ``name`` (any letter case), made from ``form`` and ``table``'s size
        the first time; a kept name stays as it is."""
        if name in self.kept:
            return name
        known = self._names.get(name.lower())
        if known is not None:
            return known[0]
        stand_in = table[name] = form.format(len(table) + 1)
        self._add(name, stand_in, host=host)
        return stand_in

    def _add(self, name: str, stand_in: str, *, host: bool) -> None:
        self._names[name.lower()] = (stand_in, host)
        self._pattern = None

    def _address(self, text: str, *, v6: bool = False) -> str:
        """The stand-in of an address, of the same kind: rules tell a link-local (``fe80::``)
        from an IPv4-mapped (``::ffff:a.b.c.d``) or another IPv6 address."""
        try:
            ip = ipaddress.ip_address(text) if v6 else ipaddress.IPv4Address(text)
        except ValueError:
            return text
        if ip.is_loopback or ip.is_unspecified or ip.is_multicast or str(ip).startswith("0."):
            return text  # not anybody's address
        if str(ip).startswith("255."):
            return text
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return "::ffff:" + self._address(str(ip.ipv4_mapped))
        key = str(ip)
        if key not in self.addresses:
            n = len(self.addresses) + 1
            if not v6:
                self.addresses[key] = f"10.254.{n // 250}.{n % 250 + 1}"
            elif ip.is_link_local:
                self.addresses[key] = f"fe80::{n:x}"
            elif ip.is_private:
                self.addresses[key] = f"fd00::{n:x}"
            else:
                self.addresses[key] = f"2001:db8::{n:x}"  # the documentation prefix
        return self.addresses[key]

    # ------------------------------------------------------------------ text

    def _regex(self) -> re.Pattern[str]:
        if self._pattern is None:
            parts = []
            if self.paths:
                alts = _trie(self.paths)
                parts.append(rf"(?<![/{_PATH_CHARS}])(?P<path>{alts})(?![{_PATH_CHARS}])")
            if self._names:
                parts.append(
                    r"(?<![\w-])(?P<hostlist>[A-Za-z][\w-]*\[[\d,-]+\](?:[\w-]*\[[\d,-]+\])*"
                    r"[\w-]*)"
                )
            parts += [
                rf"(?<![:.])(?P<v6>{_IPV6})(?![\w:]|\.\d)",
                r"(?i:ip)-(?P<dashed>\d{1,3}(?:-\d{1,3}){3})(?![^\W_]|-\d)",
                r"(?<!\.)(?P<v4>\d{1,3}(?:\.\d{1,3}){3})(?!\.?\d)",
            ]
            if self._names:
                alts = _trie(self._names)
                parts.append(rf"(?P<name>(?ai:{alts}))(?P<domain>(?:\.[A-Za-z][\w-]*)+)?(?![^\W_])")
            # nothing starts right after a letter or digit (one test rejects most positions),
            # but NCCL's "remoteGids" glued to its address
            self._pattern = re.compile(
                rf"(?<![^\W_])(?:{'|'.join(parts)})|(?<=Gids)(?P<gid>{_IPV6})(?![\w:]|\.\d)"
            )
        return self._pattern

    def text(self, value: str, *, file_name: bool = False) -> str:
        """``value`` with every known name, address and directory replaced. A host's domain
        goes with it (``gpu012.cluster.example`` -> ``node001``), except in a file name or
        before a file suffix (``gpu012.log``)."""
        return self._regex().sub(lambda m: self._swap(m, file_name), value)

    def _swap(self, m: re.Match[str], file_name: bool) -> str:
        kind = m.lastgroup or ""
        if kind == "hostlist":
            return self._hostlist(m)
        key = (m.group(0), file_name)
        done = self._done.get(key)
        if done is None:
            if len(self._done) > 100_000:
                self._done.clear()
            done = self._done[key] = self._replace(m, kind, file_name)
        return done

    def _replace(self, m: re.Match[str], kind: str, file_name: bool) -> str:
        if kind == "path":
            return self.paths[m.group("path")]
        if kind in ("v6", "gid"):
            v6 = m.group(kind)
            groups = [g for g in v6.split(":") if g]
            if len(groups) < 3 and all(len(g) < 4 for g in groups):
                return m.group(0)  # ``c::add``: a C++ name, not an address
            return self._address(v6, v6=True)
        if kind in ("dashed", "v4"):
            address = _ipv4(m.group(kind))
            if address is None or (stand_in := self._address(address)) == address:
                return m.group(0)
            return "ip-" + stand_in.replace(".", "-") if kind == "dashed" else stand_in
        known = self._names.get(m.group("name").lower())
        if known is None:
            return m.group(0)
        stand_in, host = known
        domain = m.group("domain") or ""
        suffix = domain[1:].split(".", 1)[0]
        if host and domain and not file_name and not _EXTENSIONS.fullmatch(suffix):
            domain = ""  # the site's domain goes with the host
        return stand_in + domain

    def _hostlist(self, m: re.Match[str]) -> str:
        """A bracketed host list: renamed node by node when it names one of the bundle's
        hosts or uses a job node's prefix, else only the names in it are redacted."""
        text = m.group("hostlist")
        prefix = text.split("[", 1)[0].lower()
        after = m.string[m.end() : m.end() + 1]
        ident = after == ":" and text.endswith("]") and re.fullmatch(r"[^\[]*\[\d+\]", text)
        try:
            names = expand(text)
        except AttributionError:
            names = ()
        known = [n for n in names if self._names.get(n.lower(), ("", False))[1]]
        # ``slurmd[1234]:`` is a program and its pid, not a host list
        if not known and (ident or prefix not in self.prefixes or not names):
            pieces = re.split(r"(\[[\d,-]+\])", text)  # the names around the brackets
            return "".join(p if p.startswith("[") else self.text(p) for p in pieces)
        if len(names) > _MAX_HOSTLIST:
            return "redacted-hostlist"
        return compress([self.host(n) for n in names])

    def value(self, data: Any) -> Any:
        """A JSON value with every string redacted (mapping keys are kept)."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, list):
            return [self.value(v) for v in data]
        if isinstance(data, dict):
            return {k: self.value(v) for k, v in data.items()}
        return data


def redaction_for(record: Mapping[str, Any], node_dirs: Iterable[str] = ()) -> Redaction:
    """The stand-ins for one bundle: its hosts (job order first), its users (the job's first,
    then the other jobs'), its cluster and its directories. A name that is also a word of the
    logs (``kernel``, ``gpu``, a stream or trust name, a word the rules match) or a number is
    kept, and ``Redaction.kept`` says why.

    Raises:
        BundleError: the record is not a valid job record.
    """
    job = job_from_dict(record, "job.json")
    words = log_words()
    red = Redaction()

    def usable(name: str, what: str) -> bool:
        why = None
        if name.lower() in words:
            why = f"not redacted: {what} {name!r} is also a word of the logs"
        elif name.isdecimal() or len(name) < 2:
            why = f"not redacted: {what} {name!r} is too short or a number to find safely"
        if why:
            red.keep(name, why)
        return why is None

    for node in job.nodes:
        if usable(node, "host"):
            red.host(node)
            stem = node.rstrip("0123456789").lower()
            if len(stem) >= 2 and stem != node.lower():
                red.prefixes.add(stem)
    extra = [
        *job.gres_detail,
        *job.gpu_bus_ids,
        *job.node_addresses,
        *job.boot_times,
        *(job.other_jobs or {}),
        *([job.failed_node] if job.failed_node else []),
        *(d for d in node_dirs if _NODE_NAME.fullmatch(d)),
    ]
    for node in sorted(set(extra) - set(job.nodes)):
        if usable(node, "host"):
            red.host(node)
    people = [job.user] if job.user else []
    if job.cancelled_by and not job.cancelled_by.isdecimal():
        people.append(job.cancelled_by)
    others = record.get("other_jobs")
    for entries in others.values() if isinstance(others, Mapping) else ():
        for entry in entries if isinstance(entries, list) else ():
            user = entry.get("user") if isinstance(entry, Mapping) else None
            if isinstance(user, str) and user.strip():
                people.append(user.strip())
    for name in dict.fromkeys(people):
        if usable(name, "user"):
            red.user(name)
    if job.cluster and usable(job.cluster, "cluster"):
        red.cluster(job.cluster)
    dirs = {os.path.dirname(p) for p in (job.std_out, job.std_err) if p}
    if job.work_dir:
        dirs.add(job.work_dir)
    # absolute ones only: a relative "run" would be every word "run" of the logs
    absolute = {d.rstrip("/") for d in dirs if d.startswith("/")} - {""}
    for n, path in enumerate(sorted(absolute), 1):
        red.paths[path] = f"/redacted/dir{n}"
    return red


@dataclass(slots=True)
class RedactReport:
    """What ``redact_bundle`` wrote: the stand-ins, the file count and notes (names kept,
    files left out)."""

    path: Path
    redaction: Redaction
    files: int = 0
    notes: list[str] = field(default_factory=list)


def _stderr_note(text: str) -> None:
    sys.stderr.write(f"sattr: note: {text}\n")


def redact_bundle(
    src: Path, dest: Path, *, note: Callable[[str], None] | None = _stderr_note
) -> RedactReport:
    """Write a redacted copy of the bundle ``src`` to ``dest`` (new or empty), all at once:
    on any error nothing is written. Every file is copied through the stand-ins, its name too;
    compressed logs (gzip, zstd) are written decompressed, UTF-16 as UTF-8, bzip2 and xz
    recompressed; ``*.jsonl`` journal exports entry by entry. Links to files inside the bundle
    are copied as files; links out of it are left out, as ``sattr diagnose`` leaves them.
    Binary journal files cannot be redacted (save them as ``journalctl -o json`` lines,
    ``*.jsonl``, first). ``note`` is told each name kept and each file left out.

    Raises:
        BundleError: ``src`` is not a usable bundle (the error ``sattr diagnose`` gives), holds
            a binary journal or a file that cannot be read to its end; ``dest`` is inside
            ``src``, not empty, or cannot be written.
    """
    src = Path(src)
    if not src.is_dir():
        raise BundleError("not a bundle directory", Location(str(src)))
    record_path = src / "job.json"
    job = read_job(contained(src, record_path))  # diagnose's checks and its errors
    contained(src, src / MANIFEST)  # what diagnose refuses to follow, this refuses too
    for name in ("history.yaml", "history.json"):
        if (src / name).is_file():
            contained(src, src / name)
    record = json.loads(record_path.read_text(encoding="utf-8-sig"))
    files, notes = _bundle_files(src)
    journals = [p for rel, p in files if rel[-1].endswith((".journal", ".journal~"))]
    if journals:
        raise BundleError(
            "binary journal files cannot be redacted; save them with journalctl -o json as"
            " *.jsonl first",
            Location(str(journals[0])),
        )
    try:
        inside = Path(os.path.abspath(dest)).resolve().is_relative_to(src.resolve())
    except (OSError, RuntimeError):
        inside = False
    if inside:
        raise BundleError(
            f"is inside the bundle {src} it would copy; write the copy elsewhere",
            Location(str(dest)),
        )
    node_dirs = [rel[1] for rel, _ in files if len(rel) >= 3 and rel[0] == "nodes"]
    red = redaction_for(record, dict.fromkeys(node_dirs))
    report = RedactReport(Path(dest), red)
    report.notes = [*red.kept.values(), *notes]
    with _staged(Path(dest)) as stage:
        used: set[tuple[str, ...]] = set()
        for rel, path in files:
            report.files += _redact_file(rel, path, stage, used, job, red)
    if note is not None:
        for text in report.notes:
            note(text)
    return report


def _bundle_files(root: Path) -> tuple[list[tuple[tuple[str, ...], Path]], list[str]]:
    """The regular files of a bundle (relative parts, path), through links that stay inside
    it, and notes on what is left out (links out of it, FIFOs, sockets).

    Raises:
        BundleError: a directory that cannot be listed.
    """
    files: list[tuple[tuple[str, ...], Path]] = []
    notes: list[str] = []

    def visit(directory: Path, parts: tuple[str, ...], seen: frozenset[Path]) -> None:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise BundleError(
                f"cannot list: {exc.strerror or exc}; nothing written", Location(str(directory))
            ) from None
        for name in names:
            path, rel = directory / name, (*parts, name)
            shown = "/".join(rel)
            if path.is_symlink() and not inside_bundle(root, path):
                notes.append(f"{shown}: a link out of the bundle, not copied")
                continue
            try:
                info = path.stat()
            except OSError as exc:
                notes.append(f"{shown}: {exc.strerror or exc}, not copied")
                continue
            if stat.S_ISDIR(info.st_mode):
                real = path.resolve()
                if real in seen:
                    notes.append(f"{shown}: a link loop, not copied")
                else:
                    visit(path, rel, seen | {real})
            elif stat.S_ISREG(info.st_mode):
                files.append((rel, path))
            else:
                notes.append(f"{shown}: not a regular file, not copied")

    visit(root, (), frozenset({root.resolve()}))
    return files, notes


def _target_name(
    rel: tuple[str, ...], red: Redaction, used: set[tuple[str, ...]], decoded: bool
) -> tuple[str, ...]:
    """Where a file goes in the copy: host and user names replaced in every part (a node
    directory by its host's stand-in), the compression suffix dropped from a decompressed
    file, the name still feeding the same stream; never a name taken already."""
    parts = list(rel)
    for i, part in enumerate(parts):
        if i == 0 and (part in _TOP_LEVEL or part in ("job", "nodes", "slurm")):
            continue
        if i == 1 and parts[0] == "nodes" and len(parts) > 2 and _NODE_NAME.fullmatch(part):
            parts[i] = red.host(part)
        else:
            parts[i] = red.text(part, file_name=True)
    name = parts[-1]
    if len(parts) == 2 and parts[0] == "job" and job_stream_for(rel[-1]) != job_stream_for(name):
        stem = file_stem(name)
        name = f"{stem}-stderr{name[len(stem) :]}"  # the replaced name said "err"
    stripped = _COMPRESSED_NAME.sub("", name) if decoded else name
    for candidate in (stripped, name):
        if (*parts[:-1], candidate) not in used:
            break
    else:
        stem = file_stem(name)
        n = 2
        while (*parts[:-1], candidate := f"{stem}-{n}{name[len(stem) :]}") in used:
            n += 1
    target = (*parts[:-1], candidate)
    used.add(target)
    return target


def _redact_file(
    rel: tuple[str, ...],
    path: Path,
    stage: Path,
    used: set[tuple[str, ...]],
    job: JobRecord,
    red: Redaction,
) -> int:
    """Write the redacted copy of one file under ``stage``; 1 when written.

    Raises:
        BundleError: the file cannot be read to its end, or the copy cannot be written.
    """
    if rel == ("job.json",):
        data: Any = _redacted_record(job, red)
        _write_json(stage / "job.json", data)
        return 1
    if rel == (MANIFEST,):
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            raise BundleError(f"cannot read: {why}; nothing written", Location(str(path))) from None
        if isinstance(data, dict):
            kept = {k: data.pop(k) for k in ("trust", "streams") if k in data}
            data = red.value(data)
            data["redacted"] = True
            data.update(kept)  # stream and trust names: the verdict depends on them
        else:
            data = red.value(data)
        _write_json(stage / MANIFEST, data)
        return 1
    with _open_source(path) as (handle, kind):
        decoded = kind in ("gzip", "zstd")
        target = stage.joinpath(*_target_name(rel, red, used, decoded))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if kind in ("bzip2", "xz"):
                opener: Any = bz2.open if kind == "bzip2" else lzma.open
                out = opener(target, "wb")
            else:
                out = target.open("wb")
        except OSError as exc:
            raise BundleError(
                f"cannot write: {exc.strerror or exc}", Location(str(target))
            ) from None
        jsonl = _COMPRESSED_NAME.sub("", rel[-1]).endswith(".jsonl")
        try:
            with out:
                for block in _blocks(handle, path):
                    text = block.decode("utf-8", "surrogateescape")
                    if jsonl:
                        lines = text.split("\n")
                        text = "\n".join(_journal_entry(line, red) for line in lines)
                    else:
                        text = red.text(text)
                    out.write(text.encode("utf-8", "surrogateescape"))
        except OSError as exc:
            raise BundleError(
                f"cannot write: {exc.strerror or exc}", Location(str(target))
            ) from None
    return 1


@contextmanager
def _open_source(path: Path) -> Iterator[tuple[Any, str]]:
    """A file of the bundle opened for reading its text, and how it is stored: ``plain``,
    ``gzip``, ``zstd``, ``UTF-16`` (read through ``open_log``), ``bzip2`` or ``xz``."""
    try:
        with path.open("rb") as probe:
            head = probe.read(6)
        if head.startswith(b"BZh"):
            handle: Any = bz2.open(path, "rb")  # noqa: SIM115 (closed below)
            kind = "bzip2"
        elif head.startswith(b"\xfd7zXZ\x00"):
            handle = lzma.open(path, "rb")  # noqa: SIM115 (closed below)
            kind = "xz"
        else:
            handle = open_log(path)
            kind = getattr(handle, "kind", "plain")
    except (OSError, SourceError) as exc:
        why = exc.message if isinstance(exc, SourceError) else f"cannot open: {exc.strerror}"
        raise BundleError(f"{why}; nothing written", Location(str(path))) from None
    with handle:
        yield handle, kind


def _blocks(handle: Any, path: Path) -> Iterator[bytes]:
    """The file's text in blocks of whole lines (about 1 MiB each), read to its end.

    Raises:
        BundleError: the file cannot be read to its end (a damaged or truncated stream).
    """
    pending = b""
    while True:
        try:
            data = handle.read(_BLOCK)
        except _READ_ERRORS as exc:
            why = exc.message if isinstance(exc, AttributionError) else str(exc) or repr(exc)
            raise BundleError(
                f"cannot be read to its end: {why}; nothing written", Location(str(path))
            ) from None
        if not data:
            break
        pending += data
        cut = pending.rfind(b"\n") + 1
        if not cut and len(pending) < _MAX_PENDING:
            continue
        cut = cut or len(pending)
        yield pending[:cut]
        pending = pending[cut:]
    if pending:
        yield pending


def _journal_entry(line: str, red: Redaction) -> str:
    """One line of a ``journalctl -o json`` export, redacted field by field (escapes decoded;
    a MESSAGE journalctl gave as a list of byte values stays one, its bytes redacted)."""
    body = line.rstrip("\r")
    try:
        entry = json.loads(body)
    except ValueError:
        return red.text(line)
    if not isinstance(entry, dict):
        return red.text(line)
    out = {key: _journal_value(value, red) for key, value in entry.items()}
    try:
        text = json.dumps(out, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (``\ud800``) stays an escape
        text = json.dumps(out)
    return text + line[len(body) :]


def _journal_value(value: Any, red: Redaction) -> Any:
    if isinstance(value, str):
        return red.text(value)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value)
    ):
        text = bytes(value).decode("utf-8", "surrogateescape")
        return list(red.text(text).encode("utf-8", "surrogateescape"))
    if isinstance(value, list):
        return [_journal_value(v, red) for v in value]
    return value


def _write_json(path: Path, data: Any) -> None:
    try:
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"cannot write: {exc.strerror or exc}", Location(str(path))) from None


def _redacted_record(job: JobRecord, red: Redaction) -> dict[str, Any]:
    """``job.json`` with stand-ins, field by field: host names (node lists, per-node keys),
    the user, the cluster, directories and addresses replaced, free text (job name, account,
    reason, comment) redacted; ids, times, states and GPU facts kept as they are."""
    out = job_to_dict(job)
    out["nodes"] = [red.host(n) for n in job.nodes]
    if job.user:
        out["user"] = red.user(job.user)
    if job.cluster:
        out["cluster"] = red.cluster(job.cluster)
    if job.state and job.cancelled_by:
        out["state"] = f"{job.state} by {red.text(job.cancelled_by)}"
    if job.failed_node:
        out["failed_node"] = red.host(job.failed_node)
    for key in ("name", "account", "partition", "reason", "admin_comment"):
        if isinstance(out.get(key), str):
            out[key] = red.text(out[key])
    for key in ("work_dir", "std_out", "std_err"):
        if isinstance(out.get(key), str):
            out[key] = red.text(out[key])
    for key in ("gres_detail", "gpu_bus_ids", "boot_times", "other_jobs"):
        if isinstance(out.get(key), dict):
            out[key] = {red.host(k): v for k, v in out[key].items()}
    if isinstance(out.get("node_addresses"), dict):
        out["node_addresses"] = {
            red.host(k): red.value(v) for k, v in out["node_addresses"].items()
        }
    return out


__all__ = [
    "CaptureReport",
    "RedactReport",
    "Redaction",
    "capture",
    "log_words",
    "redact_bundle",
    "redaction_for",
]
