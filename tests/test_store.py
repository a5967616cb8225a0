"""One contract suite over every store backend: SQLite file, in-memory, and PostgreSQL when CI provides one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from monitor.metrics.rollups import WindowTotals, parse_window
from monitor.models import DimensionScore, EvaluationResult, SpanRecord
from monitor.store import InMemoryStore, SqlStore
from monitor.store.base import RollupKey, RollupSums, bucket_of
from tests.helpers import fresh_postgres, require_postgres

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite_file", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    backend = _open(request.param, tmp_path)
    yield backend
    backend.close()


@pytest.fixture(params=["sqlite_file", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """A store a second replica can open too (an in-memory one lives in one process)."""
    backend = _open(request.param, tmp_path)
    yield backend
    backend.close()


def _open(kind: str, tmp_path: Path) -> SqlStore:
    if kind == "sqlite_file":
        backend: SqlStore = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    elif kind == "memory":
        backend = InMemoryStore()
    else:
        backend = SqlStore(fresh_postgres(require_postgres()))
    return backend


def span(span_id: str, trace: str = "t1", at: float = 0, conversation: str | None = None) -> SpanRecord:
    attributes = {"gen_ai.conversation.id": conversation} if conversation else {}
    return SpanRecord(trace_id=trace, span_id=span_id, start_time=T0 + timedelta(seconds=at), attributes=attributes)


def result(conversation: str = "c1", outcome: str = "pass", revision: int = 0, version: str = "v1",
           score: float = 0.9, dims: tuple[int, ...] = (4,), at: datetime | None = None) -> EvaluationResult:
    return EvaluationResult(
        conversation_id=conversation, agent="agent-a", rubric="r", rubric_version=version, rubric_kind="weighted",
        judge_model="m", outcome=outcome, score=None if outcome == "unscored" else score, revision=revision,
        dimension_scores=tuple(DimensionScore(id=f"d{i}", score=s, applicable=True, weight=1)
                               for i, s in enumerate(dims)),
        evaluated_at=at or datetime.now(UTC),
    )


def test_spans_and_checkpoint_are_stored_together_and_deduplicated(store: SqlStore) -> None:
    assert store.checkpoint("src") is None
    first = store.add_spans("src", [span("a"), span("b", at=1)], "cp-1", "ignore")
    again = store.add_spans("src", [span("b", at=1), span("c", at=2)], "cp-2", "ignore")
    assert (first.new, first.duplicates) == (2, 0)
    assert (again.new, again.duplicates) == (1, 1)
    assert store.checkpoint("src") == "cp-2"
    assert [s.span_id for s in store.spans_of("t1")] == ["a", "b", "c"]


def test_a_trace_moves_to_its_conversation_id_when_a_span_names_it(store: SqlStore) -> None:
    store.add_spans("src", [span("a", trace="t1")], "1", "ignore")
    store.add_spans("src", [span("b", trace="t1", at=5, conversation="conv-9"), span("c", trace="t2",
                                                                                    conversation="conv-9")],
                    "2", "ignore")
    ready = store.ready_conversations(T0 + timedelta(hours=1), T0)
    assert [p.key for p in ready] == ["conv-9"]
    assert sorted(s.span_id for s in store.spans_of("conv-9")) == ["a", "b", "c"]


def _text(role: str, text: str) -> dict[str, object]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def chat(span_id: str, trace: str, at: float, history: list[dict[str, object]], reply: str,
         conversation: str | None = None) -> SpanRecord:
    """A model call of a session whose spans name no conversation (several producers' default): its input is
    the history so far."""
    attributes: dict[str, object] = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(history),
                                     "gen_ai.output.messages": json.dumps([_text("assistant", reply)])}
    if conversation:
        attributes["gen_ai.conversation.id"] = conversation
    return SpanRecord(trace_id=trace, span_id=span_id, start_time=T0 + timedelta(seconds=at), attributes=attributes)


def session(prefix: str, turns: int, first: str = "Book a table", conversation: str | None = None) -> list[SpanRecord]:
    """One trace per turn, each turn's input the whole history: the later traces extend the earlier ones."""
    history: list[dict[str, object]] = []
    spans = []
    for turn in range(turns):
        history.append(_text("user", f"{first} ({turn})"))
        reply = f"{prefix} reply {turn}"
        spans.append(chat(f"{prefix}{turn}", f"{prefix}-trace-{turn}", turn * 10, list(history), reply,
                          conversation if turn == 0 else None))
        history.append(_text("assistant", reply))
    return spans


def ready_keys(store: SqlStore) -> dict[str, list[str]]:
    far = T0 + timedelta(days=1)
    return {p.key: sorted(s.trace_id for s in store.spans_of(p.key)) for p in store.ready_conversations(far, far)}


@pytest.mark.parametrize("batches", ["one batch", "a batch a trace", "newest first"])
def test_traces_of_a_session_without_an_id_join_one_conversation(store: SqlStore, batches: str) -> None:
    spans = session("a", 3) + session("b", 2, first="Cancel my booking")
    if batches == "one batch":
        store.add_spans("src", spans, "1", "ignore")
    else:
        for number, one in enumerate(reversed(spans) if batches == "newest first" else spans):
            store.add_spans("src", [one], str(number), "ignore")
    conversations = sorted(ready_keys(store).values())
    if batches == "newest first":
        # A trace joins only a transcript stored before it: turns stored newest first stay apart (a known limit;
        # exporters send a session's traces in the order they end).
        assert len(conversations) == 5
        return
    assert conversations == [["a-trace-0", "a-trace-1", "a-trace-2"], ["b-trace-0", "b-trace-1"]]


def test_a_trace_without_an_id_joins_the_conversation_a_named_trace_began(store: SqlStore) -> None:
    store.add_spans("src", session("a", 3, conversation="conv-7"), "1", "ignore")
    assert ready_keys(store) == {"conv-7": ["a-trace-0", "a-trace-1", "a-trace-2"]}


def test_a_trace_whose_content_arrives_late_joins_its_session(store: SqlStore) -> None:
    first, second = session("a", 2)
    # The second turn's trace is stored first without content (its agent span), then its model call.
    store.add_spans("src", [first], "1", "ignore")
    store.add_spans("src", [SpanRecord(trace_id=second.trace_id, span_id="root", start_time=second.start_time)],
                    "2", "ignore")
    assert sorted(ready_keys(store)) == ["a-trace-0", "a-trace-1"]
    store.add_spans("src", [second], "3", "ignore")
    assert ready_keys(store) == {"a-trace-0": ["a-trace-0", "a-trace-1", "a-trace-1"]}


def test_a_trace_extending_two_stored_transcripts_joins_the_first_key_in_order(store: SqlStore) -> None:
    # Two sessions began alike (the same first turn); a later turn extends both: every replica picks the same one.
    store.add_spans("src", [chat("x", "trace-x", 0, [_text("user", "Hi")], "Hello", conversation="conv-b"),
                            chat("y", "trace-y", 1, [_text("user", "Hi")], "Hello", conversation="conv-a")],
                    "1", "ignore")
    later = chat("z", "trace-z", 5, [_text("user", "Hi"), _text("assistant", "Hello"), _text("user", "More")], "Ok")
    store.add_spans("src", [later], "2", "ignore")
    assert ready_keys(store) == {"conv-a": ["trace-y", "trace-z"], "conv-b": ["trace-x"]}


def test_ready_means_idle_or_old(store: SqlStore) -> None:
    store.add_spans("src", [span("a", trace="old"), span("b", trace="busy", at=600)], "1", "ignore")
    idle_before = T0 + timedelta(seconds=300)
    assert [p.key for p in store.ready_conversations(idle_before, T0 - timedelta(days=1))] == ["old"]
    assert {p.key for p in store.ready_conversations(idle_before, T0 + timedelta(seconds=601))} == {"old", "busy"}


def test_a_result_is_recorded_exactly_once(store: SqlStore) -> None:
    assert store.record(result()) is True
    assert store.record(result()) is False
    assert store.has_result("c1", "r", "v1", 0)
    assert not store.has_result("c1", "r", "v2", 0)
    assert len(store.results("c1")) == 1


def test_scored_conversation_ignores_or_reopens_on_late_turns(store: SqlStore) -> None:
    store.add_spans("src", [span("a")], "1", "ignore")
    store.mark_scored("t1", 0)
    ignored = store.add_spans("src", [span("b", at=9)], "2", "ignore")
    assert ignored.late_ignored == 1 and store.ready_conversations(T0 + timedelta(days=1), T0) == []
    reopened = store.add_spans("src", [span("c", at=10)], "3", "rescore")
    assert reopened.reopened == 1
    [pending] = store.ready_conversations(T0 + timedelta(days=1), T0)
    assert pending.revision == 1


def windows_now(store: SqlStore, *names: str) -> dict[str, dict[RollupKey, RollupSums]]:
    totals = WindowTotals([parse_window(name) for name in names])
    totals.refresh(store, datetime.now(UTC).timestamp())
    return {window.name: dict(totals.sums(window)) for window in totals.windows}


def test_a_new_revision_supersedes_the_old_one_in_rollups(store: SqlStore) -> None:
    store.record(result(outcome="fail", score=0.3, dims=(1,), at=datetime.now(UTC) - timedelta(hours=3)))
    store.record(result(outcome="pass", score=0.9, dims=(5,), revision=1))
    assert len(store.results("c1")) == 2
    [current] = store.results("c1", current_only=True)
    assert current.revision == 1
    window = windows_now(store, "24h")["24h"]
    assert window[("r", "v1", "agent-a", "")] == (1, 1, 0, 0.9)
    assert window[("r", "v1", "agent-a", "d0")] == (1, 0, 0, 5.0)


def test_windows_leave_out_unscored_and_old_results(store: SqlStore) -> None:
    now = datetime.now(UTC)
    store.record(result("c1", "pass", dims=(4, 2)))
    store.record(result("c2", "fail", score=0.2, dims=(2, 2)))
    store.record(result("c3", "unscored", dims=()))
    store.record(result("c4", "pass", dims=(5, 5), at=now - timedelta(hours=2)))
    by_window = windows_now(store, "1h", "24h")
    overall, d0, d1 = (("r", "v1", "agent-a", d) for d in ("", "d0", "d1"))
    assert by_window["1h"][overall][:3] == (2, 1, 1) and by_window["1h"][d0] == (2, 0, 0, 6.0)
    assert by_window["1h"][d1] == (2, 0, 0, 4.0)
    assert by_window["24h"][overall][:3] == (3, 2, 1) and by_window["24h"][d0] == (3, 0, 0, 11.0)


def test_rebuilt_rollups_equal_the_ones_kept_while_recording(store: SqlStore) -> None:
    now = datetime.now(UTC)
    for i in range(12):
        at = now - timedelta(hours=i % 5, minutes=i)
        store.record(result(f"c{i}", ("pass", "fail", "unscored")[i % 3], score=i / 12, dims=(1 + i % 5, 3), at=at))
    store.record(result("c0", "fail", score=0.1, dims=(2,), revision=1))  # supersedes c0's first verdict
    store.record(result("c1", "pass", score=0.8, dims=(5, 5), revision=2, version="v2"))
    first, last = bucket_of(now.timestamp()) - 10 * 3600, bucket_of(now.timestamp())
    kept = store.rollup_sums(first, last)
    assert store.rebuild_rollups() > 0
    rebuilt = store.rollup_sums(first, last)
    nonzero = {k: v for k, v in kept.items() if v[0] or v[2]}
    assert rebuilt.keys() == nonzero.keys()
    for key, sums in rebuilt.items():
        assert sums[:3] == nonzero[key][:3] and sums[3] == pytest.approx(nonzero[key][3]), key


def test_usage_accumulates_per_rubric_and_day(store: SqlStore) -> None:
    day = date(2026, 11, 1)
    store.add_usage("r", day, 100, 0.5)
    store.add_usage("r", day, 50, 0.25)
    assert store.usage("r", day) == (150, 0.75)
    assert store.usage("r", date(2026, 11, 2)) == (0, 0.0)


def test_failures_are_counted_per_evaluation(store: SqlStore) -> None:
    assert [store.record_failure("k", "r", 0) for _ in range(3)] == [1, 2, 3]
    assert store.record_failure("k", "r", 1) == 1


def test_prune_deletes_spans_of_scored_conversations_only(store: SqlStore) -> None:
    store.add_spans("src", [span("a", trace="done"), span("b", trace="open")], "1", "ignore")
    store.mark_scored("done", 0)
    assert store.prune(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert store.spans_of("done") == [] and len(store.spans_of("open")) == 1


def test_span_ids_are_unique_only_within_their_trace(store: SqlStore) -> None:
    stored = store.add_spans("src", [span("a", trace="t1"), span("a", trace="t2")], "1", "ignore")
    assert (stored.new, stored.duplicates) == (2, 0)
    assert len(store.spans_of("t1")) == 1 and len(store.spans_of("t2")) == 1


def test_a_scored_trace_stays_where_it_was_scored(store: SqlStore) -> None:
    store.add_spans("src", [span("a", trace="t1")], "1", "ignore")
    store.mark_scored("t1", 0)
    # the root span naming the conversation is often exported last
    late = store.add_spans("src", [span("root", trace="t1", at=1, conversation="conv-1")], "2", "ignore")
    assert late.late_ignored == 1
    assert store.ready_conversations(T0 + timedelta(days=1), T0) == []


def test_ready_conversations_are_paged_oldest_first(store: SqlStore) -> None:
    store.add_spans("src", [span(f"s{i}", trace=f"t{i}", at=i) for i in range(5)], "1", "ignore")
    assert [p.key for p in store.ready_conversations(T0 + timedelta(days=1), T0, limit=2)] == ["t0", "t1"]


def test_late_spans_of_a_pruned_conversation_do_not_reopen_it(store: SqlStore) -> None:
    store.add_spans("src", [span("a", trace="t1")], "1", "rescore")
    store.mark_scored("t1", 0)
    store.prune(datetime.now(UTC) + timedelta(seconds=1))
    assert store.add_spans("src", [span("a", trace="t1")], "2", "rescore").late_ignored == 1
    assert store.ready_conversations(T0 + timedelta(days=1), T0) == []


def test_long_identifiers_fit_every_backend(store: SqlStore) -> None:
    long_id = "conv-" + "x" * 600
    store.add_spans("src", [span("a", trace="t" * 40, conversation=long_id)], "1", "ignore")
    assert [p.key for p in store.ready_conversations(T0 + timedelta(days=1), T0)] == [long_id]
    result = EvaluationResult(conversation_id=long_id, agent="agent-" + "y" * 400, rubric="r",
                              rubric_version="v" * 100, rubric_kind="weighted", judge_model="m", outcome="pass",
                              score=1.0)
    assert store.record(result) and not store.record(result)


def test_nul_characters_in_ids_are_stored_on_every_backend(store: SqlStore) -> None:
    store.add_spans("src", [span("a\x00b", trace="t\x001", conversation="conv\x00x")], "1", "ignore")
    [pending] = store.ready_conversations(T0 + timedelta(days=1), T0)
    assert pending.key == "conv\ufffdx" and len(store.spans_of(pending.key)) == 1
    result = EvaluationResult(conversation_id=pending.key, agent="a\x00gent", rubric="r", rubric_version="1",
                              rubric_kind="weighted", judge_model="m", outcome="pass", score=1.0)
    assert store.record(result) and store.has_result(pending.key, "r", "1", 0)


def test_a_result_lands_in_its_hours_rollups_once_with_its_dimensions_and_outbox_entry(store: SqlStore) -> None:
    # PostgreSQL writes the result, its dimension rows, its outbox entry and its rollups in one statement; SQLite
    # in one statement per table. Either way: all of it once, or (a duplicate) none of it.
    now = datetime.now(UTC).replace(minute=30)
    earlier = now - timedelta(hours=3)
    ten = (5, 4, 3, 2, 1, 5, 4, 3, 2, 1)
    store.outbox_enabled = True
    assert store.record(result("c1", "pass", score=0.6, dims=ten, at=now))
    assert store.record(result("c2", "fail", score=0.2, dims=(1,) * 10, at=earlier))
    assert store.record(result("c3", "unscored", dims=(), at=now))
    assert not store.record(result("c1", "pass", score=0.6, dims=ten, at=now))  # the same verdict again
    store.outbox_enabled = False
    assert store.record(result("c4", "pass", score=0.8, dims=ten, at=now))

    hour, past = bucket_of(now.timestamp()), bucket_of(earlier.timestamp())
    this_hour, that_hour = store.rollup_sums(hour, hour), store.rollup_sums(past, past)
    assert this_hour[("r", "v1", "agent-a", "")] == (2, 2, 1, pytest.approx(1.4))
    assert that_hour[("r", "v1", "agent-a", "")] == (1, 0, 0, pytest.approx(0.2))
    for i, score in enumerate(ten):
        assert this_hour[("r", "v1", "agent-a", f"d{i}")] == (2, 0, 0, 2.0 * score)
        assert that_hour[("r", "v1", "agent-a", f"d{i}")] == (1, 0, 0, 1.0)
    assert len(this_hour) == len(that_hour) == 11
    assert sorted(r.conversation_id for _, r in store.outbox_batch(10)) == ["c1", "c2", "c3"]
    # The dimension rows are there once each: rollups rebuilt from them equal the ones kept while recording.
    kept = store.rollup_sums(past, hour)
    store.rebuild_rollups()
    assert store.rollup_sums(past, hour) == kept


def test_replicas_recording_into_the_same_rollup_rows_at_once_lose_no_count(shared_store: SqlStore) -> None:
    store = shared_store
    replica = SqlStore(store.url)
    now = datetime.now(UTC)
    dims = (3,) * 10

    def record_many(on: SqlStore, prefix: str) -> None:
        for i in range(40):
            assert on.record(result(f"{prefix}{i}", "pass", score=0.5, dims=dims, at=now))

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(record_many, store, "a"), pool.submit(record_many, replica, "b")]:
            future.result()
    replica.close()
    hour = bucket_of(now.timestamp())
    sums = store.rollup_sums(hour, hour)
    assert sums[("r", "v1", "agent-a", "")] == (80, 80, 0, pytest.approx(40.0))
    assert all(sums[("r", "v1", "agent-a", f"d{i}")] == (80, 0, 0, 240.0) for i in range(10))
