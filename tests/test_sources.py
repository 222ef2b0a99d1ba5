"""Reading evidence: compression, junk, huge lines, missing/unreadable files and their coverage entries."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, backported (PyPI backports.zstd)
    from backports import zstd

from attribution.bundle import load_bundle
from attribution.jobrecord import job_from_dict
from attribution.model import CoverageNote, CoverageStatus, Stream
from attribution.rules.compiled import RuleSet
from attribution.scan import read_context
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.streams import file_stem, job_stream_for, node_stream_for
from attribution.sources.textlog import SourceReader

XID = (
    "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


def _read(spec: SourceSpec, ctx: ReadContext | None = None):  # type: ignore[no-untyped-def]
    reader = SourceReader(spec, ctx or ReadContext())
    lines = list(reader.lines())
    return lines, reader.coverage()


def test_plain_gzip_and_zstd_read_the_same(tmp_path: Path) -> None:
    text = ("a line\n" * 3 + XID).encode()
    (tmp_path / "plain.log").write_bytes(text)
    (tmp_path / "k.log.1.gz").write_bytes(gzip.compress(text))
    (tmp_path / "k.log.zst").write_bytes(zstd.compress(text))
    results = [
        [ln.raw for ln in _read(SourceSpec(Stream.KERNEL, "n", [tmp_path / n]))[0]]
        for n in ("plain.log", "k.log.1.gz", "k.log.zst")
    ]
    assert results[0] == results[1] == results[2]
    assert results[0][-1] == XID.rstrip("\n")


def test_damaged_compressed_streams_keep_what_came_before_and_say_so(tmp_path: Path) -> None:
    """A truncated zstd/gzip file, or plain text appended to a gzip member, is an ``error``
    with a reason; every line decoded before the damage is still read."""
    body = "".join(
        f"2026-01-01T10:{i // 60:02d}:{i % 60:02d} host kernel: line {i}\n" for i in range(2000)
    )
    text = (body + XID).encode() + os.urandom(400_000).hex().encode()  # incompressible tail
    packed = {
        "zst-cut": zstd.compress(text)[:-5000],
        "gz-cut": gzip.compress(text)[:-5000],
        "zst-magic": zstd.compress(text)[:4],
        "gz-then-text": gzip.compress((body + XID).encode()) + b"plain appended text\n",
    }
    for name, data in packed.items():
        path = tmp_path / f"{name}.log"
        path.write_bytes(data)
        lines, cov = _read(SourceSpec(Stream.KERNEL, "n1", [path]))
        assert cov.status is CoverageStatus.ERROR, name
        (note,) = cov.notes
        assert note.code == "read_error" and note.args["file"] == str(path), note
        if name == "gz-then-text":
            assert "after the end of the gzip stream" in str(note.args["error"])
        else:
            assert "truncated" in str(note.args["error"]), (name, note)
        if name != "zst-magic":
            assert any(ln.text.startswith("NVRM: Xid") for ln in lines), name
            assert sum(1 for ln in lines if "line " in ln.text) >= 2000, name


def test_utf16_log_is_transcoded(tmp_path: Path) -> None:
    """A log saved as UTF-16 (with its byte order mark, e.g. from a Windows tool) is read
    as text, not as lines full of NUL bytes."""
    for encoding in ("utf-16", "utf-16-be"):
        path = tmp_path / f"{encoding}.log"
        data = ("a line\n" + XID).encode(encoding)
        if encoding == "utf-16-be":
            data = b"\xfe\xff" + data
        path.write_bytes(data)
        lines, cov = _read(SourceSpec(Stream.KERNEL, "n1", [path]))
        assert cov.status is CoverageStatus.OK and not cov.reason and not cov.notes, encoding
        assert [ln.text for ln in lines] == ["a line", XID.rstrip("\n")], encoding


def test_coverage_notes_are_capped(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"job_id": "1", "nodes": "n1", "state": "FAILED"}')
    node = tmp_path / "nodes" / "n1"
    node.mkdir(parents=True)
    (node / "kern.log").write_text(XID)
    for i in range(500):
        (node / f"junk{i:03d}.txt").write_text("x")
    bundle = load_bundle(tmp_path)
    spec = next(s for s in bundle.specs if (s.stream, s.node) == (Stream.KERNEL, "n1"))
    _, cov = _read(spec)
    assert cov.status is CoverageStatus.OK
    assert cov.codes == ("unknown_log_name",) * 10 + ("more_notes",)
    assert cov.notes[0].args == {"file": "nodes/n1/junk000.txt"}
    assert cov.notes[-1].args == {"count": 490}
    assert len(cov.reason or "") < 2000


def test_binary_junk_and_huge_lines_degrade_to_coverage_notes(tmp_path: Path) -> None:
    path = tmp_path / "kernel.log"
    with path.open("wb") as fh:
        fh.write(b"\x00\x01\xff\xfe garbage \x00\n")
        fh.write(b"x" * 300_000 + b"\n")
        fh.write(XID.encode())
    lines, cov = _read(SourceSpec(Stream.KERNEL, "n1", [path]))
    assert cov.status is CoverageStatus.OK
    assert cov.notes == (
        CoverageNote("long_lines", {"count": 1, "max_line": 64 * 1024}),
        CoverageNote("nul_bytes", {"count": 2}),  # each NUL run ends a line: two here
    )
    assert lines[-1].text.startswith("NVRM: Xid")
    assert all(len(ln.raw) <= 64 * 1024 for ln in lines)


def test_missing_empty_unreadable_and_corrupt(tmp_path: Path) -> None:
    _, missing = _read(SourceSpec(Stream.SYSLOG, "n1", []))
    assert missing.status is CoverageStatus.MISSING
    (tmp_path / "empty.log").write_bytes(b"")
    _, empty = _read(SourceSpec(Stream.SYSLOG, "n1", [tmp_path / "empty.log"]))
    assert empty.status is CoverageStatus.EMPTY
    os.symlink("/etc/shadow", tmp_path / "link.log")
    _, unreadable = _read(
        SourceSpec(Stream.JOB_STDOUT, None, [tmp_path / "link.log"], nofollow=True)
    )
    assert unreadable.status is CoverageStatus.UNREADABLE and unreadable.codes == ("unreadable",)
    (tmp_path / "dir.log").mkdir()
    _, notfile = _read(SourceSpec(Stream.KERNEL, "n1", [tmp_path / "dir.log"]))
    assert notfile.status is CoverageStatus.UNREADABLE
    assert notfile.notes == (
        CoverageNote(
            "unreadable", {"file": str(tmp_path / "dir.log"), "error": "not a regular file"}
        ),
    )
    noisy = "".join(f"line {i * 7919 % 104729:x} {i}\n" for i in range(20000)).encode()
    whole = gzip.compress(noisy)
    (tmp_path / "bad.gz").write_bytes(whole[: len(whole) // 2])
    _, corrupt = _read(SourceSpec(Stream.KERNEL, "n1", [tmp_path / "bad.gz"]))
    assert corrupt.status is CoverageStatus.ERROR and corrupt.codes == ("read_error",)


def test_uptime_lines_get_wall_time_from_a_line_with_both_clocks(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text(
        "Dec  2 11:38:47 worker4 kernel: [  219.470994] first\n"
        "[  229.470994] ten seconds later\n"
        "[    0.000000] Linux version 6.8.0\n"
        "[    5.000000] after the reboot\n"
    )
    from datetime import UTC, datetime

    ctx = ReadContext(reference=datetime(2025, 12, 2, tzinfo=UTC))
    lines, cov = _read(SourceSpec(Stream.KERNEL, "worker4", [path]), ctx)
    assert lines[1].time is not None and (lines[1].time - lines[0].time).total_seconds() == 10  # type: ignore[operator]
    assert lines[3].time is None  # a new boot with no anchor: honest, untimed
    assert cov.status is CoverageStatus.OK


def test_file_names_map_to_streams() -> None:
    assert file_stem("kern.log.1.gz") == "kern"
    assert node_stream_for("dmesg.log") is Stream.KERNEL
    assert node_stream_for("messages.2.zst") is Stream.SYSLOG
    assert node_stream_for("fabricmanager.log") is Stream.FABRICMANAGER
    assert node_stream_for("random.txt") is None
    assert job_stream_for("stderr.log") is Stream.JOB_STDERR
    assert job_stream_for("slurm-1234.out") is Stream.JOB_STDOUT


def test_bundle_lists_every_node_stream(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"job_id": "1", "nodes": "n[1-2]", "state": "FAILED"}')
    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    (tmp_path / "nodes" / "n1" / "dmesg.log").write_text(XID)
    (tmp_path / "nodes" / "n1" / "notes.txt").write_text("hello")
    (tmp_path / "nodes" / "-odd name").mkdir()
    bundle = load_bundle(tmp_path)
    keys = {(s.stream, s.node) for s in bundle.specs}
    for node in ("n1", "n2"):
        for stream in (Stream.KERNEL, Stream.SYSLOG, Stream.FABRICMANAGER):
            assert (stream, node) in keys
    kernel_n1 = next(s for s in bundle.specs if (s.stream, s.node) == (Stream.KERNEL, "n1"))
    # said in n1's kernel coverage
    assert CoverageNote("unknown_log_name", {"file": "nodes/n1/notes.txt"}) in kernel_n1.notes
    assert any("-odd name" in n and "not a host name" in n for n in bundle.notes)


def test_known_boot_time_applies_only_after_the_last_boot_banner(tmp_path: Path) -> None:
    """The job record's boot time is the node's latest boot: a dmesg capture that also holds an
    earlier boot must not place that boot's lines with it (they would land at random times)."""
    from datetime import UTC, datetime, timedelta

    boot = datetime(2025, 7, 14, 19, 0, tzinfo=UTC)
    path = tmp_path / "dmesg.log"
    path.write_text(
        "[20407.799828] " + XID + "[    0.000000] Linux version 6.8.0\n"
        "[ 4228.675982] Out of memory: Killed process 88121 (python)\n"
    )
    spec = SourceSpec(Stream.KERNEL, "n1", [path])
    # the job started a day after that boot: the earlier boot's XID 79 cannot be in it
    late = ReadContext(reference=boot + timedelta(days=1), boot_times={"n1": boot})
    lines, cov = _read(spec, late)
    assert [line.text.split(":")[0] for line in lines] == ["Linux version 6.8.0", "Out of memory"]
    assert lines[0].time == boot
    assert lines[1].time == boot + timedelta(seconds=4228.675982)
    assert cov.notes == (CoverageNote("earlier_boot", {"count": 1}),)
    # the node booted during the job: the earlier boot's lines are kept, honestly untimed
    during = ReadContext(reference=boot - timedelta(hours=1), boot_times={"n1": boot})
    lines, cov = _read(spec, during)
    assert len(lines) == 3 and lines[0].time is None and lines[2].time is not None
    # no banner in the file: every line belongs to the known boot
    path.write_text("[  100.000000] " + XID)
    lines, _ = _read(spec, late)
    assert lines[0].time == boot + timedelta(seconds=100)


def test_a_clock_set_ahead_at_boot_does_not_hide_the_window(tmp_path: Path) -> None:
    """A node booted a day ahead, then NTP stepped the clock back: reading by time window
    must not stop at the first "future" line and lose the XID inside the job."""
    from datetime import UTC, datetime

    path = tmp_path / "kern.log"
    ahead = "".join(
        f"2026-01-02T09:{i // 60:02d}:{i % 60:02d}+00:00 n1 kernel: boot message {i}\n"
        for i in range(3000)
    )
    back = "2026-01-01T09:51:00+00:00 n1 systemd-timesyncd[1]: System clock time stepped back\n"
    xid = "2026-01-01T10:30:00+00:00 n1 kernel: " + XID
    path.write_text(ahead + back + xid)
    window = (datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 11, tzinfo=UTC))
    ctx = ReadContext(reference=window[0], window=window, seek_threshold=0)
    lines, cov = _read(SourceSpec(Stream.KERNEL, "n1", [path]), ctx)
    assert any("Xid" in line.text for line in lines)
    assert cov.codes == ("clock_went_back",), cov.reason
    assert cov.notes[0].args["back"] == "2026-01-01 09:51Z"


def test_times_off_the_calendar_are_untimed_not_fatal(tmp_path: Path) -> None:
    """Year 1, year 9999 with an offset and a huge kernel uptime are corrupt stamps: the line
    is kept untimed and the rest of the file is read."""
    from datetime import UTC, datetime

    path = tmp_path / "kern.log"
    path.write_text(
        "0001-01-01T00:00:00+09:00 n1 kernel: year one\n"
        "9999-12-31T23:59:59-05:00 n1 kernel: year 9999\n"
        "[99999999999999999999.000000] huge uptime\n"
        "2026-01-01T10:30:00+00:00 n1 kernel: " + XID
    )
    ctx = ReadContext(
        reference=datetime(2026, 1, 1, tzinfo=UTC),
        boot_times={"n1": datetime(2026, 1, 1, tzinfo=UTC)},
    )
    lines, cov = _read(SourceSpec(Stream.KERNEL, "n1", [path]), ctx)
    assert [line.time is None for line in lines] == [True, True, True, False]
    assert cov.status is CoverageStatus.OK


def test_dateext_rotations_are_read_oldest_first(tmp_path: Path) -> None:
    """logrotate's ``dateext`` names (``kern.log-20260101``) are the same stream as the live file."""
    import gzip

    (tmp_path / "job.json").write_text('{"job_id": "1", "nodes": "n1", "state": "FAILED"}')
    node = tmp_path / "nodes" / "n1"
    node.mkdir(parents=True)
    (node / "kern.log").write_text("live\n")
    (node / "kern.log-20260102").write_text("newer\n")
    (node / "kern.log-20251231.gz").write_bytes(gzip.compress(b"older\n"))
    (node / "messages-2026-01-01").write_text("syslog\n")
    bundle = load_bundle(tmp_path)
    specs = {s.stream: s for s in bundle.specs if s.node == "n1"}
    assert [p.name for p in specs[Stream.KERNEL].paths] == [
        "kern.log-20251231.gz",
        "kern.log-20260102",
        "kern.log",
    ]
    assert [p.name for p in specs[Stream.SYSLOG].paths] == ["messages-2026-01-01"]
    assert not specs[Stream.KERNEL].notes


def _silences(spec: SourceSpec, ctx: ReadContext):  # type: ignore[no-untyped-def]
    reader = SourceReader(spec, ctx)
    lines = list(reader.lines())
    return lines, reader.silences


def test_each_job_output_file_says_when_it_last_said_something(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """Each job output file gives one ``OutputSilence``: when it last said something before the
    job's teardown, and how many ordinary untimed lines followed (untimed progress). It is a
    value handed to analyze, not a line: nothing is added to what the file said."""
    from datetime import UTC, datetime

    start, end = datetime(2025, 6, 1, 0, 0, tzinfo=UTC), datetime(2025, 6, 1, 4, 0, tzinfo=UTC)
    job = job_from_dict(
        {
            "job_id": "1",
            "nodes": "n1",
            "start": "2025-06-01T00:00:00",
            "end": "2025-06-01T04:00:00",
            "state": "TIMEOUT",
        }
    )
    ctx = read_context(job, ruleset)  # the shipped rules' line selectors
    assert ctx.job_span == (start, end)
    hung = tmp_path / "hung.log"
    hung.write_text(
        "".join(
            f"[2025-06-01 0{h}:{m:02d}:00,000] [INFO] step {h * 60 + m}\n"
            for h in range(2)
            for m in range(0, 60, 5)
        )
        + "[2025-06-01 03:59:30,000] torch: Received Signals.SIGTERM death signal\n"
    )
    lines, (last,) = _silences(SourceSpec(Stream.JOB_STDOUT, None, [hung]), ctx)
    assert all("last timed output" not in line.text for line in lines)  # nothing added
    assert last.at == datetime(2025, 6, 1, 1, 55, tzinfo=UTC) and last.silent_s == 7500
    assert round(last.share, 2) == 0.52 and last.untimed_after == 0
    assert "at 2025-06-01T01:55:00Z" in last.text and "silent for 125 min" in last.text
    assert "(7500 s, share 0.52 of the run)" in last.text and "; 0 untimed" in last.text
    assert last.line == 24 and last.file.endswith("hung.log")
    progress = tmp_path / "bars.log"
    progress.write_text(
        "[2025-06-01 00:00:05,000] starting\n" + "Epoch 1:  45%|####  | 450/1000\n" * 30
    )
    _, (bars,) = _silences(SourceSpec(Stream.JOB_STDERR, None, [progress]), ctx)
    assert bars.untimed_after == 30 and "; 30 untimed ordinary line(s)" in bars.text
    # a file longer than the tail searched: the line number still counts from the top
    long = tmp_path / "long.log"
    long.write_text(
        "".join(
            f"[2025-06-01 00:{i // 600:02d}:{i % 60:02d},000] [INFO] step {i}\n"
            for i in range(20000)
        )
        + "[2025-06-01 03:59:30,000] torch: Received Signals.SIGTERM death signal\n"
    )
    _, (tail,) = _silences(SourceSpec(Stream.JOB_STDOUT, None, [long]), ctx)
    assert tail.line == 20000 and tail.timed_before == 5
    # node logs get none, and neither does a job record without both times
    assert _silences(SourceSpec(Stream.KERNEL, "n1", [hung]), ctx)[1] == []
    no_times = ReadContext(reference=start)
    assert _silences(SourceSpec(Stream.JOB_STDOUT, None, [hung]), no_times)[1] == []
