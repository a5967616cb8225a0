"""⑥ Prometheus metrics: one object owns every metric of one registry, and the catalog ``docs/metrics.md`` lists.

The daemon's own events (judge calls, spans read, cycles) are prometheus_client Counters, Gauges and Histograms
updated as they happen. The quality metrics (``monitor.quality``: counters by rubric, version, agent and dimension,
and the rolling-window gauges) are the bulk of the series; they are prepared once at the end of each cycle and
served as they are (``monitor.exposition``), so a scrape never reads the store. No label is unbounded: never a
conversation id, never generated rubric-item text, at most ``metrics.max_agents_per_rubric`` agents per rubric.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

from monitor import __version__
from monitor.metrics.quality import QUALITY_FAMILIES, FamilySpec, QualityMetrics
from monitor.metrics.receiver import ReceiverMetrics
from monitor.metrics.rollups import Window
from monitor.metrics.runtime import RuntimeMetrics
from monitor.metrics.slo import SLO_FAMILIES
from monitor.models import EvaluationResult

log = logging.getLogger(__name__)

SKIP_REASONS = ("sampled_out", "cycle_cap", "budget_exhausted", "judge_unavailable", "evaluator_error",
                "no_evaluator", "no_content")
"""Reasons of ``rubric_monitor_evaluations_skipped_total``, pre-created at zero for every active rubric."""
JUDGE_OUTCOMES = ("ok", "rate_limited", "server_error", "timeout", "auth_error", "refused", "error")
"""Exclusive outcomes of a judge call that reached the endpoint (``JudgeError.outcome`` or ``ok``)."""
REFUSAL_REASONS = ("auth_open", "quota_spent")
"""Why a judge call was short-circuited locally, without a request."""

# ``_created`` series double the series of every counter and histogram and no dashboard uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CYCLE_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class MonitorMetrics:
    """Every counter and histogram of the daemon, registered on ``registry`` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry, windows: Sequence[Window] = (),
                 max_agents_per_rubric: int = 50) -> None:
        self.registry = registry
        self.quality = QualityMetrics(windows, max_agents_per_rubric)
        registry.register(self.quality)
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
        self.http_connections_dropped = Counter(
            "rubric_monitor_http_connections_dropped",
            "Connections to the HTTP endpoints closed before a request was served, by server (metrics, receiver, "
            "review) and reason: read_timeout (the request did not arrive in time), too_many_pending (the oldest "
            "unfinished one made room), too_large, busy (every worker and queue slot taken).",
            ["server", "reason"],
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
            "Conversation funnel: assembled, unreadable, no_content, future_dated, sampled, skipped, already_scored, "
            "evaluated.",
            ["stage"],
            registry=registry,
        )
        self.skipped = Counter(
            "rubric_monitor_evaluations_skipped",
            "Evaluations not made, by reason (sampled_out, cycle_cap, budget_exhausted, judge_unavailable, "
            "evaluator_error, no_evaluator, no_content).",
            ["rubric", "reason"],
            registry=registry,
        )
        self.redactions = Counter(
            "rubric_monitor_redactions",
            "Values replaced by a placeholder before the judge, the store and the logs saw them, by recognizer "
            "(redaction.enabled).",
            ["recognizer"],
            registry=registry,
        )
        # ④ judge
        self.judge_requests = Counter(
            "rubric_monitor_judge_requests",
            "Judge calls that reached the endpoint, by exclusive outcome (ok, rate_limited, server_error, timeout, "
            "auth_error, refused, error); retries inside one call are rubric_monitor_judge_retries_total.",
            ["model", "outcome"],
            registry=registry,
        )
        self.judge_calls_refused = Counter(
            "rubric_monitor_judge_calls_refused",
            "Judge calls short-circuited locally without a request, by reason (auth_open: the credential was "
            "refused and is not re-probed yet; quota_spent: a rate limit asks to wait past max_retry_wait_seconds).",
            ["model", "reason"],
            registry=registry,
        )
        self.judge_invalid_replies = Counter(
            "rubric_monitor_judge_invalid_replies",
            "Replies (counted ok in rubric_monitor_judge_requests_total) that the evaluator could not use.",
            ["model"],
            registry=registry,
        )
        self.judge_info = Gauge(
            "rubric_monitor_judge_info",
            "1 for the configured judge: kind, default model and version of the prompts.",
            ["kind", "model", "prompt_version"],
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
        self.budget_remaining_tokens = Gauge(
            "rubric_monitor_budget_remaining_tokens",
            "Tokens left of a rubric's daily judge budget (rubrics with daily_budget_tokens).",
            ["rubric"],
            registry=registry,
        )
        self.budget_remaining_usd = Gauge(
            "rubric_monitor_budget_remaining_usd",
            "USD left of a rubric's daily judge budget (rubrics with daily_budget_usd).",
            ["rubric"],
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
        self.rubric_info = Gauge(
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
        self.build_info = Gauge(
            "rubric_monitor_build_info", "1, labelled with the daemon's version.", ["version"], registry=registry
        )
        self.build_info.labels(__version__).set(1)
        # The production runtime's own block (write-back, backfill): monitor/runtime_metrics.py.
        self.runtime = RuntimeMetrics(registry)
        for result in ("ok", "failed"):
            self.cycles.labels(result)
        self.backlog = BacklogMetrics(registry)  # the backlog of ready conversations (issue 8, item 11)
        self.judge_trust = JudgeTrustMetrics(registry)  # drift canaries (monitor.canary)
        self.receiver = ReceiverMetrics(registry)  # the OTLP/HTTP receiver (source.kind: otlp_receiver)
        self.judge_agreement = JudgeAgreementMetrics(registry)  # people's labels (monitor.review)

    def judge_configured(self, kind: str, model: str, prompt_version: str) -> None:
        """Publish ``judge_info`` and pre-create the judge's counters at zero, so ratios work from the start."""
        self.judge_info.labels(kind, model, prompt_version).set(1)
        for outcome in JUDGE_OUTCOMES:
            self.judge_requests.labels(model, outcome)
        for reason in REFUSAL_REASONS:
            self.judge_calls_refused.labels(model, reason)
        self.judge_invalid_replies.labels(model)

    def record_result(self, result: EvaluationResult) -> None:
        """Count a recorded result (served from the end of the cycle)."""
        self.quality.record(result)

    def rubric_active(self, rubric: str) -> None:
        """Pre-create a rubric's skip counters at zero (``rate()`` and ratios work from the first cycle)."""
        for reason in SKIP_REASONS:
            self.skipped.labels(rubric, reason)


class JudgeTrustMetrics:
    """Drift canaries (``monitor.canary``): how the judge agrees with a rubric's agreed verdicts, last run."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.canary_agreement = Gauge(
            "rubric_monitor_canary_agreement",
            "Share of a rubric's canary conversations whose pass/fail matches the agreed verdict (last run).",
            ["rubric", "judge_model"], registry=registry)
        self.canary_score_shift = Gauge(
            "rubric_monitor_canary_score_shift",
            "Mean judge score minus agreed score on a rubric's canary set (last run); negative: harsher.",
            ["rubric", "judge_model"], registry=registry)
        self.judge_drift = Gauge(
            "rubric_monitor_judge_drift",
            "1 while the last canary run of a rubric found the judge drifting from the agreed verdicts "
            "(JudgeDrift).",
            ["rubric"], registry=registry)


class JudgeAgreementMetrics:
    """How the judge agrees with people's labels of the uniform review share (``monitor.review.agreement``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.agreement = Gauge(
            "rubric_monitor_judge_agreement",
            "Judge-human agreement on the labelled uniform review share: measure pass_fail, kappa (dimension \"\"), "
            "weighted_kappa, within_one, exact (per dimension).",
            ["rubric", "dimension", "measure"], registry=registry)
        self.bound = Gauge(
            "rubric_monitor_judge_agreement_bound",
            "95% interval of rubric_monitor_judge_agreement (bound lower or upper; Wilson for shares, bootstrap "
            "for kappa).",
            ["rubric", "dimension", "measure", "bound"], registry=registry)
        self.labels = Gauge(
            "rubric_monitor_judge_agreement_labels",
            "Labelled pairs behind rubric_monitor_judge_agreement (dimension \"\": pass/fail pairs).",
            ["rubric", "dimension"], registry=registry)


def catalog(metrics: MonitorMetrics) -> list[FamilySpec]:
    """Every family the daemon serves, from the metric objects themselves (so the doc cannot drift)."""
    found: dict[str, FamilySpec] = {}

    def walk(owner: object, depth: int) -> None:
        for value in vars(owner).values():
            if isinstance(value, MetricWrapperBase):
                kind = str(value._type)
                name = str(value._name) + ("_total" if kind == "counter" else "")
                found[name] = FamilySpec(name, kind, tuple(value._labelnames),
                                         str(value._documentation))
            elif depth < 2 and hasattr(value, "__dict__") and type(value).__module__.startswith("monitor."):
                walk(value, depth + 1)  # a block of metrics held as an attribute (backlog, canaries, runtime)

    walk(metrics, 0)
    for spec in (*QUALITY_FAMILIES, *SLO_FAMILIES):
        found[spec.name] = spec
    return sorted(found.values(), key=lambda spec: spec.name)


def metrics_table(metrics: MonitorMetrics) -> str:
    """The Markdown table of ``docs/metrics.md``."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for spec in catalog(metrics):
        meaning = spec.help.replace("|", "\\|")
        rows.append(f"| `{spec.name}` | {spec.type} | {', '.join(spec.labels)} | {meaning} |")
    return "\n".join(rows)


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
