"""The current GenAI conventions: content on span attributes, or on util-genai's
``gen_ai.client.inference.operation.details`` event or log record (``event_only``), whose keys complete the span's.

A span whose attributes hold no messages is read from its legacy events or log records (``legacy_events``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import monitor.formats.conventions.legacy_events as legacy_events
from monitor.formats.genai import (
    CONTENT_ATTRIBUTES,
    INPUT_MESSAGES,
    OPERATION_DETAILS_EVENT,
    OUTPUT_MESSAGES,
    READ_KEYS,
    SYSTEM_INSTRUCTIONS,
    TOOL_DEFINITIONS,
    AttributeRead,
    ReadCache,
    SpanContent,
    TimedMessage,
    read_input_messages,
    read_output_messages,
    read_system_instructions,
    read_tool_definitions,
)
from monitor.formats.genai_schema import Generation
from monitor.models import Message, SpanRecord, ToolDefinition

NAME = "semconv"

T = TypeVar("T")


def read_span_content(
    span: SpanRecord, *, generation: Generation = "pre_move", cache: ReadCache | None = None
) -> SpanContent:
    """Messages, instructions and tool definitions of ``span`` (attributes first, legacy events otherwise)."""
    attributes = _content_attributes(span)
    has_attribute_messages = INPUT_MESSAGES in attributes or OUTPUT_MESSAGES in attributes
    if not span.events and not any(key in attributes for key in READ_KEYS):
        # Tool and agent spans without content are most spans: nothing to read.
        return SpanContent(truncated=bool(CONTENT_ATTRIBUTES.intersection(span.truncated_keys)))
    builder = _ContentBuilder(span, generation, cache or ReadCache())
    builder.read_attributes(attributes)
    if not has_attribute_messages:
        builder.add_legacy(legacy_events.read(span.events))
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
        self.rejected: dict[str, int] = {}
        self.problems: list[str] = []

    def build(self) -> SpanContent:
        return SpanContent(
            input=tuple(self.input),
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

    def add_legacy(self, read: legacy_events.LegacyContent) -> None:
        """What the span's legacy events or log records hold (read only when its attributes hold no messages)."""
        self.instructions.extend(read.instructions)
        self.input.extend(read.input)
        self.output.extend(read.output)
        self.truncated = self.truncated or read.truncated
        for reason, detail in read.rejections:
            self.reject(reason, detail)
