"""Merge what sacct, scontrol and the spooled epilog environment say into one ``JobRecord``.

Pure functions. Precedence, per fact:

- state, exit codes, start/end, node list, time limit, AdminComment: sacct
  (the accounting record is final), then scontrol, then the environment;
- reason: scontrol (``TimeLimit``, ``NodeDown``), then sacct;
- StdOut/StdErr: the environment's raw pattern expanded here exactly as
  slurmstepd does, else scontrol's (partly expanded) path while it still holds
  the job, else sbatch's default ``<WorkDir>/slurm-%j.out``
  (``slurm-%A_%a.out`` for array tasks); 22.05 sacct has no StdOut field
  (REPORT A2/A4);
- restart count and SLUID: the environment (they name the spooled run).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from attribution.hostlist import HostlistError, expand
from attribution.jobrecord import job_from_dict
from attribution.model import JobRecord
from attribution.slurm.parse import (
    NODE_GRES,
    PatternFields,
    SacctRecord,
    default_output_pattern,
    expand_output_pattern,
    parse_node_gres,
    parse_scontrol,
    split_jobid,
)

# sacct -o fields the CLI backend asks for (all exist in 22.05; see sacct -e). The first call
# asks only for fields a job's owner cannot write (SACCT_FIELDS); the free-text ones (SACCT_TEXT:
# a job name or work directory may hold the delimiter or a newline and forge a record) come in a
# second call whose rows can only ever change those texts.
SACCT_TEXT = ("JobIDRaw", "WorkDir", "JobName", "AdminComment")
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "User",
    "UID",
    "Account",
    "Partition",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Reason",
    "Start",
    "End",
    "Timelimit",
    "NodeList",
    "AllocTRES",
)

_UID = re.compile(r"\((\d+)\)")
_EMPTY = {"", "none", "unknown", "(null)", "n/a"}


def _val(data: Mapping[str, str] | None, key: str) -> str | None:
    if not data:
        return None
    value = data.get(key)
    if value is None or value.strip().lower() in _EMPTY:
        return None
    return value


def pick_record(
    records: list[SacctRecord],
    spooled_at: float | None,
    sluid: str | None = None,
    restarts: str | None = None,
) -> SacctRecord | None:
    """Choose the run the spool entry describes among ``sacct -D`` records.

    ``sluid`` and ``restarts`` name the spooled run (``SLURM_JOB_SLUID``,
    ``SLURM_JOB_RESTART_COUNT``). A record that names another run (another SLUID, or another
    ``Restarts`` count, where both sides say one) is never that run. Among the others, the
    record with the spooled run's SLUID (25.11+) is that run; else the hook ran when the job
    ended, so the record whose End (epoch seconds) is closest to ``spooled_at`` is; without a
    spool time (or without usable End times) the newest one.

    Returns:
        The record, or None when there is none or every record is another run's (accounting
        has not recorded the spooled run yet: its records reach slurmdbd late).
    """
    runs = [r for r in records if not _other_run(r.fields, sluid, restarts)]
    if not runs:
        return None
    if sluid:
        for r in runs:
            if r.fields.get("SLUID") == sluid:
                return r
    if spooled_at is not None:
        timed = [
            (abs(float(end) - spooled_at), i)
            for i, r in enumerate(runs)
            if (end := r.fields.get("End", "")).isdecimal()
        ]
        if timed:
            return runs[min(timed)[1]]
    return runs[-1]


def _other_run(fields: Mapping[str, str], sluid: str | None, restarts: str | None) -> bool:
    """Whether an accounting record names a run other than the one with ``sluid`` and
    ``restarts`` (a SLUID where both have one, else a restart count where both have one)."""
    shown = (fields.get("SLUID") or "").strip()
    if sluid and shown:
        return shown != sluid.strip()
    count, run = _count(fields.get("Restarts")), _count(restarts)
    return count is not None and run is not None and count != run


def _count(text: str | None) -> str | None:
    """A count as Slurm prints it, without leading zeros (``"007"`` -> ``"7"``), or None
    for anything else (empty, negative, not ASCII digits)."""
    value = (text or "").strip()
    return (value.lstrip("0") or "0") if value.isascii() and value.isdecimal() else None


# The keys of ``scontrol show job -o`` a record is read by: which job and run it is, whose,
# how and when it ended, its files, and whether it had its nodes to itself. Slurm prints each
# at most once and quotes no value (src/api/job_info.c), so a job's own free text (its name,
# comment, command, work directory, output paths) can imitate any `` Key=value``; the name is
# printed before all of these keys, the others after most of them.
_READ_KEYS = frozenset(
    {
        "ArrayJobId",
        "ArrayTaskId",
        "JobName",
        "SLUID",
        "UserId",
        "Account",
        "JobState",
        "Reason",
        "Restarts",
        "ExitCode",
        "DerivedExitCode",
        "StartTime",
        "EndTime",
        "TimeLimit",
        "Partition",
        "NodeList",
        "BatchHost",
        "TRES",
        "OverSubscribe",
        "Exclusive",
        "WorkDir",
        "AdminComment",
        "StdErr",
        "StdOut",
    }
)
# the keys Slurm prints before the job name (an array task's, a heterogeneous job's), and where
# parse_scontrol finds a key and a per-node GRES group
_BEFORE_NAME = ("ArrayJobId", "ArrayTaskId")
_NAME_AT = re.compile(
    r"JobId=\d+ (?:ArrayJobId=\d+ ArrayTaskId=\S+ (?:ArrayTaskThrottle=\d+ )?"
    r"|HetJobId=\d+ HetJobOffset=\d+ )?JobName="
)
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
_NODE_GROUP = re.compile(r"(?:^|\s)Nodes=(\S+) CPU_IDs=")


def read_scontrol(text: str, name: str | None = None) -> dict[str, str] | None:
    """One job of ``scontrol show job -d -o``: its ``Key=value`` pairs (``parse_scontrol``)
    with the per-node GRES under ``NODE_GRES``.

    ``name``: the job's name where known (the hook's environment, accounting): where the text
    shows it whole after ``JobName=``, it is read as that one value, whatever `` Key=`` or
    newline it holds (a name such as ``sweep lr=0.1`` is no key).

    Returns:
        The pairs, or None when the job's own text imitates Slurm's keys where that would
        change what is read: a key of ``_READ_KEYS`` printed twice, an array key after the job
        name, a node in two per-node GRES groups, or a line after the first that is not a job
        of its own (a newline in the name). The job is then read without slurmctld's record.
    """
    unnamed = _without_name(text.strip(), name)
    text = unnamed if unnamed is not None else text.strip()
    lines = text.split("\n")
    if any(not line.startswith("JobId=") for line in lines[1:]):
        return None
    keys = [m.group(1) for m in _KEY.finditer(lines[0])]
    counts = Counter(keys)
    if any(counts[key] > 1 for key in _READ_KEYS):
        return None
    name_at = keys.index("JobName") if "JobName" in keys else len(keys)
    if any(key in _BEFORE_NAME for key in keys[name_at:]):
        return None
    seen: set[str] = set()
    for m in _NODE_GROUP.finditer(lines[0]):
        try:
            nodes = expand(m.group(1))
        except HostlistError:
            return None
        if seen.intersection(nodes):
            return None
        seen.update(nodes)
    out = parse_scontrol(text)
    if unnamed is not None:
        out["JobName"] = (name or "").strip()
    out[NODE_GRES] = "\n".join(f"{n}\t{g}" for n, g in parse_node_gres(text).items())
    return out


def _without_name(text: str, name: str | None) -> str | None:
    """``text`` with the job's name replaced by ``-``, where it shows ``name`` whole right
    after ``JobName=`` (then a space, a newline or the end); else None."""
    at = _NAME_AT.match(text)
    if not name or at is None or not text.startswith(name, at.end()):
        return None
    end = at.end() + len(name)
    if text[end : end + 1] not in ("", " ", "\n"):
        return None
    return f"{text[: at.end()]}-{text[end:]}"


def _named(ctl: Mapping[str, str] | None, name: str | None) -> bool:
    """Whether slurmctld's record shows the job's whole name (``name``: the one slurmctld gave
    the hook, or accounting's; None or empty: not known). A name holding `` Key=`` or a
    newline is cut where the record is read, and what follows the cut is the name's text, not
    Slurm's keys."""
    if ctl is None or not (name or "").strip():
        return True
    return (ctl.get("JobName") or "").strip() == (name or "").strip()


# OverSubscribe as scontrol prints it (and SLURM_JOB_OVERSUBSCRIBE) up to 24.11: only NO is
# exclusive use (--exclusive); OK (the default), YES, USER, MCS and TOPO let other jobs onto
# the nodes. 26.05 prints OverSubscribe=NO for every job that did not ask to oversubscribe
# and says exclusive use in its own Exclusive field (NO, NODE; SLURM_JOB_EXCLUSIVE likewise),
# so OverSubscribe is read only where there is no Exclusive.
_OVERSUBSCRIBE_EXCLUSIVE = {"NO": True, "OK": False, "YES": False, "USER": False, "MCS": False}
_TRUE = {"1", "yes", "true", "exclusive", "job", "node"}
_FALSE = {"0", "no", "false", "none", "user", "mcs", "topo", "ok"}


def _exclusive(env: Mapping[str, str], ctl: Mapping[str, str] | None) -> bool | None:
    """Whether the job had its nodes to itself: 26.05's ``SLURM_JOB_EXCLUSIVE`` (in the
    EpilogSlurmctld environment) or scontrol's ``Exclusive``, else 24.11's
    ``SLURM_JOB_OVERSUBSCRIBE`` or scontrol's ``OverSubscribe`` while the job is in memory;
    None when none says (or says something unknown), and when scontrol's Exclusive says yes
    without its OverSubscribe=NO (a job's own text imitating a field its Slurm lacks)."""
    exclusive = [env.get("SLURM_JOB_EXCLUSIVE"), ctl.get("Exclusive") if ctl else None]
    for i, text in enumerate(exclusive):
        value = (text or "").strip().lower()
        if value in _TRUE:
            # scontrol's Exclusive only with its OverSubscribe=NO, as 26.05 prints both for an
            # exclusive job: on a Slurm without the field, a job's text imitating it leaves the
            # real OverSubscribe as it was
            return True if i == 0 or _oversubscribe(_val(ctl, "OverSubscribe")) else None
        if value in _FALSE:
            return False
    if any(text is not None for text in exclusive):
        return None  # 26.05+ with a value not known here: OverSubscribe would mislead
    for text in (env.get("SLURM_JOB_OVERSUBSCRIBE"), _val(ctl, "OverSubscribe")):
        said = _oversubscribe(text)
        if said is not None:
            return said
    return None


def _oversubscribe(text: str | None) -> bool | None:
    """Exclusive use as an OverSubscribe value says it (``NO``: True), None when unknown."""
    word = (text or "").strip().upper().split(":", 1)[0]
    return _OVERSUBSCRIBE_EXCLUSIVE.get(word)


def _tres_gpus(tres: str | None) -> int | None:
    """GPUs in a TRES list (``cpu=8,mem=64G,gres/gpu=2``): 0 when it names none, None when
    there is no TRES at all."""
    if tres is None:
        return None
    for item in tres.split(","):
        key, _, count = item.partition("=")
        if key.strip() == "gres/gpu":
            try:
                return int(count)
            except ValueError:
                return None
    return 0


def _gres_detail(
    ctl: Mapping[str, str] | None, nodes: set[str], *, empty_is_none: bool
) -> dict[str, str]:
    """Per-node GRES text of the job's own nodes from scontrol's ``-d`` lines (``NODE_GRES``);
    empty when slurmctld no longer holds the job.

    A node line with no GPU in it is kept only when ``empty_is_none``: once a job has ended,
    Slurm 22.05 prints ``GRES=`` with nothing for every node (the GPUs were given back), so an
    empty text then says nothing about which GPUs the job had."""
    out: dict[str, str] = {}
    for line in ((ctl or {}).get(NODE_GRES) or "").splitlines():
        hostlist, _, gres = line.partition("\t")
        if "gpu" not in gres and not empty_is_none:
            continue
        try:
            named = expand(hostlist)
        except HostlistError:
            continue
        for node in named:
            if node in nodes:
                out[node] = gres
    return out


def with_allocation(job: JobRecord, text: str) -> JobRecord:
    """``job`` with the per-node GRES (and OverSubscribe) of ``scontrol show job -d -o`` taken
    at the job's start (the hook's PrologSlurmctld record), when the record is this job's.

    The start-time GRES wins: once a job has ended, Slurm 22.05's scontrol still lists it but
    prints an empty ``GRES=`` for every node (the GPUs were given back)."""
    ctl = read_scontrol(text, job.name)
    if ctl is None or ctl.get("JobId") != job.job_id or not _named(ctl, job.name):
        return job
    gres = {**job.gres_detail, **_gres_detail(ctl, set(job.nodes), empty_is_none=True)}
    exclusive = job.exclusive if job.exclusive is not None else _exclusive({}, ctl)
    return replace(job, gres_detail=gres, exclusive=exclusive)


def _worst_step_exit(steps: list[dict[str, str]]) -> str | None:
    worst: tuple[int, int] | None = None
    for step in steps:
        status, _, signal = (step.get("ExitCode") or "").partition(":")
        if status.isdecimal() and signal.isdecimal():
            pair = (int(status), int(signal))
            if worst is None or pair > worst:
                worst = pair
    return f"{worst[0]}:{worst[1]}" if worst else None


def build_job_record(
    record: SacctRecord | None,
    ctl: Mapping[str, str] | None,
    env: Mapping[str, str] | None,
    *,
    timezone: str | None = None,
    ref_cluster: str | None = None,
    sluid_is_key: bool = False,
) -> JobRecord:
    """Build the ``JobRecord`` of one job run (see the module docstring).

    ``sluid_is_key``: the hook of this Slurm keys runs by SLUID (25.11+), so a SLUID from
    accounting or slurmctld is the run's key where the environment has none (a job looked up
    by id); 24.11's sacct lists SLUIDs its hook never sees, and there they are not used.

    slurmctld's record (``ctl``, best read with ``read_scontrol``) is left out when its job
    name is not the job's whole name (the environment's or accounting's): a name holding
    `` Key=`` or a newline would have made the rest of the name look like Slurm's keys.

    Raises:
        BundleError: when no source names a job id.
    """
    acct = record.fields if record else None
    env = env or {}
    if not _named(ctl, env.get("SLURM_JOB_NAME") or (acct or {}).get("JobName")):
        ctl = None  # what the record shows after the job's name is the name's own text
    data: dict[str, Any] = {"timezone": timezone}

    def first(*values: str | None) -> str | None:
        return next((v for v in values if v), None)

    # identity
    job_id = first(_val(acct, "JobIDRaw"), _val(ctl, "JobId"), env.get("SLURM_JOB_ID"))
    data["job_id"] = job_id
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    parsed = split_jobid(acct.get("JobID", "")) if acct else None
    if parsed and parsed[1] and parsed[1].isdecimal():
        array_job, array_task = parsed[0], parsed[1]
    if ctl and _val(ctl, "ArrayTaskId") and _val(ctl, "ArrayJobId"):
        array_job = array_job or ctl["ArrayJobId"]
        array_task = array_task or ctl["ArrayTaskId"]
    data["array_job_id"] = array_job
    data["array_task_id"] = array_task
    data["cluster"] = first(_val(acct, "Cluster"), env.get("SLURM_CLUSTER_NAME"), ref_cluster)
    # the SLUID the hook keyed the run by (25.11+ set it in the EpilogSlurmctld environment)
    data["sluid"] = first(
        env.get("SLURM_JOB_SLUID"),
        _val(acct, "SLUID") if sluid_is_key else None,
        _val(ctl, "SLUID") if sluid_is_key else None,
    )
    data["restart_count"] = first(
        env.get("SLURM_JOB_RESTART_COUNT"), _val(acct, "Restarts"), _val(ctl, "Restarts")
    )

    # who and where
    # the owner decides which files the worker may read for the job: the spooled environment
    # (set by slurmctld) comes first; scontrol's text, where a job name can imitate keys, last
    ctl_user = _val(ctl, "UserId")
    data["user"] = first(
        env.get("SLURM_JOB_USER"),
        _val(acct, "User"),
        ctl_user.split("(", 1)[0] if ctl_user else None,
    )
    uid_match = _UID.search(ctl_user or "")
    data["uid"] = first(
        env.get("SLURM_JOB_UID"), _val(acct, "UID"), uid_match.group(1) if uid_match else None
    )
    data["name"] = first(_val(acct, "JobName"), env.get("SLURM_JOB_NAME"), _val(ctl, "JobName"))
    data["account"] = first(
        _val(acct, "Account"), _val(ctl, "Account"), env.get("SLURM_JOB_ACCOUNT")
    )
    data["partition"] = first(
        _val(acct, "Partition"), _val(ctl, "Partition"), env.get("SLURM_JOB_PARTITION")
    )
    data["nodes"] = first(
        _val(acct, "NodeList"), _val(ctl, "NodeList"), env.get("SLURM_JOB_NODELIST")
    )
    data["work_dir"] = first(
        _val(acct, "WorkDir"), _val(ctl, "WorkDir"), env.get("SLURM_JOB_WORK_DIR")
    )

    # how it ended
    data["state"] = first(_val(acct, "State"), _val(ctl, "JobState"))
    data["exit_code"] = first(_val(acct, "ExitCode"), _val(ctl, "ExitCode"))
    derived = _val(acct, "DerivedExitCode")
    if derived is None and record is not None:
        derived = _worst_step_exit(record.steps)
    data["derived_exit_code"] = first(derived, _val(ctl, "DerivedExitCode"))
    data["reason"] = first(_val(ctl, "Reason"), _val(acct, "Reason"))
    data["start"] = first(
        _val(acct, "Start"), _val(ctl, "StartTime"), env.get("SLURM_JOB_START_TIME")
    )
    data["end"] = first(_val(acct, "End"), _val(ctl, "EndTime"), env.get("SLURM_JOB_END_TIME"))
    data["time_limit"] = first(_val(acct, "Timelimit"), _val(ctl, "TimeLimit"))
    data["admin_comment"] = first(_val(acct, "AdminComment"), _val(ctl, "AdminComment"))

    # ownership facts: exclusive use of the nodes, and the GPUs the job had on each
    try:
        nodes = expand(data["nodes"])
    except HostlistError:
        nodes = ()
    data["exclusive"] = _exclusive(env, ctl)
    # an empty per-node GRES means "no GPUs" only for a job whose TRES counts none
    gpus = _tres_gpus(first(_val(ctl, "TRES"), _val(acct, "AllocTRES")))
    data["gres_detail"] = _gres_detail(ctl, set(nodes), empty_is_none=gpus == 0)

    # output files
    fields = PatternFields(
        job_id=str(job_id or ""),
        array_job_id=array_job,
        array_task_id=array_task,
        user=data["user"],
        name=data["name"],
        first_node=first(_val(ctl, "BatchHost"), nodes[0] if nodes else None),
        work_dir=data["work_dir"],
    )
    # The spooled pattern is what slurmstepd expanded; scontrol's copy is only partly
    # expanded in 22.05 (%A %a %j %u %x are, %J %s %n %t %N and padding are not), so it is
    # expanded again and used only when the environment has no pattern.
    out_pattern = env.get("SLURM_JOB_STDOUT") or _val(ctl, "StdOut")
    err_pattern = env.get("SLURM_JOB_STDERR") or (
        None if env.get("SLURM_JOB_STDOUT") else _val(ctl, "StdErr")
    )
    std_out = expand_output_pattern(out_pattern or default_output_pattern(bool(array_task)), fields)
    std_err = expand_output_pattern(err_pattern, fields) if err_pattern else std_out
    data["std_out"] = std_out
    data["std_err"] = std_err
    return job_from_dict(data, source="slurm")


__all__ = [
    "SACCT_FIELDS",
    "SACCT_TEXT",
    "build_job_record",
    "pick_record",
    "read_scontrol",
    "with_allocation",
]
