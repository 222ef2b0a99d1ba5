"""Time-windowed reads: a month of kernel log costs what the job's hours cost."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.model import Stream
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.textlog import SourceReader

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def _syslog(
    path: Path, start: datetime, hours: int, every: int = 20, xid_at: datetime | None = None
) -> None:
    with path.open("w") as fh:
        t = start
        end = start + timedelta(hours=hours)
        while t < end:
            fh.write(
                f"{t.strftime('%b %d %H:%M:%S')} n1 kernel: eth0: tx ok {t.timestamp():.0f} padding-padding-padding\n"
            )
            if xid_at is not None and t <= xid_at < t + timedelta(seconds=every):
                fh.write(
                    f"{xid_at.strftime('%b %d %H:%M:%S')} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                )
            t += timedelta(seconds=every)


def _read(paths: list[Path], window: tuple[datetime, datetime] | None):  # type: ignore[no-untyped-def]
    ctx = ReadContext(
        reference=T0 + timedelta(days=15), window=window, seek_threshold=256 * 1024, tolerance=600
    )
    reader = SourceReader(SourceSpec(Stream.KERNEL, "n1", paths), ctx)
    lines = list(reader.lines())
    return lines, reader


@pytest.mark.slow
def test_a_month_long_log_is_read_around_the_window(tmp_path: Path) -> None:
    xid = T0 + timedelta(days=20, hours=3, minutes=7)
    log = tmp_path / "kern.log"
    _syslog(log, T0, 30 * 24, xid_at=xid)
    window = (T0 + timedelta(days=20, hours=2), T0 + timedelta(days=20, hours=4))
    lines, reader = _read([log], window)
    assert any("Xid" in ln.text and ln.time == xid for ln in lines)
    cov = reader.coverage()
    size = log.stat().st_size
    assert cov.bytes < size / 20, (cov.bytes, size)
    assert cov.codes == ("window_start", "past_window"), cov.reason
    start, stop = cov.notes
    assert 0 < int(start.args["offset"]) < int(stop.args["offset"]) < size
    assert all(ln.source.offset is not None and ln.source.line == 0 for ln in lines)
    # the whole file without a window finds the same line, with a line number
    all_lines, full = _read([log], None)
    hit = [ln for ln in all_lines if "Xid" in ln.text]
    assert len(hit) == 1 and hit[0].source.line > 0 and full.coverage().bytes == size


def test_rotated_files_outside_the_window_are_skipped(tmp_path: Path) -> None:
    old = tmp_path / "kern.log.2.gz"
    mid = tmp_path / "kern.log.1"
    new = tmp_path / "kern.log"
    _syslog(tmp_path / "a", T0, 24)
    old.write_bytes(gzip.compress((tmp_path / "a").read_bytes()))
    _syslog(mid, T0 + timedelta(days=1), 24, xid_at=T0 + timedelta(days=1, hours=5))
    _syslog(new, T0 + timedelta(days=2), 24)
    window = (T0 + timedelta(days=1, hours=4), T0 + timedelta(days=1, hours=6))
    lines, reader = _read([old, mid, new], window)
    assert any("Xid" in ln.text for ln in lines)
    skipped = [n.args["file"] for n in reader.coverage().notes if n.code == "file_outside_window"]
    assert [Path(f).name for f in skipped] == ["kern.log.2.gz", "kern.log"]


def test_unordered_or_untimed_files_are_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    with log.open("w") as fh:
        for i in range(20000):
            fh.write(f"[{i:10.6f}] random chatter line number {i}\n")
        fh.write("[20000.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    lines, reader = _read([log], (T0, T0 + timedelta(hours=1)))
    assert any("Xid" in ln.text for ln in lines)
    assert reader.coverage().bytes >= log.stat().st_size  # all of it (plus the failed probes)
