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

import argparse
import asyncio
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, start_http_server

from monitor.errors import ConfigError, JudgeError
from monitor.models import Conversation, utc_now
from monitor.settings import Settings, load_settings

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


def _parse_time(value: str, flag: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError("command line", flag, f"{value!r} is not an ISO 8601 time like 2026-11-24T00:00Z") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _window_conversations(settings: Settings, since: datetime, until: datetime, metrics: Any) -> list[Conversation]:
    from monitor.app import build_source
    from monitor.assemble import assemble

    source_settings = settings.source
    if source_settings.kind == "app_insights":
        # No checkpoint: the first window starts at --since (the live watermark is not touched).
        source_settings = source_settings.model_copy(
            update={"initial_lookback_seconds": max(60.0, (utc_now() - since).total_seconds())})
    source = build_source(source_settings, metrics)
    spans = []
    try:
        for batch in source.pull(None, min(until, utc_now())):
            spans.extend(batch.spans)
    finally:
        source.close()
    conversations = assemble(spans).conversations
    return [c for c in conversations
            if c.started_at is not None and since <= c.started_at < until]


def run_backfill(settings: Settings, rubric_name: str, since: datetime, until: datetime, budget_usd: float | None,
                 registry: CollectorRegistry | None = None, out: TextIO = sys.stderr) -> Progress:
    from monitor.app import build_evaluators, build_judge, store_url
    from monitor.evaluators.base import EvaluationContext
    from monitor.metrics import MonitorMetrics
    from monitor.rubrics.registry import RubricRegistry
    from monitor.store.sql import SqlStore

    registry = registry or CollectorRegistry()
    metrics = MonitorMetrics(registry)
    rubrics = RubricRegistry(settings.rubrics.directory)
    rubrics.load()
    rubric = rubrics.get(rubric_name)
    if rubric is None:
        raise ConfigError(str(settings.rubrics.directory), "rubric", f"no active rubric named {rubric_name!r}")
    version = rubric.version or ""
    store = SqlStore(store_url(settings), settings.store.migrate)
    judge = build_judge(settings.judge, metrics)
    try:
        job = f"{rubric.name}|{version}|{since.isoformat()}|{until.isoformat()}"
        spent, dearest = store.backfill_job(job, rubric.name, version, since, until)
        conversations = [c for c in _window_conversations(settings, since, until, metrics)
                         if any(r.name == rubric.name for r in rubrics.for_agent(c.agent_name, c.agent_id))]
        pending_live = store.pending_keys([c.id for c in conversations])
        todo = [c for c in conversations if c.id not in pending_live
                and not store.has_result(c.id, rubric.name, version, 0)]
        progress = Progress(total=len(conversations), skipped=len(conversations) - len(todo), spent_usd=spent,
                            max_cost_usd=dearest)
        progress.done = progress.skipped
        runtime = metrics.runtime
        ratio = runtime.backfill_progress.labels(rubric.name)
        ratio.set(progress.done / progress.total if progress.total else 1.0)
        out.write(f"backfill {rubric.name} {version}: {progress.total} conversations in the window, "
                  f"{progress.skipped} already scored or pending live, {len(todo)} to score"
                  f"{f', ${spent:.4f} of ${budget_usd:.4f} spent before' if budget_usd is not None else ''}\n")
        evaluator = build_evaluators(settings.judge.cache_size, store).get(rubric.kind)
        if evaluator is None:
            raise ConfigError(str(settings.rubrics.directory), "kind", f"no evaluator for kind {rubric.kind!r}")
        context = EvaluationContext(judge=judge, settings=settings.judge, store_content=settings.store.store_content)

        async def score_all() -> None:
            try:
                await score_each()
            finally:
                await judge.aclose()

        async def score_each() -> None:
            for conversation in todo:
                if budget_usd is not None and progress.spent_usd + progress.max_cost_usd > budget_usd:
                    progress.status = "budget_spent"
                    return
                results = await evaluator.evaluate(conversation, rubric, context)
                cost = sum(r.cost_usd for r in results)
                progress.max_cost_usd = max(progress.max_cost_usd, cost)
                progress.spent_usd += cost
                for result in results:
                    outcome = result.outcome if store.record(result) else "already_scored"
                    runtime.backfill_evaluations.labels(rubric.name, outcome).inc()
                progress.done += 1
                store.backfill_progress(job, progress.total, progress.done, progress.spent_usd,
                                        progress.max_cost_usd, progress.status)
                ratio.set(progress.done / progress.total)
                out.write(f"backfill {rubric.name}: {progress.done}/{progress.total} {conversation.id} "
                          f"{'/'.join(r.outcome for r in results)} ${progress.spent_usd:.4f}\n")
            progress.status = "done"

        asyncio.run(score_all())
        store.backfill_progress(job, progress.total, progress.done, progress.spent_usd, progress.max_cost_usd,
                                progress.status)
        out.write(f"backfill {rubric.name}: {progress.status}, {progress.done}/{progress.total}, "
                  f"${progress.spent_usd:.4f}\n")
        return progress
    finally:
        store.close()


def _cmd_backfill(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    since = _parse_time(args.since, "--since")
    until = _parse_time(args.until, "--until") if args.until else utc_now()
    if until <= since:
        raise ConfigError("command line", "--until", "must be later than --since")
    registry = CollectorRegistry()
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, settings.metrics.host, registry=registry)
    try:
        progress = run_backfill(settings, args.rubric, since, until, args.budget_usd, registry)
    except JudgeError as exc:
        sys.stderr.write(f"rubric-monitor: backfill stopped, the judge failed: {exc} (run it again to resume)\n")
        return 1
    return 0 if progress.status in ("done", "budget_spent") else 1


def add_backfill_command(sub: Any) -> None:
    command = sub.add_parser("backfill", help="score a past window with one rubric, within a budget (resumable)")
    command.add_argument("--config", type=Path, default=None, help="YAML settings file")
    command.add_argument("--rubric", required=True, help="rubric name (its active version is used)")
    command.add_argument("--since", required=True, help="window start, ISO 8601 (UTC when no offset)")
    command.add_argument("--until", default=None, help="window end, ISO 8601 (default: now)")
    command.add_argument("--budget-usd", type=float, default=None, help="stop before the judge spend passes this")
    command.add_argument("--metrics-port", type=int, default=None,
                         help="serve the backfill's progress metrics on this port while it runs")
    command.set_defaults(handler=_cmd_backfill)
