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
    records: list[SacctRecord], spooled_at: float | None, sluid: str | None = None
) -> SacctRecord | None:
    """Choose the run the spool entry describes among ``sacct -D`` records.

    Where Slurm gives runs SLUIDs (25.11+), the record with the spooled run's SLUID is that
    run. Otherwise the hook ran when the job ended, so the record whose End (epoch seconds)
    is closest to ``spooled_at`` is that run; without a spool time (or without usable End
    times) the newest record wins.
    """
    if not records:
        return None
    if sluid:
        for r in records:
            if r.fields.get("SLUID") == sluid:
                return r
    if spooled_at is not None:
        timed = [
            (abs(float(end) - spooled_at), i)
            for i, r in enumerate(records)
            if (end := r.fields.get("End", "")).isdecimal()
        ]
        if timed:
            return records[min(timed)[1]]
    return records[-1]


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
    None when none says (or says something unknown)."""
    exclusive = [env.get("SLURM_JOB_EXCLUSIVE"), ctl.get("Exclusive") if ctl else None]
    for text in exclusive:
        value = (text or "").strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
    if any(text is not None for text in exclusive):
        return None  # 26.05+ with a value not known here: OverSubscribe would mislead
    for text in (env.get("SLURM_JOB_OVERSUBSCRIBE"), _val(ctl, "OverSubscribe")):
        word = (text or "").strip().upper().split(":", 1)[0]
        if word in _OVERSUBSCRIBE_EXCLUSIVE:
            return _OVERSUBSCRIBE_EXCLUSIVE[word]
    return None


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
    ctl = parse_scontrol(text)
    if ctl.get("JobId") != job.job_id:
        return job
    ctl[NODE_GRES] = "\n".join(f"{n}\t{g}" for n, g in parse_node_gres(text).items())
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

    Raises:
        BundleError: when no source names a job id.
    """
    acct = record.fields if record else None
    env = env or {}
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
    data["name"] = first(_val(acct, "JobName"), _val(ctl, "JobName"), env.get("SLURM_JOB_NAME"))
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


__all__ = ["SACCT_FIELDS", "SACCT_TEXT", "build_job_record", "pick_record", "with_allocation"]
