"""The 200 tau-bench airline conversations, exported to App Insights rows the way the Azure Monitor exporter
writes them, read back through the fake query API and the real client, reassemble to the same conversations
as their original spans, in both table layouts; and the legacy event-based message format does too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.assemble import assemble
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, SpanEvent, SpanRecord
from monitor.sources.app_insights import AppInsightsSource
from tests.app_insights_helpers import NOW, TOKEN, TOKEN_ENV, load, settings_for
from tests.conftest import TAU_BENCH
from tests.fakes.log_analytics import FakeLogAnalytics
from tools.spans_to_app_insights import Schema
from tools.tau_to_otlp import derive_tool_definitions, tau_record_to_spans

SPACING = timedelta(seconds=30)
LEGACY_COUNT = 12
FIRST = NOW - timedelta(hours=2)


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    assert len(data) == 200
    return data


@pytest.fixture(scope="module")
def tau_spans(records: list[dict[str, Any]]) -> list[SpanRecord]:
    tools = derive_tool_definitions(records)
    return [
        span
        for index, record in enumerate(records)
        for span in tau_record_to_spans(record, base_time=FIRST + index * SPACING, tool_definitions=tools)
    ]


@pytest.fixture(scope="module")
def expected(tau_spans: list[SpanRecord]) -> dict[str, Conversation]:
    """The conversations of the original spans, assembled without App Insights in between."""
    return by_id(assemble(tau_spans).conversations)


def read_back(spans: list[SpanRecord], schema: Schema, **overrides: Any) -> tuple[list[SpanRecord], int]:
    """Every record the source yields for ``spans`` exported to the fake, and how many queries it took."""
    with FakeLogAnalytics() as fake:
        load(fake, spans, schema)
        settings = settings_for(fake, schema, initial_lookback_seconds=3 * 3600, **overrides)
        source = AppInsightsSource(settings, MonitorMetrics(CollectorRegistry()))
        read = [span for batch in source.pull(None, NOW) for span in batch.spans]
        source.close()
        return read, len(fake.query_requests)


def by_id(conversations: list[Conversation]) -> dict[str, Conversation]:
    return {c.id: c for c in conversations}


@pytest.mark.parametrize("schema", ["classic", "workspace"])
def test_the_200_tau_conversations_reassemble_through_app_insights(
    tau_spans: list[SpanRecord],
    expected: dict[str, Conversation],
    records: list[dict[str, Any]],
    schema: Schema,
) -> None:
    read, _ = read_back(tau_spans, schema)
    assembled = assemble(read)
    got = by_id(assembled.conversations)

    assert assembled.rejected == {}
    assert len(read) == len(tau_spans) and len(got) == 200
    assert got.keys() == expected.keys()
    for conversation_id, conversation in got.items():
        assert conversation == expected[conversation_id], conversation_id
    for record in records:
        conversation = got[f"tau-{record['task_id']}-{record['trial']}"]
        assert len(conversation.messages) == sum(1 for m in record["traj"] if m["role"] != "system")
        assert not conversation.truncated


def test_slices_split_at_the_row_limit_still_reassemble_every_conversation(
    tau_spans: list[SpanRecord],
) -> None:
    sample = [s for s in tau_spans if s.start_time < FIRST + 20 * SPACING]
    read, queries = read_back(sample, "workspace", row_limit=100, max_window_seconds=1800)
    assert queries > 3  # the 1800 s slice holding all 20 conversations had to be split
    assert by_id(assemble(read).conversations) == by_id(assemble(sample).conversations)


def legacy_spans(record: dict[str, Any], index: int) -> list[SpanRecord]:
    """The tau conversation with chat content as legacy message events instead of message attributes.

    User and system messages use flat ``content`` attributes; assistant, tool and choice events carry their
    body as JSON in ``gen_ai.event.content`` (the Azure SDK variant).
    """
    spans = tau_record_to_spans(record, base_time=FIRST + index * SPACING)
    traj = record["traj"]
    assistants = [i for i, m in enumerate(traj) if m["role"] == "assistant"]
    chats = iter(assistants)
    result = []
    for span in spans:
        if span.operation != "chat":
            result.append(span)
            continue
        position = next(chats)
        events = [_legacy_event(message, span, k) for k, message in enumerate(traj[:position])]
        events.append(_choice_event(traj[position], span, position))
        attributes = {
            k: v
            for k, v in span.attributes.items()
            if k not in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")
        }
        result.append(span.model_copy(update={"attributes": attributes, "events": tuple(events)}))
    return result


def _legacy_event(message: dict[str, Any], span: SpanRecord, k: int) -> SpanEvent:
    at = span.start_time + timedelta(microseconds=10 * (k + 1))
    base = {"gen_ai.system": "openai"}
    if message["role"] in ("user", "system"):
        return SpanEvent(
            name=f"gen_ai.{message['role']}.message",
            time=at,
            attributes={**base, "content": message.get("content") or ""},
        )
    if message["role"] == "tool":
        body = {"content": message.get("content"), "id": message["tool_call_id"]}
    else:
        body = {"content": message.get("content"), "tool_calls": message.get("tool_calls") or []}
    return SpanEvent(
        name=f"gen_ai.{message['role']}.message",
        time=at,
        attributes={**base, "gen_ai.event.content": json.dumps(body)},
    )


def _choice_event(message: dict[str, Any], span: SpanRecord, k: int) -> SpanEvent:
    body = {
        "index": 0,
        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
        "message": {
            "role": "assistant",
            "content": message.get("content"),
            "tool_calls": message.get("tool_calls") or [],
        },
    }
    return SpanEvent(
        name="gen_ai.choice",
        time=span.start_time + timedelta(microseconds=10 * (k + 1)),
        attributes={"gen_ai.system": "openai", "gen_ai.event.content": json.dumps(body)},
    )


@pytest.fixture(scope="module")
def legacy(records: list[dict[str, Any]]) -> Iterator[list[SpanRecord]]:
    yield [
        span for index, record in enumerate(records[:LEGACY_COUNT]) for span in legacy_spans(record, index)
    ]


@pytest.mark.parametrize("schema", ["classic", "workspace"])
def test_the_legacy_event_format_reassembles_through_the_traces_table(
    legacy: list[SpanRecord], records: list[dict[str, Any]], schema: Schema
) -> None:
    read, _ = read_back(legacy, schema)
    events = [r for r in read if r.kind == "event"]
    assert len(events) == sum(len(s.events) for s in legacy)
    assert all(e.parent_span_id and e.name.startswith("gen_ai.") for e in events)

    got = by_id(assemble(read).conversations)
    assert got == by_id(assemble(legacy).conversations)
    for record in records[:LEGACY_COUNT]:
        conversation = got[f"tau-{record['task_id']}-{record['trial']}"]
        roles = [m.role for m in conversation.messages]
        assert roles == [m["role"] for m in record["traj"] if m["role"] != "system"]
        assert conversation.system_instructions
