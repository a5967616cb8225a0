"""When a conversation is scored: never before the source has delivered all of it, never a conversation with
nothing to judge, and a backlog drains at the judge's pace with its size exported.

Whole cycles through the composition root: the real azure-monitor-query client against the fake Log Analytics
API, the real openai client against the scripted judge server.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.app import Monitor, build_monitor
from monitor.formats.otlp import spans_to_otlp_document
from monitor.models import SpanRecord
from monitor.settings import Settings
from tests.app_insights_helpers import NOW, TOKEN, TOKEN_ENV, WORKSPACE_ID, conversation, load
from tests.conftest import REPO
from tests.fakes.log_analytics import FakeLogAnalytics, Recorded, Reply, gateway_timeout, server_error
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict

AGENT = "reservation-assistant"
START = NOW - timedelta(seconds=180 + 3600)
"""Where the first cycle's first slice starts (default ingestion delay and initial lookback)."""


@dataclass
class Rig:
    tmp: Path
    fake: FakeLogAnalytics
    judge: ScriptedOpenAIServer

    def monitor(self, **sections: Any) -> Monitor:
        source: dict[str, Any] = {
            "kind": "app_insights", "workspace_id": WORKSPACE_ID, "endpoint": self.fake.endpoint,
            "ca_bundle": str(self.fake.ca_path), "credential": {"kind": "token_env", "token_env": TOKEN_ENV},
            "retry_total": 1, "retry_backoff_max_seconds": 2.0, "max_window_seconds": 600,
        }
        given = sections.pop("source", {})
        source = given if "kind" in given else {**source, **given}
        config = judge_config(self.judge.base_url, source=source, rubrics={"directory": str(self.tmp / "rubrics")},
                              store={"url": f"sqlite:///{self.tmp / 'results.db'}"})
        config["judge"]["max_retries"] = 0
        for key, value in sections.items():
            config.setdefault(key, {}).update(value) if isinstance(value, dict) else config.__setitem__(key, value)
        return build_monitor(Settings(**config))

    def prompts_with(self, text: str) -> int:
        return sum(1 for r in self.judge.requests if text in r.prompt_text)


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    (tmp_path / "rubrics").mkdir()
    shutil.copy(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml", tmp_path / "rubrics")
    with FakeLogAnalytics() as fake, ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        yield Rig(tmp_path, fake, judge)


def straddling(index: int, start: datetime, gap: timedelta) -> list[SpanRecord]:
    """A two-turn conversation whose second turn comes ``gap`` after the first."""
    spans = conversation(index, start, agent=AGENT)
    root, first, second = spans
    moved = second.model_copy(update={"start_time": second.start_time + gap,
                                      "end_time": (second.end_time or second.start_time) + gap})
    return [root.model_copy(update={"end_time": moved.end_time}), first, moved]


# --- 1: readiness never passes the source's own watermark ---------------------------------------------------


def test_a_fault_mid_window_leaves_straddling_conversations_for_when_all_their_spans_are_read(rig: Rig) -> None:
    failing = START + timedelta(seconds=1200)  # the third 10-minute slice
    # Conversation 1 starts in the second slice and ends in the third; 0 and 2 are wholly before / after it.
    spans = (conversation(0, START + timedelta(seconds=100), agent=AGENT)
             + straddling(1, failing - timedelta(seconds=100), timedelta(seconds=160))
             + conversation(2, START + timedelta(seconds=2000), agent=AGENT))
    load(rig.fake, spans)

    def fail_third_slice(request: Recorded) -> Reply | None:
        return server_error(503) if request.window and request.window[0] == failing else None

    rig.fake.on_query = fail_third_slice
    monitor = rig.monitor()
    first = monitor.pipeline.run_cycle(NOW)
    assert not first.ok and any("server error" in f for f in first.failures)
    assert first.evaluations == {"pass": 1}  # conversation 0 only: 1 is not whole yet, 2 not read yet
    assert [r.conversation_id for r in monitor.store.results()] == ["conv_00000"]
    assert rig.prompts_with("answer 1.") == 0

    rig.fake.on_query = None
    second = monitor.pipeline.run_cycle(NOW + timedelta(seconds=30))
    assert second.ok and second.evaluations == {"pass": 2}
    results = monitor.store.results()
    assert sorted(r.conversation_id for r in results) == ["conv_00000", "conv_00001", "conv_00002"]
    # scored once, on both of its turns
    [prompt] = [r.prompt_text for r in rig.judge.requests if "question 1" in r.prompt_text]
    assert "answer 1.0" in prompt and "answer 1.1" in prompt
    monitor.close()


def test_a_slice_that_times_out_is_halved_and_the_watermark_moves_on(rig: Rig) -> None:
    spans = [s for i in range(4) for s in conversation(i, START + timedelta(seconds=100 + 40 * i), agent=AGENT)]
    rows = load(rig.fake, spans)

    def too_slow_for_a_whole_slice(request: Recorded) -> Reply | None:
        span = request.window  # the query's window (its timespan reaches overlap_seconds further back)
        return gateway_timeout() if span and span[1] - span[0] > timedelta(seconds=300) else None

    rig.fake.on_query = too_slow_for_a_whole_slice
    monitor = rig.monitor(source={"initial_lookback_seconds": 600})
    report = monitor.pipeline.run_cycle(START + timedelta(seconds=600 + 180))
    assert report.ok, report.failures
    assert report.spans_read == rows
    statuses = [r.status for r in rig.fake.query_requests]
    assert statuses.count(504) == 2 and statuses.count(200) == 2  # the slice and its retry, then two halves
    assert report.evaluations == {"pass": 4}
    monitor.close()


def test_reading_is_bounded_per_cycle_and_judging_starts_before_the_backlog_is_read(rig: Rig) -> None:
    spans = [s for i in range(12) for s in conversation(i, START + timedelta(seconds=60 + 250 * i), agent=AGENT)]
    load(rig.fake, spans)
    monitor = rig.monitor(max_spans_per_cycle=1)
    first = monitor.pipeline.run_cycle(NOW)
    assert len(rig.fake.query_requests) == 1 and first.behind
    # judged already: the first slice's conversation idle 5 minutes before the slice's end (not the two others)
    assert first.evaluations == {"pass": 1}
    cycles = 1
    while monitor.pipeline.run_cycle(NOW).behind:
        cycles += 1
    # one new slice per cycle (after the overlap re-read): 6 slices of 10 minutes
    assert cycles == 6 and len(monitor.store.results()) == 12
    assert rig.judge.count == 12
    monitor.close()


# --- 2: nothing to judge ------------------------------------------------------------------------------------


def without_content(spans: list[SpanRecord]) -> list[SpanRecord]:
    """The spans as instrumentation with content capture off records them: no messages, no events."""
    dropped = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")
    return [s.model_copy(update={"attributes": {k: v for k, v in s.attributes.items() if k not in dropped},
                                 "events": ()}) for s in spans]


def test_conversations_without_content_are_skipped_and_health_names_the_capture_settings(rig: Rig) -> None:
    spans = [s for i in range(12) for s in without_content(
        conversation(i, START + timedelta(seconds=60 + 120 * i), agent=AGENT, legacy_events=False))]
    spans += conversation(99, START + timedelta(seconds=30), agent=AGENT)
    load(rig.fake, spans)
    monitor = rig.monitor()
    report = monitor.run_cycle(NOW)
    assert report.evaluations == {"pass": 1} and rig.judge.count == 1
    assert report.skipped["no_content"] == 12
    assert monitor.registry.get_sample_value("rubric_monitor_evaluations_skipped_total", {
        "rubric": "restaurant-reservation", "reason": "no_content"}) == 12
    assert monitor.registry.get_sample_value("rubric_monitor_conversations_total", {"stage": "no_content"}) == 12
    problems = " ".join(monitor.health.problems())
    assert "12 of the last 13 conversations" in problems
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only" in problems
    assert "AZURE_TRACING_GEN_AI_CONTENT_RECORDING_ENABLED=true" in problems
    assert monitor.registry.get_sample_value("rubric_monitor_health") == 0
    assert monitor.run_cycle(NOW).judge_calls == 0  # skipped for good, not retried
    monitor.close()


# --- 9: conversations dated in the future ------------------------------------------------------------------


def test_conversations_dated_in_the_future_are_counted_logged_and_exported(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    real_now = datetime.now(UTC)
    spans = (conversation(7, real_now + timedelta(hours=2), agent=AGENT)
             + conversation(8, real_now - timedelta(minutes=30), agent=AGENT))
    (rig.tmp / "traces").mkdir()
    (rig.tmp / "traces" / "spans.jsonl").write_text(json.dumps(spans_to_otlp_document(spans)) + "\n")
    monitor = rig.monitor(source={"kind": "otlp_file", "path": str(rig.tmp / "traces")})
    with caplog.at_level(logging.WARNING):
        report = monitor.run_cycle()
    assert report.evaluations == {"pass": 1} and [r.conversation_id for r in monitor.store.results()] == [
        "conv_00008"]
    assert monitor.registry.get_sample_value("rubric_monitor_conversations_total", {"stage": "future_dated"}) == 1
    assert monitor.registry.get_sample_value("rubric_monitor_backlog_future_conversations",
                                             {"source": "otlp_file"}) == 1
    assert any("dated in the future" in r.getMessage() and "conv_00007" in r.getMessage() for r in caplog.records)
    monitor.close()


# --- 11: sampled-out conversations cost no judge capacity; the backlog is exported --------------------------


def test_only_evaluations_use_up_the_cycle_cap_and_the_backlog_is_exported(rig: Rig) -> None:
    spans = [s for i in range(200) for s in conversation(i, START + timedelta(seconds=60 + 15 * i), agent=AGENT)]
    load(rig.fake, spans)
    rubric = rig.tmp / "rubrics" / "restaurant-reservation.yaml"
    rubric.write_text(rubric.read_text().replace("sampling_rate: 1.0", "sampling_rate: 0.1"))
    monitor = rig.monitor(sampling={"max_per_cycle": 4})
    first = monitor.pipeline.run_cycle(NOW)
    assert sum(first.evaluations.values()) == 4 and first.behind
    assert first.skipped["sampled_out"] > 20  # read past sampled-out conversations to fill the cap
    waiting = monitor.registry.get_sample_value("rubric_monitor_backlog_conversations", {"source": "app_insights"})
    oldest = monitor.registry.get_sample_value("rubric_monitor_backlog_oldest_age_seconds",
                                               {"source": "app_insights"})
    assert waiting == 200 - first.skipped["sampled_out"] - 4
    # the oldest conversation still waiting: younger than the first ones, now scored or sampled out
    assert oldest is not None and 1000 < oldest < (NOW - START).total_seconds() - 60 - 15 * 20
    cycles = 1
    while monitor.pipeline.run_cycle(NOW).behind:
        cycles += 1
    sampled = len(monitor.store.results())
    assert 10 <= sampled <= 35 and rig.judge.count == sampled
    assert cycles <= sampled // 4 + 2  # one cap of evaluations per cycle, not one cap of conversations
    assert monitor.registry.get_sample_value("rubric_monitor_backlog_conversations",
                                             {"source": "app_insights"}) == 0
    assert monitor.registry.get_sample_value("rubric_monitor_backlog_oldest_age_seconds",
                                             {"source": "app_insights"}) == 0
    monitor.close()
