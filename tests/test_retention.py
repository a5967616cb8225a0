"""Retention on SQLite and PostgreSQL: every table bounded, old results folded into daily aggregates first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy

from monitor.models import DimensionScore, EvaluationResult, SpanRecord
from monitor.store import SqlStore
from monitor.store.base import RetentionPolicy
from monitor.store.retention import compacted
from tests.helpers import fresh_postgres, require_postgres

DAY0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = fresh_postgres(require_postgres())
    backend = SqlStore(url)
    yield backend
    backend.close()


def rows(store: SqlStore, table: str) -> int:
    engine = sqlalchemy.create_engine(store.url)
    with engine.connect() as conn:
        count = int(conn.execute(sqlalchemy.text(f"SELECT count(*) FROM {table}")).scalar_one())
    engine.dispose()
    return count


def result(conversation: str, outcome: str, score: float | None, dims: tuple[int, ...], revision: int = 0,
           at: datetime = DAY0) -> EvaluationResult:
    return EvaluationResult(
        conversation_id=conversation, agent="agent-a", rubric="r", rubric_version="v1", rubric_kind="weighted",
        judge_model="m", outcome=outcome, score=score, revision=revision, evaluated_at=at,
        dimension_scores=tuple(DimensionScore(id=f"d{i}", score=s, applicable=True, weight=1)
                               for i, s in enumerate(dims)))


def test_every_table_is_bounded_and_old_results_fold_into_daily_aggregates(store: SqlStore) -> None:
    clock = [DAY0]
    store.clock = lambda: clock[0]
    spans = [SpanRecord(trace_id=f"t-{c}", span_id=f"s-{c}", start_time=DAY0 - timedelta(minutes=10),
                        attributes={"gen_ai.conversation.id": c}) for c in ("a", "b", "c", "d")]
    store.add_spans("src", spans, "1", "ignore")
    assert store.record(result("a", "pass", 0.9, (5, 4)))
    assert store.record(result("b", "fail", 0.3, (2, 1)))
    assert store.record(result("c", "pass", 0.8, (4, 4)))
    # c is scored again as revision 1, which supersedes revision 0: only the current verdict is aggregated.
    assert store.record(result("c", "fail", 0.4, (2, 3), revision=1, at=DAY0 + timedelta(hours=1)))
    for key in ("a", "b", "c"):
        store.mark_scored(key, 0)
    store.record_failure("a", "r", 0)  # a is scored: its failure count is settled
    store.record_failure("d", "r", 0)  # d is still pending: kept
    store.cache_items("items-1", "[]")
    store.add_usage("r", DAY0.date(), 100, 0.5)
    policy = RetentionPolicy(results_days=90, conversations_days=90, adaptive_items_days=30, aggregates_days=730)

    assert store.retain(DAY0, policy) == {"judge_failures": 1, "judge_failure_log": 1}
    assert rows(store, "judge_failures") == 1 and rows(store, "judge_failure_log") == 1

    clock[0] = DAY0 + timedelta(days=31)
    store.prune(DAY0 + timedelta(days=1))  # spans of a, b, c (scored at DAY0) go after conversation.retention_days
    assert store.retain(clock[0], policy) == {"adaptive_items": 1}
    assert rows(store, "spans") == 1 and rows(store, "results") == 4

    later = DAY0 + timedelta(days=91)
    removed = store.retain(later, policy)
    assert removed == {"results": 4, "result_dimensions": 8, "conversations": 3, "trace_conversations": 3}
    assert rows(store, "results") == 0 and rows(store, "result_dimensions") == 0
    assert rows(store, "conversations") == 1 and rows(store, "trace_conversations") == 1  # d, still pending
    day = int(DAY0.timestamp() // 86400 * 86400)
    assert [(r["day_ts"], r["outcome"], r["count"], round(r["score_sum"], 6)) for r in compacted(store)] == [
        (day, "fail", 2, 0.7), (day, "pass", 1, 0.9)]
    engine = sqlalchemy.create_engine(store.url)
    with engine.connect() as conn:
        dims = sorted(tuple(r) for r in conn.execute(sqlalchemy.text(
            "SELECT dimension, score, count FROM compacted_dimensions")))
    engine.dispose()
    assert dims == [("d0", 2, 2), ("d0", 5, 1), ("d1", 1, 1), ("d1", 3, 1), ("d1", 4, 1)]
    # the pending conversation is still judged normally
    assert [p.key for p in store.ready_conversations(later, later)] == ["d"]

    assert store.retain(DAY0 + timedelta(days=731), policy) == {
        "compacted_results": 2, "compacted_dimensions": 5, "judge_usage_daily": 1}
    assert store.usage("r", DAY0.date()) == (0, 0.0)
    assert store.usage("r", date(2026, 1, 11)) == (0, 0.0)


def test_compaction_is_batched_and_adds_up_across_cycles(store: SqlStore) -> None:
    for number in range(7):
        assert store.record(result(f"c{number}", "pass", 1.0, (5,)))
    policy = RetentionPolicy(results_days=1, batch=3)
    later = DAY0 + timedelta(days=2)
    assert [store.retain(later, policy).get("results", 0) for _ in range(4)] == [3, 3, 1, 0]
    [row] = compacted(store)
    assert (row["count"], row["score_sum"]) == (7, 7.0)


def test_results_kept_forever_when_results_days_is_none(store: SqlStore) -> None:
    assert store.record(result("a", "pass", 1.0, (5,)))
    assert store.retain(DAY0 + timedelta(days=5000), RetentionPolicy(results_days=None)).get("results") is None
    assert len(store.results()) == 1
