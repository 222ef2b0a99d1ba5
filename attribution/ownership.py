"""Whose is each event, can its source be trusted, and may it become a cause?

Node logs are shared by every job and user on the node and often hold the previous job's
failure; general syslog and the job's own output can be written by users. Before the rules
diagnose, every event gets three answers (docs/verdict.md, "Ownership and trust"):

- **owner** (``Owner``): ``job`` when it names this job's cgroup or job id, a GPU allocated to
  the job (by PCI bus id or index), or a process that printed the job's own output; ``node``
  when it is node-wide by nature (the extractor's ``emit.scope: node``); ``foreign`` when it
  names another job, another user's process or a GPU not allocated to the job; else ``unknown``.
- **trust**: from the source it was read from (``Trust``); a kernel-tagged syslog line that a
  trusted kernel source recording at that moment does not have is forged or foreign.
- **standing** (``Standing``): ``cause`` for this job's and node-wide events; ``support`` (may
  corroborate only) for unknown-owner events on a node the job shared at that moment;
  ``context`` for foreign and forged events and for what was logged before the job started,
  unless it is state that persists (a GPU that fell off the bus, Fabric Manager down).

Pure: no I/O. ``assess`` changes the events in place and returns what it learnt about the job.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from attribution.hostlist import compress
from attribution.model import (
    JOB_STREAMS,
    Coverage,
    CoverageStatus,
    Event,
    JobRecord,
    Owner,
    Standing,
    Stream,
    Trust,
)

# one GPU GRES of scontrol's per-node GRES text: gpu[:type]:count(IDX:list); shards, MPS and
# other GRES names are not GPUs of their own
_GRES_GPU = re.compile(r"(?<![\w-])gpu(?::[^:(),\s]+)?:\d+\(IDX:([^)]*)\)")
_BUS_ID = re.compile(
    r"(?:pci:)?(?:(?P<domain>[0-9a-f]{4,8}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-9a-f]{2})(?:\.[0-7])?"
)
_CGROUP_JOB = re.compile(r"/job_(\d+)(?=/|$)")
_CGROUP_UID = re.compile(r"/uid_(\d+)(?=/|$)")
CGROUP_FIELDS = ("oom_memcg", "task_memcg", "memcg", "cgroup")
JOB_ID_FIELDS = ("job_id", "jobid")
LINK_SECONDS = 5.0  # lines of one OOM report or crash are written within this
MATCH_SECONDS = 2.0  # a syslog copy of a kernel line is stamped within this of the original


def bus_key(text: str | None) -> str | None:
    """A PCI address in one form for comparing: ``0000:3b:00`` (domain, bus, device).

    ``PCI:0000:3b:00``, ``00000000:3B:00.0`` and ``3b:00.0`` all give ``0000:3b:00``;
    anything else (a GPU index, a UUID) gives None.
    """
    if not text:
        return None
    m = _BUS_ID.fullmatch(text.strip().lower())
    if m is None:
        return None
    domain = int(m.group("domain"), 16) if m.group("domain") else 0
    return f"{domain:04x}:{m.group('bus')}:{m.group('dev')}"


@functools.lru_cache(maxsize=4096)
def gres_gpu_indexes(text: str) -> frozenset[int]:
    """GPU indexes (minor numbers) in scontrol's per-node GRES text.

    ``gpu:h100:2(IDX:0-1)`` -> {0, 1}; ``gpu:a100:1(IDX:3),gpu:v100:1(IDX:5)`` -> {3, 5};
    ``""``, ``(null)`` or a GRES without GPUs -> empty. Cached: the nodes of a job mostly
    share one text, and the rules ask for the job's GPU count once each (19 times over
    12,500 nodes).
    """
    out: set[int] = set()
    for m in _GRES_GPU.finditer(text or ""):
        for part in m.group(1).split(","):
            lo, _, hi = part.strip().partition("-")
            if lo.isdecimal() and (not hi or hi.isdecimal()):
                first, last = int(lo), int(hi) if hi else int(lo)
                out.update(range(first, min(last, first + 1024) + 1))
    return frozenset(out)


@dataclass(slots=True)
class JobView:
    """What the job record says about ownership, per node.

    ``gpu_index``: node -> the job's GPU indexes there (None: not known). ``gpu_bus``: node ->
    their PCI bus ids (None: the index -> bus id map is not known). ``pids``: node -> process
    ids seen printing the job's own output.
    """

    job: JobRecord
    gpu_index: dict[str, frozenset[int] | None] = field(default_factory=dict)
    gpu_bus: dict[str, frozenset[str] | None] = field(default_factory=dict)
    pids: dict[str, set[int]] = field(default_factory=dict)
    node_bus: dict[str, frozenset[str]] = field(default_factory=dict)  # every GPU of the node
    nodes: frozenset[str] = frozenset()  # the job's nodes

    @classmethod
    def of(cls, job: JobRecord, pids: Mapping[str, Iterable[int]] | None = None) -> JobView:
        view = cls(
            job=job, pids={n: set(p) for n, p in (pids or {}).items()}, nodes=frozenset(job.nodes)
        )
        for node in job.nodes:
            text = job.gres_detail.get(node)
            if text is None and not (job.exclusive and node in job.gpu_bus_ids):
                view.gpu_index[node] = None
                view.gpu_bus[node] = None
                continue
            indexes = gres_gpu_indexes(text or "")
            if not indexes and job.exclusive and node in job.gpu_bus_ids:
                # an exclusive job may use every GPU of its nodes even with no GRES of its own
                indexes = frozenset(range(len(job.gpu_bus_ids[node])))
            view.gpu_index[node] = indexes
            buses = job.gpu_bus_ids.get(node)
            if buses is None:
                view.gpu_bus[node] = None
            else:
                view.node_bus[node] = frozenset(k for b in buses if (k := bus_key(b)))
                view.gpu_bus[node] = frozenset(
                    key for i in indexes if i < len(buses) and (key := bus_key(buses[i]))
                )
        return view

    def gpu_owner(
        self, node: str | None, device: str | None, *, is_gpu: bool = True
    ) -> tuple[Owner, str | None]:
        """The owner of an event on ``node`` naming ``device`` (a bus id or an index).
        ``is_gpu``: the line can only name a GPU (an XID); otherwise (PCIe AER) a bus id that
        is none of the node's GPUs is a root port or switch, node-wide."""
        if node is None or device is None:
            return Owner.UNKNOWN, None
        key = bus_key(device)
        if key is not None:
            mine = self.gpu_bus.get(node)
            if mine is None:
                return Owner.UNKNOWN, None
            if key in mine:
                return Owner.JOB, f"GPU {key} is allocated to the job"
            if key in self.node_bus.get(node, ()):
                return Owner.FOREIGN, f"GPU {key} is not allocated to this job"
            if is_gpu:
                # a GPU the map does not list: not one of the job's, whose bus ids are known
                return Owner.FOREIGN, (
                    f"GPU {key} is not allocated to this job (nor in {node}'s GPU map)"
                )
            return Owner.NODE, f"{key} is not a GPU of {node}"
        text = device.strip()
        if text.isdecimal():
            indexes = self.gpu_index.get(node)
            if indexes is None:
                return Owner.UNKNOWN, None
            if int(text) in indexes:
                return Owner.JOB, f"GPU {text} is allocated to the job"
            return Owner.FOREIGN, f"GPU {text} is not allocated to this job"
        return Owner.UNKNOWN, None

    def has_gpus(self) -> bool | None:
        """Whether the job has any GPU (None when the GRES of some node is not known)."""
        known = [v for v in self.gpu_index.values()]
        if not known or any(v is None for v in known):
            return None
        return any(known)


def job_gpu_count(job: JobRecord) -> int | None:
    """GPUs the job was allocated on all its nodes, from ``gres_detail`` (None: not known)."""
    if not job.nodes or any(n not in job.gres_detail for n in job.nodes):
        return None
    return sum(len(gres_gpu_indexes(job.gres_detail[n])) for n in job.nodes)


@dataclass(slots=True)
class Assessment:
    """What ``assess`` found: per-node sharing and GPU facts, and what could not be checked."""

    checked: bool = True
    notes: list[str] = field(default_factory=list)
    node_notes: dict[str, list[str]] = field(default_factory=dict)
    shared_with: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def summary(self, view: JobView) -> dict[str, Any]:
        """The verdict's ``ownership`` object."""
        job = view.job
        nodes = {}
        for node in job.nodes:
            gpus = view.gpu_bus.get(node)
            index = view.gpu_index.get(node)
            nodes[node] = {
                "gpus": sorted(gpus) if gpus is not None else None,
                "gpu_indexes": sorted(index) if index is not None else None,
                "other_jobs": self.shared_with.get(node, [])
                if job.other_jobs is not None
                else None,
            }
        return {
            "checked": self.checked,
            "exclusive": job.exclusive,
            "nodes": nodes if len(nodes) <= 64 else {},
            "events": dict(sorted(self.counts.items())),
            "notes": self.notes,
        }


def trust_of(coverage: Sequence[Coverage], stream: Stream, node: str | None) -> Trust | None:
    for c in coverage:
        if c.stream is stream and c.node == node:
            return c.trust
    return None


def recording(
    coverage: Sequence[Coverage], node: str | None, when: datetime, stream: Stream = Stream.KERNEL
) -> bool:
    """A trusted ``stream`` source of ``node`` was read and was recording at ``when`` (it has
    stamped lines, or journal entries, before and after it)."""
    for c in coverage:
        if (
            c.stream is stream
            and c.node == node
            and c.trust is Trust.TRUSTED
            and c.status is CoverageStatus.OK
            and c.first_at is not None
            and c.last_at is not None
            and c.first_at <= when <= c.last_at
        ):
            return True
    return False


def _recording_spans(
    coverage: Sequence[Coverage], stream: Stream = Stream.KERNEL
) -> dict[str | None, list[tuple[datetime, datetime]]]:
    """Per node, when its trusted ``stream`` sources were recording (``recording`` for many
    events: one pass over coverage)."""
    spans: dict[str | None, list[tuple[datetime, datetime]]] = defaultdict(list)
    for c in coverage:
        if (
            c.stream is stream
            and c.trust is Trust.TRUSTED
            and c.status is CoverageStatus.OK
            and c.first_at is not None
            and c.last_at is not None
        ):
            spans[c.node].append((c.first_at, c.last_at))
    return spans


def _job_ids(text: str) -> list[str]:
    return _CGROUP_JOB.findall(text)


def _process_owner(event: Event, view: JobView) -> tuple[Owner, str | None]:
    job = view.job
    uid = event.fields.get("uid")
    if isinstance(uid, int) and job.uid is not None and uid != job.uid:
        return Owner.FOREIGN, f"another user's process: uid {uid}"
    for name in CGROUP_FIELDS:
        value = event.fields.get(name)
        if not value:
            continue
        uids = {int(u) for u in _CGROUP_UID.findall(str(value))}
        if job.uid is not None and uids - {job.uid}:
            return Owner.FOREIGN, f"another user's process: cgroup {value}"
        ids = set(_job_ids(str(value)))
        if len(ids) > 1:
            return Owner.UNKNOWN, f"its cgroup {value} names several jobs"
        if ids:
            (found,) = ids
            if found == job.job_id:
                return Owner.JOB, f"its cgroup {value} is the job's"
            return Owner.FOREIGN, f"job {found}'s: cgroup {value}"
    pid = event.fields.get("pid")
    if isinstance(pid, int) and event.node and pid in view.pids.get(event.node, ()):
        event.owner_claimed = True  # only the job's own output says so (``_confirm``)
        return Owner.JOB, (
            f"process {pid} printed the job's own output (which users can write: the node is"
            " not blamed on this alone)"
        )
    return Owner.UNKNOWN, None


def _job_scoped(event: Event, job: JobRecord) -> tuple[Owner, str | None]:
    for name in JOB_ID_FIELDS:
        value = event.fields.get(name)
        if value not in (None, ""):
            text = str(value).split(".", 1)[0]
            if text in (job.job_id, job.display_id):
                return Owner.JOB, None
            return Owner.FOREIGN, f"job {text}'s"
    return Owner.NODE, None


def owner_of(event: Event, view: JobView) -> tuple[Owner, str | None]:
    """The owner of one event and why (see the module docstring)."""
    if event.stream in JOB_STREAMS:
        if event.scope == "gpu":
            owner, why = view.gpu_owner(event.node, event.device)
            if owner is Owner.FOREIGN:
                return owner, why
        return Owner.JOB, None
    if event.node is not None and view.nodes and event.node not in view.nodes:
        # a log of (or a line from) a host the job did not run on: never its evidence
        return Owner.FOREIGN, f"{event.node} is not one of the job's nodes"
    scope = event.scope
    if scope == "node":
        return Owner.NODE, None
    if scope == "gpu":
        allocated = view.gpu_owner(event.node, event.device, is_gpu=event.component == "gpu")
        if allocated[0] is not Owner.FOREIGN and any(
            event.fields.get(name) not in (None, "") for name in JOB_ID_FIELDS
        ):
            # the line names the job its GPU was given to (dcgm-exporter's hpc_job label); Slurm's
            # own allocation, when it says the GPU is another's, wins over the label
            return _job_scoped(event, view.job)
        return allocated
    if scope == "process":
        return _process_owner(event, view)
    if scope == "job":
        return _job_scoped(event, view.job)
    return Owner.UNKNOWN, None


def _link(events: list[Event]) -> None:
    """Process events that could not be placed take the owner of the line that names them:
    the same pid on the same node (an OOM kill line and its constraint line), else the nearest
    placed event of the same component in the same file within ``LINK_SECONDS`` (the "invoked
    oom-killer" line before its constraint line, an old kernel's "Task in ... killed" line)."""
    placed = [e for e in events if e.scope == "process" and e.owner in (Owner.JOB, Owner.FOREIGN)]
    if not placed:
        return
    by_pid: dict[tuple[str | None, int], Event] = {}
    nearby: dict[tuple[str | None, str, str | None], list[tuple[float, int, Event]]] = defaultdict(
        list
    )
    for e in placed:
        pid = e.fields.get("pid")
        if isinstance(pid, int):
            by_pid.setdefault((e.node, pid), e)
        if e.time is not None:
            nearby[(e.node, e.source.path, e.component)].append((e.time.timestamp(), e.seq, e))
    for group in nearby.values():
        group.sort(key=lambda item: (item[0], item[1]))
    for e in events:
        if e.scope != "process" or e.owner is not Owner.UNKNOWN:
            continue
        pid = e.fields.get("pid")
        source = by_pid.get((e.node, pid)) if isinstance(pid, int) else None
        if not isinstance(pid, int) and e.time is not None:  # another pid is another process
            group = nearby.get((e.node, e.source.path, e.component), [])
            t = e.time.timestamp()
            lo = bisect.bisect_left(group, t - LINK_SECONDS, key=lambda item: item[0])
            hi = bisect.bisect_right(group, t + LINK_SECONDS, key=lambda item: item[0])
            if lo < hi:
                source = min(group[lo:hi], key=lambda item: (abs(item[0] - t), item[1]))[2]
        if source is not None and source.owner is not None:
            e.owner = source.owner
            e.owner_note = source.owner_note
            e.owner_claimed = source.owner_claimed


def _shared_at(
    job: JobRecord, node: str | None, when: datetime | None, grace: float
) -> tuple[bool | None, list[str]]:
    """Was ``node`` shared with another job at ``when``? (None: not known), and with which."""
    if job.exclusive:
        return False, []
    others = job.other_jobs
    if others is None or node is None:
        return (True if job.exclusive is False else None), []
    slack = timedelta(seconds=grace)
    names = []
    for other in others.get(node, ()):
        if when is None:
            names.append(other.job_id)
            continue
        if (other.start is None or other.start - slack <= when) and (
            other.end is None or when <= other.end + slack
        ):
            names.append(other.job_id)
    return bool(names), names


def _forged(
    event: Event, trusted_copies: Mapping[tuple[str | None, str], list[Event]]
) -> Event | None:
    """For a kernel-tagged line from an untrusted source: the trusted kernel event that is the
    same line, if any."""
    for other in trusted_copies.get((event.node, event.name), ()):
        if other.label != event.label or other.time is None or event.time is None:
            continue
        last = other.last_time or other.time
        if (
            other.time - timedelta(seconds=MATCH_SECONDS)
            <= event.time
            <= last + timedelta(seconds=MATCH_SECONDS)
        ):
            return other
    return None


def _hosts(nodes: Sequence[str]) -> str:
    return compress(nodes) if len(nodes) > 1 else nodes[0]


def _names(jobs: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(jobs[:limit])
    return shown + (f" and {len(jobs) - limit} more" if len(jobs) > limit else "")


def assess(
    events: list[Event],
    job: JobRecord,
    coverage: Sequence[Coverage],
    *,
    pids: Mapping[str, Iterable[int]] | None = None,
    grace: float = 30.0,
) -> tuple[list[Event], JobView, Assessment]:
    """Set owner, trust, standing and a note on every event (in place).

    ``grace``: seconds around the job's start (and another job's span) within which clocks
    are not trusted to tell which side an event is on. Returns the events without the
    untrusted copies of lines a trusted source also has (they are the same line), the job view
    and the assessment.
    """
    view = JobView.of(job, pids)
    result = Assessment()
    sharing_known = job.exclusive is not None or job.other_jobs is not None
    if not sharing_known:
        result.checked = False
        result.notes.append(
            "whether the job shared its nodes is not known (no 'exclusive' or 'other_jobs' in"
            " the job record): events of unknown processes are counted as the job's"
        )
    # a job that had its nodes to itself (--exclusive) had every GPU on them: which ones is moot
    alone = job.exclusive is True
    no_gres = [] if alone else [n for n in job.nodes if view.gpu_index.get(n) is None]
    no_map = (
        []
        if alone
        else [n for n in job.nodes if view.gpu_index.get(n) and view.gpu_bus.get(n) is None]
    )
    if no_gres:
        result.checked = False
        result.notes.append(
            f"the job's GPUs on {_hosts(no_gres)} are not known (no 'gres_detail' in the job"
            " record; Slurm forgets them when a job ends, so the PrologSlurmctld hook records"
            " them at its start): GPU events there cannot be told from another job's"
        )
    if no_map:
        result.checked = False
        result.notes.append(
            f"the GPU index -> PCI bus id map of {_hosts(no_map)} is missing ('gpu_bus_ids';"
            " config gpus.bus_ids or gpus.bus_id_files): XIDs there cannot be told from another"
            " job's GPU"
        )
    for event in events:
        event.owner, event.owner_note = owner_of(event, view)
    _link(events)
    for event in events:
        if event.owner_claimed and not _shared_at(job, event.node, event.time, grace)[0]:
            # no other job is known to have run there: the claim is not needed to make it the
            # job's, so it takes nothing away either
            event.owner_claimed = False

    trusted_kernel: dict[tuple[str | None, str], list[Event]] = defaultdict(list)
    for event in events:
        if event.trusted and event.stream is Stream.KERNEL:
            trusted_kernel[(event.node, event.name)].append(event)
    kept: list[Event] = []
    start = job.start
    spans: dict[str | None, list[tuple[datetime, datetime]]] | None = None
    for event in events:
        owner = event.owner or Owner.UNKNOWN
        event.standing = Standing.CAUSE
        event.earlier = False
        if not event.trusted and event.stream is Stream.SYSLOG and event.ident == "kernel":
            if _forged(event, trusted_kernel) is not None:
                result.counts["duplicate"] += 1
                continue  # the same kernel line, also read from the trusted source
            if spans is None:  # one pass over coverage, not one per event
                spans = _recording_spans(coverage)
            if event.time is not None and any(
                first <= event.time <= last for first, last in spans.get(event.node, ())
            ):
                event.standing = Standing.CONTEXT
                event.owner_note = (
                    f"forged or foreign: {event.node}'s trusted kernel log was recording at this"
                    " time and has no such line; this copy is from syslog, which users can write"
                )
                result.counts["forged"] += 1
                kept.append(event)
                continue
        if owner is Owner.FOREIGN:
            event.standing = Standing.CONTEXT
            result.counts["foreign"] += 1
        elif (
            event.carried
            and owner is Owner.UNKNOWN
            and view.gpu_index.get(event.node or "") is not None
        ):
            # a GPU fault from long before the job, on a node whose GPUs for this job are known:
            # only the job's own GPU still being broken makes it this job's problem
            event.standing = Standing.CONTEXT
            event.earlier = True
            event.owner_note = (
                "a lasting fault logged before the job's window, on a GPU or process not known"
                " to be the job's"
            )
            result.counts["before_start"] += 1
        elif (
            owner is not Owner.JOB
            and start is not None
            and event.time is not None
            and (start - event.time).total_seconds() > grace
            and not event.persists
        ):
            event.standing = Standing.CONTEXT
            event.earlier = True
            event.owner_note = (
                "logged before the job started: the previous job's or the node's earlier state"
            )
            result.counts["before_start"] += 1
        elif (
            event.time is None
            and event.not_after is None
            and event.stream in (Stream.KERNEL, Stream.SYSLOG)
            and not event.persists
            and start is not None
        ):
            # an uptime stamp with no boot time to place it: it may be from long before the job
            event.standing = Standing.SUPPORT
            event.owner_note = (
                "time unknown (a kernel uptime stamp, and the node's boot time is not known):"
                " it may be from before the job"
            )
            result.counts["untimed"] += 1
        elif owner is Owner.UNKNOWN and event.stream not in JOB_STREAMS:
            shared, others = _shared_at(job, event.node, event.time, grace)
            if shared:
                event.standing = Standing.SUPPORT
                what = f"job(s) {_names(others)}" if others else "other jobs (exclusive=false)"
                event.owner_note = (
                    f"not known to be this job's: {event.node} was shared with {what}"
                )
                result.counts["weak"] += 1
                if event.node and others:
                    seen = result.shared_with.setdefault(event.node, [])
                    seen.extend(o for o in others if o not in seen)
            elif shared is False:
                event.owner_note = event.owner_note or (
                    f"counted as the job's: no other job ran on {event.node} then"
                )
        kept.append(event)
    if job.other_jobs is not None:
        for node, overlapping in job.other_jobs.items():
            if node in job.nodes:
                seen = result.shared_with.setdefault(node, [])
                seen.extend(o.job_id for o in overlapping if o.job_id not in seen)
    return kept, view, result


__all__ = [
    "Assessment",
    "JobView",
    "assess",
    "bus_key",
    "gres_gpu_indexes",
    "job_gpu_count",
    "owner_of",
    "recording",
    "trust_of",
]
