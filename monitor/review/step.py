"""The daemon's review step, after the scoring stages: queue today's picks of the verdicts just recorded, and
publish agreement again when a label was added or replaced since the last cycle."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from monitor.metrics.catalog import JudgeAgreementMetrics
from monitor.review.agreement import RubricAgreement, agreement
from monitor.review.queue import Quotas
from monitor.review.store import ReviewStore

log = logging.getLogger(__name__)


def publish(metrics: JudgeAgreementMetrics, report: dict[str, RubricAgreement]) -> None:
    """Replace every agreement series with ``report``'s (a rubric whose labels are gone disappears)."""
    for gauge in (metrics.agreement, metrics.bound, metrics.labels):
        gauge.clear()
    for rubric, found in report.items():
        for (dimension, measure), value in found.measures.items():
            if value.value is not None:
                metrics.agreement.labels(rubric, dimension, measure).set(value.value)
            if value.lower is not None and value.upper is not None:
                metrics.bound.labels(rubric, dimension, measure, "lower").set(value.lower)
                metrics.bound.labels(rubric, dimension, measure, "upper").set(value.upper)
        for dimension, count in found.labels.items():
            metrics.labels.labels(rubric, dimension).set(count)


@dataclass
class ReviewStep:
    store: ReviewStore
    quotas: Quotas
    metrics: JudgeAgreementMetrics
    keep_conversations_days: float = 90.0
    """Kept conversations are deleted after this long (``retention.conversations_days``, as their spans)."""
    keep_queue_days: float | None = 90.0
    """Queue rows go with their verdicts (``retention.results_days``); labels stay."""
    strip_spans: bool = False
    """``store.drop_span_content`` with the review page on: the spans of conversations scored since the last run
    are stripped here, once the queue has kept its copies of those it took (the page shows those copies)."""
    name: str = "review"
    fails_cycle: bool = False
    """The queue catches up on the next cycle (it keeps its own watermark); scoring is not affected."""
    _seen: tuple[int, float] | None = field(default=None, repr=False)
    _stripped_through: float = field(default=0.0, repr=False)

    def run(self, report: object, now: datetime) -> None:
        queued = self.store.fill_queue(self.quotas)
        if self.strip_spans:
            # Stripping twice is harmless, so after a restart the first run strips from the beginning again.
            until = now.timestamp()
            self.store.store.strip_scored_spans(self._stripped_through, until)
            self._stripped_through = until
        day = 86400.0
        self.store.prune(now.timestamp() - self.keep_conversations_days * day,
                         None if self.keep_queue_days is None else now.timestamp() - self.keep_queue_days * day)
        if queued:
            log.info("review: queued %s", ", ".join(f"{n} {reason}" for reason, n in sorted(queued.items())))
        self.refresh()

    def refresh(self) -> None:
        version = self.store.labels_version()
        if version == self._seen:
            return
        publish(self.metrics, agreement(self.store.labelled_verdicts(uniform_only=True)))
        self._seen = version
