"""① A source that listens: an OTLP/HTTP receiver (``POST /v1/traces``, ``POST /v1/logs``).

Applications (``OTEL_EXPORTER_OTLP_ENDPOINT``) and Collectors (the ``otlphttp`` exporter) push here, protobuf or
JSON, gzip or not, as the OTLP/HTTP specification says. Spans go straight into the store's spans table, the same
table every source's spans land in; the scoring cycle finds the conversations there.

Durable acknowledgement. A request is answered 200 only after a store transaction holding its spans has
committed: a ``kill -9`` at any instant loses no acknowledged span (what was in flight was not acknowledged, and
the client sends it again). The store keeps each (trace id, span id) once (``ResultStore.add_spans``), so a retried
request, or one that was committed but whose answer was lost, stores nothing twice. Log records (GenAI events
sent as logs) become event rows of their span (``kind == "event"``, as the App Insights source yields them) with
an id hashed from their content, so they are idempotent the same way.

Group commit. Requests hand their spans to one committer thread, which commits the spans of every request waiting
(up to ``commit_batch_spans``) in one transaction, then answers them all: one round trip per batch of requests.

Backpressure. At most ``max_pending_spans`` wait for the committer; past it a request is answered 429 with
``Retry-After`` at once. A request whose spans are not committed within ``commit_timeout_seconds`` (the store is
behind) is answered 503 with ``Retry-After``; if its spans are still waiting they are dropped, and the client's
retry brings them again. The listener is the daemon's ``BoundedHTTPServer``, with threads of its own: one reads
every connection until its request has arrived whole (within ``read_timeout_seconds``, else 408), so a slow client
holds no thread; at most ``max_connections`` requests are answered at once (one more is answered 503 with
``Retry-After`` at once), and as many may be arriving (one more drops the one waiting longest, with the same 503).
It never holds up ``/metrics`` or the scoring cycle.

Exactly once, and replicas. Every replica on one PostgreSQL may run a receiver behind one Service: each commits
into the shared spans table, and the claims share the scoring (``SqlStore.claim_ready``). ``pull`` reads nothing
(the spans are stored already); it reports how far delivery is complete: up to the oldest request still waiting
here. A request waits at most ``commit_timeout_seconds``, far below the conversations' idle timeout, which is what
keeps a conversation from being scored before another replica commits its last spans.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import threading
import time
import zlib
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from monitor.daemon.http import HEAD_BYTES, BoundedHTTPServer, HTTPLimits
from monitor.errors import ConfigError, StoreError
from monitor.formats.json_text import MAX_NESTING
from monitor.formats.otlp import (
    SCOPE_NAME,
    OtlpFormatError,
    parse_otlp_document,
    parse_unix_nanos,
)
from monitor.models import SpanRecord
from monitor.settings import OtlpReceiverSourceSettings, SecretFile
from monitor.sources.base import SourceBatch
from monitor.sources.kql import AGENT_KEYS

if TYPE_CHECKING:
    from monitor.metrics import MonitorMetrics
    from monitor.store.base import LatePolicy, ResultStore, StoredSpans

log = logging.getLogger(__name__)

SOURCE_NAME = "otlp_receiver"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_SIGNALS = {"/v1/traces": "traces", "/v1/logs": "logs"}
_ITEMS = {"traces": "spans", "logs": "log records"}


def _require_protobuf() -> None:
    """The protobuf classes of OTLP come with ``opentelemetry-proto``; say so plainly when it is missing."""
    try:
        import opentelemetry.proto.collector.logs.v1.logs_service_pb2
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError as exc:
        raise ConfigError("settings", "source.kind", f"otlp_receiver needs the opentelemetry-proto package ({exc}); "
                                                     "install it: pip install 'opentelemetry-proto>=1.25'") from None


# ---- reading requests ---------------------------------------------------------------------------------------


class RequestError(Exception):
    """A request refused whole: its status code, the counted reason and a message for the client."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass
class Received:
    """What one request carried: records to store, and those rejected (invalid) or filtered, by reason."""

    records: list[SpanRecord] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    filtered: Counter[str] = field(default_factory=Counter)


def gunzip(body: bytes, limit: int) -> bytes:
    """``body`` decompressed, refusing more than ``limit`` bytes out (a small gzip bomb stays small)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise RequestError(400, "bad_gzip", f"the body is not valid gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise RequestError(413, "too_large", f"the body inflates to more than {limit} bytes")
    if not inflater.eof:
        raise RequestError(400, "bad_gzip", "the gzip stream is cut short")
    return out


def decode_document(body: bytes, content_type: str, signal: str) -> dict[str, Any]:
    """The request as an OTLP JSON object (``{"resourceSpans": [...]}`` or ``{"resourceLogs": [...]}``).

    Protobuf is turned into the proto3 JSON mapping (ids in base64, which ``parse_id`` reads), so both encodings
    are read by the one OTLP JSON reader."""
    if content_type == PROTOBUF:
        from google.protobuf.json_format import MessageToDict

        decoded: dict[str, Any] = MessageToDict(_parse_request(body, signal))
        return decoded
    try:
        document = json.loads(body)
    except UnicodeDecodeError:
        raise RequestError(400, "bad_json", "the body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise RequestError(400, "bad_json", f"the body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(document, dict):
        raise RequestError(400, "bad_json", f"the body is a JSON {type(document).__name__}, not an object")
    return document


def _parse_request(body: bytes, signal: str) -> Any:
    """The ``Export*ServiceRequest`` of ``signal`` read from ``body``; 400 when it is not one."""
    from google.protobuf.message import DecodeError

    message = _request_message(signal)
    try:
        message.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise RequestError(400, "bad_protobuf", f"the body is not an OTLP {signal} protobuf message: "
                                                f"{str(exc)[:200]}") from None
    return message


def _request_message(signal: str) -> Any:
    if signal == "traces":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        return ExportTraceServiceRequest()
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return ExportLogsServiceRequest()


def read_spans(document: Mapping[str, Any]) -> Received:
    """The spans of a ``{"resourceSpans": [...]}`` object (an empty request is valid and holds none)."""
    if document.get("resourceSpans") is None:
        return Received()
    spans, rejected = parse_otlp_document(document)
    return Received(spans, Counter(rejected))


def read_spans_protobuf(body: bytes) -> Received:
    """The spans of an ``ExportTraceServiceRequest``, read from the protobuf objects directly: the same records
    and rejection reasons as the OTLP JSON reader gives for the same request (a test holds them equal), several
    times faster than going through the JSON mapping."""
    request = _parse_request(body, "traces")
    received = Received()
    for resource_spans in request.resource_spans:
        try:
            resource = _pb_attributes(resource_spans.resource.attributes, 0)
        except OtlpFormatError as exc:
            received.rejected[exc.reason] += 1
            resource = {}
        for scope in resource_spans.scope_spans:
            # As the JSON reader names it: the instrumentation scope tells which convention the spans follow.
            scope_name = scope.scope.name if scope.scope.name != SCOPE_NAME else ""
            for span in scope.spans:
                try:
                    received.records.append(_pb_span(span, resource, scope_name, received.rejected))
                except OtlpFormatError as exc:
                    received.rejected[exc.reason] += 1
                except (TypeError, ValueError, OverflowError, RecursionError):
                    received.rejected["malformed_span"] += 1
    return received


_PB_KINDS = {0: "internal", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_PB_STATUS = {0: "unset", 1: "ok", 2: "error"}


def _pb_id(value: bytes, size: int, field: str) -> str:
    kind = "trace" if size == 16 else "span"
    reason = "invalid_parent_span_id" if field == "parentSpanId" else f"invalid_{kind}_id"
    if not value:
        raise OtlpFormatError(reason.replace("invalid", "missing"), f"{field} is missing")
    if len(value) != size or not any(value):
        raise OtlpFormatError(reason, f"{field} is not {size} bytes, or is all zeros")
    return value.hex()


def _pb_span(span: Any, resource: dict[str, Any], scope_name: str, rejected: Counter[str]) -> SpanRecord:
    from monitor.models import SpanEvent

    trace_id = _pb_id(span.trace_id, 16, "traceId")
    span_id = _pb_id(span.span_id, 8, "spanId")
    parent = _pb_id(span.parent_span_id, 8, "parentSpanId") if span.parent_span_id else None
    start = parse_unix_nanos(span.start_time_unix_nano, "startTimeUnixNano")
    end = parse_unix_nanos(span.end_time_unix_nano, "endTimeUnixNano") if span.end_time_unix_nano else None
    events = []
    for event in span.events:
        try:
            events.append(SpanEvent(name=event.name, attributes=_pb_attributes(event.attributes, 0),
                                    time=parse_unix_nanos(event.time_unix_nano, "event timeUnixNano",
                                                          reason="invalid_event_time")))
        except OtlpFormatError as exc:
            rejected[exc.reason] += 1
    return SpanRecord(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=span.name,
                      kind=_PB_KINDS.get(span.kind, "internal"), start_time=start, end_time=end,
                      attributes=_pb_attributes(span.attributes, 0), events=tuple(events), resource=resource,
                      status=_PB_STATUS.get(span.status.code, "unset"), scope=scope_name)


_SCALARS = frozenset({"string_value", "int_value", "bool_value", "double_value"})


def _pb_attributes(attributes: Any, depth: int) -> dict[str, Any]:
    if depth >= MAX_NESTING:
        raise OtlpFormatError("malformed_attributes", f"values nested deeper than {MAX_NESTING} levels")
    read: dict[str, Any] = {}
    for kv in attributes:  # the scalar values inline: most attributes are, and a call per value is most of the cost
        value = kv.value
        which = value.WhichOneof("value")
        read[kv.key] = getattr(value, which) if which in _SCALARS else _pb_value(value, which, depth + 1)
    return read


def _pb_value(value: Any, which: str | None, depth: int) -> Any:
    if which in _SCALARS:
        return getattr(value, which)
    if which == "array_value":
        if depth >= MAX_NESTING:
            raise OtlpFormatError("malformed_attributes", f"values nested deeper than {MAX_NESTING} levels")
        return [_pb_value(item, item.WhichOneof("value"), depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values, depth)
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def read_log_records(document: Mapping[str, Any]) -> Received:
    """The GenAI log records of a ``{"resourceLogs": [...]}`` object as event records of their spans, read by the
    same reader as OTLP files (``monitor.formats.otlp``): message content that several instrumentations send as
    log records joins its span; other application logs are not content and are left out."""
    resource_logs = document.get("resourceLogs")
    if resource_logs is None:
        return Received()
    records, rejected = parse_otlp_document({"resourceLogs": resource_logs})
    received = Received(records, Counter(rejected))
    # What the reader leaves out without a rejection (application logs, not GenAI content) is counted as filtered.
    left_out = _log_record_count(resource_logs) - len(records) - sum(rejected.values())
    if left_out > 0:
        received.filtered["not_genai_content"] += left_out
    return received


def _log_record_count(resource_logs: Any) -> int:
    if not isinstance(resource_logs, list):
        return 0
    return sum(len(scope.get("logRecords") or ()) for resource in resource_logs if isinstance(resource, dict)
               for scope in resource.get("scopeLogs") or () if isinstance(scope, dict)
               and isinstance(scope.get("logRecords") or (), list))


def filter_agents(received: Received, agents: tuple[str, ...]) -> None:
    """Drop the traces whose records in this request name agents, none of them among ``agents``. Records naming
    no agent are kept: a trace's child spans often arrive before the span that names its agent."""
    if not agents:
        return
    wanted = set(agents)
    named: dict[str, set[str]] = {}
    for record in received.records:
        for key in AGENT_KEYS:
            value = record.attributes.get(key)
            if value:
                named.setdefault(record.trace_id, set()).add(str(value))
    dropped = {trace for trace, names in named.items() if not names & wanted}
    if dropped:
        kept = [r for r in received.records if r.trace_id not in dropped]
        received.filtered["other_agent"] += len(received.records) - len(kept)
        received.records = kept


# ---- answers ------------------------------------------------------------------------------------------------


def success_body(signal: str, content_type: str, rejected: int, message: str) -> bytes:
    """The ``Export*ServiceResponse``, with ``partial_success`` when some records were rejected."""
    if content_type == PROTOBUF:
        if signal == "traces":
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTracePartialSuccess,
                ExportTraceServiceResponse,
            )

            trace_response = ExportTraceServiceResponse()
            if rejected:
                trace_response.partial_success.CopyFrom(
                    ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
            return bytes(trace_response.SerializeToString())
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsPartialSuccess,
            ExportLogsServiceResponse,
        )

        logs_response = ExportLogsServiceResponse()
        if rejected:
            logs_response.partial_success.CopyFrom(
                ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message))
        return bytes(logs_response.SerializeToString())
    if not rejected:
        return b"{}"
    count = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
    return json.dumps({"partialSuccess": {count: str(rejected), "errorMessage": message}}).encode()


def status_body(content_type: str, status: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (the OTLP/HTTP error body), in the encoding of the request."""
    code = {400: 3, 401: 16, 404: 5, 405: 12, 411: 3, 413: 8, 415: 3, 429: 8, 503: 14}.get(status, 2)
    if content_type == PROTOBUF:
        text = message.encode()
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    return json.dumps({"code": code, "message": message}).encode()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def rejection_message(rejected: Mapping[str, int], items: str) -> str:
    total = sum(rejected.values())
    reasons = ", ".join(f"{count} x {reason}" for reason, count in sorted(rejected.items()))
    return f"{total} {items} could not be read: {reasons}"


# ---- the committer --------------------------------------------------------------------------------------------


@dataclass
class _Waiting:
    """One request's records waiting for their commit."""

    records: list[SpanRecord]
    received_at: datetime
    done: threading.Event = field(default_factory=threading.Event)
    stored: StoredSpans | None = None
    abandoned: bool = False


class SpanCommitter:
    """Commits the records of waiting requests, several requests per transaction, on a thread of its own."""

    def __init__(self, store: ResultStore, late_turns: LatePolicy, metrics: MonitorMetrics, *,
                 max_pending: int, batch: int, name: str = SOURCE_NAME) -> None:
        self._store = store
        self._late_turns = late_turns
        self._metrics = metrics
        self._max_pending = max_pending
        self._batch = batch
        self._name = name
        self._queue: deque[_Waiting] = deque()
        self._committing: list[_Waiting] = []
        """Taken from the queue, in the transaction now running."""
        self._pending = 0
        self._lock = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="otlp-committer", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def full(self) -> bool:
        return self._pending >= self._max_pending

    def submit(self, records: list[SpanRecord], now: datetime) -> _Waiting | None:
        """Queue ``records`` for the next commit; None when the pending bound would be passed (429). A request
        larger than the bound alone is still taken when nothing else waits, or it could never be stored."""
        with self._lock:
            if self._closing:
                return None
            if self._pending and self._pending + len(records) > self._max_pending:
                return None
            waiting = _Waiting(records, now)
            self._queue.append(waiting)
            self._pending += len(records)
            self._metrics.receiver.pending.set(self._pending)
            self._lock.notify()
            return waiting

    def abandon(self, waiting: _Waiting) -> None:
        """The request was answered 503: its records, if not taken yet, are not committed (the retry brings
        them)."""
        with self._lock:
            waiting.abandoned = True

    def oldest_waiting(self) -> datetime | None:
        """When the oldest request not committed yet arrived (queued, or in the transaction now running)."""
        with self._lock:
            waiting = [w.received_at for w in self._queue if not w.abandoned]
            return min([*waiting, *(w.received_at for w in self._committing)], default=None)

    def close(self, timeout: float = 5.0) -> None:
        """Commit what waits (within ``timeout``), then stop."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout)

    def _take(self) -> list[_Waiting]:
        with self._lock:
            while not self._queue and not self._closing:
                self._lock.wait()
            taken: list[_Waiting] = []
            size = 0
            while self._queue and (not taken or size + len(self._queue[0].records) <= self._batch):
                waiting = self._queue.popleft()
                self._pending -= len(waiting.records)
                if waiting.abandoned:
                    continue
                taken.append(waiting)
                size += len(waiting.records)
            self._committing = taken
            self._metrics.receiver.pending.set(self._pending)
            return taken

    def _run(self) -> None:
        while True:
            taken = self._take()
            if not taken:
                if self._closing:
                    return
                continue
            self._commit(taken)

    def _commit(self, taken: list[_Waiting]) -> None:
        records = [record for waiting in taken for record in waiting.records]
        checkpoint = json.dumps({"committed_at": datetime.now(UTC).isoformat()})
        started = time.perf_counter()
        error: str | None = None
        stored: StoredSpans | None = None
        try:
            stored = self._store.add_spans(self._name, records, checkpoint, self._late_turns)
        except StoreError as exc:
            error = str(exc)
        except Exception as exc:  # the committer thread must outlive any failure: the requests get a 503
            log.exception("otlp receiver: committing %d records failed", len(records))
            error = f"{type(exc).__name__}: {exc}"
        self._metrics.receiver.commit_latency.observe(time.perf_counter() - started)
        if stored is not None:
            self._metrics.spans.labels(self._name).inc(len(records))
            self._metrics.source_rows.labels(self._name).inc(len(records))
            if stored.late_ignored:
                log.info("late spans of %d already scored conversation(s) ignored", stored.late_ignored)
        else:
            log.warning("otlp receiver: the store refused %d records (%s); the clients are answered 503 and "
                        "send them again", len(records), str(error)[:300])
        with self._lock:
            self._committing = []
        for waiting in taken:
            waiting.stored = stored
            waiting.done.set()


# ---- the listener ---------------------------------------------------------------------------------------------


_DROP_REASONS = {"too_many_pending": "too_many_connections", "busy": "too_many_connections"}
"""The listener's drop reasons as ``rubric_monitor_receiver_rejections_total`` reasons (others keep their name)."""


def http_limits(settings: OtlpReceiverSourceSettings) -> HTTPLimits:
    """The listener's bounds: ``max_connections`` requests answered at once (each may wait for its commit) and as
    many more arriving; a whole request within ``read_timeout_seconds``, its body within ``max_request_bytes`` (a
    body a little over it reaches the handler, which answers 413 saying so)."""
    return HTTPLimits(max_pending=settings.max_connections, max_request_bytes=settings.max_request_bytes + HEAD_BYTES,
                      header_timeout_seconds=settings.read_timeout_seconds,
                      write_timeout_seconds=settings.read_timeout_seconds, workers=settings.max_connections,
                      max_queued=settings.max_connections, retry_after_seconds=settings.retry_after_seconds)


class OtlpReceiverSource:
    """``TraceSource`` over an OTLP/HTTP listener. Built without binding (``check`` builds every stage); the
    daemon ``attach``es the store, then ``start``s the listener and ``close``s it on the way out."""

    def __init__(self, settings: OtlpReceiverSourceSettings, metrics: MonitorMetrics,
                 name: str = SOURCE_NAME) -> None:
        _require_protobuf()
        self.name = name
        self.settings = settings
        self._metrics = metrics
        self._token = SecretFile(settings.token_file, "source.token_file") if settings.token_file else None
        self._committer: SpanCommitter | None = None
        self._server: BoundedHTTPServer | None = None
        self._read_through: datetime | None = None
        for signal in _SIGNALS.values():
            for outcome in ("stored", "duplicate", "rejected", "filtered"):
                metrics.receiver.items.labels(signal, outcome)
        metrics.receiver.up.set(0)

    # -- TraceSource

    def pull(self, checkpoint: str | None, now: datetime) -> Iterator[SourceBatch]:
        """Nothing to read (spans are stored as they arrive): how far delivery is complete, up to the oldest
        request still waiting for its commit."""
        oldest = self._committer.oldest_waiting() if self._committer is not None else None
        through = now if oldest is None else min(now, oldest)
        yield SourceBatch(spans=[], checkpoint=checkpoint or "{}", read_through=through)
        self._read_through = through

    def read_through(self) -> datetime | None:
        return self._read_through

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._metrics.receiver.up.set(0)
        if self._committer is not None:
            self._committer.close()

    # -- the daemon's side

    def attach(self, store: ResultStore, late_turns: LatePolicy) -> None:
        """The store the spans are committed to (the daemon's)."""
        self._committer = SpanCommitter(store, late_turns, self._metrics, max_pending=self.settings.max_pending_spans,
                                        batch=self.settings.commit_batch_spans, name=self.name)

    def start(self) -> tuple[str, int]:
        """Listen; returns the address. ``OSError`` when the port cannot be bound."""
        if self._committer is None:
            raise RuntimeError("attach a store before starting the receiver")
        self._server = BoundedHTTPServer(self.settings.host, self.settings.port, self._handler_class(),
                                         http_limits(self.settings), name="otlp-receiver", on_drop=self._dropped)
        self._server.start()
        self._metrics.receiver.up.set(1)
        return self.address

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            return self.settings.host, self.settings.port
        return self._server.address

    def problem(self) -> str | None:
        """Why the receiver cannot take traces now (``/readyz``)."""
        if self._server is None or not self._server.running:
            return "the OTLP/HTTP listener is not running"
        return None

    # -- requests

    def _dropped(self, reason: str) -> None:
        """A connection the listener closed before its request reached a handler: counted as a refused request (a
        503 was answered with ``Retry-After``, a 408 or a 413)."""
        self._metrics.http_connections_dropped.labels("receiver", reason).inc()
        self._metrics.receiver.rejections.labels(_DROP_REASONS.get(reason, reason)).inc()
        if reason in ("busy", "too_many_pending"):
            self._metrics.receiver.backpressure.labels("503").inc()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "rubric-monitor"
            sys_version = ""

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("otlp receiver: " + format, *args)

            def do_POST(self) -> None:
                receiver._serve(self)

            def do_GET(self) -> None:
                self._refuse_method()

            def do_PUT(self) -> None:
                self._refuse_method()

            def _refuse_method(self) -> None:
                receiver._answer(self, "traces", JSON, 405, "method_not_allowed", "only POST is served")

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        signal = _SIGNALS.get(path)
        content_type = (handler.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        answer_type = PROTOBUF if content_type == PROTOBUF else JSON
        try:
            if signal is None:
                raise RequestError(404, "not_found", f"no such path {path[:100]!r}; the receiver serves /v1/traces "
                                                     "and /v1/logs")
            self._check_token(handler)
            if content_type not in (PROTOBUF, JSON):
                raise RequestError(415, "unsupported_media_type", f"Content-Type {content_type[:80]!r} is neither "
                                                                  f"{PROTOBUF} nor {JSON}")
            body = self._read_body(handler, signal)
            received = self._decode(handler, body, content_type, signal)
        except RequestError as exc:
            self._answer(handler, signal or "traces", answer_type, exc.status, exc.reason, str(exc))
            return
        self._store(handler, signal, content_type, received)

    def _check_token(self, handler: BaseHTTPRequestHandler) -> None:
        if self._token is None:
            return
        given = handler.headers.get("Authorization") or ""
        scheme, _, token = given.partition(" ")
        expected = self._token.current().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            what = "no bearer token" if not given else "a wrong bearer token"
            raise RequestError(401, "unauthorized", f"the request carries {what}")

    def _read_body(self, handler: BaseHTTPRequestHandler, signal: str) -> bytes:
        limit = self.settings.max_request_bytes
        if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
            raise RequestError(411, "bad_length", "send the body with a Content-Length, not chunked")
        try:
            length = int(handler.headers.get("Content-Length") or "")
        except ValueError:
            raise RequestError(411, "bad_length", "the request has no valid Content-Length") from None
        if length < 0:
            raise RequestError(411, "bad_length", "the request has no valid Content-Length")
        if length > limit:
            raise RequestError(413, "too_large", f"the body has {length} bytes; at most {limit} are taken")
        # The listener read the whole request before this handler runs (within read_timeout_seconds).
        body = handler.rfile.read(length)
        if len(body) < length:
            raise RequestError(400, "bad_length", "the body ended before its Content-Length")
        self._metrics.receiver.bytes.labels(signal).inc(len(body))
        return body

    def _decode(self, handler: BaseHTTPRequestHandler, body: bytes, content_type: str, signal: str) -> Received:
        encoding = (handler.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding == "gzip":
            body = gunzip(body, self.settings.max_request_bytes)
        elif encoding != "identity":
            raise RequestError(415, "bad_encoding", f"Content-Encoding {encoding[:40]!r} is not served; send gzip "
                                                    "or nothing")
        if self._committer is not None and self._committer.full():
            # Refused before the costly part: decoding what cannot be queued.
            raise RequestError(429, "pending_full", "the receiver has as many spans waiting as it may hold")
        if signal == "traces" and content_type == PROTOBUF:
            received = read_spans_protobuf(body)
        else:
            document = decode_document(body, content_type, signal)
            received = read_spans(document) if signal == "traces" else read_log_records(document)
        filter_agents(received, self.settings.agents)
        return received

    def _store(self, handler: BaseHTTPRequestHandler, signal: str, content_type: str, received: Received) -> None:
        items = self._metrics.receiver.items
        rejected = sum(received.rejected.values())
        for reason, count in received.rejected.items():
            self._metrics.spans_rejected.labels(self.name, reason).inc(count)
        message = rejection_message(received.rejected, _ITEMS[signal]) if rejected else ""
        if received.records:
            assert self._committer is not None
            waiting = self._committer.submit(received.records, datetime.now(UTC))
            if waiting is None:
                self._answer(handler, signal, content_type, 429, "pending_full",
                             "the receiver has as many spans waiting as it may hold")
                return
            if not waiting.done.wait(self.settings.commit_timeout_seconds):
                self._committer.abandon(waiting)
                self._answer(handler, signal, content_type, 503, "store_behind",
                             "the store did not commit the spans in time")
                return
            if waiting.stored is None:
                self._answer(handler, signal, content_type, 503, "store_error", "the store is unavailable")
                return
            # Several requests share a transaction: a request's own share of duplicates is not told apart.
            duplicates = min(waiting.stored.duplicates, len(received.records))
            items.labels(signal, "stored").inc(len(received.records) - duplicates)
            items.labels(signal, "duplicate").inc(duplicates)
        items.labels(signal, "rejected").inc(rejected)
        items.labels(signal, "filtered").inc(sum(received.filtered.values()))
        self._send(handler, signal, 200, content_type, success_body(signal, content_type, rejected, message))

    def _answer(self, handler: BaseHTTPRequestHandler, signal: str, content_type: str, status: int, reason: str,
                message: str) -> None:
        self._metrics.receiver.rejections.labels(reason).inc()
        headers: dict[str, str] = {}
        if status in (429, 503):
            headers["Retry-After"] = str(self.settings.retry_after_seconds)
            self._metrics.receiver.backpressure.labels(str(status)).inc()
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="otlp"'
        # Counted, not logged at INFO: under overload every second would bring hundreds of these lines.
        log.debug("otlp receiver: %d %s: %s", status, reason, message)
        self._send(handler, signal, status, content_type, status_body(content_type, status, message), headers)

    def _send(self, handler: BaseHTTPRequestHandler, signal: str, status: int, content_type: str, body: bytes,
              headers: Mapping[str, str] | None = None) -> None:
        self._metrics.receiver.requests.labels(signal, str(status)).inc()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:  # the client left; it sends again if it did not get the answer
            log.debug("otlp receiver: the client left before its %d answer", status)

