"""Regression alerts over a real store, delivered over HTTP to receivers on 127.0.0.1: what each receiver gets
(Alertmanager v2, Slack, Teams, signed webhook), lifecycle across a restart, and notifier faults (down, 500, slow,
429): retried, counted, nothing blocked, nothing sent twice after a restart."""

from __future__ import annotations

import hashlib
import hmac
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.alerts.notifiers import build_notifier
from monitor.alerts.service import AlertService
from monitor.models import DimensionScore, EvaluationResult, utc_now
from monitor.settings import AlertSettings
from monitor.store.sql import SqlStore
from tests.fakes.receiver import Answer, Received, Receiver

NOW = utc_now().replace(microsecond=0)
LINK = "https://portal.azure.com/#view/AppInsightsExtension/DetailsV2Blade/DataModel/%7B%22eventId%22:%22{operation_id}%22%7D"


def result(index: int, passed: bool, at: datetime, judge_model: str = "judge-a") -> EvaluationResult:
    return EvaluationResult(
        conversation_id=f"conv-{int(at.timestamp())}-{index}", trace_ids=(f"{index:032x}",), agent="support",
        rubric="helpfulness", rubric_version="v1", rubric_kind="weighted", judge_model=judge_model,
        prompt_version="1", outcome="pass" if passed else "fail", score=0.9 if passed else 0.3,
        reason="scripted", evaluated_at=at,
        dimension_scores=(DimensionScore(id="accuracy", score=5 if passed else 2, applicable=True, weight=5),
                          DimensionScore(id="tone", score=4, applicable=True, weight=1)),
    )


def seed(store: SqlStore, start: datetime, count: int, pass_every: int, span: timedelta, judge: str = "judge-a"
         ) -> None:
    """``count`` results spread over ``span`` from ``start``; one in ``pass_every`` fails."""
    for i in range(count):
        at = start + span * (i / count)
        store.record(result(i, i % pass_every != 0, at, judge))


def settings(notifiers: list[dict[str, Any]], **overrides: Any) -> AlertSettings:
    return AlertSettings.model_validate({
        "windows": ["1h"], "for_duration": "0s", "min_samples": 30, "example_link_template": LINK,
        "notifiers": notifiers, **overrides})


def service(store: SqlStore, alert_settings: AlertSettings, registry: CollectorRegistry | None = None
            ) -> AlertService:
    notifiers = [build_notifier(n, timedelta(hours=6)) for n in alert_settings.notifiers]
    return AlertService(alert_settings, store, registry or CollectorRegistry(), notifiers,
                        generator_url="http://127.0.0.1:9464/metrics")


def count(registry: CollectorRegistry, notifier: str, outcome: str) -> float:
    return registry.get_sample_value("rubric_monitor_notifications_total",
                                     {"notifier": notifier, "outcome": outcome}) or 0.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    sql = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    yield sql
    sql.close()


@pytest.fixture(scope="module")
def degraded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A week at 90 % (one in ten fails), then the last 40 minutes at 50 %; written once, copied per test."""
    path = tmp_path_factory.mktemp("template") / "degraded.db"
    sql = SqlStore(f"sqlite:///{path}")
    seed(sql, NOW - timedelta(days=7), 400, 10, timedelta(days=7) - timedelta(hours=2))
    seed(sql, NOW - timedelta(minutes=40), 120, 2, timedelta(minutes=39))
    sql.close()
    return path


@pytest.fixture
def degraded(degraded_db: Path, tmp_path: Path) -> Iterator[SqlStore]:
    copy = tmp_path / "results.db"
    shutil.copyfile(degraded_db, copy)
    sql = SqlStore(f"sqlite:///{copy}")
    yield sql
    sql.close()


def test_an_alert_reaches_every_receiver_explained_and_resolves_once(degraded: SqlStore, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    store = degraded
    registry = CollectorRegistry()
    with Receiver() as receiver:
        notifiers = [
            {"name": "am", "kind": "alertmanager", "url": receiver.url + "/am"},
            {"name": "slack", "kind": "slack", "url": receiver.url + "/slack/T000/B000/XXXX"},
            {"name": "teams", "kind": "teams", "url": receiver.url + "/teams"},
            {"name": "hook", "kind": "webhook", "url": receiver.url + "/hook", "secret": "s3cret"},
        ]
        alerts = service(store, settings(notifiers), registry)
        try:
            outcome = alerts.run_cycle(NOW)
            assert {(t.kind, t.state.kind, t.state.dimension) for t in outcome.transitions} == {
                ("firing", "pass_rate", ""), ("firing", "dimension_mean", "accuracy")}
            assert alerts.dispatcher.wait_idle(10)
        finally:
            alerts.close()
        assert len(receiver.received) == 8 and all(r.status == 200 for r in receiver.received)

        # Alertmanager API v2: labels, annotations, startsAt/endsAt, generatorURL.
        posted = [alert for r in receiver.on("/am/api/v2/alerts") for alert in r.json]
        pass_rate = next(a for a in posted if a["labels"]["kind"] == "pass_rate")
        assert pass_rate["labels"] == {"alertname": "RubricRegression", "rubric": "helpfulness", "agent": "support",
                                       "kind": "pass_rate", "baseline": "trailing", "severity": "warning"}
        annotations = pass_rate["annotations"]
        assert annotations["summary"].startswith("pass rate of helpfulness for agent support dropped to 50.0% from")
        assert "95% interval" in annotations["description"] and "accuracy" in annotations["dimensions"]
        assert annotations["window"] == "1h" and int(annotations["current_samples"]) == 120
        assert annotations["examples"].count("operation_Id") == 5
        starts, ends = datetime.fromisoformat(pass_rate["startsAt"]), datetime.fromisoformat(pass_rate["endsAt"])
        assert starts == NOW and ends > NOW + timedelta(hours=4)
        assert pass_rate["generatorURL"] == "http://127.0.0.1:9464/metrics"

        # Slack: text + blocks naming failing conversations with their operation_Id and a link.
        slack = [r.json for r in receiver.on("/slack/T000/B000/XXXX")]
        text = str(slack)
        assert any(s["text"].startswith(":rotating_light: pass rate of helpfulness") for s in slack)
        assert "operation_Id 00000000000000000000000000000" in text and "portal.azure.com" in text

        # Teams: a message with one Adaptive Card.
        teams = receiver.on("/teams")[0].json
        card = teams["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert card["content"]["type"] == "AdaptiveCard" and card["content"]["body"][0]["color"] == "Attention"

        # Webhook: the event itself, HMAC-SHA256 over "<timestamp>.<body>".
        hook = receiver.on("/hook")[0]
        expected = hmac.new(b"s3cret", hook.headers["x-rubric-monitor-timestamp"].encode() + b"." + hook.raw,
                            hashlib.sha256).hexdigest()
        assert hook.headers["x-rubric-monitor-signature"] == "sha256=" + expected
        event = hook.json
        assert event["kind"] == "firing" and len(event["examples"]) == 5
        assert event["details"]["current_samples"] == 120 and event["details"]["interval"][1] < 0

        assert registry.get_sample_value("rubric_monitor_regression", {
            "rubric": "helpfulness", "agent": "support", "kind": "pass_rate", "dimension": "",
            "baseline": "trailing"}) == 1.0
        assert count(registry, "am", "sent") == 2 and count(registry, "hook", "sent") == 2
        # Notifier URLs are secrets: never in the log.
        assert receiver.url not in caplog.text and "XXXX" not in caplog.text

        # A restart: nothing is sent again, the alert is still firing.
        registry = CollectorRegistry()
        restarted = service(store, settings(notifiers), registry)
        try:
            assert restarted.run_cycle(NOW + timedelta(minutes=1)).transitions == []
            assert restarted.dispatcher.wait_idle(10)
            assert len(receiver.received) == 8
            assert registry.get_sample_value("rubric_monitor_regression", {
                "rubric": "helpfulness", "agent": "support", "kind": "pass_rate", "dimension": "",
                "baseline": "trailing"}) == 1.0
            # Recovery: an hour of good results; resolved once, with endsAt.
            seed(store, NOW + timedelta(minutes=35), 100, 10, timedelta(minutes=50))
            later = NOW + timedelta(minutes=90)
            assert {t.kind for t in restarted.run_cycle(later).transitions} == {"resolved"}
            assert restarted.run_cycle(later + timedelta(minutes=1)).transitions == []
            assert restarted.dispatcher.wait_idle(10)
        finally:
            restarted.close()
        resolved = [a for r in receiver.on("/am/api/v2/alerts") for a in r.json
                    if datetime.fromisoformat(a["endsAt"]) == later]
        assert len(resolved) == 2
        assert len(receiver.received) == 16
        assert registry.get_sample_value("rubric_monitor_regression", {
            "rubric": "helpfulness", "agent": "support", "kind": "pass_rate", "dimension": "",
            "baseline": "trailing"}) == 0.0


def test_a_judge_model_change_is_an_annotation_once_and_never_an_alert(store: SqlStore) -> None:
    seed(store, NOW - timedelta(days=7), 300, 10, timedelta(days=7) - timedelta(hours=2))
    # The new judge is stricter: half fail. Compared with nothing: a new baseline, no regression.
    seed(store, NOW - timedelta(minutes=40), 60, 2, timedelta(minutes=39), judge="judge-b")
    alerts = service(store, settings([]))
    try:
        first = alerts.run_cycle(NOW)
        assert first.transitions == [] and first.annotations == 1
        assert alerts.run_cycle(NOW + timedelta(minutes=1)).annotations == 0
    finally:
        alerts.close()
    restarted = service(store, settings([]))
    try:
        assert restarted.run_cycle(NOW + timedelta(minutes=2)).annotations == 0  # stored: not emitted again
        events = restarted.store.events(0)
        assert [(kind, payload["summary"]) for _, kind, payload in events] == [
            ("annotation", "New baseline for helpfulness / support: judge model judge-a → judge-b")]
    finally:
        restarted.close()


def test_a_silence_keeps_state_and_metrics_but_sends_nothing(degraded: SqlStore) -> None:
    store = degraded
    registry = CollectorRegistry()
    with Receiver() as receiver:
        alert_settings = settings([{"name": "hook", "kind": "webhook", "url": receiver.url}],
                                  silences=[{"matchers": {"rubric": "help.*", "kind": "pass_rate"},
                                             "comment": "known incident"}])
        alerts = service(store, alert_settings, registry)
        try:
            assert len(alerts.run_cycle(NOW).transitions) == 2
            assert alerts.dispatcher.wait_idle(10)
        finally:
            alerts.close()
        assert [r.json["labels"]["kind"] for r in receiver.received] == ["dimension_mean"]
        assert count(registry, "hook", "silenced") == 1


def test_notifier_faults_are_retried_counted_and_block_nothing(degraded: SqlStore) -> None:
    store = degraded
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def script(request: Received) -> Answer:
        with lock:
            calls[request.path] = calls.get(request.path, 0) + 1
            n = calls[request.path]
        if request.path == "/flaky":
            return Answer(500) if n <= 2 else Answer()
        if request.path == "/throttled":
            return Answer(429, {"Retry-After": "1"}) if n == 1 else Answer()
        if request.path == "/slow":
            return Answer(delay=2.0)
        return Answer()

    registry = CollectorRegistry()
    with Receiver(script) as receiver:
        quick = {"backoff_seconds": 0.05, "backoff_max_seconds": 2, "max_attempts": 3}
        down = "http://127.0.0.1:9"  # discard port: nothing listens
        notifiers = [{"name": name, "kind": "webhook", "url": url, "events": ["firing"], **quick}
                     for name, url in (("down", down), ("flaky", receiver.url + "/flaky"),
                                       ("throttled", receiver.url + "/throttled"), ("slow", receiver.url + "/slow"),
                                       ("fine", receiver.url + "/fine"))]
        alert_settings = settings(notifiers, min_effect_dimension=4)  # one alert: pass rate
        alerts = service(store, alert_settings, registry)
        try:
            started = time.monotonic()
            assert len(alerts.run_cycle(NOW).transitions) == 1
            cycle_done = time.monotonic()
            assert alerts.dispatcher.wait_idle(30)
        finally:
            alerts.close()
        slow = receiver.on("/slow")[0]
        fine = receiver.on("/fine")[0]
        # Nothing blocked: the cycle returned, and the healthy receiver was served, while the slow one still worked.
        assert cycle_done < slow.replied_at and fine.received_at < slow.replied_at
        assert started < fine.received_at
        throttled = receiver.on("/throttled")
        assert len(throttled) == 2 and throttled[1].received_at - throttled[0].received_at >= 0.9  # Retry-After
        assert len(receiver.on("/flaky")) == 3 and len(receiver.on("/fine")) == 1 and len(receiver.on("/slow")) == 1
    assert {(n, o): count(registry, n, o) for n in ("down", "flaky", "throttled", "slow", "fine")
            for o in ("sent", "retry", "failed") if count(registry, n, o)} == {
        ("down", "retry"): 2, ("down", "failed"): 1, ("flaky", "retry"): 2, ("flaky", "sent"): 1,
        ("throttled", "retry"): 1, ("throttled", "sent"): 1, ("slow", "sent"): 1, ("fine", "sent"): 1}


def test_a_restart_delivers_what_was_pending_and_nothing_twice(degraded: SqlStore) -> None:
    store = degraded
    state = {"up": False}

    def script(request: Received) -> Answer:
        if request.path == "/later" and not state["up"]:
            return Answer(503, {"Retry-After": "30"})
        return Answer()

    with Receiver(script) as receiver:
        notifiers = [{"name": "later", "kind": "webhook", "url": receiver.url + "/later", "events": ["firing"]},
                     {"name": "now", "kind": "webhook", "url": receiver.url + "/now", "events": ["firing"]}]
        alert_settings = settings(notifiers, min_effect_dimension=4)
        alerts = service(store, alert_settings)
        try:
            alerts.run_cycle(NOW)
            deadline = time.monotonic() + 10
            while (len(receiver.on("/later")) < 1 or len(receiver.on("/now")) < 1) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            alerts.close()  # "later" is waiting out its Retry-After: it stays pending in the store
        assert len(receiver.on("/later")) == 1 and len(receiver.on("/now")) == 1
        state["up"] = True
        registry = CollectorRegistry()
        restarted = service(store, alert_settings, registry)
        try:
            restarted.run_cycle(NOW + timedelta(minutes=1))
            deadline = time.monotonic() + 10
            while count(registry, "later", "sent") < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert restarted.dispatcher.wait_idle(10)
        finally:
            restarted.close()
        assert [r.status for r in receiver.on("/later")] == [503, 200]
        assert len(receiver.on("/now")) == 1  # delivered before the restart: not sent again
        ids = {r.headers["x-rubric-monitor-event"] for r in receiver.received}
        assert len(ids) == 1  # the same event everywhere, one id a receiver can deduplicate on
