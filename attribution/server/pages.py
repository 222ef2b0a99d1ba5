"""The web pages of ``sattr serve``: server-rendered HTML (Jinja2, autoescaped), no
JavaScript, inline SVG charts, one small stylesheet of our own.

* ``/`` (also ``/jobs``): the stored verdicts the caller may see, newest first, filtered by a
  GET form (``attribution.server.api.Filters``) and paged, under two charts of the same
  selection: failed jobs over time by sub_domain, and the top causes;
* ``/jobs/{job}``: one verdict (job id, array task, SLUID or store key) with its symptom
  chain, coverage, ignored signals and the store's record;
* ``/fleet``: the fleet view (administrators): suspect nodes, failure domains, silent nodes
  and incidents, with the method that found them.

Every page needs a caller (``attribution.server.auth``); refusals are HTML pages (401 says how
to log in). A valid ``?token=`` on any page is traded for an HttpOnly cookie and the same URL
without it. Every answer carries a strict Content-Security-Policy: no script runs, styles come
from ``/static`` only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import mimetypes
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from attribution import __version__
from attribution.access import HIDDEN
from attribution.hostlist import compress
from attribution.model import COVERAGE_NOTES, CoverageStatus, SubDomain
from attribution.render import duration, safe_text
from attribution.server import charts
from attribution.server.api import MAX_OFFSET, Filters, find, fleet_report
from attribution.server.auth import COOKIE, Identity
from attribution.server.state import ServerState, State, admin, identity, open_store

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
PAGE_SIZE = 50
MAX_PAGE = 500
TOP_CAUSES = 10

# No script at all; styles and images from this server only (the charts are inline SVG,
# styled by class); forms post back here; no framing.
CSP = (
    "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:;"
    " object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
TERMINAL_STATES = ("fail", "timeout", "cancelled", "preempted", "pass")
SLURM_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "PREEMPTED")


def _static_files() -> dict[str, tuple[Path, str]]:
    """The files under ``static/`` by name, each with a short digest of its content (the
    ``?v=`` that lets browsers keep them until they change)."""
    out: dict[str, tuple[Path, str]] = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            out[path.name] = (path, hashlib.sha256(path.read_bytes()).hexdigest()[:12])
    return out


STATIC_FILES = _static_files()


# ------------------------------------------------------------------ template helpers


def _utc(value: Any, seconds: bool = True) -> str:
    """A time (datetime or ISO 8601 text) as ``YYYY-MM-DD HH:MM[:SS]`` UTC; '-' when
    missing."""
    if value is None or value == "":
        return "-"
    when: datetime
    if isinstance(value, datetime):
        when = value
    else:
        try:
            when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _hosts(nodes: Any) -> str:
    if not nodes:
        return "-"
    if isinstance(nodes, str):
        return nodes
    return compress(list(nodes))


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "inf"
    return f"{float(value):.{digits}f}"


def _p(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.1e}" if v < 0.001 else f"{v:.3f}"


def _bytes(value: Any) -> str:
    n = float(value or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _clean(value: Any) -> str:
    """Text written by others with its control characters shown as ``\\xNN``."""
    return safe_text("" if value is None else str(value))


def _domain(value: Any) -> str:
    """A CSS-safe sub_domain name for the ``d-*`` classes (anything unknown is ``other``)."""
    text = str(getattr(value, "value", value) or "none")
    return text if text in {s.value for s in SubDomain} else "other"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        utc=_utc,
        duration=lambda seconds: duration(seconds, " ", "-"),
        hosts=_hosts,
        num=_num,
        p=_p,
        size=_bytes,
        clean=_clean,
        domain=_domain,
        pathpart=lambda v: quote(str(v), safe=""),
    )
    env.globals.update(version=__version__, HIDDEN=HIDDEN)
    return env


ENV = _environment()


def _base(request: Request) -> str:
    return str(request.scope.get("root_path") or "").rstrip("/")


def render(
    request: Request,
    name: str,
    context: Mapping[str, Any],
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    """The template ``name`` with the context every page has (``base``: the prefix a proxy
    serves us under, ``who``: the caller or None, ``static``: a static file's URL)."""
    base = _base(request)

    def static(file: str) -> str:
        _path, digest = STATIC_FILES[file]
        return f"{base}/static/{file}?v={digest}"

    page = ENV.get_template(name).render(
        {"request": request, "base": base, "static": static, "who": None, **context}
    )
    return HTMLResponse(page, status_code=status, headers=dict(headers or {}))


def _login_help(state: ServerState) -> dict[str, Any]:
    settings = state.config.server
    return {
        "munge": settings.munge,
        "proxy_header": bool(settings.proxy_header),
        "token": state.auth.token is not None,
    }


def error_page(
    request: Request, status: int, detail: str, headers: Mapping[str, str] | None = None
) -> HTMLResponse:
    """The HTML form of a refusal; a 401 says the three ways to log in and clears a token
    cookie that no longer works (a server restarted with a new token)."""
    state: ServerState = request.app.state.attribution
    titles = {
        401: "Log in to read verdicts",
        403: "Not yours to read",
        404: "Not found",
        422: "That request cannot be read",
        503: "The verdict store cannot be read",
    }
    response = render(
        request,
        "error.html",
        {
            "status": status,
            "title": titles.get(status, "Error"),
            "detail": detail,
            "login": _login_help(state) if status == 401 else None,
            "stale_cookie": status == 401 and COOKIE in request.cookies,
        },
        status=status,
        headers=headers,
    )
    if status == 401 and COOKIE in request.cookies:
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _validation_text(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(x) for x in error.get("loc", ()) if x not in ("query", "path"))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "; ".join(parts) or "invalid request"


def _token_login(request: Request) -> Response | None:
    """For a request whose ``?token=`` is the server's token: a redirect to the same URL
    without it that sets the cookie (HttpOnly, SameSite=Strict, Path=/)."""
    given = request.query_params.get("token")
    state: ServerState = request.app.state.attribution
    token = state.auth.token
    if not given or token is None or not hmac.compare_digest(given.encode(), token.encode()):
        return None
    target = request.url.remove_query_params("token")
    location = target.path + (f"?{target.query}" if target.query else "")
    response = RedirectResponse(location, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return response


class PageRoute(APIRoute):
    """A page: a valid ``?token=`` is traded for the cookie first; refusals raised anywhere
    (the caller's dependencies, the store, the query's validation) become HTML pages; every
    answer gets the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            response = _token_login(request)
            if response is None:
                try:
                    response = await handler(request)
                except HTTPException as exc:
                    response = error_page(
                        request, exc.status_code, str(exc.detail), dict(exc.headers or {})
                    )
                except RequestValidationError as exc:
                    response = error_page(request, 422, _validation_text(exc))
            for name, value in HEADERS.items():
                response.headers.setdefault(name, value)
            response.headers.setdefault("Cache-Control", "no-store")
            return response

        return page


router = APIRouter(include_in_schema=False, route_class=PageRoute)

Who = Annotated[Identity, Depends(identity)]


# ------------------------------------------------------------------ static files


@router.get("/static/{name}", name="static")
def static(name: str) -> Response:
    """The stylesheet and icon; public, cached (their URLs carry their digest)."""
    found = STATIC_FILES.get(name)
    if found is None:
        raise HTTPException(404, f"no static file {name[:64]!r}")
    path, digest = found
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Response(
        path.read_bytes(),
        media_type=kind,
        headers={"Cache-Control": "public, max-age=86400", "ETag": f'"{digest}"'},
    )


# ------------------------------------------------------------------ the job list


def _query(params: Mapping[str, Any], **changes: Any) -> str:
    """``?a=b&...`` of the non-empty ``params`` with ``changes`` applied (``?`` alone when none)."""
    merged = {**params, **changes}
    kept = {k: v for k, v in merged.items() if v not in (None, "", 0, False)}
    return "?" + urlencode(kept) if kept else "?"


@router.get("/", name="jobs_page")
@router.get("/jobs", name="jobs_list")
def jobs_page(
    request: Request,
    state: State,
    who: Who,
    filters: Annotated[Filters, Query()],
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE_SIZE,
) -> HTMLResponse:
    caller = who.caller
    values = filters.model_dump()
    if not caller.admin:
        values["user"] = None  # the form has no user field for them; their jobs only anyway
        filters = filters.model_copy(update={"user": None})
    params = {k: v for k, v in values.items() if v}
    if limit != PAGE_SIZE:
        params["limit"] = limit
    error = None
    rows: list[dict[str, Any]] = []
    total = 0
    daily: list[dict[str, Any]] = []
    causes: list[dict[str, Any]] = []
    selection = None
    try:
        selection = filters.selection(caller, limit, offset)
    except HTTPException as exc:
        if exc.status_code != 422:
            raise
        error = str(exc.detail)
    if selection is not None:
        whole = dataclasses.replace(selection, limit=None, offset=0)
        with open_store(state) as opened:
            total = opened.count(whole)
            rows = opened.query(selection)
            daily = opened.daily(whole)
            causes = opened.top_causes(whole, TOP_CAUSES)
    base = _base(request)
    time_chart = charts.failures_over_time(
        daily, selection.since if selection else None, selection.until if selection else None
    )
    cause_chart = charts.top_causes(
        causes, lambda cause: base + "/" + _query(params, cause=cause, offset=0)
    )
    previous = _query(params, offset=max(0, offset - limit)) if offset > 0 else None
    following = _query(params, offset=offset + limit) if offset + len(rows) < total else None
    return render(
        request,
        "jobs.html",
        {
            "who": who,
            "form": values,
            "error": error,
            "rows": rows,
            "total": total,
            "offset": offset,
            "limit": limit,
            "previous": previous,
            "following": following,
            "time_chart": time_chart,
            "cause_chart": cause_chart,
            "sub_domains": [s.value for s in SubDomain],
            "states": (*TERMINAL_STATES, *SLURM_STATES),
            "cause_ids": sorted({c["cause_id"] for c in causes if c.get("cause_id")}),
            "filtered": bool({k for k in params if k != "limit"}),
        },
        status=422 if error else 200,
    )


# ------------------------------------------------------------------ one verdict


def _coverage_counts(coverage: Sequence[Any]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for c in coverage:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    return sorted(counts.items())


@router.get("/jobs/{job:path}", name="job_page")
def job_page(
    request: Request,
    state: State,
    who: Who,
    job: Annotated[str, PathParam(description="A job id, an array task (1234_7) or a SLUID.")],
) -> HTMLResponse:
    found = find(state, job, who.caller)
    verdict = found.verdict
    return render(
        request,
        "job.html",
        {
            "who": who,
            "asked": job,
            "v": verdict,
            "job": verdict.job,
            "record": found.record,
            "others": found.others,
            "coverage_counts": _coverage_counts(verdict.coverage),
            "untimed": sum(c.untimed for c in verdict.coverage),
            "ok": CoverageStatus.OK,
            "notes": COVERAGE_NOTES,
            "ownership_notes": list((verdict.ownership or {}).get("notes") or ()),
        },
    )


# ------------------------------------------------------------------ the fleet


def _method_text(method: Mapping[str, Any]) -> dict[str, str]:
    """The test each section of the fleet view ran, in words (``fleetview.TESTS``)."""
    from attribution.fleetview import TESTS

    values = {
        "q": method.get("q"),
        "min_failures": method.get("min_failures"),
        "min_ratio": method.get("min_ratio"),
        "min_users": method.get("min_users"),
        "window": method.get("incident_window") or 0.0,
    }
    out = {}
    for section in ("nodes", "incidents"):
        try:
            out[section] = TESTS[section].format(**values)
        except (KeyError, ValueError, TypeError):  # a method of another version
            out[section] = str(method.get("test") or "")
    return out


def _incident(row: Mapping[str, Any]) -> dict[str, Any]:
    """An incident row with its span in whole seconds (``span_s``)."""
    out = dict(row)
    try:
        start = datetime.fromisoformat(str(row.get("start")).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(row.get("end")).replace("Z", "+00:00"))
        out["span_s"] = f"{(end - start).total_seconds():.0f}"
    except ValueError:
        out["span_s"] = "?"
    return out


@router.get("/fleet", name="fleet_page")
def fleet_page(
    request: Request,
    state: State,
    who: Who,
    since: str = "7d",
    until: str | None = None,
    partition: str | None = None,
    show_all: Annotated[bool, Query(alias="all")] = False,
) -> HTMLResponse:
    admin(who)
    form = {"since": since, "until": until or "", "partition": partition or "", "all": show_all}
    error = None
    report: dict[str, Any] = {}
    try:
        report = fleet_report(state, since, until, partition, None)
    except HTTPException as exc:
        if exc.status_code != 422:
            raise
        error = str(exc.detail)
    nodes = [
        r for r in report.get("nodes", ()) if show_all or r.get("status") not in ("ok", "low-count")
    ]
    domains = [r for r in report.get("domains", ()) if show_all or r.get("status") != "ok"]
    silent = [r for r in report.get("silent", ()) if show_all or r.get("status") == "suspect"]
    method = report.get("method") or {}
    return render(
        request,
        "fleet.html",
        {
            "who": who,
            "form": form,
            "error": error,
            "report": report,
            "nodes": nodes,
            "domains": domains,
            "silent": silent,
            "incidents": [_incident(i) for i in report.get("incidents", ())],
            "hidden": {
                "nodes": len(report.get("nodes", ())) - len(nodes),
                "domains": len(report.get("domains", ())) - len(domains),
                "silent": len(report.get("silent", ())) - len(silent),
            },
            "method": method,
            "method_text": _method_text(method) if method else {},
            "all_url": _query({k: v for k, v in form.items() if k != "all"}, all=1),
        },
        status=422 if error else 200,
    )


__all__ = ["CSP", "PAGE_SIZE", "PageRoute", "error_page", "render", "router"]
