"""Static metrics through the real OpenAI client and a scripted server: each formula exact, one call each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.versions import builtin_version
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.kinds import SAFETY_POLICIES, StaticMetricRubric
from monitor.rubrics.loader import parse_rubric
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.vertex_judging import (
    conversation,
    openai_context,
    schema,
    schema_name,
    text,
    tool_call,
    tool_result,
    user_prompt,
)

SENTENCES = (
    "Your table for 4 is booked for Friday at 19:30.",
    "The reservation number is R-77.",
    "The restaurant has a terrace.",
    "Enjoy your dinner!",
)
GROUNDED = conversation(
    text("user", "Book a table for 4 on Friday at 19:30."),
    tool_call("call_1", "create_reservation", {"party_size": 4, "time": "Friday 19:30"}),
    tool_result("call_1", {"status": "booked", "id": "R-77", "note": "terrace closed for works"}),
    text("assistant", " ".join(SENTENCES)),
)


def static(kind: str, **fields: Any) -> StaticMetricRubric:
    rubric = parse_rubric({"name": kind, "kind": kind, **fields}, f"rubrics/{kind}.yaml", builtin_version)
    assert isinstance(rubric, StaticMetricRubric)
    return rubric


def labelled(labels: Sequence[str], sentences: Sequence[str] = SENTENCES, hallucination: bool = False
             ) -> Reply:
    rows = []
    for sentence, label in zip(sentences, labels, strict=True):
        row: dict[str, Any] = {"sentence": sentence, "label": label, "rationale": f"{label} because"}
        if hallucination:
            supports, contradicts = label in ("supported", "disputed"), label in ("contradictory", "disputed")
            row.update(supporting_excerpt="R-77" if supports else None,
                       contradicting_excerpt="terrace closed" if contradicts else None)
        else:
            row["excerpt"] = "R-77" if label in ("supported", "contradictory") else None
        rows.append(row)
    return completion(json.dumps({"sentences": rows}))


def evaluate(server: ScriptedOpenAIServer, rubric: StaticMetricRubric, item: Conversation = GROUNDED
             ) -> EvaluationResult:
    async def run() -> list[EvaluationResult]:
        async with openai_context(server) as context:
            return await StaticMetricEvaluator().evaluate(item, rubric, context)

    [result] = asyncio.run(run())
    return result


@pytest.mark.parametrize(("labels", "expected"), [
    (("supported", "supported", "supported", "no_rad"), 1.0),
    (("supported", "supported", "unsupported", "no_rad"), 0.0),  # the zero rule, although 3 of 4 are fine
    (("supported", "contradictory", "supported", "no_rad"), 0.0),
])
def test_grounding_formula_and_zero_rule(labels: tuple[str, ...], expected: float) -> None:
    with ScriptedOpenAIServer(lambda _: labelled(labels)) as server:
        result = evaluate(server, static("grounding"))
        assert server.count == 1
        request = server.requests[0]
    assert schema_name(request) == "grounding_verdict"
    assert "terrace closed for works" in user_prompt(request)  # tool results are the context
    assert result.score == expected
    assert result.outcome == ("pass" if expected == 1.0 else "fail")
    assert result.judge_calls == 1
    assert [s["label"] for s in result.details["sentences"]] == list(labels)
    assert result.details["sentences"][0]["excerpt"] == "R-77"
    assert result.details["counts"]["supported"] == labels.count("supported")


def test_hallucination_ratio_has_no_zero_rule_and_counts_disputed_against() -> None:
    labels = ("supported", "disputed", "unsupported", "no_rad")
    with ScriptedOpenAIServer(lambda _: labelled(labels, hallucination=True)) as server:
        result = evaluate(server, static("hallucination", pass_threshold=0.5))
        assert server.count == 1
        assert "disputed" in schema(server.requests[0])["properties"]["sentences"]["items"]["properties"][
            "label"]["enum"]
    assert result.score == 0.5  # (supported + no_rad) / sentences = 2 / 4
    assert result.outcome == "pass"
    assert result.details["sentences"][1]["contradicting_excerpt"] == "terrace closed"
    assert result.details["counts"] == {"supported": 1, "unsupported": 1, "contradictory": 0, "disputed": 1,
                                        "no_rad": 1}


def test_grounding_rejects_a_label_it_does_not_know() -> None:
    with ScriptedOpenAIServer(lambda _: labelled(("supported", "disputed", "supported", "no_rad"))) as server:
        result = evaluate(server, static("grounding"))
        assert server.count == 2  # asked again once, then given up
    assert result.outcome == "unscored" and result.score is None
    assert result.unscored_reason is not None and "disputed" in result.unscored_reason


def test_sentences_that_leave_out_part_of_the_reply_are_not_scored() -> None:
    replies = iter([
        labelled(("supported",), sentences=SENTENCES[:1]),  # three sentences silently dropped
        labelled(("supported", "supported", "unsupported", "no_rad")),
    ])
    with ScriptedOpenAIServer(lambda _: next(replies)) as server:
        result = evaluate(server, static("grounding"))
        assert server.count == 2
    assert result.score == 0.0 and result.judge_calls == 2


def safety_reply(request: Recorded, violated: Sequence[str] = ()) -> Reply:
    policies = schema(request)["properties"]["policies"]["required"]
    return completion(json.dumps({"policies": {
        p: {"rationale": f"{p} checked", "violated": p in violated,
            "excerpt": "the text" if p in violated else None}
        for p in policies
    }}))


def test_safety_score_one_means_safe() -> None:
    with ScriptedOpenAIServer(lambda r: safety_reply(r)) as server:
        result = evaluate(server, static("safety"))
        assert server.count == 1
        assert schema(server.requests[0])["properties"]["policies"]["required"] == list(SAFETY_POLICIES)
    assert result.score == 1.0 and result.outcome == "pass"
    assert result.details["violated"] == []
    assert len(result.details["policies"]) == 5


def test_safety_violation_scores_zero_and_names_the_policy() -> None:
    with ScriptedOpenAIServer(lambda r: safety_reply(r, violated=["harassment"])) as server:
        result = evaluate(server, static("safety", policies=["harassment", "hate_speech"]))
        asked = schema(server.requests[0])["properties"]["policies"]["required"]
    assert asked == ["harassment", "hate_speech"]
    assert result.score == 0.0 and result.outcome == "fail"
    assert result.details["violated"] == ["harassment"]
    assert result.details["policies"][0] == {"policy": "harassment", "violated": True,
                                             "rationale": "harassment checked", "excerpt": "the text"}
    assert "harassment" in result.reason


def test_final_response_match_is_zero_or_one() -> None:
    reference = "Booked a table for 4, Friday 19:30, ref R-77."
    with_reference = GROUNDED.model_copy(update={"reference": reference})
    for verdict, expected in (("valid", 1.0), ("invalid", 0.0)):
        answer = completion(json.dumps({"reasoning": f"it is {verdict}", "verdict": verdict}))
        with ScriptedOpenAIServer(lambda _, a=answer: a) as server:
            result = evaluate(server, static("final_response_match"), with_reference)
            assert server.count == 1
            assert "ref R-77" in user_prompt(server.requests[0])
        assert result.score == expected
        assert result.details == {"verdict": verdict, "reasoning": f"it is {verdict}"}


def test_final_response_match_without_reference_is_unscored_without_a_call() -> None:
    with ScriptedOpenAIServer(lambda _: completion("{}")) as server:
        result = evaluate(server, static("final_response_match"))
        assert server.count == 0
    assert result.outcome == "unscored" and result.unscored_reason == "no_reference"


def test_static_rubrics_refuse_options_that_do_not_apply() -> None:
    with pytest.raises(ValueError, match="samples"):
        static("grounding", samples=3)
    with pytest.raises(ValueError, match="policies"):
        static("hallucination", policies=["harassment"])
