"""Read log files safely: plain, gzip or zstd; bounded line length; never a traceback.

Compression is recognised by magic bytes, not by the file name. Bytes that are
not UTF-8 are replaced (U+FFFD) and NUL bytes dropped, so binary junk becomes
visible text instead of an exception. Lines longer than ``max_line`` bytes are
cut and the remainder skipped; the cut is counted in ``ReadStats.truncated``.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import zstandard

from attribution.errors import SourceError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DEFAULT_MAX_LINE = 64 * 1024
_CHUNK = 1 << 20


@dataclass(slots=True)
class ReadStats:
    """What was read from one file: bytes (decompressed), lines, lines cut short, decode errors."""

    bytes: int = 0
    lines: int = 0
    truncated: int = 0
    binary_lines: int = 0
    error: str | None = None


def open_log(path: Path, *, nofollow: bool = False) -> io.BufferedIOBase:
    """Open a log file for binary reading, decompressing gzip/zstd transparently.

    Args:
        path: the file.
        nofollow: refuse symbolic links (``O_NOFOLLOW``) and anything that is
            not a regular file; used for paths a job's owner controls.

    Raises:
        SourceError: when the file is missing, unreadable, not a regular file
            (with ``nofollow``) or has a corrupt compression header.
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError(f"cannot open: {exc.strerror or exc}", None) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceError("not a regular file")
        raw = cast(io.BufferedReader, os.fdopen(fd, "rb", buffering=_CHUNK))
    except BaseException:
        os.close(fd)
        raise
    try:
        head = raw.peek(4)[:4]
    except OSError as exc:
        raw.close()
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(GZIP_MAGIC):
        return _Owning(gzip.GzipFile(fileobj=raw, mode="rb"), raw)
    if head.startswith(ZSTD_MAGIC):
        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
        return _Owning(io.BufferedReader(reader, buffer_size=_CHUNK), raw)
    return raw


class _Owning(io.BufferedIOBase):
    """A decompressing reader that also closes the file underneath it."""

    def __init__(self, inner: io.BufferedIOBase, raw: io.BufferedIOBase) -> None:
        super().__init__()
        self._inner = inner
        self._raw = raw

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        return self._inner.read(-1 if size is None else size)

    def readline(self, size: int | None = -1) -> bytes:
        return self._inner.readline(-1 if size is None else size)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def iter_lines(
    handle: io.BufferedIOBase, stats: ReadStats, *, max_line: int = DEFAULT_MAX_LINE
) -> Iterator[str]:
    """Yield decoded lines without their newline, at most ``max_line`` bytes each.

    Counts into ``stats``. A read or decompression error stops the iteration
    and is recorded in ``stats.error`` (never raised).
    """
    readline = handle.readline
    try:
        while True:
            chunk = readline(max_line)
            if not chunk:
                return
            stats.bytes += len(chunk)
            if not chunk.endswith(b"\n") and len(chunk) >= max_line:
                stats.truncated += 1
                # skip the rest of this over-long line without holding it in memory
                while True:
                    rest = readline(_CHUNK)
                    stats.bytes += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
            stats.lines += 1
            yield decode_line(chunk, stats)
    except (OSError, EOFError, zstandard.ZstdError, gzip.BadGzipFile) as exc:
        stats.error = f"read error after {stats.lines} lines: {exc}"


def decode_line(chunk: bytes, stats: ReadStats | None = None) -> str:
    """Decode one line of bytes: UTF-8 with replacement, NULs and the newline removed."""
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
        if stats is not None:
            stats.binary_lines += 1
    text = chunk.decode("utf-8", errors="replace")
    return text.rstrip("\r\n")


def read_lines(
    path: Path, *, max_line: int = DEFAULT_MAX_LINE, nofollow: bool = False
) -> tuple[list[str], ReadStats]:
    """Read a whole (small) file into a list of lines; see ``open_log``/``iter_lines``.

    Raises:
        SourceError: when the file cannot be opened.
    """
    stats = ReadStats()
    with open_log(path, nofollow=nofollow) as handle:
        lines = list(iter_lines(handle, stats, max_line=max_line))
    return lines, stats
