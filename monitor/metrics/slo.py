"""The SLO gauges (``monitor.slo``), on the daemon's registry, rendered once per cycle and swapped in whole.

A few series per SLO, never per agent: the good and scored evaluations per window are recording rules over the
quality counters (``monitor.slo.rules``); these gauges are the daemon's own figures (newest configuration,
cannot-judge states applied), for the dashboard and for teams without the rules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from monitor.metrics.quality import FamilySpec, PreparedCollector

OBJECTIVE = FamilySpec(
    "rubric_monitor_slo_objective", "gauge", ("slo", "rubric"),
    "Objective of an SLO: the share of good evaluations promised over its window (e.g. 0.95).")
BUDGET_REMAINING = FamilySpec(
    "rubric_monitor_slo_error_budget_remaining", "gauge", ("slo", "rubric"),
    "Share of an SLO's error budget left over its window (1: untouched, 0: spent, negative: overspent).")
BURN_RATE = FamilySpec(
    "rubric_monitor_slo_burn_rate", "gauge", ("slo", "rubric", "window"),
    "How many times faster than allowed an SLO's budget burns over a window (1 - SLI) / (1 - objective); absent "
    "with no scored evaluation in the window.")
EVALUATIONS = FamilySpec(
    "rubric_monitor_slo_evaluations", "gauge", ("slo", "rubric", "window", "outcome"),
    "Evaluations behind an SLO's figures over a window, by outcome: good, scored (the SLI is good / scored) and "
    "unscored (left out of the SLI).")
SUSPENDED = FamilySpec(
    "rubric_monitor_slo_suspended", "gauge", ("slo", "rubric"),
    "1 while an SLO cannot be judged (unscored storm, judge errors, source behind, judge drift): its alerts "
    "neither fire nor resolve.")
FIRING = FamilySpec(
    "rubric_monitor_slo_alert_firing", "gauge", ("slo", "rubric", "alerting"),
    "1 while the daemon's own SLO alert (page or ticket) is firing.")
SLO_FAMILIES = (OBJECTIVE, BUDGET_REMAINING, BURN_RATE, EVALUATIONS, SUSPENDED, FIRING)
_NAMES = frozenset(spec.name for spec in SLO_FAMILIES)


@dataclass(frozen=True)
class SloFigures:
    """What one SLO publishes this cycle."""

    slo: str
    rubric: str
    objective: float
    budget_remaining: float
    burn_rates: dict[str, float | None]
    evaluations: dict[str, tuple[int, int, int]]
    """Per window: (good, scored, unscored)."""
    suspended: bool
    firing: dict[str, bool]
    """Per alerting tier (page, ticket)."""


class SloMetrics(PreparedCollector):
    """The SLO families, prepared by ``publish`` at the end of a cycle."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    @property
    def family_names(self) -> frozenset[str]:
        return _NAMES

    def publish(self, figures: Iterable[SloFigures]) -> None:
        objective: dict[tuple[str, ...], float] = {}
        budget: dict[tuple[str, ...], float] = {}
        burn: dict[tuple[str, ...], float] = {}
        evaluations: dict[tuple[str, ...], float] = {}
        suspended: dict[tuple[str, ...], float] = {}
        firing: dict[tuple[str, ...], float] = {}
        for f in figures:
            pair = (f.slo, f.rubric)
            objective[pair] = f.objective
            budget[pair] = f.budget_remaining
            suspended[pair] = 1.0 if f.suspended else 0.0
            for window, rate in f.burn_rates.items():
                if rate is not None:
                    burn[(*pair, window)] = rate
            for window, (good, scored, unscored) in f.evaluations.items():
                for outcome, value in (("good", good), ("scored", scored), ("unscored", unscored)):
                    evaluations[(*pair, window, outcome)] = float(value)
            for tier, on in f.firing.items():
                firing[(*pair, tier)] = 1.0 if on else 0.0
        gauges = [(OBJECTIVE, objective), (BUDGET_REMAINING, budget), (BURN_RATE, burn), (EVALUATIONS, evaluations),
                  (SUSPENDED, suspended), (FIRING, firing)]
        with self._lock:
            self._set_rendered(*self._renderer.render((), {}, gauges))
