"""Alert lifecycle, one state per alert key (rubric, agent, kind, dimension): inactive → pending → firing →
resolved, like a Prometheus alerting rule with ``for:`` on both edges.

- ``regression`` verdicts: inactive/resolved → pending; pending for ``for_seconds`` → firing (notify); firing →
  notify again every ``renotify_seconds``.
- ``ok`` verdicts: pending → inactive (never notified); firing for ``for_seconds`` of ok verdicts → resolved
  (notify).
- ``no_verdict`` and ``cannot_judge`` change nothing: too little data, an unhealthy judge or a late source neither
  fire nor resolve an alert.

Pure: ``step`` takes the states and this cycle's verdicts and returns the changed states and the transitions to
notify; the caller persists both in one transaction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from monitor.alerts.detector import SeriesKey, Verdict

State = Literal["inactive", "pending", "firing", "resolved"]
TransitionKind = Literal["firing", "resolved"]


@dataclass(frozen=True)
class AlertState:
    key: str
    rubric: str
    agent: str
    kind: str
    dimension: str
    state: State = "inactive"
    pending_since: float | None = None
    firing_since: float | None = None
    ok_since: float | None = None
    last_notified: float | None = None
    resolved_at: float | None = None
    baseline: str | None = None
    """The baseline of the verdict that fired (the ``baseline`` label of the alert)."""
    last_status: str = "no_verdict"
    notifications: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertState:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @classmethod
    def new(cls, key: SeriesKey) -> AlertState:
        return cls(key=key.id, rubric=key.rubric, agent=key.agent, kind=key.kind, dimension=key.dimension)


@dataclass(frozen=True)
class Transition:
    kind: TransitionKind
    state: AlertState
    verdict: Verdict
    event_key: str
    """Unique per notification: a restart that replays a cycle does not notify it twice."""
    renotify: bool = False


def step(states: dict[str, AlertState], verdicts: dict[SeriesKey, Verdict], now: float, for_seconds: float,
         renotify_seconds: float) -> tuple[dict[str, AlertState], list[Transition]]:
    changed: dict[str, AlertState] = {}
    transitions: list[Transition] = []
    # Looked up by the key's fields: most series have no state, and building every id string costs a cycle dearly.
    known = by_fields(states)
    for key, verdict in verdicts.items():
        old = known.get(key)
        if old is None:
            if verdict.status != "regression":
                continue  # the common case: nothing to remember about a quiet series
            old = AlertState.new(key)
        new, transition = _advance(old, verdict, now, for_seconds, renotify_seconds)
        if new != old:
            changed[key.id] = new
        if transition is not None:
            transitions.append(transition)
    return changed, transitions


def by_fields(states: dict[str, AlertState]) -> dict[tuple[str, str, str, str], AlertState]:
    return {(s.rubric, s.agent, s.kind, s.dimension): s for s in states.values()}


def _advance(state: AlertState, verdict: Verdict, now: float, for_seconds: float, renotify_seconds: float
             ) -> tuple[AlertState, Transition | None]:
    status = verdict.status
    state = replace(state, last_status=status)
    if status == "regression":
        state = replace(state, ok_since=None)
        if state.state in ("inactive", "resolved"):
            state = replace(state, state="pending", pending_since=now)
        if state.state == "pending" and now - _or(state.pending_since, now) >= for_seconds:
            state = replace(state, state="firing", firing_since=now, last_notified=now, resolved_at=None,
                            baseline=verdict.baseline, notifications=state.notifications + 1)
            return state, Transition("firing", state, verdict, f"{state.key}|firing|{now:.3f}")
        if state.state == "firing" and now - _or(state.last_notified, now) >= renotify_seconds:
            state = replace(state, last_notified=now, notifications=state.notifications + 1)
            return state, Transition("firing", state, verdict, f"{state.key}|renotify|{now:.3f}", renotify=True)
        return state, None
    if status == "ok":
        if state.state == "pending":
            return replace(state, state="inactive", pending_since=None), None
        if state.state == "firing":
            ok_since = state.ok_since if state.ok_since is not None else now
            if now - ok_since >= for_seconds:
                state = replace(state, state="resolved", ok_since=None, resolved_at=now, last_notified=now,
                                notifications=state.notifications + 1)
                return state, Transition("resolved", state, verdict, f"{state.key}|resolved|{now:.3f}")
            return replace(state, ok_since=ok_since), None
    return state, None


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
