"""Bounded tables: what each one keeps, and for how long (``RetentionPolicy``, from the ``retention`` settings).

| table | kept |
|---|---|
| spans | until ``conversation.retention_days`` after their conversation was scored (``SqlStore.prune``) |
| conversations, trace_conversations | pruned conversations, until ``conversations_days`` after they were scored |
| judge_failures, judge_failure_log | while their conversation (at that revision) is pending |
| writeback_outbox | until written back, or until its result is compacted |
| adaptive_items | ``adaptive_items_days`` after they were generated |
| results, result_dimensions | ``results_days``; older ones are folded into the daily aggregates first |
| compacted_results, compacted_dimensions, quality rollups, judge_usage_daily | ``aggregates_days`` |

One replica at a time applies it (a PostgreSQL advisory lock): folding the same results twice would count them
twice. Each step removes at most ``batch`` rows per cycle; the next cycle continues.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, and_, delete, exists, insert, select, update

import monitor.store.tables as tables
from monitor.store.base import RetentionPolicy
from monitor.store.tables import (
    compacted_dimensions_table,
    compacted_results_table,
    conversations_table,
    dimensions_table,
    failure_log_table,
    failures_table,
    results_table,
    trace_transcripts_table,
    traces_table,
)


class Database(Protocol):
    """What retention needs of the store: one replica at a time, and transactions."""

    def singleton_lock(self, name: str) -> AbstractContextManager[bool]: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

DAY = 86_400


def apply(store: Database, now: datetime, policy: RetentionPolicy) -> dict[str, int]:
    """Rows removed per table (tables with nothing removed are left out)."""
    removed: dict[str, int] = {}

    def count(table: str, rows: int) -> None:
        if rows:
            removed[table] = removed.get(table, 0) + rows

    with store.singleton_lock("retention") as mine:
        if not mine:
            return removed
        ts = now.timestamp()
        with store.transaction() as conn:
            for name, rows in _settled_failures(conn).items():
                count(name, rows)
            outbox = tables.outbox_table
            count("writeback_outbox", conn.execute(delete(outbox).where(
                ~exists().where(tables.results_table.c.id == outbox.c.result_id))).rowcount or 0)
            count("adaptive_items", conn.execute(delete(tables.items_table).where(
                tables.items_table.c.created_ts < ts - policy.adaptive_items_days * DAY)).rowcount or 0)
        with store.transaction() as conn:
            traces, conversations = _forget_conversations(conn, ts - policy.conversations_days * DAY, policy.batch)
            count("trace_conversations", traces)
            count("conversations", conversations)
        if policy.results_days is not None:
            with store.transaction() as conn:
                results, dimensions = _compact_results(conn, ts - policy.results_days * DAY, policy.batch)
                count("results", results)
                count("result_dimensions", dimensions)
        if policy.aggregates_days is not None:
            cutoff = ts - policy.aggregates_days * DAY
            with store.transaction() as conn:
                for compacted_table in (tables.compacted_results_table, tables.compacted_dimensions_table):
                    count(compacted_table.name, conn.execute(delete(compacted_table).where(
                        compacted_table.c.day_ts < cutoff)).rowcount or 0)
                oldest_day = datetime.fromtimestamp(max(cutoff, 0), UTC).date().isoformat()
                count("judge_usage_daily", conn.execute(delete(tables.usage_table).where(
                    tables.usage_table.c.day < oldest_day)).rowcount or 0)
    return removed


def _settled_failures(conn: Connection) -> dict[str, int]:
    """Failure counts matter only while their evaluation may still be tried: drop those of conversations that
    are no longer pending at that revision (scored, pruned, forgotten, or reopened as a newer revision)."""

    removed: dict[str, int] = {}
    for table in (failures_table, failure_log_table):
        c, f = conversations_table.c, table.c
        still_pending = exists().where(and_(c.key == f.conversation_key, c.revision == f.revision,
                                            c.status == "pending"))
        removed[table.name] = conn.execute(delete(table).where(~still_pending)).rowcount or 0
    return removed


def _forget_conversations(conn: Connection, scored_before: float, batch: int) -> tuple[int, int]:

    c = conversations_table.c
    keys = list(conn.execute(select(c.key).where(and_(c.status == "pruned", c.scored_ts < scored_before))
                             .limit(batch)).scalars())
    if not keys:
        return 0, 0
    traces = conn.execute(delete(traces_table).where(traces_table.c.conversation_key.in_(keys))).rowcount or 0
    conn.execute(delete(trace_transcripts_table).where(trace_transcripts_table.c.conversation_key.in_(keys)))
    conversations = conn.execute(delete(conversations_table).where(c.key.in_(keys))).rowcount or 0
    return traces, conversations


def _compact_results(conn: Connection, evaluated_before: float, batch: int) -> tuple[int, int]:
    """Fold the oldest results (current ones: superseded verdicts count nowhere) into the daily aggregates, then
    delete them with their dimension scores, in one transaction."""

    r, d = results_table.c, dimensions_table.c
    rows = conn.execute(select(r.id, r.rubric, r.rubric_version, r.agent, r.outcome, r.score, r.evaluated_ts,
                               r.current).where(r.evaluated_ts < evaluated_before).order_by(r.id)
                        .limit(batch)).all()
    if not rows:
        return 0, 0
    ids = [row.id for row in rows]
    outcomes: dict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0, 0.0])
    for row in rows:
        if row.current:
            key = (_day(row.evaluated_ts), row.rubric, row.rubric_version, row.agent, row.outcome)
            outcomes[key][0] += 1
            outcomes[key][1] += row.score or 0.0
    scores: dict[tuple[Any, ...], int] = defaultdict(int)
    removed_dimensions = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for dim in conn.execute(select(d.rubric, d.rubric_version, d.agent, d.dimension, d.score, d.evaluated_ts)
                                .where(and_(d.result_id.in_(chunk), d.current.is_(True)))):
            scores[(_day(dim.evaluated_ts), dim.rubric, dim.rubric_version, dim.agent, dim.dimension,
                    dim.score)] += 1
        removed_dimensions += conn.execute(delete(dimensions_table).where(d.result_id.in_(chunk))).rowcount or 0
        conn.execute(delete(results_table).where(r.id.in_(chunk)))
    cr = compacted_results_table.c
    for (day, rubric, version, agent, outcome), (number, total) in outcomes.items():
        where = and_(cr.day_ts == day, cr.rubric == rubric, cr.rubric_version == version, cr.agent == agent,
                     cr.outcome == outcome)
        if not conn.execute(update(compacted_results_table).where(where).values(
                count=cr.count + int(number), score_sum=cr.score_sum + total)).rowcount:
            conn.execute(insert(compacted_results_table).values(day_ts=day, rubric=rubric, rubric_version=version,
                                                                agent=agent, outcome=outcome, count=int(number),
                                                                score_sum=total))
    cd = compacted_dimensions_table.c
    for (day, rubric, version, agent, dimension, score), number in scores.items():
        where = and_(cd.day_ts == day, cd.rubric == rubric, cd.rubric_version == version, cd.agent == agent,
                     cd.dimension == dimension, cd.score == score)
        if not conn.execute(update(compacted_dimensions_table).where(where).values(
                count=cd.count + number)).rowcount:
            conn.execute(insert(compacted_dimensions_table).values(
                day_ts=day, rubric=rubric, rubric_version=version, agent=agent, dimension=dimension, score=score,
                count=number))
    return len(ids), removed_dimensions


def _day(ts: float) -> int:
    return int(ts // DAY) * DAY


def compacted(store: Database, since: datetime | None = None) -> list[dict[str, Any]]:
    """The daily aggregates of compacted results, oldest first: ``{day, rubric, rubric_version, agent, outcome,
    count, score_sum}``."""
    cr = compacted_results_table.c
    query = select(compacted_results_table).order_by(cr.day_ts, cr.rubric, cr.rubric_version, cr.agent, cr.outcome)
    if since is not None:
        query = query.where(cr.day_ts >= _day(since.timestamp()))
    with store.transaction() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]
