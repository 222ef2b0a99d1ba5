"""``sattr`` as a client of ``sattr serve``: for users on a login node who cannot read the
verdict store (``server.url`` in the configuration). Each request carries a fresh MUNGE
credential naming it, so the server learns the caller's uid from munged, as Slurm does.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from attribution.config import Server
from attribution.errors import AttributionError
from attribution.munge import encode, request_payload


class ClientError(AttributionError):
    """The server could not be asked, or it refused (``status``: its HTTP status, 0 when it
    never answered)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """Requests to the server at ``settings.url`` (required)."""

    def __init__(self, settings: Server) -> None:
        if not settings.url:
            raise ClientError("no server is configured (server.url)")
        self.settings = settings
        self.base = settings.url
        # the system's trusted CAs (what curl and the site's other tools trust), or the site's
        # own CA file; httpx alone would trust only certifi's list
        cafile = str(settings.ca_file) if settings.ca_file else None
        try:
            self.verify = ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ClientError(
                f"server.ca_file {cafile}: cannot be read as CA certificates: {exc}"
            ) from None

    def get(self, path: str, params: dict[str, Any] | None = None) -> httpx.Response:
        """GET ``path`` (under the server's URL) with ``params``.

        Raises:
            ClientError: no MUNGE credential, no answer, or a refusal (4xx/5xx: the
                server's one-line reason).
        """
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None})
        target = path + (f"?{query}" if query else "")  # what the credential names
        credential = encode(
            request_payload("GET", target),
            socket=self.settings.munge_socket,
            timeout=self.settings.timeout,
        )
        url = self.base + target
        try:
            response = httpx.get(
                url,
                headers={"Authorization": f"MUNGE {credential}", "Accept": "application/json"},
                timeout=self.settings.timeout,
                follow_redirects=False,
                verify=self.verify,
            )
        except httpx.HTTPError as exc:
            raise ClientError(f"the server at {self.base} did not answer: {exc}") from None
        if response.status_code >= 400:
            raise ClientError(_reason(response), response.status_code)
        return response

    def json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = self.get(path, params)
        try:
            return response.json()
        except ValueError:
            raise ClientError(f"the server at {self.base} answered {path} with no JSON") from None

    def record(self, job: str) -> dict[str, Any]:
        """A job's verdict with the store's record (``GET /api/v1/jobs/{job}/record``)."""
        data = self.json(f"/api/v1/jobs/{quote(job, safe='')}/record")
        if not isinstance(data, dict):
            raise ClientError(f"the server gave no verdict object for job {job}")
        return data

    def jobs(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Stored verdict rows (``GET /api/v1/jobs``), following pages up to ``limit``."""
        wanted = int(params.get("limit") or 200)
        rows: list[dict[str, Any]] = []
        offset = 0
        while len(rows) < wanted:
            page = self.json(
                "/api/v1/jobs", {**params, "limit": min(1000, wanted - len(rows)), "offset": offset}
            )
            items = page.get("items") if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise ClientError("the server's job list has no items")
            rows += items
            offset += len(items)
            if not items or page.get("next") is None:
                break
        return rows


def _reason(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = detail if isinstance(detail, str) else response.reason_phrase
    return f"the server refused ({response.status_code}): {text}"


__all__ = ["Client", "ClientError"]
