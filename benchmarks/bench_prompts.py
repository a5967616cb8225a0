"""Prompt size per rubric kind: what the judge reads per evaluation, on tau-bench airline conversations.

The embedded judge reads about 75 prompt tokens per second on two cores and hosted judges bill input tokens, so
the prompts must stay lean. Runs every evaluator with the in-memory ``ScriptedJudge`` (valid replies) on the
first N tau-bench conversations and prints, per kind, the mean estimated tokens (characters / 4) of the fixed
part (system prompt) and of the whole prompt per evaluation, all calls included. Run it on two checkouts to
compare prompt versions:

    .venv/bin/python -m benchmarks.bench_prompts [N]
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.assemble import assemble
from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext
from monitor.evaluators.item_cache import InMemoryItemCache
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.judge.base import JudgeRequest
from monitor.judge.scripted import ScriptedJudge
from monitor.rubrics.loader import parse_rubric
from monitor.settings import JudgeSettings
from tools.tau_to_otlp import derive_tool_definitions, tau_record_to_spans

KINDS: list[tuple[str, dict[str, Any]]] = [
    ("weighted (6 dimensions)", {"kind": "weighted", "dimensions": [
        {"id": f"d{i}", "description": f"Dimension {i} of the airline rubric.", "weight": 1 + i} for i in range(5)]}),
    ("adaptive general_quality", {"kind": "adaptive", "metric": "general_quality"}),
    ("adaptive multi_turn_task_success", {"kind": "adaptive", "metric": "multi_turn_task_success"}),
    ("grounding", {"kind": "grounding"}),
    ("safety", {"kind": "safety"}),
]


def _reply(request: JudgeRequest) -> str:
    properties: dict[str, Any] = request.schema.get("properties", {})
    if request.schema_name == "rubric_items":
        return json.dumps({"intents": [], "items": [{"question": f"Q{i}?", "importance": "high"} for i in range(5)]})
    if request.schema_name == "rubric_item_verdicts":
        return json.dumps({i: {"reasoning": "ok", "verdict": "yes"} for i in request.schema["required"]})
    if request.schema_name == "rubric_verdict":
        return json.dumps({"dimensions": {d: {"reason": "ok", "applicable": True, "score": 4}
                                          for d in properties["dimensions"]["required"]}})
    if request.schema_name == "grounding_verdict":
        found = re.search(r"<reply>\n(.*)\n</reply>", request.messages[-1].content, re.DOTALL)
        return json.dumps({"sentences": [{"sentence": found.group(1) if found else "", "label": "supported",
                                          "rationale": "ok", "excerpt": None}]})
    return json.dumps({"policies": {p: {"rationale": "ok", "violated": False, "excerpt": None}
                                    for p in properties["policies"]["required"]}})


async def measure(count: int) -> list[tuple[str, float, float]]:
    from tests.conftest import TAU_BENCH

    records = json.loads(TAU_BENCH.read_text(encoding="utf-8"))[:count]
    tools = derive_tool_definitions(records)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spans = [s for i, r in enumerate(records)
             for s in tau_record_to_spans(r, base_time=start + timedelta(hours=i), tool_definitions=tools)]
    conversations = assemble(spans).conversations
    rows = []
    for label, fields in KINDS:
        rubric = parse_rubric({"name": "bench", **fields}, "bench.yaml", builtin_version)
        judge = ScriptedJudge(_reply)
        context = EvaluationContext(judge=judge, settings=JudgeSettings())
        evaluator: Any = {"weighted": WeightedEvaluator(), "adaptive": AdaptiveEvaluator(InMemoryItemCache())
                          }.get(rubric.kind, StaticMetricEvaluator())
        for conversation in conversations:
            await evaluator.evaluate(conversation, rubric, context)
        fixed = sum(len(r.messages[0].content) for r in judge.requests) / 4 / len(conversations)
        total = sum(sum(len(m.content) for m in r.messages) for r in judge.requests) / 4 / len(conversations)
        rows.append((label, fixed, total))
    return rows


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"| rubric kind | system prompt tokens per evaluation | prompt tokens per evaluation "
          f"(tau-bench, first {count}) |")
    print("|---|---|---|")
    for label, fixed, total in asyncio.run(measure(count)):
        print(f"| {label} | {fixed:.0f} | {total:.0f} |")


if __name__ == "__main__":
    main()
