"""``sattr serve``: the web pages, REST API and metrics over the verdict store
(``attribution.server``; docs/server.md)."""

from __future__ import annotations

import sys

import click

from attribution.cli.common import config_option, db_option, load_config, load_rules, store_path


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@config_option
@db_option
@click.option(
    "--listen",
    metavar="ADDRESS:PORT",
    default=None,
    help="Where to listen (default: server.listen, 127.0.0.1:8080).",
)
@click.option(
    "--token/--no-token",
    default=None,
    help="Print a login URL with a random token that reads everything (default: server.token).",
)
def serve(config_path: str | None, db: str | None, listen: str | None, token: bool | None) -> None:
    """Serve the verdict store: web pages at /, the REST API at /api/v1 (OpenAPI at
    /api/v1/openapi.json) and Prometheus metrics at /metrics.

    Users prove who they are with MUNGE (sattr on a login node does it) or through a
    trusted reverse proxy; the token URL printed at start is for whoever started the
    server. See docs/server.md.
    """
    import secrets

    import uvicorn
    from pydantic import ValidationError

    from attribution.config import Server
    from attribution.server.app import create_app

    config = load_config(config_path)
    settings = config.server
    if listen is not None:
        try:
            settings = Server.model_validate({**settings.model_dump(), "listen": listen})
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise click.BadParameter(message, param_hint="--listen") from None
        config = config.model_copy(update={"server": settings})
    path = store_path(db, config)
    ruleset = load_rules([str(p) for p in config.rules])
    secret = secrets.token_urlsafe(24) if (settings.token if token is None else token) else None
    app = create_app(config, path, ruleset, token=secret)
    host, port = settings.address
    scheme = "https" if settings.tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    # where people reach it: server.url when set (listen may be 0.0.0.0, which no browser opens)
    where = settings.url or f"{scheme}://{shown}:{port}"
    click.echo(
        f"sattr serve: verdicts from {path}, listening on {scheme}://{shown}:{port}", err=True
    )
    if secret:
        click.echo(f"  open {where}/?token={secret}", err=True)
    click.echo(
        f"  API {where}/api/v1 (OpenAPI: {where}/api/v1/openapi.json), metrics {where}/metrics",
        err=True,
    )
    if not _loopback(host) and scheme == "http":
        click.echo(
            "sattr serve: warning: listening beyond loopback without TLS (server.tls_cert);"
            " verdicts and the token travel in clear text",
            err=True,
        )
    sys.stdout.flush()
    uvicorn.run(
        app,
        host=host,
        port=port,
        ssl_certfile=str(settings.tls_cert) if settings.tls_cert else None,
        ssl_keyfile=str(settings.tls_key) if settings.tls_key else None,
        log_level="warning",
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=5,
        proxy_headers=False,
        server_header=False,
    )


__all__ = ["serve"]
