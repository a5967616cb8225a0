"""A whole cycle: the scoring stages (``Pipeline.run_cycle``), then the steps that follow them, in this order:

1. ``CanaryStep``: the drift canaries that are due (they share the rubric's daily budget);
2. ``GaugesStep``: the rolling-window gauges, and every quality family rendered once for the scrapes;
3. ``WriteBackStep``: verdicts written back next to the traces, then (``review.enabled``) the review step
   (``monitor.review.step``): today's review picks, agreement published again when labels changed;
4. ``HealthStep``: the cycle counters, ``/healthz`` and the cycle's summary line;
5. ``AlertsStep``: regression alerts over what was recorded.

Each step is isolated: its failure is logged and counted in ``rubric_monitor_stage_failures_total{stage}``; a
step whose failure means the cycle did not do its work (``fails_cycle``) also fails the cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from monitor.metrics import MonitorMetrics
from monitor.models import utc_now
from monitor.pipeline.cycle import CycleReport, Pipeline
from monitor.store.base import ResultStore

log = logging.getLogger("monitor.pipeline")  # one name for the progress lines of every stage of the cycle


class Step(Protocol):
    """One step after the scoring stages."""

    name: str
    """Its ``stage`` label in ``rubric_monitor_stage_failures_total``."""
    fails_cycle: bool
    """Whether its failure fails the cycle (``run --once`` exits 1, ``/healthz`` degrades)."""

    def run(self, report: CycleReport, now: datetime) -> None: ...


class Canaries(Protocol):
    def run_due(self, now: datetime) -> object: ...


class Quality(Protocol):
    def refresh(self, store: ResultStore, now: datetime) -> None: ...

    def prepare(self) -> None: ...


class Flushing(Protocol):
    def flush(self) -> object: ...


class Health(Protocol):
    def cycle_finished(self, failures: list[str]) -> None: ...

    def problems(self) -> list[str]: ...


class Alerts(Protocol):
    def run_cycle(self, now: datetime) -> object: ...


@dataclass
class Cycle:
    """The one place that knows the order of a whole cycle."""

    pipeline: Pipeline
    steps: Sequence[Step]
    metrics: MonitorMetrics

    def run(self, now: datetime | None = None) -> CycleReport:
        started = utc_now()
        try:
            report = self.pipeline.run_cycle(now or started)
        except Exception as exc:
            log.exception("cycle failed")
            report = CycleReport(started_at=started, finished_at=utc_now(), failures=[f"cycle: {exc!r}"])
        report.duration_seconds = ((report.finished_at or utc_now()) - started).total_seconds()
        for step in self.steps:
            try:
                step.run(report, utc_now())
            except Exception as exc:
                log.exception("%s failed this cycle%s", step.name,
                              "" if step.fails_cycle else " (scoring is not affected)")
                self.metrics.stage_failures.labels(step.name).inc()
                if step.fails_cycle:
                    report.failures.append(f"{step.name}: {type(exc).__name__}: {exc}")
        return report


@dataclass
class CanaryStep:
    canaries: Canaries
    stopping: Callable[[], bool]
    name: str = "canary"
    fails_cycle: bool = False
    """A canary run measures the judge; its failure must not fail the cycle that scored the agents."""

    def run(self, report: CycleReport, now: datetime) -> None:
        if not self.stopping():
            self.canaries.run_due(now)


@dataclass
class GaugesStep:
    quality: Quality
    store: ResultStore
    name: str = "metrics"
    fails_cycle: bool = True

    def run(self, report: CycleReport, now: datetime) -> None:
        try:
            self.quality.refresh(self.store, now)
        except Exception:
            # The counters are still served, with the families of the previous cycle rendered again.
            self.quality.prepare()
            raise


@dataclass
class WriteBackStep:
    writeback: Flushing
    name: str = "writeback"
    fails_cycle: bool = False
    """Write-back keeps its own outbox: what is not sent now is sent by a later cycle."""

    def run(self, report: CycleReport, now: datetime) -> None:
        self.writeback.flush()


@dataclass
class HealthStep:
    metrics: MonitorMetrics
    health: Health
    name: str = "health"
    fails_cycle: bool = False

    def run(self, report: CycleReport, now: datetime) -> None:
        self.metrics.cycle_duration.observe(report.duration_seconds)
        self.metrics.cycles.labels("ok" if report.ok else "failed").inc()
        if report.ok:
            self.metrics.last_success.set((report.finished_at or now).timestamp())
        self.health.cycle_finished(report.failures)
        self.metrics.health.set(0 if self.health.problems() else 1)
        log.info(
            "cycle: %d spans read (%d new), %d conversations ready, evaluations %s, skipped %s, %d judge calls, "
            "%.1fs%s",
            report.spans_read, report.spans_new, report.conversations_ready, dict(report.evaluations),
            dict(report.skipped), report.judge_calls, report.duration_seconds,
            "" if report.ok else f", failures: {report.failures}",
        )


@dataclass
class AlertsStep:
    alerts: Alerts
    name: str = "alerts"
    fails_cycle: bool = False
    """Regression alerts read what was recorded; their failure does not undo the scoring."""

    def run(self, report: CycleReport, now: datetime) -> None:
        self.alerts.run_cycle(now)
