"""The OTLP/HTTP receiver in-process, against a real SQLite store: the OpenTelemetry SDK's own exporters (protobuf,
gzip) and JSON bodies built as the OTLP specification writes them; every refusal with its status code, counted.

What is acknowledged is committed: each 200 is checked against the store, read through a separate connection.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExportResult, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from monitor.assemble import assemble
from monitor.errors import ConfigError
from monitor.formats.otlp import spans_to_otlp_document
from monitor.metrics import MonitorMetrics
from monitor.models import SpanRecord
from monitor.settings import OtlpReceiverSourceSettings
from monitor.sources.otlp_receiver import OtlpReceiverSource
from monitor.store import SqlStore
from monitor.store.base import LatePolicy, StoredSpans
from tests.helpers import store_test_url

TOKEN = "s3cret-token"


class Running:
    def __init__(self, receiver: OtlpReceiverSource, store: SqlStore, registry: CollectorRegistry) -> None:
        self.receiver, self.store, self.registry = receiver, store, registry
        host, port = receiver.address
        self.host, self.port = host, port
        self.base = f"http://{host}:{port}"

    def count(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def rejections(self, reason: str) -> float:
        return self.count("rubric_monitor_receiver_rejections_total", reason=reason)

    def stored_ids(self) -> list[tuple[str, str]]:
        engine = sqlalchemy.create_engine(self.store.url)
        try:
            with engine.connect() as conn:
                return [(str(r[0]), str(r[1])) for r in conn.exec_driver_sql("select trace_id, span_id from spans")]
        finally:
            engine.dispose()

    def post(self, path: str, body: bytes, content_type: str = "application/x-protobuf",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            sent = {"Content-Type": content_type, "Authorization": f"Bearer {TOKEN}", **(headers or {})}
            conn.request("POST", path, body=body, headers={k: v for k, v in sent.items() if v})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()


@contextmanager
def running(tmp_path: Path, store: Any = None, url: str | None = None, **overrides: Any) -> Iterator[Running]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    settings = OtlpReceiverSourceSettings(port=0, token_file=token_file, **overrides)
    registry = CollectorRegistry()
    metrics = MonitorMetrics(registry)
    real = SqlStore(url or f"sqlite:///{tmp_path / 'results.db'}")
    receiver = OtlpReceiverSource(settings, metrics)
    receiver.attach(store or real, "ignore")
    receiver.start()
    try:
        yield Running(receiver, real, registry)
    finally:
        receiver.close()
        real.close()


def sdk_spans(conversation: str = "conv-1", agent: str = "reservation-assistant") -> Sequence[ReadableSpan]:
    """A conversation turn as the OpenTelemetry SDK records it: an agent span and its chat span."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": agent}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent", kind=SpanKind.INTERNAL, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "gen_ai.conversation.id": conversation,
    }), tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "A table?"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Booked for two at 8."}], "finish_reason": "stop"}]),
    }):
        pass
    provider.shutdown()
    return memory.get_finished_spans()


def ids_of(spans: Sequence[ReadableSpan]) -> set[tuple[str, str]]:
    return {(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")) for s in spans}


def span_exporter(target: Running, **kwargs: Any) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=target.base + "/v1/traces", headers={"Authorization": f"Bearer {TOKEN}"},
                            timeout=10, **kwargs)


def json_document(records: Sequence[SpanRecord]) -> bytes:
    return json.dumps(spans_to_otlp_document(records)).encode()


def record(trace: int, span: int, **fields: Any) -> SpanRecord:
    values: dict[str, Any] = {"trace_id": f"{trace:032x}", "span_id": f"{span:016x}", "name": "chat",
                              "start_time": datetime(2026, 5, 1, tzinfo=UTC) + timedelta(seconds=span),
                              "attributes": {"gen_ai.operation.name": "chat"}}
    values.update(fields)
    return SpanRecord(**values)


# ---- the SDK sends, the store holds --------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdk_exporter_gets_200_only_for_spans_already_committed(tmp_path: Path, compression: Compression) -> None:
    spans = sdk_spans()
    with running(tmp_path) as target:
        exporter = span_exporter(target, compression=compression)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        # The answer came after the commit: another connection sees the spans at once.
        assert set(target.stored_ids()) == ids_of(spans)
        stored = target.store.spans_of("conv-1")
        conversation = assemble(stored).conversations[0]
        assert conversation.agent == "reservation-assistant"
        assert [m.text for m in conversation.messages] == ["A table?", "Booked for two at 8."]
        assert target.count("rubric_monitor_receiver_items_total", signal="traces", outcome="stored") == 2
        assert target.count("rubric_monitor_receiver_requests_total", signal="traces", code="200") == 1
        assert target.count("rubric_monitor_receiver_bytes_total", signal="traces") > 0
        assert target.count("rubric_monitor_spans_total", source="otlp_receiver") == 2
        # A retry of a batch that was committed (its answer lost) stores nothing twice.
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert sorted(target.stored_ids()) == sorted(ids_of(spans))
        assert target.count("rubric_monitor_receiver_items_total", signal="traces", outcome="duplicate") == 2
        exporter.shutdown()


def test_log_records_from_the_sdk_become_the_events_of_their_span(tmp_path: Path) -> None:
    spans = sdk_spans(conversation="conv-logs")
    chat = next(s for s in spans if s.name.startswith("chat"))
    with running(tmp_path) as target:
        assert span_exporter(target).export(spans) == SpanExportResult.SUCCESS
        provider = LoggerProvider(resource=Resource.create({"service.name": "reservation-assistant"}))
        memory = InMemoryLogRecordExporter()
        provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
        logger = provider.get_logger("gen_ai")
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context

        context = set_span_in_context(NonRecordingSpan(chat.context))
        logger.emit(event_name="gen_ai.user.message", body={"content": "Is the terrace open?"}, context=context,
                    severity_number=SeverityNumber.INFO, attributes={"gen_ai.provider.name": "openai"})
        logger.emit(body="a log line outside any trace", severity_number=SeverityNumber.INFO)
        exporter = OTLPLogExporter(endpoint=target.base + "/v1/logs", headers={"Authorization": f"Bearer {TOKEN}"},
                                   timeout=10)
        records = memory.get_finished_logs()
        assert exporter.export(records) == LogRecordExportResult.SUCCESS
        assert exporter.export(records) == LogRecordExportResult.SUCCESS  # a retry: stored once
        rows = [s for s in target.store.spans_of("conv-logs") if s.kind == "event"]
        assert len(rows) == 1
        assert rows[0].name == "gen_ai.user.message"
        assert rows[0].parent_span_id == format(chat.context.span_id, "016x")
        assert rows[0].attributes["body"] == {"content": "Is the terrace open?"}
        assert target.count("rubric_monitor_receiver_items_total", signal="logs", outcome="stored") == 1
        assert target.count("rubric_monitor_receiver_items_total", signal="logs", outcome="duplicate") == 1
        assert target.count("rubric_monitor_receiver_items_total", signal="logs", outcome="filtered") == 2
        exporter.shutdown()
        provider.shutdown()


def test_json_bodies_as_the_specification_writes_them_with_invalid_spans_in_partial_success(tmp_path: Path) -> None:
    good = [record(1, 1), record(1, 2, parent_span_id=f"{1:016x}")]
    document = spans_to_otlp_document(good)
    bad = dict(document["resourceSpans"][0]["scopeSpans"][0]["spans"][0], traceId="zz", spanId="0000000000000009")
    no_time = dict(document["resourceSpans"][0]["scopeSpans"][0]["spans"][0], spanId="000000000000000a",
                   startTimeUnixNano="soon")
    document["resourceSpans"][0]["scopeSpans"][0]["spans"] += [bad, no_time]
    with running(tmp_path) as target:
        status, headers, body = target.post("/v1/traces", json.dumps(document).encode(), "application/json")
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == {"partialSuccess": {
            "rejectedSpans": "2", "errorMessage": "2 spans could not be read: 1 x invalid_time, 1 x invalid_trace_id"}}
        assert set(target.stored_ids()) == {(s.trace_id, s.span_id) for s in good}
        rejected = {"source": "otlp_receiver", "reason": "invalid_trace_id"}
        assert target.count("rubric_monitor_spans_rejected_total", **rejected) == 1
        assert target.count("rubric_monitor_receiver_items_total", signal="traces", outcome="rejected") == 2
        # An empty request is valid; so is a gzip JSON body.
        assert target.post("/v1/traces", b"{}", "application/json")[:3:2] == (200, b"{}")
        zipped = gzip.compress(json_document([record(2, 3)]))
        assert target.post("/v1/traces", zipped, "application/json", {"Content-Encoding": "gzip"})[0] == 200
        assert (f"{2:032x}", f"{3:016x}") in target.stored_ids()


def test_partial_success_in_protobuf_for_a_protobuf_request(tmp_path: Path) -> None:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    spans = sdk_spans()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(spans)
    broken = ParseDict({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]},
                       ExportTraceServiceRequest())
    request.MergeFrom(broken)
    with running(tmp_path) as target:
        status, headers, body = target.post("/v1/traces", request.SerializeToString())
        assert status == 200 and headers["content-type"] == "application/x-protobuf"
        answer = ExportTraceServiceResponse.FromString(body)
        assert answer.partial_success.rejected_spans == 1
        assert "missing_trace_id" in answer.partial_success.error_message
        assert set(target.stored_ids()) == ids_of(spans)


# ---- refusals: each its status code, each counted ------------------------------------------------------------


def test_every_refusal_has_its_status_code_and_is_counted(tmp_path: Path) -> None:
    body = json_document([record(3, 1)])
    with running(tmp_path, max_request_bytes=4096) as target:
        cases = [
            ("missing token", target.post("/v1/traces", body, "application/json", {"Authorization": ""}),
             401, "unauthorized"),
            ("wrong token", target.post("/v1/traces", body, "application/json", {"Authorization": "Bearer nope"}),
             401, "unauthorized"),
            ("wrong content type", target.post("/v1/traces", body, "text/plain"), 415, "unsupported_media_type"),
            ("bad protobuf", target.post("/v1/traces", b"\xff\xff\xff\xff"), 400, "bad_protobuf"),
            ("bad JSON", target.post("/v1/traces", b"{not json", "application/json"), 400, "bad_json"),
            ("JSON not an object", target.post("/v1/traces", b"[1]", "application/json"), 400, "bad_json"),
            ("bad gzip", target.post("/v1/traces", b"not gzip", "application/json", {"Content-Encoding": "gzip"}),
             400, "bad_gzip"),
            ("too large", target.post("/v1/traces", b" " * 5000, "application/json"), 413, "too_large"),
            ("gzip bomb", target.post("/v1/traces", gzip.compress(b" " * 100_000), "application/json",
                                      {"Content-Encoding": "gzip"}), 413, "too_large"),
            ("unknown encoding", target.post("/v1/traces", body, "application/json", {"Content-Encoding": "br"}),
             415, "bad_encoding"),
            ("unknown path", target.post("/v1/metrics", body, "application/json"), 404, "not_found"),
        ]
        for what, (status, headers, answer), expected, _ in cases:
            assert status == expected, what
            # A google.rpc.Status saying why, in the request's encoding.
            if headers["content-type"] == "application/json":
                assert json.loads(answer)["message"], what
            else:
                assert answer.startswith(b"\x08") and b"not an OTLP traces protobuf" in answer, what
            if expected == 401:
                assert headers["www-authenticate"].startswith("Bearer"), what
        counts = {reason: target.rejections(reason) for _, _, _, reason in cases}
        assert counts == {"unauthorized": 2, "unsupported_media_type": 1, "bad_protobuf": 1, "bad_json": 2,
                          "bad_gzip": 1, "too_large": 2, "bad_encoding": 1, "not_found": 1}
        assert target.count("rubric_monitor_receiver_requests_total", signal="traces", code="400") == 4
        assert target.stored_ids() == []


def _replace(file: Path, text: str) -> None:
    """As a Kubernetes Secret update does: the new file is written beside, then swapped in."""
    beside = file.with_suffix(".new")
    beside.write_text(text)
    os.replace(beside, file)


def test_a_rotated_token_takes_effect_without_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    body = json_document([record(4, 1)])
    with running(tmp_path) as target:
        assert target.post("/v1/traces", body, "application/json")[0] == 200
        _replace(tmp_path / "token", "rotated-token-2\n")
        old = target.post("/v1/traces", body, "application/json")
        new = target.post("/v1/traces", body, "application/json", {"Authorization": "Bearer rotated-token-2"})
        assert (old[0], new[0]) == (401, 200)
        # A file with no token in it (a botched update) leaves the last good token in force, said once.
        _replace(tmp_path / "token", "")
        for _ in range(3):
            answer = target.post("/v1/traces", body, "application/json", {"Authorization": "Bearer rotated-token-2"})
            assert answer[0] == 200
        assert target.post("/v1/traces", body, "application/json", {"Authorization": "Bearer "})[0] == 401
        assert [r.getMessage() for r in caplog.records if "stays in force" in r.getMessage()] == [
            f"{tmp_path / 'token'}: source.token_file: the token file is empty; the token read before stays in force"]
        assert target.rejections("unauthorized") == 2


def test_an_empty_token_file_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    settings = OtlpReceiverSourceSettings(port=0, token_file=tmp_path / "token")
    with pytest.raises(ConfigError, match="the token file is empty"):
        OtlpReceiverSource(settings, MonitorMetrics(CollectorRegistry()))


def test_a_token_is_required_off_loopback() -> None:
    with pytest.raises(ValueError, match="token_file is required"):
        OtlpReceiverSourceSettings(host="0.0.0.0")
    assert OtlpReceiverSourceSettings(host="::1").token_file is None


def test_only_the_configured_agents_traces_are_kept(tmp_path: Path) -> None:
    mine = sdk_spans(conversation="mine", agent="reservation-assistant")
    theirs = sdk_spans(conversation="theirs", agent="billing-bot")
    with running(tmp_path, agents=("reservation-assistant",)) as target:
        assert span_exporter(target).export([*mine, *theirs]) == SpanExportResult.SUCCESS
        assert set(target.stored_ids()) == ids_of(mine)
        assert target.count("rubric_monitor_receiver_items_total", signal="traces", outcome="filtered") == 2


# ---- backpressure ----------------------------------------------------------------------------------------------


class SlowStore:
    """The real store behind a gate: ``add_spans`` waits until the test opens it (a store that fell behind)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)

    def add_spans(self, source: str, spans: Sequence[SpanRecord], checkpoint: str,
                  late_turns: LatePolicy) -> StoredSpans:
        self.entered.release()
        assert self.gate.wait(30), "the test never opened the gate"
        return self.store.add_spans(source, spans, checkpoint, late_turns)


def test_a_slow_store_gives_429_and_503_with_retry_after_and_bounded_pending_spans(tmp_path: Path) -> None:
    url = store_test_url("sqlite", tmp_path)
    real = SqlStore(url)
    slow = SlowStore(real)
    with running(tmp_path, store=slow, url=url, max_pending_spans=10, commit_timeout_seconds=0.5,
                 retry_after_seconds=3) as target:
        answers: dict[str, tuple[int, dict[str, str], bytes]] = {}

        def send(name: str, records: list[SpanRecord]) -> None:
            answers[name] = target.post("/v1/traces", json_document(records), "application/json")

        sent_at = datetime.now(UTC)
        first = threading.Thread(target=send, args=("first", [record(5, i) for i in range(1, 9)]))
        first.start()
        assert slow.entered.acquire(timeout=30)  # the committer holds the first request's spans
        # Delivery is complete only up to the request still in its transaction: the cycle does not judge past it.
        pulled_at = datetime.now(UTC)
        (batch,) = target.receiver.pull(None, pulled_at)
        assert batch.spans == [] and batch.read_through is not None
        assert sent_at <= batch.read_through < pulled_at
        # The first is taken by the committer, so 8 more may wait; then the bound (10) is reached.
        second = threading.Thread(target=send, args=("second", [record(6, i) for i in range(1, 9)]))
        second.start()
        wait_until(lambda: target.receiver._committer is not None and target.receiver._committer.pending == 8)
        send("third", [record(7, i) for i in range(1, 9)])
        status, headers, _ = answers["third"]
        assert (status, headers["retry-after"]) == (429, "3")
        first.join(30)
        second.join(30)
        for name in ("first", "second"):
            status, headers, _ = answers[name]
            assert (status, headers["retry-after"]) == (503, "3"), name
        assert target.count("rubric_monitor_receiver_pending_spans") <= 10
        assert target.rejections("pending_full") == 1 and target.rejections("store_behind") == 2
        assert target.count("rubric_monitor_receiver_backpressure_total", code="429") == 1
        assert target.count("rubric_monitor_receiver_backpressure_total", code="503") == 2
        # The store catches up: the first batch (already in its transaction) is committed; the second was dropped
        # unanswered-200, and its retry (as the SDK sends it) is stored.
        slow.gate.set()
        wait_until(lambda: target.receiver._committer is not None and target.receiver._committer.pending == 0)
        send("second retry", [record(6, i) for i in range(1, 9)])
        assert answers["second retry"][0] == 200
        now = datetime.now(UTC)
        assert [b.read_through for b in target.receiver.pull(None, now)] == [now]  # nothing waits any more
        assert {trace for trace, _ in target.stored_ids()} >= {f"{6:032x}"}
    real.close()


def wait_until(condition: Any, timeout: float = 30) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("timed out")


def test_protobuf_is_read_as_the_json_mapping_of_the_same_request_reads() -> None:
    """The direct protobuf reader gives the records and rejections the OTLP JSON reader gives for the proto3 JSON
    mapping of the same request: every value type, events, status, kinds, and each kind of broken span."""
    from google.protobuf.json_format import MessageToDict, ParseDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from monitor.sources.otlp_receiver import read_spans, read_spans_protobuf

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "deployment.count": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER, attributes={
        "s": "text", "i": -7, "f": 1.5, "b": True, "list": ["a", "b"], "ints": [1, 2], "nan": float("nan"),
    }) as root:
        root.add_event("gen_ai.user.message", {"content": "hi", "n": 2})
        root.set_status(2, "broken")  # type: ignore[arg-type]
        with tracer.start_as_current_span("child", kind=SpanKind.CONSUMER):
            pass
    provider.shutdown()
    request = encode_spans(memory.get_finished_spans())
    broken = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "nested", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"bytesValue": "AAE="}}]}}}]},
        "scopeSpans": [{"spans": [
            {"name": "no ids"},
            {"traceId": "AAAAAAAAAAAAAAAAAAAAAA==", "spanId": "AAAAAAAAAAE=", "startTimeUnixNano": "5"},
            {"traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAE="},
            {"traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAI=", "startTimeUnixNano": "5",
             "parentSpanId": "AAE=", "events": [{"name": "no time"}]},
            {"traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAM=", "startTimeUnixNano": "5",
             "events": [{"name": "no time"}], "kind": 3, "status": {"code": 1}},
        ]}]}]}
    request.MergeFrom(ParseDict(broken, ExportTraceServiceRequest()))
    body = request.SerializeToString()
    direct = read_spans_protobuf(body)
    mapped = read_spans(MessageToDict(ExportTraceServiceRequest.FromString(body)))
    assert len(direct.records) == 3
    assert [r.model_dump(mode="json") for r in direct.records] == [r.model_dump(mode="json") for r in mapped.records]
    assert direct.rejected == mapped.rejected
    assert direct.rejected == {"missing_trace_id": 1, "invalid_trace_id": 1, "invalid_time": 1,
                               "invalid_parent_span_id": 1, "invalid_event_time": 1}


def test_readiness_fails_while_the_listener_is_down_and_a_cycle_scores_what_was_received(tmp_path: Path) -> None:
    """Through the composition root: the daemon's store is the receiver's, ``/readyz``'s check names the listener
    while it is down, and the next cycle judges the conversation a client sent."""
    import shutil

    from monitor.app import build_monitor
    from monitor.daemon.loop import readiness_problem
    from monitor.settings import Settings
    from tests.conftest import REPO
    from tests.fakes.openai_server import ScriptedOpenAIServer
    from tests.helpers import SEED_PASS_SCORES, judge_config, verdict

    (tmp_path / "rubrics").mkdir()
    shutil.copy(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml", tmp_path / "rubrics")
    (tmp_path / "token").write_text(TOKEN)
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = judge_config(judge.base_url, rubrics={"directory": str(tmp_path / "rubrics")},
                              store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
                              source={"kind": "otlp_receiver", "port": 0, "token_file": str(tmp_path / "token")},
                              conversation={"idle_timeout_seconds": 0})
        monitor = build_monitor(Settings(**config))
        try:
            assert monitor.receiver is not None
            assert readiness_problem(monitor) == "source otlp_receiver: the OTLP/HTTP listener is not running"
            monitor.receiver.start()
            assert readiness_problem(monitor) is None
            host, port = monitor.receiver.address
            exporter = OTLPSpanExporter(endpoint=f"http://{host}:{port}/v1/traces", timeout=10,
                                        headers={"Authorization": f"Bearer {TOKEN}"})
            assert exporter.export(sdk_spans(conversation="conv-cycle")) == SpanExportResult.SUCCESS
            report = monitor.run_cycle(datetime.now(UTC) + timedelta(seconds=1))
            assert report.ok and judge.count == 1
            assert [r.conversation_id for r in monitor.store.results()] == ["conv-cycle"]
            monitor.receiver.close()
            assert "listener is not running" in (readiness_problem(monitor) or "")
        finally:
            monitor.close()


def test_a_client_whose_body_stalls_is_answered_408_and_cut_off(tmp_path: Path) -> None:
    import socket

    with running(tmp_path, read_timeout_seconds=0.5) as target:
        slow = socket.create_connection((target.host, target.port), timeout=30)
        # Headers promising 100 bytes, then 10 of them, then nothing.
        slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"resourc")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = slow.recv(4096)
            assert chunk, answer
            answer += chunk
        # Answered by the listener, which reads every request whole before a handler runs (so the stalled body
        # never held a thread).
        assert answer.startswith(b"HTTP/1.0 408") and b"Connection: close" in answer, answer[:200]
        while slow.recv(4096):  # the server closes the connection
            pass
        slow.close()
        assert target.rejections("read_timeout") == 1
        assert target.count("rubric_monitor_http_connections_dropped_total", server="receiver",
                            reason="read_timeout") == 1


def read_until_closed(client: Any) -> bytes:
    answer = b""
    while chunk := client.recv(4096):
        answer += chunk
    return answer


def test_a_half_sent_request_holds_no_slot_and_past_the_bound_the_oldest_is_answered_503(tmp_path: Path) -> None:
    import socket

    with running(tmp_path, max_connections=1, retry_after_seconds=4) as target:
        holder = socket.create_connection((target.host, target.port), timeout=30)
        holder.sendall(b"POST /v1/traces HTTP/1.1\r\n")  # mid-headers, and it stays so
        server = target.receiver._server
        assert server is not None
        wait_until(lambda: server.pending == 1)
        # A whole request is served although the holder arrived first and the bound is 1: it made room by
        # dropping the connection waiting longest (the holder), which is told to come back.
        assert target.post("/v1/traces", b"{}", "application/json")[0] == 200
        answer = read_until_closed(holder)
        assert answer.startswith(b"HTTP/1.0 503") and b"Retry-After: 4" in answer, answer[:200]
        holder.close()
        assert target.rejections("too_many_connections") == 1
        assert target.count("rubric_monitor_receiver_backpressure_total", code="503") == 1
        assert target.count("rubric_monitor_http_connections_dropped_total", server="receiver",
                            reason="too_many_pending") == 1


def test_requests_past_max_connections_are_answered_503_with_retry_after_at_once(tmp_path: Path) -> None:
    url = store_test_url("sqlite", tmp_path)
    real = SqlStore(url)
    slow = SlowStore(real)
    with running(tmp_path, store=slow, url=url, max_connections=1, retry_after_seconds=4) as target:
        answers: list[tuple[int, dict[str, str], bytes]] = []
        first = threading.Thread(target=lambda: answers.append(
            target.post("/v1/traces", json_document([record(8, 1)]), "application/json")))
        first.start()
        assert slow.entered.acquire(timeout=30)  # the only worker waits for its commit
        status, headers, _ = target.post("/v1/traces", json_document([record(8, 2)]), "application/json")
        assert (status, headers.get("retry-after")) == (503, "4")
        slow.gate.set()
        first.join(30)
        assert [a[0] for a in answers] == [200]
        assert target.rejections("too_many_connections") == 1
        assert target.count("rubric_monitor_receiver_backpressure_total", code="503") == 1
        assert target.count("rubric_monitor_http_connections_dropped_total", server="receiver", reason="busy") == 1
    real.close()


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_body_near_the_limit_arrives_over_many_reads_and_one_past_it_is_refused(tmp_path: Path,
                                                                                   gzipped: bool) -> None:
    records = [record(20 + i // 8, i + 1, attributes={"gen_ai.operation.name": "chat", "pad": "x" * 1500})
               for i in range(1200)]
    body = json_document(records)  # about 2 MB
    sent = gzip.compress(body, compresslevel=1) if gzipped else body
    headers = {"Content-Encoding": "gzip"} if gzipped else {}
    with running(tmp_path, max_request_bytes=len(body) + 100) as target:
        status, _, answer = target.post("/v1/traces", sent, "application/json", headers)
        assert (status, answer) == (200, b"{}")
        assert len(target.stored_ids()) == len(records)
    with running(tmp_path, max_request_bytes=len(body) - 100) as target:
        status, _, answer = target.post("/v1/traces", sent, "application/json", headers)
        assert status == 413
        assert ("inflates to more than" if gzipped else "bytes; at most") in json.loads(answer)["message"]
        assert target.rejections("too_large") == 1


def test_a_declared_length_far_past_the_limit_is_refused_before_the_body_is_sent(tmp_path: Path) -> None:
    import socket

    with running(tmp_path, max_request_bytes=4096) as target, \
            socket.create_connection((target.host, target.port), timeout=30) as client:
        client.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000000000\r\n\r\n")
        assert read_until_closed(client).startswith(b"HTTP/1.0 413")
        assert target.rejections("too_large") == 1
        assert target.count("rubric_monitor_http_connections_dropped_total", server="receiver",
                            reason="too_large") == 1


def test_json_log_records_as_the_specification_writes_them(tmp_path: Path) -> None:
    body = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name",
                                                          "value": {"stringValue": "app"}}]},
                              "scopeLogs": [{"logRecords": [
        {"timeUnixNano": "1777777777000000000", "traceId": f"{9:032x}", "spanId": f"{3:016x}",
         "eventName": "gen_ai.user.message", "body": {"kvlistValue": {"values": [
             {"key": "content", "value": {"stringValue": "Two at eight?"}}]}}},
        {"timeUnixNano": "1777777777000000000", "traceId": "not hex", "spanId": f"{3:016x}",
         "eventName": "gen_ai.choice"},
    ]}]}]}
    with running(tmp_path) as target:
        status, _, answer = target.post("/v1/logs", json.dumps(body).encode(), "application/json")
        assert status == 200
        assert json.loads(answer) == {"partialSuccess": {
            "rejectedLogRecords": "1", "errorMessage": "1 log records could not be read: 1 x invalid_trace_id"}}
        (row,) = target.store.spans_of(f"{9:032x}")
        assert (row.kind, row.name, row.attributes["body"]) == ("event", "gen_ai.user.message",
                                                                 {"content": "Two at eight?"})


def test_without_opentelemetry_proto_the_source_is_refused_with_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from monitor.errors import ConfigError
    from monitor.sources import build_source

    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", None)
    with pytest.raises(ConfigError, match=r"source.kind.*opentelemetry-proto"):
        build_source(OtlpReceiverSourceSettings(), MonitorMetrics(CollectorRegistry()))
