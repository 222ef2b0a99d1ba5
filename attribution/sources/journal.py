"""Read systemd journal files (``*.journal``) through ``journalctl`` into ``LogLine``s.

The journal records who wrote each entry, in fields the writer cannot set: ``_TRANSPORT``
(``kernel`` only for what journald read from the kernel's ring buffer), ``_UID``, ``_PID``.
So one journal feeds two streams:

- ``kernel``: entries of the kernel transport. Trusted: ``logger -t kernel`` and every other
  user-space write arrive by another transport (docs/verdict.md, "Ownership and trust").
- ``syslog``: every other entry. A line is trusted when root's process wrote it (``_UID=0``);
  a user's line never is, whatever program name it claims.

Files are read with ``journalctl --file ... -o json`` (systemd 236+), only over the job's read
window; ``journalctl`` also tells when the files were recording (their entries just before the
window and their last entry), which lets the diagnosis say that a kernel line a user wrote to
syslog is absent from the kernel's own record. Works on live journals, rotated ones and the
files ``systemd-journal-remote`` writes per host. A file that is not a journal (``*.jsonl``:
what ``journalctl -o json`` printed, as ``sattr bundle`` saves it) is read directly, with the
same fields and the same trust.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from attribution.hostlist import short_name
from attribution.model import (
    Coverage,
    CoverageNote,
    CoverageStatus,
    LogLine,
    OutputSilence,
    SourceRef,
    Stream,
    Trust,
)
from attribution.sources.coverage import MAX_NOTES, Span
from attribution.sources.specs import EveryLine, ReadContext, SourceSpec

KERNEL_MATCH = ("_TRANSPORT=kernel",)
# every transport but the kernel's (journalctl ORs matches of one field)
OTHER_MATCH = tuple(f"_TRANSPORT={t}" for t in ("syslog", "journal", "stdout", "audit", "driver"))
FIELDS = "MESSAGE,_TRANSPORT,SYSLOG_IDENTIFIER,_COMM,_HOSTNAME,_UID,_PID"
TIMEOUT = 300.0  # seconds one journalctl run may take


def journalctl() -> str | None:
    return shutil.which("journalctl")


def _when(entry: dict[str, object]) -> datetime | None:
    value = entry.get("__REALTIME_TIMESTAMP")
    try:
        return datetime.fromtimestamp(int(str(value)) / 1e6, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _text(value: object, limit: int) -> str:
    """MESSAGE as text: journalctl prints non-UTF-8 messages as a list of byte values."""
    if isinstance(value, list):
        try:
            data = bytes(int(b) & 0xFF for b in value[:limit])
        except (TypeError, ValueError):
            return ""
        return data.decode("utf-8", "replace")
    return str(value if value is not None else "")[:limit]


def _pid(value: object) -> int | None:
    text = str(value if value is not None else "")
    return int(text) if text.isdecimal() and len(text) <= 10 else None


def _exported_file(path: Path) -> bool:
    """A saved ``journalctl -o json`` export rather than a binary journal file."""
    return path.suffix in (".jsonl", ".json")


class JournalReader:
    """One journal source (``SourceSpec`` with ``kind == "journal"``): its lines and coverage.

    ``spec.stream`` picks the entries: ``kernel`` the kernel transport, ``syslog`` the others.
    ``spec.node`` None reads a journal of many hosts: entries go to the job node their
    ``_HOSTNAME`` names, and coverage has one entry per job node seen.
    """

    def __init__(self, spec: SourceSpec, ctx: ReadContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.lines_read = 0
        self.bytes_read = 0
        self.per_node: dict[str | None, int] = {}
        self.errors: list[CoverageNote] = []
        self.silences: list[OutputSilence] = []  # job output files only
        self.notes: list[CoverageNote] = list(spec.notes)
        self.unreadable: list[CoverageNote] = [spec.problem] if spec.problem else []
        self.span = Span()  # when the files were recording

    def _names(self) -> list[str]:
        if len(self.spec.display) == len(self.spec.paths):
            return self.spec.display
        return [str(p) for p in self.spec.paths]

    def _binary(self) -> list[Path]:
        return [p for p in self.spec.paths if not _exported_file(p)]

    def _argv(self, tool: str, *extra: str) -> list[str]:
        # --all: without it journalctl -o json prints fields over 4096 bytes as null
        argv = [tool, "--no-pager", "-q", "--all", "-o", "json"]
        argv += [f"--file={p}" for p in self._binary()]
        return [*argv, *extra]

    def _run(self, argv: list[str]) -> Iterator[dict[str, object]]:
        """The entries one journalctl run prints; failures go to ``errors``."""
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env={"LC_ALL": "C", "PATH": "/usr/bin:/bin", "SYSTEMD_COLORS": "0"},
            )
        except OSError as exc:
            self.unreadable.append(
                CoverageNote("journalctl_failed", {"error": str(exc.strerror or exc)})
            )
            return
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            for raw in proc.stdout:
                self.bytes_read += len(raw)
                try:
                    entry = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(entry, dict):
                    yield entry
        finally:
            proc.stdout.close()
            try:
                err = proc.stderr.read().decode("utf-8", "replace")
                rc = proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc, err = -9, "journalctl took too long"
            proc.stderr.close()
        if rc != 0:
            last = err.strip().splitlines()[-1] if err.strip() else f"exit code {rc}"
            self.errors.append(CoverageNote("journalctl_error", {"error": last}))

    def _recording_span(self, tool: str, start: datetime | None) -> None:
        """When the files were recording: an entry (of any kind) at or before ``start``, and
        the last entry of all."""
        for entry in self._run(self._argv(tool, "-n", "1", "--output-fields=_HOSTNAME")):
            self.span.add(_when(entry))
        if start is not None:
            # the newest entry up to the start (``-n`` alone ignores --until in systemd 252)
            until = f"--until=@{int(start.timestamp())}"
            args = ("--reverse", "-n", "1", until, "--output-fields=_UID")
            for entry in self._run(self._argv(tool, *args)):
                self.span.add(_when(entry))

    def _exported(
        self, kernel: bool, start: datetime | None, end: datetime | None
    ) -> Iterator[dict[str, object]]:
        """Entries of ``journalctl -o json`` output saved in files (a bundle's ``*.jsonl``):
        the same selection as the journalctl run, and the recording span from every entry."""
        for path in self.spec.paths:
            if not _exported_file(path):
                continue
            try:
                handle = path.open("rb")
            except OSError as exc:
                self.unreadable.append(
                    CoverageNote(
                        "unreadable", {"file": path.name, "error": str(exc.strerror or exc)}
                    )
                )
                continue
            with handle:
                for number, raw in enumerate(handle, 1):
                    self.bytes_read += len(raw)
                    try:
                        entry = json.loads(raw)
                    except (ValueError, RecursionError):
                        self.notes.append(
                            CoverageNote("not_journal_entry", {"file": path.name, "line": number})
                        )
                        continue
                    if not isinstance(entry, dict):
                        continue
                    when = _when(entry)
                    self.span.add(when)
                    if (entry.get("_TRANSPORT") == "kernel") is not kernel:
                        continue
                    if when is not None and (
                        (start is not None and when < start) or (end is not None and when > end)
                    ):
                        continue
                    yield entry

    def lines(self) -> Iterator[LogLine]:
        if not self.spec.paths or self.unreadable:
            return
        kernel = self.spec.stream is Stream.KERNEL
        binary = bool(self._binary())
        tool = journalctl()
        if tool is None and binary:
            self.unreadable.append(CoverageNote("journalctl_missing"))
            return
        args = list(KERNEL_MATCH if kernel else OTHER_MATCH)
        start = end = None
        if self.ctx.window is not None:
            slack = timedelta(seconds=self.ctx.tolerance)
            start = self.ctx.window[0] - slack if self.ctx.window[0] else None
            end = self.ctx.window[1] + slack if self.ctx.window[1] else None
            if start is not None:
                args.append(f"--since=@{int(start.timestamp())}")
            if end is not None:
                args.append(f"--until=@{int(end.timestamp()) + 1}")
        entries: Iterator[dict[str, object]] = self._exported(kernel, start, end)
        if binary:
            assert tool is not None
            argv = self._argv(tool, f"--output-fields={FIELDS}", *args)
            entries = itertools.chain(entries, self._run(argv))
        selector = self.ctx.selectors.get(self.spec.stream) or EveryLine()
        follow = self.ctx.follow.get(self.spec.stream, 0)
        nodes = self.ctx.node_set
        shown = ", ".join(self._names())
        owed = 0
        index = 0
        for entry in entries:
            index += 1
            when = _when(entry)
            self.span.add(when)
            host = str(entry.get("_HOSTNAME") or "")
            node = self.spec.node
            if node is None:
                name = short_name(host) if host else ""
                if nodes and name not in nodes:
                    continue
                node = name or None
            self.lines_read += 1
            self.per_node[node] = self.per_node.get(node, 0) + 1
            text = _text(entry.get("MESSAGE"), self.ctx.max_line)
            hit = bool(selector.line_starts(text.encode("utf-8", "replace")))
            if hit:
                owed = follow
            elif owed > 0:
                owed -= 1
            else:
                continue
            ident: str | None = "kernel"
            if not kernel:
                ident = str(entry.get("SYSLOG_IDENTIFIER") or "") or None
            if ident is None and entry.get("_COMM"):
                ident = str(entry["_COMM"])
            trusted = kernel or str(entry.get("_UID")) == "0"
            stamp = when.isoformat() if when else "-"
            yield LogLine(
                stream=self.spec.stream,
                node=node,
                text=text,
                raw=f"{stamp} {host or node or '-'} {ident or '-'}: {text}",
                source=SourceRef(shown, index),
                time=when,
                host=host or None,
                pid=_pid(entry.get("_PID")),
                ident=ident,
                trusted=trusted,
            )
        if binary:
            assert tool is not None
            self._recording_span(tool, start)

    def coverages(self) -> list[Coverage]:
        """One entry, or one per job node for a journal of many hosts."""
        reasons = self.notes[:MAX_NOTES]
        if self.spec.stream is Stream.SYSLOG:
            reasons.append(CoverageNote("journal_mixed_trust"))
        if self.unreadable:
            status = (
                CoverageStatus.UNREADABLE
                if not self.spec.paths or not self.lines_read
                else (CoverageStatus.ERROR)
            )
            reasons[:0] = self.unreadable
        elif not self.spec.paths:
            status = CoverageStatus.MISSING
            reasons.insert(0, CoverageNote("no_file"))
        elif self.errors:
            status = CoverageStatus.ERROR
            reasons[:0] = self.errors
        elif self.lines_read == 0:
            status = CoverageStatus.EMPTY
            reasons.insert(0, CoverageNote("no_entries"))
        else:
            status = CoverageStatus.OK
        trust = Trust.TRUSTED if self.spec.stream is Stream.KERNEL else Trust.UNTRUSTED
        nodes: list[str | None] = [self.spec.node]
        if self.spec.node is None and self.per_node:
            nodes = sorted(self.per_node, key=lambda n: n or "")
        return [
            Coverage(
                stream=self.spec.stream,
                node=node,
                status=status
                if node is None or self.per_node.get(node) or status is not CoverageStatus.OK
                else CoverageStatus.EMPTY,
                files=tuple(self._names()),
                bytes=self.bytes_read if len(nodes) == 1 else 0,
                lines=self.per_node.get(node, self.lines_read if len(nodes) == 1 else 0),
                notes=tuple(reasons),
                trust=trust,
                first_at=self.span.first,
                last_at=self.span.last,
            )
            for node in nodes
        ]

    def coverage(self) -> Coverage:
        return self.coverages()[0]


def is_journal_file(name: str) -> bool:
    """A systemd journal file (``system.journal``, ``remote-gpu012.journal``, a rotated
    ``...journal~``) or a saved ``journalctl -o json`` export (``*.jsonl``)."""
    return name.endswith((".journal", ".journal~", ".jsonl"))


def journal_specs(
    paths: list[Path], node: str | None, display: list[str] | None = None
) -> list[SourceSpec]:
    """The two sources (kernel transport, the rest) of one set of journal files."""
    return [
        SourceSpec(
            stream=stream,
            node=node,
            paths=list(paths),
            display=list(display or [str(p) for p in paths]),
            kind="journal",
            trust=Trust.TRUSTED if stream is Stream.KERNEL else Trust.UNTRUSTED,
        )
        for stream in (Stream.KERNEL, Stream.SYSLOG)
    ]


__all__ = ["JournalReader", "is_journal_file", "journal_specs", "journalctl"]


def journalctl_window_lines(
    paths: list[Path], tool: str, lo: datetime | None, hi: datetime | None
) -> Iterator[bytes]:
    """The JSON entries (one per line, as journalctl prints them) of binary journal files
    around a window: the last entry before ``lo``, every entry from ``lo`` to ``hi``, and the
    first entry after ``hi`` (so a reader can tell the journal kept recording past the job).
    ``sattr capture`` copies these into a bundle."""
    files = [f"--file={p}" for p in paths]
    base = [tool, "--no-pager", "-q", "--all", "-o", "json", *files]
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
        yield from _command_lines(argv, env)
    if hi is not None:  # the first entry after the window: stop journalctl once it is read
        yield from _command_lines([*base, f"--since=@{int(hi.timestamp()) + 1}"], env, limit=1)


def _command_lines(
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
