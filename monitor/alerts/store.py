"""What regression alerts read from and keep in the result store.

The windows' counts are kept between cycles (``monitor/alerts/windows.py``): a cycle fetches only the results it has
not seen, so its cost follows the results recorded since the last one, not those of the baseline period. Writes
(lifecycle state, events, the notification outbox) happen in one transaction per cycle: a restart finds either all
of a transition or none of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from monitor.alerts.detector import JudgeConfig, SeriesCounts, without_cyclic_gc
from monitor.alerts.windows import WindowCounts
from monitor.store.sql import SqlStore
from monitor.store.tables import alert_events_table, alert_states_table, notification_outbox_table, results_table


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
    def __init__(self, store: SqlStore, windows: WindowCounts | None = None) -> None:
        self._store = store
        self._windows = windows or WindowCounts()

    # reads -------------------------------------------------------------------------------------------------------

    def drifting_rubrics(self) -> set[str]:
        return self._store.drifting_rubrics()

    def window_counts(self, windows: Sequence[tuple[str, float]], baseline_seconds: float, now: datetime
                      ) -> list[tuple[str, list[SeriesCounts]]]:
        """Per window (name, seconds) and per (rubric, agent, configuration, agent version) with results in it:
        the counts of current (not superseded) results inside the window (``current``) and in the baseline period
        before it. Kept between calls (``monitor/alerts/windows.py``): a call reads the ids of the results the
        windows hold and fetches only those it has not seen."""
        until = now.timestamp()
        earliest = until - max(seconds for _, seconds in windows) - baseline_seconds
        with without_cyclic_gc():
            with self._store.transaction() as conn:
                self._windows.refresh(conn, earliest, until)
            return self._windows.count(windows, baseline_seconds, until)

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
