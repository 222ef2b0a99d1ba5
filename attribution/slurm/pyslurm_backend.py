"""Optional backend on pyslurm, used only when it imports and matches the local Slurm.

pyslurm must be built for exactly the site's Slurm major.minor, and PyPI only
carries 25.11 (REPORT A5), so this is opt-in by nature. What it adds over the
command line: ``pyslurm.db.Jobs.modify`` stores comments byte for byte on
22.05 (sacctmgr lower-cases them). Reading still goes through the CLI
backend's parsers for StdOut patterns; calls used (same in pyslurm 22.5.3 and
25.11.2, REPORT A5): ``pyslurm.db.Job.load``, ``pyslurm.db.Jobs.modify``,
``pyslurm.db.JobFilter``, ``pyslurm.Job.load``.

Many jobs at once (``get_jobs``) and the reconciliation sweep (``ended_jobs``) go through the
command line backend: its batched sacct answers a burst of jobs with a few calls and reads
every field ``get_job`` reads from sacct (pyslurm's job has no Account, Partition, Timelimit,
AllocTRES or steps).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from attribution.errors import SlurmError
from attribution.model import JobRecord, OtherJob
from attribution.slurm.backend import FINAL_STATES, CommentField, EndedJob, JobRef, NotReady
from attribution.slurm.cli import CliBackend
from attribution.slurm.parse import SacctRecord
from attribution.slurm.resolve import build_job_record

_VERSION = re.compile(r"(\d+)\.(\d+)")


def _module() -> Any:
    return importlib.import_module("pyslurm")


def pyslurm_usable(cli: CliBackend) -> tuple[bool, str]:
    """Whether pyslurm imports and its major.minor equals Slurm's; and why not."""
    try:
        mod = _module()
    except Exception as exc:  # ImportError, or a broken build raising anything
        return False, f"import pyslurm failed: {exc}"
    m = _VERSION.search(str(getattr(mod, "__version__", "")))
    if not m:
        return False, "pyslurm has no __version__"
    ours = (int(m.group(1)), int(m.group(2)))
    slurm = cli.version()
    if slurm is None:
        return False, "cannot tell the local Slurm version"
    if ours != slurm:
        return False, f"pyslurm {ours[0]}.{ours[1]} does not match Slurm {slurm[0]}.{slurm[1]}"
    return True, ""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if text.strip() else None


class PyslurmBackend:
    """Reads accounting and writes comments through pyslurm; falls back to ``cli`` per call."""

    name = "pyslurm"

    def __init__(self, cli: CliBackend) -> None:
        self.cli = cli
        self.mod = _module()

    def about(self) -> dict[str, Any]:
        """See ``CliBackend.about`` (the version is the same Slurm's)."""
        return {**self.cli.about(), "backend": self.name}

    def _db_job(self, ref: JobRef) -> Any:
        if not ref.job_id:
            return None
        try:
            return self.mod.db.Job.load(int(ref.job_id))
        except Exception:
            return None

    def get_job(
        self,
        ref: JobRef,
        env: Mapping[str, str] | None = None,
        spooled_at: float | None = None,
    ) -> JobRecord:
        """See ``SlurmBackend.get_job``; uses the CLI when pyslurm cannot load the job."""
        db = self._db_job(ref)
        if db is None:
            return self.cli.get_job(ref, env, spooled_at)
        signal = getattr(db, "exit_code_signal", 0) or 0
        fields = {
            "JobIDRaw": str(getattr(db, "id", ref.job_id)),
            "Cluster": _text(getattr(db, "cluster", None)) or "",
            "User": _text(getattr(db, "user_name", None)) or "",
            "State": _text(getattr(db, "state", None)) or "",
            "ExitCode": f"{getattr(db, 'exit_code', 0) or 0}:{signal}",
            "DerivedExitCode": f"{getattr(db, 'derived_exit_code', 0) or 0}:0",
            "Start": str(getattr(db, "start_time", "") or ""),
            "End": str(getattr(db, "end_time", "") or ""),
            "NodeList": _text(getattr(db, "nodelist", None)) or "",
            "WorkDir": _text(getattr(db, "working_directory", None)) or "",
            "JobName": _text(getattr(db, "name", None)) or "",
            "AdminComment": _text(getattr(db, "admin_comment", None)) or "",
        }
        array_job, array_task = getattr(db, "array_id", None), getattr(db, "array_task_id", None)
        if array_job and array_task is not None:
            fields["JobID"] = f"{array_job}_{array_task}"
        ctl = self.cli.scontrol(ref, ended=fields["End"])
        job = build_job_record(
            SacctRecord(fields=fields),
            ctl,
            env,
            timezone=self.cli.timezone,
            ref_cluster=ref.cluster,
        )
        if job.state not in FINAL_STATES:
            raise NotReady(f"job {ref.query_id} is {job.state or 'in an unknown state'}, not ended")
        return job

    def get_jobs(
        self, items: Sequence[tuple[JobRef, Mapping[str, str] | None, float | None]]
    ) -> list[JobRecord | SlurmError]:
        """See ``SlurmBackend.get_jobs``: the CLI backend's batched sacct (module docstring)."""
        return self.cli.get_jobs(items)

    def ended_jobs(self, cluster: str | None, since: datetime, until: datetime) -> list[EndedJob]:
        """See ``SlurmBackend.ended_jobs`` (sacct through the CLI backend)."""
        return self.cli.ended_jobs(cluster, since, until)

    def other_jobs(
        self, job: JobRecord, start: datetime, end: datetime
    ) -> dict[str, tuple[OtherJob, ...]]:
        """See ``SlurmBackend.other_jobs`` (one sacct call through the CLI)."""
        return self.cli.other_jobs(job, start, end)

    def other_jobs_many(
        self, items: Sequence[tuple[JobRecord, datetime, datetime]]
    ) -> list[dict[str, tuple[OtherJob, ...]] | SlurmError]:
        """See ``SlurmBackend.other_jobs_many`` (batched sacct calls through the CLI)."""
        return self.cli.other_jobs_many(items)

    def get_comment(self, job: JobRecord, field: CommentField) -> str | None:
        db = self._db_job(JobRef.from_job(job))
        if db is None:
            return self.cli.get_comment(job, field)
        attr = "admin_comment" if field == "AdminComment" else "system_comment"
        return _text(getattr(db, attr, None))

    def set_comment(self, job: JobRecord, field: CommentField, text: str) -> None:
        """Write through ``pyslurm.db.Jobs.modify``; array tasks whose raw id equals the
        array id go through sacctmgr with ``A_T`` (an id filter would hit every task)."""
        if job.array_job_id and job.array_job_id == job.job_id:
            self.cli.set_comment(job, field, text)
            return
        attr = "admin_comment" if field == "AdminComment" else "system_comment"
        try:
            changes = self.mod.db.Job(**{attr: text})
            done = self.mod.db.Jobs.modify(self.mod.db.JobFilter(ids=[int(job.job_id)]), changes)
        except Exception as exc:
            raise SlurmError(f"pyslurm could not modify job {job.display_id}: {exc}") from None
        if not done:
            raise SlurmError(f"pyslurm modified nothing for job {job.display_id}")


__all__ = ["PyslurmBackend", "pyslurm_usable"]
