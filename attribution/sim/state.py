"""The state of one simulation run: the job's nodes, ranks and clocks, the log lines every
producer has emitted so far (rendered into files at the end), and what the chain decided.

All times are UTC epoch seconds; a node's clock is true time + its skew, and local stamps
are rendered in the scenario's timezone, the way each producer prints them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from attribution import hostlist
from attribution.sim.formats import format_line
from attribution.sim.scenario import Scenario
from attribution.timeutil import zone

# --------------------------------------------------------------------- hardware and software

# PCI buses of the GPUs on common baseboards (bus numbers as lspci prints them).
GPU_BUSES: dict[str, list[str]] = {
    "a100": [f"0000:{b}:00" for b in ("07", "0f", "47", "4e", "87", "90", "b7", "bd")],
    "h100": [f"0000:{b}:00" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")],
    "b200": [f"0000:{b}:00" for b in ("1b", "43", "52", "61", "9d", "c3", "d1", "df")],
    "gb200": ["0008:01:00", "0009:01:00", "0018:01:00", "0019:01:00"],
}


NVSWITCH_BUSES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]

HCA_BUSES = ["0000:0c:00.0", "0000:1f:00.0", "0000:4a:00.0", "0000:5c:00.0"]

_KERNELS = ["5.15.0-105-generic", "5.14.0-427.13.1.el9_4.x86_64", "6.8.0-45-generic"]

_DRIVERS = ["535.183.01", "550.90.07", "560.35.03", "570.124.06"]

_NCCL_VERSIONS = ["2.18.5", "2.20.5", "2.21.5", "2.23.4"]

# a kernel "line" that renders as journalctl's "-- Boot <id> --" separator
BOOT_MARK = "\x00boot"


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
class Node:
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
class Result:
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


class Sim:
    """Mutable state of one generation run (private)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed)
        rng = self.rng
        self.tz = zone(sc.timezone)
        self.t0 = sc.start.timestamp()
        self.job_id = sc.job_id or rng.randrange(100000, 9999999)
        names = hostlist.expand(sc.nodes)
        self.gpus = sc.gpus_per_node or (4 if sc.platform == "gb200" else 8)
        self.rpn = self.gpus
        self.buses = GPU_BUSES[sc.platform][: self.gpus] + [
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
        self.nodes: list[Node] = []
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
                Node(
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

    def node_of(self, rank: int) -> Node:
        return self.nodes[rank // self.rpn]

    def ranks_of(self, node: Node) -> range:
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

    def node_named(self, name: str | None, *, avoid: Iterable[str] = ()) -> Node:
        if name is not None:
            if name not in self.by_name:
                raise ValueError(f"{name!r} is not one of the job's nodes ({self.sc.nodes})")
            return self.by_name[name]
        avoid_set = set(avoid)
        pool = [n for n in self.nodes if n.name not in avoid_set] or self.nodes
        return pool[self.rng.randrange(len(pool))]

    def sample_peers(self, exclude: Iterable[Node]) -> list[Node]:
        skip = {n.name for n in exclude}
        peers = [n for n in self.nodes if n.name not in skip]
        if len(peers) <= self.sc.peer_sample:
            return peers
        return sorted(self.rng.sample(peers, self.sc.peer_sample), key=lambda n: n.index)

    # ---------------------------------------------------------------- clocks and stamps

    def local(self, t: float, node: Node | None = None) -> datetime:
        skew = node.skew if node is not None else 0.0
        return datetime.fromtimestamp(t + skew, self.tz)

    def iso_local(self, t: float, node: Node | None = None) -> str:
        return self.local(t, node).strftime("%Y-%m-%dT%H:%M:%S")

    def bracket_stamp(self, t: float, node: Node | None = None) -> str:
        return format_line("torchrun_old", self.local(t, node), "").rstrip()

    # ---------------------------------------------------------------- node log emitters

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def kernel(self, node: Node, t: float, msg: str) -> None:
        node.kernel_lines.append((t, self.next_seq(), msg))

    def syslog(self, node: Node, t: float, ident: str, msg: str) -> None:
        node.syslog_lines.append((t, self.next_seq(), f"{ident}: {msg}"))

    def fm(self, node: Node, t: float, level: str, msg: str) -> None:
        node.fm_lines.append(
            (t, self.next_seq(), f"[{level}] [tid {node.pid_base % 9000 + 800}] {msg}")
        )

    def ctld(self, t: float, msg: str) -> None:
        self.ctld_lines.append((t, self.next_seq(), msg))

    # ---------------------------------------------------------------- job output emitters

    def out(self, t: float, text: str, *, err: bool = True, task: int | None = None) -> None:
        if task is not None and self.sc.srun_label:
            text = f"{task}: {text}"
        self.job_lines.append((t, self.next_seq(), text, err))

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

    def agent_log(self, node: Node, t: float, level: str, module: str, msg: str) -> None:
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
