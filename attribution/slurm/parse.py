"""Pure parsers for what Slurm's command line tools print, and output-path patterns.

No subprocesses here: the CLI backend runs the commands and hands their text
to these functions, and the tests feed them text captured from a real Slurm
22.05 (``shared/knowledge/slurm/captures/``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_JOBID = re.compile(
    r"^(?P<job>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?(?:\+(?P<het>\d+))?(?:\.(?P<step>[\w-]+))?$"
)


@dataclass(slots=True)
class SacctRecord:
    """One allocation line of ``sacct -P`` and the step lines that follow it."""

    fields: dict[str, str]
    steps: list[dict[str, str]] = field(default_factory=list)


def split_jobid(text: str) -> tuple[str, str | None, str | None] | None:
    """``"23_1.batch"`` -> ``("23", "1", "batch")``; ``"7"`` -> ``("7", None, None)``.

    Returns ``None`` for text that is not a sacct JobID.
    """
    m = _JOBID.match(text.strip())
    if not m:
        return None
    return m.group("job"), m.group("task"), m.group("step")


def parse_sacct(
    text: str, fields: Sequence[str] | None = None, *, delimiter: str = "|"
) -> list[dict[str, str]]:
    """Parse ``sacct -P`` output into one dict per record.

    Args:
        text: the output (with a header line when ``fields`` is ``None``).
        fields: the ``-o`` field names in order (for ``-n`` output).
        delimiter: the ``--delimiter`` used (``|`` by default).

    Free-text values may contain newlines (SubmitLine, an AdminComment written
    through pyslurm). A physical line with fewer delimiters than a record needs
    is joined with the following lines until it has them all; a line with no
    delimiter at all after a complete record continues that record's last
    field. Extra delimiters end up in the last field, so put the one free-text
    field you need last. (REPORT A4: sacct -P rows can span several lines.)
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if fields is None:
        if not lines:
            return []
        fields = lines.pop(0).split(delimiter)
    names = list(fields)
    need = len(names) - 1
    records: list[list[str]] = []
    buffer: str | None = None
    for line in lines:
        if buffer is not None:
            buffer += "\n" + line
        elif need > 0 and delimiter not in line and records:
            records[-1][-1] += "\n" + line
            continue
        else:
            buffer = line
        if buffer.count(delimiter) >= need:
            records.append(buffer.split(delimiter, need))
            buffer = None
    if buffer is not None and buffer.strip():
        parts = buffer.split(delimiter, need)
        parts += [""] * (len(names) - len(parts))
        records.append(parts)
    return [dict(zip(names, parts, strict=True)) for parts in records]


def group_steps(rows: Sequence[dict[str, str]], id_field: str = "JobID") -> list[SacctRecord]:
    """Group parsed rows into allocation records, each followed by its step lines.

    Rows whose JobID has a step part (``N.batch``, ``N.0``, ``N.extern``) are
    steps of the last allocation row seen before them.
    """
    out: list[SacctRecord] = []
    for row in rows:
        parsed = split_jobid(row.get(id_field, ""))
        if parsed is not None and parsed[2] is not None and out:
            out[-1].steps.append(row)
        else:
            out.append(SacctRecord(fields=row))
    return out


_SCONTROL_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_scontrol(text: str) -> dict[str, str]:
    """Parse one job of ``scontrol show job -o`` (``Key=Value`` pairs) into a dict.

    A value runs until the next `` Key=``; values may contain spaces. Only the
    first job is read when several are printed (one per line). A key seen twice
    keeps its last value: a job name (printed second, after JobId) that imitates
    `` UserId=root(0)`` cannot override the real key printed after it.
    """
    line = text.strip().split("\n", 1)[0]
    out: dict[str, str] = {}
    matches = list(_SCONTROL_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        if m.group(1) != "JobId" or "JobId" not in out:  # JobId is printed first
            out[m.group(1)] = line[m.end() : end].strip()
    return out


# The key under which ``parse_scontrol`` keeps the per-node GRES of ``scontrol show job -d``:
# one "hostlist<TAB>GRES" line per node group. Slurm prints no key with a space, so a job name
# that imitates keys cannot set it.
NODE_GRES = "node gres"
_NODE_GRES = re.compile(
    r"(?:^|\s)Nodes=(?P<nodes>\S+) CPU_IDs=\S+ Mem=\S+"
    r"(?: (?!Nodes=)[\w/:]+=\S*)*? GRES=(?P<gres>\S*)"
)


def parse_node_gres(text: str) -> dict[str, str]:
    """The per-node GRES of one job of ``scontrol show job -d -o``: node list -> GRES text
    (``gpu:h100:2(IDX:0-1)``; empty when the node gave the job no GRES).

    A node list seen twice keeps its last text: Slurm prints the real per-node lines after the
    job name, which is where a name imitating them would sit. Only the first job is read.
    """
    line = text.strip().split("\n", 1)[0]
    out: dict[str, str] = {}
    for m in _NODE_GRES.finditer(line):
        gres = m.group("gres")
        out[m.group("nodes")] = "" if gres in ("(null)", "N/A") else gres
    return out


# --------------------------------------------------------------------- output patterns

# Slurm's NO_VAL: what %a expands to in a job that is not an array task.
NO_VAL = 4294967294
_NUMERIC = frozenset("AajJnst")


@dataclass(frozen=True, slots=True)
class PatternFields:
    """The values sbatch's filename pattern symbols stand for, for a batch job's output.

    ``first_node`` is the batch host (the job's first node); ``%n`` and ``%t``
    are 0 and ``%s`` is ``batch`` for the batch script's output.
    """

    job_id: str
    array_job_id: str | None = None
    array_task_id: str | None = None
    user: str | None = None
    name: str | None = None
    first_node: str | None = None
    work_dir: str | None = None


def expand_output_pattern(pattern: str, f: PatternFields) -> str:
    """Expand an sbatch ``--output``/``--error`` filename pattern.

    Symbols (sbatch(1), "filename pattern"): ``%%`` ``%A`` ``%a`` ``%J`` ``%j``
    ``%N`` ``%n`` ``%s`` ``%t`` ``%u`` ``%x``; a number between ``%`` and a
    numeric symbol zero-pads it (at most 10 wide; ignored for ``%N %u %x``). A
    backslash anywhere turns expansion off (backslashes are dropped). Unknown
    symbols are kept as written. A relative result is joined to ``work_dir``.
    """
    if "\\" in pattern:
        out = pattern.replace("\\", "")
    else:
        values: dict[str, str | None] = {
            "A": f.array_job_id or f.job_id,
            "a": f.array_task_id if f.array_task_id is not None else str(NO_VAL),
            "J": f.job_id,
            "j": f.job_id,
            "N": f.first_node,
            "n": "0",
            "s": "batch",
            "t": "0",
            "u": f.user,
            "x": f.name,
        }
        parts: list[str] = []
        i = 0
        while i < len(pattern):
            ch = pattern[i]
            if ch != "%" or i + 1 >= len(pattern):
                parts.append(ch)
                i += 1
                continue
            if pattern[i + 1] == "%":
                parts.append("%")
                i += 2
                continue
            j = i + 1
            while j < len(pattern) and pattern[j].isdecimal():
                j += 1
            symbol = pattern[j] if j < len(pattern) else ""
            if symbol not in values:
                parts.append(pattern[i : j + 1])
                i = j + 1
                continue
            value = values[symbol] or ""
            width = min(int(pattern[i + 1 : j]), 10) if j > i + 1 else 0
            if width and symbol in _NUMERIC and value.isdecimal():
                value = value.zfill(width)
            parts.append(value)
            i = j + 1
        out = "".join(parts)
    if not out.startswith("/") and f.work_dir:
        out = f.work_dir.rstrip("/") + "/" + out
    return out


def default_output_pattern(is_array: bool) -> str:
    """sbatch's default output file: ``slurm-%A_%a.out`` for array tasks, else ``slurm-%j.out``."""
    return "slurm-%A_%a.out" if is_array else "slurm-%j.out"


__all__ = [
    "NODE_GRES",
    "NO_VAL",
    "PatternFields",
    "SacctRecord",
    "default_output_pattern",
    "expand_output_pattern",
    "group_steps",
    "parse_node_gres",
    "parse_sacct",
    "parse_scontrol",
    "split_jobid",
]
