"""Which stream a log file feeds, told by its name, and which streams are written in time order."""

from __future__ import annotations

import re

from attribution.model import Stream

# file stem -> stream, for node directories of an evidence bundle
NODE_FILE_STREAMS: dict[str, Stream] = {
    "kernel": Stream.KERNEL,
    "dmesg": Stream.KERNEL,
    "kern": Stream.KERNEL,
    "journal": Stream.KERNEL,
    "syslog": Stream.SYSLOG,
    "messages": Stream.SYSLOG,
    "fabricmanager": Stream.FABRICMANAGER,
    "nv-fabricmanager": Stream.FABRICMANAGER,
    "dcgm": Stream.DCGM,
    "nv-hostengine": Stream.DCGM,
    "nvidia-smi": Stream.DCGM,  # saved nvidia-smi output: GPU health, like DCGM's
    "slurmd": Stream.SLURMD,
}

# Streams whose files are written in time order: they can be read by time window.
ORDERED_STREAMS = frozenset(
    {
        Stream.KERNEL,
        Stream.SYSLOG,
        Stream.FABRICMANAGER,
        Stream.DCGM,
        Stream.SLURMD,
        Stream.SLURMCTLD,
    }
)

# ``.log``, ``.1``, ``.gz`` and logrotate's ``dateext`` (``-20260101``, ``-2026-01-01``)
_SUFFIXES = re.compile(
    r"(\.(log|txt|out|err|gz|zst|zstd|\d+)|-\d{8}(\d{2})?|-\d{4}-\d{2}-\d{2})+$", re.IGNORECASE
)


def file_stem(name: str) -> str:
    """``kern.log.1.gz`` -> ``kern``; ``messages-20260101.gz`` -> ``messages``."""
    return _SUFFIXES.sub("", name)


def node_stream_for(name: str) -> Stream | None:
    """The stream a file in ``nodes/<node>/`` feeds, or ``None`` if we do not know it."""
    return NODE_FILE_STREAMS.get(file_stem(name).lower())


def job_stream_for(name: str) -> Stream:
    """The stream a file in ``job/`` feeds: stderr when its name says so, else stdout."""
    stem = file_stem(name).lower()
    return Stream.JOB_STDERR if "err" in stem else Stream.JOB_STDOUT
