"""dcgm-exporter-shaped GPU series as OpenMetrics text, for backfilling a real Prometheus.

dcgm-exporter publishes one series per (GPU, field), named after the DCGM field, with the
labels ``gpu`` (the index), ``UUID``, ``pci_bus_id``, ``device`` (``nvidiaN``), ``modelName``
and ``Hostname``; Prometheus adds ``instance`` and ``job`` when it scrapes the exporter.

The metric types and HELP strings follow dcgm-exporter's ``etc/default-counters.csv`` and
``etc/dcp-metrics-included.csv`` (github.com/NVIDIA/dcgm-exporter; several fields used here
are commented out there and are enabled by sites that want them: ECC, NVLink errors,
violations). ``DCGM_FI_DEV_ROW_REMAP_PENDING`` and ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` are
in neither file; they are gauges (a 0/1 flag and a bit mask).

A series is a function of time: ``value(t)`` for each scrape ``t`` from the start to the end
of the window, every ``interval`` seconds. Overrides replace that function for one
(node, gpu, metric); ``vanish`` ends a GPU's or a node's series (no sample at or after ``t``).
An override that returns ``None`` at ``t`` leaves that scrape out.

Promtool's OpenMetrics parser needs ``# TYPE`` before a family's samples, each family once,
a timestamp (seconds) on every sample, and ``# EOF`` at the end; ``render`` merges families
so that several datasets can go into one file.
"""

from __future__ import annotations

import functools
import hashlib
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

Value = float | None
Curve = Callable[[float], Value]
"""A series as a function of the scrape time (unix seconds): its value, or None for no sample."""

# name -> (OpenMetrics type, HELP)
METRICS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gauge", "Whether remapping of rows is pending"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink retries."),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (
        "gauge",
        "Current clock throttle reasons (bit mask).",
    ),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (
        "counter",
        "Throttling duration due to thermal constraints (in us).",
    ),
    "DCGM_FI_DEV_POWER_VIOLATION": (
        "counter",
        "Throttling duration due to power constraints (in us).",
    ),
    # not emitted unless asked for (``metrics=``)
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (
        "counter",
        "Total number of double-bit persistent ECC errors.",
    ),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (
        "counter",
        "Total number of NVLink data CRC errors.",
    ),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (
        "counter",
        "Total number of NVLink recovery errors.",
    ),
    "DCGM_FI_DEV_RETIRED_DBE": (
        "counter",
        "Total number of retired pages due to double-bit errors.",
    ),
    "DCGM_FI_DEV_RETIRED_PENDING": ("counter", "Total number of pages pending retirement."),
}

DEFAULT_METRICS: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
)

# clock throttle reason bits (DCGM_CLOCKS_THROTTLE_REASON_*, as in NVML's
# nvmlClocksThrottleReasons): 0x08 hardware slowdown, 0x20 software thermal, 0x40 hardware
# thermal, 0x80 hardware power brake, 0x04 software power cap
THROTTLE_SW_POWER_CAP = 0x04
THROTTLE_HW_SLOWDOWN = 0x08
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80

MODEL = "NVIDIA A100-SXM4-80GB"
# the PCI buses of the eight GPUs of a DGX A100, in index order
_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)


@dataclass(frozen=True)
class Gpu:
    """One GPU as dcgm-exporter labels it."""

    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model: str = MODEL
    extra: tuple[tuple[str, str], ...] = ()  # more labels, e.g. (("hpc_job", "123"),)

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"

    def labels(self, scraped: bool = True) -> dict[str, str]:
        """The series' labels; ``scraped`` adds the ``instance`` and ``job`` Prometheus adds."""
        out = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "device": self.device,
            "modelName": self.model,
            "Hostname": self.node,
        }
        if scraped:
            out["instance"] = f"{self.node}:9400"
            out["job"] = "dcgm-exporter"
        out.update(self.extra)
        return out


def gpu_uuid(node: str, index: int) -> str:
    """A UUID the same on every run for (node, index), in NVIDIA's ``GPU-<uuid>`` form."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).digest()[:16]
    return f"GPU-{uuid.UUID(bytes=digest, version=4)}"


def pci_bus_id(index: int) -> str:
    """DGX A100-like for the first eight, then one bus per index (domain, bus) for the rest."""
    if index < len(_BUSES):
        return f"00000000:{_BUSES[index]:02X}:00.0"
    return f"{index // 0x100 + 1:08X}:{index % 0x100:02X}:00.0"


def gpus(nodes: Iterable[str], per_node: int = 8, model: str = MODEL) -> tuple[Gpu, ...]:
    """``per_node`` GPUs on each node, with deterministic UUIDs and DGX-like bus ids."""
    return tuple(
        Gpu(node, i, gpu_uuid(node, i), pci_bus_id(i), model)
        for node in nodes
        for i in range(per_node)
    )


# ------------------------------------------------------------------ curves


def ts(when: datetime | float) -> float:
    """Unix seconds of a UTC datetime (a number passes through)."""
    return when.timestamp() if isinstance(when, datetime) else float(when)


def constant(value: float) -> Curve:
    return lambda t: value


def step(at: datetime | float, before: float, after: float) -> Curve:
    """``before`` until ``at``, ``after`` from ``at`` on (the scrape at ``at`` sees it)."""
    edge = ts(at)
    return lambda t: after if t >= edge else before


def ramp(at: datetime | float, per_second: float, base: float = 0.0) -> Curve:
    """``base`` until ``at``, then climbing by ``per_second`` (whole numbers, as counters are)."""
    edge = ts(at)
    return lambda t: base if t < edge else base + math.floor((t - edge) * per_second)


def until(end: datetime | float, curve: Curve) -> Curve:
    """``curve``, with no sample at or after ``end``."""
    edge = ts(end)
    return lambda t: curve(t) if t < edge else None


def baseline(gpu: Gpu, metric: str) -> Curve:
    """A healthy GPU under a busy job: steady values with a small deterministic wobble, every
    error counter 0."""
    k = gpu.index

    def wobble(t: float, spread: int) -> int:
        return int((t // 30) * 7 + k * 3) % spread

    match metric:
        case "DCGM_FI_DEV_GPU_TEMP":
            return lambda t: 58 + k % 4 + wobble(t, 4)
        case "DCGM_FI_DEV_POWER_USAGE":
            return lambda t: 300.0 + 5 * (k % 3) + wobble(t, 20) + 0.25
        case "DCGM_FI_DEV_SM_CLOCK":
            return constant(1410)
        case "DCGM_FI_DEV_GPU_UTIL":
            return lambda t: 95 + wobble(t, 6)
    return constant(0)


# ------------------------------------------------------------------ families and text

Families = dict[str, list[str]]
"""Sample lines per metric family, in the order they were added."""


def _fmt(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value)):
        return str(int(value))
    return repr(float(value))


def _labels(labels: Mapping[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())


def series_lines(
    metric: str, labels: Mapping[str, str], curve: Curve, times: Iterable[float]
) -> list[str]:
    """One series' sample lines, ``name{labels} value timestamp``."""
    head = f"{metric}{{{_labels(labels)}}}"
    out = []
    for t in times:
        value = curve(t)
        if value is not None:
            out.append(f"{head} {_fmt(value)} {_fmt(t)}")
    return out


def scrape_times(start: datetime | float, end: datetime | float, interval: float) -> list[float]:
    """Every ``interval`` seconds from ``start`` to ``end``, both included."""
    first, last = ts(start), ts(end)
    n = int((last - first) // interval)
    return [first + i * interval for i in range(n + 1)]


def dcgm_families(
    gpu_list: Sequence[Gpu],
    start: datetime | float,
    end: datetime | float,
    interval: float = 30.0,
    *,
    overrides: Mapping[tuple[str, int, str], Curve] | None = None,
    vanish_gpu: Mapping[tuple[str, int], datetime | float] | None = None,
    vanish_node: Mapping[str, datetime | float] | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    scraped: bool = True,
) -> Families:
    """The samples of every (GPU, metric) over [start, end], every ``interval`` seconds.

    ``overrides[(node, gpu index, metric)]`` replaces the baseline curve; ``vanish_gpu[(node,
    index)]`` and ``vanish_node[node]`` end those series (no sample at or after the time)."""
    overrides = overrides or {}
    vanish_gpu = vanish_gpu or {}
    vanish_node = vanish_node or {}
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}")
    times = scrape_times(start, end, interval)
    families: Families = {m: [] for m in metrics}
    for metric in metrics:
        for gpu in gpu_list:
            curve = overrides.get((gpu.node, gpu.index, metric)) or baseline(gpu, metric)
            ends = [
                ts(v)
                for v in (vanish_gpu.get((gpu.node, gpu.index)), vanish_node.get(gpu.node))
                if v is not None
            ]
            if ends:
                curve = until(min(ends), curve)
            families[metric].extend(series_lines(metric, gpu.labels(scraped), curve, times))
    return families


def merge(*parts: Families) -> Families:
    out: Families = {}
    for part in parts:
        for metric, lines in part.items():
            out.setdefault(metric, []).extend(lines)
    return out


def render(*parts: Families) -> str:
    """One OpenMetrics document of all the families (merged by name), ending in ``# EOF``."""
    lines: list[str] = []
    for metric, samples in merge(*parts).items():
        kind, help_text = METRICS.get(metric, ("gauge", metric))
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} {kind}")
        lines.extend(samples)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ scenarios


@dataclass(frozen=True)
class Event:
    """What a scenario did to one GPU (``gpu`` None: the whole node) from ``at`` on."""

    kind: str  # "dbe", "nvlink_crc", "thermal", "gpu_vanished", "node_vanished"
    node: str
    gpu: int | None
    at: datetime
    metrics: tuple[str, ...] = ()  # the series that show it
    pci_bus_id: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class Scenario:
    """A job's window, its nodes and their GPUs' series (data only)."""

    name: str
    description: str
    job_id: str
    start: datetime  # the job's start and end (UTC)
    end: datetime
    nodes: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    interval: float
    data_start: datetime  # the series run from here (before the job) ...
    data_end: datetime  # ... to here (after it), unless an event ends them
    events: tuple[Event, ...] = ()
    families: Families = field(default_factory=dict, repr=False, compare=False)

    @property
    def openmetrics(self) -> str:
        return render(self.families)

    def gpu(self, node: str, index: int) -> Gpu:
        return next(g for g in self.gpus if g.node == node and g.index == index)


# every scenario on 2025-03-10, two hours apart, so that the whole dataset is a few blocks
def _at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2025, 3, day, hour, minute, tzinfo=UTC)


JOB_MINUTES = 60
LEAD_MINUTES = 10  # the exporter reports this long before the job starts and after it ends


def _scenario(
    name: str,
    description: str,
    job_id: str,
    start: datetime,
    nodes: Sequence[str],
    *,
    per_node: int = 8,
    events: Sequence[Event] = (),
    overrides: Mapping[tuple[str, int, str], Curve] | None = None,
    vanish_gpu: Mapping[tuple[str, int], datetime] | None = None,
    vanish_node: Mapping[str, datetime] | None = None,
    minutes: int = JOB_MINUTES,
    interval: float = 30.0,
) -> Scenario:
    end = start + timedelta(minutes=minutes)
    data_start = start - timedelta(minutes=LEAD_MINUTES)
    data_end = end + timedelta(minutes=LEAD_MINUTES)
    gpu_list = gpus(nodes, per_node)
    by_key = {(g.node, g.index): g for g in gpu_list}
    filled = tuple(
        Event(
            e.kind,
            e.node,
            e.gpu,
            e.at,
            e.metrics,
            by_key[(e.node, e.gpu)].pci_bus_id if e.gpu is not None else None,
            by_key[(e.node, e.gpu)].uuid if e.gpu is not None else None,
        )
        for e in events
    )
    families = dcgm_families(
        gpu_list,
        data_start,
        data_end,
        interval,
        overrides=overrides,
        vanish_gpu=vanish_gpu,
        vanish_node=vanish_node,
    )
    return Scenario(
        name,
        description,
        job_id,
        start,
        end,
        tuple(nodes),
        gpu_list,
        interval,
        data_start,
        data_end,
        filled,
        families,
    )


def _nodes(prefix: str, count: int = 4) -> tuple[str, ...]:
    return tuple(f"{prefix}-n{i:02d}" for i in range(1, count + 1))


def dbe_scenario() -> Scenario:
    """(a) A double-bit ECC error on ``dbe-n02`` GPU 3, 40 minutes into the job: the volatile
    DBE counter goes 0 -> 2, the last XID 0 -> 48 and row-remap failure 0 -> 1 at t0."""
    nodes = _nodes("dbe")
    start = _at(10, 8)
    t0 = _at(10, 8, 40)
    node, gpu = nodes[1], 3
    metrics = {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2,
        "DCGM_FI_DEV_XID_ERRORS": 48,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
    }
    return _scenario(
        "dbe",
        f"double-bit ECC error on {node} GPU {gpu} at {t0:%H:%M}Z (XID 48, row remap failed)",
        "700101",
        start,
        nodes,
        minutes=45,
        events=[Event("dbe", node, gpu, t0, tuple(metrics))],
        overrides={(node, gpu, m): step(t0, 0, v) for m, v in metrics.items()},
    )


def nvlink_scenario() -> Scenario:
    """(b) ``nvl-n03`` GPU 6's NVLink CRC flit error counter climbs from t0 (25 min into the
    job) by 4 a second (120 a scrape) to the end."""
    nodes = _nodes("nvl")
    start = _at(10, 10)
    t0 = _at(10, 10, 25)
    node, gpu = nodes[2], 6
    metric = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    return _scenario(
        "nvlink",
        f"NVLink CRC flit errors climbing on {node} GPU {gpu} from {t0:%H:%M}Z",
        "700102",
        start,
        nodes,
        events=[Event("nvlink_crc", node, gpu, t0, (metric,))],
        overrides={(node, gpu, metric): ramp(t0, 4.0)},
    )


def thermal_scenario() -> Scenario:
    """(c) A straggler: ``thr-n04`` GPU 1 throttles from t0 (10 min into the job): throttle
    reasons 0x48 (hardware slowdown + hardware thermal), thermal violation time rising by
    1,000,000 us a second, SM clock 1410 -> 705 MHz, temperature 91 C, power 210 W."""
    nodes = _nodes("thr")
    start = _at(10, 12)
    t0 = _at(10, 12, 10)
    node, gpu = nodes[3], 1
    mask = THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL
    changes: dict[str, Curve] = {
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": step(t0, 0, mask),
        "DCGM_FI_DEV_THERMAL_VIOLATION": ramp(t0, 1_000_000),
        "DCGM_FI_DEV_SM_CLOCK": step(t0, 1410, 705),
        "DCGM_FI_DEV_GPU_TEMP": step(t0, 62, 91),
        "DCGM_FI_DEV_POWER_USAGE": step(t0, 305.25, 210.5),
    }
    return _scenario(
        "thermal",
        f"thermal throttling (0x{mask:02x}) on {node} GPU {gpu} from {t0:%H:%M}Z: a straggler",
        "700103",
        start,
        nodes,
        events=[Event("thermal", node, gpu, t0, tuple(changes))],
        overrides={(node, gpu, m): c for m, c in changes.items()},
    )


def vanish_scenario() -> Scenario:
    """(d) ``van-n02`` GPU 5 stops reporting 25 minutes into the job (no sample at or after
    t); its seven siblings and the other nodes go on to the end."""
    nodes = _nodes("van")
    start = _at(10, 14)
    t = _at(10, 14, 25)
    node, gpu = nodes[1], 5
    return _scenario(
        "gpu-vanished",
        f"{node} GPU {gpu} stops reporting at {t:%H:%M}Z while its siblings go on",
        "700104",
        start,
        nodes,
        events=[Event("gpu_vanished", node, gpu, t, DEFAULT_METRICS)],
        vanish_gpu={(node, gpu): t},
    )


def node_vanish_scenario() -> Scenario:
    """(f) Every series of ``nod-n03`` stops 30 minutes into the job (the node went away)."""
    nodes = _nodes("nod")
    start = _at(10, 18)
    t = _at(10, 18, 30)
    node = nodes[2]
    return _scenario(
        "node-vanished",
        f"{node} stops reporting at {t:%H:%M}Z (all its GPUs)",
        "700106",
        start,
        nodes,
        events=[Event("node_vanished", node, None, t, DEFAULT_METRICS)],
        vanish_node={node: t},
    )


def healthy_scenario() -> Scenario:
    """(e) Nothing happens: every GPU of four nodes reports steady values, no error."""
    return _scenario(
        "healthy",
        "a healthy job: steady temperatures, clocks and utilisation, no error counter moves",
        "700105",
        _at(10, 16),
        _nodes("ok"),
    )


@functools.cache
def all_scenarios() -> tuple[Scenario, ...]:
    """Every scenario (made once: do not change their families); their node names and
    windows do not overlap."""
    return (
        dbe_scenario(),
        nvlink_scenario(),
        thermal_scenario(),
        vanish_scenario(),
        healthy_scenario(),
        node_vanish_scenario(),
    )


def flood_families(
    node: str,
    count: int,
    start: datetime | float,
    end: datetime | float,
    interval: float = 60.0,
    metric: str = "DCGM_FI_DEV_GPU_TEMP",
) -> Families:
    """``count`` distinct series of ``metric`` all labelled ``Hostname=node`` (GPU indexes
    0..count-1): a query for the node's GPUs answers an absurd number of series."""
    times = scrape_times(start, end, interval)
    lines: list[str] = []
    for i in range(count):
        gpu = Gpu(node, i, gpu_uuid(node, i), pci_bus_id(i))
        lines.extend(series_lines(metric, gpu.labels(), baseline(gpu, metric), times))
    return {metric: lines}


def flood_scenario(count: int = 20_000, node: str = "flood-n01") -> Scenario:
    """One node whose ``DCGM_FI_DEV_GPU_TEMP`` has ``count`` series (GPU indexes 0..count-1),
    sampled every minute over a 10-minute job: for the "absurd number of series" tests."""
    start = _at(9, 8)
    end = start + timedelta(minutes=10)
    gpu_list = tuple(Gpu(node, i, gpu_uuid(node, i), pci_bus_id(i)) for i in range(count))
    return Scenario(
        "flood",
        f"{node} answers {count} series of DCGM_FI_DEV_GPU_TEMP",
        "700199",
        start,
        end,
        (node,),
        gpu_list,
        60.0,
        start,
        end,
        (),
        flood_families(node, count, start, end, 60.0),
    )
