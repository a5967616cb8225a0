"""The App Insights source against a fake Log Analytics query API over TLS, through the real
azure-monitor-query client: both table layouts, windows and watermarks, splitting at the row limit, faults,
credentials."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.assemble import assemble
from monitor.errors import ConfigError, SourceAuthError, SourceError, SourceQueryError
from monitor.models import SpanRecord
from monitor.settings import AppInsightsCredentialSettings, AppInsightsSourceSettings
from monitor.sources.app_insights import PROPERTY_CAP, SOURCE, AppInsightsSource, truncated_keys
from monitor.sources.kql import CLASSIC, WORKSPACE, Window, build_query, explain
from monitor.store import InMemoryStore
from tests.app_insights_helpers import (
    NOW,
    RESOURCE_ID,
    TOKEN,
    TOKEN_ENV,
    WORKSPACE_ID,
    conversation,
    conversations,
    fresh_metrics,
    load,
    run_cycle,
    settings_for,
    stored_spans,
    watermark,
)
from tests.fakes.log_analytics import (
    FakeLogAnalytics,
    Recorded,
    Reply,
    bad_query,
    forbidden,
    gateway_timeout,
    no_content,
    partial_error_body,
    server_error,
    throttled,
)
from tools.spans_to_app_insights import TABLE_COLUMNS, Schema

SCHEMAS: tuple[Schema, ...] = ("classic", "workspace")


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture
def fake() -> Iterator[FakeLogAnalytics]:
    with FakeLogAnalytics() as server:
        yield server


def make_source(fake: FakeLogAnalytics, schema: Schema = "workspace", **overrides: Any) -> AppInsightsSource:
    return AppInsightsSource(settings_for(fake, schema, **overrides), fresh_metrics())


def conversation_ids(spans: list[SpanRecord]) -> set[str]:
    return {s.conversation_id for s in spans if s.conversation_id}


# --- rows → SpanRecords -------------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", SCHEMAS)
def test_rows_of_both_layouts_read_back_as_the_exported_spans_and_events(
        fake: FakeLogAnalytics, schema: Schema) -> None:
    spans = conversation(0, NOW - timedelta(minutes=30))
    load(fake, spans, schema)
    source = make_source(fake, schema)
    batches = list(source.pull(None, NOW))
    source.close()

    assert len(batches) == 1
    read = {s.span_id: s for s in batches[0].spans}
    for original in spans:
        got = read.pop(original.span_id)
        assert (got.trace_id, got.parent_span_id, got.name) == (
            original.trace_id, original.parent_span_id, original.name)
        assert got.start_time == original.start_time and got.end_time == original.end_time
        # customDimensions arrive as strings; server.* go to envelope fields, not customDimensions
        expected = {k: (str(tuple(v)) if isinstance(v, list) else str(v))
                    for k, v in original.attributes.items() if not k.startswith("server.")}
        assert got.attributes == expected
        assert got.kind == ("internal" if original.kind == "internal" else "client")
        for event in original.events:
            match = [e for e in read.values() if e.kind == "event" and e.name == event.name
                     and e.parent_span_id == original.span_id and e.start_time == event.time]
            assert len(match) == 1, event.name
            assert match[0].attributes == {k: str(v) for k, v in event.attributes.items()}
            assert match[0].trace_id == original.trace_id
            del read[match[0].span_id]
    assert read == {}
    assert batches[0].rows == sum(1 + len(s.events) for s in spans)


def test_the_query_sent_is_the_explained_one_and_selects_on_the_operation_name(
        fake: FakeLogAnalytics) -> None:
    load(fake, conversation(0, NOW - timedelta(minutes=30)))
    settings = settings_for(fake, agents=("airline", 'a"b'), extra_filter='AppRoleName == "airline-svc"')
    source = AppInsightsSource(settings, fresh_metrics())
    list(source.pull(None, NOW))
    source.close()

    sent = fake.query_requests[0]
    window = Window(NOW - timedelta(seconds=3780), NOW - timedelta(seconds=180))
    assert sent.query == build_query(settings, WORKSPACE, window)
    assert build_query(settings, WORKSPACE, window) in explain(settings, NOW)
    assert 'Properties["gen_ai.operation.name"]' in sent.query
    assert "DependencyType" not in sent.query.split("| project")[0]  # never filtered on the dependency type
    assert '"a\\"b"' in sent.query and '(AppRoleName == "airline-svc")' in sent.query
    assert sent.tables == ("AppDependencies", "AppRequests", "AppTraces")
    # the lookup of the window's GenAI operations (and agents) reaches back overlap_seconds before the window
    assert sent.timespan == (window.start - timedelta(seconds=settings.overlap_seconds), window.end)
    assert sent.window == (window.start, window.end)
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["prefer"] == f"wait={settings.server_timeout_seconds}"


def test_classic_query_uses_classic_names() -> None:
    settings = AppInsightsSourceSettings(resource_id=RESOURCE_ID)
    query = build_query(settings, CLASSIC, Window(NOW - timedelta(hours=1), NOW))
    assert "union dependencies, requests" in query and "let span_events = traces" in query
    assert 'customDimensions["gen_ai.operation.name"]' in query
    assert "timestamp >= window_start and timestamp < window_end" in query
    assert "AppDependencies" not in query and "agent_traces" not in query


def test_late_rows_inside_the_overlap_are_picked_up_once(fake: FakeLogAnalytics) -> None:
    early = conversations(3, NOW - timedelta(minutes=40), timedelta(minutes=5))
    load(fake, early)
    source, store = make_source(fake), InMemoryStore()
    first = run_cycle(source, store, NOW)
    assert first.error is None and first.new == len(early) + sum(len(s.events) for s in early)
    assert watermark(store) == NOW - timedelta(seconds=180)

    # A conversation from 6 minutes before the watermark is ingested only now.
    late = conversation(50, NOW - timedelta(minutes=9))
    late_rows = load(fake, late)
    second = run_cycle(source, store, NOW + timedelta(minutes=1))
    third = run_cycle(source, store, NOW + timedelta(minutes=2))
    source.close()

    assert second.new == late_rows and third.new == 0
    assert third.spans_read >= late_rows  # re-read in the overlap, dropped by span id
    stored = stored_spans(store, conversation_ids(late))
    assert sorted(s.span_id for s in stored) == sorted({s.span_id for s in stored})
    assert len(stored) == late_rows


def test_a_window_over_the_row_limit_is_split_and_nothing_is_lost() -> None:
    spans = conversations(40, NOW - timedelta(minutes=59), timedelta(seconds=80))
    with FakeLogAnalytics(row_limit=60) as fake:
        total = load(fake, spans)
        source, store = make_source(fake), InMemoryStore()
        cycle = run_cycle(source, store, NOW)
        source.close()
        partial = [r for r in fake.query_requests if r.rows_returned == 60]

    assert cycle.error is None
    assert cycle.new == total and cycle.spans_read == total
    assert len(stored_spans(store, conversation_ids(spans))) == total
    assert partial, "the fake must have hit its row limit at least once"
    assert cycle.batches > 1
    watermarks = [json.loads(c)["watermark"] for c in cycle.checkpoints]
    assert watermarks == sorted(watermarks)


def test_a_window_over_the_byte_limit_is_split_too() -> None:
    spans = conversations(10, NOW - timedelta(minutes=50), timedelta(minutes=4))
    with FakeLogAnalytics(byte_limit=8_000) as fake:
        total = load(fake, spans)
        source, store = make_source(fake), InMemoryStore()
        cycle = run_cycle(source, store, NOW)
        source.close()
    assert cycle.error is None and cycle.new == total and cycle.batches > 1


def test_a_window_that_cannot_be_split_enough_fails_without_moving_the_watermark() -> None:
    # Eleven rows with one timestamp: no split can separate them.
    spans = conversations(1, NOW - timedelta(minutes=20), timedelta(0), turns=3)
    with FakeLogAnalytics(row_limit=2) as fake:
        load(fake, spans)
        source, store = make_source(fake, max_splits=3, max_window_seconds=600), InMemoryStore()
        cycle = run_cycle(source, store, NOW)
        source.close()
    assert isinstance(cycle.error, SourceError) and cycle.error.kind == "partial"
    assert "source.max_splits" in str(cycle.error)
    stop = watermark(store)
    assert stop is not None and stop <= NOW - timedelta(minutes=20)


def test_a_fault_in_the_middle_of_a_window_keeps_the_watermark_before_it(fake: FakeLogAnalytics) -> None:
    spans = conversations(12, NOW - timedelta(minutes=58), timedelta(minutes=4, seconds=30))
    total = load(fake, spans)
    failing_start = NOW - timedelta(seconds=180 + 3600) + timedelta(seconds=1200)

    def fail_third_slice(request: Recorded) -> Reply | None:
        return server_error(503) if request.window and request.window[0] == failing_start else None

    fake.on_query = fail_third_slice
    source, store = make_source(fake, max_window_seconds=600), InMemoryStore()
    first = run_cycle(source, store, NOW)
    assert isinstance(first.error, SourceError) and first.error.kind == "server"
    assert first.batches == 2 and watermark(store) == failing_start
    attempts = [r for r in fake.query_requests if r.window and r.window[0] == failing_start]
    assert len(attempts) == 2  # the query and its one retry

    fake.on_query = None
    second = run_cycle(source, store, NOW)
    source.close()
    assert second.error is None
    assert first.new + second.new == total
    assert watermark(store) == NOW - timedelta(seconds=180)
    assert len(stored_spans(store, conversation_ids(spans))) == total


def test_a_restart_resumes_from_the_stored_watermark_with_no_duplicate_and_no_gap(
        fake: FakeLogAnalytics) -> None:
    before = conversations(5, NOW - timedelta(minutes=50), timedelta(minutes=8))
    load(fake, before)
    store = InMemoryStore()
    first_process = make_source(fake)
    first = run_cycle(first_process, store, NOW)
    first_process.close()
    stopped_at = watermark(store)

    later = NOW + timedelta(minutes=30)
    after = [s for i in range(5) for s in conversation(100 + i, NOW + timedelta(minutes=1 + 5 * i))]
    load(fake, after)
    second_process = make_source(fake)
    second = run_cycle(second_process, store, later)
    second_process.close()

    assert first.error is None and second.error is None
    resumed = fake.query_requests[-1].window
    assert stopped_at is not None and resumed is not None
    assert resumed[0] == stopped_at - timedelta(seconds=600)  # not initial_lookback: it resumed
    everything = before + after
    expected = len(everything) + sum(len(s.events) for s in everything)
    assert first.new + second.new == expected
    stored = stored_spans(store, conversation_ids(everything))
    assert len(stored) == len({s.span_id for s in stored}) == expected


def test_no_checkpoint_starts_initial_lookback_back_and_reads_a_backlog_in_slices(
        fake: FakeLogAnalytics) -> None:
    load(fake, [])
    source = make_source(fake, initial_lookback_seconds=7200, max_window_seconds=1800)
    batches = list(source.pull(None, NOW))
    source.close()
    spans = [r.window for r in fake.query_requests]
    start = NOW - timedelta(seconds=180 + 7200)
    step = timedelta(seconds=1800)
    assert spans == [(start + i * step, start + (i + 1) * step) for i in range(4)]
    assert len(batches) == 4 and all(b.spans == [] for b in batches)


# --- faults -------------------------------------------------------------------------------------------------


def test_429_is_retried_after_retry_after(fake: FakeLogAnalytics) -> None:
    load(fake, conversation(0, NOW - timedelta(minutes=10)))
    fake.script.append(throttled(1))
    source, store = make_source(fake), InMemoryStore()
    started = time.monotonic()
    cycle = run_cycle(source, store, NOW)
    elapsed = time.monotonic() - started
    source.close()
    assert cycle.error is None and cycle.new > 0
    assert [r.status for r in fake.query_requests] == [429, 200]
    assert elapsed >= 1.0


def test_a_retry_after_longer_than_the_backoff_cap_fails_the_cycle_at_once(fake: FakeLogAnalytics) -> None:
    load(fake, conversation(0, NOW - timedelta(minutes=10)))
    fake.script.append(throttled(3600))
    source, store = make_source(fake), InMemoryStore()
    started = time.monotonic()
    cycle = run_cycle(source, store, NOW)
    source.close()
    assert time.monotonic() - started < 10
    assert isinstance(cycle.error, SourceError) and cycle.error.kind == "throttled"
    assert len(fake.query_requests) == 1 and watermark(store) is None


@pytest.mark.parametrize(("reply", "kind"), [(server_error(500), "server"), (gateway_timeout(), "timeout")])
def test_one_5xx_is_retried_and_a_persistent_one_fails_the_cycle(
        fake: FakeLogAnalytics, reply: Reply, kind: str) -> None:
    load(fake, conversation(0, NOW - timedelta(minutes=10)))
    # no halving (source.max_splits 0): a slice that keeps timing out fails the cycle
    source, store = make_source(fake, max_splits=0), InMemoryStore()
    fake.script.append(reply)
    assert run_cycle(source, store, NOW).error is None
    assert [r.status for r in fake.query_requests] == [reply.status, 200]

    fake.script.extend([reply, reply])
    failed = run_cycle(source, store, NOW + timedelta(minutes=1))
    source.close()
    assert isinstance(failed.error, SourceError) and failed.error.kind == kind
    assert watermark(store) == NOW - timedelta(seconds=180)


@pytest.mark.parametrize(("reply", "error_type", "shown"), [
    (forbidden(), SourceAuthError, "403 InsufficientAccessError"),
    (bad_query("Query could not be parsed at 'whre'"), SourceQueryError, "could not be parsed at 'whre'"),
])
def test_refusals_fail_the_cycle_with_one_clear_error_and_no_retry(
        fake: FakeLogAnalytics, reply: Reply, error_type: type[SourceError], shown: str) -> None:
    fake.script.append(reply)
    source, store = make_source(fake), InMemoryStore()
    cycle = run_cycle(source, store, NOW)
    source.close()
    assert type(cycle.error) is error_type
    assert shown in str(cycle.error) and WORKSPACE_ID in str(cycle.error)
    assert len(fake.query_requests) == 1 and watermark(store) is None


def test_a_token_the_service_rejects_is_an_auth_error(fake: FakeLogAnalytics) -> None:
    load(fake, [])
    fake.accepted_tokens = {"some-other-token"}
    source = make_source(fake)
    with pytest.raises(SourceAuthError, match="InvalidAuthenticationToken"):
        list(source.pull(None, NOW))
    source.close()


def test_a_missing_token_is_an_auth_error_before_any_request(
        fake: FakeLogAnalytics, monkeypatch: pytest.MonkeyPatch) -> None:
    load(fake, [])
    monkeypatch.delenv(TOKEN_ENV)
    source = make_source(fake)
    with pytest.raises(SourceAuthError, match=TOKEN_ENV):
        list(source.pull(None, NOW))
    source.close()
    assert fake.requests == []


@pytest.mark.parametrize("reply", [no_content(), Reply(status=200, raw_body=b"")], ids=["204", "empty 200"])
def test_no_content_is_an_empty_window_and_the_watermark_advances(fake: FakeLogAnalytics, reply: Reply) -> None:
    load(fake, [])
    fake.script.append(reply)
    source, store = make_source(fake), InMemoryStore()
    cycle = run_cycle(source, store, NOW)
    source.close()
    assert cycle.error is None and cycle.batches == 1 and cycle.spans_read == 0
    assert watermark(store) == NOW - timedelta(seconds=180)


PROXY_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


def cut_in_half(fake: FakeLogAnalytics) -> Callable[[Recorded], Reply]:
    """Replies with the body the service would send, cut off halfway (a connection dropped mid-body)."""
    def reply(recorded: Recorded) -> Reply:
        whole = fake.data_reply(recorded).json_body
        assert isinstance(whole, bytes)
        return Reply(status=200, raw_body=whole[: len(whole) // 2])
    return reply


@pytest.mark.parametrize(("fault", "kind"), [
    ("cut-off 200", "error"),
    ("proxy page 200", "error"),
    ("proxy page 502", "server"),
])
def test_a_body_that_is_not_json_fails_the_cycle_and_keeps_the_watermark(
        fake: FakeLogAnalytics, fault: str, kind: str) -> None:
    spans = conversation(0, NOW - timedelta(minutes=10))
    rows = load(fake, spans)
    if fault == "cut-off 200":
        fake.on_query = cut_in_half(fake)
    else:
        status = 200 if fault == "proxy page 200" else 502
        fake.script.extend([Reply(status=status, raw_body=PROXY_PAGE)] * 2)  # a 502 is retried once
    source, store = make_source(fake), InMemoryStore()

    failed = run_cycle(source, store, NOW)

    assert isinstance(failed.error, SourceError) and failed.error.kind == kind
    assert "body that is not JSON" in str(failed.error) and failed.batches == 0 and watermark(store) is None
    fake.on_query = None
    fake.script.clear()
    retried = run_cycle(source, store, NOW)
    source.close()
    assert retried.error is None and retried.new == rows  # nothing was skipped


def test_a_partial_result_that_is_not_a_limit_is_never_taken_as_complete(
        fake: FakeLogAnalytics) -> None:
    load(fake, conversation(0, NOW - timedelta(minutes=10)))
    body = partial_error_body("Partial query failure: An unexpected error occurred.", "-2133196800")
    fake.script.append(Reply(json_body={"tables": [], "error": body}))
    source, store = make_source(fake), InMemoryStore()
    cycle = run_cycle(source, store, NOW)
    source.close()
    assert isinstance(cycle.error, SourceError) and cycle.error.kind == "partial"
    assert cycle.batches == 0 and watermark(store) is None


def test_unreadable_rows_are_skipped_and_reported(fake: FakeLogAnalytics) -> None:
    spans = conversation(0, NOW - timedelta(minutes=10))
    load(fake, spans)
    broken = {"TimeGenerated": NOW - timedelta(minutes=9), "Id": "ffffffffffffffff", "OperationId": "f" * 32,
              "Type": "AppDependencies", "Properties": "{not json"}
    fake.add_table("AppDependencies", TABLE_COLUMNS["AppDependencies"], [broken], workspace_id=WORKSPACE_ID)
    source, store = make_source(fake), InMemoryStore()
    cycle = run_cycle(source, store, NOW)
    source.close()
    assert cycle.error is None and cycle.rejected == {"bad_properties": 1}
    assert cycle.new == len(spans) + sum(len(s.events) for s in spans)


# --- truncation, metrics, credentials, settings -------------------------------------------------------------


def test_values_cut_by_app_insights_mark_their_keys_truncated(fake: FakeLogAnalytics) -> None:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 9000}]}])
    span = conversation(0, NOW - timedelta(minutes=10))[1]
    cut = span.model_copy(update={"attributes": {
        **span.attributes,
        "gen_ai.input.messages": messages[:8192],
        "app.note": "n" * 8192,
        "gen_ai.output.messages": messages,
    }})
    load(fake, [cut])
    source = make_source(fake)
    [batch] = list(source.pull(None, NOW))
    source.close()
    [read] = [s for s in batch.spans if s.kind != "event"]
    assert set(read.truncated_keys) == {"gen_ai.input.messages", "app.note"}
    assert truncated_keys({"gen_ai.input.messages": '[{"role": "user"'}) == ("gen_ai.input.messages",)
    assert truncated_keys({"gen_ai.output.messages": "[]", "other": "x" * 100}) == ()
    # Plain text that opens with a bracket is not JSON cut short, unless it is as long as the cap.
    policy = "[Role] You are a booking agent. Never book more than 8"
    assert truncated_keys({"gen_ai.system_instructions": policy}) == ()
    long_policy = (policy + " seats.") * (PROPERTY_CAP // len(policy) + 1)
    assert truncated_keys({"gen_ai.system_instructions": long_policy[:PROPERTY_CAP]}) == (
        "gen_ai.system_instructions",)


def test_plain_text_instructions_starting_with_a_bracket_reach_the_assembled_conversation(
        fake: FakeLogAnalytics) -> None:
    policy = "[Role] You are a booking agent.\n{Rules} Never book more than 8"
    spans = conversation(0, NOW - timedelta(minutes=10), legacy_events=False)
    chat = spans[1]
    spans[1] = chat.model_copy(update={"attributes": {**chat.attributes, "gen_ai.system_instructions": policy}})
    load(fake, spans)
    source = make_source(fake)
    read = [s for batch in source.pull(None, NOW) for s in batch.spans]
    source.close()
    assembly = assemble(read)
    [conversation_read] = assembly.conversations
    assert assembly.rejected == {}
    assert conversation_read.system_instructions == policy and not conversation_read.truncated


def test_batches_carry_the_rows_read_and_metrics_count_latency_and_lag(fake: FakeLogAnalytics) -> None:
    rows = load(fake, conversation(0, NOW - timedelta(minutes=10)))
    settings = settings_for(fake, max_window_seconds=600)
    metrics = fresh_metrics()
    source = AppInsightsSource(settings, metrics)
    batches = list(source.pull(None, NOW))
    source.close()
    sample = metrics.registry.get_sample_value
    # The pipeline counts rubric_monitor_source_rows_total from the batches it stores: the source must not.
    assert len(batches) == 6 and sum(batch.rows for batch in batches) == rows
    assert not sample("rubric_monitor_source_rows_total", {"source": SOURCE})
    assert sample("rubric_monitor_source_query_latency_seconds_count", {"source": SOURCE}) == 6
    assert sample("rubric_monitor_source_lag_seconds", {"source": SOURCE}) == settings.ingestion_delay_seconds


def test_a_token_file_is_read_again_for_every_request(fake: FakeLogAnalytics, tmp_path: Path) -> None:
    load(fake, [])
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n", encoding="utf-8")
    credential = AppInsightsCredentialSettings(kind="token_file", token_file=token_file)
    settings = settings_for(fake, credential=credential)
    source = AppInsightsSource(settings, fresh_metrics())
    list(source.pull(None, NOW))
    token_file.write_text("rotated-token", encoding="utf-8")
    list(source.pull(None, NOW))
    source.close()
    assert [r.headers["authorization"] for r in fake.query_requests] == ["Bearer first-token",
                                                                         "Bearer rotated-token"]


def test_a_ca_bundle_that_does_not_trust_the_server_is_a_connection_error(
        fake: FakeLogAnalytics, tmp_path: Path) -> None:
    load(fake, [])
    with FakeLogAnalytics() as other:
        source = make_source(fake, ca_bundle=other.ca_path, retry_total=0)
        with pytest.raises(SourceError, match="source.ca_bundle"):
            list(source.pull(None, NOW))
        source.close()
    assert fake.requests == []  # the handshake failed: no request, no token, reached the server


@pytest.mark.parametrize(("overrides", "field"), [
    ({"endpoint": "http://127.0.0.1:9"}, "source.endpoint"),
    ({"workspace_id": None}, "source.workspace_id"),
    ({"resource_id": RESOURCE_ID}, "source.workspace_id"),
    ({"workspace_id": None, "resource_id": "airline-agent"}, "source.resource_id"),
    ({"ca_bundle": Path("/nonexistent/ca.pem")}, "source.ca_bundle"),
    ({"credential": AppInsightsCredentialSettings(kind="token_file")}, "source.credential.token_file"),
])
def test_bad_settings_are_refused_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    values: dict[str, Any] = {"workspace_id": WORKSPACE_ID, "credential": {"kind": "token_env"}, **overrides}
    with pytest.raises(ConfigError) as caught:
        AppInsightsSource(AppInsightsSourceSettings(**values), fresh_metrics())
    assert caught.value.field == field


def test_an_http_endpoint_is_refused_because_tokens_never_travel_in_clear() -> None:
    settings = AppInsightsSourceSettings(workspace_id=WORKSPACE_ID, endpoint="http://127.0.0.1:9",
                                         credential=AppInsightsCredentialSettings(kind="token_env"))
    with pytest.raises(ConfigError, match="plain HTTP"):
        AppInsightsSource(settings, fresh_metrics())


def test_a_checkpoint_of_another_workspace_is_not_reused(fake: FakeLogAnalytics) -> None:
    load(fake, [])
    other = json.dumps({"version": 1, "target": "workspace elsewhere",
                        "watermark": "2026-09-01T11:00:00.000000Z"})
    source = make_source(fake)
    list(source.pull(other, NOW))
    source.close()
    first = fake.query_requests[0].window
    assert first is not None and first[0] == NOW - timedelta(seconds=180 + 3600)


def test_a_result_as_long_as_the_row_limit_is_split_even_without_a_partial_error() -> None:
    spans = conversations(8, NOW - timedelta(minutes=50), timedelta(minutes=5))
    with FakeLogAnalytics() as fake:
        total = load(fake, spans)
        source, store = make_source(fake, row_limit=total), InMemoryStore()
        cycle = run_cycle(source, store, NOW)
        source.close()
        statuses = [r.rows_returned for r in fake.query_requests]
    assert statuses[0] == total and len(statuses) >= 3  # the full answer was not trusted; its halves were
    assert cycle.error is None and cycle.new == total


def test_a_cut_message_attribute_marks_the_assembled_conversation_truncated(fake: FakeLogAnalytics) -> None:
    spans = conversation(0, NOW - timedelta(minutes=10), legacy_events=False)
    long_history = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "q" * 9000}]}])
    chat = spans[1]
    attributes = {**chat.attributes, "gen_ai.input.messages": long_history[:8192]}
    cut = chat.model_copy(update={"attributes": attributes})
    load(fake, [spans[0], cut, *spans[2:]])
    source = make_source(fake)
    read = [s for batch in source.pull(None, NOW) for s in batch.spans]
    source.close()
    [conversation_read] = assemble(read).conversations
    assert conversation_read.truncated
    [intact] = assemble(spans).conversations
    assert not intact.truncated


def test_default_azure_credential_failures_are_auth_errors(
        fake: FakeLogAnalytics, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the environment credential, with no variables set: it fails at once, offline.
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "EnvironmentCredential")
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    load(fake, [])
    source = make_source(fake, credential=AppInsightsCredentialSettings(kind="default"))
    with pytest.raises(SourceAuthError, match="no usable credential") as refused:
        list(source.pull(None, NOW))
    source.close()
    assert fake.requests == []
    # One line saying what was tried and what to set, not azure-identity's multi-line report.
    message = str(refused.value)
    assert "\n" not in message
    assert "DefaultAzureCredential found no credential (tried EnvironmentCredential)" in message
    assert "AZURE_CLIENT_ID" in message and "az login" in message and "token_file" in message


def test_the_fake_answers_the_real_clients_batch_queries(fake: FakeLogAnalytics) -> None:
    from azure.monitor.query import LogsBatchQuery, LogsQueryClient, LogsQueryStatus

    from monitor.sources.app_insights import RereadTokenCredential

    spans = conversation(0, NOW - timedelta(minutes=10))
    rows = load(fake, spans)
    window = (NOW - timedelta(hours=1), NOW)
    credential = RereadTokenCredential(lambda: TOKEN, "test")
    with LogsQueryClient(credential, endpoint=fake.endpoint, connection_verify=str(fake.ca_path)) as client:
        results = client.query_batch([
            LogsBatchQuery(WORKSPACE_ID, "union AppDependencies, AppRequests, AppTraces", timespan=window),
            LogsBatchQuery("no-such-workspace", "AppDependencies", timespan=window),
        ])
    assert results[0].status == LogsQueryStatus.SUCCESS and len(results[0].tables[0].rows) == rows
    assert results[1].status == LogsQueryStatus.FAILURE and results[1].code == "PathNotFoundError"


class RecordingCredential:
    """A TokenCredential that remembers the scopes it was asked for."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        return AccessToken(TOKEN, int(time.time()) + 3600)


@pytest.mark.parametrize(("audience", "scope"), [
    (None, "{endpoint}/.default"),
    ("https://api.loganalytics.azure.cn", "https://api.loganalytics.azure.cn/.default"),
])
def test_the_token_is_asked_for_the_configured_audience(
        fake: FakeLogAnalytics, audience: str | None, scope: str) -> None:
    load(fake, [])
    credential = RecordingCredential()
    source = AppInsightsSource(settings_for(fake, audience=audience), fresh_metrics(), credential=credential)
    list(source.pull(None, NOW))
    source.close()
    assert credential.scopes and set(credential.scopes) == {(scope.format(endpoint=fake.endpoint),)}


def test_a_query_outliving_its_server_timeout_is_a_timeout_error() -> None:
    with FakeLogAnalytics(query_seconds=1.5) as fake:
        load(fake, [])
        source = make_source(fake, server_timeout_seconds=1, retry_total=0, max_splits=1)
        store = InMemoryStore()
        cycle = run_cycle(source, store, NOW)
        source.close()
        sent = fake.query_requests
    assert isinstance(cycle.error, SourceError) and cycle.error.kind == "timeout"
    # the window, then its first half (a timeout is halved like a limit error, up to source.max_splits)
    assert [r.headers["prefer"] for r in sent] == ["wait=1", "wait=1"] and [r.status for r in sent] == [504, 504]
    assert watermark(store) is None
