"""Reading the GenAI content of a span: messages, system instructions and tool definitions.

Two formats exist. The current one puts JSON on span attributes (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``), as JSON strings
or as structured values. The legacy one (deprecated since semconv 1.38, still emitted) puts one span event
per message: ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``, with the body in the
event attributes or, in the Azure SDK variant, as JSON in ``gen_ai.event.content``.

A value that is not valid against the schema is reported (``error``) and ignored, never raised. A value cut
short (Application Insights caps property values) is reported as ``truncated``, and the complete leading
array items are salvaged, so a long conversation still shows what survived the cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from monitor.formats.genai_schema import Generation, SchemaIssue, SchemaName, validate_document, validate_item
from monitor.formats.json_text import (
    ArrayScanner,
    decode_json_text,
    may_hold_lone_surrogates,
    maybe_json_object,
    replace_lone_surrogates_in,
)
from monitor.models import Message, Part, SpanEvent, SpanRecord, ToolDefinition

INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
EVENT_CONTENT = "gen_ai.event.content"
OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"

CONTENT_ATTRIBUTES = frozenset({
    INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS, TOOL_DEFINITIONS,
    TOOL_CALL_ARGUMENTS, TOOL_CALL_RESULT, EVENT_CONTENT,
})
"""Attributes whose truncation by a source means the conversation's content is incomplete."""

SYSTEM_ROLES = frozenset({"system", "developer"})
_LEGACY_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_LEGACY_CHOICE = "gen_ai.choice"
UNNAMED_LEGACY_EVENT = "gen_ai.unnamed.message"
"""A legacy ``gen_ai.*.message`` / ``gen_ai.choice`` record whose event name was lost on the way (the Azure
Monitor exporter drops it): which one it was is read from its body and its place among the span's records."""
_LEGACY_INSTRUCTION = "gen_ai.system.instruction"
_LEGACY_BODY_KEYS = frozenset({
    "content", "role", "tool_calls", "id", "tool_call_id", "message", "index", "finish_reason", "text",
})
_CORE_PART_KEYS = {"type", "content", "id", "name", "arguments", "response"}
_READ_KEYS = (INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS, TOOL_DEFINITIONS)

T = TypeVar("T")


# ---- content attributes ----------------------------------------------------------------------------------


class ReadCache:
    """Values and array items already read, by schema, rules and JSON text.

    Every chat span repeats the whole history in its input (and usually the same instructions and tool
    definitions), so one assembly meets each message many times; validating and converting each distinct one
    once makes assembly several times faster. Share one cache per assembly, not longer: it keeps every
    distinct value it has seen.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[str, str, str], tuple[tuple[SchemaIssue, ...], Any]] = {}
        self._values: dict[tuple[str, str, str, bool], AttributeRead[Any]] = {}
        self._arrays = ArrayScanner()

    def scan_array(self, text: str) -> tuple[list[tuple[str, Any]] | None, bool]:
        """``ArrayScanner.scan``, sharing what this assembly has scanned already."""
        return self._arrays.scan(text)

    def item(
        self, schema: SchemaName, generation: Generation, text: str, item: Any, index: int,
        convert: Callable[[dict[str, Any]], T],
    ) -> tuple[list[SchemaIssue], T | None]:
        """Issues of ``item`` (whose JSON is ``text``, placed at ``index``) and, if it has none, the item
        converted."""
        key = (schema, generation, text)
        found = self._items.get(key)
        if found is None:
            found = self._read_item(schema, generation, text, item, convert)
            self._items[key] = found
        issues = [SchemaIssue(f"$[{index}]{i.path[4:]}", i.keyword, i.message) for i in found[0]]
        converted: T | None = found[1]
        return issues, converted

    @staticmethod
    def _read_item(
        schema: SchemaName, generation: Generation, text: str, item: Any, convert: Callable[[dict[str, Any]], T],
    ) -> tuple[tuple[SchemaIssue, ...], T | None]:
        if may_hold_lone_surrogates(text):
            try:
                item = replace_lone_surrogates_in(item)
            except RecursionError as exc:
                return (SchemaIssue("$[0]", "maxDepth", str(exc)),), None
        issues = validate_item(schema, item, 0, generation)
        return tuple(issues), None if issues else convert(item)

    def value(
        self, schema: SchemaName, generation: Generation, text: str, truncated: bool,
        read: Callable[[], AttributeRead[T]],
    ) -> AttributeRead[T]:
        key = (schema, generation, text, truncated)
        found = self._values.get(key)
        if found is None:
            found = self._values[key] = read()
        result: AttributeRead[T] = found
        return result


@dataclass(frozen=True)
class AttributeRead(Generic[T]):
    """What one content attribute held: its items, whether it was cut short, why it was rejected if it was."""

    items: tuple[T, ...] = ()
    present: bool = False
    truncated: bool = False
    error: str | None = None


def read_input_messages(
    value: Any,
    *,
    truncated: bool = False,
    generation: Generation = "pre_move",
    cache: ReadCache | None = None,
) -> AttributeRead[Message]:
    return _read_array(value, "input-messages", message_from_json, truncated, generation, cache)


def read_output_messages(
    value: Any,
    *,
    truncated: bool = False,
    generation: Generation = "pre_move",
    cache: ReadCache | None = None,
) -> AttributeRead[Message]:
    return _read_array(value, "output-messages", message_from_json, truncated, generation, cache)


def read_system_instructions(
    value: Any,
    *,
    truncated: bool = False,
    generation: Generation = "pre_move",
    cache: ReadCache | None = None,
) -> AttributeRead[Part]:
    """Parts of ``gen_ai.system_instructions``; plain text that is not JSON is taken as one text part."""
    if isinstance(value, str) and not value.lstrip().startswith(("[", "{")):
        # Several producers write the instructions themselves rather than a JSON array of parts.
        return _text_part(value, truncated)
    # Plain text may start with a bracket too ("[Role] You are ..."): text that is neither JSON nor JSON cut
    # short is read as the text it is, never dropped as invalid JSON.
    return _read_array(value, "system-instructions", part_from_json, truncated, generation, cache,
                       plain_text=_text_part)


def _text_part(text: str, truncated: bool) -> AttributeRead[Part]:
    parts = (Part(type="text", content=text),) if text.strip() else ()
    return AttributeRead(parts, present=True, truncated=truncated)


def read_tool_definitions(
    value: Any,
    *,
    truncated: bool = False,
    generation: Generation = "pre_move",
    cache: ReadCache | None = None,
) -> AttributeRead[ToolDefinition]:
    return _read_array(value, "tool-definitions", tool_definition_from_json, truncated, generation, cache)


def _read_array(
    value: Any,
    schema: SchemaName,
    convert: Callable[[dict[str, Any]], T],
    truncated_hint: bool,
    generation: Generation,
    cache: ReadCache | None,
    plain_text: Callable[[str, bool], AttributeRead[T]] | None = None,
) -> AttributeRead[T]:
    """``plain_text`` reads a text that is not JSON and was not cut from JSON, where plain text is plausible."""
    if value is None or (isinstance(value, str) and not value.strip()):
        # An empty value is what a source gives for content it did not capture: absent, not cut short.
        return AttributeRead()
    reader = cache or ReadCache()
    if isinstance(value, str):
        return reader.value(
            schema, generation, value, truncated_hint,
            lambda: _read_array_text(value, schema, convert, truncated_hint, generation, reader, plain_text),
        )
    document = list(value) if isinstance(value, tuple) else value
    if not isinstance(document, list):
        return AttributeRead(present=True, error=_describe(validate_document(schema, document, generation)))
    items = [(json.dumps(item, sort_keys=True, default=repr), item) for item in document]
    return _read_items(items, schema, convert, truncated_hint, False, generation, reader)


def _read_array_text(
    text: str,
    schema: SchemaName,
    convert: Callable[[dict[str, Any]], T],
    truncated_hint: bool,
    generation: Generation,
    reader: ReadCache,
    plain_text: Callable[[str, bool], AttributeRead[T]] | None,
) -> AttributeRead[T]:
    items, complete = reader.scan_array(text)
    if items is not None and complete:
        return _read_items(items, schema, convert, truncated_hint, False, generation, reader)
    decoded = decode_json_text(text)
    if decoded.error is None:
        if isinstance(decoded.value, list):
            pairs = [(json.dumps(item, sort_keys=True), item) for item in decoded.value]
            return _read_items(pairs, schema, convert, truncated_hint, False, generation, reader)
        # Valid JSON that is not an array: the schema check says what it is instead.
        issues = validate_document(schema, decoded.value, generation)
        return AttributeRead(present=True, error=_describe(issues))
    if plain_text is not None and not decoded.truncated:
        return plain_text(text, truncated_hint)
    if decoded.truncated or truncated_hint:
        return _read_items(items or [], schema, convert, truncated_hint, True, generation, reader)
    return AttributeRead(present=True, error=decoded.error)


def _read_items(
    items: list[tuple[str, Any]],
    schema: SchemaName,
    convert: Callable[[dict[str, Any]], T],
    truncated_hint: bool,
    truncated: bool,
    generation: Generation,
    reader: ReadCache,
) -> AttributeRead[T]:
    converted_items: list[T] = []
    issues: list[SchemaIssue] = []
    for index, (text, item) in enumerate(items):
        item_issues, converted = reader.item(schema, generation, text, item, index, convert)
        issues.extend(item_issues)
        if converted is not None:
            converted_items.append(converted)
    if issues:
        return AttributeRead(present=True, truncated=truncated, error=_describe(issues))
    return AttributeRead(tuple(converted_items), present=True, truncated=truncated or truncated_hint)


def _describe(issues: Sequence[SchemaIssue]) -> str:
    more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
    return f"{issues[0]}{more}"


def message_from_json(raw: Mapping[str, Any]) -> Message:
    """A schema-valid ``ChatMessage`` / ``OutputMessage`` object as a ``Message``."""
    name = raw.get("name")
    finish_reason = raw.get("finish_reason")
    return Message(
        role=str(raw["role"]),
        parts=tuple(part_from_json(part) for part in raw.get("parts") or () if not _is_empty_text(part)),
        name=name if isinstance(name, str) else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
    )


def _is_empty_text(raw: Mapping[str, Any]) -> bool:
    """A text part without text: streamed replies begin with ``{"type": "text", "content": ""}`` (OpenLLMetry's
    accumulator, servers whose first chunk says ``"content": ""``) before their tool calls, and the next
    request repeats the message without it. Kept, it would make one message two (and every turn after it
    new): it is dropped before messages are keyed, merged or rendered."""
    return raw.get("type") == "text" and raw.get("content") in ("", None)


def part_from_json(raw: Mapping[str, Any]) -> Part:
    """A schema-valid part object as a ``Part``; fields beyond the common ones are kept in ``data``."""
    part_type = str(raw.get("type"))
    content = raw.get("content")
    identifier = raw.get("id")
    name = raw.get("name")
    response = raw.get("response")
    data = {key: value for key, value in raw.items() if key not in _CORE_PART_KEYS}
    if part_type == "tool_call_response" and "response" not in raw:
        # The invoke_agent documentation shows "result" where the schema says "response".
        response = data.pop("result", None)
    text_like = part_type in ("text", "reasoning")
    if not text_like and content is not None:
        data["content"] = content
    return Part(
        type=part_type,
        content=content if text_like and isinstance(content, str) else None,
        id=identifier if isinstance(identifier, str) else None,
        name=name if isinstance(name, str) else None,
        arguments=maybe_json_object(raw.get("arguments")),
        response=response,
        data=data,
    )


def tool_definition_from_json(raw: Mapping[str, Any]) -> ToolDefinition:
    description = raw.get("description")
    parameters = raw.get("parameters")
    return ToolDefinition(
        name=str(raw["name"]),
        type=str(raw.get("type") or "function"),
        description=description if isinstance(description, str) else None,
        parameters=parameters if isinstance(parameters, dict) else None,
    )


# ---- one span --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimedMessage:
    """A message and when it was seen: span start for inputs, span end for outputs, else the event time."""

    message: Message
    time: datetime


@dataclass(frozen=True)
class SpanContent:
    """The GenAI content of one span, in whichever format it came."""

    input: tuple[TimedMessage, ...] = ()
    output: tuple[TimedMessage, ...] = ()
    system_instructions: tuple[str, ...] = ()
    tool_definitions: tuple[ToolDefinition, ...] = ()
    truncated: bool = False
    input_truncated: bool = False
    """The input messages are a salvaged prefix: the span's real input went on past them."""
    rejected: dict[str, int] = field(default_factory=dict)
    """Attributes or events ignored as invalid, by reason (``invalid_input_messages`` ...)."""
    problems: tuple[str, ...] = ()
    """One line per rejection, naming the attribute and the first schema issue, for the log."""

    @property
    def messages(self) -> tuple[TimedMessage, ...]:
        return self.input + self.output


def read_span_content(
    span: SpanRecord, *, generation: Generation = "pre_move", cache: ReadCache | None = None
) -> SpanContent:
    """Messages, instructions and tool definitions of ``span`` (attributes first, legacy events otherwise)."""
    attributes = _content_attributes(span)
    has_attribute_messages = INPUT_MESSAGES in attributes or OUTPUT_MESSAGES in attributes
    if not span.events and not any(key in attributes for key in _READ_KEYS):
        # Tool and agent spans without content are most spans: nothing to read.
        return SpanContent(truncated=bool(CONTENT_ATTRIBUTES.intersection(span.truncated_keys)))
    builder = _ContentBuilder(span, generation, cache or ReadCache())
    builder.read_attributes(attributes)
    if not has_attribute_messages:
        builder.read_legacy_events(span.events)
    return builder.build()


def _content_attributes(span: SpanRecord) -> Mapping[str, Any]:
    """Span attributes, completed by an ``inference.operation.details`` event that carries the same keys."""
    if not span.events:
        return span.attributes
    merged = dict(span.attributes)
    for event in span.events:
        if event.name == OPERATION_DETAILS_EVENT:
            for key in (INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS, TOOL_DEFINITIONS):
                if key in event.attributes and key not in merged:
                    merged[key] = event.attributes[key]
    return merged


class _ContentBuilder:
    def __init__(self, span: SpanRecord, generation: Generation, cache: ReadCache) -> None:
        self.span = span
        self.generation = generation
        self.cache = cache
        self.input: list[TimedMessage] = []
        self.output: list[TimedMessage] = []
        self.instructions: list[str] = []
        self.tools: tuple[ToolDefinition, ...] = ()
        self.truncated = bool(CONTENT_ATTRIBUTES.intersection(span.truncated_keys))
        self.input_truncated = False
        self.from_events = False
        self.rejected: dict[str, int] = {}
        self.problems: list[str] = []

    def build(self) -> SpanContent:
        return SpanContent(
            # Only legacy records come without call ids (OpenLLMetry's gen_ai.tool.message); attributes carry them.
            input=tuple(_answer_ids(self.input) if self.from_events else self.input),
            output=tuple(self.output),
            system_instructions=tuple(self.instructions),
            tool_definitions=self.tools,
            truncated=self.truncated,
            input_truncated=self.input_truncated,
            rejected=self.rejected,
            problems=tuple(self.problems),
        )

    def reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.problems.append(f"span {self.span.span_id} of trace {self.span.trace_id}: {detail}")

    def _accept(self, key: str, read: AttributeRead[T]) -> tuple[T, ...]:
        self.truncated = self.truncated or read.truncated
        if read.error is not None:
            self.reject(f"invalid_{key.removeprefix('gen_ai.').replace('.', '_')}", f"{key}: {read.error}")
            return ()
        return read.items

    def read_attributes(self, attributes: Mapping[str, Any]) -> None:
        cut = set(self.span.truncated_keys)
        start = self.span.start_time
        end = self.span.end_time or start
        if INPUT_MESSAGES in attributes:
            read = read_input_messages(
                attributes[INPUT_MESSAGES], truncated=INPUT_MESSAGES in cut, generation=self.generation,
                cache=self.cache)
            self.input = [TimedMessage(m, start) for m in self._accept(INPUT_MESSAGES, read)]
            self.input_truncated = read.truncated
        if OUTPUT_MESSAGES in attributes:
            read = read_output_messages(
                attributes[OUTPUT_MESSAGES], truncated=OUTPUT_MESSAGES in cut, generation=self.generation,
                cache=self.cache)
            self.output = [TimedMessage(m, end) for m in self._accept(OUTPUT_MESSAGES, read)]
        if SYSTEM_INSTRUCTIONS in attributes:
            read_parts = read_system_instructions(
                attributes[SYSTEM_INSTRUCTIONS],
                truncated=SYSTEM_INSTRUCTIONS in cut,
                generation=self.generation,
                cache=self.cache,
            )
            text = Message(role="system", parts=self._accept(SYSTEM_INSTRUCTIONS, read_parts)).text
            if text:
                self.instructions.append(text)
        if TOOL_DEFINITIONS in attributes:
            read_tools = read_tool_definitions(
                attributes[TOOL_DEFINITIONS], truncated=TOOL_DEFINITIONS in cut, generation=self.generation,
                cache=self.cache)
            self.tools = self._accept(TOOL_DEFINITIONS, read_tools)

    def read_legacy_events(self, events: Sequence[SpanEvent]) -> None:
        self.from_events = True
        ordered = [event for _, event in sorted(enumerate(events), key=lambda item: (item[1].time, item[0]))]
        if any(event.name == UNNAMED_LEGACY_EVENT for event in ordered):
            ordered = name_legacy_events(ordered)
        for event in ordered:
            if event.name not in _LEGACY_ROLES and event.name not in (_LEGACY_CHOICE, _LEGACY_INSTRUCTION):
                continue
            body = self._legacy_body(event)
            if body is None:
                continue
            if event.name == _LEGACY_INSTRUCTION or event.name == "gen_ai.system.message":
                text = Message(role="system", parts=content_parts(body.get("content", body.get("text")))).text
                if text:
                    self.instructions.append(text)
            elif event.name == _LEGACY_CHOICE:
                choice = legacy_choice(body)
                if choice is not None:
                    self.output.append(TimedMessage(choice, event.time))
            else:
                message = legacy_message(_LEGACY_ROLES[event.name], body)
                if message is not None:
                    self.input.append(TimedMessage(message, event.time))

    def _legacy_body(self, event: SpanEvent) -> dict[str, Any] | None:
        attributes = event.attributes
        raw = attributes.get(EVENT_CONTENT, attributes.get("body"))
        if raw is None:
            body = {key: value for key, value in attributes.items() if key in _LEGACY_BODY_KEYS}
            # Span attributes cannot nest, so producers write the structured body fields as JSON text.
            for key in ("tool_calls", "message"):
                if isinstance(body.get(key), str):
                    decoded = decode_json_text(body[key])
                    body[key] = decoded.value if decoded.error is None else None
                    self.truncated = self.truncated or decoded.truncated
            return body
        if isinstance(raw, dict):
            return raw
        if not isinstance(raw, str):
            self.reject("invalid_legacy_event", f"event {event.name}: content is a {type(raw).__name__}")
            return None
        if not raw.lstrip().startswith("{"):
            return {"content": raw}
        decoded = decode_json_text(raw)
        if decoded.truncated:
            self.truncated = True
            return None
        if decoded.error is not None:
            # Not JSON, and not JSON cut short: message text that happens to start with a brace.
            return {"content": raw}
        if not isinstance(decoded.value, dict):
            self.reject("invalid_legacy_event", f"event {event.name}: not an object")
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
            _LEGACY_NAMED_ROLES.get(event.name), 0)
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
            event = event.model_copy(update={"name": _LEGACY_CHOICE if role == "choice" else f"gen_ai.{role}.message"})
        named.append(event)
    return named


_LEGACY_NAMED_ROLES: dict[str, str] = {**{name: role for name, role in _LEGACY_ROLES.items()},
                                       _LEGACY_CHOICE: "choice"}


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


# ---- legacy bodies ---------------------------------------------------------------------------------------


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


def content_parts(content: Any) -> tuple[Part, ...]:
    """Legacy ``content``: a string, an Assistants ``{"text": {"value": ...}}``, or a list of parts."""
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (Part(type="text", content=content),)
    if isinstance(content, list):
        return tuple(part for item in content for part in content_parts(item))
    if isinstance(content, dict):
        text = content.get("text", content.get("content"))
        if isinstance(text, dict):
            text = text.get("value")
        if isinstance(text, str) and content.get("type", "text") == "text":
            return (Part(type="text", content=text),) if text else ()
        kind = content.get("type")
        data = {key: value for key, value in content.items() if key != "type"}
        return (Part(type=kind if isinstance(kind, str) else "generic", data=data),)
    return (Part(type="text", content=str(content)),)


def tool_call_parts(tool_calls: Any) -> tuple[Part, ...]:
    """OpenAI-style ``tool_calls`` (``[{id, type, function: {name, arguments}}]``) as ``tool_call`` parts."""
    if not isinstance(tool_calls, list):
        return ()
    parts: list[Part] = []
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        raw_function = call.get("function")
        function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        name = function.get("name") or call.get("name") or call.get("type")
        identifier = call.get("id")
        parts.append(Part(
            type="tool_call",
            id=identifier if isinstance(identifier, str) else None,
            name=name if isinstance(name, str) else None,
            arguments=maybe_json_object(function.get("arguments", call.get("arguments"))),
        ))
    return tuple(parts)
