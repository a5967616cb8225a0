"""A generic JSON webhook: the event as it is, signed with HMAC-SHA256.

Headers: ``X-Rubric-Monitor-Timestamp`` (Unix seconds) and ``X-Rubric-Monitor-Signature: sha256=<hex>``, the HMAC of
``<timestamp>.<body>`` with the shared secret; a receiver recomputes it and rejects old timestamps (replays).
``X-Rubric-Monitor-Event`` carries the event's id, the same on every retry, for receivers that deduplicate.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from monitor.alerts.notifiers.base import post


def signature(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class WebhookNotifier:
    def __init__(self, name: str, url: str, secret: str | None, timeout: float, events: tuple[str, ...]) -> None:
        self.name = name
        self._url = url
        self._secret = secret
        self._timeout = timeout
        self._events = events

    def accepts(self, kind: str) -> bool:
        return kind in self._events

    def send(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, sort_keys=True).encode()
        headers = {"X-Rubric-Monitor-Event": str(event.get("id", ""))}
        if self._secret:
            timestamp = str(int(time.time()))
            headers["X-Rubric-Monitor-Timestamp"] = timestamp
            headers["X-Rubric-Monitor-Signature"] = signature(self._secret, timestamp, body)
        post(self._url, body, headers, self._timeout)
