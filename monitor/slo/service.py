"""The daemon's SLO step, after the regression alerts: every SLO's figures from the store, the SLO gauges, and the
SLO alerts through the regression alerts' own lifecycle, event store, silences, outbox and notifiers.

An SLO alert is one lifecycle state per (SLO, page | ticket), stored beside the regression alerts' states (kind
``slo_burn``): burning fires it at once and not burning resolves it at once (the workbook's short window already
makes the alert stop soon after the drop ends, so there is no ``for``), too few evaluations or a state that cannot
be judged changes nothing. Nothing here may fail a cycle: the step's failures are counted like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from monitor.alerts.detector import DetectorSettings, SeriesKey, Status, Verdict, without_cyclic_gc
from monitor.alerts.events import example_dicts
from monitor.alerts.lifecycle import AlertState, Transition, step
from monitor.alerts.store import NewEvent
from monitor.alerts.windows import WindowCounts
from monitor.metrics.slo import SloFigures, SloMetrics
from monitor.slo.rules import ALERT_NAME
from monitor.slo.spec import SloDefinition, duration_seconds
from monitor.slo.status import SloStatus, TierCheck, compute, windows_of
from monitor.store.sql import SqlStore

if TYPE_CHECKING:
    from monitor.alerts.service import AlertService

log = logging.getLogger(__name__)

SLO_KIND: Literal["slo_burn"] = "slo_burn"
"""The ``kind`` of an SLO alert's lifecycle state (regression alerts are ``pass_rate`` or ``dimension_mean``)."""
_STATUS: dict[str, Status] = {"burning": "regression", "ok": "ok", "too_few": "no_verdict",
                              "cannot_judge": "cannot_judge"}


def slo_key(slo: SloDefinition, tier: str) -> SeriesKey:
    return SeriesKey(slo.rubric, slo.name, SLO_KIND, tier)


def labels(slo: SloDefinition, tier: str) -> dict[str, str]:
    """The alert's labels, as the Prometheus rule sets them."""
    configured = slo.alerting.page.labels if tier == "page" else slo.alerting.ticket.labels
    return {"alertname": ALERT_NAME, "slo": slo.name, "rubric": slo.rubric, "alerting": tier, **configured}


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}x"


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "never at this rate"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def details(status: SloStatus, check: TierCheck) -> dict[str, Any]:
    """What the event carries (the keys the notifiers show are those of a regression's details)."""
    slo = status.slo
    condition = check.condition
    long = status.windows[condition.long] if condition else status.windows[slo.window]
    short = status.windows[condition.short] if condition else None
    return {
        "slo": slo.name,
        "objective": slo.objective,
        "window": condition.long if condition else slo.window,
        "short_window": None if condition is None else condition.short,
        "burn_rate_threshold": None if condition is None else condition.burn_rate,
        "burn_rate": long.burn_rate(slo.error_budget),
        "short_burn_rate": None if short is None else short.burn_rate(slo.error_budget),
        "current_value": long.sli,
        "current_samples": long.scored,
        "short_samples": None if short is None else short.scored,
        "budget_remaining": status.budget_remaining,
        "exhaustion_seconds": status.exhaustion_seconds,
        "status": check.status,
        "reasons": list(status.reasons),
        "agents": list(slo.agents),
        "judge_model": ", ".join(sorted({c.judge_model for c in status.configs.values()})) or None,
        "rubric_version": ", ".join(sorted({c.rubric_version for c in status.configs.values()})) or None,
    }


def slo_event(kind: str, status: SloStatus, check: TierCheck, starts_at: datetime, ends_at: datetime | None,
              generator_url: str, examples: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    slo = status.slo
    found = details(status, check)
    if kind == "resolved":
        summary = f"Resolved: SLO {slo.name} no longer burns its error budget too fast ({check.tier})"
    else:
        summary = (f"SLO {slo.name} burns its error budget {_rate(found['burn_rate'])} too fast ({check.tier}): "
                   f"{_percent(found['current_value'])} good over {found['window']}, objective "
                   f"{slo.objective:.4g}")
    description = (
        f"{slo.describe()}. Over {found['window']}: {_percent(found['current_value'])} good of "
        f"{found['current_samples']} scored evaluations, burn rate {_rate(found['burn_rate'])}"
        + (f" (over {found['short_window']}: {_rate(found['short_burn_rate'])}, n={found['short_samples']})"
           if found["short_window"] else "")
        + f". Error budget left over {slo.window}: {_percent(found['budget_remaining'])}; exhausted in "
        f"{duration_text(found['exhaustion_seconds'])}. `rubric-monitor slo status --slo {slo.name}`.")
    return {"kind": kind, "labels": labels(slo, check.tier), "summary": summary, "description": description,
            "details": found, "examples": examples or [], "starts_at": starts_at.isoformat(),
            "ends_at": None if ends_at is None else ends_at.isoformat(), "generator_url": generator_url}


class SloService:
    def __init__(self, definitions: Callable[[], Sequence[SloDefinition]], store: SqlStore,
                 detector: DetectorSettings, alerts: AlertService | None = None,
                 global_reasons: Callable[[], Iterable[str]] = lambda: ()) -> None:
        self._definitions = definitions
        self._store = store
        self._detector = detector
        self._alerts = alerts
        self._global_reasons = global_reasons
        self._counts = WindowCounts()
        self._states: dict[str, AlertState] | None = None
        self.metrics = SloMetrics()
        self.last: list[SloStatus] = []

    def statuses(self, now: datetime) -> list[SloStatus]:
        """Every SLO's figures now (what ``rubric-monitor slo status`` prints)."""
        slos = list(self._definitions())
        windows = windows_of(slos)
        if not windows:
            return []
        until = now.timestamp()
        with without_cyclic_gc():
            with self._store.transaction() as conn:
                self._counts.refresh(conn, until - windows[-1][1], until)
            counts = self._counts.count(windows, 0.0, until)
        drifting = {rubric: ("judge_drift",) for rubric in self._store.drifting_rubrics()}
        return compute(slos, counts, self._detector, self._global_reasons(), drifting)

    def states(self) -> dict[str, AlertState]:
        if self._states is None:
            assert self._alerts is not None
            loaded = self._alerts.store.load_states()
            self._states = {k: AlertState.from_dict(v) for k, v in loaded.items() if v.get("kind") == SLO_KIND}
        return self._states

    def run_cycle(self, now: datetime) -> list[Transition]:
        statuses = self.last = self.statuses(now)
        transitions = self._notify(statuses, now) if self._alerts is not None else []
        states = self.states() if self._alerts is not None else {}
        figures = []
        for status in statuses:
            slo = status.slo
            figures.append(SloFigures(
                slo.name, slo.rubric, slo.objective, status.budget_remaining,
                {w: f.burn_rate(slo.error_budget) for w, f in status.windows.items()},
                {w: (f.good, f.scored, f.unscored) for w, f in status.windows.items()},
                bool(status.reasons),
                {tier: (state := states.get(slo_key(slo, tier).id)) is not None and state.state == "firing"
                 for tier, _ in slo.tiers()}))
        self.metrics.publish(figures)
        return transitions

    def _notify(self, statuses: Sequence[SloStatus], now: datetime) -> list[Transition]:
        alerts = self._alerts
        assert alerts is not None
        alerts.start()
        verdicts: dict[SeriesKey, Verdict] = {}
        checks: dict[str, tuple[SloStatus, TierCheck]] = {}
        for status in statuses:
            for check in status.tiers:
                key = slo_key(status.slo, check.tier)
                window = check.condition.long if check.condition else status.slo.window
                figures = status.windows[window]
                verdicts[key] = Verdict(key, "trailing", window, _STATUS[check.status], None, figures.scored,
                                        current_value=figures.sli, reasons=status.reasons)
                checks[key.id] = (status, check)
        states = self.states()
        # No ``for``: the burn-rate conditions are their own persistence (and they stop soon after the drop does).
        changed, transitions = step(states, verdicts, now.timestamp(), 0.0, alerts.plan.renotify_seconds)
        events = []
        for transition in transitions:
            status, check = checks[transition.state.key]
            starts = datetime.fromtimestamp(transition.state.firing_since or now.timestamp(), now.tzinfo)
            examples = self._examples(status, check, now) if transition.kind == "firing" else []
            payload = slo_event(transition.kind, status, check, starts,
                                now if transition.kind == "resolved" else None, alerts.generator_url, examples)
            payload["renotify"] = transition.renotify
            to, muted = alerts.recipients(transition.kind, payload["labels"], now)
            events.append(NewEvent(transition.event_key, transition.kind, payload, to, muted))
            log.warning("SLO alert %s: %s", transition.kind, payload["summary"])
        outbox = alerts.store.commit({k: s.to_dict() for k, s in changed.items()}, events)
        states.update(changed)
        for event in events:
            for notifier in event.silenced:
                alerts.metrics.notifications.labels(notifier, "silenced").inc()
        alerts.dispatcher.submit(outbox)
        return transitions

    def _examples(self, status: SloStatus, check: TierCheck, now: datetime) -> list[dict[str, Any]]:
        """The most recent failing conversations behind a firing SLO alert, as a regression alert names them:
        failed evaluations of the newest configuration of each agent covered, in the condition's long window, newest
        first (``alerts.examples`` of them). A dimension SLO names none: a failed verdict is not a low score on its
        dimension."""
        alerts = self._alerts
        assert alerts is not None
        slo, limit = status.slo, alerts.settings.examples
        if not limit or slo.dimension is not None:
            return []
        since = now.timestamp() - duration_seconds(check.condition.long if check.condition else slo.window)
        found = [example for agent, config in sorted(status.configs.items())
                 for example in alerts.store.examples(slo.rubric, agent, config, since, limit)]
        found.sort(key=lambda example: example.evaluated_at, reverse=True)
        return example_dicts(found[:limit], alerts.settings.example_link_template)
