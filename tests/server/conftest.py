"""Shared fixtures of the server tests: a verdict store made by the real engine (``sattr demo``
over the sample bundles, once per session) with a few more verdicts saved into a copy of it,
apps over it, and a small HTML reader for the pages.

The copy adds, through ``Store.save`` (the worker's path):

* ``HOSTILE``: mallory's job whose summary, job name and symptom line carry HTML and script;
* ``NOBODY``: an array task of the local user ``nobody`` (so that a non-administrator, named
  by a trusted proxy header, has one job), with a chain line about another job's process;
* ``FLEET_BAD``: six failed jobs of three users blamed on ``gpu-f07``, and sixty passing runs on
  its eleven partition peers: the fleet view finds ``gpu-f07`` suspect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import pwd
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from attribution.config import Config
from attribution.model import ChainEntry, Responsible, Verdict
from attribution.server.app import create_app
from attribution.store import Store
from attribution.verdictjson import verdict_from_dict
from tests.conftest import DemoStore

TOKEN = "test-token-7f3a9c"
PROXY_HEADER = "X-Remote-User"
LOOPBACK = ("127.0.0.1", 50000)  # a peer the default proxy_addresses trust
BASE_JOB = "809251"  # a demo job: an NVSwitch fatal error on gpu-a01 (hardware)

HOSTILE_SUMMARY = 'Crashed <script>alert("summary")</script> & "quoted"'
HOSTILE_LINE = '<script>alert("line")</script><img src=x onerror="alert(1)">'
HOSTILE_NAME = '"><script>alert("name")</script>'
FOREIGN_LINE = "NVRM: Xid 31 pid=777 name=someone-elses-training"
FLEET_NODE = "gpu-f07"
FLEET_PEERS = tuple(f"gpu-f{i:02d}" for i in range(1, 13) if i != 7)
FLEET_PARTITION = "fleet-a"
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)  # the extra jobs end around here


@dataclass(frozen=True)
class Extra:
    """The keys of the verdicts the page store adds to the demo's."""

    hostile: str
    nobody: str
    nobody_display: str
    fleet_bad: tuple[str, ...]


@dataclass(frozen=True)
class PageStore:
    db: Path
    extra: Extra


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no local user {name!r} in /etc/passwd to log in as")


def _moved(
    entries: tuple[ChainEntry, ...], nodes: dict[str, str], **changes: Any
) -> tuple[ChainEntry, ...]:
    return tuple(
        dataclasses.replace(e, nodes=tuple(nodes.get(n, n) for n in e.nodes), **changes)
        for e in entries
    )


def _extra_verdicts(base: Verdict) -> tuple[list[tuple[Verdict, dict[str, Any]]], Extra]:
    """The verdicts to add (each with ``Store.save``'s keyword arguments) and their keys."""
    job = base.job
    out: list[tuple[Verdict, dict[str, Any]]] = []

    hostile_job = dataclasses.replace(
        job,
        job_id="666",
        cluster="evil",
        user="mallory",
        uid=4321,
        name=HOSTILE_NAME,
        start=NOW - timedelta(days=3, hours=2),
        end=NOW - timedelta(days=3),
    )
    chain = list(base.symptom_chain)
    chain[0] = dataclasses.replace(chain[0], example=HOSTILE_LINE, symptom="<b>bold</b> symptom")
    hostile = dataclasses.replace(
        base, job=hostile_job, summary=HOSTILE_SUMMARY, symptom_chain=tuple(chain)
    )
    out.append(
        (hostile, {"admin_comment_status": "written", "admin_comment": "attribution: <i>x</i>"})
    )

    nobody = _user("nobody")
    nobody_job = dataclasses.replace(
        job,
        job_id="4244",
        array_job_id="4240",
        array_task_id="2",
        cluster="c9",
        user=nobody.pw_name,
        uid=nobody.pw_uid,
        start=NOW - timedelta(days=2, hours=1),
        end=NOW - timedelta(days=2),
    )
    chain = list(base.symptom_chain)
    chain.append(
        dataclasses.replace(chain[-1], example=FOREIGN_LINE, owner="foreign", role=chain[-1].role)
    )
    mine = dataclasses.replace(base, job=nobody_job, symptom_chain=tuple(chain))
    out.append((mine, {}))

    fleet_keys = []
    move = {"gpu-a01": FLEET_NODE, "gpu-a02": FLEET_PEERS[0]}
    for i, user in enumerate(("ann", "bob", "cid", "ann", "bob", "cid")):
        end = NOW - timedelta(days=10 - i, hours=i)
        fleet_job = dataclasses.replace(
            job,
            job_id=str(70000 + i),
            cluster="fleet",
            user=user,
            uid=None,
            partition=FLEET_PARTITION,
            nodes=(FLEET_NODE, FLEET_PEERS[0]),
            nodelist=f"{FLEET_NODE},{FLEET_PEERS[0]}",
            start=end - timedelta(hours=1),
            end=end,
        )
        verdict = dataclasses.replace(
            base,
            job=fleet_job,
            responsible=(Responsible(FLEET_NODE, "gpu", "0000:3b:00.0", confirmed_by="kernel"),),
            summary=f"GPU fault on {FLEET_NODE}.",
            symptom_chain=_moved(base.symptom_chain, move),
        )
        out.append((verdict, {}))
        fleet_keys.append(fleet_job.key)
    extra = Extra(
        hostile=hostile_job.key,
        nobody=nobody_job.key,
        nobody_display=nobody_job.display_id,
        fleet_bad=tuple(fleet_keys),
    )
    return out, extra


@pytest.fixture(scope="session")
def demo_db(demo_store: DemoStore) -> Path:
    """The store ``sattr demo`` wrote over the sample bundles (read it only)."""
    assert demo_store.result.exit_code == 0, demo_store.result.output
    return demo_store.db


@pytest.fixture(scope="session")
def page_store(demo_store: DemoStore, tmp_path_factory: pytest.TempPathFactory) -> PageStore:
    """A copy of the demo store with the hostile, ``nobody``'s and the fleet's verdicts."""
    db = demo_store.copy_to(tmp_path_factory.mktemp("pages"))
    with Store(db) as store:
        found = store.find(BASE_JOB)
        assert found, f"the demo store has no job {BASE_JOB}"
        added, extra = _extra_verdicts(verdict_from_dict(found[0]))
        for verdict, options in added:
            store.save(verdict, **options)
        base = verdict_from_dict(found[0]).job
        for i in range(60):
            node = FLEET_PEERS[i % len(FLEET_PEERS)]
            end = NOW - timedelta(days=12, hours=-3 * i)
            store.save_run(
                dataclasses.replace(
                    base,
                    job_id=str(80000 + i),
                    cluster="fleet",
                    user=("ann", "bob", "cid", "dee")[i % 4],
                    uid=None,
                    partition=FLEET_PARTITION,
                    state="COMPLETED",
                    exit_code="0:0",
                    nodes=(node,),
                    nodelist=node,
                    start=end - timedelta(hours=2),
                    end=end,
                )
            )
        # gpu-f07 also ran jobs that passed: it fails six of the eleven it ran
        for i in range(5):
            end = NOW - timedelta(days=11, hours=i)
            store.save_run(
                dataclasses.replace(
                    base,
                    job_id=str(81000 + i),
                    cluster="fleet",
                    user="dee",
                    uid=None,
                    partition=FLEET_PARTITION,
                    state="COMPLETED",
                    exit_code="0:0",
                    nodes=(FLEET_NODE,),
                    nodelist=FLEET_NODE,
                    start=end - timedelta(hours=2),
                    end=end,
                )
            )
    return PageStore(db, extra)


def make_app(db: Path, **server: Any) -> FastAPI:
    """``sattr serve``'s application over ``db`` with the test token and ``server`` settings
    (no ruleset: the pages never diagnose)."""
    config = Config.model_validate({"server": server}) if server else Config()
    return create_app(config, db, None, token=TOKEN)


@pytest.fixture(scope="session")
def page_app(page_store: PageStore) -> FastAPI:
    """The application over the page store, trusting ``X-Remote-User`` from loopback."""
    return make_app(page_store.db, proxy_header=PROXY_HEADER)


@pytest.fixture
def admin_client(page_app: FastAPI) -> Iterator[TestClient]:
    """The server's token holder (who reads everything), by ``Authorization: Bearer``."""
    with TestClient(page_app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


@pytest.fixture
def nobody_client(page_app: FastAPI) -> Iterator[TestClient]:
    """The local user ``nobody``, named by the trusted proxy from a loopback address."""
    _user("nobody")
    with TestClient(page_app, client=LOOPBACK, headers={PROXY_HEADER: "nobody"}) as client:
        yield client


@pytest.fixture
def anonymous_client(page_app: FastAPI) -> Iterator[TestClient]:
    """No credential at all; redirects are not followed."""
    with TestClient(page_app, follow_redirects=False) as client:
        yield client


# ------------------------------------------------------------------ reading the pages


@dataclass
class Node:
    """An element of a parsed page: tag, attributes, children (elements and text)."""

    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        """The text inside, whitespace folded."""
        parts: list[str] = []

        def walk(node: Node) -> None:
            for child in node.children:
                if isinstance(child, str):
                    parts.append(child)
                else:
                    walk(child)

        walk(self)
        return " ".join(" ".join(parts).split())

    def iter(self, tag: str | None = None) -> Iterator[Node]:
        for child in self.children:
            if isinstance(child, Node):
                if tag is None or child.tag == tag:
                    yield child
                yield from child.iter(tag)

    def find(self, tag: str | None = None, **attrs: str) -> Node | None:
        for node in self.iter(tag):
            if all(node.attrs.get(k.rstrip("_")) == v for k, v in attrs.items()):
                return node
        return None

    def by_id(self, ident: str) -> Node:
        found = self.find(id=ident)
        assert found is not None, f"no element with id {ident!r} on the page"
        return found

    def has_class(self, name: str) -> bool:
        return name in self.attrs.get("class", "").split()


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    """The page as a tree of ``Node`` (the standard library's HTML tokenizer)."""
    builder = _Builder()
    builder.feed(page)
    builder.close()
    return builder.root


def table_rows(page: Node, ident: str) -> list[Node]:
    """The body rows of the table with id ``ident``."""
    body = page.by_id(ident).find("tbody")
    assert body is not None
    return [row for row in body.children if isinstance(row, Node) and row.tag == "tr"]


def listed_keys(page: Node) -> list[str]:
    """The store keys of the jobs the list page links to, in order."""
    keys = []
    for row in table_rows(page, "verdicts"):
        link = row.find("a")
        assert link is not None
        keys.append(html.unescape(link.attrs["href"]).rsplit("/jobs/", 1)[1])
    return keys


def free_port() -> int:
    """A loopback TCP port nothing listens on (at the moment of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def uvicorn_serving(app: FastAPI, **tls: str) -> Iterator[str]:
    """``app`` served by a real uvicorn on a free loopback port, in a thread, until the block
    ends; yields its base URL once it answers (``tls``: ``ssl_certfile``/``ssl_keyfile``)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off", **tls)  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            pytest.fail(f"uvicorn did not start on port {port} within 30 s")
        time.sleep(0.05)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
