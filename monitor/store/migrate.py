"""The store's schema under Alembic: what revision a database is at, upgrading it, refusing one that is behind.

- An **empty** database is created at the head revision (a fresh install needs no extra step).
- A database made by release 0.1.0 (tables, no ``alembic_version``) is the baseline revision ``0001``: it is
  stamped as such, then upgraded like any other.
- A database **behind** the head is upgraded only with ``store.migrate: auto`` (or ``rubric-monitor db upgrade``);
  otherwise the daemon stops with one line naming the revisions (exit 2), before it touches anything.
- A database **ahead** of this release (a newer release migrated it) is always refused.

On PostgreSQL the whole check-and-upgrade runs in one transaction holding an advisory lock, so replicas starting
together on an empty database create it once (the others wait, then find it at head).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from monitor.errors import ConfigError

log = logging.getLogger(__name__)
# Alembic narrates every connection at INFO ("Context impl ..."); this module logs the migrations that run.
logging.getLogger("alembic").setLevel(logging.WARNING)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
BASELINE = "0001"
"""The revision of the schema release 0.1.0 created with ``metadata.create_all`` (before Alembic)."""
MIGRATION_LOCK = 0x72_6D_6D_67
"""PostgreSQL advisory lock key held while a database is checked or migrated ("rmmg")."""

MigrateMode = Literal["check", "auto"]


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    """The stored revision; ``BASELINE`` for an unstamped 0.1.0 database; None for an empty one."""
    head: str
    legacy: bool
    """Tables of release 0.1.0 without an ``alembic_version`` row."""

    @property
    def empty(self) -> bool:
        return self.current is None

    @property
    def behind(self) -> bool:
        return self.current is not None and self.current != self.head and self.current in _known()


class SchemaBehind(ConfigError):
    """The database's schema is older (or newer) than this release's; the message says what to do."""


def _config(conn: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


@lru_cache(maxsize=1)
def _known() -> frozenset[str]:
    return frozenset(s.revision for s in _script().walk_revisions())


def head() -> str:
    revision = _script().get_current_head()
    if revision is None:
        raise RuntimeError(f"no migration in {MIGRATIONS}")
    return revision


def history() -> list[tuple[str, str | None, str]]:
    """(revision, its parent, its message), oldest first."""
    revisions = list(_script().walk_revisions())
    revisions.reverse()
    return [(s.revision, s.down_revision if isinstance(s.down_revision, str) else None, s.doc or "")
            for s in revisions]


def state(conn: Connection) -> SchemaState:
    current = MigrationContext.configure(conn).get_current_revision()
    legacy = current is None and inspect(conn).has_table("results")
    return SchemaState(current=BASELINE if legacy else current, head=head(), legacy=legacy)


@contextmanager
def _locked(conn: Connection) -> Iterator[None]:
    if conn.dialect.name == "postgresql":
        # Transaction-scoped: released at commit, or when a replica dies mid-migration.
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    yield


def upgrade(engine: Engine, target: str = "head") -> tuple[str | None, str]:
    """Upgrade to ``target``; returns (revision before, revision after)."""
    with engine.begin() as conn, _locked(conn):
        before = state(conn)
        _upgrade(conn, before, target)
        after = MigrationContext.configure(conn).get_current_revision() or before.head
    return before.current, after


def _upgrade(conn: Connection, found: SchemaState, target: str = "head") -> None:
    config = _config(conn)
    if found.legacy:
        log.info("store: a release 0.1.0 schema without revision; stamping it %s", BASELINE)
        command.stamp(config, BASELINE)
    if found.current != head() or target != "head":
        log.info("store: migrating schema %s → %s", found.current or "(empty)", target)
        command.upgrade(config, target)


def prepare(engine: Engine, mode: MigrateMode, where: str) -> SchemaState:
    """Make the schema usable by this release, or raise ``SchemaBehind`` (exit 2) saying why it is not."""
    with engine.begin() as conn, _locked(conn):
        found = state(conn)
        if found.current is not None and found.current not in _known():
            raise SchemaBehind(where, "store.migrate", f"the schema is at revision {found.current}, newer than "
                               f"this release knows (head {found.head}); run the newer release")
        if found.behind and mode != "auto":
            raise SchemaBehind(where, "store.migrate", f"the schema is at revision {found.current}, this release "
                               f"needs {found.head}; run `rubric-monitor db upgrade` or set store.migrate: auto")
        if found.empty or found.behind or found.legacy:
            _upgrade(conn, found)
    return found
