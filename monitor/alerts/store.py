"""What regression alerts read from and keep in the result store.

Reads are aggregates (counts per configuration and segment, computed by the database), so a cycle costs the same
for a quiet agent and a busy one. Writes (lifecycle state, events, the notification outbox) happen in one
transaction per cycle: a restart finds either all of a transition or none of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from monitor.alerts.detector import Counts, JudgeConfig, SeriesCounts, without_cyclic_gc
from monitor.store.sql import (
    SqlStore,
    alert_events_table,
    alert_states_table,
    dimensions_table,
    notification_outbox_table,
    results_table,
)


@dataclass(frozen=True)
class Example:
    """A failing conversation shown in an alert."""

    conversation_id: str
    trace_ids: tuple[str, ...]
    evaluated_at: datetime
    score: float | None
    reason: str

    @property
    def operation_id(self) -> str:
        """Application Insights' ``operation_Id`` is the W3C trace id."""
        return self.trace_ids[0] if self.trace_ids else ""


@dataclass(frozen=True)
class NewEvent:
    key: str
    """Unique: an event with a key already stored is not stored (nor notified) again."""
    kind: str
    payload: dict[str, Any]
    notifiers: tuple[str, ...]
    silenced: tuple[str, ...] = ()
    """Notifiers that would have received it but a silence matched: recorded as silenced, never sent."""


@dataclass(frozen=True)
class OutboxItem:
    id: int
    notifier: str
    attempts: int
    event: dict[str, Any]


class AlertStore:
    def __init__(self, store: SqlStore) -> None:
        self._store = store

    # reads -------------------------------------------------------------------------------------------------------

    def drifting_rubrics(self) -> set[str]:
        return self._store.drifting_rubrics()

    def window_counts(self, windows: Sequence[tuple[str, float]], baseline_seconds: float, now: datetime
                      ) -> list[tuple[str, list[SeriesCounts]]]:
        """Per window (name, seconds) and per (rubric, agent, configuration, agent version) with results in it:
        the counts of current (not superseded) results inside the window (``current``) and in the baseline period
        before it.

        One query over results and one over dimension scores, for every window at once: each window's two sides
        are columns (and a dimension's five scores too), so a cycle at 100 rubrics x 20 agents x 10 dimensions
        reads ~20,000 rows instead of ~400,000 (a row per window, side, dimension and score)."""
        with without_cyclic_gc():
            return self._window_counts(windows, baseline_seconds, now)

    def _window_counts(self, windows: Sequence[tuple[str, float]], baseline_seconds: float, now: datetime
                       ) -> list[tuple[str, list[SeriesCounts]]]:
        r, d = results_table.c, dimensions_table.c
        until = now.timestamp()
        sides = []  # per window: the condition of its current side, then of its baseline side
        earliest = until
        for _, seconds in windows:
            start = until - seconds
            since = start - baseline_seconds
            sides += [r.evaluated_ts >= start, and_(r.evaluated_ts >= since, r.evaluated_ts < start)]
            earliest = min(earliest, since)
        config = (r.rubric, r.agent, r.rubric_version, func.coalesce(r.judge_model, ""),
                  func.coalesce(r.prompt_version, ""), r.agent_version)
        judge_error = and_(r.outcome == "unscored", r.unscored_reason.like("judge_error%"))
        where = and_(r.current.is_(True), r.evaluated_ts >= earliest, r.evaluated_ts <= until)

        def count(*conditions: Any) -> Any:
            return func.sum(case((and_(*conditions), 1), else_=0))

        per_side = [(count(side, r.outcome == "pass"), count(side, r.outcome == "fail"),
                     count(side, r.outcome == "unscored"), count(side, judge_error),
                     func.min(case((side, r.evaluated_ts))), func.max(case((side, r.evaluated_ts))))
                    for side in sides]
        scores = [count(side, d.score == score) for side in sides for score in range(1, 6)]
        found: dict[tuple[Any, ...], list[Counts | None]] = {}
        """Per configuration: the Counts of each side of each window that holds any of its results."""
        with self._store.transaction() as conn:
            totals = conn.execute(select(*config, *(c for side in per_side for c in side))
                                  .where(where).group_by(*config)).all()
            by_dimension = conn.execute(
                select(*config, d.dimension, *scores)
                .select_from(dimensions_table.join(results_table, d.result_id == r.id))
                .where(and_(where, d.current.is_(True)))
                .group_by(*config, d.dimension)
            ).all()
        for row in totals:
            slots: list[Counts | None] = []
            for offset in range(6, 6 + 6 * len(sides), 6):
                passed, failed, unscored, judge_errors, first, last = row[offset:offset + 6]
                if first is None:
                    slots.append(None)  # none of its results on this side
                    continue
                slots.append(Counts(passed=int(passed), failed=int(failed), unscored=int(unscored),
                                    judge_errors=int(judge_errors), first_ts=float(first), last_ts=float(last)))
            found[tuple(row[:6])] = slots
        ends = [(index, 7 + 5 * index, 12 + 5 * index) for index in range(len(sides))]
        for row in by_dimension:
            held = found.get(tuple(row[:6]))
            if held is None:
                continue
            dimension = str(row[6])
            for index, first_score, end in ends:
                counts = held[index]
                if counts is not None:
                    by_score = row[first_score:end]  # integers already: sums of integers
                    if any(by_score):
                        counts.dimensions[dimension] = list(by_score)
        out: list[tuple[str, list[SeriesCounts]]] = []
        for index, (name, _) in enumerate(windows):
            series = []
            for k, slots in found.items():
                current, baseline = slots[2 * index], slots[2 * index + 1]
                if current is None and baseline is None:
                    continue  # no result in this window or its baseline: not a series of this window
                series.append(SeriesCounts(
                    rubric=str(k[0]), agent=str(k[1]), config=JudgeConfig(str(k[2]), str(k[3]), str(k[4])),
                    agent_version=None if k[5] is None else str(k[5]), current=current or Counts(),
                    baseline=baseline or Counts()))
            out.append((name, series))
        return out

    def examples(self, rubric: str, agent: str, config: JudgeConfig | None, since: float, limit: int = 5
                 ) -> list[Example]:
        """The most recent failing conversations of a series in the window, newest first."""
        from monitor.models import EvaluationResult

        r = results_table.c
        query = (select(r.payload).where(and_(r.current.is_(True), r.rubric == rubric, r.agent == agent,
                                              r.outcome == "fail", r.evaluated_ts >= since))
                 .order_by(r.evaluated_ts.desc(), r.id.desc()).limit(limit))
        if config is not None:
            query = query.where(and_(r.rubric_version == config.rubric_version,
                                     func.coalesce(r.judge_model, "") == config.judge_model,
                                     func.coalesce(r.prompt_version, "") == config.prompt_version))
        with self._store.transaction() as conn:
            payloads = list(conn.execute(query).scalars())
        out = []
        for payload in payloads:
            result = EvaluationResult.model_validate_json(payload)
            out.append(Example(result.conversation_id, result.trace_ids, result.evaluated_at, result.score,
                               result.reason))
        return out

    # lifecycle state ---------------------------------------------------------------------------------------------

    def load_states(self) -> dict[str, dict[str, Any]]:
        with self._store.transaction() as conn:
            rows = conn.execute(select(alert_states_table.c.key, alert_states_table.c.payload)).all()
        return {str(k): json.loads(p) for k, p in rows}

    def known_events(self, keys: Sequence[str]) -> set[str]:
        e = alert_events_table.c
        found: set[str] = set()
        with self._store.transaction() as conn:
            for start in range(0, len(keys), 500):
                found.update(conn.execute(select(e.key).where(e.key.in_(keys[start:start + 500]))).scalars())
        return found

    def commit(self, states: dict[str, dict[str, Any]], events: Sequence[NewEvent]) -> list[int]:
        """Save changed states and new events with their outbox rows, atomically; returns the new outbox ids.
        An event whose key is stored already is skipped (it was emitted before a restart)."""
        now = datetime.now(UTC).timestamp()
        s, e = alert_states_table.c, alert_events_table.c
        outbox: list[int] = []
        with self._store.transaction() as conn:
            for key, state in states.items():
                payload = json.dumps(state, sort_keys=True)
                if conn.execute(update(alert_states_table).where(s.key == key)
                                .values(payload=payload, updated_ts=now)).rowcount == 0:
                    conn.execute(insert(alert_states_table).values(key=key, payload=payload, updated_ts=now))
            for event in events:
                if conn.execute(select(func.count()).where(e.key == event.key)).scalar_one():
                    continue
                inserted = conn.execute(insert(alert_events_table).values(
                    key=event.key, kind=event.kind, ts=now, payload=json.dumps(event.payload, sort_keys=True)))
                assert inserted.inserted_primary_key is not None
                event_id = int(inserted.inserted_primary_key[0])
                for notifier in event.notifiers:
                    row = conn.execute(insert(notification_outbox_table).values(
                        event_id=event_id, notifier=notifier, status="pending", attempts=0, updated_ts=now))
                    assert row.inserted_primary_key is not None
                    outbox.append(int(row.inserted_primary_key[0]))
                for notifier in event.silenced:
                    conn.execute(insert(notification_outbox_table).values(
                        event_id=event_id, notifier=notifier, status="silenced", attempts=0, updated_ts=now))
        return outbox

    def add_event(self, event: NewEvent) -> list[int]:
        try:
            return self.commit({}, [event])
        except IntegrityError:
            return []

    def events(self, since: float, kinds: Sequence[str] | None = None) -> list[tuple[datetime, str, dict[str, Any]]]:
        e = alert_events_table.c
        query = select(e.ts, e.kind, e.payload).where(e.ts >= since).order_by(e.id)
        if kinds:
            query = query.where(e.kind.in_(list(kinds)))
        with self._store.transaction() as conn:
            rows = conn.execute(query).all()
        return [(datetime.fromtimestamp(float(ts), UTC), str(kind), json.loads(p)) for ts, kind, p in rows]

    # outbox --------------------------------------------------------------------------------------------------------

    def outbox(self, ids: Sequence[int] | None = None) -> list[OutboxItem]:
        """Pending deliveries (all of them, or those of ``ids``), oldest first."""
        o, e = notification_outbox_table.c, alert_events_table.c
        query = (select(o.id, o.notifier, o.attempts, e.kind, e.payload, e.id)
                 .select_from(notification_outbox_table.join(alert_events_table, o.event_id == e.id))
                 .where(o.status == "pending").order_by(o.id))
        if ids is not None:
            query = query.where(o.id.in_(list(ids)))
        with self._store.transaction() as conn:
            rows = conn.execute(query).all()
        return [OutboxItem(int(i), str(n), int(a), {**json.loads(p), "kind": str(k), "id": int(event_id)})
                for i, n, a, k, p, event_id in rows]

    def mark(self, outbox_id: int, status: str, attempts: int) -> None:
        o = notification_outbox_table.c
        with self._store.transaction() as conn:
            conn.execute(update(notification_outbox_table).where(o.id == outbox_id).values(
                status=status, attempts=attempts, updated_ts=datetime.now(UTC).timestamp()))

    def delivery_counts(self) -> dict[tuple[str, str], int]:
        o = notification_outbox_table.c
        with self._store.transaction() as conn:
            rows = conn.execute(select(o.notifier, o.status, func.count()).group_by(o.notifier, o.status)).all()
        return {(str(n), str(s)): int(c) for n, s, c in rows}
