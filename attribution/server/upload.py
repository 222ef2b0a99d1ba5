"""Unpack an uploaded evidence bundle (a tar archive: plain, gzip or zstd) safely.

``POST /api/v1/diagnose`` receives a bundle as a tarball. Before the offline engine
(``attribution.bundle``) may read it, ``unpack_bundle`` writes it into a fresh directory,
trusting nothing in the archive:

- the upload is read as a stream, at most ``max_upload`` bytes (and one more to notice
  that there is more); the compression is recognised by its magic bytes and undone as a
  stream, counting what comes out against ``max_unpacked``;
- each member is checked before anything is written: only regular files and directories;
  no absolute names, ``..`` components, NUL bytes, backslashes or drive letters; no name
  twice; no file where a directory is (or the other way round); its declared size within
  ``max_member`` and the running total within ``max_unpacked``; at most ``max_members``;
- files are written by this module (``O_EXCL | O_NOFOLLOW``, mode 0600; directories
  0700), never by ``tarfile``'s own extraction, so no ``filter=`` is relied on (Python
  3.11 has none by default) and nothing in the archive sets modes, owners or times;
- a damaged or truncated archive, including a tar that stops without its end-of-archive
  block, is refused.

Every refusal is an ``UploadError`` with a one-line message naming the member and an
HTTP status: 413 when a limit is exceeded, 400 when the archive is bad. The caller owns
``dest`` and removes it, whatever happened.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
import tarfile
import zlib
from dataclasses import dataclass
from gzip import GzipFile
from pathlib import Path
from typing import IO, BinaryIO, Final

from attribution.errors import AttributionError

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, backported (PyPI backports.zstd)
    from backports import zstd

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
# a zstd skippable frame (pzstd starts with one): 0x184D2A50..0x184D2A5F, little-endian
_SKIPPABLE = re.compile(rb"[\x50-\x5f]\x2a\x4d\x18", re.DOTALL)
MAX_DEPTH: Final = 32  # path components of one member: bundles are 3 or 4 deep
MiB: Final = 1 << 20

# What tarfile may pull while it parses one member's headers (its pax records or GNU
# long name included), and what may follow the end-of-archive block. tarfile reads a pax
# header's records whole into memory, so this bounds that memory.
MAX_HEADER_BYTES: Final = 1 * MiB
MAX_TRAILER_BYTES: Final = 1 * MiB

_CHUNK: Final = 1 * MiB  # bytes per copy step
_TAR_BUFSIZE: Final = 64 << 10  # tarfile's read size on the decompressed stream
_TAIL: Final = 4 * _TAR_BUFSIZE  # decompressed bytes kept to check the end-of-archive block
_BLOCK: Final = tarfile.BLOCKSIZE
_DRIVE: Final = re.compile(r"[A-Za-z]:")
_SHOWN: Final = 120  # characters of a member name shown in a message

# What a damaged compressed stream raises (gzip: BadGzipFile, zlib.error, EOFError).
_DECODE_ERRORS: Final = (OSError, EOFError, ValueError, zlib.error, zstd.ZstdError)
# What writing a member may fail with because of the archive rather than the server.
_NAME_ERRNOS: Final = {errno.ENAMETOOLONG, errno.EEXIST, errno.ELOOP, errno.ENOTDIR, errno.EISDIR}


class UploadError(AttributionError):
    """An uploaded bundle archive is refused; ``status`` is the HTTP status to answer with
    (413: a limit was exceeded, 400: the archive is damaged, hostile or not a bundle)."""

    def __init__(self, message: str, status: int = 400) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """How much an upload may cost: compressed bytes read, bytes after decompression
    (the whole tar stream, headers included), members, and bytes of one file."""

    max_upload: int = 64 * MiB
    max_unpacked: int = 1024 * MiB
    max_members: int = 10_000
    max_member: int = 512 * MiB

    def __post_init__(self) -> None:
        for name in ("max_upload", "max_unpacked", "max_members", "max_member"):
            if getattr(self, name) < 1:
                raise ValueError(f"UploadLimits.{name} must be at least 1")


def shown(name: str) -> str:
    """A member name for a one-line message: quoted, control characters escaped, cut short."""
    text = repr(name[:_SHOWN])
    return text + "..." if len(name) > _SHOWN else text


class _Upload(io.RawIOBase):
    """The client's bytes, at most ``limit`` of them; the first few can be looked at first."""

    def __init__(self, source: BinaryIO, limit: int) -> None:
        super().__init__()
        self._source = source
        self._limit = limit
        self._head = b""
        self.count = 0

    def readable(self) -> bool:
        return True

    def _pull(self, size: int) -> bytes:
        want = max(1, min(size, self._limit + 1 - self.count))
        try:
            data = self._source.read(want)
        except OSError as exc:
            raise UploadError(f"could not read the upload: {exc}") from None
        self.count += len(data)
        if self.count > self._limit:
            raise UploadError(f"upload larger than {self._limit} bytes", 413)
        return data

    def magic(self) -> bytes:
        """The first four bytes (fewer if the upload is shorter); they are read again."""
        while len(self._head) < 4:
            data = self._pull(4 - len(self._head))
            if not data:
                break
            self._head += data
        return self._head

    def read(self, size: int = -1, /) -> bytes:
        if size is None or size < 0:
            size = _CHUNK
        if size == 0:
            return b""
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
            return out
        return self._pull(size)


class _Unpacked(io.RawIOBase):
    """The decompressed tar stream as tarfile reads it: counted against ``max_unpacked``,
    with what tarfile pulls outside a member's data counted per header, and the last few
    bytes kept for the end-of-archive check."""

    def __init__(self, inner: _Upload | GzipFile | zstd.ZstdFile, kind: str, limit: int) -> None:
        super().__init__()
        self._inner = inner
        self._kind = kind
        self._limit = limit
        self.count = 0
        self.phase = "header"  # "header", "data" or "trailer"
        self.phase_count = 0
        self.member = ""  # the last member seen, for messages
        self.ended = False  # the decompressed stream has ended
        self._tail = bytearray()
        self._tail_start = 0

    def readable(self) -> bool:
        return True

    @property
    def kind(self) -> str:
        return self._kind

    def damaged(self, where: str, exc: Exception) -> UploadError:
        """The error for what tarfile raised: a truncated archive when the stream has ended."""
        what = "truncated archive" if self.ended else "damaged tar archive"
        return UploadError(f"{what}{where}: {exc}")

    def at(self, what: str) -> str:
        return f" ({what} member {shown(self.member)})" if self.member else ""

    def read(self, size: int = -1, /) -> bytes:
        if size is None or size < 0:
            size = _CHUNK
        try:
            data = self._inner.read(size)
        except UploadError:
            raise
        except _DECODE_ERRORS as exc:
            where = self.at("after" if self.phase != "data" else "in")
            raise UploadError(f"damaged {self._kind} data{where}: {exc}") from None
        if size and not data:
            self.ended = True
        self.count += len(data)
        if self.count > self._limit:
            raise UploadError(
                f"archive unpacks to more than {self._limit} bytes{self.at('at')}", 413
            )
        if self.phase != "data":
            self.phase_count += len(data)
            if self.phase == "header" and self.phase_count > MAX_HEADER_BYTES:
                raise UploadError(
                    f"tar header larger than {MAX_HEADER_BYTES} bytes{self.at('after')}", 413
                )
            if self.phase == "trailer" and self.phase_count > MAX_TRAILER_BYTES:
                raise UploadError(
                    f"more than {MAX_TRAILER_BYTES} bytes after the end of the tar archive"
                )
        self._tail += data
        if len(self._tail) > _TAIL:
            cut = len(self._tail) - _TAIL
            del self._tail[:cut]
            self._tail_start += cut
        return data

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.phase_count = 0

    def block(self, offset: int) -> bytes | None:
        """The tar block at ``offset`` when it is still kept (reading up to it if needed);
        shorter than a block when the stream ends first, None when no longer kept."""
        while self.count < offset + _BLOCK and self.read(_TAR_BUFSIZE):
            pass
        if offset < self._tail_start:
            return None
        start = offset - self._tail_start
        return bytes(self._tail[start : start + _BLOCK])


def _decompressed(upload: _Upload, limits: UploadLimits) -> _Unpacked:
    magic = upload.magic()
    if not magic:
        raise UploadError("empty upload: no archive was sent")
    inner: _Upload | GzipFile | zstd.ZstdFile
    if magic.startswith(GZIP_MAGIC):
        kind, inner = "gzip", GzipFile(fileobj=upload, mode="rb")
    elif magic.startswith(ZSTD_MAGIC) or _SKIPPABLE.match(magic):
        kind, inner = "zstd", zstd.ZstdFile(upload)
    else:
        kind, inner = "tar", upload
    return _Unpacked(inner, kind, limits.max_unpacked)


def _parts(name: str) -> tuple[str, ...]:
    """The path components of a member name, refusing every name that could leave ``dest``."""
    what = f"member {shown(name)}"
    if "\x00" in name:
        raise UploadError(f"{what}: a NUL byte in its name")
    if "\\" in name:
        raise UploadError(f"{what}: a backslash in its name (Windows path)")
    if _DRIVE.match(name):
        raise UploadError(f"{what}: a drive letter in its name (Windows path)")
    if name.startswith("/"):
        raise UploadError(f"{what}: an absolute name")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise UploadError(f"{what}: a '..' component in its name")
    if len(parts) > MAX_DEPTH:
        raise UploadError(f"{what}: more than {MAX_DEPTH} directories deep")
    return parts


def _kind(member: tarfile.TarInfo) -> str | None:
    """What a member is when it may not be extracted; None for regular files and directories."""
    if member.issparse():
        return "a sparse file"
    if member.isreg() or member.isdir():
        return None
    if member.issym():
        return f"a symbolic link (to {shown(member.linkname)})"
    if member.islnk():
        return f"a hard link (to {shown(member.linkname)})"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a FIFO"
    return f"a member of unsupported tar type {member.type!r}"


@dataclass(slots=True)
class _Extraction:
    """What has been written so far (names as component tuples)."""

    dest: Path
    limits: UploadLimits
    files: set[tuple[str, ...]]
    dirs: set[tuple[str, ...]]  # made, for a member or as a parent
    listed_dirs: set[tuple[str, ...]]  # directory members
    members: int = 0
    declared: int = 0

    def check(self, member: tarfile.TarInfo) -> tuple[str, ...] | None:
        """The member's path components once every rule passes; None for the top itself."""
        self.members += 1
        what = f"member {shown(member.name)}"
        if self.members > self.limits.max_members:
            raise UploadError(f"more than {self.limits.max_members} members at {what}", 413)
        kind = _kind(member)
        if kind is not None:
            raise UploadError(f"{what} is {kind}; only regular files and directories are accepted")
        parts = _parts(member.name)
        if not parts:
            if member.isdir():
                return None
            raise UploadError(f"{what}: a file without a name")
        if parts in self.files or (member.isdir() and parts in self.listed_dirs):
            raise UploadError(f"duplicate {what}")
        if member.isreg() and parts in self.dirs:
            raise UploadError(f"{what} is a file but an earlier member made it a directory")
        for i in range(1, len(parts)):
            if parts[:i] in self.files:
                raise UploadError(f"{what} is inside {shown('/'.join(parts[:i]))}, a file")
        target = self.dest.joinpath(*parts)
        if not target.resolve().is_relative_to(self.dest):
            raise UploadError(f"{what} would be written outside the upload directory")
        if member.isreg():
            if member.size < 0:
                raise UploadError(f"{what} declares a negative size ({member.size})")
            if member.size > self.limits.max_member:
                raise UploadError(
                    f"{what} is {member.size} bytes, more than {self.limits.max_member}", 413
                )
            self.declared += member.size
            if self.declared > self.limits.max_unpacked:
                raise UploadError(
                    f"archive unpacks to more than {self.limits.max_unpacked} bytes at {what}",
                    413,
                )
        return parts

    def mkdirs(self, parts: tuple[str, ...]) -> None:
        for i in range(1, len(parts) + 1):
            if parts[:i] not in self.dirs:
                os.mkdir(self.dest.joinpath(*parts[:i]), 0o700)
                self.dirs.add(parts[:i])

    def write(self, member: tarfile.TarInfo, parts: tuple[str, ...], data: IO[bytes]) -> None:
        self.mkdirs(parts[:-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.dest.joinpath(*parts), flags, 0o600)
        self.files.add(parts)
        with open(fd, "wb", closefd=True) as out:
            left = member.size
            while left:
                chunk = data.read(min(_CHUNK, left))
                if not chunk:
                    raise UploadError(f"truncated archive: member {shown(member.name)} ends early")
                out.write(chunk)
                left -= len(chunk)


def _bundle_root(dest: Path, done: _Extraction) -> Path:
    if ("job.json",) in done.files:
        return dest
    tops = {p[0] for p in done.files} | {p[0] for p in done.dirs}
    if len(tops) == 1:
        (top,) = tops
        if (top, "job.json") in done.files:
            return dest / top
    raise UploadError("no job.json at the top of the archive or in its one top directory")


def _open_tar(stream: _Unpacked) -> tarfile.TarFile:
    """tarfile reading ``stream`` front to back (it parses the first header now)."""
    try:
        return tarfile.open(fileobj=stream, mode="r|", bufsize=_TAR_BUFSIZE)
    except (tarfile.TarError, ValueError) as exc:  # ValueError: a damaged GNU sparse map
        raise UploadError(f"not a tar archive ({stream.kind}): {exc}") from None


def unpack_bundle(source: BinaryIO, dest: Path, limits: UploadLimits) -> Path:
    """Unpack the bundle tarball read from ``source`` into the empty directory ``dest``.

    Returns the bundle's root: ``dest`` when ``job.json`` is at the top of the archive,
    ``dest/<top>`` when everything is inside one top directory that holds it.

    Raises:
        UploadError: the upload is refused (``status`` 413: a limit; 400: anything else).
        ValueError: ``dest`` is not an empty directory.
    """
    dest = Path(dest).resolve()
    if not dest.is_dir() or any(dest.iterdir()):
        raise ValueError(f"{dest}: not an empty directory")
    upload = _Upload(source, limits.max_upload)
    stream = _decompressed(upload, limits)
    done = _Extraction(dest, limits, files=set(), dirs=set(), listed_dirs=set())
    with _open_tar(stream) as tar:
        while True:
            stream.enter("header")
            try:
                member = tar.next()
            except (tarfile.TarError, ValueError) as exc:  # ValueError: damaged sparse map
                raise stream.damaged(stream.at("after"), exc) from None
            if member is None:
                break
            stream.member = member.name
            parts = done.check(member)
            if parts is None:
                continue
            try:
                if member.isdir():
                    if parts not in done.dirs:
                        done.mkdirs(parts)
                    done.listed_dirs.add(parts)
                    continue
                data = tar.extractfile(member)
                if data is None:  # not reached: only regular files get here
                    raise UploadError(f"member {shown(member.name)} has no data")
                stream.enter("data")
                done.write(member, parts, data)
            except tarfile.TarError as exc:
                raise stream.damaged(f" in member {shown(member.name)}", exc) from None
            except OSError as exc:
                if exc.errno not in _NAME_ERRNOS:
                    raise
                raise UploadError(
                    f"member {shown(member.name)} cannot be written: {exc.strerror}"
                ) from None
        _check_end(stream, tar.offset)
    return _bundle_root(dest, done)


def _check_end(stream: _Unpacked, offset: int) -> None:
    """tarfile ends quietly on a damaged or missing header after the first one; only a
    zero block (the end-of-archive marker) is a proper end. Then read what follows to
    its end, which also checks the compressed stream's own end."""
    stream.enter("trailer")
    block = stream.block(offset)
    if block is not None and len(block) < _BLOCK:
        raise UploadError(f"truncated archive: no end-of-archive block{stream.at('after')}")
    if block is not None and block.count(0) != _BLOCK:
        raise UploadError(f"damaged tar header at byte {offset}{stream.at('after')}")
    while stream.read(_CHUNK):
        pass
