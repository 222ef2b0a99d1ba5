"""Find the lines worth parsing: one multi-pattern scan of every extractor literal over big buffers.

Extraction only ever looks at a line if one of an extractor's ``contains``
literals occurs in it, so a reader can skip every other line without parsing
it. ``LiteralScanner`` compiles all literals of a stream into one database
and reports which lines of a buffer hold a match:

* ``hyperscan`` (Intel's regex engine, PyPI ``hyperscan``) when its wheel is
  installed: several GB/s;
* ``re2`` (Google RE2, PyPI ``google-re2``) when installed;
* ``python``: the standard library's ``re`` over the whole buffer, always
  available.

All engines report the same lines (a test compares them); the choice only
changes speed. Matching is on raw bytes, so it may report a few extra lines
(a literal inside a prefix); extraction re-checks every reported line, which
keeps the result exact.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from attribution.model import JobRecord, Stream
from attribution.rules.compiled import RuleSet
from attribution.sources.specs import ReadContext
from attribution.timeutil import zone

ENGINES = ("hyperscan", "re2", "python")


@dataclass(frozen=True, slots=True)
class Literal:
    """One pre-filter literal: its bytes and whether it matches case-insensitively."""

    text: bytes
    caseless: bool = False


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """A regex matching any of ``words``, with shared prefixes factored out."""
    root: dict[int | None, Any] = {}
    for word in words:
        node = root
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = True

    def emit(node: dict[int | None, Any]) -> bytes:
        branches = [
            re.escape(bytes([key])) + emit(child)
            for key, child in sorted((k, v) for k, v in node.items() if k is not None)
        ]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return emit(root)


def _no_hits(data: bytes, stop: int | None = None) -> list[int]:
    return []


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def available_engines() -> list[str]:
    """Engines that can be used on this machine, fastest first."""
    return [e for e in ENGINES if e == "python" or _importable(_MODULES[e])]


_MODULES = {"hyperscan": "hyperscan", "re2": "re2"}


def choose_engine(requested: str | None = None) -> str:
    """``requested`` if available, else the fastest available engine.

    ``ATTRIBUTION_SCAN_ENGINE`` overrides the default (``auto``).
    """
    wanted = requested or os.environ.get("ATTRIBUTION_SCAN_ENGINE") or "auto"
    if wanted != "auto" and wanted not in ENGINES:
        raise ValueError(f"unknown scan engine {wanted!r}; use one of {', '.join(ENGINES)} or auto")
    if wanted != "auto" and (wanted == "python" or _importable(_MODULES[wanted])):
        return wanted
    # the fastest that imports (no import of a slower one when a faster one is there)
    return next(e for e in ENGINES if e == "python" or _importable(_MODULES[e]))


def _compile_hyperscan(literals: list[Literal]) -> Any:
    """A block-mode hyperscan database of ``literals`` (sorted as ``LiteralScanner`` sorts
    them: the id of a pattern is its index)."""
    import hyperscan

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=[re.escape(lit.text) for lit in literals],
        ids=list(range(len(literals))),
        elements=len(literals),
        flags=[hyperscan.HS_FLAG_CASELESS if lit.caseless else 0 for lit in literals],
    )
    return db


# --------------------------------------------------------------------- compiled databases on disk

# A reading plan compiles one hyperscan database per distinct literal set (about 30 ms of CPU for
# the shipped rules), at every CLI start. ``_Databases`` keeps them in the user's cache directory
# (``attribution.usercache``: same place, same ownership and permission checks, same
# ATTRIBUTION_RULES_CACHE switch) in one file per ruleset digest: an entry per literal set, keyed
# by the set's SHA-256, under a header keyed by the file format, attribution's version, this
# module's size and mtime, the hyperscan binding's version and the machine. Entries are loaded
# (``hyperscan.loadb``, which checks hyperscan's own version and the CPU features) only when a
# scanner of theirs first searches; any problem means compiling, as without a cache.

_DB_FORMAT = 1
_DB_MAGIC = b"attribution-scan-databases\n"
_DB_KEEP = 8  # database files kept per user (one per ruleset digest; the oldest go first)


def _literal_key(literals: list[Literal]) -> bytes:
    import hashlib

    digest = hashlib.sha256()
    for lit in literals:
        digest.update(b"%d %d " % (len(lit.text), lit.caseless) + lit.text)
    return digest.digest()


def _databases_key() -> str:
    import hashlib

    import hyperscan

    from attribution import __version__

    st = os.stat(__file__)
    return hashlib.sha256(
        f"format {_DB_FORMAT}\0attribution {__version__}\0scan {st.st_size} {st.st_mtime_ns}"
        f"\0hyperscan {getattr(hyperscan, '__version__', '?')}\0{os.uname().machine}".encode()
    ).hexdigest()


def _pack(entries: dict[bytes, bytes]) -> bytes:
    out = bytearray()
    for key, blob in sorted(entries.items()):
        out += key + len(blob).to_bytes(8, "little") + blob
    return bytes(out)


def _unpack(payload: memoryview) -> dict[bytes, bytes]:
    entries: dict[bytes, bytes] = {}
    at = 0
    while at < len(payload):
        key = bytes(payload[at : at + 32])
        size = int.from_bytes(payload[at + 32 : at + 40], "little")
        blob = bytes(payload[at + 40 : at + 40 + size])
        if len(key) != 32 or len(blob) != size:
            raise ValueError("truncated database entry")
        entries[key] = blob
        at += 40 + size
    return entries


class _Databases:
    """The hyperscan databases of one reading plan: from the user's cache file when it holds
    them, else compiled; a first miss compiles every database of the plan not in the file
    (``want``) and saves them all, so one cold run fills the file."""

    def __init__(self, digest: str) -> None:
        self.name = f"scan-{digest[:24]}.hsdb"
        self._wanted: dict[bytes, list[Literal]] = {}
        self._stored: dict[bytes, bytes] | None = None  # serialized, from the file
        self._made: dict[bytes, Any] = {}  # loaded or compiled
        self._lock = threading.Lock()

    def want(self, literals: list[Literal]) -> None:
        self._wanted.setdefault(_literal_key(literals), literals)

    def get(self, literals: list[Literal]) -> Any:
        key = _literal_key(literals)
        with self._lock:
            if key not in self._made:
                self._wanted.setdefault(key, literals)
                db = self._load(key)
                if db is not None:
                    self._made[key] = db
                elif self._stored is None:  # no cache: compile only what is searched with
                    self._made[key] = _compile_hyperscan(literals)
                else:
                    self._compile_missing()
            return self._made[key]

    def _load(self, key: bytes) -> Any:
        import hyperscan

        from attribution import usercache as cache

        directory = cache.cache_dir()
        if directory is None:
            return None  # the cache is off (ATTRIBUTION_RULES_CACHE=0)
        if self._stored is None:  # the first database asked for: read the file
            self._stored = {}
            try:
                payload = cache.read_owned(directory, self.name, _databases_key(), _DB_MAGIC)
                self._stored = _unpack(payload) if payload is not None else {}
            except FileNotFoundError:
                pass
            except Exception as exc:  # a cache problem is never the command's problem
                cache.debug(f"{directory / self.name}: not used: {type(exc).__name__}: {exc}")
        blob = self._stored.get(key)
        if blob is None:
            return None
        try:
            return hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
        except Exception as exc:  # another hyperscan library or CPU: compile
            cache.debug(f"{self.name}: a database not used: {type(exc).__name__}: {exc}")
            del self._stored[key]
            return None

    def _compile_missing(self) -> None:
        import hyperscan

        from attribution import usercache as cache

        for key, literals in self._wanted.items():
            if key not in self._made:
                blob = self._stored.get(key) if self._stored else None
                db = self._load(key) if blob is not None else None
                self._made[key] = db if db is not None else _compile_hyperscan(literals)
        directory = cache.cache_dir()
        if directory is None:
            return
        try:
            entries = {key: hyperscan.dumpb(self._made[key]) for key in self._wanted}
            cache.write_owned(directory, self.name, _databases_key(), _pack(entries), _DB_MAGIC)
            self._stored = entries
            _prune(directory)
        except Exception as exc:
            cache.debug(f"{directory / self.name}: not saved: {type(exc).__name__}: {exc}")


def _prune(directory: Path) -> None:
    """Keep the ``_DB_KEEP`` newest database files (one per ruleset a user ran)."""
    found = []
    for path in directory.glob("scan-*.hsdb"):
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime_ns, path))
    for _, path in sorted(found, reverse=True)[_DB_KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()


class LiteralScanner:
    """Reports the line-start offsets of every line of a buffer that contains a literal.

    Args:
        literals: the literals to look for (deduplicated).
        engine: ``hyperscan``, ``re2``, ``python`` or ``None`` for the fastest available.
    """

    def __init__(
        self,
        literals: Iterable[Literal],
        engine: str | None = None,
        *,
        databases: _Databases | None = None,
    ) -> None:
        self.literals = sorted(
            set(literals), key=lambda lit: (-len(lit.text), lit.text, lit.caseless)
        )
        self.engine = choose_engine(engine)
        # built at the first search (``_build``): a plan holds scanners for every stream, and a
        # run reads only some of them
        self._databases = databases if self.engine == "hyperscan" else None
        if self._databases is not None and self.literals:
            self._databases.want(self.literals)
        self._lock = threading.Lock()

    def _find(self, data: bytes, stop: int | None = None) -> list[int]:
        """The match ends in ``data`` (``stop``: up to the ``stop``-th line that hits); the
        first call builds the engine's matcher, which then replaces this method."""
        with self._lock:
            if "_find" not in self.__dict__:
                self._find = self._build()  # type: ignore[method-assign,assignment]
        return self._find(data, stop)

    def _build(self) -> Callable[[bytes, int | None], list[int]]:
        if not self.literals:
            return _no_hits
        if self.engine == "hyperscan":
            return self._hyperscan()
        if self.engine == "re2":
            return self._regex(__import__("re2"))
        return self._regex(re)

    def _pattern(self) -> bytes:
        """One regex for all literals, factored as a trie (several times faster for ``re``)."""
        exact = [lit.text for lit in self.literals if not lit.caseless]
        folded = [lit.text.lower() for lit in self.literals if lit.caseless]
        parts = []
        if exact:
            parts.append(_trie_pattern(exact))
        if folded:
            parts.append(b"(?i:" + _trie_pattern(folded) + b")")
        return b"|".join(parts)

    def _regex(self, module: Any) -> Callable[[bytes, int | None], list[int]]:
        compiled = module.compile(self._pattern())

        def find(data: bytes, stop: int | None = None) -> list[int]:
            if stop is None:
                return [m.end() for m in compiled.finditer(data)]
            ends: list[int] = []
            line_end = -1
            for m in compiled.finditer(data):
                ends.append(m.end())
                if m.end() > line_end:  # a hit on a new line
                    stop -= 1
                    nl = data.find(b"\n", m.end() - 1)
                    line_end = len(data) if nl < 0 else nl
                    if stop <= 0:
                        break
            return ends

        return find

    def _hyperscan(self) -> Callable[[bytes, int | None], list[int]]:
        import hyperscan

        if self._databases is not None:
            db = self._databases.get(self.literals)
        else:
            db = _compile_hyperscan(self.literals)

        local = threading.local()  # hyperscan scratch space must not be shared between threads

        def find(data: bytes, stop: int | None = None) -> list[int]:
            ends: list[int] = []
            scratch = getattr(local, "scratch", None)
            if scratch is None:
                scratch = local.scratch = hyperscan.Scratch(db)
            if stop is None:

                def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                    ends.append(end)

                db.scan(data, match_event_handler=on_match, scratch=scratch)
                return ends
            left = [stop, -1]  # lines still wanted, end of the last hit's line

            def on_line(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> bool:
                ends.append(end)
                if end <= left[1]:
                    return False
                nl = data.find(b"\n", end - 1)
                left[1] = len(data) if nl < 0 else nl
                left[0] -= 1
                return left[0] <= 0  # True ends the scan

            with contextlib.suppress(hyperscan.ScanTerminated):
                db.scan(data, match_event_handler=on_line, scratch=scratch)
            return ends

        return find

    def line_starts(self, data: bytes, limit: int | None = None) -> list[int]:
        """Sorted, distinct start offsets of the lines of ``data`` (up to ``limit``) that hit."""
        return self._starts(data, self._find(data if limit is None else data[:limit], None))

    def first_line_starts(self, data: bytes, lines: int) -> tuple[list[int], int]:
        """The first ``lines`` lines of ``data`` that hit (as ``line_starts``), and the offset
        up to which ``data`` was searched: ``len(data)`` when it holds no more than that, else
        the end of the last line returned (the scan stops there)."""
        if lines <= 0:
            return [], 0
        starts = self._starts(data, self._find(data, lines))
        if len(starts) < lines:
            return starts, len(data)
        starts = starts[:lines]
        nl = data.find(b"\n", starts[-1])
        return starts, len(data) if nl < 0 else nl + 1

    def last_line_start(self, data: bytes, low: int = 0, high: int | None = None) -> int:
        """Start of the last line of ``data`` at or after offset ``low`` and before ``high``
        (a line start; default: the end) that hits, or -1.

        Searches windows that grow backwards from the end, so a block dense with hits costs
        one small search, not a callback per hit."""
        end, width = len(data) if high is None else high, 64 << 10
        while end > low:
            start = max(low, end - width)
            if start > low:  # begin the window at a line start
                start = data.rfind(b"\n", low, start) + 1 or low
            ends = self._find(data[start:end], None)
            if ends:
                hit = start + max(ends)
                return data.rfind(b"\n", 0, hit - 1) + 1
            end, width = start, width * 4
        return -1

    @staticmethod
    def _starts(data: bytes, ends: list[int]) -> list[int]:
        starts: set[int] = set()
        last_line = -1
        for end in sorted(ends):
            if end <= last_line:
                continue
            start = data.rfind(b"\n", 0, end - 1) + 1
            starts.add(start)
            nl = data.find(b"\n", end - 1)
            last_line = len(data) if nl < 0 else nl
        return sorted(starts)

    def hits_line(self, line: bytes) -> bool:
        """Whether a single line contains a literal (same answer as ``line_starts``)."""
        return bool(self._find(line, None))


@dataclass(frozen=True, slots=True)
class Sampling:
    """How one stream's sampled lines (``match.sampled`` extractors: progress lines) are told
    apart (``attribution.sources.specs.Sampler``)."""

    sampled: LiteralScanner  # literals only sampled extractors read
    kept: LiteralScanner  # every other extractor's literals
    regexes: tuple[Any, ...]  # the sampled extractors' patterns

    def matches(self, text: str) -> bool:
        for pattern in self.regexes:
            try:
                if pattern.search(text, timeout=_SAMPLE_BUDGET):
                    return True
            except TimeoutError:
                continue
        return False


_SAMPLE_BUDGET = 0.05  # seconds a sampled extractor's pattern may take on one line

Plan = tuple[
    dict[Stream, LiteralScanner],
    dict[Stream, int],
    dict[Stream, LiteralScanner],
    dict[Stream, Sampling],
    dict[Stream, LiteralScanner],
]


def reading_plan(ruleset: RuleSet, engine: str | None = None) -> Plan:
    """Per stream, a scanner over its extractors' literals, how many lines to follow a hit,
    a scanner over the literals of extractors that read more than progress output, (for
    streams with sampled extractors) how their lines are told apart, and a scanner over the
    literals of the multi-line extractors, whose hits alone take followers.

    Returns ``(selectors, follow, notable, sampling, heads)`` for
    ``attribution.sources.specs.ReadContext``.
    """
    chosen_engine = choose_engine(engine)
    databases = _Databases(ruleset.digest) if chosen_engine == "hyperscan" else None
    made: dict[frozenset[Literal], LiteralScanner] = {}

    def scanner(literals: set[Literal]) -> LiteralScanner:
        """One scanner per distinct literal set (job_stdout and job_stderr share theirs)."""
        key = frozenset(literals)
        if key not in made:
            made[key] = LiteralScanner(literals, chosen_engine, databases=databases)
        return made[key]

    selectors: dict[Stream, LiteralScanner] = {}
    notable: dict[Stream, LiteralScanner] = {}
    sampling: dict[Stream, Sampling] = {}
    heads: dict[Stream, LiteralScanner] = {}
    follow: dict[Stream, int] = {}
    for stream in Stream:
        chosen = [ex for ex in ruleset.extractors if stream in ex.streams]
        literals = {
            Literal(lit.encode("utf-8"), ex.rule.match.ignore_case)
            for ex in chosen
            for lit in ex.literals
        }
        selectors[stream] = scanner(literals)
        if any(ex.rule.match.progress for ex in chosen):  # else the same literals: reuse it
            others = {
                Literal(lit.encode("utf-8"), ex.rule.match.ignore_case)
                for ex in chosen
                if not ex.rule.match.progress
                for lit in ex.literals
            }
            notable[stream] = scanner(others)
        else:
            notable[stream] = selectors[stream]
        if any(ex.rule.match.sampled for ex in chosen):
            kept = {
                Literal(lit.encode("utf-8"), ex.rule.match.ignore_case)
                for ex in chosen
                if not ex.rule.match.sampled
                for lit in ex.literals
            }
            sampling[stream] = Sampling(
                sampled=scanner(literals - kept),
                kept=scanner(kept),
                regexes=tuple(ex.regex for ex in chosen if ex.rule.match.sampled),
            )
        follow[stream] = max((ex.rule.match.continuation for ex in chosen), default=0)
        heads[stream] = scanner(
            {
                Literal(lit.encode("utf-8"), ex.rule.match.ignore_case)
                for ex in chosen
                if ex.rule.match.continuation
                for lit in ex.literals
            }
        )
    return selectors, follow, notable, sampling, heads


_PLANS: dict[tuple[str, str], Plan] = {}


def read_context(
    job: JobRecord,
    ruleset: RuleSet,
    *,
    window: tuple[datetime | None, datetime | None] | None = None,
    engine: str | None = None,
) -> ReadContext:
    """The ``ReadContext`` for reading one job's evidence with ``ruleset``'s pre-filter.

    ``window`` (UTC) limits how much of time-ordered node logs is read; the
    scanners are compiled once per (ruleset digest, engine) and reused.
    """
    chosen = choose_engine(engine)
    key = (ruleset.digest, chosen)
    if key not in _PLANS:
        _PLANS[key] = reading_plan(ruleset, chosen)
    selectors, follow, notable, sampling, heads = _PLANS[key]
    return ReadContext(
        tz=zone(job.timezone),
        reference=job.start or job.end,
        boot_times=dict(job.boot_times),
        job_nodes=job.nodes,
        selectors=selectors,
        notable=notable,
        sampling=sampling,
        follow=follow,
        heads=heads,
        window=window,
        job_span=(job.start, job.end) if job.start and job.end and job.end > job.start else None,
    )
