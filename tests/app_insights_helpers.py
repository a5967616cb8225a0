"""Shared by the App Insights tests: synthetic GenAI conversations, loading them into the fake query API, and
running source cycles the way the pipeline does (each batch's spans and checkpoint stored together)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.errors import SourceError
from monitor.metrics import MonitorMetrics
from monitor.models import SpanEvent, SpanRecord
from monitor.settings import AppInsightsCredentialSettings, AppInsightsSourceSettings
from monitor.sources.app_insights import SOURCE, AppInsightsSource
from monitor.store import InMemoryStore
from tests.fakes.log_analytics import FakeLogAnalytics
from tools.spans_to_app_insights import (
    TABLE_COLUMNS,
    TABLE_NAMES,
    AppInsightsRows,
    Ingestion,
    Schema,
    envelopes_to_rows,
    spans_to_rows,
)

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
WORKSPACE_ID = "7f3c2a10-5e1b-4c3a-9d2e-0a1b2c3d4e5f"
RESOURCE_ID = ("/subscriptions/00000000-0000-4000-8000-0000000000cc/resourceGroups/rg-agents/providers/"
               "Microsoft.Insights/components/airline-agent")
TOKEN_ENV = "RUBRIC_MONITOR_TEST_AI_TOKEN"
TOKEN = "test-token-1"


def target_of(schema: Schema) -> dict[str, str]:
    return {"resource_id": RESOURCE_ID} if schema == "classic" else {"workspace_id": WORKSPACE_ID}


def settings_for(fake: FakeLogAnalytics, schema: Schema = "workspace",
                 **overrides: Any) -> AppInsightsSourceSettings:
    values: dict[str, Any] = {
        "endpoint": fake.endpoint,
        "ca_bundle": fake.ca_path,
        "credential": AppInsightsCredentialSettings(kind="token_env", token_env=TOKEN_ENV),
        "retry_total": 1,
        "retry_backoff_max_seconds": 2.0,
        **target_of(schema),
    }
    values.update(overrides)
    return AppInsightsSourceSettings(**values)


def load(fake: FakeLogAnalytics, spans: Iterable[SpanRecord], schema: Schema = "workspace",
         ingestion: Ingestion | None = None) -> int:
    """Put the rows the exporter would have produced for ``spans`` into the fake; returns the row count."""
    return serve_rows(fake, spans_to_rows(spans, schema, ingestion=ingestion), schema)


def load_envelopes(fake: FakeLogAnalytics, items: Iterable[dict[str, Any]], schema: Schema = "workspace") -> int:
    """Put the rows ingestion makes of the Azure Monitor exporter's envelopes into the fake; returns the count."""
    return serve_rows(fake, envelopes_to_rows(items, schema), schema)


def serve_rows(fake: FakeLogAnalytics, rows: AppInsightsRows, schema: Schema) -> int:
    for table in TABLE_NAMES[schema].values():  # a real workspace has every table, empty or not
        fake.add_table(table, TABLE_COLUMNS[table], rows.tables.get(table, []), **target_of(schema))
    return rows.count


def conversation(index: int, start: datetime, *, agent: str = "airline", legacy_events: bool = True,
                 turns: int = 2) -> list[SpanRecord]:
    """One agent run: invoke_agent → chat (→ execute_tool) per turn, with legacy message events on chats."""
    trace = f"{index + 1:032x}"
    root = f"{index + 1:08x}00000000"
    conv = f"conv_{index:05d}"
    spans: list[SpanRecord] = []
    question = {"role": "user", "parts": [{"type": "text", "content": f"question {index}"}]}
    history: list[dict[str, Any]] = [question]
    moment = start
    for turn in range(turns):
        chat_id = f"{index + 1:08x}{turn + 1:04x}0001"
        output = [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {index}.{turn}"}],
                   "finish_reason": "stop"}]
        events: tuple[SpanEvent, ...] = ()
        if legacy_events:
            events = (
                SpanEvent(name="gen_ai.user.message", time=moment + timedelta(milliseconds=1),
                          attributes={"gen_ai.system": "openai", "content": f"question {index}"}),
                SpanEvent(name="gen_ai.choice", time=moment + timedelta(milliseconds=2),
                          attributes={"gen_ai.system": "openai", "index": 0, "finish_reason": "stop"}),
            )
        spans.append(SpanRecord(
            trace_id=trace, span_id=chat_id, parent_span_id=root, name="chat gpt-4o", kind="client",
            start_time=moment, end_time=moment + timedelta(milliseconds=800),
            attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.provider.name": "openai",
                "gen_ai.conversation.id": conv, "gen_ai.usage.input_tokens": 120 + turn,
                "gen_ai.usage.output_tokens": 30, "gen_ai.response.finish_reasons": ["stop"],
                "gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps(output),
                "server.address": "api.openai.com", "server.port": 443,
            },
            events=events,
        ))
        history = history + output
        moment += timedelta(seconds=1)
    spans.insert(0, SpanRecord(
        trace_id=trace, span_id=root, name=f"invoke_agent {agent}", kind="internal",
        start_time=start - timedelta(milliseconds=5), end_time=moment,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                    "gen_ai.conversation.id": conv},
        resource={"service.name": "airline-svc"},
    ))
    return spans


def conversations(count: int, first: datetime, spacing: timedelta, **kwargs: Any) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for index in range(count):
        spans.extend(conversation(index, first + index * spacing, **kwargs))
    return spans


@dataclass
class Cycle:
    """What one source cycle did, as the pipeline would see it."""

    batches: int = 0
    spans_read: int = 0
    new: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)
    error: SourceError | None = None


def run_cycle(source: AppInsightsSource, store: InMemoryStore, now: datetime) -> Cycle:
    """One pull, storing each batch's spans with its checkpoint in one call, as ``Pipeline._pull`` does."""
    cycle = Cycle()
    try:
        for batch in source.pull(store.checkpoint(SOURCE), now):
            stored = store.add_spans(SOURCE, batch.spans, batch.checkpoint, "ignore")
            cycle.batches += 1
            cycle.spans_read += len(batch.spans)
            cycle.new += stored.new
            cycle.checkpoints.append(batch.checkpoint)
            for reason, count in batch.rejected.items():
                cycle.rejected[reason] = cycle.rejected.get(reason, 0) + count
    except SourceError as exc:
        cycle.error = exc
    return cycle


def stored_spans(store: InMemoryStore, keys: Iterable[str]) -> list[SpanRecord]:
    return [span for key in keys for span in store.spans_of(key)]


def watermark(store: InMemoryStore) -> datetime | None:
    checkpoint = store.checkpoint(SOURCE)
    if checkpoint is None:
        return None
    return datetime.fromisoformat(json.loads(checkpoint)["watermark"].replace("Z", "+00:00"))


def fresh_metrics() -> MonitorMetrics:
    return MonitorMetrics(CollectorRegistry())
