"""The web pages of ``sattr serve`` (attribution.server.pages) through the real application.

Every request goes through FastAPI's test client into the real app over a real SQLite store
made by the engine (tests/server/conftest.py); what a page lists is checked against what the
store answers for the same selection, never against numbers written here.
"""

from __future__ import annotations

import dataclasses
import html
import re
from datetime import UTC, datetime
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attribution.access import HIDDEN, Caller
from attribution.lookup import lookup
from attribution.server import charts
from attribution.server.auth import COOKIE
from attribution.server.pages import CSP, PAGE_SIZE
from attribution.store import Store, VerdictFilter
from tests.server.conftest import (
    FLEET_NODE,
    FOREIGN_LINE,
    HOSTILE_LINE,
    HOSTILE_NAME,
    HOSTILE_SUMMARY,
    PROXY_HEADER,
    TOKEN,
    PageStore,
    listed_keys,
    make_app,
    parse,
    table_rows,
)

ADMIN = Caller(uid=0, name="root", admin=True)


def store_keys(db: Path, selection: VerdictFilter) -> list[str]:
    with Store(db, readonly=True) as store:
        return [r["key"] for r in store.query(selection)]


def store_count(db: Path, selection: VerdictFilter) -> int:
    with Store(db, readonly=True) as store:
        return store.count(selection)


def no_active_content(page: str) -> None:
    """Nothing on the page runs: no script element, event handler or inline style."""
    tree = parse(page)
    assert not list(tree.iter("script")), "a <script> element on the page"
    for node in tree.iter():
        for name in node.attrs:
            assert not name.startswith("on"), f"<{node.tag} {name}=...> on the page"
            assert name != "style", f"<{node.tag} style=...> (the CSP forbids inline styles)"


# ------------------------------------------------------------------ the list


def test_the_list_shows_the_newest_verdicts_with_charts(
    admin_client: TestClient, page_store: PageStore
) -> None:
    response = admin_client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert "script-src 'none'" in CSP and "unsafe-inline" not in CSP
    page = parse(response.text)
    total = store_count(page_store.db, VerdictFilter())
    assert listed_keys(page) == store_keys(page_store.db, VerdictFilter(limit=PAGE_SIZE))
    assert f"1–{PAGE_SIZE} of {total}" in page.by_id("list-title").text()
    # the columns the brief asks for, in order
    head = [th.text() for th in page.by_id("verdicts").find("thead").iter("th")]  # type: ignore[union-attr]
    assert head == [
        "job",
        "user",
        "partition",
        "end (UTC)",
        "state",
        "terminal_state",
        "sub_domain",
        "cause",
        "responsible nodes",
        "summary",
    ]
    # the time chart: its numbers table adds up to the store's failed jobs
    time_title = page.by_id("time-chart-title").text()
    assert re.match(r"Failed jobs per (day|week|month|year) by sub_domain", time_title)
    with Store(page_store.db, readonly=True) as store:
        failed = sum(r["jobs"] for r in store.daily(VerdictFilter()))
        top = store.top_causes(VerdictFilter(), 10)
    assert f"({failed} failed jobs" in time_title
    svg = page.find("svg", class_="bars")
    assert svg is not None and svg.attrs["role"] == "img"
    assert svg.find("title") is not None and svg.find("desc") is not None
    figure = page.by_id("time-chart-title")
    tables = list(parse(response.text).iter("table"))
    numbers = next(t for t in tables if t.find("th", scope="col") and "total" in t.text()[:400])
    totals = [int(row.children[-1].text()) for row in numbers.find("tbody").iter("tr")]  # type: ignore[union-attr, attr-defined]
    assert sum(totals) == failed and figure is not None
    # every stacked part carries a tooltip and a sub_domain colour class
    rects = list(svg.iter("rect"))
    assert rects and all(r.attrs["class"].startswith("d-") and r.find("title") for r in rects)
    # the cause chart: one bar per top cause, the same counts as the store
    causes = page.find("svg", class_="hbars")
    assert causes is not None
    assert [int(t.text()) for t in causes.iter("text") if t.has_class("cvalue")] == [
        r["jobs"] for r in top
    ]
    linked = [a.attrs["href"] for a in causes.iter("a")]
    assert linked and all("cause=" in href for href in linked)
    assert "sattr" in page.find("title").text()  # type: ignore[union-attr]
    no_active_content(response.text)


def test_jobs_is_the_list_too(admin_client: TestClient, page_store: PageStore) -> None:
    page = parse(admin_client.get("/jobs").text)
    assert listed_keys(page) == store_keys(page_store.db, VerdictFilter(limit=PAGE_SIZE))


@pytest.mark.parametrize(
    ("query", "selection"),
    [
        ({"sub_domain": "hardware"}, VerdictFilter(sub_domain="hardware")),
        ({"sub_domain": "HARDWARE"}, VerdictFilter(sub_domain="hardware")),
        ({"state": "NODE_FAIL"}, VerdictFilter(state="NODE_FAIL")),
        ({"state": "timeout"}, VerdictFilter(state="timeout")),
        ({"cause": "gpu-fell-off-bus"}, VerdictFilter(cause="gpu-fell-off-bus")),
        ({"node": "gpu-a[01-02]"}, VerdictFilter(nodes=("gpu-a01", "gpu-a02"))),
        ({"user": "dana"}, VerdictFilter(user="dana")),
        ({"partition": "gpu"}, VerdictFilter(partition="gpu")),
        (
            {"since": "2025-09-01", "until": "2025-09-02"},
            VerdictFilter(
                since=datetime(2025, 9, 1, tzinfo=UTC), until=datetime(2025, 9, 2, tzinfo=UTC)
            ),
        ),
        (
            {"sub_domain": "hardware", "since": "2025-01-01", "partition": ""},
            VerdictFilter(sub_domain="hardware", since=datetime(2025, 1, 1, tzinfo=UTC)),
        ),
    ],
    ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else "",
)
def test_filters_narrow_the_list_as_the_store_does(
    admin_client: TestClient,
    page_store: PageStore,
    query: dict[str, str],
    selection: VerdictFilter,
) -> None:
    response = admin_client.get("/", params=query)
    assert response.status_code == 200, response.text
    page = parse(response.text)
    wanted = store_keys(page_store.db, dataclasses.replace(selection, limit=PAGE_SIZE))
    everything = store_count(page_store.db, VerdictFilter())
    assert wanted, f"the store holds no job for {query}: the test would prove nothing"
    assert len(wanted) < everything
    assert listed_keys(page) == wanted
    # the form shows what was asked, so that the next submit keeps it
    form = page.find("form", class_="filters")
    assert form is not None
    for name, value in query.items():
        field = form.find("input", name=name)
        if field is not None:
            assert field.attrs["value"] == value
        else:
            chosen = form.find("select", name=name).find("option", selected="")  # type: ignore[union-attr]
            assert chosen is not None and chosen.attrs["value"] == value.lower()
    if "sub_domain" in query:
        badges = [
            b.text()
            for r in table_rows(page, "verdicts")
            for b in r.iter("span")
            if b.has_class("badge")
        ]
        assert set(badges) == {query["sub_domain"].lower()}
    # the charts count the same selection: their legend sums to the failed jobs listed
    with Store(page_store.db, readonly=True) as store:
        failed = sum(r["jobs"] for r in store.daily(selection))
    if failed:
        assert f"({failed} failed job" in page.by_id("time-chart-title").text()


def test_a_filter_that_cannot_be_read_is_said_on_the_page(admin_client: TestClient) -> None:
    response = admin_client.get("/", params={"since": "<last tuesday>", "node": "gpu[1-"})
    assert response.status_code == 422
    page = parse(response.text)
    alert = page.find("p", role="alert")
    assert alert is not None and "since=" in alert.text() and "last tuesday" in alert.text()
    # the form keeps the bad value, escaped, for the user to correct
    assert page.find("input", name="since").attrs["value"] == "<last tuesday>"  # type: ignore[union-attr]
    assert "<last tuesday>" not in response.text and "&lt;last tuesday&gt;" in response.text
    assert admin_client.get("/", params={"sub_domain": "hardwear"}).status_code == 422
    bad = admin_client.get("/", params={"offset": "-5"})
    assert bad.status_code == 422 and "offset" in parse(bad.text).find("p", role="alert").text()  # type: ignore[union-attr]


def test_paging_walks_every_row_once_and_keeps_the_filters(
    admin_client: TestClient, page_store: PageStore
) -> None:
    selection = VerdictFilter(state="fail")
    total = store_count(page_store.db, selection)
    limit = 40
    assert total > 2 * limit, "too few failed jobs to page through"
    seen: list[str] = []
    url = f"/?state=fail&limit={limit}"
    pages = 0
    previous_link = None
    while url:
        response = admin_client.get(url)
        assert response.status_code == 200
        page = parse(response.text)
        seen += listed_keys(page)
        pager = page.find("nav", class_="pager")
        assert pager is not None
        prev = pager.find("a", rel="prev")
        nxt = pager.find("a", rel="next")
        if pages == 0:
            assert prev is None
        else:
            assert prev is not None and "state=fail" in prev.attrs["href"]
            previous_link = prev.attrs["href"]
        url = html.unescape(nxt.attrs["href"]) if nxt is not None else ""
        if url:
            assert "state=fail" in url and f"limit={limit}" in url
            url = "/" + url
        pages += 1
    assert seen == store_keys(page_store.db, selection)
    assert pages == -(-total // limit)
    # the last page's "newer" link goes back one page
    assert previous_link is not None
    back = parse(admin_client.get("/" + html.unescape(previous_link)).text)
    assert listed_keys(back) == seen[(pages - 2) * limit : (pages - 1) * limit]


# ------------------------------------------------------------------ one verdict


def test_the_job_page_shows_the_verdict_as_the_store_holds_it(
    admin_client: TestClient, page_store: PageStore
) -> None:
    with Store(page_store.db, readonly=True) as store:
        found = lookup(store, "809251", ADMIN)
    verdict = found.verdict
    response = admin_client.get("/jobs/809251")
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    page = parse(response.text)
    title = page.find("h1")
    assert title is not None and "809251" in title.text()
    facts = page.find("dl", class_="facts")
    assert facts is not None
    text = facts.text()
    assert verdict.job.user is not None and verdict.job.user in text
    assert verdict.job.nodelist in text and verdict.job.state in text  # type: ignore[operator]
    assert "2025-09-01 12:00:00" in text  # start, in UTC
    box = page.find("section", class_=f"verdict d-{verdict.sub_domain.value}")
    assert box is not None
    assert verdict.summary in box.text() and verdict.cause is not None
    assert verdict.cause.id in box.text() and verdict.action is not None
    assert verdict.action in box.text()
    assert verdict.confidence is not None and verdict.confidence.level in box.text()
    for r in verdict.responsible:
        assert r.node in box.text() and (r.device or "") in box.text()
    json_link = box.find("a", href="/api/v1/jobs/809251")
    assert json_link is not None
    assert admin_client.get(json_link.attrs["href"]).json()["job"]["job_id"] == "809251"
    chain = table_rows(page, "chain")
    assert len(chain) == len(verdict.symptom_chain)
    for row, entry in zip(chain, verdict.symptom_chain, strict=True):
        assert row.attrs["class"] == f"role-{entry.role.value}"
        cells = [c for c in row.children if not isinstance(c, str)]
        assert cells[0].text() == entry.role.value
        assert entry.symptom in cells[1].text()
        assert " ".join(entry.example.split()) in cells[2].text()
        assert cells[3].text() == str(entry.count) and cells[4].text() == str(entry.node_count)
        assert entry.stream in cells[8].text() and entry.source in cells[8].text()
    coverage = table_rows(page, "coverage")
    assert len(coverage) == len(verdict.coverage)
    for row, c in zip(coverage, verdict.coverage, strict=True):
        cells = [x for x in row.children if not isinstance(x, str)]
        assert cells[0].text() == c.stream.value and cells[2].text() == c.status.value
        assert cells[6].text() == str(c.lines)
    assert page.find("h2", id="ignored-title") is not None
    record = page.by_id("record-title")
    assert record is not None and "not written back" in response.text
    no_active_content(response.text)


def test_a_job_is_found_by_array_task_and_store_key(
    admin_client: TestClient, page_store: PageStore
) -> None:
    extra = page_store.extra
    for asked in (extra.nobody_display, extra.nobody):
        page = parse(admin_client.get(f"/jobs/{asked}").text)
        facts = page.find("dl", class_="facts").text()  # type: ignore[union-attr]
        assert "4240 task 2" in facts and "nobody" in facts


def test_unknown_job_is_a_404_page(admin_client: TestClient) -> None:
    response = admin_client.get("/jobs/424242424")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    page = parse(response.text)
    assert "no verdict for job 424242424" in page.find("p", role="alert").text()  # type: ignore[union-attr]
    assert response.headers["content-security-policy"] == CSP


def test_hostile_text_is_shown_never_run(admin_client: TestClient, page_store: PageStore) -> None:
    listing = admin_client.get("/", params={"user": "mallory"})
    assert listing.status_code == 200
    assert page_store.extra.hostile in listed_keys(parse(listing.text))
    job = admin_client.get(f"/jobs/{page_store.extra.hostile}")
    assert job.status_code == 200
    for response in (listing, job):
        no_active_content(response.text)
        assert "<script>" not in response.text.lower()
        assert html.escape(HOSTILE_SUMMARY, quote=False) in response.text.replace("&#34;", '"')
    page = parse(job.text)
    # shown as text, exactly as logged
    assert HOSTILE_LINE in page.by_id("chain").text()
    assert HOSTILE_SUMMARY in page.text() and HOSTILE_NAME in page.text()
    assert "<b>bold</b> symptom" in page.by_id("chain").text()
    assert page.find("b") is None and page.find("i") is None and page.find("img") is None
    assert "attribution: <i>x</i>" in page.text()  # the AdminComment, as text


# ------------------------------------------------------------------ a plain user


def test_a_user_sees_only_their_own_jobs(nobody_client: TestClient, page_store: PageStore) -> None:
    response = nobody_client.get("/")
    assert response.status_code == 200
    page = parse(response.text)
    assert listed_keys(page) == [page_store.extra.nobody]
    assert "nobody" in page.find("span", class_="who").text()  # type: ignore[union-attr]
    assert "administrator" not in page.find("span", class_="who").text()  # type: ignore[union-attr]
    form = page.find("form", class_="filters")
    assert form is not None and form.find("input", name="user") is None
    assert page.find("a", href="/fleet") is None
    # asking for another user's jobs still shows only theirs
    other = parse(nobody_client.get("/", params={"user": "dana"}).text)
    assert listed_keys(other) == [page_store.extra.nobody]
    # the charts count their job only
    assert "(1 failed job," in page.by_id("time-chart-title").text()


def test_a_user_reads_their_verdict_without_other_jobs_lines(
    nobody_client: TestClient, admin_client: TestClient, page_store: PageStore
) -> None:
    mine = nobody_client.get(f"/jobs/{page_store.extra.nobody_display}")
    assert mine.status_code == 200
    chain = parse(mine.text).by_id("chain").text()
    assert HIDDEN in chain and FOREIGN_LINE not in mine.text
    # the administrator reads the same line
    seen = admin_client.get(f"/jobs/{page_store.extra.nobody_display}")
    assert FOREIGN_LINE in parse(seen.text).by_id("chain").text()


def test_a_user_is_refused_other_jobs_and_the_fleet(nobody_client: TestClient) -> None:
    theirs = nobody_client.get("/jobs/809251")
    assert theirs.status_code == 403
    assert "belongs to another user" in parse(theirs.text).find("p", role="alert").text()  # type: ignore[union-attr]
    fleet = nobody_client.get("/fleet")
    assert fleet.status_code == 403
    assert "administrators only" in parse(fleet.text).find("p", role="alert").text()  # type: ignore[union-attr]
    for response in (theirs, fleet):
        assert response.headers["content-type"].startswith("text/html")
        assert response.headers["content-security-policy"] == CSP


def test_a_proxy_header_from_an_untrusted_address_is_not_believed(page_store: PageStore) -> None:
    app = make_app(page_store.db, proxy_header=PROXY_HEADER)
    with TestClient(app, client=("192.0.2.7", 4000), headers={PROXY_HEADER: "root"}) as client:
        assert client.get("/").status_code == 401


# ------------------------------------------------------------------ logging in


def test_without_credentials_the_page_says_how_to_log_in(anonymous_client: TestClient) -> None:
    for url in ("/", "/jobs/809251", "/fleet", "/jobs?sub_domain=hardware"):
        response = anonymous_client.get(url)
        assert response.status_code == 401, url
        assert response.headers["content-type"].startswith("text/html")
        assert "Bearer" in response.headers["www-authenticate"]
        assert response.headers["content-security-policy"] == CSP
        ways = parse(response.text).find("ol", class_="ways")
        assert ways is not None
        text = ways.text()
        assert "MUNGE" in text and "reverse proxy" in text and "?token=" in text
        # the page tells nobody how the proxy is trusted (header name, addresses)
        assert PROXY_HEADER not in response.text and "127.0.0.1" not in response.text
        no_active_content(response.text)


def test_a_valid_token_in_the_url_becomes_a_cookie(anonymous_client: TestClient) -> None:
    response = anonymous_client.get(f"/jobs?sub_domain=hardware&token={TOKEN}&offset=0")
    assert response.status_code == 303
    assert response.headers["location"] == "/jobs?sub_domain=hardware&offset=0"
    raw = response.headers["set-cookie"]
    cookie = SimpleCookie(raw)[COOKIE]
    assert cookie.value == TOKEN
    assert cookie["httponly"] is True and cookie["samesite"].lower() == "strict"
    assert cookie["path"] == "/"
    # the browser comes back with the cookie: the page, for the token's holder
    anonymous_client.cookies.set(COOKIE, TOKEN)
    page = anonymous_client.get(response.headers["location"])
    assert page.status_code == 200 and "administrator" in page.text
    # on any page
    job = anonymous_client.get(f"/jobs/809251?token={TOKEN}")
    assert job.status_code == 303 and job.headers["location"] == "/jobs/809251"


def test_a_wrong_or_stale_token_is_refused_and_cleared(page_store: PageStore) -> None:
    app = make_app(page_store.db)
    with TestClient(app, follow_redirects=False) as client:
        wrong = client.get("/?token=not-the-token")
        assert wrong.status_code == 401 and "wrong token" in wrong.text
        # a cookie of an earlier server: refused, cleared, and a fresh ?token= still works
        client.cookies.set(COOKIE, "token-of-yesterday")
        stale = client.get("/")
        assert stale.status_code == 401
        cleared = SimpleCookie(stale.headers["set-cookie"])[COOKIE]
        assert cleared.value == "" and cleared["max-age"] == "0"
        fresh = client.get(f"/?token={TOKEN}")
        assert fresh.status_code == 303
        assert SimpleCookie(fresh.headers["set-cookie"])[COOKIE].value == TOKEN


# ------------------------------------------------------------------ the fleet


def test_the_fleet_page_shows_the_suspect_node(
    admin_client: TestClient, page_store: PageStore
) -> None:
    response = admin_client.get("/fleet", params={"since": "all"})
    assert response.status_code == 200
    page = parse(response.text)
    data = admin_client.get("/api/v1/nodes", params={"since": "all"}).json()
    suspects = [r["node"] for r in data["nodes"] if r["status"] == "suspect"]
    assert FLEET_NODE in suspects
    rows = table_rows(page, "nodes")
    shown = {r.find("a").text(): r for r in rows}  # type: ignore[union-attr]
    assert set(suspects) <= set(shown)
    assert "suspect" in shown[FLEET_NODE].text()
    # only rows that stand out, unless every row is asked for
    statuses = {r["node"]: r["status"] for r in data["nodes"]}
    assert all(statuses[n] not in ("ok", "low-count") for n in shown)
    every = parse(admin_client.get("/fleet", params={"since": "all", "all": "1"}).text)
    assert len(table_rows(every, "nodes")) == len(data["nodes"])
    # the method and the counts it ran on
    method = page.find("section", class_="method")
    assert method is not None
    assert "Benjamini-Hochberg" in method.text() and f"{data['runs']:,} job runs" in method.text()
    for section in ("domains-title", "silent-title", "incidents-title"):
        assert page.by_id(section) is not None
    assert "Slurm's node events are not read by the server" in method.text()
    no_active_content(response.text)


def test_the_fleet_window_is_the_form(admin_client: TestClient) -> None:
    before = parse(admin_client.get("/fleet", params={"since": "all", "until": "2020-01-01"}).text)
    assert before.find("table", id="nodes") is None  # no fleet job ended before 2020
    bad = admin_client.get("/fleet", params={"since": "soon"})
    assert bad.status_code == 422
    assert "since=" in parse(bad.text).find("p", role="alert").text()  # type: ignore[union-attr]


# ------------------------------------------------------------------ static files


def test_the_stylesheet_is_served_and_cached(admin_client: TestClient) -> None:
    page = parse(admin_client.get("/").text)
    link = page.find("link", rel="stylesheet")
    assert link is not None and link.attrs["href"].startswith("/static/style.css?v=")
    css = admin_client.get(link.attrs["href"])
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "max-age" in css.headers["cache-control"]
    for domain in ("hardware", "infrastructure", "system_software", "application"):
        assert f".d-{domain}" in css.text
    assert admin_client.get("/static/../pages.py").status_code == 404
    assert admin_client.get("/static/nothing.css").status_code == 404


# ------------------------------------------------------------------ chart geometry


def test_the_time_chart_picks_its_bar_by_the_window_length() -> None:
    rows = [
        {"day": "2026-03-02", "sub_domain": "hardware", "jobs": 2},
        {"day": "2026-03-02", "sub_domain": "application", "jobs": 1},
        {"day": "2026-03-05", "sub_domain": "hardware", "jobs": 4},
    ]
    days = charts.failures_over_time(rows)
    assert days.unit == "day" and [p.label for p in days.periods] == [
        "2026-03-02",
        "2026-03-03",
        "2026-03-04",
        "2026-03-05",
    ]
    assert days.totals == {"hardware": 6, "application": 1}
    assert days.domains == ("hardware", "application")  # hardware stacked first
    # the filter's window widens the chart: a year of days becomes weeks starting on Monday
    weeks = charts.failures_over_time(
        rows, since=datetime(2025, 6, 1, tzinfo=UTC), until=datetime(2026, 3, 9, tzinfo=UTC)
    )
    assert weeks.unit == "week" and weeks.periods[-1].label == "2026-03-02"
    assert weeks.periods[-1].total == 7 and weeks.total == 7
    years = charts.failures_over_time(
        [*rows, {"day": "2011-01-01", "sub_domain": "none", "jobs": 1}]
    )
    assert years.unit == "year" and years.periods[0].label == "2011" and len(years.periods) == 16
    # the tallest stack reaches the top tick, which is a round number above it
    top = min(t.at for t in days.y_ticks)
    assert float(days.y_ticks[-1].label) >= 4 and days.y_ticks[-1].at == top
    tallest = [b for b in days.bars if b.tip.startswith("2026-03-05")]
    assert len(tallest) == 1 and tallest[0].y >= top
    assert charts.failures_over_time([]).periods == ()


def test_nice_steps() -> None:
    assert [charts.nice_step(n) for n in (0, 3, 7, 20, 33, 180, 4100)] == [
        1,
        1,
        2,
        5,
        10,
        50,
        2000,
    ]
