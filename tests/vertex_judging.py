"""Helpers for the rubric tests: the real ``OpenAIJudge`` against a scripted server, and small conversations.

Handlers read what a request asks for from its strict JSON schema (``response_format.json_schema``), the way a
model would answer it, so replies are keyed to the request instead of to call order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.evaluators.adaptive import material_text
from monitor.evaluators.base import EvaluationContext
from monitor.judge.openai_judge import OpenAIJudge
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, Message, Part, ToolDefinition
from monitor.settings import JudgeSettings
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion


def schema_name(request: Recorded) -> str:
    return str(((request.body.get("response_format") or {}).get("json_schema") or {}).get("name", ""))


def schema(request: Recorded) -> dict[str, Any]:
    return dict(((request.body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {})


def item_ids(request: Recorded) -> list[str]:
    """The item ids a validation request asks verdicts for."""
    return list(schema(request)["required"])


def user_prompt(request: Recorded) -> str:
    return str(request.body["messages"][-1]["content"])


def cited(request: Recorded) -> str:
    """What a generated item quotes of its request's material: its opening words (whatever the request)."""
    return material_text(user_prompt(request))[:40].strip()


def items_reply(request: Recorded, *questions: str, intents: Sequence[str] = ()) -> Reply:
    return completion(json.dumps({
        "intents": list(intents),
        "items": [{"question": q, "importance": "high", "checks": cited(request)} for q in questions],
    }))


def verdicts_reply(request: Recorded, verdicts: Sequence[bool]) -> Reply:
    ids = item_ids(request)
    assert len(ids) == len(verdicts), f"asked for {ids}, scripted {len(verdicts)} verdicts"
    return completion(json.dumps({
        item: {"reasoning": f"reason for {item}", "verdict": "yes" if ok else "no"}
        for item, ok in zip(ids, verdicts, strict=True)
    }))


def judge_settings(server: ScriptedOpenAIServer, **overrides: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "kind": "openai", "base_url": server.base_url, "api_key": "test", "model": "judge-model",
        "max_retries": 0, "timeout_seconds": 10, **overrides,
    }
    return JudgeSettings(**values)


@asynccontextmanager
async def openai_context(
    server: ScriptedOpenAIServer, store_content: bool = True, **overrides: Any
) -> AsyncIterator[EvaluationContext]:
    """An ``EvaluationContext`` whose judge is the real OpenAI client talking to ``server``."""
    settings = judge_settings(server, **overrides)
    judge = OpenAIJudge(settings, MonitorMetrics(CollectorRegistry()))
    try:
        yield EvaluationContext(judge=judge, settings=settings, store_content=store_content)
    finally:
        await judge.aclose()


def text(role: str, content: str) -> Message:
    return Message(role=role, parts=(Part(type="text", content=content),))


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    call = Part(type="tool_call", id=call_id, name=name, arguments=arguments)
    return Message(role="assistant", parts=(call,))


def tool_result(call_id: str, response: Any) -> Message:
    return Message(role="tool", parts=(Part(type="tool_call_response", id=call_id, response=response),))


def conversation(*messages: Message, **fields: Any) -> Conversation:
    values: dict[str, Any] = {"id": "c1", "agent_name": "reservations", **fields}
    return Conversation(messages=messages, **values)


RESERVATION_TOOLS = (ToolDefinition(
    name="create_reservation",
    description="Book a table",
    parameters={"type": "object",
                "properties": {"party_size": {"type": "integer"}, "time": {"type": "string"}}},
),)


def vertex_judge(request: Recorded) -> Reply:
    """Answers each kind's request as its schema asks: items, item verdicts, safety policies, weighted verdicts."""
    name = schema_name(request)
    if name == "rubric_items":
        return items_reply(request, "Does the reply confirm the action taken?",
                           "Does the reply name the reservation?", "Is the reply polite?")
    if name == "rubric_item_verdicts":
        return completion(json.dumps({i: {"reasoning": "seen", "verdict": "yes"} for i in item_ids(request)}))
    if name == "final_response_match_verdict":
        return completion(json.dumps({"reasoning": "same booking", "verdict": "valid"}))
    if name == "safety_verdict":
        policies = schema(request)["properties"]["policies"]["required"]
        return completion(json.dumps({"policies": {p: {"violated": False, "rationale": "none", "excerpt": ""}
                                                   for p in policies}}))
    from tests.helpers import SEED_PASS_SCORES, verdict

    return verdict(request, SEED_PASS_SCORES)
