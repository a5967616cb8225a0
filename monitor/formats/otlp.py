"""The OTLP JSON file-exporter format, to and from ``SpanRecord``.

One line of the file is one ``{"resourceSpans": [...]}`` object (the OpenTelemetry collector's ``file``
exporter and the SDKs' OTLP/JSON encoding): resourceSpans → scopeSpans → spans, attributes as
``[{key, value: AnyValue}]``, ids in hex, times as nanosecond strings. A Collector with one file exporter on
its traces and logs pipelines writes ``{"resourceLogs": [...]}`` lines into the same file: resourceLogs →
scopeLogs → logRecords. A GenAI log record (an ``eventName`` or ``event.name`` under ``gen_ai.``, or a
``gen_ai.*`` attribute: where openai-v2 ``event_only``, util-genai 0.x, OpenLLMetry ``use_attributes=False``
and Semantic Kernel put message content) becomes an event record (``kind == "event"``) of the span its
``traceId``/``spanId`` name, its body under the ``body`` attribute; assembly folds it into that span. Other
log records (the application's own logs) are not GenAI content and are passed over; a GenAI record that
names no span cannot be placed and is counted (``log_record_without_span``). A span that cannot be read (missing
ids, bad time, a value of the wrong type) is rejected with a reason and the rest of the line is still read:
one broken span never costs its neighbours. Lone surrogates (JSON allows ``"\ud83d"``; UTF-8 does not) are
replaced by U+FFFD in every string read, so no record fails to encode later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from monitor.formats.json_text import MAX_NESTING, replace_lone_surrogates, replace_lone_surrogates_in
from monitor.models import SpanEvent, SpanRecord

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Past this, datetime cannot represent the time (year 9999): such a value is garbage, not a span.
_MAX_UNIX_NANOS = 253_402_300_799 * 10**9

_SPAN_KINDS = {0: "internal", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_SPAN_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": "internal",
    "SPAN_KIND_INTERNAL": "internal",
    "SPAN_KIND_SERVER": "server",
    "SPAN_KIND_CLIENT": "client",
    "SPAN_KIND_PRODUCER": "producer",
    "SPAN_KIND_CONSUMER": "consumer",
}
_KIND_NUMBERS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}
_STATUS_NAMES = {"STATUS_CODE_UNSET": "unset", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}
_STATUS_NUMBERS = {"unset": 0, "ok": 1, "error": 2}
SCOPE_NAME = "rubric-monitor"
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}

ParseResult = tuple[list[SpanRecord], dict[str, int]]


class OtlpFormatError(ValueError):
    """One span (or one line) could not be read. ``reason`` is the metric label it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(detail)


# ---- reading ------------------------------------------------------------------------------------------


def parse_otlp_line(line: str) -> ParseResult:
    """Spans of one line of an OTLP JSON file; a line that is not JSON is one rejection, not an exception."""
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):  # ValueError: bad JSON, or an integer past the digit limit
        return [], {"invalid_json": 1}
    if not isinstance(document, dict):
        return [], {"not_an_otlp_object": 1}
    return parse_otlp_document(document)


def parse_otlp_document(doc: Mapping[str, Any]) -> ParseResult:
    """Spans (and GenAI log records, as event records) of one ``{"resourceSpans": [...]}`` or
    ``{"resourceLogs": [...]}`` object, and how many could not be read, by reason."""
    spans: list[SpanRecord] = []
    rejected: Counter[str] = Counter()
    resource_spans = doc.get("resourceSpans")
    resource_logs = doc.get("resourceLogs")
    if not isinstance(resource_spans, list) and not isinstance(resource_logs, list):
        return [], {"missing_resource_spans": 1}
    if isinstance(resource_logs, list):
        _parse_resource_logs(resource_logs, spans, rejected)
    # instrumentationLibrarySpans is the pre-1.0 name of scopeSpans; old collectors still write it.
    scoped = _scoped(resource_spans if isinstance(resource_spans, list) else [],
                     ("scopeSpans", "instrumentationLibrarySpans", "spans"), "spans", rejected)
    for resource, scope_name, raw in scoped:
        try:
            spans.append(_parse_span(raw, resource, scope_name, rejected))
        except OtlpFormatError as exc:
            rejected[exc.reason] += 1
        except (TypeError, ValueError, OverflowError, RecursionError):
            # A field of the wrong type, size or depth ("events": 5, "values": 5): this span only.
            rejected["malformed_span"] += 1
    return spans, dict(rejected)


def _scoped(
    resources: list[Any], keys: tuple[str, str, str], what: str, rejected: Counter[str]
) -> Iterator[tuple[dict[str, Any], str, Any]]:
    """(resource attributes, scope name, raw item) of each item under ``resources``: ``keys`` name the scope list
    (current and pre-1.0 name) and the item list of a scope. A malformed resource or scope is counted
    (``malformed_resource_{what}``, ``malformed_scope_{what}``) and passed over."""
    scopes_key, old_scopes_key, items_key = keys
    for entry in resources:
        if not isinstance(entry, dict):
            rejected[f"malformed_resource_{what}"] += 1
            continue
        resource = _resource_attributes(entry, rejected)
        scopes = entry.get(scopes_key, entry.get(old_scopes_key, []))
        if not isinstance(scopes, list):
            rejected[f"malformed_scope_{what}"] += 1
            continue
        for scope in scopes:
            raw_items = scope.get(items_key, []) if isinstance(scope, dict) else None
            if not isinstance(raw_items, list):
                rejected[f"malformed_scope_{what}"] += 1
                continue
            scope_name = _scope_name(scope)
            for raw in raw_items:
                yield resource, scope_name, raw


def _scope_name(scope: Mapping[str, Any]) -> str:
    # instrumentationLibrary is the pre-1.0 name of scope.
    raw = scope.get("scope", scope.get("instrumentationLibrary"))
    name = raw.get("name") if isinstance(raw, dict) else None
    # SCOPE_NAME is what this module writes for spans whose scope is not known: read back, it is still unknown.
    return _text(name) if isinstance(name, str) and name != SCOPE_NAME else ""


def _parse_resource_logs(resource_logs: list[Any], records: list[SpanRecord], rejected: Counter[str]) -> None:
    scoped = _scoped(resource_logs, ("scopeLogs", "instrumentationLibraryLogs", "logRecords"), "logs", rejected)
    for resource, scope_name, raw in scoped:
        try:
            record = _parse_log_record(raw, resource, scope_name)
        except OtlpFormatError as exc:
            rejected[exc.reason] += 1
        except (TypeError, ValueError, OverflowError, RecursionError):
            rejected["malformed_log_record"] += 1
        else:
            if record is not None:
                records.append(record)


def _parse_log_record(raw: Any, resource: dict[str, Any], scope_name: str) -> SpanRecord | None:
    """A GenAI log record as an event record of its span; ``None`` for a record that is not GenAI content."""
    if not isinstance(raw, dict):
        raise OtlpFormatError("malformed_log_record", f"a log record is a {type(raw).__name__}, not an object")
    attributes = parse_attributes(raw.get("attributes"))
    name = raw.get("eventName") or attributes.get("event.name") or ""
    name = _text(name) if isinstance(name, str) else ""
    if not name.startswith("gen_ai.") and not any(key.startswith("gen_ai.") for key in attributes):
        return None
    if not raw.get("traceId") or not raw.get("spanId"):
        raise OtlpFormatError("log_record_without_span",
                              f"GenAI log record {name or '(unnamed)'} names no trace and span")
    trace_id = parse_id(raw.get("traceId"), 16, "traceId")
    parent_span_id = parse_id(raw.get("spanId"), 8, "spanId")
    # SDKs that emit events through the logs API often leave timeUnixNano unset (0): the time it was observed
    # is then the event's time.
    moment = raw.get("timeUnixNano")
    if moment in (None, "", "0", 0):
        moment = raw.get("observedTimeUnixNano")
    time = parse_unix_nanos(moment, "log record timeUnixNano", reason="invalid_event_time")
    body = parse_any_value(raw.get("body"))
    if body not in (None, "", {}, []):
        attributes["body"] = body
    try:
        return SpanRecord(
            trace_id=trace_id,
            span_id=_record_id(raw),
            parent_span_id=parent_span_id,
            name=name,
            kind="event",
            start_time=time,
            attributes=attributes,
            resource=resource,
            scope=scope_name,
        )
    except ValidationError as exc:
        raise OtlpFormatError("malformed_log_record", f"log record of span {parent_span_id}: "
                                                      f"{exc.errors()[0]['msg']}") from exc


def _record_id(raw: Mapping[str, Any]) -> str:
    """A stable id for a log record (records have none), so reading the same line again gives the same one."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _resource_attributes(resource_span: Mapping[str, Any], rejected: Counter[str]) -> dict[str, Any]:
    resource = resource_span.get("resource") or {}
    if not isinstance(resource, dict):
        rejected["malformed_resource"] += 1
        return {}
    try:
        return parse_attributes(resource.get("attributes"))
    except OtlpFormatError as exc:
        rejected[exc.reason] += 1
    except (TypeError, ValueError, OverflowError, RecursionError):
        rejected["malformed_resource"] += 1
    return {}


def _parse_span(raw: Any, resource: dict[str, Any], scope_name: str, rejected: Counter[str]) -> SpanRecord:
    if not isinstance(raw, dict):
        raise OtlpFormatError("malformed_span", f"a span is a {type(raw).__name__}, not an object")
    trace_id = parse_id(raw.get("traceId"), 16, "traceId")
    span_id = parse_id(raw.get("spanId"), 8, "spanId")
    parent = raw.get("parentSpanId")
    parent_span_id = parse_id(parent, 8, "parentSpanId") if parent else None
    start_time = parse_unix_nanos(raw.get("startTimeUnixNano"), "startTimeUnixNano")
    end_raw = raw.get("endTimeUnixNano")
    end_time = None if end_raw in (None, "", "0", 0) else parse_unix_nanos(end_raw, "endTimeUnixNano")
    events: list[SpanEvent] = []
    for raw_event in raw.get("events") or []:
        try:
            events.append(_parse_event(raw_event))
        except OtlpFormatError as exc:
            # A bad event loses only itself: the span and its other events are still good evidence.
            rejected[exc.reason] += 1
        except (TypeError, ValueError, OverflowError, RecursionError):
            rejected["malformed_event"] += 1
    try:
        return SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_span_id,
            name=_text(raw.get("name") or ""),
            kind=_parse_kind(raw.get("kind")),
            start_time=start_time,
            end_time=end_time,
            attributes=parse_attributes(raw.get("attributes")),
            events=tuple(events),
            resource=resource,
            status=_parse_status(raw.get("status")),
            scope=scope_name,
        )
    except ValidationError as exc:
        raise OtlpFormatError("malformed_span", f"span {span_id}: {exc.errors()[0]['msg']}") from exc


def _parse_event(raw: Any) -> SpanEvent:
    if not isinstance(raw, dict):
        raise OtlpFormatError("malformed_event", "an event is not an object")
    return SpanEvent(
        name=_text(raw.get("name") or ""),
        time=parse_unix_nanos(raw.get("timeUnixNano"), "event timeUnixNano", reason="invalid_event_time"),
        attributes=parse_attributes(raw.get("attributes")),
    )


def parse_id(value: Any, size: int, field: str) -> str:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex.

    OTLP/JSON writes ids in hex; some protobuf-JSON encoders write base64 instead, which is accepted too.
    """
    reason = f"invalid_{'trace' if size == 16 else 'span'}_id"
    if field == "parentSpanId":
        reason = "invalid_parent_span_id"
    if not isinstance(value, str) or not value:
        raise OtlpFormatError(reason.replace("invalid", "missing"), f"{field} is missing")
    text = value.strip().lower()
    if len(text) == size * 2 and all(c in "0123456789abcdef" for c in text):
        if text == "0" * (size * 2):
            raise OtlpFormatError(reason, f"{field} is all zeros")
        return text
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) == size and any(decoded):
        return decoded.hex()
    raise OtlpFormatError(reason, f"{field} {value[:40]!r} is not {size * 2} hex digits")


def parse_unix_nanos(value: Any, field: str, reason: str = "invalid_time") -> datetime:
    """A ``*TimeUnixNano`` value (a decimal string, or an int from lenient encoders and protobuf) as aware UTC."""
    if type(value) is int and 0 < value <= _MAX_UNIX_NANOS:  # protobuf's fixed64, most times: checked at once
        return _EPOCH + timedelta(microseconds=value // 1000)
    if isinstance(value, bool) or value is None or value == "":
        raise OtlpFormatError(reason, f"{field} is missing")
    try:
        nanos = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, which json.loads accepts
        raise OtlpFormatError(reason, f"{field} {str(value)[:40]!r} is not an integer") from None
    if nanos <= 0 or nanos > _MAX_UNIX_NANOS:
        raise OtlpFormatError(reason, f"{field} {nanos} is out of range")
    return _EPOCH + timedelta(microseconds=nanos // 1000)


def _parse_kind(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return _SPAN_KINDS.get(value, "internal")
    if isinstance(value, str):
        return _SPAN_KIND_NAMES.get(value.upper(), "internal")
    return "internal"


def _parse_status(value: Any) -> str:
    code = value.get("code") if isinstance(value, dict) else None
    if isinstance(code, int) and not isinstance(code, bool):
        return _STATUS_CODES.get(code, "unset")
    if isinstance(code, str):
        return _STATUS_NAMES.get(code.upper(), "unset")
    return "unset"


def parse_attributes(raw: Any, depth: int = 0) -> dict[str, Any]:
    """``[{key, value: AnyValue}]`` as a dict (nested ``depth`` deep); a malformed entry is dropped, a non-list
    rejects the span."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise OtlpFormatError("malformed_attributes", "attributes is not a list")
    if depth >= MAX_NESTING:
        raise OtlpFormatError("malformed_attributes", f"values nested deeper than {MAX_NESTING} levels")
    result: dict[str, Any] = {}
    for entry in raw:
        if isinstance(entry, dict) and isinstance(entry.get("key"), str):
            result[replace_lone_surrogates(entry["key"])] = parse_any_value(entry.get("value"), depth + 1)
    return result


def parse_any_value(value: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as a plain value (bytes stay base64 text, so records stay JSON-serialisable).

    Values nested ``MAX_NESTING`` deep are refused: a record holding one could not be serialised again.
    """
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return replace_lone_surrogates_in(value["stringValue"], depth)
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _int_value(value["intValue"])
    if "doubleValue" in value:
        return _double_value(value["doubleValue"])
    if "arrayValue" in value:
        array = value["arrayValue"] or {}
        if depth >= MAX_NESTING:
            raise OtlpFormatError("malformed_attributes", f"values nested deeper than {MAX_NESTING} levels")
        return [parse_any_value(v, depth + 1) for v in array.get("values") or []] if isinstance(array, dict) else []
    if "kvlistValue" in value:
        kvlist = value["kvlistValue"] or {}
        return parse_attributes(kvlist.get("values"), depth) if isinstance(kvlist, dict) else {}
    if "bytesValue" in value:
        return replace_lone_surrogates_in(value["bytesValue"], depth)
    return None


def _int_value(value: Any) -> int | str:
    # An intValue that is no integer (1e400 reads as inf) stays as its text, like any value we cannot type.
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return _text(value)


def _double_value(value: Any) -> float | str:
    # proto3 JSON spells non-finite doubles as the strings "NaN", "Infinity", "-Infinity".
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return _text(value)


def _text(value: Any) -> str:
    """``str(value)``, encodable as UTF-8."""
    return replace_lone_surrogates(str(value))


# ---- writing ------------------------------------------------------------------------------------------


def spans_to_otlp_document(spans: Iterable[SpanRecord]) -> dict[str, Any]:
    """The ``{"resourceSpans": [...]}`` object holding ``spans`` (one resourceSpans per distinct resource).

    Event rows (``kind == "event"``, as the App Insights source yields them) are written back as events of
    their parent span; an event row whose parent is not among ``spans`` is an error: OTLP has no place for it.
    """
    records = list(spans)
    event_rows: dict[str, list[SpanEvent]] = {}
    real: list[SpanRecord] = []
    for record in records:
        if record.kind == "event":
            parent = record.parent_span_id or ""
            event_rows.setdefault(parent, []).append(
                SpanEvent(name=record.name, time=record.start_time, attributes=record.attributes))
        else:
            real.append(record)
    known = {span.span_id for span in real}
    missing = sorted(set(event_rows) - known)
    if missing:
        raise ValueError(f"event rows name parent span {missing[0]!r}, which is not among the spans given")
    groups: dict[str, tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]] = {}
    for span in real:
        key = json.dumps(span.resource, sort_keys=True, default=str)
        extra = tuple(event_rows.get(span.span_id, ()))
        scopes = groups.setdefault(key, (span.resource, {}))[1]
        scopes.setdefault(span.scope or SCOPE_NAME, []).append(_span_to_json(span, extra))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes_to_json(resource)},
                "scopeSpans": [{"scope": {"name": scope}, "spans": span_list} for scope, span_list in scopes.items()],
            }
            for resource, scopes in groups.values()
        ]
    }


def _span_to_json(span: SpanRecord, extra_events: tuple[SpanEvent, ...]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "parentSpanId": span.parent_span_id or "",
        "name": span.name,
        "kind": _KIND_NUMBERS.get(span.kind, 1),
        "startTimeUnixNano": str(unix_nanos(span.start_time)),
        "endTimeUnixNano": str(unix_nanos(span.end_time)) if span.end_time else "0",
        "attributes": attributes_to_json(span.attributes),
        "status": {"code": _STATUS_NUMBERS.get(span.status, 0)},
    }
    events = sorted((*span.events, *extra_events), key=lambda e: e.time)
    if events:
        result["events"] = [
            {
                "timeUnixNano": str(unix_nanos(e.time)),
                "name": e.name,
                "attributes": attributes_to_json(e.attributes),
            }
            for e in events
        ]
    return result


def unix_nanos(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def attributes_to_json(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value_to_json(value)} for key, value in attributes.items()]


def any_value_to_json(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value if math.isfinite(value) else _NON_FINITE[str(value)]}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": attributes_to_json({str(k): v for k, v in value.items()})}}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value_to_json(v) for v in value]}}
    return {"stringValue": str(value)}
