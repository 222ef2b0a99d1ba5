"""One HTTP request whose whole answer comes within a deadline and a size bound, whatever the
other side does: ``sattr``'s client of ``sattr serve`` and the Prometheus connector use it.

httpx's timeouts are per read, so a server that trickles one byte a second would hold the caller
forever; here the request runs in a thread that the caller stops waiting for at the deadline.
Certificates are checked against the system's CAs (what curl and the site's other tools trust)
or a site's own CA file.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from attribution.errors import AttributionError, one_line


class FetchError(AttributionError):
    """No whole answer: ``kind`` is ``unreachable`` (no connection or a broken one),
    ``timeout`` (not within the deadline), ``too_large`` (more than the bound) or ``refused``
    (an answer compressed although it was asked not to be)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Answer:
    """A server's whole answer: ``status``, its ``phrase`` and the ``body``."""

    status: int
    phrase: str
    body: bytes


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """The system's CAs, or ``ca_file``'s.

    Raises:
        OSError, ssl.SSLError: ``ca_file`` cannot be read as CA certificates.
    """
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


def fetch(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout: float,
    max_bytes: int,
    verify: ssl.SSLContext | bool = True,
    data: Mapping[str, str] | None = None,
) -> Answer:
    """The whole answer to one request within ``timeout`` seconds and ``max_bytes`` bytes.

    Raises:
        FetchError: as the class says; its message names ``url`` and what went wrong.
    """
    outcome: list[Answer | FetchError] = []

    def run() -> None:
        try:
            outcome.append(_read(method, url, headers, data, timeout, max_bytes, verify))
        except FetchError as exc:
            outcome.append(exc)
        except Exception as exc:  # a header httpx cannot send, an odd URL: a note, never a trace
            outcome.append(FetchError("unreachable", one_line(f"{type(exc).__name__}: {exc}")))

    worker = threading.Thread(target=run, name="attribution-fetch", daemon=True)
    worker.start()
    worker.join(timeout + 0.2)
    if not outcome:
        raise FetchError("timeout", f"no whole answer within {timeout:g} s")
    if isinstance(outcome[0], FetchError):
        raise outcome[0]
    return outcome[0]


def _read(
    method: str,
    url: str,
    headers: Mapping[str, str],
    data: Mapping[str, str] | None,
    timeout: float,
    max_bytes: int,
    verify: ssl.SSLContext | bool,
) -> Answer:
    deadline = time.monotonic() + timeout
    # an answer as sent, never decompressed here: a small gzip (or gzip of gzip) could expand
    # far past ``max_bytes`` inside httpx before the bound is checked
    sent = {**headers, "Accept-Encoding": "identity"}
    try:
        with httpx.stream(
            method,
            url,
            headers=sent,
            data=dict(data) if data is not None else None,
            timeout=timeout,
            follow_redirects=False,
            verify=verify,
        ) as response:
            coding = response.headers.get("content-encoding", "identity").strip().lower()
            if coding not in ("", "identity"):
                raise FetchError(
                    "refused", f"a {one_line(coding, 40)}-encoded answer, not asked for"
                )
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > max_bytes:
                    raise FetchError("too_large", f"more than {max_bytes:,} bytes")
                if time.monotonic() > deadline:
                    raise FetchError("timeout", f"no whole answer within {timeout:g} s")
            return Answer(response.status_code, response.reason_phrase, bytes(body))
    except httpx.TimeoutException:
        raise FetchError("timeout", f"no whole answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchError("unreachable", one_line(str(exc)) or type(exc).__name__) from None


__all__ = ["Answer", "FetchError", "fetch", "tls_context"]
