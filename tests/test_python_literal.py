"""The bounded reader of the Python ``repr`` values the Azure Monitor exporter writes (#20), and what the App
Insights source makes of the exporter's log-record rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.formats.conventions import read_span_content
from monitor.formats.conventions.legacy_events import UNNAMED_LEGACY_EVENT
from monitor.formats.python_literal import (
    MAX_DEPTH,
    LiteralError,
    looks_like_python_literal,
    parse_python_literal,
)
from monitor.models import SpanEvent, SpanRecord
from monitor.sources.app_insights import exporter_log_record, literal_properties

EXPORTED_INPUT = ("({'role': 'system', 'parts': ({'content': 'You are table-booker.', 'type': 'text'},)}, "
                  "{'role': 'user', 'parts': ({'content': \"It's for 4, \\\\o/ \\u00e9\", 'type': 'text'},)})")


def test_the_exporters_tuples_read_as_json_would_have_them() -> None:
    assert parse_python_literal("('tool_calls',)") == ["tool_calls"]
    assert parse_python_literal(EXPORTED_INPUT) == [
        {"role": "system", "parts": [{"content": "You are table-booker.", "type": "text"}]},
        {"role": "user", "parts": [{"content": "It's for 4, \\o/ é", "type": "text"}]},
    ]
    assert parse_python_literal("{'n': -2.5e3, 'ok': True, 'none': None, 1: []}") == {
        "n": -2500.0, "ok": True, "none": None, 1: []}


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(),
                    st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


def _as_json(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


@given(values)
def test_whatever_repr_writes_reads_back(value: Any) -> None:
    assert parse_python_literal(repr(value)) == _as_json(value)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "().__class__", "[1, 2", "('a' 'b')", "{[1]: 2}", "(1,) + (2,)",
    "lambda: 1", "'unterminated",
])
def test_anything_but_a_literal_is_refused(text: str) -> None:
    with pytest.raises(LiteralError):
        parse_python_literal(text)


def test_input_length_and_nesting_are_bounded() -> None:
    deep = "(" * (MAX_DEPTH + 1) + ")" * (MAX_DEPTH + 1)
    with pytest.raises(LiteralError, match="nested deeper"):
        parse_python_literal(deep)
    with pytest.raises(LiteralError, match="characters"):
        parse_python_literal("'" + "x" * 100 + "'", max_chars=50)
    # A value cut at a cap is told apart, so the source can mark the attribute truncated.
    with pytest.raises(LiteralError) as cut:
        parse_python_literal(EXPORTED_INPUT[:60])
    assert cut.value.truncated


def test_json_is_not_taken_for_a_python_literal() -> None:
    assert looks_like_python_literal("('stop',)") and looks_like_python_literal("[{'role': 'user'}]")
    assert not looks_like_python_literal('[{"role": "user"}]') and not looks_like_python_literal("plain text")


def test_repr_properties_are_read_and_a_cut_one_is_named() -> None:
    properties = {"gen_ai.input.messages": EXPORTED_INPUT, "gen_ai.response.finish_reasons": "('stop',)",
                  "gen_ai.output.messages": EXPORTED_INPUT[:80], "note": "('kept as text',)",
                  "gen_ai.agent.description": "(see docs)"}
    read, cut = literal_properties(properties, json.dumps(properties))
    assert read["gen_ai.response.finish_reasons"] == ["stop"]
    assert read["gen_ai.input.messages"][1]["role"] == "user"
    assert read["note"] == "('kept as text',)" and read["gen_ai.output.messages"] == EXPORTED_INPUT[:80]
    assert read["gen_ai.agent.description"] == "(see docs)"  # text that is no literal stays text
    assert cut == ("gen_ai.output.messages",)


def test_log_record_rows_are_named_as_the_exporter_left_them() -> None:
    # event_only: no body ("n/a"), the messages in attributes
    assert exporter_log_record("n/a", {"gen_ai.input.messages": []})[0] == (  # type: ignore[index]
        "gen_ai.client.inference.operation.details")
    # Semantic Kernel keeps its event name as an attribute; the body is the message
    name, attributes = exporter_log_record('{"role": "user"}', {"event.name": "gen_ai.user.message"}) or ("", {})
    assert name == "gen_ai.user.message" and attributes["body"] == '{"role": "user"}'
    # legacy records lost their name: the body tells it later
    assert exporter_log_record('{"content": "hi"}', {"gen_ai.system": "openai"})[0] == UNNAMED_LEGACY_EVENT  # type: ignore[index]
    # span events keep their name; the application's own logs are not content
    assert exporter_log_record("gen_ai.choice", {})[0] == "gen_ai.choice"  # type: ignore[index]
    assert exporter_log_record("Function completed. Duration: 0.1s", {"code.line.number": "3"}) is None


def _unnamed(bodies: list[dict[str, Any]]) -> SpanRecord:
    start = datetime(2026, 12, 2, tzinfo=UTC)
    events = tuple(SpanEvent(name=UNNAMED_LEGACY_EVENT, time=start + timedelta(microseconds=i),
                             attributes={"gen_ai.system": "openai", "body": json.dumps(body)})
                   for i, body in enumerate(bodies))
    return SpanRecord(trace_id="1" * 32, span_id="2" * 16, name="chat", kind="client", start_time=start,
                      end_time=start + timedelta(seconds=1), attributes={"gen_ai.operation.name": "chat"},
                      events=events)


def test_unnamed_legacy_records_get_their_roles_from_body_and_place() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}
    content = read_span_content(_unnamed([
        {"content": "You are a bot."},  # first, before the user: the system prompt
        {"content": "Hi"},
        {"content": "Hello! How can I help?"},  # between two user turns: the assistant
        {"content": "Find a table"},
        {"content": None, "tool_calls": [call]},
        {"content": "{\"free\": true}"},  # after a call, no id (OpenLLMetry): its result
        {"content": "Found one."},
        {"content": "Thanks"},  # the last input: the user's turn
        {"index": 0, "finish_reason": "stop", "message": {"content": "Bye"}},
    ]))
    assert content.system_instructions == ("You are a bot.",)
    assert [(m.message.role, m.message.text) for m in content.input] == [
        ("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Find a table"),
        ("assistant", ""), ("tool", ""), ("assistant", "Found one."), ("user", "Thanks")]
    assert content.input[4].message.parts[0].id == "c1"
    assert [m.message.text for m in content.output] == ["Bye"]


def test_without_a_system_prompt_the_first_message_is_the_users() -> None:
    content = read_span_content(_unnamed([{"content": "Hi"}, {"content": "Hello"}, {"content": "Book it"}]))
    assert content.system_instructions == ()
    assert [m.message.role for m in content.input] == ["user", "assistant", "user"]
