"""Azure AI Foundry's weighted rubric: every dimension scored 1 to 5 in ONE judge call per evaluation.

Scoring (``foundry_score``) follows foundry-rubrics.md §2: only applicable dimensions count; by default
``score = Σ wᵢ·sᵢ / Σ wᵢ / 5`` (it reproduces the published outputs to 10 decimals), ``minmax`` gives
``(mean − 1) / 4``; ``passed = score >= pass_threshold and no applicable dimension scored 1``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.evaluators.base import (
    EvaluationContext,
    InvalidReply,
    JudgeUsage,
    ask_judge,
    result_fields,
    system_and_user,
    unscored_result,
)
from monitor.evaluators.cache import VerdictCache
from monitor.evaluators.prompts import (
    TERSE_ALWAYS_APPLICABLE,
    TERSE_DIMENSION_LINE,
    TERSE_ONE_TURN,
    TERSE_WEIGHTED_INSTRUCTIONS,
    TERSE_WHOLE_CONVERSATION,
    TURN_FOCUS,
    TURN_LEVEL_INSTRUCTIONS,
    WEIGHTED_INSTRUCTIONS,
)
from monitor.evaluators.views import judge_each_reply, output_budget
from monitor.judge.base import JudgeRequest
from monitor.judge.render import RenderedConversation, render_conversation
from monitor.models import Conversation, DimensionScore, EvaluationResult
from monitor.rubrics.schema import WeightedRubric


def verdict_schema(rubric: WeightedRubric) -> dict[str, Any]:
    """The strict JSON schema of a verdict: every dimension id a required property."""
    properties: dict[str, Any] = {}
    for dimension in rubric.dimensions:
        applicable: dict[str, Any] = {"type": "boolean"}
        score: dict[str, Any] = {"type": ["integer", "null"], "minimum": 1, "maximum": 5}
        if dimension.always_applicable:
            applicable = {"type": "boolean", "enum": [True]}
            score = {"type": "integer", "minimum": 1, "maximum": 5}
        properties[dimension.id] = {
            "type": "object",
            "properties": {"reason": {"type": "string"}, "applicable": applicable, "score": score},
            "required": ["reason", "applicable", "score"],
            "additionalProperties": False,
        }
    return {
        "type": "object",
        "properties": {
            "dimensions": {
                "type": "object",
                "properties": properties,
                "required": [d.id for d in rubric.dimensions],
                "additionalProperties": False,
            }
        },
        "required": ["dimensions"],
        "additionalProperties": False,
    }


def parse_verdict(reply: Any, rubric: WeightedRubric) -> tuple[DimensionScore, ...]:
    """Check a parsed reply against the rubric's own scale; anything off raises ``InvalidReply``."""
    if not isinstance(reply, dict) or not isinstance(reply.get("dimensions"), dict):
        raise InvalidReply("reply has no 'dimensions' object")
    given: dict[str, Any] = reply["dimensions"]
    scores: list[DimensionScore] = []
    for dimension in rubric.dimensions:
        entry = given.get(dimension.id)
        if not isinstance(entry, dict):
            raise InvalidReply(f"dimension {dimension.id!r} is missing")
        applicable = entry.get("applicable")
        if not isinstance(applicable, bool):
            raise InvalidReply(f"dimension {dimension.id!r}: 'applicable' is not a boolean")
        if dimension.always_applicable and not applicable:
            raise InvalidReply(f"dimension {dimension.id!r} is always applicable but came back not applicable")
        score = entry.get("score")
        if applicable:
            # bool is an int subclass: true/false are not scores.
            if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
                raise InvalidReply(f"dimension {dimension.id!r}: score {score!r} is not an integer from 1 to 5")
        reason = entry.get("reason")
        scores.append(DimensionScore(
            id=dimension.id,
            score=score if applicable else None,
            applicable=applicable,
            weight=dimension.weight,
            reason=reason if isinstance(reason, str) else "",
        ))
    unknown = sorted(set(given) - {d.id for d in rubric.dimensions})
    if unknown:
        raise InvalidReply(f"reply has dimensions the rubric does not: {', '.join(unknown)}")
    return tuple(scores)


def terse_verdict_schema(rubric: WeightedRubric) -> dict[str, Any]:
    """A terse verdict: one character per dimension, in the rubric's order: a score, or ``-`` for not applicable
    (never for an always-applicable dimension). A reply of this schema is a few tokens; the JSON verdict, even
    without reasons, is ten times more."""
    pattern = "".join("[1-5]" if d.always_applicable else "[1-5-]" for d in rubric.dimensions)
    return {"type": "string", "pattern": f"^{pattern}$"}


def parse_terse_verdict(reply: Any, rubric: WeightedRubric) -> tuple[DimensionScore, ...]:
    """Read a terse verdict as the JSON verdict it stands for, checked by ``parse_verdict``."""
    if not isinstance(reply, str):
        raise InvalidReply("reply is not a string of one character per dimension")
    if len(reply) != len(rubric.dimensions):
        raise InvalidReply(f"reply has {len(reply)} characters for {len(rubric.dimensions)} dimensions")
    verdicts: dict[str, Any] = {}
    for dimension, mark in zip(rubric.dimensions, reply, strict=True):
        if mark == "-":
            verdicts[dimension.id] = {"applicable": False, "score": None}
        elif mark in "12345":
            verdicts[dimension.id] = {"applicable": True, "score": int(mark)}
        else:
            raise InvalidReply(f"dimension {dimension.id!r}: {mark!r} is neither a score from 1 to 5 nor -")
    return parse_verdict({"dimensions": verdicts}, rubric)


def combine_samples(samples: Sequence[tuple[DimensionScore, ...]]) -> tuple[DimensionScore, ...]:
    """Median score per dimension (low median, so scores stay on the 1-5 integer scale); applicability by
    majority, a tie counting as not applicable."""
    if len(samples) == 1:
        return samples[0]
    combined: list[DimensionScore] = []
    for position, first in enumerate(samples[0]):
        votes = [sample[position] for sample in samples]
        applicable_votes = sum(v.applicable for v in votes)
        applicable = applicable_votes * 2 > len(votes)
        scores = [v.score for v in votes if v.applicable and v.score is not None]
        score = statistics.median_low(scores) if applicable and scores else None
        reasons = [v.reason for v in votes if v.applicable == applicable and v.reason]
        combined.append(first.model_copy(update={
            "applicable": applicable, "score": score, "reason": reasons[0] if reasons else "",
        }))
    return tuple(combined)


@dataclass(frozen=True)
class FoundryScore:
    score: float | None
    passed: bool
    reason: str


def foundry_score(dimensions: Sequence[DimensionScore], rubric: WeightedRubric) -> FoundryScore:
    scored = [d for d in dimensions if d.applicable and d.score is not None]
    if not scored:
        return FoundryScore(None, False, "No dimension was applicable.")
    # One division of exact integers, so a score that equals the threshold compares equal to it.
    weights = sum(d.weight for d in scored)
    weighted = sum(d.weight * (d.score or 0) for d in scored)
    score = weighted / (5 * weights) if rubric.normalization == "div5" else (weighted - weights) / (4 * weights)
    ones = [d for d in scored if d.score == 1]
    passed = score >= rubric.pass_threshold and not ones
    return FoundryScore(score, passed, _reason(scored, ones, passed))


def _reason(scored: list[DimensionScore], ones: list[DimensionScore], passed: bool) -> str:
    def named(items: list[DimensionScore]) -> str:
        parts = [f"{d.id} ({d.score})" for d in items]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f", and {parts[-1]}"

    if ones:
        drivers = sorted(ones, key=lambda d: -d.weight)[:3]
        head = f"The verdict is driven by very low {named(drivers)}."
    elif passed:
        drivers = sorted(scored, key=lambda d: (-(d.score or 0) * d.weight, -d.weight))[:3]
        head = f"The verdict is driven most by {named(drivers)}."
    else:
        drivers = sorted(scored, key=lambda d: ((d.score or 0), -d.weight))[:3]
        head = f"The verdict is driven most by low {named(drivers)}."
    detail = drivers[0].reason.strip()
    return f"{head} {detail}" if detail else head


DIMENSION_LINE = "- {id}{always}: {description}"
ALWAYS_APPLICABLE = " (always applicable)"
ANCHOR_LINE = "  {level}: {text}"
"""One anchor under its dimension: what a score of ``level`` looks like."""


def rubric_prompt(rubric: WeightedRubric) -> str:
    """The rubric as the judge reads it: one line per dimension (and one per anchor), compact so that small
    models read it fast. Weights are not shown: they matter to the formula, not to a dimension's score, and a
    judge shown them scores heavy dimensions differently."""
    lines = [f"{rubric.name}: {rubric.description}" if rubric.description else rubric.name]
    for d in rubric.dimensions:
        always = ALWAYS_APPLICABLE if d.always_applicable else ""
        lines.append(DIMENSION_LINE.format(id=d.id, always=always, description=d.description))
        lines.extend(ANCHOR_LINE.format(level=level, text=text) for level, text in sorted((d.anchors or {}).items()))
    return "\n".join(lines)


def terse_rubric_prompt(rubric: WeightedRubric) -> str:
    """The rubric as a terse judge reads it: its name, then each dimension's id numbered in reply order. The
    descriptions are left out: they are a third of the prompt, and a model small enough to need terse prompts
    goes by the ids' words either way."""
    lines = [rubric.name]
    for number, d in enumerate(rubric.dimensions, 1):
        always = TERSE_ALWAYS_APPLICABLE if d.always_applicable else ""
        lines.append(TERSE_DIMENSION_LINE.format(number=number, id=d.id, always=always))
    return "\n".join(lines)


def weighted_prompt_texts() -> tuple[str, ...]:
    """Every fixed text of the weighted prompt (what ``builtin_version`` fingerprints)."""
    return (WEIGHTED_INSTRUCTIONS, TURN_LEVEL_INSTRUCTIONS, TURN_FOCUS, DIMENSION_LINE, ALWAYS_APPLICABLE,
            ANCHOR_LINE)


class WeightedEvaluator:
    kinds: tuple[str, ...] = ("weighted",)

    def __init__(self, cache: VerdictCache | None = None) -> None:
        self._cache = cache or VerdictCache(0)

    async def evaluate(
        self, conversation: Conversation, rubric: WeightedRubric, context: EvaluationContext
    ) -> list[EvaluationResult]:
        if rubric.evaluation_level == "conversation":
            # The whole conversation is judged even when the agent never answered in text (a transfer, a
            # silent failure): that is part of what the rubric scores.
            return [await self._evaluate_unit(conversation, rubric, context, None)]
        return await judge_each_reply(
            conversation, rubric, context,
            lambda target: self._evaluate_unit(conversation, rubric, context, target.turn_index),
        )

    async def _evaluate_unit(
        self, conversation: Conversation, rubric: WeightedRubric, context: EvaluationContext, turn: int | None
    ) -> EvaluationResult:
        settings = context.settings
        terse = context.judge.prompt_style == "terse"
        rendered = render_conversation(
            conversation, settings.context_token_budget, settings.tool_result_max_chars, upto=turn,
            markup="terse" if terse else "tagged",
        )
        model = rubric.judge_model or context.judge.model
        request, parse = (self._terse_request if terse else self._full_request)(rubric, rendered, turn, context)
        cache_key = (rendered.text, rubric.name, rubric.version, model, turn)
        usage = JudgeUsage()
        cached = self._cache.get(cache_key)
        samples: list[tuple[DimensionScore, ...]] = []
        problem: str | None = None
        if cached is not None:
            samples = [cached]
        else:
            for _ in range(rubric.samples or settings.samples):
                asked = await ask_judge(context.judge, request, parse, usage)
                if asked.value is not None:
                    samples.append(asked.value)
                else:
                    problem = asked.error
        base = result_fields(conversation, rubric, rubric.pass_threshold, context, turn, usage,
                             rendered.truncated)
        if not samples:
            return unscored_result(conversation, rubric, context, turn, usage, problem or "no_reply",
                                   f"Unscored: {problem}", rendered.truncated)
        dimensions = combine_samples(samples)
        if cached is None:
            self._cache.put(cache_key, dimensions)
        verdict = foundry_score(dimensions, rubric)
        if verdict.score is None:
            return EvaluationResult(outcome="unscored", unscored_reason="no_applicable_dimension",
                                    reason=verdict.reason, dimension_scores=dimensions, **base)
        details: dict[str, Any] = {}
        if len(samples) > 1 or problem:
            details["samples"] = {"valid": len(samples), "requested": rubric.samples or settings.samples}
        if cached is not None:
            details["cached"] = True
        vote = Counter(d.applicable for d in dimensions)
        details["applicable_dimensions"] = vote[True]
        return EvaluationResult(
            outcome="pass" if verdict.passed else "fail",
            score=verdict.score,
            reason=verdict.reason,
            dimension_scores=dimensions,
            details=details,
            **base,
        )

    @staticmethod
    def _full_request(
        rubric: WeightedRubric, rendered: RenderedConversation, turn: int | None, context: EvaluationContext
    ) -> tuple[JudgeRequest, Callable[[Any], tuple[DimensionScore, ...]]]:
        # A turn-level rubric is told to score one turn, never "over the whole conversation".
        instructions = WEIGHTED_INSTRUCTIONS if turn is None else TURN_LEVEL_INSTRUCTIONS
        system = f"{instructions}\n\n<rubric>\n{rubric_prompt(rubric)}\n</rubric>"
        user = rendered.text if turn is None else TURN_FOCUS.format(turn_index=turn) + "\n" + rendered.text
        request = JudgeRequest(
            messages=system_and_user(system, user),
            schema=verdict_schema(rubric),
            schema_name="rubric_verdict",
            model=rubric.judge_model,
            temperature=context.settings.temperature,
            # about 120 tokens per dimension: reason, applicability, score
            max_output_tokens=output_budget(context, 120 * len(rubric.dimensions) + 100),
            rubric=rubric.name,
        )
        return request, lambda reply: parse_verdict(reply, rubric)

    @staticmethod
    def _terse_request(
        rubric: WeightedRubric, rendered: RenderedConversation, turn: int | None, context: EvaluationContext
    ) -> tuple[JudgeRequest, Callable[[Any], tuple[DimensionScore, ...]]]:
        scope = TERSE_WHOLE_CONVERSATION if turn is None else TERSE_ONE_TURN
        system = TERSE_WEIGHTED_INSTRUCTIONS.format(scope=scope) + "\n" + terse_rubric_prompt(rubric)
        request = JudgeRequest(
            messages=system_and_user(system, rendered.text),
            schema=terse_verdict_schema(rubric),
            schema_name="rubric_verdict",
            model=rubric.judge_model,
            temperature=context.settings.temperature,
            max_output_tokens=len(rubric.dimensions) + 3,  # the characters, two quotes, the end of the reply
            rubric=rubric.name,
        )
        return request, lambda reply: parse_terse_verdict(reply, rubric)
