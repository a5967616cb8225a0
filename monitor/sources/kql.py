"""The KQL the App Insights source runs, built from settings alone so an operator can paste it in the portal.

GenAI spans are selected on ``customDimensions["gen_ai.operation.name"]``, not on the dependency ``type``: the
Azure Monitor exporter writes ``type = "N/A"`` for a GenAI CLIENT span unless the deprecated ``gen_ai.system``
attribute is present. Span events (the legacy ``gen_ai.user.message`` ... format, and Azure's
``gen_ai.event.content`` variant) live in the traces table as rows whose ``message`` is the event name.

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
    """The ``timespan`` sent with the query: wider than the window when the agent lookup looks back."""
    if settings.agents:
        return window.start - timedelta(seconds=settings.overlap_seconds), window.end
    return window.start, window.end


def build_query(settings: AppInsightsSourceSettings, schema: TableSchema, window: Window) -> str:
    """The query for one window: GenAI spans and their span events, one row per span or event."""
    s = schema
    props = s.properties
    lines = [
        f"// rubric-monitor: GenAI spans and span events, {s.name} tables, window {window}",
        f"let window_start = {kql_datetime(window.start)};",
        f"let window_end = {kql_datetime(window.end)};",
        f"let gen_ai_spans = union {s.dependencies}, {s.requests}",
        f'    | where isnotempty(tostring({props}["gen_ai.operation.name"]))'
        + (f"\n    | where ({settings.extra_filter})" if settings.extra_filter else "") + ";",
    ]
    in_agent_traces = ""
    if settings.agents:
        matches = "\n        or ".join(f'tostring({props}["{key}"]) in (agents)' for key in AGENT_KEYS)
        lines += [
            f"let agents = dynamic([{', '.join(kql_string(a) for a in settings.agents)}]);",
            "// traces with a span of a configured agent (the timespan reaches back overlap_seconds)",
            "let agent_traces = gen_ai_spans",
            f"    | where {matches}",
            f"    | distinct {s.operation_id};",
        ]
        in_agent_traces = f"\n    | where {s.operation_id} in (agent_traces)"
    lines += [
        "let spans = gen_ai_spans",
        f"    | where {s.time} >= window_start and {s.time} < window_end{in_agent_traces};",
        f"let span_events = {s.traces}",
        f"    | where {s.time} >= window_start and {s.time} < window_end",
        f"    | where {s.message} startswith {kql_string(EVENT_NAME_PREFIX)}{in_agent_traces};",
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
