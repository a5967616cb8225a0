"""The composition root: settings → concrete stages → pipeline, scheduler, HTTP endpoint and signal handling.

Only this module chooses implementations; every stage elsewhere sees protocols.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

from prometheus_client import CollectorRegistry

from monitor.errors import ConfigError
from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.cache import VerdictCache
from monitor.evaluators.item_cache import InMemoryItemCache, ItemStore, PersistentItemCache
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.exposition import Exposition
from monitor.health import HealthState, MonitorHTTPServer
from monitor.judge.base import Judge
from monitor.judge.charging import ChargingJudge
from monitor.metrics import MonitorMetrics
from monitor.models import utc_now
from monitor.pipeline import CycleReport, Pipeline
from monitor.rollups import parse_window
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import Rubric
from monitor.settings import JudgeSettings, Settings, SourceSettings, read_secret
from monitor.sources.base import TraceSource
from monitor.store.base import RetentionPolicy
from monitor.store.replicas import SingleReplicaLock, replica_id
from monitor.store.sql import SqlStore
from monitor.writeback import WriteBack, build_exporter

log = logging.getLogger(__name__)

def build_source(settings: SourceSettings, metrics: MonitorMetrics) -> TraceSource:
    if settings.kind == "otlp_file":
        from monitor.sources.otlp_file import OtlpFileSource

        return OtlpFileSource(settings.path)
    from monitor.sources.app_insights import AppInsightsSource

    return AppInsightsSource(settings, metrics)


def build_judge(settings: JudgeSettings, metrics: MonitorMetrics) -> Judge:
    if settings.kind == "local":
        from monitor.judge.local import LocalJudge

        return LocalJudge(settings, metrics)
    from monitor.judge.openai_judge import OpenAIJudge

    return OpenAIJudge(settings, metrics)


def build_evaluators(cache_size: int, item_store: ItemStore | None = None) -> dict[str, Evaluator]:
    items = PersistentItemCache(item_store, cache_size) if item_store else InMemoryItemCache(cache_size)
    evaluators: list[Evaluator] = [
        WeightedEvaluator(VerdictCache(cache_size)),
        AdaptiveEvaluator(items),
        StaticMetricEvaluator(),
    ]
    return {kind: evaluator for evaluator in evaluators for kind in evaluator.kinds}


def store_url(settings: Settings) -> str:
    url = read_secret(None, settings.store.url_file, "store.url_file")
    return url or settings.store.url


@dataclass
class Monitor:
    """Everything a running daemon holds; ``close()`` releases it in reverse order."""

    settings: Settings
    registry: CollectorRegistry
    metrics: MonitorMetrics
    pipeline: Pipeline
    health: HealthState
    store: SqlStore
    single_replica: SingleReplicaLock | None = None
    writeback: WriteBack | None = None

    def run_cycle(self) -> CycleReport:
        started = utc_now()
        try:
            report = self.pipeline.run_cycle(started)
        except Exception as exc:
            log.exception("cycle failed")
            report = CycleReport(started_at=started, finished_at=utc_now(), failures=[f"cycle: {exc!r}"])
        problem = self.refresh_metrics()
        if problem:
            report.failures.append(problem)
        if self.writeback is not None:
            self.writeback.flush()
        elapsed = ((report.finished_at or utc_now()) - started).total_seconds()
        self.metrics.cycle_duration.observe(elapsed)
        self.metrics.cycles.labels("ok" if report.ok else "failed").inc()
        if report.ok:
            self.metrics.last_success.set((report.finished_at or utc_now()).timestamp())
        self.health.cycle_finished(report.failures)
        self.metrics.health.set(0 if self.health.problems() else 1)
        log.info(
            "cycle: %d spans read (%d new), %d conversations ready, evaluations %s, skipped %s, %d judge calls, "
            "%.1fs%s",
            report.spans_read, report.spans_new, report.conversations_ready, dict(report.evaluations),
            dict(report.skipped), report.judge_calls, elapsed, "" if report.ok else f", failures: {report.failures}",
        )
        return report

    def refresh_metrics(self) -> str | None:
        """End of a cycle: the windowed gauges from the rollups, then every quality family rendered once for the
        scrapes until the next cycle. Returns the failure, if any (the counters are still served)."""
        try:
            self.metrics.quality.refresh(self.store, utc_now())
        except Exception as exc:
            log.exception("the rolling-window gauges could not be refreshed; the previous ones are served")
            self.metrics.stage_failures.labels("metrics").inc()
            self.metrics.quality.prepare()
            return f"metrics: {type(exc).__name__}: {exc}"
        return None

    def close(self) -> None:
        self.pipeline.close()
        self.pipeline.source.close()
        self.store.close()
        if self.writeback is not None:
            self.writeback.close()
        if self.single_replica is not None:
            self.single_replica.release()


def build_monitor(settings: Settings, registry: CollectorRegistry | None = None) -> Monitor:
    """Build every stage from settings. Raises ``ConfigError`` (exit 2) on a bad setting or rubric file."""
    registry = registry or CollectorRegistry()
    windows = [parse_window(w) for w in settings.metrics.windows]
    metrics = MonitorMetrics(registry, windows, settings.metrics.max_agents_per_rubric)
    rubrics = RubricRegistry(settings.rubrics.directory, metrics)
    rubrics.load()
    url = store_url(settings)
    if url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite+pysqlite:")):
        # One shared connection between the cycle thread and the scrape thread: writes would fail at random.
        raise ConfigError("settings", "store.url", "an in-memory SQLite database cannot back the daemon; use a file")
    replica = settings.replicas.replica_id or replica_id()
    single = SingleReplicaLock(url, replica)
    try:
        store = SqlStore(url, settings.store.migrate)
    except BaseException:
        single.release()
        raise
    source = build_source(settings.source, metrics)
    judge = build_judge(settings.judge, metrics)
    metrics.judge_configured(settings.judge.kind, settings.judge.model)
    delay = settings.source.ingestion_delay_seconds if settings.source.kind == "app_insights" else 0.0
    judge_settings = settings.judge
    if judge_settings.kind == "local":
        from monitor.judge.local import local_judge_settings

        judge_settings = local_judge_settings(judge_settings)
    pipeline = Pipeline(
        source=source,
        store=store,
        rubrics=rubrics if settings.rubrics.reload else _Frozen(rubrics),
        evaluators=build_evaluators(settings.judge.cache_size, store),
        context=EvaluationContext(
            judge=ChargingJudge(judge, lambda rubric, tokens, usd: store.add_usage(rubric, utc_now().date(), tokens,
                                                                                    usd)),
            settings=judge_settings,
            store_content=settings.store.store_content,
        ),
        metrics=metrics,
        conversation_settings=settings.conversation,
        sampling_settings=settings.sampling,
        judge_settings=judge_settings,
        completeness_delay=timedelta(seconds=delay),
        replica=replica,
        lease_seconds=settings.replicas.lease_seconds,
        claim_batch=settings.replicas.claim_batch,
        retention=RetentionPolicy(**settings.retention.model_dump()),
    )
    health = HealthState(interval=timedelta(seconds=settings.interval_seconds))
    health.checks["judge"] = lambda: _judge_problem(judge)
    health.checks["rubrics"] = lambda: "; ".join(f"{k}: {v}" for k, v in rubrics.problems.items()) or None
    exporter = build_exporter(settings.writeback)
    writeback = None if exporter is None else WriteBack(store, exporter, settings.writeback.kind, metrics.runtime,
                                                        settings.writeback.batch)
    monitor = Monitor(settings, registry, metrics, pipeline, health, store, single, writeback)
    # The windows and the counters' label sets from the rollups, before the first scrape.
    monitor.refresh_metrics()
    return monitor


class _Frozen:
    """A registry whose files are read once (``rubrics.reload: false``)."""

    def __init__(self, registry: RubricRegistry) -> None:
        self._registry = registry

    def refresh(self) -> None:
        return None

    def for_agent(self, agent_name: str | None, agent_id: str | None) -> list[Rubric]:
        return list(self._registry.for_agent(agent_name, agent_id))


def _judge_problem(judge: Judge) -> str | None:
    problem: str | None = getattr(judge, "problem", None)  # the production judge knows; a scripted one never fails
    return problem


def readiness_problem(monitor: Monitor) -> str | None:
    """Why this replica cannot do its work now (``/readyz``): the store does not answer, or the source's last read
    failed."""
    try:
        monitor.store.ping()
    except Exception as exc:
        return f"store: {exc}"
    source = monitor.pipeline.source_problem
    return None if source is None else f"source {monitor.pipeline.source.name}: {source}"


def run_daemon(settings: Settings, once: bool = False) -> int:
    """Run until SIGTERM/SIGINT (exit 0), or one cycle with ``once`` (exit 1 if the cycle failed)."""
    monitor = build_monitor(settings)
    server = MonitorHTTPServer(settings.metrics.host, settings.metrics.port,
                               Exposition(monitor.registry, monitor.metrics.quality), monitor.health,
                               lambda: readiness_problem(monitor))
    server.start()
    host, port = server.address
    log.info("metrics on http://%s:%d/metrics", host, port)
    try:
        if once:
            return 0 if monitor.run_cycle().ok else 1
        return _serve(monitor, settings.interval_seconds)
    finally:
        server.close()
        monitor.close()


def _serve(monitor: Monitor, interval: float) -> int:
    from apscheduler.schedulers.background import BackgroundScheduler

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the evaluations in flight, then exiting", signum)
        monitor.pipeline.stop.set()
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        monitor.run_cycle, "interval", seconds=interval, id="cycle", next_run_time=utc_now(),
        max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)),
    )
    scheduler.start()
    while not stopping.wait(1.0):
        pass
    scheduler.shutdown(wait=True)  # waits for the cycle in flight, which stops taking new evaluations
    return 0
