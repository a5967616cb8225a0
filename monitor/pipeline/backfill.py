"""``rubric-monitor backfill``: score a past window of conversations with one rubric (a new version, a rubric just
added), from the source, within a budget, beside the running daemon.

- **From the source**: the window's spans are read afresh (App Insights from ``--since``; OTLP files from their
  start) and assembled in memory; nothing is added to the live tables the daemon works from, so live scoring goes
  on as before. Conversations the store holds as pending are left to the daemon.
- **Exactly once**: a conversation that already has a result for the rubric's version is skipped; results are
  recorded with the same uniqueness as live ones, so a backfill and the daemon never store a verdict twice.
- **Within its budget**: ``--budget-usd`` caps the judge spend of the job (``judge.prices``); it stops before an
  evaluation that could pass it. The spend is kept in ``backfill_jobs`` so a resumed job honours it.
- **Resumable**: run the same command again after a crash; what was recorded is skipped, the spend carries over.
- **Progress**: one line per evaluation on stderr, ``backfill_jobs`` in the store, and with ``--metrics-port``
  ``rubric_monitor_backfill_evaluations_total{rubric,outcome}`` and ``rubric_monitor_backfill_progress_ratio``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from monitor.assemble import assemble
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.metrics.runtime import RuntimeMetrics
from monitor.models import Conversation, utc_now
from monitor.rubrics.schema import Rubric
from monitor.sources.base import TraceSource
from monitor.store.sql import SqlStore

log = logging.getLogger(__name__)


@dataclass
class Progress:
    total: int
    done: int = 0
    skipped: int = 0
    spent_usd: float = 0.0
    max_cost_usd: float = 0.0
    """The dearest evaluation so far: the next one may cost as much."""
    status: str = "running"


@dataclass
class Backfill:
    """One rubric's backfill over a window, on the daemon's own stages (built by ``monitor.app.build_backfill``):
    the source read afresh, the assembler, the rubric's evaluator and the store."""

    rubric: Rubric
    source: TraceSource
    evaluator: Evaluator
    context: EvaluationContext
    store: SqlStore
    runtime: RuntimeMetrics
    applies: Callable[[Conversation], bool]
    """Whether the rubric applies to a conversation's agent (the registry's rule, as live)."""

    def window_conversations(self, since: datetime, until: datetime) -> list[Conversation]:
        spans = []
        try:
            for batch in self.source.pull(None, min(until, utc_now())):
                spans.extend(batch.spans)
        finally:
            self.source.close()
        return [c for c in assemble(spans).conversations
                if c.started_at is not None and since <= c.started_at < until and self.applies(c)]

    def run(self, since: datetime, until: datetime, budget_usd: float | None, out: TextIO) -> Progress:
        rubric, store, runtime = self.rubric, self.store, self.runtime
        version = rubric.version or ""
        job = f"{rubric.name}|{version}|{since.isoformat()}|{until.isoformat()}"
        spent, dearest = store.backfill_job(job, rubric.name, version, since, until)
        conversations = self.window_conversations(since, until)
        pending_live = store.pending_keys([c.id for c in conversations])
        todo = [c for c in conversations if c.id not in pending_live
                and not store.has_result(c.id, rubric.name, version, 0)]
        progress = Progress(total=len(conversations), skipped=len(conversations) - len(todo), spent_usd=spent,
                            max_cost_usd=dearest)
        progress.done = progress.skipped
        ratio = runtime.backfill_progress.labels(rubric.name)
        ratio.set(progress.done / progress.total if progress.total else 1.0)
        out.write(f"backfill {rubric.name} {version}: {progress.total} conversations in the window, "
                  f"{progress.skipped} already scored or pending live, {len(todo)} to score"
                  f"{f', ${spent:.4f} of ${budget_usd:.4f} spent before' if budget_usd is not None else ''}\n")

        async def score_all() -> None:
            try:
                await self._score_each(todo, progress, job, budget_usd, out)
            finally:
                await self.context.judge.aclose()

        asyncio.run(score_all())
        store.backfill_progress(job, progress.total, progress.done, progress.spent_usd, progress.max_cost_usd,
                                progress.status)
        out.write(f"backfill {rubric.name}: {progress.status}, {progress.done}/{progress.total}, "
                  f"${progress.spent_usd:.4f}\n")
        return progress

    async def _score_each(self, todo: Iterable[Conversation], progress: Progress, job: str,
                          budget_usd: float | None, out: TextIO) -> None:
        rubric, store = self.rubric, self.store
        ratio = self.runtime.backfill_progress.labels(rubric.name)
        for conversation in todo:
            if budget_usd is not None and progress.spent_usd + progress.max_cost_usd > budget_usd:
                progress.status = "budget_spent"
                return
            results = await self.evaluator.evaluate(conversation, rubric, self.context)
            cost = sum(r.cost_usd for r in results)
            progress.max_cost_usd = max(progress.max_cost_usd, cost)
            progress.spent_usd += cost
            for result in results:
                outcome = result.outcome if store.record(result) else "already_scored"
                self.runtime.backfill_evaluations.labels(rubric.name, outcome).inc()
            progress.done += 1
            store.backfill_progress(job, progress.total, progress.done, progress.spent_usd,
                                    progress.max_cost_usd, progress.status)
            ratio.set(progress.done / progress.total)
            out.write(f"backfill {rubric.name}: {progress.done}/{progress.total} {conversation.id} "
                      f"{'/'.join(r.outcome for r in results)} ${progress.spent_usd:.4f}\n")
        progress.status = "done"
