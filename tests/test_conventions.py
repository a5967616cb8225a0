"""Conventions read by hand-written spans (issue #20): what the captured producers do not show on their own."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.assemble import assemble
from monitor.assemble.assembler import fold_event_rows
from monitor.formats.conventions import (
    UNSUPPORTED_REASON,
    content_switch,
    may_hold_input,
    read_span_content,
    recognize,
)
from monitor.formats.otlp import parse_otlp_document, parse_otlp_line
from monitor.models import SpanEvent, SpanRecord
from monitor.store.memory import InMemoryStore

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
TRACE = "0af7651916cd43dd8448eb211c80319c"


def _chat(span_id: str, start: int, inputs: list[dict[str, object]], outputs: list[dict[str, object]],
          trace: str = TRACE) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=span_id, name="chat m", start_time=T0 + timedelta(seconds=start),
                      end_time=T0 + timedelta(seconds=start + 1), attributes={
                          "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(inputs),
                          "gen_ai.output.messages": json.dumps(outputs)})


USER = {"role": "user", "parts": [{"type": "text", "content": "book a table"}]}
CALL = {"type": "tool_call", "id": "c1", "name": "find", "arguments": {"d": 1}}
RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "free"}]}
REPLY = {"role": "assistant", "parts": [{"type": "text", "content": "done"}]}


def test_an_empty_text_part_before_a_tool_call_does_not_duplicate_turns() -> None:
    streamed = {"role": "assistant", "parts": [{"type": "text", "content": ""}, CALL]}
    repeated = {"role": "assistant", "parts": [CALL]}
    spans = [_chat("00f067aa0ba902b7", 0, [USER], [streamed]),
             _chat("00f067aa0ba902b8", 2, [USER, repeated, RESULT], [REPLY])]
    [conversation] = assemble(spans).conversations
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    assert all(p.type != "text" or p.content for m in conversation.messages for p in m.parts)


def test_content_under_an_unread_convention_is_counted_and_logged_with_its_scope(
        caplog: pytest.LogCaptureFixture) -> None:
    span = SpanRecord(trace_id=TRACE, span_id="00f067aa0ba902b7", name="ai.generateText", start_time=T0,
                      attributes={"ai.prompt.messages": "[]"}, scope="ai")
    assert recognize(span) == "unsupported"
    with caplog.at_level(logging.WARNING):
        assembly = assemble([span])
    assert assembly.rejected == {UNSUPPORTED_REASON: 1}
    assert "(ai): content under ai.prompt.messages" in caplog.text


def test_semantic_kernel_agent_output_without_parts_is_read() -> None:
    span = SpanRecord(trace_id=TRACE, span_id="00f067aa0ba902b7", name="invoke_agent booker", start_time=T0,
                      end_time=T0 + timedelta(seconds=1), scope="semantic_kernel.agents", attributes={
                          "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker",
                          "gen_ai.input.messages": json.dumps([{"role": "user", "content": "book a table"}]),
                          "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "done",
                                                                 "name": "booker"}]),
                          "gen_ai.tool.definitions": json.dumps([{"type": "function", "function": {
                              "name": "find", "description": "Find", "parameters": {"type": "object"}}}])})
    assert recognize(span) == "semantic_kernel"
    assembly = assemble([span])
    [conversation] = assembly.conversations
    assert assembly.rejected == {}
    assert [(m.role, m.text) for m in conversation.messages] == [("user", "book a table"), ("assistant", "done")]
    assert [t.name for t in conversation.tool_definitions] == ["find"]


def test_a_genai_log_record_without_span_is_counted_and_application_logs_are_not_content() -> None:
    record = {"eventName": "gen_ai.choice", "observedTimeUnixNano": "1796176098770504686",
              "body": {"kvlistValue": {"values": [{"key": "index", "value": {"intValue": "0"}}]}}}
    app_log = {"observedTimeUnixNano": "1796176098770504686", "body": {"stringValue": "GET /"},
               "traceId": TRACE, "spanId": "00f067aa0ba902b7"}
    spans, rejected = parse_otlp_document({"resourceLogs": [{"scopeLogs": [{"logRecords": [record, app_log]}]}]})
    assert spans == [] and rejected == {"log_record_without_span": 1}


def test_the_content_hint_names_the_switch_of_the_producer_seen() -> None:
    assert "span_only" in content_switch(["opentelemetry.util.genai.handler"])[0]
    assert "enable_sensitive_data" in content_switch(["agent_framework"])[0]
    assert "TRACELOOP_TRACE_CONTENT" in content_switch(["opentelemetry.instrumentation.openai.v1"])[0]
    assert "AZURE_TRACING_GEN_AI_CONTENT_RECORDING_ENABLED" in content_switch(["azure.ai.inference"])[0]


def test_a_conversation_paused_on_a_tool_call_waits_the_grace_for_its_result() -> None:
    store = InMemoryStore(tool_result_grace_seconds=600)
    paused = _chat("00f067aa0ba902b7", 0, [USER], [{"role": "assistant", "parts": [CALL]}])
    store.add_spans("s", [paused], "1", "ignore")
    idle = T0 + timedelta(seconds=300)
    assert store.ready_conversations(idle, T0 - timedelta(days=1)) == []
    assert [p.key for p in store.ready_conversations(idle + timedelta(seconds=600), T0 - timedelta(days=1))] == [TRACE]
    # The result arrives (the next model call, in a trace of its own): one conversation, ready after the idle time.
    later = _chat("00f067aa0ba902b9", 5, [USER, {"role": "assistant", "parts": [CALL]}, RESULT], [REPLY],
                  trace="1af7651916cd43dd8448eb211c80319c")
    store.add_spans("s", [later], "2", "ignore")
    ready = store.ready_conversations(T0 + timedelta(seconds=310), T0 - timedelta(days=1))
    assert [p.key for p in ready] == [TRACE]
    [conversation] = assemble(store.spans_of(TRACE), key=TRACE).conversations
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]


def test_each_convention_is_recognised_in_one_place() -> None:
    start = datetime(2026, 12, 2, tzinfo=UTC)

    def span(attributes: dict[str, object], events: tuple[SpanEvent, ...] = ()) -> SpanRecord:
        return SpanRecord(trace_id="a" * 32, span_id="b" * 16, name="chat", kind="client", start_time=start,
                          attributes=attributes, events=events)

    chat = {"gen_ai.operation.name": "chat"}
    user = SpanEvent(name="gen_ai.user.message", time=start, attributes={"content": "hi"})
    azure = SpanEvent(name="gen_ai.user.message", time=start,
                      attributes={"gen_ai.event.content": '{"content": {"text": {"value": "hi"}}, "role": "user"}'})
    parts = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    assert recognize(span({**chat, "gen_ai.input.messages": parts})) == "semconv"
    assert recognize(span({**chat, "gen_ai.input.messages": parts}, (user,))) == "semconv"  # attributes first
    assert recognize(span(chat, (user,))) == "legacy_events"
    assert recognize(span(chat, (azure,))) == "azure_sdk"
    assert recognize(span({"llm.input_messages.0.message.role": "user"})) == "openinference"
    assert recognize(span({"gen_ai.prompt.0.role": "user"})) == "openllmetry_legacy"
    assert recognize(span({**chat, "gen_ai.output.messages": '[{"role": "assistant", "content": "hi"}]'})) == (
        "semantic_kernel")
    assert recognize(span({"ai.prompt": "hi"})) == "unsupported"


def _producer_spans() -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for path in sorted((Path(__file__).parent / "data" / "producers").glob("*.otlp.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            spans.extend(parse_otlp_line(line)[0])
    return fold_event_rows(spans)


def test_a_span_said_to_hold_no_input_holds_none_in_any_real_producers_capture() -> None:
    """``may_hold_input`` lets a transcript skip spans unread: it may never skip one whose content has input (the
    captures of every real producer and content placement), and it must skip output-only current spans."""
    spans = _producer_spans()
    with_input = [s for s in spans if read_span_content(s).input]
    assert len(with_input) > 50
    assert all(may_hold_input(s) for s in with_input), [s.scope for s in with_input if not may_hold_input(s)]
    output_only = _chat("00f067aa0ba902b9", 0, [], [REPLY]).model_copy(update={"attributes": {
        "gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps([REPLY])}})
    assert not may_hold_input(output_only)
    assert sum(1 for s in spans if not may_hold_input(s)) > 0
