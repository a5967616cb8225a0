"""Drift canaries: a rubric's canary set (conversations with agreed verdicts) re-scored on a schedule.

A rubric names its set with ``canary: {conversations: FILE, labels: FILE}`` (the ``calibrate`` formats). After a
cycle, every rubric whose last canary run is older than ``canary.interval_seconds`` (default daily) re-scores its
set with the daemon's judge, charged to the rubric's daily budget: a run starts only while the budget is not
spent and stops starting evaluations once it is. Canary verdicts are never recorded as results, so they never
enter the quality metrics.

Each run exports ``rubric_monitor_canary_agreement{rubric,judge_model}`` (pass/fail agreement with the agreed
verdicts), ``rubric_monitor_canary_score_shift{rubric,judge_model}`` (mean judge score minus agreed score) and
``rubric_monitor_judge_drift{rubric}``: 1 when agreement fell below ``canary.min_agreement`` or the shift moved
past ``canary.max_score_shift``. Drift is a ``JudgeDrift`` condition: a ``/healthz`` warning, an alert rule on
the gauge, and ``drifting_rubrics()`` for the regression detector, which suppresses quality regressions on
those rubrics (a drifting judge is not a regressing agent). Runs are stored, so a restart neither re-runs a
canary early nor forgets a drift.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from monitor.errors import ConfigError, JudgeError
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.formats.input_files import read_conversations
from monitor.metrics import JudgeTrustMetrics
from monitor.rubrics.schema import Rubric
from monitor.settings import CanarySettings
from monitor.store.base import CanaryRun, ResultStore
from monitor.trust.agreement import agreement, judge_conversations, read_labels

log = logging.getLogger(__name__)


class CanaryPublisher:
    """Sets the judge-trust gauges (``JudgeTrustMetrics``) from canary runs: one series per rubric, labelled
    with the judge model of its last run."""

    def __init__(self, metrics: JudgeTrustMetrics) -> None:
        self._metrics = metrics
        self._models: dict[str, str] = {}

    def publish(self, run: CanaryRun) -> None:
        m = self._metrics
        previous = self._models.get(run.rubric)
        if previous is not None and previous != run.judge_model:
            # A new judge model replaces the old series: one agreement per rubric, never a stale second one.
            m.canary_agreement.remove(run.rubric, previous)
            m.canary_score_shift.remove(run.rubric, previous)
        self._models[run.rubric] = run.judge_model
        m.canary_agreement.labels(run.rubric, run.judge_model).set(run.agreement)
        m.canary_score_shift.labels(run.rubric, run.judge_model).set(run.score_shift)
        m.judge_drift.labels(run.rubric).set(1 if run.drift else 0)


def drifting_rubrics(store: ResultStore) -> set[str]:
    """Rubrics whose judge is drifting (latest canary run): for the regression detector to suppress."""
    return store.drifting_rubrics()


class CanaryRunner:
    def __init__(
        self,
        rubrics: Callable[[], list[Rubric]],
        sources: Callable[[], dict[str, Path]],
        evaluators: dict[str, Evaluator],
        context: EvaluationContext,
        store: ResultStore,
        metrics: JudgeTrustMetrics,
        settings: CanarySettings,
        budget_spent: Callable[[Rubric], bool],
        loop: asyncio.AbstractEventLoop,
        stop: threading.Event | None = None,
    ) -> None:
        self._rubrics = rubrics
        self._sources = sources
        self._evaluators = evaluators
        self._context = context
        self._store = store
        self._metrics = CanaryPublisher(metrics)
        self._settings = settings
        self._budget_spent = budget_spent
        self._loop = loop
        self._stop = stop or threading.Event()
        """Set on SIGTERM: a run starts no new evaluation, and a run cut short is not recorded."""
        self.problems: dict[str, str] = {}
        """Rubric name → why its canary set could not be run (missing file, bad labels)."""
        self._drifting: set[str] = set()
        """Kept in memory for ``/healthz``, which must not query the store on every probe."""
        for run in store.last_canary_runs().values():
            self._published(run)

    def warning(self) -> str | None:
        """The ``/healthz`` warning: drifting rubrics and canary sets that cannot be read."""
        parts = [f"judge drift on rubric {name} (JudgeDrift)" for name in sorted(self._drifting)]
        parts += [f"canary set of rubric {name}: {problem}" for name, problem in sorted(self.problems.items())]
        return "; ".join(parts) or None

    def run_due(self, now: datetime) -> list[CanaryRun]:
        """Run every canary set that is due; returns the runs made."""
        last = self._store.last_canary_runs()
        interval = timedelta(seconds=self._settings.interval_seconds)
        runs: list[CanaryRun] = []
        for rubric in self._rubrics():
            if rubric.canary is None:
                continue
            previous = last.get(rubric.name)
            if previous is not None and now - previous.ran_at < interval:
                continue
            if self._budget_spent(rubric):
                log.info("canary set of rubric %s not run: its daily budget is spent", rubric.name)
                continue
            run = self._run(rubric, now)
            if run is not None:
                runs.append(run)
        return runs

    def _run(self, rubric: Rubric, now: datetime) -> CanaryRun | None:
        assert rubric.canary is not None
        evaluator = self._evaluators.get(rubric.kind)
        base = self._sources().get(rubric.name, Path(".")).parent
        try:
            labels = read_labels(_resolve(base, rubric.canary.labels))
            conversations = [c for c in read_conversations(_resolve(base, rubric.canary.conversations))
                             if c.id in labels]
        except ConfigError as exc:
            self._problem(rubric.name, str(exc))
            return None
        if evaluator is None or not conversations:
            self._problem(rubric.name, "no labelled conversation in the canary set" if evaluator else
                          f"no evaluator for kind {rubric.kind}")
            return None
        self.problems.pop(rubric.name, None)
        try:
            results = self._loop.run_until_complete(judge_conversations(
                conversations, rubric, evaluator, self._context, self._context.settings.concurrency,
                keep_going=lambda: not self._stop.is_set() and not self._budget_spent(rubric)))
        except JudgeError as exc:
            # Not a verdict on the judge's drift: tried again after the next cycle.
            log.warning("canary set of rubric %s not scored: the judge failed: %s", rubric.name, exc)
            return None
        if self._stop.is_set():
            return None
        report = agreement(labels, results)
        overall = report["overall"]
        if overall["accuracy"] is None or overall["mean_score_shift"] is None:
            log.warning("canary set of rubric %s: no verdict to compare (%d unscored)", rubric.name,
                        len(report["unscored"]))
            return None
        accuracy, shift = float(overall["accuracy"]), float(overall["mean_score_shift"])
        drift = accuracy < self._settings.min_agreement or abs(shift) > self._settings.max_score_shift
        run = CanaryRun(rubric=rubric.name, rubric_version=rubric.version or "",
                        judge_model=rubric.judge_model or self._context.judge.model, ran_at=now,
                        judged=report["judged"], agreement=accuracy, score_shift=shift, drift=drift)
        self._store.record_canary_run(run)
        self._published(run)
        log.log(logging.WARNING if drift else logging.INFO,
                "canary set of rubric %s: agreement %.3f, score shift %+.3f over %d conversations%s",
                rubric.name, accuracy, shift, run.judged, " - JUDGE DRIFT" if drift else "")
        return run

    def _published(self, run: CanaryRun) -> None:
        self._metrics.publish(run)
        if run.drift:
            self._drifting.add(run.rubric)
        else:
            self._drifting.discard(run.rubric)

    def _problem(self, rubric: str, problem: str) -> None:
        if self.problems.get(rubric) != problem:
            log.warning("canary set of rubric %s cannot be run: %s", rubric, problem)
        self.problems[rubric] = problem


def _resolve(base: Path, path: Path) -> Path:
    return path if path.is_absolute() else base / path
