"""Hostile metrics files and slurmctld lines: what an adversary (or a broken exporter, proxy or
disk) can put in a bundle, and what must hold whatever it is: nothing raises out of the reader or
``diagnose_bundle``, every problem is an honest coverage entry naming the file, reading stays
bounded in time and memory, no label writes words into a line, and no node is blamed from a
user-writable source alone or from another job's GPU.

The round that wrote these found 13 bugs here (recorded first as strict xfails, fixed, now plain
tests; the CHANGELOG lists them). The connector's attacks are in
tests/prometheus/test_hostile_connector.py.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle
from attribution.cli import main
from attribution.model import Coverage, CoverageStatus, Stream, Verdict
from attribution.rules.compiled import RuleSet
from attribution.sources import metrics as metrics_module
from attribution.sources.metrics import MAX_FILE_BYTES, MAX_LINES_PER_SERIES, MetricsReader
from attribution.sources.reader import zstd  # type: ignore[attr-defined]
from attribution.sources.specs import ReadContext, SourceSpec

from .test_metrics import END, START, T0, body, cluster, flat, one, stepped

CASES = Path(__file__).parent / "cases"
JOB_NODES = ("gpu-a01", "gpu-a02")
WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168,"
    " Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
)
LOST_GPU = "RuntimeError: CUDA error: unspecified launch failure\n"
DBE_ERROR = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
BUS = [f"00000000:{0x1B + 0x10 * g:02X}:00.0" for g in range(8)]


# ----------------------------------------------------------------------- helpers


class Read:
    """What the reader made of one source: line texts, full lines, coverage, seconds taken."""

    def __init__(self, reader: MetricsReader, seconds: float) -> None:
        self.reader = reader
        self.lines = list(reader.lines())
        self.coverage = reader.coverages()
        self.seconds = seconds + 0.0

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines]

    def entry(self, node: str | None) -> Coverage:
        (found,) = [c for c in self.coverage if c.node == node]
        return found


def read_path(
    path: Path,
    *,
    node: str | None = None,
    window: bool = True,
    shown: str | None = None,
) -> Read:
    spec = SourceSpec(Stream.METRICS, node, [path], [shown or path.name], kind="metrics")
    ctx = (
        ReadContext(job_nodes=JOB_NODES, job_span=(START, END), window=(START, END))
        if window
        else ReadContext(job_nodes=JOB_NODES)
    )
    began = time.perf_counter()
    reader = MetricsReader(spec, ctx)
    out = Read(reader, 0.0)
    out.seconds = time.perf_counter() - began
    return out


def read_bytes(tmp_path: Path, raw: bytes, name: str = "metrics.json", **options: Any) -> Read:
    path = tmp_path / name
    path.write_bytes(raw)
    return read_path(path, **options)


def read_data(tmp_path: Path, data: object, name: str = "metrics.json", **options: Any) -> Read:
    return read_bytes(tmp_path, json.dumps(data).encode(), name, **options)


def assert_honest(entries: list[Coverage], file: str, status: CoverageStatus) -> None:
    """Every entry has ``status`` and a one-line reason naming ``file``."""
    assert entries
    for entry in entries:
        assert entry.status is status, (entry.node, entry.status, entry.reason)
        reason = entry.reason or ""
        assert file in reason, reason
        assert "\n" not in reason and "\r" not in reason


def make_bundle(
    tmp_path: Path,
    data: object | None = None,
    *,
    stderr: str = "",
    state: str = "FAILED",
    exclusive: bool = True,
    gres: dict[str, str] | None = None,
    bus: bool = False,
    trust: dict[str, str] | None = None,
) -> Path:
    """A two-node bundle (job 5001 on gpu-a[01-02]) with ``data`` as its metrics.json."""
    root = tmp_path / "b"
    (root / "job").mkdir(parents=True)
    record: dict[str, Any] = {
        "cluster": "c1",
        "job_id": "5001",
        "state": state,
        "exit_code": "1:0",
        "nodes": "gpu-a[01-02]",
        "start": START.isoformat(),
        "end": END.isoformat(),
        "user": "alice",
        "exclusive": exclusive,
    }
    if gres:
        record["gres_detail"] = gres
    if bus:
        record["gpu_bus_ids"] = {n: BUS for n in JOB_NODES}
    (root / "job.json").write_text(json.dumps(record))
    (root / "job" / "stderr.log").write_text(stderr)
    if trust:
        (root / "bundle.json").write_text(json.dumps({"trust": trust}))
    if data is not None:
        (root / "metrics.json").write_text(json.dumps(data))
    return root


def diagnose(root: Path, ruleset: RuleSet) -> Verdict:
    began = time.perf_counter()
    _, verdict = diagnose_bundle(root, ruleset)
    assert time.perf_counter() - began < 10
    return verdict


def metrics_entries(verdict: Verdict) -> list[Coverage]:
    return [c for c in verdict.coverage if c.stream is Stream.METRICS]


def blamed(verdict: Verdict) -> list[tuple[str | None, str | None]]:
    return [(r.node, r.device) for r in verdict.responsible]


def labelled(data: dict[str, Any], node: str, gpu: int, **labels: str) -> dict[str, Any]:
    for series in data["data"]["result"]:
        metric = series["metric"]
        if metric.get("Hostname") == node and metric.get("gpu") == str(gpu):
            metric.update(labels)
    return data


def raw_body(series: bytes) -> bytes:
    return b'{"status":"success","data":{"resultType":"matrix","result":[' + series + b"]}}"


def throttled(mask: float, node: str = "gpu-a02", gpu: int = 3) -> dict[str, Any]:
    samples = [(t, mask if T0 + 600 <= t < T0 + 2400 else 0) for t, _ in flat(0)]
    data = cluster()
    data["data"]["result"].append(one("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", node, gpu, samples))
    return data


@pytest.fixture
def peak_memory() -> Iterator[list[int]]:
    """``[peak bytes]`` allocated by Python while the test ran (tracemalloc)."""
    out: list[int] = [0]
    tracemalloc.start()
    try:
        yield out
    finally:
        out[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


# ----------------------------------------------------------------------- times and numbers

FAR_TIMES = [1e12, -1e12, 1e308, 253402300800.0]  # year 33658, year -29719, overflow, year 10000


@pytest.mark.parametrize("when", FAR_TIMES, ids=["1e12", "-1e12", "1e308", "year10000"])
def test_a_sample_time_beyond_the_calendar_is_not_a_crash(
    tmp_path: Path, ruleset: RuleSet, when: float
) -> None:
    data = body([one("DCGM_FI_DEV_GPU_TEMP", "gpu-a01", 0, [(when, 1.0), (when + 30, 1.0)])])
    verdict = diagnose(make_bundle(tmp_path, data), ruleset)
    assert verdict.responsible == ()
    assert all("metrics.json" in (c.reason or "") for c in metrics_entries(verdict))


def test_a_counter_climbing_in_the_far_future_is_not_a_crash(tmp_path: Path) -> None:
    far = 1e12
    samples = [(far, 0.0), (far + 30, 5.0), (far + 60, 9.0)]
    data = body([one("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpu-a01", 0, samples)])
    got = read_data(tmp_path, data)
    assert got.texts == []


def test_sattr_diagnose_survives_a_sample_beyond_the_calendar(tmp_path: Path) -> None:
    data = body([one("DCGM_FI_DEV_GPU_TEMP", "gpu-a01", 0, [(1e12, 1.0)])])
    root = make_bundle(tmp_path, data)
    result = CliRunner().invoke(main, ["diagnose", str(root)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[[' + b"9" * 5000 + b',"1"]]}'), ""),
        (
            raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[[' + b"9" * 4000 + b',"1"]]}'),
            "too large",
        ),
        (raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[[1,"0x10"]]}'), "0x10"),
        (raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[[1,{"a":1}]]}'), "series 1"),
        (raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[1]}'), "[time, value] pair"),
        (raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":"x"}'), "not a list"),
        (raw_body(b'{"metric":[],"values":[]}'), "no 'metric' labels"),
        (b'{"status":"success","data":null}', "no 'status': 'success' data"),
        (b'{"status":"success","data":{"resultType":"matrix","result":null}}', "not a list"),
        (b"[" * 200_000 + b"]" * 200_000, ""),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, ""),
        (b"\xff\xfe\x00\xd8", ""),  # a UTF-16 BOM, then a lone surrogate
        (b"", "Expecting value"),
        (b"\x00" * 4096, ""),
    ],
    ids=[
        "5000-digit-time",
        "4000-digit-time",
        "hex-value",
        "object-value",
        "bare-number-sample",
        "values-string",
        "metric-list",
        "data-null",
        "result-null",
        "nested-lists",
        "nested-objects",
        "utf16-junk",
        "empty",
        "nuls",
    ],
)
def test_what_is_not_an_answer_is_an_error_entry_naming_the_file(
    tmp_path: Path, raw: bytes, why: str
) -> None:
    got = read_bytes(tmp_path, raw)
    assert got.texts == []
    assert_honest(got.coverage, "metrics.json", CoverageStatus.ERROR)
    assert all(why in (c.reason or "") for c in got.coverage)
    assert got.seconds < 10


def test_a_bad_series_names_its_file_once(tmp_path: Path) -> None:
    got = read_bytes(tmp_path, raw_body(b'{"metric":{"Hostname":"gpu-a01"},"values":[[1,"0x10"]]}'))
    assert all((c.reason or "").count("metrics.json") == 1 for c in got.coverage)


def test_not_a_number_times_values_and_booleans_are_dropped_not_fatal(tmp_path: Path) -> None:
    series = (
        b'{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","Hostname":"gpu-a01","gpu":"0"},'
        b'"values":[["NaN","79"],["+Inf","79"],["-Inf","79"],[1e999,"79"],'
        + f'[{T0 + 60},"NaN"],[{T0 + 90},"1e999"],[{T0 + 120},"0"],[true,"79"]]}}'.encode()
    )
    got = read_bytes(tmp_path, raw_body(series))
    assert got.texts == []
    assert got.entry("gpu-a01").status is CoverageStatus.OK


def test_a_hundred_thousand_empty_answers_are_read_quickly(tmp_path: Path) -> None:
    got = read_data(tmp_path, [body([])] * 100_000)
    assert got.texts == []
    assert [c.status for c in got.coverage] == [CoverageStatus.EMPTY] * 2
    assert got.seconds < 5


def test_a_list_with_one_bad_answer_is_an_error_entry(tmp_path: Path) -> None:
    got = read_data(tmp_path, [cluster(), {"status": "success", "data": None}])
    assert got.texts == []
    # the good answer's series are read, and the entry says another part could not be
    assert all(c.status is CoverageStatus.ERROR for c in got.coverage)
    assert all("metrics.json" in (c.reason or "") for c in got.coverage)


# ----------------------------------------------------------------------- sizes and bombs


def test_a_file_just_under_the_limit_is_read(tmp_path: Path) -> None:
    payload = json.dumps(cluster()).encode()
    raw = b" " * (MAX_FILE_BYTES - len(payload)) + payload
    assert len(raw) == MAX_FILE_BYTES
    got = read_bytes(tmp_path, raw)
    assert [c.status for c in got.coverage] == [CoverageStatus.OK] * 2
    assert got.seconds < 10


@pytest.mark.parametrize("kind", ["plain", "gzip", "zstd"])
def test_a_file_over_the_limit_or_a_bomb_is_too_large(
    tmp_path: Path, kind: str, peak_memory: list[int]
) -> None:
    raw = b" " * (MAX_FILE_BYTES + 1)
    name = "metrics.json"
    if kind == "gzip":  # 128 MiB of spaces in ~130 KB
        raw, name = gzip.compress(b" " * (2 * MAX_FILE_BYTES), compresslevel=1), "metrics.json.gz"
    elif kind == "zstd":
        raw, name = zstd.compress(b" " * (2 * MAX_FILE_BYTES)), "metrics.json.zst"
    got = read_bytes(tmp_path, raw, name)
    del raw
    assert got.texts == []
    assert_honest(got.coverage, name, CoverageStatus.ERROR)
    assert all("larger than" in (c.reason or "") for c in got.coverage)
    assert got.seconds < 10
    assert peak_memory[0] < 4 * MAX_FILE_BYTES


def test_a_gzip_bomb_of_gigabytes_stops_at_the_limit(tmp_path: Path) -> None:
    # 4 GiB of zeros: one member, written in pieces so the test never holds it
    path = tmp_path / "metrics.json.gz"
    piece = b"\x00" * (16 << 20)
    with gzip.open(path, "wb", compresslevel=1) as out:
        for _ in range(16):  # 256 MiB is enough to pass the limit four times
            out.write(piece)
    got = read_path(path)
    assert_honest(got.coverage, "metrics.json.gz", CoverageStatus.ERROR)
    assert got.seconds < 10


def test_a_truncated_gzip_says_it_is_truncated(tmp_path: Path) -> None:
    raw = gzip.compress(json.dumps(cluster()).encode())
    got = read_bytes(tmp_path, raw[: len(raw) // 2], "metrics.json.gz")
    assert_honest(got.coverage, "metrics.json.gz", CoverageStatus.ERROR)
    assert all("truncated" in (c.reason or "") for c in got.coverage)


def test_a_truncated_gzip_is_still_an_error_entry(tmp_path: Path) -> None:
    raw = gzip.compress(json.dumps(cluster()).encode())
    got = read_bytes(tmp_path, raw[: len(raw) // 2], "metrics.json.gz")
    assert got.texts == []
    assert_honest(got.coverage, "metrics.json.gz", CoverageStatus.ERROR)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be-bom", "utf-8-sig"])
def test_other_encodings_of_json_are_read(tmp_path: Path, encoding: str) -> None:
    text = json.dumps(cluster())
    if encoding == "utf-16-be-bom":
        raw = b"\xfe\xff" + text.encode("utf-16-be")
    else:
        raw = text.encode(encoding)
    got = read_bytes(tmp_path, raw)
    assert [c.status for c in got.coverage] == [CoverageStatus.OK] * 2


# ----------------------------------------------------------------------- floods


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, 1), ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 72, 73)],
    ids=["counter", "throttle-mask"],
)
def test_a_flapping_series_costs_no_more_than_its_capped_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, low: int, high: int
) -> None:
    made = [0]
    original = metrics_module.Change

    def counting(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(metrics_module, "Change", counting)
    samples = [(T0 + i * 0.01, float(high if i % 2 else low)) for i in range(50_000)]
    got = read_data(tmp_path, body([one(name, "gpu-a01", 0, samples)]))
    assert len(got.texts) <= MAX_LINES_PER_SERIES + 1
    assert made[0] <= 4 * MAX_LINES_PER_SERIES


def test_a_flapping_series_is_capped_and_counted(tmp_path: Path) -> None:
    samples = [(T0 + i * 0.01, float(i % 2)) for i in range(20_000)]
    got = read_data(tmp_path, body([one("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu-a01", 0, samples)]))
    assert len(got.texts) <= MAX_LINES_PER_SERIES + 1
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL changed more often than the 64 lines" in (
        got.entry("gpu-a01").reason or ""
    )
    assert got.seconds < 10


def test_a_note_about_one_nodes_series_stays_on_that_node(tmp_path: Path) -> None:
    samples = [(T0 + i * 0.01, float(i % 2)) for i in range(2_000)]
    got = read_data(tmp_path, body([one("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu-a01", 0, samples)]))
    assert "not shown" not in (got.entry("gpu-a02").reason or "")


def test_many_tiny_series_are_capped(tmp_path: Path) -> None:
    item = b'{"metric":{"Hostname":"gpu-a01","gpu":"1"},"values":[]},'
    raw = raw_body(item * 60_000 + item[:-1])
    got = read_bytes(tmp_path, raw)
    assert got.entry("gpu-a01").status is CoverageStatus.OK
    assert got.seconds < 10


def test_one_series_with_many_samples_is_bounded(tmp_path: Path, peak_memory: list[int]) -> None:
    values = ",".join(f'[{T0 + i * 0.003:.3f},"0"]' for i in range(200_000)).encode()
    raw = raw_body(
        b'{"metric":{"__name__":"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL","Hostname":"gpu-a01","gpu":"0"},'
        b'"values":[' + values + b"]}"
    )
    size = len(raw)
    got = read_bytes(tmp_path, raw)
    del raw, values
    assert got.entry("gpu-a01").status is CoverageStatus.OK
    assert peak_memory[0] < 40 * size  # the JSON tree of [t, "v"] pairs is about 15x the text


# ----------------------------------------------------------------------- labels and lines

CONTROL = "3\n2026-11-30T10:30:00Z gpu-a02 dcgm-exporter: GPU 9 DCGM_FI_DEV_XID_ERRORS set to 79"


@pytest.mark.parametrize(
    "labels",
    [
        {"gpu": CONTROL, "UUID": CONTROL, "pci_bus_id": CONTROL, "hpc_job": CONTROL},
        {"gpu": "3\r", "pci_bus_id": "00000000:4B:00.0\x00", "hpc_job": "5001\n"},
        {"gpu": "3", "UUID": "GPU-" + "a" * 100_000, "hpc_job": "9" * 10_000},
        {"gpu": "\u0663", "pci_bus_id": "0000:\u0664b:00.0"},  # Arabic-Indic digits
        {"gpu": "3", "pci_bus_id": "0000:4b:00.0) DCGM_FI_DEV_XID_ERRORS set to 79 (was 0"},
    ],
    ids=["newlines", "trailing-control", "very-long", "unicode-digits", "paren-escape"],
)
def test_labels_cannot_write_a_line(tmp_path: Path, labels: dict[str, str]) -> None:
    counter = one("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gpu-a01", 3, stepped(900, 0, 5))
    counter["metric"].update(labels)
    counter["metric"]["Hostname"] = "gpu-a01"
    got = read_data(tmp_path, body([counter]))
    assert got.texts, "the rise is still a line"
    for line in got.lines:
        assert all(ch.isprintable() for ch in line.text), repr(line.text)
        assert all(ch.isprintable() for ch in line.raw), repr(line.raw)
        assert len(line.text) < 400
        assert "XID" not in line.text
        assert line.text.count("dcgm-exporter:") == 1
        assert line.text.startswith("dcgm-exporter: GPU")


@pytest.mark.parametrize(
    "host",
    [
        "../gpu-a01",
        "gpu-a01/../../etc",
        "gpu-a01 gpu-a02",
        "gpu-a01\ngpu-a02",
        "",
        "-gpu-a01",
        "a" * 300,
        "10.0.0.1:9400",
        "[fd00::1]:9400",
        "gpu-a01:9400:extra",
        "gpu-a03.cluster.example:9400",
    ],
)
def test_a_node_label_that_is_not_a_job_node_gives_no_line(tmp_path: Path, host: str) -> None:
    data = body(
        [one("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "x", g, stepped(900, 0, 2)) for g in range(2)]
    )
    for series in data["data"]["result"]:
        series["metric"].pop("Hostname")
        series["metric"]["instance"] = host
    got = read_data(tmp_path, data)
    assert [line.node for line in got.lines if "DBE" in line.text] in ([], ["gpu-a01"] * 2)
    if got.lines:  # only "gpu-a01\ngpu-a02" may read as gpu-a01 (its first line)
        assert host.startswith("gpu-a01\n")
    assert {c.node for c in got.coverage} == set(JOB_NODES)


def test_hostname_wins_over_instance(tmp_path: Path) -> None:
    series = one("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu-a02", 0, stepped(900, 0, 2))
    series["metric"]["instance"] = "gpu-a01:9400"
    got = read_data(tmp_path, body([series]))
    assert {line.node for line in got.lines} == {"gpu-a02"}


def test_a_nodes_file_cannot_speak_for_another_node(tmp_path: Path) -> None:
    node_dir = tmp_path / "nodes" / "gpu-a02"
    node_dir.mkdir(parents=True)
    special = {("gpu-a01", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
    data = cluster(nodes=("gpu-a01",), special=special)
    (node_dir / "metrics.json").write_text(json.dumps(data))
    got = read_path(node_dir / "metrics.json", node="gpu-a02")
    assert got.texts == []
    (entry,) = got.coverage
    assert entry.node == "gpu-a02"
    assert entry.status is CoverageStatus.EMPTY
    assert "24 series of hosts outside the job left out" in (entry.reason or "")


def test_unsorted_and_duplicate_series_give_the_sorted_lines(tmp_path: Path) -> None:
    special = {("gpu-a02", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
    straight = read_data(tmp_path, cluster(special=special)).texts
    shuffled = cluster(special=special)
    for series in shuffled["data"]["result"]:
        series["values"].reverse()
    got = read_data(tmp_path, shuffled).texts
    assert got == straight
    doubled = cluster(special=special)
    doubled["data"]["result"] += cluster(special=special)["data"]["result"]
    assert set(read_data(tmp_path, doubled).texts) == set(straight)


@pytest.mark.parametrize(
    ("mask", "lines"),
    [
        (72.9, ["hw_slowdown, hw_thermal"]),
        (-72.0, []),
        (float(2**40 + 0x48), []),
        (1e300, []),
        (0.5, []),
    ],
)
def test_odd_throttle_masks(tmp_path: Path, mask: float, lines: list[str]) -> None:
    got = read_data(tmp_path, throttled(mask))
    held = [t for t in got.texts if "clocks held down" in t]
    assert len(held) == len(lines)
    for text, reasons in zip(held, lines, strict=True):
        assert reasons in text
        assert "0x48" in text


def test_single_sample_series_and_a_node_ending_at_the_jobs_end(tmp_path: Path) -> None:
    exact = [(t, 0.0) for t, _ in flat(0) if t <= END.timestamp()]
    data = body(
        [one("DCGM_FI_DEV_XID_ERRORS", "gpu-a01", g, exact) for g in range(8)]
        + [one("DCGM_FI_DEV_XID_ERRORS", "gpu-a02", g, [(T0 + 60, 0.0)]) for g in range(8)]
    )
    got = read_data(tmp_path, data)
    assert not any(line.node == "gpu-a01" for line in got.lines)  # it reported to the end


def test_samples_years_away_from_the_job_give_no_line_in_it(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    year = 365 * 86400.0
    data = body(
        [
            one(
                "DCGM_FI_DEV_XID_ERRORS",
                node,
                g,
                [(t + shift, 79.0 if t > T0 + 900 else 0.0) for t, _ in flat(0)],
            )
            for node, shift in (("gpu-a01", -3 * year), ("gpu-a02", 5 * year))
            for g in range(2)
        ]
    )
    got = read_data(tmp_path, data)
    assert got.texts == []
    verdict = diagnose(make_bundle(tmp_path, data, stderr=LOST_GPU), ruleset)
    assert verdict.responsible == ()


# ----------------------------------------------------------------------- files in the bundle


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _link_out(path: Path) -> None:
    root = next(p for p in path.parents if p.name == "b")  # the bundle
    outside = root.parent / "outside-metrics.json"
    outside.write_text(json.dumps(cluster()))
    path.symlink_to(outside)


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.json")


ODD_FILES = {"fifo": _fifo, "directory": _directory, "link-out": _link_out, "dangling": _dangling}


@pytest.mark.parametrize("kind", list(ODD_FILES))
def test_a_top_level_metrics_json_not_read_is_said(
    tmp_path: Path, ruleset: RuleSet, kind: str
) -> None:
    root = make_bundle(tmp_path)
    ODD_FILES[kind](root / "metrics.json")
    bundle_notes, verdict = diagnose_bundle(root, ruleset)
    said = [c.reason or "" for c in verdict.coverage] + list(bundle_notes.notes)
    assert any("metrics.json" in text for text in said)


@pytest.mark.parametrize("kind", list(ODD_FILES))
def test_a_top_level_metrics_json_not_read_never_blocks_or_blames(
    tmp_path: Path, ruleset: RuleSet, kind: str
) -> None:
    root = make_bundle(tmp_path, stderr=LOST_GPU)
    ODD_FILES[kind](root / "metrics.json")
    verdict = diagnose(root, ruleset)  # a FIFO is never opened (that would block)
    assert verdict.responsible == ()


@pytest.mark.parametrize("kind", ["fifo", "link-out", "dangling"])
def test_a_nodes_metrics_json_not_read_is_said(tmp_path: Path, ruleset: RuleSet, kind: str) -> None:
    root = make_bundle(tmp_path, stderr=LOST_GPU)
    node_dir = root / "nodes" / "gpu-a02"
    node_dir.mkdir(parents=True)
    ODD_FILES[kind](node_dir / "metrics.json")
    verdict = diagnose(root, ruleset)
    assert verdict.responsible == ()
    assert any("nodes/gpu-a02/metrics.json" in (c.reason or "") for c in verdict.coverage)


# ----------------------------------------------------------------------- whose GPU, whose words


@pytest.mark.parametrize("fault", ["vanished", "thermal"])
def test_another_jobs_gpu_never_blames_whatever_the_fault(
    tmp_path: Path, ruleset: RuleSet, fault: str
) -> None:
    if fault == "vanished":
        data, stderr = labelled(cluster(gone={("gpu-a02", 5): 1200}), "gpu-a02", 5), LOST_GPU
        labelled(data, "gpu-a02", 5, hpc_job="4999")
    else:
        data, stderr = labelled(throttled(0x48, gpu=5), "gpu-a02", 5, hpc_job="4999"), WATCHDOG
    verdict = diagnose(make_bundle(tmp_path, data, stderr=stderr), ruleset)
    assert verdict.responsible == ()


@pytest.mark.parametrize("fault", ["dbe", "nvlink"])
def test_another_jobs_gpu_never_blames_for_counters(
    tmp_path: Path, ruleset: RuleSet, fault: str
) -> None:
    if fault == "dbe":
        special = {("gpu-a02", 5, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
        data, stderr = cluster(special=special), DBE_ERROR
    else:
        climbing = [(t, max(0.0, t - T0 - 600) * 10) for t, _ in flat(0)]
        data = cluster()
        data["data"]["result"].append(
            one("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gpu-a02", 5, climbing)
        )
        stderr = WATCHDOG
    labelled(data, "gpu-a02", 5, hpc_job="4999")
    verdict = diagnose(make_bundle(tmp_path, data, stderr=stderr), ruleset)
    assert verdict.responsible == ()


def test_an_hpc_job_label_cannot_claim_a_gpu_slurm_gave_to_no_one_of_ours(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    special = {("gpu-a02", 5, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
    data = labelled(cluster(special=special), "gpu-a02", 5, hpc_job="5001")
    gres = {n: "gpu:4(IDX:0-3)" for n in JOB_NODES}
    root = make_bundle(tmp_path, data, stderr=DBE_ERROR, exclusive=False, gres=gres, bus=True)
    verdict = diagnose(root, ruleset)
    assert ("gpu-a02", "0000:6b:00") not in blamed(verdict)


def test_a_gpu_slurm_gave_to_another_job_never_blames(tmp_path: Path, ruleset: RuleSet) -> None:
    special = {("gpu-a02", 5, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
    gres = {n: "gpu:4(IDX:0-3)" for n in JOB_NODES}
    root = make_bundle(
        tmp_path, cluster(special=special), stderr=DBE_ERROR, exclusive=False, gres=gres, bus=True
    )
    assert diagnose(root, ruleset).responsible == ()


METRIC_LINES = (
    "dcgm-exporter: GPU 3 (0000:4b:00) DCGM_FI_DEV_ECC_DBE_VOL_TOTAL rose from 0 to 2 (+2)\n"
    "dcgm-exporter: GPU 3 (0000:4b:00) DCGM_FI_DEV_XID_ERRORS set to 79 (was 0)\n"
    "dcgm-exporter: GPU 5 (0000:6b:00) stopped reporting: its last sample was at"
    " 2026-11-30T10:33:00Z; 7 other GPU(s) of the node reported until 2026-11-30T11:05:00Z\n"
    "dcgm-exporter: every series of the node stopped: its last sample was at"
    " 2026-11-30T10:24:30Z; the job ended at 2026-11-30T11:00:00Z\n"
)


def test_metric_lines_in_the_jobs_own_output_never_blame(tmp_path: Path, ruleset: RuleSet) -> None:
    stamped = "".join(f"2026-11-30 10:30:00,000 {line}\n" for line in METRIC_LINES.splitlines())
    verdict = diagnose(make_bundle(tmp_path, stderr=stamped + LOST_GPU + WATCHDOG), ruleset)
    assert verdict.responsible == ()


@pytest.mark.parametrize("fault", ["vanished", "dbe", "node"])
def test_untrusted_metrics_alone_never_blame(tmp_path: Path, ruleset: RuleSet, fault: str) -> None:
    """A site that says its metrics are user-writable (bundle.json trust): they may not blame
    on their own, with only the job's own output beside them."""
    if fault == "vanished":
        data, stderr, state = cluster(gone={("gpu-a02", 5): 1200}), LOST_GPU, "FAILED"
    elif fault == "dbe":
        special = {("gpu-a02", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
        data, stderr, state = cluster(special=special), DBE_ERROR, "FAILED"
    else:
        data = cluster(gone={("gpu-a01", g): 1500 for g in range(8)})
        stderr, state = "srun: error: Node failure on gpu-a01\n", "NODE_FAIL"
    root = make_bundle(tmp_path, data, stderr=stderr, state=state, trust={"metrics": "untrusted"})
    verdict = diagnose(root, ruleset)
    assert [c.trust for c in metrics_entries(verdict)] == ["untrusted"] * 2
    assert verdict.responsible == ()


def test_metrics_from_a_node_outside_the_job_never_blame(tmp_path: Path, ruleset: RuleSet) -> None:
    special = {("gpu-z99", 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"): stepped(1800, 0, 2)}
    data = cluster(
        nodes=("gpu-a01", "gpu-a02", "gpu-z99"), special=special, gone={("gpu-z99", 5): 900}
    )
    verdict = diagnose(make_bundle(tmp_path, data, stderr=DBE_ERROR), ruleset)
    assert all(node != "gpu-z99" for node, _ in blamed(verdict))


# ----------------------------------------------------------------------- slurmctld's words

CTLD_CASE = CASES / "slurmctld-not-responding-then-back"  # job 6101 on gpu[01-04], NODE_FAIL


def ctld_bundle(
    tmp_path: Path, *, stdout: str = "", ctld: str | None = None, state: str = "NODE_FAIL"
) -> Path:
    root = tmp_path / "ctld"
    shutil.copytree(CTLD_CASE, root)
    (root / "slurmctld.log").unlink()
    if ctld is not None:
        (root / "slurmctld.log").write_text(ctld)
    (root / "job" / "stdout.log").write_text("2026-05-01 09:00:05,000 - INFO - starting\n" + stdout)
    record = json.loads((root / "job.json").read_text())
    record["state"] = state
    (root / "job.json").write_text(json.dumps(record))
    return root


FORGED_CTLD = (
    "[2026-05-01T10:02:40.006] error: Nodes gpu02 not responding\n"
    "[2026-05-01T10:03:10.011] error: Nodes gpu02 not responding, setting DOWN\n"
    "[2026-05-01T10:03:10.012] Killing JobId=6101 on failed node gpu02\n"
    "[2026-05-01T10:03:10.013] error: _slurm_rpc_epilog_complete: epilog error JobId=6101"
    " Node=gpu02 Err=Kill task failed usec=48\n"
    "[2026-05-01T10:03:10.014] update_node: node gpu02 reason set to: Kill task failed\n"
    "[2026-05-01T10:03:10.015] validate_node_specs: Node gpu02 unexpectedly rebooted"
    " boot_time=1777626000 last response=1777625000\n"
    "slurmctld: drain_nodes: node gpu02 state set to DRAIN\n"
    "[2026-05-01T10:06:52.330] Node gpu02 now responding\n"
)


@pytest.mark.parametrize("state", ["NODE_FAIL", "FAILED", "TIMEOUT"])
def test_slurmctld_words_in_the_jobs_output_never_blame(
    tmp_path: Path, ruleset: RuleSet, state: str
) -> None:
    verdict = diagnose(ctld_bundle(tmp_path, stdout=FORGED_CTLD, state=state), ruleset)
    assert verdict.responsible == ()


@pytest.mark.parametrize(
    "line",
    [
        "error: _slurm_rpc_epilog_complete: epilog error JobId=61011 Node=gpu02 Err=Kill task"
        " failed usec=48",
        "error: slurmd error running JobId=7777 on node(s)=gpu02: Kill task failed",
        "error: slurmd error running JobId=6100_2(6102) on node(s)=gpu02: Kill task failed",
        "Killing JobId=7777 on failed node gpu02",
    ],
    ids=["longer-id", "other-job", "other-array-task", "other-job-killed"],
)
def test_another_jobs_slurmctld_lines_alone_never_blame(
    tmp_path: Path, ruleset: RuleSet, line: str
) -> None:
    ctld = f"[2026-05-01T10:03:09.000] {line}\n"
    verdict = diagnose(ctld_bundle(tmp_path, ctld=ctld, state="TIMEOUT"), ruleset)
    assert verdict.responsible == ()


def test_a_drain_for_another_jobs_epilog_does_not_blame_this_job(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    ctld = (
        "[2026-05-01T10:03:09.000] error: _slurm_rpc_epilog_complete: epilog error JobId=7777"
        " Node=gpu02 Err=Kill task failed usec=48\n"
        "[2026-05-01T10:03:09.001] update_node: node gpu02 reason set to: Kill task failed\n"
    )
    verdict = diagnose(ctld_bundle(tmp_path, ctld=ctld, state="TIMEOUT"), ruleset)
    assert verdict.responsible == ()


def test_an_array_tasks_own_node_error_is_read(tmp_path: Path, ruleset: RuleSet) -> None:
    def verdict_for(jobid: str) -> Verdict:
        ctld = (
            f"[2026-05-01T10:03:09.000] error: slurmd error running JobId={jobid} on"
            " node(s)=gpu02: Kill task failed\n"
        )
        root = ctld_bundle(tmp_path / jobid.replace("(", "_").replace(")", ""), ctld=ctld)
        record = json.loads((root / "job.json").read_text())
        record.update({"state": "TIMEOUT", "array_job_id": "6100", "array_task_id": "1"})
        (root / "job.json").write_text(json.dumps(record))
        return diagnose(root, ruleset)

    plain = verdict_for("6101")
    assert blamed(plain) == [("gpu02", None)]
    array = verdict_for("6100_1(6101)")
    assert blamed(array) == blamed(plain)


def test_window_edges_are_honest(tmp_path: Path) -> None:
    """Samples only before the job's window: the lines fall outside and are counted there."""
    early = [(t - 86400, 79.0 if t > T0 + 900 else 0.0) for t, _ in flat(0)]
    got = read_data(tmp_path, body([one("DCGM_FI_DEV_XID_ERRORS", "gpu-a01", 0, early)]))
    assert got.texts == []
    assert got.entry("gpu-a01").status is CoverageStatus.OK
    last = got.entry("gpu-a01").last_at
    assert last is not None
    assert last < START - timedelta(hours=12)
