"""``sattr`` as a client of ``sattr serve``: for users on a login node who cannot read the
verdict store (``server.url`` in the configuration). Each request carries a fresh MUNGE
credential naming it, so the server learns the caller's uid from munged, as Slurm does.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from attribution.config import Server
from attribution.errors import AttributionError
from attribution.httpfetch import FetchError, fetch, tls_context
from attribution.munge import MungeError, encode, request_payload

MAX_BODY = 64 << 20  # bytes of one answer: a page of 1,000 rows is about 1 MB


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
        try:
            self.verify = tls_context(settings.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ClientError(
                f"server.ca_file {settings.ca_file}: cannot be read as CA certificates: {exc}"
            ) from None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Answer:
        """GET ``path`` (under the server's URL) with ``params``.

        Raises:
            ClientError: no MUNGE credential, no answer, or a refusal (4xx/5xx: the
                server's one-line reason).
        """
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None})
        target = path + (f"?{query}" if query else "")  # what the credential names
        try:
            credential = encode(
                request_payload("GET", target),
                socket=self.settings.munge_socket,
                timeout=self.settings.timeout,
            )
        except MungeError as exc:  # no munge on this node, munged down: one line, no traceback
            raise ClientError(f"no MUNGE credential for the server: {exc.message}") from None
        url = self.base + target
        headers = {"Authorization": f"MUNGE {credential}", "Accept": "application/json"}
        return self._fetch(url, headers)

    def _fetch(self, url: str, headers: dict[str, str]) -> Answer:
        """The answer to one GET, in full within ``server.timeout`` seconds whatever the
        server does and at most ``MAX_BODY`` bytes (``httpfetch.fetch``).

        Raises:
            ClientError: as ``get``.
        """
        timeout = self.settings.timeout
        try:
            got = fetch(
                "GET", url, headers=headers, timeout=timeout, max_bytes=MAX_BODY, verify=self.verify
            )
        except FetchError as exc:
            if exc.kind == "timeout":
                message = f"did not answer within {timeout:g} s"
            elif exc.kind == "too_large":
                message = f"sent more than {MAX_BODY:,} bytes"
            elif exc.kind == "refused":
                message = f"sent {exc.message}"
            else:
                message = f"did not answer: {exc.message}"
            raise ClientError(f"the server at {self.base} {message}") from None
        answer = Answer(got.status, got.phrase, got.body)
        if answer.status >= 400:
            raise ClientError(answer.reason(), answer.status)
        return answer

    def json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        answer = self.get(path, params)
        try:
            return json.loads(answer.body)
        except (ValueError, RecursionError):
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
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ClientError(f"the server at {self.base} gave no list of job rows")
            rows += items
            offset += len(items)
            if not items or page.get("next") is None:
                break
        return rows


@dataclass(frozen=True, slots=True)
class Answer:
    """A server's whole answer: ``status``, its ``phrase`` and the ``body``."""

    status: int
    phrase: str
    body: bytes

    def reason(self) -> str:
        """The refusal in one line: the server's ``detail``, else the HTTP reason."""
        try:
            detail = json.loads(self.body).get("detail")
        except (ValueError, RecursionError, AttributeError):
            detail = None
        text = detail if isinstance(detail, str) else self.phrase
        return f"the server refused ({self.status}): {text}"


__all__ = ["MAX_BODY", "Answer", "Client", "ClientError"]
