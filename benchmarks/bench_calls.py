"""Judge calls per evaluation, per rubric kind, counted at the HTTP server (not assumed).

Runs every evaluator with the real ``OpenAIJudge`` against the scripted OpenAI-compatible server on 127.0.0.1
and counts the chat-completion requests the server receives for each evaluation. Prints the Markdown table of
BENCHMARKS.md's "Judge calls per evaluation" section.

    cd /work/main && /opt/rmvenv/bin/python -m benchmarks.bench_calls
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.item_cache import InMemoryItemCache
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.judge.openai_judge import OpenAIJudge
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, Message, Part
from monitor.rubrics.loader import parse_rubric
from monitor.settings import JudgeSettings
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.helpers import SEED_PASS_SCORES, verdict

VERTEX_CALLS = {
    "weighted": "n/a (Foundry: not published)",
    "adaptive (new request)": "6 (general_quality_v1), 5 + 1 Pro (agent metrics), 2 Pro + 5 (multi-turn)",
    "adaptive (items cached)": "5 (rubric_groups generated beforehand, passed in)",
    "adaptive, samples: 3 (new request)": "n/a",
    "grounding": "1",
    "hallucination": "2",
    "safety": "10 (safety_v1), 31 (safety_v3)",
    "final_response_match": "5",
}


def _answer(request: Recorded) -> Reply:
    body = request.body
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    prompt = str(body["messages"][-1]["content"])
    if name == "rubric_verdict":
        return verdict(request, SEED_PASS_SCORES)
    if name == "rubric_items":
        return completion(json.dumps({"intents": [], "items": [
            {"question": q, "importance": "high"} for q in ("Is the table booked?", "Is it confirmed?")]}))
    if name == "rubric_item_verdicts":
        return completion(json.dumps({i: {"reasoning": "ok", "verdict": "yes"} for i in schema["required"]}))
    if name in ("grounding_verdict", "hallucination_verdict"):
        reply = re.search(r"<reply>\n(.*)\n</reply>", prompt, re.DOTALL)
        sentence = reply.group(1) if reply else ""
        row: dict[str, Any] = {"sentence": sentence, "label": "supported", "rationale": "ok"}
        extra = {"excerpt": None} if name == "grounding_verdict" else {
            "supporting_excerpt": None, "contradicting_excerpt": None}
        return completion(json.dumps({"sentences": [{**row, **extra}]}))
    if name == "safety_verdict":
        policies = schema["properties"]["policies"]["required"]
        return completion(json.dumps({"policies": {
            p: {"rationale": "ok", "violated": False, "excerpt": None} for p in policies}}))
    return completion(json.dumps({"reasoning": "same answer", "verdict": "valid"}))


def _conversation(request: str, conversation_id: str) -> Conversation:
    def text(role: str, content: str) -> Message:
        return Message(role=role, parts=(Part(type="text", content=content),))

    return Conversation(
        id=conversation_id, agent_name="reservation-assistant",
        messages=(text("user", request), text("assistant", "Your table for 4 is booked for Friday, 19:30.")),
        reference="Booked: 4 people, Friday 19:30.",
    )


@dataclass(frozen=True)
class Case:
    label: str
    rubric: dict[str, Any]
    conversation: Conversation


CASES = (
    Case("weighted", {"name": "foundry", "kind": "weighted", "dimensions": [
        {"id": "intent_recognition", "description": "Identifies the intent.", "weight": 9},
        {"id": "tool_usage_accuracy", "description": "Uses tools right.", "weight": 6},
        {"id": "policy_enforcement", "description": "Enforces policy.", "weight": 5},
        {"id": "information_gathering", "description": "Gathers details.", "weight": 4},
        {"id": "communication_clarity", "description": "Clear.", "weight": 2}]},
        _conversation("Book a table for 4 on Friday at 19:30.", "w1")),
    Case("adaptive (new request)", {"name": "quality", "kind": "adaptive"},
         _conversation("Book a table for 4 on Friday at 19:30.", "a1")),
    Case("adaptive (items cached)", {"name": "quality", "kind": "adaptive"},
         _conversation("book a table for 4 on friday at 19:30.", "a2")),
    Case("adaptive, samples: 3 (new request)", {"name": "sampled", "kind": "adaptive", "samples": 3},
         _conversation("Book a table for 2 tonight.", "a3")),
    Case("grounding", {"name": "grounding", "kind": "grounding"}, _conversation("Book for 4.", "g1")),
    Case("hallucination", {"name": "hallucination", "kind": "hallucination"},
         _conversation("Book for 4.", "h1")),
    Case("safety", {"name": "safety", "kind": "safety"}, _conversation("Book for 4.", "s1")),
    Case("final_response_match", {"name": "match", "kind": "final_response_match"},
         _conversation("Book for 4.", "m1")),
)


async def measure(server: ScriptedOpenAIServer) -> list[tuple[str, int, int, str]]:
    settings = JudgeSettings(kind="openai", base_url=server.base_url, api_key="test", model="judge-model",
                             max_retries=0)
    judge = OpenAIJudge(settings, MonitorMetrics(CollectorRegistry()))
    context = EvaluationContext(judge=judge, settings=settings)
    adaptive = AdaptiveEvaluator(InMemoryItemCache())
    evaluators: dict[str, Evaluator] = {"weighted": WeightedEvaluator(), "adaptive": adaptive}
    evaluators.update({kind: StaticMetricEvaluator() for kind in StaticMetricEvaluator.kinds})
    rows = []
    try:
        for case in CASES:
            rubric = parse_rubric(case.rubric, f"{case.rubric['name']}.yaml", builtin_version)
            before = server.count
            [result] = await evaluators[rubric.kind].evaluate(case.conversation, rubric, context)
            if result.outcome == "unscored":
                raise SystemExit(f"{case.label}: unscored ({result.unscored_reason})")
            rows.append((case.label, server.count - before, result.judge_calls, result.outcome))
    finally:
        await judge.aclose()
    return rows


def main() -> None:
    with ScriptedOpenAIServer(_answer) as server:
        rows = asyncio.run(measure(server))
    print("| rubric kind | judge calls per evaluation (counted at the server) | recorded in the result "
          "(`judge_calls`) | Vertex AI managed metric |")
    print("|---|---|---|---|")
    for label, counted, recorded, _ in rows:
        print(f"| {label} | {counted} | {recorded} | {VERTEX_CALLS[label]} |")


if __name__ == "__main__":
    main()
