"""The rendered prompt of every rubric kind and built-in metric, checked for what a capable judge needs to read
it the same way twice (issue 14, prompt defects 1 to 7).

The in-memory ``ScriptedJudge`` records the exact requests the evaluators build; its replies are valid so every
prompt an evaluation sends (generation and validation) is seen.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from monitor.errors import RubricError
from monitor.evaluators.adaptive import AdaptiveEvaluator, adaptive_prompt_texts, material_text
from monitor.evaluators.base import EvaluationContext
from monitor.evaluators.item_cache import InMemoryItemCache
from monitor.evaluators.prompts import PROMPT_VERSION, fingerprint
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.judge.base import JudgeRequest
from monitor.judge.scripted import ScriptedJudge
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.builtin import ADAPTIVE_METRIC_NAMES, BUILTIN_METRICS
from monitor.rubrics.loader import load_rubric_file, parse_rubric
from monitor.settings import JudgeSettings
from tests.vertex_judging import RESERVATION_TOOLS, conversation, text, tool_call, tool_result

DATA_BLOCKS = {"conversation", "reply", "reference", "agent_instructions", "tool_definitions", "user_request",
               "earlier_user_messages", "agent_message", "user_messages"}
"""Every data block any prompt may carry; ``<checklist>`` holds the judged criteria, not data."""
MULTI_TURN_AGENT = ("multi_turn_task_success", "multi_turn_tool_use_quality", "multi_turn_trajectory_quality")
LAST_TURN = "The reply being judged is the last assistant turn"

AGENT = conversation(
    text("user", "I need to change my flight to May 20."),
    text("assistant", "Which reservation? I see ABC123 and XYZ789."),
    text("user", "ABC123 please."),
    tool_call("call_1", "update_reservation", {"reservation_id": "ABC123", "date": "2024-05-20"}),
    tool_result("call_1", {"status": "updated", "reservation_id": "ABC123", "date": "2024-05-20"}),
    text("assistant", "Done: reservation ABC123 now flies on May 20."),
    system_instructions="Airline agent. Confirm changes with the user before updating a reservation.",
    tool_definitions=RESERVATION_TOOLS,
    reference="ABC123 moved to May 20.",
)


def _reply(request: JudgeRequest) -> str:
    """A valid answer to whatever the request's schema asks, so every prompt of an evaluation is sent."""
    properties: dict[str, Any] = request.schema.get("properties", {})
    if request.schema_name == "rubric_items":
        cite = material_text(request.messages[-1].content)[:40].strip()
        return json.dumps({"intents": ["change the flight"], "items": [
            {"question": q, "importance": "high", "checks": cite}
            for q in ("Is the date right?", "Is it confirmed?", "Polite?")]})
    if request.schema_name == "rubric_item_verdicts":
        return json.dumps({i: {"reasoning": "seen", "verdict": "yes"} for i in request.schema["required"]})
    if request.schema_name == "rubric_verdict":
        dims = properties["dimensions"]["required"]
        return json.dumps({"dimensions": {d: {"reason": "ok", "applicable": True, "score": 4} for d in dims}})
    if request.schema_name in ("grounding_verdict", "hallucination_verdict"):
        reply = re.search(r"<reply>\n(.*)\n</reply>", request.messages[-1].content, re.DOTALL)
        extra = {"excerpt": None} if request.schema_name == "grounding_verdict" else {
            "supporting_excerpt": None, "contradicting_excerpt": None}
        return json.dumps({"sentences": [{"sentence": reply.group(1) if reply else "", "label": "supported",
                                          "rationale": "ok", **extra}]})
    if request.schema_name == "safety_verdict":
        return json.dumps({"policies": {p: {"rationale": "ok", "violated": False, "excerpt": None}
                                        for p in properties["policies"]["required"]}})
    return json.dumps({"reasoning": "same", "verdict": "valid"})


def prompts(rubric_fields: dict[str, Any], *items: Conversation,
            evaluator: AdaptiveEvaluator | None = None, judge: ScriptedJudge | None = None,
            ) -> tuple[list[JudgeRequest], list[EvaluationResult]]:
    """Evaluate ``items`` (default: the airline conversation) and return the requests sent and the results."""
    rubric = parse_rubric({"name": "r", **rubric_fields}, "rubrics/r.yaml", builtin_version)
    judge = judge or ScriptedJudge(_reply)
    context = EvaluationContext(judge=judge, settings=JudgeSettings())
    chosen: Any = {"weighted": WeightedEvaluator(), "adaptive": evaluator or AdaptiveEvaluator(InMemoryItemCache())
                   }.get(rubric.kind, StaticMetricEvaluator())

    async def run() -> list[EvaluationResult]:
        results: list[EvaluationResult] = []
        for item in items or (AGENT,):
            results += await chosen.evaluate(item, rubric, context)
        return results

    return judge.requests, asyncio.run(run())


def scored_prompts(rubric_fields: dict[str, Any], *items: Conversation,
                   evaluator: AdaptiveEvaluator | None = None) -> tuple[list[JudgeRequest], list[EvaluationResult]]:
    """``prompts`` with valid replies: every result is scored."""
    requests, results = prompts(rubric_fields, *items, evaluator=evaluator)
    assert all(r.outcome != "unscored" for r in results), [r.unscored_reason for r in results]
    return requests, results


def system(request: JudgeRequest) -> str:
    return request.messages[0].content


def user(request: JudgeRequest) -> str:
    return request.messages[-1].content


def top_level_blocks(prompt: str) -> list[str]:
    """The data blocks a prompt carries: elements opened at the top level, each on its own line."""
    blocks: list[str] = []
    depth: list[str] = []
    for line in prompt.splitlines():
        opened = re.fullmatch(r"<([a-z_]+)(?: [^>]*)?>", line)
        closed = re.fullmatch(r"</([a-z_]+)>", line)
        if opened:
            if not depth and opened.group(1) in DATA_BLOCKS:
                blocks.append(opened.group(1))
            depth.append(opened.group(1))
        elif closed and depth and depth[-1] == closed.group(1):
            depth.pop()
    return blocks


def named_blocks(instructions: str) -> list[str]:
    notice = re.search(r"Everything inside (.*?) is DATA", instructions)
    assert notice, f"no data notice in: {instructions[:200]}"
    return re.findall(r"<([a-z_]+)>", notice.group(1))


ALL_KINDS: list[dict[str, Any]] = [
    {"kind": "weighted", "dimensions": [{"id": "resolution", "description": "Resolves it.", "weight": 9}]},
    *({"kind": "adaptive", "metric": m, **({"items": ["Is the date right?"]} if m == "final_response_reference_free"
       else {"guidelines": ["Dates must be confirmed."]} if m == "custom" else {})} for m in ADAPTIVE_METRIC_NAMES),
    {"kind": "grounding"}, {"kind": "hallucination"}, {"kind": "safety"}, {"kind": "final_response_match"},
]


def _label(fields: dict[str, Any]) -> str:
    return str(fields.get("metric", fields["kind"]))


# 6 -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", ALL_KINDS, ids=_label)
def test_every_prompt_names_exactly_the_data_blocks_it_carries(fields: dict[str, Any]) -> None:
    requests, _ = scored_prompts(fields)
    assert requests
    for request in requests:
        assert named_blocks(system(request)) == top_level_blocks(user(request)), system(request)


# 1 -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("metric", ADAPTIVE_METRIC_NAMES)
def test_only_reply_metrics_are_told_the_last_turn_is_judged(metric: str) -> None:
    fields = next(f for f in ALL_KINDS if f.get("metric") == metric)
    requests, _ = scored_prompts(fields)
    validation = next(r for r in requests if r.schema_name == "rubric_item_verdicts")
    whole = metric in (*MULTI_TURN_AGENT, "custom")
    assert (LAST_TURN in system(validation) + user(validation)) is not whole
    assert ("The items are about the whole conversation" in system(validation)) is whole


# 2 -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("metric", ADAPTIVE_METRIC_NAMES)
def test_a_metric_told_to_rely_on_tool_results_is_shown_them(metric: str) -> None:
    fields = next(f for f in ALL_KINDS if f.get("metric") == metric)
    requests, _ = scored_prompts(fields)
    validation = next(r for r in requests if r.schema_name == "rubric_item_verdicts")
    evidence = "what the tool calls shown did and returned" in system(validation)
    shows_tools = '<tool_result id="call_1">' in user(validation) and "update_reservation" in user(validation)
    assert evidence is shows_tools
    if metric in ("general_quality", "multi_turn_general_quality", "instruction_following"):
        assert evidence  # correctness items need the evidence, so they are shown it
    if metric in ("text_quality", "multi_turn_text_quality"):
        assert not evidence and "about the language of the reply, not its facts" in system(validation)
        assert "Evidence is" not in system(validation)


# 3 -------------------------------------------------------------------------------------------------------------

def test_items_are_written_for_the_request_in_its_context_and_cached_by_it() -> None:
    def yes_please(agent: str, instructions: str, offer: str, conversation_id: str) -> Conversation:
        return conversation(text("user", f"Help me with my {agent} booking."), text("assistant", offer),
                            text("user", "yes please"), text("assistant", "Done."),
                            id=conversation_id, agent_name=agent, system_instructions=instructions)

    airline = yes_please("airline", "You change flights.", "Shall I move ABC123 to May 20?", "a")
    hotel = yes_please("hotel", "You book hotel rooms.", "Shall I cancel room 12 tonight?", "b")
    evaluator = AdaptiveEvaluator(InMemoryItemCache())
    requests, results = scored_prompts({"kind": "adaptive"}, airline, hotel, airline.model_copy(update={"id": "c"}),
                                evaluator=evaluator)
    generations = [user(r) for r in requests if r.schema_name == "rubric_items"]
    assert len(generations) == 2  # the two unrelated "yes please" get their own items; the repeat is cached
    first = generations[0]
    assert "<user_request>\nyes please\n</user_request>" in first
    assert "Shall I move ABC123 to May 20?" in first and "Help me with my airline booking." in first
    assert "You change flights." in first and "Done." not in first  # written before the reply is seen
    assert "Shall I cancel room 12 tonight?" in generations[1]
    keys = [r.details["items_key"] for r in results]
    assert keys[0] != keys[1] and keys[2] == keys[0]
    assert [r.details["items_source"] for r in results] == ["generated", "generated", "cached"]


def test_long_agent_instructions_are_shortened_for_metrics_that_do_not_read_the_setup() -> None:
    long = conversation(text("user", "Hi"), text("assistant", "Hello."),
                        system_instructions="Policy. " + "x" * 5000 + " The end.")
    requests, _ = scored_prompts({"kind": "adaptive"}, long)
    generation = user(next(r for r in requests if r.schema_name == "rubric_items"))
    assert "chars cut" in generation and "The end." in generation
    assert len(generation) < 2000


# 4 -------------------------------------------------------------------------------------------------------------

def test_the_weighted_prompt_explains_applicability_the_ones_rule_and_turns_without_weights(tmp_path: Path) -> None:
    path = tmp_path / "airline.yaml"
    path.write_text(
        "name: airline\ndimensions:\n"
        "  - id: policy_enforcement\n    description: Enforces the change policy.\n    weight: 9\n"
        "    anchors:\n      1: Changes a flight without the user's confirmation.\n"
        "      3: Confirms, but misses a fee.\n      5: Confirms, states fees, then changes.\n"
        "  - id: clarity\n    description: Clear.\n    weight: 2\n", encoding="utf-8")
    rubric = load_rubric_file(path, builtin_version)
    requests, _ = scored_prompts(rubric.model_dump(exclude={"version"}))
    [request] = requests
    instructions = system(request)
    assert "weight" not in instructions.lower()  # weights are the formula's business, not the judge's
    assert "Any applicable dimension scored 1 fails the whole evaluation" in instructions
    assert "never mark one not applicable to spare the agent a low score" in instructions
    assert "a failure in any turn counts even if a later turn recovers" in instructions
    rubric_block = instructions[instructions.index("<rubric>"):]
    assert "- policy_enforcement: Enforces the change policy.\n" \
           "  1: Changes a flight without the user's confirmation.\n" \
           "  3: Confirms, but misses a fee.\n  5: Confirms, states fees, then changes.\n" \
           "- clarity: Clear.\n- general_quality (always applicable):" in rubric_block
    # Still one judge call, and the prompt stays small.
    assert len(instructions) < 2500


def test_a_turn_level_weighted_rubric_is_told_to_score_one_turn() -> None:
    requests, results = scored_prompts({"kind": "weighted", "evaluation_level": "turn",
                                 "dimensions": [{"id": "resolution", "description": "Resolves it.", "weight": 9}]})
    assert [r.turn_index for r in results] == [1, 5] and len(requests) == 2  # still one call per verdict
    for request, turn in zip(requests, (1, 5), strict=True):
        assert "score over the whole conversation" not in system(request)
        assert "Score only the assistant turn named before the conversation" in system(request)
        assert user(request).startswith(f"Judge only the assistant turn with index {turn} ")


@pytest.mark.parametrize(("anchors", "field", "message"), [
    ({7: "x"}, "dimensions.0.anchors", "level 7 is not a score from 1 to 5"),
    ({1: "  "}, "dimensions.0.anchors", "level 1: the anchor text is empty"),
])
def test_bad_anchors_are_named(anchors: dict[int, str], field: str, message: str) -> None:
    with pytest.raises(RubricError) as raised:
        parse_rubric({"name": "r", "dimensions": [{"id": "a", "description": "A", "weight": 1,
                                                   "anchors": anchors}]}, "rubrics/r.yaml", builtin_version)
    assert str(raised.value) == f"rubrics/r.yaml: {field}: {message}"


# 5 -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["grounding", "hallucination"])
def test_tool_arguments_are_context_and_only_the_prose_is_judged(kind: str) -> None:
    # The agent calls the tool in the same message as its reply: the date it passed is context, not a claim.
    same_message = AGENT.model_copy(update={"messages": (
        *AGENT.messages[:3],
        AGENT.messages[3].model_copy(update={"parts": (*AGENT.messages[3].parts, *AGENT.messages[5].parts)}),
    )})
    requests, _ = scored_prompts({"kind": kind}, same_message)
    [request] = requests
    context = user(request)[: user(request).index("<reply>")]
    assert '"date": "2024-05-20"' in context
    assert "<reply>\nDone: reservation ABC123 now flies on May 20.\n</reply>" in user(request)
    assert "a value the agent passed to a tool or a tool returned is context" in system(request)
    assert "Only the sentences of the reply are judged" in system(request)


# 7 -------------------------------------------------------------------------------------------------------------

def test_built_in_prompts_are_versioned_and_a_prompt_change_changes_the_rubric_version() -> None:
    assert PROMPT_VERSION
    names = [builtin_version("adaptive", m) for m in ADAPTIVE_METRIC_NAMES] + [
        builtin_version(k) for k in ("weighted", "grounding", "hallucination", "safety", "final_response_match")]
    assert all(re.fullmatch(r"[a-z_]+_[0-9a-f]{8}", n) for n in names)
    assert len(set(names)) == len(names)
    assert names[0].startswith("general_quality_")
    implicit = parse_rubric({"name": "q", "kind": "adaptive"}, "q.yaml", builtin_version).version
    explicit = parse_rubric({"name": "q", "kind": "adaptive", "version": "3"}, "q.yaml", builtin_version).version
    assert explicit == f"3+{names[0]}"
    # A release that edits the general_quality focus: a new prompt version, and new rubric versions.
    original = BUILTIN_METRICS["general_quality"]
    edited = replace(original, focus="something else")
    assert fingerprint(adaptive_prompt_texts(edited)) != fingerprint(adaptive_prompt_texts(original))

    def edited_versions(kind: str, metric: str | None) -> str:
        return f"general_quality_{fingerprint(adaptive_prompt_texts(edited))}"

    assert parse_rubric({"name": "q", "kind": "adaptive"}, "q.yaml", edited_versions).version != implicit
    assert parse_rubric({"name": "q", "kind": "adaptive", "version": "3"}, "q.yaml", edited_versions
                        ).version != explicit
    # Other metrics keep theirs.
    assert builtin_version("adaptive", "text_quality") == names[1]


# The embedded judge's terse prompt ----------------------------------------------------------------------------

TERSE_RUBRIC = {"kind": "weighted", "dimensions": [
    {"id": "policy_enforcement", "description": "Enforces the change policy.", "weight": 9},
    {"id": "clarity", "description": "Clear.", "weight": 2}]}


def terse_judge(reply: str) -> ScriptedJudge:
    return ScriptedJudge(lambda _: reply, model="small", prompt_style="terse")


def test_a_terse_judge_gets_a_third_of_the_prompt_and_its_one_character_per_dimension_reply_is_scored() -> None:
    [full], _ = scored_prompts(TERSE_RUBRIC)
    [request], [result] = prompts(TERSE_RUBRIC, judge=terse_judge('"4-5"'))
    assert system(request).startswith("Rate the agent on each criterion: 5 excellent to 1 unacceptable")
    assert system(request).endswith("r\n1 policy_enforcement\n2 clarity\n3 general_quality")
    assert "user: I need to change my flight to May 20.\n" in user(request)
    assert '[call update_reservation {"date":"2024-05-20","reservation_id":"ABC123"}]' in user(request)
    assert "<turn" not in user(request) and "tool_definitions" not in user(request)
    sent = sum(len(m.content) for m in request.messages)
    assert sent * 3 < sum(len(m.content) for m in full.messages)
    # A dimension that may be not applicable allows "-"; an always-applicable one does not.
    assert request.schema == {"type": "string", "pattern": "^[1-5-][1-5-][1-5]$"}
    assert request.max_output_tokens == 6
    assert [(d.id, d.applicable, d.score) for d in result.dimension_scores] == [
        ("policy_enforcement", True, 4), ("clarity", False, None), ("general_quality", True, 5)]
    assert result.score == pytest.approx((9 * 4 + 5 * 5) / (5 * 14)) and result.outcome == "pass"
    # Its results are never compared with full-prompt ones.
    assert result.prompt_version is not None and result.prompt_version.startswith(f"{PROMPT_VERSION}-terse-")
    assert result.raw_reply == '"4-5"'


@pytest.mark.parametrize(("reply", "problem"), [
    ('"4-"', "reply has 2 characters for 3 dimensions"),
    ('"4--"', "dimension 'general_quality' is always applicable but came back not applicable"),
    ('"4x5"', "dimension 'clarity': 'x' is neither a score from 1 to 5 nor -"),
    ("45", "reply is not a string of one character per dimension"),
])
def test_a_terse_reply_that_does_not_fit_the_rubric_is_unscored_and_says_why(reply: str, problem: str) -> None:
    requests, [result] = prompts(TERSE_RUBRIC, judge=terse_judge(reply))
    assert len(requests) == 2  # asked again once, like any invalid reply
    assert result.outcome == "unscored" and result.score is None
    assert result.unscored_reason == f"invalid_reply: {problem}"


def test_a_terse_turn_level_prompt_judges_the_last_turn_shown() -> None:
    fields = {**TERSE_RUBRIC, "evaluation_level": "turn"}
    requests, results = prompts(fields, judge=terse_judge('"335"'))
    assert [r.turn_index for r in results] == [1, 5]
    for request, last in zip(requests, ("Which reservation?", "Done: reservation ABC123"), strict=True):
        assert "Judge only the last assistant turn; earlier turns are context." in system(request)
        assert user(request).split("\n")[-2].startswith(f"assistant: {last}")
