"""The GenAI schema conformance cases: valid documents parse, invalid ones are rejected with a counted reason.

``cases/`` holds the later snapshots (a catch-all part must say ``type: "generic"``) and is checked with
the ``current`` rules; ``cases-earlier-variants/`` holds the snapshots taken against the pre-move schemas,
checked with the ``pre_move`` rules the daemon reads spans with.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.assemble import assemble
from monitor.formats.genai import (
    AttributeRead,
    read_input_messages,
    read_output_messages,
    read_system_instructions,
    read_tool_definitions,
)
from monitor.formats.genai_schema import Generation, SchemaName, validate_document
from monitor.models import SpanRecord
from tests.conftest import CORPORA

OTEL = CORPORA / "otel-genai"
CASE_FILES: list[tuple[Path, Generation]] = [
    *((path, "current") for path in sorted((OTEL / "cases").glob("*.yaml"))),
    *((path, "pre_move") for path in sorted((OTEL / "cases-earlier-variants").glob("*.yaml"))),
]
ATTRIBUTES: dict[str, str] = {
    "input-messages": "gen_ai.input.messages",
    "output-messages": "gen_ai.output.messages",
    "system-instructions": "gen_ai.system_instructions",
    "tool-definitions": "gen_ai.tool.definitions",
}


def _param(path: Path, generation: Generation) -> Any:
    label = "later" if generation == "current" else "earlier"
    return pytest.param(path, generation, id=f"{label}-{path.stem}")


def _schema_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text(encoding="utf-8"))["schema"])


CASES = [_param(path, generation) for path, generation in CASE_FILES]
# Memory records, retrieval documents and tool-call arguments/results are not read from spans: only validated.
MESSAGE_CASES = [
    _param(path, generation) for path, generation in CASE_FILES
    if _schema_of(path).removeprefix("gen-ai-").removesuffix(".json") in ATTRIBUTES
]


def _load(path: Path) -> tuple[SchemaName, Any, list[tuple[str, str, str]]]:
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema = case["schema"].removeprefix("gen-ai-").removesuffix(".json")
    expected = sorted((e["path"], e["keyword"], e["message"]) for e in case["errors"])
    return schema, case["document"], expected


def _read(schema: str, value: Any, generation: Generation) -> AttributeRead[Any]:
    readers = {
        "input-messages": read_input_messages,
        "output-messages": read_output_messages,
        "system-instructions": read_system_instructions,
        "tool-definitions": read_tool_definitions,
    }
    result: AttributeRead[Any] = readers[schema](value, generation=generation)
    return result


def test_every_case_file_is_collected() -> None:
    assert len(CASES) == 26 and len(MESSAGE_CASES) == 18


@pytest.mark.parametrize(("path", "generation"), CASES)
def test_the_validator_reports_exactly_the_snapshot_errors(path: Path, generation: Generation) -> None:
    schema, document, expected = _load(path)
    issues = validate_document(schema, document, generation)
    assert sorted((i.path, i.keyword, i.message) for i in issues) == expected


@pytest.mark.parametrize(("path", "generation"), MESSAGE_CASES)
def test_valid_documents_parse_and_invalid_ones_are_rejected(path: Path, generation: Generation) -> None:
    schema, document, expected = _load(path)
    for value in (document, json.dumps(document)):  # structured OTLP value, and the usual JSON string
        result = _read(schema, value, generation)
        if expected:
            assert result.error is not None and result.items == ()
            assert expected[0][0] in result.error
        else:
            assert result.error is None
            assert len(result.items) == len(document)


@pytest.mark.parametrize(("path", "generation"), MESSAGE_CASES)
def test_assembly_counts_an_invalid_attribute_and_never_raises(path: Path, generation: Generation) -> None:
    schema, document, _ = _load(path)
    runtime_issues = validate_document(schema, document, "pre_move")
    span = SpanRecord(
        trace_id="a" * 32, span_id="b" * 16, name="chat gpt-4o", start_time=datetime(2026, 1, 1, tzinfo=UTC),
        attributes={"gen_ai.operation.name": "chat", ATTRIBUTES[schema]: json.dumps(document)},
    )

    assembly = assemble([span])

    [conversation] = assembly.conversations
    reason = "invalid_" + ATTRIBUTES[schema].removeprefix("gen_ai.").replace(".", "_")
    if runtime_issues:
        assert assembly.rejected == {reason: 1}
        assert conversation.messages == () and conversation.system_instructions is None
    else:
        assert assembly.rejected == {}


def test_the_daemon_accepts_what_either_generation_accepts() -> None:
    # Real producers predate the newest schemas: an unknown provider block is kept as a part, not a rejection.
    for path, _ in CASE_FILES:
        schema, document, expected = _load(path)
        if not expected:
            assert validate_document(schema, document, "pre_move") == [], path


def test_parts_keep_their_meaning() -> None:
    document = [
        {"role": "assistant", "parts": [
            {"type": "reasoning", "content": "thinking"},
            {"type": "text", "content": "Calling."},
            {"type": "tool_call", "id": "call_1", "name": "get_weather",
             "arguments": '{"location": "Paris"}'},
            {"type": "uri", "modality": "image", "uri": "https://example.com/a.png"},
        ], "finish_reason": "tool_call"},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "result": "rainy"}]},
    ]
    result = read_input_messages(json.dumps(document))
    assistant, tool = result.items
    reasoning, text, call, uri = assistant.parts
    assert (reasoning.type, reasoning.content) == ("reasoning", "thinking")
    assert assistant.text == "Calling." and assistant.finish_reason == "tool_call"
    assert (call.id, call.name, call.arguments) == ("call_1", "get_weather", {"location": "Paris"})
    assert (uri.type, uri.data) == ("uri", {"modality": "image", "uri": "https://example.com/a.png"})
    assert (tool.parts[0].id, tool.parts[0].response) == ("call_1", "rainy")


def test_cut_json_is_reported_as_truncated_and_complete_messages_are_salvaged() -> None:
    messages = [{"role": "user", "parts": [{"type": "text", "content": f"message {i} " + "x" * 50}]}
                for i in range(5)]
    text = json.dumps(messages)
    for cut in range(1, len(text)):
        result = read_input_messages(text[:cut])
        assert result.error is None and result.truncated, cut
        texts = [m["parts"][0]["content"] for m in messages]
        assert [m.text for m in result.items] == texts[:len(result.items)]
    assert len(read_input_messages(text[:len(text) - 3]).items) == 4
    broken = read_input_messages('[{"role": "user", "parts": [}]')
    assert broken.error is not None and broken.error.startswith("not valid JSON") and not broken.truncated


def test_plain_text_system_instructions_are_one_text_part() -> None:
    result = read_system_instructions("You are a helpful bot")
    assert result.error is None and [p.content for p in result.items] == ["You are a helpful bot"]
