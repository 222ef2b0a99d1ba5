"""The verdict store: SQLite through sqlite-utils, schema managed by ``sqlite_utils.Migrations``.

Tables (docs/store.md): ``verdicts`` (one row per job run, keyed by SLUID or
``<cluster>_<jobid>_<restart>``, upserted), ``symptoms`` (the chain, one row
per entry, with its owner and source trust), ``responsible`` (one row per blamed
node/device; suspects are in ``verdicts.suspect_nodes``) and ``coverage`` (one row
per source). The full verdict JSON is kept in ``verdicts.verdict``
so that nothing is lost, but every field operators filter on has a column.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from attribution.errors import Location, StoreError
from attribution.hostlist import HostlistError
from attribution.model import JobRecord, Verdict, to_jsonable, verdict_to_dict
from attribution.timeutil import parse_iso
from attribution.topology import nodes_of

if TYPE_CHECKING:  # the fleet view's types; its module is imported where they are made
    from attribution.fleet import Fleet, FleetJob

# sqlite-utils imports numpy and pandas, when installed, only to map their scalar types to
# column types. The store makes its tables from Python types and writes no numpy value, and
# numpy alone is a good part of a 'sattr JOBID': sqlite-utils is imported with both hidden
# (unless something imported them already).
_HIDDEN = [name for name in ("numpy", "pandas") if name not in sys.modules]
for _name in _HIDDEN:
    sys.modules[_name] = None  # type: ignore[assignment]  # "import numpy" fails at once
try:
    from sqlite_utils import Database, Migrations
finally:
    for _name in _HIDDEN:
        if sys.modules.get(_name, 0) is None:
            del sys.modules[_name]

migrations = Migrations("attribution")


@migrations()
def m001_initial(db: Database) -> None:
    db.table("verdicts").create(
        {
            "key": str,
            "cluster": str,
            "job_id": str,
            "display_id": str,
            "array_job_id": str,
            "array_task_id": str,
            "sluid": str,
            "restart_count": int,
            "user": str,
            "uid": int,
            "name": str,
            "partition": str,
            "state": str,
            "exit_code": str,
            "nodelist": str,
            "start": str,
            "end": str,
            "terminal_state": str,
            "sub_domain": str,
            "cause_id": str,
            "cause_rule": str,
            "summary": str,
            "action": str,
            "responsible_nodes": str,
            "ruleset_version": str,
            "engine_version": str,
            "diagnosed_at": str,
            "admin_comment_status": str,
            "verdict": str,
        },
        pk="key",
    )
    db.table("symptoms").create(
        {
            "key": str,
            "position": int,
            "role": str,
            "event": str,
            "symptom": str,
            "count": int,
            "node_count": int,
            "nodes": str,
            "first_at": str,
            "last_at": str,
            "stream": str,
            "example": str,
            "source": str,
            "rule": str,
        },
        pk=("key", "position"),
        foreign_keys=[("key", "verdicts", "key")],
    )
    db.table("responsible").create(
        {"key": str, "node": str, "component": str, "device": str},
        foreign_keys=[("key", "verdicts", "key")],
    )
    db.table("coverage").create(
        {
            "key": str,
            "stream": str,
            "node": str,
            "status": str,
            "files": str,
            "bytes": int,
            "lines": int,
            "untimed": int,
            "outside_window": int,
            "reason": str,
        },
        foreign_keys=[("key", "verdicts", "key")],
    )
    for table, cols in (
        ("verdicts", ["job_id"]),
        ("verdicts", ["user"]),
        ("verdicts", ["sub_domain"]),
        ("verdicts", ["end"]),
        ("symptoms", ["key"]),
        ("responsible", ["node"]),
        ("responsible", ["key"]),
        ("coverage", ["key"]),
    ):
        db.table(table).create_index(cols, if_not_exists=True)


@migrations()
def m002_admin_comment_and_filters(db: Database) -> None:
    """The AdminComment line the worker wrote (or would have), and indexes for ``sattr list``."""
    db.table("verdicts").add_column("admin_comment", str)
    db.table("verdicts").add_column("spooled_at", str)
    for cols in (["terminal_state"], ["state"], ["uid"], ["diagnosed_at"]):
        db.table("verdicts").create_index(cols, if_not_exists=True)


@migrations()
def m003_gpu_errors(db: Database) -> None:
    """Each verdict's XIDs per GPU (``Verdict.gpu_errors``): the history the XID 13/31 repeat
    logic compares new jobs with (``attribution.history``)."""
    db.table("gpu_errors").create(
        {
            "key": str,
            "node": str,
            "device": str,
            "code": int,
            "xid_class": str,
            "unit": str,
            "first_at": str,
            "count": int,
        },
        foreign_keys=[("key", "verdicts", "key")],
    )
    for cols in (["key"], ["node", "device"]):
        db.table("gpu_errors").create_index(cols, if_not_exists=True)


@migrations()
def m004_ownership_and_trust(db: Database) -> None:
    """Whose each chain entry is and whether its source can be trusted; nodes only untrusted
    evidence names (suspects, never blamed); the verdict's confidence."""
    db.table("symptoms").add_column("owner", str)
    db.table("symptoms").add_column("trust", str)
    db.table("coverage").add_column("trust", str)
    db.table("verdicts").add_column("suspect_nodes", str)
    db.table("verdicts").add_column("confidence", str)


@migrations()
def m005_worker_health(db: Database) -> None:
    """What ``sattr status`` reads besides verdicts: each reconciliation sweep (jobs accounting
    says ended that never reached the spool), the per-cluster watermark it starts from, and
    the worker's heartbeat (one row per spool it serves)."""
    db.table("reconciliations").create(
        {
            "id": int,
            "cluster": str,
            "ran_at": str,
            "since": str,
            "until": str,
            "seen": int,
            "enqueued": int,
            "keys": str,
            "error": str,
        },
        pk="id",
    )
    db.table("reconciliations").create_index(["cluster", "ran_at"], if_not_exists=True)
    db.table("watermarks").create({"cluster": str, "until": str}, pk="cluster")
    db.table("heartbeat").create(
        {"spool": str, "pid": int, "host": str, "started_at": str, "beat_at": str, "info": str},
        pk="spool",
    )


@migrations()
def m006_runs(db: Database) -> None:
    """Every job run the worker resolved, failed or passed (``runs``): the fleet view's
    exposure (how many jobs ran on each node). Verdicts already stored are copied in."""
    db.table("runs").create(
        {
            "key": str,
            "cluster": str,
            "job_id": str,
            "user": str,
            "partition": str,
            "state": str,
            "terminal_state": str,
            "sub_domain": str,
            "nodelist": str,
            "failed_node": str,
            "start": str,
            "end": str,
        },
        pk="key",
    )
    db.table("runs").create_index(["end"], if_not_exists=True)
    db.execute(
        "INSERT OR IGNORE INTO runs (key, cluster, job_id, user, partition, state,"
        ' terminal_state, sub_domain, nodelist, failed_node, start, "end")'
        " SELECT key, cluster, job_id, user, partition, state, terminal_state, sub_domain,"
        " nodelist,"
        " json_extract(verdict, '$.job.failed_node'), start, \"end\" FROM verdicts"
    )


@migrations()
def m007_list_order(db: Database) -> None:
    """The order of ``sattr list`` and the server's pages (latest end first, by key among
    equal ends) served by an index, deep pages included; a job found by its display id
    (``A_T``) or SLUID through indexes too (``VerdictFilter.job`` ORs four columns, which
    SQLite serves with an index per column or not at all)."""
    db.table("verdicts").create_index(["end", "key"], if_not_exists=True)
    db.table("verdicts").create_index(["display_id"], if_not_exists=True)
    db.table("verdicts").create_index(["sluid"], if_not_exists=True)


def _iso(value: datetime | None) -> str | None:
    return to_jsonable(value) if value is not None else None


@lru_cache(maxsize=65536)
def _nodes(nodelist: str | None) -> tuple[str, ...]:
    """A stored node list expanded (cached: jobs on the same nodes are common); a list that
    no longer expands counts as no node rather than stopping the whole fleet view."""
    try:
        return nodes_of(nodelist)
    except HostlistError:
        return ()


def _when(text: str | None) -> datetime | None:
    """A time the store wrote (``_iso``: UTC ISO 8601 with ``Z``), quickly; anything else
    through ``parse_iso``."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return parse_iso(str(text))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# the failed runs the fleet view reads one by one (the rest it only counts): every failure but
# the application's own, and those too when they had a GPU error (the GPU history needs them)
def _failed(selection: VerdictFilter) -> str:
    """The SQL condition of a failed job for the charts: terminal_state ``fail`` unless the
    selection asks for a state of its own (then its condition decides)."""
    return "1" if selection.state else "terminal_state = 'fail'"


def _kept(table: str) -> str:
    return (
        f"({table}.terminal_state = 'fail' AND ({table}.sub_domain IS NOT 'application'"
        f" OR {table}.key IN (SELECT key FROM gpu_errors)))"
    )


def _fleet_window(
    table: str, since: datetime | None, until: datetime | None, partition: str | None
) -> tuple[str, list[Any]]:
    """The SQL condition (on ``table``'s columns) and parameters of a fleet view's window."""
    cond = [f'{table}."end" IS NOT NULL']
    params: list[Any] = []
    if since is not None:
        cond.append(f'{table}."end" >= ?')
        params.append(_iso(since))
    if until is not None:
        cond.append(f'{table}."end" < ?')
        params.append(_iso(until))
    if partition:
        cond.append(f"{table}.partition = ?")
        params.append(partition)
    return " AND ".join(cond), params


def _run_row(job: JobRecord, terminal_state: str, sub_domain: str = "none") -> dict[str, Any]:
    return {
        "key": job.key,
        "cluster": job.cluster,
        "job_id": job.job_id,
        "user": job.user,
        "partition": job.partition,
        "state": job.state,
        "terminal_state": terminal_state,
        "sub_domain": sub_domain,
        "nodelist": job.nodelist,
        "failed_node": job.failed_node,
        "start": _iso(job.start),
        "end": _iso(job.end),
    }


@dataclass(frozen=True, slots=True)
class Owner:
    """A job owner: the numeric ``uid`` and, for records stored without one, the ``user`` name."""

    uid: int
    user: str | None = None


@dataclass(frozen=True, slots=True)
class VerdictFilter:
    """Which stored verdicts ``Store.query`` returns; every field left at its default matches all.

    ``job``: a job id, an ``A_T`` array task, a SLUID or a store key.
    ``since`` / ``until``: the job ended at or after ``since`` and before ``until`` (a job
    without an end time matches neither).
    ``state``: the verdict's ``terminal_state`` (``fail``, ``timeout``, ...) or the Slurm job
    state (``NODE_FAIL``, ...), in either case.
    ``sub_domain``, ``cause`` (a diagnosis rule id), ``user``, ``partition``: equal to.
    ``nodes``: the job ran on one of these nodes, or the verdict blames one.
    ``owner``: only this owner's jobs (the access policy's restriction, ``attribution.access``).
    ``order``: ``newest`` (latest end first) or ``job`` (by job id as shown).
    ``limit``: at most this many rows; ``offset``: skip this many first (pagination).
    """

    job: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    state: str | None = None
    sub_domain: str | None = None
    cause: str | None = None
    nodes: tuple[str, ...] = ()
    user: str | None = None
    partition: str | None = None
    owner: Owner | None = None
    order: Literal["newest", "job"] = "newest"
    limit: int | None = None
    offset: int = 0

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition on ``verdicts`` and its parameters ("" when everything matches)."""
        where: list[str] = []
        params: list[Any] = []
        if self.job is not None:
            where.append("(job_id = ? OR display_id = ? OR key = ? OR sluid = ?)")
            params += [self.job] * 4
        if self.since is not None:
            where.append('"end" >= ?')
            params.append(_iso(self.since))
        if self.until is not None:
            where.append('"end" < ?')
            params.append(_iso(self.until))
        if self.state:
            where.append("(terminal_state = ? OR state = ?)")
            params += [self.state.lower(), self.state.upper()]
        if self.sub_domain:
            where.append("sub_domain = ?")
            params.append(self.sub_domain.lower())
        if self.cause:
            where.append("cause_id = ?")
            params.append(self.cause)
        if self.nodes:
            # one JSON parameter, however many nodes: no limit on SQLite's variables
            where.append(
                "(key IN (SELECT key FROM responsible WHERE node IN"
                " (SELECT value FROM json_each(?))) OR EXISTS"
                " (SELECT 1 FROM json_each(verdicts.verdict, '$.job.nodes')"
                " WHERE value IN (SELECT value FROM json_each(?))))"
            )
            wanted = json.dumps(list(self.nodes))
            params += [wanted, wanted]
        if self.owner is not None:
            where.append("(uid = ? OR (uid IS NULL AND user = ?))")
            params += [self.owner.uid, self.owner.user]
        if self.user:
            where.append("user = ?")
            params.append(self.user)
        if self.partition:
            where.append("partition = ?")
            params.append(self.partition)
        return " AND ".join(where), params


class Store:
    """Open (creating and migrating if needed) a verdict database at ``path``.

    Raises:
        StoreError: when the file cannot be opened or migrated.
    """

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        try:
            if readonly:
                if not self.path.is_file():
                    raise StoreError("no verdict store here", Location(str(self.path)))
                self.db = self._open_readonly()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = Database(self.path)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA busy_timeout=10000")
                migrations.apply(self.db)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"cannot open verdict store: {exc}", Location(str(self.path))
            ) from None

    def _open_readonly(self) -> Database:
        """Open for reading only (``sattr`` run by users who may not write here).

        A WAL database needs its ``-shm`` file; when no writer has it open the
        file is gone and a reader without write access to the directory cannot
        create it ("attempt to write a readonly database"). With no ``-wal``
        file every committed change is in the main file, so it is then opened
        as immutable instead.
        """
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            conn.execute("SELECT 1 FROM verdicts LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            conn.close()
            if Path(f"{self.path}-wal").exists():
                raise
            conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True)
            conn.execute("SELECT 1 FROM verdicts LIMIT 1").fetchall()
        return Database(conn)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(
        self,
        verdict: Verdict,
        *,
        admin_comment_status: str | None = None,
        admin_comment: str | None = None,
        spooled_at: datetime | None = None,
    ) -> str:
        """Insert or replace the verdict of one job run; returns its key.

        ``admin_comment_status`` records what happened to the AdminComment
        write-back (``written``, ``skipped-foreign``, ``disabled``, ``error: ...``),
        ``admin_comment`` the line itself, ``spooled_at`` when the hook ran (UTC).
        """
        job = verdict.job
        key = job.key
        body = verdict_to_dict(verdict)
        row = {
            "key": key,
            "cluster": job.cluster,
            "job_id": job.job_id,
            "display_id": job.display_id,
            "array_job_id": job.array_job_id,
            "array_task_id": job.array_task_id,
            "sluid": job.sluid,
            "restart_count": job.restart_count,
            "user": job.user,
            "uid": job.uid,
            "name": job.name,
            "partition": job.partition,
            "state": job.state,
            "exit_code": job.exit_code,
            "nodelist": job.nodelist,
            "start": _iso(job.start),
            "end": _iso(job.end),
            "terminal_state": verdict.terminal_state.value,
            "sub_domain": verdict.sub_domain.value,
            "cause_id": verdict.cause.id if verdict.cause else None,
            "cause_rule": verdict.cause.rule if verdict.cause else None,
            "summary": verdict.summary,
            "action": verdict.action,
            "responsible_nodes": ",".join(dict.fromkeys(r.node for r in verdict.responsible)),
            "suspect_nodes": ",".join(dict.fromkeys(r.node for r in verdict.suspects)) or None,
            "confidence": verdict.confidence.level if verdict.confidence else None,
            "ruleset_version": verdict.ruleset.get("version"),
            "engine_version": verdict.engine_version,
            "diagnosed_at": _iso(verdict.diagnosed_at),
            "admin_comment_status": admin_comment_status,
            "admin_comment": admin_comment,
            "spooled_at": _iso(spooled_at),
            "verdict": json.dumps(body, sort_keys=True),
        }
        try:
            with self.db.conn:
                for table in ("symptoms", "responsible", "coverage", "gpu_errors"):
                    self.db.execute(f"DELETE FROM {table} WHERE key = ?", [key])
                self.db.table("verdicts").upsert(row, pk="key")
                self.db.table("runs").upsert(
                    _run_row(job, verdict.terminal_state.value, verdict.sub_domain.value),
                    pk="key",
                )
                self.db.table("symptoms").insert_all(
                    (
                        {
                            "key": key,
                            "position": i,
                            "role": e.role.value,
                            "event": e.event,
                            "symptom": e.symptom,
                            "count": e.count,
                            "node_count": e.node_count,
                            "nodes": ",".join(e.nodes),
                            "first_at": _iso(e.first_at),
                            "last_at": _iso(e.last_at),
                            "stream": e.stream,
                            "example": e.example,
                            "source": e.source,
                            "rule": e.rule,
                            "owner": e.owner,
                            "trust": e.trust,
                        }
                        for i, e in enumerate(verdict.symptom_chain)
                    )
                )
                self.db.table("responsible").insert_all(
                    {"key": key, "node": r.node, "component": r.component, "device": r.device}
                    for r in verdict.responsible
                )
                self.db.table("gpu_errors").insert_all(
                    {
                        "key": key,
                        "node": g.node,
                        "device": g.device,
                        "code": g.code,
                        "xid_class": g.xid_class,
                        "unit": g.unit,
                        "first_at": _iso(g.first_at),
                        "count": g.count,
                    }
                    for g in verdict.gpu_errors
                )
                self.db.table("coverage").insert_all(
                    {
                        "key": key,
                        "stream": c.stream.value,
                        "node": c.node,
                        "status": c.status.value,
                        "files": ",".join(c.files),
                        "bytes": c.bytes,
                        "lines": c.lines,
                        "untimed": c.untimed,
                        "outside_window": c.outside_window,
                        "reason": c.reason,
                        "trust": c.trust.value if c.trust else None,
                    }
                    for c in verdict.coverage
                )
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot save verdict {key}: {exc}", Location(str(self.path))
            ) from None
        return key

    def save_run(self, job: JobRecord, terminal_state: str = "pass") -> None:
        """Record a run that gets no verdict (a job that completed 0:0): the fleet view counts
        it as exposure.

        Raises:
            StoreError: when the database cannot be written.
        """
        try:
            with self.db.conn:
                self.db.table("runs").upsert(_run_row(job, terminal_state), pk="key")
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot save run {job.key}: {exc}", Location(str(self.path))
            ) from None

    def set_admin_comment(self, key: str, status: str, text: str | None) -> None:
        """Record the outcome of the AdminComment write-back of a stored verdict.

        Raises:
            StoreError: when the database cannot be written.
        """
        try:
            with self.db.conn:
                self.db.execute(
                    "UPDATE verdicts SET admin_comment_status = ?, admin_comment = ? WHERE key = ?",
                    [status, text, key],
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot update {key}: {exc}", Location(str(self.path))) from None

    def failed_comments(self, limit: int = 100) -> list[dict[str, Any]]:
        """Stored verdicts whose AdminComment write failed (status ``error: ...``), oldest
        first: the worker writes them again until Slurm takes them, across restarts.

        Raises:
            StoreError: when the database cannot be read.
        """
        return self._verdicts(
            "admin_comment_status LIKE 'error:%'", [], order="diagnosed_at", limit=limit
        )

    def comment_counts(self) -> dict[str, int]:
        """How many stored verdicts have each AdminComment status (``error: ...`` statuses are
        counted together as ``error``).

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT CASE WHEN admin_comment_status LIKE 'error:%' THEN 'error'"
            " ELSE coalesce(admin_comment_status, 'none') END AS status, count(*) AS n"
            " FROM verdicts GROUP BY 1"
        )
        try:
            return {r["status"]: r["n"] for r in self.db.query(sql)}
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def known_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` have a stored verdict.

        Raises:
            StoreError: when the database cannot be read.
        """
        found: set[str] = set()
        try:
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" for _ in chunk)
                sql = f"SELECT key FROM verdicts WHERE key IN ({marks})"
                found.update(r["key"] for r in self.db.query(sql, chunk))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return found

    # ------------------------------------------------------------------ worker health

    def watermark(self, cluster: str) -> datetime | None:
        """Where the last reconciliation of ``cluster`` stopped (UTC), or None before the first.

        Raises:
            StoreError: when the database cannot be read.
        """
        try:
            rows = list(self.db.query("SELECT until FROM watermarks WHERE cluster = ?", [cluster]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return datetime.fromisoformat(rows[0]["until"]) if rows else None

    def record_reconciliation(
        self,
        cluster: str,
        *,
        ran_at: datetime,
        since: datetime,
        until: datetime,
        seen: int,
        enqueued: Sequence[str],
        error: str | None = None,
    ) -> None:
        """Record one sweep; without ``error`` the cluster's watermark moves to ``until``
        (with one, a cluster without a watermark gets ``since``, so the window does not slide).
        ``seen``: jobs accounting says ended in [since, until) that should have a verdict;
        ``enqueued``: the keys that had none and were never spooled (at most 100 kept).

        Raises:
            StoreError: when the database cannot be written.
        """
        row = {
            "cluster": cluster,
            "ran_at": _iso(ran_at),
            "since": _iso(since),
            "until": _iso(until),
            "seen": seen,
            "enqueued": len(enqueued),
            "keys": json.dumps(list(enqueued)[:100]),
            "error": error,
        }
        try:
            with self.db.conn:
                self.db.table("reconciliations").insert(row)
                if error is None:
                    self.db.table("watermarks").upsert(
                        {"cluster": cluster, "until": _iso(until)}, pk="cluster"
                    )
                else:  # a first sweep that failed still fixes where the next one starts
                    self.db.execute(
                        "INSERT OR IGNORE INTO watermarks (cluster, until) VALUES (?, ?)",
                        [cluster, _iso(since)],
                    )
                # keep a month of sweeps at one a minute at the most
                self.db.execute(
                    "DELETE FROM reconciliations WHERE id <= "
                    "(SELECT max(id) FROM reconciliations) - 50000"
                )
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot record a reconciliation: {exc}", Location(str(self.path))
            ) from None

    def reconciliations(
        self, since: datetime | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Recorded sweeps, newest first (``keys`` decoded to a list).

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = "SELECT * FROM reconciliations"
        params: list[Any] = []
        if since is not None:
            sql += " WHERE ran_at >= ?"
            params.append(_iso(since))
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        try:
            rows = list(self.db.query(sql, params))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        for row in rows:
            row["keys"] = json.loads(row["keys"] or "[]")
        return rows

    def beat(
        self, spool: str, *, pid: int, host: str, started_at: datetime, info: dict[str, Any]
    ) -> None:
        """The worker serving ``spool`` is alive now; ``info`` is what it wants shown (its
        counters since it started).

        Raises:
            StoreError: when the database cannot be written.
        """
        row = {
            "spool": spool,
            "pid": pid,
            "host": host,
            "started_at": _iso(started_at),
            "beat_at": _iso(datetime.now(UTC)),
            "info": json.dumps(info, sort_keys=True),
        }
        try:
            with self.db.conn:
                self.db.table("heartbeat").upsert(row, pk="spool")
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot record the worker heartbeat: {exc}", Location(str(self.path))
            ) from None

    def heartbeat(self, spool: str) -> dict[str, Any] | None:
        """The last heartbeat of the worker serving ``spool`` (``info`` decoded), or None.

        Raises:
            StoreError: when the database cannot be read.
        """
        try:
            rows = list(self.db.query("SELECT * FROM heartbeat WHERE spool = ?", [spool]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        if not rows:
            return None
        row = rows[0]
        row["info"] = json.loads(row["info"] or "{}")
        return row

    def row(self, key: str) -> dict[str, Any] | None:
        """The summary row (every column but the JSON) of one key, or ``None``."""
        for row in self.rows("key = ?", [key]):
            return row
        return None

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored verdict JSON for a key, or ``None``.

        Raises:
            StoreError: when the database cannot be read.
        """
        found = self._verdicts("key = ?", [key])
        return found[0] if found else None

    def find(self, job: str) -> list[dict[str, Any]]:
        """Verdicts for a job id, an ``A_T`` array task, a SLUID or a key; newest run first.

        Raises:
            StoreError: when the database cannot be read.
        """
        where, params = VerdictFilter(job=job).where()
        return self._verdicts(
            where, params, order='"end" DESC, restart_count DESC, diagnosed_at DESC'
        )

    def _verdicts(
        self, where: str, params: Sequence[Any], order: str = "key", limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The verdict JSON of the rows matching a SQL condition, in ``order``."""
        sql = f"SELECT verdict FROM verdicts WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params = [*params, limit]
        try:
            return [json.loads(r["verdict"]) for r in self.db.query(sql, list(params))]
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def query(self, selection: VerdictFilter | None = None) -> list[dict[str, Any]]:
        """The summary rows (every column but the verdict JSON) that ``selection`` picks.

        Raises:
            StoreError: when the database cannot be read.
        """
        selection = selection or VerdictFilter()
        where, params = selection.where()
        order = '"end" DESC, key DESC' if selection.order == "newest" else "display_id, key"
        try:
            return list(
                self.rows(
                    where, params, order=order, limit=selection.limit, offset=selection.offset
                )
            )
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def count(self, selection: VerdictFilter | None = None) -> int:
        """How many verdicts ``selection`` picks, ignoring its ``limit`` and ``offset``.

        Raises:
            StoreError: when the database cannot be read.
        """
        where, params = (selection or VerdictFilter()).where()
        sql = "SELECT count(*) AS n FROM verdicts" + (f" WHERE {where}" if where else "")
        try:
            return int(next(iter(self.db.query(sql, params)))["n"])
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def daily(self, selection: VerdictFilter) -> list[dict[str, Any]]:
        """Failed jobs (terminal_state ``fail``, as the fleet view counts them; with a
        ``state`` in ``selection``, the jobs of that state instead) per UTC day of their end
        and sub_domain, for the verdicts ``selection`` picks: rows of ``day`` (YYYY-MM-DD),
        ``sub_domain`` and ``jobs``, oldest day first.

        Raises:
            StoreError: when the database cannot be read.
        """
        where, params = selection.where()
        sql = (
            'SELECT substr("end", 1, 10) AS day, sub_domain, count(*) AS jobs FROM verdicts'
            f' WHERE {_failed(selection)} AND "end" IS NOT NULL'
            + (f" AND {where}" if where else "")
            + " GROUP BY 1, 2 ORDER BY 1, 2"
        )
        try:
            return list(self.db.query(sql, params))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def top_causes(self, selection: VerdictFilter, limit: int = 10) -> list[dict[str, Any]]:
        """The causes of the most failed jobs (as ``daily`` counts them) ``selection`` picks:
        rows of ``cause_id``
        (None: unattributed), ``sub_domain``, ``jobs``, ``users`` and ``nodes`` (distinct
        responsible nodes), most jobs first.

        Raises:
            StoreError: when the database cannot be read.
        """
        where, params = selection.where()
        sql = (
            "WITH picked AS (SELECT key, cause_id, sub_domain, user FROM verdicts"
            f" WHERE {_failed(selection)}"
            + (f" AND {where}" if where else "")
            + ") SELECT p.cause_id AS cause_id, p.sub_domain AS sub_domain,"
            " count(DISTINCT p.key) AS jobs, count(DISTINCT p.user) AS users,"
            " count(DISTINCT r.node) AS nodes FROM picked p"
            " LEFT JOIN responsible r ON r.key = p.key"
            " GROUP BY 1, 2 ORDER BY jobs DESC, cause_id LIMIT ?"
        )
        try:
            return list(self.db.query(sql, [*params, limit]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    # ------------------------------------------------------------------ /metrics

    def verdict_totals(self) -> list[dict[str, Any]]:
        """Verdicts per ``cluster``, ``partition``, ``terminal_state``, ``sub_domain`` and
        ``cause`` (the cause's rule id, "" when none): rows with ``verdicts``.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT coalesce(cluster, '') AS cluster, coalesce(partition, '') AS partition,"
            " terminal_state, sub_domain, coalesce(cause_id, '') AS cause,"
            " count(*) AS verdicts FROM verdicts GROUP BY 1, 2, 3, 4, 5"
        )
        try:
            return list(self.db.query(sql))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def responsible_totals(self) -> list[dict[str, Any]]:
        """Per responsible node and the verdict's ``sub_domain``: ``verdicts`` that blamed it,
        most first.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT r.node AS node, v.sub_domain AS sub_domain, count(DISTINCT r.key) AS verdicts"
            " FROM responsible r JOIN verdicts v ON v.key = r.key GROUP BY 1, 2"
            " ORDER BY 3 DESC, 1"
        )
        try:
            return list(self.db.query(sql))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def latency_buckets(self, bounds: Sequence[float]) -> tuple[list[int], int, float]:
        """The seconds from each job's end to its verdict, for verdicts the worker made from
        spool entries (a rediagnosis is not counted): cumulative counts at or below each of
        ``bounds``, the number of verdicts and the sum of seconds (a Prometheus histogram).

        Raises:
            StoreError: when the database cannot be read.
        """
        seconds = '(julianday(diagnosed_at) - julianday("end")) * 86400.0'
        cases = ", ".join(
            f"coalesce(sum(CASE WHEN {seconds} <= {float(b)!r} THEN 1 ELSE 0 END), 0) AS b{i}"
            for i, b in enumerate(bounds)
        )
        sql = (
            f"SELECT {cases}{', ' if cases else ''}count(*) AS n,"
            f" coalesce(sum(max({seconds}, 0)), 0.0) AS total FROM verdicts"
            ' WHERE spooled_at IS NOT NULL AND "end" IS NOT NULL AND diagnosed_at IS NOT NULL'
        )
        try:
            row = next(iter(self.db.query(sql)))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return [int(row[f"b{i}"]) for i in range(len(bounds))], int(row["n"]), float(row["total"])

    def _unreadable(self, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"the verdict store cannot be read: {exc}", Location(str(self.path)))

    def gpu_history(
        self, nodes: Sequence[str], user: str | None, since: datetime | None
    ) -> list[dict[str, Any]]:
        """Earlier jobs' GPU errors on ``nodes``, and the same user's anywhere, first seen at
        or after ``since`` (UTC; None: all). Rows: job, user, name, node, device, code,
        xid_class, unit, first_at."""
        marks = ",".join("?" for _ in nodes) or "NULL"
        sql = (
            "SELECT v.display_id AS job, v.user AS user, v.name AS name, g.node AS node,"
            " g.device AS device, g.code AS code, g.xid_class AS xid_class, g.unit AS unit,"
            " g.first_at AS first_at FROM gpu_errors g JOIN verdicts v ON v.key = g.key"
            f" WHERE (g.node IN ({marks}) OR v.user = ?)"
        )
        params: list[Any] = [*nodes, user]
        if since is not None:
            sql += " AND (g.first_at IS NULL OR g.first_at >= ?)"
            params.append(_iso(since))
        try:
            return list(self.db.query(sql, params))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read GPU history: {exc}", Location(str(self.path))) from None

    def rows(
        self,
        where: str = "",
        params: Sequence[Any] = (),
        order: str = '"end" DESC',
        limit: int | None = None,
        offset: int = 0,
    ) -> Iterator[dict[str, Any]]:
        """Summary rows of ``verdicts`` (every column but the JSON) for a raw SQL condition;
        ``query`` builds the condition from a ``VerdictFilter``."""
        sql = "SELECT * FROM verdicts"
        if where:
            sql += f" WHERE {where}"
        sql += f" ORDER BY {order}"
        if limit:
            sql += f" LIMIT {int(limit)}"
            if offset:
                sql += f" OFFSET {int(offset)}"
        elif offset:
            sql += f" LIMIT -1 OFFSET {int(offset)}"
        for row in self.db.query(sql, list(params)):
            row.pop("verdict", None)
            yield row

    # ------------------------------------------------------------------ the fleet view

    def fleet_into(
        self,
        fleet: Fleet,
        since: datetime | None = None,
        until: datetime | None = None,
        partition: str | None = None,
    ) -> Fleet:
        """Load the runs that ended in ``[since, until)`` (of ``partition``) into ``fleet``:
        each failed run the fleet view can use as a ``FleetJob`` (``fleet_jobs``), every
        other run (passed, cancelled, timed out, and application failures without a GPU
        error: they blame no node and join no incident) as exposure only, summed per node
        list and partition in SQL. Returns ``fleet``.

        Raises:
            StoreError: when the database cannot be read.
        """
        if not self._has_table("runs"):  # opened read-only before the worker migrated it
            fleet.notes.append(
                "this store has no runs table yet (the worker adds it when it next starts):"
                " exposure from failed runs only"
            )
            return fleet.add_all(self.fleet_jobs(since, until, partition))
        where, params = _fleet_window("runs", since, until, partition)
        sql = (
            "SELECT nodelist, partition, count(*), sum(terminal_state = 'pass'),"
            f' sum(terminal_state = \'fail\'), min("end"), max("end") FROM runs WHERE {where}'
            f" AND NOT {_kept('runs')} GROUP BY nodelist, partition"
        )
        try:
            for nodelist, part, runs, passed, failed, first, last in self.db.conn.execute(
                sql, params
            ):
                fleet.add_exposure(
                    _nodes(nodelist), part, runs, passed, failed, _when(first), _when(last)
                )
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return fleet.add_all(self.fleet_jobs(since, until, partition))

    def fleet_jobs(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        partition: str | None = None,
    ) -> Iterator[FleetJob]:
        """Every failed run (verdict ``terminal_state`` fail) that ended in ``[since, until)``
        (of ``partition``) as a ``FleetJob``, with its verdict's blame, peer links and GPU
        errors; application failures only when they had a GPU error (``_kept``). Read
        through the ``end`` index with plain tuples; the verdict JSON is never parsed.

        Raises:
            StoreError: when the database cannot be read.
        """
        from attribution.fleet import LINK_EVENTS, Blame, FleetJob, GpuMark

        where, params = _fleet_window("v", since, until, partition)
        kept = _kept("v")
        failed = f"SELECT v.key FROM verdicts v WHERE {where} AND {kept}"
        events = ",".join(f"'{e}'" for e in sorted(LINK_EVENTS))
        conn = self.db.conn
        try:
            blame: dict[str, list[Blame]] = defaultdict(list)
            for key, node, component, device in conn.execute(
                "SELECT key, node, component, device FROM responsible"
                f" WHERE node IS NOT NULL AND key IN ({failed})",
                params,
            ):
                blame[key].append(Blame(node, component, device))
            reporters: dict[str, list[str]] = defaultdict(list)
            for key, nodes in conn.execute(
                f"SELECT key, nodes FROM symptoms WHERE event IN ({events}) AND key IN ({failed})",
                params,
            ):
                reporters[key].extend(n for n in (nodes or "").split(",") if n)
            marks: dict[str, list[GpuMark]] = defaultdict(list)
            for key, node, device, code, xid_class in conn.execute(
                "SELECT key, node, device, code, xid_class FROM gpu_errors"
                " WHERE node IS NOT NULL AND device IS NOT NULL AND code IS NOT NULL"
                f" AND key IN ({failed})",
                params,
            ):
                marks[key].append(GpuMark(node, device, code, xid_class))
            joined = (
                "r.failed_node FROM verdicts v LEFT JOIN runs r ON r.key = v.key"
                if self._has_table("runs")
                else "NULL FROM verdicts v"  # a store the worker has not migrated yet
            )
            rows = conn.execute(
                'SELECT v.key, v.job_id, v.user, v.name, v.partition, v.nodelist, v."end",'
                f" v.state, v.sub_domain, v.cause_id, v.suspect_nodes, {joined}"
                f" WHERE {where} AND {kept}",
                params,
            )
            for key, job_id, user, name, part, nodelist, end, state, sub, cause, sus, lost in rows:
                named = tuple(b.node for b in blame.get(key, ()))
                suspects = tuple(n for n in (sus or "").split(",") if n)
                peers = tuple(dict.fromkeys((*named, *suspects)))
                links = tuple(
                    (rep, peer) for rep in dict.fromkeys(reporters.get(key, ())) for peer in peers
                )
                yield FleetJob(
                    key=key,
                    job_id=job_id,
                    user=user,
                    partition=part,
                    nodes=_nodes(nodelist),
                    end=_when(end),
                    terminal_state="fail",
                    sub_domain=sub,
                    state=state,
                    cause=cause,
                    name=name,
                    responsible=tuple(blame.get(key, ())),
                    suspects=suspects,
                    links=links,
                    gpu_errors=tuple(marks.get(key, ())),
                    failed_node=lost,
                )
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def _has_table(self, name: str) -> bool:
        found = self.db.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]
        ).fetchall()
        return bool(found)

    def responsible_elsewhere(self, node: str, since: datetime, exclude: str) -> dict[str, Any]:
        """How many other failed jobs (not ``exclude``) ended since ``since`` with ``node``
        responsible, and of how many users (``sattr show``'s fleet line).

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT count(*) AS jobs, count(DISTINCT v.user) AS users FROM responsible r"
            " JOIN verdicts v ON v.key = r.key WHERE r.node = ? AND v.key != ?"
            " AND v.terminal_state = 'fail' AND v.\"end\" >= ?"
            " AND v.sub_domain IN ('hardware', 'system_software', 'infrastructure')"
        )
        try:
            rows = list(self.db.query(sql, [node, exclude, _iso(since)]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return rows[0] if rows else {"jobs": 0, "users": 0}

    # ------------------------------------------------------------------ sattr status

    def verdict_times(self, since: datetime) -> list[dict[str, Any]]:
        """The times of the verdicts the worker made from spool entries since ``since``
        (diagnosed at or after it, with a ``spooled_at``; a rediagnosis stores none):
        rows of ``end``, ``spooled_at`` and ``diagnosed_at`` as stored (UTC ISO text, ``end``
        possibly None), oldest first.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            'SELECT "end", spooled_at, diagnosed_at FROM verdicts'
            " WHERE diagnosed_at >= ? AND spooled_at IS NOT NULL ORDER BY diagnosed_at"
        )
        try:
            return list(self.db.query(sql, [_iso(since)]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def coverage_by_stream(
        self, since: datetime, groups: dict[str, Sequence[str]] | None = None
    ) -> list[dict[str, Any]]:
        """For the jobs that ended at or after ``since``, per source stream: ``jobs`` with a
        coverage row for it, and how many of them had it ``missing``, ``unreadable``,
        ``error`` or ``empty`` on at least one node, and ``lost``: any of the first three
        (a job counted once). ``groups`` (name -> streams) adds one
        row per group, named ``name``, counting a job once when any of its streams was so.

        Raises:
            StoreError: when the database cannot be read.
        """
        counts = (
            "count(DISTINCT c.key) AS jobs"
            + "".join(
                f", count(DISTINCT CASE WHEN c.status = '{s}' THEN c.key END) AS {s}"
                for s in ("missing", "unreadable", "error", "empty")
            )
            + ", count(DISTINCT CASE WHEN c.status IN ('missing', 'unreadable', 'error')"
            " THEN c.key END) AS lost"
            ' FROM coverage c JOIN verdicts v ON v.key = c.key WHERE v."end" >= ?'
        )
        parts = [f"SELECT c.stream AS stream, {counts} GROUP BY c.stream"]
        params: list[Any] = [_iso(since)]
        for name, streams in (groups or {}).items():
            parts.append(
                f"SELECT ? AS stream, {counts} AND c.stream IN (SELECT value FROM json_each(?))"
            )
            params += [name, _iso(since), json.dumps(list(streams))]
        try:
            rows = list(self.db.query(" UNION ALL ".join(parts), params))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return [r for r in rows if r["jobs"]]

    def coverage_by_node(self, since: datetime, streams: Sequence[str]) -> list[dict[str, Any]]:
        """Per stream (of ``streams``) and node, over the jobs that ended at or after ``since``:
        ``jobs`` that had the source, and ``last_lines_at``, the latest end (UTC ISO text) of
        those whose source on that node gave lines (None when none did). Shared sources (no
        node) are left out.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT c.stream AS stream, c.node AS node, count(DISTINCT c.key) AS jobs,"
            ' max(CASE WHEN c.lines > 0 THEN v."end" END) AS last_lines_at'
            " FROM coverage c JOIN verdicts v ON v.key = c.key"
            ' WHERE v."end" >= ? AND c.node IS NOT NULL'
            " AND c.stream IN (SELECT value FROM json_each(?))"
            " GROUP BY c.stream, c.node ORDER BY c.stream, c.node"
        )
        try:
            return list(self.db.query(sql, [_iso(since), json.dumps(list(streams))]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None

    def last_lines(
        self, since: datetime, until: datetime, sources: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], str]:
        """For each ``(stream, node)`` of ``sources``: the latest end (UTC ISO text), at or
        after ``since`` and before ``until``, of a job whose source on that node gave lines.
        Sources without one are left out.

        Raises:
            StoreError: when the database cannot be read.
        """
        if not sources:
            return {}
        sql = (
            'SELECT c.stream AS stream, c.node AS node, max(v."end") AS last_lines_at'
            " FROM coverage c JOIN verdicts v ON v.key = c.key"
            ' WHERE v."end" >= ? AND v."end" < ? AND c.lines > 0'
            " AND c.stream IN (SELECT value FROM json_each(?))"
            " AND c.node IN (SELECT value FROM json_each(?)) GROUP BY c.stream, c.node"
        )
        wanted = set(sources)
        params = [
            _iso(since),
            _iso(until),
            json.dumps(sorted({s for s, _ in wanted})),
            json.dumps(sorted({n for _, n in wanted})),
        ]
        try:
            rows = list(self.db.query(sql, params))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return {
            (r["stream"], r["node"]): r["last_lines_at"]
            for r in rows
            if (r["stream"], r["node"]) in wanted
        }

    def comment_backlog(self) -> dict[str, dict[str, Any]]:
        """AdminComment writes not done: ``error`` (failed; the worker writes them again) and
        ``pending`` (saved, never written: the worker stopped in between), each with ``count``,
        the ``oldest`` and ``newest`` diagnosed_at (UTC ISO text) and, for ``error``, the
        ``latest`` status text. Kinds with no verdict are left out.

        Raises:
            StoreError: when the database cannot be read.
        """
        kind = "CASE WHEN admin_comment_status LIKE 'error:%' THEN 'error' ELSE 'pending' END"
        sql = (
            f"SELECT {kind} AS kind, count(*) AS count, min(diagnosed_at) AS oldest,"
            " max(diagnosed_at) AS newest FROM verdicts"
            " WHERE admin_comment_status LIKE 'error:%' OR admin_comment_status = 'pending'"
            " GROUP BY 1"
        )
        latest = (
            "SELECT admin_comment_status FROM verdicts WHERE admin_comment_status LIKE 'error:%'"
            " ORDER BY diagnosed_at DESC LIMIT 1"
        )
        try:
            out = {r.pop("kind"): r for r in self.db.query(sql)}
            if "error" in out:
                out["error"]["latest"] = next(iter(self.db.query(latest)))["admin_comment_status"]
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        return out

    def last_reconciliations(self) -> list[dict[str, Any]]:
        """The latest recorded sweep of each cluster (``keys`` decoded), by cluster.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT * FROM reconciliations WHERE id IN"
            " (SELECT max(id) FROM reconciliations GROUP BY cluster) ORDER BY cluster"
        )
        try:
            rows = list(self.db.query(sql))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        for row in rows:
            row["keys"] = json.loads(row["keys"] or "[]")
        return rows

    def reconciliation_totals(self, since: datetime) -> list[dict[str, Any]]:
        """Per cluster, the sweeps that ran at or after ``since``: ``sweeps``, jobs ``seen``,
        jobs ``enqueued`` (never reached the spool), ``errors`` (sweeps that failed), by
        cluster.

        Raises:
            StoreError: when the database cannot be read.
        """
        sql = (
            "SELECT cluster, count(*) AS sweeps, coalesce(sum(seen), 0) AS seen,"
            " coalesce(sum(enqueued), 0) AS enqueued, count(error) AS errors"
            " FROM reconciliations WHERE ran_at >= ? GROUP BY cluster ORDER BY cluster"
        )
        try:
            return list(self.db.query(sql, [_iso(since)]))
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
