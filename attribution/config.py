"""The site configuration: ``/etc/attribution/config.yaml``, validated by pydantic.

The path is ``--config``, else ``$ATTRIBUTION_CONFIG``, else
``/etc/attribution/config.yaml``; when the default file does not exist the
defaults below apply. Unknown keys, wrong types and bad values are errors that
name ``file:line``. Durations are seconds or strings such as ``30s``, ``15m``,
``7d``; sizes are bytes or strings such as ``64MiB``.

Node log path templates are globs with ``{node}`` (the Slurm node name) and
``{cluster}`` placeholders, e.g. ``/var/log/hosts/{node}/kern.log*``; the glob
picks up rotated and compressed files (``kern.log.1``, ``kern.log.2.gz``).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from attribution._yaml import LineMap, load_yaml_file
from attribution.errors import ConfigError, Location, RuleError
from attribution.model import EVIDENCE_SERIES
from attribution.timeutil import parse_duration

DEFAULT_CONFIG = Path("/etc/attribution/config.yaml")
CONFIG_ENV = "ATTRIBUTION_CONFIG"
PLACEHOLDERS = frozenset({"node", "cluster"})


def _duration(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a duration must be seconds or a string such as 30s, 15m, 2h, 7d")
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_template(template: str) -> str:
    if not template.startswith("/"):
        raise ValueError(f"{template!r}: a path template must be absolute")
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template)]
    except ValueError as exc:
        raise ValueError(f"{template!r}: {exc}") from None
    names = {f for f, _, _ in fields if f is not None}
    if any(f is not None and (spec or conv) for f, spec, conv in fields):
        raise ValueError(f"{template!r}: placeholders take no format spec or conversion")
    unknown = names - PLACEHOLDERS
    if unknown:
        first = sorted(unknown)[0]
        raise ValueError(
            f"{template!r}: unknown placeholder {{{first}}} (use {{node}} and {{cluster}})"
        )
    return template


Template = Annotated[str, AfterValidator(_check_template)]


TrustLevel = Literal["trusted", "untrusted"]


class StreamTrust(_Strict):
    """Whether users can write each stream's files (docs/verdict.md, "Ownership and trust").

    Only ``trusted`` sources may blame a node. ``kernel`` must name a source only the kernel
    writes (a dmesg capture, a file the syslog daemon fills from the kernel alone); when your
    kern.log is filled by a daemon that also takes the kern facility from local sockets, set it
    to ``untrusted`` and read the kernel from the journal (``logs.journal``) instead. General
    syslog is untrusted: any user can write to it with ``logger``. The job's own output is
    always untrusted.
    """

    kernel: TrustLevel = "trusted"
    syslog: TrustLevel = "untrusted"
    fabricmanager: TrustLevel = "trusted"
    dcgm: TrustLevel = "trusted"
    slurmd: TrustLevel = "trusted"
    slurmctld: TrustLevel = "trusted"


class LogPaths(_Strict):
    """Per-stream path templates (globs) of node logs and the controller log.

    ``journal``: systemd journal files (``*.journal``, e.g. what systemd-journal-remote
    writes per host); their kernel-transport entries are trusted kernel evidence, everything
    else is syslog, trusted only when root's process wrote it (journald records who did).
    A template without ``{node}`` may hold every host: entries go to the node their
    ``_HOSTNAME`` names. ``file_margin``: files whose mtime is older than the job's start
    minus this many seconds cannot hold lines of the job and are skipped. ``trust``: see
    ``StreamTrust``.
    """

    kernel: list[Template] = []
    syslog: list[Template] = []
    journal: list[Template] = []
    fabricmanager: list[Template] = []
    dcgm: list[Template] = []
    slurmd: list[Template] = []
    slurmctld: list[Template] = []
    file_margin: Duration = 3600.0
    trust: StreamTrust = StreamTrust()


class Gpus(_Strict):
    """Where the GPU index (minor number) -> PCI bus id map of each node comes from, so that a
    GPU's XID can be told from another job's on a shared node (docs/verdict.md).

    ``bus_ids``: a YAML file of ``hostlist: [bus id of minor 0, of minor 1, ...]`` (nodes of
    one model usually share a layout). ``bus_id_files``: per-node files, each line
    ``minor, bus id`` (see INSTALL.md for a one-line collector). A node in neither has no map,
    and the verdict's coverage says so.
    """

    bus_ids: Path | None = None
    bus_id_files: list[Template] = []


class JobOutput(_Strict):
    """Reading the job's StdOut/StdErr: only regular files owned by the job's user,
    never through a symbolic link; all of it up to ``max_bytes`` (16 GiB: about 16 s of
    reading), as ``sattr diagnose`` reads a bundle, then its last ``max_bytes``; a sparse
    file is read as the data it holds. ``max_bytes: null`` reads any size."""

    read: bool = True
    max_bytes: ByteSize | None = ByteSize(16 << 30)


class Window(_Strict):
    """Seconds added before the job's start and after its end for node evidence."""

    before: Duration = 300.0
    after: Duration = 300.0


class AdminComment(_Strict):
    """Write-back of a one-line verdict to the job's AdminComment (opt-in).

    ``foreign``: what to do when the AdminComment already holds someone else's
    text (e.g. jobstats' ``JS1:``): ``skip`` it, or write to ``SystemComment``
    instead. ``max_length``: cap in bytes (Slurm stores at most 65535).
    """

    enabled: bool = False
    foreign: Literal["skip", "system_comment"] = "skip"
    max_length: int = Field(default=256, ge=32, le=65535)


class Reading(_Strict):
    """How evidence is read.

    ``engine``: the line pre-filter (``auto`` picks hyperscan, then RE2, then
    Python's ``re``; all give the same verdict). ``workers``: sources read
    ahead in threads (pays off on network file systems). ``seek_threshold``:
    node logs larger than this are read by time window (bisection) instead of
    from the start. The memory bound (peak RSS under 256 MiB with the defaults,
    docs/performance.md): ``max_line``: longer lines are cut (bytes);
    ``max_events``: distinct events kept per job; ``max_ranks``: distinct ranks
    kept per extractor and node; ``evidence_memory``: what the kept events and what
    they tell of ranks and processes may use in all (estimated bytes; job output may
    use three quarters of it, so it never crowds out node logs). Beyond these,
    signals are still counted and coverage says their detail was dropped.
    """

    engine: Literal["auto", "hyperscan", "re2", "python"] = "auto"
    workers: int = Field(default=8, ge=1, le=64)
    seek_threshold: ByteSize = ByteSize(1 << 20)
    max_line: ByteSize = Field(default=ByteSize(64 * 1024), ge=1024)
    max_events: int = Field(default=500_000, ge=1_000)
    max_ranks: int = Field(default=16_384, ge=64)
    evidence_memory: ByteSize = Field(default=ByteSize(48 << 20), ge=4 << 20)


class Retries(_Strict):
    """Retries of a spool entry that failed (Slurm unreachable, job not in sacct yet)."""

    max_attempts: int = Field(default=10, ge=1, le=100)
    backoff: Duration = 30.0
    backoff_max: Duration = 3600.0


class SlurmSettings(_Strict):
    """How the worker talks to Slurm.

    ``backend``: ``auto`` uses pyslurm when it imports and matches the local
    Slurm's major.minor, else the command line tools; ``cli`` or ``pyslurm``
    force one. ``timeout``: seconds per command; ``retries``: extra tries of a
    command that failed or timed out. ``bin_dir``: where sacct, scontrol and
    sacctmgr live when they are not on ``PATH``.
    """

    backend: Literal["auto", "cli", "pyslurm"] = "auto"
    timeout: Duration = 30.0
    retries: int = Field(default=2, ge=0, le=10)
    bin_dir: str | None = None


class Pool(_Strict):
    """How the worker spreads jobs over processes.

    ``processes``: diagnoses run at once, each in its own process (0: one per CPU core, at
    most 8; about 256 MiB each). ``batch``: spool entries claimed and resolved together
    (sacct is asked about 200 job ids at a time); a larger batch means fewer Slurm calls in a
    burst, a smaller one that entries spooled meanwhile join sooner.
    ``large_nodes``: a job on more nodes than this is large; large jobs never take every
    process, so a 1-node verdict never waits behind a 4,096-node one. Within the small lane,
    entries are taken round robin across array jobs (and users), oldest first, so a
    1,000-task array does not hold back other jobs' verdicts. (With one process there is
    nothing to keep free: small jobs just go first.)
    """

    processes: int = Field(default=0, ge=0, le=256)
    batch: int = Field(default=200, ge=1, le=5000)
    large_nodes: int = Field(default=64, ge=1)


class Reconcile(_Strict):
    """The reconciliation sweep: jobs accounting says ended that never reached the spool
    (the hook failed, the spool was full or read-only, the epilog ran on a failover host)
    are spooled by the worker itself.

    ``enabled``: run the sweep. ``interval``: seconds between sweeps. ``grace``: a job
    counts as missing only this long after it ended (beyond ``settle_delay``), so the hook's
    own entry wins when it is merely late. ``first_lookback``: how far back the very first
    sweep looks (later ones start at the stored watermark). ``clusters``: the clusters to
    sweep (empty: the local one, as sacct sees it).
    """

    enabled: bool = True
    interval: Duration = 300.0
    grace: Duration = 120.0
    first_lookback: Duration = 3600.0
    clusters: list[str] = []


class Health(_Strict):
    """When ``sattr status`` calls the worker unhealthy (non-zero exit).

    ``max_queue_age``: the oldest ready spool entry has waited longer than this.
    ``max_heartbeat_age``: the worker has not reported for longer than this.
    ``max_reconcile_age``: no reconciliation sweep has succeeded for longer than this (a
    failed sweep alone is shown, not alarmed on, until then); keep it above
    ``reconcile.interval``.
    ``max_failed``: more entries than this sit in ``failed/``.
    """

    max_queue_age: Duration = 900.0
    max_heartbeat_age: Duration = 300.0
    max_reconcile_age: Duration = 1800.0
    max_failed: int = Field(default=0, ge=0)


class FleetSettings(_Strict):
    """The fleet view (``sattr nodes``, ``incidents``, ``links``, ``gpus``; docs/fleet.md).

    ``topology``: Slurm's topology.conf (tree or block), read when it exists.
    ``groups``: a YAML map of more failure domains, ``{kind: {name: hostlist}}`` (racks,
    NVLink domains). The tests' thresholds: ``q`` (Benjamini-Hochberg), ``min_failures``,
    ``min_ratio`` (rate ratio), ``min_users``; ``incident_window`` and ``domain_window``
    (seconds); ``max_drain_share``: drain suggestions per partition at most this share of
    its nodes.
    """

    topology: Path | None = Path("/etc/slurm/topology.conf")
    groups: Path | None = None
    q: float = Field(default=0.05, gt=0, le=1)
    min_failures: int = Field(default=3, ge=1)
    min_ratio: float = Field(default=2.0, ge=1)
    min_users: int = Field(default=2, ge=1)
    incident_window: Duration = 30.0
    domain_window: Duration = 900.0
    max_drain_share: float = Field(default=0.1, gt=0, le=1)


def _http_url(value: str | None) -> str | None:
    """An ``http://`` or ``https://`` address without its trailing ``/`` (a ``url`` field)."""
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r}: url must start with http:// or https://")
    return value.rstrip("/") if value else value


class Server(_Strict):
    """``sattr serve`` (docs/server.md): where it listens, how callers prove who they are, and
    where ``sattr`` on a login node finds it.

    ``listen``: ``ADDRESS:PORT`` (loopback by default). ``tls_cert`` / ``tls_key``: PEM files;
    both or neither. ``url``: the address clients use (``https://attr.example:8443``); when
    set, ``sattr JOBID``, ``sattr list`` and ``sattr report`` ask the server, with a MUNGE
    credential, whenever the caller cannot read the store. ``munge``: accept MUNGE credentials
    (``Authorization: MUNGE ...``). ``munge_socket``: munged's socket when not the default.
    ``proxy_header``: the header a trusted reverse proxy sets to the authenticated user name
    (off by default), believed only from ``proxy_addresses``. ``token``: print a URL with a
    random token at start; whoever holds it reads everything (for the person who started the
    server: a demo, an operator's laptop). ``ca_file``: the PEM file of the CA that signed
    the server's certificate, for clients (default: the system's trusted CAs).
    ``metrics_public``: ``/metrics`` without
    authentication (it holds counts, no user names or job ids). Uploads to
    ``POST /api/v1/diagnose`` are limited to ``max_upload`` bytes as sent and
    ``max_unpacked`` bytes unpacked; ``diagnose_slots`` of them run at once, each in a
    process of its own killed after ``diagnose_timeout`` and limited to ``diagnose_memory``
    of address space. ``max_connections``: connections served at once (uvicorn answers 503
    beyond), so that held-open connections cannot take the server's memory.
    """

    listen: str = "127.0.0.1:8080"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    url: str | None = None
    ca_file: Path | None = None
    munge: bool = True
    munge_socket: Path | None = None
    proxy_header: str | None = None
    proxy_addresses: list[str] = ["127.0.0.1", "::1"]
    token: bool = True
    metrics_public: bool = True
    max_upload: ByteSize = ByteSize(64 * 1024 * 1024)
    max_unpacked: ByteSize = ByteSize(1024 * 1024 * 1024)
    diagnose_slots: int = Field(default=2, ge=1, le=64)
    diagnose_timeout: Duration = Field(default=120.0, gt=0)
    max_connections: int = Field(default=256, ge=8, le=65536)
    diagnose_memory: ByteSize = Field(default=ByteSize(4 * 1024**3), ge=256 * 1024**2)
    timeout: Duration = Field(default=30.0, gt=0)

    @field_validator("listen")
    @classmethod
    def _address(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdecimal() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r}: listen must be ADDRESS:PORT (127.0.0.1:8080, [::1]:8080)")
        return value

    _url = field_validator("url")(_http_url)

    @field_validator("proxy_header")
    @classmethod
    def _header(cls, value: str | None) -> str | None:
        if value is not None and not value.replace("-", "").isalnum():
            raise ValueError(f"{value!r}: a header name is letters, digits and '-'")
        return value

    @property
    def address(self) -> tuple[str, int]:
        """``listen`` as (host, port), brackets of an IPv6 address removed."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class Metrics(_Strict):
    """GPU metrics from a Prometheus-compatible server (Prometheus, Thanos, Mimir,
    VictoriaMetrics), as NVIDIA's dcgm-exporter publishes them (docs/metrics.md).

    ``url``: the server's base address (``/api/v1/query_range`` is added); unset, no metrics are
    read. ``series``: the series asked for (default: those that carry evidence). ``node_label``:
    the label whose value is the node name (dcgm-exporter's ``Hostname``; ``instance`` with a
    port or a domain works too, both are removed; another label is copied to ``node`` in the
    saved answers, which the reader knows). ``selector``: more label matchers for every query
    (``cluster="a"``).
    ``baseline``: how long before the job's start to ask from (at least ``window.before``), so
    that every counter has a value from before the job to compare with. ``step``: seconds
    between points, else the asked span over ``max_points``, at least ``min_step``.
    ``timeout``: seconds for one whole answer; ``max_bytes``: its size; ``max_series``: series
    in all for one job (the rest of the nodes are not asked, and coverage says so);
    ``nodes_per_query``: nodes named in one query. ``headers``: sent with each request
    (``X-Scope-OrgID`` for Mimir); ``bearer_token_file``: a file whose content is sent as
    ``Authorization: Bearer``; ``ca_file``: the CA of the server's certificate (default: the
    system's CAs).
    """

    url: str | None = None
    series: list[str] = Field(default_factory=lambda: list(EVIDENCE_SERIES))
    node_label: str = "Hostname"
    selector: str = ""
    step: Duration | None = None
    min_step: Duration = Field(default=15.0, gt=0)
    baseline: Duration = 600.0
    max_points: int = Field(default=720, ge=10, le=11000)
    timeout: Duration = Field(default=10.0, gt=0)
    max_bytes: ByteSize = ByteSize(32 * 1024 * 1024)
    max_series: int = Field(default=20_000, ge=1)
    nodes_per_query: int = Field(default=64, ge=1, le=4096)
    headers: dict[str, str] = {}
    bearer_token_file: Path | None = None
    ca_file: Path | None = None

    _url = field_validator("url")(_http_url)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
                raise ValueError(f"{name!r}: a header name is letters, digits and '-'")
            if not (text.isascii() and text.isprintable()) or len(text) > 4096:
                raise ValueError(f"header {name}: the value must be printable ASCII")
        return value

    @field_validator("series")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", name):
                raise ValueError(f"{name!r} is not a Prometheus metric or label name")
        return value

    @field_validator("node_label")
    @classmethod
    def _label(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not a Prometheus label name")
        return value


class Config(_Strict):
    """The whole configuration; every field has a default."""

    spool: Path = Path("/var/spool/attribution")
    store: Path = Path("/var/lib/attribution/verdicts.sqlite")
    settle_delay: Duration = 30.0
    poll_interval: Duration = Field(default=5.0, gt=0)
    retries: Retries = Retries()
    retention: Duration = 7 * 86400.0
    logs: LogPaths = LogPaths()
    gpus: Gpus = Gpus()
    job_output: JobOutput = JobOutput()
    window: Window = Window()
    reading: Reading = Reading()
    admin_comment: AdminComment = AdminComment()
    record_pass: bool = False
    timezone: str = "UTC"
    slurm: SlurmSettings = SlurmSettings()
    pool: Pool = Pool()
    reconcile: Reconcile = Reconcile()
    health: Health = Health()
    fleet: FleetSettings = FleetSettings()
    server: Server = Server()
    metrics: Metrics = Metrics()
    rules: list[Path] = []
    admin_groups: list[str] = []

    @model_validator(mode="after")
    def _tls_pair(self) -> Config:
        if (self.server.tls_cert is None) != (self.server.tls_key is None):
            raise ValueError("server: tls_cert and tls_key go together (give both or neither)")
        return self

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        if value.upper() == "UTC":
            return "UTC"
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r} (use an IANA name)") from None
        return value


def config_path(explicit: str | Path | None = None) -> tuple[Path, bool]:
    """The config file to read and whether it was asked for explicitly."""
    if explicit:
        return Path(explicit), True
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env), True
    return DEFAULT_CONFIG, False


def _line(lines: LineMap, data: Any, loc: Sequence[str | int]) -> int:
    path: list[str | int] = []
    node = data
    for part in loc:
        if not isinstance(node, dict | list) or (isinstance(node, list) and isinstance(part, str)):
            break
        try:
            node = node[part]  # type: ignore[index]
        except (KeyError, IndexError):
            break
        path.append(part)
    return lines.line_for(path)


def parse_config(data: Any, source: str, lines: LineMap | None = None) -> Config:
    """Validate a loaded YAML document.

    Raises:
        ConfigError: for the first problem, as ``file:line: message``; the
            message names every problem when there are several.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a YAML mapping", Location(source, 1))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems: list[tuple[int, str]] = []
        for err in exc.errors():
            loc = [p for p in err["loc"] if isinstance(p, str | int)]
            where = ".".join(str(p) for p in loc) or "document"
            line = _line(lines, data, loc) if lines else 0
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {where!r}"
            else:
                msg = f"{where}: {err['msg'].removeprefix('Value error, ')}"
            problems.append((line, msg))
        line, msg = problems[0]
        if len(problems) > 1:
            msg += f" (and {len(problems) - 1} more: " + "; ".join(
                f"line {ln}: {m}" for ln, m in problems[1:]
            )
            msg += ")"
        raise ConfigError(msg, Location(source, line)) from None


def load_config(explicit: str | Path | None = None) -> Config:
    """Load the configuration (see the module docstring for where it is looked for).

    Raises:
        ConfigError: when an explicitly named file is missing, or any file is
            unreadable, not YAML, or invalid.
    """
    path, asked = config_path(explicit)
    if not path.exists():
        if asked:
            raise ConfigError("configuration file not found", Location(str(path)))
        return Config()
    try:
        data, lines = load_yaml_file(path, error=ConfigYamlError)
    except RuleError as exc:
        raise ConfigError(exc.message, exc.location) from None
    return parse_config(data, str(path), lines)


class ConfigYamlError(RuleError):
    """Raised by the YAML loader for a config file; turned into ``ConfigError``."""


EXAMPLE = """\
# /etc/attribution/config.yaml: every key is optional; these are examples, not defaults.
spool: /var/spool/attribution
store: /var/lib/attribution/verdicts.sqlite
settle_delay: 30s          # wait this long after a job ends before reading its logs
retention: 7d              # keep processed spool entries this long
logs:
  journal: ["/var/log/journal/remote/remote-{node}*.journal"]  # kernel transport: trusted
  syslog: ["/var/log/hosts/{node}/syslog*"]        # quote templates: { } is YAML syntax
  fabricmanager: ["/var/log/hosts/{node}/fabricmanager.log*"]
  slurmctld: ["/var/log/slurm/slurmctld.log*"]
window: {before: 5m, after: 5m}
reading: {engine: auto, workers: 8, seek_threshold: 1MiB}
job_output: {read: true}
admin_comment: {enabled: false, foreign: skip, max_length: 256}
record_pass: false
timezone: UTC              # zone of node log stamps that carry no offset
slurm: {backend: auto, timeout: 30s, retries: 2}
pool: {processes: 0, batch: 200, large_nodes: 64}   # 0 processes: one per core, at most 8
reconcile: {enabled: true, interval: 5m, grace: 2m, first_lookback: 1h}
health: {max_queue_age: 15m, max_heartbeat_age: 5m, max_reconcile_age: 30m, max_failed: 0}
server: {listen: "127.0.0.1:8080", url: "https://attr.example.org:8443", munge: true}
metrics: {url: "http://prometheus.example.org:9090", node_label: Hostname, timeout: 10s}
"""

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG",
    "EXAMPLE",
    "AdminComment",
    "Config",
    "Gpus",
    "Health",
    "JobOutput",
    "LogPaths",
    "Pool",
    "Reading",
    "Reconcile",
    "Retries",
    "Server",
    "SlurmSettings",
    "StreamTrust",
    "Window",
    "config_path",
    "load_config",
    "parse_config",
]
