"""Slack incoming webhook: ``text`` (notifications, fallback) and Block Kit ``blocks``."""

from __future__ import annotations

import json
from typing import Any

from monitor.alerts.events import example_lines
from monitor.alerts.notifiers.base import post

_ICON = {"firing": ":rotating_light:", "resolved": ":white_check_mark:", "annotation": ":information_source:",
         "test": ":wave:"}


class SlackNotifier:
    def __init__(self, name: str, url: str, timeout: float, events: tuple[str, ...]) -> None:
        self.name = name
        self._url = url
        self._timeout = timeout
        self._events = events

    def accepts(self, kind: str) -> bool:
        return kind in self._events

    def payload(self, event: dict[str, Any]) -> dict[str, Any]:
        title = f"{_ICON.get(event['kind'], '')} {event['summary']}".strip()
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": event["description"]}},
        ]
        examples = example_lines(event)
        if examples:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "*Failing conversations*\n"
                                                       + "\n".join(f"• {line}" for line in examples)}})
        if event.get("generator_url"):
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"<{event['generator_url']}|rubric-monitor>"}]})
        return {"text": title, "blocks": blocks}

    def send(self, event: dict[str, Any]) -> None:
        post(self._url, json.dumps(self.payload(event)).encode(), {}, self._timeout)
