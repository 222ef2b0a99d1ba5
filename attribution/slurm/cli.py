"""The default backend: Slurm's own command line tools (sacct, scontrol, sacctmgr).

Facts this relies on (measured on Slurm 22.05, REPORT A3/A4):

- ``sacct -P`` with explicit fields and ``SLURM_TIME_FORMAT=%s`` is the
  reliable source of state and exit codes (``sacct --json`` reports non-zero
  exits as 0 in 22.05). An unknown job gives rc 0 and no output.
- ``scontrol show job -o`` shows the job only for ``MinJobAge`` seconds after
  it ended, but then has the expanded StdOut/StdErr paths.
- ``sacctmgr -i modify job where jobid=<id or A_T> set AdminComment=...``
  works on finished jobs; an unknown job prints "Nothing modified" (rc 1).

- ``sacct -j`` takes a comma-separated list of ids (200 and 2,000 ids answer in well
  under a second on 22.05) and prints each job once, each job's runs oldest first and
  each run followed by its steps, whatever the order of the list: ``get_jobs`` asks for
  up to ``BATCH_IDS`` jobs in one call and sorts the rows out per job. ``-j N`` selects
  job N, every task of array N and every component of heterogeneous job N; ``-j A_T``
  exactly that array task (nothing while the task is still in the unsplit ``A_[..]``
  record).
- ``sacct -s <states> -S -E`` selects the records that ended in one of those states
  between -S and -E (both included): that is the reconciliation sweep's query.

Each command runs with a timeout and is retried a bounded number of times, except
``scontrol show job``/``show config``: their answers are optional, so they are tried once,
and after slurmctld could not be reached scontrol is not asked again for ``CTL_PAUSE``
seconds (a down slurmctld costs one timeout a minute, not one per job). docs/slurm-queries.md
lists every query.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution.errors import AttributionError, SlurmError
from attribution.fleet import NodeEvent
from attribution.hostlist import HostlistError, compress, expand
from attribution.model import JobRecord, OtherJob
from attribution.slurm.backend import FINAL_STATES, CommentField, EndedJob, JobRef, NotReady
from attribution.slurm.parse import SacctRecord, group_steps, parse_sacct, split_jobid
from attribution.slurm.resolve import (
    SACCT_FIELDS,
    SACCT_TEXT,
    build_job_record,
    pick_record,
    read_scontrol,
)
from attribution.timeutil import parse_epoch, parse_iso

DELIMITER = "\x1f"  # ASCII unit separator: never in the fields we ask for
OTHER_FIELDS = ("JobIDRaw", "Start", "End", "NodeList", "User")
MAX_OTHER_ROWS = 50_000  # other jobs on a job's nodes during its window read at the most
BATCH_IDS = 200  # job ids in one batched sacct -j (the argument stays a few KB)
CTL_PAUSE = 60.0  # seconds scontrol is not asked after it could not reach slurmctld
CONFIG_TTL = 3600.0  # seconds a MinJobAge read from ``scontrol show config`` is trusted
DEFAULT_MIN_JOB_AGE = 300  # Slurm's default MinJobAge, when slurmctld cannot tell
FIELDS_RETRY = 300.0  # seconds before ``sacct -e`` is asked again after it failed
SLUID_IN_HOOK = (25, 11)  # the first Slurm whose EpilogSlurmctld gets SLURM_JOB_SLUID
# the versions CI runs the live tests on (docs/compatibility.md); others are tried
TESTED_VERSIONS = ((22, 5), (24, 11), (26, 5))
# ended_jobs: fields nobody but Slurm writes (no job name, no work directory), so a row
# cannot be forged; SLUID and Restarts are added where sacct has them (24.11+)
ENDED_FIELDS = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "User",
    "UID",
    "Partition",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Submit",
    "Start",
    "End",
    "NNodes",
    "NodeList",
)
RUN_FIELDS = ("JobIDRaw", "Submit")
# asked for only where ``sacct -e`` lists them (24.11+): each run's SLUID, and its number of
# restarts (without it a run's number is counted from the Submit times of all runs)
OPTIONAL_FIELDS = ("SLUID", "Restarts")
OPTIONAL_SINCE = (24, 11)  # the first Slurm whose sacct has them all
# sacct's refusal of a field it does not know (a renamed or removed one)
_INVALID_FIELD = re.compile(r"Invalid field requested: \"?([A-Za-z]\w*)")
_BATCHABLE = re.compile(r"^\d+(?:_\d+)?$")
# what scontrol prints when slurmctld does not answer (22.05: "slurm_load_jobs error: Unable
# to contact slurm controller (connect failure)"; a busy one: "Socket timed out on send/recv")
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
)
_MIN_JOB_AGE = re.compile(r"^MinJobAge\s*=\s*(\d+)", re.MULTILINE)

Item = tuple[JobRef, Mapping[str, str] | None, float | None]

log = logging.getLogger(__name__)


def _utc(when: datetime) -> str:
    """A time as sacct's -S/-E read it under ``TZ=UTC0``, to the second (rounded down)."""
    return datetime.fromtimestamp(int(when.timestamp()), UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _sharers(
    job: JobRecord,
    rows: Sequence[Mapping[str, str]],
    start: datetime,
    end: datetime,
    *,
    windowed: bool,
) -> dict[str, tuple[OtherJob, ...]]:
    """Per node of ``job``, the other jobs among sacct ``rows`` that ran there; with
    ``windowed``, only those that overlapped ``[start, end]`` (to the second, as sacct's -S/-E
    count: rows of a batched query cover the window of every job asked)."""
    mine = set(job.nodes)
    first = int(start.timestamp())
    last = int(end.timestamp()) + 1
    out: dict[str, list[OtherJob]] = {}
    for row in rows:
        raw = row.get("JobIDRaw", "")
        if not raw.isdecimal() or raw == job.job_id:
            continue
        began = _epoch(row.get("Start"))
        if began is None:
            continue  # it never started
        ended = _epoch(row.get("End"))
        if windowed and (
            began.timestamp() > last or (ended is not None and ended.timestamp() < first)
        ):
            continue
        try:
            shared = [n for n in expand(row.get("NodeList")) if n in mine]
        except HostlistError:
            continue
        other = OtherJob(raw, began, ended, row.get("User") or None)
        for node in shared:
            out.setdefault(node, []).append(other)
    return {node: tuple(jobs) for node, jobs in out.items()}


def _epoch(text: str | None) -> datetime | None:
    """sacct's time (SLURM_TIME_FORMAT=%s: epoch seconds); None for Unknown/None and for a
    number no time has."""
    value = _number(text)
    try:
        return datetime.fromtimestamp(value, UTC) if value is not None else None
    except (OverflowError, OSError, ValueError):
        return None


def _number(text: str | None) -> int | None:
    """A count or epoch time as sacct prints it (ASCII digits, at most 18), else None: a
    longer one no Slurm prints, and Python reads none past 4,300 digits (ValueError)."""
    value = (text or "").strip()
    return int(value) if value.isascii() and value.isdecimal() and len(value) <= 18 else None


_VERSION = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Completed:
    """What one command did: exit code, stdout and stderr (text)."""

    rc: int
    out: str
    err: str


Runner = Callable[[Sequence[str], float, Mapping[str, str]], Completed]


class CommandTimedOut(SlurmError):
    """Every try of a Slurm command ran into the timeout."""


def _unreachable(result: Completed) -> bool:
    """Whether a failed scontrol said that slurmctld did not answer."""
    return result.rc != 0 and any(text in result.err for text in _UNREACHABLE)


def _same_run(
    ctl: Mapping[str, str], env: Mapping[str, str], record: SacctRecord | None, *, latest: bool
) -> bool:
    """Whether slurmctld's record (always the job's latest run) describes the run asked for:
    not another SLUID where both are known (25.11+), and the same restart count as the
    spooled environment or the accounting record says (a record showing none is no run's);
    when neither says one, the same SLUID, else whether the run asked for is the latest one
    accounting has (``latest``). A SLUID alone is not enough: before 25.11 scontrol prints
    none, and one in its text is a job's own (a comment imitating ``SLUID=``)."""
    ctl_sluid = (ctl.get("SLUID") or "").strip()
    acct = record.fields if record is not None else {}
    sluid = (env.get("SLURM_JOB_SLUID") or acct.get("SLUID") or "").strip()
    if ctl_sluid and sluid and ctl_sluid != sluid:
        return False
    run = (env.get("SLURM_JOB_RESTART_COUNT") or acct.get("Restarts") or "").strip()
    if run:
        shown = _number(ctl.get("Restarts"))
        return shown is not None and shown == _number(run)
    return bool(ctl_sluid and sluid) or latest


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def _display(ref: JobRef) -> str:
    try:
        return ref.query_id
    except SlurmError:
        return "(no id)"


def _first_texts(rows: Sequence[Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """JobIDRaw -> the other fields of the first row with that JobIDRaw (the real row: a
    newline in a job's own name can only add rows after it)."""
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        raw = row.get("JobIDRaw", "")
        if raw and raw not in out:
            out[raw] = {k: v for k, v in row.items() if k != "JobIDRaw"}
    return out


def _select(
    query_ids: Sequence[str], records: Sequence[SacctRecord]
) -> dict[str, list[SacctRecord]]:
    """The records of a batched ``sacct -j`` that each id alone would have selected, in
    sacct's order: ``N`` the job whose JobIDRaw is N and every record whose JobID starts with
    N (the tasks of array N, the components ``N+K`` of heterogeneous job N, the unsplit
    ``N_[1-5]``); ``A_T`` the record whose JobID is ``A_T``."""
    by_raw: dict[str, list[int]] = {}
    by_job: dict[str, list[int]] = {}
    by_task: dict[tuple[str, str], list[int]] = {}
    for i, record in enumerate(records):
        by_raw.setdefault(record.fields.get("JobIDRaw", ""), []).append(i)
        parsed = split_jobid(record.fields.get("JobID", ""))
        if parsed is None:
            continue
        by_job.setdefault(parsed[0], []).append(i)
        if parsed[1] is not None:
            by_task.setdefault((parsed[0], parsed[1]), []).append(i)
    out: dict[str, list[SacctRecord]] = {}
    for q in query_ids:
        job, _, task = q.partition("_")
        if task:
            picked = set(by_task.get((job, task), ()))
        else:
            picked = set(by_raw.get(q, ())) | set(by_job.get(q, ()))
        out[q] = [records[i] for i in sorted(picked)]
    return out


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
        clock: the time now, epoch seconds (tests may pass another).
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.timeout = timeout
        self.retries = retries
        self.bin_dir = bin_dir
        self.timezone = timezone
        self.runner = runner
        self.clock = clock
        env = dict(os.environ)
        env["SLURM_TIME_FORMAT"] = "%s"
        if not env.get("PATH"):
            env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
        self.env = env
        self._ctl_down_until = 0.0  # scontrol is not asked before this time
        self._min_job_age: tuple[int, float] | None = None  # (seconds, trusted until)
        self._sacct_fields: frozenset[str] | None = None  # what ``sacct -e`` lists
        self._fields_retry_at = 0.0  # when to ask ``sacct -e`` again after it failed
        self._version: tuple[int, int] | None = None
        self._version_retry_at = 0.0  # when to ask ``sacct --version`` again after it failed
        self._refused_at: dict[str, float] = {}  # field sacct refused -> when (FIELDS_RETRY)
        self._named: set[str] = set()  # fields already logged as missing

    def _tool(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        ok: Callable[[Completed], bool],
        retries: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Completed:
        """Run a Slurm tool until ``ok(result)`` or the tries are used up.

        Args:
            retries: extra tries (default: the backend's).
            env: variables set on top of the backend's environment for this command.

        Raises:
            CommandTimedOut: the last try ran into the timeout.
            SlurmError: with the tool's last error line when every try failed.
        """
        argv = [self._tool(tool), *args]
        run_env = {**self.env, **env} if env else self.env
        last = "no attempt"
        timed_out = False
        for attempt in range((self.retries if retries is None else retries) + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
            try:
                result = self.runner(argv, self.timeout, run_env)
            except subprocess.TimeoutExpired:
                last = f"timed out after {self.timeout:g}s"
                timed_out = True
                continue
            except OSError as exc:
                raise SlurmError(f"cannot run {tool}: {exc.strerror or exc}") from None
            timed_out = False
            if ok(result):
                return result
            lines = (result.err or result.out).strip().splitlines()
            last = lines[-1] if lines else f"exit code {result.rc}"
        if timed_out:
            raise CommandTimedOut(f"{tool} failed: {last}")
        raise SlurmError(f"{tool} failed: {last}")

    # ------------------------------------------------------------------ reading

    def _sacct_jobs(
        self, query_ids: Sequence[str], cluster: str | None, fields: Sequence[str]
    ) -> list[dict[str, str]]:
        """``sacct -P -n -D -j id1,id2,... -o fields``: every record of these jobs (all runs),
        allocation and step lines, parsed. Fields this sacct does not know are left out
        (their values are then missing from the rows)."""
        args = ["-P", "-n", "-D", f"--delimiter={DELIMITER}", "-j", ",".join(query_ids)]
        if cluster:
            args += ["-M", cluster]
        return self._sacct_fields_query(args, fields)

    def _sacct_fields_query(
        self, args: Sequence[str], fields: Sequence[str], env: Mapping[str, str] | None = None
    ) -> list[dict[str, str]]:
        """``sacct ARGS -o FIELDS``, parsed. A field sacct refuses ("Invalid field requested",
        a version that renamed or dropped it) is left out and the query asked again; it is
        remembered in ``missing_fields`` and logged once.

        Raises:
            SlurmError: sacct failed otherwise, or refused every field.
        """
        asked, out = self._sacct_raw(args, fields, env)
        return parse_sacct(out, asked, delimiter=DELIMITER)

    def _sacct_raw(
        self, args: Sequence[str], fields: Sequence[str], env: Mapping[str, str] | None = None
    ) -> tuple[list[str], str]:
        """``sacct ARGS -o FIELDS`` without the fields sacct refuses (``_sacct_fields_query``):
        the fields asked for in the end, and sacct's output.

        Raises:
            SlurmError: sacct failed otherwise, or refused every field.
        """
        now = self.clock()
        for name, when in list(self._refused_at.items()):
            if now - when >= FIELDS_RETRY:  # asked again now and then: sacct may be mended
                del self._refused_at[name]
        asked = [f for f in fields if f not in self.missing_fields]
        while asked:
            try:
                result = self.run(
                    "sacct", [*args, "-o", ",".join(asked)], ok=lambda r: r.rc == 0, env=env
                )
            except CommandTimedOut:
                raise
            except SlurmError as exc:
                m = _INVALID_FIELD.search(str(exc))
                bad = next((f for f in asked if m and f.lower() == m.group(1).lower()), None)
                if bad is None:
                    raise
                self._field_missing(bad)
                asked.remove(bad)
                continue
            return asked, result.out
        raise SlurmError(f"sacct refused every field asked for: {', '.join(fields)}")

    @property
    def missing_fields(self) -> set[str]:
        """The fields this sacct refused (left out of queries until asked again)."""
        return set(self._refused_at)

    def _field_missing(self, name: str) -> None:
        self._refused_at[name] = self.clock()
        if name not in self._named:
            self._named.add(name)
            log.warning(
                "sacct of this Slurm has no field %s: jobs are read without it"
                " (docs/compatibility.md)",
                name,
            )

    def _optional(self, fields: Sequence[str]) -> tuple[str, ...]:
        """``fields`` with each of OPTIONAL_FIELDS that this sacct lists; when ``sacct -e``
        cannot tell (22.05's needs slurmdbd), those of a version known to have them (24.11+:
        a 26.05 sweep keyed without SLUIDs would spool every job a second time)."""
        listed = [f for f in OPTIONAL_FIELDS if self._has_field(f)]
        if not self._sacct_fields:
            version = self.version()
            if version is not None and version >= OPTIONAL_SINCE:
                listed = list(OPTIONAL_FIELDS)
        return (*fields, *listed)

    def sacct(self, ref: JobRef) -> list[dict[str, str]]:
        """Every record of the job (all runs, ``-D``), allocation and step lines."""
        return self._sacct_jobs([ref.query_id], ref.cluster, self._optional(SACCT_FIELDS))

    def sacct_text(self, ref: JobRef, job_id_raw: str) -> dict[str, str]:
        """The free-text fields (SACCT_TEXT) of one run: the first row of that JobIDRaw, the
        real one (a newline in the job name can only add rows after it)."""
        rows = self._sacct_jobs([ref.query_id], ref.cluster, SACCT_TEXT)
        return _first_texts(rows).get(job_id_raw, {})

    def _batch_texts(
        self, query_ids: Sequence[str], cluster: str | None, rows: Sequence[Mapping[str, str]]
    ) -> dict[str, dict[str, str]] | None:
        """The free-text fields of every run of ``query_ids`` (JobIDRaw -> fields, the first
        row of each JobIDRaw as ``sacct_text`` takes it) from one sacct call, or ``None``
        when its output cannot be split safely.

        ``rows`` is what the first call (fields nobody can write) printed for the same ids.
        A job name or work directory may hold the delimiter and newlines: in a batch a forged
        row could then sit before another user's real row. So the output is used only when
        it has exactly one line per row of the first call, each with exactly the delimiters
        of one record and that row's JobIDRaw first: then no text holds a newline or the
        delimiter, and each line is one real record.

        Raises:
            SlurmError: sacct failed.
        """
        args = ["-P", "-n", "-D", f"--delimiter={DELIMITER}", "-j", ",".join(query_ids)]
        if cluster:
            args += ["-M", cluster]
        asked, out = self._sacct_raw(args, SACCT_TEXT)
        if not asked or asked[0] != "JobIDRaw":
            return None  # no id to match the lines by: each job on its own
        lines = out.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != len(rows):
            return None
        texts: list[dict[str, str]] = []
        for line, row in zip(lines, rows, strict=True):
            parts = line.split(DELIMITER)
            if len(parts) != len(asked) or parts[0] != row.get("JobIDRaw"):
                return None
            texts.append(dict(zip(asked, parts, strict=True)))
        return _first_texts(texts)

    def min_job_age(self) -> int:
        """slurmctld's MinJobAge (seconds an ended job stays in its memory), read from
        ``scontrol show config`` at most once an hour; ``DEFAULT_MIN_JOB_AGE`` when
        slurmctld cannot tell."""
        now = self.clock()
        if self._min_job_age is not None and now < self._min_job_age[1]:
            return self._min_job_age[0]
        if now < self._ctl_down_until:
            return DEFAULT_MIN_JOB_AGE
        try:
            result = self.run(
                "scontrol",
                ["show", "config"],
                ok=lambda r: r.rc == 0 or _unreachable(r),
                retries=0,
            )
        except CommandTimedOut:
            self._ctl_down_until = now + CTL_PAUSE
            return DEFAULT_MIN_JOB_AGE
        except SlurmError:
            self._min_job_age = (DEFAULT_MIN_JOB_AGE, now + CTL_PAUSE)
            return DEFAULT_MIN_JOB_AGE
        if _unreachable(result):
            self._ctl_down_until = now + CTL_PAUSE
            return DEFAULT_MIN_JOB_AGE
        m = _MIN_JOB_AGE.search(result.out)
        age = int(m.group(1)) if m else DEFAULT_MIN_JOB_AGE
        self._min_job_age = (age, now + CONFIG_TTL)
        return age

    def _ctl_wanted(self, ended: str | None) -> bool:
        """Whether slurmctld may still hold a job whose sacct End is ``ended`` (epoch seconds;
        anything else: not ended, or not known), and is worth asking."""
        gone = (  # MinJobAge is read only while slurmctld answers
            ended is not None
            and ended.isdecimal()
            and self.clock() - int(ended) > self.min_job_age()
        )
        return not gone and self.clock() >= self._ctl_down_until

    def _ctl_ask(self, ref: JobRef, name: str | None = None) -> dict[str, str] | None:
        """One ``scontrol show job -d -o``: the job read with ``read_scontrol`` (``name``: the
        job's name where known), or ``None`` (not held, failed, or not safely readable)."""
        try:
            result = self.run(
                "scontrol",
                ["show", "job", "-d", "-o", ref.query_id],
                ok=lambda r: r.rc == 0 or "Invalid job id" in r.err or _unreachable(r),
                retries=0,
            )
        except CommandTimedOut:
            self._ctl_down_until = self.clock() + CTL_PAUSE
            return None
        except SlurmError:
            return None
        if _unreachable(result):
            self._ctl_down_until = self.clock() + CTL_PAUSE
            return None
        if result.rc != 0 or not result.out.strip():
            return None
        return read_scontrol(result.out, name)

    def scontrol(self, ref: JobRef, *, ended: str | None = None) -> dict[str, str] | None:
        """``scontrol show job -d -o`` while slurmctld still holds the job, else ``None``.

        ``-d`` adds the per-node GRES (``GRES=gpu:h100:2(IDX:0-1)``): which GPUs the job had on
        each node, known only while the job is in slurmctld's memory (``MinJobAge``). It is
        kept under ``NODE_GRES`` (one ``hostlist<TAB>GRES`` line per node group).

        Args:
            ended: the job's End from sacct (epoch seconds) when known: scontrol is not asked
                when that is longer ago than MinJobAge (slurmctld has forgotten the job).

        Returns ``None`` without asking also for ``CTL_PAUSE`` seconds after scontrol could not
        reach slurmctld (connect failure, socket timeout, our timeout). Tried once: what
        scontrol adds is optional, and its client already retries the connection.
        """
        return self._ctl_ask(ref) if self._ctl_wanted(ended) else None

    def get_job(
        self,
        ref: JobRef,
        env: Mapping[str, str] | None = None,
        spooled_at: float | None = None,
    ) -> JobRecord:
        """See ``SlurmBackend.get_job``: ``get_jobs`` for one job, its error raised."""
        result = self._resolve([(ref, env, spooled_at)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def get_jobs(self, items: Sequence[Item]) -> list[JobRecord | SlurmError]:
        """See ``SlurmBackend.get_jobs``.

        Per cluster and per ``BATCH_IDS`` job ids: one ``sacct -j id1,id2,...`` of the fields
        nobody can write, one of the free-text fields (``_batch_texts``; per job when its
        output cannot be split safely); then per job ``scontrol show job`` only while
        slurmctld may still hold it. Each job's records are picked and merged exactly as
        ``get_job`` does (it is this function for one job). A failed sacct is the error of
        every job of its batch."""
        out: list[JobRecord | SlurmError] = []
        for (ref, _, _), result in zip(items, self._resolve(items), strict=True):
            if isinstance(result, SlurmError | JobRecord):
                out.append(result)
            elif isinstance(result, AttributionError):
                out.append(SlurmError(f"job {_display(ref)}: {result}"))
            else:  # a bug met on this job's data: the others still get their records
                where = traceback.extract_tb(result.__traceback__)[-1]
                out.append(
                    SlurmError(
                        f"job {_display(ref)}: internal error {type(result).__name__}: "
                        f"{result} ({where.filename}:{where.lineno})"
                    )
                )
        return out

    def _lookup(
        self, query_ids: list[str], cluster: str | None
    ) -> tuple[dict[str, list[SacctRecord]], dict[str, dict[str, dict[str, str]] | SlurmError]]:
        """The sacct records each of ``query_ids`` selects (one batched call), and the free
        texts per query id (JobIDRaw -> fields; the error when they could not be read).

        Raises:
            SlurmError: the batched sacct failed.
        """
        rows = self._sacct_jobs(query_ids, cluster, self._optional(SACCT_FIELDS))
        records = group_steps(rows)
        # one id: all that sacct printed is that job's, exactly as get_job always read it
        one = len(query_ids) == 1
        found = {query_ids[0]: records} if one else _select(query_ids, records)
        texts: dict[str, dict[str, dict[str, str]] | SlurmError] = {}
        wanted = [q for q in query_ids if found[q]]
        if not wanted:
            return found, texts
        if one:
            try:
                texts[query_ids[0]] = _first_texts(self._sacct_jobs(query_ids, cluster, SACCT_TEXT))
            except SlurmError as exc:
                texts[query_ids[0]] = exc
            return found, texts
        try:
            batch = self._batch_texts(query_ids, cluster, rows)
        except SlurmError as exc:
            return found, dict.fromkeys(wanted, exc)
        for q in wanted:
            if batch is not None:
                texts[q] = batch
                continue
            try:  # a text with a newline or the delimiter: each job on its own, as get_job
                texts[q] = _first_texts(self._sacct_jobs([q], cluster, SACCT_TEXT))
            except SlurmError as exc:
                texts[q] = exc
        return found, texts

    def _resolve(self, items: Sequence[Item]) -> list[JobRecord | Exception]:
        """``get_jobs`` with each job's exception as it was raised (``get_job`` raises it)."""
        results: list[JobRecord | Exception | None] = [None] * len(items)
        queries: list[str | None] = []
        per_cluster: dict[str | None, dict[str, None]] = {}
        for i, (ref, _, _) in enumerate(items):
            try:
                q: str | None = ref.query_id
            except SlurmError as exc:
                results[i], q = exc, None
            queries.append(q)
            if q is not None:
                per_cluster.setdefault(ref.cluster, {})[q] = None
        found: dict[tuple[str | None, str], list[SacctRecord] | SlurmError] = {}
        texts: dict[tuple[str | None, str], dict[str, dict[str, str]] | SlurmError] = {}
        for cluster, ids in per_cluster.items():
            batchable = [q for q in ids if _BATCHABLE.match(q)]
            alone = [[q] for q in ids if not _BATCHABLE.match(q)]  # a SLUID: as it was asked
            for chunk in [*_chunks(batchable, BATCH_IDS), *alone]:
                try:
                    by_query, by_query_texts = self._lookup(chunk, cluster)
                except SlurmError as exc:
                    found.update({(cluster, q): exc for q in chunk})
                    continue
                found.update({(cluster, q): recs for q, recs in by_query.items()})
                texts.update({(cluster, q): t for q, t in by_query_texts.items()})
        ctl_seen: dict[str, dict[str, str] | None] = {}
        for i, (ref, env, spooled_at) in enumerate(items):
            q = queries[i]
            if q is None:
                continue
            try:
                results[i] = self._one(ref, q, env, spooled_at, found, texts, ctl_seen)
            except Exception as exc:  # each job's own error (get_job raises it)
                results[i] = exc
        return [r if r is not None else SlurmError("no answer") for r in results]

    def _one(
        self,
        ref: JobRef,
        query_id: str,
        env: Mapping[str, str] | None,
        spooled_at: float | None,
        found: Mapping[tuple[str | None, str], list[SacctRecord] | SlurmError],
        texts: Mapping[tuple[str | None, str], dict[str, dict[str, str]] | SlurmError],
        ctl_seen: dict[str, dict[str, str] | None],
    ) -> JobRecord:
        """One job's record from the batch's answers (``get_job``'s rules).

        Raises:
            NotReady: Slurm has no final record of it yet.
            SlurmError: sacct failed for its batch.
        """
        key = (ref.cluster, query_id)
        records = found[key]
        if isinstance(records, SlurmError):
            # accounting unreachable (slurmdbd down): slurmctld's own record of a job that
            # ended within MinJobAge is complete enough for a verdict; otherwise wait
            spooled = str(int(spooled_at)) if spooled_at is not None and spooled_at > 0 else None
            if query_id not in ctl_seen and not self._ctl_wanted(spooled):
                raise records
            if query_id not in ctl_seen:
                ctl_seen[query_id] = self._ctl_ask(ref, (env or {}).get("SLURM_JOB_NAME"))
            ctl = ctl_seen[query_id]
            if ctl is None:
                raise records
            job = self._build(ref, None, ctl, env)
            if job.state not in FINAL_STATES:
                raise records
            # slurmctld holds only the job's latest run: when that is not the spooled one (a
            # requeued job), its record would describe another run: wait for accounting
            if not _same_run(ctl, env or {}, None, latest=True):
                raise records
            return self._noted(job)
        run = env or {}  # the spooled run: its SLUID and restart count name it
        record = pick_record(
            records, spooled_at, run.get("SLURM_JOB_SLUID"), run.get("SLURM_JOB_RESTART_COUNT")
        )
        latest = record is None or record is records[-1]
        if record is not None and (raw := record.fields.get("JobIDRaw")):
            text = texts[key]
            if isinstance(text, SlurmError):
                raise text
            record = SacctRecord(fields={**record.fields, **text.get(raw, {})}, steps=record.steps)
        ended = record.fields.get("End") if record is not None else None
        if not self._ctl_wanted(ended):
            ctl = None
        elif query_id in ctl_seen:  # another run of the same job in this batch
            ctl = ctl_seen[query_id]
        else:
            name = (env or {}).get("SLURM_JOB_NAME") or (record.fields if record else {}).get(
                "JobName"
            )
            ctl = ctl_seen[query_id] = self._ctl_ask(ref, name)
        if ctl is not None and not _same_run(ctl, env or {}, record, latest=latest):
            ctl = None  # the job ran again since: its GPUs and flags are the new run's
        if record is None and ctl is None:
            raise NotReady(f"job {query_id} is not in sacct or scontrol (yet)")
        job = self._build(ref, record, ctl, env)
        if job.state not in FINAL_STATES:
            raise NotReady(f"job {query_id} is {job.state or 'in an unknown state'}, not ended")
        return self._noted(job)

    def _build(
        self,
        ref: JobRef,
        record: SacctRecord | None,
        ctl: Mapping[str, str] | None,
        env: Mapping[str, str] | None,
    ) -> JobRecord:
        """``build_job_record`` with this backend's time zone and SLUID keying."""
        return build_job_record(
            record,
            ctl,
            env,
            timezone=self.timezone,
            ref_cluster=ref.cluster,
            sluid_is_key=self._sluid_is_key(env, record, ctl),
        )

    def _noted(self, job: JobRecord) -> JobRecord:
        """The record with the sacct fields this Slurm refused (its verdict says so)."""
        if not self.missing_fields:
            return job
        return replace(job, fields_missing=tuple(sorted(self.missing_fields)))

    def _has_field(self, name: str) -> bool:
        """Whether ``sacct -e`` lists the field (read once; a failure reads as no, and is
        asked again after ``FIELDS_RETRY`` seconds: 22.05's ``sacct -e`` needs slurmdbd)."""
        if self._sacct_fields is None or (
            not self._sacct_fields and self.clock() >= self._fields_retry_at
        ):
            try:
                result = self.run("sacct", ["-e"], ok=lambda r: r.rc == 0, retries=0)
                self._sacct_fields = frozenset(result.out.split())
            except SlurmError:
                self._sacct_fields = frozenset()
            if not self._sacct_fields:  # failed, or listed nothing: not asked again at once
                self._fields_retry_at = self.clock() + FIELDS_RETRY
        return name in self._sacct_fields

    def ended_jobs(self, cluster: str | None, since: datetime, until: datetime) -> list[EndedJob]:
        """See ``SlurmBackend.ended_jobs``.

        ``sacct -a -X -D -s <final states> -S since -E until`` (under ``TZ=UTC0``, so no
        daylight-saving hour is ambiguous): the records that ended in a final state in the
        window. Kept: End (epoch) at or after ``since`` and before ``until``, a final State,
        one array task (``A_T``; the unsplit ``A_[1-5]`` record of tasks that never started is
        no run). Then one ``sacct -X -D -j`` of those jobs numbers each run: its
        ``restart_count`` is how many runs of the same JobIDRaw were submitted before it
        (sacct keeps one record per run, a requeue submits again, and 22.05-24.11 have no
        restart field). SLUID only where ``sacct -e`` lists it (26.05).

        Raises:
            SlurmError: sacct failed.
        """
        args = ["-a", "-X", "-D", "-P", "-n", f"--delimiter={DELIMITER}"]
        args += ["-S", _utc(since), "-E", _utc(until), "-s", ",".join(sorted(FINAL_STATES))]
        if cluster:
            args += ["-M", cluster]
        asked, text = self._sacct_raw(args, self._optional(ENDED_FIELDS), env={"TZ": "UTC0"})
        rows = parse_sacct(text, asked, delimiter=DELIMITER)
        low, high = since.timestamp(), until.timestamp()
        kept: list[tuple[dict[str, str], str, str | None, str | None]] = []
        for row in rows:
            end, raw = row.get("End", ""), row.get("JobIDRaw", "")
            parsed = split_jobid(row.get("JobID", ""))
            ended = _number(end)
            if ended is None or not low <= ended < high or not raw.isdecimal():
                continue
            if (row.get("State") or "").split(" ", 1)[0] not in FINAL_STATES:
                continue
            if parsed is None or parsed[2] is not None:
                continue
            task = parsed[1]
            if task is not None and not task.isdecimal():
                continue  # A_[1-5]: tasks that never started, no run of their own
            kept.append((row, raw, parsed[0] if task else None, task))
        in_hook = bool(kept) and self.hook_sees_sluids()
        if in_hook and "SLUID" not in asked:
            # the hook keyed these runs by SLUID: keyed otherwise, each would be spooled twice
            raise SlurmError(
                "sacct gives no SLUID field now, and runs are keyed by it: the sweep waits"
            )
        # a row without one is a run that had none when it ended (26.05: it ran while slurmdbd
        # was down), which the hook keyed <cluster>_<job>_<restart>, as its env() does
        # 24.11+ numbers each run itself (Restarts); before, count the runs submitted earlier
        counted = bool(kept) and all(_number(row.get("Restarts")) is not None for row, *_ in kept)
        earlier = {} if counted else self._earlier_runs(cluster, [(r, a, t) for _, r, a, t in kept])
        out: list[EndedJob] = []
        for row, raw, array_job, task in kept:
            submit = _number(row.get("Submit"))
            restarts = _number(row.get("Restarts")) or 0
            nodelist = row.get("NodeList") or ""
            ran = nodelist not in ("", "None assigned", "(null)")  # else it never started
            nnodes = _number(row.get("NNodes"))
            out.append(
                EndedJob(
                    job_id=raw,
                    cluster=row.get("Cluster") or cluster or "",
                    state=row["State"].split(" ", 1)[0],
                    exit_code=row.get("ExitCode") or "",
                    derived_exit_code=row.get("DerivedExitCode") or "",
                    end=datetime.fromtimestamp(int(row["End"]), UTC),
                    user=row.get("User") or None,
                    uid=row.get("UID") or None,
                    array_job_id=array_job,
                    array_task_id=task,
                    restart_count=restarts
                    if counted
                    else sum(1 for s in earlier.get(raw, ()) if submit is not None and s < submit),
                    sluid=row.get("SLUID") or None,
                    sluid_in_hook=in_hook,
                    nodes=nnodes if ran and nnodes is not None else 0,
                    nodelist=nodelist if ran else None,
                    partition=row.get("Partition") or None,
                )
            )
        return out

    def node_events(
        self, since: datetime, until: datetime, cluster: str | None = None
    ) -> list[NodeEvent]:
        """Node state events accounting recorded between ``since`` and ``until`` (UTC):
        ``sacctmgr -n -P list events start=... end=... format=NodeName,TimeStart,State,Reason``
        under ``TZ=UTC0`` (times come back as epoch seconds: ``SLURM_TIME_FORMAT=%s``).
        Cluster-wide events (no node name) are left out; a line that does not parse is
        skipped (the reason, a free text, is the last field and may hold ``|``).

        Raises:
            SlurmError: sacctmgr failed (no slurmdbd, not installed).
        """
        args = ["-n", "-P", "list", "events", f"start={_utc(since)}", f"end={_utc(until)}"]
        if cluster:
            args.append(f"cluster={cluster}")
        args.append("format=NodeName,TimeStart,State,Reason")
        result = self.run("sacctmgr", args, ok=lambda r: r.rc == 0, env={"TZ": "UTC0"})
        out = []
        for line in result.out.splitlines():
            parts = line.split("|", 3)
            if len(parts) != 4 or not parts[0].strip():
                continue
            stamp = parts[1].strip()  # epoch seconds under the backend's SLURM_TIME_FORMAT=%s
            at = parse_epoch(stamp) if stamp.isdecimal() else parse_iso(stamp)
            if at is None:
                continue
            out.append(NodeEvent(parts[0].strip(), at, parts[2].strip(), parts[3].strip()))
        return out

    def _earlier_runs(
        self, cluster: str | None, runs: Sequence[tuple[str, str | None, str | None]]
    ) -> dict[str, list[int]]:
        """Submit times (epoch) of every run of each job: JobIDRaw -> times, for ``runs`` of
        (JobIDRaw, array job id, array task id). One ``sacct -a -X -D -j`` per ``BATCH_IDS``
        jobs, an array task asked as ``A_T`` (its raw id alone would be the whole array when
        it is the array's own id).

        Raises:
            SlurmError: sacct failed.
        """
        ids = {f"{a}_{t}" if a and t else raw: raw for raw, a, t in runs}
        out: dict[str, list[int]] = {}
        for chunk in _chunks(list(ids), BATCH_IDS):
            args = ["-a", "-X", "-D", "-P", "-n", f"--delimiter={DELIMITER}", "-j", ",".join(chunk)]
            if cluster:
                args += ["-M", cluster]
            mine = {ids[q] for q in chunk}
            for row in self._sacct_fields_query(args, RUN_FIELDS):
                raw, submit = row.get("JobIDRaw", ""), _number(row.get("Submit"))
                if raw in mine and submit is not None:
                    out.setdefault(raw, []).append(submit)
        return out

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
        rows = self._others(job.nodelist, job.cluster, start, end)
        return _sharers(job, rows[:MAX_OTHER_ROWS], start, end, windowed=False)

    def other_jobs_many(
        self, items: Sequence[tuple[JobRecord, datetime, datetime]]
    ) -> list[dict[str, tuple[OtherJob, ...]] | SlurmError]:
        """``other_jobs`` for many jobs: one ``sacct -a -X -N <all their nodes> -S <earliest
        start> -E <latest end>`` per cluster, each job then given the other jobs that shared
        one of its nodes and overlapped its own window. When that answer reaches
        ``MAX_OTHER_ROWS`` (it could be cut short), each job is asked on its own."""
        out: list[dict[str, tuple[OtherJob, ...]] | SlurmError | None] = [None] * len(items)
        clusters: dict[str | None, list[int]] = {}
        for i, (job, _, _) in enumerate(items):
            if not job.nodes:
                out[i] = {}
            else:
                clusters.setdefault(job.cluster, []).append(i)
        for cluster, idx in clusters.items():
            nodes = compress(sorted({n for i in idx for n in items[i][0].nodes}))
            start = min(items[i][1] for i in idx)
            end = max(items[i][2] for i in idx)
            rows: list[dict[str, str]] | None
            try:
                rows = self._others(nodes, cluster, start, end) if len(idx) > 1 else None
            except SlurmError as exc:
                for i in idx:
                    out[i] = exc
                continue
            for i in idx:
                job, s, e = items[i]
                try:
                    if rows is None or len(rows) >= MAX_OTHER_ROWS:
                        out[i] = self.other_jobs(job, s, e)
                    else:
                        out[i] = _sharers(job, rows, s, e, windowed=True)
                except SlurmError as exc:
                    out[i] = exc
        return [r if r is not None else {} for r in out]

    def _others(
        self, nodelist: str, cluster: str | None, start: datetime, end: datetime
    ) -> list[dict[str, str]]:
        args = ["-a", "-X", "-P", "-n", f"--delimiter={DELIMITER}", "-N", nodelist]
        # under TZ=UTC0: no daylight-saving hour is ambiguous (the window may end a second
        # later than asked, rounding up: more jobs counted as sharing, never fewer)
        args += ["-S", _utc(start), "-E", _utc(end + timedelta(seconds=1))]
        if cluster:
            args += ["-M", cluster]
        return self._sacct_fields_query(args, OTHER_FIELDS, env={"TZ": "UTC0"})

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
        """User, UID, AdminComment and SystemComment of a job (for ``sattr`` run by a user:
        the worker writes to SystemComment when another tool owns the AdminComment), or
        ``None``."""
        fields = ("JobID", "User", "UID", "State", "AdminComment", "SystemComment")
        args = ["-X", "-P", "-n", f"--delimiter={DELIMITER}", "-j", ref.query_id]
        rows = self._sacct_fields_query(args, fields)
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
        """The local Slurm's (major, minor) from ``sacct --version``, or ``None`` (asked once;
        a failure, or an answer without a version, is asked again after ``FIELDS_RETRY``
        seconds, not once per job)."""
        if self._version is None and self.clock() >= self._version_retry_at:
            self._version_retry_at = self.clock() + FIELDS_RETRY
            try:
                result = self.run("sacct", ["--version"], ok=lambda r: r.rc == 0, retries=0)
            except SlurmError:
                return None
            m = _VERSION.search(result.out)
            if m:
                self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    def _sluid_is_key(
        self,
        env: Mapping[str, str] | None,
        record: SacctRecord | None,
        ctl: Mapping[str, str] | None,
    ) -> bool:
        """Whether a SLUID Slurm shows for a run looked up by id (no spool entry) is its key
        (asks the version only when there is such a SLUID). A spool entry names its key
        itself: its SLUID, else ``<cluster>_<job>_<restart>`` also where accounting shows a
        SLUID the hook did not get (a job that started before the upgrade to 25.11+)."""
        if (env or {}).get("SLURM_JOB_SLUID") or (env or {}).get("SLURM_JOB_ID"):
            return False
        shown = (record.fields.get("SLUID") if record else None) or (ctl or {}).get("SLUID")
        return bool(shown) and self.hook_sees_sluids()

    def about(self) -> dict[str, Any]:
        """What the worker reports of this Slurm (log, heartbeat, ``sattr status``): the
        backend, the version (``None``: sacct could not tell), whether CI tests that version,
        whether runs are keyed by SLUID, and the sacct fields it refused so far."""
        version = self.version()
        return {
            "backend": self.name,
            "version": f"{version[0]}.{version[1]:02d}" if version else None,
            "tested": version in TESTED_VERSIONS,
            "sluid_keys": self.hook_sees_sluids(),
            "fields_missing": sorted(self.missing_fields),
        }

    def hook_sees_sluids(self) -> bool:
        """Whether EpilogSlurmctld gets ``SLURM_JOB_SLUID`` (Slurm 25.11+), so the hook keys
        each run by its SLUID. 24.11's sacct lists SLUIDs but its hook environment has none;
        a version that cannot be told counts as one without."""
        version = self.version()
        return version is not None and version >= SLUID_IN_HOOK


__all__ = [
    "BATCH_IDS",
    "DELIMITER",
    "CliBackend",
    "CommandTimedOut",
    "Completed",
    "run_command",
]
