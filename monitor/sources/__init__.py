"""① Trace sources. In: a checkpoint and the current time. Out: batches of ``SpanRecord`` with the next checkpoint
and the spans rejected, by reason. ``TraceSource`` is the contract; ``OtlpFileSource``, ``AppInsightsSource`` and
``OtlpReceiverSource`` (an OTLP/HTTP endpoint that stores spans as they arrive) implement it and
``InMemorySource`` is their twin for tests. ``build_source`` picks one from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from monitor.settings import SourceSettings
from monitor.sources.base import SourceBatch, TraceSource
from monitor.sources.memory import InMemorySource
from monitor.sources.otlp_file import OtlpFileSource

if TYPE_CHECKING:
    from monitor.metrics import MonitorMetrics
    from monitor.sources.app_insights import AppInsightsSource

__all__ = ["AppInsightsSource", "InMemorySource", "OtlpFileSource", "SourceBatch", "TraceSource", "build_source"]


def __getattr__(name: str) -> object:
    """``AppInsightsSource`` brings the Azure SDK: imported on first use."""
    if name == "AppInsightsSource":
        from monitor.sources.app_insights import AppInsightsSource

        return AppInsightsSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_source(settings: SourceSettings, metrics: MonitorMetrics) -> TraceSource:
    """The source ``settings.kind`` names; each is imported only when chosen (App Insights brings the Azure SDK)."""
    if settings.kind == "otlp_file":
        return OtlpFileSource(settings.path, max_line_bytes=settings.max_line_bytes,
                              max_span_bytes=settings.max_span_bytes)
    if settings.kind == "otlp_receiver":
        from monitor.sources.otlp_receiver import OtlpReceiverSource

        return OtlpReceiverSource(settings, metrics)
    from monitor.sources.app_insights import AppInsightsSource

    return AppInsightsSource(settings, metrics)
