"""Write-back: every result emitted as the OpenTelemetry ``gen_ai.evaluation.result`` event, in the context of the
trace it evaluated, to any OTLP/HTTP endpoint or to Application Insights.

Results reach the exporter through the store's outbox (``writeback_outbox``): a row is inserted in the transaction
that records the result and deleted once the exporter acknowledged the request carrying it, so a restart neither
loses an event nor sends one twice, unless it dies in the instant between the acknowledgement and the delete (then
that one batch is sent again; ``rubric_monitor.result_id`` lets a consumer drop the repeat). One replica at a time
sends (an advisory lock). The exporters' own retries and offline storage are off: the outbox is the retry.

Attributes: ``gen_ai.evaluation.name`` (the rubric), ``gen_ai.evaluation.score.value``,
``gen_ai.evaluation.score.label`` (pass, fail, unscored), ``gen_ai.evaluation.explanation``,
``gen_ai.response.id`` (of the conversation's last reply, when its spans carry one), ``gen_ai.conversation.id``,
``gen_ai.evaluation.dimension.<id>.score`` per applicable dimension, and ``rubric_monitor.*`` (rubric version,
judge model, turn, revision, result id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from monitor import __version__
from monitor.errors import ConfigError, StoreError
from monitor.metrics.runtime import RuntimeMetrics
from monitor.models import EvaluationResult, SpanRecord
from monitor.redaction import remember_secret
from monitor.settings import WritebackSettings, read_secret
from monitor.store.sql import SqlStore

log = logging.getLogger(__name__)

EVENT_NAME = "gen_ai.evaluation.result"
EXPLANATION_MAX_CHARS = 8_192
_SCOPE = InstrumentationScope("rubric-monitor", __version__)
_RESOURCE = Resource.create({"service.name": "rubric-monitor", "service.version": __version__})


def writeback_headers(settings: WritebackSettings) -> dict[str, str]:
    """``headers`` plus those of ``headers_file`` (one ``Name: value`` per line; blank lines and ``#`` comments
    skipped), whose values are remembered as secrets: they are a mounted secret's."""
    headers = dict(settings.headers)
    if settings.headers_file is None:
        return headers
    where = str(settings.headers_file)
    try:
        text = settings.headers_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(where, "writeback.headers_file", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(where, "writeback.headers_file", "is not UTF-8 text") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip() or not value.strip():
            # The line is not echoed: it may be a credential.
            raise ConfigError(where, "writeback.headers_file", f"line {number} is not `Name: value`")
        remember_secret(value.strip())
        headers[name.strip()] = value.strip()
    return headers


def build_exporter(settings: WritebackSettings) -> LogRecordExporter | None:
    """The configured exporter, or None when write-back is off. ``ConfigError`` when its package is missing."""
    if settings.kind == "off":
        return None
    if settings.kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        except ImportError as exc:
            raise ConfigError("settings", "writeback.kind", "otlp needs `pip install rubric-monitor[otlp]`") from exc
        return OTLPLogExporter(endpoint=settings.endpoint, headers=writeback_headers(settings),
                               timeout=settings.timeout_seconds)
    connection = read_secret(settings.connection_string, settings.connection_string_file,
                             "writeback.connection_string_file")
    if not connection:
        raise ConfigError("settings", "writeback.connection_string", "azure_monitor needs a connection string")
    try:
        from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter
    except ImportError as exc:
        raise ConfigError("settings", "writeback.kind",
                          "azure_monitor needs `pip install rubric-monitor[azure-monitor]`") from exc
    exporter: LogRecordExporter = AzureMonitorLogExporter(
        connection_string=connection, disable_offline_storage=True, timeout=settings.timeout_seconds)
    return exporter


def trace_context(spans: Sequence[SpanRecord], result: EvaluationResult) -> tuple[int, int, str | None]:
    """(trace id, span id, response id) the event belongs to: the conversation's last span carrying a
    ``gen_ai.response.id`` (the reply that was judged), else its root span; (0, 0, None) when its spans are gone."""
    if not spans:
        return 0, 0, None
    replies = [s for s in spans if s.attributes.get("gen_ai.response.id")]
    chosen = replies[-1] if replies else next((s for s in spans if not s.parent_span_id), spans[0])
    response = chosen.attributes.get("gen_ai.response.id")
    try:
        return int(chosen.trace_id, 16), int(chosen.span_id, 16), None if response is None else str(response)
    except ValueError:
        return 0, 0, None if response is None else str(response)


def event(result_id: int, result: EvaluationResult, spans: Sequence[SpanRecord],
          scrub: Callable[[str], str] | None = None) -> ReadableLogRecord:
    """``scrub`` redacts the explanation (``redaction.apply_to`` has ``writeback``)."""
    trace_id, span_id, response_id = trace_context(spans, result)
    explanation = result.reason or result.unscored_reason or ""
    if scrub is not None:
        explanation = scrub(explanation)
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": result.rubric,
        "gen_ai.evaluation.score.label": result.outcome,
        "gen_ai.evaluation.explanation": explanation[:EXPLANATION_MAX_CHARS],
        "gen_ai.conversation.id": result.conversation_id,
        "rubric_monitor.rubric_version": result.rubric_version,
        "rubric_monitor.rubric_kind": result.rubric_kind,
        "rubric_monitor.judge_model": result.judge_model,
        "rubric_monitor.revision": result.revision,
        "rubric_monitor.result_id": result_id,
    }
    if result.score is not None:
        attributes["gen_ai.evaluation.score.value"] = float(result.score)
    if response_id is not None:
        attributes["gen_ai.response.id"] = response_id
    if result.turn_index is not None:
        attributes["rubric_monitor.turn_index"] = result.turn_index
    for dimension in result.dimension_scores:
        if dimension.applicable and dimension.score is not None:
            attributes[f"gen_ai.evaluation.dimension.{dimension.id}.score"] = dimension.score
    context = None
    if trace_id and span_id:
        context = set_span_in_context(NonRecordingSpan(SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))))
    timestamp = int(result.evaluated_at.timestamp() * 1e9)
    record = LogRecord(timestamp=timestamp, observed_timestamp=timestamp, context=context, event_name=EVENT_NAME,
                       body=EVENT_NAME, attributes=attributes)
    return ReadableLogRecord(log_record=record, resource=_RESOURCE, instrumentation_scope=_SCOPE)


class WriteBack:
    """Drains the outbox through one exporter, ``batch`` events per request, at the end of every cycle."""

    def __init__(self, store: SqlStore, exporter: LogRecordExporter, name: str, metrics: RuntimeMetrics,
                 batch: int = 200, scrub: Callable[[str], str] | None = None) -> None:
        self.store = store
        self.scrub = scrub
        self.exporter = exporter
        self.name = name
        self.metrics = metrics
        self.batch = batch
        store.outbox_enabled = True
        metrics.writeback.labels(name, "sent")
        metrics.writeback.labels(name, "failed")

    def flush(self, max_batches: int = 50) -> int:
        """Send what the outbox holds (at most ``max_batches`` requests); returns events sent. A failed request
        stops the flush (the endpoint is down: the rest waits for the next cycle)."""
        sent = 0
        try:
            with self.store.singleton_lock("writeback") as mine:
                if not mine:
                    return 0
                for _ in range(max_batches):
                    batch = self.store.outbox_batch(self.batch)
                    if not batch:
                        break
                    records = [event(result_id, result, self.store.spans_of(result.conversation_id), self.scrub)
                               for result_id, result in batch]
                    ids = [result_id for result_id, _ in batch]
                    if self.exporter.export(records) != LogRecordExportResult.SUCCESS:
                        self.store.outbox_failed(ids)
                        self.metrics.writeback.labels(self.name, "failed").inc(len(ids))
                        log.warning("write-back: %s refused %d event(s); they stay queued", self.name, len(ids))
                        break
                    self.store.outbox_done(ids)
                    self.metrics.writeback.labels(self.name, "sent").inc(len(ids))
                    sent += len(ids)
            self.metrics.outbox_pending.set(self.store.outbox_pending())
        except StoreError as exc:
            log.warning("write-back: %s", exc)
        return sent

    def close(self) -> None:
        self.exporter.shutdown()  # type: ignore[no-untyped-call]
