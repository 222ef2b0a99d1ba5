"""The Slurm backend interface: job references, final states and what a backend answers.

``attribution.slurm.factory.make_backend(settings)`` picks the backend (``auto``: pyslurm
when it imports and its major.minor equals the local Slurm's, otherwise the command line
tools; REPORT A5). Every backend answers the same three questions:

- ``get_job(ref, env, spooled_at)``: the ``JobRecord`` of one job run, from
  accounting (sacct), the controller while it still holds the job (scontrol)
  and the EpilogSlurmctld environment spooled by the hook; ``get_jobs`` the same for
  many runs with one batched query;
- ``ended_jobs(cluster, since, until)``: job runs accounting says ended in a window (the
  reconciliation sweep finds the ones the hook never spooled);
- ``other_jobs(job, start, end)``: which other jobs ran on the job's nodes in its window
  (whose evidence may sit in the same node logs);
- ``get_comment(job, field)``: the job's AdminComment or SystemComment now;
- ``set_comment(job, field, text)``: write one of them after the job ended.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from attribution.errors import SlurmError
from attribution.model import SLURM_STATES, JobRecord, OtherJob

CommentField = Literal["AdminComment", "SystemComment"]
_REF = re.compile(r"^(?P<job>\d+)(?:_(?P<task>\d+))?$")
_SLUID = re.compile(r"^s[0-9A-Za-z]{13}$")

# Job states that are final (sacct State base words); anything else means "not yet".
FINAL_STATES = SLURM_STATES - {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED"}


class NotReady(SlurmError):
    """Slurm does not (yet) have the final record of the job: try again later."""


@dataclass(frozen=True, slots=True)
class JobRef:
    """Which job run to look up.

    ``job_id`` is Slurm's raw job id when known; for an array task
    ``array_job_id``/``array_task_id`` are set and ``query_id`` is ``A_T``
    (sacctmgr and sacct target exactly that task; REPORT A3).
    """

    job_id: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    cluster: str | None = None
    restart_count: int | None = None
    sluid: str | None = None

    @property
    def query_id(self) -> str:
        if self.array_job_id and self.array_task_id:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.job_id:
            return self.job_id
        if self.sluid:
            return self.sluid
        raise SlurmError("job reference has no id")

    @classmethod
    def parse(cls, text: str, cluster: str | None = None) -> JobRef:
        """``"1234"``, ``"1234_7"`` (array task) or a SLUID.

        Raises:
            SlurmError: for anything else.
        """
        text = text.strip()
        m = _REF.match(text)
        if m:
            if m.group("task") is not None:
                return cls(
                    array_job_id=m.group("job"), array_task_id=m.group("task"), cluster=cluster
                )
            return cls(job_id=m.group("job"), cluster=cluster)
        if _SLUID.match(text):
            return cls(sluid=text, cluster=cluster)
        raise SlurmError(f"not a job id: {text!r} (use 1234, 1234_7 or a SLUID)")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobRef:
        """The job an EpilogSlurmctld environment describes.

        Raises:
            SlurmError: when an id is not a number (or the SLUID not a SLUID): such a value
                must never reach a Slurm command's arguments.
        """
        restart = env.get("SLURM_JOB_RESTART_COUNT", "")
        ids = {
            name: env.get(name) or None
            for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
        }
        for name, value in ids.items():
            if value is not None and not (value.isascii() and value.isdecimal()):
                raise SlurmError(f"{name}={value[:40]!r} is not a job id")
        sluid = env.get("SLURM_JOB_SLUID") or None
        if sluid is not None and not _SLUID.match(sluid):
            raise SlurmError(f"SLURM_JOB_SLUID={sluid[:40]!r} is not a SLUID")
        cluster = env.get("SLURM_CLUSTER_NAME") or None
        if cluster is not None and not re.fullmatch(r"[\w.-]{1,64}", cluster):
            raise SlurmError(f"SLURM_CLUSTER_NAME={cluster[:40]!r} is not a cluster name")
        return cls(
            job_id=ids["SLURM_JOB_ID"],
            array_job_id=ids["SLURM_ARRAY_JOB_ID"],
            array_task_id=ids["SLURM_ARRAY_TASK_ID"],
            cluster=cluster,
            restart_count=int(restart) if restart.isascii() and restart.isdecimal() else None,
            sluid=sluid,
        )

    @classmethod
    def from_job(cls, job: JobRecord) -> JobRef:
        return cls(
            job_id=job.job_id,
            array_job_id=job.array_job_id,
            array_task_id=job.array_task_id,
            cluster=job.cluster,
            restart_count=job.restart_count,
            sluid=job.sluid,
        )


@dataclass(frozen=True, slots=True)
class EndedJob:
    """One job run accounting says has ended (``ended_jobs``): enough to build the spool
    entry the hook would have written, and so the same key (``hookenv.key_from_env``).

    ``restart_count``: which run of the job this is (0 for the first; ``sacct -D`` lists
    every run of a requeued job, oldest first; sacct's ``Restarts`` from 24.11, counted from
    the runs' Submit times before).
    ``end``: when it ended (UTC). ``nodes``: its node count (0 when it never ran).
    """

    job_id: str
    cluster: str
    state: str
    exit_code: str
    derived_exit_code: str
    end: datetime
    user: str | None = None
    uid: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    restart_count: int = 0
    sluid: str | None = None  # accounting's SLUID of the run (24.11+)
    sluid_in_hook: bool = False  # whether the hook saw it too (25.11+): its spool key
    nodes: int = 0
    nodelist: str | None = None
    partition: str | None = None

    def env(self) -> dict[str, str]:
        """The SLURM_* variables of an EpilogSlurmctld run for this job, as far as
        accounting knows them (the worker resolves the rest through sacct, as for any entry)."""
        env = {
            "SLURM_JOB_ID": self.job_id,
            "SLURM_CLUSTER_NAME": self.cluster,
            "SLURM_JOB_RESTART_COUNT": str(self.restart_count),
        }
        optional = {
            "SLURM_ARRAY_JOB_ID": self.array_job_id,
            "SLURM_ARRAY_TASK_ID": self.array_task_id,
            "SLURM_JOB_SLUID": self.sluid if self.sluid_in_hook else None,
            "SLURM_JOB_USER": self.user,
            "SLURM_JOB_UID": self.uid,
            "SLURM_JOB_NODELIST": self.nodelist,
            "SLURM_JOB_PARTITION": self.partition,
            "SLURM_JOB_EXIT_CODE2": self.exit_code,
            "SLURM_JOB_DERIVED_EC": self.derived_exit_code,
        }
        env.update({k: v for k, v in optional.items() if v})
        return env


class SlurmBackend(Protocol):
    """What the worker and the CLI need from Slurm."""

    name: str

    def get_job(
        self,
        ref: JobRef,
        env: Mapping[str, str] | None = None,
        spooled_at: float | None = None,
    ) -> JobRecord:
        """The job run's record.

        Raises:
            NotReady: Slurm has no final record of it yet.
            SlurmError: Slurm could not be asked.
        """
        ...

    def get_jobs(
        self, items: Sequence[tuple[JobRef, Mapping[str, str] | None, float | None]]
    ) -> list[JobRecord | SlurmError]:
        """``get_job`` for many job runs at once, answered with as few Slurm calls as the
        backend can (one batched sacct for all): one result per item, in order, a
        ``NotReady`` or ``SlurmError`` in place of a record that cannot be had yet.
        Never raises for one job's trouble."""
        ...

    def ended_jobs(self, cluster: str | None, since: datetime, until: datetime) -> list[EndedJob]:
        """Every job run (array tasks one by one, each run of a requeued job) that accounting
        says ended at or after ``since`` and before ``until`` (UTC), on ``cluster`` (None: the
        local one), for the reconciliation sweep.

        Raises:
            SlurmError: Slurm could not be asked.
        """
        ...

    def other_jobs(
        self, job: JobRecord, start: datetime, end: datetime
    ) -> dict[str, tuple[OtherJob, ...]]:
        """Per node of the job, the other jobs that ran there between ``start`` and ``end``.

        Raises:
            SlurmError: Slurm could not be asked.
        """
        ...

    def other_jobs_many(
        self, items: Sequence[tuple[JobRecord, datetime, datetime]]
    ) -> list[dict[str, tuple[OtherJob, ...]] | SlurmError]:
        """``other_jobs`` for many ``(job, start, end)`` at once (one result per item, a
        ``SlurmError`` in place of one that could not be had). Never raises."""
        ...

    def get_comment(self, job: JobRecord, field: CommentField) -> str | None:
        """The job's current AdminComment or SystemComment (``None`` when empty)."""
        ...

    def set_comment(self, job: JobRecord, field: CommentField, text: str) -> None:
        """Write AdminComment or SystemComment of a finished job.

        Raises:
            SlurmError: when Slurm refused or could not be reached.
        """
        ...
