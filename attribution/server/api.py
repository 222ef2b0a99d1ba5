"""The REST API of ``sattr serve``, under ``/api/v1`` (docs/server.md; the OpenAPI document
is ``/api/v1/openapi.json``).

Every route needs a caller (``attribution.server.auth``); users get their own jobs only,
administrators every job and the fleet view. A job's verdict is the JSON object
``sattr diagnose --json`` prints; ``/record`` adds what the store knows beside it.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from attribution.access import Caller
from attribution.errors import AttributionError
from attribution.hostlist import HostlistError, expand
from attribution.lookup import Forbidden, Found, NotFound, lookup
from attribution.model import SubDomain, verdict_to_dict
from attribution.server.auth import Identity
from attribution.server.state import Admin, ServerState, State, Who, identity, open_store
from attribution.store import VerdictFilter
from attribution.timeutil import parse_when

router = APIRouter(prefix="/api/v1", tags=["api"])
MAX_PAGE = 1000
MAX_NODES = 10_000
CHUNK = 1 << 20

JOB = "A job id, an array task (1234_7) or a SLUID."


class Page(BaseModel):
    """One page of stored verdicts, newest job end first."""

    total: int = Field(description="Verdicts that match the filters, over every page.")
    limit: int
    offset: int
    next: str | None = Field(description="The next page's URL; null on the last page.")
    items: list[dict[str, Any]] = Field(description="Rows as 'sattr list --json' prints them.")


class WhoAmI(BaseModel):
    """The caller as the server sees them."""

    uid: int
    user: str | None
    admin: bool
    method: str = Field(description="How the caller proved who they are: munge, proxy or token.")


def _when(name: str, text: str | None) -> datetime | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_when(text)
    except ValueError:
        raise HTTPException(
            422, f"{name}={text[:64]!r}: give a duration back from now (7d), a date or 'all'"
        ) from None


def _nodes(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        nodes = expand(text)
    except HostlistError as exc:
        raise HTTPException(422, f"node={text[:64]!r}: {exc}") from None
    if not nodes or len(nodes) > MAX_NODES:
        raise HTTPException(422, f"node={text[:64]!r}: names no node, or over {MAX_NODES:,}")
    return nodes


class Filters(BaseModel):
    """The filters of ``sattr list``, as query parameters."""

    since: str | None = Field(None, description="Jobs that ended since: 7d, 12h, a date, all.")
    until: str | None = Field(None, description="Jobs that ended before: a duration or date.")
    state: str | None = Field(None, description="terminal_state (fail, ...) or Slurm state.")
    sub_domain: str | None = Field(None, description="hardware, application, ...")
    cause: str | None = Field(None, description="The cause's rule id (xid-79, ...).")
    node: str | None = Field(None, description="A hostlist: jobs that ran on or blame one.")
    user: str | None = Field(None, description="Jobs of this user (administrators).")
    partition: str | None = Field(None, description="Jobs of this Slurm partition.")

    def selection(self, caller: Caller, limit: int | None = None, offset: int = 0) -> VerdictFilter:
        """The store's filter, narrowed to the caller's own jobs (the pages use it too)."""
        if self.sub_domain and self.sub_domain.lower() not in {s.value for s in SubDomain}:
            raise HTTPException(422, f"sub_domain={self.sub_domain[:64]!r} is not a sub_domain")
        return caller.restrict(
            VerdictFilter(
                since=_when("since", self.since),
                until=_when("until", self.until),
                state=self.state or None,
                sub_domain=self.sub_domain or None,
                cause=self.cause or None,
                nodes=_nodes(self.node),
                user=self.user or None,
                partition=self.partition or None,
                limit=limit,
                offset=offset,
            )
        )


Query_ = Annotated[Filters, Query()]


def find(state: ServerState, job: str, caller: Caller) -> Found:
    """``lookup`` for a route: 404 when no verdict is stored, 403 for another user's job."""
    with open_store(state) as opened:
        try:
            return lookup(opened, job, caller)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except Forbidden as exc:
            raise HTTPException(403, str(exc)) from None


@router.get("/whoami", response_model=WhoAmI, summary="Who the server takes the caller for")
def whoami(who: Annotated[Identity, Depends(identity)]) -> WhoAmI:
    return WhoAmI(
        uid=who.caller.uid, user=who.caller.name, admin=who.caller.admin, method=who.method
    )


@router.get("/jobs", response_model=Page, summary="Stored verdicts, filtered and paged")
def jobs(
    request: Request,
    state: State,
    caller: Who,
    filters: Query_,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Page:
    chosen = filters.selection(caller, limit, offset)
    with open_store(state) as opened:
        total = opened.count(chosen)
        items = opened.query(chosen)
    following = None
    if offset + len(items) < total:
        following = str(request.url.include_query_params(offset=offset + limit))
    return Page(total=total, limit=limit, offset=offset, next=following, items=items)


@router.get(
    "/jobs/{job}",
    summary="A job's verdict, exactly as 'sattr diagnose --json' prints it",
    responses={403: {"description": "Another user's job"}, 404: {"description": "No verdict"}},
)
def job_verdict(
    state: State, caller: Who, job: Annotated[str, PathParam(description=JOB)]
) -> dict[str, Any]:
    return verdict_to_dict(find(state, job, caller).verdict)


@router.get(
    "/jobs/{job}/record",
    summary="A job's verdict with the store's record (AdminComment, spool time, fleet note)",
    responses={403: {"description": "Another user's job"}, 404: {"description": "No verdict"}},
)
def job_record(
    state: State, caller: Who, job: Annotated[str, PathParam(description=JOB)]
) -> dict[str, Any]:
    found = find(state, job, caller)
    out = found.to_dict()
    out["others"] = [other.key for other in found.others]
    return out


@router.get("/nodes", summary="The fleet view: suspect nodes, domains, silent nodes (admins)")
def nodes(
    state: State,
    _admin: Admin,
    since: str = "7d",
    until: str | None = None,
    partition: str | None = None,
) -> dict[str, Any]:
    return fleet_report(state, since, until, partition, ("nodes", "domains", "silent"))


@router.get("/incidents", summary="Failures of many jobs read as one event (admins)")
def incidents(
    state: State,
    _admin: Admin,
    since: str = "7d",
    until: str | None = None,
    partition: str | None = None,
) -> dict[str, Any]:
    return fleet_report(state, since, until, partition, ("incidents",))


def fleet_report(
    state: ServerState,
    since: str | None,
    until: str | None,
    partition: str | None,
    sections: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The fleet view over the store (``sattr nodes --json``'s report); ``sections``: the
    report's parts to keep beside its header (None: all)."""
    from attribution.fleet import report_to_dict
    from attribution.fleetview import existing, fleet_from_store, fleet_options

    config = state.config
    window = (_when("since", since), _when("until", until))
    try:
        fleet = fleet_from_store(
            state.store,
            fleet_options(config),
            existing(config.fleet.topology),
            config.fleet.groups,
            window[0],
            window[1],
            partition or None,
        )
    except AttributionError as exc:
        raise HTTPException(503, f"the fleet view cannot be built: {exc}") from None
    fleet.notes.append("Slurm's node events are not read by the server (sattr nodes reads them)")
    data = report_to_dict(fleet.report())
    if sections is None:
        return data
    head = ("schema", "since", "until", "method", "runs", "failed", "exposure", "notes")
    return {k: v for k, v in data.items() if k in head or k in sections}


@router.post(
    "/diagnose",
    summary="Diagnose an uploaded evidence bundle (tar, tar.gz or tar.zst of its directory)",
    responses={
        400: {"description": "Not a bundle, or an unsafe archive"},
        413: {"description": "Larger than the server's limits"},
        503: {"description": "Every diagnosis slot is busy"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                "application/zstd": {"schema": {"type": "string", "format": "binary"}},
                "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def diagnose(
    request: Request, response: Response, state: State, _caller: Who
) -> dict[str, Any]:
    """The verdict JSON, as ``sattr diagnose --json`` prints it; the notes it would print
    on stderr (what in the bundle was skipped and why) are in the ``X-Attribution-Notes``
    header, one JSON list."""
    from attribution.server.upload import UploadError, UploadLimits

    settings = state.config.server
    declared = request.headers.get("content-length")
    if declared and declared.isdecimal() and int(declared) > settings.max_upload:
        raise HTTPException(
            413, f"the upload is over the limit of {int(settings.max_upload):,} bytes"
        )
    limits = UploadLimits(
        max_upload=int(settings.max_upload), max_unpacked=int(settings.max_unpacked)
    )
    with tempfile.TemporaryDirectory(prefix="sattr-upload-") as work:
        archive = Path(work) / "upload"
        size = 0
        with archive.open("wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_upload:
                    raise HTTPException(
                        413, f"the upload is over the limit of {int(settings.max_upload):,} bytes"
                    )
                out.write(chunk)
        if not state.slots.acquire(timeout=0.1):
            raise HTTPException(503, "every diagnosis slot is busy; try again shortly")
        try:
            verdict, notes = await run_in_threadpool(
                _diagnose_file, state, archive, Path(work), limits
            )
            if notes:
                response.headers["X-Attribution-Notes"] = json.dumps(notes[:50], ensure_ascii=True)
            return verdict
        except UploadError as exc:
            raise HTTPException(exc.status, str(exc)) from None
        finally:
            state.slots.release()


def _diagnose_file(
    state: ServerState, archive: Path, work: Path, limits: Any
) -> tuple[dict[str, Any], list[str]]:
    from attribution.bundle import diagnose_bundle
    from attribution.server.upload import unpack_bundle

    target = work / "bundle"
    target.mkdir(mode=0o700)
    with archive.open("rb") as source:
        root = unpack_bundle(source, target, limits)
    try:
        loaded, verdict = diagnose_bundle(root, state.ruleset)
    except AttributionError as exc:
        raise HTTPException(400, f"the bundle cannot be diagnosed: {exc}") from None
    return verdict_to_dict(verdict), [str(n)[:500] for n in loaded.notes]


__all__ = ["Filters", "Page", "find", "fleet_report", "router"]
