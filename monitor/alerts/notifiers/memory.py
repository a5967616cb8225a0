"""An in-memory notifier: keeps what it receives (tests, dry runs); ``fail`` makes it raise."""

from __future__ import annotations

from typing import Any

from monitor.alerts.notifiers.base import DeliveryError


class MemoryNotifier:
    def __init__(self, name: str = "memory", events: tuple[str, ...] = ("firing", "resolved", "annotation", "test")
                 ) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.fail: DeliveryError | None = None
        self._events = events

    def accepts(self, kind: str) -> bool:
        return kind in self._events

    def send(self, event: dict[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.events.append(event)
