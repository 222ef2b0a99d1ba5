"""An adversary's round against ``sattr serve`` and its client: access control, query
parameters, uploads, ``/metrics`` and ``sattr show``/``list`` against a hostile server.

Everything goes through the real application (FastAPI's TestClient, or uvicorn on a loopback
port), a real SQLite store written by ``Store.save``, real tar archives and the machine's
munged. The round found 15 attacks that succeeded (a user's verdict naming other users'
uids and job ids, a doubled proxy header, deep trees, negative sizes, damaged sparse maps,
64-bit offsets, uploads that stalled the event loop or cost unbounded time, a client that a
trickling server held forever or a malformed answer crashed, ...); each is fixed and its test
here passes. The other tests are attacks that were refused, kept so that they stay refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import pwd
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from attribution.cli import main
from attribution.config import Config
from attribution.model import Responsible, Verdict, verdict_to_dict
from attribution.munge import request_payload
from attribution.rules.compiled import RuleSet
from attribution.server.app import create_app
from attribution.server.upload import ZSTD_MAGIC
from attribution.store import Store
from tests.conftest import CASES, Diagnoses
from tests.server.conftest import uvicorn_serving
from tests.server.test_api import credential, munge_needed

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the backport upload.py reads zstd with
    from backports import zstd

TOKEN = "hostile-token-4d1e"
PROXY = "X-Remote-User"
LOOPBACK = ("127.0.0.1", 41000)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
AS_NOBODY = {PROXY: "nobody"}
NOBODY = pwd.getpwnam("nobody")
MALLORY_UID = 4321  # another user; needs no passwd entry
SECRET = "SECRET-SUMMARY-of-mallory"
SECRET_PARTITION = "mallory-private-partition"
# a shared node: the job's verdict has chain lines about another user's processes
FOREIGN_CASE = CASES / "blind10-shared-c01-cuda-oom-foreign-cgroup-oom-xid31"
MINE = "660001"  # nobody's job; mallory has a newer run under the same id on another cluster


@dataclasses.dataclass(frozen=True)
class Keys:
    """The store keys of the verdicts the hostile store holds."""

    mine: str
    twin: str  # mallory's run of MINE on another cluster
    secret: str  # mallory's array task 770000_1 (job 770001) with a SLUID
    legacy: str  # mallory's job 770002 stored without a uid


@dataclasses.dataclass(frozen=True)
class HostileStore:
    db: Path
    keys: Keys
    verdict: Verdict  # the foreign-lines verdict the jobs are made from


@pytest.fixture(scope="module")
def hostile(diagnosed: Diagnoses, tmp_path_factory: pytest.TempPathFactory) -> HostileStore:
    _, verdict = diagnosed(FOREIGN_CASE)
    base = verdict.job
    assert base.end is not None
    db = tmp_path_factory.mktemp("hostile") / "store.sqlite"
    mine = dataclasses.replace(
        base,
        job_id=MINE,
        cluster="c1",
        user="nobody",
        uid=NOBODY.pw_uid,
        sluid=None,
        array_job_id=None,
        array_task_id=None,
    )
    twin = dataclasses.replace(
        mine, cluster="c2", user="mallory", uid=MALLORY_UID, end=base.end + timedelta(days=1)
    )
    secret = dataclasses.replace(
        base,
        job_id="770001",
        cluster="c1",
        user="mallory",
        uid=MALLORY_UID,
        partition=SECRET_PARTITION,
        sluid="sMALLORY0001",
        array_job_id="770000",
        array_task_id="1",
    )
    legacy = dataclasses.replace(mine, job_id="770002", user="mallory", uid=None)
    with Store(db) as store:
        store.save(dataclasses.replace(verdict, job=mine))
        for job in (twin, secret, legacy):
            store.save(dataclasses.replace(verdict, job=job, summary=SECRET))
    return HostileStore(db, Keys(mine.key, twin.key, secret.key, legacy.key), verdict)


def make_app(db: Path, ruleset: RuleSet | None = None, **server: Any) -> FastAPI:
    config = Config.model_validate({"server": {"proxy_header": PROXY, **server}})
    return create_app(config, db, ruleset, token=TOKEN)


def client_for(app: FastAPI, peer: tuple[str, int] = LOOPBACK) -> TestClient:
    """Speaks HTTP to ``app`` from ``peer``; a crash is a 500 answer, as a real server gives."""
    return TestClient(app, client=peer, raise_server_exceptions=False)


@pytest.fixture(scope="module")
def app(hostile: HostileStore, ruleset: RuleSet) -> FastAPI:
    return make_app(hostile.db, ruleset)


@pytest.fixture
def http(app: FastAPI) -> TestClient:
    return client_for(app)


def leaks(text: str, asked: str = "") -> list[str]:
    """What of mallory's jobs ``text`` shows (beyond the job id ``asked``, echoed back)."""
    if asked:
        text = text.replace(unquote(asked).rstrip("/"), "")
    return [s for s in (SECRET, SECRET_PARTITION, "mallory", "sMALLORY0001") if s in text]


# ------------------------------------------------------------------ access control


def test_the_store_holds_what_the_attacks_aim_at(http: TestClient, hostile: HostileStore) -> None:
    everything = http.get("/api/v1/jobs?since=all", headers=ADMIN).json()
    assert {r["key"] for r in everything["items"]} == set(dataclasses.astuple(hostile.keys))
    assert http.get("/api/v1/jobs/770000_1", headers=ADMIN).json()["summary"] == SECRET


@pytest.mark.parametrize(
    "job",
    [
        "770001",
        "770000_1",
        "sMALLORY0001",
        "%37%37%30%30%30%31",  # 770001, percent-encoded
        "770000_%31",
        "770002",  # stored without a uid
        "770001/",  # a trailing slash
    ],
)
@pytest.mark.parametrize("route", ["/api/v1/jobs/{}", "/api/v1/jobs/{}/record", "/jobs/{}"])
def test_another_users_job_is_refused_under_every_name(
    http: TestClient, job: str, route: str
) -> None:
    answer = http.get(route.format(job), headers=AS_NOBODY)
    # a trailing slash names no route (404) or is redirected to the job (403)
    assert answer.status_code in ((403, 404) if job.endswith("/") else (403,)), answer.text[:300]
    assert leaks(answer.text, job) == []  # that the job exists, nothing more


def test_another_users_run_key_is_refused(http: TestClient, hostile: HostileStore) -> None:
    for key in (hostile.keys.twin, hostile.keys.secret, hostile.keys.legacy):
        answer = http.get(f"/api/v1/jobs/{key}", headers=AS_NOBODY)
        assert answer.status_code == 403
        assert leaks(answer.text, key) == []


def test_a_shared_job_id_gives_the_callers_run_and_hides_the_other(
    http: TestClient, hostile: HostileStore
) -> None:
    mine = http.get(f"/api/v1/jobs/{MINE}/record", headers=AS_NOBODY)
    assert mine.status_code == 200
    assert mine.json()["job"]["user"] == "nobody"  # not mallory's newer run
    assert mine.json()["others"] == []
    assert leaks(mine.text) == []
    seen_by_admin = http.get(f"/api/v1/jobs/{MINE}/record", headers=ADMIN).json()
    assert seen_by_admin["job"]["user"] == "mallory"  # the newest run
    assert seen_by_admin["others"] == [hostile.keys.mine]


@pytest.mark.parametrize(
    "query",
    [
        "since=all",
        "since=all&user=mallory",
        f"since=all&partition={SECRET_PARTITION}",
        "since=all&node=gpu[000-999],c01",
        "since=all&cause=cuda-oom",
        "since=all&sub_domain=APPLICATION",
        "since=all&state=FAILED",
        "since=all&user=nobody&user=mallory",
        "since=all&user=%27%20OR%20%271%27%3D%271",
        "since=all&limit=1000&offset=0",
    ],
)
def test_filters_never_widen_a_users_view(http: TestClient, query: str) -> None:
    page = http.get(f"/api/v1/jobs?{query}", headers=AS_NOBODY)
    assert page.status_code == 200, page.text[:300]
    body = page.json()
    assert all(row["uid"] == NOBODY.pw_uid for row in body["items"])
    assert body["total"] == len(body["items"]) <= 1
    assert leaks(page.text) == []


def test_the_list_page_and_its_charts_show_only_the_callers_jobs(
    http: TestClient, hostile: HostileStore
) -> None:
    for query in ("since=all", "since=all&user=mallory", f"partition={SECRET_PARTITION}"):
        page = http.get(f"/?{query}", headers=AS_NOBODY)
        assert page.status_code == 200
        assert SECRET not in page.text
        for key in (hostile.keys.twin, hostile.keys.secret, hostile.keys.legacy):
            assert key not in page.text


@pytest.mark.parametrize("path", ["/api/v1/nodes", "/api/v1/incidents", "/fleet"])
def test_the_fleet_is_for_administrators_only(http: TestClient, path: str) -> None:
    for query in ("", "?since=all", "?since=all&partition=" + SECRET_PARTITION):
        assert http.get(path + query, headers=AS_NOBODY).status_code == 403
    assert http.get(path + "?since=all", headers=ADMIN).status_code == 200


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "PUT", "DELETE"])
def test_other_methods_give_no_verdict(http: TestClient, method: str) -> None:
    for path in ("/api/v1/jobs/770001", f"/api/v1/jobs/{MINE}", "/api/v1/jobs"):
        answer = http.request(method, path, headers=AS_NOBODY)
        assert answer.status_code == 405
        assert leaks(answer.text) == [] and "nobody" not in answer.text


def test_lines_about_another_job_tell_its_owner_nothing_about_that_job(
    http: TestClient, hostile: HostileStore
) -> None:
    full = http.get(f"/api/v1/jobs/{hostile.keys.mine}", headers=ADMIN).json()
    theirs = [e for e in full["symptom_chain"] + full["ignored"] if e.get("owner") == "foreign"]
    other_jobs = {j for n in full["ownership"]["nodes"].values() for j in n.get("other_jobs", ())}
    other_uids = {m for e in theirs for m in re.findall(r"uid[ _](\d+)", e.get("note") or "")}
    assert theirs and other_jobs and other_uids  # the case does name the other job
    mine = http.get(f"/api/v1/jobs/{hostile.keys.mine}", headers=AS_NOBODY).json()
    hidden = [e for e in mine["symptom_chain"] + mine["ignored"] if e.get("owner") == "foreign"]
    assert len(hidden) == len(theirs)  # the lines keep their place
    shown = json.dumps(hidden) + json.dumps(mine["ownership"])
    for secret in {*(f"job_{j}" for j in other_jobs), *other_jobs, *other_uids}:
        assert f'"{secret}"' not in shown and secret not in json.dumps(hidden), secret


# ------------------------------------------------------------------ who is asking


@pytest.mark.parametrize("peer", ["10.1.2.3", "127.0.0.2", "192.168.0.1", "::2"])
def test_the_proxy_header_counts_only_from_trusted_peers(app: FastAPI, peer: str) -> None:
    stranger = client_for(app, (peer, 5555))
    for name in ("root", "nobody"):
        answer = stranger.get("/api/v1/whoami", headers={PROXY: name})
        assert answer.status_code == 401
        assert stranger.get("/api/v1/jobs/770001", headers={PROXY: "root"}).status_code == 401
    faked = stranger.get("/api/v1/whoami", headers={PROXY: "root", "X-Forwarded-For": "127.0.0.1"})
    assert faked.status_code == 401


def test_the_proxy_header_name_is_matched_exactly(http: TestClient) -> None:
    lower = http.get("/api/v1/whoami", headers={PROXY.lower(): "nobody"}).json()
    assert lower == {"uid": NOBODY.pw_uid, "user": "nobody", "admin": False, "method": "proxy"}
    underscored = http.get("/api/v1/whoami", headers={PROXY.replace("-", "_"): "root"})
    assert underscored.status_code == 401


@pytest.mark.parametrize(
    "name", ["", "no body", "nobody\x00root", "0", "root, nobody", "*", "nobody;root", "%"]
)
def test_a_proxy_user_that_is_no_account_is_refused(http: TestClient, name: str) -> None:
    answer = http.get("/api/v1/whoami", headers={PROXY: name, **ADMIN})
    assert answer.status_code == 401  # never passed over for the token it came with
    assert "\n" not in answer.json()["detail"]


def test_two_proxy_headers_are_refused(http: TestClient) -> None:
    for first, second in (("root", "nobody"), ("nobody", "root")):
        answer = http.get("/api/v1/whoami", headers=[(PROXY, first), (PROXY, second)])
        assert answer.status_code == 401, answer.text


def test_an_ipv4_mapped_loopback_proxy_is_trusted(app: FastAPI) -> None:
    mapped = client_for(app, ("::ffff:127.0.0.1", 5555))
    answer = mapped.get("/api/v1/whoami", headers=AS_NOBODY)
    assert answer.status_code == 200
    assert answer.json()["user"] == "nobody"


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN.upper()}"},
        {"Authorization": f"Bearer {TOKEN[:1]}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"MUNGE {TOKEN}"},
        {"Cookie": "sattr_token=wrong"},
    ],
)
def test_a_token_that_is_not_the_token_is_refused(
    http: TestClient, headers: dict[str, str]
) -> None:
    for path in ("/api/v1/whoami", "/api/v1/jobs/770001", "/api/v1/nodes"):
        assert http.get(path, headers=headers).status_code == 401
    assert http.get(f"/api/v1/whoami?token={TOKEN}x").status_code == 401
    assert http.get(f"/api/v1/whoami?token={TOKEN}&token=x").status_code == 401


def munge_as(user: str | None, method: str, path: str) -> dict[str, str]:
    return {"Authorization": f"MUNGE {credential(request_payload(method, path), user)}"}


@munge_needed
def test_a_munge_credential_is_good_for_its_own_request_once(
    http: TestClient, hostile: HostileStore
) -> None:
    mine = f"/api/v1/jobs/{hostile.keys.mine}"
    used = munge_as("nobody", "GET", mine)
    assert http.get(mine, headers=used).status_code == 200
    assert http.get(mine, headers=used).status_code == 401  # replayed
    cases = [
        (("GET", mine), ("GET", "/api/v1/jobs/770001")),  # another path
        (("GET", mine), ("GET", mine + "/record")),
        (("GET", "/api/v1/jobs?since=all&limit=5"), ("GET", "/api/v1/jobs?limit=5&since=all")),
        (("GET", "/api/v1/jobs?since=all"), ("GET", "/api/v1/jobs?since=all&user=mallory")),
        (("POST", mine), ("GET", mine)),  # another method
        (("get", mine), ("GET", mine)),
    ]
    for (made_method, made_for), (method, path) in cases:
        cred = credential(f"sattr:{made_method} {made_for}", "nobody")
        answer = http.request(method, path, headers={"Authorization": f"MUNGE {cred}"})
        assert answer.status_code == 401, (made_for, path)
        assert "another request" in answer.json()["detail"]
    for payload in ("", "GET " + mine, request_payload("GET", mine) + "\n"):
        cred = credential(payload, "nobody")
        assert http.get(mine, headers={"Authorization": f"MUNGE {cred}"}).status_code == 401


@munge_needed
def test_a_munge_user_is_refused_another_users_job(http: TestClient) -> None:
    for path in ("/api/v1/jobs/770001", "/api/v1/jobs/sMALLORY0001/record", "/jobs/770000_1"):
        answer = http.get(path, headers=munge_as("nobody", "GET", path))
        assert answer.status_code == 403
        assert leaks(answer.text, path.split("/")[-2 if path.endswith("/record") else -1]) == []
    path = "/api/v1/jobs?since=all&user=mallory"
    page = http.get(path, headers=munge_as("nobody", "GET", path)).json()
    assert page["total"] == 0


@munge_needed
@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_uid_without_a_passwd_entry_sees_nothing_and_is_no_admin(http: TestClient) -> None:
    uid = 43210
    assert not any(p.pw_uid == uid for p in pwd.getpwall())

    def as_uid(path: str) -> dict[str, str]:
        made = subprocess.run(
            [*("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"),
             *("munge", "--string", request_payload("GET", path))],
            capture_output=True, check=True, timeout=10,
        )  # fmt: skip
        return {"Authorization": f"MUNGE {made.stdout.decode().strip()}"}

    me = http.get("/api/v1/whoami", headers=as_uid("/api/v1/whoami")).json()
    assert me == {"uid": uid, "user": None, "admin": False, "method": "munge"}
    path = "/api/v1/jobs?since=all"
    assert http.get(path, headers=as_uid(path)).json()["total"] == 0
    assert http.get("/api/v1/jobs/770002", headers=as_uid("/api/v1/jobs/770002")).status_code == 403


# ------------------------------------------------------------------ query parameters


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("limit=0", 422),
        ("limit=1001", 422),
        ("limit=-1", 422),
        ("limit=1e3", 422),
        ("offset=-1", 422),
        ("offset=9223372036854775807", 422),
        ("since=-5d", 422),
        ("since=nan", 422),
        ("since=inf", 422),
        ("since=1e9d", 422),
        ("since=%00", 422),
        ("since=" + "9" * 5000 + "d", 200),
        ("since=99999999999d", 200),
        ("until=2025-13-45", 422),
        ("since=2025-07-07T00:00:00%2B99:00", 422),
        ("node=n[0-99999999]", 422),
        ("node=n[0-9][0-9][0-9][0-9][0-9][0-9][0-9]", 422),
        ("node=n[0-9999]", 200),
        ("node=" + "9" * 50, 422),
        ("node=[", 422),
        ("node=%00", 200),
        ("sub_domain=HARDWARE", 200),
        ("sub_domain=hardware%00", 422),
        ("sub_domain=bogus", 422),
        ("state=%27%3B%20DROP%20TABLE%20verdicts%3B--", 200),
        ("cause=%27%20OR%201%3D1--", 200),
        ("partition=" + "x" * 20000, 200),
    ],
)
def test_list_parameters_are_answered_never_crashed(
    http: TestClient, query: str, status: int
) -> None:
    for headers in (ADMIN, AS_NOBODY):
        started = time.monotonic()
        answer = http.get(f"/api/v1/jobs?{query}", headers=headers)
        assert answer.status_code == status, answer.text[:300]
        assert time.monotonic() - started < 3
    assert http.get("/api/v1/jobs?since=all", headers=ADMIN).json()["total"] == 4  # still there


@pytest.mark.parametrize("offset", [2**63, 10**30])
def test_an_offset_past_any_integer_is_a_422(http: TestClient, offset: int) -> None:
    answer = http.get(f"/api/v1/jobs?offset={offset}", headers=ADMIN)
    assert answer.status_code in (200, 422), answer.text


# ------------------------------------------------------------------ uploads

JOB = {
    "cluster": "c",
    "job_id": "1",
    "state": "FAILED",
    "exit_code": "1:0",
    "nodes": "n1",
    "start": "2025-01-01T00:00:00",
    "end": "2025-01-01T01:00:00",
    "user": "u",
}
Member = tuple[tarfile.TarInfo, bytes | None]


def member(
    name: str, data: bytes | None = b"", kind: bytes = tarfile.REGTYPE, **fields: Any
) -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    return info, data


def tar_of(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def job_json(job: Any = None) -> Member:
    data = job if isinstance(job, bytes) else json.dumps(JOB if job is None else job).encode()
    return member("job.json", data)


def bundle(*extra: Member, job: Any = None) -> bytes:
    return tar_of([job_json(job), *extra])


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the server's temporary upload directories go for this test (checked empty after)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture(scope="module")
def small(hostile: HostileStore, ruleset: RuleSet) -> FastAPI:
    """A server with small upload limits: 1 MiB sent, 4 MiB unpacked."""
    return make_app(hostile.db, ruleset, max_upload="1MiB", max_unpacked="4MiB")


def upload(
    app: FastAPI, body: bytes | Iterator[bytes], headers: dict[str, str] | None = None
) -> httpx.Response:
    answer: httpx.Response = client_for(app).post(
        "/api/v1/diagnose", content=body, headers={**AS_NOBODY, **(headers or {})}
    )
    return answer


def refused(answer: httpx.Response, status: int, words: str) -> None:
    assert answer.status_code == status, answer.text[:300]
    detail = answer.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert words in detail, detail


def test_a_plain_bundle_is_diagnosed(small: FastAPI, scratch: Path) -> None:
    for body in (bundle(), gzip.compress(bundle()), zstd.compress(bundle())):
        answer = upload(small, body)
        assert answer.status_code == 200, answer.text[:300]
        assert answer.json()["job"]["job_id"] == "1"
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("members", "status", "words"),
    [
        ([member("x", None, tarfile.SYMTYPE, linkname="/etc/passwd")], 400, "symbolic link"),
        ([member("x", None, tarfile.LNKTYPE, linkname="/etc/passwd")], 400, "hard link"),
        ([member("x", None, tarfile.LNKTYPE, linkname="job.json")], 400, "hard link"),
        ([member("../../escaped", b"x")], 400, "'..'"),
        ([member("nodes/../../escaped", b"x")], 400, "'..'"),
        ([member("/tmp/escaped", b"x")], 400, "absolute"),
        ([member("C:evil", b"x")], 400, "drive letter"),
        ([member("a\\..\\b", b"x")], 400, "backslash"),
        ([member("dev", None, tarfile.CHRTYPE, devmajor=1, devminor=3)], 400, "device"),
        ([member("blk", None, tarfile.BLKTYPE, devmajor=8, devminor=0)], 400, "device"),
        ([member("fifo", None, tarfile.FIFOTYPE)], 400, "FIFO"),
        ([member("sparse", None, tarfile.GNUTYPE_SPARSE)], 400, "sparse"),
        ([member("job.json", b"{}")], 400, "duplicate"),
        ([member("d", None, tarfile.DIRTYPE), member("d", b"x")], 400, "directory"),
        ([member("d", b"x"), member("d", None, tarfile.DIRTYPE)], 400, "duplicate"),
        ([member("d", b"x"), member("d/e", b"x")], 400, "a file"),
        ([member("ok", b"x", pax_headers={"path": "../../etc/x"})], 400, "'..'"),
        ([member("ok", b"x", pax_headers={"path": "/etc/x"})], 400, "absolute"),
        ([member("big", b"x", pax_headers={"size": "99999999999999"})], 413, "bytes"),
        ([member("x" * 300, b"x")], 400, "cannot be written"),
        ([member("c", b"x", pax_headers={"comment": "y" * (2 << 20)})], 413, "header"),
    ],
)
def test_hostile_members_are_refused_and_nothing_is_left(
    app: FastAPI, scratch: Path, members: list[Member], status: int, words: str
) -> None:
    before = Path("/etc/passwd").read_bytes()
    started = time.monotonic()
    refused(upload(app, bundle(*members)), status, words)
    assert time.monotonic() - started < 5
    assert list(scratch.iterdir()) == []
    assert Path("/etc/passwd").read_bytes() == before


def test_a_gnu_long_name_cannot_escape_either(app: FastAPI, scratch: Path) -> None:
    body = tar_of([job_json(), member("../" * 40 + "etc/x", b"x")], fmt=tarfile.GNU_FORMAT)
    refused(upload(app, body), 400, "'..'")
    assert list(scratch.iterdir()) == []


def test_a_nested_archive_is_a_file_not_unpacked(app: FastAPI, scratch: Path) -> None:
    inner = gzip.compress(bundle(member("../../escaped", b"x")))
    answer = upload(app, bundle(member("inner.tar.gz", inner)))
    assert answer.status_code == 200
    assert list(scratch.iterdir()) == []


def _zeros_tar(size: int) -> bytes:
    return bundle(member("nodes/n1/kernel.log", bytes(size)))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: gzip.compress(_zeros_tar(8 << 20), 9), "unpacks to more than"),
        (lambda: zstd.compress(_zeros_tar(8 << 20)), "unpacks to more than"),
        (
            lambda: gzip.compress(bundle(*(member(f"f{i}", bytes(1 << 19)) for i in range(12)))),
            "unpacks to more than",
        ),
        (  # headers and padding count too: 10 pax comments of 900 KiB
            lambda: gzip.compress(
                bundle(
                    *(
                        member(f"f{i}", b"x", pax_headers={"c": "a" * (900 << 10)})
                        for i in range(10)
                    )
                )
            ),
            "unpacks to more than",
        ),
        (lambda: os.urandom(2 << 20), "over the limit"),
    ],
)
def test_bombs_stop_at_the_limits(
    small: FastAPI, scratch: Path, make: Callable[[], bytes], words: str
) -> None:
    body = make()
    assert len(body) < (2 << 20) + 1
    started = time.monotonic()
    refused(upload(small, body), 413, words)
    assert time.monotonic() - started < 5
    assert list(scratch.iterdir()) == []


def test_a_chunked_upload_over_the_limit_is_cut_off(small: FastAPI, scratch: Path) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 4 MiB, never announced
            sent += 64 << 10
            yield bytes(64 << 10)

    refused(upload(small, chunks()), 413, "over the limit")
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "empty upload"),
        (b"not a tar archive at all " * 40, "not a tar archive"),
        (bundle()[:700], "truncated"),
        (gzip.compress(bundle())[:-30], "gzip"),
        (gzip.compress(bundle()) + b"trailing garbage", "gzip"),
        (zstd.compress(bundle())[:-9], "zstd"),
        (tar_of([member("a/job.json", b"{}"), member("b/job.json", b"{}")]), "no job.json"),
        (tar_of([member("job.json", None, tarfile.DIRTYPE)]), "no job.json"),
    ],
)
def test_damaged_or_foreign_archives_are_400(
    app: FastAPI, scratch: Path, body: bytes, words: str
) -> None:
    refused(upload(app, body), 400, words)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("job", "words"),
    [
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"job_id": ' + b"9" * 5000 + b"}", "thousands of digits"),
        (b'{"job_id": "1", "exit_code": NaN, "start": Infinity}', "must be a finite number"),
        ({**JOB, "nodes": "n[0-99999999]"}, "more than 200,000 nodes"),
        ({**JOB, "nodes": "n[0-9][0-9][0-9][0-9][0-9][0-9][0-9]"}, "more than 200,000 nodes"),
        ({**JOB, "nodes": {"n1": 1}}, "nodes"),
        ({**JOB, "uid": 10**30}, "uid"),
        ({**JOB, "start": "9999-12-31T23:59:59"}, "not a time"),
        (b"[1, 2]", "JSON object"),
        (b"null", "JSON object"),
        (b'{"job_id": "\xff\xfe"}', "cannot read"),
        (json.dumps({**JOB, "pad": "x" * (17 << 20)}).encode(), "larger than 16 MiB"),
    ],
)
def test_a_hostile_job_record_is_a_400(app: FastAPI, scratch: Path, job: Any, words: str) -> None:
    started = time.monotonic()
    refused(upload(app, gzip.compress(bundle(job=job))), 400, words)
    assert time.monotonic() - started < 5
    assert list(scratch.iterdir()) == []


def test_a_negative_member_size_is_a_400(app: FastAPI, scratch: Path) -> None:
    answer = upload(app, bundle(member("neg", b"x", pax_headers={"size": "-5"})))
    assert answer.status_code == 400, answer.text[:300]


def test_a_damaged_sparse_map_is_a_400(app: FastAPI, scratch: Path) -> None:
    sparse = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "s"}
    answer = upload(app, bundle(member("s", b"x", pax_headers=sparse)))
    assert answer.status_code == 400, answer.text[:300]


def test_a_very_deep_tree_is_refused_or_cleaned_up(app: FastAPI, scratch: Path) -> None:
    try:
        answer = upload(app, bundle(member("/".join("d" * 1500) + "/x", b"x")))
        assert answer.status_code < 500, answer.text[:300]
        assert list(scratch.iterdir()) == []
    finally:  # rm, not rmtree: the tree is deeper than Python's recursion limit
        subprocess.run(["rm", "-rf", str(scratch)], check=True, timeout=60)


def test_a_zstd_stream_opening_with_a_skippable_frame_is_read(app: FastAPI, scratch: Path) -> None:
    skippable = b"\x50\x2a\x4d\x18" + (8).to_bytes(4, "little") + bytes(8)
    body = skippable + zstd.compress(bundle())
    assert body[8 + 8 : 8 + 8 + 4] == ZSTD_MAGIC
    assert zstd.decompress(body) == bundle()  # a valid zstd stream
    answer = upload(app, body)
    assert answer.status_code == 200, answer.text[:300]


def test_a_refusal_names_the_member_not_the_servers_paths(app: FastAPI, scratch: Path) -> None:
    answer = upload(app, bundle(job=b"[1]"))
    assert answer.status_code == 400
    assert str(scratch) not in answer.json()["detail"]
    assert "sattr-upload-" not in answer.json()["detail"]


@pytest.fixture(scope="module")
def hasty(hostile: HostileStore, ruleset: RuleSet) -> FastAPI:
    """A server that gives a diagnosis 3 s (server.diagnose_timeout)."""
    return make_app(hostile.db, ruleset, diagnose_timeout=3)


@pytest.mark.slow
def test_a_job_naming_many_nodes_costs_at_most_the_timeout(hasty: FastAPI, scratch: Path) -> None:
    """200,000 nodes in a 200-byte job.json: the child process is killed at the timeout."""
    body = bundle(job={**JOB, "nodes": "n[0-199999]"})
    assert len(body) < 20_000
    started = time.monotonic()
    answer = upload(hasty, body)
    assert answer.status_code in (200, 400, 413)
    assert time.monotonic() - started < 3 + 5
    assert len(answer.content) < 1 << 20
    if answer.status_code == 413:
        assert "server.diagnose_timeout" in answer.json()["detail"]


@pytest.mark.slow
def test_an_upload_of_repeated_gpu_errors_costs_at_most_the_timeout(
    hasty: FastAPI, scratch: Path
) -> None:
    line = b"[12345.678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    log = line * ((64 << 20) // len(line))
    body = gzip.compress(bundle(member("nodes/n1/kernel.log", log)), 9)
    assert len(body) < 400_000
    started = time.monotonic()
    answer = upload(hasty, body)
    assert answer.status_code in (200, 413, 503)
    assert time.monotonic() - started < 3 + 5


# ------------------------------------------------------------------ a real server


@dataclasses.dataclass
class Served:
    url: str
    app: FastAPI


@pytest.fixture(scope="module")
def served(hostile: HostileStore, ruleset: RuleSet) -> Iterator[Served]:
    """The hostile store behind uvicorn on a free loopback port."""
    app = make_app(hostile.db, ruleset)
    with uvicorn_serving(app) as url:
        yield Served(url, app)


def test_uploads_turned_away_do_not_stall_the_server(served: Served) -> None:
    slots = served.app.state.attribution.slots
    assert slots.acquire(timeout=5) and slots.acquire(timeout=5)  # both busy
    statuses: list[int] = []
    body = bundle()

    def one() -> None:
        answer = httpx.post(
            f"{served.url}/api/v1/diagnose", content=body, headers=ADMIN, timeout=30
        )
        statuses.append(answer.status_code)

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        slots.release()
        slots.release()
    assert statuses == [503] * 20
    assert elapsed < 1.0, f"20 refusals took {elapsed:.1f} s"


def test_a_lying_content_length_is_not_believed(served: Served) -> None:
    body = bundle()
    host, port = served.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        head = (
            "POST /api/v1/diagnose HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n"
        )
        conn.sendall(head.encode() + body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


# ------------------------------------------------------------------ /metrics


def test_metric_labels_from_the_store_are_escaped(hostile: HostileStore, tmp_path: Path) -> None:
    db = tmp_path / "labels.sqlite"
    shutil.copy(hostile.db, db)
    evil = 'p"a\\rt\nx} attribution_healthy 1\n# EOF'
    node = 'node"\n{x="1"} 9'
    with Store(db) as store:
        job = dataclasses.replace(
            hostile.verdict.job, job_id="880001", cluster='c"\n', partition=evil, sluid=None
        )
        blamed = Responsible(node, "gpu", "0000:3b:00.0", confirmed_by="kernel")
        store.save(dataclasses.replace(hostile.verdict, job=job, responsible=(blamed,)))
    text = client_for(make_app(db)).get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    verdicts = [s.labels for s in families["attribution_job_verdicts"].samples]
    assert {"cluster": 'c"\n', "partition": evil} in [
        {k: v for k, v in labels.items() if k in ("cluster", "partition")} for labels in verdicts
    ]
    nodes = [s.labels["node"] for s in families["attribution_responsible_node_verdicts"].samples]
    assert node in nodes
    healthy = [s.value for s in families["attribution_healthy"].samples]
    assert len(healthy) == 1  # nothing injected a second sample


def test_ten_thousand_partitions_and_nodes_stay_bounded(
    hostile: HostileStore, tmp_path: Path
) -> None:
    db = tmp_path / "wide.sqlite"
    shutil.copy(hostile.db, db)
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = dict(conn.execute("SELECT * FROM verdicts LIMIT 1").fetchone())
        columns = list(row)
        rows = []
        for i in range(10_000):
            rows.append(
                {**row, "key": f"wide_{i}", "job_id": str(900000 + i), "partition": f"p{i}"}
            )
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join(f":{c}" for c in columns)
        conn.executemany(f"INSERT INTO verdicts ({names}) VALUES ({marks})", rows)
        conn.executemany(
            "INSERT INTO responsible (key, node, component, device) VALUES (?, ?, 'gpu', NULL)",
            [(f"wide_{i}", f"n{i}") for i in range(10_000)],
        )
    started = time.monotonic()
    answer = client_for(make_app(db)).get("/metrics")
    assert time.monotonic() - started < 5
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    verdicts = families["attribution_job_verdicts"].samples
    assert 500 <= len(verdicts) <= 501
    assert sum(s.value for s in verdicts) == 10_000 + 4
    assert len(families["attribution_responsible_node_verdicts"].samples) <= 201
    assert families["attribution_responsible_nodes"].samples[0].value >= 10_000


# ------------------------------------------------------------------ the client


Respond = Callable[[socket.socket], None]


class HostileServer:
    """A loopback TCP server answering every connection with ``respond``."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                conn.recv(65536)
                self.respond(conn)
            except OSError:
                pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def answer_with(
    body: bytes, status: str = "200 OK", kind: str = "application/json", extra: str = ""
) -> Respond:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        f"{extra}Connection: close\r\n\r\n"
    ).encode()
    return lambda conn: conn.sendall(head + body)


def json_answer(data: Any) -> Respond:
    return answer_with(json.dumps(data).encode())


def drip(head: bytes, piece: bytes, every: float, seconds: float) -> Respond:
    """Send ``head``, then ``piece`` every ``every`` seconds for ``seconds``, then hang up."""

    def respond(conn: socket.socket) -> None:
        conn.sendall(head)
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            conn.sendall(piece)
            time.sleep(every)

    return respond


def silent(seconds: float) -> Respond:
    return lambda conn: time.sleep(seconds)


TIMEOUT = 0.5  # the client's server.timeout in these tests
DRIP = 2.0  # how long the slow servers keep a request going


def run_cli(tmp_path: Path, url: str, *args: str) -> tuple[Result, float]:
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {"store": str(tmp_path / "no-store.sqlite"), "server": {"url": url, "timeout": TIMEOUT}}
        )
    )
    started = time.monotonic()
    result = CliRunner().invoke(main, [*args, "--config", str(config)])
    return result, time.monotonic() - started


def one_line_failure(result: Result) -> str:
    """The command ended with exit 1 and one ``sattr: error:`` line, no traceback."""
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output[-2000:]
    assert lines[0].startswith("sattr: error:"), lines[0]
    return lines[0]


@pytest.fixture
def hostile_server() -> Iterator[Callable[[Respond], HostileServer]]:
    made: list[HostileServer] = []

    def start(respond: Respond) -> HostileServer:
        made.append(HostileServer(respond))
        return made[-1]

    yield start
    for server in made:
        server.close()


def good_record(hostile: HostileStore) -> dict[str, Any]:
    data = verdict_to_dict(hostile.verdict)
    data["record"] = {
        "admin_comment_status": None,
        "admin_comment": None,
        "spooled_at": None,
        "fleet": {"c01": {"jobs": 2, "users": 1, "since": "2026-06-01T00:00:00+00:00"}},
    }
    data["others"] = []
    return data


@munge_needed
def test_a_well_formed_answer_is_shown(
    tmp_path: Path, hostile: HostileStore, hostile_server: Callable[[Respond], HostileServer]
) -> None:
    server = hostile_server(json_answer(good_record(hostile)))
    result, _ = run_cli(tmp_path, server.url, "show", "1234")
    assert result.exit_code == 0, result.output
    assert f"(from the server at {server.url})" in result.output


@munge_needed
@pytest.mark.parametrize(
    ("respond", "words"),
    [
        (lambda conn: conn.sendall(b"\x00\xffnot http at all\r\n\r\n"), "did not answer"),
        (answer_with(b"<html>login</html>", kind="text/html"), "no JSON"),
        (answer_with(b"<html>oops</html>", "500 Internal Server Error", "text/html"), "500"),
        (
            answer_with(b"", "302 Found", "text/html", "Location: http://127.0.0.1:1/\r\n"),
            "no JSON",
        ),
        (answer_with(b'{"job": '), "no JSON"),
        (answer_with(b"[1, 2]"), "no verdict object"),
        (
            answer_with(
                json.dumps({"detail": "a\nb\x1b[31m" + "x" * 5000}).encode(), "403 Forbidden"
            ),
            "403",
        ),
        (answer_with(b'{"detail": {"x": 1}}', "403 Forbidden"), "403"),
        (silent(5), "did not answer"),
        (
            lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * (1 << 20) + b"\r\n\r\n"),
            "did not answer",
        ),
    ],
)
def test_a_broken_server_is_one_line_for_show(
    tmp_path: Path,
    hostile_server: Callable[[Respond], HostileServer],
    respond: Respond,
    words: str,
) -> None:
    server = hostile_server(respond)
    result, elapsed = run_cli(tmp_path, server.url, "show", "1234")
    line = one_line_failure(result)
    assert words in line
    assert "\x1b" not in line
    assert elapsed < TIMEOUT + 2


@munge_needed
@pytest.mark.parametrize("args", [("show", "1234"), ("list",)])
def test_deeply_nested_json_is_one_line(
    tmp_path: Path, hostile_server: Callable[[Respond], HostileServer], args: tuple[str, ...]
) -> None:
    server = hostile_server(answer_with(b"[" * 100_000 + b"]" * 100_000))
    one_line_failure(run_cli(tmp_path, server.url, *args)[0])


def _broken(hostile: HostileStore, name: str) -> dict[str, Any]:
    data = good_record(hostile)
    if name == "job-int":
        return {"job": 5}
    if name == "empty":
        return {}
    if name == "record-list":
        data["record"] = [1, 2]
    elif name == "fleet-list":
        data["record"]["fleet"] = [1]
    elif name == "fleet-short":
        data["record"]["fleet"] = {"c01": {"jobs": 1}}
    elif name == "others-int":
        data["others"] = 5
    elif name == "chain-ints":
        data["symptom_chain"] = [1]
    elif name == "responsible-text":
        data["responsible"] = "c01"
    return data


@munge_needed
@pytest.mark.parametrize(
    "name",
    [
        "job-int",
        "empty",
        "record-list",
        "fleet-list",
        "fleet-short",
        "others-int",
        "chain-ints",
        "responsible-text",
    ],
)
def test_an_answer_that_is_no_verdict_is_one_line(
    tmp_path: Path,
    hostile: HostileStore,
    hostile_server: Callable[[Respond], HostileServer],
    name: str,
) -> None:
    server = hostile_server(json_answer(_broken(hostile, name)))
    one_line_failure(run_cli(tmp_path, server.url, "show", "1234")[0])


@munge_needed
def test_list_rows_that_are_no_rows_are_one_line(
    tmp_path: Path, hostile_server: Callable[[Respond], HostileServer]
) -> None:
    page = {"total": 2, "limit": 50, "offset": 0, "next": None, "items": [1, "x"]}
    server = hostile_server(json_answer(page))
    one_line_failure(run_cli(tmp_path, server.url, "list")[0])


@munge_needed
@pytest.mark.parametrize(
    "respond",
    [
        drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b" ", 0.1, DRIP),
        drip(b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", 0.1, DRIP),
        drip(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000000000\r\n\r\n[",
            b"1," * (1 << 19),
            0.05,
            DRIP,
        ),
    ],
    ids=["slow-body", "slow-headers", "endless-body"],
)
def test_a_slow_server_is_given_up_on_after_the_timeout(
    tmp_path: Path, hostile_server: Callable[[Respond], HostileServer], respond: Respond
) -> None:
    server = hostile_server(respond)
    result, elapsed = run_cli(tmp_path, server.url, "show", "1234")
    one_line_failure(result)
    assert elapsed < TIMEOUT + 1.0, f"sattr show waited {elapsed:.1f} s"


@munge_needed
@pytest.mark.parametrize("job", ["x y", "50%", "é"])
def test_show_through_the_server_of_an_odd_job_id_is_a_404(
    tmp_path: Path, served: Served, job: str
) -> None:
    line = one_line_failure(run_cli(tmp_path, served.url, "show", job)[0])
    assert "no verdict for job" in line, line
