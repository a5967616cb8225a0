"""Regression alerts at the end of every cycle: detect → lifecycle → events → outbox → notifiers, plus metrics.

The daemon and ``rubric-monitor regressions`` run the same ``evaluate``. Nothing here may fail a cycle: the caller
(``monitor/app.py``) catches and counts any exception, and delivery runs on the notifiers' own threads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from monitor.alerts.delivery import Dispatcher, RetryPolicy
from monitor.alerts.detector import Detection, DetectorSettings, SeriesKey, Verdict, detect
from monitor.alerts.events import alert_event, annotation_event, example_dicts, labels_of
from monitor.alerts.lifecycle import AlertState, Transition, step
from monitor.alerts.metrics import AlertMetrics
from monitor.alerts.notifiers import build_notifier
from monitor.alerts.notifiers.base import Notifier
from monitor.alerts.store import AlertStore, NewEvent
from monitor.errors import ConfigError
from monitor.settings import AlertSettings
from monitor.store.sql import SqlStore

log = logging.getLogger(__name__)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(value: str, field: str) -> float:
    """``"10m"`` → 600.0; an error names the setting."""
    match = re.fullmatch(r"(\d+)([smhdw])", value.strip())
    if match is None:
        raise ConfigError("settings", field, f"{value!r} is not a duration like 0s, 10m, 1h or 7d")
    return int(match.group(1)) * float(_UNITS[match.group(2)])


@dataclass(frozen=True)
class Plan:
    """Durations of the settings, parsed once (and validated at start-up)."""

    windows: tuple[tuple[str, float], ...]
    baseline_seconds: float
    for_seconds: float
    renotify_seconds: float

    @classmethod
    def of(cls, settings: AlertSettings) -> Plan:
        windows = tuple((w, duration_seconds(w, "alerts.windows")) for w in settings.windows)
        if not windows:
            raise ConfigError("settings", "alerts.windows", "at least one window is needed")
        return cls(windows, duration_seconds(settings.baseline_period, "alerts.baseline_period"),
                   duration_seconds(settings.for_duration, "alerts.for_duration"),
                   duration_seconds(settings.renotify_interval, "alerts.renotify_interval"))


def detector_settings(settings: AlertSettings) -> DetectorSettings:
    return DetectorSettings(
        min_samples=settings.min_samples, min_effect_pass_rate=settings.min_effect_pass_rate,
        min_effect_dimension=settings.min_effect_dimension, fdr_q=settings.fdr_q,
        max_unscored_share=settings.max_unscored_share, max_judge_error_share=settings.max_judge_error_share,
    )


def check_settings(settings: AlertSettings, interval_seconds: float) -> list[Notifier]:
    """Everything ``build_alerts`` would refuse (durations, notifier URLs and secrets), for ``rubric-monitor
    check``; raises ``ConfigError``."""
    plan = Plan.of(settings)
    for silence in settings.silences:
        for label, pattern in silence.matchers.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError("settings", f"alerts.silences.matchers.{label}", f"not a regular expression: {exc}"
                                  ) from exc
    # Alertmanager keeps a firing alert until its endsAt: beyond the next re-post, with room for slow cycles.
    ttl = timedelta(seconds=plan.renotify_seconds * 1.5 + 5 * max(60.0, interval_seconds))
    return [build_notifier(n, ttl) for n in settings.notifiers]


def silenced(labels: dict[str, str], settings: AlertSettings, now: datetime) -> str | None:
    """The comment (or matchers) of the first active silence matching these labels."""
    for silence in settings.silences:
        if silence.until is not None and silence.until <= now:
            continue
        if all(re.fullmatch(pattern, labels.get(name, "")) for name, pattern in silence.matchers.items()):
            return silence.comment or str(silence.matchers)
    return None


@dataclass
class CycleAlerts:
    detection: Detection
    transitions: list[Transition] = field(default_factory=list)
    annotations: int = 0


class AlertService:
    def __init__(self, settings: AlertSettings, store: SqlStore, registry: CollectorRegistry,
                 notifiers: Iterable[Notifier] = (), global_reasons: Callable[[], Iterable[str]] = lambda: (),
                 generator_url: str = "") -> None:
        self.settings = settings
        self.plan = Plan.of(settings)
        self.store = AlertStore(store)
        self.metrics = AlertMetrics(registry)
        self._global_reasons = global_reasons
        self.generator_url = settings.external_url or generator_url
        policies = {n.name: RetryPolicy(n.max_attempts, n.backoff_seconds, n.backoff_max_seconds)
                    for n in settings.notifiers}
        self.dispatcher = Dispatcher(list(notifiers), policies, self.store, self.metrics.notifications)
        self._states: dict[str, AlertState] | None = None
        self._started = False

    # the verdicts (daemon and CLI) -----------------------------------------------------------------------------

    def evaluate(self, now: datetime) -> Detection:
        windows = self.store.window_counts(self.plan.windows, self.plan.baseline_seconds, now)
        # A drifting judge (its canary set no longer agrees) is not a regressing agent: that rubric cannot be judged.
        drifting = {rubric: ("judge_drift",) for rubric in self.store.drifting_rubrics()}
        return detect(windows, detector_settings(self.settings), self._global_reasons(), drifting)

    def states(self) -> dict[str, AlertState]:
        if self._states is None:
            # SLO alerts (``monitor.slo.service``) keep their states in the same table, under their own kind.
            self._states = {k: AlertState.from_dict(v) for k, v in self.store.load_states().items()
                            if v.get("kind") != "slo_burn"}
        return self._states

    # one cycle ---------------------------------------------------------------------------------------------------

    def start(self, resume: bool = True) -> None:
        if not self._started:
            self._started = True
            self.dispatcher.start(resume=resume)

    def run_cycle(self, now: datetime) -> CycleAlerts:
        self.start()
        detection = self.evaluate(now)
        states = self.states()
        changed, transitions = step(states, detection.by_key(), now.timestamp(), self.plan.for_seconds,
                                    self.plan.renotify_seconds)
        events = [self._transition_event(t, now) for t in transitions]
        fresh = self._new_annotations(detection, now)
        events.extend(fresh)
        outbox = self.store.commit({k: s.to_dict() for k, s in changed.items()}, events)
        states.update(changed)
        self.metrics.publish(detection, states)
        for event in events:
            for notifier in event.silenced:
                self.metrics.notifications.labels(notifier, "silenced").inc()
        self.dispatcher.submit(outbox)
        for transition in transitions:
            log.warning("alert %s: %s (%s)", transition.kind, transition.state.key, transition.verdict.status)
        return CycleAlerts(detection, transitions, len(fresh))

    def recipients(self, kind: str, labels: dict[str, str], now: datetime) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(notifiers to send to, notifiers a silence mutes) for an event of this kind and labels; SLO alerts
        (``monitor.slo.service``) go through the same notifiers and silences."""
        return self._recipients(kind, labels, now)

    def _recipients(self, kind: str, labels: dict[str, str], now: datetime) -> tuple[tuple[str, ...], tuple[str, ...]]:
        names = tuple(n for n in self.dispatcher.names if (notifier := self.dispatcher.notifier(n)) is not None
                      and notifier.accepts(kind))
        why = silenced(labels, self.settings, now) if kind in ("firing", "resolved") else None
        if why is not None:
            log.info("alert %s is silenced (%s): not notified", labels, why)
            return (), names
        return names, ()

    def _transition_event(self, transition: Transition, now: datetime) -> NewEvent:
        state, verdict = transition.state, transition.verdict
        labels = labels_of(state.rubric, state.agent, state.kind, state.dimension,
                           state.baseline or verdict.baseline)
        starts = datetime.fromtimestamp(state.firing_since or now.timestamp(), now.tzinfo)
        ends = now if transition.kind == "resolved" else None
        examples = []
        if transition.kind == "firing" and self.settings.examples:
            found = self.store.examples(state.rubric, state.agent, verdict.config, verdict.window_start_ts,
                                        self.settings.examples)
            examples = example_dicts(found, self.settings.example_link_template)
        payload = alert_event(transition.kind, verdict, labels, starts, ends, examples, self.generator_url)
        payload["renotify"] = transition.renotify
        to, muted = self._recipients(transition.kind, labels, now)
        return NewEvent(transition.event_key, transition.kind, payload, to, muted)

    def _new_annotations(self, detection: Detection, now: datetime) -> list[NewEvent]:
        keys = [f"annotation|{a.key}" for a in detection.annotations]
        known = self.store.known_events(keys) if keys else set()
        events = []
        for key, annotation in zip(keys, detection.annotations, strict=True):
            if key in known:
                continue
            payload = annotation_event(annotation, now, self.generator_url)
            # An annotation is a log line, a stored event and a notification, never a regression.
            log.warning("annotation: %s", payload["summary"])
            to, muted = self._recipients("annotation", payload["labels"], now)
            events.append(NewEvent(key, "annotation", payload, to, muted))
        return events

    def verdict_rows(self, detection: Detection, rubric: str | None = None, agent: str | None = None
                     ) -> list[tuple[SeriesKey, Verdict, AlertState | None]]:
        states = self.states()
        rows = [(key, verdict, states.get(key.id)) for key, verdict in detection.by_key().items()
                if (rubric is None or key.rubric == rubric) and (agent is None or key.agent == agent)]
        return sorted(rows, key=lambda r: (r[0].rubric, r[0].agent, r[0].kind != "pass_rate", r[0].dimension))

    def close(self, drain_seconds: float = 0.0) -> None:
        """Stop delivering; with ``drain_seconds``, first give the notifications in flight that long to finish
        (what is still pending stays in the outbox for the next start)."""
        if self._started:
            if drain_seconds > 0:
                self.dispatcher.wait_idle(drain_seconds)
            self.dispatcher.close()
