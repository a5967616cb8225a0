"""The daemon as a subprocess with ``source.kind: otlp_receiver``: applications send with the OpenTelemetry SDK
(protobuf spans and log records) or OTLP JSON, and their conversations are scored; killed with ``kill -9`` at
random points while batches arrive, it loses no span it acknowledged and stores none twice.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanKind, set_span_in_context

from monitor.formats.otlp import spans_to_otlp_document
from tests.conftest import REPO
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, store_test_url, verdict, write_config
from tests.test_daemon import Daemon, free_port, get, samples, wait_for
from tools.chat_to_otlp import chat_record_to_spans

TOKEN = "receiver-token"
BATCHES = 40
SPANS_PER_BATCH = 64


def receiver_config(tmp_path: Path, judge_url: str, port: int, receiver_port: int, url: str) -> Path:
    (tmp_path / "token").write_text(TOKEN)
    if not (tmp_path / "rubrics").exists():
        (tmp_path / "rubrics").mkdir()
        rubric = REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"
        (tmp_path / "rubrics" / rubric.name).write_text(rubric.read_text())
    return write_config(tmp_path / "config.yaml", judge_config(
        judge_url,
        source={"kind": "otlp_receiver", "host": "127.0.0.1", "port": receiver_port,
                "token_file": str(tmp_path / "token")},
        rubrics={"directory": str(tmp_path / "rubrics")},
        store={"url": url},
        metrics={"host": "127.0.0.1", "port": port},
        conversation={"idle_timeout_seconds": 1},
        replicas={"lease_seconds": 3},
        interval_seconds=1,
    ))


def results(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return {str(r[0]) for r in conn.exec_driver_sql("select conversation_id from results")}
    except sqlalchemy.exc.DBAPIError:
        return set()
    finally:
        engine.dispose()


def record_turn(provider: TracerProvider, logs: LoggerProvider, conversation: str) -> None:
    """One turn of a reservation agent as an instrumentation that sends message content as GenAI events in log
    records records it (opentelemetry-instrumentation-openai-v2): the agent and chat spans, and the system, user
    and assistant messages as log records of the chat span."""
    tracer = provider.get_tracer("reservation-app")
    with tracer.start_as_current_span("invoke_agent reservation-assistant", kind=SpanKind.INTERNAL, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reservation-assistant",
        "gen_ai.conversation.id": conversation,
    }), tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
    }) as chat:
        context = set_span_in_context(NonRecordingSpan(chat.get_span_context()))
        events = logs.get_logger("opentelemetry.instrumentation.openai_v2")
        events.emit(event_name="gen_ai.system.message", body={"content": "You book tables at Nova."},
                    context=context)
        events.emit(event_name="gen_ai.user.message", body={"content": f"{conversation}: a table for two at 8?"},
                    context=context)
        events.emit(event_name="gen_ai.choice", context=context, body={
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": f"{conversation}: booked for two at 8."}})


def test_applications_send_with_the_sdk_and_their_conversations_are_scored(tmp_path: Path) -> None:
    port, receiver_port = free_port(), free_port()
    url = f"sqlite:///{tmp_path / 'results.db'}"
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        daemon = Daemon(receiver_config(tmp_path, judge.base_url, port, receiver_port, url), tmp_path, port)
        try:
            wait_for(lambda: get_status(daemon.base + "/readyz") == 200, 60, "the daemon to be ready")
            endpoint = f"http://127.0.0.1:{receiver_port}"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            resource = Resource.create({"service.name": "reservation-app"})
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces",
                                                                            headers=headers)))
            logs = LoggerProvider(resource=resource)
            logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=endpoint + "/v1/logs",
                                                                                  headers=headers)))
            for conversation in ("sdk-1", "sdk-2"):
                record_turn(provider, logs, conversation)
            assert provider.force_flush() and logs.force_flush()
            # OTLP JSON as the specification writes it, from another producer.
            chat = {"id": "json-1", "agent": "reservation-assistant", "messages": [
                {"role": "user", "content": "Can I book the terrace?"},
                {"role": "assistant", "content": "Yes, for 8 pm."}]}
            body = json.dumps(spans_to_otlp_document(chat_record_to_spans(chat, 0))).encode()
            request = urllib.request.Request(endpoint + "/v1/traces", body, method="POST",
                                             headers={"Content-Type": "application/json", **headers})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200 and json.loads(response.read()) == {}
            wait_for(lambda: results(url) >= {"sdk-1", "sdk-2", "json-1"}, 60, "the three conversations scored")
            # The user's message came as a log record: the judge saw it.
            prompts = "\n".join(r.prompt_text for r in judge.requests)
            assert "sdk-1: a table for two at 8?" in prompts and "sdk-1: booked for two at 8." in prompts
            text = daemon.metrics()
            assert samples(text, "rubric_monitor_receiver_up") == [({}, 1.0)]
            stored = {labels["signal"]: v for labels, v in samples(text, "rubric_monitor_receiver_items_total")
                      if labels["outcome"] == "stored"}
            assert stored == {"traces": 6.0, "logs": 6.0}
            provider.shutdown()
            logs.shutdown()
        finally:
            assert daemon.stop() == 0, daemon.log.read_text()[-3000:]


def get_status(address: str) -> int:
    try:
        return get(address)[0]
    except OSError:
        return 0


# ---- kill -9 ---------------------------------------------------------------------------------------------------


def batches() -> list[Sequence[ReadableSpan]]:
    """BATCHES batches of SPANS_PER_BATCH spans recorded by the SDK, each span a trace of its own."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "load"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("load")
    for index in range(BATCHES * SPANS_PER_BATCH):
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat",
                                                              "gen_ai.conversation.id": f"load-{index // 8}"}):
            pass
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return [spans[i:i + SPANS_PER_BATCH] for i in range(0, len(spans), SPANS_PER_BATCH)]


def span_ids(spans: Sequence[ReadableSpan]) -> set[tuple[str, str]]:
    return {(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")) for s in spans}


class Sender(threading.Thread):
    """Sends every batch with the SDK's exporter (which retries connection errors, 429 and 503 within its timeout),
    again and again until each was acknowledged; some acknowledged ones are sent again too, as a client whose
    answer was lost would."""

    def __init__(self, endpoint: str, work: list[Sequence[ReadableSpan]]) -> None:
        super().__init__(daemon=True)
        self.exporter = OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=3)
        self.work = work
        self.acknowledged: set[int] = set()
        self.sent_again = 0
        self.stop = threading.Event()
        self.chooser = random.Random(22)

    def run(self) -> None:
        while not self.stop.is_set() and len(self.acknowledged) < len(self.work):
            index = next(i for i in range(len(self.work)) if i not in self.acknowledged)
            if self.exporter.export(self.work[index]) == SpanExportResult.SUCCESS:
                self.acknowledged.add(index)
                if self.chooser.random() < 0.2:
                    again = self.chooser.choice(sorted(self.acknowledged))
                    assert self.exporter.export(self.work[again]) in (SpanExportResult.SUCCESS,
                                                                      SpanExportResult.FAILURE)
                    self.sent_again += 1


def stored_spans(url: str) -> list[tuple[str, str]]:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return [(str(r[0]), str(r[1])) for r in conn.exec_driver_sql("select trace_id, span_id from spans")]
    finally:
        engine.dispose()


# Each start of the daemon takes seconds on a loaded machine: 5 kills on SQLite, 3 on PostgreSQL (50 in the
# benchmark, benchmarks/bench_receiver.py).
@pytest.mark.parametrize(("backend", "kills"), [("sqlite", 5), ("postgres", 3)])
def test_kill_9_while_batches_arrive_loses_no_acknowledged_span_and_doubles_none(tmp_path: Path, backend: str,
                                                                                  kills: int) -> None:
    url = store_test_url(backend, tmp_path)
    port, receiver_port = free_port(), free_port()
    work = batches()
    chooser = random.Random(9)
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as judge:
        config = receiver_config(tmp_path, judge.base_url, port, receiver_port, url)
        sender = Sender(f"http://127.0.0.1:{receiver_port}/v1/traces", work)
        sender.start()
        try:
            for _ in range(kills):
                daemon = Daemon(config, tmp_path, port)
                target = len(sender.acknowledged) + chooser.randint(1, 4)
                try:
                    deadline = time.monotonic() + 60
                    while len(sender.acknowledged) < target and daemon.process.poll() is None:
                        assert time.monotonic() < deadline, "no batch acknowledged in 60s"
                        time.sleep(0.005)
                    time.sleep(chooser.uniform(0, 0.05))  # anywhere in the next request: reading, committing
                finally:
                    daemon.process.send_signal(signal.SIGKILL)
                    daemon.process.wait(timeout=30)
                # Acknowledged is committed, even by the daemon just killed.
                acknowledged = set().union(*(span_ids(work[i]) for i in set(sender.acknowledged)))
                assert acknowledged <= set(stored_spans(url))
            assert len(sender.acknowledged) < len(work), "every batch was sent before the kills: nothing tested"
            daemon = Daemon(config, tmp_path, port)
            try:
                wait_for(lambda: len(sender.acknowledged) == len(work), 120, "every batch acknowledged")
            finally:
                assert daemon.stop() == 0, daemon.log.read_text()[-3000:]
        finally:
            sender.stop.set()
            sender.join(30)
    everything = set().union(*(span_ids(batch) for batch in work))
    final = stored_spans(url)
    assert len(final) == len(set(final)) == len(everything)
    assert set(final) == everything
    assert sender.sent_again > 0

