"""The App Insights source reads result rows straight from the query API's JSON body (through the real client,
against the fake query API): cells must come out as the client itself would convert them, odd bodies must
still be read the client's way, and a row with the wrong number of cells is counted, not fatal. Also: chat
inputs that repeat each other's history read the same whether or not their shared prefix is reused."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.monitor.query import LogsQueryClient, LogsQueryResult

from monitor.errors import SourceError
from monitor.formats.genai import ReadCache, read_input_messages
from monitor.models import SpanRecord
from monitor.sources.app_insights import AppInsightsSource, RowReader, make_credential
from monitor.sources.base import SourceBatch
from monitor.sources.kql import WORKSPACE, Window
from monitor.store import InMemoryStore
from tests.app_insights_helpers import NOW, TOKEN, TOKEN_ENV, WORKSPACE_ID, fresh_metrics, settings_for
from tests.fakes.log_analytics import FakeLogAnalytics, Reply

COLUMNS = [("TimeGenerated", "datetime"), ("Type", "string"), ("OperationId", "string"), ("Id", "string"),
           ("ParentId", "string"), ("Name", "string"), ("DurationMs", "real"), ("Success", "bool"),
           ("DependencyType", "string"), ("Properties", "dynamic"), ("AppRoleName", "string")]
TRACE = "0af7651916cd43dd8448eb211c80319c"
AT = NOW - timedelta(minutes=30)


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def row(time: Any, span_id: str, properties: str = '{"gen_ai.operation.name":"chat"}',
        name: str = "chat gpt-4o") -> list[Any]:
    return [time, "AppDependencies", TRACE, span_id, "", name, 800.0, True, "N/A", properties, "svc"]


def body(rows: list[list[Any]]) -> bytes:
    table = {"name": "PrimaryResult", "columns": [{"name": n, "type": t} for n, t in COLUMNS], "rows": rows}
    return json.dumps({"tables": [table]}).encode()


def read(reply: Reply) -> SourceBatch:
    """The one batch a cycle over the last hour yields when the service answers ``reply``."""
    with FakeLogAnalytics() as fake:
        fake.add_table("AppDependencies", COLUMNS, [], workspace_id=WORKSPACE_ID)
        fake.script.append(reply)
        settings = settings_for(fake, initial_lookback_seconds=3600, max_window_seconds=7200,
                                ingestion_delay_seconds=0)
        source = AppInsightsSource(settings, fresh_metrics())
        try:
            batches = list(source.pull(None, NOW))
        finally:
            source.close()
    assert len(batches) == 1
    return batches[0]


def by_id(spans: list[SpanRecord]) -> dict[str, SpanRecord]:
    return {span.span_id: span for span in spans}


def test_datetimes_in_every_form_the_client_accepts_are_read_as_it_reads_them() -> None:
    wire = {
        "a": "2026-09-01T11:30:00.1234567Z",  # the service's own form: the seventh digit is dropped
        "b": "2026-09-01T11:30:00.123456Z",
        "c": "2026-09-01T11:30:00Z",
        "d": "2026-09-01t11:30:00.5z",
        "e": "2026-09-01T13:30:00.25+02:00",
    }
    batch = read(Reply(json_body=body([row(time, span_id) for span_id, time in wire.items()])))
    starts = {span_id: span.start_time for span_id, span in by_id(batch.spans).items()}
    assert starts == {
        "a": datetime(2026, 9, 1, 11, 30, 0, 123456, tzinfo=UTC),
        "b": datetime(2026, 9, 1, 11, 30, 0, 123456, tzinfo=UTC),
        "c": datetime(2026, 9, 1, 11, 30, tzinfo=UTC),
        "d": datetime(2026, 9, 1, 11, 30, 0, 500000, tzinfo=UTC),
        "e": datetime(2026, 9, 1, 11, 30, 0, 250000, tzinfo=UTC),
    }
    assert all(start.tzinfo is UTC for start in starts.values())
    assert by_id(batch.spans)["a"].end_time == starts["a"] + timedelta(milliseconds=800)


def test_a_timestamp_that_is_no_datetime_is_a_counted_rejection() -> None:
    batch = read(Reply(json_body=body([row("2026-13-01T11:30:00.0000000Z", "bad"), row("yesterday", "worse"),
                                       row("2026-09-01T11:30:00.0000000Z", "good")])))
    assert [span.span_id for span in batch.spans] == ["good"]
    assert batch.rejected == {"bad_timestamp": 2}


def test_a_row_with_the_wrong_number_of_cells_is_counted_and_the_others_are_read() -> None:
    good = row("2026-09-01T11:30:00.0000000Z", "good")
    batch = read(Reply(json_body=body([good[:-1], good, [*good, "extra"], None])))  # type: ignore[list-item]
    assert [span.span_id for span in batch.spans] == ["good"]
    assert batch.rejected == {"malformed_row": 3}
    assert batch.rows == 4


def test_text_the_fast_parser_refuses_is_still_read_the_clients_way() -> None:
    # A lone surrogate is valid JSON for Python's json module (and so for the client), not for pydantic-core:
    # in a cell it makes the whole body fall back, in customDimensions only that row's properties. Either
    # way the row is read, with the half pair replaced so that the record encodes to UTF-8.
    properties = json.dumps({"gen_ai.operation.name": "chat", "note": "half a pair: \ud83d"})
    batch = read(Reply(json_body=body([row("2026-09-01T11:30:00.0000000Z", "s", properties),
                                       row("2026-09-01T11:30:01.0000000Z", "t", name="chat \udc00")])))
    spans = by_id(batch.spans)
    assert spans["s"].attributes["note"] == "half a pair: \ufffd"
    assert InMemoryStore().add_spans("app_insights", batch.spans, "{}", "ignore").new == 2
    assert spans["t"].name == "chat \ufffd"
    assert batch.rejected == {}


def test_cells_of_the_wrong_type_or_size_cost_only_their_row_and_every_span_read_can_be_stored() -> None:
    at = "2026-09-01T11:30:00.0000000Z"
    ages = row(at, "ages")
    ages[6] = 1e15  # a duration ending past year 9999
    never = row(at, "never")
    never[6] = float("nan")
    deep = row(at, "deep", properties='{"k": ' + "[" * 300 + "]" * 300 + "}")  # json.loads reads it; no store could
    cut = row(at, "cut", properties=json.dumps({"gen_ai.operation.name": "chat",
                                                "gen_ai.conversation.id": "conv \ud83d"}), name="chat \udc00")
    batch = read(Reply(json_body=body([ages, never, deep, cut, row(at, "good")])))

    assert sorted(span.span_id for span in batch.spans) == ["cut", "good"]
    assert batch.rejected == {"malformed_span": 2, "bad_properties": 1}
    assert by_id(batch.spans)["cut"].conversation_id == "conv \ufffd"
    stored = InMemoryStore().add_spans("app_insights", batch.spans, "{}", "ignore")  # serialises every span
    assert stored.new == 2


def test_a_row_that_fails_in_a_way_no_check_foresaw_is_counted_and_logged_with_its_content(
        caplog: pytest.LogCaptureFixture) -> None:
    # The client's own LogsTable keeps a row with too few cells as it is (reading rows as sent checks that).
    good = row("2026-09-01T11:30:00.0000000Z", "good")
    with FakeLogAnalytics() as fake:
        fake.script.append(Reply(json_body=body([good[:3], good])))
        settings = settings_for(fake)
        client = LogsQueryClient(make_credential(settings.credential), endpoint=fake.endpoint,
                                 connection_verify=str(fake.ca_path))
        with client:
            result = client.query_workspace(WORKSPACE_ID, "AppDependencies", timespan=None)
    assert isinstance(result, LogsQueryResult)
    table = result.tables[0]
    with caplog.at_level(logging.ERROR, logger="monitor.sources.app_insights"):
        read_rows = RowReader(WORKSPACE).read(table, Window(AT - timedelta(hours=1), NOW))

    assert [span.span_id for span in read_rows.spans] == ["good"]
    assert read_rows.rejected == {"parse_error": 1} and read_rows.rows == 2
    assert "row 0 could not be read (IndexError" in caplog.text and TRACE in caplog.text


def test_a_body_with_a_byte_order_mark_is_read() -> None:
    batch = read(Reply(raw_body=b"\xef\xbb\xbf" + body([row("2026-09-01T11:30:00.0000000Z", "s")])))
    assert [span.span_id for span in batch.spans] == ["s"]


def test_a_body_that_is_no_query_result_fails_the_cycle_with_a_clear_error() -> None:
    with pytest.raises(SourceError, match="list body that is not a query result") as failed:
        read(Reply(json_body=b"[1, 2, 3]"))
    assert failed.value.kind == "error"


def history(turns: int) -> list[str]:
    """Chat inputs as a producer writes them: each repeats the previous one and adds the new turns."""
    messages: list[dict[str, Any]] = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    inputs = [json.dumps(messages)]
    for turn in range(turns):
        messages.append({"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{turn}", "name": "f",
                                                         "arguments": {"n": turn}}]})
        messages.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{turn}",
                                                    "response": f"result {turn}"}]})
        inputs.append(json.dumps(messages))
    return inputs


@pytest.mark.parametrize("order", ["oldest first", "longest first"])
def test_inputs_that_repeat_a_history_read_the_same_with_a_shared_cache(order: str) -> None:
    inputs = history(6)
    if order == "longest first":
        inputs.reverse()  # an agent span with the whole history often comes first
    inputs.append(inputs[2][:-1] + ', {"role": "user", "parts": []}]')  # diverges after a shared prefix
    inputs.append(inputs[3][: len(inputs[3]) // 2])  # cut short
    cache = ReadCache()
    for text in inputs:
        assert read_input_messages(text, cache=cache) == read_input_messages(text)


@pytest.mark.parametrize("texts", [
    ["[12]", "[123]", "[12 ]", "[12,3]"],
    ["[1, 2, 3]", "[1, 2, 34]", "[1, 2, 3.5]", "[1, 2, 3e2]", "[1, 2, 3]"],  # a number is no prefix of another
    ["[1, 2, 3]", "[1, 2]", "[1, 2, 3, 4]", "[1, 2, 3", "[1, 2, 3]x", "[1, 2, 3 , 4]"],
    ['["a", {"b": [1]}]', '["a", {"b": [1]}, true]', '["a", {"b": [1, 2]}]', '["a"'],
])
def test_scanning_with_shared_prefixes_gives_the_items_of_a_scan_from_scratch(texts: list[str]) -> None:
    cache = ReadCache()
    for text in texts:
        assert cache.scan_array(text) == ReadCache().scan_array(text), text
