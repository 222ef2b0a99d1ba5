"""Open log files safely: plain, compressed or in another encoding, never following links
into files we should not read, and never decoding without bounds.

Compression is recognised by magic bytes, not by the file name: gzip, zstd (also after
skippable frames, as ``pzstd`` writes), bzip2 and xz are decoded, up to ``MAX_LAYERS`` layers
deep (gzip of zstd); lz4 and other formats are refused with a reason, never read as junk. Each
layer gives at most ``MAX_DECOMPRESSED`` bytes (a bomb stops there) and must not take far
more than it gives (runs of empty gzip members or zstd frames). Text in UTF-16 or UTF-32, with
or without a byte order mark (without one, told by where ASCII text has its NUL bytes), is
transcoded to UTF-8. Plain files are opened unbuffered so that the bytes a reader asks for are
the bytes read from the disk (time-windowed reads depend on it). A truncated stream, junk after
its end, or a cap reached is an error, raised only after every byte decoded before it has been
returned. ``decode_line`` turns raw bytes into text without ever raising: bytes that are not
UTF-8 are replaced (U+FFFD) and NUL bytes dropped, so binary junk becomes visible text.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import os
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
# Decoded bytes one layer of one compressed file gives at most (docs/bundles.md, "Compressed
# and encoded files"): a bomb (1 MiB of zstd that expands to 20 GB) stops here, in seconds.
MAX_DECOMPRESSED = 4 << 30
MAX_LAYERS = 2  # compression layers decoded (gzip of zstd); a third is refused
# Decoded bytes all compressed or encoded files of one diagnosis give together (DecodeBudget)
MAX_DECODED_JOB = 16 << 30
# Bytes a decompressing layer may take beyond what it gives (plus 1/32 of what it took): real
# streams give more than they take; runs of empty members or frames cost time and give nothing.
_SLACK = 4 << 20
_BUFFER = 1 << 20
_PIECE = 64 << 10  # decoded bytes per inner read: what an error can cost at most
_HEAD = 4096  # bytes looked at to tell a compression or an encoding

# What a damaged compressed stream raises (gzip: BadGzipFile, zlib.error, EOFError).
DECODE_ERRORS = (OSError, EOFError, ValueError, zstd.ZstdError, lzma.LZMAError)

# What open_log returns: an unbuffered plain file (seekable), or a decoding stream.
LogHandle = io.RawIOBase | io.BufferedIOBase


class DecodeCut(ValueError):
    """Decoding stopped on purpose (a cap reached), not because the stream is damaged."""


@dataclass(slots=True)
class ReadStats:
    """What was read from one file: bytes (decompressed), lines, lines cut, lines with NULs,
    and the error that ended the read early."""

    bytes: int = 0
    lines: int = 0
    truncated: int = 0
    binary_lines: int = 0
    error: CoverageNote | None = None


def compression(head: bytes) -> str | None:
    """The compression whose magic bytes ``head`` starts with, or None."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC) or (
        len(head) >= 4 and 0x50 <= head[0] <= 0x5F and head[1:4] == b"\x2a\x4d\x18"
    ):
        return "zstd"  # a zstd frame, or a skippable frame before one (pzstd)
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[3:4] != b"0":
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    for magic, name in _UNDECODED:
        if head.startswith(magic):
            return name
    return None


# Formats recognised but not decoded: refused with a reason, never read as junk.
_UNDECODED = (
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x02\x21\x4c\x18", "lz4"),  # its legacy frame
    (b"LZIP", "lzip"),
    (b"\x1f\x9d", "compress (.Z)"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip"),
    (b"PK\x03\x04", "zip"),
)
_DECODERS: dict[str, Callable[[io.BufferedIOBase], io.BufferedIOBase]] = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "zstd": lambda f: zstd.ZstdFile(f),
    "bzip2": lambda f: io.BufferedReader(_Streams(f, bz2.BZ2Decompressor, b"BZh", "bzip2")),
    "xz": lambda f: io.BufferedReader(_Streams(f, lzma.LZMADecompressor, b"\xfd7zXZ\x00", "xz")),
}


def text_encoding(head: bytes) -> str | None:
    """The codec of text in UTF-16 or UTF-32 (its byte order mark, else the NUL bytes of
    ASCII text: ``a\\0`` in UTF-16 LE, ``\\0\\0\\0a`` in UTF-32 BE), or None for anything
    else (NUL padding around UTF-8 text is not UTF-16: its NULs come in runs)."""
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"  # before UTF-16: FF FE 00 00 starts with UTF-16 LE's mark
    if head.startswith(UTF16_BOMS):
        return "utf-16"
    quads = [head[i : i + 4] for i in range(0, len(head) - 3, 4)]
    if len(quads) >= 2:
        # every unit a code point below U+110000, most of them ASCII (three NULs, one letter)
        if all(q[3] == 0 and q[2] <= 0x10 for q in quads) and _mostly(
            q[0] != 0 and q[1:] == b"\0\0\0" for q in quads
        ):
            return "utf-32-le"
        if all(q[0] == 0 and q[1] <= 0x10 for q in quads) and _mostly(
            q[3] != 0 and q[:3] == b"\0\0\0" for q in quads
        ):
            return "utf-32-be"
    pairs = [head[i : i + 2] for i in range(0, len(head) - 1, 2)]
    if len(pairs) >= 2:
        if _mostly(p[0] != 0 and p[1] == 0 for p in pairs):
            return "utf-16-le"
        if _mostly(p[0] == 0 and p[1] != 0 for p in pairs):
            return "utf-16-be"
    return None


def _mostly(tests: Iterable[bool]) -> bool:
    """At least three quarters of ``tests`` hold."""
    held = total = 0
    for ok in tests:
        held += ok
        total += 1
    return held * 4 >= total * 3


@dataclass(slots=True)
class DecodeBudget:
    """Decoded bytes that the compressed and encoded files of one diagnosis may still give
    together (``ReadContext.decode_budget``): forty rotated 1 GiB bombs each stop at the
    per-file cap, and together here."""

    left: int = MAX_DECODED_JOB
    total: int = MAX_DECODED_JOB


def open_log(
    path: Path, *, nofollow: bool = False, plain: bool = False, budget: DecodeBudget | None = None
) -> LogHandle:
    """Open a log file for binary reading, decoding compression and encodings transparently.

    The file is opened without blocking (a FIFO never holds the reader) and must be a regular
    file.

    Args:
        path: the file.
        nofollow: refuse symbolic links (``O_NOFOLLOW``); used for paths a job's owner
            controls.
        plain: read the bytes as they are, never decompressed or transcoded (job output:
            its owner could rewrite a checked file as a gzip bomb).
        budget: decoded bytes this file may take from what one diagnosis may decode.

    Returns:
        An unbuffered ``io.FileIO`` for plain files, else a decoding reader.

    Raises:
        SourceError: when the file is missing, unreadable, not a regular file, or in a
            format that is not decoded (lz4, more than ``MAX_LAYERS`` compressions).
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceError(f"cannot open: {exc.strerror or exc}", None) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceError("not a regular file")
        head = os.pread(fd, _HEAD, 0)
    except OSError as exc:
        os.close(fd)
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise
    raw = io.FileIO(fd, "rb", closefd=True)
    if plain:
        return raw
    try:
        return _decoding(raw, head, budget)
    except BaseException:
        raw.close()
        raise


def _decoding(raw: io.FileIO, head: bytes, budget: DecodeBudget | None = None) -> LogHandle:
    """``raw`` with its compression layers and text encoding undone (``head``: its start)."""
    stream: LogHandle = raw
    layers: list[str] = []
    while (kind := compression(head)) is not None:
        if kind not in _DECODERS:
            inside = "".join(f" inside {k}" for k in reversed(layers))
            raise SourceError(f"compressed with {kind}{inside}, which is not decoded; not read")
        if len(layers) == MAX_LAYERS:
            chain = " in ".join([kind, *reversed(layers)])
            raise SourceError(
                f"compressed {len(layers) + 1} times or more ({chain}): only {MAX_LAYERS}"
                " layers are decoded; not read"
            )
        source = io.BufferedReader(raw, _BUFFER) if stream is raw else stream
        layer = _Decoded(_DECODERS[kind], source, raw, kind, cap=MAX_DECOMPRESSED)
        layers.append(kind)
        head = layer.head(_HEAD)
        stream = layer
    encoding = text_encoding(head)
    if encoding is not None:
        label = encoding.upper()[:6]
        source = stream
        # not capped: it gives fewer bytes than it takes, and a layer below it is capped
        stream = _Decoded(lambda f: _Transcoder(f, encoding), source, raw, label, cap=None)
    if isinstance(stream, _Decoded):
        # what the file is stored as: its outer compression, else its encoding
        stream.kind = layers[0] if layers else stream.kind
        stream.layers = tuple(layers)
        stream.attach(budget)  # what the reader is given is what counts
    return stream


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def needs_input(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = -1, /) -> bytes: ...


class _Streams(io.RawIOBase):
    """Consecutive bzip2 or xz streams (what ``pbzip2`` and ``xz -T`` write) decoded in turn.
    Bytes after the last stream that start no new one are an error, never dropped without a
    word (``BZ2File`` and ``LZMAFile`` ignore them); NUL padding between xz streams is allowed
    (the xz format's stream padding)."""

    def __init__(
        self, source: io.IOBase, make: Callable[[], _Decompressor], magic: bytes, kind: str
    ) -> None:
        super().__init__()
        self._source, self._make, self._magic, self._kind = source, make, magic, kind
        self._decoder = make()
        self._input = b""  # read from the source, not yet given to a decoder
        self._done = False

    def readable(self) -> bool:
        return True

    def _more(self) -> bytes:
        data: bytes = self._source.read(_PIECE)
        return data

    def read(self, size: int = -1) -> bytes:
        want = _BUFFER if size is None or size < 0 else size
        while not self._done:
            if self._decoder.eof:
                rest = self._decoder.unused_data + self._input
                self._input = b""
                if self._kind == "xz":
                    rest = rest.lstrip(b"\0")
                while len(rest) < len(self._magic) and (more := self._more()):
                    rest = rest + more
                    if self._kind == "xz":
                        rest = rest.lstrip(b"\0")
                if not rest:
                    self._done = True
                    break
                if not rest.startswith(self._magic):
                    self._done = True
                    raise ValueError(
                        f"junk after the end of the {self._kind} stream ({rest[:8]!r}...); the"
                        " rest not read"
                    )
                self._decoder, self._input = self._make(), rest
            if self._decoder.needs_input:
                data, self._input = self._input or self._more(), b""
                if not data:
                    raise EOFError(f"the {self._kind} stream is truncated")
            else:
                data = b""
            out = self._decoder.decompress(data, want)
            if out:
                return out
        return b""

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Taken(io.RawIOBase):
    """What a decompressor reads from the layer below, counted: the layer must not take far
    more than it gives."""

    def __init__(self, source: io.IOBase, layer: _Decoded) -> None:
        super().__init__()
        self._source = source
        self._layer = layer
        self.taken = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._source.read(_BUFFER if size is None or size < 0 else size)
        self.taken += len(data)
        if self.taken - self._layer.given > _SLACK + self.taken // 32:
            raise DecodeCut(
                f"the {self._layer.kind} stream gives far less than it takes (runs of empty"
                f" members or frames, {self.taken:,} bytes for {self._layer.given:,}); the rest"
                " not read"
            )
        return data

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Decoded(io.BufferedIOBase):
    """A decoding reader (decompressing or transcoding) that also closes the file underneath.

    It reads its inner stream in small pieces and, when one fails, first returns what was
    decoded before the failure; the error comes from the next ``read``, so a damaged tail
    never costs the lines before it. It gives at most ``cap`` bytes (None: a transcoder, any).
    """

    def __init__(
        self,
        make: Callable[[io.BufferedIOBase], io.BufferedIOBase],
        source: io.IOBase,
        raw: io.RawIOBase,
        kind: str,
        *,
        cap: int | None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.layers: tuple[str, ...] = ()
        self.given = 0
        self._cap = cap
        self._raw = raw
        self._source = source
        # a decompressor's input is counted (``_Taken``); a transcoder's is not, it takes two
        # or four bytes for each character it gives
        feed = source if cap is None else _Taken(source, self)
        self._inner = make(feed)  # type: ignore[arg-type]
        self._pending = b""
        self._failed: BaseException | None = None
        self.budget: DecodeBudget | None = None

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def attach(self, budget: DecodeBudget | None) -> None:
        """Count what this stream gives against ``budget`` from now on, and the head it has
        already decoded (``head``) at once."""
        self.budget = budget
        if budget is None:
            return
        if len(self._pending) > budget.left:
            self._pending = self._pending[: budget.left]
            if self._failed is None:
                self._failed = DecodeCut(_over_budget(budget))
        budget.left -= len(self._pending)

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (fewer at the end or before an error), read again by the
        next ``read``."""
        if not self._pending and self._failed is None:
            try:
                self._pending = self._decode(size)
            except DECODE_ERRORS as exc:
                self._failed = _explained(exc, self.kind)
        return self._pending

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def read(self, size: int | None = -1) -> bytes:
        want = _BUFFER if size is None or size < 0 else size
        if self._pending:  # what ``head`` looked at, then as much more as was asked for
            out, self._pending = self._pending[:want], self._pending[want:]
            if len(out) < want and self._failed is None:
                try:
                    out += self._decode(want - len(out))
                except DECODE_ERRORS as failure:  # said by the next read
                    self._failed = failure
            return out
        if self._failed is not None:
            exc, self._failed = self._failed, None
            raise exc
        return self._decode(want)

    def _decode(self, want: int) -> bytes:
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
            room = len(piece) if self._cap is None else self._cap - self.given
            shared = self.budget.left if self.budget is not None else len(piece)
            if len(piece) > min(room, shared):
                if room <= shared:
                    why = (
                        f"decompressed to {self._cap:,} bytes, the cap for one file"
                        " (docs/bundles.md); the rest not read"
                    )
                else:
                    why = _over_budget(self.budget)
                piece = piece[: min(room, shared)]
                self._failed = DecodeCut(why)
            self.given += len(piece)
            if self.budget is not None:
                self.budget.left -= len(piece)
            out += piece
            if self._failed is not None:
                if not out:
                    cut, self._failed = self._failed, None
                    raise cut
                break
        return bytes(out)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._inner.close()
            if isinstance(self._source, _Decoded):
                self._source.close()
        finally:
            self._raw.close()
            super().close()


def _over_budget(budget: DecodeBudget | None) -> str:
    total = budget.total if budget is not None else 0
    return (
        f"the job's compressed logs decoded to {total:,} bytes, the cap for one job"
        " (docs/bundles.md); the rest not read"
    )


def _explained(exc: BaseException, kind: str) -> BaseException:
    """The library's error, said in an operator's words where we know them."""
    text = str(exc)
    if isinstance(exc, DecodeCut):
        return exc
    if isinstance(exc, EOFError):
        return EOFError(f"the {kind} stream is truncated (it ends before its end marker)")
    if kind == "gzip" and "Not a gzipped file" in text:
        return ValueError("data after the end of the gzip stream is not gzip; not read")
    if kind == "zstd" and "Unknown frame descriptor" in text:
        return ValueError("data after the end of the zstd stream is not zstd; not read")
    return exc


class _Transcoder(io.BufferedIOBase):
    """UTF-16 or UTF-32 text re-encoded as UTF-8 bytes."""

    def __init__(self, source: io.IOBase, encoding: str) -> None:
        super().__init__()
        self._source = source
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._done = False

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def read(self, size: int | None = -1) -> bytes:
        want = _PIECE if size is None or size < 0 else max(size, 4)
        while not self._done:
            data = self._source.read(want)
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
