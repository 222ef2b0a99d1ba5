"""The REST API, authentication and /metrics of ``sattr serve``, through the real application
(FastAPI's TestClient speaks HTTP to it in process) over a real demo store; MUNGE tests use
the machine's munged and skip when it is not running (``.ci/run`` starts it)."""

from __future__ import annotations

import dataclasses
import grp
import io
import os
import pwd
import shutil
import subprocess
import tarfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

import attribution.server.metrics as metrics_module
from attribution.config import Config
from attribution.model import verdict_to_dict
from attribution.munge import request_payload
from attribution.server.app import create_app
from attribution.store import Store, VerdictFilter
from attribution.verdictjson import verdict_from_dict

TOKEN = "s3cret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
LOCAL = ("127.0.0.1", 40000)  # a peer address the proxy settings can trust
NOBODY = pwd.getpwnam("nobody")
CASES = Path(__file__).resolve().parents[1] / "cases"


def make_client(db: Path, ruleset: Any = None, **server: Any) -> TestClient:
    settings = {"proxy_header": "X-Remote-User", **server}
    config = Config.model_validate({"server": settings})
    return TestClient(create_app(config, db, ruleset, token=TOKEN), client=LOCAL)


def as_user(name: str) -> dict[str, str]:
    return {"X-Remote-User": name}


@pytest.fixture(scope="module")
def db(demo_store: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the demo store with one more verdict: a demo job given to ``nobody``."""
    path = demo_store.copy_to(tmp_path_factory.mktemp("api"))
    with Store(path) as store:
        row = store.query(VerdictFilter(sub_domain="hardware", limit=1))[0]
        verdict = verdict_from_dict(store.get(row["key"]))
        job = dataclasses.replace(
            verdict.job,
            job_id="990001",
            sluid=None,
            user="nobody",
            uid=NOBODY.pw_uid,
            array_job_id=None,
            array_task_id=None,
        )
        store.save(dataclasses.replace(verdict, job=job))
        task = dataclasses.replace(
            verdict.job, job_id="990011", array_job_id="990010", array_task_id="3", sluid=None
        )
        store.save(dataclasses.replace(verdict, job=task))
        keyed = dataclasses.replace(verdict.job, job_id="990012", sluid="s2QX7R4B0000")
        store.save(dataclasses.replace(verdict, job=keyed))
    return path


@pytest.fixture(scope="module")
def client(db: Path) -> TestClient:
    return make_client(db)


def stored(db: Path, job: str) -> dict[str, Any]:
    with Store(db, readonly=True) as store:
        return store.find(job)[0]


def test_openapi_document_is_valid_and_lists_every_route(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    validate(doc)
    assert set(doc["paths"]) == {
        "/api/v1/whoami",
        "/api/v1/jobs",
        "/api/v1/jobs/{job}",
        "/api/v1/jobs/{job}/record",
        "/api/v1/nodes",
        "/api/v1/incidents",
        "/api/v1/diagnose",
    }


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/whoami",
        "/api/v1/jobs",
        "/api/v1/jobs/990001",
        "/api/v1/jobs/990001/record",
        "/api/v1/nodes",
        "/api/v1/incidents",
    ],
)
def test_every_route_needs_a_caller(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 401
    assert "MUNGE" in response.headers["www-authenticate"]
    assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(path, headers=ADMIN).status_code == 200


def test_whoami(client: TestClient) -> None:
    me = client.get("/api/v1/whoami", headers=ADMIN).json()
    assert me == {
        "uid": os.getuid(),
        "user": pwd.getpwuid(os.getuid()).pw_name,
        "admin": True,
        "method": "token",
    }
    them = client.get("/api/v1/whoami", headers=as_user("nobody")).json()
    assert them == {"uid": NOBODY.pw_uid, "user": "nobody", "admin": False, "method": "proxy"}


def test_jobs_pages_through_every_verdict(client: TestClient, db: Path) -> None:
    with Store(db, readonly=True) as store:
        everything = [r["key"] for r in store.query(VerdictFilter())]
    seen: list[str] = []
    url: str | None = "/api/v1/jobs?since=all&limit=40"
    while url:
        page = client.get(url, headers=ADMIN).json()
        assert page["total"] == len(everything)
        assert len(page["items"]) <= 40
        seen += [r["key"] for r in page["items"]]
        url = page["next"]
    assert seen == everything  # newest first, no row twice, none left out
    last = client.get(f"/api/v1/jobs?since=all&limit=40&offset={len(everything)}", headers=ADMIN)
    assert last.json()["items"] == []
    assert last.json()["next"] is None


def test_jobs_filters_match_the_store(client: TestClient, db: Path) -> None:
    with Store(db, readonly=True) as store:
        hardware = store.query(VerdictFilter(sub_domain="hardware"))
        node = next(
            r["responsible_nodes"].split(",")[0] for r in hardware if r["responsible_nodes"]
        )
        on_node = store.query(VerdictFilter(nodes=(node,)))
    page = client.get(
        "/api/v1/jobs",
        params={"since": "all", "sub_domain": "hardware", "limit": 1000},
        headers=ADMIN,
    ).json()
    assert [r["key"] for r in page["items"]] == [r["key"] for r in hardware]
    assert all(r["sub_domain"] == "hardware" for r in page["items"])
    page = client.get(
        "/api/v1/jobs", params={"since": "all", "node": node, "limit": 1000}, headers=ADMIN
    ).json()
    assert {r["key"] for r in page["items"]} == {r["key"] for r in on_node}
    for bad in ({"sub_domain": "bogus"}, {"node": "gpu[1-"}, {"since": "yesterdayish"}):
        response = client.get("/api/v1/jobs", params=bad, headers=ADMIN)
        assert response.status_code == 422, bad
    assert client.get("/api/v1/jobs?limit=0", headers=ADMIN).status_code == 422
    assert client.get("/api/v1/jobs?limit=1001", headers=ADMIN).status_code == 422


def test_a_job_is_the_diagnose_json(client: TestClient, db: Path) -> None:
    body = client.get("/api/v1/jobs/990001", headers=ADMIN)
    assert body.status_code == 200
    assert body.json() == stored(db, "990001")
    assert body.json() == verdict_to_dict(verdict_from_dict(stored(db, "990001")))
    record = client.get("/api/v1/jobs/990001/record", headers=ADMIN).json()
    assert {k: v for k, v in record.items() if k not in ("record", "others")} == body.json()
    assert set(record["record"]) == {"admin_comment_status", "admin_comment", "spooled_at", "fleet"}


def test_jobs_by_array_task_and_sluid(client: TestClient, db: Path) -> None:
    with Store(db, readonly=True) as store:
        rows = store.query(VerdictFilter())
    assert any(r["display_id"] == "990010_3" for r in rows)
    by_task = client.get("/api/v1/jobs/990010_3", headers=ADMIN).json()
    assert (by_task["job"]["array_job_id"], by_task["job"]["array_task_id"]) == ("990010", "3")
    assert client.get("/api/v1/jobs/990010_4", headers=ADMIN).status_code == 404
    got = client.get("/api/v1/jobs/s2QX7R4B0000", headers=ADMIN).json()
    assert (got["job"]["sluid"], got["job"]["job_id"]) == ("s2QX7R4B0000", "990012")


def test_missing_job_is_404_and_anothers_is_403(client: TestClient) -> None:
    missing = client.get("/api/v1/jobs/424242424", headers=ADMIN)
    assert missing.status_code == 404
    assert "no verdict for job 424242424" in missing.json()["detail"]
    assert client.get("/api/v1/jobs/424242424/record", headers=ADMIN).status_code == 404
    demo_job = client.get("/api/v1/jobs?limit=1&user=wkim&since=all", headers=ADMIN).json()
    job = demo_job["items"][0]["display_id"]
    refused = client.get(f"/api/v1/jobs/{job}", headers=as_user("nobody"))
    assert refused.status_code == 403
    assert refused.json()["detail"] == f"job {job} belongs to another user"
    assert client.get(f"/api/v1/jobs/{job}/record", headers=as_user("nobody")).status_code == 403


def test_a_user_lists_and_reads_only_their_own(client: TestClient) -> None:
    page = client.get("/api/v1/jobs?since=all", headers=as_user("nobody")).json()
    assert [r["display_id"] for r in page["items"]] == ["990001"]
    assert page["total"] == 1
    # asking for another user's jobs by name gives nothing, not their jobs
    page = client.get("/api/v1/jobs?since=all&user=wkim", headers=as_user("nobody")).json()
    assert page["items"] == []
    mine = client.get("/api/v1/jobs/990001", headers=as_user("nobody"))
    assert mine.status_code == 200
    assert mine.json()["job"]["user"] == "nobody"


def test_fleet_routes_are_for_administrators(client: TestClient) -> None:
    assert client.get("/api/v1/nodes", headers=as_user("nobody")).status_code == 403
    assert client.get("/api/v1/incidents", headers=as_user("nobody")).status_code == 403
    report = client.get("/api/v1/nodes?since=all", headers=ADMIN).json()
    assert report["runs"] > 0
    assert {"nodes", "domains", "silent"} <= set(report)
    assert "incidents" in client.get("/api/v1/incidents?since=all", headers=ADMIN).json()


def test_admin_group_members_see_everything(db: Path) -> None:
    group = grp.getgrgid(NOBODY.pw_gid).gr_name
    config = Config.model_validate(
        {"admin_groups": [group], "server": {"proxy_header": "X-Remote-User"}}
    )
    client = TestClient(create_app(config, db, None, token=None), client=LOCAL)
    page = client.get("/api/v1/jobs?since=all", headers=as_user("nobody")).json()
    assert page["total"] > 1
    assert client.get("/api/v1/whoami", headers=as_user("nobody")).json()["admin"] is True


def test_proxy_header_is_believed_only_from_trusted_addresses(db: Path) -> None:
    far = TestClient(
        create_app(Config.model_validate({"server": {"proxy_header": "X-Remote-User"}}), db, None),
        client=("192.0.2.7", 40000),
    )
    assert far.get("/api/v1/whoami", headers=as_user("root")).status_code == 401
    off = TestClient(create_app(Config(), db, None), client=LOCAL)  # no proxy_header: off
    assert off.get("/api/v1/whoami", headers=as_user("root")).status_code == 401
    near = make_client(db)
    assert near.get("/api/v1/whoami", headers=as_user("no-such-user-x")).status_code == 401


def test_no_token_means_no_token_login(db: Path) -> None:
    client = TestClient(create_app(Config(), db, None, token=None), client=LOCAL)
    assert client.get("/api/v1/whoami", headers={"Authorization": "Bearer "}).status_code == 401
    assert client.get("/api/v1/whoami", headers=ADMIN).status_code == 401


def test_unreadable_store_is_503(tmp_path: Path) -> None:
    client = make_client(tmp_path / "absent.sqlite")
    response = client.get("/api/v1/jobs", headers=ADMIN)
    assert response.status_code == 503
    assert "verdict store" in response.json()["detail"]


# ------------------------------------------------------------------ POST /api/v1/diagnose


def tarball(case: Path, *, top: str | None = "case", mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        tar.add(case, arcname=top or ".")
    return buffer.getvalue()


def test_diagnose_an_uploaded_bundle(db: Path, ruleset: Any) -> None:
    from attribution.bundle import diagnose_bundle

    client = make_client(db, ruleset)
    case = CASES / "blind-nccl-version-mismatch"
    _, expected = diagnose_bundle(case, ruleset)
    response = client.post(
        "/api/v1/diagnose",
        content=tarball(case),
        headers={**ADMIN, "Content-Type": "application/gzip"},
    )
    assert response.status_code == 200, response.text
    got = response.json()
    want = verdict_to_dict(expected)
    for key in ("diagnosed_at", "engine"):
        got.pop(key, None)
        want.pop(key, None)
    assert got == want
    assert client.post("/api/v1/diagnose", content=tarball(case)).status_code == 401


def test_diagnose_refuses_large_and_hostile_uploads(db: Path, ruleset: Any) -> None:
    client = make_client(db, ruleset, max_upload=4096)
    big = os.urandom(8192)
    response = client.post("/api/v1/diagnose", content=big, headers=ADMIN)
    assert response.status_code == 413
    client = make_client(db, ruleset)
    junk = client.post("/api/v1/diagnose", content=b"not a tar at all" * 10, headers=ADMIN)
    assert junk.status_code == 400
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("case/job.json")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/shadow"
        tar.addfile(info)
    linked = client.post("/api/v1/diagnose", content=buffer.getvalue(), headers=ADMIN)
    assert linked.status_code == 400
    assert "job.json" in linked.json()["detail"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"{}"
        info = tarfile.TarInfo("../escape/job.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert (
        client.post("/api/v1/diagnose", content=buffer.getvalue(), headers=ADMIN).status_code == 400
    )


def test_diagnose_refuses_a_compression_bomb(db: Path, ruleset: Any, tmp_path: Path) -> None:
    import gzip

    client = make_client(db, ruleset, max_unpacked=1 << 20)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("case/job/zeros.log")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    bomb = gzip.compress(buffer.getvalue(), compresslevel=9)
    assert len(bomb) < 200_000
    response = client.post("/api/v1/diagnose", content=bomb, headers=ADMIN)
    assert response.status_code == 413, response.text


# ------------------------------------------------------------------ /metrics


def scrape(client: TestClient) -> dict[str, Any]:
    text = client.get("/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}


def total(family: Any, suffix: str = "_total", **labels: str) -> float:
    return sum(
        s.value
        for s in family.samples
        if s.name.endswith(suffix) and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_parse_and_move_when_verdicts_are_written(
    demo_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_module, "CACHE", 0.0)
    path = demo_store.copy_to(tmp_path)
    client = make_client(path)
    before = scrape(client)
    assert {
        "attribution_store_up",
        "attribution_job_verdicts",
        "attribution_responsible_node_verdicts",
        "attribution_responsible_nodes",
        "attribution_verdict_latency_seconds",
        "attribution_admin_comment_backlog",
        "attribution_queue_entries",
        "attribution_healthy",
        "attribution_reconciliation_sweeps",
        "attribution_admin_comment_rewrites",
    } <= set(before)
    with Store(path, readonly=True) as store:
        count = store.count()
        row = store.query(VerdictFilter(sub_domain="hardware", limit=1))[0]
        verdict = verdict_from_dict(store.get(row["key"]))
    assert total(before["attribution_job_verdicts"]) == count
    hardware = total(before["attribution_job_verdicts"], sub_domain="hardware")
    node = verdict.responsible[0].node
    blamed = total(before["attribution_responsible_node_verdicts"], node=node)
    latency = total(before["attribution_verdict_latency_seconds"], suffix="_count")
    job = dataclasses.replace(verdict.job, job_id="990002", sluid=None)
    assert verdict.job.end is not None
    spooled = verdict.job.end + timedelta(seconds=5)
    made = dataclasses.replace(
        verdict, job=job, diagnosed_at=verdict.job.end + timedelta(seconds=45)
    )
    with Store(path) as store:
        store.save(made, spooled_at=spooled)
    after = scrape(client)
    assert total(after["attribution_job_verdicts"]) == count + 1
    assert total(after["attribution_job_verdicts"], sub_domain="hardware") == hardware + 1
    assert total(after["attribution_responsible_node_verdicts"], node=node) == blamed + 1
    assert total(after["attribution_verdict_latency_seconds"], suffix="_count") == latency + 1
    family = after["attribution_verdict_latency_seconds"]
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets["30.0"] == total(
        before["attribution_verdict_latency_seconds"], suffix="_bucket", le="30.0"
    )
    assert (
        buckets["60.0"]
        == total(before["attribution_verdict_latency_seconds"], suffix="_bucket", le="60.0") + 1
    )


def test_metrics_can_require_an_administrator(db: Path) -> None:
    client = make_client(db, metrics_public=False)
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=as_user("nobody")).status_code == 403
    assert client.get("/metrics", headers=ADMIN).status_code == 200


# ------------------------------------------------------------------ MUNGE, with the real munged


def munged_running() -> bool:
    if shutil.which("munge") is None or shutil.which("unmunge") is None:
        return False
    made = subprocess.run(["munge", "-n"], capture_output=True, check=False, timeout=10)
    if made.returncode != 0:
        return False
    return (
        subprocess.run(
            ["unmunge"], input=made.stdout, capture_output=True, check=False, timeout=10
        ).returncode
        == 0
    )


munge_needed = pytest.mark.skipif(
    not munged_running() and not os.environ.get("ATTRIBUTION_REQUIRE_SLURM"),
    reason="munged is not running here (.ci/run starts it with the CI Slurm)",
)


def credential(payload: str, user: str | None = None) -> str:
    command = ["munge", "--string", payload]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    return (
        subprocess.run(command, capture_output=True, check=True, timeout=10).stdout.decode().strip()
    )


@munge_needed
def test_munge_credentials_name_the_caller(client: TestClient) -> None:
    cred = credential(request_payload("GET", "/api/v1/whoami"))
    me = client.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {cred}"})
    assert me.status_code == 200, me.text
    assert me.json()["uid"] == os.getuid()
    assert me.json()["method"] == "munge"
    replayed = client.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {cred}"})
    assert replayed.status_code == 401
    assert "replayed" in replayed.json()["detail"]


@pytest.mark.skipif(os.getuid() != 0, reason="making another user's credential needs root")
@munge_needed
def test_munge_user_sees_own_job_and_not_anothers(client: TestClient) -> None:
    path = "/api/v1/jobs/990001"
    mine = client.get(
        path,
        headers={"Authorization": f"MUNGE {credential(request_payload('GET', path), 'nobody')}"},
    )
    assert mine.status_code == 200, mine.text
    assert mine.json()["job"]["user"] == "nobody"
    other = client.get("/api/v1/jobs?limit=1&user=wkim&since=all", headers=ADMIN).json()["items"][0]
    path = f"/api/v1/jobs/{other['display_id']}"
    refused = client.get(
        path,
        headers={"Authorization": f"MUNGE {credential(request_payload('GET', path), 'nobody')}"},
    )
    assert refused.status_code == 403


@munge_needed
def test_munge_credential_for_another_request_or_junk_is_refused(db: Path) -> None:
    client = make_client(db)
    cred = credential(request_payload("GET", "/api/v1/jobs"))
    wrong = client.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {cred}"})
    assert wrong.status_code == 401
    assert "another request" in wrong.json()["detail"]
    for junk in ("", "garbage", "MUNGE:" + "A" * 100, "x" * 20_000):
        response = client.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {junk}"})
        assert response.status_code == 401, junk[:20]
    off = make_client(db, munge=False)
    cred = credential(request_payload("GET", "/api/v1/whoami"))
    assert off.get("/api/v1/whoami", headers={"Authorization": f"MUNGE {cred}"}).status_code == 401


def test_unknown_addresses_are_404_html_outside_the_api_and_json_inside(client: TestClient) -> None:
    page = client.get("/no-such-page")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "no page at /no-such-page" in page.text
    api = client.get("/api/v1/no-such-route", headers=ADMIN)
    assert api.status_code == 404
    assert api.json() == {"detail": "Not Found"}


def test_ten_gigabytes_of_zeros_compressed_are_refused_at_the_default_limit(
    db: Path, ruleset: Any
) -> None:
    """The issue's bomb: a tarball of one 10 GiB file of zeros, about 10 MB as gzip (ten
    gzip members of 1 GiB each, which gzip readers join), under the 64 MiB upload limit;
    unpacking stops at the 1 GiB default."""
    import gzip
    import zlib

    size = 10 << 30
    header = tarfile.TarInfo("case/job/zeros.log")
    header.size = size
    head = header.tobuf(format=tarfile.GNU_FORMAT)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    gib = packer.compress(bytes(1 << 30)) + packer.flush()
    bomb = gzip.compress(head) + gib * 10
    assert len(bomb) < 64 << 20  # within the default upload limit
    client = make_client(db, ruleset)
    started = time.monotonic()
    response = client.post("/api/v1/diagnose", content=bomb, headers=ADMIN)
    assert response.status_code == 413, response.text
    assert "1,073,741,824" in response.text or "more than" in response.text
    assert time.monotonic() - started < 60
