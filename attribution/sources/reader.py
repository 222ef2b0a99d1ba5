"""Open log files safely: plain, gzip or zstd, never following links into files we should not read.

Compression is recognised by magic bytes, not by the file name. Plain files
are opened unbuffered so that the bytes a reader asks for are the bytes read
from the disk (time-windowed reads depend on it). ``decode_line`` turns raw
bytes into text without ever raising: bytes that are not UTF-8 are replaced
(U+FFFD) and NUL bytes dropped, so binary junk becomes visible text.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import zstandard

from attribution.errors import SourceError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DEFAULT_MAX_LINE = 64 * 1024
_BUFFER = 1 << 20

# What open_log returns: an unbuffered plain file (seekable), or a decompressing stream.
LogHandle = io.RawIOBase | io.BufferedIOBase


@dataclass(slots=True)
class ReadStats:
    """What was read from one file: bytes (decompressed), lines, lines cut, lines with NULs."""

    bytes: int = 0
    lines: int = 0
    truncated: int = 0
    binary_lines: int = 0
    error: str | None = None


def open_log(path: Path, *, nofollow: bool = False) -> LogHandle:
    """Open a log file for binary reading, decompressing gzip/zstd transparently.

    Args:
        path: the file.
        nofollow: refuse symbolic links (``O_NOFOLLOW``) and anything that is
            not a regular file; used for paths a job's owner controls.

    Returns:
        An unbuffered ``io.FileIO`` for plain files, else a decompressing reader.

    Raises:
        SourceError: when the file is missing, unreadable or not a regular file.
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
        head = os.pread(fd, 4, 0)
    except OSError as exc:
        os.close(fd)
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise
    raw = io.FileIO(fd, "rb", closefd=True)
    if head.startswith(GZIP_MAGIC):
        return _Owning(gzip.GzipFile(fileobj=io.BufferedReader(raw, _BUFFER), mode="rb"), raw)
    if head.startswith(ZSTD_MAGIC):
        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
        return _Owning(io.BufferedReader(reader, buffer_size=_BUFFER), raw)
    return raw


class _Owning(io.BufferedIOBase):
    """A decompressing reader that also closes the file underneath it."""

    def __init__(self, inner: io.BufferedIOBase, raw: io.RawIOBase) -> None:
        super().__init__()
        self._inner = inner
        self._raw = raw

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def read(self, size: int | None = -1) -> bytes:
        return self._inner.read(-1 if size is None else size)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def decode_line(chunk: bytes) -> str:
    """Decode one line of bytes: UTF-8 with replacement, NULs and the line ending removed."""
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
    text = chunk.decode("utf-8", errors="replace")
    return text.rstrip("\r\n")
