"""The Prometheus connector (``attribution.promql.fetch_metrics``) against servers and settings an
adversary (or a broken proxy) controls: redirects to another host, compression bombs, endless
and trickling answers, HTTP/1.0, a certificate the CA file does not vouch for, bearer token files
that are FIFOs, huge or not ASCII, and node names that try to break out of the selector.

What must hold: ``fetch_metrics`` never raises and never hangs past ``timeout`` (plus a little),
memory stays bounded, and each failure is one honest note naming the nodes it cost. The bugs this
round found (a FIFO token that hung, a gzip-of-gzip bomb, a non-ASCII header, unbounded error
text) are fixed and tested here as plain tests. These tests start their own tiny servers (no
Prometheus needed); tests/test_hostile_metrics.py has the reader's side.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from attribution.config import Metrics
from attribution.promql import Fetched, fetch_metrics, query_for

from .harness import EMPTY_MATRIX, misbehaving_endpoint

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

START = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
END = START + timedelta(hours=1)
NODES = ["gpu-a01", "gpu-a02"]


def fetch(tmp_path: Path, nodes: list[str] | None = None, **settings: Any) -> tuple[Fetched, float]:
    dest = tmp_path / "answers"
    dest.mkdir(exist_ok=True)
    began = time.perf_counter()
    got = fetch_metrics(Metrics(**settings), nodes or NODES, START, END, dest)
    return got, time.perf_counter() - began


def one_note(got: Fetched) -> tuple[str, str]:
    (note,) = got.problems
    return note.code, json.dumps(note.args)


# ----------------------------------------------------------------------- tiny servers

Handler = Callable[[BaseHTTPRequestHandler], None]


@contextlib.contextmanager
def serving(answer: Handler, *, protocol: str = "HTTP/1.1") -> Iterator[tuple[str, list[str]]]:
    """A local server whose every GET/POST is answered by ``answer(handler)``; yields its URL
    and the requests it saw."""
    seen: list[str] = []
    stop = threading.Event()

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = protocol

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._go()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._go()

        def _go(self) -> None:
            seen.append(f"{self.command} {self.path} {self.headers.get('Authorization', '')}")
            self.server.stop = stop  # type: ignore[attr-defined]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
                answer(self)

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _stopped(handler: BaseHTTPRequestHandler) -> threading.Event:
    return handler.server.stop  # type: ignore[attr-defined,no-any-return]


# ----------------------------------------------------------------------- redirects


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_host_is_not_followed(tmp_path: Path, status: int) -> None:
    with serving(lambda h: _answer(h, 200, EMPTY_MATRIX)) as (elsewhere, theirs):

        def redirect(h: BaseHTTPRequestHandler) -> None:
            h.send_response(status)
            h.send_header("Location", elsewhere + "/api/v1/query_range")
            h.send_header("Content-Length", "0")
            h.end_headers()

        with serving(redirect) as (url, ours):
            got, seconds = fetch(tmp_path, url=url, bearer_token_file=_token(tmp_path))
    assert seconds < 10
    assert theirs == []  # the token never went to the other host
    assert ours
    code, args = one_note(got)
    assert code == "prometheus_error"
    assert f"HTTP {status}" in args and "gpu-a[01-02]" in args
    assert got.files == []


def _answer(h: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        h.send_header(name.replace("_", "-"), value)
    h.end_headers()
    h.wfile.write(body)


def _token(tmp_path: Path, text: str = "s3cret") -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    return path


# ----------------------------------------------------------------------- bombs and floods


BOMB = gzip.compress(b" " * (256 << 20), compresslevel=9)  # 256 MiB of spaces in ~250 KB


def _gzip_stream(total: int, piece: int = 1 << 20) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    parts = [packer.compress(b" " * piece) for _ in range(total // piece)]
    return b"".join([*parts, packer.flush()])


@pytest.mark.parametrize(
    ("coding", "make"),
    [
        ("gzip", lambda: BOMB),
        ("gzip, gzip", lambda: gzip.compress(_gzip_stream(320 << 20), compresslevel=9)),
    ],
    ids=["gzip", "gzip-of-gzip"],
)
def test_a_compressed_answer_is_refused_before_it_is_decoded(
    tmp_path: Path, coding: str, make: Callable[[], bytes]
) -> None:
    answer = make()  # 256 MiB in ~250 KB; 320 MiB in ~1 KB
    with serving(lambda h: _answer(h, 200, answer, Content_Encoding=coding)) as (url, _):
        tracemalloc.start()
        try:
            got, seconds = fetch(tmp_path, url=url, max_bytes=4 << 20, timeout=10)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    code, args = one_note(got)
    # asked for an answer as it is (Accept-Encoding: identity), a compressed one is refused
    # before any of it is decoded
    assert code == "prometheus_error"
    assert f"{coding}-encoded answer, not asked for" in args
    assert seconds < 10
    assert peak < 32 << 20


def test_a_never_ending_answer_stops_at_max_bytes(tmp_path: Path) -> None:
    def endless(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b'{"status":"success","data":{"resultType":"matrix","result":[')
        piece = b'{"metric":{},"values":[]},' * 2000
        while not _stopped(h).is_set():
            h.wfile.write(piece)

    with serving(endless) as (url, _):
        got, seconds = fetch(tmp_path, url=url, max_bytes=2 << 20, timeout=5)
    code, _ = one_note(got)
    assert code == "prometheus_error"
    assert seconds < 6


def test_a_trickle_stops_at_the_timeout(tmp_path: Path) -> None:
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        while not _stopped(h).is_set():
            h.wfile.write(b"1\r\n \r\n")
            h.wfile.flush()
            time.sleep(0.1)

    with serving(trickle) as (url, _):
        got, seconds = fetch(tmp_path, url=url, timeout=1.5)
    code, args = one_note(got)
    assert code == "prometheus_timeout"
    assert '"seconds": "1.5"' in args
    assert seconds < 1.5 * 2 + 1  # two groups at most ... here one (both nodes in one query)


def test_headers_that_never_end_stop_at_the_timeout(tmp_path: Path) -> None:
    def slow_headers(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        while not _stopped(h).is_set():
            h.wfile.write(b"X-Pad: a\r\n")
            h.wfile.flush()
            time.sleep(0.05)

    with serving(slow_headers) as (url, _):
        got, seconds = fetch(tmp_path, url=url, timeout=1.0)
    code, _ = one_note(got)
    assert code in ("prometheus_timeout", "prometheus_unreachable")
    assert seconds < 3


def test_an_http_1_0_answer_ended_by_close_is_read(tmp_path: Path) -> None:
    def closing(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(EMPTY_MATRIX)
        h.close_connection = True

    with serving(closing, protocol="HTTP/1.0") as (url, _):
        got, _ = fetch(tmp_path, url=url)
    assert got.problems == []
    assert len(got.files) == 1


def test_a_cut_answer_is_unreachable_not_a_file(tmp_path: Path) -> None:
    def cut(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        h.wfile.write(EMPTY_MATRIX[:20])
        h.close_connection = True

    with serving(cut) as (url, _):
        got, _ = fetch(tmp_path, url=url)
    code, _ = one_note(got)
    assert code == "prometheus_unreachable"
    assert got.files == []


@pytest.mark.parametrize(
    "body",
    [
        b"null",
        b"[]",
        b'{"status":"success"}',
        b'{"status":"success","data":[]}',
        b'{"status":"success","data":{"result":{}}}',
        b"[" * 100_000,
    ],
)
def test_a_200_that_is_not_an_answer_is_one_error_note(tmp_path: Path, body: bytes) -> None:
    with misbehaving_endpoint("junk", body=body) as url:
        got, _ = fetch(tmp_path, url=url)
    code, args = one_note(got)
    assert code == "prometheus_error"
    assert len(args) < 2000
    assert got.files == []


@pytest.mark.parametrize("status", [200, 422, 503])
def test_a_servers_error_text_is_one_bounded_line(tmp_path: Path, status: int) -> None:
    body = json.dumps(
        {"status": "error", "errorType": "x" * 100_000, "error": "bad\nline\u0000two"}
    ).encode()
    with serving(lambda h: _answer(h, status, body)) as (url, _):
        got, _ = fetch(tmp_path, url=url)
    (note,) = got.problems
    text = str(note.args.get("error", ""))
    assert len(text) < 1000
    assert text.isprintable()


# ----------------------------------------------------------------------- TLS and secrets


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return key, cert


@pytest.mark.skipif(not any(
    os.access(os.path.join(p, "openssl"), os.X_OK) for p in os.environ.get("PATH", "").split(":")
), reason="needs the openssl command")  # fmt: skip
def test_a_certificate_the_ca_file_does_not_vouch_for_is_refused(tmp_path: Path) -> None:
    key, cert = _self_signed(tmp_path, "server")
    _, other_ca = _self_signed(tmp_path, "other")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received: list[bytes] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with contextlib.suppress(OSError, ssl.SSLError):
                received.append(context.wrap_socket(conn, server_side=True).recv(1024))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        got, seconds = fetch(
            tmp_path, url=f"https://127.0.0.1:{port}", ca_file=other_ca, timeout=5,
            bearer_token_file=_token(tmp_path),
        )  # fmt: skip
    finally:
        listener.close()
        thread.join(timeout=5)
    code, args = one_note(got)
    assert code == "prometheus_unreachable"
    assert "CERTIFICATE" in args.upper()
    assert seconds < 5
    assert not any(b"s3cret" in data for data in received)  # the token never left


@pytest.mark.parametrize("content", [b"", b"not a certificate", b"\x00" * 100])
def test_a_ca_file_that_is_no_ca_is_one_error_note(tmp_path: Path, content: bytes) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(content)
    with misbehaving_endpoint("slow", delay=0) as url:
        got, _ = fetch(tmp_path, url=url, ca_file=ca)
    code, args = one_note(got)
    assert code == "prometheus_error"
    assert "gpu-a[01-02]" in args


def test_https_to_a_plain_http_server_is_unreachable(tmp_path: Path) -> None:
    with misbehaving_endpoint("slow", delay=0) as url:
        got, seconds = fetch(tmp_path, url=url.replace("http://", "https://"), timeout=3)
    code, _ = one_note(got)
    assert code == "prometheus_unreachable"
    assert seconds < 4


def test_a_bearer_token_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo)
    done: list[Fetched] = []
    with misbehaving_endpoint("slow", delay=0) as url:
        worker = threading.Thread(
            target=lambda: done.append(fetch(tmp_path, url=url, bearer_token_file=fifo)[0]),
            daemon=True,
        )
        worker.start()
        worker.join(3)
        finished = bool(done)
        if not finished:  # let the blocked read end (a writer that closes at once)
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(5)
    assert finished


def test_a_huge_bearer_token_file_is_a_note_not_a_hang(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"a" * (8 << 20))
    with misbehaving_endpoint("slow", delay=0) as url:
        got, seconds = fetch(tmp_path, url=url, bearer_token_file=token, timeout=3)
    assert seconds < 8
    assert got.problems or got.files


@pytest.mark.parametrize(
    ("where", "value"),
    [("token", "tökén"), ("header", "tënant"), ("token", "a\u2028b")],
    ids=["non-ascii-token", "non-ascii-header", "unicode-separator"],
)
def test_a_header_that_is_not_ascii_is_an_honest_error(
    tmp_path: Path, where: str, value: str
) -> None:
    if where == "header":  # the configuration refuses it, naming the header
        with pytest.raises(ValueError, match="X-Scope-OrgID: the value must be printable ASCII"):
            Metrics(url="http://127.0.0.1:9", headers={"X-Scope-OrgID": value})
        return
    died: list[BaseException] = []
    previous = threading.excepthook

    def record(args: Any) -> None:
        died.append(args.exc_value)

    threading.excepthook = record
    try:
        with misbehaving_endpoint("slow", delay=0) as url:
            options: dict[str, Any] = {"url": url, "timeout": 2}
            if where == "token":
                options["bearer_token_file"] = _token(tmp_path, value)
            else:
                options["headers"] = {"X-Scope-OrgID": value}
            got, _ = fetch(tmp_path, **options)
    finally:
        threading.excepthook = previous
    assert died == []
    code, _ = one_note(got)
    assert code == "prometheus_error"


def test_a_token_with_a_line_break_cannot_add_a_header(tmp_path: Path) -> None:
    with serving(lambda h: _answer(h, 200, EMPTY_MATRIX)) as (url, seen):
        got, _ = fetch(tmp_path, url=url, bearer_token_file=_token(tmp_path, "abc\r\nX-Evil: 1"))
    assert all("X-Evil" not in request for request in seen)
    assert got.problems and got.problems[0].code in ("prometheus_unreachable", "prometheus_error")


# ----------------------------------------------------------------------- the selector

HOSTILE_NODES = [
    'gpu"} or vector(1) or {a="',
    "gpu.*",
    "gpu|.*",
    "gpu\\",
    "gpu)(?:",
    "gpu-a01\n",
    "gpu`$(id)`",
    "gpu\u00e9",
]


@pytest.mark.parametrize("node", HOSTILE_NODES)
def test_a_node_name_stays_one_literal_in_the_selector(node: str) -> None:
    query = query_for(Metrics(url="http://p:9090", node_label="Hostname"), [node, "gpu-a02"])
    assert query.startswith("{__name__=~") and query.endswith("}")
    matcher = query.split("Hostname=~", 1)[1][:-1]
    regex = json.loads(matcher)  # one JSON (= Go) string literal, nothing after it
    pattern = re.compile(regex)
    assert pattern.fullmatch(node)
    assert pattern.fullmatch("gpu-a02:9400")
    assert not pattern.fullmatch("gpu-zzz")
    assert not pattern.fullmatch("other")


def test_hostile_node_names_reach_the_server_as_one_query(tmp_path: Path) -> None:
    requests: list[str] = []
    with misbehaving_endpoint("slow", delay=0, requests=requests) as url:
        got, _ = fetch(tmp_path, nodes=HOSTILE_NODES, url=url, nodes_per_query=100)
    assert got.queries == 1
    assert got.problems == []
    assert len(requests) == 1
