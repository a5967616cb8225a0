"""⑥ Prometheus metrics: one object owns every event metric for one registry.

Events (evaluations, judge calls, spans read) are Counters and Histograms updated as they happen. Quality gauges
over rolling windows (pass rate, dimension mean) are yielded by ``StoredAggregatesCollector`` at scrape time from the
result store, so a restart does not blank them. No label is unbounded: never a conversation id, never generated
rubric-item text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DIMENSION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CYCLE_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class MonitorMetrics:
    """Every counter and histogram of the daemon, registered on ``registry`` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        # ⑥ the contract for dashboards and alerts
        self.evaluations = Counter(
            "rubric_monitor_evaluations",
            "Evaluations recorded, by outcome (pass, fail, unscored).",
            ["rubric", "rubric_version", "agent", "outcome"],
            registry=registry,
        )
        self.score = Histogram(
            "rubric_monitor_score",
            "Overall score (0 to 1) of scored evaluations.",
            ["rubric", "rubric_version", "agent"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.dimension_score = Histogram(
            "rubric_monitor_dimension_score",
            "Score (1 to 5) of each applicable dimension of weighted rubrics.",
            ["rubric", "rubric_version", "agent", "dimension"],
            buckets=DIMENSION_BUCKETS,
            registry=registry,
        )
        # ① source
        self.spans = Counter("rubric_monitor_spans", "Spans read from a source.", ["source"], registry=registry)
        self.source_rows = Counter(
            "rubric_monitor_source_rows", "Raw rows or lines read from a source.", ["source"], registry=registry
        )
        self.spans_rejected = Counter(
            "rubric_monitor_spans_rejected",
            "Spans, rows or lines that could not be read, by reason.",
            ["source", "reason"],
            registry=registry,
        )
        self.source_query_latency = Histogram(
            "rubric_monitor_source_query_latency_seconds",
            "Latency of one source query.",
            ["source"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.source_errors = Counter(
            "rubric_monitor_source_errors",
            "Source failures by kind (auth, query, throttled, server, timeout, partial, error).",
            ["source", "kind"],
            registry=registry,
        )
        self.source_lag = Gauge(
            "rubric_monitor_source_lag_seconds",
            "How far the source's stored position is behind now.",
            ["source"],
            registry=registry,
        )
        self.conversations_truncated = Counter(
            "rubric_monitor_conversations_truncated",
            "Conversations assembled from values the source had truncated.",
            ["source"],
            registry=registry,
        )
        # ②③ funnel
        self.conversations = Counter(
            "rubric_monitor_conversations",
            "Conversation funnel: assembled, unreadable, sampled, skipped, already_scored, evaluated.",
            ["stage"],
            registry=registry,
        )
        self.skipped = Counter(
            "rubric_monitor_evaluations_skipped",
            "Evaluations not made, by reason (sampled_out, cycle_cap, budget_exhausted, judge_unavailable, "
            "evaluator_error, no_evaluator).",
            ["rubric", "reason"],
            registry=registry,
        )
        # ④ judge
        self.judge_requests = Counter(
            "rubric_monitor_judge_requests",
            "Judge calls by outcome (ok, invalid_reply, rate_limited, server_error, timeout, auth_error, refused, "
            "error).",
            ["model", "outcome"],
            registry=registry,
        )
        self.judge_retries = Counter(
            "rubric_monitor_judge_retries", "Judge call retries.", ["model", "reason"], registry=registry
        )
        self.judge_tokens = Counter(
            "rubric_monitor_judge_tokens", "Judge tokens by direction (input, output).", ["model", "direction"],
            registry=registry,
        )
        self.judge_cost = Counter(
            "rubric_monitor_judge_cost_usd", "Judge cost in USD from the price table.", ["model"], registry=registry
        )
        self.judge_latency = Histogram(
            "rubric_monitor_judge_latency_seconds",
            "Latency of one judge call (including retries).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.judge_limiter_wait = Gauge(
            "rubric_monitor_judge_limiter_wait_seconds",
            "Current wait imposed by the client-side rate limiter.",
            ["model"],
            registry=registry,
        )
        self.judge_up = Gauge(
            "rubric_monitor_judge_up", "0 while the judge refuses our credential, else 1.", ["model"],
            registry=registry,
        )
        self.budget_remaining = Gauge(
            "rubric_monitor_budget_remaining",
            "What is left of a rubric's daily judge budget, by unit (tokens, usd).",
            ["rubric", "unit"],
            registry=registry,
        )
        self.budget_exhausted = Gauge(
            "rubric_monitor_budget_exhausted",
            "1 while a rubric's daily judge budget is spent and its sampling is paused.",
            ["rubric"],
            registry=registry,
        )
        # rubric registry
        self.rubric_load_errors = Counter(
            "rubric_monitor_rubric_load_errors",
            "Rubric files that failed to validate on (re)load.",
            registry=registry,
        )
        self.rubric_active = Gauge(
            "rubric_monitor_rubric_info",
            "1 for each active rubric version.",
            ["rubric", "rubric_version", "kind"],
            registry=registry,
        )
        # daemon health
        self.cycle_duration = Histogram(
            "rubric_monitor_cycle_duration_seconds",
            "Duration of one cycle.",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.cycles = Counter("rubric_monitor_cycles", "Cycles by result (ok, failed).", ["result"], registry=registry)
        self.stage_failures = Counter(
            "rubric_monitor_stage_failures", "Stage failures inside a cycle.", ["stage"], registry=registry
        )
        self.last_success = Gauge(
            "rubric_monitor_last_cycle_success_timestamp_seconds",
            "Unix time of the last cycle that completed without a failure.",
            registry=registry,
        )
        self.health = Gauge(
            "rubric_monitor_health", "1 when healthy, 0 when degraded (see /healthz).", registry=registry
        )


@dataclass(frozen=True)
class WindowAggregate:
    """Pass rate and dimension means of current, scored results within one window, per (rubric, agent)."""

    rubric: str
    agent: str
    window: str
    rubric_version: str
    scored: int
    passed: int
    dimension_means: dict[str, float]


class StoredAggregatesCollector(Collector):
    """Yields the rolling-window gauges from the store on every scrape; keeps no state between scrapes."""

    def __init__(self, query: Callable[[Sequence[str]], Iterable[WindowAggregate]], windows: Sequence[str]) -> None:
        self._query = query
        self._windows = tuple(windows)

    def collect(self) -> Iterable[Metric]:
        pass_rate = GaugeMetricFamily(
            "rubric_monitor_pass_rate",
            "Share of scored evaluations that passed, over a rolling window (unscored ones are left out).",
            labels=["rubric", "rubric_version", "agent", "window"],
        )
        scored = GaugeMetricFamily(
            "rubric_monitor_scored_evaluations",
            "Scored evaluations in the rolling window (the pass rate's sample size).",
            labels=["rubric", "rubric_version", "agent", "window"],
        )
        dimension_mean = GaugeMetricFamily(
            "rubric_monitor_dimension_mean",
            "Mean score (1 to 5) of a dimension over a rolling window.",
            labels=["rubric", "rubric_version", "agent", "dimension", "window"],
        )
        try:
            aggregates = list(self._query(self._windows))
        except Exception:
            # A scrape must still deliver the daemon's own health when the store is down.
            log.exception("rolling-window gauges unavailable: the store did not answer")
            aggregates = []
        for agg in aggregates:
            labels = [agg.rubric, agg.rubric_version, agg.agent, agg.window]
            scored.add_metric(labels, agg.scored)
            if agg.scored:
                pass_rate.add_metric(labels, agg.passed / agg.scored)
            for dimension, mean in sorted(agg.dimension_means.items()):
                dimension_mean.add_metric([agg.rubric, agg.rubric_version, agg.agent, dimension, agg.window], mean)
        yield pass_rate
        yield scored
        yield dimension_mean


class BacklogMetrics:
    """Whether the daemon keeps up (set at the end of each cycle): conversations ready and waiting for the judge,
    the age of the oldest, and conversations dated in the future (which wait until their time comes)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.conversations = Gauge(
            "rubric_monitor_backlog_conversations",
            "Conversations ready to be scored and not scored yet (idle long enough, or old enough).",
            ["source"],
            registry=registry,
        )
        self.oldest_age = Gauge(
            "rubric_monitor_backlog_oldest_age_seconds",
            "Age (since its first span) of the oldest conversation waiting to be scored; 0 when none waits.",
            ["source"],
            registry=registry,
        )
        self.future = Gauge(
            "rubric_monitor_backlog_future_conversations",
            "Unscored conversations with spans dated in the future: they wait until then (check the clocks).",
            ["source"],
            registry=registry,
        )
