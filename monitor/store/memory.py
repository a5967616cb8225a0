"""The in-memory store: the SQL store on a private in-memory SQLite database.

It is the same code path as production (constraints, transactions, aggregates), gone when the process ends: for
tests, dry runs and ``rubric-monitor evaluate``.
"""

from __future__ import annotations

from monitor.store.sql import SqlStore


class InMemoryStore(SqlStore):
    def __init__(self, *, tool_result_grace_seconds: float = 0.0) -> None:
        super().__init__("sqlite+pysqlite:///:memory:", tool_result_grace_seconds=tool_result_grace_seconds)
