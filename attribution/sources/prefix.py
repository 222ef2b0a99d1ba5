"""Line prefixes: strip transport headers, recover time and identity (node, rank, pid, device).

Each log format wraps the message in its own header; several can be stacked
(syslog header, then the kernel's ``[uptime]``; srun's ``3:`` label, then
``[rank3]:``, then a glog ``[E1218 20:27:21.426 file.cpp:629]``). ``parse_prefix``
peels them off in order and returns what it learnt. Formats are listed in
``docs/log-formats.md`` with their sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from attribution.timeutil import MONTHS, make_time, parse_iso, plausible, shift

_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"

# journalctl -o short-iso / RFC 3339 rsyslog: "2026-10-05T08:08:16-05:00 host ident[pid]: "
_SYSLOG_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
    r"(?P<host>[\w.-]+)\s+(?P<ident>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?:\s?"
)
# traditional syslog / journalctl short: "Feb  1 14:25:31 host ident[pid]: " (host optional)
_SYSLOG_SHORT = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+"
    r"(?:(?P<host>[\w.-]+)\s+)?(?P<ident>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?:\s?"
)
# dmesg -T: "[Sun Feb 23 16:24:18 2025] "
_DMESG_CTIME = re.compile(
    r"^\[[A-Z][a-z]{2} (?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2}) "
    r"(?P<clock>\d{2}:\d{2}:\d{2}) (?P<year>\d{4})\]\s?"
)
# raw dmesg: "[12345.678901] "; CONFIG_PRINTK_CALLER adds "[ T1946] "
_DMESG_RAW = re.compile(r"^\[\s*(?P<uptime>\d+\.\d+)\]\s?")
_DMESG_DELTA = re.compile(r"^\[\s*[+<>]\s*\d+\.\d+(?:\s*\w+)?\]\s?")
_DMESG_CALLER = re.compile(r"^\[\s*[TC]\d+\]\s?")
# /dev/kmsg record: "6,12345,678901234,-;"
_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
# Fabric Manager: "[Jul 23 2024 07:53:55] [ERROR] [tid 841] "
_FABRICMANAGER = re.compile(
    r"^\[(?P<mon>[A-Z][a-z]{2}) (?P<day>\d{1,2}) (?P<year>\d{4}) (?P<clock>\d{2}:\d{2}:\d{2})\]"
    r"(?: \[(?P<level>[A-Z]+)\])?(?: \[tid (?P<tid>\d+)\])?\s?"
)
# torchrun logging, Slurm daemons, anything with a bracketed ISO stamp
_BRACKET_ISO = re.compile(r"^\[(?P<ts>" + _ISO + r")\]:?\s?")
# python logging and other plain ISO-led lines: "2024-05-08 08:47:31,261 - x - INFO - "
_LEAD_ISO = re.compile(r"^(?P<ts>" + _ISO + r")(?:\s*[|:-]\s*|\s+)")
# PyTorch c10 / glog: "E1218 20:27:21.426415540 1234 ProcessGroupNCCL.cpp:629] ", often bracketed;
# c10 does not zero-pad the month ("E321 02:07:08" is March 21)
_GLOG = re.compile(
    r"^\[?(?P<level>[IWEF])(?P<mon>\d{1,2}?)(?P<day>\d{2}) (?P<clock>\d{2}:\d{2}:\d{2}(?:\.\d+)?)"
    r"(?:\s+(?P<thread>\d+))? (?P<file>[\w./-]+):(?P<line>\d+)\]\s?"
)
# NeMo logger: "[NeMo W 2024-06-06 15:21:39 nemo_logging:349] "
_NEMO = re.compile(
    r"^\[NeMo (?P<level>[DIWEC]) (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) [\w.]+:\d+\]\s?"
)
# vLLM's logger: "INFO 11-01 23:16:33 llm_engine.py:237] " or "... [llm_engine.py:237] "
# (level, month-day, time; no year)
_VLLM = re.compile(
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mon>\d{2})-(?P<day>\d{2})"
    r" (?P<clock>\d{2}:\d{2}:\d{2})(?:\.\d+)? \[?[\w./-]+:\d+\]\]?\s?"
)
# torchrun --tee / local_ranks_filter: "[rank3]:", "[default0]:"
_RANK_TEE = re.compile(r"^\[(?P<kind>rank|default)(?P<rank>\d+)\]:\s?")
# a bare pid tag some launchers add: "[80746] "
_PID_TAG = re.compile(r"^\[(?P<pid>\d{2,9})\]\s")
# NCCL_DEBUG output: "host:pid:tid [cudaDev] "
_NCCL = re.compile(r"^(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]\s?")
# srun --label: "3: "
_SRUN_LABEL = re.compile(r"^(?P<task>\d{1,6}): ")


@dataclass(slots=True)
class Prefix:
    """What the prefixes of one line told us.

    ``time`` is UTC wall-clock time; ``uptime`` is seconds since boot from a
    kernel stamp (``[12345.678]``); ``host`` is a node name written in the
    line (syslog host field, NCCL prefix); ``rank`` the global rank
    (``[rankN]:``), ``task`` the Slurm task id (srun ``--label``).
    """

    text: str
    time: datetime | None = None
    uptime: float | None = None
    host: str | None = None
    ident: str | None = None
    rank: int | None = None
    task: int | None = None
    pid: int | None = None
    device: str | None = None


def parse_prefix(
    line: str,
    *,
    tz: tzinfo = UTC,
    reference: datetime | None = None,
    max_layers: int = 6,
) -> Prefix:
    """Peel stacked prefixes off ``line``.

    Args:
        line: one log line without its newline.
        tz: timezone for stamps that carry no offset (the node's local time).
        reference: a time near the line (the job start), for formats without a year.
        max_layers: at most this many prefixes are removed.

    Returns:
        A ``Prefix``; ``text`` is the message that remains. Never raises.
    """
    out = Prefix(text=line)
    text = line
    for _ in range(max_layers):
        if not text:
            break
        matched = _peel_one(text, out, tz, reference)
        if matched is None:
            break
        text = text[matched:]
    out.text = text
    return out


def _set_time(out: Prefix, value: datetime | None) -> None:
    value = plausible(value)
    if value is not None and out.time is None:
        out.time = value


def _peel_one(text: str, out: Prefix, tz: tzinfo, ref: datetime | None) -> int | None:
    """Remove one prefix; return how many characters it spans, or ``None``."""
    first = text[0]
    if first == "[":
        return _peel_bracket(text, out, tz, ref)
    if first == " ":  # Megatron-LM: " [2025-12-20 04:45:12] iteration  3229/ 20000 | ..."
        body = text.lstrip(" ")
        if len(text) - len(body) <= 4 and _BRACKET_ISO.match(body):
            return len(text) - len(body)
        return None
    if first.isdecimal():
        m = _KMSG.match(text)
        if m:
            if out.uptime is None:
                out.uptime = int(m.group("usec")) / 1e6
            return m.end()
        m = _SYSLOG_ISO.match(text)
        if m and not m.group("host").isdecimal():
            _set_time(out, parse_iso(m.group("ts"), tz))
            out.host = out.host or m.group("host")
            out.ident = m.group("ident")
            if m.group("pid") and out.pid is None:
                out.pid = int(m.group("pid"))
            return m.end()
        m = _LEAD_ISO.match(text)
        if m:
            _set_time(out, parse_iso(m.group("ts"), tz))
            return m.end()
        m = _SRUN_LABEL.match(text)
        if m:
            if out.task is None:
                out.task = int(m.group("task"))
            return m.end()
        return None
    if first in "IWEF":
        m = _GLOG.match(text)
        if m:
            _set_time(out, _glog_time(m, tz, ref))
            return m.end()
    if first in "DIWEC":
        m = _VLLM.match(text)
        if m:
            _set_time(out, _glog_time(m, tz, ref))
            return m.end()
    if first.isalpha():
        m = _SYSLOG_SHORT.match(text)
        if m and m.group("mon") in MONTHS:
            _set_time(
                out,
                make_time(
                    None, MONTHS[m.group("mon")], int(m.group("day")), m.group("clock"), tz, ref
                ),
            )
            if m.group("host"):
                out.host = out.host or m.group("host")
            out.ident = m.group("ident")
            if m.group("pid") and out.pid is None:
                out.pid = int(m.group("pid"))
            return m.end()
        m = _NCCL.match(text)
        if m:
            out.host = out.host or m.group("host")
            if out.pid is None:
                out.pid = int(m.group("pid"))
            out.device = out.device or m.group("dev")
            return m.end()
    return None


def _peel_bracket(text: str, out: Prefix, tz: tzinfo, ref: datetime | None) -> int | None:
    m = _DMESG_RAW.match(text)
    if m:
        if out.uptime is None:
            out.uptime = float(m.group("uptime"))
        return m.end()
    m = _DMESG_CALLER.match(text) or _DMESG_DELTA.match(text)
    if m:
        return m.end()
    m = _RANK_TEE.match(text)
    if m:
        if out.rank is None:
            out.rank = int(m.group("rank"))
        return m.end()
    m = _BRACKET_ISO.match(text)
    if m:
        _set_time(out, parse_iso(m.group("ts"), tz))
        return m.end()
    m = _GLOG.match(text)
    if m:
        _set_time(out, _glog_time(m, tz, ref))
        return m.end()
    m = _DMESG_CTIME.match(text)
    if m and m.group("mon") in MONTHS:
        _set_time(
            out,
            make_time(
                int(m.group("year")),
                MONTHS[m.group("mon")],
                int(m.group("day")),
                m.group("clock"),
                tz,
                ref,
            ),
        )
        return m.end()
    m = _FABRICMANAGER.match(text)
    if m and m.group("mon") in MONTHS:
        _set_time(
            out,
            make_time(
                int(m.group("year")),
                MONTHS[m.group("mon")],
                int(m.group("day")),
                m.group("clock"),
                tz,
                ref,
            ),
        )
        return m.end()
    m = _NEMO.match(text)
    if m:
        _set_time(out, parse_iso(m.group("ts"), tz))
        return m.end()
    m = _PID_TAG.match(text)
    if m:
        if out.pid is None:
            out.pid = int(m.group("pid"))
        return m.end()
    return None


def _glog_time(m: re.Match[str], tz: tzinfo, ref: datetime | None) -> datetime | None:
    try:
        month, day = int(m.group("mon")), int(m.group("day"))
    except ValueError:
        return None
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return make_time(None, month, day, m.group("clock"), tz, ref)


def uptime_to_wall(boot: datetime, uptime: float) -> datetime | None:
    """Wall-clock UTC time of a kernel stamp, given the boot time (None off the calendar)."""
    return shift(boot, uptime)
