"""Write-back of results as OpenTelemetry ``gen_ai.evaluation.result`` events: to a local OTLP/HTTP receiver
(protobuf parsed with opentelemetry-proto) on SQLite and PostgreSQL, exactly once across a failing endpoint and a
restart; and to a local stand-in for the Application Insights ingestion endpoint through the Azure exporter."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from monitor.app import Monitor, build_monitor
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.fakes.telemetry import AppInsightsIngestion, OtlpLogsReceiver
from tests.helpers import SEED_PASS_SCORES, judge_config, store_test_url, verdict

CONVERSATIONS = {"conv-booking-ok", "conv-party-too-big", "conv-cancel"}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_test_url(request.param, tmp_path)


def monitor(tmp_path: Path, judge_url: str, store_url: str, writeback: dict[str, Any]) -> Monitor:
    if not (tmp_path / "traces").exists():
        shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    return build_monitor(Settings(**judge_config(
        judge_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(REPO / "examples" / "rubrics")}, store={"url": store_url},
        writeback=writeback)))


def sample(m: Monitor, name: str, labels: dict[str, str] | None = None) -> float:
    return m.registry.get_sample_value(name, labels or {}) or 0.0


def test_results_reach_an_otlp_endpoint_once_across_failures_and_restarts(tmp_path: Path, store_url: str) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge, OtlpLogsReceiver() as receiver:
        settings = {"kind": "otlp", "endpoint": receiver.endpoint, "timeout_seconds": 5}
        receiver.fail_with = 400  # the collector refuses: events stay in the outbox
        first = monitor(tmp_path, judge.base_url, store_url, settings)
        assert first.run_cycle().evaluations == {"pass": 3}
        assert receiver.records == [] and receiver.requests >= 1
        assert first.store.outbox_pending() == 3
        assert sample(first, "rubric_monitor_writeback_total", {"exporter": "otlp", "outcome": "failed"}) == 3
        assert sample(first, "rubric_monitor_outbox_pending") == 3
        first.close()

        receiver.fail_with = None
        restarted = monitor(tmp_path, judge.base_url, store_url, settings)
        restarted.run_cycle()
        restarted.run_cycle()
        assert restarted.store.outbox_pending() == 0
        assert sample(restarted, "rubric_monitor_writeback_total", {"exporter": "otlp", "outcome": "sent"}) == 3
        results = {r.conversation_id: r for r in restarted.store.results()}
        spans = {key: restarted.store.spans_of(key) for key in results}
        restarted.close()
    assert judge.count == 3  # nothing judged twice either
    events = {attrs["gen_ai.conversation.id"]: (record, attrs) for record, attrs in receiver.records}
    assert len(receiver.records) == 3 and set(events) == CONVERSATIONS  # each result exactly once
    for conversation, (record, attrs) in events.items():
        result = results[conversation]
        assert record.event_name == "gen_ai.evaluation.result"
        assert attrs["gen_ai.evaluation.name"] == "restaurant-reservation"
        assert attrs["gen_ai.evaluation.score.value"] == pytest.approx(result.score)
        assert attrs["gen_ai.evaluation.score.label"] == "pass"
        assert attrs["gen_ai.evaluation.explanation"] == result.reason and result.reason
        assert attrs["rubric_monitor.rubric_version"] == result.rubric_version
        for dimension in result.dimension_scores:
            assert attrs[f"gen_ai.evaluation.dimension.{dimension.id}.score"] == dimension.score
        # In the evaluated trace's context, on one of the conversation's own spans.
        assert record.trace_id.hex() in result.trace_ids
        assert record.span_id.hex() in {s.span_id for s in spans[conversation]}
        response_ids = [s.attributes["gen_ai.response.id"] for s in spans[conversation]
                        if s.attributes.get("gen_ai.response.id")]
        assert attrs.get("gen_ai.response.id") == (response_ids[-1] if response_ids else None)


def test_writeback_is_off_by_default(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        m = monitor(tmp_path, judge.base_url, f"sqlite:///{tmp_path / 'r.db'}", {})
        m.run_cycle()
        assert m.writeback is None and m.store.outbox_pending() == 0
        m.close()


def test_results_reach_application_insights_through_the_azure_exporter(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge, AppInsightsIngestion() as ingestion:
        m = monitor(tmp_path, judge.base_url, f"sqlite:///{tmp_path / 'r.db'}",
                    {"kind": "azure_monitor", "connection_string": ingestion.connection_string})
        assert m.run_cycle().evaluations == {"pass": 3}
        assert m.store.outbox_pending() == 0
        results = {r.conversation_id: r for r in m.store.results()}
        m.close()
    assert set(ingestion.paths) == {"/v2.1/track"}
    assert len(ingestion.envelopes) == 3
    for envelope in ingestion.envelopes:
        assert envelope["iKey"] == "00000000-0000-0000-0000-000000000001"
        properties = envelope["data"]["baseData"]["properties"]
        result = results[properties["gen_ai.conversation.id"]]
        assert properties["gen_ai.evaluation.name"] == "restaurant-reservation"
        assert properties["gen_ai.evaluation.score.label"] == "pass"
        assert float(properties["gen_ai.evaluation.score.value"]) == pytest.approx(result.score)
        # Application Insights joins it to the evaluated trace by operation id.
        assert envelope["tags"]["ai.operation.id"] in result.trace_ids
