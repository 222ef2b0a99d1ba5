"""Unpacking uploaded bundle tarballs (attribution.server.upload).

Every archive here is a real tar stream built with ``tarfile`` (hostile ones by hand-made
``TarInfo`` headers), compressed with the real gzip/zstd codecs and unpacked into a real
directory; the good bundle is then diagnosed by the real engine.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import stat
import tarfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from attribution.bundle import diagnose_bundle
from attribution.model import verdict_to_dict
from attribution.rules.compiled import RuleSet
from attribution.server.upload import (
    MAX_HEADER_BYTES,
    MAX_TRAILER_BYTES,
    UploadError,
    UploadLimits,
    unpack_bundle,
)
from attribution.sources.reader import zstd
from tests.conftest import CASES

CASE = CASES / "blind-nccl-version-mismatch"
MiB = 1 << 20
DEFAULT = UploadLimits()
JOB = b'{"job_id": "1", "state": "FAILED", "nodes": "n1"}\n'

Entry = tuple[str, bytes | None] | tarfile.TarInfo  # (name, data) a file, (name, None) a dir


def _info(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def make_tar(entries: Iterable[Entry], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar archive in memory: files with their data, directories, or raw headers."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
                continue
            name, data = entry
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def open_tar(entries: Iterable[Entry]) -> bytes:
    """``make_tar`` without its end-of-archive blocks: more members may be appended."""
    data = make_tar(entries)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        last = tar.getmembers()[-1]
    return data[: last.offset_data + -(-last.size // 512) * 512]


def case_tar(arcname: str) -> bytes:
    """The real case directory as ``tar cf - -C CASES <dir>`` (arcname "" puts it at the top,
    "." like ``tar -C case .``)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        if arcname:
            tar.add(CASE, arcname=arcname)
        else:
            for path in sorted(CASE.iterdir()):
                tar.add(path, arcname=path.name)
    return out.getvalue()


def compress(data: bytes, how: str) -> bytes:
    if how == "gzip":
        return gzip.compress(data)
    if how == "zstd":
        return bytes(zstd.compress(data))
    return data


def unpack(data: bytes, tmp_path: Path, limits: UploadLimits = DEFAULT) -> Path:
    dest = tmp_path / "dest"
    dest.mkdir(parents=True, exist_ok=True)
    return unpack_bundle(io.BytesIO(data), dest, limits)


def refused(data: bytes, tmp_path: Path, limits: UploadLimits = DEFAULT) -> UploadError:
    with pytest.raises(UploadError) as caught:
        unpack(data, tmp_path, limits)
    err = caught.value
    assert "\n" not in str(err)
    return err


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# ------------------------------------------------------------------- good bundles


@pytest.mark.parametrize("how", ["gzip", "zstd", "plain"])
@pytest.mark.parametrize("arcname", ["mycase", "", "."])
def test_a_bundle_unpacks_from_each_layout_and_compression(
    tmp_path: Path, how: str, arcname: str
) -> None:
    root = unpack(compress(case_tar(arcname), how), tmp_path)
    dest = (tmp_path / "dest").resolve()
    assert root == (dest / "mycase" if arcname == "mycase" else dest)
    assert files_under(root) == files_under(CASE)
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600) or path == dest, path


def test_an_unpacked_bundle_gets_the_verdict_of_the_original(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    root = unpack(compress(case_tar("mycase"), "gzip"), tmp_path)
    at = datetime(2026, 6, 1, tzinfo=UTC)
    _, original = diagnose_bundle(CASE, ruleset, diagnosed_at=at)
    _, uploaded = diagnose_bundle(root, ruleset, diagnosed_at=at)
    assert verdict_to_dict(uploaded) == verdict_to_dict(original)
    assert uploaded.cause is not None and uploaded.cause.id == "nccl-version-outlier-node"


def test_modes_and_special_bits_from_the_archive_are_not_kept(tmp_path: Path) -> None:
    setuid = _info("case/run.sh", size=0, mode=0o4777)
    root = unpack(make_tar([("case/", None), ("case/job.json", JOB), setuid]), tmp_path)
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o600
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_dest_must_be_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "old").write_text("x")
    with pytest.raises(ValueError, match="not an empty directory"):
        unpack(make_tar([("job.json", JOB)]), tmp_path)


# ---------------------------------------------------------------- hostile members


@pytest.mark.parametrize(
    ("member", "says"),
    [
        (_info("case/nodes/n1/kernel.log", tarfile.SYMTYPE, linkname="/etc/shadow"), "symbolic"),
        (_info("case/job/stderr.log", tarfile.LNKTYPE, linkname="case/job.json"), "hard link"),
        (_info("case/nodes/n1/zero", tarfile.CHRTYPE, devmajor=1, devminor=5), "device"),
        (_info("case/nodes/n1/disk", tarfile.BLKTYPE, devmajor=8, devminor=0), "device"),
        (_info("case/nodes/n1/pipe", tarfile.FIFOTYPE), "FIFO"),
        (_info("case/nodes/n1/holes", tarfile.GNUTYPE_SPARSE), "sparse"),
        (_info("case/nodes/n1/odd", b"Z"), "unsupported tar type"),
    ],
    ids=["symlink", "hardlink", "chardev", "blockdev", "fifo", "sparse", "unknown"],
)
def test_only_files_and_directories_are_extracted(
    tmp_path: Path, member: tarfile.TarInfo, says: str
) -> None:
    fmt = tarfile.GNU_FORMAT if member.type == tarfile.GNUTYPE_SPARSE else tarfile.PAX_FORMAT
    data = make_tar([("case/job.json", JOB), member], fmt)
    err = refused(data, tmp_path)
    assert err.status == 400
    assert says in str(err) and member.name in str(err)
    assert not os.path.lexists(tmp_path / "dest" / member.name)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("/tmp/upload-escape/job.json", "absolute"),
        ("../escape/job.json", "'..'"),
        ("case/../../escape.txt", "'..'"),
        ("case/nodes/..", "'..'"),
        ("C:/escape/job.json", "drive letter"),
        ("c:escape.txt", "drive letter"),
        ("case\\..\\..\\escape.txt", "backslash"),
    ],
)
def test_names_that_could_leave_the_directory_are_refused(
    tmp_path: Path, name: str, says: str
) -> None:
    err = refused(make_tar([("case/job.json", JOB), (name, b"x")]), tmp_path)
    assert err.status == 400 and says in str(err)
    assert repr(name) in str(err)
    assert not Path("/tmp/upload-escape").exists()
    assert not (tmp_path / "escape").exists() and not (tmp_path / "escape.txt").exists()


def test_a_name_the_file_system_cannot_hold_is_refused(tmp_path: Path) -> None:
    name = "case/" + "x" * 300
    err = refused(make_tar([("case/job.json", JOB), (name, b"")]), tmp_path)
    assert err.status == 400 and "cannot be written: File name too long" in str(err)


def test_a_nul_byte_in_a_name_is_refused(tmp_path: Path) -> None:
    # a ustar name field ends at its first NUL; a pax "path" record can carry one
    info = _info("case/plain.log", size=0)
    info.pax_headers = {"path": "case/job\x00.json"}
    with tarfile.open(fileobj=io.BytesIO(make_tar([info]))) as tar:
        assert tar.getnames() == ["case/job\x00.json"]
    err = refused(make_tar([("case/", None), info]), tmp_path)
    assert err.status == 400 and "NUL" in str(err) and "'case/job\\x00.json'" in str(err)


@pytest.mark.parametrize(
    "second",
    ["case/job.json", "./case/job.json", "case//job.json"],
)
def test_a_file_named_twice_is_refused(tmp_path: Path, second: str) -> None:
    err = refused(make_tar([("case/job.json", JOB), (second, b"{}")]), tmp_path)
    assert err.status == 400 and "duplicate" in str(err) and repr(second) in str(err)
    assert (tmp_path / "dest" / "case" / "job.json").read_bytes() == JOB  # not overwritten


def test_a_directory_named_twice_is_refused(tmp_path: Path) -> None:
    err = refused(make_tar([("case/", None), ("case/job.json", JOB), ("case", None)]), tmp_path)
    assert "duplicate" in str(err)


def test_a_directory_listed_after_its_files_is_fine(tmp_path: Path) -> None:
    root = unpack(make_tar([("case/job.json", JOB), ("case/job/", None), ("case", None)]), tmp_path)
    assert root.name == "case" and (root / "job").is_dir()


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([("case/job.json", JOB), ("case/job.json/x", b"")], "inside 'case/job.json', a file"),
        ([("case/job.json", JOB), ("case/job.json/", None)], "duplicate"),
        ([("case/job.json", JOB), ("case/d/x", b""), ("case/d", b"")], "made it a directory"),
    ],
    ids=["file-then-under-it", "file-then-dir", "dir-then-file"],
)
def test_a_file_and_a_directory_of_one_name_are_refused(
    tmp_path: Path, entries: list[Entry], says: str
) -> None:
    err = refused(make_tar(entries), tmp_path)
    assert err.status == 400 and says in str(err)


# ------------------------------------------------------------------------ limits


class Endless(io.RawIOBase):
    """An upload that never ends: a tar header announcing a huge file, then its data."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.served = 0
        self.rng = random.Random(7)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        assert size > 0, "the whole upload was asked for"
        assert self.served < 64 * MiB, "read far past max_upload"
        data = self.head[self.served : self.served + size] or self.rng.randbytes(size)
        self.served += len(data)
        return data


def test_an_upload_over_max_upload_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    source = Endless(
        open_tar([("case/job.json", JOB)])
        + _info("case/big", size=1 << 40).tobuf(tarfile.GNU_FORMAT)
    )
    dest = tmp_path / "dest"
    dest.mkdir()
    limits = UploadLimits(max_upload=256 << 10, max_unpacked=1 << 41, max_member=1 << 41)
    with pytest.raises(UploadError, match=r"upload larger than 262144 bytes") as caught:
        unpack_bundle(source, dest, limits)  # type: ignore[arg-type]
    assert caught.value.status == 413
    assert limits.max_upload < source.served <= limits.max_upload + 1
    assert (dest / "case" / "big").stat().st_size < limits.max_upload  # refused while copying


def test_bytes_after_the_archive_count_towards_max_upload(tmp_path: Path) -> None:
    data = case_tar("mycase") + bytes(200 << 10)
    assert unpack(data, tmp_path, UploadLimits(max_upload=len(data))).name == "mycase"
    err = refused(data, tmp_path / "again", UploadLimits(max_upload=len(data) - 1))
    assert err.status == 413 and "upload larger" in str(err)


def test_an_upload_of_exactly_max_upload_is_accepted(tmp_path: Path) -> None:
    data = gzip.compress(case_tar("mycase"))
    assert unpack(data, tmp_path, UploadLimits(max_upload=len(data))).name == "mycase"


@pytest.mark.parametrize("how", ["gzip", "zstd"])
def test_a_small_bomb_over_max_member_is_refused_before_it_is_written(
    tmp_path: Path, how: str
) -> None:
    bomb = compress(make_tar([("case/job.json", JOB), ("case/job/out.log", bytes(32 * MiB))]), how)
    assert len(bomb) < 64 << 10
    err = refused(bomb, tmp_path, UploadLimits(max_member=1 * MiB))
    assert err.status == 413 and "'case/job/out.log' is 33554432 bytes, more than 1048576" in str(
        err
    )
    assert not (tmp_path / "dest" / "case" / "job" / "out.log").exists()


def test_files_over_max_unpacked_together_are_refused(tmp_path: Path) -> None:
    three = [("case/job.json", JOB)] + [(f"case/job/{i}.log", bytes(3 * MiB)) for i in range(3)]
    err = refused(gzip.compress(make_tar(three)), tmp_path, UploadLimits(max_unpacked=8 * MiB))
    assert err.status == 413 and "more than 8388608 bytes at member 'case/job/2.log'" in str(err)
    written = files_under(tmp_path / "dest")
    assert sorted(written) == ["case/job.json", "case/job/0.log", "case/job/1.log"]


def test_max_unpacked_counts_the_tar_stream_not_only_file_data(tmp_path: Path) -> None:
    # 40 files of 10 bytes: 400 bytes of data, but each costs two 512-byte blocks
    many = [("case/job.json", JOB)] + [(f"case/job/{i}.log", b"0123456789") for i in range(40)]
    data = gzip.compress(make_tar(many, tarfile.GNU_FORMAT))
    assert unpack(data, tmp_path, UploadLimits(max_unpacked=64 << 10)).name == "case"
    err = refused(data, tmp_path / "again", UploadLimits(max_unpacked=16 << 10))
    assert err.status == 413 and "unpacks to more than 16384 bytes" in str(err)


def test_more_than_max_members_is_refused(tmp_path: Path) -> None:
    entries = [("case/job.json", JOB)] + [(f"case/job/{i}.log", b"") for i in range(9)]
    assert unpack(make_tar(entries), tmp_path, UploadLimits(max_members=10)).name == "case"
    entries.append(("case/job/9.log", b""))
    err = refused(make_tar(entries), tmp_path / "again", UploadLimits(max_members=10))
    assert err.status == 413 and "more than 10 members at member 'case/job/9.log'" in str(err)


@pytest.mark.parametrize("how", ["pax", "gnu-longname"])
def test_a_huge_tar_header_is_refused(tmp_path: Path, how: str) -> None:
    big = MAX_HEADER_BYTES + MiB
    if how == "pax":
        info = _info("case/x.log", size=0)
        info.pax_headers = {"comment": "x" * big}
        data = make_tar([("case/job.json", JOB), info])
    else:
        data = make_tar([("case/job.json", JOB), ("case/" + "n" * big, b"")], tarfile.GNU_FORMAT)
    err = refused(gzip.compress(data), tmp_path)
    assert err.status == 413 and "tar header larger than" in str(err)
    assert "after member 'case/job.json'" in str(err)


def test_a_directory_member_with_data_is_bounded_too(tmp_path: Path) -> None:
    # 64 MiB of zeros "inside" a directory member: tarfile does not skip a directory's data,
    # so it reads the zeros as the end of the archive and what follows as trailing data
    hollow = _info("case/nodes", tarfile.DIRTYPE, size=64 * MiB, mode=0o755)
    header = gzip.compress(open_tar([("case/job.json", JOB)]) + hollow.tobuf())
    data = header + gzip.compress(bytes(64 * MiB)) + gzip.compress(bytes(1024))
    err = refused(data, tmp_path)
    assert "after the end of the tar archive" in str(err) or "tar header larger" in str(err)


def test_a_long_tail_after_the_archive_is_refused(tmp_path: Path) -> None:
    data = gzip.compress(make_tar([("job.json", JOB)]) + bytes(MAX_TRAILER_BYTES + MiB))
    err = refused(data, tmp_path)
    assert err.status == 400 and "after the end of the tar archive" in str(err)


def _zeros_gz(size: int, piece: bytes) -> list[bytes]:
    """gzip members that inflate to ``size`` zero bytes (``piece`` inflates to 64 MiB)."""
    assert size % (64 * MiB) == 0
    return [piece] * (size // (64 * MiB))


def test_a_gzip_bomb_against_the_default_limits(tmp_path: Path) -> None:
    """Three members of zeros (320 + 320 + 448 MiB, each under max_member) in a ~1 MB
    gzip that inflates to more than max_unpacked; unpacking stops before the third."""
    piece = gzip.compress(bytes(64 * MiB), compresslevel=9)
    parts: list[bytes] = [gzip.compress(open_tar([("case/job.json", JOB)]))]
    for i, size in enumerate((320 * MiB, 320 * MiB, 448 * MiB)):
        parts.append(gzip.compress(_info(f"case/job/{i}.log", size=size).tobuf()))
        parts += _zeros_gz(size, piece)
    parts.append(gzip.compress(bytes(1024)))
    bomb = b"".join(parts)
    assert len(bomb) < 4 * MiB
    assert DEFAULT.max_upload >= len(bomb)
    started = time.monotonic()
    try:
        err = refused(bomb, tmp_path)
        assert err.status == 413
        assert f"more than {DEFAULT.max_unpacked} bytes at member 'case/job/2.log'" in str(err)
        on_disk = sum(p.stat().st_size for p in (tmp_path / "dest").rglob("*") if p.is_file())
        assert 640 * MiB <= on_disk <= DEFAULT.max_unpacked
        assert not (tmp_path / "dest" / "case" / "job" / "2.log").exists()
    finally:
        for path in (tmp_path / "dest" / "case" / "job").glob("*.log"):
            path.unlink()
    assert time.monotonic() - started < 20


# ------------------------------------------------------------ damaged archives


def _offsets(data: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [m.offset for m in tar.getmembers()]


def test_empty_and_foreign_uploads_are_refused(tmp_path: Path) -> None:
    assert "empty upload" in str(refused(b"", tmp_path))
    noise = random.Random(3).randbytes(4096)
    assert "not a tar archive (tar)" in str(refused(noise, tmp_path))
    assert "not a tar archive (gzip)" in str(refused(gzip.compress(noise), tmp_path))
    err = refused(b"\x28\xb5\x2f\xfd" + noise, tmp_path)
    assert err.status == 400 and "damaged zstd data" in str(err)


@pytest.mark.parametrize("how", ["gzip", "zstd"])
def test_a_truncated_compressed_archive_is_refused(tmp_path: Path, how: str) -> None:
    data = compress(case_tar("mycase"), how)
    err = refused(data[: len(data) // 2], tmp_path)
    assert err.status == 400 and f"damaged {how} data" in str(err)


@pytest.mark.parametrize("how", ["gzip", "zstd"])
def test_a_compressed_archive_missing_only_its_end_is_refused(tmp_path: Path, how: str) -> None:
    # the whole tar is there; only the compressed stream's last bytes are not
    data = compress(case_tar("mycase"), how)
    err = refused(data[:-4], tmp_path)
    assert err.status == 400 and f"damaged {how} data" in str(err)


def test_garbage_after_a_gzip_stream_is_refused(tmp_path: Path) -> None:
    err = refused(gzip.compress(case_tar("mycase")) + b"trailing junk", tmp_path)
    assert err.status == 400 and "damaged gzip data" in str(err)


def test_a_plain_tar_cut_anywhere_is_refused(tmp_path: Path) -> None:
    data = case_tar("mycase")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    # each member has a pax header (512 + 512 bytes: the fractional mtime) before its own
    stderr, last = members[4], members[-1]
    assert stderr.name == "mycase/job/stderr.log" and stderr.offset_data - stderr.offset == 1536
    cuts = {
        "in a member's data": stderr.offset_data + 10,
        "at a header": stderr.offset,
        "in a header": stderr.offset + 100,
        "between a pax header and its member's": stderr.offset + 1024,
        "before the end-of-archive block": last.offset_data + -(-last.size // 512) * 512,
    }
    for i, (where, cut) in enumerate(cuts.items()):
        err = refused(data[:cut], tmp_path / str(i))
        assert err.status == 400, where
        assert "truncated" in str(err), (where, str(err))


def test_a_damaged_header_after_the_first_is_refused(tmp_path: Path) -> None:
    data = bytearray(case_tar("mycase"))
    second = _offsets(bytes(data))[2]
    data[second : second + 512] = random.Random(5).randbytes(512)
    err = refused(gzip.compress(bytes(data)), tmp_path)
    assert err.status == 400 and f"damaged tar header at byte {second}" in str(err)


# ------------------------------------------------------------- not a bundle


@pytest.mark.parametrize(
    "entries",
    [
        [("a/job.json", JOB), ("b/job.json", JOB)],
        [("a/b/job.json", JOB)],
        [("job.json/", None), ("job.json/x", JOB)],
        [("case/job.json", JOB), ("README", b"")],
        [("case/", None)],
    ],
    ids=["two-top-dirs", "too-deep", "job-json-a-dir", "top-dir-and-a-file", "no-files"],
)
def test_an_archive_without_job_json_where_it_belongs_is_refused(
    tmp_path: Path, entries: list[Entry]
) -> None:
    err = refused(make_tar(entries), tmp_path)
    assert err.status == 400
    assert str(err) == "no job.json at the top of the archive or in its one top directory"


def test_an_empty_tar_is_not_a_bundle(tmp_path: Path) -> None:
    err = refused(gzip.compress(make_tar([])), tmp_path)
    assert "no job.json" in str(err)
