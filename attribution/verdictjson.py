"""Rebuild a ``Verdict`` from its JSON form (the store keeps verdicts as JSON).

The inverse of ``model.verdict_to_dict``; unknown keys are ignored so that a
newer writer does not break an older reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attribution.jobrecord import job_from_dict
from attribution.model import (
    Alternative,
    Cause,
    ChainEntry,
    ChainRole,
    Confidence,
    Coverage,
    CoverageNote,
    CoverageStatus,
    GpuError,
    Placement,
    Responsible,
    Stream,
    SubDomain,
    TerminalState,
    Trust,
    Verdict,
)
from attribution.timeutil import parse_iso

_TRUST = frozenset(t.value for t in Trust)


def _t(value: Any) -> datetime | None:
    return parse_iso(str(value)) if value else None


def _notes(items: Any) -> tuple[CoverageNote, ...]:
    """A coverage entry's notes (verdicts stored before notes existed have none)."""
    return tuple(
        CoverageNote(str(n["code"]), dict(n.get("args") or {}))
        for n in items or []
        if isinstance(n, Mapping) and n.get("code")
    )


def _cause(data: Mapping[str, Any] | None) -> Cause | None:
    if not data:
        return None
    return Cause(
        id=str(data.get("id")), title=str(data.get("title", "")), rule=str(data.get("rule", ""))
    )


def _responsible(items: Any) -> tuple[Responsible, ...]:
    return tuple(
        Responsible(
            node=str(r.get("node")),
            component=r.get("component"),
            device=r.get("device"),
            confirmed_by=r.get("confirmed_by"),
        )
        for r in items or []
    )


def _chain(items: Any) -> tuple[ChainEntry, ...]:
    out = []
    for e in items or []:
        out.append(
            ChainEntry(
                symptom=str(e.get("symptom", "")),
                event=str(e.get("event", "")),
                role=ChainRole(e.get("role", "context")),
                count=int(e.get("count", 0)),
                nodes=tuple(e.get("nodes") or ()),
                node_count=int(e.get("node_count", 0)),
                first_at=_t(e.get("first_at")),
                last_at=_t(e.get("last_at")),
                stream=str(e.get("stream", "")),
                example=str(e.get("example", "")),
                source=str(e.get("source", "")),
                rule=str(e.get("rule", "")),
                note=e.get("note"),
                owner=e.get("owner"),
                trust=e.get("trust"),
            )
        )
    return tuple(out)


def verdict_from_dict(data: Mapping[str, Any]) -> Verdict:
    """A ``Verdict`` from ``verdict_to_dict`` output."""
    job_data = dict(data.get("job") or {})
    if job_data.get("cancelled_by") and job_data.get("state"):
        job_data["state"] = f"{job_data['state']} by {job_data['cancelled_by']}"
    job = job_from_dict(job_data or {"job_id": "?"}, "verdict")
    window = data.get("window") or {}
    return Verdict(
        job=job,
        terminal_state=TerminalState(data.get("terminal_state", "fail")),
        sub_domain=SubDomain(data.get("sub_domain", "unattributed")),
        cause=_cause(data.get("cause")),
        responsible=_responsible(data.get("responsible")),
        summary=str(data.get("summary", "")),
        action=data.get("action"),
        symptom_chain=_chain(data.get("symptom_chain")),
        alternatives=tuple(
            Alternative(
                cause=_cause(a.get("cause")) or Cause("?", "?", "?"),
                sub_domain=SubDomain(a.get("sub_domain", "unattributed")),
                responsible=_responsible(a.get("responsible")),
                summary=str(a.get("summary", "")),
                why_not=str(a.get("why_not", "")),
                priority=int(a.get("priority", 0)),
            )
            for a in data.get("alternatives") or []
        ),
        coverage=tuple(
            Coverage(
                stream=Stream(c.get("stream")),
                node=c.get("node"),
                status=CoverageStatus(c.get("status", "ok")),
                files=tuple(c.get("files") or ()),
                bytes=int(c.get("bytes", 0)),
                lines=int(c.get("lines", 0)),
                untimed=int(c.get("untimed", 0)),
                outside_window=int(c.get("outside_window", 0)),
                reason=c.get("reason"),
                notes=_notes(c.get("notes")),
                trust=Trust(c["trust"]) if c.get("trust") in _TRUST else None,
                first_at=_t(c.get("first_at")),
                last_at=_t(c.get("last_at")),
            )
            for c in data.get("coverage") or []
        ),
        ignored=_chain(data.get("ignored")),
        window=(_t(window.get("start")), _t(window.get("end"))),
        ruleset=dict(data.get("ruleset") or {}),
        engine_version=str(data.get("engine_version", "")),
        diagnosed_at=_t(data.get("diagnosed_at")),
        gpu_errors=tuple(
            GpuError(
                node=str(g.get("node")),
                device=str(g.get("device")),
                code=int(g.get("code", 0)),
                xid_class=g.get("xid_class"),
                unit=g.get("unit"),
                first_at=_t(g.get("first_at")),
                count=int(g.get("count", 1)),
            )
            for g in data.get("gpu_errors") or []
        ),
        suspects=_responsible(data.get("suspects")),
        confidence=_confidence(data.get("confidence")),
        ownership=dict(data.get("ownership") or {}),
        placement=_placement(data.get("placement")),
    )


def _placement(data: Any) -> Placement | None:
    if not isinstance(data, Mapping) or not data.get("name"):
        return None
    return Placement(
        kind=str(data.get("kind", "")),
        name=str(data["name"]),
        label=str(data.get("label", "")),
        nodes=str(data.get("nodes", "")),
        basis=str(data.get("basis", "")),
        size=int(data.get("size", 0)),
    )


def _confidence(data: Any) -> Confidence | None:
    if not isinstance(data, Mapping) or not data.get("level"):
        return None
    return Confidence(level=str(data["level"]), reason=str(data.get("reason", "")))
