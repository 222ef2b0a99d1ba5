"""The scenario model (pydantic) and loading scenarios from YAML.

A :class:`Scenario` describes one Slurm GPU job and the fault that ends it; see
:mod:`attribution.sim` for what each part means to the generated bundle.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from attribution import hostlist
from attribution._yaml import load_yaml_file
from attribution.errors import RuleError
from attribution.timeutil import zone

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
    """One simulated job (see :mod:`attribution.sim`).

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
    def _node_list(cls, value: str) -> str:
        try:
            names = hostlist.expand(value)
        except hostlist.HostlistError as exc:
            raise ValueError(str(exc)) from None
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
    def _known_zone(cls, value: str) -> str:
        # timeutil.zone falls back to UTC for a name it does not know: a scenario must not
        if value and value.upper() != "UTC" and zone(value) is UTC:
            raise ValueError(f"unknown timezone {value!r}")
        return value


def load_scenarios(path: Path | str) -> list[Scenario]:
    """Read one scenario (a mapping) or several (a list, or ``scenarios: [...]``) from YAML.

    Raises:
        ValueError: on YAML or validation errors (the message names the file).
    """
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


def scenario_dict(scenario: Scenario) -> dict[str, Any]:
    """A scenario as plain data (YAML-ready), without defaults."""
    return scenario.model_dump(mode="json", exclude_defaults=True)
