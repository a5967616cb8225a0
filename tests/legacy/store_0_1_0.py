# Verbatim copy of monitor/store/sql.py as released in 0.1.0 (commit 659bb55), the code path that created
# databases before migrations existed: tests/test_migrations.py fills a database with it, then upgrades it. Only
# its imports of types that later releases changed are replaced by their 0.1.0 definitions (below the imports).
# ruff: noqa
"""The store on SQLAlchemy Core: SQLite by default, PostgreSQL in production.

Times are stored as UTC epoch seconds (floats): exact to compare on every backend, no naive datetimes anywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    case,
    create_engine,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from monitor.assemble import conversation_key
from monitor.errors import StoreError
from monitor.models import EvaluationResult, SpanRecord
from dataclasses import dataclass
from typing import Literal

LatePolicy = Literal["ignore", "rescore"]


@dataclass(frozen=True)
class StoredSpans:
    new: int
    duplicates: int
    late_ignored: int = 0
    reopened: int = 0


@dataclass(frozen=True)
class PendingConversation:
    key: str
    revision: int
    first_span_at: datetime
    last_span_at: datetime


@dataclass(frozen=True)
class WindowAggregate:
    rubric: str
    agent: str
    window: str
    rubric_version: str
    scored: int
    passed: int
    dimension_means: dict[str, float]

metadata = MetaData()

spans_table = Table(
    "spans", metadata,
    # Span ids are unique only within their trace.
    Column("trace_id", Text, primary_key=True),
    Column("span_id", Text, primary_key=True),
    Column("conversation_key", Text, nullable=False, index=True),
    Column("start_ts", Float, nullable=False),
    Column("payload", Text, nullable=False),
)
traces_table = Table(
    "trace_conversations", metadata,
    Column("trace_id", Text, primary_key=True),
    Column("conversation_key", Text, nullable=False),
    Column("from_conversation_id", Boolean, nullable=False),
)
conversations_table = Table(
    "conversations", metadata,
    Column("key", Text, primary_key=True),
    Column("first_span_ts", Float, nullable=False),
    Column("last_span_ts", Float, nullable=False),
    Column("span_count", Integer, nullable=False),
    Column("status", String(16), nullable=False, index=True),  # pending | scored | pruned (scored, spans deleted)
    Column("revision", Integer, nullable=False),
    Column("scored_ts", Float),
)
checkpoints_table = Table(
    "checkpoints", metadata,
    Column("source", String(64), primary_key=True),
    Column("checkpoint", Text, nullable=False),
    Column("updated_ts", Float, nullable=False),
)
results_table = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Text, nullable=False, index=True),
    Column("rubric", String(256), nullable=False),
    Column("rubric_version", Text, nullable=False),
    Column("turn_key", Integer, nullable=False),  # -1 for a whole-conversation verdict
    Column("revision", Integer, nullable=False),
    Column("current", Boolean, nullable=False, index=True),
    Column("agent", Text, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("score", Float),
    Column("evaluated_ts", Float, nullable=False, index=True),
    Column("payload", Text, nullable=False),  # the whole EvaluationResult as JSON
    UniqueConstraint("conversation_id", "rubric", "rubric_version", "turn_key", "revision", name="uq_result"),
)
dimensions_table = Table(
    "result_dimensions", metadata,
    Column("result_id", Integer, primary_key=True),
    Column("dimension", String(128), primary_key=True),
    Column("rubric", String(256), nullable=False),
    Column("rubric_version", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("score", Integer, nullable=False),
    Column("current", Boolean, nullable=False),
    Column("evaluated_ts", Float, nullable=False, index=True),
)
failures_table = Table(
    "judge_failures", metadata,
    Column("conversation_key", Text, primary_key=True),
    Column("rubric", String(256), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("attempts", Integer, nullable=False),
)
usage_table = Table(
    "judge_usage_daily", metadata,
    Column("rubric", String(256), primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("tokens", Integer, nullable=False),
    Column("usd", Float, nullable=False),
)

items_table = Table(
    "adaptive_items", metadata,
    Column("key", String(128), primary_key=True),
    Column("payload", Text, nullable=False),
    Column("created_ts", Float, nullable=False),
)

_CHUNK = 500


def _text(value: str) -> str:
    """PostgreSQL text cannot hold NUL characters; ids that carry one are stored with U+FFFD instead."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _clean_ids(span: SpanRecord) -> SpanRecord:
    if "\x00" not in span.trace_id + span.span_id:
        return span
    return span.model_copy(update={"trace_id": _text(span.trace_id), "span_id": _text(span.span_id)})


def _ts(value: datetime) -> float:
    return value.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


class SqlStore:
    """``ResultStore`` over any SQLAlchemy URL; creates its tables on first use."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite") and (url.endswith(":memory:") or url in ("sqlite://", "sqlite+pysqlite://")):
            # One shared connection, or every new connection would see a new, empty database.
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        try:
            self._engine = create_engine(url, future=True, **kwargs)
            metadata.create_all(self._engine)
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._safe_url()}: {exc}") from exc

    def _safe_url(self) -> str:
        return self._engine.url.render_as_string(hide_password=True) if hasattr(self, "_engine") else "(invalid)"

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self._engine.begin() as conn:
                yield conn
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._safe_url()}: {exc}") from exc

    # ① checkpoints and spans -----------------------------------------------------------------------------------

    def checkpoint(self, source: str) -> str | None:
        with self._tx() as conn:
            row = conn.execute(select(checkpoints_table.c.checkpoint).where(checkpoints_table.c.source == source))
            value = row.scalar_one_or_none()
        return value

    def add_spans(
        self, source: str, spans: Sequence[SpanRecord], checkpoint: str, late_turns: LatePolicy
    ) -> StoredSpans:
        unique = {(s.trace_id, s.span_id): s for s in map(_clean_ids, spans)}
        with self._tx() as conn:
            existing = self._existing_spans(conn, list(unique))
            new = [s for ids, s in unique.items() if ids not in existing]
            by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
            for span in new:
                by_trace[span.trace_id].append(span)
            keys = {trace: self._conversation_key(conn, trace, group) for trace, group in by_trace.items()}
            if new:
                conn.execute(insert(spans_table), [
                    {"span_id": s.span_id, "trace_id": s.trace_id, "conversation_key": keys[s.trace_id],
                     "start_ts": _ts(s.start_time), "payload": s.model_dump_json()}
                    for s in new
                ])
            late_ignored = reopened = 0
            per_key: dict[str, list[SpanRecord]] = defaultdict(list)
            for trace, group in by_trace.items():
                per_key[keys[trace]].extend(group)
            for key, group in per_key.items():
                outcome = self._touch_conversation(conn, key, group, late_turns)
                late_ignored += outcome == "late_ignored"
                reopened += outcome == "reopened"
            self._save_checkpoint(conn, source, checkpoint)
        return StoredSpans(new=len(new), duplicates=len(spans) - len(new), late_ignored=late_ignored,
                           reopened=reopened)

    @staticmethod
    def _existing_spans(conn: Connection, ids: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (trace id, span id) pairs are stored already. Looked up by span id, which is selective and
        portable, then matched on the pair."""
        found: set[tuple[str, str]] = set()
        wanted = set(ids)
        for start in range(0, len(ids), _CHUNK):
            chunk = [span_id for _, span_id in ids[start:start + _CHUNK]]
            rows = conn.execute(select(spans_table.c.trace_id, spans_table.c.span_id)
                                .where(spans_table.c.span_id.in_(chunk)))
            found.update(pair for pair in ((str(r[0]), str(r[1])) for r in rows) if pair in wanted)
        return found

    def _conversation_key(self, conn: Connection, trace_id: str, spans: list[SpanRecord]) -> str:
        """A trace belongs to the conversation its spans name (the assembler's rule), else to its own trace id; the
        first span naming it may arrive in a later batch than the rest of the trace."""
        named = _text(conversation_key(spans))
        conversation_id = named if named != trace_id else None
        row = conn.execute(select(traces_table).where(traces_table.c.trace_id == trace_id)).mappings().first()
        if row is not None and (row["from_conversation_id"] or conversation_id is None):
            return str(row["conversation_key"])
        key = conversation_id or trace_id
        if row is None:
            conn.execute(insert(traces_table).values(trace_id=trace_id, conversation_key=key,
                                                     from_conversation_id=conversation_id is not None))
            return key
        old_key = str(row["conversation_key"])
        old = conn.execute(select(conversations_table).where(conversations_table.c.key == old_key)).mappings().first()
        if old is not None and old["status"] != "pending":
            # Scored already under its trace id: it stays there, and the late-turns policy applies to it.
            return old_key
        # The trace was keyed by its id until a span naming its conversation arrived: move it over.
        conn.execute(update(traces_table).where(traces_table.c.trace_id == trace_id)
                     .values(conversation_key=key, from_conversation_id=True))
        conn.execute(update(spans_table).where(spans_table.c.trace_id == trace_id).values(conversation_key=key))
        if old is not None:
            conn.execute(delete(conversations_table).where(conversations_table.c.key == old_key))
            self._merge_conversation(conn, key, old["first_span_ts"], old["last_span_ts"], old["span_count"])
        return key

    @staticmethod
    def _merge_conversation(conn: Connection, key: str, first: float, last: float, count: int) -> None:
        row = conn.execute(select(conversations_table).where(conversations_table.c.key == key)).mappings().first()
        if row is None:
            conn.execute(insert(conversations_table).values(
                key=key, first_span_ts=first, last_span_ts=last, span_count=count, status="pending", revision=0))
        else:
            conn.execute(update(conversations_table).where(conversations_table.c.key == key).values(
                first_span_ts=min(first, row["first_span_ts"]), last_span_ts=max(last, row["last_span_ts"]),
                span_count=row["span_count"] + count))

    @staticmethod
    def _touch_conversation(conn: Connection, key: str, spans: list[SpanRecord], late_turns: LatePolicy) -> str:
        first = min(_ts(s.start_time) for s in spans)
        last = max(_ts(s.end_time or s.start_time) for s in spans)
        row = conn.execute(select(conversations_table).where(conversations_table.c.key == key)).mappings().first()
        if row is None:
            conn.execute(insert(conversations_table).values(
                key=key, first_span_ts=first, last_span_ts=last, span_count=len(spans), status="pending",
                revision=0))
            return "new"
        values: dict[str, Any] = {
            "first_span_ts": min(first, row["first_span_ts"]),
            "last_span_ts": max(last, row["last_span_ts"]),
            "span_count": row["span_count"] + len(spans),
        }
        outcome = "updated"
        if row["status"] != "pending":
            if late_turns == "ignore" or row["status"] == "pruned":
                # A pruned conversation's earlier spans are gone: re-scoring it would judge a fragment.
                return "late_ignored"
            values.update(status="pending", revision=row["revision"] + 1, scored_ts=None)
            outcome = "reopened"
        conn.execute(update(conversations_table).where(conversations_table.c.key == key).values(**values))
        return outcome

    @staticmethod
    def _save_checkpoint(conn: Connection, source: str, checkpoint: str) -> None:
        now = datetime.now(UTC).timestamp()
        updated = conn.execute(update(checkpoints_table).where(checkpoints_table.c.source == source)
                               .values(checkpoint=checkpoint, updated_ts=now))
        if updated.rowcount == 0:
            conn.execute(insert(checkpoints_table).values(source=source, checkpoint=checkpoint, updated_ts=now))

    # ② conversations -------------------------------------------------------------------------------------------

    def ready_conversations(self, idle_before: datetime, started_before: datetime,
                            limit: int | None = None) -> list[PendingConversation]:
        c = conversations_table.c
        query = (select(c.key, c.revision, c.first_span_ts, c.last_span_ts)
                 .where(c.status == "pending")
                 .where((c.last_span_ts <= _ts(idle_before)) | (c.first_span_ts <= _ts(started_before)))
                 .order_by(c.first_span_ts, c.key)
                 .limit(limit))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return [PendingConversation(r.key, r.revision, _dt(r.first_span_ts), _dt(r.last_span_ts)) for r in rows]

    def spans_of(self, key: str) -> list[SpanRecord]:
        query = (select(spans_table.c.payload).where(spans_table.c.conversation_key == key)
                 .order_by(spans_table.c.start_ts, spans_table.c.span_id))
        with self._tx() as conn:
            return [SpanRecord.model_validate_json(p) for p in conn.execute(query).scalars()]

    def mark_scored(self, key: str, revision: int) -> None:
        with self._tx() as conn:
            conn.execute(update(conversations_table)
                         .where(and_(conversations_table.c.key == key, conversations_table.c.revision == revision))
                         .values(status="scored", scored_ts=datetime.now(UTC).timestamp()))

    # ④⑤ results -------------------------------------------------------------------------------------------------

    def has_result(self, conversation_id: str, rubric: str, rubric_version: str, revision: int) -> bool:
        c = results_table.c
        query = select(func.count()).where(and_(
            c.conversation_id == _text(conversation_id), c.rubric == rubric,
            c.rubric_version == _text(rubric_version), c.revision == revision))
        with self._tx() as conn:
            return bool(conn.execute(query).scalar_one())

    def record(self, result: EvaluationResult) -> bool:
        c = results_table.c
        turn_key = -1 if result.turn_index is None else result.turn_index
        ts = _ts(result.evaluated_at)
        try:
            with self._tx() as conn:
                if result.revision > 0:
                    superseded = and_(c.conversation_id == _text(result.conversation_id), c.rubric == result.rubric,
                                      c.turn_key == turn_key, c.revision < result.revision)
                    old_ids = list(conn.execute(select(c.id).where(superseded)).scalars())
                    conn.execute(update(results_table).where(superseded).values(current=False))
                    if old_ids:
                        conn.execute(update(dimensions_table).where(dimensions_table.c.result_id.in_(old_ids))
                                     .values(current=False))
                inserted = conn.execute(insert(results_table).values(
                    conversation_id=_text(result.conversation_id), rubric=result.rubric,
                    rubric_version=_text(result.rubric_version), turn_key=turn_key, revision=result.revision,
                    current=True, agent=_text(result.agent), outcome=result.outcome, score=result.score,
                    evaluated_ts=ts, payload=result.model_dump_json()))
                primary_key = inserted.inserted_primary_key
                if primary_key is None:
                    raise StoreError("store returned no id for the new result row")
                result_id = primary_key[0]
                dimension_rows = [
                    {"result_id": result_id, "dimension": d.id, "rubric": result.rubric,
                     "rubric_version": _text(result.rubric_version), "agent": _text(result.agent), "score": d.score,
                     "current": True, "evaluated_ts": ts}
                    for d in result.dimension_scores if d.applicable and d.score is not None
                ]
                if dimension_rows and result.outcome != "unscored":
                    conn.execute(insert(dimensions_table), dimension_rows)
        except IntegrityError:
            if self.has_result(result.conversation_id, result.rubric, result.rubric_version, result.revision):
                return False
            raise StoreError(f"result of conversation {result.conversation_id!r} violates a constraint") from None
        return True

    def results(self, conversation_id: str | None = None, current_only: bool = False) -> list[EvaluationResult]:
        query = select(results_table.c.payload).order_by(results_table.c.id)
        if conversation_id is not None:
            query = query.where(results_table.c.conversation_id == _text(conversation_id))
        if current_only:
            query = query.where(results_table.c.current.is_(True))
        with self._tx() as conn:
            return [EvaluationResult.model_validate_json(p) for p in conn.execute(query).scalars()]

    def record_failure(self, key: str, rubric: str, revision: int) -> int:
        f = failures_table.c
        where = and_(f.conversation_key == key, f.rubric == rubric, f.revision == revision)
        with self._tx() as conn:
            attempts = conn.execute(select(f.attempts).where(where)).scalar_one_or_none()
            if attempts is None:
                conn.execute(insert(failures_table).values(conversation_key=key, rubric=rubric, revision=revision,
                                                           attempts=1))
                return 1
            conn.execute(update(failures_table).where(where).values(attempts=attempts + 1))
            return int(attempts) + 1

    # budgets ---------------------------------------------------------------------------------------------------

    def add_usage(self, rubric: str, day: date, tokens: int, usd: float) -> None:
        u = usage_table.c
        where = and_(u.rubric == rubric, u.day == day.isoformat())
        with self._tx() as conn:
            updated = conn.execute(update(usage_table).where(where)
                                   .values(tokens=u.tokens + tokens, usd=u.usd + usd))
            if updated.rowcount == 0:
                conn.execute(insert(usage_table).values(rubric=rubric, day=day.isoformat(), tokens=tokens, usd=usd))

    def usage(self, rubric: str, day: date) -> tuple[int, float]:
        u = usage_table.c
        with self._tx() as conn:
            row = conn.execute(select(u.tokens, u.usd).where(and_(u.rubric == rubric, u.day == day.isoformat()))
                               ).first()
        return (0, 0.0) if row is None else (int(row.tokens), float(row.usd))

    # ⑥ aggregates ----------------------------------------------------------------------------------------------

    def window_aggregates(self, windows: Iterable[tuple[str, float]], now: datetime) -> list[WindowAggregate]:
        r, d = results_table.c, dimensions_table.c
        out: list[WindowAggregate] = []
        with self._tx() as conn:
            for name, seconds in windows:
                since = _ts(now) - seconds
                counts = conn.execute(
                    select(r.rubric, r.rubric_version, r.agent, func.count(),
                           func.sum(case((r.outcome == "pass", 1), else_=0)))
                    .where(and_(r.current.is_(True), r.outcome != "unscored", r.evaluated_ts >= since))
                    .group_by(r.rubric, r.rubric_version, r.agent)
                ).all()
                means: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
                for row in conn.execute(
                    select(d.rubric, d.rubric_version, d.agent, d.dimension, func.avg(d.score))
                    .where(and_(d.current.is_(True), d.evaluated_ts >= since))
                    .group_by(d.rubric, d.rubric_version, d.agent, d.dimension)
                ):
                    means[(row[0], row[1], row[2])][row[3]] = float(row[4])
                out.extend(
                    WindowAggregate(rubric=row[0], agent=row[2], window=name, rubric_version=row[1],
                                    scored=int(row[3]), passed=int(row[4] or 0),
                                    dimension_means=means.get((row[0], row[1], row[2]), {}))
                    for row in counts
                )
        return out

    # housekeeping ----------------------------------------------------------------------------------------------

    def prune(self, scored_before: datetime) -> int:
        c = conversations_table.c
        expired = and_(c.status == "scored", c.scored_ts <= _ts(scored_before))
        with self._tx() as conn:
            removed = conn.execute(delete(spans_table).where(
                spans_table.c.conversation_key.in_(select(c.key).where(expired)))).rowcount or 0
            conn.execute(update(conversations_table).where(expired).values(status="pruned"))
        return removed

    # adaptive rubric items ------------------------------------------------------------------------------------

    def cached_items(self, key: str) -> str | None:
        with self._tx() as conn:
            value = conn.execute(select(items_table.c.payload).where(items_table.c.key == key)).scalar_one_or_none()
        return None if value is None else str(value)

    def cache_items(self, key: str, payload: str) -> None:
        try:
            with self._tx() as conn:
                conn.execute(insert(items_table).values(key=key, payload=payload,
                                                        created_ts=datetime.now(UTC).timestamp()))
        except IntegrityError:
            pass  # generated concurrently by another evaluation: the first one stays

    def ping(self) -> None:
        with self._tx() as conn:
            conn.execute(select(1))

    def close(self) -> None:
        self._engine.dispose()

