"""Frozen value types and closed vocabularies shared by every layer.

Times are timezone-aware ``datetime`` objects in UTC. Durations are seconds.
Nothing here does I/O, so the hook, the engine and the CLI can all import it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class Stream(enum.StrEnum):
    """Where a log line came from."""

    KERNEL = "kernel"  # dmesg / kern.log / journal -k
    SYSLOG = "syslog"  # /var/log/syslog, /var/log/messages
    FABRICMANAGER = "fabricmanager"  # NVIDIA Fabric Manager log
    DCGM = "dcgm"  # DCGM health / nv-hostengine log
    SLURMD = "slurmd"  # slurmd.log of a node
    SLURMCTLD = "slurmctld"  # slurmctld.log of the controller
    METRICS = "metrics"  # GPU metrics (dcgm-exporter via Prometheus), one line per change
    JOB_STDOUT = "job_stdout"  # the job's StdOut
    JOB_STDERR = "job_stderr"  # the job's StdErr


NODE_STREAMS: tuple[Stream, ...] = (
    Stream.KERNEL,
    Stream.SYSLOG,
    Stream.FABRICMANAGER,
    Stream.DCGM,
    Stream.SLURMD,
    Stream.METRICS,
)
JOB_STREAMS: tuple[Stream, ...] = (Stream.JOB_STDOUT, Stream.JOB_STDERR)

# Rule files may name a group instead of listing streams one by one.
STREAM_GROUPS: dict[str, tuple[Stream, ...]] = {
    "node": (Stream.KERNEL, Stream.SYSLOG),
    "job": JOB_STREAMS,
    "any": tuple(Stream),
}


class Trust(enum.StrEnum):
    """Whether a source can be written by the users whose jobs it is read for.

    ``trusted``: only the kernel, root's daemons or Slurm write it (dmesg, the journal's kernel
    transport, Fabric Manager, DCGM, slurmd, slurmctld, a file the site declares trusted).
    ``untrusted``: a user can put any line there (general syslog, the job's own output).
    Untrusted lines may corroborate, or support an application verdict; they never blame a node
    on their own.
    """

    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


# What each stream is unless the site says otherwise (config ``trust``, a bundle's bundle.json).
DEFAULT_TRUST: dict[Stream, Trust] = {
    Stream.KERNEL: Trust.TRUSTED,
    Stream.SYSLOG: Trust.UNTRUSTED,
    Stream.FABRICMANAGER: Trust.TRUSTED,
    Stream.DCGM: Trust.TRUSTED,
    Stream.SLURMD: Trust.TRUSTED,
    Stream.SLURMCTLD: Trust.TRUSTED,
    Stream.METRICS: Trust.TRUSTED,
    Stream.JOB_STDOUT: Trust.UNTRUSTED,
    Stream.JOB_STDERR: Trust.UNTRUSTED,
}


class Owner(enum.StrEnum):
    """Whose an event is (docs/verdict.md, "Ownership and trust").

    ``job``: names this job (its cgroup or job id), a GPU allocated to it, a process of its
    steps, or it is the job's own output. ``node``: node-wide by nature (reboot, panic,
    MCE/EDAC, NIC/HCA, Fabric Manager, NVSwitch, PCIe, a node OOM that no cgroup bounded).
    ``foreign``: another job, another user's process or a GPU not allocated to this job.
    ``unknown``: a process or GPU the evidence cannot place.
    """

    JOB = "job"
    NODE = "node"
    FOREIGN = "foreign"
    UNKNOWN = "unknown"


class Standing(enum.StrEnum):
    """What an event may do in the diagnosis, after ownership, trust and time were weighed.

    ``cause``: may explain the failure. ``support``: may only corroborate a cause (an
    unknown-owner event on a node the job shared). ``context``: shown, never a cause (another
    job's, another GPU's, forged, or logged before the job started).
    """

    CAUSE = "cause"
    SUPPORT = "support"
    CONTEXT = "context"


class SubDomain(enum.StrEnum):
    """Which part of the system the verdict blames (see docs/verdict.md)."""

    HARDWARE = "hardware"
    SYSTEM_SOFTWARE = "system_software"
    INFRASTRUCTURE = "infrastructure"
    APPLICATION = "application"
    AMBIGUOUS = "ambiguous"
    UNATTRIBUTED = "unattributed"
    NONE = "none"


# The sub_domains a cause can belong to (ambiguous/unattributed/none are outcomes).
CAUSE_DOMAINS: tuple[SubDomain, ...] = (
    SubDomain.HARDWARE,
    SubDomain.SYSTEM_SOFTWARE,
    SubDomain.INFRASTRUCTURE,
    SubDomain.APPLICATION,
)


class TerminalState(enum.StrEnum):
    """How the job ended, after reading the evidence."""

    PASS = "pass"
    FAIL = "fail"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"


class EventRole(enum.StrEnum):
    """What an extracted event usually is on its own (from the signature catalog)."""

    ROOT = "root"  # usually the cause
    SYMPTOM = "symptom"  # usually downstream of something else
    EITHER = "either"  # depends on what precedes it
    CONTEXT = "context"  # informational


class ChainRole(enum.StrEnum):
    """A symptom's place in the verdict's cascade."""

    ROOT = "root"
    DOWNSTREAM = "downstream"
    CONTEXT = "context"


# GPU metrics as NVIDIA's dcgm-exporter names them (docs/metrics.md): which series carry
# evidence and how each is read, and the labels that name a series' node and GPU.
# The label that names a series' node, in order of preference (dcgm-exporter sets Hostname).
NODE_LABELS: tuple[str, ...] = ("Hostname", "node", "instance", "host", "hostname")
GPU_LABEL, UUID_LABEL, BUS_LABEL, JOB_LABEL = "gpu", "UUID", "pci_bus_id", "hpc_job"

# Counters (or 0/1 gauges that only go up): series name -> whether a non-zero value at the first
# sample is worth a line (state the GPU was already in, such as a pending row remap), or only
# the rises are (lifetime totals that are rarely zero).
COUNTERS: Mapping[str, bool] = {
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": True,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": False,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": True,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": True,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": False,
    "DCGM_FI_DEV_RETIRED_DBE": False,
    "DCGM_FI_DEV_RETIRED_PENDING": True,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": False,
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": False,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": False,
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": False,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": False,
    "DCGM_FI_DEV_THERMAL_VIOLATION": False,
    "DCGM_FI_DEV_POWER_VIOLATION": False,
}
LAST_VALUE: frozenset[str] = frozenset({"DCGM_FI_DEV_XID_ERRORS"})
# the clock throttle (DCGM 3.3+: "clocks event") reasons, a bit mask of NVML's reasons
REASONS: frozenset[str] = frozenset(
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
)
EVIDENCE_SERIES: tuple[str, ...] = (*COUNTERS, *sorted(LAST_VALUE), *sorted(REASONS))
GPU_LABEL, UUID_LABEL, BUS_LABEL, JOB_LABEL = "gpu", "UUID", "pci_bus_id", "hpc_job"


class CoverageStatus(enum.StrEnum):
    """What we could read of one source (stream x node)."""

    OK = "ok"
    EMPTY = "empty"
    MISSING = "missing"
    UNREADABLE = "unreadable"
    ERROR = "error"
    UNREACHABLE = "unreachable"  # a remote source (Prometheus) did not answer


class Severity(enum.IntEnum):
    """How bad a signal or verdict is; ordered so that a larger value is worse."""

    INFO = 1
    WARNING = 2
    ERROR = 3
    CRITICAL = 4


class RuleStatus(enum.StrEnum):
    """Maturity of a rule; ``test`` and ``stable`` rules must carry examples."""

    EXPERIMENTAL = "experimental"
    TEST = "test"
    STABLE = "stable"
    DEPRECATED = "deprecated"


# Slurm job states (sacct State, base word only) grouped by what they mean for us.
SLURM_STATES: frozenset[str] = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "REQUEUED",
        "RESIZING",
        "REVOKED",
        "SUSPENDED",
        "TIMEOUT",
    }
)


@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where an event was read: a file (as shown to the user) and a 1-based line.

    When a reader started in the middle of a large file (a time-windowed read)
    the line number is unknown (0) and ``offset`` gives the byte offset instead.
    """

    path: str
    line: int
    offset: int | None = None

    def __str__(self) -> str:
        if self.line or self.offset is None:
            return f"{self.path}:{self.line}"
        return f"{self.path}@{self.offset}"


@dataclass(frozen=True, slots=True)
class OtherJob:
    """Another job that ran on one of this job's nodes during its evidence window (sacct)."""

    job_id: str
    start: datetime | None = None
    end: datetime | None = None  # None: still running when asked
    user: str | None = None  # its owner (so that ``sattr bundle --redact`` can replace the name)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What Slurm knows about one run of a job.

    Times are UTC. ``state`` is the base sacct State word (``CANCELLED``, not
    ``CANCELLED by 1001``; the uid goes to ``cancelled_by``). ``exit_code`` and
    ``derived_exit_code`` keep sacct's ``status:signal`` form.
    """

    job_id: str
    cluster: str | None = None
    sluid: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    restart_count: int = 0
    name: str | None = None
    user: str | None = None
    uid: int | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None
    cancelled_by: str | None = None
    reason: str | None = None
    exit_code: str | None = None
    derived_exit_code: str | None = None
    nodes: tuple[str, ...] = ()
    nodelist: str = ""
    start: datetime | None = None
    end: datetime | None = None
    time_limit: int | None = None  # seconds
    work_dir: str | None = None
    std_out: str | None = None
    std_err: str | None = None
    admin_comment: str | None = None
    failed_node: str | None = None
    # Site hints: node -> IP address(es), node -> boot time, and the timezone that
    # node-local timestamps without an offset are written in.
    node_addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    boot_times: Mapping[str, datetime] = field(default_factory=dict)
    timezone: str | None = None
    # Ownership facts (docs/bundles.md): whether the job had its nodes to itself (Slurm's
    # OverSubscribe=NO / --exclusive), scontrol's per-node GRES string
    # (``gpu:h100:2(IDX:0-1)``), each node's GPU PCI bus ids by minor number, and the other
    # jobs that ran on each node during the window. Absent: unknown.
    exclusive: bool | None = None
    gres_detail: Mapping[str, str] = field(default_factory=dict)
    gpu_bus_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    other_jobs: Mapping[str, tuple[OtherJob, ...]] | None = None
    # sacct fields the site's Slurm refused ("Invalid field requested"): read without them
    fields_missing: tuple[str, ...] = ()

    @property
    def display_id(self) -> str:
        """The id a user types: ``A_T`` for an array task, else the job id."""
        if self.array_job_id and self.array_task_id:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    @property
    def key(self) -> str:
        """Spool/store key: the SLUID, else ``<cluster>_<jobid>_<restart>``."""
        if self.sluid:
            return self.sluid
        cluster = self.cluster or "cluster"
        if self.array_job_id and self.array_task_id:
            return f"{cluster}_{self.array_job_id}_{self.array_task_id}_{self.restart_count}"
        return f"{cluster}_{self.job_id}_{self.restart_count}"

    @property
    def exit_status(self) -> int | None:
        """The exit status part of ``exit_code`` (``1`` for ``1:0``)."""
        return _split_exit(self.exit_code)[0]

    @property
    def exit_signal(self) -> int | None:
        """The signal part of ``exit_code`` (``9`` for ``0:9``)."""
        return _split_exit(self.exit_code)[1]

    @property
    def duration(self) -> float | None:
        """Elapsed seconds from start to end, when both are known."""
        if self.start and self.end:
            return (self.end - self.start).total_seconds()
        return None


def _split_exit(value: str | None) -> tuple[int | None, int | None]:
    if not value:
        return None, None
    head, _, tail = value.partition(":")
    try:
        status = int(head)
    except ValueError:
        status = None
    try:
        signal = int(tail) if tail else None
    except ValueError:
        signal = None
    return status, signal


@dataclass(slots=True)
class LogLine:
    """One line of evidence after prefix parsing.

    ``text`` is the message with the transport prefix (dmesg stamp, syslog
    header, NCCL ``host:pid:tid [dev]``, ``[rankN]:``, srun label) removed;
    ``raw`` is the line as read (capped). ``time`` is UTC or ``None`` when the
    line cannot be placed in time. ``host`` is a node name the line itself
    names; ``rank`` the global rank it was printed by, when known.
    """

    stream: Stream
    node: str | None
    text: str
    raw: str
    source: SourceRef
    time: datetime | None = None
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    device: str | None = None
    task: int | None = None
    ident: str | None = None  # the syslog program name (``kernel``, ``systemd``), when given
    trusted: bool | None = None  # None: what the stream is by default (``DEFAULT_TRUST``)


@dataclass(frozen=True, slots=True)
class OutputSilence:
    """When one job output file last said something before the job's teardown.

    The readers observe it while reading the file (``sources.lastoutput``) and hand it to
    ``analyze`` as a value; it becomes the ``job.last_output`` event (``ENGINE_EVENTS``).
    A job that stopped writing long before Slurm killed it at its time limit was hung, not
    short of time (CHAINS.md 11).
    """

    stream: Stream
    node: str | None
    file: str  # as shown in the verdict
    line: int  # line number of the last timed line (0: unknown, see ``offset``)
    offset: int | None  # its byte offset when the line number is unknown
    at: datetime  # its time (UTC)
    silent_s: float  # from it to the job's end
    share: float  # ``silent_s`` as a share of the run
    untimed_after: int  # ordinary untimed lines after it (progress bars, prints)
    untimed_bytes: int
    timed_before: int  # timed lines before it, counted up to five

    @property
    def text(self) -> str:
        return (
            f"attribution: last timed output line at {self.at:%Y-%m-%dT%H:%M:%S}Z: silent for"
            f" {self.silent_s / 60:.0f} min ({self.silent_s:.0f} s, share {self.share:.2f} of"
            f" the run) before the job ended; {self.untimed_after} untimed ordinary line(s)"
            f" ({self.untimed_bytes} bytes) after it; {self.timed_before} timed line(s) before it"
        )


# Events the engine makes itself, from observations rather than log lines: event name ->
# (role, what it means). Rules use them like extracted events (docs/rules.md).
ENGINE_EVENTS: dict[str, tuple[EventRole, str]] = {
    "job.last_output": (
        EventRole.CONTEXT,
        "when a job output file last said something before the job's teardown (fields: at,"
        " minutes, silent_s, share, untimed_after, untimed_bytes, timed_before)",
    ),
}


@dataclass(slots=True)
class Event:
    """One extracted, typed log line.

    ``name`` is the event type (``gpu.xid``), ``rule`` the extractor as
    ``id@version``, ``fields`` the typed named groups plus table lookups.
    ``role`` starts as the extractor's role and may be changed by correlation;
    ``demoted_by`` names the correlation rule that made it downstream.
    """

    name: str
    rule: str
    stream: Stream
    node: str | None
    time: datetime | None
    fields: dict[str, Any]
    source: SourceRef
    text: str
    role: EventRole
    label: str
    severity: Severity = Severity.WARNING
    rank: int | None = None
    device: str | None = None
    component: str | None = None
    task: int | None = None  # Slurm task id (srun --label), when the line carried one
    in_window: bool | None = None  # None: untimed
    during_job: bool | None = None  # inside [start, end] exactly; None: untimed or no times
    demoted_by: str | None = None
    context_by: str | None = None
    seq: int = 0  # stable order of extraction
    count: int = 1  # identical repeats folded into this event
    last_time: datetime | None = None  # time of the last folded repeat
    persists: bool = False  # a state that lasts until reboot (e.g. Fabric Manager failed)
    cleared_by: tuple[str, ...] = ()  # events that end the state earlier (emit.cleared_by)
    note: str | None = None  # why the engine treated this event specially
    # for an untimed line: the time of the next timed line of the same file (it was written
    # no later than that), so that time order still holds against timed evidence
    not_after: datetime | None = None
    reported_late: float = 0.0  # seconds the line may lag what it reports (emit.reported_late)
    scope: str | None = None  # what the line is about: node, gpu, process or job (emit.scope)
    ident: str | None = None  # the syslog program name the line carried (``kernel``)
    named: bool = False  # the line's words name its node (``emit.node``), not its host prefix
    trusted: bool = True  # read from a source users cannot write
    owner: Owner | None = None  # whose it is (None until ``attribution.ownership`` assessed it)
    standing: Standing = Standing.CAUSE  # what it may do in the diagnosis
    owner_note: str | None = None  # why it has that owner or standing, for the chain
    owner_claimed: bool = False  # the job's (untrusted) output made it the job's: no blame
    earlier: bool = False  # context only because it was logged before the job started
    carried: bool = False  # a persisting fault brought in from before the job's window

    @property
    def timed(self) -> bool:
        return self.time is not None


@dataclass(slots=True)
class Finding:
    """A correlation result: a named conclusion drawn from several events."""

    name: str
    rule: str
    nodes: tuple[str, ...]
    fields: dict[str, Any]
    events: list[Event]
    time: datetime | None
    summary: str
    device: str | None = None
    component: str | None = None


@dataclass(frozen=True, slots=True)
class Responsible:
    """A node (and where known the component and device) the verdict blames."""

    node: str
    component: str | None = None
    device: str | None = None
    # the trusted source(s) that back blaming it (``kernel``, ``fabricmanager``, ``slurm`` for
    # Slurm's own record); None for a suspect, which no trusted source backs
    confirmed_by: str | None = None


@dataclass(frozen=True, slots=True)
class Cause:
    """The diagnosis rule that won: id, title and ``id@version``."""

    id: str
    title: str
    rule: str


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One line of the symptom chain: events of one kind grouped across nodes."""

    symptom: str
    event: str
    role: ChainRole
    count: int
    nodes: tuple[str, ...]
    node_count: int
    first_at: datetime | None
    last_at: datetime | None
    stream: str
    example: str
    source: str
    rule: str
    note: str | None = None
    owner: str | None = None  # ``Owner`` of the grouped events
    trust: str | None = None  # ``Trust`` of the source they were read from


@dataclass(frozen=True, slots=True)
class GpuError:
    """One GPU's XID of one code during the job: the record kept for repeat analysis.

    ``device`` is the PCI bus id as the driver printed it; ``unit`` the GPC/TPC
    the driver named (XID 13), else None; ``xid_class`` the class NVIDIA's XID
    catalog gives the code (hardware, application, ...); times UTC.
    """

    node: str
    device: str
    code: int
    xid_class: str | None = None
    unit: str | None = None
    first_at: datetime | None = None
    count: int = 1


@dataclass(frozen=True, slots=True)
class Alternative:
    """A candidate cause that matched but lost, and why."""

    cause: Cause
    sub_domain: SubDomain
    responsible: tuple[Responsible, ...]
    summary: str
    why_not: str
    priority: int


# What a coverage note says, by its code: a ``str.format`` template over the note's args.
# The codes and args are part of the verdict JSON (docs/verdict.md, "Coverage notes"): add
# codes, never change what one means.
COVERAGE_NOTES: Mapping[str, str] = {
    # a source and its files
    "no_file": "no file for this source",
    "nodes_folded": "{count} nodes of the job have no log here, in this one entry",
    "unreadable": "{file}: {error}",
    "read_error": "{file}: read error after {lines} lines: {error}",
    "reader_failed": "reader failed: {error}",
    "more_notes": "and {count} more such note(s)",
    # damaged or odd lines
    "long_lines": "{count} over-long line(s) cut at {max_line} bytes",
    "nul_bytes": "{count} line(s) with NUL bytes",
    "odd_prefix": "{count} line(s) with an unreadable prefix read as text",
    # node clocks
    "earlier_boot": "{count} line(s) from a boot before the node's last one (which began before"
    " the job) were skipped as outside the job window",
    "uptime_only": "{count} line(s) carry only kernel uptime and no boot time is known: signals"
    " from them are untimed",
    "clock_ahead": "{file}: every line is stamped after the job window (from {first}); if this"
    " node's clock runs ahead, its events during the job are hidden",
    "clock_went_back": "{file}: the clock went back after byte {offset} (lines stamped {last},"
    " later {back}); read to the end",
    # reading by the job window
    "file_outside_window": "{file}: skipped, its lines are outside the job window",
    "window_start": "{file}: read from byte {offset}, the start of the job window",
    "past_window": "{file}: stopped at byte {offset}, past the job window",
    # systemd journals
    "journalctl_missing": "journalctl is not installed: journal files cannot be read",
    "journalctl_failed": "cannot run journalctl: {error}",
    "journalctl_error": "journalctl: {error}",
    "not_journal_entry": "{file}:{line}: not a journal entry, skipped",
    "journal_mixed_trust": "mixed trust, judged per entry: root's processes' entries are trusted,"
    " users' are not (the source as a whole is listed as untrusted)",
    "no_entries": "no entries of this kind in the job's window",
    # evidence bundles
    "outside_bundle": "{file}: not a directory inside the bundle, not read",
    "cannot_list": "{file}: cannot list: {error}",
    "link_out_of_bundle": "{file}: a link out of the bundle, not followed",
    "not_regular_file": "{file}: not a regular file, not read",
    "not_host_name": "{file}: not a host name, not read",
    "bad_node_name": "node name {node!r} is not a host name; its logs not read",
    "unknown_log_name": "{file}: unknown log name, not read",
    # a live job's logs (the worker's configuration)
    "no_template": "no path template for {key} in the configuration (logs.{key})",
    "no_match": "no file matches {templates}",
    "files_before_window": "{count} file(s) matching {templates} end before the job window",
    "no_journal_match": "no journal file matches {templates}",
    "journal_files_before_window": "{count} journal file(s) matching {templates} end before the"
    " job window",
    "job_output_off": "job output reading is turned off",
    "no_output_path": "Slurm gave no output path",
    "dev_null": "the job wrote this stream to /dev/null",
    "relative_path": "{file}: not an absolute path",
    "owner_unknown": "{file}: job owner unknown",
    "refused": "{file}: {why}",
    "tail_only": "only the last {bytes} bytes were read (job_output.max_bytes)",
    "sparse_output": "{file}: a sparse file ({holes} bytes are holes that hold nothing); only the"
    " data it holds was read",
    "progress_sampled": "{file}: after its first {lines} picked lines, progress lines (steps,"
    " bars) were sampled: each block's last one was parsed, the rest were not counted",
    # the analysis
    "ownership_unchecked": "ownership not checked: {why}",
    "slurm_fields_missing": "this Slurm's sacct has no {fields}: the job record was read"
    " without them",
    "folded": "{count} signal(s) beyond the bounds of distinct ranks, events or memory"
    " (reading.max_ranks, max_events, evidence_memory) were counted, but their rank and field"
    " detail was not kept",
    # GPU metrics (docs/metrics.md)
    "metrics_read": "{series} series, {samples} samples read",
    "metrics_no_series": "no series for this node in the job's window (no exporter there, or its"
    " node label is not metrics.node_label)",
    "metrics_bad_file": "{file}: {why}",
    "metrics_too_large": "{file}: larger than {limit} bytes, not read",
    "metrics_bad_times": "{file}: {count} sample(s) left out, their time is no date (before 1970"
    " or after 9999)",
    "metrics_series_cap": "{count} series beyond the limit of {limit} not read",
    "metrics_other_hosts": "{count} series of hosts outside the job left out",
    "metrics_no_node": "{count} series without a node label left out",
    "metrics_folded": "{series} changed more often than the {limit} lines one series gives; the"
    " rest are not shown",
    "prometheus_unreachable": "{url}: {error} (asked for {nodes})",
    "prometheus_timeout": "{url}: no whole answer within {seconds} s (metrics.timeout; asked for"
    " {nodes})",
    "prometheus_error": "{url}: {error} (asked for {nodes})",
    "prometheus_cap": "more than {limit} series (metrics.max_series): {count} node(s) not read in"
    " full ({nodes})",
    "regex_timeout": "{count} line(s) skipped by {rule}: its pattern ran out of time (after 20"
    " such lines a rule is not tried again in the job)",
    "condition_timeout": "{count} value(s) a rule condition's pattern ran out of time on, read as"
    " not matching (after 20 such values the pattern is not tried again in the job): {pattern}",
}


@dataclass(frozen=True, slots=True)
class CoverageNote:
    """One remark of a coverage entry, for programs: a ``code`` from ``COVERAGE_NOTES`` and
    the values it names (``args``: file names, byte offsets, counts). ``text`` is the sentence
    people read, made from both."""

    code: str
    args: Mapping[str, int | str] = field(default_factory=dict, hash=False)

    @property
    def text(self) -> str:
        template = COVERAGE_NOTES.get(self.code)
        if template is None:  # a code of a newer version, read back from its JSON
            shown = ", ".join(f"{k}={v}" for k, v in self.args.items())
            return f"{self.code} ({shown})" if shown else self.code
        return template.format_map(self.args)


def join_notes(notes: Iterable[CoverageNote]) -> str | None:
    """The ``reason`` sentence of a coverage entry with these notes (None without notes)."""
    return "; ".join(n.text for n in notes) or None


@dataclass(frozen=True, slots=True)
class Coverage:
    """What we could read of one source (stream x node).

    ``bytes`` and ``lines`` count what was read; ``untimed`` lines could not be
    placed in time; ``outside_window`` lines were read but fell outside the
    job window; ``reason`` explains anything that is not ``ok``, in words; ``notes``
    says the same for programs, one ``CoverageNote`` (code and args) per remark.
    Made with ``notes`` and no ``reason``, the reason is their sentences joined.
    """

    stream: Stream
    node: str | None
    status: CoverageStatus
    files: tuple[str, ...] = ()
    bytes: int = 0
    lines: int = 0
    untimed: int = 0
    outside_window: int = 0
    reason: str | None = None
    notes: tuple[CoverageNote, ...] = ()
    trust: Trust | None = None
    # the time span the source is known to have been recording (first and last stamped line
    # seen; for a journal, its first and last entry of any kind): a trusted source that recorded
    # past a moment and lacks a line at that moment did not see it happen
    first_at: datetime | None = None
    last_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.reason is None and self.notes:
            object.__setattr__(self, "reason", join_notes(self.notes))

    @property
    def codes(self) -> tuple[str, ...]:
        """The codes of this entry's notes, in order."""
        return tuple(n.code for n in self.notes)

    def noted(self, *notes: CoverageNote) -> Coverage:
        """This entry with ``notes`` added (to its reason too)."""
        if not notes:
            return self
        reason = "; ".join([*([self.reason] if self.reason else []), *(n.text for n in notes)])
        return dataclasses.replace(self, notes=(*self.notes, *notes), reason=reason)


@dataclass(frozen=True, slots=True)
class Confidence:
    """How far to trust the verdict: ``high``, ``medium`` or ``low``, with a one-line reason."""

    level: str
    reason: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the nodes a verdict is about sit in the cluster: the smallest failure domain (a
    leaf switch, a block, a rack, an NVLink domain; Slurm's topology.conf and the site's group
    map) that holds all of them. ``nodes``: those nodes as a host list; ``basis``: which they
    are (``responsible``, ``suspects`` or ``root``, the nodes of the chain's root symptoms);
    ``size``: how many nodes the domain has."""

    kind: str
    name: str
    label: str
    nodes: str
    basis: str
    size: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """The diagnosis of one job run (the schema is documented in docs/verdict.md)."""

    job: JobRecord
    terminal_state: TerminalState
    sub_domain: SubDomain
    cause: Cause | None
    responsible: tuple[Responsible, ...]
    summary: str
    action: str | None
    symptom_chain: tuple[ChainEntry, ...]
    alternatives: tuple[Alternative, ...]
    coverage: tuple[Coverage, ...]
    ignored: tuple[ChainEntry, ...]
    window: tuple[datetime | None, datetime | None]
    ruleset: Mapping[str, str]
    engine_version: str
    diagnosed_at: datetime | None = None
    gpu_errors: tuple[GpuError, ...] = ()
    # nodes the evidence names that no trusted source confirms: to be checked, never drained on
    suspects: tuple[Responsible, ...] = ()
    confidence: Confidence | None = None
    ownership: Mapping[str, Any] = field(default_factory=dict)
    placement: Placement | None = None  # the failure domain of the nodes it is about


VERDICT_SCHEMA = "attribution.verdict/1"


def to_jsonable(value: Any) -> Any:
    """Turn model objects into JSON-ready dicts, lists and strings (UTC ISO times)."""
    if value is None or type(value) in _PLAIN_JSON:  # most values: a verdict of 200,000
        return value  # nodes has millions of them
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, enum.Enum):
        return value.value
    names = _field_names(type(value))
    if names is not None:
        return {name: to_jsonable(getattr(value, name)) for name in names}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [to_jsonable(v) for v in value]
        return sorted(items) if isinstance(value, set | frozenset) else items
    return value


_PLAIN_JSON = frozenset({str, int, float, bool})


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(kind: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type, in order (None for any other type)."""
    if kind not in _FIELD_NAMES:
        _FIELD_NAMES[kind] = (
            tuple(f.name for f in dataclasses.fields(kind))
            if dataclasses.is_dataclass(kind)
            else None
        )
    return _FIELD_NAMES[kind]


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """The ``--json`` form of a verdict: every field, times as UTC ISO 8601."""
    body: dict[str, Any] = {"schema": VERDICT_SCHEMA}
    data = to_jsonable(verdict)
    window = data.pop("window")
    data["window"] = {"start": window[0], "end": window[1]}
    body.update(data)
    return body
