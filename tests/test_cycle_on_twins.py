"""A whole cycle on the in-memory twins alone: the in-memory source, the scripted judge and the in-memory store,
joined by the real pipeline and the steps after it, as ``monitor.app`` joins the production stages. No server, no
file: what the stages promise each other, end to end."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.daemon.http import HealthState
from monitor.evaluators import EvaluationContext, build_evaluators
from monitor.evaluators.versions import builtin_version
from monitor.judge import JudgeRequest, ScriptedJudge
from monitor.metrics import MonitorMetrics
from monitor.metrics.exposition import Exposition
from monitor.pipeline import Cycle, GaugesStep, HealthStep, Pipeline
from monitor.rubrics.loader import parse_rubric
from monitor.rubrics.schema import Rubric
from monitor.settings import ConversationSettings, JudgeSettings, SamplingSettings
from monitor.sources import InMemorySource
from monitor.store import InMemoryStore
from tests.app_insights_helpers import NOW, conversations

RUBRIC = parse_rubric({
    "name": "helpfulness", "agents": ["airline"], "pass_threshold": 0.6,
    "dimensions": [{"id": "accuracy", "description": "Answers correctly.", "weight": 3},
                   {"id": "tone", "description": "Is polite.", "weight": 1}],
}, "rubrics/helpfulness.yaml", builtin_version)


class Rubrics:
    def refresh(self) -> None:
        return None

    def for_agent(self, agent_name: str | None, agent_id: str | None) -> list[Rubric]:
        return [RUBRIC] if agent_name == "airline" else []


def verdict(request: JudgeRequest) -> str:
    """Scores 5 for every dimension of conversations whose question number is even, 1 for the others."""
    transcript = request.messages[-1].content
    score = 5 if any(f"question {n}" in transcript for n in (0, 2, 4)) else 1
    dimensions = request.schema["properties"]["dimensions"]["required"]
    return json.dumps({"dimensions": {d: {"reason": "scripted", "applicable": True, "score": score}
                                      for d in dimensions}})


def test_a_whole_cycle_on_the_twins_scores_each_conversation_once() -> None:
    spans = conversations(4, NOW - timedelta(hours=1), timedelta(minutes=5), legacy_events=False)
    store = InMemoryStore()
    registry = CollectorRegistry()
    metrics = MonitorMetrics(registry)
    judge = ScriptedJudge(verdict)
    pipeline = Pipeline(
        source=InMemorySource(spans, batch_size=7), store=store, rubrics=Rubrics(), evaluators=build_evaluators(16),
        context=EvaluationContext(judge=judge, settings=JudgeSettings(), store_content=True), metrics=metrics,
        conversation_settings=ConversationSettings(idle_timeout_seconds=60), sampling_settings=SamplingSettings(),
        judge_settings=JudgeSettings())
    health = HealthState(interval=timedelta(minutes=1))
    cycle = Cycle(pipeline, [GaugesStep(metrics.quality, store), HealthStep(metrics, health)], metrics)
    try:
        first = cycle.run(NOW)
        again = cycle.run(NOW + timedelta(minutes=1))
    finally:
        pipeline.close()

    assert first.ok and again.ok
    assert (first.spans_read, first.conversations_ready, dict(first.evaluations)) == (
        len(spans), 4, {"pass": 2, "fail": 2})
    assert len(judge.requests) == 4  # one call per conversation
    assert (again.spans_read, dict(again.evaluations), len(judge.requests)) == (0, {}, 4)
    stored: dict[str, Any] = {r.conversation_id: r.outcome for r in store.results()}
    assert stored == {"conv_00000": "pass", "conv_00001": "fail", "conv_00002": "pass", "conv_00003": "fail"}
    # What /metrics serves: the quality families as rendered once per cycle (GaugesStep), with the live ones.
    scrape = Exposition(registry, metrics.quality).scrape().body.decode()
    assert re.search(r'rubric_monitor_evaluations_total\{rubric="helpfulness",[^}]*outcome="pass"\} 2', scrape)
    assert registry.get_sample_value("rubric_monitor_cycles_total", {"result": "ok"}) == 2
    assert health.problems() == []
