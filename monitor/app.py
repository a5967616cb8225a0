"""The composition root: settings → concrete stages → pipeline, scheduler, HTTP endpoint and signal handling.

Only this module chooses implementations; every stage elsewhere sees protocols.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry

from monitor.canary import CanaryRunner
from monitor.errors import ConfigError, StoreError
from monitor.evaluators.adaptive import AdaptiveEvaluator
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.cache import VerdictCache
from monitor.evaluators.item_cache import InMemoryItemCache, ItemStore, PersistentItemCache
from monitor.evaluators.prompts import prompt_version
from monitor.evaluators.static import StaticMetricEvaluator
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.exposition import Exposition
from monitor.health import HealthState, MonitorHTTPServer
from monitor.judge.base import Judge
from monitor.judge.charging import ChargingJudge
from monitor.metrics import MonitorMetrics
from monitor.models import utc_now
from monitor.pipeline import CycleReport, Pipeline
from monitor.redaction import redact, remember_url_password
from monitor.rollups import Window, parse_window
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import Rubric
from monitor.settings import JudgeSettings, MetricsSettings, Settings, SourceSettings, read_secret
from monitor.sources.base import TraceSource
from monitor.store.base import RetentionPolicy
from monitor.store.replicas import SingleReplicaLock, replica_id
from monitor.store.sql import SqlStore
from monitor.writeback import WriteBack, build_exporter

if TYPE_CHECKING:
    from monitor.alerts.service import AlertService

log = logging.getLogger(__name__)
T = TypeVar("T")

SHUTDOWN_MARGIN_SECONDS = 5.0
"""Beyond ``shutdown_grace_seconds``: time to record what finished and close the store."""


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


def effective_judge_settings(settings: JudgeSettings) -> JudgeSettings:
    """The settings evaluations run with: the embedded judge overrides some (one call at a time, its window)."""
    if settings.kind == "local":
        from monitor.judge.local import local_judge_settings

        return local_judge_settings(settings)
    return settings


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
    if url:
        remember_url_password(url)
    return url or settings.store.url


def checked_store_url(settings: Settings) -> str:
    """The store URL, refused (``ConfigError`` on ``store.url``) when it cannot work: not a URL, an unknown
    database, a driver that is not installed, an in-memory or missing-directory SQLite file. Nothing connects."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    url = store_url(settings)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        # The URL is not echoed: it may carry a password.
        raise ConfigError("settings", "store.url", "is not a database URL like sqlite:///path.db or "
                                                    "postgresql+psycopg://user@host/db") from None
    try:
        dialect = parsed.get_dialect()
        dialect.import_dbapi()
    except NoSuchModuleError:
        raise ConfigError("settings", "store.url", f"unknown database or driver {parsed.drivername!r}") from None
    except ImportError as exc:
        hint = " (pip install 'rubric-monitor[postgres]')" if parsed.get_backend_name() == "postgresql" else ""
        raise ConfigError("settings", "store.url", f"the driver of {parsed.drivername!r} is not installed: "
                                                    f"no module {exc.name or ''!r}{hint}") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or "mode=memory" in url:
            # One shared connection between the cycle thread and the scrape thread: writes would fail at random.
            raise ConfigError("settings", "store.url", "an in-memory SQLite database cannot back the daemon; "
                                                        "use a file")
        directory = Path(database).parent
        if not database.startswith("file:") and not directory.is_dir():
            raise ConfigError("settings", "store.url", f"the directory {directory} of the SQLite file does not exist")
    return url


def check_metrics_host(settings: MetricsSettings) -> None:
    try:
        socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ConfigError("settings", "metrics.host", f"cannot listen on {settings.host!r}: "
                                                       f"{getattr(exc, 'strerror', None) or exc}") from None


def _listen_error(settings: MetricsSettings, exc: OSError) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError("settings", "metrics.port", f"{settings.host}:{settings.port} is already in use "
                                                        "(another rubric-monitor?)")
    if exc.errno == errno.EACCES:
        return ConfigError("settings", "metrics.port", f"port {settings.port} needs privileges; use one above 1023")
    return ConfigError("settings", "metrics.host", f"cannot listen on {settings.host}:{settings.port}: "
                                                    f"{exc.strerror or exc}")


@dataclass
class Stages:
    """The stages built from settings, before the pipeline joins them."""

    metrics: MonitorMetrics
    rubrics: RubricRegistry
    url: str
    source: TraceSource | None
    judge: Judge | None

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
        if self.judge is not None:
            import asyncio

            asyncio.run(self.judge.aclose())


def build_stages(settings: Settings, registry: CollectorRegistry, *, load_model: bool = True) -> Stages:
    """Build every stage as ``run`` does and refuse with every problem found, not the first. ``check`` passes
    ``load_model=False``: the embedded model's file is checked, not loaded."""
    errors: list[ConfigError] = []

    def attempt(build: Callable[[], T]) -> T | None:
        try:
            return build()
        except ConfigError as exc:
            errors.append(exc)
            return None

    windows: list[Window] = []
    for window in settings.metrics.windows:
        parsed = attempt(functools.partial(parse_window, window))
        if parsed is not None:
            windows.append(parsed)
    metrics = MonitorMetrics(registry, windows, settings.metrics.max_agents_per_rubric)
    rubrics = RubricRegistry(settings.rubrics.directory, metrics)
    attempt(rubrics.load)
    url = attempt(lambda: checked_store_url(settings)) or ""
    attempt(lambda: check_metrics_host(settings.metrics))
    source = attempt(lambda: build_source(settings.source, metrics))
    if settings.judge.kind == "local" and not load_model:
        from monitor.judge.local import local_model_path

        attempt(lambda: local_model_path(settings.judge.local))
        judge = None
    else:
        judge = attempt(lambda: build_judge(settings.judge, metrics))
    stages = Stages(metrics, rubrics, url, source, judge)
    if errors:
        stages.close()
        raise ConfigError.collect(errors)
    return stages
EMBEDDED_JUDGE_WARNING = (
    "judge.kind local (the embedded SmolLM2-135M) scores production traces from Application Insights: its "
    "scores are not meaningful; point judge.kind at a capable model"
)


def embedded_judge_warning(settings: Settings) -> str | None:
    """The embedded judge on production traces is almost certainly a mistake: warned about, not refused (it
    is how the pipeline is tried out end to end)."""
    if settings.judge.kind == "local" and settings.source.kind == "app_insights":
        return EMBEDDED_JUDGE_WARNING
    return None


@dataclass
class Monitor:
    """Everything a running daemon holds; ``close()`` releases it in reverse order."""

    settings: Settings
    registry: CollectorRegistry
    metrics: MonitorMetrics
    pipeline: Pipeline
    health: HealthState
    store: SqlStore
    alerts: AlertService | None = None
    canaries: CanaryRunner | None = None
    next_steps: str | None = None
    """Said once, after the first cycle that recorded a verdict: where to look at what the daemon did."""
    single_replica: SingleReplicaLock | None = None
    writeback: WriteBack | None = None

    def run_cycle(self, now: datetime | None = None) -> CycleReport:
        started = utc_now()
        try:
            report = self.pipeline.run_cycle(now or started)
        except Exception as exc:
            log.exception("cycle failed")
            report = CycleReport(started_at=started, finished_at=utc_now(), failures=[f"cycle: {exc!r}"])
        if self.canaries is not None and not self.pipeline.stop.is_set():
            try:
                self.canaries.run_due(utc_now())
            except Exception:
                # A canary run measures the judge; its failure must not fail the cycle that scored the agents.
                log.exception("canary run failed")
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
        self._run_alerts()
        if report.evaluations and self.next_steps:
            log.info("%s", self.next_steps)
            self.next_steps = None
        return report

    def _run_alerts(self) -> None:
        """Regression alerts after scoring, isolated: their failure is logged and counted, never a failed cycle."""
        if self.alerts is None:
            return
        try:
            self.alerts.run_cycle(utc_now())
        except Exception:
            log.exception("regression alerts failed this cycle (scoring is not affected)")
            self.metrics.stage_failures.labels("alerts").inc()

    def run_cycles(self) -> None:
        """One cycle, and at once another while the last one stopped before the backlog ran out (spans read
        per cycle, evaluations per cycle): a backlog drains at the judge's pace, not one cap per interval."""
        while True:
            report = self.run_cycle()
            if not report.behind or not report.ok or self.pipeline.stop.is_set():
                return

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
        if self.alerts is not None:
            self.alerts.close(drain_seconds=2.0)  # within the SIGTERM budget of shutdown_grace_seconds
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
    stages = build_stages(settings, registry)
    metrics, rubrics, source, judge = stages.metrics, stages.rubrics, stages.source, stages.judge
    assert source is not None and judge is not None  # build_stages raises when a stage cannot be built
    replica = settings.replicas.replica_id or replica_id()
    try:
        single = SingleReplicaLock(stages.url, replica)
    except ConfigError:
        stages.close()
        raise
    try:
        store = SqlStore(stages.url, settings.store.migrate)
        if single.held:
            # The SQLite file is locked to this process: a claim in it was left by a daemon that died (kill -9,
            # out of memory), and its conversations are judged now instead of after the lease.
            store.release_claims(None)
    except StoreError as exc:
        single.release()
        stages.close()
        raise ConfigError("settings", "store.url", redact(str(exc))) from None
    except ConfigError:  # a schema behind this release (store.migrate: check)
        single.release()
        stages.close()
        raise
    metrics.judge_configured(settings.judge.kind, settings.judge.model, prompt_version(judge.prompt_style))
    embedded_warning = embedded_judge_warning(settings)
    if embedded_warning:
        log.warning("%s", embedded_warning)
    delay = settings.source.ingestion_delay_seconds if settings.source.kind == "app_insights" else 0.0
    judge_settings = effective_judge_settings(settings.judge)
    evaluators = build_evaluators(settings.judge.cache_size, store)
    pipeline = Pipeline(
        source=source,
        store=store,
        rubrics=rubrics if settings.rubrics.reload else _Frozen(rubrics),
        evaluators=evaluators,
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
        max_spans_per_cycle=settings.max_spans_per_cycle,
        shutdown_grace_seconds=settings.shutdown_grace_seconds,
    )
    health = HealthState(interval=timedelta(seconds=settings.interval_seconds))
    health.checks["judge"] = lambda: _judge_problem(judge)
    health.checks["content"] = pipeline.content_problem
    health.checks["judge calls"] = pipeline.judge_problem
    health.checks["rubrics"] = lambda: "; ".join(f"{k}: {v}" for k, v in rubrics.problems.items()) or None
    alerts = build_alerts(settings, store, registry, judge, source.name) if settings.alerts.enabled else None
    health.warning_checks["judge"] = lambda: embedded_warning
    canaries = CanaryRunner(
        rubrics.active, rubrics.sources, evaluators, pipeline.context, store, metrics.judge_trust,
        settings.canary,
        # The pipeline's own budget rule, so canaries and evaluations share one daily budget.
        lambda rubric: pipeline._budget_spent(rubric, utc_now()),
        pipeline.loop,
        pipeline.stop,
    )
    health.warning_checks["judge_drift"] = canaries.warning
    exporter = build_exporter(settings.writeback)
    writeback = None if exporter is None else WriteBack(store, exporter, settings.writeback.kind, metrics.runtime,
                                                        settings.writeback.batch)
    monitor = Monitor(settings, registry, metrics, pipeline, health, store, alerts=alerts, canaries=canaries,
                      single_replica=single, writeback=writeback)
    # The windows and the counters' label sets from the rollups, before the first scrape.
    monitor.refresh_metrics()
    return monitor


def build_alerts(settings: Settings, store: SqlStore, registry: CollectorRegistry, judge: Judge | None = None,
                 source: str | None = None) -> AlertService:
    """The regression alerts of the daemon (and of ``rubric-monitor regressions``, which passes no judge)."""
    from monitor.alerts.service import AlertService, check_settings

    alert_settings = settings.alerts
    notifiers = check_settings(alert_settings, settings.interval_seconds)

    def reasons() -> set[str]:
        found = set()
        lag = None if source is None else registry.get_sample_value("rubric_monitor_source_lag_seconds",
                                                                    {"source": source})
        if lag is not None and lag > alert_settings.max_source_lag_seconds:
            found.add("source_behind")
        if judge is not None and _judge_problem(judge):
            found.add("judge_unavailable")
        return found

    host = "localhost" if settings.metrics.host in ("0.0.0.0", "::") else settings.metrics.host
    return AlertService(alert_settings, store, registry, notifiers, reasons,
                        generator_url=f"http://{host}:{settings.metrics.port}/metrics")


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


def exposition(monitor: Monitor) -> Exposition:
    """``/metrics``: the registry, with the quality families and the regression detector's as prepared per cycle."""
    if monitor.alerts is None:
        return Exposition(monitor.registry, monitor.metrics.quality)
    return Exposition(monitor.registry, monitor.metrics.quality, monitor.alerts.metrics)


def readiness_problem(monitor: Monitor) -> str | None:
    """Why this replica cannot do its work now (``/readyz``): the store does not answer, or the source's last read
    failed."""
    try:
        monitor.store.ping()
    except Exception as exc:
        return f"store: {exc}"
    source = monitor.pipeline.source_problem
    return None if source is None else f"source {monitor.pipeline.source.name}: {source}"


def run_daemon(settings: Settings, once: bool = False, results_command: str = "rubric-monitor results") -> int:
    """Run until SIGTERM/SIGINT (exit 0), or one cycle with ``once`` (exit 1 if the cycle failed).

    A signal at any point exits 0: during start-up before the first cycle; later the cycle in flight starts no
    new evaluation, and judge calls still in flight after ``shutdown_grace_seconds`` are abandoned (their
    evaluations stay pending); a second signal exits at once (``shutdown``). ``results_command`` is how the user
    who started the daemon lists its results, told after the first verdict."""
    from monitor import shutdown

    shutdown.install()
    monitor = build_monitor(settings)
    monitor.pipeline.stop = shutdown.STOP
    if shutdown.STOP.is_set():
        log.info("stop requested during start-up: exiting before the first cycle")
        monitor.close()
        return 0
    try:
        server = MonitorHTTPServer(settings.metrics.host, settings.metrics.port,
                                   exposition(monitor), monitor.health,
                                   lambda: readiness_problem(monitor))
    except OSError as exc:
        monitor.close()
        raise _listen_error(settings.metrics, exc) from None
    server.start()
    host, port = server.address
    log.info("metrics on http://%s:%d/metrics", host, port)
    monitor.next_steps = (f"next: the metrics are at http://{host}:{port}/metrics; list the verdicts with "
                          f"`{results_command}`, one in full with `{results_command} show CONVERSATION`")
    try:
        if once:
            return 0 if monitor.run_cycle().ok else 1
        return _serve(monitor, settings.interval_seconds, settings.shutdown_grace_seconds)
    finally:
        server.close()
        monitor.close()


def _serve(monitor: Monitor, interval: float, grace: float) -> int:
    from apscheduler.schedulers.background import BackgroundScheduler

    stopping = monitor.pipeline.stop
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        monitor.run_cycles, "interval", seconds=interval, id="cycle", next_run_time=utc_now(),
        max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)),
    )
    scheduler.start()
    while not stopping.wait(1.0):
        pass
    log.info("stop requested: finishing the evaluations in flight (at most %gs), then exiting; send the signal "
             "again (Ctrl-C) to exit at once", grace)
    # The cycle in flight starts no new evaluation and abandons its judge calls after the grace period; a
    # source query cannot be cancelled that way, so past the grace period (and a margin to record what
    # finished) the process exits without it.
    finisher = threading.Thread(target=scheduler.shutdown, kwargs={"wait": True}, name="shutdown", daemon=True)
    finisher.start()
    finisher.join(grace + SHUTDOWN_MARGIN_SECONDS)
    if finisher.is_alive():
        log.warning("the cycle in flight did not end within %gs of the stop request; exiting without it (its "
                    "work is read or judged again on the next start)", grace + SHUTDOWN_MARGIN_SECONDS)
        logging.shutdown()
        os._exit(0)
    return 0
