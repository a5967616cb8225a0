"""Generated adaptive-rubric items, cached by a hash of what they were generated from, so a repeated request costs
no generation call.

The key covers the rubric (name and version, so an edit regenerates), the metric and everything the generation
prompt contains (the request with its context: earlier user messages, the agent message it answers, the agent's
instructions), normalised (case-folded, whitespace collapsed). ``InMemoryItemCache`` is the default; a
store-backed cache only has to implement ``ItemCache`` and can keep ``GeneratedItems.to_json()``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from monitor.evaluators.cache import LruCache


@dataclass(frozen=True)
class RubricItem:
    id: str
    question: str
    importance: str | None = None
    """``high``, ``medium`` or ``low`` for generated items; recorded, not used in the score (as in Vertex)."""
    checks: str | None = None
    """The words of the request or the agent's instructions a generated item checks (quoted by the judge and
    found in the material before the item is accepted); None for items written in the rubric."""


@dataclass(frozen=True)
class GeneratedItems:
    items: tuple[RubricItem, ...]
    intents: tuple[str, ...] = ()
    """The user's goals, for the multi-turn agent metrics."""

    def to_json(self) -> str:
        return json.dumps({
            "items": [{"id": i.id, "question": i.question, "importance": i.importance, "checks": i.checks}
                      for i in self.items],
            "intents": list(self.intents),
        }, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> GeneratedItems:
        data: dict[str, Any] = json.loads(text)
        return cls(
            items=tuple(RubricItem(i["id"], i["question"], i.get("importance"), i.get("checks"))
                        for i in data["items"]),
            intents=tuple(data.get("intents", ())),
        )


class ItemCache(Protocol):
    def get(self, key: str) -> GeneratedItems | None: ...

    def put(self, key: str, items: GeneratedItems) -> None: ...


class InMemoryItemCache(LruCache[str, GeneratedItems]):
    """Items in memory, least recently used evicted first; capacity 0 disables caching."""

    def __init__(self, capacity: int = 10_000) -> None:
        super().__init__(capacity)


class ItemStore(Protocol):
    """What a persistent cache needs from the result store (``SqlStore`` has it)."""

    def cached_items(self, key: str) -> str | None: ...

    def cache_items(self, key: str, payload: str) -> None: ...


class PersistentItemCache:
    """Items kept in the result store, so a restart costs no generation call either; a small in-memory layer in
    front saves the round trip for hot requests."""

    def __init__(self, store: ItemStore, capacity: int = 10_000) -> None:
        self._store = store
        self._memory = InMemoryItemCache(capacity)

    def get(self, key: str) -> GeneratedItems | None:
        found = self._memory.get(key)
        if found is None:
            payload = self._store.cached_items(key)
            if payload is not None:
                found = GeneratedItems.from_json(payload)
                self._memory.put(key, found)
        return found

    def put(self, key: str, items: GeneratedItems) -> None:
        self._memory.put(key, items)
        self._store.cache_items(key, items.to_json())
