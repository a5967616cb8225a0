"""Regression alerts inside the daemon's cycle: a failing detector never fails scoring; results carry what
"compare like with like" needs (judge model, prompt version, agent version)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry
from sqlalchemy import text

from monitor.app import build_monitor
from monitor.assemble import assemble
from monitor.evaluators.prompts import PROMPT_VERSION
from monitor.models import SpanRecord
from monitor.settings import load_settings
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, verdict
from tests.test_daemon import daemon_config, free_port


def test_a_failing_detector_never_fails_scoring(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = daemon_config(tmp_path, judge.base_url, free_port())
        registry = CollectorRegistry()
        monitor = build_monitor(load_settings(config), registry)
        try:
            # A real fault of the alerts' own storage: their table is gone.
            with monitor.store.transaction() as conn:
                conn.execute(text("DROP TABLE alert_events"))
            report = monitor.run_cycle()
            assert report.ok and report.evaluations["pass"] == 3
            assert registry.get_sample_value("rubric_monitor_stage_failures_total", {"stage": "alerts"}) == 1.0
            assert registry.get_sample_value("rubric_monitor_cycles_total", {"result": "ok"}) == 1.0
            results = monitor.store.results()
            assert {(r.judge_model, r.prompt_version) for r in results} == {("judge-model", PROMPT_VERSION)}
        finally:
            monitor.close()


def test_the_agent_version_falls_back_to_the_service_version() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    span = SpanRecord(trace_id="a" * 32, span_id="b" * 16, name="invoke_agent support", start_time=at,
                      attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                                  "gen_ai.conversation.id": "c1"},
                      resource={"service.name": "support", "service.version": "2.3.1"})
    assert assemble([span]).conversations[0].agent_version == "2.3.1"
    tagged = span.model_copy(update={"attributes": {**span.attributes, "gen_ai.agent.version": "7"}})
    assert assemble([tagged]).conversations[0].agent_version == "7"


def test_a_source_far_behind_suspends_every_verdict(tmp_path: Path) -> None:
    from prometheus_client import Gauge

    from monitor.app import build_alerts
    from monitor.store.sql import SqlStore

    settings = load_settings(None, environ={"RUBRIC_MONITOR_ALERTS__MAX_SOURCE_LAG_SECONDS": "600"})
    registry = CollectorRegistry()
    lag = Gauge("rubric_monitor_source_lag_seconds", "lag", ["source"], registry=registry)
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        from tests.test_alerts_service import NOW, seed

        seed(store, NOW - timedelta(hours=3), 40, 10, timedelta(hours=2))
        alerts = build_alerts(settings, store, registry, None, "app_insights")
        lag.labels("app_insights").set(60)
        assert alerts.evaluate(NOW).cannot_judge[("helpfulness", "support")] == set()
        lag.labels("app_insights").set(3600)
        detection = alerts.evaluate(NOW)
        assert detection.cannot_judge[("helpfulness", "support")] == {"source_behind"}
        assert {v.status for v in detection.verdicts} == {"cannot_judge"}
    finally:
        store.close()


def test_a_drifting_judge_suspends_the_quality_verdicts_of_its_rubric(tmp_path: Path) -> None:
    from monitor.app import build_alerts
    from monitor.store.base import CanaryRun
    from monitor.store.sql import SqlStore
    from tests.test_alerts_service import NOW, seed

    settings = load_settings(None)
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        seed(store, NOW - timedelta(hours=3), 40, 10, timedelta(hours=2))
        alerts = build_alerts(settings, store, CollectorRegistry(), None, "otlp_file")
        assert alerts.evaluate(NOW).cannot_judge[("helpfulness", "support")] == set()
        store.record_canary_run(CanaryRun("helpfulness", "1", "gpt-4.1", NOW, 20, 0.55, -0.3, True))
        detection = alerts.evaluate(NOW)
        assert detection.cannot_judge[("helpfulness", "support")] == {"judge_drift"}
        assert {v.status for v in detection.verdicts} == {"cannot_judge"}
        store.record_canary_run(CanaryRun("helpfulness", "1", "gpt-4.1", NOW, 20, 0.95, 0.0, False))
        assert alerts.evaluate(NOW).cannot_judge[("helpfulness", "support")] == set()
    finally:
        store.close()
