"""Line prefixes: every timestamp format lands in UTC; identity (host, rank, task, device) is recovered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attribution.sources.prefix import parse_prefix
from attribution.timeutil import infer_year, parse_duration, parse_iso, zone

REF = datetime(2025, 12, 18, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "expected", "text"),
    [
        (  # vLLM's logger: level, month-day, time (no year), file:line]
            "INFO 12-01 23:16:33 distributed_gpu_executor.py:56] # GPU blocks: 185231",
            datetime(2025, 12, 1, 23, 16, 33, tzinfo=UTC),
            "# GPU blocks: 185231",
        ),
        (  # Megatron-LM's training log line starts with a space (here behind an srun label)
            "0:  [2025-12-20 04:45:12] iteration     3229/   20000 | consumed samples: 1",
            datetime(2025, 12, 20, 4, 45, 12, tzinfo=UTC),
            "iteration     3229/   20000 | consumed samples: 1",
        ),
        (
            "[Sun Feb 23 16:24:18 2025] NVRM: Xid x",
            datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC),
            "NVRM: Xid x",
        ),
        (
            "Feb  1 14:25:31 archbox kernel: NVRM: Xid x",
            datetime(2026, 2, 1, 14, 25, 31, tzinfo=UTC),
            "NVRM: Xid x",
        ),
        (
            "Dec  1 14:25:31 archbox kernel: NVRM: Xid x",
            datetime(2025, 12, 1, 14, 25, 31, tzinfo=UTC),
            "NVRM: Xid x",
        ),
        (
            "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x",
            datetime(2026, 3, 21, 2, 7, 8, 408271, tzinfo=UTC),
            "x",
        ),
        (
            "2026-10-05T08:08:16-05:00 spark kernel: NVRM: Xid x",
            datetime(2026, 10, 5, 13, 8, 16, tzinfo=UTC),
            "NVRM: Xid x",
        ),
        (
            "2026-10-05T08:08:16+0000 spark kernel: NVRM: Xid x",
            datetime(2026, 10, 5, 8, 8, 16, tzinfo=UTC),
            "NVRM: Xid x",
        ),
        (
            "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch",
            datetime(2024, 7, 23, 7, 53, 55, tzinfo=UTC),
            "detected NVSwitch",
        ),
        (
            "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] x",
            datetime(2025, 12, 18, 20, 27, 21, 426415, tzinfo=UTC),
            "[Rank 0] x",
        ),
        (
            "E1218 20:27:21.426 12345 ProcessGroupNCCL.cpp:629] boom",
            datetime(2025, 12, 18, 20, 27, 21, 426000, tzinfo=UTC),
            "boom",
        ),
        (
            "[2024-05-08 08:47:31,261] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending",
            datetime(2024, 5, 8, 8, 47, 31, 261000, tzinfo=UTC),
            "torch.distributed.elastic.multiprocessing.api: [WARNING] Sending",
        ),
        (
            "[2024-05-01T10:00:00.123] error: Nodes gpu17 not responding",
            datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC),
            "error: Nodes gpu17 not responding",
        ),
        (
            "[NeMo W 2024-06-06 15:21:39 nemo_logging:349] warn",
            datetime(2024, 6, 6, 15, 21, 39, tzinfo=UTC),
            "warn",
        ),
        (
            "2024-05-08 08:47:31,261 - trainer - INFO - step",
            datetime(2024, 5, 8, 8, 47, 31, 261000, tzinfo=UTC),
            "trainer - INFO - step",
        ),
    ],
)
def test_timestamp_formats(line: str, expected: datetime, text: str) -> None:
    p = parse_prefix(line, reference=REF)
    assert p.time == expected
    assert p.text == text


def test_dmesg_uptime_is_not_wall_time() -> None:
    p = parse_prefix("[ 7345.123456] NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.")
    assert p.time is None and p.uptime == pytest.approx(7345.123456)
    assert p.text.startswith("NVRM: Xid")


def test_syslog_wrapping_dmesg_keeps_both_clocks() -> None:
    p = parse_prefix(
        "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, x",
        reference=REF,
    )
    assert p.time == datetime(2025, 12, 2, 11, 38, 47, tzinfo=UTC)
    assert p.uptime == pytest.approx(219.470994)
    assert p.host == "worker4" and p.ident == "kernel"


def test_kmsg_record() -> None:
    p = parse_prefix("6,12345,678901234,-;NVRM: Xid x")
    assert p.uptime == pytest.approx(678.901234) and p.text == "NVRM: Xid x"


def test_identity_prefixes() -> None:
    p = parse_prefix("3: node017:2231:2290 [5] NCCL WARN Net : Connection closed by remote peer x")
    assert (p.task, p.host, p.pid, p.device) == (3, "node017", 2231, "5")
    assert p.text == "NCCL WARN Net : Connection closed by remote peer x"
    q = parse_prefix("[default2]:RuntimeError: boom")
    assert q.rank == 2 and q.text == "RuntimeError: boom"
    r = parse_prefix(
        "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x", reference=REF
    )
    assert r.pid == 80746 and r.rank == 0 and r.text == "x"


def test_naive_times_use_the_node_timezone() -> None:
    p = parse_prefix(
        "Mar 14 09:00:00 h kernel: x",
        tz=zone("America/Chicago"),
        reference=datetime(2025, 3, 14, tzinfo=UTC),
    )
    assert p.time == datetime(2025, 3, 14, 14, 0, tzinfo=UTC)  # CDT is UTC-5


def test_year_inference_crosses_new_year() -> None:
    assert infer_year(12, 31, datetime(2026, 1, 1, 1, tzinfo=UTC)) == 2025
    assert infer_year(1, 1, datetime(2025, 12, 31, 23, tzinfo=UTC)) == 2026
    assert infer_year(6, 1, datetime(2025, 6, 2, tzinfo=UTC)) == 2025


def test_junk_never_raises_and_keeps_the_text() -> None:
    for junk in [
        "",
        "[",
        "[ ]",
        "Feb 30 25:61:99 x y: z",
        "E9999 99:99:99.0 f.c:1] x",
        "\x00\x01\x02",
        "[rank]: x",
        "2026-13-45T99:99:99 h k: x",
    ]:
        p = parse_prefix(junk, reference=REF)
        assert isinstance(p.text, str)


@given(st.text(max_size=200))
def test_parse_prefix_total(line: str) -> None:
    p = parse_prefix(line, reference=REF)
    assert p.text == line or line.endswith(p.text)


def test_durations() -> None:
    assert (
        parse_duration("15m") == 900 and parse_duration(90) == 90 and parse_duration("500ms") == 0.5
    )
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_parse_iso_offsets() -> None:
    assert parse_iso("2025-01-01T00:00:00Z") == datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_iso("2025-01-01 01:00:00+01:00") == datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_iso("garbage") is None
    assert parse_iso("2025-01-01T00:00:00", timezone(timedelta(hours=2))) == datetime(
        2024, 12, 31, 22, tzinfo=UTC
    )


def test_dmesg_time_format_iso() -> None:
    """`dmesg --time-format iso` puts a comma before the microseconds and an offset after."""
    p = parse_prefix("2026-03-14T08:01:02,123456+01:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1")
    assert p.time == datetime(2026, 3, 14, 7, 1, 2, 123456, tzinfo=UTC)
    assert p.text.startswith("NVRM: Xid")
