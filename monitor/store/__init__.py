"""⑤ Result stores: ``SqlStore`` (SQLite, PostgreSQL) and ``InMemoryStore``."""

from monitor.store.base import PendingConversation, ResultStore, StoredSpans
from monitor.store.memory import InMemoryStore
from monitor.store.sql import SqlStore

__all__ = ["InMemoryStore", "PendingConversation", "ResultStore", "SqlStore", "StoredSpans"]
