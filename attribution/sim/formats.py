"""Log line formats: each line rendered the way its real producer prints it.

Line formats follow the real producers, as recorded in
``knowledge/signatures/catalog.yaml`` (``line_prefixes`` and the signature
examples): kernel lines as ``dmesg -T``, raw ``dmesg`` uptime, rsyslog
``kern.log``, ``journalctl -k`` short and short-iso; NVIDIA ``NVRM: Xid``
lines; NCCL ``host:pid:tid [dev] NCCL WARN``; PyTorch c10 logging
(``[rank3]:[E304 10:12:01.123456789 ProcessGroupNCCL.cpp:616]`` -- the month
is not zero-padded there, unlike glog and torchrun's own ``W0304`` lines);
torchrun ``ChildFailedError`` blocks; srun ``--label`` prefixes; slurmstepd
``*** JOB N ON node CANCELLED AT <local ISO> ... ***``; Fabric Manager
``[Mar 04 2025 10:12:01] [ERROR] [tid 841]``. The time-stamped formats are
rendered here; NCCL, srun and slurmstepd text is composed by the emitters of
:class:`attribution.sim.state.Sim`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from attribution.timeutil import MONTHS

_MON = tuple(MONTHS)  # Jan .. Dec

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
