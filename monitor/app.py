"""The composition root: settings → concrete stages → pipeline, scheduler, HTTP endpoint and signal handling.

Only this module chooses implementations; every stage elsewhere sees protocols.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TextIO, TypeVar

from prometheus_client import CollectorRegistry

from monitor.daemon.http import HealthState, check_metrics_host
from monitor.errors import ConfigError, StoreError
from monitor.evaluators import build_evaluators
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.item_cache import ItemStore
from monitor.evaluators.prompts import prompt_version
from monitor.evaluators.versions import builtin_version
from monitor.judge import build_judge, effective_judge_settings
from monitor.judge.base import Judge
from monitor.judge.charging import ChargingJudge
from monitor.metrics import MonitorMetrics
from monitor.metrics.rollups import Window, parse_window
from monitor.models import utc_now
from monitor.pipeline import (
    AlertsStep,
    CanaryStep,
    Cycle,
    CycleReport,
    GaugesStep,
    HealthStep,
    Pipeline,
    Step,
    WriteBackStep,
)
from monitor.pipeline.backfill import Backfill, Progress
from monitor.privacy import Redactor, build_redactor
from monitor.privacy.evaluator import private_evaluators
from monitor.privacy.logs import install_personal_data_filter
from monitor.redaction import redact
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import Rubric
from monitor.settings import Settings
from monitor.sources import TraceSource, build_source
from monitor.store.base import RetentionPolicy
from monitor.store.replicas import SingleReplicaLock, replica_id
from monitor.store.sql import SqlStore
from monitor.store.url import checked_store_url, store_url
from monitor.trust.canary import CanaryRunner
from monitor.writeback import WriteBack, build_exporter

if TYPE_CHECKING:
    from monitor.alerts.service import AlertService
    from monitor.review.step import ReviewStep
    from monitor.slo.service import SloService
    from monitor.slo.spec import SloDefinition
    from monitor.sources.otlp_receiver import OtlpReceiverSource

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Stages:
    """The stages built from settings, before the pipeline joins them."""

    metrics: MonitorMetrics
    rubrics: RubricRegistry
    url: str
    source: TraceSource | None
    judge: Judge | None
    redactor: Redactor | None

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
    rubrics = RubricRegistry(settings.rubrics.directory, builtin_version, metrics)
    attempt(rubrics.load)
    url = attempt(lambda: checked_store_url(settings)) or ""
    attempt(lambda: check_metrics_host(settings.metrics))
    if settings.review.enabled:
        from monitor.review.web import check_review_settings

        attempt(lambda: check_review_settings(settings.review))
    source = attempt(lambda: build_source(settings.source, metrics))
    redactor = attempt(lambda: build_privacy(settings, metrics))  # Presidio named but not installed
    if settings.judge.kind == "local" and not load_model:
        from monitor.judge.local import local_model_path

        attempt(lambda: local_model_path(settings.judge.local))
        judge = None
    else:
        judge = attempt(lambda: build_judge(settings.judge, metrics))
    stages = Stages(metrics, rubrics, url, source, judge, redactor)
    if errors:
        stages.close()
        raise ConfigError.collect(errors)
    return stages
@dataclass
class Judging:
    """A rubric's evaluator with the judge and the context it runs in: what ``evaluate``, ``calibrate``,
    ``backfill`` and the canaries share with the daemon."""

    evaluator: Evaluator
    judge: Judge
    context: EvaluationContext

    def parts(self) -> tuple[Evaluator, Judge, EvaluationContext]:
        return self.evaluator, self.judge, self.context


def build_judging(settings: Settings, rubric: Rubric, where: str, *, metrics: MonitorMetrics | None = None,
                  item_store: ItemStore | None = None, store_content: bool | None = None) -> Judging:
    """The evaluator for ``rubric``'s kind (``ConfigError`` on ``where`` when there is none), the judge the
    settings name and the effective judge settings. ``store_content`` defaults to ``store.store_content``."""
    # The caller's ``metrics`` when it has them: a registry takes each metric once.
    metrics = metrics or MonitorMetrics(CollectorRegistry())
    redactor = build_privacy(settings, metrics)
    if not settings.store.store_content:
        item_store = None  # generated items are rewritten from the request: conversation text
    evaluators = private_evaluators(build_evaluators(settings.judge.cache_size, item_store, settings.media), redactor,
                                    settings.store.store_content)
    evaluator = evaluators.get(rubric.kind)
    if evaluator is None:
        raise ConfigError(where, "kind", f"no evaluator for kind {rubric.kind!r}")
    judge = build_judge(settings.judge, metrics)
    context = EvaluationContext(
        judge=judge, settings=effective_judge_settings(settings.judge),
        store_content=settings.store.store_content if store_content is None else store_content)
    return Judging(evaluator, judge, context)


def build_privacy(settings: Settings, metrics: MonitorMetrics) -> Redactor:
    """The redactor of ``redaction:`` with its metric, and the log filter when it applies to logs; the recognizers
    in force are logged (a privacy officer reads them in the start-up lines)."""
    redactor = build_redactor(settings.redaction, lambda name, n: metrics.redactions.labels(name).inc(n))
    install_personal_data_filter(redactor.redact_text if "logs" in redactor.surfaces else None)
    # Said at start when on (which recognizers, where); off is the default and not worth a line on every command.
    log.log(logging.INFO if redactor.enabled else logging.DEBUG, "%s", redactor.describe())
    return redactor


def span_content_dropped_by_redaction(settings: Settings) -> bool:
    """Redacted results would be pointless next to the raw spans they came from: with redaction on for stored
    content, spans are stripped once their conversation is scored (unless late turns need them)."""
    redaction = settings.redaction
    return (redaction.enabled and "stored_content" in redaction.apply_to
            and settings.conversation.late_turns == "ignore")


def build_backfill(settings: Settings, rubric_name: str, since: datetime, registry: CollectorRegistry) -> Backfill:
    """The backfill of one rubric on the stages ``run`` builds: the source (App Insights from ``since``, without
    the live watermark), the registry's rubric, its evaluator and judge, the store."""
    metrics = MonitorMetrics(registry)
    rubrics = RubricRegistry(settings.rubrics.directory, builtin_version)
    rubrics.load()
    rubric = rubrics.get(rubric_name)
    if rubric is None:
        raise ConfigError(str(settings.rubrics.directory), "rubric", f"no active rubric named {rubric_name!r}")
    source_settings = settings.source
    if source_settings.kind == "app_insights":
        # No checkpoint: the first window starts at --since (the live watermark is not touched).
        source_settings = source_settings.model_copy(
            update={"initial_lookback_seconds": max(60.0, (utc_now() - since).total_seconds())})
    store = SqlStore(store_url(settings), settings.store.migrate,
                     tool_result_grace_seconds=settings.conversation.tool_result_grace_seconds)
    try:
        judging = build_judging(settings, rubric, str(settings.rubrics.directory), metrics=metrics,
                                item_store=store)
        source = build_source(source_settings, metrics)
    except Exception:
        store.close()
        raise
    return Backfill(rubric, source, judging.evaluator, judging.context, store, metrics.runtime,
                    lambda c: any(r.name == rubric.name for r in rubrics.for_agent(c.agent_name, c.agent_id)))


def run_backfill(settings: Settings, rubric_name: str, since: datetime, until: datetime, budget_usd: float | None,
                 registry: CollectorRegistry | None = None, out: TextIO = sys.stderr) -> Progress:
    backfill = build_backfill(settings, rubric_name, since, registry or CollectorRegistry())
    try:
        return backfill.run(since, until, budget_usd, out)
    finally:
        backfill.store.close()


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
    receiver: OtlpReceiverSource | None = None
    """The OTLP/HTTP listener (``source.kind: otlp_receiver``), started and stopped by the daemon."""
    review: ReviewStep | None = None
    """The review queue and agreement (``review.enabled``); ``monitor.daemon.loop`` serves its page."""
    review_token: str | None = None
    slos: SloService | None = None

    def steps(self) -> list[Step]:
        """The steps after the scoring stages, in the order ``monitor.pipeline.steps`` gives."""
        steps: list[Step] = []
        if self.canaries is not None:
            steps.append(CanaryStep(self.canaries, self.pipeline.stop.is_set))
        steps.append(GaugesStep(self.metrics.quality, self.store))
        if self.writeback is not None:
            steps.append(WriteBackStep(self.writeback))
        if self.review is not None:
            steps.append(self.review)
        steps.append(HealthStep(self.metrics, self.health))
        if self.alerts is not None:
            steps.append(AlertsStep(self.alerts))
        if self.slos is not None:
            steps.append(AlertsStep(self.slos, name="slo"))  # after the regression alerts: the same outbox
        return steps

    def run_cycle(self, now: datetime | None = None) -> CycleReport:
        report = Cycle(self.pipeline, self.steps(), self.metrics).run(now)
        if report.evaluations and self.next_steps:
            log.info("%s", self.next_steps)
            self.next_steps = None
        return report

    def run_cycles(self) -> None:
        """One cycle, and at once another while the last one stopped before the backlog ran out (spans read
        per cycle, evaluations per cycle): a backlog drains at the judge's pace, not one cap per interval."""
        while True:
            report = self.run_cycle()
            if not report.behind or not report.ok or self.pipeline.stop.is_set():
                return

    def refresh_metrics(self) -> None:
        """The windowed gauges and the label sets of the counters from the rollups, before the first scrape (each
        cycle refreshes them again in ``GaugesStep``); a failure is logged, and the counters are served."""
        step = GaugesStep(self.metrics.quality, self.store)
        try:
            step.run(CycleReport(started_at=utc_now()), utc_now())
        except Exception:
            log.exception("the rolling-window gauges could not be refreshed")
            self.metrics.stage_failures.labels(step.name).inc()

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
    metrics, rubrics, source, judge, redactor = (stages.metrics, stages.rubrics, stages.source, stages.judge,
                                                 stages.redactor)
    # build_stages raises when a stage cannot be built
    assert source is not None and judge is not None and redactor is not None
    replica = settings.replicas.replica_id or replica_id()
    try:
        single = SingleReplicaLock(stages.url, replica)
    except ConfigError:
        stages.close()
        raise
    try:
        store = SqlStore(stages.url, settings.store.migrate,
                         tool_result_grace_seconds=settings.conversation.tool_result_grace_seconds)
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
    store.drop_span_content = settings.store.drop_span_content or span_content_dropped_by_redaction(settings)
    if redactor.enabled and "stored_content" in redactor.surfaces and not store.drop_span_content:
        log.warning("redaction: spans keep their raw payloads until conversation.retention_days (late_turns "
                    "rescore needs them); use late_turns: ignore to have them stripped once a conversation is scored")
    # Generated adaptive items are rewritten from the request: kept in memory only without content storage.
    evaluators = private_evaluators(
        build_evaluators(settings.judge.cache_size, store if settings.store.store_content else None,
                         settings.media), redactor,
        settings.store.store_content)
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
    health.checks["judge"] = lambda: judge.problem
    health.checks["content"] = pipeline.content_problem
    health.checks["judge calls"] = pipeline.judge_problem
    health.checks["rubrics"] = lambda: "; ".join(f"{k}: {v}" for k, v in rubrics.problems.items()) or None
    alerts = build_alerts(settings, store, registry, judge, source.name) if settings.alerts.enabled else None
    health.warning_checks["judge"] = lambda: embedded_warning
    canaries = CanaryRunner(
        rubrics.active, rubrics.sources, evaluators, pipeline.context, store, metrics.judge_trust,
        settings.canary,
        # The pipeline's own budget gate, so canaries and evaluations share one daily budget.
        lambda rubric: pipeline.gate.spent(rubric, utc_now()),
        pipeline.loop,
        pipeline.stop,
    )
    health.warning_checks["judge_drift"] = canaries.warning
    exporter = build_exporter(settings.writeback)
    writeback = None if exporter is None else WriteBack(
        store, exporter, settings.writeback.kind, metrics.runtime, settings.writeback.batch,
        scrub=redactor.redact_text if "writeback" in redactor.surfaces else None)
    receiver = None
    if settings.source.kind == "otlp_receiver":
        from monitor.sources.otlp_receiver import OtlpReceiverSource

        assert isinstance(source, OtlpReceiverSource)
        receiver = source
        # Spans are committed as requests arrive, by the receiver's own thread, into the daemon's store.
        receiver.attach(store, settings.conversation.late_turns)
    slos = build_slos(settings, store, registry, functools.partial(slo_definitions, settings, rubrics), alerts,
                      judge, source.name)
    monitor = Monitor(settings, registry, metrics, pipeline, health, store, alerts=alerts, canaries=canaries,
                      single_replica=single, writeback=writeback, receiver=receiver, slos=slos)
    if settings.review.enabled:
        monitor.review, monitor.review_token = build_review(settings, store, metrics, redactor)
    # The windows and the counters' label sets from the rollups, before the first scrape.
    monitor.refresh_metrics()
    return monitor


def build_review(settings: Settings, store: SqlStore, metrics: MonitorMetrics,
                 redactor: Redactor | None = None) -> tuple[ReviewStep, str | None]:
    """The review step (queue and agreement) and the review page's token (``ConfigError`` when the page would be
    open off loopback). With ``review_page`` among the redaction surfaces the page shows redacted conversations."""
    from monitor.review.queue import Quotas
    from monitor.review.step import ReviewStep
    from monitor.review.store import ReviewStore
    from monitor.review.web import check_review_settings

    review = settings.review
    token = check_review_settings(review)
    quotas = Quotas(review.uniform_share, review.uniform_per_day, review.failing_per_day, review.borderline_per_day,
                    review.borderline_margin, review.flagged_per_day)
    prepare = None
    if redactor is not None and redactor.enabled and "review_page" in redactor.surfaces:
        prepare = lambda conversation: redactor.redact(conversation).conversation  # noqa: E731
    # The queue keeps its copies of the conversations it takes before their spans are stripped.
    store.defer_span_stripping = store.drop_span_content
    step = ReviewStep(ReviewStore(store, prepare), quotas, metrics.judge_agreement,
                      strip_spans=store.drop_span_content,
                      keep_conversations_days=settings.retention.conversations_days,
                      keep_queue_days=settings.retention.results_days)
    step.refresh()
    return step, token


def review_url(settings: Settings) -> str:
    """Where reviewers reach the review page (``review.external_url``, else its listener)."""
    if settings.review.external_url:
        return settings.review.external_url.rstrip("/")
    host = "localhost" if settings.review.host in ("0.0.0.0", "::") else settings.review.host
    return f"http://[{host}]:{settings.review.port}" if ":" in host else f"http://{host}:{settings.review.port}"


def build_alerts(settings: Settings, store: SqlStore, registry: CollectorRegistry, judge: Judge | None = None,
                 source: str | None = None) -> AlertService:
    """The regression alerts of the daemon (and of ``rubric-monitor regressions``, which passes no judge)."""
    from monitor.alerts.service import AlertService, check_settings

    alert_settings = settings.alerts
    if settings.review.enabled and alert_settings.example_link_template is None:
        # Examples open on the review page unless the settings point elsewhere.
        alert_settings = alert_settings.model_copy(update={
            "example_link_template": review_url(settings) + "/conversations/{conversation_id_url}"})
    notifiers = check_settings(alert_settings, settings.interval_seconds)
    reasons = global_reasons(settings, registry, judge, source)
    host = "localhost" if settings.metrics.host in ("0.0.0.0", "::") else settings.metrics.host
    return AlertService(alert_settings, store, registry, notifiers, reasons,
                        generator_url=f"http://{host}:{settings.metrics.port}/metrics")


def global_reasons(settings: Settings, registry: CollectorRegistry, judge: Judge | None, source: str | None
                   ) -> Callable[[], set[str]]:
    """Why nothing can be judged now (the source is behind, the judge unavailable): regression and SLO alerts
    neither fire nor resolve meanwhile."""

    def reasons() -> set[str]:
        found = set()
        lag = None if source is None else registry.get_sample_value("rubric_monitor_source_lag_seconds",
                                                                    {"source": source})
        if lag is not None and lag > settings.alerts.max_source_lag_seconds:
            found.add("source_behind")
        if judge is not None and judge.problem:
            found.add("judge_unavailable")
        return found

    return reasons


def slo_definitions(settings: Settings, rubrics: RubricRegistry) -> list[SloDefinition]:
    """The settings' SLOs and the active rubrics' ``slo:`` blocks, as the registry holds them now (hot reload)."""
    from monitor.slo.spec import resolve

    origins = {name: str(path) for name, path in rubrics.sources().items()}
    return resolve(settings.slos, rubrics.active(), origins)


def build_slos(settings: Settings, store: SqlStore, registry: CollectorRegistry,
               definitions: Callable[[], Sequence[SloDefinition]], alerts: AlertService | None = None,
               judge: Judge | None = None, source: str | None = None) -> SloService:
    """The SLO step (gauges; alerts through ``alerts``' notifiers when regression alerts are on), and
    ``rubric-monitor slo status``."""
    from monitor.alerts.service import detector_settings
    from monitor.slo.service import SloService

    service = SloService(definitions, store, detector_settings(settings.alerts), alerts,
                         global_reasons(settings, registry, judge, source))
    registry.register(service.metrics)
    return service


class _Frozen:
    """A registry whose files are read once (``rubrics.reload: false``)."""

    def __init__(self, registry: RubricRegistry) -> None:
        self._registry = registry

    def refresh(self) -> None:
        return None

    def for_agent(self, agent_name: str | None, agent_id: str | None) -> list[Rubric]:
        return list(self._registry.for_agent(agent_name, agent_id))


