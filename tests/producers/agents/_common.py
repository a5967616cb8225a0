"""What every agent program shares: its settings (from the environment the harness sets), OpenTelemetry SDK
setup (OTLP/HTTP protobuf exporters for spans and logs, plus the Azure Monitor exporters when a connection
string is given and the package is installed), the app span per session, and flushing before exit.

Imports only the standard library and the OpenTelemetry API/SDK of the producer venv.

Environment set by ``tests/producers/run.py``:

- ``PRODUCER_OPENAI_BASE_URL``: the scripted server (ends in ``/v1``); ``OPENAI_API_KEY`` is a dummy.
- ``PRODUCER_OTLP_ENDPOINT``: the receiver's base URL (``/v1/traces`` and ``/v1/logs`` are appended).
- ``PRODUCER_STREAM``: ``0`` (plain) or ``1`` (streamed; the server picks the stream flavour).
- ``PRODUCER_APP_SPAN``: ``1`` to wrap each session in an app span ``session`` carrying
  ``gen_ai.conversation.id``.
- ``PRODUCER_APPINSIGHTS_CONNECTION_STRING``: optional; also export to this ingestion endpoint.
- ``PRODUCER_OPTIONS``: comma-separated flags an agent program understands (e.g. ``use_attributes_false``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.producers import scenario  # noqa: E402

SERVICE_NAME = "table-booker"
APP_TRACER = "table-booker.app"


@dataclass
class Settings:
    base_url: str
    otlp_endpoint: str
    stream: bool
    app_span: bool
    connection_string: str | None
    options: set[str] = field(default_factory=set)

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            base_url=os.environ["PRODUCER_OPENAI_BASE_URL"],
            otlp_endpoint=os.environ["PRODUCER_OTLP_ENDPOINT"].rstrip("/"),
            stream=os.environ.get("PRODUCER_STREAM", "0") == "1",
            app_span=os.environ.get("PRODUCER_APP_SPAN", "0") == "1",
            connection_string=os.environ.get("PRODUCER_APPINSIGHTS_CONNECTION_STRING") or None,
            options={o for o in os.environ.get("PRODUCER_OPTIONS", "").split(",") if o},
        )


class Telemetry:
    """Global tracer and logger providers exporting to the harness; ``shutdown()`` flushes everything."""

    def __init__(self, settings: Settings) -> None:
        from opentelemetry import trace
        from opentelemetry._logs import set_logger_provider
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": SERVICE_NAME})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint + "/v1/traces")))
        self.logger_provider = LoggerProvider(resource=resource)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=settings.otlp_endpoint + "/v1/logs")))
        self.azure_monitor = False
        if settings.connection_string:
            self.azure_monitor = self._add_azure_monitor(settings.connection_string)
        trace.set_tracer_provider(self.tracer_provider)
        set_logger_provider(self.logger_provider)
        # Instrumentations that still emit through the (deprecated) Events API need its provider too.
        with contextlib.suppress(ImportError):
            from opentelemetry._events import set_event_logger_provider
            from opentelemetry.sdk._events import EventLoggerProvider

            set_event_logger_provider(EventLoggerProvider(self.logger_provider))
        self.tracer = trace.get_tracer(APP_TRACER)

    def _add_azure_monitor(self, connection_string: str) -> bool:
        try:
            from azure.monitor.opentelemetry.exporter import AzureMonitorLogExporter, AzureMonitorTraceExporter
        except ImportError as exc:
            print(f"azure-monitor-opentelemetry-exporter not importable: {exc}", file=sys.stderr)
            return False
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        os.environ.setdefault("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")
        os.environ.setdefault("APPLICATIONINSIGHTS_SDKSTATS_DISABLED", "true")
        options: dict[str, Any] = {"connection_string": connection_string, "disable_offline_storage": True}
        self.tracer_provider.add_span_processor(BatchSpanProcessor(AzureMonitorTraceExporter(**options)))
        self.logger_provider.add_log_record_processor(BatchLogRecordProcessor(AzureMonitorLogExporter(**options)))
        return True

    @contextlib.contextmanager
    def session_span(self, settings: Settings, session: scenario.Session) -> Iterator[None]:
        """The app's own span around one session, when asked for: ``session`` (INTERNAL) with
        ``gen_ai.conversation.id``. Otherwise nothing: each chat call is then a root span."""
        if not settings.app_span:
            yield
            return
        with self.tracer.start_as_current_span("session", attributes={
                "gen_ai.conversation.id": session.conversation_id}):
            yield

    def shutdown(self) -> None:
        self.tracer_provider.force_flush()
        self.logger_provider.force_flush()
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


def run_agent(run: Callable[[Settings, Telemetry], Awaitable[None]]) -> None:
    """An async agent program's ``main``: telemetry set up from the environment, ``run``, everything flushed."""
    settings = Settings.from_env()
    telemetry = Telemetry(settings)
    try:
        asyncio.run(run(settings, telemetry))
    finally:
        telemetry.shutdown()


def openai_tools() -> list[dict[str, Any]]:
    return scenario.TOOLS
