"""What Foundry's ``prompt``, ``code`` and ``endpoint`` evaluators share: the conversation's fields under the names
Foundry's data mappings use, the ``data_schema`` check made before anything runs, and the validation of the
metrics an evaluator returns into one result.

A result's ``score`` is the primary metric on the 0 to 1 scale (``(value − min) / (max − min)``; a boolean is 0 or
1). Every metric is also a dimension score, so the existing counters, windowed means, regression detector and
write-back carry it: its level 1 to 5 is ``1 + 4 × normalised value`` rounded, turned over for a metric whose
desirable direction is ``decrease`` (so 5 is always the good end). An ordinal metric of 1 to 5 keeps its value. The
exact values are in ``details.metrics``.

The result passes when every metric with a pass rule meets it: ``threshold`` (``>=`` for direction ``increase``
or none, ``<=`` for ``decrease``; ``neutral`` metrics have no rule) or, for a boolean with a desirable direction,
the desirable value. With no rule at all, the primary metric's 0 to 1 score is compared with ``pass_threshold``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from monitor.evaluators.base import EvaluationContext, InvalidReply, JudgeUsage, result_fields, unscored_result
from monitor.evaluators.views import Target, last_user_index
from monitor.models import Conversation, DimensionScore, EvaluationResult, Message
from monitor.rubrics.base import EvaluatorMetric
from monitor.rubrics.evaluator_kinds import CONVERSATION_FIELDS, FoundryEvaluatorRubric, metric_range

AS_MESSAGES = {"query": "query_messages", "response": "response_messages"}
"""A ``query`` or ``response`` that ``data_schema`` declares an array is given as these messages."""
_JSON_TYPE_CHECKS: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _message_json(message: Message) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": message.role, "content": message.text}
    calls = [{"id": p.id, "name": p.name, "arguments": p.arguments} for p in message.tool_calls]
    if calls:
        entry["tool_calls"] = calls
    results = [{"id": p.id, "result": p.response} for p in message.parts if p.type == "tool_call_response"]
    if results:
        entry["tool_results"] = results
    return entry


def conversation_fields(target: Target) -> dict[str, Any]:
    """The fields the conversation provides for the judged reply (``CONVERSATION_FIELDS``); a field the trace
    does not have is absent, not empty."""
    conversation = target.conversation
    messages = conversation.messages[: target.response_index + 1]
    fields: dict[str, Any] = {}
    request = last_user_index(conversation, target.response_index)
    if request is not None and messages[request].text.strip():
        fields["query"] = messages[request].text
    fields["response"] = target.response.text
    fields["query_messages"] = [_message_json(m) for m in messages[: request + 1 if request is not None else 0]]
    if conversation.system_instructions:
        fields["query_messages"].insert(0, {"role": "system", "content": conversation.system_instructions})
    fields["response_messages"] = [_message_json(m) for m in messages[(request + 1 if request is not None else 0):]]
    results = {p.id: p.response for m in messages for p in m.parts if p.type == "tool_call_response" and p.id}
    calls = [{"id": p.id, "name": p.name, "arguments": p.arguments, "result": results.get(p.id or "")}
             for m in messages for p in m.tool_calls]
    if calls:
        fields["tool_calls"] = calls
    if conversation.tool_definitions:
        fields["tool_definitions"] = [t.model_dump(exclude_none=True) for t in conversation.tool_definitions]
    if conversation.reference and conversation.reference.strip():
        fields["ground_truth"] = conversation.reference
    if conversation.system_instructions:
        fields["system_instructions"] = conversation.system_instructions
    return fields


def check_data(rubric: FoundryEvaluatorRubric, fields: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The fields the evaluator receives, or why the conversation cannot be evaluated: a field ``data_schema``
    requires that the conversation lacks, or one whose JSON type differs from the declared one."""
    for name in rubric.required_fields():
        if name not in fields:
            return {}, f"the conversation has no {name} ({CONVERSATION_FIELDS.get(name, 'not a conversation field')})"
    properties = (rubric.data_schema or {}).get("properties") or {}
    given = {name: fields[name] for name in rubric.provided_fields() if name in fields}
    for name, value in list(given.items()):
        declared = properties.get(name)
        types = declared.get("type") if isinstance(declared, dict) else None
        if types is None:
            continue
        names = types if isinstance(types, list) else [types]
        if name in AS_MESSAGES and "array" in names and "string" not in names:
            # Foundry's query and response may be conversation arrays (agent-framework maps the messages there).
            value = given[name] = fields[AS_MESSAGES[name]]
        if not any(_JSON_TYPE_CHECKS[t](value) for t in names if t in _JSON_TYPE_CHECKS):
            return {}, f"{name} is a {_json_type(value)}, data_schema declares {'/'.join(names)}"
    return given, None


def _json_type(value: Any) -> str:
    return next(name for name, check in _JSON_TYPE_CHECKS.items() if check(value))


def metric_schema(rubric: FoundryEvaluatorRubric) -> dict[str, Any]:
    """The strict JSON schema of a reply carrying every metric and a reason."""
    properties: dict[str, Any] = {}
    for name, metric in rubric.metrics.items():
        if metric.type == "boolean":
            properties[name] = {"type": "boolean"}
            continue
        low, high = metric_range(metric)
        properties[name] = {"type": "integer" if metric.type == "ordinal" else "number",
                            "minimum": low, "maximum": high}
    properties["reason"] = {"type": "string"}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _value(name: str, metric: EvaluatorMetric, raw: Any) -> float:
    if metric.type == "boolean":
        if isinstance(raw, bool):
            return 1.0 if raw else 0.0
        if raw in (0, 1) and not isinstance(raw, bool):
            return float(raw)
        raise InvalidReply(f"metric {name}: {raw!r} is not a boolean")
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise InvalidReply(f"metric {name}: {raw!r} is not a finite number")
    if metric.type == "ordinal" and float(raw) != int(raw):
        raise InvalidReply(f"metric {name}: {raw!r} is not a whole number (ordinal)")
    low, high = metric_range(metric)
    if not low <= raw <= high:
        raise InvalidReply(f"metric {name}: {raw!r} is outside {low:g} to {high:g}")
    return float(raw)


def parse_metrics(rubric: FoundryEvaluatorRubric, reply: Any) -> tuple[dict[str, float], str]:
    """Every declared metric's value (validated) and the reason; a bare number is the value of a single metric
    (code evaluators return a float). Unknown metrics are refused: a misnamed one would hide a missing one."""
    if isinstance(reply, int | float) and not isinstance(reply, bool) or isinstance(reply, bool):
        if len(rubric.metrics) != 1:
            raise InvalidReply(f"a single value was returned; the rubric declares {len(rubric.metrics)} metrics "
                               f"({', '.join(rubric.metrics)}): return an object")
        reply = {rubric.primary_metric: reply}
    if not isinstance(reply, dict):
        raise InvalidReply(f"the reply is a {type(reply).__name__}, not an object of metrics")
    if isinstance(reply.get("metrics"), dict):
        reply = {**reply["metrics"], "reason": reply.get("reason", reply["metrics"].get("reason"))}
    reason = reply.get("reason")
    values: dict[str, float] = {}
    for name, metric in rubric.metrics.items():
        if name not in reply:
            raise InvalidReply(f"metric {name} is missing")
        values[name] = _value(name, metric, reply[name])
    unknown = sorted(set(reply) - set(rubric.metrics) - {"reason"})
    if unknown:
        raise InvalidReply(f"the reply has metrics the rubric does not declare: {', '.join(unknown)}")
    return values, reason if isinstance(reason, str) else ""


def normalised(metric: EvaluatorMetric, value: float) -> float:
    low, high = metric_range(metric)
    return 1.0 if high == low else (value - low) / (high - low)


def level(metric: EvaluatorMetric, value: float) -> int:
    """The metric as a dimension score 1 to 5, 5 the desirable end (see the module docstring)."""
    low, high = metric_range(metric)
    if metric.type == "ordinal" and (low, high) == (1.0, 5.0) and metric.desirable_direction != "decrease":
        return int(value)
    share = normalised(metric, value)
    if metric.desirable_direction == "decrease":
        share = 1.0 - share
    return 1 + int(math.floor(4 * share + 0.5))


def metric_passes(metric: EvaluatorMetric, value: float) -> bool | None:
    """The metric's own pass rule, or None when it has none."""
    direction = metric.desirable_direction
    if direction == "neutral":
        return None
    if metric.threshold is not None:
        return value <= metric.threshold if direction == "decrease" else value >= metric.threshold
    if metric.type == "boolean" and direction is not None:
        return value == (1.0 if direction == "increase" else 0.0)
    return None


@dataclass(frozen=True)
class MetricVerdict:
    score: float
    passed: bool
    dimensions: tuple[DimensionScore, ...]
    details: dict[str, Any]


def verdict(rubric: FoundryEvaluatorRubric, values: Mapping[str, float], reason: str) -> MetricVerdict:
    primary = rubric.primary_metric
    rows: dict[str, dict[str, Any]] = {}
    dimensions: list[DimensionScore] = []
    rules: list[bool] = []
    for name, metric in rubric.metrics.items():
        value = values[name]
        passes = metric_passes(metric, value)
        if passes is not None:
            rules.append(passes)
        shown: float | bool = bool(value) if metric.type == "boolean" else value
        rows[name] = {"value": shown, "normalised": normalised(metric, value), "level": level(metric, value),
                      "passed": passes, "threshold": metric.threshold,
                      "desirable_direction": metric.desirable_direction}
        dimensions.append(DimensionScore(id=name, score=level(metric, value), applicable=True, weight=1,
                                         reason=reason if name == primary else ""))
    score = normalised(rubric.metrics[primary], values[primary])
    passed = all(rules) if rules else score >= rubric.pass_threshold
    details = {"metrics": rows, "primary_metric": primary,
               "pass_rule": "metric thresholds" if rules else "pass_threshold"}
    return MetricVerdict(score, passed, tuple(dimensions), details)


def metric_reason(rubric: FoundryEvaluatorRubric, values: Mapping[str, float], given: str) -> str:
    shown = ", ".join(f"{name} {_format(rubric.metrics[name], value)}" for name, value in values.items())
    return f"{shown}. {given}".strip() if given else shown + "."


def _format(metric: EvaluatorMetric, value: float) -> str:
    if metric.type == "boolean":
        return "true" if value else "false"
    return f"{value:g}"


def scored_result(
    conversation: Conversation,
    rubric: FoundryEvaluatorRubric,
    context: EvaluationContext,
    target: Target,
    usage: JudgeUsage,
    values: Mapping[str, float],
    reason: str,
    extra: Mapping[str, Any] | None = None,
    truncated: bool = False,
) -> EvaluationResult:
    found = verdict(rubric, values, reason)
    threshold = rubric.pass_threshold if found.details["pass_rule"] == "pass_threshold" else None
    return EvaluationResult(
        outcome="pass" if found.passed else "fail",
        score=found.score,
        reason=metric_reason(rubric, values, reason),
        dimension_scores=found.dimensions,
        details={**found.details, **(extra or {})},
        **result_fields(conversation, rubric, threshold, context, target.turn_index, usage, truncated),
    )


def missing_data(
    conversation: Conversation, rubric: FoundryEvaluatorRubric, context: EvaluationContext, target: Target,
    problem: str,
) -> EvaluationResult:
    return unscored_result(conversation, rubric, context, target.turn_index, JudgeUsage(), "missing_field",
                           f"Unscored: {problem} (data_schema).")
