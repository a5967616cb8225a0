"""The review loop without a browser: the queue's picks, the page's HTTP contract (no page without the token, CSRF,
headers, bounds), labels that survive a restart, and agreement that equals an independent computation."""

from __future__ import annotations

import http.client
import json
import math
import random
import re
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from monitor.daemon.loop import start_review
from monitor.errors import ConfigError
from monitor.metrics import MonitorMetrics
from monitor.review.agreement import agreement, wilson
from monitor.review.queue import Quotas
from monitor.review.step import ReviewStep
from monitor.review.store import Filters, ReviewStore, StoredLabel
from monitor.review.web import Auth, ReviewApp, ReviewServer, check_review_settings
from monitor.settings import ReviewSettings, Settings
from monitor.store.sql import SqlStore
from tests.review_helpers import DAY, add_conversation, chat, record_many, verdict

TOKEN = "review-token-0123456789"


class Site:
    def __init__(self, path: Path, **settings: Any) -> None:
        self.path = path
        self.settings = ReviewSettings(enabled=True, port=0, **settings)
        self.open()

    def open(self) -> None:
        self.store = SqlStore(f"sqlite:///{self.path}")
        self.review = ReviewStore(self.store)
        self.server = ReviewServer(ReviewApp(self.review, self.settings, Auth(TOKEN, None, ())))
        self.server.start()

    def close(self) -> None:
        self.server.close()
        self.store.close()

    def request(self, method: str, path: str, body: dict[str, str] | None = None, token: str | None = TOKEN,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        host, port = self.server.address
        connection = http.client.HTTPConnection(host, port, timeout=30)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = urlencode(body)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    seeded = SqlStore(f"sqlite:///{tmp_path / 'review.db'}")
    for n in range(3):
        add_conversation(seeded, f"conv-{n}", chat(2, text=f"secret question {n}"), number=n)
        seeded.record(verdict(f"conv-{n}", outcome="fail" if n == 0 else "pass", score=0.3 if n == 0 else 0.8))
    ReviewStore(seeded).fill_queue(Quotas(uniform_share=1.0))
    seeded.close()
    found = Site(tmp_path / "review.db")
    try:
        yield found
    finally:
        found.close()


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "the form carries no CSRF token"
    return match.group(1)


PAGES = ("/", "/queue", "/results", "/agreement", "/review/1", "/review/1/prompt", "/conversations/conv-0",
         "/queue?rubric=support&label=unlabelled")


def test_no_page_without_the_token(site: Site) -> None:
    for path in PAGES:
        for token in (None, "wrong-token-0123456789"):
            status, headers, body = site.request("GET", path, token=token)
            assert (status, headers.get("location")) == (303, "/signin"), path
            assert "secret question" not in body and "support" not in body
        status, headers, body = site.request("GET", path)
        assert status == 200 or headers["location"] in ("/queue", "/review/1"), path
    status, _, body = site.request("GET", "/review/1")
    assert status == 200 and "secret question 0" in body
    status, _, _ = site.request("POST", "/review/1/label", {"passed": "pass"}, token=None)
    assert status == 401
    assert site.review.labels() == []


def test_sign_in_sets_a_secure_http_only_same_site_cookie(site: Site) -> None:
    status, _, page = site.request("GET", "/signin", token=None)
    assert status == 200
    form = {"csrf": csrf_of(page), "reviewer": "bob", "token": "not the token", "next": "/queue"}
    status, headers, _ = site.request("POST", "/signin", form, token=None)
    assert status == 401 and "set-cookie" not in headers
    status, headers, _ = site.request("POST", "/signin", {**form, "token": TOKEN, "next": "//evil.example/"},
                                      token=None)
    assert status == 303 and headers["location"] == "/queue"  # never an open redirect
    cookie = headers["set-cookie"]
    assert all(attribute in cookie for attribute in ("Secure", "HttpOnly", "SameSite=Strict", "Path=/"))
    session = cookie.split(";")[0]
    status, _, body = site.request("GET", "/queue", token=None, headers={"Cookie": session})
    assert status == 200 and "bob" in body
    tampered = session[:-4] + ("0000" if not session.endswith("0000") else "1111")
    status, _, _ = site.request("GET", "/queue", token=None, headers={"Cookie": tampered})
    assert status == 303


def test_forms_without_the_csrf_token_or_from_another_site_are_refused(site: Site) -> None:
    status, _, page = site.request("GET", "/review/2")
    csrf = csrf_of(page)
    label = {"passed": "fail", "dim.helpfulness": "2", "dim.accuracy": "na", "note": "<b>bold</b>"}
    for form, headers in (({**label}, {}), ({**label, "csrf": "0" * 64}, {}),
                          ({**label, "csrf": csrf}, {"Sec-Fetch-Site": "cross-site"})):
        status, _, body = site.request("POST", "/review/2/label", form, headers=headers)
        assert status == 403, body
    assert site.review.labels() == []
    status, headers, _ = site.request("POST", "/review/2/label", {**label, "csrf": csrf})
    assert status == 303 and "saved=1" in headers["location"]
    [saved] = site.review.labels()
    assert (saved.reviewer, saved.passed, saved.dimensions, saved.note) == (
        "api", False, {"helpfulness": 2, "accuracy": None}, "<b>bold</b>")
    status, _, _ = site.request("POST", "/review/2/label", {"passed": "maybe", "csrf": csrf})
    assert status == 400
    site.store.record(verdict("conv-2", rubric="per-turn", turn_index=1))
    [(turn_id, _)] = [(i, r) for i, r in site.review.current_results("conv-2") if r.turn_index == 1]
    status, _, page = site.request("GET", f"/review/{turn_id}")
    assert status == 200 and "this one judges a single turn" in page and 'id="label-form"' not in page
    status, _, _ = site.request("POST", f"/review/{turn_id}/label", {**label, "csrf": csrf})
    assert status == 400 and len(site.review.labels()) == 1


def test_every_page_carries_a_strict_content_security_policy(site: Site) -> None:
    for path in (*PAGES, "/signin", "/static/review.js", "/nope"):
        _, headers, body = site.request("GET", path)
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
        assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
        assert "<script>" not in body and " style=" not in body and "onclick" not in body.lower()


def test_the_page_is_bounded(site: Site, tmp_path: Path) -> None:
    status, _, _ = site.request("POST", "/review/1/label", None,
                                headers={"Content-Length": str(10 * 1024 * 1024)})
    assert status == 413
    site.close()
    site.settings = ReviewSettings(enabled=True, port=0, max_connections=1)
    site.open()
    host, port = site.server.address
    holder = socket.create_connection((host, port), timeout=30)
    holder.sendall(b"GET /queue HTTP/1.1\r\n")  # an unfinished request: it holds no worker
    try:
        status, _, _ = site.request("GET", "/queue")
        assert status == 200
    finally:
        holder.close()


class GatedReviewStore(ReviewStore):
    """The real review store, whose queue page waits until the test opens the gate (a page still rendering)."""

    def __init__(self, store: SqlStore) -> None:
        super().__init__(store)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def rubrics_and_agents(self) -> tuple[list[str], list[str]]:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().rubrics_and_agents()


def test_past_max_connections_requests_are_answered_503_and_counted(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'review.db'}")
    gated = GatedReviewStore(store)
    drops: list[str] = []
    settings = ReviewSettings(enabled=True, port=0, max_connections=1, request_timeout_seconds=0.5)
    server = ReviewServer(ReviewApp(gated, settings, Auth(TOKEN, None, ())), on_drop=drops.append)
    server.start()
    host, port = server.address
    try:
        answers: list[int] = []

        def get_queue() -> None:
            connection = http.client.HTTPConnection(host, port, timeout=30)
            connection.request("GET", "/queue", headers={"Authorization": f"Bearer {TOKEN}"})
            answers.append(connection.getresponse().status)
            connection.close()

        first = threading.Thread(target=get_queue)
        first.start()
        assert gated.entered.wait(30)  # the only worker renders the first page
        connection = http.client.HTTPConnection(host, port, timeout=30)
        connection.request("GET", "/queue", headers={"Authorization": f"Bearer {TOKEN}"})
        response = connection.getresponse()
        assert (response.status, response.getheader("Retry-After")) == (503, "1")
        connection.close()
        gated.gate.set()
        first.join(30)
        assert answers == [200]
        # A request that never arrives whole is answered 408 after request_timeout_seconds.
        with socket.create_connection((host, port), timeout=30) as slow:
            slow.sendall(b"GET /queue HTTP/1.1\r\n")
            assert slow.recv(100).startswith(b"HTTP/1.0 408")
        assert drops == ["busy", "read_timeout"]
    finally:
        server.close()
        store.close()


def test_off_loopback_needs_a_token_or_a_trusted_proxy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="review.token_file"):
        check_review_settings(ReviewSettings(host="0.0.0.0"))
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="shorter than 16"):
        check_review_settings(ReviewSettings(host="0.0.0.0", token_file=short))
    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")
    assert check_review_settings(ReviewSettings(host="0.0.0.0", token_file=good)) == TOKEN
    assert check_review_settings(ReviewSettings(host="0.0.0.0", trusted_proxy_header="X-Forwarded-Email")) is None
    assert check_review_settings(ReviewSettings()) is None  # loopback: reviewer "local"
    proxy = Auth(None, "X-Forwarded-Email", ("127.0.0.1",))
    now = DAY
    assert proxy.reviewer({"X-Forwarded-Email": "carol@example.com"}, "127.0.0.1", now) == "carol@example.com"
    assert proxy.reviewer({"X-Forwarded-Email": "carol@example.com"}, "10.0.0.9", now) is None


def test_labels_survive_a_restart(site: Site) -> None:
    _, _, page = site.request("GET", "/review/3")
    site.request("POST", "/review/3/label", {"csrf": csrf_of(page), "passed": "pass", "dim.helpfulness": "5",
                                             "dim.accuracy": "4", "note": "fine"})
    site.close()
    site.open()
    [label] = site.review.labels()
    assert (label.conversation_id, label.passed, label.dimensions, label.note) == (
        "conv-2", True, {"helpfulness": 5, "accuracy": 4}, "fine")
    _, _, page = site.request("GET", "/review/3")
    assert re.search(r'name="dim.helpfulness" value="5" checked', page)
    assert re.search(r'name="passed" value="pass" required checked', page)


def test_the_queue_takes_each_days_quota_and_says_why(tmp_path: Path) -> None:
    store = SqlStore("sqlite://")  # in memory: 1200 verdicts recorded in seconds
    for day in range(2):
        for n in range(600):
            outcome = "unscored" if n % 50 == 0 else "fail" if n % 4 == 0 else "pass"
            score = None if outcome == "unscored" else 0.62 if n % 7 == 0 else 0.3 if outcome == "fail" else 0.9
            store.record(verdict(f"c{day}-{n}", outcome=outcome, score=score,
                                 at=DAY + timedelta(days=day, seconds=n), context_truncated=n == 599))
    review = ReviewStore(store)
    quotas = Quotas(uniform_share=0.05, uniform_per_day=1000, failing_per_day=3, borderline_per_day=4,
                    flagged_per_day=2)
    first = review.fill_queue(quotas, batch=500)  # a backlog is worked through over cycles
    rest = review.fill_queue(quotas)
    assert review.fill_queue(quotas) == {}  # nothing is considered twice
    assert ReviewStore(store).fill_queue(quotas) == {}  # nor after a restart
    total = {k: first.get(k, 0) + rest.get(k, 0) for k in set(first) | set(rest)}
    assert (total["failing"], total["borderline"], total["flagged"]) == (6, 8, 4)
    # 1200 verdicts, each uniform with probability 0.05: 60 expected, within 4 standard deviations.
    assert abs(total["uniform"] - 60) < 4 * math.sqrt(1200 * 0.05 * 0.95)
    rows = review.queue_page(Filters(), limit=200).rows
    for row in rows:
        assert row.reason in ("uniform", "failing", "borderline", "flagged")
        if row.reason == "failing":
            assert row.outcome == "fail"
        if row.reason == "flagged":
            assert row.outcome == "unscored" or row.conversation_id.endswith("-599")
    assert {r.reason for r in review.queue_page(Filters(reason="borderline"), limit=200).rows} == {"borderline"}
    store.close()


def test_the_lists_page_through_every_row_once(tmp_path: Path) -> None:
    store = SqlStore("sqlite://")
    record_many(store, 130)
    record_many(store, 20, rubric="other")
    review = ReviewStore(store)
    seen: list[int] = []
    cursor = None
    while True:
        page = review.results_page(Filters(rubric="support"), after=cursor, limit=50)
        seen.extend(row.result_id for row in page.rows)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 130
    failing = review.results_page(Filters(outcome="fail", rubric="support"), limit=200).rows
    assert len(failing) == 44 and all(r.outcome == "fail" for r in failing)
    review.save_label(StoredLabel("support-00003", "support", "x", True, result_id=4))
    assert [r.result_id for r in review.results_page(Filters(label="labelled")).rows] == [4]
    assert len(review.results_page(Filters(label="unlabelled"), limit=200).rows) == 149
    day = DAY.replace(hour=0)
    window = review.results_page(Filters(since=day, until=day + timedelta(seconds=10)), limit=200).rows
    assert sorted(r.conversation_id for r in window) == sorted(
        [f"support-{n:05d}" for n in range(10)] + [f"other-{n:05d}" for n in range(10)])
    store.close()


# agreement ------------------------------------------------------------------------------------------------------

def weighted_kappa(pairs: list[tuple[int, int]]) -> float:
    """Quadratically weighted κ, written out as in Cohen (1968), on numpy arrays."""
    observed = np.zeros((5, 5))
    for a, b in pairs:
        observed[a - 1, b - 1] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    i, j = np.indices((5, 5))
    weights = (i - j) ** 2 / 16
    return float(1 - (weights * observed).sum() / (weights * expected).sum())


def test_agreement_equals_an_independent_computation(tmp_path: Path) -> None:
    store = SqlStore("sqlite://")
    record_many(store, 300)
    review = ReviewStore(store)
    review.fill_queue(Quotas(uniform_share=0.5, uniform_per_day=10_000, failing_per_day=10))
    draw = random.Random(7)
    labelled: list[tuple[bool, bool, int, int]] = []  # people pass, judge pass, people helpfulness, judge's
    for row in review.queue_page(Filters(), limit=200).rows:
        found = review.result(row.result_id)
        assert found is not None
        result, reason = found
        judge_help = result.dimension_scores[0].score or 0
        person = max(1, min(5, judge_help + draw.choice((-2, -1, 0, 0, 0, 1))))
        passed = result.passed if draw.random() < 0.8 else not result.passed
        review.save_label(StoredLabel(result.conversation_id, "support", "ann", passed,
                                      {"helpfulness": person, "accuracy": None}, result_id=row.result_id))
        if reason == "uniform":
            labelled.append((passed, result.passed, person, judge_help))
    registry = CollectorRegistry()
    metrics = MonitorMetrics(registry)
    ReviewStep(review, Quotas(), metrics.judge_agreement).refresh()

    def gauge(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"rubric": "support", **labels})

    n = len(labelled)
    assert n > 30
    assert gauge("rubric_monitor_judge_agreement_labels", dimension="") == n  # the uniform share only
    matches = sum(p == j for p, j, _, _ in labelled)
    assert gauge("rubric_monitor_judge_agreement", dimension="", measure="pass_fail") == pytest.approx(matches / n)
    pairs = [(a, b) for _, _, a, b in labelled]
    assert gauge("rubric_monitor_judge_agreement", dimension="helpfulness", measure="weighted_kappa") == \
        pytest.approx(weighted_kappa(pairs))
    assert gauge("rubric_monitor_judge_agreement", dimension="helpfulness", measure="within_one") == \
        pytest.approx(sum(abs(a - b) <= 1 for a, b in pairs) / n)
    lower = gauge("rubric_monitor_judge_agreement_bound", dimension="", measure="pass_fail", bound="lower")
    upper = gauge("rubric_monitor_judge_agreement_bound", dimension="", measure="pass_fail", bound="upper")
    assert lower is not None and upper is not None and lower < matches / n < upper
    # Wilson's interval, from its closed form.
    p, z = matches / n, 1.959963984540054
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    assert (lower, upper) == pytest.approx((centre - half, centre + half))
    kappa_low = gauge("rubric_monitor_judge_agreement_bound", dimension="helpfulness", measure="weighted_kappa",
                      bound="lower")
    assert kappa_low is not None and kappa_low < weighted_kappa(pairs)
    assert gauge("rubric_monitor_judge_agreement", dimension="accuracy", measure="exact") is None  # all n/a
    assert wilson(0, 0) == (None, None)
    assert set(agreement(review.labelled_verdicts(uniform_only=False))) == {"support"}
    store.close()


def test_the_daemon_serves_the_review_page_and_links_alert_examples_to_it(tmp_path: Path) -> None:
    from monitor.app import build_alerts, build_review

    token = tmp_path / "token"
    token.write_text(TOKEN)
    settings = Settings.model_validate({"review": {"enabled": True, "port": 0, "token_file": str(token)},
                                        "store": {"url": f"sqlite:///{tmp_path / 'd.db'}"}})
    store = SqlStore(settings.store.url)
    registry = CollectorRegistry()
    step, found_token = build_review(settings, store, MonitorMetrics(registry))
    server = start_review(SimpleNamespace(review=step, settings=settings, review_token=found_token))  # type: ignore[arg-type]
    assert server is not None
    try:
        host, port = server.address
        connection = http.client.HTTPConnection(host, port, timeout=30)
        connection.request("GET", "/queue", headers={"Authorization": f"Bearer {TOKEN}"})
        assert connection.getresponse().status == 200
    finally:
        server.close()
    alerts = build_alerts(settings, store, CollectorRegistry())
    try:
        template = alerts.settings.example_link_template
        assert template == "http://127.0.0.1:0/conversations/{conversation_id_url}"  # port 0: the test picks one
        assert urlsplit(template.format(conversation_id_url="a%2Fb")).path == "/conversations/a%2Fb"
    finally:
        alerts.close(drain_seconds=0)
        store.close()


def test_the_page_keeps_a_conversation_once_its_spans_are_pruned(tmp_path: Path) -> None:
    from sqlalchemy import delete, update

    from monitor.store.tables import conversations_table, spans_table

    store = SqlStore("sqlite://")
    add_conversation(store, "kept", chat(2, text="remember me"))
    store.record(verdict("kept"))
    review = ReviewStore(store)
    assert review.fill_queue(Quotas(uniform_share=1.0)) == {"uniform": 1}  # queued: assembled and kept now
    with store.transaction() as conn:
        conn.execute(delete(spans_table))
        conn.execute(update(conversations_table).values(status="pruned"))
    found = review.conversation("kept")
    assert found is not None and "remember me 1" in found.messages[-2].text
    assert review.conversation("never-stored") is None
    review.save_label(StoredLabel("kept", "support", "ann", True, result_id=1))
    # Retention: kept conversations go after retention.conversations_days, queue rows with their verdicts; labels
    # stay.
    step = ReviewStep(review, Quotas(), MonitorMetrics(CollectorRegistry()).judge_agreement,
                      keep_conversations_days=30, keep_queue_days=90)
    step.run(object(), DAY + timedelta(days=400))
    assert review.conversation("kept") is None
    assert review.queue_page(Filters()).rows == [] and len(review.labels()) == 1
    store.close()


def test_check_refuses_a_review_page_open_off_loopback() -> None:
    from monitor.app import build_stages

    settings = Settings.model_validate({"review": {"enabled": True, "host": "0.0.0.0"}})
    with pytest.raises(ConfigError) as refused:
        build_stages(settings, CollectorRegistry(), load_model=False)
    assert any("review.token_file" in str(problem) for problem in refused.value.all)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_queue_labels_and_agreement_on_both_backends(backend: str, tmp_path: Path) -> None:
    from tests.helpers import store_test_url

    store = SqlStore(store_test_url(backend, tmp_path))
    try:
        add_conversation(store, "support-00000", chat(1))
        record_many(store, 13)  # the first 10 uniform; of the rest, support-00012 fails
        review = ReviewStore(store)
        assert review.fill_queue(Quotas(uniform_share=1.0, uniform_per_day=10)) == {"uniform": 10, "failing": 1}
        assert ReviewStore(store).fill_queue(Quotas(uniform_share=1.0)) == {}
        rows = review.queue_page(Filters(reason="uniform")).rows
        for row in rows:
            review.save_label(StoredLabel(row.conversation_id, "support", "ann", row.outcome == "pass",
                                          {"helpfulness": 3}, result_id=row.result_id))
        review.save_label(StoredLabel(rows[0].conversation_id, "support", "ann", rows[0].outcome != "pass",
                                      result_id=rows[0].result_id))  # replaced, not added
        assert len(review.labels()) == 10
        report = agreement(review.labelled_verdicts(uniform_only=True))["support"]
        assert report.measures[("", "pass_fail")].value == pytest.approx(9 / 10)
        assert review.conversation("support-00000") is not None
    finally:
        store.close()


def test_the_daemons_cycle_queues_its_verdicts_and_serves_them(tmp_path: Path) -> None:
    from monitor.app import build_monitor
    from monitor.settings import load_settings
    from tests.fakes.openai_server import ScriptedOpenAIServer
    from tests.helpers import SEED_PASS_SCORES
    from tests.helpers import verdict as scripted_verdict
    from tests.test_daemon import daemon_config, free_port

    with ScriptedOpenAIServer(lambda r: scripted_verdict(r, SEED_PASS_SCORES)) as judge:
        config = daemon_config(tmp_path, judge.base_url, free_port(),
                               review={"enabled": True, "port": 0, "uniform_share": 1.0})
        registry = CollectorRegistry()
        monitor = build_monitor(load_settings(config), registry)
        server = None
        try:
            assert monitor.run_cycle().ok
            server = start_review(monitor)
            assert server is not None
            host, port = server.address
            connection = http.client.HTTPConnection(host, port, timeout=30)
            connection.request("GET", "/queue")  # loopback without a token: reviewer "local"
            queue = connection.getresponse().read().decode()
            assert queue.count('class="open"') == 3 and queue.count("<td>uniform</td>") == 3
            connection.request("GET", "/review/1")
            page = connection.getresponse().read().decode()
            dimensions = re.findall(r'name="dim\.([^"]+)" value="4"', page)
            form = {"csrf": csrf_of(page), "passed": "pass", **{f"dim.{d}": "4" for d in dimensions}}
            connection.request("POST", "/review/1/label", body=urlencode(form),
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert connection.getresponse().status == 303
            # Saving a label publishes agreement again at once (the uniform share's one label).
            assert registry.get_sample_value("rubric_monitor_judge_agreement_labels",
                                             {"rubric": monitor.store.results()[0].rubric, "dimension": ""}) == 1
        finally:
            if server is not None:
                server.close()
            monitor.close()


def test_with_redaction_on_the_page_shows_the_placeholders_the_judge_saw(tmp_path: Path) -> None:
    """``redaction.apply_to`` includes ``review_page`` by default: the conversation a reviewer reads carries the
    same placeholders as the judge's prompt, and none of the raw values."""
    from monitor.app import build_monitor
    from monitor.settings import load_settings
    from tests.fakes.openai_server import ScriptedOpenAIServer
    from tests.helpers import SEED_PASS_SCORES
    from tests.helpers import verdict as scripted_verdict
    from tests.test_daemon import daemon_config, free_port

    with ScriptedOpenAIServer(lambda r: scripted_verdict(r, SEED_PASS_SCORES)) as judge:
        # The sample's local number (555-0142) is too short for the phone recognizer: a custom pattern takes it.
        redaction = {"enabled": True, "custom_patterns": [{"label": "PHONE", "pattern": r"555-\d{4}"}]}
        config = daemon_config(tmp_path, judge.base_url, free_port(), redaction=redaction,
                               review={"enabled": True, "port": 0, "uniform_share": 1.0})
        monitor = build_monitor(load_settings(config), CollectorRegistry())
        server = None
        try:
            assert monitor.run_cycle().ok
            prompts = "\n".join(r.prompt_text for r in judge.requests)
            assert "555-0142" not in prompts and "PHONE_1" in prompts
            server = start_review(monitor)
            assert server is not None
            connection = http.client.HTTPConnection(*server.address, timeout=30)
            connection.request("GET", "/review/1")
            page = connection.getresponse().read().decode()
            assert "555-0142" not in page
            assert "&lt;PHONE_1&gt;" in page
            # Once the queue kept its copies, the spans lose their text (redaction implies dropping span content).
            stored = json.dumps([s.model_dump(mode="json") for s in monitor.store.spans_of("conv-cancel")])
            assert "555-0142" not in stored and "Dana" not in stored
        finally:
            if server is not None:
                server.close()
            monitor.close()
