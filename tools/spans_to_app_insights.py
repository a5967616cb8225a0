"""Turn ``SpanRecord``s into Application Insights rows the way the Azure Monitor exporter and ingestion do.

This replicates ``azure-monitor-opentelemetry-exporter`` 1.0.0b58 (``export/trace/_exporter.py``,
``_utils.py``) for the parts that reach a GenAI query: which table a span lands in, the dependency ``type``,
ids as lowercase hex, ``duration`` rounded to whole milliseconds, ``success`` from the span status, and
``customDimensions`` as the string-to-string map the exporter builds (standard OTel attributes dropped, keys
over 150 characters dropped, values cut at 8 KiB, or 256 KiB for the GenAI message attributes). Span events
become ``traces`` rows (``exceptions`` for an event named ``exception``). ``tests/test_app_insights_rows.py``
checks this mapping against the real exporter. Not replicated: the HTTP, database and messaging refinements
of ``name``, ``target`` and ``data`` (GenAI spans carry no ``http.*``/``db.*`` attributes), span links, and
custom measurements.

The exporter's own output can be turned into rows too: ``envelopes_to_rows`` takes the envelopes it posted to
``/v2.1/track`` (as ``tests/data/producers/*.envelopes.jsonl`` hold them) and lays them out the same way, by the
documented mapping (``RequestData`` → ``requests``, ``RemoteDependencyData`` → ``dependencies``,
``MessageData`` → ``traces``, ``ExceptionData`` → ``exceptions``; ``ai.operation.id`` → ``operation_Id``,
``ai.operation.parentId`` → ``operation_ParentId``, ``properties`` → ``customDimensions`` ...). Metrics and
custom events land in tables no GenAI query reads and are left out.

Rows are plain dicts keyed by column name, with ``datetime`` values for ``datetime`` columns and dicts for
``dynamic`` ones; a query server encodes them for the wire. Both layouts are produced: the classic
Application Insights tables (``dependencies``, ``requests``, ``traces``) and the workspace tables
(``AppDependencies``, ``AppRequests``, ``AppTraces``).

    python -m tools.spans_to_app_insights spans.jsonl --schema workspace > rows.json
    python -m tools.spans_to_app_insights run.envelopes.jsonl --envelopes --schema classic > rows.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from monitor.models import SpanEvent, SpanRecord

Schema = Literal["classic", "workspace"]
Column = tuple[str, str]

EXPORTER_VERSION = "1.0.0b58"
PROPERTY_MAX_CHARS = 8 * 1024
GEN_AI_PROPERTY_MAX_CHARS = 256 * 1024
PROPERTY_KEY_MAX_CHARS = 150
NAME_MAX_CHARS = 1024
MESSAGE_MAX_CHARS = 32768

# The exporter keeps these attributes up to 256 KiB instead of 8 KiB (``_constants._GEN_AI_ATTRIBUTES``).
GEN_AI_LARGE_ATTRIBUTES = frozenset({
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.evaluation.explanation",
})

# Attributes the exporter maps to envelope fields instead of customDimensions (``_is_standard_attribute``).
_STANDARD_PREFIXES = (
    "http.", "db.", "message.", "messaging.", "rpc.", "enduser.", "net.", "peer.", "exception.", "thread.",
    "fass.", "code.",
)
_STANDARD_KEYS = frozenset({
    "session.id", "_MS.sampleRate", "microsoft.custom_measurements",
    "client.address", "client.port", "server.address", "server.port", "url.full", "url.path", "url.query",
    "url.scheme", "url.template", "error.type", "network.local.address", "network.local.port",
    "network.protocol.name", "network.peer.address", "network.peer.port", "network.protocol.version",
    "network.transport", "user_agent.original", "user_agent.synthetic.type",
})

_COMMON_CLASSIC: list[Column] = [
    ("operation_Name", "string"), ("operation_Id", "string"), ("operation_ParentId", "string"),
    ("session_Id", "string"), ("cloud_RoleName", "string"), ("cloud_RoleInstance", "string"),
    ("appId", "string"), ("appName", "string"), ("iKey", "string"), ("sdkVersion", "string"),
    ("itemId", "string"), ("itemCount", "int"),
]
_COMMON_WORKSPACE: list[Column] = [
    ("OperationName", "string"), ("OperationId", "string"), ("ParentId", "string"), ("SessionId", "string"),
    ("AppRoleName", "string"), ("AppRoleInstance", "string"), ("ResourceGUID", "string"), ("IKey", "string"),
    ("SDKVersion", "string"), ("ItemCount", "int"), ("SourceSystem", "string"), ("Type", "string"),
    ("_ResourceId", "string"),
]

TABLE_COLUMNS: dict[str, list[Column]] = {
    "dependencies": [
        ("timestamp", "datetime"), ("id", "string"), ("target", "string"), ("type", "string"),
        ("name", "string"), ("data", "string"), ("success", "string"), ("resultCode", "string"),
        ("duration", "real"),
        ("performanceBucket", "string"), ("itemType", "string"), ("customDimensions", "dynamic"),
        ("customMeasurements", "dynamic"), *_COMMON_CLASSIC,
    ],
    "requests": [
        ("timestamp", "datetime"), ("id", "string"), ("source", "string"), ("name", "string"),
        ("url", "string"), ("success", "string"), ("resultCode", "string"), ("duration", "real"),
        ("performanceBucket", "string"), ("itemType", "string"), ("customDimensions", "dynamic"),
        ("customMeasurements", "dynamic"), *_COMMON_CLASSIC,
    ],
    "traces": [
        ("timestamp", "datetime"), ("message", "string"), ("severityLevel", "int"), ("itemType", "string"),
        ("customDimensions", "dynamic"), ("customMeasurements", "dynamic"), *_COMMON_CLASSIC,
    ],
    "exceptions": [
        ("timestamp", "datetime"), ("problemId", "string"), ("type", "string"), ("outerMessage", "string"),
        ("itemType", "string"), ("customDimensions", "dynamic"), *_COMMON_CLASSIC,
    ],
    "AppDependencies": [
        ("TenantId", "string"), ("TimeGenerated", "datetime"), ("Id", "string"), ("Target", "string"),
        ("DependencyType", "string"), ("Name", "string"), ("Data", "string"), ("Success", "bool"),
        ("ResultCode", "string"), ("DurationMs", "real"), ("PerformanceBucket", "string"),
        ("Properties", "dynamic"), ("Measurements", "dynamic"), *_COMMON_WORKSPACE,
    ],
    "AppRequests": [
        ("TenantId", "string"), ("TimeGenerated", "datetime"), ("Id", "string"), ("Source", "string"),
        ("Name", "string"), ("Url", "string"), ("Success", "bool"), ("ResultCode", "string"),
        ("DurationMs", "real"), ("PerformanceBucket", "string"), ("Properties", "dynamic"),
        ("Measurements", "dynamic"), *_COMMON_WORKSPACE,
    ],
    "AppTraces": [
        ("TenantId", "string"), ("TimeGenerated", "datetime"), ("Message", "string"),
        ("SeverityLevel", "int"), ("Properties", "dynamic"), ("Measurements", "dynamic"), *_COMMON_WORKSPACE,
    ],
    "AppExceptions": [
        ("TenantId", "string"), ("TimeGenerated", "datetime"), ("ProblemId", "string"),
        ("ExceptionType", "string"), ("OuterMessage", "string"), ("Properties", "dynamic"),
        *_COMMON_WORKSPACE,
    ],
}

TABLE_NAMES: dict[Schema, dict[str, str]] = {
    "classic": {
        "request": "requests", "dependency": "dependencies", "trace": "traces", "exception": "exceptions",
    },
    "workspace": {
        "request": "AppRequests", "dependency": "AppDependencies", "trace": "AppTraces",
        "exception": "AppExceptions",
    },
}

_PERFORMANCE_BUCKETS = (
    (250, "<250ms"), (500, "250ms-500ms"), (1000, "500ms-1sec"), (3000, "1sec-3sec"), (7000, "3sec-7sec"),
    (15000, "7sec-15sec"), (30000, "15sec-30sec"), (60000, "30sec-1min"), (120000, "1min-2min"),
    (300000, "2min-5min"),
)


@dataclass(frozen=True)
class Ingestion:
    """Where the telemetry was ingested: the identity columns every row carries."""

    app_id: str = "5e1b5c3a-0000-4000-8000-00000000a11e"
    app_name: str = "rubric-monitor-test"
    ikey: str = "00000000-0000-4000-8000-0000000000aa"
    tenant_id: str = "00000000-0000-4000-8000-0000000000bb"
    resource_id: str = (
        "/subscriptions/00000000-0000-4000-8000-0000000000cc/resourcegroups/rg-agents/providers/"
        "microsoft.insights/components/rubric-monitor-test"
    )
    sdk_version: str = f"uwm:py311:otel1.45.2:ext{EXPORTER_VERSION}"


@dataclass(frozen=True)
class Envelope:
    """The schema-neutral content of one telemetry item, as the exporter fills it."""

    item: Literal["request", "dependency", "trace", "exception"]
    time: datetime
    operation_id: str
    parent_id: str
    properties: dict[str, str]
    id: str = ""
    name: str = ""
    operation_name: str = ""
    duration_ms: float = 0.0
    success: bool = True
    result_code: str = "0"
    type: str = ""
    target: str = ""
    message: str = ""
    role_name: str = ""
    role_instance: str = ""
    session_id: str = ""


@dataclass
class AppInsightsRows:
    """Rows per table name, in one layout."""

    schema: Schema
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.tables.setdefault(table, []).append(row)

    @property
    def count(self) -> int:
        return sum(len(rows) for rows in self.tables.values())


# --- the exporter's mapping ---------------------------------------------------------------------------------


def is_standard_attribute(key: str) -> bool:
    return key.startswith(_STANDARD_PREFIXES) or key in _STANDARD_KEYS


def property_text(value: Any) -> str:
    """``str(value)`` as the exporter applies it to an OTel attribute value.

    The OTel SDK stores sequences as tuples, so a list attribute arrives as ``"('stop',)"``. Dicts cannot be
    OTel attribute values; a record that carries one (structured OTLP JSON) is written as JSON, the closest a
    producer could have sent.
    """
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return str(tuple(value))
    return str(value)


def custom_properties(attributes: dict[str, Any]) -> dict[str, str]:
    """``_utils._filter_custom_properties`` with the trace exporter's standard-attribute filter."""
    kept: dict[str, str] = {}
    for key, value in attributes.items():
        if is_standard_attribute(key) or not key or len(key) > PROPERTY_KEY_MAX_CHARS or value is None:
            continue
        limit = GEN_AI_PROPERTY_MAX_CHARS if key in GEN_AI_LARGE_ATTRIBUTES else PROPERTY_MAX_CHARS
        kept[key] = property_text(value)[:limit]
    return kept


def duration_ms(span: SpanRecord) -> float:
    """Whole milliseconds, rounded half up, as ``ns_to_duration`` writes them."""
    if span.end_time is None:
        return 0.0
    nanos = (span.end_time - span.start_time) // timedelta(microseconds=1) * 1000
    return float(max(0, (nanos + 500_000) // 1_000_000))


def span_kind(span: SpanRecord) -> str:
    return span.kind.lower().removeprefix("span_kind_")


def dependency_type_and_target(span: SpanRecord) -> tuple[str, str]:
    """The dependency ``type`` and ``target`` for the attributes GenAI spans carry."""
    attrs = span.attributes
    kind = span_kind(span)
    system = attrs.get("gen_ai.system")
    target = _peer_target(attrs)
    if kind == "internal":
        if system:
            return f"GenAI | {system}", target
        namespace = attrs.get("az.namespace")
        return ("InProc | " + str(namespace) if namespace else "InProc"), target
    if kind == "producer":
        messaging = attrs.get("messaging.system")
        return ("Queue Message | " + str(messaging) if messaging else "Queue Message"), target
    if attrs.get("az.namespace"):
        kind_type = str(attrs["az.namespace"])
    elif "http.request.method" in attrs or "http.method" in attrs:
        kind_type = "HTTP"
    elif attrs.get("db.system.name") or attrs.get("db.system"):
        kind_type = str(attrs.get("db.system.name") or attrs.get("db.system"))
    elif "messaging.system" in attrs:
        kind_type = str(attrs["messaging.system"])
    elif "rpc.system" in attrs:
        kind_type = "rpc.system"  # sic: the exporter writes the attribute name, not its value
    else:
        kind_type = "N/A"
    if system:
        kind_type = f"GenAI | {system}"
        target = target or str(system)
    return kind_type, target


def _peer_target(attrs: dict[str, Any]) -> str:
    if "peer.service" in attrs:
        return str(attrs["peer.service"])
    host = attrs.get("net.peer.name") or attrs.get("net.peer.ip") or ""
    port = attrs.get("net.peer.port")
    if host and port is not None and int(port) not in (80, 443):
        return f"{host}:{port}"
    return str(host)


def cloud_role(resource: dict[str, Any]) -> str:
    name = resource.get("service.name")
    if not name:
        return ""
    namespace = resource.get("service.namespace")
    return f"{namespace}.{name}" if namespace else str(name)


def span_envelope(span: SpanRecord) -> Envelope:
    kind = span_kind(span)
    is_request = kind in ("server", "consumer")
    dep_type, target = ("", "") if is_request else dependency_type_and_target(span)
    session = span.attributes.get("session.id")
    return Envelope(
        item="request" if is_request else "dependency",
        time=span.start_time,
        operation_id=span.trace_id.lower(),
        parent_id=(span.parent_span_id or "").lower(),
        id=span.span_id.lower(),
        name=span.name[:NAME_MAX_CHARS],
        operation_name=span.name,
        duration_ms=duration_ms(span),
        success=span.status.lower().removeprefix("status_code_") != "error",
        type=dep_type[:NAME_MAX_CHARS],
        target=target[:NAME_MAX_CHARS],
        properties=custom_properties(span.attributes),
        role_name=cloud_role(span.resource),
        role_instance=str(span.resource.get("service.instance.id", "")),
        session_id=session if isinstance(session, str) else "",
    )


def event_envelope(span: SpanRecord, event: SpanEvent) -> Envelope:
    """A span event becomes a message (or exception) item whose parent is the span."""
    session = event.attributes.get("session.id") or span.attributes.get("session.id")
    return Envelope(
        item="exception" if event.name == "exception" else "trace",
        time=event.time,
        operation_id=span.trace_id.lower(),
        parent_id=span.span_id.lower(),
        message=event.name[:MESSAGE_MAX_CHARS],
        properties=custom_properties(event.attributes),
        role_name=cloud_role(span.resource),
        role_instance=str(span.resource.get("service.instance.id", "")),
        session_id=session if isinstance(session, str) else "",
    )


def envelopes(spans: Iterable[SpanRecord]) -> Iterator[Envelope]:
    for span in spans:
        if span.kind == "event":
            raise ValueError(f"span {span.span_id}: kind 'event' records are read back from traces rows, "
                             "not written; pass the span that owns the event")
        yield span_envelope(span)
        for event in span.events:
            yield event_envelope(span, event)


# --- the two table layouts ----------------------------------------------------------------------------------


def performance_bucket(milliseconds: float) -> str:
    for bound, label in _PERFORMANCE_BUCKETS:
        if milliseconds < bound:
            return label
    return ">=5min"


def _item_id(envelope: Envelope) -> str:
    # Ingestion assigns a GUID per item; a name-based one keeps generated data reproducible.
    owner = envelope.id or envelope.parent_id
    key = f"{envelope.operation_id}/{owner}/{envelope.time.isoformat()}/{envelope.message}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, key))


def classic_row(envelope: Envelope, ingestion: Ingestion) -> dict[str, Any]:
    row: dict[str, Any] = {
        "timestamp": envelope.time,
        "itemType": envelope.item,
        "customDimensions": envelope.properties,
        "customMeasurements": None,
        "operation_Name": envelope.operation_name,
        "operation_Id": envelope.operation_id,
        "operation_ParentId": envelope.parent_id,
        "session_Id": envelope.session_id,
        "cloud_RoleName": envelope.role_name,
        "cloud_RoleInstance": envelope.role_instance,
        "appId": ingestion.app_id,
        "appName": ingestion.app_name,
        "iKey": ingestion.ikey,
        "sdkVersion": ingestion.sdk_version,
        "itemId": _item_id(envelope),
        "itemCount": 1,
    }
    if envelope.item in ("request", "dependency"):
        row.update({
            "id": envelope.id,
            "name": envelope.name,
            "success": "True" if envelope.success else "False",
            "resultCode": envelope.result_code,
            "duration": envelope.duration_ms,
            "performanceBucket": performance_bucket(envelope.duration_ms),
        })
        if envelope.item == "dependency":
            row.update({"target": envelope.target, "type": envelope.type, "data": ""})
        else:
            row.update({"source": "", "url": ""})
    elif envelope.item == "trace":
        row.update({"message": envelope.message, "severityLevel": None})
    else:
        row.update({"problemId": "Exception", "type": "Exception", "outerMessage": envelope.message})
    return row


_WORKSPACE_TYPES = {"request": "AppRequests", "dependency": "AppDependencies", "trace": "AppTraces",
                    "exception": "AppExceptions"}


def workspace_row(envelope: Envelope, ingestion: Ingestion) -> dict[str, Any]:
    row: dict[str, Any] = {
        "TenantId": ingestion.tenant_id,
        "TimeGenerated": envelope.time,
        "Properties": envelope.properties,
        "Measurements": None,
        "OperationName": envelope.operation_name,
        "OperationId": envelope.operation_id,
        "ParentId": envelope.parent_id,
        "SessionId": envelope.session_id,
        "AppRoleName": envelope.role_name,
        "AppRoleInstance": envelope.role_instance,
        "ResourceGUID": ingestion.app_id,
        "IKey": ingestion.ikey,
        "SDKVersion": ingestion.sdk_version,
        "ItemCount": 1,
        "SourceSystem": "Azure",
        "Type": _WORKSPACE_TYPES[envelope.item],
        "_ResourceId": ingestion.resource_id,
    }
    if envelope.item in ("request", "dependency"):
        row.update({
            "Id": envelope.id,
            "Name": envelope.name,
            "Success": envelope.success,
            "ResultCode": envelope.result_code,
            "DurationMs": envelope.duration_ms,
            "PerformanceBucket": performance_bucket(envelope.duration_ms),
        })
        if envelope.item == "dependency":
            row.update({"Target": envelope.target, "DependencyType": envelope.type, "Data": ""})
        else:
            row.update({"Source": "", "Url": ""})
    elif envelope.item == "trace":
        row.update({"Message": envelope.message, "SeverityLevel": None})
    else:
        row.update({"ProblemId": "Exception", "ExceptionType": "Exception", "OuterMessage": envelope.message})
    return row


def spans_to_rows(
    spans: Iterable[SpanRecord], schema: Schema = "classic", *, ingestion: Ingestion | None = None
) -> AppInsightsRows:
    """Every span and span event as the row the query API would return for it."""
    return _rows(envelopes(spans), schema, ingestion)


def _rows(items: Iterable[Envelope], schema: Schema, ingestion: Ingestion | None) -> AppInsightsRows:
    where = ingestion or Ingestion()
    to_row = classic_row if schema == "classic" else workspace_row
    result = AppInsightsRows(schema=schema)
    tables = TABLE_NAMES[schema]
    for envelope in items:
        result.add(tables[envelope.item], to_row(envelope, where))
    return result


# --- the exporter's envelopes -------------------------------------------------------------------------------

_ITEM_OF_BASE_TYPE: dict[str, Literal["request", "dependency", "trace", "exception"]] = {
    "RequestData": "request", "RemoteDependencyData": "dependency", "MessageData": "trace",
    "ExceptionData": "exception",
}
_DURATION = re.compile(r"(\d+)\.(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?")


def envelope_duration_ms(text: str) -> float:
    """``d.hh:mm:ss.fff``, the envelope's duration, in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not an envelope duration: {text!r}")
    days, hours, minutes, seconds, fraction = match.groups()
    total = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
    return total * 1000.0 + (float(f"0.{fraction}") * 1000.0 if fraction else 0.0)


def envelope_from_track(item: Mapping[str, Any]) -> Envelope | None:
    """One telemetry item the exporter posted to ``/v2.1/track``, as the ``Envelope`` its row is made of;
    ``None`` for items no GenAI query reads (metrics, custom events)."""
    data = item.get("data") or {}
    kind = _ITEM_OF_BASE_TYPE.get(str(data.get("baseType")))
    if kind is None:
        return None
    base = data.get("baseData") or {}
    tags = item.get("tags") or {}
    moment = datetime.fromisoformat(str(item["time"]).replace("Z", "+00:00")).astimezone(UTC)
    properties = {str(k): str(v) for k, v in (base.get("properties") or {}).items()}
    common: dict[str, Any] = {
        "item": kind,
        "time": moment,
        "operation_id": str(tags.get("ai.operation.id", "")),
        "parent_id": str(tags.get("ai.operation.parentId", "")),
        "operation_name": str(tags.get("ai.operation.name", "")),
        "properties": properties,
        "role_name": str(tags.get("ai.cloud.role", "")),
        "role_instance": str(tags.get("ai.cloud.roleInstance", "")),
        "session_id": str(tags.get("ai.session.id", "")),
    }
    if kind in ("request", "dependency"):
        return Envelope(
            **common, id=str(base.get("id", "")), name=str(base.get("name", ""))[:NAME_MAX_CHARS],
            duration_ms=envelope_duration_ms(str(base.get("duration", "0.00:00:00.000"))),
            success=bool(base.get("success", True)),
            result_code=str(base.get("responseCode" if kind == "request" else "resultCode", "0")),
            type=str(base.get("type", "")), target=str(base.get("target", "")),
        )
    if kind == "trace":
        return Envelope(**common, message=str(base.get("message", ""))[:MESSAGE_MAX_CHARS])
    exceptions = base.get("exceptions") or [{}]
    return Envelope(**common, message=str(exceptions[0].get("message", "")))


def envelopes_to_rows(
    items: Iterable[Mapping[str, Any]], schema: Schema = "classic", *, ingestion: Ingestion | None = None
) -> AppInsightsRows:
    """The rows ingestion makes of the exporter's envelopes, in one layout."""
    tracked = (envelope_from_track(item) for item in items)
    return _rows((envelope for envelope in tracked if envelope is not None), schema, ingestion)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("spans", type=Path,
                        help="JSON lines, one SpanRecord per line (SpanRecord.model_dump_json), or with "
                             "--envelopes one exporter envelope per line")
    parser.add_argument("--schema", choices=["classic", "workspace"], default="classic")
    parser.add_argument("--envelopes", action="store_true",
                        help="the input holds the Azure Monitor exporter's envelopes, not SpanRecords")
    args = parser.parse_args(argv)
    with args.spans.open(encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    if args.envelopes:
        rows = envelopes_to_rows((json.loads(line) for line in lines), args.schema)
    else:
        rows = spans_to_rows([SpanRecord.model_validate_json(line) for line in lines], args.schema)
    json.dump(rows.tables, sys.stdout, default=_json_default)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
