"""The review queue, people's labels and shadow verdicts, in the result store's database (``SqlStore.transaction``,
the way regression alerts keep theirs).

Every list is a keyset page (newest first, ``(evaluated_ts, id)`` after the last row shown) over an index, so a
page costs the same at a thousand results as at a million.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Select, Table, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from monitor.assemble import assemble
from monitor.models import Conversation, EvaluationResult
from monitor.review.queue import REASONS, Candidate, Quotas, Reason, pick
from monitor.store.sql import SqlStore
from monitor.store.tables import (
    checkpoints_table,
    conversations_table,
    results_table,
    review_conversations_table,
    review_labels_table,
    review_queue_table,
    shadow_results_table,
)

log = logging.getLogger(__name__)

WATERMARK = "review#queued_through"
"""The checkpoints row holding the last result id the queue considered (the id grows with every record)."""
SCAN_BATCH = 5000
"""Results the queue considers per cycle; a larger backlog is worked through over the next cycles."""
MAX_PAGE = 200
NAMES_SECONDS = 60.0


@dataclass(frozen=True)
class StoredLabel:
    """One reviewer's verdict on one evaluation (conversation and rubric)."""

    conversation_id: str
    rubric: str
    reviewer: str
    passed: bool
    dimensions: dict[str, int | None] = field(default_factory=dict)
    """Dimension id → 1..5, or None when the reviewer found it not applicable."""
    score: float | None = None
    note: str = ""
    result_id: int | None = None
    labelled_at: datetime | None = None


@dataclass(frozen=True)
class Row:
    """One line of the queue or of the results list."""

    result_id: int
    conversation_id: str
    rubric: str
    agent: str
    outcome: str
    score: float | None
    evaluated_at: datetime
    reason: str | None
    labels: int


@dataclass(frozen=True)
class Filters:
    rubric: str | None = None
    agent: str | None = None
    label: str | None = None
    """``labelled`` or ``unlabelled`` (by anyone)."""
    reason: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    next_cursor: str | None
    """The ``after`` of the next page, None on the last."""


def _cursor(row: Row) -> str:
    return f"{row.evaluated_at.timestamp()!r}:{row.result_id}"


def parse_cursor(value: str | None) -> tuple[float, int] | None:
    if not value:
        return None
    ts, _, identifier = value.partition(":")
    try:
        return float(ts), int(identifier)
    except ValueError:
        return None


def _dimensions_json(dimensions: dict[str, int | None]) -> str:
    return json.dumps(dict(sorted(dimensions.items())), separators=(",", ":"))


def _stored_label(row: Any) -> StoredLabel:
    """A ``review_labels`` row as a label."""
    return StoredLabel(str(row.conversation_id), str(row.rubric), str(row.reviewer), bool(row.passed),
                       json.loads(row.dimensions), None if row.score is None else float(row.score), str(row.note),
                       None if row.result_id is None else int(row.result_id),
                       datetime.fromtimestamp(row.labelled_ts, UTC))


class ReviewStore:
    def __init__(self, store: SqlStore, prepare: Callable[[Conversation], Conversation] | None = None) -> None:
        self.store = store
        self._prepare = prepare or (lambda conversation: conversation)
        """What the page shows of an assembled conversation: with ``redaction.apply_to: [review_page]``, the same
        placeholders the judge saw (numbered in the same one pass over the conversation)."""
        self._names: tuple[float, list[str], list[str]] | None = None

    # the queue -------------------------------------------------------------------------------------------------

    def fill_queue(self, quotas: Quotas, batch: int = SCAN_BATCH) -> dict[str, int]:
        """Consider the conversation-level verdicts recorded since the last call (at most ``batch``) and queue
        those each rubric's daily quotas take; returns how many were queued per reason."""
        r, q = results_table.c, review_queue_table.c
        queued: dict[str, int] = {}
        picked: list[str] = []
        with self.store.transaction() as conn:
            through = int(conn.execute(select(checkpoints_table.c.checkpoint)
                                       .where(checkpoints_table.c.source == WATERMARK)).scalar_one_or_none() or 0)
            rows = conn.execute(
                select(r.id, r.rubric, r.agent, r.conversation_id, r.outcome, r.score, r.evaluated_ts, r.payload)
                .where(and_(r.id > through, r.current.is_(True), r.turn_key == -1))
                .order_by(r.id).limit(batch)).all()
            last = conn.execute(select(func.max(r.id))).scalar_one_or_none() or 0
            if len(rows) == batch:
                last = int(rows[-1].id)
            counts: dict[tuple[str, str], dict[Reason, int]] = {}
            for row in rows:
                day = datetime.fromtimestamp(row.evaluated_ts, UTC).date().isoformat()
                key = (str(row.rubric), day)
                if key not in counts:
                    counts[key] = {reason: 0 for reason in REASONS}
                    for reason, count in conn.execute(select(q.reason, func.count()).where(
                            and_(q.rubric == row.rubric, q.day == day)).group_by(q.reason)).all():
                        counts[key][reason] = int(count)
                payload = json.loads(row.payload)
                candidate = Candidate(str(row.rubric), str(row.conversation_id), str(row.outcome),
                                      None if row.score is None else float(row.score), payload.get("threshold"),
                                      bool(payload.get("context_truncated")))
                reason = pick(candidate, quotas, counts[key])
                if reason is None:
                    continue
                values = {"result_id": int(row.id), "rubric": row.rubric, "agent": row.agent, "day": day,
                          "reason": reason, "evaluated_ts": row.evaluated_ts}
                conn.execute(self._insert_ignoring_duplicates(conn, values))
                queued[reason] = queued.get(reason, 0) + 1
                picked.append(str(row.conversation_id))
            self._save_watermark(conn, int(last))
        for conversation_id in picked:
            # Assembled now, off the request path, so the reviewer's first view is as fast as the next.
            self.conversation(conversation_id)
        return queued

    @staticmethod
    def _insert_ignoring_duplicates(conn: Connection, values: dict[str, Any], table: Table = review_queue_table
                                    ) -> Any:
        # Another replica may have written the same row first: it is the same row, so nothing is lost.
        if conn.dialect.name == "postgresql":
            return postgresql.insert(table).values(**values).on_conflict_do_nothing()
        return sqlite.insert(table).values(**values).on_conflict_do_nothing()

    @staticmethod
    def _save_watermark(conn: Connection, through: int) -> None:
        c = checkpoints_table.c
        now = datetime.now(UTC).timestamp()
        updated = conn.execute(update(checkpoints_table).where(c.source == WATERMARK)
                               .values(checkpoint=str(through), updated_ts=now))
        if updated.rowcount == 0:
            conn.execute(insert(checkpoints_table).values(source=WATERMARK, checkpoint=str(through), updated_ts=now))

    def _label_count(self) -> Any:
        labels = review_labels_table.c
        return (select(func.count()).where(labels.result_id == results_table.c.id)
                .scalar_subquery().label("labels"))

    def queue_page(self, filters: Filters, after: str | None = None, limit: int = 50) -> Page:
        """The queue, newest verdict first."""
        q, r = review_queue_table.c, results_table.c
        query: Select[Any] = (
            select(q.result_id, r.conversation_id, q.rubric, q.agent, r.outcome, r.score, q.evaluated_ts, q.reason,
                   self._label_count())
            .join_from(review_queue_table, results_table, r.id == q.result_id))
        query = self._filtered(query, filters, q.evaluated_ts, q.result_id, q.rubric, q.agent, r.outcome, after)
        if filters.reason:
            query = query.where(q.reason == filters.reason)
        return self._page(query.order_by(q.evaluated_ts.desc(), q.result_id.desc()), limit)

    def results_page(self, filters: Filters, after: str | None = None, limit: int = 50) -> Page:
        """Current results, newest first."""
        r, q = results_table.c, review_queue_table.c
        reason = select(q.reason).where(q.result_id == r.id).scalar_subquery().label("reason")
        query: Select[Any] = select(r.id, r.conversation_id, r.rubric, r.agent, r.outcome, r.score, r.evaluated_ts,
                                    reason, self._label_count()).where(r.current.is_(True))
        query = self._filtered(query, filters, r.evaluated_ts, r.id, r.rubric, r.agent, r.outcome, after)
        return self._page(query.order_by(r.evaluated_ts.desc(), r.id.desc()), limit)

    @staticmethod
    def _filtered(query: Select[Any], filters: Filters, ts: Any, result_id: Any, rubric: Any, agent: Any,
                  outcome: Any, after: str | None) -> Select[Any]:
        labels = review_labels_table.c
        if filters.rubric:
            query = query.where(rubric == filters.rubric)
        if filters.agent:
            query = query.where(agent == filters.agent)
        if filters.outcome:
            query = query.where(outcome == filters.outcome)
        if filters.since is not None:
            query = query.where(ts >= filters.since.timestamp())
        if filters.until is not None:
            query = query.where(ts < filters.until.timestamp())
        if filters.label == "labelled":
            # Few verdicts are labelled: start from the labels, not from every result newest first.
            query = query.where(result_id.in_(select(labels.result_id).where(labels.result_id.is_not(None))))
        elif filters.label == "unlabelled":
            query = query.where(~exists().where(labels.result_id == result_id))
        cursor = parse_cursor(after)
        if cursor is not None:
            query = query.where(or_(ts < cursor[0], and_(ts == cursor[0], result_id < cursor[1])))
        return query

    def _page(self, query: Select[Any], limit: int) -> Page:
        limit = max(1, min(limit, MAX_PAGE))
        with self.store.transaction() as conn:
            found = conn.execute(query.limit(limit + 1)).all()
        rows = [Row(int(x[0]), str(x[1]), str(x[2]), str(x[3]), str(x[4]), None if x[5] is None else float(x[5]),
                    datetime.fromtimestamp(x[6], UTC), None if x[7] is None else str(x[7]), int(x[8]))
                for x in found[:limit]]
        return Page(rows, _cursor(rows[-1]) if len(found) > limit else None)

    def next_unlabelled(self, reviewer: str, filters: Filters, after_result: int | None = None) -> int | None:
        """The next queued verdict (newest first) this reviewer has not labelled, other than ``after_result``."""
        q, labels = review_queue_table.c, review_labels_table.c
        query = select(q.result_id).where(~exists().where(and_(labels.result_id == q.result_id,
                                                               labels.reviewer == reviewer)))
        if filters.rubric:
            query = query.where(q.rubric == filters.rubric)
        if filters.agent:
            query = query.where(q.agent == filters.agent)
        if filters.reason:
            query = query.where(q.reason == filters.reason)
        if after_result is not None:
            query = query.where(q.result_id != after_result)
        with self.store.transaction() as conn:
            found = conn.execute(query.order_by(q.evaluated_ts.desc(), q.result_id.desc()).limit(1)).scalar()
        return None if found is None else int(found)

    # one conversation ------------------------------------------------------------------------------------------

    def result(self, result_id: int) -> tuple[EvaluationResult, str | None] | None:
        """A stored verdict and why it was queued (None when it was not)."""
        r, q = results_table.c, review_queue_table.c
        with self.store.transaction() as conn:
            row = conn.execute(select(r.payload, select(q.reason).where(q.result_id == r.id).scalar_subquery())
                               .where(r.id == result_id)).one_or_none()
        if row is None:
            return None
        return EvaluationResult.model_validate_json(row[0]), None if row[1] is None else str(row[1])

    def current_results(self, conversation_id: str) -> list[tuple[int, EvaluationResult]]:
        r = results_table.c
        with self.store.transaction() as conn:
            rows = conn.execute(select(r.id, r.payload).where(and_(r.conversation_id == conversation_id,
                                                                   r.current.is_(True)))
                                .order_by(r.rubric, r.turn_key)).all()
        return [(int(i), EvaluationResult.model_validate_json(p)) for i, p in rows]

    def conversation(self, conversation_id: str) -> Conversation | None:
        """The conversation as assembled from its spans: the review page's copy while it is current (or the spans
        are gone), else assembled again and kept; None when neither exists."""
        c, v = conversations_table.c, review_conversations_table.c
        with self.store.transaction() as conn:
            known = conn.execute(select(c.span_count, c.status).where(c.key == conversation_id)).one_or_none()
            kept = conn.execute(select(v.span_count, v.payload)
                                .where(v.conversation_id == conversation_id)).one_or_none()
        if kept is not None and (known is None or known.status == "pruned" or known.span_count == kept.span_count):
            return Conversation.model_validate_json(kept.payload)
        spans = self.store.spans_of(conversation_id)
        found = [x for x in assemble(spans).conversations if x.id == conversation_id] if spans else []
        if not found:
            return None if kept is None else Conversation.model_validate_json(kept.payload)
        shown = self._prepare(found[0])
        self._keep(conversation_id, len(spans) if known is None else int(known.span_count), shown)
        return shown

    def _keep(self, conversation_id: str, span_count: int, conversation: Conversation) -> None:
        v = review_conversations_table.c
        values = {"span_count": span_count, "payload": conversation.model_dump_json(),
                  "stored_ts": datetime.now(UTC).timestamp()}
        with self.store.transaction() as conn:
            if conn.execute(update(review_conversations_table).where(v.conversation_id == conversation_id)
                            .values(**values)).rowcount == 0:
                conn.execute(self._insert_ignoring_duplicates(
                    conn, {"conversation_id": conversation_id, **values}, review_conversations_table))

    def prune(self, conversations_before: float, queue_before: float | None) -> int:
        """Delete kept conversations taken before ``conversations_before`` (epoch seconds) and queue rows of verdicts
        evaluated before ``queue_before`` (None keeps them); labels are kept. Returns the rows deleted."""
        v, q = review_conversations_table.c, review_queue_table.c
        with self.store.transaction() as conn:
            deleted = conn.execute(delete(review_conversations_table)
                                   .where(v.stored_ts < conversations_before)).rowcount
            if queue_before is not None:
                deleted += conn.execute(delete(review_queue_table).where(q.evaluated_ts < queue_before)).rowcount
        return int(deleted)

    # labels ----------------------------------------------------------------------------------------------------

    def save_label(self, label: StoredLabel) -> None:
        """Store a label; the same reviewer labelling the same evaluation again replaces it."""
        self.save_labels([label])

    def save_labels(self, labels: Sequence[StoredLabel]) -> int:
        c = review_labels_table.c
        with self.store.transaction() as conn:
            for label in labels:
                values = {"result_id": label.result_id, "passed": label.passed, "score": label.score,
                          "dimensions": _dimensions_json(label.dimensions), "note": label.note,
                          "labelled_ts": (label.labelled_at or datetime.now(UTC)).timestamp()}
                where = and_(c.conversation_id == label.conversation_id, c.rubric == label.rubric,
                             c.reviewer == label.reviewer)
                if conn.execute(update(review_labels_table).where(where).values(**values)).rowcount == 0:
                    conn.execute(insert(review_labels_table).values(
                        conversation_id=label.conversation_id, rubric=label.rubric, reviewer=label.reviewer,
                        **values))
        return len(labels)

    def current_result_id(self, conversation_id: str, rubric: str) -> int | None:
        """The current conversation-level verdict of an evaluation (what an imported label is attached to)."""
        r = results_table.c
        with self.store.transaction() as conn:
            found = conn.execute(select(r.id).where(and_(r.conversation_id == conversation_id, r.rubric == rubric,
                                                         r.current.is_(True), r.turn_key == -1))).scalar()
        return None if found is None else int(found)

    def labels(self, rubric: str | None = None, result_id: int | None = None) -> list[StoredLabel]:
        c = review_labels_table.c
        query = select(review_labels_table).order_by(c.labelled_ts, c.id)
        if rubric is not None:
            query = query.where(c.rubric == rubric)
        if result_id is not None:
            query = query.where(c.result_id == result_id)
        with self.store.transaction() as conn:
            rows = conn.execute(query).all()
        return [_stored_label(x) for x in rows]

    def labelled_verdicts(self, uniform_only: bool) -> list[tuple[StoredLabel, EvaluationResult]]:
        """Each label with the verdict it labelled; ``uniform_only``: only verdicts of the uniform share (the
        unbiased estimate of agreement)."""
        c, r, q = review_labels_table.c, results_table.c, review_queue_table.c
        query = (select(review_labels_table, r.payload).join_from(review_labels_table, results_table,
                                                                  r.id == c.result_id))
        if uniform_only:
            query = query.join(review_queue_table, and_(q.result_id == c.result_id, q.reason == "uniform"))
        with self.store.transaction() as conn:
            rows = conn.execute(query.order_by(c.id)).all()
        return [(_stored_label(x), EvaluationResult.model_validate_json(x.payload)) for x in rows]

    def labels_version(self) -> tuple[int, float]:
        """Changes when a label is added or replaced: agreement is computed again only then."""
        c = review_labels_table.c
        with self.store.transaction() as conn:
            count, newest = conn.execute(select(func.count(), func.max(c.labelled_ts))).one()
        return int(count), float(newest or 0.0)

    def rubrics_and_agents(self) -> tuple[list[str], list[str]]:
        """Names offered in the filters: those of the queue, not of every result; read again after
        ``NAMES_SECONDS`` (a filter list a minute old is fine, a scan of the queue per page is not)."""
        now = time.monotonic()
        if self._names is not None and now - self._names[0] < NAMES_SECONDS:
            return self._names[1], self._names[2]
        q = review_queue_table.c
        with self.store.transaction() as conn:
            rubrics = [str(x) for x in conn.execute(select(q.rubric).distinct().order_by(q.rubric)).scalars()]
            agents = [str(x) for x in conn.execute(select(q.agent).distinct().order_by(q.agent).limit(200))
                      .scalars()]
        self._names = (now, rubrics, agents)
        return rubrics, agents

    # shadow verdicts -------------------------------------------------------------------------------------------

    def save_shadow(self, candidate: str, result: EvaluationResult, active_result_id: int | None,
                    labelled: bool) -> bool:
        """Store a candidate's verdict (once per candidate, conversation and rubric); False when already there."""
        s = shadow_results_table.c
        with self.store.transaction() as conn:
            present = conn.execute(select(s.id).where(and_(s.candidate == candidate,
                                                           s.conversation_id == result.conversation_id,
                                                           s.rubric == result.rubric))).scalar()
            if present is not None:
                return False
            conn.execute(insert(shadow_results_table).values(
                candidate=candidate, conversation_id=result.conversation_id, rubric=result.rubric,
                active_result_id=active_result_id, labelled=labelled, outcome=result.outcome, score=result.score,
                evaluated_ts=result.evaluated_at.timestamp(), payload=result.model_dump_json()))
        return True

    def shadow_verdicts(self, candidate: str | None = None
                        ) -> list[tuple[str, bool, EvaluationResult, EvaluationResult | None]]:
        """(candidate, labelled, shadow verdict, active verdict compared with) for each shadow verdict."""
        s, r = shadow_results_table.c, results_table.c
        query = (select(s.candidate, s.labelled, s.payload, r.payload)
                 .join_from(shadow_results_table, results_table, r.id == s.active_result_id, isouter=True)
                 .order_by(s.id))
        if candidate is not None:
            query = query.where(s.candidate == candidate)
        with self.store.transaction() as conn:
            rows = conn.execute(query).all()
        return [(str(c), bool(lab), EvaluationResult.model_validate_json(p),
                 None if a is None else EvaluationResult.model_validate_json(a)) for c, lab, p, a in rows]

    def shadowed_conversations(self, candidate: str) -> set[tuple[str, str]]:
        s = shadow_results_table.c
        with self.store.transaction() as conn:
            return {(str(a), str(b)) for a, b in conn.execute(select(s.conversation_id, s.rubric)
                                                              .where(s.candidate == candidate)).all()}

    def recent_conversation_results(self, rubric: str, limit: int) -> list[tuple[int, str]]:
        """The newest current conversation-level verdicts of a rubric: (result id, conversation id)."""
        r = results_table.c
        with self.store.transaction() as conn:
            rows = conn.execute(select(r.id, r.conversation_id).where(and_(r.rubric == rubric, r.current.is_(True),
                                                                           r.turn_key == -1))
                                .order_by(r.evaluated_ts.desc(), r.id.desc()).limit(limit)).all()
        return [(int(i), str(c)) for i, c in rows]
