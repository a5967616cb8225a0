"""Who this replica is, and the rule that SQLite serves one replica.

Replicas on one PostgreSQL share the work through claims in the store (``SqlStore.claim_ready``, leases renewed
while judging) and one poller per source (``SqlStore.poller_lock``). SQLite has no row locks to share work with,
so a second daemon on the same file is refused at start-up: an exclusive ``flock`` on ``<file>.lock``, which the
kernel releases when the holder dies, even by ``kill -9``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
from pathlib import Path
from typing import IO

from sqlalchemy.engine import make_url

from monitor.errors import ConfigError


def replica_id() -> str:
    """Unique per process, readable in the store: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SingleReplicaLock:
    """Held for the life of a daemon on a SQLite file; ``None``-like no-op for other backends."""

    def __init__(self, url: str, owner: str) -> None:
        self._handle: IO[str] | None = None
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
            return
        path = Path(parsed.database + ".lock")
        handle = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError("settings", "store.url", f"{parsed.database} is in use by another rubric-monitor "
                              f"({holder}); SQLite serves one replica: use PostgreSQL to run more") from None
        handle.seek(0)
        handle.truncate()
        handle.write(owner + "\n")
        handle.flush()
        self._handle = handle

    @property
    def held(self) -> bool:
        """True on a SQLite file this process has locked: no other daemon can be using it."""
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
