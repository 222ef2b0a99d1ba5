"""The fleet view: which nodes, GPUs, links and failure domains keep failing jobs.

One verdict says what killed one job. This module reads many (``FleetJob``: the part of a
verdict the fleet needs, plus every run that passed, for exposure) and answers, with stated
statistics (docs/fleet.md):

* **incidents**: failures of several users' jobs on several nodes within ``incident_window``
  seconds, or under one failure domain (leaf switch, block, rack, NVLink domain) within
  ``domain_window``, more than chance explains (Poisson tail at the fleet's own failure rate):
  one event with a common-cause label and no per-node blame. Their jobs leave every count
  below;
* **domains**: for each leaf switch, block or mapped group, the same test as nodes on the sum
  of its nodes; a domain is suspect when the failures spread over several of its nodes, and
  then explains its nodes' rows (no node under it is suggested for a drain unless the node
  stands out against the domain too);
* **nodes**: ``k`` failed jobs with the node responsible (hardware, system software or
  infrastructure verdicts; never application ones) out of ``n`` jobs that ran on it, tested
  one-sided against the partition's rate without the node (``binom.sf(k-1, n, p0)``),
  Benjamini–Hochberg across all nodes tested; suspect when ``q <= q``, ``k >=
  min_failures``, the rate ratio is at least ``min_ratio`` and the failed jobs belong to at
  least ``min_users`` users (one user's code failing on one node is that user's problem);
* **silent nodes**: the same test on jobs Slurm ended NODE_FAIL (or that name a failed node)
  with nobody responsible, plus "Not responding" events when given; suspects that fail over
  the same days form a cohort;
* **links**: node pairs named together by peer evidence (IB completion errors, NCCL remote
  errors, closed connections: the reporter and the peer it names), tested against what the
  two nodes' own rates of such reports predict; each suspect pair comes with the nccl-tests
  run that would confirm it;
* **GPUs**: each GPU's XIDs across jobs, and whether several applications fault on it (the
  GPU) or one application faults on several GPUs (the application): ``attribution.history``'s
  rule, per GPU;
* **drains**: a shadow-mode ``scontrol update ... state=drain`` line per suspect node (never
  run), at most ``max_drain_share`` of a partition's nodes at once.

Pure: no file, process or store access; ``attribution.fleetstore`` reads the store.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from attribution.model import GpuError, Responsible
from attribution.topology import Group, Topology, is_node_name

# parts a block or NVLink domain shares: its NVLink/NVSwitch fabric
FABRIC_PARTS = ("nvlink", "nvswitch", "fabric")
# verdicts that may blame a node (an application verdict never does)
NODE_DOMAINS = frozenset({"hardware", "system_software", "infrastructure"})
# failures a common cause may explain: everything but the application's own
COMMON_DOMAINS = NODE_DOMAINS | {"unattributed", "ambiguous"}
# events whose lines name a peer: the reporter (the line's node) and the named node
LINK_EVENTS = frozenset(
    {
        "nccl.ib_completion_error",
        "nccl.ofi_completion_error",
        "nccl.remote_error",
        "nccl.connection_closed",
        "nccl.connect_failed",
        "nccl.ibv_call_failed",
        "app.peer_died",
    }
)
# XID codes whose blame depends on history (NVIDIA's WORKFLOW_XID_13 / _31; 43 follows them)
HISTORY_XIDS = frozenset({13, 31, 43})
# reasons slurmctld itself gives a node it lost (an administrator's own reasons are not these)
FAILURE_REASONS = (
    "not responding",
    "unexpectedly rebooted",
    "kill task failed",
    "node_fail",
    "batch job complete failure",
)
MAX_REASON = 240  # characters of a drain reason (slurm keeps it in the node record)


# a node a verdict holds responsible, with the part and device when it names them
Blame = Responsible


# one XID code a job saw on one GPU: the verdict's own record of it (``Verdict.gpu_errors``)
GpuMark = GpuError


@dataclass(frozen=True, slots=True)
class FleetJob:
    """What the fleet view needs of one job run: who ran it where and when, and the verdict's
    outcome. Runs that passed only count as exposure (``terminal_state`` ``pass``)."""

    key: str
    job_id: str
    user: str | None
    partition: str | None
    nodes: tuple[str, ...]
    end: datetime | None
    terminal_state: str
    sub_domain: str = "none"
    state: str | None = None  # Slurm's (NODE_FAIL, FAILED, ...)
    cause: str | None = None
    name: str | None = None
    responsible: tuple[Blame, ...] = ()
    suspects: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (reporter, peer)
    gpu_errors: tuple[GpuMark, ...] = ()
    failed_node: str | None = None

    @property
    def failed(self) -> bool:
        return self.terminal_state == "fail"

    @property
    def blames_node(self) -> bool:
        return self.failed and self.sub_domain in NODE_DOMAINS and bool(self.responsible)

    @property
    def silent(self) -> bool:
        """Slurm says a node failed under the job and no evidence says which or why."""
        return (
            self.failed
            and not self.responsible
            and ((self.state or "").upper() == "NODE_FAIL" or bool(self.failed_node))
        )

    @property
    def named_nodes(self) -> tuple[str, ...]:
        """The nodes the verdict names: blamed, else suspects, else the failed node."""
        if self.responsible:
            return tuple(dict.fromkeys(b.node for b in self.responsible))
        if self.suspects:
            return self.suspects
        return (self.failed_node,) if self.failed_node else ()

    @property
    def fault_nodes(self) -> tuple[str, ...]:
        """The nodes a common cause would have hit: those blamed, else the failed node, else
        (nobody named) every node of the job."""
        if self.responsible:
            return tuple(dict.fromkeys(b.node for b in self.responsible))
        if self.failed_node:
            return (self.failed_node,)
        return self.nodes


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A node state change Slurm recorded (``sacctmgr list events``, slurmctld's log):
    ``reason`` such as "Not responding"."""

    node: str
    at: datetime
    state: str
    reason: str = ""


def node_failure(event: NodeEvent) -> bool:
    """Whether a node event is Slurm losing the node (``FAILURE_REASONS``), not an
    administrator's drain or down."""
    reason = event.reason.lower()
    return any(r in reason for r in FAILURE_REASONS)


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """The knobs of every test (docs/fleet.md); the defaults are the ones published."""

    q: float = 0.05  # Benjamini-Hochberg false discovery rate
    min_failures: int = 3
    min_ratio: float = 2.0
    min_users: int = 2
    incident_window: float = 30.0  # seconds: failures this close in time may be one event
    domain_window: float = 900.0  # seconds: failures under one domain this close
    incident_min_nodes: int = 3
    incident_min_users: int = 2
    incident_alpha: float = 0.01  # chance of one false incident over the whole window
    max_drain_share: float = 0.1  # of a partition's nodes in one go
    silent_min_events: int = 3


@dataclass(frozen=True, slots=True)
class Test:
    """One one-sided binomial test: ``k`` of ``n`` against ``baseline``."""

    k: int
    n: int
    baseline: float
    p: float
    q: float = 1.0

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def ratio(self) -> float:
        if self.baseline <= 0:
            return math.inf if self.k else 0.0
        return self.rate / self.baseline


@dataclass(slots=True)
class NodeRow:
    """A node's line in ``sattr nodes``."""

    node: str
    partition: str | None
    test: Test
    status: str  # suspect | one-user | domain | low-count | ok
    reason: str
    users: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    first: datetime | None = None
    last: datetime | None = None
    jobs: tuple[str, ...] = ()
    domain: str | None = None
    named: int = 0  # failed jobs in which only peer or untrusted evidence names it


@dataclass(slots=True)
class DomainRow:
    """A failure domain's line: the same test on the sum of its nodes."""

    group: Group
    test: Test
    status: str
    reason: str
    nodes_failing: int = 0
    top_share: float = 0.0
    jobs: tuple[str, ...] = ()
    users: int = 0


@dataclass(slots=True)
class SilentRow:
    """A node that Slurm lost under jobs (NODE_FAIL) more often than the fleet."""

    node: str
    test: Test
    events: int
    status: str
    reason: str
    first: datetime | None = None
    last: datetime | None = None
    cohort: int | None = None


@dataclass(slots=True)
class LinkRow:
    """A node pair that peer evidence keeps naming together."""

    a: str
    b: str
    test: Test
    status: str
    reason: str
    users: int = 0
    jobs: tuple[str, ...] = ()
    confirm: str = ""


@dataclass(slots=True)
class GpuRow:
    """One GPU's XID history across jobs."""

    node: str
    device: str
    jobs: int
    applications: int
    codes: dict[int, int]
    status: str  # gpu | application | once
    reason: str


@dataclass(slots=True)
class Incident:
    """Several jobs' failures read as one event."""

    id: str
    kind: str  # time | domain
    label: str
    start: datetime
    end: datetime
    jobs: tuple[str, ...]
    nodes: tuple[str, ...]
    users: int
    cause: str
    p: float


@dataclass(slots=True)
class FleetReport:
    """Everything ``sattr nodes`` / ``incidents`` / ``links`` / ``gpus`` print."""

    since: datetime | None
    until: datetime | None
    options: FleetOptions
    runs: int
    failed: int
    exposure: str  # "all runs" or "failed runs only"
    nodes: list[NodeRow]
    domains: list[DomainRow]
    silent: list[SilentRow]
    links: list[LinkRow]
    gpus: list[GpuRow]
    incidents: list[Incident]
    drains: list[str]
    held_back: list[str]
    baselines: dict[str, float]
    cohorts: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- statistics


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): the one-sided p-value of ``k`` failures in ``n``
    (scipy.special's ``bdtrc``: scipy.stats takes seconds to import on a login node)."""
    from scipy.special import bdtrc

    if k <= 0:
        return 1.0
    if n <= 0 or k > n:
        return 1.0 if n <= 0 else 0.0
    return float(bdtrc(k - 1, n, min(max(p, 1e-12), 1.0)))


def poisson_sf(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu) (scipy.special's ``pdtrc``)."""
    from scipy.special import pdtrc

    if k <= 0:
        return 1.0
    return float(pdtrc(k - 1, max(mu, 1e-12)))


def bh(pvalues: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q-values), in the input's order: the i-th
    smallest of m p-values becomes min over j >= i of p_(j) * m / j, capped at 1 (the same
    numbers as scipy.stats.false_discovery_control(method="bh"); tests/test_fleet.py checks)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, pvalues[index] * m / rank)
        out[index] = min(running, 1.0)
    return out


# ----------------------------------------------------------------------------- the analysis


class Fleet:
    """Accumulates runs (``add``) and reports (``report``). Passing runs count only as
    exposure, so memory grows with failures and nodes, not with runs."""

    def __init__(
        self,
        *,
        topology: Topology | None = None,
        options: FleetOptions | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        partition: str | None = None,
    ) -> None:
        self.topology = topology or Topology()
        self.partition = partition
        self.options = options or FleetOptions()
        self.since, self.until = since, until
        self.exposure: Counter[str] = Counter()
        self.domain_runs: Counter[Group] = Counter()  # runs placed wholly inside each domain
        self.partition_of: dict[str, Counter[str]] = defaultdict(Counter)
        self.failures: list[FleetJob] = []
        self.node_events: list[NodeEvent] = []
        self.notes: list[str] = []  # what could not be read, for the report's header
        self._keys: set[str] = set()  # failed and added runs (the store's are unique)
        self._blamed_jobs: Mapping[str, list[FleetJob]] = {}
        self.duplicates = 0
        self.runs = 0
        self.passes = 0
        self.failed = 0
        self.first: datetime | None = None
        self.last: datetime | None = None

    def add(self, job: FleetJob) -> None:
        """One run: exposure for each of its nodes; kept when it failed. A key seen before
        is counted once (and said in ``notes``)."""
        if job.key in self._keys:
            self.duplicates += 1
            return
        self._keys.add(job.key)
        self.add_exposure(job.nodes, job.partition, 1, int(job.terminal_state == "pass"))
        self.failed += job.failed
        if job.end is not None:
            self.first = job.end if self.first is None else min(self.first, job.end)
            self.last = job.end if self.last is None else max(self.last, job.end)
        if job.failed:
            self.failures.append(job)

    def add_exposure(
        self,
        nodes: Sequence[str],
        partition: str | None,
        runs: int,
        passed: int = 0,
        failed: int = 0,
        first: datetime | None = None,
        last: datetime | None = None,
    ) -> None:
        """``runs`` runs on ``nodes`` that are counted, not kept (``passed`` of them passed,
        ``failed`` failed): the store sums the runs the view does not read one by one per
        node list in SQL."""
        self.runs += runs
        self.passes += passed
        self.failed += failed
        for group in self.topology.containing(nodes):
            self.domain_runs[group] += runs
        part = partition or ""
        for node in nodes:
            self.exposure[node] += runs
            self.partition_of[node][part] += runs
        if first is not None:
            self.first = first if self.first is None else min(self.first, first)
        if last is not None:
            self.last = last if self.last is None else max(self.last, last)

    def add_all(self, jobs: Iterable[FleetJob]) -> Fleet:
        for job in jobs:
            self.add(job)
        return self

    def add_events(self, events: Iterable[NodeEvent]) -> None:
        """Slurm's node events over the window; with a ``partition`` set, only those of nodes
        that ran its jobs (call after the runs are added)."""
        self.node_events.extend(
            e for e in events if self.partition is None or e.node in self.exposure
        )

    # ------------------------------------------------------------------ report

    def report(self) -> FleetReport:
        o = self.options
        incidents = self._incidents()
        in_incident = {key for i in incidents for key in i.jobs}
        failures = [j for j in self.failures if j.key not in in_incident]
        primary = {n: c.most_common(1)[0][0] for n, c in self.partition_of.items()}
        nodes, baselines = self._nodes(failures, primary, ())
        silent, cohorts = self._silent(primary)
        explained = {r.node: "node" for r in nodes if r.status == "suspect"}
        explained.update({r.node: "node" for r in silent if r.status == "suspect"})
        links = self._links(failures, explained)
        pairs = {(r.a, r.b) for r in links if r.status == "suspect"}
        domains = self._domains(failures, explained, pairs)
        suspect_domains = [d for d in domains if d.status == "suspect"]
        if suspect_domains:  # judged again: a suspect domain may explain its nodes and links
            nodes, baselines = self._nodes(failures, primary, suspect_domains)
            for row in links:
                domain = next((d for d in suspect_domains if {row.a, row.b} <= d.group.nodes), None)
                if row.status == "suspect" and domain is not None:
                    row.status = "domain"
                    row.reason = f"explained by {domain.group.label}, a suspect failure domain"
        gpus = self._gpus()
        drains, held = self._drains(nodes, silent, primary)
        return FleetReport(
            since=self.since or self.first,
            until=self.until or self.last,
            options=o,
            runs=self.runs,
            failed=self.failed,
            exposure="all runs" if self.passes else "failed runs only",
            nodes=nodes,
            domains=domains,
            silent=silent,
            links=links,
            gpus=gpus,
            incidents=incidents,
            drains=drains,
            held_back=held,
            baselines=baselines,
            cohorts=cohorts,
            notes=list(self.notes)
            + (
                [f"{self.duplicates:,} run(s) given twice were counted once"]
                if self.duplicates
                else []
            ),
        )

    # ------------------------------------------------------------------ incidents

    def _period(self) -> float:
        if self.first is None or self.last is None:
            return 1.0
        return max((self.last - self.first).total_seconds(), 1.0)

    def _incidents(self) -> list[Incident]:
        o = self.options
        common = sorted(
            (j for j in self.failures if j.sub_domain in COMMON_DOMAINS and j.end is not None),
            key=lambda j: (j.end, j.key),
        )
        rate = len(common) / self._period()
        found: list[Incident] = []
        taken: set[str] = set()
        for burst in _bursts(common, o.incident_window):
            incident = self._incident(burst, rate, o.incident_window, "time", None)
            if incident is not None:
                found.append(incident)
                taken.update(incident.jobs)
        by_group: dict[Group, list[FleetJob]] = defaultdict(list)
        for j in common:  # in end order, each under the domains that hold all its nodes
            if j.key not in taken:
                for group in self.topology.containing(j.fault_nodes):
                    if domain_failure(group.kind, j):
                        by_group[group].append(j)
        for group in self.topology.leaves():
            inside = [j for j in by_group.get(group, ()) if j.key not in taken]
            if len(inside) < 2:
                continue
            share = sum(self.exposure[n] for n in group.nodes) / max(sum(self.exposure.values()), 1)
            for burst in _bursts(inside, o.domain_window):
                incident = self._incident(burst, rate * share, o.domain_window, "domain", group)
                if incident is not None:
                    found.append(incident)
                    taken.update(incident.jobs)
        found.sort(key=lambda i: (i.start, i.id))
        for number, incident in enumerate(found, start=1):
            incident.id = f"I{number}"
        return found

    def _incident(
        self, burst: list[FleetJob], rate: float, window: float, kind: str, group: Group | None
    ) -> Incident | None:
        """``burst`` as an incident when it is more than chance. Its span is tested at the
        smallest of three scales that holds it (``window`` / 30, / 6 and ``window``): the
        Poisson tail of its count at ``rate`` failures per second over the scale, times the
        number of such spans in the period and the three scales (Bonferroni over the scan),
        must be below ``incident_alpha``. It needs jobs of ``incident_min_users`` users, none
        with more than half of them; or, when one user's jobs are most of it, most of them lost
        by Slurm or blamed on node-side evidence (a user's own bug does not put node faults on
        several nodes at once)."""
        o = self.options
        nodes = tuple(sorted({n for j in burst for n in j.fault_nodes}))
        users = {j.user for j in burst}
        if len(burst) < 2 or len(nodes) < o.incident_min_nodes:
            return None
        node_side = sum(j.blames_node or j.silent for j in burst)
        top_user = Counter(j.user for j in burst).most_common(1)[0][1]
        one_user = len(users) < o.incident_min_users or top_user * 2 > len(burst)
        if one_user and node_side * 2 <= len(burst):
            return None  # one user's jobs (or mostly): that user's problem unless node-side
        ends = [j.end for j in burst if j.end is not None]
        span = (max(ends) - min(ends)).total_seconds()
        scales = (window / 30, window / 6, window)
        scale = max(next((sc for sc in scales if span <= sc), span), 1.0)
        windows = max(self._period() / scale, 1.0) * len(scales)
        p = min(1.0, poisson_sf(len(burst), rate * scale) * windows)
        if p > o.incident_alpha:
            return None
        start, end = min(ends), max(ends)
        if group is None:
            group = self.topology.smallest_common(nodes)
        seconds = (end - start).total_seconds()
        where = f"under {group.label}" if group else f"on {len(nodes)} nodes"
        label = f"{len(burst)} jobs failed within {seconds:.0f} s {where}"
        causes = Counter(j.cause or j.sub_domain for j in burst)
        cause, _ = causes.most_common(1)[0]
        return Incident(
            id="",
            kind=kind,
            label=label,
            start=start,
            end=end,
            jobs=tuple(j.key for j in burst),
            nodes=nodes,
            users=len(users),
            cause=cause,
            p=p,
        )

    # ------------------------------------------------------------------ domains and nodes

    def _blame_counts(
        self, failures: Sequence[FleetJob]
    ) -> tuple[dict[str, list[FleetJob]], Counter[str]]:
        blamed: dict[str, list[FleetJob]] = defaultdict(list)
        named: Counter[str] = Counter()
        for job in failures:
            if job.blames_node:
                for node in dict.fromkeys(b.node for b in job.responsible):
                    blamed[node].append(job)
            elif job.failed and job.sub_domain in COMMON_DOMAINS:
                for node in dict.fromkeys(job.suspects):
                    named[node] += 1
        return blamed, named

    def _domains(
        self,
        failures: Sequence[FleetJob],
        explained: Mapping[str, str],
        pairs: Collection[tuple[str, str]] = (),
    ) -> list[DomainRow]:
        """The failure-domain test: runs placed wholly inside a domain (``domain_runs``)
        against their failures that the domain's shared part could cause
        (``domain_failure``) and no suspect node explains, against the rate of such failures
        in the other domains of its kind; suspect only when the failures spread over at
        least ``incident_min_nodes`` of its nodes and no one node is half of what they name
        (one bad node must not make its switch suspect). Failures of a suspect node or on a
        suspect link (``pairs``) are theirs, not the domain's."""
        o = self.options
        groups = self.topology.leaves()
        if not groups:
            return []
        inside: dict[Group, list[FleetJob]] = defaultdict(list)
        for job in failures:
            if any(n in explained for n in job.fault_nodes):
                continue
            if any((min(a, b), max(a, b)) in pairs for a, b in job.links):
                continue  # a suspect link's failure, not the domain's
            for group in self.topology.containing(job.nodes):
                if domain_failure(group.kind, job):
                    inside[group].append(job)
        total_k: Counter[str] = Counter()
        total_n: Counter[str] = Counter()
        for group in groups:
            total_k[group.kind] += len(inside.get(group, ()))
            total_n[group.kind] += self.domain_runs.get(group, 0)
        rows = []
        for group in groups:
            jobs = inside.get(group, [])
            n = self.domain_runs.get(group, 0)
            k = len(jobs)
            others_n = total_n[group.kind] - n
            others_k = total_k[group.kind] - k
            p0 = (others_k + 0.5) / (others_n + 1)  # half a failure: none elsewhere is not 0
            test = Test(k, n, p0, binomial_sf(k, n, p0))
            # spread: the nodes the failures name (blamed, else suspects, else the failed
            # node) and how much of that the busiest one takes
            named = Counter(m for job in jobs for m in job.named_nodes if m in group.nodes)
            share = named.most_common(1)[0][1] / sum(named.values()) if named else 0.0
            spread = {m for job in jobs for m in job.fault_nodes if m in group.nodes}
            row = DomainRow(group, test, "ok", "", len(spread), share, tuple(j.key for j in jobs))
            row.users = len({j.user for j in jobs})
            rows.append(row)
        for row, q in zip(rows, bh([r.test.p for r in rows]), strict=True):
            row.test = Test(row.test.k, row.test.n, row.test.baseline, row.test.p, q)
            t = row.test
            significant = t.q <= o.q and t.k >= o.min_failures and t.ratio >= o.min_ratio
            spread_out = row.nodes_failing >= o.incident_min_nodes and row.top_share <= 0.5
            if significant and spread_out and row.users >= o.min_users:
                row.status = "suspect"
                row.reason = (
                    f"{t.k} failed jobs over {row.nodes_failing} of its nodes,"
                    f" {t.ratio:.1f}x the other {row.group.kind}es' rate"
                    if row.group.kind == "switch"
                    else f"{t.k} failed jobs over {row.nodes_failing} of its nodes,"
                    f" {t.ratio:.1f}x the rate of the other {row.group.kind} groups"
                )
            elif significant and spread_out:
                row.status = "one-user"
                row.reason = f"all {t.k} failures are one user's jobs"
            elif significant:
                row.status = "one-node"
                row.reason = f"{row.top_share:.0%} of what its failures name is one node"
        rows.sort(key=lambda r: (r.status != "suspect", r.test.q, -r.test.k))
        return rows

    def _nodes(
        self,
        failures: Sequence[FleetJob],
        primary: Mapping[str, str],
        domains: Sequence[DomainRow],
    ) -> tuple[list[NodeRow], dict[str, float]]:
        """The node test (module docstring); ``domains``: the suspect failure domains, which
        may explain their nodes."""
        blamed, named = self._blame_counts(failures)
        k_part: Counter[str] = Counter()
        n_part: Counter[str] = Counter()
        for node, n in self.exposure.items():
            part = primary.get(node, "")
            n_part[part] += n
            k_part[part] += len(blamed.get(node, ()))
        baselines = {p: (k_part[p] / n_part[p] if n_part[p] else 0.0) for p in n_part}
        suspect_domain = {
            node: row for row in domains if row.status == "suspect" for node in row.group.nodes
        }
        # the same cause again and again: each cause's rate over the whole fleet
        cause_k: Counter[str] = Counter()
        for jobs in blamed.values():
            cause_k.update(j.cause or j.sub_domain for j in jobs)
        all_n = sum(self.exposure.values())
        rows: list[NodeRow] = []
        for node, n in self.exposure.items():
            jobs = blamed.get(node, [])
            part = primary.get(node, "")
            k = len(jobs)
            rest_n = n_part[part] - n
            if rest_n > 0:
                p0 = (k_part[part] - k) / rest_n
            else:  # alone in its partition: the rest of the fleet, half a failure added
                p0 = (sum(k_part.values()) - k + 0.5) / (sum(n_part.values()) - n + 1)
            p_all = binomial_sf(k, n, p0)
            causes = Counter(j.cause or j.sub_domain for j in jobs)
            p_cause = 1.0
            if causes:
                # the same cause on the same device (GPU, HCA port, DIMM) again and again,
                # against the fleet's rate of that cause per node and run: one-off faults
                # land on different devices, a failing part repeats
                (cause, _part), k_c = Counter(
                    (j.cause or j.sub_domain, _device(j, node)) for j in jobs
                ).most_common(1)[0]
                others = all_n - n
                # half a failure added: a cause seen nowhere else is rare, not impossible
                p0_c = (cause_k[cause] - causes[cause] + 0.5) / (others + 1)
                p_cause = binomial_sf(k_c, n, p0_c)
            # two tests of one node: Bonferroni
            test = Test(k, n, p0, min(1.0, 2 * min(p_all, p_cause)))
            devices: Counter[str] = Counter()
            for job in jobs:
                for b in job.responsible:
                    if b.node == node and (b.device or b.component):
                        devices[b.device or str(b.component)] += 1
            ends = [j.end for j in jobs if j.end is not None]
            rows.append(
                NodeRow(
                    node=node,
                    partition=part or None,
                    test=test,
                    status="ok",
                    reason="",
                    users=len({j.user for j in jobs}),
                    causes=dict(causes.most_common()),
                    devices=dict(devices.most_common()),
                    first=min(ends) if ends else None,
                    last=max(ends) if ends else None,
                    jobs=tuple(j.key for j in jobs),
                    named=named.get(node, 0),
                )
            )
        self._blamed_jobs = blamed
        for row, q in zip(rows, bh([r.test.p for r in rows]), strict=True):
            t = row.test = Test(row.test.k, row.test.n, row.test.baseline, row.test.p, q)
            row.status, row.reason = self._judge(row, t, suspect_domain.get(row.node))
        rows.sort(key=lambda r: (_RANK[r.status], r.test.q, -r.test.k, r.node))
        return rows, baselines

    def _judge(
        self,
        row: NodeRow,
        t: Test,
        domain: DomainRow | None,
    ) -> tuple[str, str]:
        """A node's status and reason from its test (the module docstring's rules)."""
        o = self.options
        top = next(iter(row.causes), "")
        device = next(iter(row.devices), None)
        on = f" on {device}" if device and row.devices[device] * 2 > t.k else ""
        if t.k < o.min_failures:
            return ("low-count" if t.k else "ok"), ""
        if not (t.q <= o.q and t.ratio >= o.min_ratio):
            return "ok", ""
        if row.users < o.min_users:
            return "one-user", f"all {t.k} failures are one user's jobs ({top}): user problem?"
        jobs = self._blamed_jobs.get(row.node, ())
        if domain is not None and sum(domain_failure(domain.group.kind, j) for j in jobs) * 2 < len(
            jobs
        ):
            domain = None  # most of its failures are of a kind the domain cannot cause (a DIMM)
        if domain is not None:
            # the node against the rest of the domain's failure rate (the domain's failures
            # on it taken out, half a failure kept: never a zero rate)
            d = domain.test
            p_dom = (max(d.k - t.k, 0) + 0.5) / (max(d.n - t.n, 0) + 1)
            p = binomial_sf(t.k, t.n, p_dom)
            if p > o.q / max(len(self.exposure), 1):  # Bonferroni inside the domain
                row.domain = domain.group.label
                return "domain", f"explained by {domain.group.label} ({d.k} failed jobs under it)"
        return "suspect", f"{top}{on} in {t.k} jobs of {row.users} users, {_times(t.ratio)}"

    # ------------------------------------------------------------------ silent nodes

    def _silent(self, primary: Mapping[str, str]) -> tuple[list[SilentRow], list[tuple[str, ...]]]:
        o = self.options
        silent = [j for j in self.failures if j.silent]
        # first every node of a job Slurm lost counts; then a job that does not say which node
        # failed is given to its node(s) with the most such losses (explaining away the
        # bystanders that happened to run beside a failing node)
        first: Counter[str] = Counter(n for j in silent for n in j.fault_nodes)
        lost: dict[str, list[FleetJob]] = defaultdict(list)
        for job in silent:
            nodes = job.fault_nodes
            if len(nodes) > 1:
                top = max(first[n] for n in nodes)
                nodes = tuple(n for n in nodes if first[n] == top)
            for node in nodes:
                lost[node].append(job)
        events: dict[str, list[NodeEvent]] = defaultdict(list)
        for event in self.node_events:
            if node_failure(event):
                events[event.node].append(event)
        if not lost and not events:
            return [], []
        k_part: Counter[str] = Counter()
        n_part: Counter[str] = Counter()
        for node, n in self.exposure.items():
            n_part[primary.get(node, "")] += n
            k_part[primary.get(node, "")] += len(lost.get(node, ()))
        rows = []
        for node in sorted(set(lost) | set(events)):
            n = self.exposure.get(node, 0)
            k = len(lost.get(node, ()))
            part = primary.get(node, "")
            rest_n = n_part[part] - n
            p0 = (k_part[part] - k) / rest_n if rest_n > 0 else 0.0
            times = [j.end for j in lost.get(node, ()) if j.end] + [
                e.at for e in events.get(node, ())
            ]
            rows.append(
                SilentRow(
                    node,
                    Test(k, n, p0, binomial_sf(k, n, p0)),
                    len(events.get(node, ())),
                    "ok",
                    "",
                    min(times) if times else None,
                    max(times) if times else None,
                )
            )
        for row, q in zip(rows, bh([r.test.p for r in rows]), strict=True):
            t = row.test = Test(row.test.k, row.test.n, row.test.baseline, row.test.p, q)
            by_jobs = t.k >= o.min_failures and t.q <= o.q and t.ratio >= o.min_ratio
            by_events = row.events >= o.silent_min_events
            if by_jobs or by_events:
                row.status = "suspect"
                parts = []
                if t.k:
                    parts.append(f"lost under {t.k} job(s) (NODE_FAIL), {_times(t.ratio)}")
                if row.events:
                    parts.append(f"{row.events} not-responding events")
                row.reason = "; ".join(parts)
        cohorts = _cohorts([r for r in rows if r.status == "suspect"])
        for number, members in enumerate(cohorts, start=1):
            for row in rows:
                if row.node in members:
                    row.cohort = number
        rows.sort(key=lambda r: (r.status != "suspect", r.test.q, -r.test.k - r.events))
        return rows, cohorts

    # ------------------------------------------------------------------ links

    def _links(
        self, failures: Sequence[FleetJob], suspect_nodes: Mapping[str, str]
    ) -> list[LinkRow]:
        o = self.options
        pair_jobs: dict[tuple[str, str], list[FleetJob]] = defaultdict(list)
        node_jobs: Counter[str] = Counter()
        total = 0
        for job in failures:
            if job.sub_domain not in COMMON_DOMAINS or not job.links:
                continue
            pairs = {tuple(sorted((a, b))) for a, b in job.links if a != b and a and b}
            if not pairs:
                continue
            total += 1
            for pair in pairs:
                pair_jobs[(pair[0], pair[1])].append(job)
            for node in {n for pair in pairs for n in pair}:
                node_jobs[node] += 1
        rows = []
        for (a, b), jobs in pair_jobs.items():
            k = len(jobs)
            p0 = min(1.0, (node_jobs[a] / total) * (node_jobs[b] / total)) if total else 0.0
            # the pair's own jobs make both node rates; take them out of the expectation
            ka, kb = node_jobs[a] - k, node_jobs[b] - k
            p0 = max(p0 if k < o.min_failures else (max(ka, 1) * max(kb, 1)) / total**2, 1e-9)
            rows.append(
                LinkRow(
                    a,
                    b,
                    Test(k, total, p0, binomial_sf(k, total, p0)),
                    "ok",
                    "",
                    len({j.user for j in jobs}),
                    tuple(j.key for j in jobs),
                )
            )
        for row, q in zip(rows, bh([r.test.p for r in rows]), strict=True):
            t = row.test = Test(row.test.k, row.test.n, row.test.baseline, row.test.p, q)
            share = t.k / max(min(node_jobs[row.a], node_jobs[row.b]), 1)
            bad_end = next((n for n in (row.a, row.b) if n in suspect_nodes), None)
            if t.k >= o.min_failures and t.q <= o.q and row.users >= o.min_users:
                if bad_end is not None:
                    row.status = "node"
                    row.reason = f"explained by {bad_end}, itself a suspect node"
                elif share >= 0.5:
                    row.status = "suspect"
                    row.reason = (
                        f"{t.k} failed jobs of {row.users} users report errors between them"
                        f" ({share:.0%} of either node's peer errors)"
                    )
                else:
                    row.status = "node"
                    busiest = row.a if node_jobs[row.a] >= node_jobs[row.b] else row.b
                    row.reason = f"{busiest} is named with many peers: the node, not this link"
            if is_node_name(row.a) and is_node_name(row.b):
                row.confirm = (
                    f"srun -N2 -w {row.a},{row.b} --gpus-per-node=8 --ntasks-per-node=8"
                    " all_reduce_perf -b 8 -e 4G -f 2 -g 1   (a template: set 8 to the nodes'"
                    " GPUs, add your --mpi=; then each of the two with a third, healthy node)"
                )
        rows.sort(key=lambda r: (_RANK.get(r.status, 5), r.test.q, -r.test.k))
        return rows

    # ------------------------------------------------------------------ GPUs

    def _gpus(self) -> list[GpuRow]:
        seen: dict[tuple[str, str], list[tuple[FleetJob, GpuMark]]] = defaultdict(list)
        app_gpus: dict[tuple[str | None, str | None, str | None], set[tuple[str, str]]] = (
            defaultdict(set)
        )
        for job in self.failures:
            for mark in job.gpu_errors:
                seen[(mark.node, mark.device)].append((job, mark))
                app_gpus[(job.user, job.name, mark.xid_class)].add((mark.node, mark.device))
        rows = []
        for (node, device), items in seen.items():
            jobs = {j.key for j, _ in items}
            codes = Counter(m.code for _, m in items)
            apps = {(j.user, j.name) for j, _ in items}
            hardware = [m for _, m in items if m.code not in HISTORY_XIDS]
            history = [(j, m) for j, m in items if m.code in HISTORY_XIDS]
            classes = Counter(
                m.xid_class for _, m in history if m.xid_class is not None
            ).most_common()
            several_apps = any(
                len({(j.user, j.name) for j, m in history if m.xid_class == cls}) >= 2
                for cls, _ in classes
            )
            if len({j.key for j, m in items if m in hardware}) >= 2 or several_apps:
                status = "gpu"
                reason = (
                    f"XIDs from {len(apps)} applications in {len(jobs)} jobs: the GPU"
                    if several_apps
                    else f"hardware XIDs in {len(jobs)} jobs"
                )
            elif history and any(
                len(app_gpus[(j.user, j.name, m.xid_class)]) >= 2 for j, m in history
            ):
                status = "application"
                reason = "the same application faults on other GPUs too: the application"
            else:
                status = "once"
                reason = ""
            rows.append(
                GpuRow(
                    node, device, len(jobs), len(apps), dict(codes.most_common()), status, reason
                )
            )
        rows.sort(key=lambda r: ({"gpu": 0, "application": 1}.get(r.status, 2), -r.jobs))
        return rows

    # ------------------------------------------------------------------ drains

    def _drains(
        self, rows: Sequence[NodeRow], silent: Sequence[SilentRow], primary: Mapping[str, str]
    ) -> tuple[list[str], list[str]]:
        """One ``scontrol ... state=drain`` line per suspect node, then per suspect silent
        node not listed yet, the most significant first, at most ``max_drain_share`` of a
        partition's nodes (at least one); a one-user node's line is commented out."""
        o = self.options
        size = Counter(primary.get(n, "") for n in self.exposure)
        used: Counter[str] = Counter()
        lines: list[str] = []
        held: list[str] = []
        listed: set[str] = set()
        wanted: list[tuple[str, str, str, datetime | None, Test]] = [
            (row.node, row.status, row.reason, row.first, row.test)
            for row in rows
            if row.status in ("suspect", "one-user")
        ]
        wanted += [
            (row.node, "suspect", row.reason, row.first, row.test)
            for row in silent
            if row.status == "suspect"
        ]
        for node, status, why, first, t in wanted:
            if node in listed:
                continue
            listed.add(node)
            if not is_node_name(node):
                held.append(f"{node[:40]!r}: not a plain host name, no line printed")
                continue
            part = primary.get(node, "")
            cap = max(1, math.floor(size[part] * o.max_drain_share))
            since = first.strftime("%Y-%m-%d") if first else "?"
            if status == "suspect":
                stats = f" (p={t.p:.1e} q={t.q:.1e})" if t.k else ""
                reason = f"attribution node problem: {why}, since {since}{stats}"
                if used[part] >= cap:
                    held.append(f"{node} (partition {part or '?'}: cap of {cap} reached)")
                    continue
                used[part] += 1
                lines.append(
                    f'scontrol update nodename={node} state=drain reason="{_clean(reason)}"'
                )
            else:
                reason = f"attribution user problem: {why}"
                lines.append(
                    f'# scontrol update nodename={node} state=drain reason="{_clean(reason)}"'
                )
        return lines, held


_RANK = {"suspect": 0, "domain": 1, "one-user": 2, "node": 2, "low-count": 3, "ok": 4}


def domain_failure(kind: str, job: FleetJob) -> bool:
    """Whether a failure is one a failure domain of ``kind`` could cause: a switch's are
    network failures (infrastructure); a block's or an NVLink domain's, those and its NVLink
    fabric's (an NVLink, NVSwitch or Fabric Manager cause or part); a rack's or any other
    group's (power, cooling), every failure that is not the application's own and names no
    GPU or DIMM of its own, and nodes Slurm lost."""
    if job.sub_domain == "infrastructure":
        return True
    if kind == "switch":
        return False
    fabric = any(
        part in (job.cause or "") or any(part in (b.component or "") for b in job.responsible)
        for part in FABRIC_PARTS
    )
    if kind in ("block", "nvlink_domain"):
        return fabric
    return job.silent or (job.sub_domain in ("ambiguous", "unattributed") and not job.responsible)


def _device(job: FleetJob, node: str) -> str | None:
    """The device (else the component) a job's verdict blames on ``node``."""
    for blame in job.responsible:
        if blame.node == node:
            return blame.device or blame.component
    return None


def _times(ratio: float) -> str:
    """A rate ratio against a node's partition, in words."""
    if math.isinf(ratio):
        return "never elsewhere in its partition"
    return f"{ratio:.1f}x its partition"


def _clean(text: str) -> str:
    """A drain reason safe inside double quotes on a shell line (and short)."""
    text = "".join(c if c.isprintable() and c not in '"\\`$' else " " for c in text)
    return text[:MAX_REASON]


def _bursts(jobs: Sequence[FleetJob], window: float) -> Iterable[list[FleetJob]]:
    """Runs of jobs (sorted by end) each ending within ``window`` seconds of the previous
    one, the whole run spanning at most ten windows."""
    burst: list[FleetJob] = []
    for job in jobs:
        assert job.end is not None
        if burst:
            prev, first = burst[-1].end, burst[0].end
            assert prev is not None
            assert first is not None
            gap = (job.end - prev).total_seconds()
            if gap > window or (job.end - first).total_seconds() > 10 * window:
                yield burst
                burst = []
        burst.append(job)
    if burst:
        yield burst


def _cohorts(rows: Sequence[SilentRow], days: float = 2.0) -> list[tuple[str, ...]]:
    """Suspect silent nodes whose failure periods overlap (within ``days``): one cohort."""
    spans = sorted(
        (r.first, r.last, r.node) for r in rows if r.first is not None and r.last is not None
    )
    cohorts: list[list[str]] = []
    end: datetime | None = None
    for first, last, node in spans:
        if end is not None and first <= end + timedelta(days=days) and cohorts:
            cohorts[-1].append(node)
            end = max(end, last)
        else:
            cohorts.append([node])
            end = last
    return [tuple(c) for c in cohorts if len(c) >= 2]


def report_to_dict(report: FleetReport) -> dict[str, Any]:
    """The ``--json`` form of a fleet report."""
    from attribution.model import to_jsonable

    def test(t: Test) -> dict[str, Any]:
        return {
            "k": t.k,
            "n": t.n,
            "rate": t.rate,
            "baseline": t.baseline,
            "ratio": None if math.isinf(t.ratio) else t.ratio,
            "p": t.p,
            "q": t.q,
        }

    def rows(items: Iterable[Any]) -> list[dict[str, Any]]:
        out = []
        for item in items:
            data = {
                name: to_jsonable(getattr(item, name))
                for name in item.__slots__
                if name not in ("test", "group")
            }
            if hasattr(item, "test"):
                data["test"] = test(item.test)
            if hasattr(item, "group"):
                g = item.group
                data.update(kind=g.kind, name=g.name, label=g.label, size=len(g.nodes))
            out.append(data)
        return out

    o = report.options
    return {
        "schema": "attribution.fleet/1",
        "since": to_jsonable(report.since),
        "until": to_jsonable(report.until),
        "method": {
            "test": "one-sided binomial: a node's failures against its partition's rate without"
            " it, and its top cause on one device against the fleet's rate of that cause"
            " (Bonferroni over the two)",
            "correction": "Benjamini-Hochberg",
            **{name: getattr(o, name) for name in o.__slots__},
        },
        "runs": report.runs,
        "failed": report.failed,
        "exposure": report.exposure,
        "baselines": report.baselines,
        "nodes": rows(report.nodes),
        "domains": rows(report.domains),
        "silent": rows(report.silent),
        "cohorts": [list(c) for c in report.cohorts],
        "links": rows(report.links),
        "gpus": rows(report.gpus),
        "incidents": rows(report.incidents),
        "drain_suggestions": report.drains,
        "drains_held_back": report.held_back,
        "notes": report.notes,
    }


# ----------------------------------------------------------------------------- scoring


@dataclass(frozen=True, slots=True)
class Truth:
    """What a simulated fleet history planted (``truth.yaml``)."""

    bad_nodes: frozenset[str] = frozenset()
    bad_links: frozenset[tuple[str, str]] = frozenset()
    bad_domains: frozenset[str] = frozenset()
    silent_nodes: frozenset[str] = frozenset()
    buggy_users: frozenset[str] = frozenset()
    incidents: tuple[frozenset[str], ...] = ()
    spec: Mapping[str, Any] = field(default_factory=dict)
    # how many runs each planted fault ended ("node:gpu014", "link:gpu049-gpu060",
    # "domain:leaf09", "silent:gpu051"); None when the history does not say
    fault_runs: Mapping[str, int] | None = None

    def findable(self, kind: str, name: str, least: int) -> bool:
        """Whether a planted fault ended at least ``least`` runs (a fault that never showed
        cannot be found from jobs); true when the history does not say."""
        if self.fault_runs is None:
            return True
        return self.fault_runs.get(f"{kind}:{name.replace('|', '-')}", 0) >= least


def _overlap(a: frozenset[str], b: set[str] | frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def score(fleet: Fleet, report: FleetReport, truth: Truth) -> dict[str, Any]:
    """How well ``report`` finds what ``truth`` planted (``sattr backtest --fleet``).

    ``recall`` counts every planted fault; ``recall_findable`` only those that ended at
    least ``min_failures`` runs in the history (``Truth.findable``): a fault that never
    showed in a job cannot be found from jobs.

    Planted: bad nodes (found when suspect in the node ranking; the GPU view is not scored),
    bad links (a suspect pair), bad domains (a suspect domain, or an incident under it) and
    silent nodes (a suspect silent row). Flagged: every suspect row of those four kinds; a
    flag no planted fault explains is false. An incident is recovered when one found incident
    and the planted one share at least 80% of their jobs (Jaccard). ``buggy_user_suspects``:
    suspect nodes whose failed jobs are mostly a buggy user's (must be 0).
    """
    found_nodes = {r.node for r in report.nodes if r.status == "suspect"}
    found_links = {(r.a, r.b) for r in report.links if r.status == "suspect"}
    found_domains = {d.group.name for d in report.domains if d.status == "suspect"}
    incident_domains = {
        name
        for i in report.incidents
        if i.kind == "domain"
        for name in truth.bad_domains
        if name in i.label.split()
    }
    found_silent = {r.node for r in report.silent if r.status == "suspect"}
    planted = (
        [("node", n, n in found_nodes) for n in sorted(truth.bad_nodes)]
        + [("link", f"{a}|{b}", (a, b) in found_links) for a, b in sorted(truth.bad_links)]
        + [
            ("domain", d, d in found_domains or d in incident_domains)
            for d in sorted(truth.bad_domains)
        ]
        + [("silent", n, n in found_silent) for n in sorted(truth.silent_nodes)]
    )
    # a node flagged as a bad node or as a silent one is right when it is either: the drain
    # decision is per node (a bad DIMM that also makes the node stop responding is both)
    bad_or_silent = truth.bad_nodes | truth.silent_nodes
    flagged = (
        [("node", n, n in bad_or_silent) for n in sorted(found_nodes)]
        + [("link", f"{a}|{b}", (a, b) in truth.bad_links) for a, b in sorted(found_links)]
        + [("domain", d, d in truth.bad_domains) for d in sorted(found_domains)]
        + [("silent", n, n in bad_or_silent) for n in sorted(found_silent)]
    )
    user_of = {j.key: j.user for j in fleet.failures}
    buggy = [
        r.node
        for r in report.nodes
        if r.status == "suspect"
        and sum(user_of.get(k) in truth.buggy_users for k in r.jobs) * 2 > len(r.jobs)
    ]
    found_sets = [frozenset(i.jobs) for i in report.incidents]
    # a planted event that ended fewer than two jobs (nothing ran there) is no incident to find
    planted_incidents = [p for p in truth.incidents if len(p) >= 2]
    recovered = sum(any(_overlap(p, f) >= 0.8 for f in found_sets) for p in planted_incidents)
    spurious = sum(not any(_overlap(p, f) > 0 for p in truth.incidents) for f in found_sets)
    hits = sum(ok for _, _, ok in planted)
    least = fleet.options.min_failures
    shown = [(kind, name, ok) for kind, name, ok in planted if truth.findable(kind, name, least)]
    shown_hits = sum(ok for _, _, ok in shown)
    false = [f"{kind}:{name}" for kind, name, ok in flagged if not ok]
    return {
        "planted": len(planted),
        "found": hits,
        "recall": hits / len(planted) if planted else 1.0,
        "findable": len(shown),
        "found_findable": shown_hits,
        "recall_findable": shown_hits / len(shown) if shown else 1.0,
        "missed": [f"{kind}:{name}" for kind, name, ok in planted if not ok],
        "unfindable": [
            f"{kind}:{name}" for kind, name, _ in planted if not truth.findable(kind, name, least)
        ],
        "flagged": len(flagged),
        "false": len(false),
        "false_flags": false,
        "fdr": len(false) / len(flagged) if flagged else 0.0,
        "by_kind": {
            kind: {
                "planted": sum(1 for k, _, _ in planted if k == kind),
                "found": sum(ok for k, _, ok in planted if k == kind),
                "flagged": sum(1 for k, _, _ in flagged if k == kind),
                "false": sum(not ok for k, _, ok in flagged if k == kind),
            }
            for kind in ("node", "link", "domain", "silent")
        },
        "buggy_user_suspects": buggy,
        "incidents_planted": len(planted_incidents),
        "incidents_recovered": recovered,
        "incidents_found": len(found_sets),
        "incidents_spurious": spurious,
    }
