"""① The source stage: spans for the next window.

A source reads from where its checkpoint says it stopped and yields batches; the pipeline stores each batch's
spans and its checkpoint in one transaction, so a position never advances past spans that are not stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from monitor.models import SpanRecord


@dataclass(frozen=True)
class SourceBatch:
    """Spans read by one step of a source, and the checkpoint to store once they are stored.

    ``checkpoint`` is opaque to everyone but the source (JSON text). ``rejected`` counts spans or rows that could
    not be read, by reason; they are logged by the source and counted by the pipeline, never silently dropped.
    """

    spans: list[SpanRecord]
    checkpoint: str
    rejected: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    """Raw rows or lines read to produce ``spans`` (for ``rubric_monitor_source_rows_total``)."""
    read_through: datetime | None = None
    """Once this batch (and those before it) is stored, every span that started before this instant has been
    delivered; None when this batch proves no such instant (see ``TraceSource.read_through``)."""


class TraceSource(Protocol):
    name: str
    """Value of the ``source`` metric label (``otlp_file``, ``app_insights``, ``memory``)."""

    def pull(self, checkpoint: str | None, now: datetime) -> Iterator[SourceBatch]:
        """Yield what is new since ``checkpoint``. Raise ``SourceError`` on failure: batches already yielded
        stay valid, the rest is read again next cycle."""
        ...

    def read_through(self) -> datetime | None:
        """Every span that started before this instant has been delivered, in batches the consumer took (and
        so stored): the stored position, or where the last complete read began; None until a read got that
        far. The pipeline never lets a conversation become ready past it (nor past the ``read_through`` of
        the batches it stored since): a conversation straddling a failed or unfinished read waits for the rest
        of its spans."""
        ...

    def close(self) -> None: ...
