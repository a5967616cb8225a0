"""Foundry's prompt-based evaluators: the rubric's ``prompt_text`` with its ``{{field}}`` placeholders filled, one
judge call under a strict JSON schema built from ``metrics`` (asked again once when the reply does not fit).

A conversation field replaces its placeholder as an escaped data block (``<response>...</response>``), named in
the injection notice like every other prompt's data; an initialization parameter (the operator's own value)
replaces its placeholder as is. Each field is cut to ``FIELD_MAX_CHARS`` in the middle, so one huge tool result
cannot crowd out the rest.
"""

from __future__ import annotations

import json
from typing import Any

from monitor.evaluators.base import EvaluationContext, JudgeUsage, ask_judge, system_and_user, unscored_result
from monitor.evaluators.foundry import (
    check_data,
    conversation_fields,
    metric_schema,
    missing_data,
    parse_metrics,
    scored_result,
)
from monitor.evaluators.prompts import data_notice
from monitor.evaluators.views import EachReply, Target, output_budget
from monitor.judge.base import JudgeRequest
from monitor.judge.render import cut_middle, escape_data
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.builtin import flow
from monitor.rubrics.evaluator_kinds import PLACEHOLDER, PromptEvaluatorRubric

FIELD_MAX_CHARS = 20_000

PROMPT_EVALUATOR_LEAD = flow("""
    You are an evaluator. Follow the evaluation instructions in the user message exactly, then answer with one
    JSON object holding every metric named below and a short reason, and nothing else.
""")


def _field_text(value: Any) -> tuple[str, bool]:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return cut_middle(text, FIELD_MAX_CHARS)


def fill_prompt(rubric: PromptEvaluatorRubric, fields: dict[str, Any]) -> tuple[str, list[str], bool]:
    """The prompt with its placeholders filled, the data blocks it carries, and whether a field was cut."""
    blocks: list[str] = []
    cut = False

    def replace(match: Any) -> str:
        nonlocal cut
        name = match.group(1)
        if name in rubric.initialization_parameters:
            value = rubric.initialization_parameters[name]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text, shortened = _field_text(fields.get(name, ""))
        cut = cut or shortened
        if name not in blocks:
            blocks.append(name)
        return f"<{name}>\n{escape_data(text)}\n</{name}>"

    return PLACEHOLDER.sub(replace, rubric.prompt_text), blocks, cut


def _instructions(rubric: PromptEvaluatorRubric, blocks: list[str]) -> str:
    lines = [PROMPT_EVALUATOR_LEAD]
    for name, metric in rubric.metrics.items():
        described: str = metric.type or "continuous"
        if metric.type != "boolean":
            low = metric.min_value if metric.min_value is not None else None
            high = metric.max_value if metric.max_value is not None else None
            if low is not None and high is not None:
                described += f", {low:g} to {high:g}"
        if metric.desirable_direction in ("increase", "decrease"):
            described += f", {'higher' if metric.desirable_direction == 'increase' else 'lower'} is better"
        lines.append(f"- {name}: {described}")
    if blocks:
        lines.append(data_notice(*blocks))
    return "\n".join(lines)


class PromptEvaluator(EachReply[PromptEvaluatorRubric]):
    kinds: tuple[str, ...] = ("prompt",)

    async def _evaluate_target(
        self, conversation: Conversation, rubric: PromptEvaluatorRubric, context: EvaluationContext, target: Target
    ) -> EvaluationResult:
        fields = conversation_fields(target)  # a placeholder may name a field data_schema does not declare
        _, problem = check_data(rubric, fields)
        if problem is not None:
            return missing_data(conversation, rubric, context, target, problem)
        missing = [n for n in rubric.placeholders()
                   if n not in rubric.initialization_parameters and n not in fields]
        if missing:
            return missing_data(conversation, rubric, context, target,
                                f"the conversation has no {missing[0]} for the prompt's {{{{{missing[0]}}}}}")
        prompt, blocks, cut = fill_prompt(rubric, fields)
        request = JudgeRequest(
            messages=system_and_user(_instructions(rubric, blocks), prompt),
            schema=metric_schema(rubric),
            schema_name="evaluator_metrics",
            model=rubric.judge_model,
            temperature=context.settings.temperature,
            max_output_tokens=output_budget(context, 40 * len(rubric.metrics) + 300),
            rubric=rubric.name,
        )
        usage = JudgeUsage()
        asked = await ask_judge(context.judge, request, lambda reply: parse_metrics(rubric, reply), usage)
        if asked.value is None:
            return unscored_result(conversation, rubric, context, target.turn_index, usage,
                                   asked.error or "no_reply", f"Unscored: {asked.error}", cut)
        values, reason = asked.value
        return scored_result(conversation, rubric, context, target, usage, values, reason, truncated=cut)


def prompt_evaluator_texts() -> tuple[str, ...]:
    """The fixed text of a prompt evaluator's calls (what ``builtin_version`` fingerprints)."""
    return (PROMPT_EVALUATOR_LEAD, data_notice("query"), str(FIELD_MAX_CHARS))
