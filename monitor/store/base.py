"""⑤ The store: spans waiting for their conversation to finish, source checkpoints, and results.

Spans are kept (deduplicated by span id) until their conversation has been idle long enough to be scored; a
source's checkpoint is stored in the same transaction as the spans it covers, so a position never advances past
spans that are not stored. Results are unique on (conversation, rubric, rubric version, turn, revision): a verdict
is recorded exactly once, and a conversation already scored is never sent to the judge again, across restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal, Protocol

from monitor.models import EvaluationResult, SpanRecord

LatePolicy = Literal["ignore", "rescore"]

BUCKET_SECONDS = 3600
"""Rollups are hourly: a rolling window is a sum over its hours."""
RollupKey = tuple[str, str, str, str]
"""(rubric, rubric version, agent, dimension); dimension "" is the overall verdict."""
RollupSums = tuple[int, int, int, float]
"""(scored, passed, unscored, score sum); a dimension row counts its applicable scores in ``scored``."""


def bucket_of(ts: float) -> int:
    """The start (epoch seconds) of the hour holding ``ts``."""
    return int(ts // BUCKET_SECONDS) * BUCKET_SECONDS


@dataclass(frozen=True)
class RollupChanges:
    """Changes this process made to the rollups of past hours since the last drain."""

    changes: tuple[tuple[int, RollupKey, RollupSums], ...]
    """(hour, key, signed sums added)."""
    overflowed: bool = False
    """Too many to keep, or the rollups were rebuilt: every window must be read again."""


@dataclass(frozen=True)
class StoredSpans:
    """What ``add_spans`` did: new spans stored, duplicates ignored, late turns of scored conversations."""

    new: int
    duplicates: int
    late_ignored: int = 0
    reopened: int = 0
    """Scored conversations reopened for a new revision (``late_turns: rescore``)."""


@dataclass(frozen=True)
class RetentionPolicy:
    """How long each table keeps its rows (days; None keeps them); see ``RetentionSettings``."""

    results_days: float | None = 90.0
    conversations_days: float = 90.0
    adaptive_items_days: float = 30.0
    aggregates_days: float | None = 730.0
    batch: int = 5000


@dataclass(frozen=True)
class PendingConversation:
    key: str
    revision: int
    first_span_at: datetime
    last_span_at: datetime


@dataclass(frozen=True)
class FailedAttempt:
    at: datetime
    error: str
    calls: int


@dataclass(frozen=True)
class Backlog:
    ready: int
    oldest: datetime | None
    future: int


@dataclass(frozen=True)
class CanaryRun:
    """One re-scoring of a rubric's canary set: agreement with the agreed verdicts and the mean score shift."""

    rubric: str
    rubric_version: str
    judge_model: str
    ran_at: datetime
    judged: int
    agreement: float
    """Share of canaries whose pass/fail matches the agreed verdict."""
    score_shift: float
    """Mean of (judge score - agreed score); negative: the judge has become harsher."""
    drift: bool


class ResultStore(Protocol):
    def checkpoint(self, source: str) -> str | None: ...

    def read_through(self, source: str) -> datetime | None:
        """How far the source was last read in full, by whichever replica polls it (``save_read_through``)."""
        ...

    def save_read_through(self, source: str, at: datetime) -> None: ...

    def add_spans(
        self, source: str, spans: Sequence[SpanRecord], checkpoint: str, late_turns: LatePolicy
    ) -> StoredSpans:
        """Store spans and the source's checkpoint atomically."""
        ...

    def ready_conversations(self, idle_before: datetime, started_before: datetime,
                            limit: int | None = None,
                            after: tuple[datetime, str] | None = None) -> list[PendingConversation]:
        """Unscored conversations whose last span is older than ``idle_before`` or whose first span is older than
        ``started_before``, oldest first (by first span, then key), at most ``limit``, from just after the
        (first span, key) ``after``."""
        ...

    def backlog(self, idle_before: datetime, started_before: datetime, future_after: datetime) -> Backlog:
        """How many conversations are ready and unscored (as ``ready_conversations`` tells) and the first span
        of the oldest; how many unscored ones start after ``future_after``."""
        ...

    def claim_ready(self, owner: str, lease_seconds: float, idle_before: datetime, started_before: datetime,
                    limit: int | None = None) -> list[PendingConversation]:
        """Like ``ready_conversations``, only those no other replica holds an unexpired claim on (nor this one:
        a conversation is taken once per cycle), claimed for ``owner`` for ``lease_seconds`` of wall-clock time."""
        ...

    def renew_claims(self, owner: str, keys: Sequence[str], lease_seconds: float) -> int:
        """Extend ``owner``'s claims on ``keys``; returns how many it still held."""
        ...

    def release_claims(self, owner: str) -> int:
        """Free ``owner``'s claims on conversations still pending; returns how many."""
        ...

    def poller_lock(self, source: str) -> AbstractContextManager[bool]:
        """True inside the block for the one replica that reads ``source`` now."""
        ...

    def spans_of(self, key: str) -> list[SpanRecord]: ...

    def has_result(self, conversation_id: str, rubric: str, rubric_version: str, revision: int) -> bool: ...

    def recorded_turns(self, conversation_id: str, rubric: str, rubric_version: str, revision: int) -> set[int]:
        """Turn keys of the results recorded for this evaluation (-1 for a whole-conversation verdict): a
        turn-level evaluation cut short by a crash is finished from here, each turn recorded once."""
        ...

    def record(self, result: EvaluationResult) -> bool:
        """Insert a result; False (and nothing written) when the same verdict is already stored."""
        ...

    def record_failure(self, key: str, rubric: str, revision: int, error: str = "", calls: int = 0) -> int:
        """Count a failed attempt to judge (the judge was unreachable), with its error and the judge calls it
        made; returns the attempts so far."""
        ...

    def failed_attempts(self, key: str, rubric: str, revision: int) -> list[FailedAttempt]:
        """The failed attempts recorded for an evaluation, oldest first (its audit trail once given up)."""
        ...

    def mark_scored(self, key: str, revision: int) -> None: ...

    def mark_scored_many(self, items: Sequence[tuple[str, int]]) -> None:
        """``mark_scored`` for many (key, revision) pairs in one transaction (conversations nothing samples)."""
        ...

    def add_usage(self, rubric: str, day: date, tokens: int, usd: float) -> None: ...

    def usage(self, rubric: str, day: date) -> tuple[int, float]: ...

    def results(self, conversation_id: str | None = None, current_only: bool = False) -> list[EvaluationResult]: ...

    def rollup_sums(self, first_bucket: int, last_bucket: int) -> dict[RollupKey, RollupSums]:
        """Rollups summed over the hours ``first_bucket`` to ``last_bucket`` (both included), per key."""
        ...

    def rollups_frozen(self) -> AbstractContextManager[Any]:
        """While held, no result is recorded by this process (a consistent drain-and-read)."""
        ...

    def drain_rollup_changes(self) -> RollupChanges: ...

    def prune_rollups(self, before_bucket: int) -> int: ...

    def rebuild_rollups(self) -> int:
        """Recompute every rollup from the current results; returns the rows written."""
        ...

    def prune(self, scored_before: datetime) -> int:
        """Delete spans of conversations scored before the given time; returns how many. The conversations stay
        known (as pruned), so late spans of theirs are recognised as late."""
        ...

    def record_canary_run(self, run: CanaryRun) -> None: ...

    def last_canary_runs(self) -> dict[str, CanaryRun]: ...

    def drifting_rubrics(self) -> set[str]:
        """Rubrics whose latest canary run found the judge drifting."""
        ...

    def retain(self, now: datetime, policy: RetentionPolicy) -> dict[str, int]:
        """Apply ``policy`` (results compacted into daily aggregates, old rows deleted); rows removed by table."""
        ...

    def ping(self) -> None:
        """Raise ``StoreError`` when the store is unreachable."""
        ...

    def close(self) -> None: ...
