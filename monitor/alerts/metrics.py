"""The detector's state as Prometheus metrics, on the daemon's registry, rendered once per cycle.

``rubric_monitor_regression`` is 1 while the daemon's alert for that (rubric, agent, kind, dimension) is firing on
that baseline and 0 for every other series the detector judged, so one Prometheus rule (``rubric_monitor_regression
== 1``, no ``for:``: the daemon already applied it) routes it through an existing Alertmanager. The detail of a
test (effect, p-value, sample sizes) is only exported for the series worth a look: a verdict other than ``ok``
(regression, no verdict, cannot judge) or an alert pending or firing; at 100 rubrics x 20 agents x 10 dimensions
the quiet series would otherwise add ~90,000 series that say "nothing happened".

Like the quality families (``monitor.quality``), the families are rendered to text and OpenMetrics (and gzip) at
the end of the cycle and swapped in whole: a scrape copies prepared bytes (``monitor.exposition``), never sees half
a cycle, and series that disappeared are gone.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter

from monitor.alerts.detector import CANNOT_JUDGE_REASONS, Detection, without_cyclic_gc
from monitor.alerts.lifecycle import AlertState, by_fields
from monitor.metrics.quality import FamilySpec, PreparedCollector

_LABELS = ("rubric", "agent", "kind", "dimension", "baseline")

REGRESSION = FamilySpec(
    "rubric_monitor_regression", "gauge", _LABELS,
    "1 while a quality regression alert is firing (after persistence).")
EFFECT = FamilySpec(
    "rubric_monitor_regression_effect", "gauge", _LABELS,
    "Current minus baseline: pass-rate points (0..1) or mean-score points (1..5).")
P_VALUE = FamilySpec(
    "rubric_monitor_regression_p_value", "gauge", _LABELS,
    "One-sided p-value of the drop (before FDR adjustment).")
SAMPLES = FamilySpec(
    "rubric_monitor_regression_samples", "gauge", (*_LABELS, "window"),
    "Sample sizes of the test, window current or baseline.")
CANNOT_JUDGE = FamilySpec(
    "rubric_monitor_cannot_judge", "gauge", ("rubric", "agent", "reason"),
    "1 while a series cannot be judged for this reason (unscored, judge_errors, source_behind, "
    "judge_unavailable); its quality alerts neither fire nor resolve.")
ALERT_FAMILIES = (REGRESSION, EFFECT, P_VALUE, SAMPLES, CANNOT_JUDGE)
_NAMES = frozenset(spec.name for spec in ALERT_FAMILIES)


class AlertMetrics(PreparedCollector):
    """The notification counter (live) and the detector's gauges (prepared by ``publish``); registered as the
    ``Collector`` of those gauges, parsed back from the rendered text for ``registry.get_sample_value``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.notifications = Counter(
            "rubric_monitor_notifications",
            "Notification attempts by outcome: sent, retry (an attempt failed and will be retried), failed (given "
            "up), silenced, dropped (notifier no longer configured).",
            ["notifier", "outcome"],
            registry=registry,
        )
        super().__init__()
        self._lock = threading.Lock()
        registry.register(self)

    @property
    def family_names(self) -> frozenset[str]:
        """What the exposition serves from ``rendered`` rather than collects."""
        return _NAMES

    def publish(self, detection: Detection, states: dict[str, AlertState]) -> None:
        with without_cyclic_gc():
            self._publish(detection, states)

    def _publish(self, detection: Detection, states: dict[str, AlertState]) -> None:
        regression: dict[tuple[str, ...], float] = {}
        effect: dict[tuple[str, ...], float] = {}
        p_value: dict[tuple[str, ...], float] = {}
        samples: dict[tuple[str, ...], float] = {}
        cannot_judge: dict[tuple[str, ...], float] = {}
        known = by_fields(states)
        # In the detector's order (rubric, agent, then kind and dimension): no sort of tens of thousands of keys.
        for (key, baseline), verdict in detection.per_baseline().items():
            labels: tuple[str, ...] = (key.rubric, key.agent, key.kind, key.dimension, baseline)
            state = known.get(key)
            firing = state is not None and state.state == "firing" and state.baseline == baseline
            regression[labels] = 1.0 if firing else 0.0
            if verdict.status == "ok" and (state is None or state.state not in ("pending", "firing")):
                continue  # a quiet series: its flag says it all
            if verdict.test is not None:
                effect[labels] = verdict.test.effect
                p_value[labels] = verdict.test.p_value
            samples[(*labels, "current")] = float(verdict.current_n)
            samples[(*labels, "baseline")] = float(verdict.baseline_n)
        # A firing alert whose series has no data this cycle stays firing (no data is never a recovery): its flag
        # stays too, or Prometheus would resolve what the daemon has not.
        for state in states.values():
            if state.state == "firing":
                regression.setdefault(
                    (state.rubric, state.agent, state.kind, state.dimension, state.baseline or "trailing"), 1.0)
        for (rubric, agent), reasons in sorted(detection.cannot_judge.items()):
            for reason in CANNOT_JUDGE_REASONS:
                cannot_judge[(rubric, agent, reason)] = 1.0 if reason in reasons else 0.0
        gauges = [(REGRESSION, regression), (EFFECT, effect), (P_VALUE, p_value), (SAMPLES, samples),
                  (CANNOT_JUDGE, cannot_judge)]
        with self._lock:  # one cycle at a time owns the renderer's cache
            self._set_rendered(*self._renderer.render((), {}, gauges))
