"""A per-user cache of the compiled ruleset on disk, so that a ``sattr`` command does not parse
and validate some 400 rule files (and compile their regexes) every time it starts.

The cache file holds a pickled ``RuleSet`` behind a header with its key. The key is computed
without reading a rule: the cache format, attribution's version, the Python and library
versions the objects were made with (PyYAML's by its installed file, so that a run whose rules
come from the cache need not import it), the size and times of the engine's own modules, and for
each rules directory in order its path and every ``*.yaml`` file under it (relative path,
size, inode, mtime and ctime). A change to any of them means a rebuild; a cache is never
trusted across versions. What is loaded from a cache equals what the loader makes from the
same files (same ``digest``, same verdicts; tests/test_rules_cache.py compares them).

Unpickling runs code named in the file, so a cache file is used only when it is ours: a regular
file owned by the effective user and writable by nobody else, in a directory with the same
properties (``$XDG_CACHE_HOME/attribution``, else ``~/.cache/attribution``, created 0700).
Files are written to a temporary name and renamed into place. Any problem reading or writing
the cache (missing, foreign, truncated, corrupt, from another version, a disk error) falls back
to loading the files, silently; ``ATTRIBUTION_RULES_CACHE=0`` turns the cache off and
``ATTRIBUTION_RULES_CACHE=/some/dir`` moves it.

``read_owned`` and ``write_owned`` are those checks and that writing for any cache file of this
directory; ``attribution.scan`` keeps the compiled hyperscan databases of a ruleset with them.
"""

from __future__ import annotations

import gc
import hashlib
import io
import marshal
import os
import pickle
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from attribution import __version__, usercache
from attribution._yaml import LineMap
from attribution.rules.compiled import RuleSet
from attribution.usercache import (  # noqa: F401 (ENV, cache_dir: this module's public names)
    ENV,
    Untrusted,
    cache_dir,
    debug,
    read_owned,
    write_owned,
)

CACHE_FORMAT = 1  # bump when the file layout or what a RuleSet pickles to changes
_MAGIC = b"attribution-rules-cache\n"


def _header(key: str, payload: bytes) -> bytes:
    """A ruleset cache file's header (``attribution.usercache``)."""
    return usercache._header(key, payload, _MAGIC)


# a rule file changed less than this before the key was computed may change again within the
# same timestamp tick on a coarse file system (the "racy git" problem): then nothing is saved
_RACY_NS = 3_000_000_000
_PACKAGE = Path(__file__).resolve().parent.parent  # attribution/


# --------------------------------------------------------------------- the key


def _files(top: str, suffix: str, recurse: bool) -> list[tuple[str, os.stat_result]]:
    """``(path relative to top, stat)`` of the files named ``*suffix`` under ``top``, sorted.

    Finds every file ``Path(top).rglob('*' + suffix)`` would (it does not enter a directory
    through a symbolic link either; a link to a file is followed, as the loader reads it).
    """
    out: list[tuple[str, os.stat_result]] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(os.path.join(top, rel) if rel else top) as entries:
            for entry in entries:
                name = os.path.join(rel, entry.name) if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if recurse:
                        pending.append(name)
                elif entry.name.endswith(suffix) and entry.is_file():
                    out.append((name, entry.stat()))
    out.sort(key=lambda item: item[0])
    return out


def _update(digest: hashlib._Hash, files: Iterable[tuple[str, os.stat_result]]) -> int:
    """Add each file's name, size, inode and times to ``digest``; the newest ctime."""
    newest = 0
    for name, st in files:
        newest = max(newest, st.st_ctime_ns, st.st_mtime_ns)
        digest.update(
            b"%s\0%d %d %d %d %d\n"
            % (
                os.fsencode(name),
                st.st_size,
                st.st_ino,
                st.st_dev,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
        )
    return newest


def _engine() -> bytes:
    """What the compiled objects depend on besides the rule files."""
    import pydantic
    import pydantic_core
    import regex

    return (
        f"format {CACHE_FORMAT}\0attribution {__version__}\0python {sys.version}"
        f" {sys.implementation.cache_tag}\0pydantic {pydantic.VERSION}"
        f" {pydantic_core.__version__}\0regex {regex.__version__}\0yaml {_stamp('yaml')}\0"
    ).encode()


def _stamp(module: str) -> str:
    """Where ``module`` is installed, with its size and times, without importing it (PyYAML:
    a run whose rules come from the cache does not parse YAML). Installing another version
    rewrites the file (its ``__version__`` is in it)."""
    from importlib.util import find_spec

    spec = find_spec(module)
    if spec is None or not spec.origin:
        return "missing"
    st = os.stat(spec.origin)
    return f"{spec.origin} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def cache_key(dirs: Iterable[Path]) -> tuple[str, bool] | None:
    """``(key, settled)`` of the ruleset the loader would make from ``dirs`` (in order), or
    None when a directory cannot be listed (the loader then reports it). ``settled`` is False
    when a file changed too recently for its times to tell a next change (``_RACY_NS``)."""
    now = time.time_ns()
    digest = hashlib.sha256(_engine())
    try:
        # the engine's own code: attribution/*.py and attribution/rules/*.py (a source checkout
        # changes them without changing the version)
        newest = _update(digest, _files(str(_PACKAGE), ".py", recurse=False))
        newest = max(newest, _update(digest, _files(str(_PACKAGE / "rules"), ".py", False)))
        for directory in dirs:
            digest.update(b"\0dir\0" + os.fsencode(str(directory)) + b"\0")
            newest = max(newest, _update(digest, _files(str(directory), ".yaml", recurse=True)))
    except OSError:
        return None
    return digest.hexdigest(), now - newest >= _RACY_NS


def _file_name(dirs: Iterable[Path]) -> str:
    """One cache file per list of directories (a new key overwrites it)."""
    name = hashlib.sha256(b"\0".join(os.fsencode(str(d)) for d in dirs)).hexdigest()
    return f"rules-{name[:24]}.pickle"


# --------------------------------------------------------------------- what is pickled


class _PackedLineMap(LineMap):
    """A rule file's ``LineMap`` as read from the cache: kept packed (``marshal``) until a
    line is asked for, which only ``sattr rules`` and the linter do (a third of the time an
    unpickle would take otherwise)."""

    def __init__(self, packed: bytes) -> None:  # no super().__init__(): _lines comes later
        self._packed = packed

    def _unpack(self) -> None:
        if "_lines" not in self.__dict__:
            self._lines = marshal.loads(self._packed)

    def line_for(self, path: Sequence[str | int]) -> int:
        self._unpack()
        return super().line_for(path)

    def set(self, path: tuple[str | int, ...], line: int) -> None:
        self._unpack()
        super().set(path, line)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: object) -> Any:
        if isinstance(obj, LineMap):
            if isinstance(obj, _PackedLineMap):
                obj._unpack()
            return _PackedLineMap, (marshal.dumps(obj._lines),)
        return NotImplemented


def _dumps(ruleset: RuleSet) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(ruleset)
    return out.getvalue()


# --------------------------------------------------------------------- reading and writing


def _read(directory: Path, name: str, key: str) -> RuleSet | None:
    payload = read_owned(directory, name, key, _MAGIC)
    if payload is None:
        return None
    collecting = gc.isenabled()
    gc.disable()  # a faster unpickle: these objects hold no cycles worth a collection now
    try:
        ruleset = pickle.loads(payload)  # ours only: owner and mode checked by read_owned
    finally:
        if collecting:
            gc.enable()
    if not isinstance(ruleset, RuleSet) or not ruleset.digest:
        raise ValueError("does not hold a ruleset")
    return ruleset


def _write(directory: Path, name: str, key: str, ruleset: RuleSet) -> None:
    write_owned(directory, name, key, _dumps(ruleset), _MAGIC)


def load_cached(
    directories: Iterable[Path | str] | None = None, *, include_shipped: bool = True
) -> RuleSet:
    """``attribution.rules.loader.load_ruleset`` through this user's cache (same arguments,
    same result, same errors).

    Raises:
        RuleErrors: from the loader, when the rules do not load (nothing is cached then).
    """
    from attribution.rules import loader  # looked up at call time (tests replace load_ruleset)

    extra = [Path(d) for d in directories or ()]
    directory = cache_dir()
    dirs = [loader.shipped_rules_dir(), *extra] if include_shipped else extra
    found = cache_key(dirs) if directory is not None else None
    if directory is None or found is None:
        return loader.load_ruleset(extra, include_shipped=include_shipped)
    key, settled = found
    name = _file_name(dirs)
    try:
        cached = _read(directory, name, key)
    except FileNotFoundError:
        cached = None
    except Exception as exc:  # a cache problem is never the command's problem
        debug(f"{directory / name}: not used: {type(exc).__name__}: {exc}")
        cached = None
    if cached is not None:
        return cached
    ruleset = loader.load_ruleset(extra, include_shipped=include_shipped)
    if not settled:
        debug("a rule file changed a moment ago; not saved")
        return ruleset
    try:
        _write(directory, name, key, ruleset)
    except Exception as exc:
        debug(f"{directory / name}: not saved: {type(exc).__name__}: {exc}")
    return ruleset
