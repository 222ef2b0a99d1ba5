"""Which files a live diagnosis reads, and the job output safety checks."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.collect import Refused, collect, copy_job_output
from attribution.config import Config
from attribution.model import CoverageNote, CoverageStatus, JobRecord, Stream
from attribution.rules.compiled import RuleSet
from attribution.rules.extract import Extractor
from attribution.scan import read_context
from attribution.sources.readahead import read_sources
from attribution.sources.specs import ReadContext

OTHER_UID = 4242
START = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)


def job(tmp_path: Path, **kw: object) -> JobRecord:
    base: dict[str, object] = {
        "job_id": "1",
        "cluster": "c",
        "nodes": ("node1", "node2"),
        "nodelist": "node[1-2]",
        "start": START,
        "end": START + timedelta(minutes=10),
        "uid": os.getuid(),
        "user": "me",
        "std_out": str(tmp_path / "out.log"),
        "std_err": str(tmp_path / "out.log"),
    }
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def config(tmp_path: Path, **kw: object) -> Config:
    data: dict[str, object] = {
        "logs": {
            "kernel": [str(tmp_path / "hosts/{node}/kern.log*")],
            "slurmctld": [str(tmp_path / "ctld.log")],
        }
    }
    data.update(kw)
    return Config.model_validate(data)


def read_all(col, j: JobRecord) -> dict[tuple[str, str | None], object]:  # type: ignore[no-untyped-def]
    readers, lines = read_sources(col.specs, ReadContext(job_nodes=j.nodes))
    texts = [line.raw for line in lines]
    cov = {(c.stream.value, c.node): c for c in (col.adjust(r.coverage()) for r in readers)}
    cov["_lines"] = texts  # type: ignore[assignment]
    return cov


def touch(path: Path, text: str, when: datetime) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    os.utime(path, (when.timestamp(), when.timestamp()))


def test_node_logs_rotations_and_window(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    touch(hosts / "node1/kern.log", "current\n", START + timedelta(minutes=20))
    touch(hosts / "node1/kern.log.1.gz", "rotated\n", START + timedelta(minutes=1))
    touch(hosts / "node1/kern.log.2.gz", "last month\n", START - timedelta(days=30))
    (tmp_path / "out.log").write_text("job says hi\n")
    j = job(tmp_path)
    with collect(j, config(tmp_path)) as col:
        cov = read_all(col, j)
    node1 = cov[("kernel", "node1")]
    assert [Path(f).name for f in node1.files] == ["kern.log.1.gz", "kern.log"]  # type: ignore[attr-defined]
    assert node1.status is CoverageStatus.OK  # type: ignore[attr-defined]
    node2 = cov[("kernel", "node2")]
    assert node2.status is CoverageStatus.MISSING  # type: ignore[attr-defined]
    assert node2.codes == ("no_match",)  # type: ignore[attr-defined]
    assert cov[("syslog", "node1")].notes == (CoverageNote("no_template", {"key": "syslog"}),)  # type: ignore[attr-defined]
    assert cov[("slurmctld", None)].status is CoverageStatus.MISSING  # type: ignore[attr-defined]
    assert cov["_lines"] == ["rotated", "current", "job says hi"]
    assert ("job_stderr", None) not in cov  # StdErr is the same file as StdOut


def refused(tmp_path: Path, j: JobRecord, cfg: Config | None = None) -> str:
    """``status code why``: why job output was not read (``why`` for the code ``refused``)."""
    with collect(j, cfg or config(tmp_path)) as col:
        cov = read_all(col, j)
    entry = cov[("job_stdout", None)]
    assert entry.files == ()  # type: ignore[attr-defined]
    assert cov["_lines"] == []
    (note,) = entry.notes  # type: ignore[attr-defined]
    return f"{entry.status.value} {note.code} {note.args.get('why', '')}".strip()  # type: ignore[attr-defined]


def test_symlink_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    (tmp_path / "out.log").symlink_to(secret)
    assert refused(tmp_path, job(tmp_path)) == "unreadable refused is a symbolic link; not followed"


def test_file_of_another_user(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give a file away")
    out = tmp_path / "out.log"
    out.write_text("not yours\n")
    os.chown(out, OTHER_UID, OTHER_UID)
    assert refused(tmp_path, job(tmp_path)).startswith("unreadable refused owned by uid 4242")


def test_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "out.log")
    assert refused(tmp_path, job(tmp_path)) == "unreadable refused not a regular file"


def test_device_and_dev_null(tmp_path: Path) -> None:
    zero = refused(tmp_path, job(tmp_path, std_out="/dev/zero"))
    assert zero == "unreadable refused not a regular file"
    with collect(job(tmp_path, std_out="/dev/null", std_err="/dev/null"), config(tmp_path)) as c:
        cov = read_all(c, job(tmp_path))
    assert cov[("job_stdout", None)].status is CoverageStatus.EMPTY  # type: ignore[attr-defined]
    assert cov[("job_stdout", None)].codes == ("dev_null",)  # type: ignore[attr-defined]


def test_compressed_output_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out.log").write_bytes(gzip.compress(b"x" * 1000))
    assert (
        refused(tmp_path, job(tmp_path)) == "unreadable refused compressed job output is not read"
    )


def test_missing_output_and_unknown_owner(tmp_path: Path) -> None:
    assert refused(tmp_path, job(tmp_path)) == "missing refused file does not exist"
    (tmp_path / "out.log").write_text("x\n")
    no_owner = job(tmp_path, uid=None, user="no-such-user-here")
    assert refused(tmp_path, no_owner) == "unreadable owner_unknown"
    off = config(tmp_path, job_output={"read": False})
    assert refused(tmp_path, job(tmp_path), off) == "missing job_output_off"


def test_huge_output_keeps_the_tail(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    with open(out, "wb") as f:
        f.write(b"step 1 | loss 2.31\n" * 100_000)  # 1.9 MB, more than the cap
        f.write(b"\nTraceback (most recent call last):\nValueError: the end\n")
    j = job(tmp_path)
    cfg = config(tmp_path, job_output={"max_bytes": "64KiB"})
    with collect(j, cfg) as col:
        cov = read_all(col, j)
        assert col.tmpdir is None  # read in place, from the checked descriptor
        assert col.fds
    assert not col.fds  # closed with the collection
    entry = cov[("job_stdout", None)]
    assert entry.bytes <= 64 * 1024  # type: ignore[attr-defined]
    assert CoverageNote("tail_only", {"bytes": 65536}) in entry.notes  # type: ignore[attr-defined]
    assert entry.files == (str(out),)  # type: ignore[attr-defined]
    assert CoverageNote("tail_only", {"bytes": 65536}) in entry.notes  # type: ignore[attr-defined]
    assert cov["_lines"][-1] == "ValueError: the end"


CHATTER = (
    "[2026-11-30 07:0{m}:00,118] [INFO] [rank0] step {i} | loss 2.3100 | lr 3.0e-04\n"
    "node1:1000:2000 [0] NCCL INFO Channel 03/32 : 0 1 via P2P/IPC/read\n"
)
ROOT_ERROR = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"


def _long_output(path: Path, size: int) -> None:
    """``size`` bytes of training output with one root error in the middle."""
    block = "".join(CHATTER.format(m=i % 10, i=i) for i in range(60_000)).encode()
    with path.open("wb") as out:
        for k in range(max(2, size // len(block))):
            if k == max(2, size // len(block)) // 2:
                out.write(ROOT_ERROR)
            out.write(block)


@pytest.mark.parametrize(
    "size", [160 << 20, pytest.param(4 << 30, marks=pytest.mark.slow)], ids=["160MiB", "4GiB"]
)
def test_a_root_error_in_the_middle_of_long_output_is_found(
    tmp_path: Path, ruleset: RuleSet, size: int
) -> None:
    """The worker reads a job's output as ``sattr diagnose`` reads a bundle: all of it, so an
    error long before the end (a hang after it, or a flood of teardown output) is found."""
    _long_output(tmp_path / "out.log", size)
    j = job(tmp_path, nodes=("node1",), nodelist="node1", std_err=None)
    with collect(j, config(tmp_path)) as col:
        readers, lines = read_sources(col.specs, read_context(j, ruleset))
        extractor = Extractor(ruleset)
        found = [e for line in lines for e in extractor.extract(line)]
        entry = next(c for r in readers for c in r.coverages() if c.stream is Stream.JOB_STDOUT)
        assert col.tmpdir is None  # nothing was copied
    assert "cuda.illegal_address" in {e.name for e in found}
    assert entry.bytes == (tmp_path / "out.log").stat().st_size
    assert entry.files == (str(tmp_path / "out.log"),)
    assert "tail_only" not in {n.code for n in entry.notes}


def test_copy_checks_the_descriptor(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_bytes(b"a" * 10 + b"b" * 10)
    dest = tmp_path / "copy"
    assert copy_job_output(str(src), os.getuid(), 10, dest) == 10
    assert dest.read_bytes() == b"b" * 10
    with pytest.raises(Refused, match=r"owned by|cannot enter"):
        copy_job_output(str(src), os.getuid() + 1, 10, dest)


def test_a_file_behind_a_directory_the_user_cannot_enter() -> None:
    """The job's user owns the file, but a directory on its real path (reached through a
    link the user made) is closed to them: they could not read it, so neither do we."""
    if os.getuid() != 0:
        pytest.skip("needs root to set up another user's files")
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="attribution-perm-", dir="/tmp"))
    try:
        _check_closed_directory(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _check_closed_directory(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    inner = closed / "out.log"
    inner.write_text("secret\n")
    os.chown(inner, OTHER_UID, OTHER_UID)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / "d").symlink_to(closed)
    os.chmod(tmp_path, 0o755)
    for parent in tmp_path.parents:
        if parent.stat().st_mode & 0o001 == 0:
            pytest.skip(f"{parent} is not searchable by other users")
    with pytest.raises(Refused, match="cannot enter"):
        copy_job_output(str(home / "d" / "out.log"), OTHER_UID, 100, tmp_path / "copy")
    os.chmod(closed, 0o755)
    assert copy_job_output(str(home / "d" / "out.log"), OTHER_UID, 100, tmp_path / "copy") == 7


def test_shared_template_without_node(tmp_path: Path) -> None:
    touch(tmp_path / "all.log", "x\n", START)
    cfg = Config.model_validate({"logs": {"syslog": [str(tmp_path / "all.log")]}})
    with collect(job(tmp_path), cfg) as col:
        streams = [(s.stream, s.node, len(s.paths)) for s in col.specs]
    assert (Stream.SYSLOG, None, 1) in streams


def test_gpu_bus_ids_from_a_site_file_and_per_node_files(tmp_path: Path) -> None:
    from attribution.collect import parse_bus_id_lines, read_bus_ids
    from attribution.config import Config

    assert parse_bus_id_lines("index, pci.bus_id\n0, 00000000:18:00.0\n1, 00000000:2A:00.0\n") == (
        "00000000:18:00.0",
        "00000000:2A:00.0",
    )
    with pytest.raises(ValueError, match="line 2"):
        parse_bus_id_lines("0, 0000:18:00.0\nGPU 1: lost\n")
    with pytest.raises(ValueError, match=r"not 0\.\.1"):
        parse_bus_id_lines("0, 0000:18:00.0\n2, 0000:3a:00.0\n")
    site = tmp_path / "gpus.yaml"
    site.write_text('"gpu[01-02]": ["0000:18:00.0", "0000:2a:00.0"]\n')
    per_node = tmp_path / "gpus"
    per_node.mkdir()
    (per_node / "gpu03.csv").write_text("1, 0000:2a:00.0\n0, 0000:18:00.0\n")
    (per_node / "gpu04.csv").write_text("no map here\n")
    config = Config.model_validate(
        {"gpus": {"bus_ids": str(site), "bus_id_files": [str(per_node / "{node}.csv")]}}
    )
    found, notes = read_bus_ids(config, ["gpu01", "gpu03", "gpu04", "gpu05"])
    assert found == {
        "gpu01": ("0000:18:00.0", "0000:2a:00.0"),
        "gpu03": ("0000:18:00.0", "0000:2a:00.0"),
    }
    assert len(notes) == 1 and "gpu04.csv" in notes[0] and "line 1" in notes[0]
    site.write_text("- not a mapping\n")
    found, notes = read_bus_ids(config, ["gpu01"])
    assert found == {} and "gpus.yaml" in notes[0]


def test_thousands_of_nodes_without_logs_fold_into_one_entry_per_stream(tmp_path: Path) -> None:
    """A job of more than FOLD_NODES nodes of which most have no log: one missing entry per
    stream and reason stands for them (its node their host list, note ``nodes_folded``), the
    nodes that have logs are read as ever, and a node whose files are all older than the window
    keeps its own reason."""
    from attribution.sources.specs import FOLD_NODES

    nodes = tuple(f"n{i:05d}" for i in range(1, FOLD_NODES + 502))
    touch(tmp_path / "hosts/n00007/kern.log", "n00007 hello\n", START + timedelta(minutes=5))
    touch(tmp_path / "hosts/n00009/kern.log", "too old\n", START - timedelta(days=30))
    (tmp_path / "out.log").write_text("job says hi\n")
    j = job(tmp_path, nodes=nodes, nodelist=f"n[00001-{len(nodes):05d}]")
    with collect(j, config(tmp_path)) as col:
        assert len(col.specs) < 10  # not two per node
        cov = read_all(col, j)
    assert cov[("kernel", "n00007")].status is CoverageStatus.OK  # type: ignore[attr-defined]
    assert cov[("kernel", "n00009")].codes == ("files_before_window",)  # type: ignore[attr-defined]
    rest = f"n[00001-00006,00008,00010-{len(nodes):05d}]"
    kernel = cov[("kernel", rest)]
    assert kernel.status is CoverageStatus.MISSING  # type: ignore[attr-defined]
    assert kernel.notes == (  # type: ignore[attr-defined]
        CoverageNote("no_match", {"templates": str(tmp_path / "hosts/{node}/kern.log*")}),
        CoverageNote("nodes_folded", {"count": len(nodes) - 2}),
    )
    syslog = cov[("syslog", f"n[00001-{len(nodes):05d}]")]  # no syslog template at all
    assert syslog.codes == ("no_template", "nodes_folded")  # type: ignore[attr-defined]
    assert cov["_lines"] == ["n00007 hello", "job says hi"]
    # at FOLD_NODES nodes nothing is folded: one entry per node, as before
    small = job(tmp_path, nodes=nodes[:FOLD_NODES], nodelist=f"n[00001-{FOLD_NODES:05d}]")
    with collect(small, config(tmp_path)) as col:
        kernel_nodes = [s.node for s in col.specs if s.stream is Stream.KERNEL]
    assert kernel_nodes == list(small.nodes)


def test_thousands_of_nodes_without_a_journal_fold(tmp_path: Path) -> None:
    from attribution.sources.specs import FOLD_NODES

    nodes = tuple(f"n{i:05d}" for i in range(1, FOLD_NODES + 2))
    (tmp_path / "out.log").write_text("job says hi\n")
    j = job(tmp_path, nodes=nodes, nodelist=f"n[00001-{len(nodes):05d}]")
    cfg = Config.model_validate({"logs": {"journal": [str(tmp_path / "journal/{node}/*.journal")]}})
    with collect(j, cfg) as col:
        cov = read_all(col, j)
    label = f"n[00001-{len(nodes):05d}]"
    for stream in ("kernel", "syslog"):
        assert cov[(stream, label)].codes == ("no_journal_match", "nodes_folded")  # type: ignore[attr-defined]
        assert cov[(stream, label)].notes[1].args == {"count": len(nodes)}  # type: ignore[attr-defined]
    assert not any(key[1] == "n00001" for key in cov if isinstance(key, tuple))


def test_a_node_listed_twice_is_counted_once(tmp_path: Path) -> None:
    from attribution.sources.specs import FOLD_NODES

    distinct = tuple(f"n{i:05d}" for i in range(1, FOLD_NODES + 2))
    (tmp_path / "out.log").write_text("job says hi\n")
    j = job(tmp_path, nodes=distinct + distinct, nodelist=f"n[00001-{len(distinct):05d}]")
    with collect(j, config(tmp_path)) as col:
        folded = [s for s in col.specs if s.notes]
    assert {(s.stream, s.notes[-1].args["count"]) for s in folded} == {
        (Stream.KERNEL, len(distinct)),
        (Stream.SYSLOG, len(distinct)),
    }
