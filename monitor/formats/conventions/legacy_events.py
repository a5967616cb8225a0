"""The legacy GenAI convention: one event or log record per message (deprecated since semconv 1.38, still
emitted by util-genai 0.x, OpenLLMetry with ``use_attributes=False``, Agent Framework, Semantic Kernel):
``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``, the body in the event's attributes, in a
log record's body (``body``), or, in the Azure SDK variant, as JSON in ``gen_ai.event.content`` (``azure_sdk``).

Records whose event name was lost on the way (``UNNAMED_LEGACY_EVENT``: the Azure Monitor exporter drops it) are
named from their body and their place among the span's records (``name_legacy_events``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import monitor.formats.conventions.azure_sdk as azure_sdk
from monitor.formats.genai import TimedMessage, content_parts, tool_call_parts
from monitor.formats.json_text import decode_json_text
from monitor.models import Message, Part, SpanEvent

NAME = "legacy_events"
ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE = "gen_ai.choice"
UNNAMED_LEGACY_EVENT = "gen_ai.unnamed.message"
"""A legacy ``gen_ai.*.message`` / ``gen_ai.choice`` record whose event name was lost on the way (the Azure
Monitor exporter drops it): which one it was is read from its body and its place among the span's records."""
_BODY_KEYS = frozenset({
    "content", "role", "tool_calls", "id", "tool_call_id", "message", "index", "finish_reason", "text",
})


def recognizes(events: Sequence[SpanEvent]) -> bool:
    """Whether any of a span's events or log records is a legacy message record."""
    return any(event.name in ROLES or event.name in (CHOICE, UNNAMED_LEGACY_EVENT, azure_sdk.INSTRUCTION_EVENT)
               for event in events)


@dataclass
class LegacyContent:
    """What a span's legacy records hold, and what could not be read."""

    instructions: list[str] = field(default_factory=list)
    input: list[TimedMessage] = field(default_factory=list)
    output: list[TimedMessage] = field(default_factory=list)
    truncated: bool = False
    rejections: list[tuple[str, str]] = field(default_factory=list)
    """(reason, detail) per record that could not be read."""


def read(events: Sequence[SpanEvent]) -> LegacyContent:
    """The messages of a span's legacy events or log records, in time order."""
    found = LegacyContent()
    ordered = [event for _, event in sorted(enumerate(events), key=lambda item: (item[1].time, item[0]))]
    if any(event.name == UNNAMED_LEGACY_EVENT for event in ordered):
        ordered = name_legacy_events(ordered)
    for event in ordered:
        if event.name not in ROLES and event.name not in (CHOICE, azure_sdk.INSTRUCTION_EVENT):
            continue
        body = _body(event, found)
        if body is None:
            continue
        if event.name == azure_sdk.INSTRUCTION_EVENT or event.name == "gen_ai.system.message":
            text = Message(role="system", parts=content_parts(body.get("content", body.get("text")))).text
            if text:
                found.instructions.append(text)
        elif event.name == CHOICE:
            choice = legacy_choice(body)
            if choice is not None:
                found.output.append(TimedMessage(choice, event.time))
        else:
            message = legacy_message(ROLES[event.name], body)
            if message is not None:
                found.input.append(TimedMessage(message, event.time))
    # Legacy records may carry no tool call id (OpenLLMetry's gen_ai.tool.message); attributes always do.
    found.input = _answer_ids(found.input)
    return found


def _body(event: SpanEvent, found: LegacyContent) -> dict[str, Any] | None:
    attributes = event.attributes
    raw = azure_sdk.event_content(attributes)
    if raw is None:
        raw = attributes.get("body")
    if raw is None:
        body = {key: value for key, value in attributes.items() if key in _BODY_KEYS}
        # Span attributes cannot nest, so producers write the structured body fields as JSON text.
        for key in ("tool_calls", "message"):
            if isinstance(body.get(key), str):
                decoded = decode_json_text(body[key])
                body[key] = decoded.value if decoded.error is None else None
                found.truncated = found.truncated or decoded.truncated
        return body
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        found.rejections.append(("invalid_legacy_event", f"event {event.name}: content is a {type(raw).__name__}"))
        return None
    if not raw.lstrip().startswith("{"):
        return {"content": raw}
    decoded = decode_json_text(raw)
    if decoded.truncated:
        found.truncated = True
        return None
    if decoded.error is not None:
        # Not JSON, and not JSON cut short: message text that happens to start with a brace.
        return {"content": raw}
    if not isinstance(decoded.value, dict):
        found.rejections.append(("invalid_legacy_event", f"event {event.name}: not an object"))
        return None
    return decoded.value


def name_legacy_events(events: Sequence[SpanEvent]) -> list[SpanEvent]:
    """``events`` (in time order) with each ``UNNAMED_LEGACY_EVENT`` given the legacy event name it had.

    The body tells most: ``role``; ``message``/``finish_reason`` (a choice); ``tool_calls`` (assistant); ``id``
    (a tool result). A body of ``content`` alone (openai-v2 and OpenLLMetry write system, user, assistant text
    and OpenLLMetry's tool results so) is placed by the conversation's shape: right after an assistant's N
    tool calls come N tool results; the last input is the user's turn and, going back from it, user and
    assistant alternate; a first message that would be the assistant's is the system prompt. Records that
    still cannot be read are left unnamed, and passed over."""
    roles: list[str | None] = []
    calls: list[int] = []
    for event in events:
        role, pending = _unnamed_role(event) if event.name == UNNAMED_LEGACY_EVENT else (
            _NAMED_ROLES.get(event.name), 0)
        roles.append(role)
        calls.append(pending)
    inputs = [i for i, role in enumerate(roles) if role != "choice"]
    pending = 0
    for i in inputs:  # tool results follow the calls they answer
        if roles[i] == "assistant":
            pending = calls[i]
        elif roles[i] == "tool":
            pending = max(0, pending - 1)
        elif roles[i] == "" and pending:
            roles[i], pending = "tool", pending - 1
        else:
            pending = 0
    expected = "user"
    for position, i in reversed(list(enumerate(inputs))):  # back from the last turn, the user's
        role = roles[i]
        if role == "":
            role = expected
            if role == "assistant" and position == 0:
                role = "system"
            roles[i] = role
        expected = {"user": "assistant", "system": "user"}.get(role or "", "user")
    named: list[SpanEvent] = []
    for event, role in zip(events, roles, strict=True):
        if event.name == UNNAMED_LEGACY_EVENT and role:
            event = event.model_copy(update={"name": CHOICE if role == "choice" else f"gen_ai.{role}.message"})
        named.append(event)
    return named


_NAMED_ROLES: dict[str, str] = {**{name: role for name, role in ROLES.items()},
                                       CHOICE: "choice"}


def _unnamed_role(event: SpanEvent) -> tuple[str, int]:
    """The role an unnamed legacy record's body shows (``""`` when only its place can tell) and its number of
    tool calls."""
    raw = event.attributes.get("body")
    body: Any = raw
    if isinstance(raw, str):
        decoded = decode_json_text(raw)
        body = decoded.value if decoded.error is None else None
    if not isinstance(body, dict):
        return "", 0
    tool_calls = body.get("tool_calls")
    count = len(tool_calls) if isinstance(tool_calls, list) else 0
    role = body.get("role")
    if "message" in body or "finish_reason" in body:
        return "choice", 0
    if isinstance(role, str) and role in ("system", "user", "assistant", "tool"):
        return role, count
    if count:
        return "assistant", count
    if "id" in body or "tool_call_id" in body:
        return "tool", 0
    return "", 0


def _answer_ids(messages: list[TimedMessage]) -> list[TimedMessage]:
    """Tool results without a call id (OpenLLMetry's ``gen_ai.tool.message`` records carry none) take the id of
    the call they answer: the calls of the assistant message before them, in order."""
    if not any(p.type == "tool_call_response" and p.id is None for m in messages for p in m.message.parts):
        return messages
    result: list[TimedMessage] = []
    pending: list[str] = []
    for timed in messages:
        message = timed.message
        if message.role == "assistant":
            pending = [p.id for p in message.tool_calls if p.id]
        elif message.role == "tool" and len(message.parts) == 1 and message.parts[0].type == "tool_call_response":
            part = message.parts[0]
            if part.id is None and pending:
                part = part.model_copy(update={"id": pending[0]})
                timed = TimedMessage(message.model_copy(update={"parts": (part,)}), timed.time)
            if part.id in pending:
                pending.remove(part.id)
        result.append(timed)
    return result


def legacy_message(role: str, body: Mapping[str, Any]) -> Message | None:
    """A ``gen_ai.{user,assistant,tool}.message`` body as a message; ``None`` when it carries nothing."""
    if role == "tool":
        identifier = body.get("id", body.get("tool_call_id"))
        if identifier is None and body.get("content") is None:
            return None
        return Message(role="tool", parts=(Part(
            type="tool_call_response",
            id=identifier if isinstance(identifier, str) else None,
            response=body.get("content"),
        ),))
    parts = content_parts(body.get("content")) + tool_call_parts(body.get("tool_calls"))
    return Message(role=role, parts=parts) if parts else None


def legacy_choice(body: Mapping[str, Any]) -> Message | None:
    """The first choice (``index`` 0) of a ``gen_ai.choice`` body; other choices were not continued."""
    index = body.get("index", 0)
    if index not in (0, "0", None):
        return None
    raw_message = body.get("message")
    message = raw_message if isinstance(raw_message, dict) else {}
    role = message.get("role")
    tool_calls = message.get("tool_calls", body.get("tool_calls"))
    finish_reason = body.get("finish_reason")
    return Message(
        role=role if isinstance(role, str) and role else "assistant",
        parts=content_parts(message.get("content")) + tool_call_parts(tool_calls),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )
