"""Sources that were not read, or read as junk, say so and why (issue 18, problems 4 to 6).

Each reproducer is a tiny bundle in ``tests/hostile/source-<name>/``; what git cannot keep (a
FIFO, a link out of the bundle) or should not (a bomb) is made here, in a copy. Every bundle is
diagnosed the way an operator does, ``sattr diagnose --json``, and must exit 0 with a verdict
whose coverage entry for the offending file says what was done with it.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from attribution.cli import main
from attribution.sources import reader

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, backported (PyPI backports.zstd)
    from backports import zstd

HOSTILE = Path(__file__).resolve().parent / "hostile"
XID79 = "2026-01-01T10:30:00+00:00 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
CHATTER = "2026-01-01T10:40:00+00:00 n1 kernel: usb 1-1: USB disconnect, device number 2\n"


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(HOSTILE / f"source-{name}", tmp_path / name, symlinks=True))


def _diagnose(bundle: Path, *, timeout: float = 60.0) -> tuple[Result, dict[str, Any]]:
    """``sattr diagnose --json`` in a thread: a reader that blocks fails the test, not the run."""
    done: list[Result] = []
    worker = threading.Thread(
        target=lambda: done.append(CliRunner().invoke(main, ["diagnose", "--json", str(bundle)])),
        daemon=True,
    )
    worker.start()
    worker.join(timeout)
    assert done, f"sattr diagnose did not finish within {timeout} s (a blocking read?)"
    result = done[0]
    assert result.exit_code == 0, result.output
    return result, json.loads(result.stdout)


def _notes(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A coverage entry's notes, but the one every bundle without ownership facts has."""
    return [n for n in entry["notes"] if n["code"] != "ownership_unchecked"]


def _codes(entry: dict[str, Any]) -> list[str]:
    return [n["code"] for n in _notes(entry)]


def _entry(verdict: dict[str, Any], stream: str, node: str | None = "n1") -> dict[str, Any]:
    found = [c for c in verdict["coverage"] if c["stream"] == stream and c["node"] == node]
    assert len(found) == 1, [(c["stream"], c["node"]) for c in verdict["coverage"]]
    return found[0]


# ------------------------------------------------------------------ encodings and compression


@pytest.mark.parametrize(
    "name",
    [
        "zstd-skippable",
        "gzip-of-gzip",
        "gzip-of-zstd",
        "zstd-of-gzip",
        "bzip2",
        "xz",
        "utf16le-nobom",
        "utf16be-nobom",
        "utf32le-bom",
        "utf32be-bom",
        "utf32le-nobom",
        "utf32be-nobom",
    ],
)
def test_compressed_or_encoded_logs_are_decoded(name: str) -> None:
    _, verdict = _diagnose(HOSTILE / f"source-{name}")
    kernel = _entry(verdict, "kernel")
    assert kernel["status"] == "ok", kernel
    assert kernel["lines"] == 3, kernel
    assert _codes(kernel) == [], kernel
    assert verdict["sub_domain"] == "hardware", verdict["summary"]
    assert [r["node"] for r in verdict["responsible"]] == ["n1"]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("three-layers", "compressed 3 times or more (gzip in gzip in gzip)"),
        ("lz4", "lz4"),
    ],
)
def test_what_cannot_be_decoded_says_so(name: str, words: str) -> None:
    _, verdict = _diagnose(HOSTILE / f"source-{name}")
    kernel = _entry(verdict, "kernel")
    assert kernel["status"] == "unreadable", kernel
    assert _codes(kernel) == ["unreadable"]
    assert words in _notes(kernel)[0]["args"]["error"], kernel
    assert kernel["lines"] == 0
    assert verdict["sub_domain"] != "hardware"


def test_a_zstd_file_of_skippable_frames_only_is_empty_not_junk(tmp_path: Path) -> None:
    bundle = _copy("zstd-skippable", tmp_path)
    log = bundle / "nodes" / "n1" / "kern.log.zst"
    log.write_bytes(bytes.fromhex("532a4d18") + (8).to_bytes(4, "little") + b"\xff" * 8)
    _, verdict = _diagnose(bundle)
    assert _entry(verdict, "kernel")["status"] == "empty"


def test_nul_padded_text_is_not_taken_for_utf16(tmp_path: Path) -> None:
    """A crash leaves runs of NULs in a log; the text around them is still UTF-8."""
    bundle = _copy("utf16le-nobom", tmp_path)
    (bundle / "nodes" / "n1" / "kern.log").write_bytes(b"\x00" * 4096 + XID79.encode())
    _, verdict = _diagnose(bundle)
    assert verdict["sub_domain"] == "hardware"


# ------------------------------------------------------------------ bombs


def _zstd_bomb(path: Path, size: int) -> None:
    """About ``size`` bytes of kernel lines after one XID line, written as repeats of one
    zstd frame (a few KiB each): 20 GB takes a second to write and about 1 MiB on disk."""
    block = (CHATTER * ((64 << 20) // len(CHATTER))).encode()
    frame = zstd.compress(block, 19)
    with path.open("wb") as out:
        out.write(zstd.compress(XID79.encode()))
        for _ in range(size // len(block)):
            out.write(frame)


def _gzip_bomb(path: Path, size: int) -> None:
    """gzip of gzip: the inner stream, about ``size`` bytes of kernel lines after one XID
    line, is itself repeats of one gzip member, and the outer layer squeezes those."""
    block = (CHATTER * ((16 << 20) // len(CHATTER))).encode()
    member = gzip.compress(block, 9, mtime=0)
    inner = gzip.compress(XID79.encode(), mtime=0) + member * (size // len(block))
    path.write_bytes(gzip.compress(inner, 9, mtime=0))


@pytest.mark.parametrize(
    ("name", "make", "file"),
    [
        ("zstd-bomb", _zstd_bomb, "kern.log.zst"),
        ("gzip-bomb", _gzip_bomb, "kern.log.gz"),
    ],
)
def test_a_decompression_bomb_stops_at_the_cap(
    name: str, make: Any, file: str, tmp_path: Path
) -> None:
    bundle = _copy(name, tmp_path)
    (bundle / "nodes" / "n1").mkdir(parents=True)
    log = bundle / "nodes" / "n1" / file
    make(log, 20 * 10**9)
    assert log.stat().st_size < 4 << 20
    started = time.monotonic()
    _, verdict = _diagnose(bundle)
    took = time.monotonic() - started
    kernel = _entry(verdict, "kernel")
    assert kernel["status"] == "error", kernel
    assert _codes(kernel) == ["read_error"], kernel
    cap = reader.MAX_DECOMPRESSED
    assert f"decompressed to {cap:,} bytes" in _notes(kernel)[0]["args"]["error"]
    assert cap // 2 <= kernel["bytes"] <= cap
    # the lines before the cap are used
    assert verdict["sub_domain"] == "hardware"
    assert [r["node"] for r in verdict["responsible"]] == ["n1"]
    assert took < 45, took


def test_a_layer_that_takes_far_more_than_it_gives_stops(tmp_path: Path) -> None:
    """Runs of empty gzip members (20 bytes each, giving nothing) inside a gzip layer: each
    costs microseconds, so a million of them from 20 KiB on disk would be a hang. A layer stops
    when it has taken 4 MiB more than it gave."""
    empty = gzip.compress(b"", mtime=0)
    inner = gzip.compress(XID79.encode(), mtime=0) + empty * 1_000_000
    log = tmp_path / "kern.log.gz"
    log.write_bytes(gzip.compress(inner, 9, mtime=0))
    started = time.monotonic()
    with reader.open_log(log) as handle:
        assert XID79.encode() in handle.read(1 << 16)
        with pytest.raises(ValueError, match="gives far less than it takes"):
            _drain(handle)
    assert time.monotonic() - started < 10


def _drain(handle: Any) -> None:
    while handle.read(1 << 16):
        pass


# ------------------------------------------------------------------ not regular files


def test_a_directory_named_like_a_log_is_not_a_regular_file() -> None:
    _, verdict = _diagnose(HOSTILE / "source-dir-kernel-log")
    kernel = _entry(verdict, "kernel")
    assert kernel["status"] == "unreadable", kernel
    assert _notes(kernel) == [{"code": "not_regular_file", "args": {"file": "nodes/n1/kernel.log"}}]


def test_a_fifo_named_like_a_node_log_is_that_streams_note(tmp_path: Path) -> None:
    bundle = _copy("dir-kernel-log", tmp_path)
    shutil.rmtree(bundle / "nodes" / "n1" / "kernel.log")
    os.mkfifo(bundle / "nodes" / "n1" / "syslog.log")
    _, verdict = _diagnose(bundle, timeout=30)
    syslog = _entry(verdict, "syslog")
    assert syslog["status"] == "unreadable", syslog
    assert _notes(syslog) == [{"code": "not_regular_file", "args": {"file": "nodes/n1/syslog.log"}}]
    assert _codes(_entry(verdict, "kernel")) == ["no_file"]


def test_a_directory_in_job_output_is_noted(tmp_path: Path) -> None:
    bundle = _copy("dir-kernel-log", tmp_path)
    (bundle / "job" / "stdout.log").unlink()
    (bundle / "job" / "stdout.log").mkdir()
    _, verdict = _diagnose(bundle)
    out = _entry(verdict, "job_stdout", None)
    assert out["status"] == "unreadable", out
    assert out["notes"] == [{"code": "not_regular_file", "args": {"file": "job/stdout.log"}}]


def test_a_fifo_slurmctld_log_is_skipped_without_blocking(tmp_path: Path) -> None:
    bundle = _copy("fifo-slurmctld", tmp_path)
    os.mkfifo(bundle / "slurmctld.log")
    _, verdict = _diagnose(bundle, timeout=30)
    ctld = _entry(verdict, "slurmctld", None)
    assert ctld["status"] == "unreadable", ctld
    assert ctld["notes"] == [{"code": "not_regular_file", "args": {"file": "slurmctld.log"}}]


def test_a_slurmctld_log_linked_out_of_the_bundle_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text("2026-01-01T10:30:00+00:00 ctld slurmctld[1]: TOPSECRET\n")
    bundle = _copy("link-out-slurmctld", tmp_path)
    (bundle / "slurmctld.log").symlink_to(secret)
    result, verdict = _diagnose(bundle)
    assert "TOPSECRET" not in result.output
    ctld = _entry(verdict, "slurmctld", None)
    assert ctld["status"] == "missing", ctld
    assert ctld["notes"] == [
        {"code": "no_file", "args": {}},
        {"code": "link_out_of_bundle", "args": {"file": "slurmctld.log"}},
    ]


@pytest.mark.parametrize("kind", ["fifo", "link-out", "directory"])
def test_a_history_file_that_is_no_regular_file_is_skipped_with_a_note(
    kind: str, tmp_path: Path
) -> None:
    bundle = _copy("fifo-history", tmp_path)
    history = bundle / "history.yaml"
    if kind == "fifo":
        os.mkfifo(history)
        said = "history.yaml: not a regular file, not read"
    elif kind == "link-out":
        (tmp_path / "elsewhere.yaml").write_text("[]\n")
        history.symlink_to(tmp_path / "elsewhere.yaml")
        said = "history.yaml: a link out of the bundle, not followed"
    else:
        history.mkdir()
        said = "history.yaml: not a regular file, not read"
    result, _ = _diagnose(bundle, timeout=30)
    assert f"sattr: note: {said}" in result.stderr


@pytest.mark.parametrize("name", ["topology.conf", "groups.yaml", "expected.yaml"])
def test_other_optional_bundle_files_that_are_fifos_are_skipped_with_a_note(
    name: str, tmp_path: Path
) -> None:
    bundle = _copy("fifo-topology", tmp_path)
    os.mkfifo(bundle / name)
    result, _ = _diagnose(bundle, timeout=30)
    assert f"sattr: note: {name}: not a regular file, not read" in result.stderr


@pytest.mark.parametrize("name", ["job.json", "bundle.json"])
def test_a_fifo_job_record_or_manifest_is_a_one_line_error(name: str, tmp_path: Path) -> None:
    """What decides trust or the job itself is not skipped: the bundle is refused, at once."""
    bundle = _copy("fifo-topology", tmp_path)
    (bundle / name).unlink(missing_ok=True)
    os.mkfifo(bundle / name)
    done: list[Result] = []
    worker = threading.Thread(
        target=lambda: done.append(CliRunner().invoke(main, ["diagnose", "--json", str(bundle)])),
        daemon=True,
    )
    worker.start()
    worker.join(30)
    assert done, "blocked"
    assert done[0].exit_code == 1
    assert done[0].stderr.count("\n") == 1
    assert f"{name}: not a regular file" in done[0].stderr


# ------------------------------------------------------------------ many nodes


def test_a_job_of_200000_nodes_without_node_logs_loads_in_seconds(tmp_path: Path) -> None:
    bundle = _copy("many-nodes", tmp_path)
    started = time.monotonic()
    _, verdict = _diagnose(bundle, timeout=120)
    took = time.monotonic() - started
    kernels = [c for c in verdict["coverage"] if c["stream"] == "kernel"]
    # one entry stands for every node without a log (bundle.FOLD_NODES)
    assert [(c["node"], c["status"]) for c in kernels] == [("n[000001-200000]", "missing")]
    assert _codes(kernels[0])[:2] == ["no_file", "nodes_folded"]
    assert {"code": "nodes_folded", "args": {"count": 200_000}} in kernels[0]["notes"]
    assert took < 60, took


@pytest.mark.parametrize(("nodes", "folded"), [(1001, False), (1002, True)])
def test_missing_entries_fold_only_beyond_a_thousand_nodes(
    nodes: int, folded: bool, tmp_path: Path
) -> None:
    """A node with a log keeps its own entries; the others are folded only when more than
    1,000 have none."""
    bundle = tmp_path / "b"
    (bundle / "nodes" / "n0005").mkdir(parents=True)
    (bundle / "nodes" / "n0005" / "kernel.log").write_text(CHATTER.replace(" n1 ", " n0005 "))
    job = json.loads((HOSTILE / "source-many-nodes" / "job.json").read_text())
    job["nodes"] = f"n[0001-{nodes:04d}]"
    (bundle / "job.json").write_text(json.dumps(job))
    _, verdict = _diagnose(bundle)
    kernels = {c["node"]: c for c in verdict["coverage"] if c["stream"] == "kernel"}
    assert kernels["n0005"]["status"] == "ok"
    if folded:
        rest = f"n[0001-0004,0006-{nodes:04d}]"
        assert set(kernels) == {"n0005", rest}
        assert {"code": "nodes_folded", "args": {"count": nodes - 1}} in kernels[rest]["notes"]
    else:
        assert len(kernels) == nodes
        assert "nodes_folded" not in _codes(kernels["n0001"])


def test_a_job_of_200000_nodes_stays_under_256_mib(tmp_path: Path) -> None:
    """In a process of its own, whose peak RSS is its own."""
    from tests.test_hostile_bundles import peak_kib

    bundle = _copy("many-nodes", tmp_path)
    code, peak, err = peak_kib(["diagnose", "--json", str(bundle)])
    assert code == 0, err
    assert peak < 256 * 1024, peak


@pytest.mark.parametrize("how", ["gzip", "utf-16"])
def test_a_decoded_read_gives_all_it_was_asked_for(how: str, tmp_path: Path) -> None:
    """The bytes looked at to tell the format are given back with the rest: read(n) is n
    bytes until the end (a metrics file is read in one call, and came back 4 KiB short)."""
    text = "".join(f"line {i}\n" for i in range(5000)).encode()
    data = gzip.compress(text, mtime=0) if how == "gzip" else text.decode().encode("utf-16")
    log = tmp_path / "kern.log"
    log.write_bytes(data)
    with reader.open_log(log) as handle:
        assert handle.read(20_000) == text[:20_000]
        assert handle.read(1 << 20) == text[20_000:]


def test_a_directory_linked_out_of_the_bundle_is_not_followed(tmp_path: Path) -> None:
    """``slurm/`` a link out of the bundle: ``slurm/slurmctld.log`` under it is outside too
    (its lines named a job node as not responding, a verdict from a file the bundle does not
    hold)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "slurmctld.log").write_text(
        "[2026-01-01T10:30:00.000] error: Nodes n1 not responding, setting DOWN\n"
    )
    bundle = _copy("link-out-slurmctld", tmp_path)
    (bundle / "slurm").symlink_to(elsewhere)
    _, verdict = _diagnose(bundle)
    assert verdict["responsible"] == [], verdict["summary"]
    ctld = _entry(verdict, "slurmctld", None)
    assert ctld["status"] == "missing", ctld
    assert {"code": "link_out_of_bundle", "args": {"file": "slurm/slurmctld.log"}} in ctld["notes"]


@pytest.mark.parametrize("kind", ["bzip2", "xz"])
def test_bzip2_and_xz_read_every_stream_and_say_so_of_junk_after_them(
    kind: str, tmp_path: Path
) -> None:
    """Consecutive streams are all read (pbzip2, xz -T); bytes after the last that start none
    are an error that keeps what came before (BZ2File and LZMAFile dropped them silently, and
    a breaker run lost an XID 79 behind them with coverage 'ok')."""
    pack = bz2.compress if kind == "bzip2" else lzma.compress
    first, second = CHATTER.encode(), XID79.encode()
    padding = b"\0" * 4 if kind == "xz" else b""  # the xz format's stream padding
    log = tmp_path / "kern.log"
    log.write_bytes(pack(first) + padding + pack(second))
    with reader.open_log(log) as handle:
        assert handle.read(1 << 16) == first + second
    log.write_bytes(pack(first) + second)  # plain text after the stream
    with reader.open_log(log) as handle:
        assert handle.read(1 << 16) == first
        with pytest.raises(ValueError, match=f"junk after the end of the {kind} stream"):
            _drain(handle)
    log.write_bytes(pack(first + second)[:-10])  # cut
    with reader.open_log(log) as handle, pytest.raises(EOFError, match="truncated"):
        _drain(handle)


def test_compressed_files_of_one_job_share_a_decoding_budget(tmp_path: Path) -> None:
    """Forty rotated 98 KB zstd files of 1 GiB each (a breaker run: 61 s, and past 120 s
    with a hundred) stop together at the job's budget (16 GiB; 1 KiB here), each saying why."""
    budget = reader.DecodeBudget(left=1024, total=1024)
    logs = []
    for i in range(3):
        log = tmp_path / f"kern.log.{i}.zst"
        log.write_bytes(zstd.compress(b"x" * 700 + b"\n"))
        logs.append(log)
    got: list[bytes] = []
    said: list[str] = []
    for log in logs:
        with reader.open_log(log, budget=budget) as handle:
            try:
                while piece := handle.read(100):
                    got.append(piece)
            except ValueError as exc:
                said.append(str(exc))
    assert sum(map(len, got)) == 1024 and budget.left == 0
    assert len(said) == 2 and all("the cap for one job" in x for x in said), said
