"""Per-user cache files that only their owner can have written (``read_owned``,
``write_owned``): the compiled ruleset (``attribution.rules.cache``) and the scanner's
compiled databases (``attribution.scan``) keep theirs here.

A cache file is trusted only when it and its directory belong to the effective user and
nobody else may write them, neither is a symbolic link, the file is regular and not too large,
and its header (kind, key, length, CRC) matches. Anything else is an error its caller turns
into "build it again": a cache never decides a result. ``ATTRIBUTION_RULES_CACHE`` turns the
caches off (``0``) or moves them (a directory); the default is ``$XDG_CACHE_HOME/attribution``
or ``~/.cache/attribution``.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

ENV = "ATTRIBUTION_RULES_CACHE"
_OFF = frozenset({"0", "off", "no", "false", "never"})
_ON = frozenset({"", "1", "on", "yes", "true"})
_MAX_BYTES = 256 << 20  # far above a real cache (the shipped rules pickle to about 1.3 MB)


def cache_dir() -> Path | None:
    """Where this user's cache files go, or None when the cache is off (``ENV``)."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() in _OFF:
        return None
    if setting.lower() not in _ON:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no home directory
            return None
    return Path(base) / "attribution"


def debug(message: str) -> None:
    import logging

    logging.getLogger(__name__).debug("cache: %s", message)


class Untrusted(Exception):
    """A cache file or directory that is not only ours."""


def _check_owner(st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise Untrusted(f"{what} is owned by uid {st.st_uid}, not {os.geteuid()}")


def _check(st: os.stat_result, what: str) -> None:
    _check_owner(st, what)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Untrusted(f"{what} is writable by group or others ({stat.filemode(st.st_mode)})")


def _open_dir(directory: Path) -> int:
    """A descriptor of ``directory`` after checking that it is ours (not a link)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check(os.fstat(fd), str(directory))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _header(key: str, payload: bytes, magic: bytes) -> bytes:
    return magic + b"%s %d %08x\n" % (key.encode(), len(payload), zlib.crc32(payload))


def read_owned(directory: Path, name: str, key: str, magic: bytes) -> memoryview | None:
    """The payload of cache file ``name`` in ``directory`` if it is ours and was written with
    ``key`` (None when written with another key).

    Ours: the directory and the file are owned by the effective user and writable by nobody
    else, neither is a symbolic link, the file is regular and no larger than ``_MAX_BYTES``.

    Raises:
        FileNotFoundError: no such file (or directory).
        OSError, ValueError, Untrusted: a file that is not ours, not one of these files
            (``magic``), truncated or damaged (length and CRC in the header).
    """
    dir_fd = _open_dir(directory)
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(name, flags, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{name} is not a regular file")
        _check(st, name)
        if st.st_size > _MAX_BYTES:
            raise ValueError(f"{name} is larger than {_MAX_BYTES} bytes")
        data = handle.read(_MAX_BYTES + 1)
    if not data.startswith(magic):
        raise ValueError("not a cache file of this kind")
    end = data.index(b"\n", len(magic))
    found, size, crc = data[len(magic) : end].split(b" ")
    if found.decode() != key:
        debug(f"{name}: made from other rules or another version; rebuilding")
        return None
    payload = memoryview(data)[end + 1 :]
    if len(payload) != int(size) or zlib.crc32(payload) != int(crc, 16):
        raise ValueError("truncated or damaged")
    return payload


def _make_dir(directory: Path) -> None:
    """Create the cache directory (0700). In the default place, only under a directory of the
    effective user: root under sudo with the caller's HOME makes nothing there, which its
    owner could then not use."""
    if directory.is_dir():
        return
    if os.environ.get(ENV, "").strip().lower() in _ON:  # the default place, not one chosen
        ancestor = directory.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        _check_owner(os.stat(ancestor), str(ancestor))
    os.makedirs(directory, mode=0o700, exist_ok=True)


def write_owned(directory: Path, name: str, key: str, payload: bytes, magic: bytes) -> None:
    """Write ``payload`` as cache file ``name`` (read back by ``read_owned``): to a temporary
    file (mode 0600) renamed into place, in ``directory`` made if missing (0700) and refused
    when it is not only ours.

    Raises:
        OSError, Untrusted: the file could not be written.
    """
    import tempfile

    _make_dir(directory)
    os.close(_open_dir(directory))  # refuse to write into a directory that is not only ours
    fd, temp = tempfile.mkstemp(prefix=".attribution-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_header(key, payload, magic))
            handle.write(payload)
        os.replace(temp, directory / name)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
