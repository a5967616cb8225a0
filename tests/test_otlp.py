"""OTLP JSON (file exporter) ⇄ SpanRecord."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.formats.otlp import parse_otlp_document, parse_otlp_line, spans_to_otlp_document
from monitor.models import SpanEvent, SpanRecord

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
CHILD = "1111111111111111"


def _attr(key: str, value: dict[str, object]) -> dict[str, object]:
    return {"key": key, "value": value}


def _span(**overrides: object) -> dict[str, object]:
    span: dict[str, object] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "parentSpanId": "",
        "name": "chat gpt-4",
        "kind": 3,
        "startTimeUnixNano": "1700000000123456789",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [_attr("gen_ai.operation.name", {"stringValue": "chat"})],
        "status": {"code": 1},
    }
    span.update(overrides)
    return span


def _nested(depth: int) -> dict[str, object]:
    """An AnyValue holding arrays ``depth`` deep."""
    value: dict[str, object] = {"stringValue": "bottom"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


def _document(*spans: dict[str, object]) -> dict[str, object]:
    return {"resourceSpans": [{
        "resource": {"attributes": [_attr("service.name", {"stringValue": "airline"})]},
        "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": list(spans)}],
    }]}


def test_a_collector_line_is_read_with_every_value_type() -> None:
    attributes = [
        _attr("s", {"stringValue": "text"}),
        _attr("i_string", {"intValue": "450"}),
        _attr("i_number", {"intValue": 7}),
        _attr("d", {"doubleValue": 0.5}),
        _attr("nan", {"doubleValue": "NaN"}),
        _attr("b", {"boolValue": True}),
        _attr("arr", {"arrayValue": {"values": [{"stringValue": "stop"}, {"intValue": "2"}]}}),
        _attr("kv", {"kvlistValue": {"values": [_attr("inner", {"boolValue": False})]}}),
        _attr("raw", {"bytesValue": base64.b64encode(b"\x00\x01").decode()}),
        _attr("empty", {}),
    ]
    event = {"timeUnixNano": "1700000000500000000", "name": "gen_ai.user.message",
             "attributes": [_attr("content", {"stringValue": "hi"})]}
    line = json.dumps(_document(_span(attributes=attributes, events=[event], kind="SPAN_KIND_SERVER",
                                      status={"code": "STATUS_CODE_ERROR"})))

    spans, rejected = parse_otlp_line(line)

    assert rejected == {}
    [span] = spans
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, SPAN, None)
    assert span.kind == "server" and span.status == "error"
    assert span.start_time == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert span.end_time == datetime(2023, 11, 14, 22, 13, 21, tzinfo=UTC)
    assert span.resource == {"service.name": "airline"}
    assert span.attributes["s"] == "text"
    assert span.attributes["i_string"] == 450 and span.attributes["i_number"] == 7
    assert span.attributes["d"] == 0.5 and span.attributes["nan"] != span.attributes["nan"]
    assert span.attributes["b"] is True
    assert span.attributes["arr"] == ["stop", 2]
    assert span.attributes["kv"] == {"inner": False}
    assert span.attributes["raw"] == "AAE="
    assert span.attributes["empty"] is None
    event_time = datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)
    expected_event = SpanEvent(name="gen_ai.user.message", time=event_time, attributes={"content": "hi"})
    assert span.events == (expected_event,)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"traceId": ""}, "missing_trace_id"),
        ({"traceId": "xyz"}, "invalid_trace_id"),
        ({"traceId": "0" * 32}, "invalid_trace_id"),
        ({"spanId": None}, "missing_span_id"),
        ({"spanId": "abc"}, "invalid_span_id"),
        ({"parentSpanId": "not-hex"}, "invalid_parent_span_id"),
        ({"startTimeUnixNano": "yesterday"}, "invalid_time"),
        ({"startTimeUnixNano": "0"}, "invalid_time"),
        ({"startTimeUnixNano": None}, "invalid_time"),
        ({"endTimeUnixNano": "99999999999999999999999"}, "invalid_time"),
        ({"attributes": {"not": "a list"}}, "malformed_attributes"),
        # Values of the wrong type or size used to raise out of the parser and stop the source for good.
        ({"events": 5}, "malformed_span"),
        ({"attributes": [_attr("a", {"arrayValue": {"values": 5}})]}, "malformed_span"),
        ({"attributes": [_attr("a", {"kvlistValue": {"values": [_attr("b", {"arrayValue": {"values": 1.5}})]}})]},
         "malformed_span"),
        ({"startTimeUnixNano": float("inf")}, "invalid_time"),  # json.loads reads Infinity
        ({"endTimeUnixNano": float("-inf")}, "invalid_time"),
        # Nested deeper than a record can be serialised again (the store would fail on it).
        ({"attributes": [_attr("deep", _nested(300))]}, "malformed_attributes"),
    ],
)
def test_a_malformed_span_is_rejected_and_its_neighbours_kept(override: dict[str, Any], reason: str) -> None:
    good_before = _span(spanId="aaaaaaaaaaaaaaaa")
    good_after = _span(spanId="bbbbbbbbbbbbbbbb")

    spans, rejected = parse_otlp_document(_document(good_before, _span(**override), good_after))

    assert [s.span_id for s in spans] == ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]
    assert rejected == {reason: 1}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"resourceSpans": [', "invalid_json"),
        ("[1, 2]", "not_an_otlp_object"),
        ('{"resourceMetrics": []}', "missing_resource_spans"),
        ('{"resourceSpans": ["x"]}', "malformed_resource_spans"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}', "malformed_scope_spans"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [42]}]}]}', "malformed_span"),
    ],
)
def test_a_broken_line_is_a_counted_reason_not_an_exception(line: str, reason: str) -> None:
    assert parse_otlp_line(line) == ([], {reason: 1})


def test_a_bad_event_costs_only_itself() -> None:
    events = [
        {"timeUnixNano": "garbage", "name": "gen_ai.user.message"},
        {"timeUnixNano": "1700000000600000000", "name": "gen_ai.choice"},
        {"timeUnixNano": "1700000000700000000", "name": "gen_ai.tool.message",
         "attributes": [_attr("content", {"arrayValue": {"values": 5}})]},
    ]
    spans, rejected = parse_otlp_document(_document(_span(events=events)))
    assert [e.name for e in spans[0].events] == ["gen_ai.choice"]
    assert rejected == {"invalid_event_time": 1, "malformed_event": 1}


def test_a_malformed_resource_costs_its_attributes_not_its_spans() -> None:
    document = _document(_span())
    document["resourceSpans"][0]["resource"] = {  # type: ignore[index]
        "attributes": [_attr("service.name", {"arrayValue": {"values": 5}})]}
    spans, rejected = parse_otlp_document(document)
    assert [s.span_id for s in spans] == [SPAN] and spans[0].resource == {}
    assert rejected == {"malformed_resource": 1}


def test_infinity_and_numbers_past_float_range_in_a_line_never_raise() -> None:
    spans = [
        _span(spanId="aaaaaaaaaaaaaaaa", startTimeUnixNano="START"),
        _span(spanId="bbbbbbbbbbbbbbbb", attributes=[_attr("tokens", {"intValue": "HUGE"}),
                                                     _attr("ratio", {"doubleValue": "HUGE"})]),
        _span(spanId="cccccccccccccccc"),
    ]
    line = json.dumps(_document(*spans)).replace('"START"', "Infinity").replace('"HUGE"', "1e400")

    read, rejected = parse_otlp_line(line)

    assert rejected == {"invalid_time": 1}
    assert [s.span_id for s in read] == ["bbbbbbbbbbbbbbbb", "cccccccccccccccc"]
    # An intValue that is no integer stays as its text, as any value that cannot be typed does.
    assert read[0].attributes["tokens"] == "inf" and read[0].attributes["ratio"] == float("inf")
    assert parse_otlp_line('{"resourceSpans": [], "n": ' + "9" * 5000 + "}") == ([], {"invalid_json": 1})


def test_lone_surrogates_are_replaced_in_every_string_read() -> None:
    # Half an emoji, as a cut at a character limit leaves it: JSON allows the escape, UTF-8 cannot encode it.
    half = "\ud83d"
    kv: dict[str, object] = {"kvlistValue": {"values": [_attr("inner" + half, {"stringValue": "v" + half})]}}
    array: dict[str, object] = {"arrayValue": {"values": [{"stringValue": "a" + half}]}}
    event = {"timeUnixNano": "1700000000500000000", "name": "gen_ai.user.message" + half,
             "attributes": [_attr("content", {"stringValue": "hi " + half})]}
    raw = _span(name="chat " + half, events=[event], attributes=[
        _attr("gen_ai.conversation.id", {"stringValue": "conv-" + half}),
        _attr("key" + half, {"stringValue": "x"}), _attr("kv", kv), _attr("arr", array),
        _attr("bytes", {"bytesValue": half})])
    document = _document(raw)
    document["resourceSpans"][0]["resource"] = {  # type: ignore[index]
        "attributes": [_attr("service.name", {"stringValue": "svc" + half})]}
    line = json.dumps(document)
    assert "\\ud83d" in line  # the file holds the JSON escape of half a pair

    [span], rejected = parse_otlp_line(line)

    assert rejected == {}
    replaced = "\ufffd"
    assert span.name == "chat " + replaced and span.conversation_id == "conv-" + replaced
    assert span.attributes["key" + replaced] == "x"
    assert span.attributes["kv"] == {"inner" + replaced: "v" + replaced}
    assert span.attributes["arr"] == ["a" + replaced] and span.attributes["bytes"] == replaced
    assert span.events[0].name == "gen_ai.user.message" + replaced
    assert span.events[0].attributes == {"content": "hi " + replaced}
    assert span.resource == {"service.name": "svc" + replaced}
    span.model_dump_json().encode("utf-8")  # what the store does with it: must not raise


def test_base64_ids_and_old_scope_names_are_accepted() -> None:
    raw = _span(traceId=base64.b64encode(bytes.fromhex(TRACE)).decode(),
                spanId=base64.b64encode(bytes.fromhex(SPAN)).decode())
    document = {"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": [raw]}]}]}
    spans, rejected = parse_otlp_document(document)
    assert rejected == {}
    assert (spans[0].trace_id, spans[0].span_id) == (TRACE, SPAN)


def test_spans_survive_a_round_trip_through_the_file_format() -> None:
    start = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    root = SpanRecord(
        trace_id=TRACE, span_id=SPAN, name="invoke_agent airline", kind="internal", start_time=start,
        end_time=start + timedelta(seconds=3), status="ok", resource={"service.name": "airline"},
        attributes={"gen_ai.conversation.id": "conv-1", "n": 3, "x": 1.25, "flag": False, "list": ["a", "b"],
                    "map": {"k": "v"}},
        events=(SpanEvent(name="gen_ai.user.message", time=start, attributes={"content": "hi"}),),
    )
    child = SpanRecord(trace_id=TRACE, span_id=CHILD, parent_span_id=SPAN, name="chat gpt-4o", kind="client",
                       start_time=start + timedelta(seconds=1), resource={"service.name": "other"})

    document = spans_to_otlp_document([root, child])
    spans, rejected = parse_otlp_line(json.dumps(document))

    assert rejected == {}
    assert len(document["resourceSpans"]) == 2
    assert sorted(spans, key=lambda s: s.span_id) == sorted([root, child], key=lambda s: s.span_id)


def test_event_rows_are_written_back_as_events_of_their_span() -> None:
    start = datetime(2026, 1, 2, tzinfo=UTC)
    span = SpanRecord(trace_id=TRACE, span_id=SPAN, name="chat", start_time=start)
    row = SpanRecord(trace_id=TRACE, span_id="2222222222222222", parent_span_id=SPAN, kind="event",
                     name="gen_ai.user.message", start_time=start + timedelta(seconds=1),
                     attributes={"gen_ai.event.content": '{"content": "hi"}'})

    [parsed], _ = parse_otlp_document(spans_to_otlp_document([span, row]))

    assert parsed.events == (SpanEvent(name="gen_ai.user.message", time=row.start_time,
                                       attributes=row.attributes),)
    with pytest.raises(ValueError, match=SPAN):
        spans_to_otlp_document([row])
