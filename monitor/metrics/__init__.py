"""⑥ Metrics. In: recorded results and the stages' counters. Out: the Prometheus families (``catalog``), the
rolling-window quality gauges (``quality`` over ``rollups``) and the ``/metrics`` body rendered once per cycle
(``exposition``)."""

from monitor.metrics.catalog import SKIP_REASONS, JudgeTrustMetrics, MonitorMetrics, catalog, metrics_table

__all__ = ["SKIP_REASONS", "JudgeTrustMetrics", "MonitorMetrics", "catalog", "metrics_table"]
