"""One contract for every judge (``monitor.judge.base.Judge``): the OpenAI-compatible judge (the real ``openai``
client against the scripted server), the embedded model (the real llama.cpp runtime and weights; slow) and the
scripted twin that tests use in their place.

- a request with a JSON schema gets a reply that is JSON of that schema, with the model named and usage counted;
- a usable judge has no ``problem``; its prompt style is one the evaluators know;
- an invalid reply can be recorded, and ``aclose`` can be called twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any, get_args

import jsonschema
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from monitor.judge import build_judge
from monitor.judge.base import ChatMessage, Judge, JudgeReply, JudgeRequest, PromptStyle, ResponseMode
from monitor.judge.scripted import ScriptedJudge
from monitor.metrics import MonitorMetrics
from monitor.settings import JudgeSettings
from tests.fakes.openai_server import ScriptedOpenAIServer, completion

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}
REQUEST = JudgeRequest(
    messages=(ChatMessage("system", "Answer with the verdict of the conversation."),
              ChatMessage("user", "<conversation>user: hello\nassistant: hello, how can I help?</conversation>")),
    schema=SCHEMA, schema_name="verdict", max_output_tokens=40, rubric="contract")
ANSWER = '{"verdict": "pass"}'


def _openai() -> Iterator[Judge]:
    with ScriptedOpenAIServer(lambda _: completion(ANSWER, model="judge-model")) as server:
        settings = JudgeSettings(kind="openai", model="judge-model", base_url=server.base_url,
                                 api_key=SecretStr("test"), timeout_seconds=10.0, max_retries=1)
        yield build_judge(settings, MonitorMetrics(CollectorRegistry()))


def _local() -> Iterator[Judge]:
    yield build_judge(JudgeSettings(kind="local"), MonitorMetrics(CollectorRegistry()))


def _scripted() -> Iterator[Judge]:
    yield ScriptedJudge(lambda _: ANSWER)


IMPLEMENTATIONS: dict[str, Callable[[], Iterator[Judge]]] = {
    "openai": _openai,
    "local": _local,
    "scripted": _scripted,
}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.slow) if name == "local" else name
                        for name in sorted(IMPLEMENTATIONS)])
def judge(request: pytest.FixtureRequest) -> Iterator[Judge]:
    """The judge, whose client lives on the event loop of the test's one ``asyncio.run``: the test closes it."""
    made = IMPLEMENTATIONS[request.param]()
    yield next(made)
    next(made, None)


def test_a_reply_is_json_of_the_requested_schema_with_model_and_usage(judge: Judge) -> None:
    async def use() -> JudgeReply:
        try:
            return await judge.complete(REQUEST)
        finally:
            await judge.aclose()

    reply = asyncio.run(use())
    jsonschema.validate(json.loads(reply.text), SCHEMA)
    assert reply.model
    assert reply.mode in get_args(ResponseMode)
    assert reply.input_tokens > 0 and reply.output_tokens > 0
    assert reply.cost_usd >= 0


def test_a_usable_judge_has_no_problem_and_a_known_prompt_style(judge: Judge) -> None:
    assert judge.problem is None
    assert judge.prompt_style in get_args(PromptStyle)
    assert judge.model
    asyncio.run(judge.aclose())


def test_an_invalid_reply_is_recorded_and_closing_twice_is_harmless(judge: Judge) -> None:
    judge.record_invalid_reply()
    judge.record_invalid_reply("another-model")

    async def close_twice() -> None:
        await judge.aclose()
        await judge.aclose()

    asyncio.run(close_twice())
