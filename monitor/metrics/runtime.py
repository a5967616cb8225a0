"""Metrics of the production runtime (write-back, backfill), a block of their own held by ``MonitorMetrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.writeback = Counter(
            "rubric_monitor_writeback", "Results written back as OpenTelemetry events, by exporter and outcome "
            "(sent, failed).", ["exporter", "outcome"], registry=registry)
        self.outbox_pending = Gauge(
            "rubric_monitor_outbox_pending", "Results waiting in the store's outbox to be written back.",
            registry=registry)
        self.backfill_evaluations = Counter(
            "rubric_monitor_backfill_evaluations", "Evaluations a backfill recorded, by rubric and outcome (pass, "
            "fail, unscored, already_scored).", ["rubric", "outcome"], registry=registry)
        self.backfill_progress = Gauge(
            "rubric_monitor_backfill_progress_ratio", "Share of the backfill window's conversations done (scored "
            "now or before).", ["rubric"], registry=registry)
