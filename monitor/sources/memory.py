"""A source over spans held in memory, for tests and dry runs.

The checkpoint is the number of spans consumed (as JSON text), so a pipeline restarted with the same list and
its stored checkpoint reads only what was added since.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime

from monitor.errors import SourceError
from monitor.models import SpanRecord
from monitor.sources.base import SourceBatch


class InMemorySource:
    def __init__(
        self, spans: Iterable[SpanRecord] = (), name: str = "memory", batch_size: int = 5_000
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = name
        self._spans: list[SpanRecord] = list(spans)
        self._batch_size = batch_size
        self._read_through: datetime | None = None

    def add(self, spans: Iterable[SpanRecord]) -> None:
        """Append spans; the next ``pull`` yields them."""
        self._spans.extend(spans)

    def pull(self, checkpoint: str | None, now: datetime) -> Iterator[SourceBatch]:
        consumed = self._consumed(checkpoint)
        for start in range(consumed, len(self._spans), self._batch_size):
            batch = self._spans[start:start + self._batch_size]
            last = start + len(batch) == len(self._spans)
            yield SourceBatch(spans=list(batch), checkpoint=json.dumps(start + len(batch)), rows=len(batch),
                              read_through=now if last else None)
        # Reached only when every batch was taken: everything added before this pull is delivered.
        self._read_through = now

    def read_through(self) -> datetime | None:
        return self._read_through

    def close(self) -> None:
        """Nothing to release."""

    def _consumed(self, checkpoint: str | None) -> int:
        if checkpoint is None:
            return 0
        try:
            consumed = json.loads(checkpoint)
        except json.JSONDecodeError:
            consumed = None
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            raise SourceError(f"source {self.name}: checkpoint {checkpoint[:80]!r} is not a count of spans")
        return consumed
