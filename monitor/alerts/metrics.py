"""The detector's state as Prometheus metrics, on the daemon's registry.

Gauges come from the last detection, swapped in whole at the end of a cycle (a scrape never sees half a cycle,
and series that disappeared are gone): ``rubric_monitor_regression`` is 1 while the daemon's alert for that
(rubric, agent, kind, dimension) is firing on that baseline, so one Prometheus rule (``rubric_monitor_regression ==
1``, no ``for:``: the daemon already applied it) routes it through an existing Alertmanager.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from monitor.alerts.detector import CANNOT_JUDGE_REASONS, Detection, Kind, SeriesKey
from monitor.alerts.lifecycle import AlertState, by_fields

_LABELS = ["rubric", "agent", "kind", "dimension", "baseline"]


class _DetectionCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: list[Metric] = []

    def publish(self, families: list[Metric]) -> None:
        with self._lock:
            self._families = families

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            return list(self._families)


class AlertMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.notifications = Counter(
            "rubric_monitor_notifications",
            "Notification attempts by outcome: sent, retry (an attempt failed and will be retried), failed (given "
            "up), silenced, dropped (notifier no longer configured).",
            ["notifier", "outcome"],
            registry=registry,
        )
        self._collector = _DetectionCollector()
        registry.register(self._collector)

    def publish(self, detection: Detection, states: dict[str, AlertState]) -> None:
        regression = GaugeMetricFamily(
            "rubric_monitor_regression", "1 while a quality regression alert is firing (after persistence).",
            labels=_LABELS)
        effect = GaugeMetricFamily(
            "rubric_monitor_regression_effect",
            "Current minus baseline: pass-rate points (0..1) or mean-score points (1..5).", labels=_LABELS)
        p_value = GaugeMetricFamily(
            "rubric_monitor_regression_p_value", "One-sided p-value of the drop (before FDR adjustment).",
            labels=_LABELS)
        samples = GaugeMetricFamily(
            "rubric_monitor_regression_samples", "Sample sizes of the test, window current or baseline.",
            labels=[*_LABELS, "window"])
        cannot_judge = GaugeMetricFamily(
            "rubric_monitor_cannot_judge",
            "1 while a series cannot be judged for this reason (unscored, judge_errors, source_behind, "
            "judge_unavailable); its quality alerts neither fire nor resolve.",
            labels=["rubric", "agent", "reason"])
        per_baseline = detection.per_baseline()
        published = set(per_baseline)
        # Samples are appended directly with one shared label dict per series: at 100 rubrics x 20 agents x 10
        # dimensions this is ~100k samples per cycle, and add_metric's per-call dict dominated the cycle.
        known = by_fields(states)
        for (key, baseline), verdict in sorted(per_baseline.items()):
            labels = {"rubric": key.rubric, "agent": key.agent, "kind": key.kind, "dimension": key.dimension,
                      "baseline": baseline}
            state = known.get(key)
            firing = state is not None and state.state == "firing" and state.baseline == baseline
            regression.samples.append(Sample(regression.name, labels, 1.0 if firing else 0.0))
            if verdict.test is not None:
                effect.samples.append(Sample(effect.name, labels, verdict.test.effect))
                p_value.samples.append(Sample(p_value.name, labels, verdict.test.p_value))
            samples.samples.append(Sample(samples.name, {**labels, "window": "current"}, verdict.current_n))
            samples.samples.append(Sample(samples.name, {**labels, "window": "baseline"}, verdict.baseline_n))
        # A firing alert whose series has no data this cycle stays firing (no data is never a recovery): its flag
        # stays too, or Prometheus would resolve what the daemon has not.
        for state in states.values():
            if state.state == "firing" and (_key_of(state), state.baseline) not in published:
                regression.add_metric([state.rubric, state.agent, state.kind, state.dimension,
                                       state.baseline or "trailing"], 1.0)
        for (rubric, agent), reasons in sorted(detection.cannot_judge.items()):
            for reason in CANNOT_JUDGE_REASONS:
                cannot_judge.add_metric([rubric, agent, reason], 1.0 if reason in reasons else 0.0)
        self._collector.publish([regression, effect, p_value, samples, cannot_judge])


def _key_of(state: AlertState) -> SeriesKey:
    kind: Kind = "pass_rate" if state.kind == "pass_rate" else "dimension_mean"
    return SeriesKey(state.rubric, state.agent, kind, state.dimension)
