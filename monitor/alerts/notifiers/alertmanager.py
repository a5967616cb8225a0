"""Alertmanager API v2: ``POST {url}/api/v2/alerts`` with a list of alerts.

A firing alert is posted with an ``endsAt`` beyond the next re-notification, so Alertmanager keeps it firing while
the daemon keeps re-posting it, and resolves it by itself if the daemon disappears; a resolved one with ``endsAt``
set to the resolution time. Annotations are not sent: Alertmanager has no such concept.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from monitor.alerts.events import example_lines
from monitor.alerts.notifiers.base import post


class AlertmanagerNotifier:
    def __init__(self, name: str, url: str, timeout: float, firing_ttl: timedelta,
                 events: tuple[str, ...] = ("firing", "resolved", "test")) -> None:
        self.name = name
        self._url = url.rstrip("/") + "/api/v2/alerts"
        self._timeout = timeout
        self._ttl = firing_ttl
        self._events = events

    def accepts(self, kind: str) -> bool:
        return kind != "annotation" and kind in self._events

    def payload(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        annotations = {"summary": event["summary"], "description": event["description"]}
        details = event.get("details") or {}
        for key in ("window", "baseline", "effect", "interval", "p_value", "q_value", "current_samples",
                    "baseline_samples", "current_value", "baseline_value", "judge_model"):
            if details.get(key) is not None:
                annotations[key] = json.dumps(details[key]) if not isinstance(details[key], str) else details[key]
        if details.get("dimensions_moved"):
            annotations["dimensions"] = ", ".join(
                f"{m['dimension']} {m['effect']:+.2f}" for m in details["dimensions_moved"])
        examples = example_lines(event)
        if examples:
            annotations["examples"] = "\n".join(examples)
        starts = datetime.fromisoformat(event["starts_at"])
        if event.get("ends_at"):
            ends = datetime.fromisoformat(event["ends_at"])
        else:
            ends = max(starts, datetime.fromisoformat(event.get("sent_at") or event["starts_at"])) + self._ttl
        return [{
            "labels": {k: v for k, v in event["labels"].items() if v != ""},
            "annotations": annotations,
            "startsAt": starts.isoformat(),
            "endsAt": ends.isoformat(),
            "generatorURL": event.get("generator_url") or "",
        }]

    def send(self, event: dict[str, Any]) -> None:
        post(self._url, json.dumps(self.payload(event)).encode(), {}, self._timeout)
