"""Slack incoming webhook: ``text`` (notifications, fallback) and Block Kit ``blocks``.

Every text is ``mrkdwn``, where ``<...>`` is markup (``<!channel>`` a mention, ``<url|text>`` a link) and ids and
agent names come from traces: each is shown through ``mrkdwn_text``, and the only links are the notifier's own
(``mrkdwn_link``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from monitor.alerts.events import example_lines
from monitor.alerts.notifiers.base import post

_BROADCAST = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)
_WORD_JOINER = "\u2060"


def mrkdwn_text(text: str) -> str:
    """``text`` shown as itself: ``&``, ``<`` and ``>`` escaped as Slack asks (so no ``<!channel>`` mention and no
    ``<url|label>`` link), and ``@channel``/``@here``/``@everyone`` broken by an invisible word joiner, for
    workspaces that still turn plain ones into broadcasts."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub(lambda m: "@" + _WORD_JOINER + m.group(1), escaped)


def mrkdwn_link(url: str, label: str) -> str:
    """A link the notifier makes: the URL's own ``&<>|`` cannot end it early or change its label."""
    safe = url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"<{safe}|{mrkdwn_text(label)}>"


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
        title = f"{_ICON.get(event['kind'], '')} {mrkdwn_text(event['summary'])}".strip()
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn_text(event["description"])}},
        ]
        examples = example_lines(event, mrkdwn_text, lambda url: mrkdwn_link(url, "open"))
        if examples:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "*Failing conversations*\n"
                                                       + "\n".join(f"• {line}" for line in examples)}})
        if event.get("generator_url"):
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": mrkdwn_link(event["generator_url"], "rubric-monitor")}]})
        return {"text": title, "blocks": blocks}

    def send(self, event: dict[str, Any]) -> None:
        post(self._url, json.dumps(self.payload(event)).encode(), {}, self._timeout)
