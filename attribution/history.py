"""GPU errors across jobs: the repeat logic for XID 13/31/43 (CHAINS.md chain 14).

One XID 13 (graphics engine exception) or 31 (MMU fault) does not say whether the
application or the GPU is at fault; NVIDIA's catalog sends both to a workflow
(WORKFLOW_XID_13 / WORKFLOW_XID_31) that decides by history: the same GPU, often
the same GPC/TPC, faulting for *different* applications points at the GPU; the
same application faulting on *different* GPUs points at the application.

Every verdict records the XIDs of its job per GPU (``Verdict.gpu_errors``). Before
the rules run on a new job, ``apply_history`` compares that job's ``gpu.xid`` events
with the errors earlier jobs recorded (from the verdict store, or a bundle's
``history.yaml``) and adds three fields the rules can test:

* ``prior_jobs_same_gpu``: earlier jobs of *other* applications with an XID of the
  same class (NVIDIA's catalog class: application, hardware, ...) on this GPU;
* ``prior_same_unit``: how many of those named the same GPC/TPC;
* ``prior_gpus_same_app``: other GPUs on which *this* application's earlier jobs
  had an XID of the same class.

An application is the pair (user, job name); a missing name matches any name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from attribution.model import Event, GpuError, JobRecord
from attribution.timeutil import parse_iso

DEFAULT_DAYS = 30.0  # how far back earlier jobs count


@dataclass(frozen=True, slots=True)
class PriorGpuError:
    """One GPU error an earlier job recorded.

    ``job`` is the earlier job's id (display id or store key), ``user`` and
    ``name`` its owner and job name, ``device`` the PCI bus id, ``unit`` the
    GPC/TPC, ``at`` when it was first seen (UTC).
    """

    job: str
    node: str
    device: str
    code: int
    user: str | None = None
    name: str | None = None
    xid_class: str | None = None
    unit: str | None = None
    at: datetime | None = None


def gpu_errors(events: Iterable[Event]) -> tuple[GpuError, ...]:
    """The job's ``gpu.xid`` events grouped per (node, GPU, code), first time first."""
    grouped: dict[tuple[str, str, int], list[Event]] = {}
    for event in events:
        if event.name != "gpu.xid" or not event.node:
            continue
        device, code = event.device or event.fields.get("pci"), event.fields.get("code")
        if not device or not isinstance(code, int):
            continue
        grouped.setdefault((event.node, str(device), code), []).append(event)
    out = []
    for (node, device, code), items in grouped.items():
        times = [e.time for e in items if e.time is not None]
        first = items[0]
        out.append(
            GpuError(
                node=node,
                device=device,
                code=code,
                xid_class=first.fields.get("xid_class"),
                unit=next((u for e in items if (u := _unit(e.fields))), None),
                first_at=min(times) if times else None,
                count=sum(e.count for e in items),
            )
        )
    return tuple(sorted(out, key=lambda g: (g.first_at is None, g.first_at or 0, g.node)))


def _unit(fields: Mapping[str, Any]) -> str | None:
    gpc, tpc = fields.get("gpc"), fields.get("tpc")
    if gpc is None:
        return None
    return f"GPC {gpc}" + (f", TPC {tpc}" if tpc is not None else "")


def _same_class(event: Event, prior: PriorGpuError) -> bool:
    mine = event.fields.get("xid_class")
    if mine and prior.xid_class:
        return str(mine) == prior.xid_class
    return event.fields.get("code") == prior.code


def _same_app(job: JobRecord, prior: PriorGpuError) -> bool:
    if not job.user or not prior.user or job.user != prior.user:
        return False
    return not job.name or not prior.name or job.name == prior.name


def apply_history(
    events: Sequence[Event],
    job: JobRecord,
    history: Sequence[PriorGpuError],
    *,
    days: float = DEFAULT_DAYS,
) -> None:
    """Add ``prior_jobs_same_gpu``, ``prior_same_unit`` and ``prior_gpus_same_app`` to the
    job's ``gpu.xid`` events (see the module docstring). Earlier records of this same job
    and records older than ``days`` before the job start are ignored."""
    if not history:
        return
    mine = {job.display_id, job.job_id, job.key}
    since = job.start - timedelta(days=days) if job.start else None
    usable = [
        h for h in history if h.job not in mine and (since is None or h.at is None or h.at >= since)
    ]
    for event in events:
        if event.name != "gpu.xid" or not event.node:
            continue
        device = str(event.device or event.fields.get("pci") or "")
        unit = _unit(event.fields)
        related = [h for h in usable if _same_class(event, h)]
        same_gpu = [h for h in related if h.node == event.node and h.device == device]
        others = [h for h in same_gpu if not _same_app(job, h)]
        event.fields["prior_jobs_same_gpu"] = len({h.job for h in others})
        event.fields["prior_same_unit"] = len({h.job for h in others if unit and h.unit == unit})
        elsewhere = {
            (h.node, h.device)
            for h in related
            if _same_app(job, h) and (h.node, h.device) != (event.node, device)
        }
        event.fields["prior_gpus_same_app"] = len(elsewhere)


def priors_from_verdict_rows(rows: Iterable[Mapping[str, Any]]) -> list[PriorGpuError]:
    """``PriorGpuError`` records from store rows (``Store.gpu_history``)."""
    out = []
    for row in rows:
        try:
            code = int(row["code"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append(
            PriorGpuError(
                job=str(row.get("job") or row.get("key") or "?"),
                node=str(row.get("node") or ""),
                device=str(row.get("device") or ""),
                code=code,
                user=row.get("user"),
                name=row.get("name"),
                xid_class=row.get("xid_class"),
                unit=row.get("unit"),
                at=parse_iso(str(row["first_at"])) if row.get("first_at") else None,
            )
        )
    return out


def optional_text(value: Any) -> str | None:
    return None if value is None else str(value)
