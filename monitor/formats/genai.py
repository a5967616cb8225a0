"""The GenAI message model's readers, shared by every convention: messages, system instructions and tool
definitions as the current conventions write them (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``; JSON strings or structured values), the legacy
conventions' content shapes (``content_parts``, ``tool_call_parts``), the ``ReadCache`` and ``SpanContent``.

Which convention a span follows, and the reader of each, are in ``monitor.formats.conventions``: ``semconv``
(attributes, the ``gen_ai.client.inference.operation.details`` event), ``legacy_events`` (one event or log
record per message), ``azure_sdk`` (their ``gen_ai.event.content`` variant), and the others.

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
from monitor.models import Message, Part, ToolDefinition

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
_CORE_PART_KEYS = {"type", "content", "id", "name", "arguments", "response"}
READ_KEYS = (INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS, TOOL_DEFINITIONS)

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
        self._keys: dict[int, tuple[Message, str]] = {}

    def message_key(self, message: Message, make: Callable[[Message], str]) -> str:
        """``make(message)``, worked out once per message object: this cache hands out one object per distinct
        item, so a history repeated in every input is keyed once (the object is held, so its id stays its own)."""
        found = self._keys.get(id(message))
        if found is None or found[0] is not message:
            found = (message, make(message))
            self._keys[id(message)] = found
        return found[1]

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


# ---- shapes shared by the legacy conventions ----------------------------------------------------------------


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
