"""Microsoft Teams through a Workflows webhook ("When a Teams webhook request is received"): a message with one
Adaptive Card attachment.

A ``TextBlock`` reads a subset of Markdown (``[text](url)`` links, ``**bold**``, lists) and ids and agent names come
from traces: every text goes through ``markdown_text``; the only links are the card's ``Action.OpenUrl`` buttons
(whose titles are plain text)."""

from __future__ import annotations

import json
import re
from typing import Any

from monitor.alerts.notifiers.base import post

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()~#>!|<])")


def markdown_text(text: str) -> str:
    """``text`` shown as itself in a ``TextBlock``: every Markdown punctuation backslash-escaped (CommonMark),
    and line breaks kept out (a line of its own could start a list or a heading)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


_COLOR = {"firing": "Attention", "resolved": "Good", "annotation": "Accent", "test": "Default"}


class TeamsNotifier:
    def __init__(self, name: str, url: str, timeout: float, events: tuple[str, ...]) -> None:
        self.name = name
        self._url = url
        self._timeout = timeout
        self._events = events

    def accepts(self, kind: str) -> bool:
        return kind in self._events

    def payload(self, event: dict[str, Any]) -> dict[str, Any]:
        details = event.get("details") or {}
        facts = [{"title": k.replace("_", " "), "value": markdown_text(str(details[k]))}
                 for k in ("window", "baseline", "current_samples", "baseline_samples", "judge_model")
                 if details.get(k) is not None]
        body: list[dict[str, Any]] = [
            {"type": "TextBlock", "text": markdown_text(event["summary"]), "weight": "Bolder", "size": "Medium",
             "wrap": True, "color": _COLOR.get(event["kind"], "Default")},
            {"type": "TextBlock", "text": markdown_text(event["description"]), "wrap": True},
        ]
        if facts:
            body.append({"type": "FactSet", "facts": facts})
        actions = []
        for example in event.get("examples") or []:
            text = markdown_text(f"{example['conversation_id']} (operation_Id {example['operation_id']})")
            body.append({"type": "TextBlock", "text": text, "wrap": True, "isSubtle": True})
            if example.get("link"):
                actions.append({"type": "Action.OpenUrl", "title": f"Open {example['conversation_id']}"[:40],
                                "url": example["link"]})
        if event.get("generator_url"):
            actions.append({"type": "Action.OpenUrl", "title": "rubric-monitor", "url": event["generator_url"]})
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
                "version": "1.4", "body": body, "actions": actions[:6]}
        return {"type": "message", "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}]}

    def send(self, event: dict[str, Any]) -> None:
        post(self._url, json.dumps(self.payload(event)).encode(), {}, self._timeout)
