"""Open log files safely: plain, gzip or zstd, never following links into files we should not read.

Compression is recognised by magic bytes, not by the file name. Plain files
are opened unbuffered so that the bytes a reader asks for are the bytes read
from the disk (time-windowed reads depend on it). A truncated gzip or zstd
stream, or junk after its end, is an error, raised only after every byte
decoded before it has been returned. A file that starts with a UTF-16 byte
order mark is transcoded to UTF-8. ``decode_line`` turns raw bytes into text
without ever raising: bytes that are not UTF-8 are replaced (U+FFFD) and NUL
bytes dropped, so binary junk becomes visible text.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from attribution.errors import SourceError
from attribution.model import CoverageNote

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, backported (PyPI backports.zstd)
    from backports import zstd

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
DEFAULT_MAX_LINE = 64 * 1024
_BUFFER = 1 << 20
_PIECE = 64 << 10  # decoded bytes per inner read: what an error can cost at most

# What a damaged compressed stream raises (gzip: BadGzipFile, zlib.error, EOFError).
DECODE_ERRORS = (OSError, EOFError, ValueError, zstd.ZstdError)

# What open_log returns: an unbuffered plain file (seekable), or a decompressing stream.
LogHandle = io.RawIOBase | io.BufferedIOBase


@dataclass(slots=True)
class ReadStats:
    """What was read from one file: bytes (decompressed), lines, lines cut, lines with NULs,
    and the error that ended the read early."""

    bytes: int = 0
    lines: int = 0
    truncated: int = 0
    binary_lines: int = 0
    error: CoverageNote | None = None


def open_log(path: Path, *, nofollow: bool = False, plain: bool = False) -> LogHandle:
    """Open a log file for binary reading, decompressing gzip/zstd transparently.

    Args:
        path: the file.
        nofollow: refuse symbolic links (``O_NOFOLLOW``) and anything that is
            not a regular file; used for paths a job's owner controls.
        plain: read the bytes as they are, never decompressed or transcoded (job output:
            its owner could rewrite a checked file as a gzip bomb).

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
    if plain:
        return raw
    if head.startswith(GZIP_MAGIC):
        inner: io.BufferedIOBase = gzip.GzipFile(fileobj=io.BufferedReader(raw, _BUFFER), mode="rb")
        return _Decoded(inner, raw, "gzip")
    if head.startswith(ZSTD_MAGIC):
        return _Decoded(zstd.ZstdFile(io.BufferedReader(raw, _BUFFER)), raw, "zstd")
    if head.startswith(UTF16_BOMS):
        return _Decoded(_Utf16(raw), raw, "UTF-16")
    return raw


class _Decoded(io.BufferedIOBase):
    """A decoding reader (decompressing or transcoding) that also closes the file underneath.

    It reads its inner stream in small pieces and, when one fails, first returns
    what was decoded before the failure; the error comes from the next ``read``,
    so a damaged tail never costs the lines before it.
    """

    def __init__(self, inner: io.BufferedIOBase, raw: io.RawIOBase, kind: str) -> None:
        super().__init__()
        self._inner = inner
        self._raw = raw
        self.kind = kind
        self._failed: BaseException | None = None

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def read(self, size: int | None = -1) -> bytes:
        if self._failed is not None:
            exc, self._failed = self._failed, None
            raise exc
        want = _BUFFER if size is None or size < 0 else size
        out = bytearray()
        while len(out) < want:
            try:
                # read1: one decode step, so an error cannot take earlier data with it
                piece = self._inner.read1(min(_PIECE, want - len(out)))
            except DECODE_ERRORS as exc:
                if not out:
                    raise _explained(exc, self.kind) from None
                self._failed = _explained(exc, self.kind)
                break
            if not piece:
                break
            out += piece
        return bytes(out)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def _explained(exc: BaseException, kind: str) -> BaseException:
    """The library's error, said in an operator's words where we know them."""
    text = str(exc)
    if isinstance(exc, EOFError):
        return EOFError(f"the {kind} stream is truncated (it ends before its end marker)")
    if kind == "gzip" and "Not a gzipped file" in text:
        return ValueError("data after the end of the gzip stream is not gzip; not read")
    if kind == "zstd" and "Unknown frame descriptor" in text:
        return ValueError("data after the end of the zstd stream is not zstd; not read")
    return exc


class _Utf16(io.BufferedIOBase):
    """UTF-16 text (with its byte order mark) re-encoded as UTF-8 bytes."""

    def __init__(self, raw: io.RawIOBase) -> None:
        super().__init__()
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._done = False

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def read(self, size: int | None = -1) -> bytes:
        want = _PIECE if size is None or size < 0 else max(size, 2)
        while not self._done:
            data = self._raw.read(want)
            text = self._decoder.decode(data or b"", final=not data)
            self._done = not data
            if text:
                return text.encode("utf-8", "surrogatepass")
        return b""


def decode_line(chunk: bytes) -> str:
    """Decode one line of bytes: UTF-8 with replacement, NULs and the line ending removed."""
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
    text = chunk.decode("utf-8", errors="replace")
    return text.rstrip("\r\n")
