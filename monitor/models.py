"""Value types that flow between the stages.

The data flow is ``SpanRecord`` (①, from a source) → ``Conversation`` (②, assembled) → ``EvaluationResult``
(④, from an evaluator) → store (⑤) and metrics (⑥). Every type here is frozen, and every timestamp is an aware
UTC ``datetime``: nothing in the package compares naive times.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Outcome = Literal["pass", "fail", "unscored"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "unscored")


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC (OTLP nanos and KQL datetimes are UTC by definition)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


CONVERSATION_ID_KEYS = (
    "gen_ai.conversation.id", "gen_ai.thread.id", "microsoft.gen_ai.main_agent.conversation_id", "session.id",
)
"""Span attributes that name the conversation a trace belongs to, most specific first."""


class SpanEvent(_Frozen):
    name: str
    time: datetime
    attributes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("time")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return as_utc(value)


class SpanRecord(_Frozen):
    """One span as read from a source, before any interpretation of its GenAI attributes.

    ``attributes`` values are what the producer wrote: strings (often JSON strings), numbers, booleans, lists or
    (for structured OTLP values) dicts. ``truncated_keys`` names attributes the source knows were cut short.

    A record of ``kind == "event"`` is a span event or a log record delivered on its own (an App Insights
    ``traces`` row, an OTLP log record): ``parent_span_id`` is the span it belongs to, ``name`` its event
    name, and assembly folds it into that span's ``events``.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str = ""
    kind: str = "internal"
    start_time: datetime
    end_time: datetime | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    resource: dict[str, Any] = Field(default_factory=dict)
    status: str = "unset"
    truncated_keys: tuple[str, ...] = ()
    scope: str = ""
    """The instrumentation scope's name (``opentelemetry.instrumentation.openai_v2``, ``agent_framework`` ...):
    which library wrote the span, so the convention it follows and its content switch are known. Empty when
    the source does not carry it (Application Insights)."""

    @field_validator("start_time", "end_time")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @property
    def conversation_id(self) -> str | None:
        """``gen_ai.conversation.id``, ``gen_ai.thread.id`` (Azure SDKs), ``session.id`` (OpenInference) or
        ``microsoft.gen_ai.main_agent.conversation_id`` (propagated by the Azure Monitor distro)."""
        attributes = self.attributes
        for key in CONVERSATION_ID_KEYS:
            value = attributes.get(key)
            if value:
                return str(value)
        return None

    @property
    def operation(self) -> str | None:
        value = self.attributes.get("gen_ai.operation.name")
        return str(value) if value else None


class Part(_Frozen):
    """One part of a message, in the OTel GenAI parts format.

    ``text`` and ``reasoning`` parts use ``content``; ``tool_call`` uses ``id``, ``name`` and ``arguments``;
    ``tool_call_response`` uses ``id`` and ``response``. Any other part type keeps its fields in ``data``.
    """

    type: str
    content: str | None = None
    id: str | None = None
    name: str | None = None
    arguments: Any = None
    response: Any = None
    data: dict[str, Any] = Field(default_factory=dict)


class Message(_Frozen):
    role: str
    parts: tuple[Part, ...] = ()
    name: str | None = None
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(p.content for p in self.parts if p.type == "text" and p.content)

    @property
    def tool_calls(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.type == "tool_call")


class ToolDefinition(_Frozen):
    name: str
    type: str = "function"
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Conversation(_Frozen):
    """The real message sequence of one agent conversation, each message once, in order."""

    id: str
    trace_ids: tuple[str, ...] = ()
    agent_name: str | None = None
    agent_id: str | None = None
    agent_version: str | None = None
    system_instructions: str | None = None
    tool_definitions: tuple[ToolDefinition, ...] = ()
    messages: tuple[Message, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    started_at: datetime | None = None
    last_activity_at: datetime | None = None
    span_count: int = 0
    truncated: bool = False
    """True when a source reported that a message attribute was cut short (App Insights caps values)."""
    reference: str | None = None
    """An expected final answer, when the input supplies one (``final_response_match``)."""
    scopes: tuple[str, ...] = ()
    """The instrumentation scopes of its spans (which libraries wrote them), when the source keeps them."""

    @property
    def agent(self) -> str:
        """The metric label: ``gen_ai.agent.name`` (else the resource's ``service.name``, set by assembly), else
        the agent id, else ``unknown``."""
        return self.agent_name or self.agent_id or "unknown"

    @property
    def has_content(self) -> bool:
        """Whether any message carries text. With message content capture off (the default of the OTel GenAI
        and Azure instrumentations) traces hold only a conversation's shape: nothing a judge could score."""
        return any(m.text.strip() for m in self.messages)


class DimensionScore(_Frozen):
    id: str
    score: int | None
    applicable: bool
    weight: int
    reason: str = ""


class EvaluationResult(_Frozen):
    """One verdict of one rubric on one conversation (or one assistant turn of it)."""

    conversation_id: str
    trace_ids: tuple[str, ...] = ()
    agent: str
    rubric: str
    rubric_version: str
    rubric_kind: str
    turn_index: int | None = None
    """``None`` for a whole-conversation verdict; the index of the assistant message for turn-level ones."""
    judge_model: str
    prompt_version: str | None = None
    """This project's prompt/template version (``PROMPT_VERSION``): results are compared only within one."""
    agent_version: str | None = None
    """``gen_ai.agent.version`` (else the resource's ``service.version``) of the conversation, when known."""
    outcome: Outcome
    score: float | None = None
    threshold: float | None = None
    reason: str = ""
    unscored_reason: str | None = None
    dimension_scores: tuple[DimensionScore, ...] = ()
    details: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific explanation: adaptive item verdicts, grounding sentence labels, safety policies."""
    judge_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    response_mode: str | None = None
    context_truncated: bool = False
    prompt: list[dict[str, str]] | None = None
    raw_reply: str | None = None
    evaluated_at: datetime = Field(default_factory=utc_now)
    revision: int = 0
    """0 for the first verdict; re-scoring after late turns writes revision 1, 2, ... which supersedes it."""

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def foundry_output(self) -> dict[str, Any]:
        """The result in Azure AI Foundry's rubric-evaluator shape, plus our identifying fields."""
        properties: dict[str, Any] = {
            "dimension_scores": [d.model_dump() for d in self.dimension_scores],
        }
        if self.details:
            properties["details"] = self.details
        if self.unscored_reason:
            properties["unscored_reason"] = self.unscored_reason
        return {
            "conversation_id": self.conversation_id,
            "rubric": self.rubric,
            "rubric_version": self.rubric_version,
            "score": None if self.score is None else round(self.score, 10),
            "label": self.outcome,
            "reason": self.reason,
            "threshold": self.threshold,
            "passed": self.passed,
            "properties": properties,
        }
