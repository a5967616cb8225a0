"""tools/spans_to_app_insights.py against the real Azure Monitor exporter: the rows our fake serves must be
the rows the exporter's envelopes become (table, ids, name, type, target, duration, success,
customDimensions)."""

from __future__ import annotations

import importlib
import json
import os
from datetime import timedelta
from typing import Any

import pytest

from monitor.models import SpanEvent, SpanRecord
from tests.app_insights_helpers import NOW, conversation
from tools.spans_to_app_insights import spans_to_rows

try:
    exporter = importlib.import_module("azure.monitor.opentelemetry.exporter.export.trace._exporter")
except ImportError:
    if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
        pytest.fail("CI needs azure-monitor-opentelemetry-exporter==1.0.0b58 to check the row mapping",
                    pytrace=False)
    pytest.skip("pip install azure-monitor-opentelemetry-exporter==1.0.0b58", allow_module_level=True)

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

_KINDS = {"client": SpanKind.CLIENT, "server": SpanKind.SERVER, "internal": SpanKind.INTERNAL,
          "producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}
_STATUS = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
_ITEMS = {"RequestData": "request", "RemoteDependencyData": "dependency", "MessageData": "trace",
          "ExceptionData": "exception"}


def _nanos(span_time: Any) -> int:
    return int(span_time.timestamp()) * 1_000_000_000 + span_time.microsecond * 1000


def readable(span: SpanRecord) -> ReadableSpan:
    """The OTel SDK span a producer would have finished for this record (attributes cleaned like the SDK)."""
    trace_id = int(span.trace_id, 16)
    return ReadableSpan(
        name=span.name,
        context=SpanContext(trace_id, int(span.span_id, 16), is_remote=False, trace_flags=TraceFlags(1)),
        parent=(SpanContext(trace_id, int(span.parent_span_id, 16), is_remote=False)
                if span.parent_span_id else None),
        resource=Resource(span.resource),
        attributes=BoundedAttributes(attributes=span.attributes, immutable=True),
        events=[Event(e.name, BoundedAttributes(attributes=e.attributes, immutable=True), _nanos(e.time))
                for e in span.events],
        kind=_KINDS[span.kind],
        status=Status(_STATUS[span.status]),
        start_time=_nanos(span.start_time),
        end_time=_nanos(span.end_time) if span.end_time else None,
        instrumentation_scope=InstrumentationScope("opentelemetry.instrumentation.openai_v2"),
    )


def _duration_ms(text: str) -> float:
    days, clock = text.split(".", 1)
    hours, minutes, rest = clock.split(":")
    seconds, millis = rest.split(".")
    seconds_total = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
    return float(seconds_total * 1000 + int(millis))


def exporter_items(span: SpanRecord) -> list[dict[str, Any]]:
    """What the real exporter produces for one span and its events, in classic column names."""
    otel = readable(span)
    envelopes = [exporter._convert_span_to_envelope(otel), *exporter._convert_span_events_to_envelopes(otel)]
    items = []
    for envelope in envelopes:
        data, tags = envelope.data.base_data, envelope.tags
        item: dict[str, Any] = {
            "itemType": _ITEMS[envelope.data.base_type],
            "operation_Id": tags["ai.operation.id"],
            "operation_ParentId": tags.get("ai.operation.parentId", ""),
            "customDimensions": dict(data.properties or {}),
            "cloud_RoleName": tags.get("ai.cloud.role", ""),
        }
        if item["itemType"] in ("request", "dependency"):
            item.update(id=data.id, name=data.name, duration=_duration_ms(data.duration),
                        success="True" if data.success else "False", operation_Name=tags["ai.operation.name"])
        if item["itemType"] == "dependency":
            item.update(type=data.type, target=data.target or "", resultCode=data.result_code)
        if item["itemType"] == "request":
            item.update(resultCode=data.response_code)
        if item["itemType"] == "trace":
            item.update(message=data.message)
        items.append(item)
    return items


def odd_spans() -> list[SpanRecord]:
    """Spans that exercise the exporter's special cases next to an ordinary conversation."""
    base = conversation(0, NOW - timedelta(minutes=5))
    root, chat = base[0], base[1]
    return [
        *base,
        root.model_copy(update={"span_id": "00000000000000aa", "kind": "server", "name": "Agent workflow",
                                "resource": {"service.name": "airline", "service.namespace": "prod"}}),
        chat.model_copy(update={
            "span_id": "00000000000000bb", "status": "error",
            "attributes": {**chat.attributes, "gen_ai.system": "az.ai.agents", "flag": True, "ratio": 0.25,
                           "k" * 151: "dropped", "long": "y" * 9000, "gen_ai.output.messages": "z" * 300_000,
                           "error.type": "timeout", "messaging.operation": "dropped"},
            "events": (SpanEvent(name="exception", time=chat.start_time + timedelta(milliseconds=3),
                                 attributes={"exception.type": "ValueError", "exception.message": "bad"}),
                       SpanEvent(name="gen_ai.assistant.message",
                                 time=chat.start_time + timedelta(milliseconds=4),
                                 attributes={"gen_ai.event.content": json.dumps({"content": "hi"})})),
        }),
        chat.model_copy(update={"span_id": "00000000000000cc", "kind": "internal", "name": "execute_tool x",
                                "end_time": chat.start_time + timedelta(microseconds=1_500_400),
                                "attributes": {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "x", "gen_ai.system": "openai"}}),
    ]


def test_classic_rows_match_the_exporters_envelopes() -> None:
    spans = odd_spans()
    rows = spans_to_rows(spans, "classic")
    ours = [row for table in ("dependencies", "requests", "traces", "exceptions")
            for row in rows.tables.get(table, [])]
    theirs = [item for span in spans for item in exporter_items(span)]
    assert len(ours) == len(theirs)
    key = lambda row: (row["itemType"], row.get("id") or row["operation_ParentId"], row.get("message", ""))  # noqa: E731
    by_key = {key(row): row for row in ours}
    for expected in theirs:
        got = by_key[key(expected)]
        for column, value in expected.items():
            assert got[column] == value, (expected["itemType"], column)


def test_workspace_rows_carry_the_same_values_under_workspace_names() -> None:
    spans = odd_spans()
    classic = spans_to_rows(spans, "classic").tables
    workspace = spans_to_rows(spans, "workspace").tables
    pairs = (("dependencies", "AppDependencies"), ("requests", "AppRequests"), ("traces", "AppTraces"))
    for old, new in pairs:
        assert len(classic[old]) == len(workspace[new])
        for before, after in zip(classic[old], workspace[new], strict=True):
            assert after["TimeGenerated"] == before["timestamp"]
            assert after["OperationId"] == before["operation_Id"]
            assert after["ParentId"] == before["operation_ParentId"]
            assert after["Properties"] == before["customDimensions"]
            assert after["Type"] == new
            if old != "traces":
                assert after["Id"] == before["id"] and after["DurationMs"] == before["duration"]
                assert after["Success"] is (before["success"] == "True")
            else:
                assert after["Message"] == before["message"]


def test_ids_are_lowercase_hex_of_the_right_length_and_values_are_strings() -> None:
    rows = spans_to_rows(conversation(0, NOW), "classic").tables
    for row in rows["dependencies"]:
        assert len(row["operation_Id"]) == 32 and len(row["id"]) == 16
        assert int(row["operation_Id"], 16) >= 0 and row["id"] == row["id"].lower()
        assert all(isinstance(v, str) for v in row["customDimensions"].values())
    chat = rows["dependencies"][1]
    assert chat["customDimensions"]["gen_ai.usage.input_tokens"] == "120"
    assert chat["customDimensions"]["gen_ai.response.finish_reasons"] == "('stop',)"
    assert chat["type"] == "N/A"  # a CLIENT GenAI span without gen_ai.system
