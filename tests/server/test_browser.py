"""The web pages in a real browser: Debian's headless Chromium driven by Selenium 4 against
``sattr serve``'s application under a real uvicorn on a loopback port.

Selenium Manager never downloads anything (``SE_OFFLINE``): the browser and its driver are
the system's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``. Without them the module is
skipped, unless ``ATTRIBUTION_REQUIRE_BROWSER=1`` asks for a failure instead. Full-page
screenshots go to ``test-output/screenshots/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attribution.store import Store, VerdictFilter
from tests.server.conftest import (
    FLEET_NODE,
    PROXY_HEADER,
    TOKEN,
    PageStore,
    make_app,
    uvicorn_serving,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRED = os.environ.get("ATTRIBUTION_REQUIRE_BROWSER") == "1"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"

_missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
if _missing:
    message = (
        f"no headless browser: {', '.join(_missing)} missing (apt install chromium chromium-driver)"
    )
    if REQUIRED:
        pytest.fail(message + "; ATTRIBUTION_REQUIRE_BROWSER=1 asks for one", pytrace=False)
    pytest.skip(message, allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server(page_store: PageStore) -> Iterator[str]:
    """The application over the page store, served by uvicorn in a thread; its base URL."""
    with uvicorn_serving(make_app(page_store.db, proxy_header=PROXY_HEADER)) as base:
        yield base


@pytest.fixture(scope="module")
def browser_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[bool], WebDriver]]:
    """``make(javascript)``: a headless Chromium, JavaScript on or off; all quit at the end."""
    made: list[WebDriver] = []
    saved = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or driver

    def make(javascript: bool) -> WebDriver:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        profile = tmp_path_factory.mktemp("chromium-profile")
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1440,1000",
            f"--user-data-dir={profile}",
        ):
            options.add_argument(flag)
        if not javascript:
            options.add_experimental_option(
                "prefs", {"profile.managed_default_content_settings.javascript": 2}
            )
        try:
            driver = webdriver.Chrome(
                service=Service(executable_path=str(CHROMEDRIVER)), options=options
            )
        except WebDriverException as exc:
            pytest.fail(f"headless Chromium did not start: {exc.msg}", pytrace=False)
        driver.set_page_load_timeout(30)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.quit()
    if saved is None:
        os.environ.pop("SE_OFFLINE", None)
    else:
        os.environ["SE_OFFLINE"] = saved


def screenshot(driver: WebDriver, name: str) -> Path:
    """The whole page (not only the window) as ``test-output/screenshots/<name>.png``,
    through the DevTools protocol (it works with the page's JavaScript off)."""
    import base64

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})  # type: ignore[attr-defined]
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    clip = {
        "x": 0,
        "y": 0,
        "width": min(int(size["width"]), 2400),
        "height": min(int(size["height"]), 8000),
        "scale": 1,
    }
    shot = driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": clip},
    )
    path = SCREENSHOTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    assert path.stat().st_size > 10_000, f"{path}: an empty screenshot"
    return path


def rows(driver: WebDriver) -> list[str]:
    """The store keys the list's rows link to."""
    links = driver.find_elements(By.CSS_SELECTOR, "table#verdicts tbody tr td:first-child a")
    return [str(a.get_attribute("href")).rsplit("/jobs/", 1)[1] for a in links]


def submit_filter(driver: WebDriver, sub_domain: str) -> None:
    form = driver.find_element(By.CSS_SELECTOR, "form.filters")
    Select(form.find_element(By.NAME, "sub_domain")).select_by_value(sub_domain)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 15).until(lambda d: f"sub_domain={sub_domain}" in d.current_url)


def store_keys(db: Path, selection: VerdictFilter) -> list[str]:
    with Store(db, readonly=True) as store:
        return [r["key"] for r in store.query(selection)]


def test_an_operator_reads_the_pages(
    server: str, browser_factory: Callable[[bool], WebDriver], page_store: PageStore
) -> None:
    driver = browser_factory(True)
    driver.get(f"{server}/?token={TOKEN}")
    # the token became a cookie and left the address bar
    assert driver.current_url == f"{server}/"
    cookie = driver.get_cookie("sattr_token")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert driver.title.startswith("Jobs")
    first_page = store_keys(page_store.db, VerdictFilter(limit=50))
    assert rows(driver) == first_page
    # the demo's jobs (the engine's verdicts of the sample bundles) are there
    with Store(page_store.db, readonly=True) as store:
        demo = {r["key"] for r in store.query(VerdictFilter(job="809251"))}
    assert demo & set(store_keys(page_store.db, VerdictFilter()))
    charts = driver.find_elements(By.CSS_SELECTOR, "figure.chart svg")
    assert len(charts) == 2 and all(c.size["width"] > 300 for c in charts)
    bars = driver.find_elements(By.CSS_SELECTOR, "svg.bars rect")
    assert bars and all(b.size["height"] > 0 for b in bars[:20])
    # styles applied: the stylesheet loaded under the CSP (a badge has its colour)
    badge = driver.find_element(By.CSS_SELECTOR, "table#verdicts .badge")
    assert badge.value_of_css_property("border-radius") != "0px"
    screenshot(driver, "01-jobs")

    submit_filter(driver, "hardware")
    hardware = store_keys(page_store.db, VerdictFilter(sub_domain="hardware", limit=50))
    assert rows(driver) == hardware and len(hardware) < len(first_page)
    badges = driver.find_elements(By.CSS_SELECTOR, "table#verdicts tbody .badge")
    assert {b.text for b in badges} == {"hardware"}
    screenshot(driver, "02-jobs-hardware")

    driver.find_element(By.CSS_SELECTOR, "a[href$='/jobs/c1_809251_0']").click()
    WebDriverWait(driver, 15).until(lambda d: "/jobs/c1_809251_0" in d.current_url)
    chain = driver.find_elements(By.CSS_SELECTOR, "table#chain tbody tr")
    coverage = driver.find_elements(By.CSS_SELECTOR, "table#coverage tbody tr")
    assert chain and coverage
    assert "root" in {r.find_element(By.CSS_SELECTOR, ".role").text.lower() for r in chain}
    assert "NVSwitch" in driver.find_element(By.CSS_SELECTOR, "section.verdict").text
    screenshot(driver, "03-job")

    driver.find_element(By.LINK_TEXT, "Fleet").click()
    WebDriverWait(driver, 15).until(lambda d: d.current_url.endswith("/fleet"))
    form = driver.find_element(By.CSS_SELECTOR, "form.filters")
    since = form.find_element(By.NAME, "since")
    since.clear()
    since.send_keys("all")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 15).until(lambda d: "since=all" in d.current_url)
    nodes = driver.find_elements(By.CSS_SELECTOR, "table#nodes tbody tr")
    assert FLEET_NODE in {r.find_element(By.CSS_SELECTOR, "td a").text for r in nodes}
    for section in ("nodes-title", "domains-title", "silent-title", "incidents-title"):
        assert driver.find_element(By.ID, section).is_displayed()
    screenshot(driver, "04-fleet")


def test_a_page_without_credentials_says_how_to_log_in(
    server: str, browser_factory: Callable[[bool], WebDriver]
) -> None:
    driver = browser_factory(True)
    driver.delete_all_cookies()
    driver.get(f"{server}/jobs/809251")
    text = driver.find_element(By.TAG_NAME, "main").text
    assert "Log in to read verdicts" in text and "MUNGE" in text and "?token=" in text
    screenshot(driver, "05-login")


def test_the_list_and_its_filter_work_without_javascript(
    server: str, browser_factory: Callable[[bool], WebDriver], page_store: PageStore
) -> None:
    driver = browser_factory(False)
    driver.get(f"{server}/?token={TOKEN}")
    assert driver.current_url == f"{server}/"
    assert rows(driver) == store_keys(page_store.db, VerdictFilter(limit=50))
    # JavaScript is really off in this browser: a page's script does not run
    driver.get("data:text/html,<title>before</title><script>document.title='ran'</script>")
    assert driver.title == "before"
    driver.get(f"{server}/")
    submit_filter(driver, "infrastructure")
    wanted = store_keys(page_store.db, VerdictFilter(sub_domain="infrastructure", limit=50))
    assert wanted and rows(driver) == wanted
    # paging by plain links
    driver.get(f"{server}/?limit=20")
    driver.find_element(By.CSS_SELECTOR, "nav.pager a[rel=next]").click()
    WebDriverWait(driver, 15).until(lambda d: "offset=20" in d.current_url)
    assert rows(driver) == store_keys(page_store.db, VerdictFilter(limit=20, offset=20))
    screenshot(driver, "06-jobs-no-javascript")
