"""A bounded in-memory cache of verdicts, so an identical conversation is judged once per rubric version and model."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class VerdictCache:
    """Least-recently-used, at most ``capacity`` entries; capacity 0 disables it."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0

    def get(self, key: Hashable) -> Any | None:
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return self._entries[key]

    def put(self, key: Hashable, value: Any) -> None:
        if self._capacity <= 0:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
