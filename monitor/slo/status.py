"""Each SLO's figures, computed by the daemon from the stored results: what ``rubric-monitor slo status`` prints, the
SLO gauges serve and the daemon's own SLO alerts follow.

The same definitions as the Prometheus rules (``monitor.slo.rules``), with one difference: the newest
configuration here is the full judge configuration of the regression detector (rubric version, judge model and
prompt version), found per agent from its most recent result in the SLO's window; the rules see only the rubric
version (the counters carry no judge model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from monitor.alerts.detector import Counts, DetectorSettings, JudgeConfig, SeriesCounts
from monitor.slo.spec import BurnWindow, SloDefinition, duration_seconds

CURRENT_RATE_WINDOW = "1h"
"""The burn rate "at the current rate" of the time to exhaustion."""
TierStatus = str
"""``burning`` (a condition holds), ``ok``, ``too_few`` (no long window has ``min_evaluations``) or
``cannot_judge``."""


@dataclass(frozen=True)
class Figures:
    """One window of one SLO."""

    window: str
    good: int = 0
    scored: int = 0
    unscored: int = 0
    judge_errors: int = 0

    @property
    def sli(self) -> float | None:
        return None if self.scored == 0 else self.good / self.scored

    def burn_rate(self, error_budget: float) -> float | None:
        sli = self.sli
        return None if sli is None else (1.0 - sli) / error_budget

    @property
    def unscored_share(self) -> float:
        total = self.scored + self.unscored
        return 0.0 if total == 0 else self.unscored / total


@dataclass(frozen=True)
class TierCheck:
    tier: str
    status: TierStatus
    condition: BurnWindow | None = None
    """The condition that holds (burning), else the first with enough evaluations."""


@dataclass(frozen=True)
class SloStatus:
    slo: SloDefinition
    windows: dict[str, Figures]
    configs: dict[str, JudgeConfig]
    """Per agent covered, the newest configuration counted."""
    reasons: tuple[str, ...] = ()
    """Why the SLO cannot be judged now (its alerts neither fire nor resolve)."""
    tiers: tuple[TierCheck, ...] = field(default_factory=tuple)

    def burn_rate(self, window: str) -> float | None:
        figures = self.windows.get(window)
        return None if figures is None else figures.burn_rate(self.slo.error_budget)

    @property
    def budget_remaining(self) -> float:
        """Share of the window's error budget left (negative: overspent); 1 with no scored evaluation."""
        burn = self.burn_rate(self.slo.window)
        return 1.0 if burn is None else 1.0 - burn

    @property
    def exhaustion_seconds(self) -> float | None:
        """At the burn rate of the last hour, how long until the budget is spent (0: spent; None: not burning)."""
        remaining = self.budget_remaining
        if remaining <= 0:
            return 0.0
        burn = self.burn_rate(CURRENT_RATE_WINDOW)
        if burn is None or burn <= 0:
            return None
        return remaining * self.slo.window_seconds / burn


def _figures(window: str, counts: Counts, slo: SloDefinition) -> Figures:
    if slo.dimension is None:
        return Figures(window, counts.passed, counts.scored, counts.unscored, counts.judge_errors)
    assert slo.min_score is not None
    scores = counts.dimensions.get(slo.dimension) or (0, 0, 0, 0, 0)
    return Figures(window, sum(scores[slo.min_score - 1:]), sum(scores), counts.unscored, counts.judge_errors)


def newest_configs(slo: SloDefinition, series: Iterable[SeriesCounts]) -> dict[str, JudgeConfig]:
    """Per agent the SLO covers, the configuration of its most recent result (in the given window's counts)."""
    newest: dict[str, tuple[float, JudgeConfig]] = {}
    for item in series:
        if item.rubric != slo.rubric or not item.current.total or not slo.covers(item.agent):
            continue
        held = newest.get(item.agent)
        if held is None or (item.current.last_ts, item.config) > held:
            newest[item.agent] = (item.current.last_ts, item.config)
    return {agent: config for agent, (_, config) in newest.items()}


def compute(slos: Sequence[SloDefinition], windows: Sequence[tuple[str, Sequence[SeriesCounts]]],
            settings: DetectorSettings, global_reasons: Iterable[str] = (),
            rubric_reasons: Mapping[str, Iterable[str]] | None = None) -> list[SloStatus]:
    """Every SLO's figures over ``windows`` (the counts of ``WindowCounts.count``, which must hold every window of
    every SLO: ``windows_of(slos)``)."""
    by_window = dict(windows)
    shared = tuple(global_reasons)
    out = []
    for slo in slos:
        configs = newest_configs(slo, by_window.get(slo.window, ()))
        figures: dict[str, Figures] = {}
        for window in slo.windows():
            total = Counts()
            for item in by_window.get(window, ()):
                if item.rubric == slo.rubric and configs.get(item.agent) == item.config:
                    total.add(item.current)
            figures[window] = _figures(window, total, slo)
        reasons = set(shared) | set((rubric_reasons or {}).get(slo.rubric, ()))
        reasons |= _health_reasons(slo, figures, settings)
        out.append(_with_tiers(SloStatus(slo, figures, configs, tuple(sorted(reasons)))))
    return out


def _health_reasons(slo: SloDefinition, figures: Mapping[str, Figures], settings: DetectorSettings) -> set[str]:
    """The regression detector's thresholds, over the short windows of the SLO's conditions: an unscored storm or
    failing judge calls make the SLO impossible to judge, as they make a series."""
    reasons: set[str] = set()
    shorts = {condition.short for _, tier in slo.tiers() for condition in tier.windows}
    for window in shorts:
        f = figures[window]
        total = f.scored + f.unscored
        if total < settings.min_total_for_cannot_judge:
            continue
        if f.unscored / total > settings.max_unscored_share:
            reasons.add("unscored")
        if f.judge_errors / total > settings.max_judge_error_share:
            reasons.add("judge_errors")
    return reasons


def _with_tiers(status: SloStatus) -> SloStatus:
    slo = status.slo
    checks = []
    for name, tier in slo.tiers():
        if status.reasons:
            checks.append(TierCheck(name, "cannot_judge"))
            continue
        enough = None
        burning = None
        for condition in tier.windows:
            long, short = status.windows[condition.long], status.windows[condition.short]
            if long.scored < slo.alerting.min_evaluations:
                continue
            enough = enough or condition
            long_rate, short_rate = long.burn_rate(slo.error_budget), short.burn_rate(slo.error_budget)
            if long_rate is not None and short_rate is not None and long_rate > condition.burn_rate \
                    and short_rate > condition.burn_rate:
                burning = condition
                break
        if burning is not None:
            checks.append(TierCheck(name, "burning", burning))
        elif enough is not None:
            checks.append(TierCheck(name, "ok", enough))
        else:
            checks.append(TierCheck(name, "too_few"))
    return SloStatus(slo, status.windows, status.configs, status.reasons, tuple(checks))


def windows_of(slos: Sequence[SloDefinition]) -> list[tuple[str, float]]:
    """Every window the statuses need, as (name, seconds) for ``WindowCounts.count``."""
    found: dict[str, float] = {}
    for slo in slos:
        for window in slo.windows():
            found[window] = float(duration_seconds(window))
    return sorted(found.items(), key=lambda item: item[1])
