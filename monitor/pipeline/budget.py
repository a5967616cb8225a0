"""Each rubric's daily judge budget (tokens, dollars), shared by evaluations and drift canaries."""

from __future__ import annotations

from datetime import datetime

from monitor.metrics import MonitorMetrics
from monitor.rubrics.schema import Rubric
from monitor.store.base import ResultStore


class BudgetGate:
    """Whether a rubric's daily budget is spent, from the usage the store has recorded today (UTC); every check
    publishes the budget gauges (``rubric_monitor_budget_*``)."""

    def __init__(self, store: ResultStore, metrics: MonitorMetrics) -> None:
        self._store = store
        self._metrics = metrics

    def spent(self, rubric: Rubric, now: datetime) -> bool:
        if rubric.daily_budget_tokens is None and rubric.daily_budget_usd is None:
            return False
        tokens, usd = self._store.usage(rubric.name, now.date())
        spent = ((rubric.daily_budget_tokens is not None and tokens >= rubric.daily_budget_tokens)
                 or (rubric.daily_budget_usd is not None and usd >= rubric.daily_budget_usd))
        self._publish(rubric, tokens, usd, spent)
        return spent

    def _publish(self, rubric: Rubric, tokens: int, usd: float, spent: bool) -> None:
        if rubric.daily_budget_tokens is not None:
            self._metrics.budget_remaining_tokens.labels(rubric.name).set(max(0, rubric.daily_budget_tokens - tokens))
        if rubric.daily_budget_usd is not None:
            self._metrics.budget_remaining_usd.labels(rubric.name).set(max(0.0, rubric.daily_budget_usd - usd))
        self._metrics.budget_exhausted.labels(rubric.name).set(1 if spent else 0)
