"""The ``sattr serve`` application: the REST API (``/api/v1``), the web pages (``/``), the
Prometheus metrics (``/metrics``) and a liveness check (``/healthz``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from attribution import __version__
from attribution.config import Config
from attribution.server import api, pages
from attribution.server.auth import Authenticator
from attribution.server.metrics import StoreCollector
from attribution.server.state import ServerState


def create_app(config: Config, store: Path, ruleset: Any, *, token: str | None = None) -> FastAPI:
    """The application over the verdict store at ``store``; ``token``: the server's token
    (None: no token is accepted). ``ruleset``: the rules ``sattr serve`` loaded at start (so
    that broken site rules stop it there); each upload's diagnosis, in a child process, loads
    the same ones (the shipped rules and ``config.rules``)."""
    config = config.model_copy(update={"store": store})
    app = FastAPI(
        title="attribution",
        version=__version__,
        summary="One honest verdict per failed Slurm GPU job",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # FastAPI's Swagger page loads script from a CDN: not on a cluster
        redoc_url=None,
    )
    app.state.attribution = ServerState(
        config=config,
        store=store,
        auth=Authenticator(config.server, config.admin_groups, token),
        ruleset=ruleset,
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(config, store))
    api.fork_server()  # the processes that diagnose uploads fork from it
    app.include_router(api.router)
    app.include_router(pages.router)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        state: ServerState = request.app.state.attribution
        if not state.config.server.metrics_public:  # then for administrators only
            from attribution.server.state import admin, identity

            admin(identity(request, state))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(StarletteHTTPException)
    async def not_found(request: Request, exc: StarletteHTTPException) -> Response:
        """An unknown address outside the API gets the HTML 404 page; the API keeps JSON."""
        if exc.status_code == 404 and not request.url.path.startswith("/api/"):
            return pages.error_page(request, 404, f"no page at {request.url.path[:200]}")
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        """A request the API cannot read: 422 with one line naming each bad parameter."""
        parts = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path"))
            parts.append(f"{where or 'request'}: {error.get('msg', 'invalid')}")
        return JSONResponse({"detail": "; ".join(parts)[:500]}, status_code=422)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    return app


__all__ = ["create_app"]
