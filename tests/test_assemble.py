"""Assembly of conversations: the 200 tau-bench trajectories round-trip exactly, and every span shape we
know of (legacy events, the Azure variant, App Insights event rows, agent spans overlapping chat spans, cut
JSON) yields each message once, in order."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.assemble import Assembly, assemble, conversation_key
from monitor.models import Conversation, Message, SpanEvent, SpanRecord
from monitor.sources.otlp_file import OtlpFileSource
from tests.conftest import REPO, TAU_BENCH
from tools.tau_to_otlp import DEFAULT_START, RECORD_SPACING, convert_file, tau_record_to_spans

T0 = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)
TRACE_1, TRACE_2 = "1" * 32, "2" * 32


# ---- tau-bench end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tau_records() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    return records


@pytest.fixture(scope="module")
def tau_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("tau") / "traces.jsonl"
    convert_file(TAU_BENCH, target)
    return target


@pytest.fixture(scope="module")
def tau_spans(tau_file: Path) -> list[SpanRecord]:
    batches = list(OtlpFileSource(tau_file).pull(None, datetime.now(UTC)))
    assert all(batch.rejected == {} for batch in batches)
    return [span for batch in batches for span in batch.spans]


@pytest.fixture(scope="module")
def tau_assembly(tau_spans: list[SpanRecord]) -> Assembly:
    return assemble(tau_spans)


def _expected(traj: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The transcript as the agent lived it, straight from the OpenAI-format record."""
    result: list[tuple[Any, ...]] = []
    for message in traj:
        if message["role"] == "system":
            continue
        if message["role"] == "tool":
            response = ("tool_call_response", message["tool_call_id"], message["content"])
            result.append(("tool", message["name"], [response]))
            continue
        parts: list[tuple[Any, ...]] = []
        if message.get("content") is not None:
            parts.append(("text", message["content"]))
        for call in message.get("tool_calls") or []:
            function = call["function"]
            parts.append(("tool_call", call["id"], function["name"], json.loads(function["arguments"])))
        result.append((message["role"], None, parts))
    return result


def _actual(conversation: Conversation) -> list[tuple[Any, ...]]:
    result: list[tuple[Any, ...]] = []
    for message in conversation.messages:
        parts: list[tuple[Any, ...]] = []
        for part in message.parts:
            if part.type == "text":
                parts.append(("text", part.content))
            elif part.type == "tool_call":
                parts.append(("tool_call", part.id, part.name, part.arguments))
            elif part.type == "tool_call_response":
                parts.append(("tool_call_response", part.id, part.response))
            else:
                parts.append((part.type,))
        result.append((message.role, message.name, parts))
    return result


def test_every_tau_trajectory_is_rebuilt_exactly(
    tau_records: list[dict[str, Any]], tau_assembly: Assembly
) -> None:
    by_id = {conversation.id: conversation for conversation in tau_assembly.conversations}
    assert tau_assembly.rejected == {}
    assert len(by_id) == len(tau_records) == 200
    for record in tau_records:
        conversation = by_id[f"tau-{record['task_id']}-{record['trial']}"]
        assert _actual(conversation) == _expected(record["traj"]), conversation.id
        assert conversation.system_instructions == record["traj"][0]["content"]
        assert not conversation.truncated


def test_tau_conversations_carry_agent_usage_and_bookkeeping(
    tau_records: list[dict[str, Any]], tau_spans: list[SpanRecord], tau_assembly: Assembly
) -> None:
    roots = {s.attributes["gen_ai.conversation.id"]: s for s in tau_spans if s.parent_span_id is None}
    chat_usage: dict[str, int] = {}
    for span in tau_spans:
        if span.operation == "chat":
            tokens = span.attributes["gen_ai.usage.input_tokens"]
            chat_usage[span.trace_id] = chat_usage.get(span.trace_id, 0) + tokens
    tool_names = {
        call["function"]["name"] for r in tau_records for m in r["traj"] for call in m.get("tool_calls") or []
    }
    for number, conversation in enumerate(tau_assembly.conversations):
        root = roots[conversation.id]
        assert conversation.agent == "airline-agent"
        assert conversation.trace_ids == (root.trace_id,)
        # The root repeats the total of its chat calls; counting both would double it.
        assert conversation.input_tokens == chat_usage[root.trace_id]
        assert conversation.input_tokens == root.attributes["gen_ai.usage.input_tokens"]
        assert conversation.output_tokens == root.attributes["gen_ai.usage.output_tokens"] > 0
        assert conversation.span_count == sum(1 for s in tau_spans if s.trace_id == root.trace_id)
        assert conversation.started_at == DEFAULT_START + number * RECORD_SPACING == root.start_time
        assert conversation.last_activity_at == root.end_time
        assert {tool.name for tool in conversation.tool_definitions} == tool_names


def test_each_span_lands_in_exactly_one_conversation_whatever_the_order(tau_spans: list[SpanRecord]) -> None:
    sample = [s for s in tau_spans if s.start_time < DEFAULT_START + 20 * RECORD_SPACING]
    mixed = sample + _overlap_spans() + _legacy_spans(TRACE_2)
    reference = assemble(mixed)

    for seed in range(3):
        shuffled = list(mixed)
        random.Random(seed).shuffle(shuffled)
        assembly = assemble(shuffled + shuffled[:10])  # re-read spans are counted once
        distinct_spans = {(s.trace_id, s.span_id) for s in mixed}
        assert sum(c.span_count for c in assembly.conversations) == len(distinct_spans)
        traces = [t for c in assembly.conversations for t in c.trace_ids]
        assert sorted(traces) == sorted({s.trace_id for s in mixed})
        assert [(c.id, c.messages) for c in assembly.conversations] == [
            (c.id, c.messages) for c in reference.conversations
        ]


def test_the_converter_cli_writes_one_valid_line_per_record(tmp_path: Path) -> None:
    target = tmp_path / "three.jsonl"
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "tau_to_otlp.py"), str(TAU_BENCH), str(target), "--limit", "3"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "3 conversations" in done.stderr
    batches = list(OtlpFileSource(target).pull(None, T0))
    assert sum(b.rows for b in batches) == 3 and all(b.rejected == {} for b in batches)
    assert len(assemble(s for b in batches for s in b.spans).conversations) == 3

    missing = subprocess.run(
        [sys.executable, str(REPO / "tools" / "tau_to_otlp.py"), str(tmp_path / "none.json"), str(target)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert missing.returncode == 1 and "none.json" in missing.stderr


def test_only_the_root_of_a_converted_record_names_it(tau_records: list[dict[str, Any]]) -> None:
    spans = tau_record_to_spans(tau_records[0], base_time=T0)
    assert [s.conversation_id for s in spans if s.conversation_id] == ["tau-0-0"]
    assert conversation_key(s for s in spans if s.parent_span_id) == spans[0].trace_id
    assert conversation_key(spans) == "tau-0-0"


# ---- hand-built span shapes --------------------------------------------------------------------------------


def _span(span_id: str, trace: str = TRACE_1, parent: str | None = None, name: str = "", at: float = 0.0,
          seconds: float = 1.0, events: tuple[SpanEvent, ...] = (), **attributes: Any) -> SpanRecord:
    return SpanRecord(
        trace_id=trace, span_id=span_id, parent_span_id=parent, name=name,
        start_time=T0 + timedelta(seconds=at),
        end_time=T0 + timedelta(seconds=at + seconds), attributes=attributes, events=events,
    )


def _attrs(**values: Any) -> dict[str, Any]:
    """Keyword-friendly names for dotted GenAI attributes; message lists become JSON strings."""
    result: dict[str, Any] = {}
    for key, value in values.items():
        dotted = {"input": "gen_ai.input.messages", "output": "gen_ai.output.messages",
                  "system": "gen_ai.system_instructions"}.get(key, "gen_ai." + key.replace("__", "."))
        result[dotted] = json.dumps(value) if isinstance(value, list) else value
    return result


def _text(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}], **extra}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": name,
                                           "arguments": arguments}], "finish_reason": "tool_call"}


def _result(call_id: str, response: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}


SYSTEM = _text("system", "You are a weather bot.")
USER = _text("user", "Weather in Paris?")
CALL = _call("call_1", "get_weather", {"location": "Paris"})
RESULT = _result("call_1", "rainy, 57°F")
FINAL = _text("assistant", "It is rainy in Paris.", finish_reason="stop")


def _transcript(conversation: Conversation) -> list[tuple[str, str]]:
    def show(message: Message) -> str:
        return " | ".join(
            p.content if p.type == "text" and p.content is not None
            else f"{p.type}:{p.id}:{p.name or ''}:{json.dumps(p.arguments or p.response, ensure_ascii=False)}"
            for p in message.parts
        )
    return [(m.role, show(m)) for m in conversation.messages]


EXPECTED_WEATHER = [
    ("user", "Weather in Paris?"),
    ("assistant", 'tool_call:call_1:get_weather:{"location": "Paris"}'),
    ("tool", 'tool_call_response:call_1::"rainy, 57°F"'),
    ("assistant", "It is rainy in Paris."),
]


def _overlap_spans() -> list[SpanRecord]:
    """openai-agents-v2 shape: an invoke_agent span with input and output, chat spans repeating history."""
    return [
        _span("a000000000000001", name="invoke_agent weather", seconds=10, **_attrs(
            operation__name="invoke_agent", agent__name="weather", agent__id="asst_1", agent__version="3",
            conversation__id="conv-weather", input=[USER], output=[FINAL],
            usage__input_tokens=30, usage__output_tokens=12)),
        _span("a000000000000002", parent="a000000000000001", name="chat gpt-4o", at=1, **_attrs(
            operation__name="chat", agent__name="OpenAI Agent",
            system=[{"type": "text", "content": "Be kind."}],
            input=[SYSTEM, USER], output=[CALL], usage__input_tokens=10, usage__output_tokens=5)),
        _span("a000000000000003", parent="a000000000000001", name="execute_tool get_weather", at=2.5,
              **_attrs(operation__name="execute_tool", tool__name="get_weather", tool__call__id="call_1",
                       tool__call__arguments='{"location": "Paris"}', tool__call__result="rainy, 57°F")),
        _span("a000000000000004", parent="a000000000000001", name="chat gpt-4o", at=4, **_attrs(
            operation__name="chat", agent__name="OpenAI Agent", input=[SYSTEM, USER, CALL, RESULT],
            output=[FINAL], usage__input_tokens=20, usage__output_tokens=7)),
    ]


def test_agent_and_chat_spans_overlapping_give_each_message_once() -> None:
    assembly = assemble(_overlap_spans())

    [conversation] = assembly.conversations
    assert assembly.rejected == {}
    assert conversation.id == "conv-weather"  # named only by the agent span
    assert _transcript(conversation) == EXPECTED_WEATHER
    assert conversation.system_instructions == "Be kind.\n\nYou are a weather bot."
    identity = (conversation.agent_name, conversation.agent_id, conversation.agent_version)
    assert identity == ("weather", "asst_1", "3")
    assert (conversation.input_tokens, conversation.output_tokens) == (30, 12)
    assert conversation.span_count == 4 and conversation.messages[-1].finish_reason == "stop"


def test_a_tool_result_no_later_input_shows_comes_from_the_tool_span() -> None:
    spans = [s for s in _overlap_spans() if s.span_id != "a000000000000004"]
    spans[0] = spans[0].model_copy(update={"attributes": {
        k: v for k, v in spans[0].attributes.items() if k != "gen_ai.output.messages"}})

    [conversation] = assemble(spans).conversations

    assert _transcript(conversation) == EXPECTED_WEATHER[:3]
    assert conversation.messages[2].name == "get_weather"


def test_usage_falls_back_to_the_outermost_agent_span_when_no_call_reports_it() -> None:
    spans = [
        _span("b000000000000001", name="invoke_agent", seconds=9, **_attrs(
            operation__name="invoke_agent", usage__prompt_tokens="450", usage__completion_tokens="50")),
        _span("b000000000000002", parent="b000000000000001", name="agent_step", **_attrs(
            operation__name="invoke_agent", usage__prompt_tokens="450", usage__completion_tokens="50")),
        _span("b000000000000003", parent="b000000000000002", name="chat gpt-4o",
              **_attrs(operation__name="chat")),
    ]
    [conversation] = assemble(spans).conversations
    assert (conversation.input_tokens, conversation.output_tokens) == (450, 50)
    assert conversation.id == TRACE_1 and conversation.agent is not None


def test_turns_in_separate_traces_join_one_conversation() -> None:
    turn_two_user = _text("user", "And tomorrow?")
    turn_two_reply = _text("assistant", "Sunny.", finish_reason="stop")
    spans = [
        _span("c000000000000001", trace=TRACE_2, name="chat gpt-4o", at=60, **_attrs(
            operation__name="chat", conversation__id="conv-9",
            input=[USER, FINAL, turn_two_user], output=[turn_two_reply])),
        _span("c000000000000002", trace=TRACE_1, name="chat gpt-4o", at=0, **_attrs(
            operation__name="chat", conversation__id="conv-9", input=[USER], output=[FINAL])),
    ]
    [conversation] = assemble(spans).conversations
    assert conversation.trace_ids == (TRACE_1, TRACE_2)
    assert [m.text for m in conversation.messages] == [
        "Weather in Paris?", "It is rainy in Paris.", "And tomorrow?", "Sunny."]


def _legacy_spans(trace: str = TRACE_1) -> list[SpanRecord]:
    """Pre-1.38 instrumentation: the messages are span events, the structured fields JSON text."""
    def event(name: str, at: float, **body: Any) -> SpanEvent:
        attributes = {"gen_ai.system": "openai", **body}
        return SpanEvent(name=name, time=T0 + timedelta(seconds=at), attributes=attributes)

    tool_calls = json.dumps([{"id": "call_1", "type": "function",
                              "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}}])
    first = (
        event("gen_ai.system.message", 0.1, content="You are a weather bot."),
        event("gen_ai.user.message", 0.2, content="Weather in Paris?"),
        event("gen_ai.choice", 0.9, index=0, finish_reason="tool_calls",
              message=json.dumps({"role": "assistant", "tool_calls": json.loads(tool_calls)})),
    )
    second = (
        event("gen_ai.system.message", 3.1, content="You are a weather bot."),
        event("gen_ai.user.message", 3.2, content="Weather in Paris?"),
        event("gen_ai.assistant.message", 3.3, tool_calls=tool_calls),
        event("gen_ai.tool.message", 3.4, content="rainy, 57°F", id="call_1"),
        event("gen_ai.choice", 3.9, index=0, finish_reason="stop",
              message=json.dumps({"role": "assistant", "content": "It is rainy in Paris."})),
        event("gen_ai.choice", 3.9, index=1, finish_reason="stop", message='{"content": "Rain."}'),
    )
    return [
        _span("d000000000000001", trace=trace, name="chat gpt-4", at=0, events=first,
              **{"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-legacy"}),
        _span("d000000000000002", trace=trace, name="chat gpt-4", at=3, events=second,
              **{"gen_ai.operation.name": "chat"}),
    ]


def test_the_legacy_event_format_is_read() -> None:
    [conversation] = assemble(_legacy_spans()).conversations
    assert conversation.id == "conv-legacy"
    assert _transcript(conversation) == EXPECTED_WEATHER
    assert conversation.system_instructions == "You are a weather bot."
    assert conversation.messages[-1].finish_reason == "stop"


def test_event_rows_from_app_insights_read_like_inline_events() -> None:
    inline = _legacy_spans()
    rows: list[SpanRecord] = []
    for number, span in enumerate(inline):
        rows.append(span.model_copy(update={"events": ()}))
        rows.extend(
            SpanRecord(trace_id=span.trace_id, span_id=f"e{number}{index:014x}", parent_span_id=span.span_id,
                       kind="event", name=event.name, start_time=event.time, attributes=event.attributes)
            for index, event in enumerate(span.events)
        )
    random.Random(3).shuffle(rows)  # query results come in no particular order

    [from_rows] = assemble(rows).conversations
    [from_inline] = assemble(inline).conversations

    assert from_rows.messages == from_inline.messages
    assert from_rows.span_count == 2 and from_rows.system_instructions == from_inline.system_instructions

    # Event rows whose span is not (yet) stored still count, grouped under a stand-in span.
    orphans = [r for r in rows if r.kind == "event" and r.parent_span_id == "d000000000000002"]
    [from_orphans] = assemble(orphans).conversations
    assert _transcript(from_orphans) == EXPECTED_WEATHER and from_orphans.span_count == 0


def test_the_azure_sdk_variant_with_event_content_is_read() -> None:
    def event(name: str, at: float, body: dict[str, Any]) -> SpanEvent:
        attributes = {"gen_ai.system": "az.ai.agents", "gen_ai.thread.id": "thread_abc",
                      "gen_ai.event.content": json.dumps(body)}
        return SpanEvent(name=name, time=T0 + timedelta(seconds=at), attributes=attributes)

    weather_call = {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}}

    spans = [
        _span("f000000000000001", name="create_message", at=0, events=(
            event("gen_ai.user.message", 0.5,
                  {"content": {"text": {"value": "Weather in Paris?"}}, "role": "user"}),
        ), **{"gen_ai.operation.name": "create_message", "gen_ai.thread.id": "thread_abc"}),
        _span("f000000000000002", name="process_thread_run", at=1, seconds=5, events=(
            event("gen_ai.system.instruction", 1.1, {"text": "You are a weather bot."}),
            event("gen_ai.assistant.message", 2.0, {"tool_calls": [weather_call]}),
            event("gen_ai.tool.message", 3.0, {"content": "rainy, 57°F", "id": "call_1"}),
            event("gen_ai.choice", 4.0, {
                "finish_reason": "stop", "index": 0,
                "message": {"content": {"text": {"value": "It is rainy in Paris."}}},
            }),
        ), **{"gen_ai.operation.name": "process_thread_run", "gen_ai.agent.id": "asst_9"}),
    ]
    [conversation] = assemble(spans).conversations
    assert conversation.id == "thread_abc" and conversation.agent == "asst_9"
    assert _transcript(conversation) == EXPECTED_WEATHER
    assert conversation.system_instructions == "You are a weather bot."


def test_cut_message_json_marks_the_conversation_truncated_and_keeps_what_survived() -> None:
    long_question = _text("user", "And tomorrow? " + "please " * 200)
    cut_input = json.dumps([USER, FINAL, long_question])[:-300]
    spans = [
        _span("a100000000000001", name="chat gpt-4o", at=0, **_attrs(operation__name="chat", input=[USER],
                                                                      output=[FINAL])),
        _span("a100000000000002", name="chat gpt-4o", at=5, **{
            **_attrs(operation__name="chat", output=[_text("assistant", "Sunny.", finish_reason="stop")]),
            "gen_ai.input.messages": cut_input}),
    ]
    assembly = assemble(spans)
    [conversation] = assembly.conversations
    assert conversation.truncated and assembly.rejected == {}
    assert [m.text for m in conversation.messages] == ["Weather in Paris?", "It is rainy in Paris.", "Sunny."]

    flagged = spans[0].model_copy(update={"truncated_keys": ("gen_ai.output.messages",)})
    [reported] = assemble([flagged]).conversations
    assert reported.truncated
    assert [m.text for m in reported.messages] == ["Weather in Paris?", "It is rainy in Paris."]

    cut_output = _span("a100000000000003", name="chat gpt-4o", **{
        **_attrs(operation__name="chat", input=[USER]), "gen_ai.output.messages": json.dumps([FINAL])[:30]})
    [cut] = assemble([cut_output]).conversations
    assert cut.truncated and [m.text for m in cut.messages] == ["Weather in Paris?"]


def test_an_invalid_message_attribute_is_counted_and_the_rest_kept() -> None:
    spans = [
        _span("a200000000000001", name="chat gpt-4o", **{
            **_attrs(operation__name="chat", output=[FINAL]),
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": {"type": "text"}}])}),
        _span("a200000000000002", name="chat gpt-4o", at=2, **{
            **_attrs(operation__name="chat", input=[USER]),
            "gen_ai.output.messages": "{definitely not json}",
            "gen_ai.tool.definitions": json.dumps([{"name": "no type"}])}),
    ]
    assembly = assemble(spans)
    [conversation] = assembly.conversations
    assert assembly.rejected == {"invalid_input_messages": 1, "invalid_output_messages": 1,
                                 "invalid_tool_definitions": 1}
    assert [m.text for m in conversation.messages] == ["It is rainy in Paris.", "Weather in Paris?"]
    assert not conversation.truncated and conversation.tool_definitions == ()


def test_a_trace_naming_no_conversation_is_its_own() -> None:
    spans = [_span("a300000000000001", trace=TRACE_2, name="chat gpt-4o",
                   **_attrs(operation__name="chat", input=[USER], output=[FINAL]))]
    [conversation] = assemble(spans).conversations
    assert conversation.id == TRACE_2 and conversation.trace_ids == (TRACE_2,)
    assert assemble([]).conversations == []


POLICY = "[Role] You are a booking agent.\n{Rules} Never book more than 8 seats in one reservation"


def test_plain_text_that_starts_with_a_bracket_is_kept_as_text_not_dropped_as_bad_json() -> None:
    spans = [_span("a400000000000001", name="chat gpt-4o", **{
        **_attrs(operation__name="chat", conversation__id="conv-policy", input=[USER], output=[FINAL]),
        "gen_ai.system_instructions": POLICY})]
    assembly = assemble(spans)
    [conversation] = assembly.conversations
    assert assembly.rejected == {}
    assert conversation.system_instructions == POLICY and not conversation.truncated

    # The legacy format's event content may be plain text starting with a brace too.
    event = SpanEvent(name="gen_ai.user.message", time=T0, attributes={
        "gen_ai.event.content": "{party of 9} Can you book us all?"})
    legacy = _span("a400000000000002", name="chat gpt-4", events=(event,), **{"gen_ai.operation.name": "chat"})
    legacy_assembly = assemble([legacy])
    assert legacy_assembly.rejected == {}
    assert [m.text for m in legacy_assembly.conversations[0].messages] == ["{party of 9} Can you book us all?"]


def test_instructions_cut_short_are_still_json_cut_short_not_text() -> None:
    cut = json.dumps([{"type": "text", "content": "Never book more than 8 seats."}])[:30]
    spans = [_span("a500000000000001", name="chat gpt-4o", **{
        **_attrs(operation__name="chat", input=[USER], output=[FINAL]), "gen_ai.system_instructions": cut})]
    [conversation] = assemble(spans).conversations
    assert conversation.truncated and conversation.system_instructions is None

    # Plain text a source reports as cut is kept as text, and the conversation says it was cut.
    flagged = spans[0].model_copy(update={
        "attributes": {**spans[0].attributes, "gen_ai.system_instructions": POLICY},
        "truncated_keys": ("gen_ai.system_instructions",)})
    [reported] = assemble([flagged]).conversations
    assert reported.truncated and reported.system_instructions == POLICY


def test_message_json_with_half_a_surrogate_pair_or_a_huge_integer_never_raises() -> None:
    odd_input = '[{"role": "user", "parts": [{"type": "text", "content": "half \\ud83d"}]}]'
    huge = '[{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "n": ' + "9" * 5000 + "}]"
    spans = [_span("a600000000000001", name="chat gpt-4o", **{
        **_attrs(operation__name="chat"), "gen_ai.input.messages": odd_input, "gen_ai.output.messages": huge})]
    assembly = assemble(spans)
    [conversation] = assembly.conversations
    assert [m.text for m in conversation.messages] == ["half \ufffd"]
    assert assembly.rejected == {"invalid_output_messages": 1}
    conversation.model_dump_json().encode("utf-8")
