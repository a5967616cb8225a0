"""The production judge, through the real openai SDK, against a real HTTP server on 127.0.0.1 that
injects faults.

Content faults (malformed or truncated JSON, a missing dimension, a 10 on a 1–5 scale) come back as raw text
and the evaluator's ``ask_judge`` turns them unscored; transport faults raise the right ``JudgeError``;
nothing hangs. Every server binds 127.0.0.1 and every test is bounded by short timeouts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from azure.core.credentials import AccessToken
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from monitor.errors import (
    ConfigError,
    JudgeAuthError,
    JudgeError,
    JudgeRateLimited,
    JudgeRefused,
    JudgeTimeout,
    JudgeUnavailable,
)
from monitor.evaluators.base import InvalidReply, JudgeUsage, ask_judge
from monitor.evaluators.prompts import PROMPT_VERSION
from monitor.judge.base import ChatMessage, JudgeReply, JudgeRequest
from monitor.judge.openai_judge import (
    JudgeModelRefused,
    OpenAIJudge,
    parse_duration,
    retry_after_seconds,
    spent_quota_wait,
)
from monitor.metrics import MonitorMetrics
from monitor.settings import JudgeSettings, PriceSettings
from tests.fakes.openai_server import (
    QuotaHandler,
    Recorded,
    Reply,
    ScriptedOpenAIServer,
    completion,
    cut_body,
    error,
    hang,
    malformed_body,
    rate_limited,
)

T = TypeVar("T")
MODEL = "judge-test"
GOOD = '{"accuracy": 4, "tone": 5}'
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"accuracy": {"type": "integer"}, "tone": {"type": "integer"}},
    "required": ["accuracy", "tone"],
    "additionalProperties": False,
}
REQUEST = JudgeRequest(
    messages=(ChatMessage("system", "You judge conversations."), ChatMessage("user", "<conversation/>")),
    schema=SCHEMA,
    schema_name="rubric_verdict",
)


def settings_for(server: ScriptedOpenAIServer, **overrides: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "kind": "openai", "model": MODEL, "base_url": server.base_url, "api_key": SecretStr("test"),
        "timeout_seconds": 2.0, "max_retries": 2, "backoff_base_seconds": 0.01, "backoff_max_seconds": 0.05,
    }
    values.update(overrides)
    return JudgeSettings(**values)


def new_metrics() -> MonitorMetrics:
    return MonitorMetrics(CollectorRegistry())


def sample(metrics: MonitorMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def requests_with(metrics: MonitorMetrics, outcome: str) -> float:
    return sample(metrics, "rubric_monitor_judge_requests_total", model=MODEL, outcome=outcome)


def with_judge(settings: JudgeSettings, metrics: MonitorMetrics,
               use: Callable[[OpenAIJudge], Awaitable[T]], **kwargs: Any) -> T:
    async def run() -> T:
        judge = OpenAIJudge(settings, metrics, **kwargs)
        try:
            return await asyncio.wait_for(use(judge), timeout=30)
        finally:
            await judge.aclose()

    return asyncio.run(run())


def complete_once(settings: JudgeSettings, metrics: MonitorMetrics, **kwargs: Any) -> JudgeReply:
    return with_judge(settings, metrics, lambda judge: judge.complete(REQUEST), **kwargs)


def sequence(*replies: Reply) -> Callable[[Recorded], Reply]:
    """Answer the n-th request with the n-th reply, and every later one with the last."""
    lock = threading.Lock()
    served = [0]

    def handler(_: Recorded) -> Reply:
        with lock:
            index = min(served[0], len(replies) - 1)
            served[0] += 1
        return replies[index]

    return handler


def validate_verdict(value: Any) -> dict[str, int]:
    """What a weighted rubric's evaluator checks: every dimension present, each an integer from 1 to 5."""
    if not isinstance(value, dict):
        raise InvalidReply("verdict is not an object")
    for dimension in ("accuracy", "tone"):
        score = value.get(dimension)
        if score is None:
            raise InvalidReply(f"dimension {dimension} missing")
        if not isinstance(score, int) or not 1 <= score <= 5:
            raise InvalidReply(f"dimension {dimension}: score {score} outside 1..5")
    return value


# -- a good reply --------------------------------------------------------------------------------------------


def test_good_reply_uses_strict_json_schema_and_records_usage_cost_and_metrics() -> None:
    with ScriptedOpenAIServer(lambda _: completion(GOOD, prompt_tokens=1200, completion_tokens=30)) as server:
        price = PriceSettings(input_per_million=2.0, output_per_million=8.0)
        settings = settings_for(server, prices={MODEL: price})
        metrics = new_metrics()
        reply = complete_once(settings, metrics)

    assert reply.text == GOOD
    assert (reply.model, reply.mode) == (MODEL, "json_schema")
    assert (reply.input_tokens, reply.output_tokens) == (1200, 30)
    assert reply.cost_usd == pytest.approx((1200 * 2.0 + 30 * 8.0) / 1e6)
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer test"
    assert sent.body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "rubric_verdict", "schema": SCHEMA, "strict": True}}
    assert sent.body["messages"][0] == {"role": "system", "content": "You judge conversations."}
    assert sent.body["max_tokens"] == settings.max_output_tokens and sent.body["temperature"] == 0.0
    assert requests_with(metrics, "ok") == 1
    assert sample(metrics, "rubric_monitor_judge_tokens_total", model=MODEL, direction="input") == 1200
    assert sample(metrics, "rubric_monitor_judge_tokens_total", model=MODEL, direction="output") == 30
    assert sample(metrics, "rubric_monitor_judge_cost_usd_total", model=MODEL) == pytest.approx(
        reply.cost_usd)
    assert sample(metrics, "rubric_monitor_judge_latency_seconds_count", model=MODEL) == 1
    assert sample(metrics, "rubric_monitor_judge_up", model=MODEL) == 1


def test_local_endpoint_without_any_key_gets_a_placeholder_key() -> None:
    with ScriptedOpenAIServer(lambda _: completion(GOOD)) as server:
        reply = complete_once(settings_for(server, api_key=None), new_metrics())
    assert reply.text == GOOD
    assert server.requests[0].headers["authorization"] == "Bearer unused"


def test_official_endpoint_without_a_key_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="judge.api_key"):
        OpenAIJudge(JudgeSettings(kind="openai", model=MODEL), new_metrics())


# -- content faults: returned as they came, turned unscored by the evaluator ---------------------------------


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        (completion('{"accuracy": 4, "tone": five}'), "JSON"),
        (completion('{"accuracy": 4, "tone": ', finish_reason="length"), "JSON"),
        (completion('{"accuracy": 4}'), "dimension tone missing"),
        (completion('{"accuracy": 10, "tone": 3}'), "score 10 outside 1..5"),
    ],
    ids=["malformed_json", "truncated_json", "dimension_missing", "score_10_on_1_to_5"],
)
def test_content_faults_come_back_raw_and_end_unscored(fault: Reply, problem: str) -> None:
    with ScriptedOpenAIServer(lambda _: fault) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> tuple[JudgeReply, Any]:
            raw = await judge.complete(REQUEST)
            asked = await ask_judge(judge, REQUEST, validate_verdict, JudgeUsage())
            return raw, asked

        raw, asked = with_judge(settings_for(server), metrics, use)

    assert raw.text == fault.json_body["choices"][0]["message"]["content"]
    assert asked.value is None
    assert asked.error.startswith("invalid_reply") and problem in asked.error
    assert server.count == 3  # one direct call, then the evaluator's call and its single re-ask
    assert requests_with(metrics, "ok") == 3


def test_a_refusal_raises_judge_refused_with_the_models_words_and_its_cost() -> None:
    refusal = completion("", refusal="I can't help with that.", prompt_tokens=500, completion_tokens=8)
    with ScriptedOpenAIServer(lambda _: refusal) as server:
        settings = settings_for(server, prices={MODEL: PriceSettings(input_per_million=1.0)})
        metrics = new_metrics()
        usage = JudgeUsage()

        async def use(judge: OpenAIJudge) -> tuple[JudgeModelRefused, Any]:
            try:
                await judge.complete(REQUEST)
            except JudgeModelRefused as exc:
                return exc, await ask_judge(judge, REQUEST, validate_verdict, usage)
            raise AssertionError("a refusal must raise")

        refused, asked = with_judge(settings, metrics, use)

    assert "I can't help with that." in str(refused) and refused.outcome == "refused"
    assert refused.reply.input_tokens == 500 and refused.reply.cost_usd == pytest.approx(500 / 1e6)
    # The evaluator ends it unscored with the model's words, asks once only, and still counts the cost.
    assert asked.value is None and asked.error.startswith("refused") and "I can't help" in asked.error
    assert usage.calls == 1 and usage.cost_usd == pytest.approx(500 / 1e6)
    assert server.count == 2
    assert requests_with(metrics, "refused") == 2
    assert sample(metrics, "rubric_monitor_judge_cost_usd_total", model=MODEL) == pytest.approx(1000 / 1e6)


# -- rate limits ---------------------------------------------------------------------------------------------


def test_429_honours_retry_after_then_succeeds() -> None:
    with ScriptedOpenAIServer(sequence(rate_limited(1), completion(GOOD))) as server:
        metrics = new_metrics()
        reply = complete_once(settings_for(server), metrics)

    assert reply.text == GOOD
    first, second = server.requests
    assert second.received_at - first.received_at >= 0.95
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") == 1
    assert requests_with(metrics, "ok") == 1 and requests_with(metrics, "rate_limited") == 0


def test_429_without_retry_after_waits_for_the_x_ratelimit_reset() -> None:
    limited = rate_limited(headers={
        "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "400ms",
        "x-ratelimit-remaining-tokens": "9000", "x-ratelimit-reset-tokens": "5s",
    })
    with ScriptedOpenAIServer(sequence(limited, completion(GOOD))) as server:
        reply = complete_once(settings_for(server), new_metrics())
    assert reply.text == GOOD
    first, second = server.requests
    assert 0.38 <= second.received_at - first.received_at < 3.0


def test_a_429_pauses_other_callers_too() -> None:
    with ScriptedOpenAIServer(sequence(rate_limited(1), completion(GOOD))) as server:

        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> list[JudgeReply]:
            first = asyncio.create_task(judge.complete(REQUEST))
            # Wait until the first call has seen its 429 (it counts the retry as it starts its pause), not for a
            # time that a loaded machine may overrun.
            while sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") < 1:
                assert not first.done(), first
                await asyncio.sleep(0.005)
            second = await judge.complete(REQUEST)
            return [await first, second]

        replies = with_judge(settings_for(server), metrics, use)

    assert [r.text for r in replies] == [GOOD, GOOD]
    limited_at = server.requests[0].received_at
    assert all(r.received_at - limited_at >= 0.95 for r in server.requests[1:])


def test_429_past_the_retries_raises_rate_limited() -> None:
    with ScriptedOpenAIServer(lambda _: rate_limited(retry_after_ms=50)) as server:
        metrics = new_metrics()
        with pytest.raises(JudgeRateLimited, match="judge-test"):
            complete_once(settings_for(server, max_retries=2), metrics)
    assert server.count == 3
    assert requests_with(metrics, "rate_limited") == 1
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") == 2


@pytest.mark.parametrize(
    "refusal",
    [error(429, "You exceeded your current quota", "insufficient_quota"), rate_limited(3600)],
    ids=["insufficient_quota", "retry_after_an_hour"],
)
def test_429_that_waiting_cannot_fix_fails_at_once(refusal: Reply) -> None:
    metrics = new_metrics()
    with ScriptedOpenAIServer(lambda _: refusal) as server:
        with pytest.raises(JudgeRateLimited):
            complete_once(settings_for(server), metrics)
    assert server.count == 1  # failed at once: no retry, so no wait for one
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") == 0


def test_a_spent_quota_fails_every_call_at_once_without_a_request_until_its_reset() -> None:
    # A cycle's other evaluations must not each sit out a pause and then ask again for another 429: that made a
    # cycle of 100 evaluations take over an hour.
    lock = threading.Lock()
    reset_at: list[float] = []

    def handler(_: Recorded) -> Reply:
        with lock:
            if not reset_at:
                reset_at.append(time.monotonic() + 0.6)
            if time.monotonic() < reset_at[0]:
                return rate_limited(retry_after_ms=600)
        return completion(GOOD)

    with ScriptedOpenAIServer(handler) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> tuple[list[BaseException | JudgeReply], JudgeReply]:
            with pytest.raises(JudgeRateLimited, match="0.3"):
                await judge.complete(REQUEST)
            blocked = await asyncio.gather(*(judge.complete(REQUEST) for _ in range(20)), return_exceptions=True)
            assert server.count == 1  # no request while the quota is spent (so no wait for one either)
            await asyncio.sleep(reset_at[0] - time.monotonic() + 0.3)
            return blocked, await judge.complete(REQUEST)

        blocked, reply = with_judge(settings_for(server, max_retry_wait_seconds=0.3), metrics, use)

    assert all(isinstance(b, JudgeRateLimited) for b in blocked)
    assert "no judge calls until" in str(blocked[0])
    assert reply.text == GOOD and server.count == 2  # after the reset, calls flow again
    # What the endpoint saw (one 429, one success); the 20 calls refused locally are counted apart.
    assert requests_with(metrics, "rate_limited") == 1 and requests_with(metrics, "ok") == 1
    assert sample(metrics, "rubric_monitor_judge_calls_refused_total", model=MODEL, reason="quota_spent") == 20
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") == 0


def test_a_429_for_a_quota_not_spent_is_retried_after_a_backoff_not_after_its_full_reset() -> None:
    # OpenAI's tokens-per-minute 429: tokens remain, and their full refill is minutes away.
    limited = rate_limited(headers={
        "x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-remaining-tokens": "1500", "x-ratelimit-reset-tokens": "6m0s",
    })
    with ScriptedOpenAIServer(sequence(limited, completion(GOOD))) as server:
        metrics = new_metrics()
        reply = complete_once(settings_for(server), metrics)
    assert reply.text == GOOD and server.count == 2
    first, second = server.requests
    # Retried after the requests' 120 ms, not after the tokens' 6 minutes (a minute's margin: no clock race).
    assert second.received_at - first.received_at < 60
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="rate_limited") == 1


# -- server errors, malformed bodies, hangs ------------------------------------------------------------------


def test_500_is_retried_with_backoff_then_succeeds() -> None:
    with ScriptedOpenAIServer(sequence(error(500), error(503), completion(GOOD))) as server:
        metrics = new_metrics()
        reply = complete_once(settings_for(server), metrics)
    assert reply.text == GOOD and server.count == 3
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="server_error") == 2


@pytest.mark.parametrize("fault", [error(500), malformed_body(), cut_body()], ids=["500", "not_json", "cut"])
def test_persistent_server_faults_raise_unavailable_after_the_retries(fault: Reply) -> None:
    with ScriptedOpenAIServer(lambda _: fault) as server:
        metrics = new_metrics()
        with pytest.raises(JudgeUnavailable) as raised:
            complete_once(settings_for(server, max_retries=2), metrics)
    assert type(raised.value) is JudgeUnavailable
    assert server.count == 3
    assert requests_with(metrics, "server_error") == 1


def test_a_hang_past_the_timeout_raises_timeout_and_does_not_hang() -> None:
    with ScriptedOpenAIServer(lambda _: hang(10)) as server:
        metrics = new_metrics()
        started = time.monotonic()
        with pytest.raises(JudgeTimeout):
            complete_once(settings_for(server, timeout_seconds=0.3, max_retries=1), metrics)
        elapsed = time.monotonic() - started
    assert elapsed < 10  # returned before the endpoint would have answered: the timeout, not the reply, ended it
    assert server.count == 2
    assert requests_with(metrics, "timeout") == 1
    assert sample(metrics, "rubric_monitor_judge_retries_total", model=MODEL, reason="timeout") == 1


def test_unknown_model_is_a_configuration_failure_not_a_verdict_and_not_retried() -> None:
    not_found = error(404, "The model `nope` does not exist", "model_not_found")
    with ScriptedOpenAIServer(lambda _: not_found) as server:
        metrics = new_metrics()
        with pytest.raises(JudgeError, match="does not exist.*judge.model") as raised:
            complete_once(settings_for(server), metrics)
    assert type(raised.value) is JudgeError  # not JudgeRefused: the evaluation stays pending
    assert server.count == 1
    assert requests_with(metrics, "error") == 1


# -- credentials ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_stops_calls_logs_once_and_resumes_after_the_reprobe(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    credential_works = threading.Event()

    def handler(_: Recorded) -> Reply:
        return completion(GOOD) if credential_works.is_set() else error(status, "Incorrect API key provided")

    with ScriptedOpenAIServer(handler) as server:
        metrics = new_metrics()
        settings = settings_for(server, auth_reprobe_seconds=0.4)

        async def use(judge: OpenAIJudge) -> tuple[list[str], JudgeReply]:
            seen: list[str] = []
            for _ in range(5):  # one request, then four fail-fast calls
                try:
                    await judge.complete(REQUEST)
                except JudgeAuthError as exc:
                    seen.append(str(exc))
            assert judge.auth_failed and not judge.healthy
            assert server.count == 1
            assert sample(metrics, "rubric_monitor_judge_up", model=MODEL) == 0
            await asyncio.sleep(0.45)
            with pytest.raises(JudgeAuthError):  # the re-probe: still refused
                await judge.complete(REQUEST)
            assert server.count == 2
            credential_works.set()
            await asyncio.sleep(0.45)
            return seen, await judge.complete(REQUEST)

        with caplog.at_level(logging.WARNING, logger="monitor.judge.openai_judge"):
            seen, reply = with_judge(settings, metrics, use)

    assert len(seen) == 5 and reply.text == GOOD
    assert server.count == 3
    refused_lines = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(refused_lines) == 1 and "credential refused" in refused_lines[0].getMessage()
    assert sample(metrics, "rubric_monitor_judge_up", model=MODEL) == 1
    # The requests counter matches the server (2 refused, 1 accepted); the 4 fail-fast calls are counted apart.
    assert requests_with(metrics, "auth_error") == 2 and requests_with(metrics, "ok") == 1
    assert sample(metrics, "rubric_monitor_judge_calls_refused_total", model=MODEL, reason="auth_open") == 4


# -- capability fallback -------------------------------------------------------------------------------------


def test_refused_json_schema_falls_back_to_json_object_then_prompt_and_remembers() -> None:
    def handler(request: Recorded) -> Reply:
        kind = (request.body.get("response_format") or {}).get("type")
        if kind is not None:
            return error(400, f"response_format type {kind} is not supported", "invalid_request_error")
        return completion(f"Here you go:\n```json\n{GOOD}\n```")

    with ScriptedOpenAIServer(handler) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> list[JudgeReply]:
            return [await judge.complete(REQUEST), await judge.complete(REQUEST)]

        replies = with_judge(settings_for(server), metrics, use)

    assert [r.mode for r in replies] == ["prompt", "prompt"]
    sent_formats = [(r.body.get("response_format") or {}).get("type") for r in server.requests]
    assert sent_formats == ["json_schema", "json_object", None, None]
    system = server.requests[-1].body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You judge conversations.")
    assert '"required": ["accuracy", "tone"]' in system["content"]
    assert requests_with(metrics, "ok") == 2 and requests_with(metrics, "refused") == 0


def test_json_object_mode_carries_the_schema_in_the_instructions() -> None:
    def handler(request: Recorded) -> Reply:
        if (request.body.get("response_format") or {}).get("type") == "json_schema":
            return error(400, "Invalid schema for response_format 'rubric_verdict'")
        return completion(GOOD)

    with ScriptedOpenAIServer(handler) as server:
        reply = complete_once(settings_for(server), new_metrics())
    assert reply.mode == "json_object"
    last = server.requests[-1].body
    assert last["response_format"] == {"type": "json_object"}
    assert "JSON" in last["messages"][0]["content"]


def test_a_forced_mode_is_not_abandoned_and_the_error_names_the_setting() -> None:
    with ScriptedOpenAIServer(lambda _: error(400, "json_schema is not supported")) as server:
        with pytest.raises(JudgeError, match="judge.response_mode json_schema") as raised:
            complete_once(settings_for(server, response_mode="json_schema"), new_metrics())
    assert type(raised.value) is JudgeError
    assert server.count == 1


def test_context_too_long_is_refused_without_changing_mode() -> None:
    too_long = error(400, "This model's maximum context length is 8192 tokens", "context_length_exceeded")
    with ScriptedOpenAIServer(lambda _: too_long) as server:

        async def use(judge: OpenAIJudge) -> str:
            with pytest.raises(JudgeRefused, match="maximum context length"):
                await judge.complete(REQUEST)
            return judge.response_mode()

        assert with_judge(settings_for(server), new_metrics(), use) == "json_schema"
    assert server.count == 1


@pytest.mark.parametrize(
    ("misconfigured", "named"),
    [
        (error(400, "max_tokens is too large: 15400. This model supports at most 4096 completion tokens, "
                    "whereas you provided 15400.", "invalid_value", param="max_tokens"), "15400"),
        # vLLM: the completion budget alone is larger than the context, so every conversation would fail.
        (error(400, "This model's maximum context length is 4096 tokens. However, you requested 15900 tokens "
                    "(500 in the messages, 15400 in the completion).", "BadRequestError"), "judge.max_output"),
        (error(400, "Invalid value for 'temperature': must be between 0 and 2.", "invalid_value",
               param="temperature"), "temperature"),
    ],
    ids=["max_tokens_too_large", "completion_larger_than_the_context", "temperature_out_of_range"],
)
def test_a_400_about_the_settings_leaves_the_evaluation_pending_and_the_mode_alone(
    misconfigured: Reply, named: str
) -> None:
    with ScriptedOpenAIServer(lambda _: misconfigured) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> tuple[list[JudgeError], str]:
            raised: list[JudgeError] = []
            for _ in range(2):
                with pytest.raises(JudgeError) as error_info:
                    await ask_judge(judge, REQUEST, validate_verdict, JudgeUsage())
                raised.append(error_info.value)
            return raised, judge.response_mode()

        raised, mode = with_judge(settings_for(server, max_output_tokens=15400), metrics, use)

    # A plain JudgeError, not a final "refused": the pipeline keeps the evaluation pending.
    assert [type(e) for e in raised] == [JudgeError, JudgeError]
    assert named in str(raised[0])
    assert mode == "json_schema"
    assert [r.body["response_format"]["type"] for r in server.requests] == ["json_schema", "json_schema"]
    assert requests_with(metrics, "error") == 2 and requests_with(metrics, "refused") == 0


@pytest.mark.parametrize(
    ("too_long", "reason"),
    [
        (error(400, "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                    "9000 tokens. Please reduce the length of the messages.", "context_length_exceeded",
               param="messages"), "maximum context length"),
        (Reply(status=400, json_body={"error": {
            "code": 400, "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": 9210, "n_ctx": 8192}}),
         "exceeds the available context size"),
        (error(400, "This model's maximum context length is 4096 tokens. However, you requested 5124 tokens "
                    "(4100 in the messages, 1024 in the completion).", "BadRequestError"),
         "4100 in the messages"),
    ],
    ids=["openai", "llama_cpp", "vllm"],
)
def test_a_conversation_too_long_for_the_context_ends_unscored_with_that_reason(
    too_long: Reply, reason: str
) -> None:
    with ScriptedOpenAIServer(lambda _: too_long) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> tuple[Any, str]:
            return await ask_judge(judge, REQUEST, validate_verdict, JudgeUsage()), judge.response_mode()

        asked, mode = with_judge(settings_for(server), metrics, use)

    assert asked.value is None and asked.error.startswith("refused") and reason in asked.error
    assert mode == "json_schema" and server.count == 1
    assert requests_with(metrics, "refused") == 1


def test_a_400_naming_the_response_format_parameter_falls_back_to_the_next_mode() -> None:
    def handler(request: Recorded) -> Reply:
        if (request.body.get("response_format") or {}).get("type") == "json_schema":
            return error(400, "This model does not support this feature.", "invalid_request_error",
                         param="response_format")
        return completion(GOOD)

    with ScriptedOpenAIServer(handler) as server:
        reply = complete_once(settings_for(server), new_metrics())
    assert reply.text == GOOD and reply.mode == "json_object" and server.count == 2


def test_max_tokens_rejected_switches_to_max_completion_tokens() -> None:
    def handler(request: Recorded) -> Reply:
        if "max_tokens" in request.body:
            return error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                              "Use 'max_completion_tokens' instead.", "unsupported_parameter")
        return completion(GOOD)

    with ScriptedOpenAIServer(handler) as server:
        reply = complete_once(settings_for(server), new_metrics())
    assert reply.text == GOOD and reply.mode == "json_schema"
    assert server.requests[-1].body["max_completion_tokens"] == 1024


# -- Azure OpenAI --------------------------------------------------------------------------------------------


def azure_settings(server: ScriptedOpenAIServer, **overrides: Any) -> JudgeSettings:
    return settings_for(server, kind="azure_openai", base_url=None, azure_endpoint=server.root_url,
                        azure_deployment="judge-deployment", api_version="2024-10-21", **overrides)


def test_azure_request_shape_with_an_api_key() -> None:
    with ScriptedOpenAIServer(lambda _: completion(GOOD)) as server:

        async def use(judge: OpenAIJudge) -> JudgeReply:
            return await judge.complete(REQUEST)

        async def run() -> JudgeReply:
            async with httpx.AsyncClient() as client:
                judge = OpenAIJudge(azure_settings(server), new_metrics(), http_client=client)
                try:
                    return await use(judge)
                finally:
                    await judge.aclose()

        reply = asyncio.run(run())

    assert reply.text == GOOD and reply.model == MODEL
    (sent,) = server.requests
    assert sent.path == "/openai/deployments/judge-deployment/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == "test"
    assert "authorization" not in sent.headers


class FakeEntraCredential:
    """Azure's async ``TokenCredential`` interface (as DefaultAzureCredential provides it), fixed token."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    async def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        self.scopes.append(scopes)
        if self.token is None:
            raise RuntimeError("DefaultAzureCredential failed to retrieve a token")
        return AccessToken(self.token, int(time.time()) + 3600)

    async def close(self) -> None:
        return None


def test_azure_entra_id_sends_a_bearer_token_and_no_key() -> None:
    credential = FakeEntraCredential("entra-token")
    with ScriptedOpenAIServer(lambda _: completion(GOOD)) as server:
        settings = azure_settings(server, api_key=None, azure_ad=True)
        reply = complete_once(settings, new_metrics(), azure_credential=credential)
    assert reply.text == GOOD
    (sent,) = server.requests
    assert sent.headers["authorization"] == "Bearer entra-token"
    assert "api-key" not in sent.headers
    assert sent.path.startswith("/openai/deployments/judge-deployment/chat/completions")
    assert credential.scopes == [("https://cognitiveservices.azure.com/.default",)]


def test_azure_entra_id_without_a_token_is_an_auth_failure_without_a_request() -> None:
    with ScriptedOpenAIServer(lambda _: completion(GOOD)) as server:
        metrics = new_metrics()
        settings = azure_settings(server, api_key=None, azure_ad=True)
        with pytest.raises(JudgeAuthError, match="Entra ID"):
            complete_once(settings, metrics, azure_credential=FakeEntraCredential(None))
    assert server.count == 0
    assert sample(metrics, "rubric_monitor_judge_up", model=MODEL) == 0


# -- concurrency and the request-rate limit ------------------------------------------------------------------


def test_concurrency_limit_bounds_requests_in_flight() -> None:
    lock = threading.Lock()
    in_flight = [0, 0]  # now, peak

    def handler(_: Recorded) -> Reply:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.1)
        with lock:
            in_flight[0] -= 1
        return completion(GOOD)

    with ScriptedOpenAIServer(handler) as server:

        async def use(judge: OpenAIJudge) -> list[JudgeReply]:
            return list(await asyncio.gather(*(judge.complete(REQUEST) for _ in range(12))))

        replies = with_judge(settings_for(server, concurrency=3), new_metrics(), use)
    assert len(replies) == 12 and server.count == 12
    assert in_flight[1] == 3


def test_limiter_keeps_the_request_rate_at_or_below_the_rpm_over_hundreds_of_calls() -> None:
    rpm, calls = 6000.0, 300  # 100 requests per second: about three seconds
    quota = QuotaHandler(rpm, content=GOOD)
    with ScriptedOpenAIServer(quota) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> list[JudgeReply | BaseException]:
            return list(await asyncio.gather(*(judge.complete(REQUEST) for _ in range(calls)),
                                             return_exceptions=True))

        started = time.monotonic()
        results = with_judge(settings_for(server, requests_per_minute=rpm, concurrency=16), metrics, use)
        elapsed = time.monotonic() - started

    # Counts, not wall-clock rates: on a busy machine sends are delayed and arrive bunched, which says nothing
    # about the limiter (its exact spacing is tested on a fake clock in test_limiter.py). What holds at any load:
    # every call got through, the endpoint's one-second quota bucket never refused one, and the calls were not
    # admitted faster than the quota allows. How close to the quota it runs is measured by benchmarks/bench_judge.
    assert all(isinstance(r, JudgeReply) for r in results)
    assert server.count == calls and quota.limited == 0
    assert elapsed >= (calls - 1) / (rpm / 60.0) * 0.98


def test_an_announced_quota_paces_calls_when_the_settings_set_none(caplog: pytest.LogCaptureFixture) -> None:
    announced = completion(GOOD)
    announced.headers = {"x-ratelimit-limit-requests": "300", "x-ratelimit-remaining-requests": "299"}
    with ScriptedOpenAIServer(lambda _: announced) as server:

        async def use(judge: OpenAIJudge) -> None:
            await judge.complete(REQUEST)
            await asyncio.gather(*(judge.complete(REQUEST) for _ in range(6)))

        with caplog.at_level(logging.INFO, logger="monitor.judge.openai_judge"):
            with_judge(settings_for(server, concurrency=6), new_metrics(), use)
    arrivals = [r.received_at for r in server.requests[1:]]
    # 300 per minute: one call every 0.2 s, so six calls span at least a second whatever the machine's load
    # (a lower bound holds on a busy machine; the spacing itself is tested on a fake clock in test_limiter.py).
    assert len(arrivals) == 6 and arrivals[-1] - arrivals[0] >= 0.95
    assert any("300 requests per minute" in r.getMessage() for r in caplog.records)


def test_a_configured_limit_wins_over_an_announced_one() -> None:
    announced = completion(GOOD)
    announced.headers = {"x-ratelimit-limit-requests": "60"}
    with ScriptedOpenAIServer(lambda _: announced) as server:

        async def use(judge: OpenAIJudge) -> None:
            for _ in range(5):
                await judge.complete(REQUEST)

        started = time.monotonic()
        with_judge(settings_for(server, requests_per_minute=6000), new_metrics(), use)
    # At the announced 60 per minute the five calls would take at least 4 s; the configured 6000 lets them go at
    # once (the margin is for a busy machine).
    assert time.monotonic() - started < 3.5 and server.count == 5


def test_an_endpoint_that_only_says_429_is_found_out_without_losing_calls() -> None:
    quota = QuotaHandler(3000, content=GOOD, latency=0.05, announce_limits=False)  # 50 per second
    with ScriptedOpenAIServer(quota) as server:
        metrics = new_metrics()

        async def use(judge: OpenAIJudge) -> list[JudgeReply | BaseException]:
            return list(await asyncio.gather(*(judge.complete(REQUEST) for _ in range(120)),
                                             return_exceptions=True))

        results = with_judge(settings_for(server, concurrency=12, max_retries=4), metrics, use)
    assert [r for r in results if not isinstance(r, JudgeReply)] == []
    assert quota.limited < 60  # a few 429s while it adapts, not a storm on every call
    assert server.count == 120 + quota.limited


# -- helpers -------------------------------------------------------------------------------------------------


def test_header_parsing() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("1.5") == 1.5
    assert parse_duration("soon") is None
    assert retry_after_seconds({"Retry-After-Ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    token_quota_spent = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s",
                         "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "9s"}
    assert retry_after_seconds(token_quota_spent) == 2.0
    assert retry_after_seconds({}) is None
    tokens_left = {"x-ratelimit-remaining-tokens": "1500", "x-ratelimit-reset-tokens": "6m0s"}
    assert retry_after_seconds(tokens_left) is None  # a quota not spent says nothing about the wait
    assert spent_quota_wait({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s",
                             "x-ratelimit-limit-requests": "600"}) == pytest.approx(0.1)
    assert spent_quota_wait({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s"}) == 2.0
    not_spent = {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "9s"}
    assert spent_quota_wait(not_spent) is None


def test_an_invalid_reply_is_counted_apart_from_the_exclusive_outcomes() -> None:
    async def use(judge: OpenAIJudge) -> None:
        await judge.complete(REQUEST)
        judge.record_invalid_reply()

    with ScriptedOpenAIServer(lambda _: completion(GOOD)) as server:
        metrics = new_metrics()
        metrics.judge_configured("openai", MODEL, PROMPT_VERSION)
        with_judge(settings_for(server), metrics, use)
    outcomes = {family.name: family for family in metrics.registry.collect()}["rubric_monitor_judge_requests"]
    by_outcome = {s.labels["outcome"]: s.value for s in outcomes.samples if s.name.endswith("_total")}
    # Every outcome exists from the start (at zero); one call, one count: summing outcomes gives the requests.
    assert by_outcome == {"ok": 1, "rate_limited": 0, "server_error": 0, "timeout": 0, "auth_error": 0,
                          "refused": 0, "error": 0}
    assert sample(metrics, "rubric_monitor_judge_invalid_replies_total", model=MODEL) == 1


def test_every_judge_error_is_a_judge_error() -> None:
    assert issubclass(JudgeModelRefused, JudgeRefused) and issubclass(JudgeRefused, JudgeError)
