"""Metrics of the OTLP/HTTP receiver (``source.kind: otlp_receiver``), a block of their own held by
``MonitorMetrics``. Every label is bounded: the signal (traces, logs), a status code, a fixed set of reasons."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_REJECTIONS = ("unauthorized", "not_found", "method_not_allowed", "unsupported_media_type", "too_large",
                      "bad_gzip", "bad_encoding", "bad_protobuf", "bad_json", "bad_length", "read_timeout",
                      "pending_full", "store_behind", "store_error", "too_many_connections", "shutting_down")
"""Reasons of ``rubric_monitor_receiver_rejections_total`` (pre-created at zero)."""


class ReceiverMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rubric_monitor_receiver_requests", "OTLP/HTTP requests answered, by signal (traces, logs) and status "
            "code.", ["signal", "code"], registry=registry)
        self.items = Counter(
            "rubric_monitor_receiver_items", "Spans and log records received, by signal and outcome (stored: "
            "committed new; duplicate: committed before, a retry; rejected: invalid, in partial_success; filtered: "
            "another agent's, or a log record outside any trace).", ["signal", "outcome"], registry=registry)
        self.bytes = Counter(
            "rubric_monitor_receiver_bytes", "Request body bytes received as sent (compressed when gzip).",
            ["signal"], registry=registry)
        self.rejections = Counter(
            "rubric_monitor_receiver_rejections", "Requests refused whole, by reason (unauthorized, "
            "unsupported_media_type, too_large, bad_gzip, bad_protobuf, bad_json, pending_full, store_behind, "
            "store_error, too_many_connections, ...).", ["reason"], registry=registry)
        self.backpressure = Counter(
            "rubric_monitor_receiver_backpressure", "Requests answered 429 or 503 with Retry-After, by status "
            "code: the client sends them again later.", ["code"], registry=registry)
        self.commit_latency = Histogram(
            "rubric_monitor_receiver_commit_latency_seconds", "Latency of one store transaction committing "
            "received spans (several requests' spans at once under load).", buckets=COMMIT_BUCKETS,
            registry=registry)
        self.pending = Gauge(
            "rubric_monitor_receiver_pending_spans", "Spans and log records received and not yet committed.",
            registry=registry)
        self.up = Gauge(
            "rubric_monitor_receiver_up", "1 while the OTLP/HTTP listener accepts connections, else 0.",
            registry=registry)
        for reason in REQUEST_REJECTIONS:
            self.rejections.labels(reason)
        for code in ("429", "503"):
            self.backpressure.labels(code)
