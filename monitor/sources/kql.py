"""The KQL the App Insights source runs, built from settings alone so an operator can paste it in the portal.

GenAI spans are selected on ``customDimensions["gen_ai.operation.name"]``, not on the dependency ``type``: the
Azure Monitor exporter writes ``type = "N/A"`` for a GenAI CLIENT span unless the deprecated ``gen_ai.system``
attribute is present. Spans that name a conversation without being a GenAI operation (the application's own
request or session span carrying ``gen_ai.conversation.id``, or ``microsoft.gen_ai.main_agent.conversation_id``)
come along, since they group a session's traces, and so do the model calls of conventions that do not set the
operation name (OpenInference ``openinference.span.kind``, OpenLLMetry 0.4x ``llm.request.type``).

The traces table holds span events (the legacy ``gen_ai.user.message`` ... format, and Azure's
``gen_ai.event.content`` variant: ``message`` is the event name) and log records (``message`` is the body, or
``"n/a"``; the exporter drops the event name but keeps the ``gen_ai.*`` attributes). Both are taken only from the
operations (traces) of the GenAI spans, looked up ``overlap_seconds`` before the window so a record whose span
started in the previous window still finds it, and only rows with a ``gen_ai.`` name or attribute: the
application's other logs are never scanned beyond those operations.

With agents configured, a trace is kept when any of its GenAI spans names one of them (``gen_ai.agent.name``,
``gen_ai.agent.id`` or the exporter's propagated ``microsoft.gen_ai.main_agent.*``), so child ``chat`` and
``execute_tool`` spans that carry no agent attribute come along. That lookup reaches ``overlap_seconds``
before the window, which is why the query's timespan then starts earlier than the rows it returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from monitor.settings import AppInsightsSourceSettings

AGENT_KEYS = (
    "gen_ai.agent.name",
    "gen_ai.agent.id",
    "microsoft.gen_ai.main_agent.name",
    "microsoft.gen_ai.main_agent.id",
)
EVENT_NAME_PREFIX = "gen_ai."
SPAN_MARKER_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.conversation.id",
    "microsoft.gen_ai.main_agent.conversation_id",
    "gen_ai.thread.id",
    "openinference.span.kind",
    "llm.request.type",
)
"""A span (dependency or request row) is read when one of these properties is set."""


@dataclass(frozen=True)
class TableSchema:
    """Table and column names of one layout: classic App Insights or the Log Analytics workspace."""

    name: Literal["classic", "workspace"]
    dependencies: str
    requests: str
    traces: str
    time: str
    item_type: str
    operation_id: str
    span_id: str
    parent_id: str
    span_name: str
    message: str
    duration_ms: str
    success: str
    dependency_type: str
    properties: str
    role_name: str
    item_types: dict[str, str]
    """Value of ``item_type`` → ``request`` / ``dependency`` / ``trace``."""

    @property
    def tables(self) -> tuple[str, str, str]:
        return self.dependencies, self.requests, self.traces

    @property
    def projection(self) -> tuple[str, ...]:
        return (
            self.time, self.item_type, self.operation_id, self.span_id, self.parent_id, self.span_name,
            self.message, self.duration_ms, self.success, self.dependency_type, self.properties,
            self.role_name,
        )


CLASSIC = TableSchema(
    name="classic",
    dependencies="dependencies",
    requests="requests",
    traces="traces",
    time="timestamp",
    item_type="itemType",
    operation_id="operation_Id",
    span_id="id",
    parent_id="operation_ParentId",
    span_name="name",
    message="message",
    duration_ms="duration",
    success="success",
    dependency_type="type",
    properties="customDimensions",
    role_name="cloud_RoleName",
    item_types={"request": "request", "dependency": "dependency", "trace": "trace"},
)

WORKSPACE = TableSchema(
    name="workspace",
    dependencies="AppDependencies",
    requests="AppRequests",
    traces="AppTraces",
    time="TimeGenerated",
    item_type="Type",
    operation_id="OperationId",
    span_id="Id",
    parent_id="ParentId",
    span_name="Name",
    message="Message",
    duration_ms="DurationMs",
    success="Success",
    dependency_type="DependencyType",
    properties="Properties",
    role_name="AppRoleName",
    item_types={"AppRequests": "request", "AppDependencies": "dependency", "AppTraces": "trace"},
)


@dataclass(frozen=True)
class Window:
    """Rows whose time is in ``[start, end)``."""

    start: datetime
    end: datetime

    def halves(self) -> tuple[Window, Window]:
        middle = self.start + (self.end - self.start) / 2
        return Window(self.start, middle), Window(middle, self.end)

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def __str__(self) -> str:
        return f"[{iso(self.start)}, {iso(self.end)})"


def schema_for(settings: AppInsightsSourceSettings) -> TableSchema:
    """A resource id is queried with classic names, a workspace id with workspace names."""
    return CLASSIC if settings.resource_id else WORKSPACE


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def kql_datetime(moment: datetime) -> str:
    return f"datetime({iso(moment)})"


def kql_string(value: str) -> str:
    # A JSON string is a valid KQL double-quoted literal (same escapes).
    return json.dumps(value)


def query_timespan(settings: AppInsightsSourceSettings, window: Window) -> tuple[datetime, datetime]:
    """The ``timespan`` sent with the query: wider than the window, since the lookup of the window's GenAI
    operations (and of the configured agents' traces) reaches ``overlap_seconds`` back."""
    return window.start - timedelta(seconds=settings.overlap_seconds), window.end


def build_query(settings: AppInsightsSourceSettings, schema: TableSchema, window: Window) -> str:
    """The query for one window: GenAI spans and their span events, one row per span or event."""
    s = schema
    props = s.properties
    markers = "\n        or ".join(f'isnotempty(tostring({props}["{key}"]))' for key in SPAN_MARKER_KEYS)
    lookup_start = window.start - timedelta(seconds=settings.overlap_seconds)
    lines = [
        f"// rubric-monitor: GenAI spans, span events and log records, {s.name} tables, window {window}",
        f"let window_start = {kql_datetime(window.start)};",
        f"let window_end = {kql_datetime(window.end)};",
        f"let lookup_start = {kql_datetime(lookup_start)};",
        f"let gen_ai_spans = union {s.dependencies}, {s.requests}",
        f"    | where {s.time} >= lookup_start and {s.time} < window_end",
        f"    | where {markers}"
        + (f"\n    | where ({settings.extra_filter})" if settings.extra_filter else "") + ";",
    ]
    if settings.agents:
        # The resource's service.name (cloud_RoleName) names the agent of producers that set no agent name.
        matches = "\n        or ".join([*(f'tostring({props}["{key}"]) in (agents)' for key in AGENT_KEYS),
                                        f"{s.role_name} in (agents)"])
        lines += [
            f"let agents = dynamic([{', '.join(kql_string(a) for a in settings.agents)}]);",
            "// traces with a span of a configured agent (looked up from overlap_seconds before the window)",
            "let gen_ai_operations = gen_ai_spans",
            f"    | where {matches}",
            f"    | distinct {s.operation_id};",
        ]
        in_operations = f"\n    | where {s.operation_id} in (gen_ai_operations)"
    else:
        lines += [
            "// traces with a GenAI span (looked up from overlap_seconds before the window)",
            f"let gen_ai_operations = gen_ai_spans | distinct {s.operation_id};",
        ]
        in_operations = ""
    lines += [
        "let spans = gen_ai_spans",
        f"    | where {s.time} >= window_start and {s.time} < window_end{in_operations};",
        "// span events and log records of those traces only, with a gen_ai. name or attribute",
        f"let span_events = {s.traces}",
        f"    | where {s.time} >= window_start and {s.time} < window_end",
        f"    | where {s.operation_id} in (gen_ai_operations)",
        f"    | where {s.message} startswith {kql_string(EVENT_NAME_PREFIX)}"
        f" or tostring({props}) contains {kql_string(chr(34) + EVENT_NAME_PREFIX)};",
        "union spans, span_events",
        f"| project {', '.join(s.projection)}",
    ]
    return "\n".join(lines)


def first_window(settings: AppInsightsSourceSettings, now: datetime) -> Window:
    """The first slice a daemon with no stored watermark reads."""
    end = now - timedelta(seconds=settings.ingestion_delay_seconds)
    start = end - timedelta(seconds=settings.initial_lookback_seconds)
    return Window(start, min(end, start + timedelta(seconds=settings.max_window_seconds)))


def explain(settings: AppInsightsSourceSettings, now: datetime) -> str:
    """What ``rubric-monitor check --explain`` prints: where the query goes, its window, and the KQL."""
    schema = schema_for(settings)
    window = first_window(settings, now)
    timespan = query_timespan(settings, window)
    target = (f"Application Insights resource {settings.resource_id}" if settings.resource_id
              else f"Log Analytics workspace {settings.workspace_id}")
    header = [
        f"// target: {target} via {settings.endpoint} ({', '.join(schema.tables)})",
        f"// first window: {window}; each later cycle reads [watermark - {settings.overlap_seconds:g}s, "
        f"now - {settings.ingestion_delay_seconds:g}s) in slices of at most {settings.max_window_seconds:g}s",
        f"// timespan sent with the query: {iso(timespan[0])}/{iso(timespan[1])} "
        "(set the portal's time range to cover it)",
    ]
    return "\n".join(header) + "\n" + build_query(settings, schema, window)
