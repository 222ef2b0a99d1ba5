"""One job's verdict as a caller may see it, from the store: what ``sattr show``,
``sattr report`` and the server's job page and ``/api/v1/jobs/{job}`` all return.

The access policy is ``attribution.access``'s; this module only finds the runs of a job,
keeps the ones the caller may see and adds what the store knows beside the verdict (the
AdminComment write-back, when the hook spooled the job, other failures of the blamed nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from attribution.access import Caller
from attribution.errors import AttributionError
from attribution.model import JobRecord, Verdict, verdict_to_dict
from attribution.store import Store, VerdictFilter
from attribution.verdictjson import verdict_from_dict

FLEET_DAYS = 7  # how far before the job's end the fleet note looks for other failures


class NotFound(AttributionError):
    """No verdict is stored for the job."""


class Forbidden(AttributionError):
    """The job's verdicts belong to another user."""


@dataclass(frozen=True, slots=True)
class Found:
    """The newest run of a job the caller may see (``verdict``, already trimmed for them),
    the store's ``record`` of it and the caller's ``others`` runs under the same id."""

    verdict: Verdict
    record: dict[str, Any]
    others: list[JobRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The verdict exactly as ``sattr diagnose --json`` prints it, plus ``record``."""
        out = verdict_to_dict(self.verdict)
        out["record"] = self.record
        return out


def fleet_note(store: Store, verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For each node the verdict holds responsible: other failed jobs it was responsible for
    in the ``FLEET_DAYS`` before this job ended (and since), when there is any."""
    record = verdict_from_dict(verdict).job
    since = (record.end or datetime.now(UTC)) - timedelta(days=FLEET_DAYS)
    out: dict[str, dict[str, Any]] = {}
    for blame in verdict.get("responsible") or ():
        node = blame.get("node") if isinstance(blame, dict) else None
        if not node or node in out:
            continue
        seen = store.responsible_elsewhere(node, since, record.key)
        if seen["jobs"]:
            out[node] = {"jobs": seen["jobs"], "users": seen["users"], "since": since.isoformat()}
    return out


def lookup(store: Store, job: str, caller: Caller) -> Found:
    """The verdict of ``job`` (a job id, ``A_T`` array task, SLUID or store key) for
    ``caller``.

    Raises:
        NotFound: no verdict is stored for it.
        Forbidden: every stored run of it belongs to another user.
        StoreError: the store cannot be read.
    """
    found = store.find(job)
    if not found:
        raise NotFound(
            f"no verdict for job {job} (not processed yet? an administrator can run"
            f" 'sattr enqueue {job}')"
        )
    mine = caller.visible(found)
    if not mine:
        raise Forbidden(f"job {job} belongs to another user")
    verdict = caller.shown(verdict_from_dict(mine[0]))
    rows = {r["key"]: r for r in store.query(VerdictFilter(job=job))}
    row = rows.get(verdict.job.key) or {}
    record = {  # what the store adds: the AdminComment write-back and spool time
        "admin_comment_status": row.get("admin_comment_status"),
        "admin_comment": row.get("admin_comment"),
        "spooled_at": row.get("spooled_at"),
        "fleet": fleet_note(store, mine[0]),
    }
    return Found(verdict, record, [verdict_from_dict(v).job for v in mine[1:]])


__all__ = ["FLEET_DAYS", "Forbidden", "Found", "NotFound", "fleet_note", "lookup"]
