"""Fleet-history simulator: weeks of Slurm GPU jobs on hundreds of nodes, with planted faults.

Test tooling for the fleet view (the ranking of nodes, links, switches, silent nodes and incidents
across many jobs). It was written blind to that detector, so that scoring the detector on its
output is honest. :func:`generate_fleet` builds the history in memory and :func:`write_fleet`
writes a fleet history directory:

``jobs.jsonl``
    One JSON object per job run (passed runs too, requeued runs under their own key), sorted by
    end time: ``key``, ``job_id``, ``user``, ``name``, ``partition``, ``nodes`` (a Slurm
    hostlist), ``start``/``end`` (``YYYY-MM-DDTHH:MM:SSZ``), ``state`` (Slurm's: COMPLETED,
    FAILED, NODE_FAIL, CANCELLED, TIMEOUT, OUT_OF_MEMORY and, in the preemptible partition,
    PREEMPTED), ``terminal_state`` (the verdict's: pass, fail, cancelled, timeout, preempted),
    ``sub_domain``, ``cause`` (a rule id of ``rules/diagnose``, ``unattributed``, or null for a
    pass), ``responsible`` (``{node, component, device}`` blamed on trusted node-side evidence),
    ``suspects`` (nodes only peer or job-output evidence names), ``links`` (``[reporter, peer]``
    from NCCL IB completion errors), ``gpu_errors`` (``{node, device, code, xid_class}``) and
    ``failed_node`` (scontrol's FailedNode, only for some NODE_FAIL runs). Every key is always
    present; the lists may be empty.
``node_events.jsonl``
    Slurm node state events as ``sacctmgr list events`` shows them: ``{node, at, state, reason,
    end}`` (``end`` is TimeEnd: when the node came back, null if it had not by the horizon).
``topology.conf``
    Slurm's topology/tree: one ``SwitchName=leafNN Nodes=...`` line per leaf switch and a spine
    ``SwitchName=spine1 Switches=leaf[..]``.
``truth.yaml``
    The ground truth (:class:`FleetTruth`): ``bad_nodes`` (with ``bad_gpus`` and
    ``bad_node_faults``: the bad GPU, HCA port or DIMM and the fault's rate), ``bad_links``
    (sorted pairs), ``bad_domains`` (leaf switches), ``silent_nodes``, ``buggy_users``,
    ``benign_xid_nodes`` (healthy nodes whose GPU logs benign XIDs: red herrings),
    ``incidents`` (``label``, ``kind``, ``at``, ``nodes``, ``jobs``: the run keys it ended),
    ``fault_runs`` (every planted fault, as ``node:``/``silent:``/``link:a-b``/``domain:``/
    ``user:`` plus its name, -> the keys of the runs it ended, whatever their verdict said; an
    empty list for a fault that never bit), ``spec`` (the :class:`FleetSpec`, seed included)
    and a ``summary`` of counts.

Every random choice comes from one ``random.Random(spec.seed)`` (sub-streams are seeded from it),
so a spec always produces byte-identical files. Times are whole UTC epoch seconds.

Assumptions, as an operator of a GPU cluster would make them:

* Nodes are exclusive (``OverSubscribe=EXCLUSIVE``): a node runs one job at a time, every job uses
  all of its GPUs, and an epilog of 5-30 s follows each job before the node takes the next.
* Submissions arrive as a Poisson process whose rate follows the working day (1.35x at
  14:00 UTC, 0.65x at 02:00) and drops to 0.7x at weekends; 12 runs per node and day on average
  keep the fleet about 60 % busy, saturated at busy hours. Users have habits: most run short
  single-node jobs, sweepers submit array jobs (tasks of one array start together and, with
  similar run times, end close together), some run 2-8 node jobs and a few 4-16 node jobs; each
  user has a usual time limit (so a few runs reach it), a cancel habit and an own rate of
  application failures (about 2-12 %).
* The scheduler is FIFO with backfill (the first 64 pending jobs are tried; a job waiting more
  than an hour holds the nodes back for itself), and it places a job the way topology/tree does:
  in the leaf switch with the fewest free nodes that still fit it, lowest-numbered nodes first.
  A job no leaf can hold waits up to 30 minutes for one (as ``--switches=1@30:00`` asks), then
  spans the leaves with the most free nodes. DOWN and DRAIN nodes take no new job.
* A failed job's verdict is decided once its run is known; a fault only ends a job if it fires
  before the job's own ending (the program's crash, the owner's cancel, the time limit).
* Planted node faults fire with a per-hour hazard while a job runs on the node, so long jobs are
  hit more often: a bad GPU (XID 79, 48, 94, 95 or 74 on one GPU; peers of a multi-node job
  then report IB errors naming it), a bad HCA port (mostly multi-node jobs: single-node jobs
  rarely touch the fabric), bad host memory (SIGBUS or a machine-check panic and NODE_FAIL).
  After a GPU or HCA fault the node health check drains the node for 1-8 h about half of the
  time; the fault is intermittent, so the node comes back still bad.
* A flapping link is a path problem between two nodes (a marginal cable or a bad route only
  their traffic takes; 80 % within one leaf): it bites only jobs holding both ends, and the
  verdict names both ends in ``links`` and the peer as a suspect, never a responsible node.
* A bad leaf switch makes multi-node jobs on its nodes fail: the nodes' own kernels log their
  ports going down (``ib-port-error``, an HCA of one of its nodes held responsible), or several
  ports go down together (``fabric-ports-down-together``), or NCCL times out between two of its
  nodes (``ib-retry-exceeded``): the blame is spread over many of its nodes.
* The silent cohort (one firmware batch, spread over racks) hangs without a word in any log:
  slurmctld marks the node DOWN "Not responding" after SlurmdTimeout (300 s) and the job ends
  NODE_FAIL; the node comes back after 1-4 h (an operator power-cycles it). Slurm names the
  FailedNode for about half of those jobs.
* Buggy users' code fails on whatever node it runs (mostly at start-up); their verdicts go through
  the application family's noise, so a few come out ambiguous with a suspect node or
  unattributed, never with a responsible node.
* Planted incidents are same-second common causes: a power event (a PDU feeding a run of
  consecutive nodes trips; slurmctld's ping sweep marks them all DOWN together and every job on
  them ends NODE_FAIL within 2 s) and a filesystem event (a Lustre metadata server fails over and
  evicts clients; jobs of many users fail with I/O errors within 2 s, a few nodes are drained
  "Kill task failed" for processes stuck in the kernel).
* Background: application failures, time limits, owner and admin cancels, preemption in the
  preemptible partition, a trickle of unattributed and ambiguous failures, rare one-off system
  software faults (GSP timeouts, Fabric Manager down), rare one-off GPU hardware faults and node
  crashes on random healthy nodes (a single XID 79 is not a bad node), healthy nodes whose GPU
  logs benign XIDs 92/63 on passing jobs (truth ``benign_xid_nodes``), and planned maintenance
  drains. NODE_FAIL runs are requeued 70 % of the time and preempted runs always (the next run of
  the same job id gets the next key).

The verdict noise model is measured, not guessed. ``uv run sattr simulate --sweep 120 --seed 1
/tmp/sw && uv run sattr backtest --json /tmp/sw`` and the same with ``--sweep 600 --seed 2``
(720 simulated bundles) give, per fleet family (the sweep chains in brackets), how many jobs the
engine got right (sub_domain exact or acceptable, responsible and suspect nodes equal to the
answer's), ambiguous, or otherwise (unattributed or wrong):

============  ======================================================  ====  =====  =========
family        sweep chains                                            jobs  right  ambiguous
============  ======================================================  ====  =====  =========
gpu           gpu_fell_off_bus, gpu_memory_error, nvlink5_fault        101    101          0
link          ib_link_flap (used for HCA, link and leaf faults)         42     42          0
node          node_failure (used for bad memory and power events)       39     39          0
silent        peer_lost_no_evidence (right: unattributed + suspect)     17      6         11
application   rank_exception, rank_segfault, illegal_address,          172    172          0
              gpu_oom, cgroup_oom
filesystem    lustre_eviction, nfs_hang                                 55     55          0
============  ======================================================  ====  =====  =========

The simulator's bundles were written by the rules' authors, so those are nearly perfect; a family
right on all n jobs is not right always, so every rate is Laplace-smoothed over the three outcomes
(right ``(k+1)/(n+3)``, ambiguous ``(a+1)/(n+3)``, the rest a miss), which keeps a
``1/(n+3)``-sized miss rate. ``noise="blind"`` uses the blind rounds instead
(``uv run sattr backtest --json tests/blind/round11`` ... ``round15``, 164 bundles rebuilt from
public failure reports, scored by expected sub_domain: hardware 18 jobs 12 right 0 ambiguous;
infrastructure 15/9/3; application 47/34/10; unattributed 10/4/2), closer to what real jobs
give. A verdict that misses becomes unattributed: no responsible node, no suspect, and for a GPU
fault no XIDs (the node's kernel log was not collected); an ambiguous verdict names the faulty
node as a suspect at most.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from attribution import hostlist

# --------------------------------------------------------------------- vocabulary

# the PCI bus ids of the eight GPUs of an HGX H100 board, in nvidia-smi's order
GPU_BUS_IDS: tuple[str, ...] = (
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
)
# the compute HCAs of a DGX H100 (the others are storage and management ports), port 1
HCA_PORTS: tuple[str, ...] = (
    "mlx5_0:1",
    "mlx5_3:1",
    "mlx5_4:1",
    "mlx5_5:1",
    "mlx5_6:1",
    "mlx5_9:1",
    "mlx5_10:1",
    "mlx5_11:1",
)
DIMMS: tuple[str, ...] = tuple(f"DIMM_{bank}{slot}" for bank in "ABCDEFGH" for slot in (1, 2))

APPLICATION_XIDS = frozenset({13, 31, 43})
HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})

SLURM_STATES: tuple[str, ...] = (
    "COMPLETED",
    "FAILED",
    "NODE_FAIL",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "PREEMPTED",
)
TERMINAL_STATE: dict[str, str] = {
    "COMPLETED": "pass",
    "FAILED": "fail",
    "NODE_FAIL": "fail",
    "OUT_OF_MEMORY": "fail",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "PREEMPTED": "preempted",
}
SUB_DOMAINS: tuple[str, ...] = (
    "hardware",
    "system_software",
    "infrastructure",
    "application",
    "ambiguous",
    "unattributed",
    "none",
)
COMPONENTS: tuple[str, ...] = ("gpu", "hca", "nic", "node", "memory", "nvlink", "filesystem")

SLURMD_TIMEOUT = 300  # seconds before slurmctld marks a silent node DOWN
BACKFILL_WINDOW = 64  # pending jobs tried per scheduling pass (bf_max_job_test-like)
RESERVE_AFTER = 3600  # a job pending this long holds back the nodes it needs
SWITCH_WAIT = 1800  # how long a multi-node job waits for one leaf switch before it spans leaves


def xid_class(code: int) -> str:
    """The class of an NVIDIA XID as the verdict store records it.

    Returns:
        ``"application"`` for XID 13/31/43, ``"hardware"`` for 48/63/64/74/79/92/94/95/119/120,
        ``"driver"`` for every other code.
    """
    if code in APPLICATION_XIDS:
        return "application"
    if code in HARDWARE_XIDS:
        return "hardware"
    return "driver"


# --------------------------------------------------------------------- noise model


@dataclass(frozen=True)
class NoiseRate:
    """How a verdict on a job that a fault of one family ended comes out."""

    right: float
    ambiguous: float

    @property
    def unattributed(self) -> float:
        """The rest: the verdict misses and comes out unattributed."""
        return max(0.0, 1.0 - self.right - self.ambiguous)


@dataclass(frozen=True)
class MeasuredFamily:
    """Counts measured by ``sattr backtest`` for one fleet family (see the module docstring)."""

    source: str
    jobs: int
    right: int
    ambiguous: int

    def rate(self) -> NoiseRate:
        """The Laplace-smoothed rates over right / ambiguous / miss.

        Returns:
            ``NoiseRate((right + 1) / (jobs + 3), (ambiguous + 1) / (jobs + 3))``.
        """
        n = self.jobs + 3
        return NoiseRate(right=(self.right + 1) / n, ambiguous=(self.ambiguous + 1) / n)


# `sattr simulate --sweep 120 --seed 1` + `--sweep 600 --seed 2`, then `sattr backtest --json`
SWEEP_MEASURED: dict[str, MeasuredFamily] = {
    "gpu": MeasuredFamily("gpu_fell_off_bus, gpu_memory_error, nvlink5_fault", 101, 101, 0),
    "link": MeasuredFamily("ib_link_flap", 42, 42, 0),
    "node": MeasuredFamily("node_failure", 39, 39, 0),
    "silent": MeasuredFamily("peer_lost_no_evidence", 17, 6, 11),
    "application": MeasuredFamily(
        "rank_exception, rank_segfault, illegal_address, gpu_oom, cgroup_oom", 172, 172, 0
    ),
    "filesystem": MeasuredFamily("lustre_eviction, nfs_hang", 55, 55, 0),
}

# `sattr backtest --json tests/blind/round11` ... `round15`, by expected sub_domain
BLIND_MEASURED: dict[str, MeasuredFamily] = {
    "gpu": MeasuredFamily("blind rounds 11-15, expected hardware", 18, 12, 0),
    "link": MeasuredFamily("blind rounds 11-15, expected infrastructure", 15, 9, 3),
    "node": MeasuredFamily("blind rounds 11-15, expected hardware", 18, 12, 0),
    "silent": MeasuredFamily("blind rounds 11-15, expected unattributed", 10, 4, 2),
    "application": MeasuredFamily("blind rounds 11-15, expected application", 47, 34, 10),
    "filesystem": MeasuredFamily("blind rounds 11-15, expected infrastructure", 15, 9, 3),
}

# the fault kinds of the fleet -> the measured family whose rates judge their verdicts
FAULT_FAMILY: dict[str, str] = {
    "gpu": "gpu",
    "hca": "link",
    "memory": "node",
    "link": "link",
    "switch": "link",
    "silent": "silent",
    "application": "application",
    "power": "node",
    "filesystem": "filesystem",
}

NOISE_PROFILES: dict[str, dict[str, MeasuredFamily]] = {
    "sweep": SWEEP_MEASURED,
    "blind": BLIND_MEASURED,
}


def noise_rates(profile: str) -> dict[str, NoiseRate]:
    """The verdict noise of every fault kind under a measured profile.

    Args:
        profile: ``"sweep"`` (the simulator sweep, the default) or ``"blind"`` (blind rounds).

    Returns:
        fault kind (``gpu``, ``hca``, ``memory``, ``link``, ``switch``, ``silent``,
        ``application``, ``power``, ``filesystem``) -> its :class:`NoiseRate`.

    Raises:
        ValueError: for an unknown profile.
    """
    if profile not in NOISE_PROFILES:
        raise ValueError(f"unknown noise profile {profile!r}: use one of {sorted(NOISE_PROFILES)}")
    measured = NOISE_PROFILES[profile]
    return {kind: measured[family].rate() for kind, family in FAULT_FAMILY.items()}


# --------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Rates of planted faults are per hour of a job on the node, drawn per
    fault from the ``(low, high)`` range; counts are how many to plant."""

    seed: int = 1
    nodes: int = 256
    node_prefix: str = "gpu"
    gpus_per_node: int = 8
    nodes_per_leaf: int = 16
    partitions: tuple[str, ...] = ("gpu", "preempt")
    users: int = 60
    days: float = 14.0
    start: str = "2026-11-02T00:00:00Z"
    jobs_per_node_day: float = 12.0
    max_job_nodes: int = 16
    bad_gpu_nodes: int = 4
    bad_hca_nodes: int = 2
    bad_memory_nodes: int = 1
    bad_links: int = 3
    bad_leaves: int = 1
    silent_nodes: int = 4
    buggy_users: int = 3
    incidents: int = 2
    incident_nodes: int = 20
    benign_xid_nodes: int = 3
    gpu_fault_per_hour: tuple[float, float] = (0.02, 0.08)
    hca_fault_per_hour: tuple[float, float] = (0.04, 0.12)
    memory_fault_per_hour: tuple[float, float] = (0.02, 0.06)
    link_fault_per_hour: tuple[float, float] = (0.6, 1.5)
    leaf_fault_per_hour: float = 0.12
    silent_hang_per_hour: tuple[float, float] = (0.02, 0.05)
    buggy_fail_fraction: tuple[float, float] = (0.45, 0.75)
    noise: str = "sweep"

    def __post_init__(self) -> None:
        """Check that the planted faults fit the fleet.

        Raises:
            ValueError: when a count or size does not fit.
        """
        if self.nodes < 2 or self.nodes_per_leaf < 2 or self.gpus_per_node < 1:
            raise ValueError("need at least 2 nodes, 2 nodes per leaf and 1 GPU per node")
        if self.users < 1 or self.days <= 0 or self.jobs_per_node_day <= 0:
            raise ValueError("users, days and jobs_per_node_day must be positive")
        if not self.partitions:
            raise ValueError("need at least one partition")
        planted = (
            self.bad_gpu_nodes
            + self.bad_hca_nodes
            + self.bad_memory_nodes
            + self.silent_nodes
            + self.benign_xid_nodes
        )
        if planted + 2 * self.bad_links > self.nodes:
            raise ValueError(f"{planted} planted nodes and {self.bad_links} links need more nodes")
        if self.bad_leaves > math.ceil(self.nodes / self.nodes_per_leaf):
            raise ValueError("more bad leaves than leaves")
        if self.buggy_users > self.users:
            raise ValueError("more buggy users than users")
        if self.incident_nodes > self.nodes:
            raise ValueError("an incident cannot take more nodes than the fleet has")
        if self.max_job_nodes < 1:
            raise ValueError("max_job_nodes must be at least 1")
        noise_rates(self.noise)  # raises on an unknown profile
        _parse_time(self.start)

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain YAML/JSON data (tuples as lists).

        Returns:
            field name -> value.
        """
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


# --------------------------------------------------------------------- the truth


@dataclass
class Incident:
    """A planted same-time common-cause event and the job runs it ended."""

    label: str
    kind: str
    at: str
    nodes: str
    jobs: list[str] = field(default_factory=list)


@dataclass
class FleetTruth:
    """The ground truth beside a fleet history."""

    bad_nodes: list[str]
    bad_gpus: list[dict[str, str]]
    bad_node_faults: list[dict[str, Any]]
    bad_links: list[list[str]]
    bad_domains: list[str]
    silent_nodes: list[str]
    buggy_users: list[str]
    benign_xid_nodes: list[str]
    incidents: list[Incident]
    fault_runs: dict[str, list[str]]
    spec: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The truth as plain data, in ``truth.yaml``'s key order.

        Returns:
            key -> value.
        """
        return asdict(self)


@dataclass
class FleetHistory:
    """A generated fleet history in memory (what :func:`write_fleet` writes)."""

    jobs: list[dict[str, Any]]
    node_events: list[dict[str, Any]]
    topology: str
    truth: FleetTruth

    def files(self) -> dict[str, str]:
        """The four files of a fleet history directory.

        Returns:
            file name -> content.
        """
        return {
            "jobs.jsonl": "".join(json.dumps(j) + "\n" for j in self.jobs),
            "node_events.jsonl": "".join(json.dumps(e) + "\n" for e in self.node_events),
            "topology.conf": self.topology,
            "truth.yaml": yaml.safe_dump(
                self.truth.as_dict(), sort_keys=False, width=100, allow_unicode=True
            ),
        }


# --------------------------------------------------------------------- internals


def _parse_time(text: str) -> int:
    """``YYYY-MM-DDTHH:MM:SSZ`` -> epoch seconds.

    Raises:
        ValueError: when the text is no such time.
    """
    dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return int(dt.timestamp())


@functools.lru_cache(maxsize=4096)
def _date(day: int) -> str:
    """Days since the epoch -> ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))


def _iso(t: int) -> str:
    """Epoch seconds -> ``YYYY-MM-DDTHH:MM:SSZ``."""
    day, sec = divmod(int(t), 86400)
    hour, rest = divmod(sec, 3600)
    minute, second = divmod(rest, 60)
    return f"{_date(day)}T{hour:02d}:{minute:02d}:{second:02d}Z"


class _Rng(random.Random):
    """``random.Random`` with a cheaper ``randint`` (one ``random()`` draw; the simulator's
    ranges are small, so its bias is far below anything a test could see)."""

    def randint(self, a: int, b: int) -> int:
        return a + int(self.random() * (b - a + 1))


@dataclass
class _User:
    name: str
    kind: str
    weight: float
    sizes: tuple[int, ...]
    size_weights: tuple[float, ...]
    median_s: float
    limit_s: int
    array_prob: float
    partition: str
    app_fail: float
    cancel: float
    names: tuple[str, ...]
    buggy: bool = False


@dataclass
class _Job:
    idx: int
    job_id: str
    user: int
    name: str
    partition: str
    size: int
    runtime: int
    limit: int
    submit: int
    run: int = 0
    nodes: list[int] = field(default_factory=list)
    start: int = 0
    end: int = 0
    epilog: int = 0
    version: int = 0
    outcome: _Outcome | None = None


@dataclass
class _Outcome:
    state: str
    sub_domain: str
    cause: str | None
    kind: str = "background"
    responsible: list[dict[str, str | None]] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)
    links: list[list[str]] = field(default_factory=list)
    gpu_errors: list[dict[str, Any]] = field(default_factory=list)
    failed_node: str | None = None
    # (node index, state, reason, outage seconds) applied when the run ends
    node_events: list[tuple[int, str, str, int]] = field(default_factory=list)
    requeue: bool = False
    incident: int | None = None
    fault: str | None = None  # the planted fault that ended the run (truth's fault_jobs key)


@dataclass
class _NodeFault:
    kind: str  # gpu | hca | memory | silent | benign
    per_hour: float
    gpu: int = 0
    code: int = 0
    port: str = ""
    dimm: str = ""


_KIND_SPECS: dict[str, dict[str, Any]] = {
    # sizes, size weights, run-time median range (minutes), array probability, job names
    "small": {
        "sizes": (1, 2),
        "weights": (0.96, 0.04),
        "median": (3.0, 90.0),
        "array": 0.05,
        "names": ("train", "finetune", "eval", "inference", "preprocess", "debug", "notebook"),
    },
    "sweeper": {
        "sizes": (1,),
        "weights": (1.0,),
        "median": (5.0, 45.0),
        "array": 0.6,
        "names": ("sweep-lr", "hpo-trial", "eval-ckpt", "ablation"),
    },
    "medium": {
        "sizes": (1, 2, 4, 8),
        "weights": (0.7, 0.15, 0.1, 0.05),
        "median": (15.0, 150.0),
        "array": 0.05,
        "names": ("train-vit", "finetune-llm", "ddp-train", "diffusion", "nccl-tests"),
    },
    "big": {
        "sizes": (2, 4, 8, 16),
        "weights": (0.25, 0.35, 0.28, 0.12),
        "median": (30.0, 240.0),
        "array": 0.0,
        "names": ("train-llm", "pretrain", "megatron-gpt", "moe-train"),
    },
}
_KIND_SHARE = (("small", 0.45), ("sweeper", 0.15), ("medium", 0.3), ("big", 0.1))
_RUNTIME_SIGMA = 0.8

# background application failures: (cause, Slurm state, weight)
_APP_CAUSES: tuple[tuple[str, str, float], ...] = (
    ("python-error", "FAILED", 34),
    ("python-missing-module", "FAILED", 10),
    ("cuda-out-of-memory", "FAILED", 18),
    ("job-memory-limit", "OUT_OF_MEMORY", 10),
    ("illegal-memory-access", "FAILED", 8),
    ("program-crashed", "FAILED", 8),
    ("device-side-assert", "FAILED", 5),
    ("file-not-found", "FAILED", 4),
    ("nccl-misuse", "FAILED", 3),
)
_APP_STATE: dict[str, str] = {cause: state for cause, state, _ in _APP_CAUSES}
_APP_CAUSE_IDS: tuple[str, ...] = tuple(cause for cause, _, _ in _APP_CAUSES)
_APP_CAUSE_CUM: list[float] = list(itertools.accumulate(w for _, _, w in _APP_CAUSES))
_AMBIGUOUS_CAUSE: dict[str, str] = {
    "gpu": "hang-with-gpu-errors",
    "hca": "collective-hang",
    "link": "collective-hang",
    "switch": "collective-hang",
    "memory": "killed-unexplained",
    "silent": "killed-unexplained",
    "power": "killed-unexplained",
    "application": "killed-unexplained",
    "filesystem": "hang-before-time-limit",
}
_GPU_FAULT_CAUSE: dict[int, tuple[str, str]] = {
    79: ("gpu-fell-off-bus", "gpu"),
    48: ("gpu-uncorrectable-memory", "gpu"),
    94: ("gpu-contained-error", "gpu"),
    95: ("gpu-uncorrectable-memory", "gpu"),
    74: ("nvlink-fault", "nvlink"),
}
# an XID the driver logs right after the fault's own, with how often
_GPU_FOLLOW_UP: dict[int, tuple[int, float]] = {
    79: (45, 0.6),
    48: (63, 0.5),
    95: (64, 0.4),
    94: (63, 0.3),
    74: (45, 0.3),
}

_EV_INCIDENT, _EV_END, _EV_UNBLOCK, _EV_BLOCK, _EV_SUBMIT = range(5)


class _Sim:
    """One fleet run: planting, arrivals, scheduling and verdicts."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        root = random.Random(spec.seed)
        self.plant_rng = _Rng(root.getrandbits(64))
        self.arrival_rng = _Rng(root.getrandbits(64))
        self.rng = _Rng(root.getrandbits(64))
        self.t0 = _parse_time(spec.start)
        self.horizon = self.t0 + int(spec.days * 86400)
        self.rates = noise_rates(spec.noise)

        width = max(3, len(str(spec.nodes)))
        self.names = [f"{spec.node_prefix}{i + 1:0{width}d}" for i in range(spec.nodes)]
        npl = spec.nodes_per_leaf
        self.nleaves = math.ceil(spec.nodes / npl)
        lwidth = max(2, len(str(self.nleaves)))
        self.leaf_names = [f"leaf{i + 1:0{lwidth}d}" for i in range(self.nleaves)]
        self.leaf_of = [i // npl for i in range(spec.nodes)]
        self.gpu_ids = list(GPU_BUS_IDS[: spec.gpus_per_node]) + [
            f"0000:{0xE0 + i:02x}:00.0" for i in range(max(0, spec.gpus_per_node - 8))
        ]

        # scheduler state
        self.free: list[set[int]] = [set() for _ in range(self.nleaves)]
        for i in range(spec.nodes):
            self.free[self.leaf_of[i]].add(i)
        self.by_count: list[set[int]] = [set() for _ in range(npl + 1)]
        for li in range(self.nleaves):
            self.by_count[len(self.free[li])].add(li)
        self.nfree = spec.nodes
        self.busy = [-1] * spec.nodes
        self.blocked_until = [0] * spec.nodes
        self.pending: list[_Job] = []
        self.running: dict[int, _Job] = {}
        self.jobs: list[_Job] = []
        self.arrivals: list[_Job] = []  # first submissions, in time order (requeues use events)
        self.events: list[tuple[int, int, int, int, int]] = []
        self.seq = 0
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        self.node_events: list[dict[str, Any]] = []
        self.hostlists: dict[tuple[int, ...], str] = {}
        self.fault_runs: dict[str, list[str]] = {}

        self.users: list[_User] = []
        self.node_faults: dict[int, _NodeFault] = {}
        self.bad_links: dict[frozenset[int], float] = {}
        self.bad_leaves: set[int] = set()
        self.incidents: list[Incident] = []
        self.incident_plan: list[tuple[int, str, list[int]]] = []
        self._plant()

    # ----------------------------------------------------------------- planting

    def _plant(self) -> None:
        spec, rng = self.spec, self.plant_rng
        uwidth = max(2, len(str(spec.users)))
        kinds = [k for k, _ in _KIND_SHARE]
        shares = [s for _, s in _KIND_SHARE]
        for u in range(spec.users):
            kind = rng.choices(kinds, shares)[0]
            ks = _KIND_SPECS[kind]
            lo, hi = ks["median"]
            median = 60.0 * math.exp(rng.uniform(math.log(lo), math.log(hi)))
            limit_h = min(24, max(1, math.ceil(median * rng.uniform(3.0, 8.0) / 3600)))
            part = spec.partitions[0]
            if len(spec.partitions) > 1 and rng.random() < 0.2:
                part = rng.choice(spec.partitions[1:])
            weight = rng.lognormvariate(0.0, 1.0) * (0.35 if kind == "big" else 1.0)
            self.users.append(
                _User(
                    name=f"u{u + 1:0{uwidth}d}",
                    kind=kind,
                    weight=weight,
                    sizes=tuple(s for s in ks["sizes"] if s <= spec.max_job_nodes) or (1,),
                    size_weights=tuple(
                        w
                        for s, w in zip(ks["sizes"], ks["weights"], strict=True)
                        if s <= spec.max_job_nodes
                    )
                    or (1.0,),
                    median_s=median,
                    limit_s=limit_h * 3600,
                    array_prob=ks["array"],
                    partition=part,
                    app_fail=rng.uniform(0.02, 0.12),
                    cancel=rng.uniform(0.02, 0.07),
                    names=tuple(rng.sample(ks["names"], min(3, len(ks["names"])))),
                )
            )
        typical = sorted(u.weight for u in self.users)[len(self.users) // 2]
        for u in rng.sample(range(spec.users), spec.buggy_users):
            self.users[u].buggy = True
            # a broken script is resubmitted, not run by the thousand: a typical user's activity
            self.users[u].weight = min(self.users[u].weight, typical)
            self.users[u].app_fail = rng.uniform(*spec.buggy_fail_fraction)

        counts = (
            ("gpu", spec.bad_gpu_nodes),
            ("hca", spec.bad_hca_nodes),
            ("memory", spec.bad_memory_nodes),
            ("silent", spec.silent_nodes),
            ("benign", spec.benign_xid_nodes),
        )
        picked = rng.sample(range(spec.nodes), sum(c for _, c in counts))
        pos = 0
        for kind, count in counts:
            for node in picked[pos : pos + count]:
                fault = _NodeFault(kind=kind, per_hour=0.0)
                if kind == "gpu":
                    fault.per_hour = rng.uniform(*spec.gpu_fault_per_hour)
                    fault.gpu = rng.randrange(spec.gpus_per_node)
                    fault.code = rng.choice([79, 79, 48, 95, 94, 74])
                elif kind == "hca":
                    fault.per_hour = rng.uniform(*spec.hca_fault_per_hour)
                    fault.port = rng.choice(HCA_PORTS)
                elif kind == "memory":
                    fault.per_hour = rng.uniform(*spec.memory_fault_per_hour)
                    fault.dimm = rng.choice(DIMMS)
                elif kind == "silent":
                    fault.per_hour = rng.uniform(*spec.silent_hang_per_hour)
                else:
                    fault.per_hour = rng.uniform(0.2, 0.4)  # chance per job of a benign XID
                    fault.gpu = rng.randrange(spec.gpus_per_node)
                    fault.code = rng.choice([92, 63])
                self.node_faults[node] = fault
            pos += count

        self.bad_leaves = set(rng.sample(range(self.nleaves), spec.bad_leaves))
        clean = [
            i
            for i in range(spec.nodes)
            if i not in self.node_faults and self.leaf_of[i] not in self.bad_leaves
        ]
        by_leaf: dict[int, list[int]] = {}
        for i in clean:
            by_leaf.setdefault(self.leaf_of[i], []).append(i)
        used: set[int] = set()
        for _ in range(spec.bad_links):
            pair: tuple[int, int] | None = None
            for _attempt in range(200):
                if rng.random() < 0.8 or self.nleaves == 1:
                    leaf = rng.choice(sorted(by_leaf))
                    cands = [i for i in by_leaf[leaf] if i not in used]
                    if len(cands) >= 2:
                        a, b = rng.sample(cands, 2)
                        pair = (a, b)
                else:
                    cands = [i for i in clean if i not in used]
                    a = rng.choice(cands)
                    near = [i for i in cands if abs(self.leaf_of[i] - self.leaf_of[a]) == 1]
                    if near:
                        pair = (a, rng.choice(near))
                if pair is not None:
                    break
            if pair is None:
                raise ValueError("could not place every bad link on clean nodes")
            used.update(pair)
            self.bad_links[frozenset(pair)] = rng.uniform(*spec.link_fault_per_hour)

        # incidents: a power event, then a filesystem event, alternating
        span = self.horizon - self.t0
        lo = self.t0 + (2 * 86400 if span >= 4 * 86400 else span // 4)
        hi = self.horizon - (86400 if span >= 4 * 86400 else span // 4)
        for k in range(spec.incidents):
            kind = "power" if k % 2 == 0 else "filesystem"
            at = rng.randrange(lo, max(lo + 1, hi))
            if kind == "power":
                first = rng.randrange(0, spec.nodes - spec.incident_nodes + 1)
                nodes = list(range(first, first + spec.incident_nodes))
            else:
                nodes = []
            self.incident_plan.append((at, kind, nodes))
        self.incident_plan.sort(key=lambda p: p[0])
        self.incidents = [
            Incident(label=k, kind=k, at=_iso(at), nodes="") for at, k, _ in self.incident_plan
        ]

    # ----------------------------------------------------------------- arrivals

    def _arrivals(self) -> None:
        """Draw every submission of the window and queue their SUBMIT events."""
        spec, rng = self.spec, self.arrival_rng
        weights = [u.weight for u in self.users]
        total_w = sum(weights)
        population = range(len(self.users))
        cum_users = list(itertools.accumulate(weights))
        cum_sizes = [list(itertools.accumulate(u.size_weights)) for u in self.users]
        # expected runs per submission, to turn the job rate into a submission rate
        tasks = 0.0
        for usr in self.users:
            tasks += usr.weight / total_w * (1.0 + usr.array_prob * 31.5)  # arrays: 5-60 tasks
        jobs_per_s = spec.jobs_per_node_day * spec.nodes / 86400.0
        base = jobs_per_s / tasks / 0.914  # the mean of the day/week modulation: (5 + 0.7 * 2) / 7
        peak = base * 1.5
        t = float(self.t0)
        next_id = 100000
        while True:
            t += rng.expovariate(peak)
            if t >= self.horizon:
                break
            hour = (t % 86400.0) / 3600.0
            mod = 1.0 + 0.35 * math.sin(2 * math.pi * (hour - 8.0) / 24.0)
            if (int(t // 86400) + 3) % 7 >= 5:  # 1970-01-01 was a Thursday (weekday 3)
                mod *= 0.7
            if rng.random() * 1.5 > mod:
                continue
            u = rng.choices(population, cum_weights=cum_users)[0]
            user = self.users[u]
            size = rng.choices(user.sizes, cum_weights=cum_sizes[u])[0]
            name = rng.choice(user.names)
            submit = int(t)
            if rng.random() < user.array_prob:
                count = rng.randint(5, 60)
                base_rt = rng.lognormvariate(math.log(user.median_s), _RUNTIME_SIGMA)
                for task in range(count):
                    runtime = max(60, int(base_rt * rng.uniform(0.9, 1.1)))
                    self._submit_new(f"{next_id}_{task}", u, name, 1, runtime, submit)
            else:
                runtime = max(60, int(rng.lognormvariate(math.log(user.median_s), _RUNTIME_SIGMA)))
                self._submit_new(str(next_id), u, name, size, runtime, submit)
            next_id += rng.randint(1, 3)  # other clusters' or held jobs take ids too

    def _submit_new(self, job_id: str, u: int, name: str, size: int, runtime: int, t: int) -> None:
        user = self.users[u]
        job = _Job(
            idx=len(self.jobs),
            job_id=job_id,
            user=u,
            name=name,
            partition=user.partition,
            size=size,
            runtime=runtime,
            limit=user.limit_s,
            submit=t,
        )
        self.jobs.append(job)
        self.arrivals.append(job)

    def _push(self, t: int, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    # ----------------------------------------------------------------- node pool

    def _take(self, n: int) -> None:
        li = self.leaf_of[n]
        fs = self.free[li]
        if n in fs:
            self.by_count[len(fs)].discard(li)
            fs.discard(n)
            self.by_count[len(fs)].add(li)
            self.nfree -= 1

    def _give(self, n: int) -> None:
        li = self.leaf_of[n]
        fs = self.free[li]
        if n not in fs:
            self.by_count[len(fs)].discard(li)
            fs.add(n)
            self.by_count[len(fs)].add(li)
            self.nfree += 1

    def _place(self, size: int, span: bool = True) -> list[int] | None:
        """The nodes topology/tree would pick, or None when too few are free (or, with
        ``span=False``, when no one leaf switch has ``size`` free nodes)."""
        if size > self.nfree:
            return None
        npl = self.spec.nodes_per_leaf
        if size <= npl:
            for c in range(size, npl + 1):
                if self.by_count[c]:
                    leaf = min(self.by_count[c])
                    return sorted(self.free[leaf])[:size]
            if not span:
                return None
        out: list[int] = []
        order = sorted(range(self.nleaves), key=lambda li: (-len(self.free[li]), li))
        for li in order:
            need = size - len(out)
            if need <= 0:
                break
            out.extend(sorted(self.free[li])[:need])
        return sorted(out)

    def _block(self, n: int, until: int, now: int) -> None:
        if until <= now:
            return
        if until > self.blocked_until[n]:
            self.blocked_until[n] = until
            self._push(until, _EV_UNBLOCK, n)
        self._take(n)

    def _event(self, n: int, at: int, state: str, reason: str, until: int) -> None:
        self.node_events.append(
            {
                "node": self.names[n],
                "at": _iso(at),
                "state": state,
                "reason": reason,
                "end": _iso(until) if until <= self.horizon else None,
            }
        )

    # ----------------------------------------------------------------- scheduling

    def _schedule(self, t: int) -> None:
        if not self.pending or self.nfree == 0 or t > self.horizon:
            return
        started: list[int] = []
        for i, job in enumerate(self.pending):
            if i >= BACKFILL_WINDOW or self.nfree == 0:
                break
            # like --switches=1@30:00: a job waits up to SWITCH_WAIT for one leaf switch
            span = t - job.submit >= SWITCH_WAIT
            nodes = self._place(job.size, span) if job.size <= self.nfree else None
            if nodes is None:
                if t - job.submit > RESERVE_AFTER:
                    break  # it holds the nodes back for itself
                continue
            self._start(job, nodes, t)
            started.append(i)
        for i in reversed(started):
            del self.pending[i]

    def _start(self, job: _Job, nodes: list[int], t: int) -> None:
        job.nodes = nodes
        job.start = t
        for n in nodes:
            self._take(n)
            self.busy[n] = job.idx
        end, outcome = self._plan(job)
        job.end = end
        job.outcome = outcome
        job.epilog = self.rng.randint(5, 30)
        job.version += 1
        self.running[job.idx] = job
        self._push(end + job.epilog, _EV_END, job.idx, job.version)

    def _finish(self, job: _Job, now: int) -> None:
        """The run's epilog is over (``now``): record the run, apply its node events, free its
        nodes and requeue it when Slurm would."""
        del self.running[job.idx]
        outcome = job.outcome
        assert outcome is not None
        t = job.end
        if t > self.horizon:
            return
        self._record(job, outcome)
        for node, state, reason, outage in outcome.node_events:
            self._event(node, t, state, reason, t + outage)
            self._block(node, t + outage, now)
        for n in job.nodes:
            self.busy[n] = -1
            if self.blocked_until[n] <= now:
                self._give(n)
        if outcome.requeue and job.run < 3:
            again = _Job(
                idx=len(self.jobs),
                job_id=job.job_id,
                user=job.user,
                name=job.name,
                partition=job.partition,
                size=job.size,
                runtime=job.runtime,
                limit=job.limit,
                submit=t + self.rng.randint(30, 120),
                run=job.run + 1,
            )
            self.jobs.append(again)
            self._push(again.submit, _EV_SUBMIT, again.idx)

    def _unblock(self, n: int, t: int) -> None:
        if self.busy[n] == -1 and self.blocked_until[n] <= t:
            self._give(n)

    def _maintenance(self) -> None:
        """Planned drains: a node now and then goes to maintenance for 1-3 h."""
        rng = self.plant_rng
        days = max(1, int(self.spec.days))
        for n in range(self.spec.nodes):
            for d in range(days):
                if rng.random() < 0.004:
                    at = self.t0 + d * 86400 + rng.randrange(8 * 3600, 17 * 3600)
                    if at < self.horizon:
                        self._push(at, _EV_BLOCK, n, rng.randint(3600, 3 * 3600))

    def run(self) -> None:
        """Run the event loop up to the horizon."""
        self._maintenance()
        for i, (at, _kind, _nodes) in enumerate(self.incident_plan):
            self._push(at, _EV_INCIDENT, i)
        self._arrivals()
        arrivals, ai = self.arrivals, 0
        events = self.events
        while True:
            if ai < len(arrivals) and (not events or arrivals[ai].submit < events[0][0]):
                job = arrivals[ai]
                ai += 1
                self.pending.append(job)
                self._schedule(job.submit)
                continue
            if not events:
                break
            t, kind, _seq, a, b = heapq.heappop(events)
            if t > self.horizon + 60:  # past every epilog of a run that ended in the window
                break
            if kind == _EV_SUBMIT:
                self.pending.append(self.jobs[a])
            elif kind == _EV_END:
                job = self.jobs[a]
                if job.version != b or a not in self.running:
                    continue  # superseded by an incident
                self._finish(job, t)
            elif kind == _EV_UNBLOCK:
                self._unblock(a, t)
            elif kind == _EV_BLOCK:
                reason = self.rng.choice(
                    ["maint: firmware update", "maint: reboot for kernel update", "maint: reseat"]
                )
                self._event(a, t, "DRAIN", reason, t + b)
                self._block(a, t + b, t)
            else:
                self._incident(a, t)
            self._schedule(t)

    # ----------------------------------------------------------------- verdicts

    def _plan(self, job: _Job) -> tuple[int, _Outcome]:
        """Decide how the run ends: its own ending, or a fault that fires first."""
        end, outcome = self._background(job)
        rng = self.rng
        best: tuple[int, str, int, int] | None = None  # (end, kind, node, other)
        run_s = end - job.start
        hours = run_s / 3600.0
        multi = len(job.nodes) > 1
        for n in job.nodes:
            fault = self.node_faults.get(n)
            if fault is not None and fault.kind != "benign":
                rate = fault.per_hour
                if fault.kind == "hca" and not multi:
                    rate *= 0.1  # a single-node job rarely touches the fabric
                fire = self._fire(rate, hours)
                if fire is not None:
                    delay = self._delay(fault.kind)
                    at = job.start + int(fire * 3600) + delay
                    if at < end and (best is None or at < best[0]):
                        best = (at, fault.kind, n, -1)
            # rare one-off faults on any node
            if rng.random() < 0.0001 * hours:
                at = job.start + rng.randint(1, max(1, run_s - 1))
                if at < end and (best is None or at < best[0]):
                    best = (at, "oneoff_gpu", n, -1)
            if rng.random() < 0.00003 * hours:
                at = job.start + rng.randint(1, max(1, run_s - 1)) + SLURMD_TIMEOUT
                if at < end and (best is None or at < best[0]):
                    best = (at, "oneoff_crash", n, -1)
        if multi:
            if self.bad_links:
                held = set(job.nodes)
                for pair, rate in self.bad_links.items():
                    if pair <= held:
                        fire = self._fire(rate, hours)
                        if fire is not None:
                            at = job.start + int(fire * 3600) + self._delay("link")
                            a, b = sorted(pair)
                            if at < end and (best is None or at < best[0]):
                                best = (at, "link", a, b)
            for leaf in self.bad_leaves:
                inside = [n for n in job.nodes if self.leaf_of[n] == leaf]
                if len(inside) >= 2:
                    fire = self._fire(self.spec.leaf_fault_per_hour, hours)
                    if fire is not None:
                        at = job.start + int(fire * 3600) + self._delay("switch")
                        if at < end and (best is None or at < best[0]):
                            best = (at, "switch", leaf, -1)
        if best is None:
            return end, outcome
        at, kind, a, b = best
        outcome = self._fault_outcome(job, kind, a, b)
        if kind in ("gpu", "hca", "memory"):
            outcome.fault = f"node:{self.names[a]}"
        elif kind == "silent":
            outcome.fault = f"silent:{self.names[a]}"
        elif kind == "link":
            outcome.fault = f"link:{self.names[a]}-{self.names[b]}"
        elif kind == "switch":
            outcome.fault = f"domain:{self.leaf_names[a]}"
        return at, outcome

    def _fire(self, per_hour: float, hours: float) -> float | None:
        """When (hours into the run) a hazard fires, or None if not within ``hours``."""
        if per_hour <= 0.0:
            return None
        x = self.rng.expovariate(per_hour)
        return x if x < hours else None

    def _delay(self, kind: str) -> int:
        """Seconds between a fault and the job's end."""
        rng = self.rng
        if kind in ("gpu", "memory"):
            return rng.randint(2, 90)
        if kind in ("hca", "link", "switch"):
            return rng.choice([rng.randint(5, 120), rng.randint(600, 1800)])  # IB error or watchdog
        return SLURMD_TIMEOUT + rng.randint(0, 40)  # silent

    def _background(self, job: _Job) -> tuple[int, _Outcome]:
        """The run's own ending when no planted fault interferes."""
        rng = self.rng
        user = self.users[job.user]
        start = job.start
        natural = min(job.runtime, job.limit)
        r = rng.random()
        if r < user.app_fail:
            early = 0.7 if user.buggy else 0.45
            if rng.random() < early:
                at = start + min(natural, rng.randint(20, 600))
            else:
                at = start + rng.randint(1, natural)
            cause = rng.choices(_APP_CAUSE_IDS, cum_weights=_APP_CAUSE_CUM)[0]
            state = _APP_STATE[cause]
            o = _Outcome(state=state, sub_domain="application", cause=cause, kind="application")
            if cause in ("illegal-memory-access", "device-side-assert") and rng.random() < 0.6:
                n = rng.choice(job.nodes)
                code = 43 if cause == "device-side-assert" else rng.choice([31, 31, 13])
                o.gpu_errors.append(self._xid(n, rng.randrange(len(self.gpu_ids)), code))
            if len(job.nodes) > 1 and rng.random() < 0.1:
                # the crashed rank's peers see their connections to it drop
                crashed = rng.choice(job.nodes)
                peer = rng.choice([n for n in job.nodes if n != crashed])
                o.links.append([self.names[peer], self.names[crashed]])
            o = self._judge(o, "application", job)
            if user.buggy:
                o.fault = f"user:{user.name}"
            return max(at, start + 1), self._benign(job, o)
        r -= user.app_fail
        if r < user.cancel:
            admin = rng.random() < 0.1
            o = _Outcome(
                state="CANCELLED",
                sub_domain="infrastructure" if admin else "application",
                cause="cancelled-by-admin" if admin else "cancelled-by-owner",
            )
            return start + rng.randint(1, natural), self._benign(job, o)
        r -= user.cancel
        if job.partition != self.spec.partitions[0] and r < 0.08:
            o = _Outcome(
                state="PREEMPTED", sub_domain="infrastructure", cause="preempted", requeue=True
            )
            return start + rng.randint(1, natural), self._benign(job, o)
        r = rng.random()
        if r < 0.006:
            o = _Outcome(state="FAILED", sub_domain="unattributed", cause="unattributed")
            return start + rng.randint(1, natural), self._benign(job, o)
        if r < 0.010:
            cause = rng.choice(["killed-unexplained", "collective-hang", "hang-during-startup"])
            o = _Outcome(state="FAILED", sub_domain="ambiguous", cause=cause)
            if cause == "killed-unexplained":
                o.suspects.append(self.names[rng.choice(job.nodes)])
            return start + rng.randint(1, natural), self._benign(job, o)
        if r < 0.012:
            return start + rng.randint(1, natural), self._benign(job, self._system_software(job))
        if job.runtime > job.limit:
            hang = rng.random() < 0.1
            o = _Outcome(
                state="TIMEOUT",
                sub_domain="ambiguous" if hang else "application",
                cause="hang-before-time-limit" if hang else "time-limit",
            )
            return start + job.limit, self._benign(job, o)
        o = _Outcome(state="COMPLETED", sub_domain="none", cause=None)
        return start + job.runtime, self._benign(job, o)

    def _system_software(self, job: _Job) -> _Outcome:
        """A one-off node software fault (GSP timeout, Fabric Manager down, NCCL set-up)."""
        rng = self.rng
        n = rng.choice(job.nodes)
        which = rng.choice(["gsp", "gsp", "fm", "nccl"])
        if which == "gsp":
            g = rng.randrange(len(self.gpu_ids))
            o = _Outcome(state="FAILED", sub_domain="system_software", cause="gpu-gsp-failure")
            o.responsible.append(
                {"node": self.names[n], "component": "gpu", "device": self.gpu_ids[g]}
            )
            o.gpu_errors.append(self._xid(n, g, 119))
            return o
        if which == "fm":
            o = _Outcome(
                state="FAILED", sub_domain="system_software", cause="fabricmanager-not-running"
            )
        else:
            o = _Outcome(
                state="FAILED", sub_domain="system_software", cause="nccl-network-device-outlier"
            )
        o.suspects.append(self.names[n])
        return o

    def _benign(self, job: _Job, o: _Outcome) -> _Outcome:
        """Add the benign XIDs healthy noisy nodes (and precursors of bad GPUs) log."""
        rng = self.rng
        for n in job.nodes:
            fault = self.node_faults.get(n)
            if fault is None:
                continue
            if fault.kind == "benign" and rng.random() < fault.per_hour:
                o.gpu_errors.append(self._xid(n, fault.gpu, fault.code))
            elif fault.kind == "gpu" and fault.code in (48, 94, 95) and rng.random() < 0.08:
                o.gpu_errors.append(self._xid(n, fault.gpu, 63))
        return o

    def _xid(self, n: int, gpu: int, code: int) -> dict[str, Any]:
        return {
            "node": self.names[n],
            "device": self.gpu_ids[gpu],
            "code": code,
            "xid_class": xid_class(code),
        }

    def _peer_links(self, job: _Job, target: int, p: float, o: _Outcome) -> None:
        """With chance ``p``, 1-3 peers of a multi-node job report IB errors naming ``target``."""
        rng = self.rng
        peers = [n for n in job.nodes if n != target]
        if peers and rng.random() < p:
            for peer in sorted(rng.sample(peers, min(len(peers), rng.randint(1, 3)))):
                o.links.append([self.names[peer], self.names[target]])

    def _fault_outcome(self, job: _Job, kind: str, a: int, b: int) -> _Outcome:
        rng = self.rng
        name = self.names
        if kind in ("gpu", "oneoff_gpu"):
            if kind == "gpu":
                fault = self.node_faults[a]
                gpu, code = fault.gpu, fault.code
            else:
                gpu, code = rng.randrange(len(self.gpu_ids)), rng.choice([79, 79, 48, 94, 95])
            cause, component = _GPU_FAULT_CAUSE[code]
            node_fail = code == 79 and rng.random() < 0.1
            o = _Outcome(
                state="NODE_FAIL" if node_fail else "FAILED",
                sub_domain="hardware",
                cause=cause,
                kind="gpu",
            )
            o.responsible.append(
                {"node": name[a], "component": component, "device": self.gpu_ids[gpu]}
            )
            o.gpu_errors.append(self._xid(a, gpu, code))
            follow, p = _GPU_FOLLOW_UP[code]
            if rng.random() < p:
                o.gpu_errors.append(self._xid(a, gpu, follow))
            self._peer_links(job, a, 0.5, o)
            if node_fail:
                o.failed_node = name[a] if rng.random() < 0.5 else None
                o.node_events.append((a, "DOWN", "Not responding", rng.randint(3600, 4 * 3600)))
            elif rng.random() < 0.5:
                reason = f"NHC: GPU {self.gpu_ids[gpu]} Xid {code}"
                o.node_events.append((a, "DRAIN", reason, rng.randint(3600, 8 * 3600)))
            o = self._judge(o, "gpu", job)
        elif kind == "hca":
            port = self.node_faults[a].port
            hw = rng.random() < 0.5
            o = _Outcome(
                state="FAILED",
                sub_domain="hardware" if hw else "infrastructure",
                cause="nic-hardware-failure" if hw else "ib-port-error",
                kind="hca",
            )
            o.responsible.append({"node": name[a], "component": "hca", "device": port})
            self._peer_links(job, a, 0.7, o)
            if rng.random() < 0.3:
                o.node_events.append(
                    (
                        a,
                        "DRAIN",
                        f"NHC: {port.split(':')[0]} port down",
                        rng.randint(3600, 6 * 3600),
                    )
                )
            o = self._judge(o, "hca", job)
        elif kind == "memory":
            dimm = self.node_faults[a].dimm
            panic = rng.random() < 0.5
            o = _Outcome(
                state="NODE_FAIL" if panic else "FAILED",
                sub_domain="hardware",
                cause="node-memory-uncorrectable",
                kind="memory",
            )
            o.responsible.append({"node": name[a], "component": "memory", "device": dimm})
            if panic:
                o.failed_node = name[a] if rng.random() < 0.5 else None
                o.requeue = rng.random() < 0.7
                o.node_events.append((a, "DOWN", "Not responding", rng.randint(1800, 2 * 3600)))
                self._peer_links(job, a, 0.5, o)
            o = self._judge(o, "memory", job)
        elif kind == "silent":
            o = self._silent(job, a)
        elif kind == "oneoff_crash":
            o = _Outcome(
                state="NODE_FAIL", sub_domain="infrastructure", cause="node-not-responding"
            )
            o.responsible.append({"node": name[a], "component": "node", "device": None})
            o.failed_node = name[a] if rng.random() < 0.5 else None
            o.requeue = rng.random() < 0.7
            o.node_events.append((a, "DOWN", "Not responding", rng.randint(1800, 3 * 3600)))
            o = self._judge(o, "power", job)
        elif kind == "link":
            reporter, peer = (a, b) if rng.random() < 0.5 else (b, a)
            o = _Outcome(
                state="FAILED",
                sub_domain="infrastructure",
                cause=rng.choice(["ib-peer-suspect", "ib-peer-suspect", "ib-retry-exceeded"]),
                kind="link",
            )
            o.links.append([name[reporter], name[peer]])
            if rng.random() < 0.3:
                o.links.append([name[peer], name[reporter]])
            o.suspects.append(name[peer])
            o = self._judge(o, "link", job)
        else:  # switch
            inside = [n for n in job.nodes if self.leaf_of[n] == a]
            r = rng.random()
            o = _Outcome(state="FAILED", sub_domain="infrastructure", cause=None, kind="switch")
            if r < 0.45:
                x = rng.choice(inside)
                o.cause = "ib-port-error"
                o.responsible.append(
                    {"node": name[x], "component": "hca", "device": rng.choice(HCA_PORTS)}
                )
                self._peer_links(job, x, 0.5, o)
            elif r < 0.75:
                o.cause = "fabric-ports-down-together"
                down = sorted(rng.sample(inside, min(len(inside), rng.randint(2, 4))))
                o.suspects.extend(name[n] for n in down)
                for n in down[1:]:
                    o.links.append([name[down[0]], name[n]])
            else:
                x, y = rng.sample(inside, 2)
                o.cause = "ib-retry-exceeded"
                o.links.append([name[x], name[y]])
                o.suspects.append(name[y])
            o = self._judge(o, "switch", job)
        return o

    def _silent(self, job: _Job, n: int) -> _Outcome:
        rng = self.rng
        multi = len(job.nodes) > 1
        o = _Outcome(
            state="NODE_FAIL",
            sub_domain="unattributed",
            cause="peer-lost-suspect" if multi else "unattributed",
            kind="silent",
        )
        if multi:
            o.suspects.append(self.names[n])
            self._peer_links(job, n, 0.6, o)
        o.failed_node = self.names[n] if rng.random() < 0.5 else None
        o.requeue = rng.random() < 0.7
        o.node_events.append((n, "DOWN", "Not responding", rng.randint(3600, 4 * 3600)))
        return self._judge(o, "silent", job)

    def _judge(self, o: _Outcome, kind: str, job: _Job) -> _Outcome:
        """Pass a verdict through the measured noise of its fault family."""
        rng = self.rng
        rate = self.rates[kind]
        r = rng.random()
        if r < rate.right:
            return o
        focus = [x["node"] for x in o.responsible if x["node"]] + o.suspects
        if r < rate.right + rate.ambiguous:
            o.sub_domain = "ambiguous"
            o.cause = _AMBIGUOUS_CAUSE[kind]
            o.responsible = []
            if focus:
                o.suspects = [str(focus[0])]
            elif kind in ("application", "silent") and rng.random() < 0.5:
                # killed-unexplained names the node whose rank died; for a silent hang on a
                # single-node job that is the hung node itself
                o.suspects = [self.names[rng.choice(job.nodes)]]
            return o
        o.sub_domain = "unattributed"
        o.cause = "unattributed"
        o.responsible = []
        o.suspects = []
        if kind in ("gpu", "memory"):
            o.gpu_errors = []  # the node's kernel log was not collected
        return o

    # ----------------------------------------------------------------- incidents

    def _incident(self, i: int, t: int) -> None:
        _at, kind, nodes = self.incident_plan[i]
        rng = self.rng
        victims: list[_Job] = []
        if kind == "power":
            hit = set(nodes)
            for idx in sorted(self.running):
                job = self.running[idx]
                if job.end > t + 2 and hit & set(job.nodes):
                    victims.append(job)
            for n in nodes:
                outage = rng.randint(3600, 3 * 3600)
                self._event(n, t, "DOWN", "Not responding", t + outage)
                self._block(n, t + outage, t)
            label = f"power: PDU trip took {hostlist.compress(self.names[n] for n in nodes)}"
        else:
            order = sorted(self.running)
            rng.shuffle(order)
            covered: set[int] = set()
            for idx in order:
                job = self.running[idx]
                if job.end <= t + 2:
                    continue
                victims.append(job)
                covered.update(job.nodes)
                if len(covered) >= self.spec.incident_nodes:
                    break
            victims.sort(key=lambda j: j.idx)
            nodes = sorted(covered)
            for n in rng.sample(nodes, min(3, len(nodes))):
                outage = rng.randint(1800, 5400)
                self._event(n, t + 60, "DRAIN", "Kill task failed", t + 60 + outage)
                self._block(n, t + 60 + outage, t)
            label = "filesystem: Lustre MDS failover evicted clients"
        incident = self.incidents[i]
        incident.label = f"{label} at {_iso(t)}"
        incident.nodes = hostlist.compress(self.names[n] for n in nodes)
        for job in victims:
            end = t + rng.randint(0, 2)
            job.outcome = self._incident_outcome(job, kind, set(nodes), i)
            job.end = end
            job.version += 1
            self._push(end + job.epilog, _EV_END, job.idx, job.version)

    def _incident_outcome(self, job: _Job, kind: str, hit: set[int], i: int) -> _Outcome:
        rng = self.rng
        lost = [n for n in job.nodes if n in hit]
        if kind == "power":
            o = _Outcome(state="NODE_FAIL", sub_domain="infrastructure", cause=None, kind="power")
            if len(lost) >= 2:
                o.cause = "nodes-lost-together"
                o.suspects = [self.names[n] for n in lost]
            elif rng.random() < 0.6:
                o.cause = "node-not-responding"
                o.responsible.append(
                    {"node": self.names[lost[0]], "component": "node", "device": None}
                )
            else:
                o.sub_domain = "unattributed"
                o.cause = "peer-lost-suspect" if len(job.nodes) > 1 else "unattributed"
                if len(job.nodes) > 1:
                    o.suspects = [self.names[lost[0]]]
            o.failed_node = self.names[lost[0]] if rng.random() < 0.5 else None
            o.requeue = rng.random() < 0.7
            for peer in job.nodes:
                if peer not in hit and rng.random() < 0.3:
                    o.links.append([self.names[peer], self.names[lost[0]]])
        else:
            o = _Outcome(
                state="FAILED",
                sub_domain="infrastructure",
                cause="shared-filesystem-failure",
                kind="filesystem",
            )
            for n in sorted(rng.sample(job.nodes, min(len(job.nodes), rng.randint(1, 3)))):
                o.responsible.append(
                    {"node": self.names[n], "component": "filesystem", "device": None}
                )
        o.incident = i
        return self._judge(o, kind, job)

    # ----------------------------------------------------------------- output

    def _record(self, job: _Job, o: _Outcome) -> None:
        key = f"sim_{job.job_id}_{job.run}"
        nodes = tuple(job.nodes)
        text = self.hostlists.get(nodes)
        if text is None:
            text = hostlist.compress(self.names[n] for n in nodes)
            self.hostlists[nodes] = text
        record: dict[str, Any] = {
            "key": key,
            "job_id": job.job_id,
            "user": self.users[job.user].name,
            "name": job.name,
            "partition": job.partition,
            "nodes": text,
            "start": _iso(job.start),
            "end": _iso(job.end),
            "state": o.state,
            "terminal_state": TERMINAL_STATE[o.state],
            "sub_domain": o.sub_domain,
            "cause": o.cause,
            "responsible": o.responsible,
            "suspects": sorted(set(o.suspects)),
            "links": o.links,
            "gpu_errors": o.gpu_errors,
            "failed_node": o.failed_node if o.state == "NODE_FAIL" else None,
        }
        self.records.append((job.end, key, record))
        if o.fault is not None:
            self.fault_runs.setdefault(o.fault, []).append(key)
        if o.incident is not None:
            self.incidents[o.incident].jobs.append(key)

    def _fault_runs(self) -> dict[str, list[str]]:
        """Every planted fault -> the keys of the runs it ended (empty when it never bit)."""
        keys: list[str] = []
        for n, f in sorted(self.node_faults.items()):
            if f.kind in ("gpu", "hca", "memory"):
                keys.append(f"node:{self.names[n]}")
            elif f.kind == "silent":
                keys.append(f"silent:{self.names[n]}")
        for pair in self.bad_links:
            a, b = sorted(pair)
            keys.append(f"link:{self.names[a]}-{self.names[b]}")
        keys.extend(f"domain:{self.leaf_names[li]}" for li in self.bad_leaves)
        keys.extend(f"user:{u.name}" for u in self.users if u.buggy)
        return {k: sorted(self.fault_runs.get(k, [])) for k in sorted(keys)}

    def topology(self) -> str:
        """The Slurm topology.conf text (tree: leaves, one spine)."""
        lines = [f"# Slurm topology/tree of a simulated fleet (seed {self.spec.seed})"]
        npl = self.spec.nodes_per_leaf
        for li, leaf in enumerate(self.leaf_names):
            members = self.names[li * npl : (li + 1) * npl]
            lines.append(f"SwitchName={leaf} Nodes={hostlist.compress(members)}")
        lines.append(f"SwitchName=spine1 Switches={hostlist.compress(self.leaf_names)}")
        return "\n".join(lines) + "\n"

    def truth(self, jobs: list[dict[str, Any]]) -> FleetTruth:
        """The ground truth of this run."""
        faults = sorted(self.node_faults.items())
        bad = [(n, f) for n, f in faults if f.kind in ("gpu", "hca", "memory")]
        details: list[dict[str, Any]] = []
        for n, f in bad:
            device = {"gpu": self.gpu_ids[f.gpu], "hca": f.port, "memory": f.dimm}[f.kind]
            component = "nvlink" if f.kind == "gpu" and f.code == 74 else f.kind
            entry: dict[str, Any] = {
                "node": self.names[n],
                "component": component,
                "device": device,
                "per_hour": round(f.per_hour, 4),
            }
            if f.kind == "gpu":
                entry["xid"] = f.code
            details.append(entry)
        failed = sum(1 for j in jobs if j["terminal_state"] == "fail")
        by_sub: dict[str, int] = {}
        for j in jobs:
            by_sub[j["sub_domain"]] = by_sub.get(j["sub_domain"], 0) + 1
        return FleetTruth(
            bad_nodes=[self.names[n] for n, _ in bad],
            bad_gpus=[
                {"node": self.names[n], "device": self.gpu_ids[f.gpu]}
                for n, f in bad
                if f.kind == "gpu"
            ],
            bad_node_faults=details,
            bad_links=sorted(
                sorted([self.names[a], self.names[b]]) for a, b in map(sorted, self.bad_links)
            ),
            bad_domains=sorted(self.leaf_names[li] for li in self.bad_leaves),
            silent_nodes=[self.names[n] for n, f in faults if f.kind == "silent"],
            buggy_users=sorted(u.name for u in self.users if u.buggy),
            benign_xid_nodes=[self.names[n] for n, f in faults if f.kind == "benign"],
            incidents=self.incidents,
            fault_runs=self._fault_runs(),
            spec=self.spec.as_dict(),
            summary={
                "jobs": len(jobs),
                "failed": failed,
                "node_events": len(self.node_events),
                "by_sub_domain": dict(sorted(by_sub.items())),
            },
        )


# --------------------------------------------------------------------- public API


def generate_fleet(spec: FleetSpec | None = None) -> FleetHistory:
    """Simulate a fleet history in memory.

    Args:
        spec: what to simulate (defaults to ``FleetSpec()``).

    Returns:
        the job runs (sorted by end time, then key), the node events (sorted by time), the
        topology.conf text and the ground truth.

    Raises:
        ValueError: when the spec's planted faults do not fit its fleet.
    """
    sim = _Sim(spec or FleetSpec())
    sim.run()
    sim.records.sort(key=lambda r: (r[0], r[1]))
    jobs = [r[2] for r in sim.records]
    events = sorted(sim.node_events, key=lambda e: (e["at"], e["node"], e["state"]))
    for incident in sim.incidents:
        incident.jobs.sort()
    return FleetHistory(
        jobs=jobs, node_events=events, topology=sim.topology(), truth=sim.truth(jobs)
    )


def write_fleet(spec: FleetSpec, outdir: Path | str) -> FleetTruth:
    """Simulate a fleet history and write it as a fleet history directory.

    Args:
        spec: what to simulate.
        outdir: the directory to write (created; must be empty or absent).

    Returns:
        the ground truth (also written to ``truth.yaml``).

    Raises:
        FileExistsError: when ``outdir`` exists and is not empty.
        ValueError: when the spec's planted faults do not fit its fleet.
    """
    root = Path(outdir)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root}: not empty")
    history = generate_fleet(spec)
    root.mkdir(parents=True, exist_ok=True)
    for name, content in history.files().items():
        (root / name).write_text(content, encoding="utf-8")
    return history.truth
