"""① Trace sources. In: a checkpoint and the current time. Out: batches of ``SpanRecord`` with the next checkpoint
and the spans rejected, by reason. ``TraceSource`` is the contract; ``OtlpFileSource`` and ``AppInsightsSource``
implement it and ``InMemorySource`` is their twin for tests. ``build_source`` picks one from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from monitor.settings import SourceSettings
from monitor.sources.base import SourceBatch, TraceSource
from monitor.sources.memory import InMemorySource

if TYPE_CHECKING:
    from monitor.metrics import MonitorMetrics

__all__ = ["InMemorySource", "SourceBatch", "TraceSource", "build_source"]


def build_source(settings: SourceSettings, metrics: MonitorMetrics) -> TraceSource:
    """The source ``settings.kind`` names; each is imported only when chosen (App Insights brings the Azure SDK)."""
    if settings.kind == "otlp_file":
        from monitor.sources.otlp_file import OtlpFileSource

        return OtlpFileSource(settings.path, max_line_bytes=settings.max_line_bytes,
                              max_span_bytes=settings.max_span_bytes)
    from monitor.sources.app_insights import AppInsightsSource

    return AppInsightsSource(settings, metrics)
