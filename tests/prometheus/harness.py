"""A real Prometheus on loopback over backfilled series, and misbehaving endpoints.

``start_prometheus`` writes the OpenMetrics text to a file, turns it into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics`` and starts ``prometheus`` on a free loopback
port over that data directory, with a configuration that scrapes nothing and a retention of
100 years (Prometheus's retention counts back from the newest block, so the past window stays).
Blocks found in the data directory are loaded at startup: the series answer range queries as
soon as ``/-/ready`` does, which ``start_prometheus`` checks with one ``/api/v1/query_range``
over the data's time span before handing the server out.

Prometheus 2.42 makes no lockfile unless ``--storage.tsdb.use-lockfile`` is given. The port
comes from the kernel's ephemeral range, so never 9090 (where a packaged daemon would listen).

Backfilled series carry no staleness markers: a series that ends at ``t`` still answers an
instant or range *query* (``query_range``) for the lookback delta after its last sample (5
minutes unless ``lookback_delta`` says otherwise). A range *selector*
(``metric[10m]`` through ``/api/v1/query``) returns the raw samples.

``misbehaving_endpoint`` is a small HTTP server in a thread that answers like a broken or
overloaded Prometheus: slowly, with a 5xx and Prometheus's error body, with junk, or with a
huge body. It is not a Prometheus: only failure modes are tested against it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

try:
    from tests.server.conftest import free_port
except ImportError:  # the server tests' dependencies are missing: the same few lines here
    import socket

    def free_port() -> int:
        """A loopback TCP port nothing listens on (at the moment of asking)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])


REQUIRE_ENV = "ATTRIBUTION_REQUIRE_PROMETHEUS"
REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
PACKAGED_PORT = 9090  # the Debian daemon's port: never ours

CONFIG = """\
# no scrape targets: the server only answers queries over the backfilled blocks
global:
  scrape_interval: 1h
  evaluation_interval: 1h
scrape_configs: []
"""


def binaries() -> tuple[str | None, str | None]:
    """The paths of ``prometheus`` and ``promtool`` (PATH, then /usr/bin), None when absent."""

    def find(name: str) -> str | None:
        found = shutil.which(name)
        if found is None and os.access(f"/usr/bin/{name}", os.X_OK):
            found = f"/usr/bin/{name}"
        return found

    return find("prometheus"), find("promtool")


def missing() -> str | None:
    """Why no real Prometheus can run here, or None."""
    prometheus, promtool = binaries()
    absent = [n for n, p in (("prometheus", prometheus), ("promtool", promtool)) if p is None]
    if absent:
        return f"no Prometheus: {' and '.join(absent)} not found (apt install prometheus)"
    return None


def require_prometheus() -> tuple[str, str]:
    """The two binaries; else skip the test, or fail it when ATTRIBUTION_REQUIRE_PROMETHEUS=1."""
    why = missing()
    if why is not None:
        if REQUIRED:
            pytest.fail(f"{why}; {REQUIRE_ENV}=1 asks for one", pytrace=False)
        pytest.skip(why)
    prometheus, promtool = binaries()
    assert prometheus is not None and promtool is not None
    return prometheus, promtool


def time_span(openmetrics: str) -> tuple[float, float]:
    """The first and last sample timestamps (seconds) of an OpenMetrics text with timestamps."""
    low, high = float("inf"), float("-inf")
    for line in openmetrics.splitlines():
        if not line or line.startswith("#"):
            continue
        stamp = float(line.rsplit(" ", 1)[1])
        low, high = min(low, stamp), max(high, stamp)
    if low > high:
        raise ValueError("the OpenMetrics text has no samples")
    return low, high


def backfill(openmetrics: str | Path, data_dir: Path, *, timeout: float = 120) -> None:
    """Turn OpenMetrics text (or a file of it) into TSDB blocks under ``data_dir``.

    ``--max-block-duration`` lets promtool write a few long blocks instead of one per two hours
    (it reads the whole file once per block range)."""
    _, promtool = require_prometheus()
    if isinstance(openmetrics, Path):
        source = openmetrics
    else:
        source = data_dir.parent / f"{data_dir.name}.om"
        source.write_text(openmetrics)
    done = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            "--max-block-duration=72h",
            str(source),
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"promtool could not backfill {source} (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM the server if pytest dies without running its teardown (kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class RunningPrometheus:
    """A Prometheus started by ``start_prometheus``; ``stop()`` ends it (idempotent)."""

    url: str  # http://127.0.0.1:PORT, no trailing slash
    port: int
    data_dir: Path
    log: Path
    process: subprocess.Popen[bytes]
    span: tuple[float, float]  # first and last backfilled sample, unix seconds
    args: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; waits for the process to end."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def query_range(
        self, expr: str, start: float, end: float, step: float = 30
    ) -> list[dict[str, Any]]:
        """``query_range(self.url, ...)``."""
        return query_range(self.url, expr, start, end, step)

    def query(self, expr: str, at: float) -> dict[str, Any]:
        """``query(self.url, ...)``."""
        return query(self.url, expr, at)


def start_prometheus(
    openmetrics: str | Path,
    workdir: Path,
    *,
    lookback_delta: str | None = None,
    extra_args: tuple[str, ...] = (),
    ready_timeout: float = 30,
    verify: bool = True,
) -> RunningPrometheus:
    """Backfill ``openmetrics`` into ``workdir/data`` and start a real Prometheus on a free
    loopback port over it; returns once ``/-/ready`` answers 200 and (``verify``) a range
    query over the data's span returns series. The caller must ``stop()`` it (the fixtures and
    ``prometheus_serving`` do). ``lookback_delta``: ``--query.lookback-delta`` (e.g. ``"1m"``)."""
    prometheus, _ = require_prometheus()
    workdir.mkdir(parents=True, exist_ok=True)
    text = openmetrics.read_text() if isinstance(openmetrics, Path) else openmetrics
    span = time_span(text)
    data_dir = workdir / "data"
    backfill(openmetrics, data_dir)
    config = workdir / "prometheus.yml"
    config.write_text(CONFIG)
    log = workdir / "prometheus.log"

    for attempt in range(3):  # another process may take the free port before Prometheus does
        port = free_port()
        while port == PACKAGED_PORT:
            port = free_port()
        args = [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data_dir}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            *([f"--query.lookback-delta={lookback_delta}"] if lookback_delta else []),
            *extra_args,
        ]
        with log.open("ab") as sink:
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        server = RunningPrometheus(
            f"http://127.0.0.1:{port}", port, data_dir, log, process, span, args
        )
        try:
            if _wait_ready(server, ready_timeout):
                break
        except BaseException:
            server.stop()
            raise
        server.stop()
        if "address already in use" not in server.log_tail() or attempt == 2:
            raise RuntimeError(
                f"prometheus did not become ready on port {port} within {ready_timeout} s:\n"
                f"{server.log_tail()}"
            )
    if verify:
        try:
            _verify(server)
        except BaseException:
            server.stop()
            raise
    return server


def _wait_ready(server: RunningPrometheus, timeout: float) -> bool:
    """True once ``/-/ready`` answers 200; False if the process ended first or time ran out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{server.url}/-/ready").status_code == 200:
                    return True
            time.sleep(0.05)
    return False


def _verify(server: RunningPrometheus) -> None:
    """The backfilled blocks answer: a range query over the whole span counts some series."""
    low, high = server.span
    step = max(60.0, (high - low) / 1000)
    result = query_range(server.url, 'count({__name__=~".+"})', low, high, step)
    if not result or not result[0]["values"]:
        raise RuntimeError(
            f"prometheus on {server.url} answers no series over the backfilled span "
            f"{low:.0f}..{high:.0f}:\n{server.log_tail()}"
        )


@contextlib.contextmanager
def prometheus_serving(openmetrics: str | Path, workdir: Path, **options: Any) -> Iterator[str]:
    """``start_prometheus`` for the block: yields the base URL, stops the server at the end
    (also when the block raises)."""
    server = start_prometheus(openmetrics, workdir, **options)
    try:
        yield server.url
    finally:
        server.stop()


# ------------------------------------------------------------------ reading it back


def _answer(response: httpx.Response) -> Any:
    body = response.json()
    if response.status_code != 200 or body.get("status") != "success":
        raise AssertionError(f"{response.request.url}: {response.status_code} {body}")
    return body["data"]


def query_range(
    url: str, expr: str, start: float, end: float, step: float = 30
) -> list[dict[str, Any]]:
    """``GET /api/v1/query_range``'s result list (``[{"metric": {...}, "values": [[t, "v"],
    ...]}]``); an error answer raises AssertionError."""
    with httpx.Client(timeout=30) as client:
        response = client.get(
            f"{url}/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": step},
        )
    data = _answer(response)
    assert data["resultType"] == "matrix", data
    return list(data["result"])


def query(url: str, expr: str, at: float) -> dict[str, Any]:
    """``GET /api/v1/query``'s data (``resultType`` and ``result``) at ``at``."""
    with httpx.Client(timeout=30) as client:
        response = client.get(f"{url}/api/v1/query", params={"query": expr, "time": at})
    return dict(_answer(response))


def values(result: list[dict[str, Any]], **labels: str) -> list[tuple[float, float]]:
    """The (time, value) pairs of the one series in ``result`` whose labels include
    ``labels``."""
    found = [r for r in result if all(r["metric"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{len(found)} series match {labels}"
    return [(float(t), float(v)) for t, v in found[0].get("values", [])]


# ------------------------------------------------------------------ misbehaving endpoints

EMPTY_MATRIX = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
JUNK = b"<html><body>502 Bad Gateway</body></html>\x00\xff{"
BEHAVIOURS = ("slow", "error", "junk", "huge")


@dataclass
class _Behaviour:
    mode: str
    delay: float
    status: int
    error_type: str
    error: str
    body: bytes
    content_type: str
    size: int
    content_length: bool
    requests: list[str] | None
    stop: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        b = self.server.behaviour
        if b.requests is not None:
            b.requests.append(f"{self.command} {self.path}")
        try:
            if b.mode == "slow":
                b.stop.wait(b.delay)
                self._send(200, b.body, "application/json")
            elif b.mode == "error":
                body = json.dumps(
                    {"status": "error", "errorType": b.error_type, "error": b.error}
                ).encode()
                self._send(b.status, body, "application/json")
            elif b.mode == "junk":
                self._send(200, b.body, b.content_type)
            else:
                self._huge(b)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: fine
            pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _huge(self, b: _Behaviour) -> None:
        """A well-formed success answer of about ``size`` bytes: one series with very many
        samples, written in 64 KiB pieces (never all in memory)."""
        head = (
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":'
            b'{"__name__":"DCGM_FI_DEV_GPU_TEMP","Hostname":"huge","gpu":"0"},"values":['
        )
        tail = b"]}]}}"
        sample = b'[1741600800,"60"],'
        count = max(1, (b.size - len(head) - len(tail)) // len(sample))
        last = b'[1741600800,"60"]'
        total = len(head) + (count - 1) * len(sample) + len(last) + len(tail)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if b.content_length:
            self.send_header("Content-Length", str(total))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(head)
        per_chunk = 65536 // len(sample)
        left = count - 1
        while left > 0 and not b.stop.is_set():
            n = min(per_chunk, left)
            self.wfile.write(sample * n)
            left -= n
        self.wfile.write(last + tail)
        if not b.content_length:
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    behaviour: _Behaviour


@contextlib.contextmanager
def misbehaving_endpoint(
    mode: str,
    *,
    delay: float = 5.0,
    status: int = 503,
    error_type: str = "unavailable",
    error: str = "the query engine is overloaded",
    body: bytes | None = None,
    content_type: str = "application/json",
    size: int = 64 * 1024 * 1024,
    content_length: bool = True,
    requests: list[str] | None = None,
) -> Iterator[str]:
    """A local HTTP server that answers every GET or POST, on any path, one way; yields its
    base URL (``http://127.0.0.1:PORT``).

    * ``"slow"``: waits ``delay`` seconds, then answers 200 with ``body`` (by default an
      empty success matrix); the wait ends early when the block ends;
    * ``"error"``: ``status`` (500, 503, 422...) with ``{"status":"error","errorType":
      error_type,"error":error}``;
    * ``"junk"``: 200 with ``body`` as ``content_type`` (by default ``JUNK``, HTML and stray
      bytes, labelled JSON);
    * ``"huge"``: 200 with a valid success body of about ``size`` bytes (one series with
      millions of samples), with a Content-Length unless ``content_length`` is False.

    ``requests``, if given, collects ``"METHOD /path?query"`` of each request."""
    if mode not in BEHAVIOURS:
        raise ValueError(f"mode must be one of {BEHAVIOURS}, not {mode!r}")
    if body is None:
        body = EMPTY_MATRIX if mode == "slow" else JUNK
    behaviour = _Behaviour(
        mode, delay, status, error_type, error, body, content_type, size, content_length, requests
    )
    server = _Server(("127.0.0.1", 0), _Handler)
    server.behaviour = behaviour
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name=f"misbehaving-{mode}", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        behaviour.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
