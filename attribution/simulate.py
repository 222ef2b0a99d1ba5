"""Scenario simulator: realistic multi-node evidence bundles with a known answer.

A :class:`Scenario` (YAML or Python) describes one Slurm GPU job: its nodes
(a Slurm hostlist), GPUs and ranks per node, its launcher, the root fault and
the cause-to-symptom chain it sets off (one of the families of
``knowledge/signatures/CHAINS.md``), background noise, per-node clock skew,
missing sources and signals placed outside the job window. :func:`generate`
turns it into the files of an evidence bundle (DESIGN §6) plus an
``expected.yaml`` decided from the scenario alone; :func:`write_bundle`
writes them; :func:`sweep` draws many varied scenarios from one seed.

Line formats follow the real producers, as recorded in
``knowledge/signatures/catalog.yaml`` (``line_prefixes`` and the signature
examples): kernel lines as ``dmesg -T``, raw ``dmesg`` uptime, rsyslog
``kern.log``, ``journalctl -k`` short and short-iso; NVIDIA ``NVRM: Xid``
lines; NCCL ``host:pid:tid [dev] NCCL WARN``; PyTorch c10 logging
(``[rank3]:[E304 10:12:01.123456789 ProcessGroupNCCL.cpp:616]`` -- the month
is not zero-padded there, unlike glog and torchrun's own ``W0304`` lines);
torchrun ``ChildFailedError`` blocks; srun ``--label`` prefixes; slurmstepd
``*** JOB N ON node CANCELLED AT <local ISO> ... ***``; Fabric Manager
``[Mar 04 2025 10:12:01] [ERROR] [tid 841]``.

Every random choice comes from one ``random.Random(scenario.seed)``, so a
scenario always produces byte-identical files. All times are UTC epoch
seconds internally; node clocks are ``true time + skew`` and local stamps are
rendered in the scenario's timezone, the way each producer prints them.

Simplification, stated once: in big jobs every rank of every node would print
its own copy of a peer error. To keep bundles small (a 1,024-node job
generates in well under a second), only a bounded sample of peer nodes
(``Scenario.peer_sample``) prints the full per-rank cascade; the other nodes
print their teardown lines only. Rank identity lines (NCCL ``Init COMPLETE``)
are printed for every rank, as NCCL does.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CHAINS",
    "Expected",
    "FaultSpec",
    "NoiseSpec",
    "OutOfWindowSpec",
    "Scenario",
    "SimBundle",
    "SkewSpec",
    "compress_hostlist",
    "expand_hostlist",
    "format_line",
    "generate",
    "load_scenarios",
    "sweep",
    "write_bundle",
]

# --------------------------------------------------------------------- vocabulary

ChainName = Literal[
    "gpu_fell_off_bus",
    "gpu_memory_error",
    "nvlink5_fault",
    "nvswitch_fatal",
    "fabric_manager_down",
    "fabric_manager_restarted",
    "ib_link_flap",
    "ib_init_config",
    "gpu_oom",
    "cgroup_oom",
    "node_oom",
    "collective_straggler",
    "collective_hang",
    "rank_exception",
    "rank_segfault",
    "illegal_address",
    "node_failure",
    "preemption",
    "time_limit",
    "time_limit_hang",
    "user_cancel",
    "lustre_eviction",
    "nfs_hang",
    "gsp_timeout",
    "nccl_shm",
    "exit_unexplained",
    "peer_lost_no_evidence",
    "killed_unexplained",
]

#: Every chain the simulator knows, in a stable order.
CHAINS: tuple[str, ...] = ChainName.__args__  # type: ignore[attr-defined]

Platform = Literal["a100", "h100", "b200", "gb200"]
KernelFormat = Literal["dmesg_t", "raw", "syslog", "journal", "short_iso", "iso"]

# PCI buses of the GPUs on common baseboards (bus numbers as lspci prints them).
_GPU_BUSES: dict[str, list[str]] = {
    "a100": [f"0000:{b}:00" for b in ("07", "0f", "47", "4e", "87", "90", "b7", "bd")],
    "h100": [f"0000:{b}:00" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")],
    "b200": [f"0000:{b}:00" for b in ("1b", "43", "52", "61", "9d", "c3", "d1", "df")],
    "gb200": ["0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"],
}
_NVSWITCH_BUSES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
_HCA_BUSES = ["0000:0c:00.0", "0000:1f:00.0", "0000:4a:00.0", "0000:5c:00.0"]
_KERNELS = ["5.15.0-105-generic", "5.14.0-427.13.1.el9_4.x86_64", "6.8.0-45-generic"]
_DRIVERS = ["535.183.01", "550.90.07", "560.35.03", "570.124.06"]
_NCCL_VERSIONS = ["2.18.5", "2.20.5", "2.21.5", "2.23.4"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultSpec(_Strict):
    """The root fault and its chain.

    ``chain`` names a CHAINS.md family; ``node`` the node it starts on (a job
    node; drawn from the seed when omitted); ``gpu`` the GPU index on that node;
    ``at`` seconds after job start when it happens (drawn when omitted);
    ``options`` chain-specific switches, checked by the chain (an unknown key
    is an error).
    """

    chain: ChainName
    node: str | None = None
    gpu: int | None = Field(default=None, ge=0)
    at: float | None = Field(default=None, ge=0)
    options: dict[str, Any] = {}


class NoiseSpec(_Strict):
    """Background noise.

    ``level``: how many benign lines each node and the job print.
    ``benign_xid_nodes``: nodes (never the root node) that log an
    informational XID 63 or 92 inside the window (red herrings).
    ``boot_flap_nodes``: nodes that rebooted minutes before the job started,
    with the NIC link flaps every boot has. ``tqdm``: carriage-return progress
    bars in the job's stderr.
    """

    level: Literal["none", "low", "normal", "high"] = "normal"
    benign_xid_nodes: int = Field(default=0, ge=0)
    boot_flap_nodes: int = Field(default=0, ge=0)
    tqdm: bool = True


class SkewSpec(_Strict):
    """Clock skew: each node's clock is off by a value drawn in ``±max_seconds``,
    or by the value given for it in ``nodes`` (seconds; positive = ahead)."""

    max_seconds: float = Field(default=0.0, ge=0)
    nodes: dict[str, float] = {}


class OutOfWindowSpec(_Strict):
    """A real-looking error that is not this job's: ``before_start`` seconds
    before the job started (default one day) or ``after_end`` seconds after it
    ended, on ``node`` (drawn when omitted)."""

    signal: Literal["xid79", "xid48", "nfs", "oom", "link_down", "sxid"] = "xid79"
    node: str | None = None
    before_start: float | None = Field(default=None, gt=0)
    after_end: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_side(self) -> OutOfWindowSpec:
        if self.before_start is not None and self.after_end is not None:
            raise ValueError("give before_start or after_end, not both")
        return self


class Scenario(_Strict):
    """One simulated job (see the module docstring).

    Times: ``start`` is the job's start (UTC when it has no offset);
    ``time_limit`` and ``pg_timeout`` are seconds. ``timezone`` is the
    cluster's local zone (IANA name), used for every stamp printed without an
    offset. ``missing`` maps a stream (``kernel``, ``syslog``,
    ``fabricmanager``) to nodes whose file is absent (``"*"`` = every node).
    ``kernel_formats`` restricts the per-node kernel log style (drawn from all
    when omitted). ``compress`` is the fraction of node files written gzip'd.

    Job shape: ``platform`` picks the GPU PCI layout (and whether NVSwitches and
    Fabric Manager exist: a100/h100/b200 HGX yes, gb200 trays no);
    ``gpus_per_node`` defaults to 8 (4 on gb200), one rank per GPU. ``launcher``
    is ``torchrun`` (one srun task per node; ``[rankN]:`` tags, ChildFailedError
    summaries) or ``srun`` (one task per rank); ``srun_label`` adds srun's
    ``--label`` task prefix. ``torch_style`` ``new`` is PyTorch >= 2.4 logging,
    ``old`` is 2.1-2.3 (untimed C++ lines, bracketed torchrun logging).
    ``split_output`` writes job/stdout.log and job/stderr.log instead of one
    merged file; ``nccl_debug`` ``WARN`` drops NCCL's INFO lines (and with them
    the rank and address identity). ``peer_sample`` bounds how many peer nodes
    print a full cascade; ``slurmctld_log`` writes the controller's lines about
    the job even when the chain adds none.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: int = 0
    nodes: str = "gpu[001-002]"
    platform: Platform = "h100"
    gpus_per_node: int | None = Field(default=None, ge=1, le=16)
    launcher: Literal["torchrun", "srun"] = "torchrun"
    srun_label: bool = True
    torch_style: Literal["new", "old"] = "new"
    split_output: bool = False
    nccl_debug: Literal["INFO", "WARN"] = "INFO"
    job_id: int | None = Field(default=None, ge=1)
    user: str = "alice"
    uid: int = 1000
    start: datetime = datetime(2025, 3, 4, 9, 0, 0, tzinfo=UTC)
    timezone: str = "UTC"
    time_limit: int = Field(default=4 * 3600, ge=600)
    pg_timeout: int = Field(default=600, ge=60)
    fault: FaultSpec
    noise: NoiseSpec = NoiseSpec()
    skew: SkewSpec = SkewSpec()
    missing: dict[Literal["kernel", "syslog", "fabricmanager"], list[str]] = {}
    out_of_window: list[OutOfWindowSpec] = []
    kernel_formats: list[KernelFormat] | None = None
    compress: float = Field(default=0.0, ge=0.0, le=1.0)
    peer_sample: int = Field(default=24, ge=1)
    slurmctld_log: bool = False

    @field_validator("nodes")
    @classmethod
    def _hostlist(cls, value: str) -> str:
        names = expand_hostlist(value)
        if not names:
            raise ValueError("the node list is empty")
        if len(names) > 4096:
            raise ValueError("at most 4096 nodes")
        return value

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        _zone(value)
        return value


@dataclass(slots=True)
class Expected:
    """The answer a correct diagnosis gives (written to ``expected.yaml``).

    Decided from the scenario, following CHAINS.md and DESIGN.md §4, never
    from what the tool currently outputs.
    """

    terminal_state: str
    sub_domain: str
    responsible_nodes: list[str]
    cause: str
    why: str
    acceptable_sub_domains: list[str] = field(default_factory=list)
    suspect_nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "terminal_state": self.terminal_state,
            "sub_domain": self.sub_domain,
        }
        if self.acceptable_sub_domains:
            out["acceptable_sub_domains"] = list(self.acceptable_sub_domains)
        out["responsible_nodes"] = list(self.responsible_nodes)
        if self.suspect_nodes:
            out["suspect_nodes"] = list(self.suspect_nodes)
        out["cause"] = self.cause
        out["why"] = self.why
        return out


@dataclass(slots=True)
class SimBundle:
    """A generated bundle in memory: ``files`` maps a path relative to the
    bundle root to its content (``bytes`` for gzip'd files)."""

    name: str
    scenario: Scenario
    files: dict[str, str | bytes]
    expected: Expected
    job: dict[str, Any]


# --------------------------------------------------------------------- hostlists

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(expr: str | Iterable[str]) -> list[str]:
    """Expand a Slurm hostlist with one bracket group per name
    (``gpu[001-003,007],login1`` -> ``gpu001 gpu002 gpu003 gpu007 login1``).

    Raises:
        ValueError: on a malformed expression.
    """
    if not isinstance(expr, str):
        return [n for e in expr for n in expand_hostlist(e)]
    out: list[str] = []
    for part in _split_top(expr):
        if "[" not in part:
            if "]" in part:
                raise ValueError(f"unbalanced bracket in {part!r}")
            out.append(part)
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if not m:
            raise ValueError(f"cannot expand {part!r}")
        head, body, tail = m.groups()
        for item in body.split(","):
            r = _RANGE.match(item.strip())
            if not r:
                raise ValueError(f"bad range {item!r} in {part!r}")
            lo_s, hi_s = r.group(1), r.group(2) or r.group(1)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise ValueError(f"descending range {item!r}")
            width = len(lo_s) if lo_s.startswith("0") else 0
            out.extend(f"{head}{n:0{width}d}{tail}" for n in range(lo, hi + 1))
    return list(dict.fromkeys(out))  # Slurm order, duplicates dropped


def compress_hostlist(names: Iterable[str]) -> str:
    """Fold node names into a hostlist (``gpu001 gpu002 gpu004`` -> ``gpu[001-002,004]``)."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if not m:
            order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        key = item
        nums = sorted(set(groups[key]))
        ranges: list[str] = []
        lo = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
            if n is not None:
                lo = prev = n
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
        else:
            parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


# --------------------------------------------------------------------- time helpers


def _zone(name: str) -> tzinfo:
    if not name or name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}") from None


_MON = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DOW = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

LineFormat = Literal[
    "dmesg_t",
    "raw",
    "syslog",
    "journal",
    "short_iso",
    "iso",
    "syslog_short",
    "fabricmanager",
    "c10",
    "torch_py",
    "torchrun_old",
    "bracket_iso",
    "slurmctld",
]


def format_line(
    kind: LineFormat,
    when: datetime,
    msg: str,
    *,
    host: str = "node001",
    ident: str = "kernel",
    uptime: float = 0.0,
    level: str = "E",
    src: str = "ProcessGroupNCCL.cpp:616",
    rank: int | None = None,
    thread: int = 140000000000000,
) -> str:
    """Render one log line the way its producer prints it.

    ``when`` is the producer's local wall-clock time (an aware datetime in the
    node's zone, skew already applied); ``uptime`` is seconds since boot for
    kernel formats that print it. Kinds, with their source (catalog.yaml
    ``line_prefixes`` unless noted):

    - ``dmesg_t``: ``[Tue Mar  4 10:12:01 2025] msg`` (``dmesg -T``);
    - ``raw``: ``[12345.678901] msg`` (``dmesg``);
    - ``syslog``: ``Mar  4 10:12:01 host kernel: [12345.678901] msg`` (rsyslog kern.log);
    - ``journal``: ``Mar 04 10:12:01 host kernel: msg`` (``journalctl -k``);
    - ``short_iso``: ``2025-03-04T10:12:01+0100 host kernel: msg`` (``journalctl -o short-iso``);
    - ``iso``: ``2025-03-04T10:12:01.123456+00:00 host kernel: msg`` (RFC 3339 rsyslog);
    - ``syslog_short``: ``Mar  4 10:12:01 host ident: msg`` (any syslog program);
    - ``fabricmanager``: ``[Mar 04 2025 10:12:01] msg`` (msg carries ``[LEVEL] [tid N]``);
    - ``c10``: ``[rank3]:[E304 10:12:01.123456789 file:line] msg`` -- PyTorch >= 2.4
      C++ logging; the month is not zero-padded (real lines ``[W318 10:00:41...``);
    - ``torch_py``: ``W0304 10:12:01.123456 <thread> path:line] msg`` (torchrun >= 2.4,
      Python logging, zero-padded month);
    - ``torchrun_old``: ``[2025-03-04 10:12:01,123] msg`` (torchrun 2.1-2.3);
    - ``bracket_iso``: ``[2025-03-04 10:12:01,123]msg`` (Python logging / hydra);
    - ``slurmctld``: ``[2025-03-04T10:12:01.123] msg`` (Slurm daemons).
    """
    d = when
    mon = _MON[d.month - 1]
    if kind == "dmesg_t":
        return f"[{_DOW[d.weekday()]} {mon} {d.day:2d} {d:%H:%M:%S} {d.year}] {msg}"
    if kind == "raw":
        return f"[{uptime:12.6f}] {msg}"
    if kind == "syslog":
        return f"{mon} {d.day:2d} {d:%H:%M:%S} {host} kernel: [{uptime:12.6f}] {msg}"
    if kind == "journal":
        return f"{mon} {d.day:02d} {d:%H:%M:%S} {host} {ident}: {msg}"
    if kind == "short_iso":
        return f"{d:%Y-%m-%dT%H:%M:%S%z} {host} {ident}: {msg}"
    if kind == "iso":
        return f"{d.isoformat(timespec='microseconds')} {host} {ident}: {msg}"
    if kind == "syslog_short":
        return f"{mon} {d.day:2d} {d:%H:%M:%S} {host} {ident}: {msg}"
    if kind == "fabricmanager":
        return f"[{mon} {d.day:02d} {d.year} {d:%H:%M:%S}] {msg}"
    if kind == "c10":
        ns = d.microsecond * 1000 + (d.microsecond * 7919) % 1000
        head = f"[rank{rank}]:" if rank is not None else ""
        return f"{head}[{level}{d.month}{d.day:02d} {d:%H:%M:%S}.{ns:09d} {src}] {msg}"
    if kind == "torch_py":
        return f"{level}{d:%m%d %H:%M:%S}.{d.microsecond:06d} {thread} {src}] {msg}"
    if kind == "torchrun_old":
        return f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}] {msg}"
    if kind == "bracket_iso":
        return f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]{msg}"
    if kind == "slurmctld":
        return f"[{d:%Y-%m-%dT%H:%M:%S}.{d.microsecond // 1000:03d}] {msg}"
    raise ValueError(f"unknown line format {kind!r}")


# --------------------------------------------------------------------- the simulation state


@dataclass(slots=True)
class _Node:
    name: str
    index: int
    ip: str
    skew: float
    kfmt: str
    kfile: str
    sfile: str
    host_in_log: str
    boot: float
    pid_base: int
    hca: str
    netdev: str
    kernel_lines: list[tuple[float, int, str]] = field(default_factory=list)
    syslog_lines: list[tuple[float, int, str]] = field(default_factory=list)
    fm_lines: list[tuple[float, int, str]] = field(default_factory=list)
    reboots: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Result:
    """What a chain decided: the Slurm ending and the expected verdict."""

    end: float
    state: str
    exit_code: str
    expected: Expected
    extra_job: dict[str, Any] = field(default_factory=dict)
    needs: list[tuple[str, str]] = field(default_factory=list)  # (stream, node) the answer needs
    # nodes whose blame evidence from a trusted source backs (kernel, Fabric Manager or slurmctld
    # log); None: the nodes the chain itself wrote kernel, Fabric Manager or slurmctld lines
    # about (in files the bundle keeps). The other responsible nodes are named only by the job's
    # output or syslog: suspects, never blamed (docs/verdict.md)
    confirmed: set[str] | None = None


class _Sim:
    """Mutable state of one generation run (private)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed)
        rng = self.rng
        self.tz = _zone(sc.timezone)
        self.t0 = sc.start.timestamp()
        self.job_id = sc.job_id or rng.randrange(100000, 9999999)
        names = expand_hostlist(sc.nodes)
        self.gpus = sc.gpus_per_node or (4 if sc.platform == "gb200" else 8)
        self.rpn = self.gpus
        self.buses = _GPU_BUSES[sc.platform][: self.gpus] + [
            f"0000:{0xC0 + i:02x}:00" for i in range(max(0, self.gpus - 8))
        ]
        self.driver = rng.choice(_DRIVERS)
        self.kernel_release = rng.choice(_KERNELS)
        self.nccl_version = rng.choice(_NCCL_VERSIONS)
        self.has_fm = sc.platform in ("a100", "h100", "b200")
        self.fqdn = rng.random() < 0.2
        formats = list(
            sc.kernel_formats or ["dmesg_t", "raw", "syslog", "journal", "short_iso", "iso"]
        )
        subnet = rng.randrange(0, 200)
        netdev = rng.choice(["ib0", "ib0", "ibp12s0", "enp12s0np0"])
        self.nodes: list[_Node] = []
        for i, name in enumerate(names):
            kfmt = rng.choice(formats)
            kfile = {
                "dmesg_t": "dmesg.log",
                "raw": "dmesg.log",
                "syslog": "kern.log",
                "journal": "kernel.log",
                "short_iso": "kernel.log",
                "iso": "kernel.log",
            }[kfmt]
            skew = sc.skew.nodes.get(name)
            if skew is None:
                skew = rng.uniform(-sc.skew.max_seconds, sc.skew.max_seconds)
            self.nodes.append(
                _Node(
                    name=name,
                    index=i,
                    ip=f"10.{(subnet + i // 250) % 256}.{(i // 250) % 4}.{i % 250 + 2}",
                    skew=round(skew, 3),
                    kfmt=kfmt,
                    kfile=kfile,
                    sfile=rng.choice(["syslog.log", "messages"]),
                    host_in_log=f"{name}.cluster.local" if self.fqdn else name,
                    boot=self.t0 - rng.uniform(3 * 3600, 40 * 86400),
                    pid_base=rng.randrange(20000, 3_000_000),
                    hca=f"mlx5_{rng.randrange(0, 4)}",
                    netdev=netdev,
                )
            )
        self.by_name = {n.name: n for n in self.nodes}
        self.nranks = len(self.nodes) * self.rpn
        self.seq = 0
        self.job_lines: list[tuple[float, int, str, bool]] = []
        self.ctld_lines: list[tuple[float, int, str]] = []
        self.last_seq = 0  # last collective sequence number
        self.quiet: set[str] = set()  # root nodes: never picked for red herrings
        self.booted: set[str] = set()  # nodes whose boot lines were already written
        self.no_fm: set[str] = set()  # nodes whose Fabric Manager is not running
        self.forced_missing: set[tuple[str, str]] = set()  # (stream, node) the chain removes

    # ---------------------------------------------------------------- identity helpers

    def node_of(self, rank: int) -> _Node:
        return self.nodes[rank // self.rpn]

    def ranks_of(self, node: _Node) -> range:
        return range(node.index * self.rpn, (node.index + 1) * self.rpn)

    def pid(self, rank: int) -> int:
        node = self.node_of(rank)
        return node.pid_base + 13 + (rank % self.rpn) * 7

    def bus(self, gpu: int) -> str:
        return self.buses[gpu % len(self.buses)]

    def nccl_busid(self, gpu: int) -> str:
        dom, bus, dev = self.bus(gpu).split(":")
        return f"{(int(dom, 16) << 20) | (int(bus, 16) << 12) | (int(dev, 16) << 4):x}"

    def task(self, rank: int) -> int:
        return rank if self.sc.launcher == "srun" else rank // self.rpn

    def pick(self, seq: list[Any]) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def node_named(self, name: str | None, *, avoid: Iterable[str] = ()) -> _Node:
        if name is not None:
            if name not in self.by_name:
                raise ValueError(f"{name!r} is not one of the job's nodes ({self.sc.nodes})")
            return self.by_name[name]
        avoid_set = set(avoid)
        pool = [n for n in self.nodes if n.name not in avoid_set] or self.nodes
        return pool[self.rng.randrange(len(pool))]

    def sample_peers(self, exclude: Iterable[_Node]) -> list[_Node]:
        skip = {n.name for n in exclude}
        peers = [n for n in self.nodes if n.name not in skip]
        if len(peers) <= self.sc.peer_sample:
            return peers
        return sorted(self.rng.sample(peers, self.sc.peer_sample), key=lambda n: n.index)

    # ---------------------------------------------------------------- clocks and stamps

    def local(self, t: float, node: _Node | None = None) -> datetime:
        skew = node.skew if node is not None else 0.0
        return datetime.fromtimestamp(t + skew, self.tz)

    def iso_local(self, t: float, node: _Node | None = None) -> str:
        return self.local(t, node).strftime("%Y-%m-%dT%H:%M:%S")

    def bracket_stamp(self, t: float, node: _Node | None = None) -> str:
        return format_line("torchrun_old", self.local(t, node), "").rstrip()

    # ---------------------------------------------------------------- node log emitters

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def kernel(self, node: _Node, t: float, msg: str) -> None:
        node.kernel_lines.append((t, self._next(), msg))

    def syslog(self, node: _Node, t: float, ident: str, msg: str) -> None:
        node.syslog_lines.append((t, self._next(), f"{ident}: {msg}"))

    def fm(self, node: _Node, t: float, level: str, msg: str) -> None:
        node.fm_lines.append(
            (t, self._next(), f"[{level}] [tid {node.pid_base % 9000 + 800}] {msg}")
        )

    def ctld(self, t: float, msg: str) -> None:
        self.ctld_lines.append((t, self._next(), msg))

    # ---------------------------------------------------------------- job output emitters

    def out(self, t: float, text: str, *, err: bool = True, task: int | None = None) -> None:
        if task is not None and self.sc.srun_label:
            text = f"{task}: {text}"
        self.job_lines.append((t, self._next(), text, err))

    def block(
        self, t: float, lines: Iterable[str], *, err: bool = True, task: int | None = None
    ) -> None:
        for line in lines:
            self.out(t, line, err=err, task=task)

    def rank_out(self, rank: int, t: float, text: str, *, err: bool = True) -> None:
        """A line a rank's Python code printed (tracebacks, prints)."""
        if self.sc.launcher == "torchrun":
            text = f"[rank{rank}]: {text}" if text else f"[rank{rank}]:"
        self.out(t, text, err=err, task=self.task(rank))

    def rank_block(self, rank: int, t: float, lines: Iterable[str], *, err: bool = True) -> None:
        for line in lines:
            self.rank_out(rank, t, line, err=err)

    def c10(self, rank: int, t: float, level: str, src: str, msg: str) -> None:
        """A PyTorch C++ (c10) log line from ``rank``."""
        node = self.node_of(rank)
        if self.sc.torch_style == "new":
            text = format_line("c10", self.local(t, node), msg, level=level, src=src, rank=rank)
        else:
            text = f"[{level} {src}] {msg}"
        self.out(t, text, task=self.task(rank))

    def nccl(
        self, rank: int, t: float, level: str, msg: str, *, tid_off: int = 0, src: str = ""
    ) -> None:
        """An NCCL_DEBUG line (``host:pid:tid [cudaDev] [file:line] NCCL LEVEL msg``)."""
        if level == "INFO" and self.sc.nccl_debug != "INFO":
            return
        node = self.node_of(rank)
        pid = self.pid(rank)
        gpu = rank % self.rpn
        where = f"{src} " if src else ""
        # NCCL writes its debug output to stdout unless NCCL_DEBUG_FILE is set
        self.out(
            t,
            f"{node.host_in_log}:{pid}:{pid + tid_off} [{gpu}] {where}NCCL {level} {msg}",
            err=False,
            task=self.task(rank),
        )

    def agent_log(self, node: _Node, t: float, level: str, module: str, msg: str) -> None:
        """A torchrun (elastic agent) log line, in the style of the torch version.

        ``module`` is relative to ``torch.distributed`` (``run``,
        ``elastic.multiprocessing.api``, ``elastic.agent.server.api``).
        """
        if self.sc.torch_style == "new":
            thread = 140000000000000 + node.pid_base
            path = "torch/distributed/" + module.replace(".", "/") + ".py"
            line = {"run": 793, "elastic.multiprocessing.api": 897}.get(module, 704)
            text = format_line(
                "torch_py",
                self.local(t, node),
                msg,
                level=level[0],
                src=f"{path}:{line}",
                thread=thread,
            )
        else:
            text = f"{self.bracket_stamp(t, node)} torch.distributed.{module}: [{level}] {msg}"
        self.out(t, text, task=node.index if self.sc.launcher == "torchrun" else None)


# --------------------------------------------------------------------- background noise

_KERNEL_CHATTER = [
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to "
    "79750",
    "EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none.",
    "systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill level "
    "at 75.0 (3827 of 5101 items), suggesting rotation.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): {netdev}: link becomes ready",
    'audit: type=1400 audit({epoch}.{ms:03d}:{n}): apparmor="STATUS" '
    'operation="profile_replace" info="same as current profile, skipping" '
    'profile="unconfined" name="nvidia_modprobe" pid={pid}',
    "mlx5_core {hca_bus}: mlx5_cmd_out_err:838:(pid {pid}): ACCESS_REG(0x805) op_mod(0x1) failed, "
    "status bad resource(0x5), syndrome (0x305684), err(-22)",
    "nvidia-nvswitch{sw}: open (major=508)",
    "TCP: request_sock_TCP: Possible SYN flooding on port 6817. Sending cookies.  Check SNMP "
    "counters.",
    "NFSD: Using nfsdcld client tracking operations.",
    "bond0: (slave eno1): link status definitely up, 25000 Mbps full duplex",
]

_SYSLOG_CHATTER = [
    ("systemd[1]", "Started Session {n} of User {user}."),
    ("systemd-logind[1422]", "New session {n} of user {user}."),
    ("chronyd[1311]", "Selected source 10.0.0.1 (ntp1.cluster.local)"),
    ("systemd[1]", "Starting Cleanup of Temporary Directories..."),
    ("nvidia-persistenced[2201]", "device 0000:18:00.0 - persistence mode enabled."),
    (
        "slurmstepd[{spid2}]",
        "task/cgroup: _memcg_initialize: job: alloc=1048576MB mem.limit=1048576MB",
    ),
    ("kernel", "IPv4: martian source 10.255.255.255 from 10.0.0.4, on dev eno1"),
]


def _noise(sim: _Sim, end_hint: float) -> None:
    sc = sim.sc
    rng = sim.rng
    per_node = {"none": 0, "low": 1, "normal": 3, "high": 12}[sc.noise.level]
    span0 = sim.t0 - 1800
    for node in sim.nodes:
        # the boot of this node, if it falls in the logged span, and FM start
        if node.name not in sim.booted:
            _boot_lines(sim, node, node.boot, flaps=False)
        for _ in range(rng.randint(0, per_node) if per_node else 0):
            t = rng.uniform(span0, end_hint)
            msg = sim.pick(_KERNEL_CHATTER).format(
                netdev=node.netdev,
                epoch=int(t),
                ms=rng.randrange(1000),
                n=rng.randrange(100, 999),
                pid=rng.randrange(1000, 90000),
                hca_bus=sim.pick(_HCA_BUSES),
                sw=rng.randrange(0, 4),
            )
            if "nvswitch" in msg and not sim.has_fm:
                continue
            sim.kernel(node, t, msg)
        sim.syslog(
            node,
            sim.t0 + rng.uniform(0.2, 1.5),
            f"slurmd[{node.pid_base % 30000 + 1000}]",
            f"launch task StepId={sim.job_id}.0 request from UID:{sc.uid} GID:{sc.uid} "
            f"HOST:{sim.nodes[0].ip} PORT:{rng.randrange(30000, 60000)}",
        )
        for _ in range(rng.randint(0, 1 + per_node)):
            ident, msg = sim.pick(_SYSLOG_CHATTER)
            t = rng.uniform(span0, end_hint)
            sim.syslog(
                node,
                t,
                ident.format(spid=node.pid_base % 30000 + 1000, spid2=node.pid_base % 40000 + 900),
                msg.format(
                    n=rng.randrange(10, 9999),
                    user=sc.user,
                    job=sim.job_id,
                    uid=sc.uid,
                    ip=sim.nodes[0].ip,
                    port=rng.randrange(30000, 60000),
                ),
            )
        if sim.has_fm and node.name not in sim.no_fm and rng.random() < 0.3:
            sim.fm(
                node,
                rng.uniform(span0, end_hint),
                "INFO",
                "Received an inband message:  Message header details: version 1 type 3",
            )
    # red herrings: informational XIDs, boot flaps
    chosen = [n for n in sim.nodes if n.name not in sim.quiet]
    for node in rng.sample(chosen, min(sc.noise.benign_xid_nodes, len(chosen))):
        gpu = rng.randrange(sim.gpus)
        t = rng.uniform(sim.t0 + 60, max(sim.t0 + 120, end_hint - 120))
        if rng.random() < 0.6:
            sim.kernel(
                node,
                t,
                f"NVRM: Xid (PCI:{sim.bus(gpu)}): 63, pid='<unknown>', name=<unknown>, "
                "Row Remapper: New row marked for remapping, reset gpu to activate.",
            )
        else:
            sim.kernel(
                node,
                t,
                f"NVRM: Xid (PCI:{sim.bus(gpu)}): 92, pid=0, name=<unknown>, "
                "High single-bit ECC error rate",
            )
    for node in rng.sample(chosen, min(sc.noise.boot_flap_nodes, len(chosen))):
        boot = sim.t0 - rng.uniform(60, 240)
        node.boot = boot
        _boot_lines(sim, node, boot, flaps=True)


def _boot_lines(sim: _Sim, node: _Node, boot: float, *, flaps: bool, always: bool = False) -> None:
    if boot < sim.t0 - 1800 and not flaps and not always:
        return  # boot is long before the logged span
    rng = sim.rng
    node.reboots.append(boot)
    sim.booted.add(node.name)
    sim.kernel(
        node,
        boot,
        f"Linux version {sim.kernel_release} (buildd@lcy02-amd64-080) "
        "(x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0) #115-Ubuntu SMP",
    )
    sim.kernel(node, boot + 0.01, "Command line: BOOT_IMAGE=/vmlinuz root=/dev/md0 ro quiet")
    sim.kernel(
        node,
        boot + 19.2,
        f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {sim.driver}  "
        "Release Build  (dvs-builder@U16-I3-B03-4-3)",
    )
    for gpu in range(sim.gpus):
        uuid = (
            f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-"
            f"{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        )
        sim.kernel(node, boot + 21.0 + gpu * 0.05, f"NVRM: GPU at PCI:{sim.bus(gpu)}: {uuid}")
    if flaps:
        hca_bus = sim.pick(_HCA_BUSES)
        sim.kernel(node, boot + 24.3, f"mlx5_core {hca_bus} {node.netdev}: Link down")
        sim.kernel(node, boot + 31.8, f"mlx5_core {hca_bus} {node.netdev}: Link up")
        sim.kernel(
            node, boot + 32.1, f"IPv6: ADDRCONF(NETDEV_CHANGE): {node.netdev}: link becomes ready"
        )
    if sim.has_fm:
        sim.syslog(node, boot + 40, "systemd[1]", "Starting NVIDIA fabric manager service...")
        sim.fm(
            node,
            boot + 41,
            "INFO",
            f"Fabric Manager version {sim.driver} is running with the "
            "following configuration options",
        )
        sim.syslog(
            node,
            boot + 52,
            f"nv-fabricmanager[{node.pid_base % 5000 + 1100}]",
            "Successfully configured all the available NVSwitches to route GPU NVLink traffic. "
            "NVLink Peer-to-Peer support will be enabled once the GPUs are successfully "
            "registered with the NVLink fabric.",
        )
        sim.syslog(node, boot + 52.5, "systemd[1]", "Started NVIDIA fabric manager service.")


def _job_start(sim: _Sim, *, init: bool = True) -> float:
    """Startup lines of the job: NCCL identity and init. Returns when init completed."""
    rng = sim.rng
    t = sim.t0 + rng.uniform(8, 20)
    sim.out(
        t - 5,
        f"{sim.bracket_stamp(t - 5)} Starting job {sim.job_id} on {len(sim.nodes)} "
        f"node(s), {sim.nranks} ranks",
        err=False,
    )
    if not init:
        return t
    if sim.sc.launcher == "torchrun":
        for node in sim.nodes[: min(len(sim.nodes), 4)]:
            sim.agent_log(
                node,
                t - 3,
                "WARNING",
                "run",
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                "default, to avoid your system being overloaded, please further tune the "
                "variable for optimal performance in your application as needed. ",
            )
    sim.nccl(0, t, "INFO", f"cudaDriverVersion {12040 + rng.randrange(0, 5) * 10}")
    sim.out(t, f"NCCL version {sim.nccl_version}+cuda12.4", err=False, task=sim.task(0))
    for node in sim.nodes:
        r0 = node.index * sim.rpn
        sim.nccl(r0, t + 0.2, "INFO", f"Bootstrap : Using {node.netdev}:{node.ip}<0>")
        if node.index < 4 or rng.random() < 0.05:
            sim.nccl(
                r0,
                t + 0.3,
                "INFO",
                "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
            )
            hcas = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(4))
            sim.nccl(
                r0,
                t + 0.9,
                "INFO",
                f"NET/IB : Using {hcas} [RO]; OOB {node.netdev}:{node.ip}<0>",
                tid_off=411,
            )
    done = t + rng.uniform(4, 15)
    for rank in range(sim.nranks):
        gpu = rank % sim.rpn
        comm = f"0x{0x55D4C8A00000 + (rank * 7919) % 0xFFFFF:x}"
        sim.nccl(
            rank,
            done + rank * 0.0001,
            "INFO",
            f"comm {comm} rank {rank} nranks {sim.nranks} cudaDev {gpu} nvmlDev {gpu} "
            f"busId {sim.nccl_busid(gpu)} commId 0x5e2f1a7b3c9d4e01 - Init COMPLETE",
            tid_off=409,
        )
    return done + 1


_TQDM_BAR = "█▏▎▍▌▋▊▉"


def _progress(sim: _Sim, t_from: float, t_to: float, *, steps_per_s: float = 0.5) -> int:
    """Rank 0's training progress between two times; returns the last step."""
    rng = sim.rng
    level = sim.sc.noise.level
    if t_to <= t_from:
        return 0
    n_lines = {"none": 2, "low": 6, "normal": 14, "high": 40}[level]
    every = max(5.0, (t_to - t_from) / n_lines)
    total = 20000
    style = rng.choice(["hydra", "megatron", "plain"])
    t = t_from
    step = 0
    loss = rng.uniform(6.5, 9.0)
    while t < t_to:
        step = int((t - t_from) * steps_per_s) + 1
        loss = max(1.2, loss * rng.uniform(0.985, 0.999))
        if style == "megatron":
            text = (
                f" [{sim.local(t):%Y-%m-%d %H:%M:%S}] iteration {step:>8d}/{total:>8d} | "
                f"consumed samples: {step * 1024:>12d} | elapsed time per iteration (ms): "
                f"{1000 / steps_per_s * rng.uniform(0.97, 1.03):.1f} | learning rate: "
                f"{3e-4 * min(1, step / 2000):.3E} | global batch size:  1024 | lm loss: "
                f"{loss:.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.2, 1.4):.3f} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
        elif style == "hydra":
            text = format_line("bracket_iso", sim.local(t), "[train][INFO] - ") + (
                f"step {step}/{total} | loss {loss:.4f} "
                f"| lr {3e-4 * min(1, step / 2000):.2e} | {rng.uniform(380, 460):.1f} "
                "TFLOP/s/GPU"
            )
        else:
            text = f"step {step:6d} | loss {loss:.4f} | tokens/s {rng.randrange(900000, 1200000)}"
        sim.out(t, text, err=False, task=sim.task(0))
        t += every * rng.uniform(0.8, 1.2)
    if sim.sc.noise.tqdm and level != "none":
        parts = []
        n = 12 if level != "high" else 60
        for i in range(n):
            done = (i + 1) * 100 // n
            full = done // 10
            bar = "█" * full + (_TQDM_BAR[rng.randrange(8)] if full < 10 else "")
            parts.append(
                f"Epoch 0: {done:3d}%|{bar:<10}| {i * 50}/{n * 50} "
                f"[{i // 60:02d}:{i % 60:02d}<{(n - i) // 60:02d}:{(n - i) % 60:02d}, "
                f" {rng.uniform(1.5, 2.5):.2f}it/s, loss={loss:.3f}]"
            )
        sim.out(t_from + 1, "\r".join(parts), task=sim.task(0))
    if level in ("normal", "high"):
        sim.out(
            t_from + 2,
            "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557: "
            "UserWarning: This DataLoader will create 16 worker processes in total. Our "
            "suggested max number of worker in current system is 12, which is smaller than "
            "what this DataLoader is going to create.",
            task=sim.task(0),
        )
        sim.out(t_from + 2, "  warnings.warn(_create_warning_msg(", task=sim.task(0))
    sim.last_seq = max(sim.last_seq, step * 3 + 7)
    return step


# --------------------------------------------------------------------- cascade helpers


def _traceback(frames: list[tuple[str, int, str, str]], last: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(last)
    return lines


_TRAIN_FRAMES = [
    ("/home/{user}/run/train.py", 412, "<module>", "main(cfg)"),
    ("/home/{user}/run/train.py", 377, "main", "loss = train_step(model, batch, optimizer)"),
]


def _frames(sim: _Sim, *extra: tuple[str, int, str, str]) -> list[tuple[str, int, str, str]]:
    base = [(p.format(user=sim.sc.user), ln, fn, code) for p, ln, fn, code in _TRAIN_FRAMES]
    return base + list(extra)


def _peer_remote_error(sim: _Sim, rank: int, t: float, peer: _Node, how: str) -> None:
    """What a surviving rank prints after losing ``peer`` (chain 7 / chain 1 peers)."""
    rng = sim.rng
    port = rng.randrange(30000, 60000)
    me = sim.node_of(rank)
    if how == "closed":
        sim.nccl(
            rank,
            t,
            "WARN",
            f"Net : Connection closed by remote peer {peer.host_in_log}<{port}>",
            tid_off=377,
            src="misc/socket.cc:538",
        )
        sim.nccl(
            rank,
            t + 0.01,
            "WARN",
            f"[Proxy Service {rank}] Failed to execute operation "
            f"Connect from rank {rank}, retcode 6",
            tid_off=378,
            src="proxy.cc:1119",
        )
        last = f"socketProgress: Connection closed by remote peer {peer.host_in_log}<{port}>"
    elif how == "ib12":
        sim.nccl(
            rank,
            t,
            "WARN",
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=12 opcode=0 "
            f"len=0 vendor err 129 (Recv) localGid ::ffff:{me.ip} remoteGids::ffff:{peer.ip}",
            tid_off=398,
            src="transport/net_ib.cc:1696",
        )
        last = (
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=12 opcode=0 len=0 "
            "vendor err 129 (Recv)"
        )
    else:  # ib5: flush after the queue pair went to error
        sim.nccl(
            rank,
            t,
            "WARN",
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=5 opcode=1 "
            f"len=0 vendor err 249 (Send) localGid ::ffff:{me.ip} remoteGids::ffff:{peer.ip}",
            tid_off=398,
            src="transport/net_ib.cc:1696",
        )
        last = (
            f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=5 opcode=1 len=0 "
            "vendor err 249 (Send)"
        )
    src = (
        "ProcessGroupNCCL.cpp:1595" if sim.sc.torch_style == "new" else "ProcessGroupNCCL.cpp:1275"
    )
    tag = (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        if sim.sc.torch_style == "new"
        else f"[Rank {rank}]"
    )
    sim.c10(
        rank,
        t + 0.2,
        "E",
        src,
        f"{tag} Process group watchdog thread terminated with exception: NCCL error: remote "
        f"process exited or there was a network error, NCCL version {sim.nccl_version}",
    )
    sim.rank_block(
        rank,
        t + 0.2,
        [
            "ncclRemoteError: A call failed possibly due to a network error or a remote "
            "process exiting prematurely.",
            "Last error:",
            last,
        ],
    )
    sim.out(
        t + 0.3,
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        task=sim.task(rank),
    )


def _watchdog(
    sim: _Sim, rank: int, t: float, seq: int, enqueued: int, *, op: str = "ALLREDUCE"
) -> None:
    """The watchdog lines of one rank whose collective ``seq`` timed out (chain 9)."""
    numel = sim.rng.choice([1, 262144000, 466119168, 131072])
    ms = sim.sc.pg_timeout * 1000
    ran = ms + sim.rng.randrange(20, 900)
    new = sim.sc.torch_style == "new"
    sim.c10(
        rank,
        t,
        "E",
        "ProcessGroupNCCL.cpp:616" if new else "ProcessGroupNCCL.cpp:563",
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={ms}) ran for {ran} "
        "milliseconds before timing out.",
    )
    if new:
        sim.c10(
            rank,
            t + 0.05,
            "E",
            "ProcessGroupNCCL.cpp:1785",
            f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or "
            f"timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: "
            f"{enqueued}, last completed NCCL work: {seq - 1}.",
        )
    else:
        sim.c10(
            rank,
            t + 0.05,
            "E",
            "ProcessGroupNCCL.cpp:1709",
            f"[Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, "
            f"last completed NCCL work: {seq - 1}.",
        )
    sim.c10(
        rank,
        t + 0.06,
        "E",
        "ProcessGroupNCCL.cpp:630" if new else "ProcessGroupNCCL.cpp:577",
        f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
        "data.",
    )
    sim.c10(
        rank,
        t + 0.07,
        "E",
        "ProcessGroupNCCL.cpp:636" if new else "ProcessGroupNCCL.cpp:583",
        f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
    )


def _dump_signal(sim: _Sim, rank: int, t: float, src_rank: int, enqueued: int) -> None:
    """A rank that never issued the collective receives the dump signal (chain 9 straggler)."""
    if sim.sc.torch_style != "new":
        return
    sim.c10(
        rank,
        t,
        "E",
        "ProcessGroupNCCL.cpp:1772",
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Received a dump signal due to a "
        f"collective timeout from  rank {src_rank} and we will try our best to dump the debug "
        f"info. Last enqueued NCCL work: {enqueued}, last completed NCCL work: {enqueued}.This "
        "is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
        "across ranks, the order of collectives is not same for all ranks or the scheduled "
        "collective, for some reason, didn't run. Additionally, this can be caused by GIL "
        "deadlock or other reasons such as network errors or bugs in the communications "
        "library (e.g. NCCL), etc. ",
    )


_BOOT_MARK = "\x00boot"
_TORCHRUN_TRACEBACK = _traceback(
    [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py",
            892,
            "main",
            "run(args)",
        ),
        (
            "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py",
            263,
            "launch_agent",
            "raise ChildFailedError(",
        ),
    ],
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
)
_SIGNALS = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS"}
_SRUN_SIGNALS = {
    -6: "Aborted",
    -9: "Killed",
    -11: "Segmentation fault",
    -15: "Terminated",
    -7: "Bus error",
}


def _teardown(
    sim: _Sim,
    t: float,
    failed: dict[int, int],
    *,
    first_node: _Node | None = None,
    killed_agents: Iterable[_Node] = (),
) -> float:
    """Launcher and Slurm teardown after ranks ended.

    ``failed`` maps rank -> exit code (negative = killed by that signal) for the
    ranks that ended on their own; every other rank is stopped by the launcher.
    ``killed_agents``: nodes whose whole task (launcher included) was killed, so
    they print nothing and srun reports the task as killed. Returns the time the
    job ended.
    """
    killed = {n.index for n in killed_agents}
    rng = sim.rng
    sc = sim.sc
    by_node: dict[int, dict[int, int]] = {}
    for rank, code in failed.items():
        by_node.setdefault(sim.node_of(rank).index, {})[rank] = code
    order = sorted(by_node, key=lambda i: (sim.nodes[i] is not first_node, i))
    sample = set(order[: sc.peer_sample]) | {0}
    t_end = t + rng.uniform(3, 12)
    if sc.launcher == "torchrun":
        for i in order:
            if i not in sample:
                continue
            node = sim.nodes[i]
            codes = by_node[i]
            ft = t + rng.uniform(0.5, 3)
            if i in killed:
                sim.out(ft, f"srun: error: {node.name}: task {node.index}: Killed")
                continue
            first_rank = next(iter(codes))  # the first rank that failed on this node
            code = codes[first_rank]
            for r in sim.ranks_of(node):
                if r not in codes:
                    sim.agent_log(
                        node,
                        ft,
                        "WARNING",
                        "elastic.multiprocessing.api",
                        f"Sending process {sim.pid(r)} closing signal SIGTERM",
                    )
            sim.agent_log(
                node,
                ft + 0.5,
                "ERROR",
                "elastic.multiprocessing.api",
                f"failed (exitcode: {code}) local_rank: {first_rank % sim.rpn} (pid: "
                f"{sim.pid(first_rank)}) of binary: /usr/bin/python3",
            )
            trace = (
                f"Signal {-code} ({_SIGNALS.get(code, 'SIG?')}) received by PID "
                f"{sim.pid(first_rank)}"
                if code < 0
                else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
            )
            block = [
                *_TORCHRUN_TRACEBACK,
                "============================================================",
                "train.py FAILED",
                "------------------------------------------------------------",
                "Failures:",
                "  <NO_OTHER_FAILURES>",
                "------------------------------------------------------------",
                "Root Cause (first observed failure):",
                "[0]:",
                f"  time      : {sim.local(ft, node):%Y-%m-%d_%H:%M:%S}",
                f"  host      : {node.host_in_log}",
                f"  rank      : {first_rank} (local_rank: {first_rank % sim.rpn})",
                f"  exitcode  : {code} (pid: {sim.pid(first_rank)})",
                "  error_file: <N/A>",
                f"  traceback : {trace}",
                "============================================================",
            ]
            sim.block(ft + 0.6, block, task=node.index)
            sim.out(ft + 1, f"srun: error: {node.name}: task {node.index}: Exited with exit code 1")
        # the other agents are stopped by srun
        for node in sim.nodes:
            if node.index in by_node or node.index not in sample | set(range(4)):
                continue
            st = t + rng.uniform(1, 4)
            sim.agent_log(
                node,
                st,
                "WARNING",
                "elastic.agent.server.api",
                "Received 15 death signal, shutting down workers",
            )
    else:
        for i in order:
            if i not in sample:
                continue
            node = sim.nodes[i]
            for rank, code in sorted(by_node[i].items()):
                what = (
                    f"Exited with exit code {code}"
                    if code >= 0
                    else _SRUN_SIGNALS.get(code, "Terminated")
                )
                sim.out(t + 0.5, f"srun: error: {node.name}: task {rank}: {what}")
    step = f"{sim.job_id}.0"
    sim.out(t + 1.2, f"srun: Terminating StepId={step}")
    for node in sim.nodes[: min(len(sim.nodes), sc.peer_sample)]:
        if node.index in by_node:
            continue
        sim.out(
            t + 1.5,
            f"slurmstepd: error: *** STEP {step} ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 1.5, node)} ***",
        )
    sim.out(t + 2.0, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    return t_end


def _expected(
    sim: _Sim,
    terminal: str,
    sub: str,
    nodes: Iterable[_Node],
    cause: str,
    why: str,
    acceptable: Iterable[str] = (),
) -> Expected:
    return Expected(
        terminal_state=terminal,
        sub_domain=sub,
        responsible_nodes=sorted({n.name for n in nodes}),
        cause=cause,
        why=" ".join(why.split()),
        acceptable_sub_domains=list(acceptable),
    )


class _Options:
    """Chain options with a closed set of keys."""

    def __init__(self, chain: str, given: dict[str, Any], allowed: dict[str, Any]) -> None:
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise ValueError(
                f"chain {chain}: unknown option(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(allowed)) or 'none'})"
            )
        self.values = {**allowed, **given}

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def _fault_time(sim: _Sim, ready: float, lo: float = 0.25, hi: float = 0.75) -> float:
    f = sim.sc.fault
    if f.at is not None:
        return sim.t0 + f.at
    span = min(sim.sc.time_limit - sim.sc.pg_timeout - 900, 6 * 3600)
    return ready + max(120.0, span * sim.rng.uniform(lo, hi))


def _fail_job(
    sim: _Sim,
    t_fail: float,
    origin: list[int],
    code: int,
    how: str,
    *,
    first_node: _Node,
    killed_agents: Iterable[_Node] = (),
) -> float:
    """Peers lose the origin ranks (chain 7 peer pattern), then teardown. Returns end time."""
    rng = sim.rng
    origin_node = sim.node_of(origin[0])
    failed: dict[int, int] = dict.fromkeys(origin, code)
    for peer in sim.sample_peers([origin_node]):
        ranks = list(sim.ranks_of(peer))
        for r in ranks[: 2 if len(sim.nodes) > 64 else len(ranks)]:
            tt = t_fail + rng.uniform(0.5, 25)
            _peer_remote_error(
                sim, r, tt, origin_node, how if how != "ib" else rng.choice(["ib12", "ib5"])
            )
            failed[r] = -6
    # other local ranks of the origin node are aborted too
    for r in sim.ranks_of(origin_node):
        failed.setdefault(r, -6)
    return _teardown(sim, t_fail + 30, failed, first_node=first_node, killed_agents=killed_agents)


# --------------------------------------------------------------------- the chains

ChainFn = Callable[[_Sim], _Result]


def _chain_gpu_fell_off_bus(sim: _Sim) -> _Result:
    """CHAINS.md §1: PCIe Surprise Down -> XID 79 on node A; peers fail in NCCL."""
    o = _Options(
        "gpu_fell_off_bus", sim.sc.fault.options, {"aer": True, "hang": False, "nvswitch": True}
    )
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    bus = sim.bus(gpu)
    dom, b, _ = bus.split(":")
    port = f"{dom}:{int(b, 16) - 1:02x}:00.0"
    if o["aer"]:
        sim.kernel(a, t - 0.4, f"pcieport {port}: AER: Uncorrected (Fatal) error received: {port}")
        sim.kernel(
            a,
            t - 0.4,
            f"pcieport {port}: PCIe Bus Error: severity=Uncorrected (Fatal), "
            "type=Transaction Layer, (Receiver ID)",
        )
        sim.kernel(
            a, t - 0.4, f"pcieport {port}:   device [10b5:c010] error status/mask=00000020/00000000"
        )
        sim.kernel(a, t - 0.4, f"pcieport {port}:    [ 5] Surprise Down Error    (First)")
        sim.kernel(a, t - 0.3, f"nvidia {bus}.0: device has no AER-aware driver")
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    )
    sim.kernel(a, t, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    sim.kernel(a, t, "NVRM: A GPU crash dump has been created. If possible, please run")
    sim.kernel(a, t, "NVRM: nvidia-bug-report.sh as root to collect this data before")
    sim.kernel(a, t, "NVRM: the NVIDIA kernel module is unloaded.")
    if o["nvswitch"] and sim.has_fm:
        for sw in range(2):
            sim.kernel(
                a,
                t + 11.7 + sw * 0.004,
                f"nvidia-nvswitch{sw}: SXid (PCI:{_NVSWITCH_BUSES[sw]}): 20034, Fatal, "
                f"Link {sim.rng.randrange(0, 64)} LTSSM Fault Up",
            )
    origin = sim.ranks_of(a)[gpu]
    if o["hang"]:
        seq = sim.last_seq + 1
        tw = t + sim.sc.pg_timeout
        failed: dict[int, int] = {}
        for peer in [a, *sim.sample_peers([a])]:
            for r in list(sim.ranks_of(peer))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
                if r == origin:
                    continue
                _watchdog(sim, r, tw + sim.rng.uniform(0, 3), seq, seq)
                failed[r] = -6
        sim.c10(
            origin,
            tw + 60,
            "E",
            "ProcessGroupNCCL.cpp:1413",
            f"[PG ID 0 PG GUID 0(default_pg) Rank {origin}] Heartbeat monitor timed out! "
            "Process will be terminated after dumping debug info. workMetaList_.size()=1",
        )
        failed[origin] = -6
        end = _teardown(sim, tw + 65, failed, first_node=a)
    else:
        sim.rank_block(
            origin,
            t + 0.8,
            _traceback(
                _frames(
                    sim,
                    (
                        f"/home/{sim.sc.user}/run/model.py",
                        88,
                        "forward",
                        "return self.proj(x)",
                    ),
                ),
                "RuntimeError: CUDA error: unknown error",
            ),
        )
        sim.rank_block(
            origin,
            t + 0.8,
            [
                "CUDA kernel errors might be asynchronously reported at some other API call, so "
                "the "
                "stacktrace below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            ],
        )
        end = _fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "hardware",
        [a],
        "xid.79",
        f"GPU {bus} on {a.name} fell off the PCIe bus (XID 79"
        + (", right after a fatal PCIe Surprise Down on its root port" if o["aer"] else "")
        + "); every NCCL error on the other nodes comes after it (CHAINS.md §1).",
    )
    return _Result(
        end, "FAILED", "1:0" if not o["hang"] else "134:0", exp, needs=[("kernel", a.name)]
    )


def _chain_gpu_memory_error(sim: _Sim) -> _Result:
    """CHAINS.md §2: XID 48 DBE -> 94 (contained) or 95 (uncontained) -> 63/64 -> 45/154."""
    o = _Options(
        "gpu_memory_error", sim.sc.fault.options, {"containment": "contained", "remap": "pending"}
    )
    if o["containment"] not in ("contained", "uncontained") or o["remap"] not in (
        "pending",
        "failed",
        "none",
    ):
        raise ValueError(
            "gpu_memory_error: containment contained|uncontained, remap pending|failed|none"
        )
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    rng = sim.rng
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
        f"double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        f"0x{rng.getrandbits(36):x} partition {rng.randrange(8)}, subpartition {rng.randrange(2)}.",
    )
    if o["containment"] == "contained":
        sim.kernel(
            a,
            t + 0.01,
            f"NVRM: Xid (PCI:{bus}): 94, pid={pid}, name=python, Contained: SM "
            "(0x1). RST: No, D-RST: No",
        )
    else:
        sim.kernel(
            a,
            t + 0.01,
            f"NVRM: Xid (PCI:{bus}): 95, pid={pid}, name=python, Uncontained: "
            "FBHUB. RST: Yes, D-RST: No",
        )
    if o["remap"] == "pending":
        sim.kernel(
            a,
            t + 0.02,
            f"NVRM: Xid (PCI:{bus}): 63, pid='<unknown>', name=<unknown>, Row "
            "Remapper: New row marked for remapping, reset gpu to activate.",
        )
    elif o["remap"] == "failed":
        sim.kernel(
            a,
            t + 0.02,
            f"NVRM: Xid (PCI:{bus}): 64, pid='<unknown>', name=<unknown>, Row "
            f"Remapper Error: (0x{rng.getrandbits(40):016x}) - All reserved rows for bank are "
            "remapped",
        )
    for ch in range(rng.randint(1, 3)):
        sim.kernel(
            a,
            t + 0.05 + ch * 0.01,
            f"NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=python, Ch {8 + ch:08x}",
        )
    to = (
        "0x1 (GPU Reset Required)" if o["containment"] == "uncontained" else "0x4 (Drain and Reset)"
    )
    sim.kernel(
        a,
        t + 0.1,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to {to}",
    )
    sim.rank_block(
        origin,
        t + 0.5,
        _traceback(_frames(sim), "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    )
    end = _fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    kind = "contained (XID 94)" if o["containment"] == "contained" else "uncontained (XID 95)"
    exp = _expected(
        sim,
        "fail",
        "hardware",
        [a],
        "xid.48",
        f"An uncorrectable HBM ECC error (XID 48) on GPU {bus} of {a.name}, {kind}, killed the "
        f"rank on that GPU; the row-remap XID and XID 45/154 follow it (CHAINS.md §2).",
    )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_nvlink5_fault(sim: _Sim) -> _Result:
    """CHAINS.md §3: Blackwell XID 149 (or a 145 storm) -> 154 -> 45 -> CUDA 220."""
    o = _Options("nvlink5_fault", sim.sc.fault.options, {"code": 149})
    if o["code"] not in (149, 145):
        raise ValueError("nvlink5_fault: code is 149 or 145")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    rng = sim.rng
    if o["code"] == 149:
        sim.kernel(
            a,
            t,
            f"NVRM: Xid (PCI:{bus}): 149, NETIR_LINK_EVT Fatal XC0 i0 Link {rng.randrange(18):02d} "
            f"({rng.choice(['0x004525c6', '0x021425c6'])} 0x00000000 0x00000000 0x00000000 "
            "0x00000000 0x00000000)",
        )
    else:
        for i in range(rng.randint(4, 9)):
            sim.kernel(
                a,
                t + i * 0.3,
                f"NVRM: Xid (PCI:{bus}): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 "
                "(0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
            )
    sim.kernel(
        a,
        t + 3,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain "
        "and Reset)",
    )
    for ch in range(rng.randint(2, 4)):
        sim.kernel(
            a,
            t + 3.1 + ch * 0.01,
            f"NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=python, "
            f"Ch {ch + 1:08x} caused by previous Xid {o['code']}",
        )
    sim.kernel(
        a,
        t + 9,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x4 (Drain and Reset) to "
        "0x1 (GPU Reset Required)",
    )
    sim.rank_block(
        origin,
        t + 3.5,
        _traceback(
            _frames(sim),
            "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
        ),
    )
    end = _fail_job(sim, t + 4, [origin], 1, "closed", first_node=a)
    if o["code"] == 149:
        exp = _expected(
            sim,
            "fail",
            "hardware",
            [a],
            "xid.149",
            f"GPU {bus} on {a.name} reported a fatal NVLink5 link event (XID 149 "
            "NETIR_LINK_EVT), then drain-and-reset/reset-required (XID 154) and XID 45 "
            "teardown; the rank saw CUDA error 220 (CHAINS.md §3).",
        )
    else:
        exp = _expected(
            sim,
            "fail",
            "hardware",
            [a],
            "xid.145",
            f"A storm of non-fatal NVLink5 RLW_SRC_TRACK errors (XID 145) on GPU {bus} of "
            f"{a.name} tore down the job's channels (XID 45 'caused by previous Xid 145') "
            "and surfaced as CUDA error 220. CHAINS.md §3 marks these storms as contested "
            "(driver/fabric software suspected), so system_software is acceptable.",
            acceptable=["system_software"],
        )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_nvswitch_fatal(sim: _Sim) -> _Result:
    """CHAINS.md §4: fatal SXid (+ Fabric Manager report) -> XID 74 -> collectives hang."""
    o = _Options("nvswitch_fatal", sim.sc.fault.options, {"sxid": 24007})
    if o["sxid"] not in (24007, 12022, 20034):
        raise ValueError("nvswitch_fatal: sxid is 24007, 12022 or 20034")
    if not sim.has_fm:
        raise ValueError("nvswitch_fatal needs an NVSwitch platform (a100, h100, b200)")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    sw = rng.randrange(4)
    link = rng.randrange(8, 60)
    swbus = _NVSWITCH_BUSES[sw]
    text = {
        24007: "sourcetrack timeout error (First)",
        12022: "egress input ECC DBE error",
        20034: "LTSSM Fault Up",
    }[o["sxid"]]
    sim.kernel(
        a, t, f"nvidia-nvswitch{sw}: SXid (PCI:{swbus}): {o['sxid']}, Fatal, Link {link} {text}"
    )
    sim.kernel(
        a,
        t,
        f"nvidia-nvswitch{sw}: SXid (PCI:{swbus}): {o['sxid']}, Severity 1 Engine instance {link} "
        "Sub-engine instance 00",
    )
    sim.fm(
        a,
        t + 0.5,
        "ERROR",
        f"detected NVSwitch fatal error {o['sxid']} on fid 0 on NVSwitch pci bus id "
        f"0000{swbus} physical id {sw} port {link}",
    )
    hb = (sw + 1) % 4
    sim.kernel(
        a,
        t + 0.8,
        f"nvidia-nvswitch{hb}: SXid (PCI:{_NVSWITCH_BUSES[hb]}): 19084, Non-fatal, Link "
        f"{rng.randrange(8, 60)} AN1 Heartbeat Timeout Error (First)",
    )
    gpus = rng.sample(range(sim.gpus), k=min(2, sim.gpus))
    for g in gpus:
        sim.kernel(
            a,
            t + 1.2,
            f"NVRM: Xid (PCI:{sim.bus(g)}): 74, pid='<unknown>', name=<unknown>, NVLink: "
            f"fatal error detected on link {rng.randrange(18)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, "
            "0x0)",
        )
    for g in gpus:
        sim.kernel(
            a,
            t + 1.5,
            f"NVRM: Xid (PCI:{sim.bus(g)}): 45, pid={sim.pid(sim.ranks_of(a)[g])}, "
            f"name=python, Ch {3:08x}",
        )
    seq = sim.last_seq + 1
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    for node in [a, *sim.sample_peers([a])]:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            _watchdog(sim, r, tw + rng.uniform(0, 4), seq, seq)
            failed[r] = -6
    end = _teardown(sim, tw + 6, failed, first_node=a)
    exp = _expected(
        sim,
        "fail",
        "hardware",
        [a],
        f"sxid.{o['sxid']}",
        f"NVSwitch {sw} on {a.name} raised fatal SXid {o['sxid']} (also reported by "
        "Fabric Manager), its GPUs logged XID 74 and every collective then hung until "
        "the watchdog fired; no GPU fault came first (CHAINS.md §4).",
    )
    return _Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


def _chain_fabric_manager_down(sim: _Sim) -> _Result:
    """CHAINS.md §5: Fabric Manager failed at boot -> every CUDA context on A fails with 802."""
    o = _Options("fabric_manager_down", sim.sc.fault.options, {"failed_ago": None})
    if not sim.has_fm:
        raise ValueError("fabric_manager_down needs an NVSwitch platform (a100, h100, b200)")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ago = (
        o["failed_ago"]
        if o["failed_ago"] is not None
        else rng.choice([240.0, 3600.0 * rng.uniform(2, 60)])
    )
    boot = sim.t0 - float(ago) - 40
    a.boot = boot
    # boot lines without the FM success, then FM's failure
    sim.kernel(
        a,
        boot,
        f"Linux version {sim.kernel_release} (buildd@lcy02-amd64-080) "
        "(x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0) #115-Ubuntu SMP",
    )
    sim.syslog(a, boot + 40, "systemd[1]", "Starting NVIDIA fabric manager service...")
    sim.fm(
        a,
        boot + 41,
        "INFO",
        f"Fabric Manager version {sim.driver} is running with the following configuration options",
    )
    sim.syslog(
        a,
        boot + 44,
        "systemd[1]",
        "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
    )
    sim.syslog(
        a, boot + 44, "systemd[1]", "nvidia-fabricmanager.service: Failed with result 'exit-code'."
    )
    sim.syslog(a, boot + 44, "systemd[1]", "Failed to start NVIDIA fabric manager service.")
    a.reboots.append(boot)
    sim.booted.add(a.name)
    sim.no_fm.add(a.name)
    t = sim.t0 + rng.uniform(15, 40)
    sim.out(
        t - 10,
        f"{sim.bracket_stamp(t - 10)} Starting job {sim.job_id} on {len(sim.nodes)} node(s)",
        err=False,
    )
    for r in sim.ranks_of(a):
        sim.rank_block(
            r,
            t + rng.uniform(0, 2),
            _traceback(
                _frames(
                    sim,
                    (
                        f"/home/{sim.sc.user}/run/train.py",
                        61,
                        "setup",
                        "torch.cuda.set_device(local_rank)",
                    ),
                ),
                "RuntimeError: CUDA error: system not yet initialized",
            ),
        )
    failed = dict.fromkeys(sim.ranks_of(a), 1)
    end = _teardown(sim, t + 3, failed, first_node=a)
    exp = _expected(
        sim,
        "fail",
        "system_software",
        [a],
        "fm.service_failed",
        f"nvidia-fabricmanager failed to start on {a.name} "
        f"({'before' if ago > 300 else 'just before'} "
        "the job); on an NVSwitch node every CUDA context then fails with error 802 "
        "'system not yet initialized', which is what all ranks of that node hit at "
        "start-up (CHAINS.md §5). Only syslog (systemd's lines) and the job's output say so:"
        " a suspect, not blamed.",
    )
    return _Result(end, "FAILED", "1:0", exp, confirmed=set())


def _chain_fabric_manager_restarted(sim: _Sim) -> _Result:
    """CHAINS.md §5: Fabric Manager restarted without a GPU reset -> NVLS multicast setup fails."""
    f = sim.sc.fault
    _Options("fabric_manager_restarted", f.options, {})
    if not sim.has_fm:
        raise ValueError("fabric_manager_restarted needs an NVSwitch platform (a100, h100, b200)")
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    restart = sim.t0 - rng.uniform(1800, 6 * 3600)
    sim.syslog(a, restart, "systemd[1]", "Stopping NVIDIA fabric manager service...")
    sim.syslog(
        a, restart + 2, "systemd[1]", "nvidia-fabricmanager.service: Deactivated successfully."
    )
    sim.syslog(a, restart + 2, "systemd[1]", "Stopped NVIDIA fabric manager service.")
    sim.syslog(a, restart + 3, "systemd[1]", "Starting NVIDIA fabric manager service...")
    sim.syslog(a, restart + 15, "systemd[1]", "Started NVIDIA fabric manager service.")
    ready = _job_start(sim)
    t = ready + rng.uniform(0.5, 3)
    handle = rng.getrandbits(62)
    sim.fm(
        a,
        t,
        "ERROR",
        f"failed to find the GPU handle {handle} in the multicast team request setup "
        f"{rng.getrandbits(62)}.",
    )
    size = rng.choice([1073741824, 2147483648, 536870912])
    for r in list(sim.ranks_of(a))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
        sim.nccl(
            r,
            t + 0.2,
            "WARN",
            f"Failed to bind NVLink SHARP (NVLS) Multicast memory of size {size} : CUDA error "
            "800 'operation not permitted'.",
            tid_off=404,
            src="transport/nvls.cc:156",
        )
        sim.rank_block(
            r,
            t + 0.4,
            [
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                "distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled cuda error (run with "
                f"NCCL_DEBUG=INFO for details), NCCL version {sim.nccl_version}",
                "ncclUnhandledCudaError: Call to CUDA function failed.",
                "Last error:",
                f"Failed to bind NVLink SHARP (NVLS) Multicast memory of size {size} : CUDA "
                "error 800 'operation not permitted'.",
            ],
        )
    end = _fail_job(sim, t + 1, list(sim.ranks_of(a))[:1], 1, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "system_software",
        [a],
        "fm.multicast_gpu_handle",
        f"nvidia-fabricmanager on {a.name} was restarted hours before the job without a GPU "
        "reset; at the first collective Fabric Manager could not find the GPU handle of the "
        "multicast team and NCCL failed to bind NVLS memory (CUDA 800) on that node's ranks "
        "(CHAINS.md §5, nccl#1488).",
    )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_ib_link_flap(sim: _Sim) -> _Result:
    """CHAINS.md §6: IB/RoCE port error on A -> peers' completion errors naming A's address."""
    o = _Options("ib_link_flap", sim.sc.fault.options, {"hca_fatal": False, "origin_logs": True})
    f = sim.sc.fault
    a = sim.node_named(f.node)
    if len(sim.nodes) < 3:
        raise ValueError("ib_link_flap needs at least 3 nodes (peers vote on the address)")
    if not o["origin_logs"]:
        if sim.sc.nccl_debug != "INFO":
            raise ValueError(
                "ib_link_flap with origin_logs false needs nccl_debug INFO: the peer vote maps "
                "addresses to nodes through NCCL's Bootstrap lines"
            )
        sim.forced_missing.add(("kernel", a.name))
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    hca_bus = sim.pick(_HCA_BUSES)
    if o["hca_fatal"]:
        sim.kernel(
            a,
            t - 2,
            f"mlx5_core {hca_bus}: poll_health:800:(pid 0): device's health compromised - reached "
            "miss count",
        )
        sim.kernel(
            a,
            t - 1,
            f"mlx5_core {hca_bus}: mlx5_fw_fatal_reporter_err_work: unrecoverable hardware error",
        )
    sim.kernel(a, t, f"mlx5_core {hca_bus} {a.netdev}: Link down")
    sim.kernel(a, t + rng.uniform(6, 40), f"mlx5_core {hca_bus} {a.netdev}: Link up")
    if o["origin_logs"]:
        for r in list(sim.ranks_of(a))[:2]:
            sim.nccl(
                r,
                t + 0.3,
                "WARN",
                f"NET/IB : {a.hca}:1 Got non-fatal async event: port error(9)",
                tid_off=402,
                src="transport/net_ib.cc:117",
            )
    failed: dict[int, int] = {}
    peers = sim.sample_peers([a])
    voters = peers[: max(2, min(len(peers), 8))]
    for peer in peers:
        for r in list(sim.ranks_of(peer))[:2]:
            tt = t + rng.uniform(8, 20)
            if peer in voters:
                _peer_remote_error(sim, r, tt, a, "ib12")
            else:
                _peer_remote_error(sim, r, tt, sim.pick(voters), "ib5")
            failed[r] = -6
    if o["origin_logs"]:
        for r in list(sim.ranks_of(a))[:2]:
            _peer_remote_error(sim, r, t + rng.uniform(8, 20), voters[0], "ib5")
            failed[r] = -6
    end = _teardown(sim, t + 30, failed, first_node=a)
    if o["hca_fatal"]:
        exp = _expected(
            sim,
            "fail",
            "hardware",
            [a],
            "mlx5.unrecoverable",
            f"The HCA of {a.name} reported health compromised / unrecoverable hardware "
            "error and its link went down; peers' retry-exceeded completions name its "
            "address (CHAINS.md §6: hardware when the HCA reports fatal).",
            acceptable=["infrastructure"],
        )
    elif o["origin_logs"]:
        exp = _expected(
            sim,
            "fail",
            "infrastructure",
            [a],
            "ib.link_flap",
            f"The IB/RoCE link of {a.name} went down and up; the other nodes' NCCL "
            f"completions fail with status 12 (retry exceeded) naming {a.ip}, which NCCL's "
            "Bootstrap lines map to it (CHAINS.md §6). A bad cable or transceiver would "
            "make it hardware, which the logs cannot exclude.",
            acceptable=["hardware"],
        )
    else:
        exp = _expected(
            sim,
            "fail",
            "infrastructure",
            [a],
            "ib.peer_vote",
            f"{a.name}'s own logs are missing, but several nodes' NCCL completions fail "
            f"with status 12 naming {a.ip} (= {a.name} by NCCL's Bootstrap lines): the "
            "peer vote of CHAINS.md §0.5 points at its link.",
            acceptable=["hardware"],
        )
    needs = [("kernel", a.name)] if o["origin_logs"] else []
    return _Result(end, "FAILED", "134:0", exp, needs=needs)


def _chain_ib_init_config(sim: _Sim) -> _Result:
    """CHAINS.md §6 discriminator: retry-exceeded (status 12) right at the first collective on
    every node, each naming its own ring neighbours, with no port error anywhere: RoCE GID /
    routing / subnet configuration, not one bad link."""
    f = sim.sc.fault
    _Options("ib_init_config", f.options, {})
    if len(sim.nodes) < 3:
        raise ValueError("ib_init_config needs at least 3 nodes")
    rng = sim.rng
    ready = _job_start(sim)
    t = ready + rng.uniform(1, 5)
    failed: dict[int, int] = {}
    n = len(sim.nodes)
    for node in sim.sample_peers([]):
        for r in list(sim.ranks_of(node))[:2]:
            ring = sim.nodes[(node.index + 1) % n] if r % 2 == 0 else sim.nodes[node.index - 1]
            _peer_remote_error(sim, r, t + rng.uniform(7, 9), ring, "ib12")
            failed[r] = -6
    end = _teardown(sim, t + 20, failed, first_node=sim.nodes[0])
    exp = _expected(
        sim,
        "fail",
        "system_software",
        [],
        "ib.init_config",
        "Every reporting node's first RDMA transfers failed with status 12 (retry exceeded), "
        "each naming its own ring neighbours, before any training step and with no port error "
        "or link-down anywhere: the fabric cannot route between the nodes (RoCE GID / routing "
        "/ subnet configuration, CHAINS.md §6 discriminator), not one node's link. Fabric "
        "routing is arguably infrastructure.",
        acceptable=["infrastructure"],
    )
    return _Result(end, "FAILED", "134:0", exp)


def _oom_lines(sim: _Sim, a: _Node, t: float, rank: int, constraint: str) -> None:
    rng = sim.rng
    pid = sim.pid(rank)
    task = rank % sim.rpn
    memcg = f"/slurm/uid_{sim.sc.uid}/job_{sim.job_id}"
    sim.kernel(
        a,
        t,
        "python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
        "oom_score_adj=0",
    )
    if constraint == "memcg":
        sim.kernel(
            a,
            t,
            f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"oom_memcg={memcg},task_memcg={memcg}/step_0/task_{task},task=python,pid={pid},uid={sim.sc.uid}",
        )
        head = "Memory cgroup out of memory"
    else:
        sim.kernel(
            a,
            t,
            f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"global_oom,task_memcg={memcg}/step_0/task_{task},task=python,pid={pid},uid={sim.sc.uid}",
        )
        head = "Out of memory"
    rss = rng.randrange(80_000_000, 400_000_000)
    sim.kernel(
        a,
        t + 0.01,
        f"{head}: Killed process {pid} (python) total-vm:{rss + 9_000_000}kB, "
        f"anon-rss:{rss}kB, file-rss:{rng.randrange(90000, 900000)}kB, shmem-rss:"
        f"{rng.randrange(0, 4000000)}kB, UID:{sim.sc.uid} pgtables:{rss // 1000}kB oom_score_adj:0",
    )


def _chain_gpu_oom(sim: _Sim) -> _Result:
    """CHAINS.md §8 (left column): CUDA out of memory on one rank -> peers chain 7.

    Option ``leftover_process``: another process (left over from an earlier job)
    holds most of the GPU, and the rank's own use is small -- the catalog's
    ``app.cuda.oom`` discriminator for infrastructure.
    """
    f = sim.sc.fault
    o = _Options("gpu_oom", f.options, {"leftover_process": False})
    a = sim.node_named(f.node)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.02, 0.2)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[gpu]
    rng = sim.rng
    req = rng.uniform(1, 12)
    head = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req:.2f} GiB. "
        f"GPU {gpu} has a total capacity of 79.11 GiB of which "
    )
    if o["leftover_process"]:
        other = rng.uniform(55, 66)
        own = 79.0 - other
        text = (
            f"{head}{rng.randrange(2, 90)}.62 MiB is free. Process {rng.randrange(20000, 90000)} "
            f"has {other:.2f} GiB memory in use. Including non-PyTorch memory, this process has "
            f"{own:.2f} GiB memory in use. Of the allocated memory {own - 1.9:.2f} GiB is "
            "allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated."
        )
    else:
        text = (
            f"{head}{req / 3:.2f} GiB is free. Including non-PyTorch memory, this process has "
            f"78.{rng.randrange(10, 99)} GiB memory in use. Of the allocated memory 74.20 GiB "
            "is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )
    frame = (
        "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/linear.py",
        125,
        "forward",
        "return F.linear(input, self.weight, self.bias)",
    )
    sim.rank_block(origin, t, _traceback(_frames(sim, frame), text))
    end = _fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    if o["leftover_process"]:
        exp = _expected(
            sim,
            "fail",
            "infrastructure",
            [a],
            "app.cuda.oom_foreign_process",
            f"Rank {origin} hit CUDA out of memory, but its own process used only a fraction of "
            f"the GPU: another process held most of GPU {gpu} on {a.name} (a leftover from an "
            "earlier job). catalog app.cuda.oom / CHAINS.md §8: memory held by a different "
            "process makes it infrastructure (the node was not clean), not the job's sizing.",
        )
    else:
        exp = _expected(
            sim,
            "fail",
            "application",
            [],
            "app.cuda.oom",
            f"Rank {origin} ran out of GPU memory (torch.OutOfMemoryError, its own process "
            "holds nearly all of the GPU); the other ranks then lost it (CHAINS.md §8, "
            "GPU OOM column). The job's sizing is the cause; no node is to blame.",
        )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_cgroup_oom(sim: _Sim) -> _Result:
    """CHAINS.md §8 (middle column): the job's cgroup hit its memory limit."""
    f = sim.sc.fault
    _Options("cgroup_oom", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.05, 0.5)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    _oom_lines(sim, a, t, origin, "memcg")
    sim.out(
        t + 2,
        f"slurmstepd: error: Detected 1 oom_kill event in StepId={sim.job_id}.0. Some of "
        "the step tasks have been OOM Killed.",
    )
    if sim.sc.launcher == "srun":
        sim.out(t + 2.5, f"srun: error: {a.name}: task {origin}: Out Of Memory")
    end = _fail_job(sim, t + 1, [origin], -9, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "application",
        [],
        "kernel.oom_memcg",
        f"The kernel OOM killer acted inside the job's own cgroup on {a.name} "
        "(constraint=CONSTRAINT_MEMCG, task_memcg of this job) and Slurm recorded the "
        "oom_kill event: the job used more host memory than it requested "
        "(CHAINS.md §8, cgroup column).",
    )
    return _Result(end, "OUT_OF_MEMORY", "0:125", exp)


def _chain_node_oom(sim: _Sim) -> _Result:
    """CHAINS.md §8 (right column): the whole node ran out of memory."""
    f = sim.sc.fault
    _Options("node_oom", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.05, 0.5)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    _oom_lines(sim, a, t, origin, "global")
    end = _fail_job(sim, t + 1, [origin], -9, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "infrastructure",
        [a],
        "kernel.oom_global",
        f"{a.name} as a whole ran out of memory (constraint=CONSTRAINT_NONE, global_oom) "
        "and the kernel killed one of the job's ranks: CHAINS.md §8 calls a node-wide "
        "OOM infrastructure (no cgroup limit held the job to its request), with the "
        "caveat that the job itself may have consumed the node, so application is "
        "acceptable.",
        acceptable=["application"],
    )
    return _Result(end, "FAILED", "137:0", exp, needs=[("kernel", a.name)])


def _straggler_cascade(
    sim: _Sim, t: float, stuck: list[int], seq: int
) -> tuple[float, dict[int, int]]:
    """Everyone but ``stuck`` enqueued ``seq``; the watchdogs fire (chain 9)."""
    rng = sim.rng
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    stuck_nodes = {sim.node_of(r).index for r in stuck}
    shown = [sim.nodes[i] for i in sorted(stuck_nodes)] + sim.sample_peers(
        [sim.nodes[i] for i in stuck_nodes]
    )
    reporter = None
    for node in shown:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            if r in stuck:
                continue
            _watchdog(sim, r, tw + rng.uniform(0, 2), seq, seq)
            failed[r] = -6
            reporter = r if reporter is None else reporter
    for r in stuck:
        _dump_signal(sim, r, tw + 2.5, reporter if reporter is not None else 0, seq - 1)
        failed[r] = -6
    return tw + 3, failed


def _chain_collective_straggler(sim: _Sim) -> _Result:
    """CHAINS.md §9: one rank never issued collective N (a rank-conditional code path)."""
    f = sim.sc.fault
    _Options("collective_straggler", f.options, {})
    a = sim.node_named(f.node)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    stuck = sim.ranks_of(a)[f.gpu if f.gpu is not None else sim.rng.randrange(sim.rpn)]
    seq = sim.last_seq + 1
    tw, failed = _straggler_cascade(sim, t, [stuck], seq)
    end = _teardown(sim, tw, failed, first_node=a)
    if sim.sc.torch_style == "new":
        exp = _expected(
            sim,
            "fail",
            "application",
            [],
            "torch.straggler",
            f"Every rank but {stuck} enqueued collective #{seq} and timed out waiting; rank "
            f"{stuck} reports last enqueued #{seq - 1}: it never issued the collective "
            "(rank-divergent code path, deadlock or stall). No hardware, network or "
            "filesystem signal exists anywhere (CHAINS.md §9, rule 0.6).",
        )
    else:
        exp = _expected(
            sim,
            "fail",
            "ambiguous",
            [],
            "torch.collective_hang",
            f"All reporting ranks time out on collective #{seq}, but this PyTorch "
            "version prints no dump-signal line, so the rank that never issued it "
            "cannot be identified; no hardware/network/filesystem signal exists "
            "(CHAINS.md §9: ambiguous when the stuck rank cannot be identified).",
            acceptable=["application", "unattributed"],
        )
    return _Result(end, "FAILED", "134:0", exp)


def _chain_collective_hang(sim: _Sim) -> _Result:
    """CHAINS.md §9: every rank issued the collective and none completed; nothing else."""
    f = sim.sc.fault
    _Options("collective_hang", f.options, {})
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    seq = sim.last_seq + 1
    tw, failed = _straggler_cascade(sim, t, [], seq)
    end = _teardown(sim, tw, failed, first_node=sim.nodes[0])
    exp = _expected(
        sim,
        "fail",
        "ambiguous",
        [],
        "torch.collective_hang",
        f"Every rank enqueued collective #{seq} and none completed it; no XID, SXid, "
        "AER, IB, OOM or filesystem signal exists. A deadlock, a library bug and a "
        "silent fabric stall all fit (CHAINS.md §9: ambiguous when the stuck rank "
        "cannot be identified).",
        acceptable=["unattributed"],
    )
    return _Result(end, "FAILED", "134:0", exp)


_EXCEPTIONS = [
    (
        "ValueError",
        "Expected input batch_size (2048) to match target batch_size (1024).",
        (
            "/home/{user}/run/model.py",
            141,
            "compute_loss",
            "return F.cross_entropy(logits, labels)",
        ),
    ),
    (
        "KeyError",
        "'attention_mask'",
        ("/home/{user}/run/data.py", 57, "__getitem__", "mask = sample['attention_mask']"),
    ),
    (
        "AssertionError",
        "sequence length 8192 exceeds max_position_embeddings 4096",
        ("/home/{user}/run/model.py", 203, "forward", "assert seq_len <= self.max_pos, msg"),
    ),
    (
        "ZeroDivisionError",
        "float division by zero",
        ("/home/{user}/run/schedule.py", 33, "lr_at", "return base_lr * step / warmup"),
    ),
    (
        "RuntimeError",
        "mat1 and mat2 shapes cannot be multiplied (4096x1024 and 2048x1024)",
        ("/home/{user}/run/model.py", 88, "forward", "return self.proj(x)"),
    ),
]


def _chain_rank_exception(sim: _Sim) -> _Result:
    """CHAINS.md §7: one rank raises a Python exception -> peers' connection closed."""
    o = _Options("rank_exception", sim.sc.fault.options, {"exception": None, "at_start": False})
    f = sim.sc.fault
    a = sim.node_named(f.node)
    rng = sim.rng
    if o["exception"] == "ModuleNotFoundError" or o["at_start"]:
        # an import error at start hits every rank the same way
        t = sim.t0 + rng.uniform(6, 20)
        sim.out(t - 3, f"{sim.bracket_stamp(t - 3)} Starting job {sim.job_id}", err=False)
        mod = rng.choice(["flash_attn", "apex", "transformer_engine", "deepspeed"])
        failed: dict[int, int] = {}
        shown = [a, *sim.sample_peers([a])]
        for node in shown:
            for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
                sim.rank_block(
                    r,
                    t + rng.uniform(0, 1.5),
                    _traceback(
                        [
                            (
                                f"/home/{sim.sc.user}/run/train.py",
                                9,
                                "<module>",
                                f"from {mod} import ops",
                            )
                        ],
                        f"ModuleNotFoundError: No module named '{mod}'",
                    ),
                )
                failed[r] = 1
        end = _teardown(sim, t + 2, failed, first_node=a)
        exp = _expected(
            sim,
            "fail",
            "application",
            [],
            "python.ModuleNotFoundError",
            f"Every rank failed at import: ModuleNotFoundError: No module named "
            f"'{mod}'. The job's environment lacks a package it imports (CHAINS.md §7, "
            "application); nothing points at a node.",
        )
        return _Result(end, "FAILED", "1:0", exp)
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.05, 0.6)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[f.gpu if f.gpu is not None else rng.randrange(sim.rpn)]
    pick = [e for e in _EXCEPTIONS if e[0] == o["exception"]] or [sim.pick(_EXCEPTIONS)]
    name, msg, frame = pick[0]
    frame = (frame[0].format(user=sim.sc.user), *frame[1:])
    sim.rank_block(origin, t, _traceback(_frames(sim, frame), f"{name}: {msg}"))
    end = _fail_job(sim, t + 0.5, [origin], 1, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "application",
        [],
        f"python.{name}",
        f"Rank {origin} on {a.name} raised {name}: {msg}; every other rank then saw "
        "'Connection closed by remote peer' / ncclRemoteError and was aborted "
        "(CHAINS.md §7). The exception is the job's own.",
    )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_rank_segfault(sim: _Sim) -> _Result:
    """CHAINS.md §7: a rank dies of SIGSEGV (in an extension, or inside libnccl)."""
    o = _Options("rank_segfault", sim.sc.fault.options, {"library": "extension"})
    if o["library"] not in ("extension", "libnccl"):
        raise ValueError("rank_segfault: library is extension or libnccl")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.05, 0.6)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[rng.randrange(sim.rpn)]
    pid = sim.pid(origin)
    obj = (
        ("libnccl.so.2", "d3d3000")
        if o["library"] == "libnccl"
        else ("fused_kernels.cpython-310-x86_64-linux-gnu.so", "2f1000")
    )
    base = 0x7F7C7AC00000 + rng.randrange(0, 0x100000) * 0x1000
    comm = "pt_main_thread" if o["library"] == "libnccl" else "python"
    sim.kernel(
        a,
        t,
        f"{comm}[{pid}]: segfault at {rng.getrandbits(40):x} ip {base + 0x69996:016x} sp "
        f"{rng.getrandbits(44):016x} error 4 in {obj[0]}[{base:x}+{obj[1]}]",
    )
    sim.kernel(
        a,
        t,
        "Code: 48 8b 47 08 48 85 c0 74 0c 48 8b 57 10 48 89 10 48 89 42 08 c3 0f 1f 84 00 00 00 "
        "00 00",
    )
    if sim.sc.launcher == "srun":
        sim.out(t + 1, f"srun: error: {a.name}: task {origin}: Segmentation fault (core dumped)")
    end = _fail_job(sim, t + 0.5, [origin], -11, "closed", first_node=a)
    if o["library"] == "libnccl":
        exp = _expected(
            sim,
            "fail",
            "system_software",
            [a],
            "kernel.segfault_libnccl",
            f"Rank {origin} on {a.name} died of SIGSEGV inside libnccl.so.2 with no "
            "application frame; CHAINS.md §7 makes a crash inside the communication "
            "library system_software, while an application bug passing bad buffers "
            "remains possible.",
            acceptable=["application"],
        )
    else:
        exp = _expected(
            sim,
            "fail",
            "application",
            [],
            "kernel.segfault",
            f"Rank {origin} on {a.name} died of SIGSEGV inside the job's own compiled "
            "extension (fused_kernels...so); peers lost it (CHAINS.md §7).",
        )
    needs = [("kernel", a.name)] if o["library"] == "libnccl" else []
    return _Result(end, "FAILED", "139:0", exp, needs=needs)


def _chain_illegal_address(sim: _Sim) -> _Result:
    """CHAINS.md §14: XID 13 burst + XID 43 (same pid) -> CUDA illegal memory access."""
    f = sim.sc.fault
    _Options("illegal_address", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    gpu = f.gpu if f.gpu is not None else rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready, 0.05, 0.6)
    _progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    for _ in range(rng.randint(2, 5)):
        sim.kernel(
            a,
            t,
            f"NVRM: Xid (PCI:{bus}): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
            f"Exception on (GPC {rng.randrange(8)}, TPC {rng.randrange(9)}, SM "
            f"{rng.randrange(2)}): "
            "Out Of Range Address",
        )
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
        "ESR 0x52df30=0x2000d 0x52df34=0x0 0x52df28=0x1f81fb60 0x52df2c=0x1174",
    )
    sim.kernel(a, t + 0.2, f"NVRM: Xid (PCI:{bus}): 43, pid={pid}, name=python, channel 0x00000012")
    sim.rank_block(
        origin,
        t + 0.5,
        _traceback(
            _frames(sim), "RuntimeError: CUDA error: an illegal memory access was encountered"
        ),
    )
    sim.rank_block(
        origin,
        t + 0.5,
        [
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        ],
    )
    end = _fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "application",
        [],
        "xid.13",
        f"The job's kernel on GPU {bus} of {a.name} faulted (XID 13 Out Of Range Address, "
        "then XID 43 for the same process) and the rank raised 'illegal memory "
        "access'. One occurrence on one job is the application (CHAINS.md §14); "
        "only a repeat across jobs would point at the GPU.",
    )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_node_failure(sim: _Sim) -> _Result:
    """CHAINS.md §10: node A stops (optionally after MCE / XID 79 / panic), reboots; NODE_FAIL."""
    o = _Options("node_failure", sim.sc.fault.options, {"precursor": "none", "evidence": "banner"})
    if o["precursor"] not in ("none", "mce", "xid79", "panic"):
        raise ValueError("node_failure: precursor none|mce|xid79|panic")
    if o["evidence"] not in ("banner", "slurmctld", "failed_node"):
        raise ValueError("node_failure: evidence banner|slurmctld|failed_node")
    f = sim.sc.fault
    rng = sim.rng
    a = sim.node_named(f.node, avoid=[sim.nodes[0].name] if len(sim.nodes) > 1 else [])
    sim.quiet.add(a.name)
    if a.kfmt in ("raw", "dmesg_t"):
        # a ring-buffer dump only shows the current boot; a rebooted node's log is persistent
        a.kfmt, a.kfile = "journal", "kernel.log"
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    if o["precursor"] == "mce":
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: CPU 37: Machine Check Exception: 5 Bank 7: be00000000800400",
        )
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffffa8a2b1c8> {intel_idle+0xa8/0x130}",
        )
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: TSC 2c4a3d1f77e PROCESSOR 0:806f8 TIME 1709547121 SOCKET 1 "
            "APIC 4a microcode 2b000571",
        )
        sim.kernel(a, t - 0.5, "mce: [Hardware Error]: Machine check: Processor context corrupt")
        sim.kernel(a, t, "Kernel panic - not syncing: Fatal machine check")
    elif o["precursor"] == "xid79":
        gpu = rng.randrange(sim.gpus)
        sim.kernel(
            a,
            t - 20,
            f"NVRM: Xid (PCI:{sim.bus(gpu)}): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
            "off the bus.",
        )
        sim.kernel(a, t - 20, f"NVRM: GPU {sim.bus(gpu)}.0: GPU has fallen off the bus.")
        for i in range(4):
            sim.kernel(
                a,
                t - 15 + i * 3,
                f"INFO: task python:{sim.pid(sim.ranks_of(a)[gpu])} blocked for more than 120 "
                "seconds.",
            )
    elif o["precursor"] == "panic":
        sim.kernel(
            a,
            t - 0.2,
            f"BUG: unable to handle page fault for address: ffff{rng.getrandbits(44):012x}",
        )
        sim.kernel(a, t - 0.2, "#PF: supervisor read access in kernel mode")
        sim.kernel(a, t - 0.1, "Oops: 0000 [#1] SMP NOPTI")
        sim.kernel(
            a,
            t - 0.1,
            f"CPU: 17 PID: {rng.randrange(1000, 90000)} Comm: kworker/17:2 Tainted: P           "
            f"OE     {sim.kernel_release} #115-Ubuntu",
        )
        sim.kernel(a, t, "Kernel panic - not syncing: Fatal exception")
    # peers: NCCL loses A (its HCA stopped answering)
    failed: dict[int, int] = {}
    for peer in sim.sample_peers([a])[:8]:
        for r in list(sim.ranks_of(peer))[:1]:
            _peer_remote_error(sim, r, t + rng.uniform(8, 25), a, "ib12")
            failed[r] = -6
    down = t + rng.uniform(120, 300)  # SlurmdTimeout
    batch = sim.nodes[0]
    sim.out(down + 1, f"srun: error: Node failure on {a.name}")
    if batch is not a:
        sim.out(
            down + 2,
            f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
            f"{sim.iso_local(down + 2, batch)} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS "
            "***",
        )
    sim.out(down + 3, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    if o["evidence"] == "slurmctld":
        sim.ctld(down, f"error: Nodes {a.name} not responding, setting DOWN")
        sim.ctld(down + 0.1, f"Killing JobId={sim.job_id} on failed node {a.name}")
    boot = down + rng.uniform(60, 400)
    if a.kfmt == "journal":
        a.kernel_lines.append((boot - 0.001, sim._next(), _BOOT_MARK))
    _boot_lines(sim, a, boot, flaps=True)
    extra = {"failed_node": a.name} if o["evidence"] == "failed_node" else {}
    sub, acc, cause, why = {
        "none": (
            ("hardware", ["infrastructure"], "node-crashed-silently")
            if o["evidence"] == "slurmctld"
            else ("infrastructure", ["hardware"], "node.failure")
        )
        + (
            f"{a.name} stopped logging mid-job with no error and came back with a new boot; "
            "Slurm ended the job NODE_FAIL and peers lost its address. Node loss without a "
            "recorded cause is infrastructure (CHAINS.md §10), except when slurmctld's record "
            "and the node's own boot agree that it stopped dead and came back by itself: a "
            "silent crash of the node, hardware (issue 10).",
        ),
        "mce": (
            "hardware",
            [],
            "kernel.mce",
            f"{a.name}'s last boot ended with a fatal machine check (MCE, 'Processor context "
            "corrupt' -> panic); it rebooted and Slurm ended the job NODE_FAIL "
            "(CHAINS.md §10: upgrade to hardware when the previous boot ends with MCE).",
        ),
        "xid79": (
            "hardware",
            [],
            "xid.79",
            f"A GPU of {a.name} fell off the bus (XID 79), the node hung (blocked tasks) and "
            "rebooted; Slurm ended the job NODE_FAIL (CHAINS.md §10 with §1).",
        ),
        "panic": (
            "system_software",
            ["hardware"],
            "kernel.panic",
            f"{a.name}'s kernel oopsed and panicked ('Fatal exception') in a kernel thread, "
            "then the node rebooted and Slurm ended the job NODE_FAIL. CHAINS.md §10 makes a "
            "captured kernel panic system_software; a hardware trigger cannot be excluded.",
        ),
    }[o["precursor"]]
    exp = _expected(sim, "fail", sub, [a], cause, why, acceptable=acc)
    needs = [("kernel", a.name)] if o["precursor"] != "none" or o["evidence"] == "banner" else []
    # trusted evidence names the node: the controller's log, Slurm's FailedNode, the kernel's
    # last words, or the reboot banner inside the window (300 s after the job's end)
    end = down + 35
    confirmed = (
        {a.name}
        if o["evidence"] != "banner" or o["precursor"] != "none" or boot <= end + 300
        else set()
    )
    return _Result(end, "NODE_FAIL", "0:0", exp, extra, needs=needs, confirmed=confirmed)


def _chain_preemption(sim: _Sim) -> _Result:
    """CHAINS.md §11: the scheduler preempted the job (SIGTERM to every task)."""
    f = sim.sc.fault
    _Options("preemption", f.options, {})
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} DUE TO PREEMPTION ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} DUE TO PREEMPTION ***",
        )
        if sim.sc.launcher == "torchrun":
            sim.agent_log(
                node,
                t + 0.2,
                "WARNING",
                "elastic.agent.server.api",
                "Received 15 death signal, shutting down workers",
            )
    exp = _expected(
        sim,
        "preempted",
        "infrastructure",
        [],
        "slurm.preemption",
        "Slurm preempted the job for a higher-priority one (DUE TO PREEMPTION, sacct "
        "PREEMPTED); nothing failed before it (CHAINS.md §11). A scheduler decision: "
        "infrastructure, no node to blame.",
    )
    return _Result(t + 5, "PREEMPTED", "0:15", exp)


def _chain_time_limit(sim: _Sim) -> _Result:
    """CHAINS.md §11: the job was still making progress when it hit its time limit."""
    f = sim.sc.fault
    _Options("time_limit", f.options, {})
    ready = _job_start(sim)
    t = sim.t0 + sim.sc.time_limit
    _progress(sim, ready, t - 5)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} DUE TO TIME LIMIT ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} DUE TO TIME LIMIT ***",
        )
    exp = _expected(
        sim,
        "timeout",
        "application",
        [],
        "slurm.time_limit",
        "The job printed training progress until the end and was stopped by its own "
        "time limit (DUE TO TIME LIMIT, sacct TIMEOUT) with no failure before it: it "
        "asked for too little time (CHAINS.md §11).",
    )
    return _Result(t + 3, "TIMEOUT", "0:0", exp)


def _nfs_hang_lines(sim: _Sim, a: _Node, t: float, until: float, rank: int) -> None:
    server = sim.pick(["nfs01", "home-nfs", "10.0.0.40"])
    sim.kernel(a, t, f"nfs: server {server} not responding, still trying")
    k = t + 123
    n = 0
    while k < until and n < 6:
        sim.kernel(a, k, f"INFO: task python:{sim.pid(rank)} blocked for more than 120 seconds.")
        sim.kernel(a, k, f"      Tainted: P           OE     {sim.kernel_release} #115-Ubuntu")
        sim.kernel(
            a, k, '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.'
        )
        sim.kernel(
            a,
            k,
            f"task:python          state:D stack:0     pid:{sim.pid(rank)} "
            f"ppid:{sim.pid(rank) - 13} flags:0x00004002",
        )
        k += 122.9
        n += 1


def _chain_time_limit_hang(sim: _Sim) -> _Result:
    """CHAINS.md §11 + §12: progress stopped on an NFS stall long before the time limit."""
    f = sim.sc.fault
    _Options("time_limit_hang", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = _job_start(sim)
    end_t = sim.t0 + sim.sc.time_limit
    t = sim.t0 + (f.at if f.at is not None else sim.sc.time_limit * sim.rng.uniform(0.3, 0.6))
    _progress(sim, ready, t)
    _nfs_hang_lines(sim, a, t + 5, end_t, sim.ranks_of(a)[0])
    batch = sim.nodes[0]
    sim.out(
        end_t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(end_t, batch)} DUE TO TIME LIMIT ***",
    )
    exp = _expected(
        sim,
        "fail",
        "infrastructure",
        [a],
        "fs.nfs_not_responding",
        f"Progress stopped {int(end_t - t)} s before the time limit when {a.name}'s NFS "
        "server stopped responding and the rank's I/O blocked (hung task); the time "
        "limit only ended a job that was already stuck (CHAINS.md §11 exception, §12).",
    )
    return _Result(end_t + 3, "TIMEOUT", "0:0", exp, needs=[("kernel", a.name)])


def _chain_user_cancel(sim: _Sim) -> _Result:
    """CHAINS.md §11: scancel by the owner (or by an administrator)."""
    o = _Options("user_cancel", sim.sc.fault.options, {"by": "owner"})
    if o["by"] not in ("owner", "admin"):
        raise ValueError("user_cancel: by owner|admin")
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    batch = sim.nodes[0]
    sim.out(
        t,
        f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
        f"{sim.iso_local(t, batch)} ***",
    )
    for node in sim.nodes[: sim.sc.peer_sample]:
        sim.out(
            t + 0.1,
            f"slurmstepd: error: *** STEP {sim.job_id}.0 ON {node.name} CANCELLED AT "
            f"{sim.iso_local(t + 0.1, node)} ***",
        )
    sim.out(t + 0.2, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    by = sim.sc.uid if o["by"] == "owner" else 0
    if o["by"] == "owner":
        exp = _expected(
            sim,
            "cancelled",
            "application",
            [],
            "slurm.cancel_owner",
            "The job's owner cancelled it (sacct 'CANCELLED by <own uid>'); nothing "
            "failed before (CHAINS.md §11, DESIGN §4: own cancel is application).",
        )
    else:
        exp = _expected(
            sim,
            "cancelled",
            "infrastructure",
            [],
            "slurm.cancel_admin",
            "An administrator (uid 0) cancelled the job with no failure before it: a "
            "site decision such as maintenance (DESIGN §4: infrastructure).",
        )
    return _Result(t + 4, f"CANCELLED by {by}", "0:15", exp)


def _chain_lustre_eviction(sim: _Sim) -> _Result:
    """CHAINS.md §12: Lustre clients are evicted; the checkpoint write fails with EIO.

    Option ``nodes``: how many nodes (the fault node first) lose the same OST at
    once -- CHAINS.md §12 notes several at once usually means the storage side.
    """
    f = sim.sc.fault
    o = _Options("lustre_eviction", f.options, {"nodes": 1})
    a = sim.node_named(f.node)
    rng = sim.rng
    count = max(1, min(int(o["nodes"]), len(sim.nodes)))
    others = [n for n in sim.nodes if n is not a]
    hit = [a, *sorted(rng.sample(others, count - 1), key=lambda n: n.index)]
    sim.quiet.update(n.name for n in hit)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    ost = f"lustre-OST{rng.randrange(0, 64):04x}"
    nid = f"10.2.{rng.randrange(0, 8)}.{rng.randrange(2, 250)}@o2ib"
    for k, node in enumerate(hit):
        obd = f"{ost}-osc-ffff{rng.getrandbits(32):08x}{rng.getrandbits(16):04x}"
        dt = k * rng.uniform(0.0, 0.5)
        sim.kernel(
            node,
            t + dt,
            f"Lustre: {obd}: Connection to {ost} (at {nid}) was lost; in progress operations "
            "using this service will wait for recovery to complete",
        )
        sim.kernel(
            node,
            t + 40 + dt,
            f"LustreError: 167-0: {obd}: This client was evicted by {ost}; in progress "
            "operations using this service will fail.",
        )
        sim.kernel(node, t + 41 + dt, f"Lustre: {obd}: Connection restored to {nid} (at {nid})")
    origin = sim.ranks_of(a)[0]
    frame = (
        "/usr/local/lib/python3.10/dist-packages/torch/serialization.py",
        652,
        "save",
        "with _open_zipfile_writer(f) as opened_zipfile:",
    )
    sim.rank_block(
        origin, t + 41.5, _traceback(_frames(sim, frame), "OSError: [Errno 5] Input/output error")
    )
    end = _fail_job(sim, t + 42, [origin], 1, "closed", first_node=a)
    where = a.name if count == 1 else f"{count} nodes (first {a.name})"
    exp = _expected(
        sim,
        "fail",
        "infrastructure",
        hit,
        "fs.lustre_evicted",
        f"The Lustre client of {where} lost {ost} and was evicted; the checkpoint write on "
        f"{a.name} failed with EIO and the job died (CHAINS.md §12: the node(s) with the "
        "filesystem errors).",
    )
    return _Result(end, "FAILED", "1:0", exp, needs=[("kernel", n.name) for n in hit])


def _chain_nfs_hang(sim: _Sim) -> _Result:
    """CHAINS.md §12: NFS server not responding -> the rank on A blocks -> peers' watchdog."""
    f = sim.sc.fault
    _Options("nfs_hang", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    stuck = sim.ranks_of(a)[0]
    _nfs_hang_lines(sim, a, t, t + sim.sc.pg_timeout, stuck)
    seq = sim.last_seq + 1
    tw, failed = _straggler_cascade(sim, t, [stuck], seq)
    end = _teardown(sim, tw, failed, first_node=a)
    exp = _expected(
        sim,
        "fail",
        "infrastructure",
        [a],
        "fs.nfs_not_responding",
        f"{a.name}'s NFS server stopped responding, rank {stuck}'s I/O blocked (hung "
        "task) so it never issued the next collective, and the other ranks' watchdogs "
        "fired: a filesystem stall, not the job (CHAINS.md §12).",
    )
    return _Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


def _chain_gsp_timeout(sim: _Sim) -> _Result:
    """CHAINS.md §13: repeated XID 119 GSP RPC timeouts -> GPU needs reset -> rank hangs."""
    f = sim.sc.fault
    _Options("gsp_timeout", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    gpu = f.gpu if f.gpu is not None else rng.randrange(sim.gpus)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    for i in range(rng.randint(3, 6)):
        fn = rng.choice(["76 (GSP_RM_CONTROL) (0x20800a4c 0x4)", "103 (GSP_RM_ALLOC) (0x2081 0x4)"])
        sim.kernel(
            a,
            t + i * 6.1,
            f"NVRM: Xid (PCI:{bus}): 119, pid={sim.pid(origin)}, name=python, Timeout "
            f"after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function {fn}.",
        )
    sim.kernel(
        a,
        t + 40,
        f"NVRM: Rate limiting GSP RPC error prints for GPU at PCI:{bus} (printing 1 of "
        "every 30).  The GPU likely needs to be reset.",
    )
    sim.kernel(
        a,
        t + 41,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU "
        "Reset Required)",
    )
    seq = sim.last_seq + 1
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    for node in [a, *sim.sample_peers([a])]:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            if r == origin:
                continue
            _watchdog(sim, r, tw + rng.uniform(0, 3), seq, seq)
            failed[r] = -6
    failed[origin] = -6
    end = _teardown(sim, tw + 5, failed, first_node=a)
    exp = _expected(
        sim,
        "fail",
        "system_software",
        [a],
        "xid.119",
        f"GPU {bus} on {a.name} stopped answering driver RPCs (repeated XID 119 GSP "
        "timeouts, 'The GPU likely needs to be reset', XID 154); its rank hung and the "
        "others timed out (CHAINS.md §13: GSP firmware/driver, hardware if it recurs "
        "after a power cycle).",
        acceptable=["hardware"],
    )
    return _Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


def _chain_nccl_shm(sim: _Sim) -> _Result:
    """real-case01 / catalog nccl shm: /dev/shm too small on node A -> ncclSystemError at init."""
    f = sim.sc.fault
    _Options("nccl_shm", f.options, {})
    a = sim.node_named(f.node)
    rng = sim.rng
    t = sim.t0 + rng.uniform(20, 60)
    ready = _job_start(sim, init=False)
    for node in sim.nodes:
        r0 = node.index * sim.rpn
        sim.nccl(r0, ready + 0.2, "INFO", f"Bootstrap : Using {node.netdev}:{node.ip}<0>")
    seg = "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        for _ in range(6)
    )
    size = rng.choice([7340384, 9437472, 33554464])
    for r in list(sim.ranks_of(a))[: 4 if len(sim.nodes) > 64 else sim.rpn]:
        sim.nccl(
            r,
            t,
            "WARN",
            f"Error while creating shared memory segment /dev/shm/nccl-{seg} (size {size})",
            tid_off=391,
            src="misc/shmutils.cc:86",
        )
        sim.rank_block(
            r,
            t + 0.3,
            [
                "torch.distributed.DistBackendError: NCCL error in: "
                "/pytorch/torch/csrc/distributed/c10d/"
                "NCCLUtils.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for "
                "details), NCCL "
                f"version {sim.nccl_version}",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                "failed or "
                "device error. ",
                "Last error:",
                f"Error while creating shared memory segment /dev/shm/nccl-{seg} (size {size})",
            ],
        )
    end = _fail_job(sim, t + 1, list(sim.ranks_of(a))[:1], 1, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "system_software",
        [a],
        "nccl.shm_too_small",
        f"Only {a.name}'s ranks failed to create NCCL's /dev/shm segment "
        "(ncclSystemError at the first collective) while every other node initialised: "
        "that node's shared-memory setup is too small or full, an execution-environment "
        "problem (real-case01), not the job's code.",
    )
    return _Result(end, "FAILED", "1:0", exp)


def _chain_exit_unexplained(sim: _Sim) -> _Result:
    """A failed job that logged nothing recognisable: the honest answer is unattributed."""
    f = sim.sc.fault
    _Options("exit_unexplained", f.options, {})
    a = sim.node_named(f.node)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[0]
    sim.rank_out(
        origin, t - 1, "early stopping criterion met: validation metric did not improve", err=False
    )
    failed = dict.fromkeys(sim.ranks_of(a), 2)
    end = _teardown(sim, t, failed, first_node=a)
    exp = _expected(
        sim,
        "fail",
        "unattributed",
        [],
        "unknown.exit",
        "The job's processes on one node exited with status 2 after an ordinary log "
        "line; no error, exception, kernel or network signal explains it. DESIGN §4: no "
        "evidence -> unattributed, never a guess.",
    )
    return _Result(end, "FAILED", "2:0", exp)


def _chain_peer_lost_no_evidence(sim: _Sim) -> _Result:
    """Peers name node A as the one that went away, but A left no evidence we can read."""
    f = sim.sc.fault
    _Options("peer_lost_no_evidence", f.options, {})
    if len(sim.nodes) < 3:
        raise ValueError("peer_lost_no_evidence needs at least 3 nodes")
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    sim.forced_missing.add(("kernel", a.name))
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[0]
    end = _fail_job(sim, t, [origin], -9, "closed", first_node=a, killed_agents=[a])
    exp = _expected(
        sim,
        "fail",
        "unattributed",
        [a],
        "peer.lost",
        f"Ranks on several nodes report 'Connection closed by remote peer {a.name}', so "
        f"{a.name} is where the failure started, but its kernel log is missing and its "
        "ranks printed nothing: why it went away is not in the evidence (DESIGN §4).",
        acceptable=["ambiguous"],
    )
    return _Result(end, "FAILED", "137:0", exp)


def _chain_killed_unexplained(sim: _Sim) -> _Result:
    """A rank was SIGKILLed and the kernel log on its node shows no OOM or other cause."""
    f = sim.sc.fault
    _Options("killed_unexplained", f.options, {})
    a = sim.node_named(f.node)
    ready = _job_start(sim)
    t = _fault_time(sim, ready)
    _progress(sim, ready, t)
    origin = sim.ranks_of(a)[sim.rng.randrange(sim.rpn)]
    if sim.sc.launcher == "srun":
        sim.out(t + 1, f"srun: error: {a.name}: task {origin}: Killed")
    end = _fail_job(sim, t + 0.5, [origin], -9, "closed", first_node=a)
    exp = _expected(
        sim,
        "fail",
        "ambiguous",
        [a],
        "signal.sigkill",
        f"Rank {origin} on {a.name} was killed by SIGKILL; its node's kernel log shows "
        "no OOM kill, and Slurm did not kill the job. An administrator, a health "
        "checker or an unlogged OOM all fit: ambiguous (or unattributed), and the "
        "evidence points at that node.",
        acceptable=["unattributed"],
    )
    return _Result(end, "FAILED", "137:0", exp, needs=[("kernel", a.name)])


_CHAIN_FUNCS: dict[str, ChainFn] = {
    "gpu_fell_off_bus": _chain_gpu_fell_off_bus,
    "gpu_memory_error": _chain_gpu_memory_error,
    "nvlink5_fault": _chain_nvlink5_fault,
    "nvswitch_fatal": _chain_nvswitch_fatal,
    "fabric_manager_down": _chain_fabric_manager_down,
    "fabric_manager_restarted": _chain_fabric_manager_restarted,
    "ib_link_flap": _chain_ib_link_flap,
    "ib_init_config": _chain_ib_init_config,
    "gpu_oom": _chain_gpu_oom,
    "cgroup_oom": _chain_cgroup_oom,
    "node_oom": _chain_node_oom,
    "collective_straggler": _chain_collective_straggler,
    "collective_hang": _chain_collective_hang,
    "rank_exception": _chain_rank_exception,
    "rank_segfault": _chain_rank_segfault,
    "illegal_address": _chain_illegal_address,
    "node_failure": _chain_node_failure,
    "preemption": _chain_preemption,
    "time_limit": _chain_time_limit,
    "time_limit_hang": _chain_time_limit_hang,
    "user_cancel": _chain_user_cancel,
    "lustre_eviction": _chain_lustre_eviction,
    "nfs_hang": _chain_nfs_hang,
    "gsp_timeout": _chain_gsp_timeout,
    "nccl_shm": _chain_nccl_shm,
    "exit_unexplained": _chain_exit_unexplained,
    "peer_lost_no_evidence": _chain_peer_lost_no_evidence,
    "killed_unexplained": _chain_killed_unexplained,
}
assert set(_CHAIN_FUNCS) == set(CHAINS)


# --------------------------------------------------------------------- out-of-window signals


def _out_of_window(sim: _Sim, spec: OutOfWindowSpec, end: float, avoid: set[str]) -> None:
    node = sim.node_named(spec.node, avoid=avoid)
    rng = sim.rng
    if spec.after_end is not None:
        t = end + spec.after_end
    else:
        t = sim.t0 - (spec.before_start if spec.before_start is not None else 86400.0)
    if node.boot > t - 60:  # the node must have been up then
        node.boot = t - rng.uniform(3600, 86400)
    gpu = rng.randrange(sim.gpus)
    bus = sim.bus(gpu)
    if spec.signal in ("xid79", "xid48") and spec.after_end is None:
        # a GPU that fell off the bus or lost memory stays broken until the node is reset: a node
        # that ran the job after it was rebooted (or the fault would be the job's problem too)
        gap = sim.t0 - t
        _boot_lines(sim, node, t + rng.uniform(0.2, 0.8) * gap, flaps=False, always=True)
    if spec.signal == "xid79":
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
            "bus.",
        )
        sim.kernel(node, t, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    elif spec.signal == "xid48":
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
            "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
            "0x1f2e3d4c5 partition 3, subpartition 1.",
        )
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 95, pid=4411, name=python, Uncontained: FBHUB. RST: Yes, "
            "D-RST: No",
        )
    elif spec.signal == "nfs":
        sim.kernel(node, t, "nfs: server nfs01 not responding, still trying")
        sim.kernel(node, t + 95, "nfs: server nfs01 OK")
    elif spec.signal == "oom":
        sim.kernel(
            node,
            t,
            "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        )
        sim.kernel(
            node,
            t,
            "Out of memory: Killed process 88121 (python) total-vm:302331996kB, "
            "anon-rss:291345112kB, file-rss:90112kB, shmem-rss:0kB, UID:1002 pgtables:571234kB "
            "oom_score_adj:0",
        )
    elif spec.signal == "link_down":
        hca_bus = sim.pick(_HCA_BUSES)
        sim.kernel(node, t, f"mlx5_core {hca_bus} {node.netdev}: Link down")
        sim.kernel(node, t + 12, f"mlx5_core {hca_bus} {node.netdev}: Link up")
    elif spec.signal == "sxid":
        sim.kernel(
            node,
            t,
            f"nvidia-nvswitch1: SXid (PCI:{_NVSWITCH_BUSES[1]}): 12022, Fatal, Link 33 egress "
            "input ECC DBE error",
        )


# --------------------------------------------------------------------- rendering


def _render_kernel(sim: _Sim, node: _Node) -> list[str]:
    fmt = node.kfmt
    ring = fmt in ("raw", "dmesg_t")  # a ring-buffer dump only holds the current boot
    boots = sorted({*node.reboots, node.boot})
    out: list[str] = []
    for t, _seq, msg in sorted(node.kernel_lines):
        if ring and t < node.boot - 1e-6:
            continue
        if msg == _BOOT_MARK:
            out.append(f"-- Boot {sim.rng.getrandbits(128):032x} --")
            continue
        boot = max((b for b in boots if b <= t + 1e-6), default=node.boot)
        out.append(
            format_line(
                fmt,  # type: ignore[arg-type]
                sim.local(t, node),
                msg,
                host=node.host_in_log,
                uptime=max(0.0, t - boot),
            )
        )
    return out


def _render_syslog(sim: _Sim, node: _Node) -> list[str]:
    kind: LineFormat = node.kfmt if node.kfmt in ("iso", "short_iso") else "syslog_short"  # type: ignore[assignment]
    out: list[str] = []
    for t, _seq, msg in sorted(node.syslog_lines):
        ident, _, text = msg.partition(": ")
        out.append(format_line(kind, sim.local(t, node), text, host=node.host_in_log, ident=ident))
    return out


def _render_fm(sim: _Sim, node: _Node) -> list[str]:
    return [
        format_line("fabricmanager", sim.local(t, node), msg)
        for t, _s, msg in sorted(node.fm_lines)
    ]


def _trusted_evidence(sim: _Sim, missing: Callable[[str, _Node], bool]) -> set[str]:
    """Nodes the chain wrote kernel or Fabric Manager lines for (in files the bundle keeps), or
    that its slurmctld lines name: call before the noise is added."""
    out = {
        node.name
        for node in sim.nodes
        if (node.kernel_lines and not missing("kernel", node))
        or (node.fm_lines and sim.has_fm and not missing("fabricmanager", node))
    }
    for _t, _s, msg in sim.ctld_lines:
        out.update(n for n in sim.by_name if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", msg))
    return out


def _split_suspects(result: _Result, written: set[str]) -> None:
    """Responsible nodes that no trusted source in the bundle backs become suspects."""
    exp = result.expected
    trusted = result.confirmed if result.confirmed is not None else written
    exp.suspect_nodes = [n for n in exp.responsible_nodes if n not in trusted]
    exp.responsible_nodes = [n for n in exp.responsible_nodes if n in trusted]


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


def generate(scenario: Scenario) -> SimBundle:
    """Simulate ``scenario`` into an in-memory bundle (deterministic for its seed).

    Raises:
        ValueError: when the scenario is inconsistent (unknown node, option, or
            a chain that needs more nodes or an NVSwitch platform).
    """
    sim = _Sim(scenario)
    result = _CHAIN_FUNCS[scenario.fault.chain](sim)
    end = result.end
    responsible = set(result.expected.responsible_nodes)

    def missing(stream: str, node: _Node) -> bool:
        names = scenario.missing.get(stream, [])  # type: ignore[call-overload]
        return "*" in names or node.name in names or (stream, node.name) in sim.forced_missing

    _split_suspects(result, _trusted_evidence(sim, missing))
    _noise(sim, end)
    for spec in scenario.out_of_window:
        _out_of_window(sim, spec, end, responsible)

    files: dict[str, str | bytes] = {}
    rng = sim.rng

    for stream, name in result.needs:
        if missing(stream, sim.by_name[name]):
            raise ValueError(
                f"scenario {scenario.name}: the {stream} log of {name} carries the root evidence "
                f"of chain {scenario.fault.chain}; removing it changes the honest answer (use "
                "chain peer_lost_no_evidence for a failure whose evidence is missing)"
            )

    for node in sim.nodes:
        entries = [
            ("kernel", node.kfile, _render_kernel),
            ("syslog", node.sfile, _render_syslog),
        ]
        if sim.has_fm:
            entries.append(("fabricmanager", "fabricmanager.log", _render_fm))
        for stream, fname, render in entries:
            if missing(stream, node):
                continue
            text = _join(render(sim, node))
            path = f"nodes/{node.name}/{fname}"
            if scenario.compress and rng.random() < scenario.compress:
                files[path + ".gz"] = gzip.compress(text.encode(), compresslevel=1, mtime=0)
            else:
                files[path] = text
    job_lines = sorted(sim.job_lines)
    if scenario.split_output:
        files["job/stdout.log"] = _join([x[2] for x in job_lines if not x[3]])
        files["job/stderr.log"] = _join([x[2] for x in job_lines if x[3]])
    else:
        files["job/stdout.log"] = _join([x[2] for x in job_lines])
    if sim.ctld_lines or scenario.slurmctld_log:
        sim.ctld(
            sim.t0 - 2,
            f"sched: Allocate JobId={sim.job_id} "
            f"NodeList={compress_hostlist(n.name for n in sim.nodes)} "
            f"#CPUs={len(sim.nodes) * 96} Partition=gpu",
        )
        sim.ctld(
            end,
            f"_job_complete: JobId={sim.job_id} "
            + (
                "WEXITSTATUS " + result.exit_code.split(":")[0]
                if result.state == "FAILED"
                else "done"
            ),
        )
        ctld = []
        for t, _s, msg in sorted(sim.ctld_lines):
            ctld.append(format_line("slurmctld", sim.local(t), msg))
        files["slurmctld.log"] = _join(ctld)

    start_local = datetime.fromtimestamp(sim.t0, sim.tz)
    end_local = datetime.fromtimestamp(end, sim.tz)
    job: dict[str, Any] = {
        "cluster": "sim",
        "job_id": str(sim.job_id),
        "name": "pretrain",
        "user": scenario.user,
        "uid": scenario.uid,
        "partition": "gpu",
        "state": result.state,
        "exit_code": result.exit_code,
        "nodes": compress_hostlist(n.name for n in sim.nodes),
        "start": start_local.strftime("%Y-%m-%dT%H:%M:%S"),
        "end": end_local.strftime("%Y-%m-%dT%H:%M:%S"),
        "time_limit": scenario.time_limit // 60,
        "work_dir": f"/home/{scenario.user}/run",
        "std_out": f"/home/{scenario.user}/run/slurm-{sim.job_id}.out",
    }
    if scenario.timezone != "UTC":
        job["timezone"] = scenario.timezone
    raw_boots = {
        n.name: datetime.fromtimestamp(n.boot + n.skew, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for n in sim.nodes
        if n.kfmt == "raw"
    }
    if raw_boots:
        job["boot_times"] = raw_boots
    job.update(result.extra_job)
    files["job.json"] = json.dumps(job, indent=2) + "\n"
    expected = result.expected
    exp_doc = expected.to_dict()
    exp_doc["simulated"] = {
        "scenario": scenario.name,
        "chain": scenario.fault.chain,
        "seed": scenario.seed,
    }
    files["expected.yaml"] = yaml.safe_dump(exp_doc, sort_keys=False, width=100, allow_unicode=True)
    return SimBundle(scenario.name, scenario, files, expected, job)


def write_bundle(scenario: Scenario | SimBundle, outdir: Path | str) -> Path:
    """Generate (if needed) and write one bundle into ``outdir`` (created; must be empty
    or absent). Returns the bundle directory."""
    bundle = scenario if isinstance(scenario, SimBundle) else generate(scenario)
    root = Path(outdir)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root}: not empty")
    for rel, content in bundle.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def load_scenarios(path: Path | str) -> list[Scenario]:
    """Read one scenario (a mapping) or several (a list, or ``scenarios: [...]``) from YAML.

    Raises:
        ValueError: on YAML or validation errors (the message names the file).
    """
    from pydantic import ValidationError

    from attribution._yaml import load_yaml_file
    from attribution.errors import RuleError

    p = Path(path)
    try:
        data, lines = load_yaml_file(p)
    except RuleError as exc:
        raise ValueError(str(exc)) from None
    prefix: tuple[str | int, ...] = ()
    if isinstance(data, dict) and "scenarios" in data:
        data, prefix = data["scenarios"], ("scenarios",)
    items: list[tuple[int | None, Any]]
    if isinstance(data, list):
        items = list(enumerate(data))
    else:
        items, prefix = [(None, data)], ()
    out = []
    for i, item in items:
        at = prefix + ((i,) if i is not None else ())
        where = f"{p}:{lines.line_for(list(at))}"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a scenario must be a mapping")
        try:
            out.append(Scenario.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = list(at) + list(first["loc"])
            field_name = ".".join(str(x) for x in first["loc"]) or "scenario"
            raise ValueError(
                f"{p}:{lines.line_for(loc)}: {field_name}: {first['msg']}"
                + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")
            ) from None
    return out


# --------------------------------------------------------------------- the sweep

# relative weights of the families in a sweep (clear causes dominate, as in production)
_SWEEP_WEIGHTS: dict[str, float] = {
    "gpu_fell_off_bus": 6,
    "gpu_memory_error": 5,
    "nvlink5_fault": 4,
    "nvswitch_fatal": 3,
    "fabric_manager_down": 3,
    "fabric_manager_restarted": 2,
    "ib_link_flap": 5,
    "ib_init_config": 2,
    "gpu_oom": 6,
    "cgroup_oom": 4,
    "node_oom": 2,
    "collective_straggler": 4,
    "collective_hang": 2,
    "rank_exception": 8,
    "rank_segfault": 3,
    "illegal_address": 3,
    "node_failure": 5,
    "preemption": 3,
    "time_limit": 4,
    "time_limit_hang": 2,
    "user_cancel": 3,
    "lustre_eviction": 3,
    "nfs_hang": 3,
    "gsp_timeout": 3,
    "nccl_shm": 3,
    "exit_unexplained": 2,
    "peer_lost_no_evidence": 2,
    "killed_unexplained": 1,
}

_OPTION_CHOICES: dict[str, list[dict[str, Any]]] = {
    "gpu_fell_off_bus": [{}, {"aer": False}, {"hang": True}],
    "gpu_memory_error": [
        {},
        {"containment": "uncontained", "remap": "failed"},
        {"containment": "uncontained", "remap": "none"},
        {"remap": "failed"},
    ],
    "nvlink5_fault": [{"code": 149}, {"code": 149}, {"code": 145}],
    "nvswitch_fatal": [{"sxid": 24007}, {"sxid": 12022}, {"sxid": 20034}],
    "ib_link_flap": [{}, {}, {"hca_fatal": True}, {"origin_logs": False}],
    "rank_exception": [{}, {}, {}, {"exception": "ModuleNotFoundError"}],
    "rank_segfault": [{}, {}, {"library": "libnccl"}],
    "node_failure": [
        {},
        {"evidence": "slurmctld"},
        {"evidence": "failed_node"},
        {"precursor": "mce"},
        {"precursor": "xid79"},
        {"precursor": "panic"},
    ],
    "user_cancel": [{}, {}, {"by": "admin"}],
    "gpu_oom": [{}, {}, {}, {"leftover_process": True}],
    "lustre_eviction": [{}, {}, {"nodes": 3}],
}

_SWEEP_PLATFORMS: list[Platform] = ["a100", "h100", "h100", "b200"]
_BLACKWELL: list[Platform] = ["b200", "gb200"]
_ZONES = ["UTC", "UTC", "UTC", "Europe/Berlin", "America/Chicago", "Asia/Tokyo"]


def _sweep_nodes(rng: random.Random, count: int) -> str:
    prefix = rng.choice(["gpu", "node", "dgx", "hgx-a", "nid"])
    width = rng.choice([3, 4]) if count < 1000 else 4
    pool = count + (rng.randrange(0, count // 2 + 1) if rng.random() < 0.3 else 0)
    base = rng.randrange(0, 200)
    nums = sorted(rng.sample(range(base, base + pool), count))
    return compress_hostlist(f"{prefix}{n:0{width}d}" for n in nums)


def sweep(n: int, seed: int) -> list[Scenario]:
    """``n`` varied scenarios drawn from ``seed`` (deterministic).

    Families are drawn by weight; node counts log-uniformly from 2 to 1,024;
    skew up to 20 s (sometimes 45 s); some nodes lose a source (never the
    root node's evidence, except in the families that are about missing
    evidence); red herrings (benign XID 63/92, boot flaps, errors from the day
    before) are mixed in.
    """
    rng = random.Random(seed)
    chains = list(_SWEEP_WEIGHTS)
    weights = [_SWEEP_WEIGHTS[c] for c in chains]
    out: list[Scenario] = []
    for i in range(n):
        chain = rng.choices(chains, weights)[0]
        # mostly small jobs (2-128 nodes, log-skewed), as on a real cluster; every 40th job
        # is a big one (256-1,024 nodes)
        if i % 40 == 12:
            count = rng.choice([256, 384, 512, 768, 1024])
        else:
            count = max(2, min(128, round(2 ** (1 + 6 * rng.random() ** 2))))
        if chain in ("ib_link_flap", "ib_init_config", "peer_lost_no_evidence"):
            count = max(count, 3)
        platform: Platform = rng.choice(_SWEEP_PLATFORMS)
        if chain == "nvlink5_fault":
            platform = rng.choice(_BLACKWELL)
        if chain in (
            "nvswitch_fatal",
            "fabric_manager_down",
            "fabric_manager_restarted",
        ) and platform not in (
            "a100",
            "h100",
            "b200",
        ):
            platform = "h100"
        nodes = _sweep_nodes(rng, count)
        names = expand_hostlist(nodes)
        options = dict(rng.choice(_OPTION_CHOICES.get(chain, [{}])))
        root = rng.choice(names)
        missing: dict[str, list[str]] = {}
        if rng.random() < 0.3 and len(names) > 2:
            victim = rng.choice([x for x in names if x != root])
            streams = ["syslog", "fabricmanager"] if options.get("nodes") else ["kernel", "syslog"]
            missing[rng.choice([*streams, "fabricmanager"])] = [victim]
        if chain == "peer_lost_no_evidence":
            missing["kernel"] = [*missing.get("kernel", []), root]
        if rng.random() < 0.1:
            missing["fabricmanager"] = ["*"]
        oow = []
        if rng.random() < 0.35:
            oow.append(
                OutOfWindowSpec(
                    signal=rng.choice(["xid79", "xid48", "nfs", "oom", "link_down", "sxid"]),
                    before_start=rng.choice([86400.0, 2 * 86400.0, 7200.0]),
                )
            )
        if rng.random() < 0.1:
            oow.append(OutOfWindowSpec(signal=rng.choice(["xid79", "oom"]), after_end=3600.0))
        month = rng.randrange(1, 13)
        start = datetime(
            2025,
            month,
            rng.randrange(1, 28),
            rng.randrange(0, 24),
            rng.randrange(60),
            rng.randrange(60),
            tzinfo=UTC,
        )
        skew_max = rng.choice([0.0, 2.0, 5.0, 10.0, 20.0]) if rng.random() < 0.9 else 45.0
        scenario = Scenario(
            name=f"sweep{seed}-{i:04d}-{chain.replace('_', '-')}",
            seed=rng.randrange(2**31),
            nodes=nodes,
            platform=platform,
            launcher=rng.choice(["torchrun", "torchrun", "srun"]),
            srun_label=rng.random() < 0.7,
            torch_style="new" if rng.random() < 0.8 else "old",
            split_output=rng.random() < 0.4,
            nccl_debug=(
                "WARN"
                if rng.random() < 0.25
                and not (chain == "ib_link_flap" and not options.get("origin_logs", True))
                else "INFO"
            ),
            start=start,
            timezone=rng.choice(_ZONES),
            time_limit=rng.choice([2, 4, 8, 24]) * 3600,
            pg_timeout=rng.choice([600, 600, 1800]),
            fault=FaultSpec(chain=chain, node=root, options=options),  # type: ignore[arg-type]
            noise=NoiseSpec(
                level=rng.choice(["low", "normal", "normal", "high"]) if count <= 64 else "low",
                benign_xid_nodes=1 if rng.random() < 0.25 else 0,
                boot_flap_nodes=1 if rng.random() < 0.2 else 0,
            ),
            skew=SkewSpec(max_seconds=skew_max),
            missing=missing,  # type: ignore[arg-type]
            out_of_window=oow,
            compress=0.1 if rng.random() < 0.3 else 0.0,
        )
        out.append(scenario)
    return out


def scenario_dict(scenario: Scenario) -> dict[str, Any]:
    """A scenario as plain data (YAML-ready), without defaults."""
    return scenario.model_dump(mode="json", exclude_defaults=True)
