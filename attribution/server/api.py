"""The REST API of ``sattr serve``, under ``/api/v1`` (docs/server.md; the OpenAPI document
is ``/api/v1/openapi.json``).

Every route needs a caller (``attribution.server.auth``); users get their own jobs only,
administrators every job and the fleet view. A job's verdict is the JSON object
``sattr diagnose --json`` prints; ``/record`` adds what the store knows beside it.
"""

from __future__ import annotations

import json
import multiprocessing
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
from attribution.server.upload import UploadLimits
from attribution.store import VerdictFilter
from attribution.timeutil import parse_when

router = APIRouter(prefix="/api/v1", tags=["api"])
MAX_PAGE = 1000
MAX_OFFSET = 1_000_000_000  # SQLite takes 64-bit offsets; a billion verdicts is far enough
MAX_NODES = 10_000

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
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
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


class Window(BaseModel):
    """The fleet view's window, as query parameters."""

    since: str = Field("7d", description="Jobs that ended since: 7d, a date, all.")
    until: str | None = Field(None, description="Jobs that ended before.")
    partition: str | None = Field(None, description="Only jobs of this Slurm partition.")


FleetWindow = Annotated[Window, Query()]


@router.get("/nodes", summary="The fleet view: suspect nodes, domains, silent nodes (admins)")
def nodes(state: State, _admin: Admin, window: FleetWindow) -> dict[str, Any]:
    sections = ("nodes", "domains", "silent")
    return fleet_report(state, window.since, window.until, window.partition, sections)


@router.get("/incidents", summary="Failures of many jobs read as one event (admins)")
def incidents(state: State, _admin: Admin, window: FleetWindow) -> dict[str, Any]:
    return fleet_report(state, window.since, window.until, window.partition, ("incidents",))


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
    settings = state.config.server
    limit = int(settings.max_upload)
    declared = request.headers.get("content-length")
    if declared and declared.isdecimal() and int(declared) > limit:
        raise HTTPException(413, f"the upload is over the limit of {limit:,} bytes")
    # a slot first: an upload is not even stored while every slot is busy
    if not state.slots.acquire(blocking=False):
        raise HTTPException(503, "every diagnosis slot is busy; try again shortly")
    try:
        with tempfile.TemporaryDirectory(
            prefix="sattr-upload-", ignore_cleanup_errors=True
        ) as work:
            archive = Path(work) / "upload"
            size = 0
            with archive.open("wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(413, f"the upload is over the limit of {limit:,} bytes")
                    out.write(chunk)
            verdict, notes = await run_in_threadpool(isolated, state, archive, Path(work))
    finally:
        state.slots.release()
    kept = notes[:MAX_NOTES]
    while kept and len(json.dumps(kept, ensure_ascii=True)) > MAX_NOTES_BYTES:
        kept = kept[:-1]  # whole notes only: the header stays one JSON list
    if kept:
        response.headers["X-Attribution-Notes"] = json.dumps(kept, ensure_ascii=True)
    return verdict


MAX_NOTES = 20  # notes in the X-Attribution-Notes header
MAX_NOTES_BYTES = 4096  # its length (proxies buffer headers: nginx 4-8 KiB by default)


def isolated(state: ServerState, archive: Path, work: Path) -> tuple[dict[str, Any], list[str]]:
    """Unpack and diagnose an upload in a child process of its own, killed past
    ``server.diagnose_timeout`` and limited to ``server.diagnose_memory`` of address space:
    an upload costs at most that, whatever it holds.

    Raises:
        HTTPException: 400 for a refused archive or bundle, 413 for a limit.
    """
    settings = state.config.server
    context = fork_server()
    receive, send = context.Pipe(duplex=False)
    limits = UploadLimits(
        max_upload=int(settings.max_upload), max_unpacked=int(settings.max_unpacked)
    )
    child = context.Process(
        target=_diagnose_child,
        args=(
            str(archive),
            str(work),
            limits,
            [str(d) for d in state.config.rules],
            int(settings.diagnose_memory),
            send,
        ),
        daemon=True,
    )
    child.start()
    send.close()
    try:
        if not receive.poll(settings.diagnose_timeout):
            raise HTTPException(
                413,
                f"the diagnosis took longer than {settings.diagnose_timeout:g} s"
                " (server.diagnose_timeout)",
            )
        try:
            outcome = receive.recv()
        except (EOFError, OSError):
            raise HTTPException(
                413,
                "the diagnosis ended without an answer (over server.diagnose_memory?)",
            ) from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(timeout=10)
    if outcome[0] == "ok":
        return outcome[1], outcome[2]
    status, message = outcome[1], outcome[2]
    raise HTTPException(status, message.replace(str(work), "<upload>"))


def fork_server() -> Any:
    """The multiprocessing context of upload diagnoses, its fork server started: children
    start from a clean process with the engine imported (fast; none of the server's threads,
    sockets or store connections are inherited). ``create_app`` starts it with the app, so
    that its runtime directory is made once, at start."""
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["attribution.server.api", "attribution.bundle"])
    forkserver.ensure_running()
    return context


def _diagnose_child(
    archive: str,
    work: str,
    limits: UploadLimits,
    rule_dirs: list[str],
    memory: int,
    send: Any,
) -> None:
    """The child of ``isolated``: unpack, diagnose, send ``("ok", verdict, notes)`` or
    ``("error", status, message)``."""
    import resource

    from attribution.bundle import diagnose_bundle
    from attribution.rules.loader import load_ruleset
    from attribution.server.upload import UploadError, unpack_bundle

    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        target = Path(work) / "bundle"
        target.mkdir(mode=0o700)
        with open(archive, "rb") as source:
            root = unpack_bundle(source, target, limits)
        ruleset = load_ruleset([Path(d) for d in rule_dirs])
        loaded, verdict = diagnose_bundle(root, ruleset)
        notes = [str(n)[:500] for n in loaded.notes]
        send.send(("ok", verdict_to_dict(verdict), notes))
    except UploadError as exc:
        send.send(("error", exc.status, str(exc)))
    except MemoryError:
        send.send(("error", 413, "the diagnosis needed more than server.diagnose_memory"))
    except AttributionError as exc:
        send.send(("error", 400, f"the bundle cannot be diagnosed: {exc}"))
    except RecursionError:
        send.send(("error", 400, "the bundle is nested too deeply to be read"))
    except Exception as exc:  # a bug of ours: the answer says so, the server goes on
        send.send(("error", 500, f"the diagnosis failed ({type(exc).__name__}); see the log"))
        raise
    finally:
        send.close()


__all__ = ["Filters", "Page", "find", "fleet_report", "router"]
