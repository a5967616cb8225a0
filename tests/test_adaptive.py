"""Adaptive rubrics through the real OpenAI client against a scripted server: formulas, cache, call counts."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.app import build_monitor
from monitor.errors import JudgeUnavailable
from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.item_cache import InMemoryItemCache
from monitor.evaluators.versions import builtin_version
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.kinds import AdaptiveRubric
from monitor.rubrics.loader import parse_rubric
from monitor.settings import load_settings
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion, error
from tests.helpers import judge_config, write_config
from tests.vertex_judging import (
    RESERVATION_TOOLS,
    conversation,
    items_reply,
    openai_context,
    schema_name,
    text,
    tool_call,
    tool_result,
    user_prompt,
    verdicts_reply,
)

BOOKING = conversation(
    text("user", "Book a table for 4 on Friday at 19:30, and answer in under 50 words."),
    text("assistant", "Done: a table for 4 on Friday at 19:30 is booked."),
)
QUESTIONS = ("Does the reply book a table for 4?", "Is it for Friday at 19:30?", "Is it under 50 words?")


def adaptive(**fields: Any) -> AdaptiveRubric:
    rubric = parse_rubric({"name": "quality", "kind": "adaptive", **fields}, "rubrics/quality.yaml", builtin_version)
    assert isinstance(rubric, AdaptiveRubric)
    return rubric


def scripted(verdicts: Callable[[Recorded], list[bool]], questions: tuple[str, ...] = QUESTIONS
             ) -> Callable[[Recorded], Reply]:
    def handler(request: Recorded) -> Reply:
        if schema_name(request) == "rubric_items":
            return items_reply(request, *questions)
        return verdicts_reply(request, verdicts(request))
    return handler


def evaluate(server: ScriptedOpenAIServer, rubric: AdaptiveRubric, *conversations: Conversation,
             evaluator: AdaptiveEvaluator | None = None, **settings: Any) -> list[EvaluationResult]:
    evaluator = evaluator or AdaptiveEvaluator(InMemoryItemCache())

    async def run() -> list[EvaluationResult]:
        async with openai_context(server, **settings) as context:
            results: list[EvaluationResult] = []
            for item in conversations:
                results += await evaluator.evaluate(item, rubric, context)
            return results

    return asyncio.run(run())


def test_new_request_costs_two_calls_and_scores_the_pass_rate() -> None:
    with ScriptedOpenAIServer(scripted(lambda _: [True, True, False])) as server:
        [result] = evaluate(server, adaptive(), BOOKING)
        assert server.count == 2
        generation, validation = server.requests
        assert schema_name(generation) == "rubric_items"
        assert "Book a table for 4 on Friday" in user_prompt(generation)
        # Items are written before the reply is seen.
        assert "Done: a table for 4" not in user_prompt(generation)
        assert "Is it for Friday at 19:30?" in user_prompt(validation)
    assert result.score == pytest.approx(2 / 3)
    assert result.outcome == "fail"  # default pass_threshold 1.0: every item must pass
    assert result.judge_calls == 2
    assert result.rubric_kind == "adaptive" and result.rubric_version == adaptive().version
    details = result.details
    assert (details["passed"], details["total"], details["all_passed"]) == (2, 3, False)
    assert details["items_source"] == "generated"
    assert [i["question"] for i in details["items"]] == list(QUESTIONS)
    assert [i["passed"] for i in details["items"]] == [True, True, False]
    assert details["items"][2]["reasoning"] == "reason for item_3"
    assert "Is it under 50 words?" in result.reason
    # The usage of both calls, as the server reported it.
    assert result.input_tokens == 200 and result.output_tokens == 40
    assert result.prompt is not None and result.raw_reply is not None


def test_a_repeated_request_reuses_its_items_without_a_generation_call() -> None:
    repeated = conversation(
        text("user", "  book a TABLE for 4 on friday at 19:30, and answer in under 50 words. "),
        text("assistant", "Booked."),
        id="c2",
    )
    other = conversation(text("user", "Cancel my booking."), text("assistant", "Cancelled."), id="c3")
    with ScriptedOpenAIServer(scripted(lambda _: [True, True, True])) as server:
        first, second, third = evaluate(server, adaptive(), BOOKING, repeated, other)
        names = [schema_name(r) for r in server.requests]
    assert names == ["rubric_items", "rubric_item_verdicts", "rubric_item_verdicts",
                     "rubric_items", "rubric_item_verdicts"]
    assert (first.judge_calls, second.judge_calls, third.judge_calls) == (2, 1, 2)
    assert second.details["items_source"] == "cached"
    assert second.details["items_key"] == first.details["items_key"]
    assert third.details["items_key"] != first.details["items_key"]
    assert second.score == 1.0 and second.outcome == "pass" and second.details["all_passed"] is True


def test_concurrent_evaluations_of_one_request_share_one_generation_call() -> None:
    evaluator = AdaptiveEvaluator(InMemoryItemCache())
    rubric = adaptive()

    def handler(request: Recorded) -> Reply:
        reply = scripted(lambda _: [True, True, True])(request)
        reply.delay = 0.2 if schema_name(request) == "rubric_items" else 0.0
        return reply

    async def run(server: ScriptedOpenAIServer) -> list[list[EvaluationResult]]:
        async with openai_context(server) as context:
            copies = [BOOKING.model_copy(update={"id": f"c{i}"}) for i in range(3)]
            return await asyncio.gather(*(evaluator.evaluate(c, rubric, context) for c in copies))

    with ScriptedOpenAIServer(handler) as server:
        results = asyncio.run(run(server))
        assert [schema_name(r) for r in server.requests].count("rubric_items") == 1
        assert server.count == 4
    assert all(r[0].outcome == "pass" for r in results)


def test_majority_vote_over_samples_and_a_tie_fails() -> None:
    votes = iter([[True, True, False], [True, False, False], [False, True, True]])
    with ScriptedOpenAIServer(scripted(lambda _: next(votes))) as server:
        [result] = evaluate(server, adaptive(samples=3), BOOKING)
        assert server.count == 4  # one generation call, three validation samples
    assert [i["passed"] for i in result.details["items"]] == [True, True, False]
    assert [i["votes"] for i in result.details["items"]] == [
        {"yes": 2, "no": 1}, {"yes": 2, "no": 1}, {"yes": 1, "no": 2}]
    assert result.score == pytest.approx(2 / 3)
    assert result.details["samples"] == {"requested": 3, "valid": 3}

    tie = iter([[True, True, True], [False, True, False]])
    with ScriptedOpenAIServer(scripted(lambda _: next(tie))) as server:
        [result] = evaluate(server, adaptive(samples=2), BOOKING)
        assert server.count == 3
    assert [i["passed"] for i in result.details["items"]] == [False, True, False]  # 1 yes 1 no fails
    assert result.score == pytest.approx(1 / 3)


def test_samples_default_to_the_judge_setting() -> None:
    with ScriptedOpenAIServer(scripted(lambda _: [True, True, True])) as server:
        [result] = evaluate(server, adaptive(), BOOKING, samples=2)
        assert server.count == 3
    assert result.details["samples"] == {"requested": 2, "valid": 2}


def test_pass_threshold_is_a_share_of_items() -> None:
    four = ("A?", "B?", "C?", "D?")
    with ScriptedOpenAIServer(scripted(lambda _: [True, False, True, False], four)) as server:
        [half] = evaluate(server, adaptive(pass_threshold=0.5), BOOKING)
    assert half.score == 0.5 and half.outcome == "pass" and half.threshold == 0.5
    assert half.details["all_passed"] is False


def test_items_written_in_the_rubric_cost_one_call_and_are_required_for_reference_free() -> None:
    with pytest.raises(ValueError, match="items"):
        adaptive(metric="final_response_reference_free")
    rubric = adaptive(metric="final_response_reference_free",
                      items=["Does the reply confirm the booking time?", "Does the reply avoid jargon?"])
    with ScriptedOpenAIServer(scripted(lambda _: [True, False])) as server:
        [result] = evaluate(server, rubric, BOOKING)
        assert server.count == 1
        assert "Does the reply confirm the booking time?" in user_prompt(server.requests[0])
    assert result.score == 0.5 and result.details["items_source"] == "rubric" and result.judge_calls == 1


def test_agent_metrics_see_instructions_tools_and_tool_calls() -> None:
    agent = conversation(
        text("user", "Table for 12 on Saturday at 20:00 please."),
        tool_call("call_1", "create_reservation", {"party_size": 12, "time": "Saturday 20:00"}),
        tool_result("call_1", {"status": "booked", "id": "R-77"}),
        text("assistant", "Booked, reservation R-77."),
        system_instructions="Max party size is 8. Dinner 17:00-22:00.",
        tool_definitions=RESERVATION_TOOLS,
    )
    with ScriptedOpenAIServer(scripted(lambda _: [False, True, True])) as server:
        [result] = evaluate(server, adaptive(metric="tool_use_quality"), agent)
        generation, validation = (user_prompt(r) for r in server.requests)
    assert "Max party size is 8" in generation and "create_reservation" in generation
    assert '"party_size": 12' in validation and "R-77" in validation
    assert result.score == pytest.approx(2 / 3)


def test_multi_turn_task_success_records_the_users_goals() -> None:
    def handler(request: Recorded) -> Reply:
        if schema_name(request) == "rubric_items":
            assert "intents" in request.body["messages"][0]["content"]
            return items_reply(request, "Is the table booked?", "Is the booking confirmed?",
                               "Is the time right?", intents=["book a table", "confirm it"])
        return verdicts_reply(request, [True, True, True])

    dialogue = conversation(text("user", "I need a table."), text("assistant", "For how many?"),
                            text("user", "Two, tonight at 8."), text("assistant", "Booked for two at 20:00."))
    with ScriptedOpenAIServer(handler) as server:
        [result] = evaluate(server, adaptive(metric="multi_turn_task_success"), dialogue)
        assert "I need a table." in user_prompt(server.requests[0])
        assert "Two, tonight at 8." in user_prompt(server.requests[0])
    assert result.details["intents"] == ["book a table", "confirm it"]
    assert result.outcome == "pass"


def test_turn_level_rubric_scores_every_reply() -> None:
    dialogue = conversation(text("user", "Hi"), text("assistant", "Hello! How can I help?"),
                            text("user", "Book for two."), text("assistant", "Booked for two."))
    with ScriptedOpenAIServer(scripted(lambda _: [True, True, True])) as server:
        results = evaluate(server, adaptive(evaluation_level="turn"), dialogue)
        assert server.count == 4  # two different requests: two generations, two validations
    assert [r.turn_index for r in results] == [1, 3]


def test_an_invalid_validation_reply_is_retried_once_then_unscored() -> None:
    def handler(request: Recorded) -> Reply:
        if schema_name(request) == "rubric_items":
            return items_reply(request, *QUESTIONS)
        return completion(json.dumps({"item_1": {"reasoning": "only one", "verdict": "yes"}}))

    with ScriptedOpenAIServer(handler) as server:
        [result] = evaluate(server, adaptive(), BOOKING)
        assert server.count == 3
    assert result.outcome == "unscored" and result.score is None
    assert result.unscored_reason is not None and result.unscored_reason.startswith("invalid_reply")
    assert "item_2" in result.unscored_reason
    assert result.judge_calls == 3


def test_an_unreachable_judge_propagates_and_nothing_is_cached() -> None:
    calls = {"generation": 0}

    def handler(request: Recorded) -> Reply:
        if schema_name(request) == "rubric_items":
            calls["generation"] += 1
            if calls["generation"] == 1:
                return error(500, "boom")
            return items_reply(request, *QUESTIONS)
        return verdicts_reply(request, [True, True, True])

    evaluator = AdaptiveEvaluator(InMemoryItemCache())
    rubric = adaptive()

    async def run(server: ScriptedOpenAIServer) -> EvaluationResult:
        async with openai_context(server) as context:
            with pytest.raises(JudgeUnavailable):
                await evaluator.evaluate(BOOKING, rubric, context)
            [result] = await evaluator.evaluate(BOOKING, rubric, context)
            return result

    with ScriptedOpenAIServer(handler) as server:
        second = asyncio.run(run(server))
        assert server.count == 3
    assert second.outcome == "pass" and second.details["items_source"] == "generated"


def test_an_invalid_generation_is_unscored_and_not_cached() -> None:
    replies = iter([lambda _: completion('{"intents": [], "items": []}'), lambda _: completion("no json at all"),
                    lambda request: items_reply(request, *QUESTIONS)])

    def handler(request: Recorded) -> Reply:
        if schema_name(request) == "rubric_items":
            return next(replies)(request)
        return verdicts_reply(request, [True, True, True])

    with ScriptedOpenAIServer(handler) as server:
        first, second = evaluate(server, adaptive(), BOOKING, BOOKING)
        assert server.count == 4
    assert first.outcome == "unscored" and first.judge_calls == 2
    assert first.unscored_reason is not None and first.unscored_reason.startswith("invalid_reply")
    assert second.outcome == "pass" and second.details["items_source"] == "generated"


def test_no_reply_is_unscored_without_a_call() -> None:
    silent = conversation(text("user", "Hello?"))
    with ScriptedOpenAIServer(scripted(lambda _: [])) as server:
        [result] = evaluate(server, adaptive(), silent)
        assert server.count == 0
    assert result.outcome == "unscored" and result.unscored_reason == "no_response"


def test_transcript_content_is_dropped_when_store_content_is_off() -> None:
    with ScriptedOpenAIServer(scripted(lambda _: [True, True, True])) as server:
        evaluator = AdaptiveEvaluator(InMemoryItemCache())

        async def run() -> list[EvaluationResult]:
            async with openai_context(server, store_content=False) as context:
                return await evaluator.evaluate(BOOKING, adaptive(), context)

        [result] = asyncio.run(run())
    assert result.prompt is None and result.raw_reply is None
    assert result.outcome == "pass"


def test_every_kind_reports_through_the_metric_catalog(tmp_path: Path) -> None:
    """Adaptive and static results reach the spine's metrics; generated item text never becomes a label."""
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "quality.yaml").write_text("kind: adaptive\nmetric: general_quality\n")
    (rubrics / "grounded.yaml").write_text("kind: grounding\n")
    config = write_config(tmp_path / "config.yaml", judge_config(
        "http://unused", source={"kind": "otlp_file", "path": str(REPO / "examples" / "traces")},
        rubrics={"directory": str(rubrics)}, store={"url": f"sqlite:///{tmp_path / 'results.db'}"}))

    def handler(request: Recorded) -> Reply:
        name = schema_name(request)
        if name == "rubric_items":
            return items_reply(request, "Is the secret item text answered?", "Is it polite?", "Is it complete?")
        if name == "rubric_item_verdicts":
            return verdicts_reply(request, [True, False, True])
        reply = re.search(r"<reply>\n(.*)\n</reply>", user_prompt(request), re.DOTALL)
        sentence = reply.group(1) if reply else ""
        return completion(json.dumps({"sentences": [
            {"sentence": sentence, "label": "supported", "rationale": "ok", "excerpt": None}]}))

    with ScriptedOpenAIServer(handler) as server:
        data = yaml.safe_load(config.read_text())
        data["judge"]["base_url"] = server.base_url
        settings = load_settings(write_config(config, data))
        registry = CollectorRegistry()
        monitor = build_monitor(settings, registry)
        try:
            report = monitor.run_cycle()
        finally:
            monitor.close()
    assert report.ok, report.failures
    exposition = generate_latest(registry).decode()
    samples = [s for f in text_string_to_metric_families(exposition) for s in f.samples]
    for rubric, kind in (("quality", "adaptive"), ("grounded", "grounding")):
        evaluated = [s for s in samples if s.name == "rubric_monitor_evaluations_total"
                     and s.labels["rubric"] == rubric]
        assert sum(s.value for s in evaluated) >= 1, rubric
        assert any(s.name == "rubric_monitor_score_sum_total" and s.labels["rubric"] == rubric and s.value > 0
                   for s in samples), rubric
        assert any(s.name == "rubric_monitor_pass_rate" and s.labels["rubric"] == rubric
                   for s in samples), rubric
        assert any(s.name == "rubric_monitor_rubric_info" and s.labels["rubric"] == rubric
                   and s.labels["kind"] == kind for s in samples), rubric
    assert not any(s.name.startswith("rubric_monitor_dimension") for s in samples
                   if s.labels.get("rubric") in ("quality", "grounded"))
    assert "secret item text" not in exposition
