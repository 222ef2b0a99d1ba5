"""The default backend: Slurm's own command line tools (sacct, scontrol, sacctmgr).

Facts this relies on (measured on Slurm 22.05, REPORT A3/A4):

- ``sacct -P`` with explicit fields and ``SLURM_TIME_FORMAT=%s`` is the
  reliable source of state and exit codes (``sacct --json`` reports non-zero
  exits as 0 in 22.05). An unknown job gives rc 0 and no output.
- ``scontrol show job -o`` shows the job only for ``MinJobAge`` seconds after
  it ended, but then has the expanded StdOut/StdErr paths.
- ``sacctmgr -i modify job where jobid=<id or A_T> set AdminComment=...``
  works on finished jobs; an unknown job prints "Nothing modified" (rc 1).

Each command runs with a timeout and is retried a bounded number of times.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from attribution.errors import SlurmError
from attribution.hostlist import HostlistError, expand
from attribution.model import JobRecord, OtherJob
from attribution.slurm.backend import FINAL_STATES, CommentField, JobRef, NotReady
from attribution.slurm.parse import (
    NODE_GRES,
    group_steps,
    parse_node_gres,
    parse_sacct,
    parse_scontrol,
)
from attribution.slurm.resolve import SACCT_FIELDS, SACCT_TEXT, build_job_record, pick_record

DELIMITER = "\x1f"  # ASCII unit separator: never in the fields we ask for
OTHER_FIELDS = ("JobIDRaw", "Start", "End", "NodeList", "User")
MAX_OTHER_ROWS = 50_000  # other jobs on a job's nodes during its window read at the most


def _local(when: datetime) -> str:
    """A time as sacct's -S/-E read it: local time of this process, to the second."""
    return datetime.fromtimestamp(when.timestamp()).strftime("%Y-%m-%dT%H:%M:%S")


def _epoch(text: str | None) -> datetime | None:
    """sacct's time (SLURM_TIME_FORMAT=%s: epoch seconds); None for Unknown/None."""
    value = (text or "").strip()
    return datetime.fromtimestamp(int(value), UTC) if value.isdecimal() else None


_VERSION = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Completed:
    """What one command did: exit code, stdout and stderr (text)."""

    rc: int
    out: str
    err: str


Runner = Callable[[Sequence[str], float, Mapping[str, str]], Completed]


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str]) -> Completed:
    """Run ``argv`` without a shell; raises ``subprocess.TimeoutExpired``/``OSError``."""
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        timeout=timeout,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return Completed(
        proc.returncode,
        proc.stdout.decode("utf-8", errors="replace"),
        proc.stderr.decode("utf-8", errors="replace"),
    )


class CliBackend:
    """Ask Slurm through its command line tools.

    Args:
        timeout: seconds per command.
        retries: extra tries after a command failed or timed out.
        bin_dir: directory of the Slurm tools when they are not on ``PATH``.
        timezone: stored in the job record (zone of node log stamps).
        runner: runs one command (tests may pass another).
    """

    name = "cli"

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        bin_dir: str | None = None,
        timezone: str | None = "UTC",
        runner: Runner = run_command,
    ) -> None:
        self.timeout = timeout
        self.retries = retries
        self.bin_dir = bin_dir
        self.timezone = timezone
        self.runner = runner
        env = dict(os.environ)
        env["SLURM_TIME_FORMAT"] = "%s"
        if not env.get("PATH"):
            env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
        self.env = env

    def _tool(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def run(self, tool: str, args: Sequence[str], *, ok: Callable[[Completed], bool]) -> Completed:
        """Run a Slurm tool until ``ok(result)`` or the tries are used up.

        Raises:
            SlurmError: with the tool's last error line when every try failed.
        """
        argv = [self._tool(tool), *args]
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
            try:
                result = self.runner(argv, self.timeout, self.env)
            except subprocess.TimeoutExpired:
                last = f"timed out after {self.timeout:g}s"
                continue
            except OSError as exc:
                raise SlurmError(f"cannot run {tool}: {exc.strerror or exc}") from None
            if ok(result):
                return result
            lines = (result.err or result.out).strip().splitlines()
            last = lines[-1] if lines else f"exit code {result.rc}"
        raise SlurmError(f"{tool} failed: {last}")

    # ------------------------------------------------------------------ reading

    def sacct(self, ref: JobRef) -> list[dict[str, str]]:
        """Every record of the job (all runs, ``-D``), allocation and step lines."""
        args = ["-P", "-n", "-D", f"--delimiter={DELIMITER}", "-j", ref.query_id]
        if ref.cluster:
            args += ["-M", ref.cluster]
        args += ["-o", ",".join(SACCT_FIELDS)]
        result = self.run("sacct", args, ok=lambda r: r.rc == 0)
        return parse_sacct(result.out, SACCT_FIELDS, delimiter=DELIMITER)

    def sacct_text(self, ref: JobRef, job_id_raw: str) -> dict[str, str]:
        """The free-text fields (SACCT_TEXT) of one run: the first row of that JobIDRaw, the
        real one (a newline in the job name can only add rows after it)."""
        args = ["-P", "-n", "-D", f"--delimiter={DELIMITER}", "-j", ref.query_id]
        if ref.cluster:
            args += ["-M", ref.cluster]
        args += ["-o", ",".join(SACCT_TEXT)]
        result = self.run("sacct", args, ok=lambda r: r.rc == 0)
        for row in parse_sacct(result.out, SACCT_TEXT, delimiter=DELIMITER):
            if row.get("JobIDRaw") == job_id_raw:
                return {k: v for k, v in row.items() if k != "JobIDRaw"}
        return {}

    def scontrol(self, ref: JobRef) -> dict[str, str] | None:
        """``scontrol show job -d -o`` while slurmctld still holds the job, else ``None``.

        ``-d`` adds the per-node GRES (``GRES=gpu:h100:2(IDX:0-1)``): which GPUs the job had on
        each node, known only while the job is in slurmctld's memory (``MinJobAge``). It is
        kept under ``NODE_GRES`` (one ``hostlist<TAB>GRES`` line per node group)."""
        try:
            result = self.run(
                "scontrol",
                ["show", "job", "-d", "-o", ref.query_id],
                ok=lambda r: r.rc == 0 or "Invalid job id" in r.err,
            )
        except SlurmError:
            return None
        if result.rc != 0 or not result.out.strip():
            return None
        out = parse_scontrol(result.out)
        out[NODE_GRES] = "\n".join(f"{n}\t{g}" for n, g in parse_node_gres(result.out).items())
        return out

    def get_job(
        self,
        ref: JobRef,
        env: Mapping[str, str] | None = None,
        spooled_at: float | None = None,
    ) -> JobRecord:
        """See ``SlurmBackend.get_job``."""
        records = group_steps(self.sacct(ref))
        record = pick_record(records, spooled_at)
        if record is not None and (raw := record.fields.get("JobIDRaw")):
            record.fields.update(self.sacct_text(ref, raw))
        ctl = self.scontrol(ref)
        if record is None and ctl is None:
            raise NotReady(f"job {ref.query_id} is not in sacct or scontrol (yet)")
        job = build_job_record(record, ctl, env, timezone=self.timezone, ref_cluster=ref.cluster)
        if job.state not in FINAL_STATES:
            raise NotReady(f"job {ref.query_id} is {job.state or 'in an unknown state'}, not ended")
        return job

    def other_jobs(
        self, job: JobRecord, start: datetime, end: datetime
    ) -> dict[str, tuple[OtherJob, ...]]:
        """The other jobs that ran on the job's nodes between ``start`` and ``end`` (UTC):
        ``sacct -a -X -N <nodes> -S -E``, one call for all nodes.

        Raises:
            SlurmError: sacct failed.
        """
        if not job.nodes:
            return {}
        args = ["-a", "-X", "-P", "-n", f"--delimiter={DELIMITER}", "-N", job.nodelist]
        args += ["-S", _local(start), "-E", _local(end)]
        if job.cluster:
            args += ["-M", job.cluster]
        args += ["-o", ",".join(OTHER_FIELDS)]
        result = self.run("sacct", args, ok=lambda r: r.rc == 0)
        mine = set(job.nodes)
        out: dict[str, list[OtherJob]] = {}
        for row in parse_sacct(result.out, OTHER_FIELDS, delimiter=DELIMITER)[:MAX_OTHER_ROWS]:
            raw = row.get("JobIDRaw", "")
            if not raw.isdecimal() or raw == job.job_id:
                continue
            began = _epoch(row.get("Start"))
            if began is None:
                continue  # it never started
            try:
                shared = [n for n in expand(row.get("NodeList")) if n in mine]
            except HostlistError:
                continue
            other = OtherJob(raw, began, _epoch(row.get("End")), row.get("User") or None)
            for node in shared:
                out.setdefault(node, []).append(other)
        return {node: tuple(jobs) for node, jobs in out.items()}

    def get_comment(self, job: JobRecord, field: CommentField) -> str | None:
        """The job's AdminComment/SystemComment now (newest record), ``None`` when empty."""
        ref = JobRef.from_job(job)
        args = ["-X", "-P", "-n", "-j", ref.query_id, "-o", field]
        if ref.cluster:
            args += ["-M", ref.cluster]
        result = self.run("sacct", args, ok=lambda r: r.rc == 0)
        text = result.out.rstrip("\n")
        return text or None

    def whoami_record(self, ref: JobRef) -> dict[str, str] | None:
        """User, UID and AdminComment of a job (for ``sattr`` run by a user), or ``None``."""
        fields = ("JobID", "User", "UID", "State", "AdminComment")
        args = ["-X", "-P", "-n", f"--delimiter={DELIMITER}", "-j", ref.query_id]
        args += ["-o", ",".join(fields)]
        result = self.run("sacct", args, ok=lambda r: r.rc == 0)
        rows = parse_sacct(result.out, fields, delimiter=DELIMITER)
        return rows[-1] if rows else None

    # ------------------------------------------------------------------ writing

    def set_comment(self, job: JobRecord, field: CommentField, text: str) -> None:
        """``sacctmgr -i modify job where jobid=<id or A_T> [cluster=C] set <field>=<text>``."""
        if "\n" in text or '"' in text or "'" in text:
            raise SlurmError("refusing to write a comment with quotes or newlines")
        ref = JobRef.from_job(job)
        where = ["where", f"jobid={ref.query_id}"]
        if ref.cluster:
            where.append(f"cluster={ref.cluster}")
        self.run(
            "sacctmgr",
            ["-i", "modify", "job", *where, "set", f"{field}={text}"],
            ok=lambda r: r.rc == 0,
        )

    def version(self) -> tuple[int, int] | None:
        """The local Slurm's (major, minor) from ``sacct --version``, or ``None``."""
        try:
            result = self.run("sacct", ["--version"], ok=lambda r: r.rc == 0)
        except SlurmError:
            return None
        m = _VERSION.search(result.out)
        return (int(m.group(1)), int(m.group(2))) if m else None


__all__ = ["DELIMITER", "CliBackend", "Completed", "run_command"]
