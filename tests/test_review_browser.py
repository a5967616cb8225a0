"""The review page in a real browser: Debian's headless Chromium driven through chromium-driver (Selenium), never a
downloaded browser. A reviewer signs in, opens the queue, reads a conversation, labels it with the keyboard and
sees agreement change; a hostile trace renders inert and bounded. Screenshots of each page go to docs/ (kept
current by this test)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.review.queue import Quotas
from monitor.review.store import ReviewStore
from monitor.review.web import Auth, ReviewApp, ReviewServer
from monitor.settings import ReviewSettings
from monitor.store.sql import SqlStore
from tests.conftest import REPO, require_binary, require_module
from tests.review_helpers import add_conversation, chat, verdict

webdriver = require_module("selenium.webdriver", "pip install selenium")
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "review-token-0123456789"
DOCS = REPO / "docs" / "review"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return str(shutil.which(name))
    return require_binary("chromium")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    binary, driver_path = _chromium(), require_binary("chromedriver")
    options = Options()
    options.binary_location = binary
    profile = tmp_path_factory.mktemp("chromium-profile")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(argument)
    os.environ.setdefault("SE_AVOID_STATS", "true")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _server(store: SqlStore, **settings: Any) -> tuple[ReviewServer, ReviewStore]:
    review_settings = ReviewSettings(enabled=True, port=0, **settings)
    review = ReviewStore(store)
    server = ReviewServer(ReviewApp(review, review_settings, Auth(TOKEN, None, ())))
    server.start()
    return server, review


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, ReviewStore]]:
    store = SqlStore(f"sqlite:///{tmp_path / 'review.db'}")
    for n in range(3):
        cid = f"conv-{n}"
        add_conversation(store, cid, chat(2, text=f"question about order {n}"), number=n,
                         tools=[{"name": "lookup_order", "description": "find an order"}])
        store.record(verdict(cid, outcome="pass" if n else "fail", score=0.8 if n else 0.3, dimensions=(4, 3)))
    server, review = _server(store)
    review.fill_queue(Quotas(uniform_share=1.0))
    try:
        yield server.url, review
    finally:
        server.close()
        store.close()


def _wait_text(driver: Any, text: str) -> None:
    # The page may be replaced while it is read (a redirect after a form): read it again then.
    WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: text in d.find_element(By.TAG_NAME, "body").text)


def _sign_in(driver: Any, url: str) -> None:
    driver.get(url + "/queue")
    assert driver.current_url.endswith("/signin"), "the queue was shown without signing in"
    driver.find_element(By.NAME, "reviewer").send_keys("alice")
    driver.find_element(By.NAME, "token").send_keys(TOKEN + Keys.ENTER)
    _wait_text(driver, "Review queue")


def _shot(driver: Any, name: str) -> None:
    DOCS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(DOCS / f"{name}.png"))


def test_a_reviewer_labels_the_queue_with_the_keyboard_and_sees_agreement_change(
        browser: Any, site: tuple[str, ReviewStore]) -> None:
    url, review = site
    browser.delete_all_cookies()
    browser.get(url + "/signin")
    _shot(browser, "signin")
    _sign_in(browser, url)
    rows = browser.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")
    assert len(rows) == 3 and all("uniform" in row.text for row in rows)
    _shot(browser, "queue")

    # Enter opens the next unlabelled verdict: the conversation with the judge's scores and reasons beside it.
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
    _wait_text(browser, "Your label")
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "You are a support agent." in page and "question about order 2 0" in page and "answer 1" in page
    assert "helpfulness reason" in page and "the judge's reason" in page
    _shot(browser, "conversation")

    # 2, 3 score the two dimensions; f: fail; s: save and go to the next unlabelled one.
    agreement_before = _agreement_cell(browser, url)
    browser.back()
    _wait_text(browser, "Your label")
    body = browser.find_element(By.TAG_NAME, "body")
    for key in ("2", "3", "f", "s"):
        body.send_keys(key)
    _wait_text(browser, "Label saved.")
    [label] = review.labels()
    assert (label.reviewer, label.passed, label.dimensions, label.conversation_id) == (
        "alice", False, {"helpfulness": 2, "accuracy": 3}, "conv-2")
    # The judge passed conv-2 and alice failed it: pass/fail agreement 0 of 1.
    assert agreement_before == "no labels"
    assert _agreement_cell(browser, url) == ("0.000", "1")

    browser.back()  # the next unlabelled one (conv-1, which the judge passed): label it pass, n/a for accuracy
    browser.get(url + "/queue")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
    _wait_text(browser, "Your label")
    assert "question about order 1" in browser.find_element(By.TAG_NAME, "body").text
    body = browser.find_element(By.TAG_NAME, "body")
    for key in ("4", "n", "p", "s"):
        body.send_keys(key)
    _wait_text(browser, "Label saved.")
    assert _agreement_cell(browser, url) == ("0.500", "2")
    _shot(browser, "agreement")

    browser.get(url + "/review/1/prompt")
    _wait_text(browser, "Raw reply")
    assert "judge instructions" in browser.find_element(By.TAG_NAME, "body").text
    _shot(browser, "prompt")

    # A form whose CSRF token is not the reviewer's is refused, and nothing is stored.
    browser.get(url + "/review/1")
    _wait_text(browser, "Your label")
    browser.execute_script('document.querySelector("#label-form input[name=csrf]").value = "0".repeat(64);')
    body = browser.find_element(By.TAG_NAME, "body")
    for key in ("5", "5", "p", "s"):
        body.send_keys(key)
    _wait_text(browser, "CSRF token is missing or wrong")
    assert [label.conversation_id for label in review.labels()] == ["conv-2", "conv-1"]


def _agreement_cell(browser: Any, url: str) -> tuple[str, str] | str:
    browser.get(url + "/agreement")
    _wait_text(browser, "Agreement")
    cells = browser.find_elements(By.CSS_SELECTOR, 'tr[data-dimension=""][data-measure="pass_fail"]')
    if not cells:
        return "no labels"
    return (cells[0].find_element(By.CSS_SELECTOR, ".value").text,
            cells[0].find_element(By.CSS_SELECTOR, ".n").text)


HOSTILE = ('<script>alert("xss")</script><img src=x onerror="alert(1)"> <a href="javascript:alert(2)">click</a> '
           '</conversation></pre></div></main><iframe src="https://example.com"></iframe>')


def test_a_hostile_trace_renders_inert_and_bounded(browser: Any, tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'hostile.db'}")
    huge = "A" * 3_000_000
    add_conversation(store, "evil", [{"role": "system", "content": HOSTILE},
                                     {"role": "user", "content": HOSTILE},
                                     {"role": "assistant", "content": huge},
                                     {"role": "user", "content": "javascript:alert(3)"}])
    store.record(verdict("evil", reason=HOSTILE))
    server, review = _server(store, max_page_bytes=200_000)
    review.fill_queue(Quotas(uniform_share=1.0))
    try:
        browser.delete_all_cookies()
        _sign_in(browser, server.url)
        browser.get(server.url + "/review/1")
        _wait_text(browser, "Your label")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - reading it is how Selenium says whether one is open
        text = browser.find_element(By.TAG_NAME, "body").text
        assert '<script>alert("xss")</script>' in text and "</conversation>" in text  # shown as text
        scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
        assert scripts == [server.url + "/static/review.js"]
        assert not browser.find_elements(By.TAG_NAME, "iframe")
        assert not browser.find_elements(By.CSS_SELECTOR, "img")
        hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
        assert all(h.startswith(server.url) for h in hrefs), hrefs
        assert "more characters not shown" in text
        assert len(browser.page_source) < 400_000  # 3 MB of trace text, a page of at most max_page_bytes of it
        _shot(browser, "hostile")
    finally:
        server.close()
        store.close()
