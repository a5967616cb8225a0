"""The same real-producer runs read through Application Insights give the same conversations as over OTLP (#20).

``tests/data/producers/<config>.envelopes.jsonl`` are the envelopes ``azure-monitor-opentelemetry-exporter``
1.0.0b58 posted for the very spans and log records of ``<config>.otlp.jsonl`` (the harness ran both exporters
side by side). ``tools.spans_to_app_insights.envelopes_to_rows`` lays them out as ingestion does (classic and
workspace tables); the fake Log Analytics API serves them to the real ``azure-monitor-query`` client inside the
App Insights source; the rows are stored as the daemon stores them and each ready conversation is assembled.
The assembled conversations (every message, tool call and result, the system instructions, the agent) must
equal those the OTLP file gives, configuration by configuration and in both table layouts.

The fake does not run KQL (it serves every row of the tables the query names in its window), so the rows put
in it are those the source's query keeps, applied here from the query text itself: the span markers it tests
(``isnotempty(tostring(Properties["..."]))``), and for ``traces`` rows the operation ids of those spans and a
``gen_ai.`` name or attribute. With the selection of the query before #20 (``gen_ai.operation.name`` alone), the
session span and the log records are lost: ``test_the_old_selection_lost_the_sessions`` shows what that did.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from monitor.formats.otlp import parse_otlp_line
from monitor.models import Conversation
from monitor.settings import AppInsightsSourceSettings
from monitor.sources.app_insights import AppInsightsSource
from monitor.sources.kql import CLASSIC, WORKSPACE, Window, build_query
from monitor.store.memory import InMemoryStore
from tests.app_insights_helpers import (
    RESOURCE_ID,
    TOKEN,
    TOKEN_ENV,
    conversation,
    fresh_metrics,
    load,
    run_cycle,
    serve_rows,
    settings_for,
)
from tests.fakes.log_analytics import FakeLogAnalytics
from tests.test_real_producers import DATA, KNOWN_PRODUCER_GAPS, assembled, stored_otlp_file
from tools.spans_to_app_insights import AppInsightsRows, Schema, envelopes_to_rows, spans_to_rows

CONFIGS = sorted(p.name.removesuffix(".envelopes.jsonl") for p in DATA.glob("*.envelopes.jsonl"))


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLogAnalytics]:
    with FakeLogAnalytics() as server:
        yield server


def _envelopes(config: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{config}.envelopes.jsonl").read_text("utf-8").splitlines()
            if line.strip()]


@functools.cache
def _over_otlp(config: str) -> tuple[list[Conversation], dict[str, int]]:
    store, _ = stored_otlp_file(DATA / f"{config}.otlp.jsonl")
    return assembled(store)


_MARKER = re.compile(r'isnotempty\(tostring\((?:Properties|customDimensions)\["([^"]+)"\]\)\)')


def query_selection(query: str, schema: Schema) -> tuple[tuple[str, ...], Callable[[AppInsightsRows], None]]:
    """The span markers ``query`` tests, and a function keeping in rows what its ``where`` clauses keep."""
    s = CLASSIC if schema == "classic" else WORKSPACE
    markers = tuple(_MARKER.findall(query.split("let gen_ai_operations", 1)[0]))
    assert markers, query
    assert f"| where {s.operation_id} in (gen_ai_operations)" in query.split("let span_events", 1)[1]
    assert f'| where {s.message} startswith "gen_ai." or tostring({s.properties}) contains "\\"gen_ai.";' in query

    def keep(rows: AppInsightsRows) -> None:
        spans = [row for table in (s.dependencies, s.requests) for row in rows.tables.get(table, [])
                 if any(row[s.properties].get(key) for key in markers)]
        operations = {row[s.operation_id] for row in spans}
        rows.tables[s.dependencies] = [r for r in spans if r[s.item_type] in ("dependency", "AppDependencies")]
        rows.tables[s.requests] = [r for r in spans if r[s.item_type] in ("request", "AppRequests")]
        rows.tables[s.traces] = [
            row for row in rows.tables.get(s.traces, [])
            if row[s.operation_id] in operations and (row[s.message].startswith("gen_ai.")
                                                       or '"gen_ai.' in json.dumps(row[s.properties]))]
    return markers, keep


def _through_app_insights(fake: FakeLogAnalytics, config: str, schema: Schema,
                          query: Callable[[AppInsightsSourceSettings, Window], str] | None = None,
                          items: list[dict[str, Any]] | None = None,
                          ) -> tuple[list[Conversation], dict[str, int]]:
    items = items if items is not None else _envelopes(config)
    times = [datetime.fromisoformat(i["time"].replace("Z", "+00:00")) for i in items]
    fake.clear()
    settings = settings_for(fake, schema, ingestion_delay_seconds=60, initial_lookback_seconds=3600,
                            max_window_seconds=3600)
    now = max(times) + timedelta(seconds=120)
    window = Window(now - timedelta(seconds=3660), now - timedelta(seconds=60))
    text = (query or (lambda st, w: build_query(st, CLASSIC if schema == "classic" else WORKSPACE, w)))(
        settings, window)
    _, keep = query_selection(text, schema)
    rows = envelopes_to_rows(items, schema)
    keep(rows)
    serve_rows(fake, rows, schema)
    source = AppInsightsSource(settings, fresh_metrics())
    store = InMemoryStore()
    try:
        cycle = run_cycle(source, store, now)
    finally:
        source.close()
    assert cycle.error is None, cycle.error
    return assembled(store, dict(cycle.rejected))


def _comparable(conversation: Conversation) -> dict[str, Any]:
    """What the judge is given of a conversation (ids and times differ between the two exporters' runs only in
    what the source assigns: the key of a conversation without an id, event record ids)."""
    return {
        "messages": [m.model_dump(mode="json") for m in conversation.messages],
        "system_instructions": conversation.system_instructions,
        "id": conversation.id,
        "agent": conversation.agent,
        "tools": [t.model_dump(mode="json") for t in conversation.tool_definitions],
        "tokens": (conversation.input_tokens, conversation.output_tokens),
    }


def _by_first_user(conversations: list[Conversation]) -> dict[str, dict[str, Any]]:
    return {next((m.text for m in c.messages if m.role == "user"), c.id): _comparable(c) for c in conversations}


@pytest.mark.parametrize("schema", ["classic", "workspace"])
@pytest.mark.parametrize("config", [c for c in CONFIGS if c not in KNOWN_PRODUCER_GAPS])
def test_app_insights_gives_the_conversations_otlp_gives(fake: FakeLogAnalytics, config: str,
                                                         schema: Schema) -> None:
    expected, otlp_rejected = _over_otlp(config)
    got, rejected = _through_app_insights(fake, config, schema)
    assert otlp_rejected == {} and rejected == {}, rejected
    assert len(got) == len(expected) == 2, [c.id for c in got]
    assert _by_first_user(got) == _by_first_user(expected)


def _query_before_issue_20(settings: AppInsightsSourceSettings, window: Window) -> str:
    """The span selection of the query before #20: GenAI operations only (log records were not read either)."""
    query = build_query(settings, WORKSPACE, window)
    head, tail = query.split("let gen_ai_operations", 1)
    head = re.sub(r"\n        or isnotempty[^\n]*", "", head)
    return head + "let gen_ai_operations" + tail


def test_the_old_selection_lost_the_sessions(fake: FakeLogAnalytics) -> None:
    """Agent Framework with one app span per session (the span carries gen_ai.conversation.id, not an operation):
    over OTLP the two sessions are conv-table-booker-1 and -2; the old selection dropped the session span, and
    each agent run became a conversation of its own trace (6 before sessions were joined by transcript; joined,
    still not under the app's conversation id). The query now selects it."""
    config = "agent-framework-plain-app"
    expected, _ = _over_otlp(config)
    assert sorted(c.id for c in expected) == ["conv-table-booker-1", "conv-table-booker-2"]
    old, _ = _through_app_insights(fake, config, "workspace", _query_before_issue_20)
    assert not {c.id for c in old} & {"conv-table-booker-1", "conv-table-booker-2"}
    now, _ = _through_app_insights(fake, config, "workspace")
    assert sorted(c.id for c in now) == ["conv-table-booker-1", "conv-table-booker-2"]


def test_the_query_reads_log_records_only_from_the_operations_of_genai_spans() -> None:
    settings = AppInsightsSourceSettings(resource_id=RESOURCE_ID, overlap_seconds=600)
    window = Window(datetime(2026, 12, 2, 2, tzinfo=UTC), datetime(2026, 12, 2, 3, tzinfo=UTC))
    for schema, layout in (("classic", CLASSIC), ("workspace", WORKSPACE)):
        query = build_query(settings, layout, window)
        markers, _ = query_selection(query, schema)
        assert {"gen_ai.operation.name", "gen_ai.conversation.id",
                "microsoft.gen_ai.main_agent.conversation_id"} <= set(markers)
        assert f"union {layout.dependencies}, {layout.requests}" in query
        # the operations are looked up overlap_seconds back, the rows returned are the window's
        assert "let lookup_start = datetime(2026-12-02T01:50:00.000000Z);" in query
        assert f"{layout.time} >= lookup_start and {layout.time} < window_end" in query
        events = query.split(f"let span_events = {layout.traces}", 1)[1]
        assert events.index(f"{layout.time} >= window_start") < events.index("in (gen_ai_operations)")


def _as_request(item: dict[str, Any]) -> dict[str, Any]:
    """The app's session span as a SERVER span (a web app's request) is exported: a ``RequestData`` item."""
    data = item["data"]
    if data["baseType"] != "RemoteDependencyData" or "gen_ai.conversation.id" not in data["baseData"]["properties"]:
        return item
    base = {k: v for k, v in data["baseData"].items() if k not in ("type", "target", "resultCode")}
    return {**item, "name": "Microsoft.ApplicationInsights.Request",
            "data": {"baseType": "RequestData", "baseData": {**base, "responseCode": "0"}}}


@pytest.mark.parametrize("schema", ["classic", "workspace"])
def test_a_request_row_carrying_the_conversation_id_groups_the_session(fake: FakeLogAnalytics,
                                                                       schema: Schema) -> None:
    """The issue's case: the app's request span carries gen_ai.conversation.id and no gen_ai.operation.name; it
    lands in requests / AppRequests, which the query reads, and groups each session's traces under its id."""
    config = "openai-v2-event-only-plain-app"
    items = [_as_request(item) for item in _envelopes(config)]
    assert sum(item["data"]["baseType"] == "RequestData" for item in items) == 2
    got, rejected = _through_app_insights(fake, config, schema, items=items)
    expected, _ = _over_otlp(config)
    assert rejected == {}
    assert sorted(c.id for c in got) == ["conv-table-booker-1", "conv-table-booker-2"]
    assert _by_first_user(got) == _by_first_user(expected)


def test_the_propagated_main_agent_conversation_id_groups_the_traces(fake: FakeLogAnalytics) -> None:
    """The Azure Monitor distro propagates ``microsoft.gen_ai.main_agent.conversation_id`` to child spans: two
    traces that carry only it (no gen_ai.conversation.id) are one conversation under that id."""
    start = datetime(2026, 9, 1, 11, tzinfo=UTC)
    spans = []
    for index in range(2):
        for span in conversation(index, start + timedelta(minutes=index), legacy_events=False):
            attributes = {k: v for k, v in span.attributes.items() if k != "gen_ai.conversation.id"}
            attributes["microsoft.gen_ai.main_agent.conversation_id"] = "conv_main_agent_7"
            spans.append(span.model_copy(update={"attributes": attributes}))
    fake.clear()
    load(fake, spans, "classic")
    source = AppInsightsSource(settings_for(fake, "classic"), fresh_metrics())
    store = InMemoryStore()
    try:
        cycle = run_cycle(source, store, datetime(2026, 9, 1, 12, tzinfo=UTC))
    finally:
        source.close()
    assert cycle.error is None and cycle.rejected == {}
    query = fake.query_requests[0].query
    assert 'isnotempty(tostring(customDimensions["microsoft.gen_ai.main_agent.conversation_id"]))' in query
    conversations, _ = assembled(store)
    assert [c.id for c in conversations] == ["conv_main_agent_7"]
    assert len(conversations[0].trace_ids) == 2


@pytest.mark.parametrize("config", CONFIGS)
def test_the_replicated_exporter_writes_the_real_exporters_span_rows(config: str) -> None:
    """``spans_to_rows`` (the exporter's mapping, replicated for synthetic tests) gives, for the spans of the OTLP
    file, the rows the real exporter's envelopes of the same spans give: table, ids, name, dependency type,
    role, success and every customDimension (``str`` of tuples included); durations agree to the millisecond
    (the OTLP nanoseconds pass through microsecond datetimes)."""
    spans = [span for line in (DATA / f"{config}.otlp.jsonl").read_text("utf-8").splitlines()
             for span in parse_otlp_line(line)[0] if span.kind != "event"]
    replicated = spans_to_rows(spans, "classic")
    real = envelopes_to_rows(_envelopes(config), "classic")
    for table in ("dependencies", "requests"):
        ours = {row["id"]: row for row in replicated.tables.get(table, [])}
        theirs = {row["id"]: row for row in real.tables.get(table, [])}
        assert ours.keys() == theirs.keys(), table
        for span_id, row in ours.items():
            other = theirs[span_id]
            for column in ("name", "type", "operation_Id", "operation_ParentId", "cloud_RoleName", "success",
                           "customDimensions"):
                assert row.get(column) == other.get(column), (span_id, column)
            assert abs(row["duration"] - other["duration"]) <= 1.0
