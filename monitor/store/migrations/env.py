"""Alembic environment: always driven from ``monitor.store.migrate`` with an open connection (never from an
``alembic.ini``), so the daemon, the CLI and the tests run migrations the same way."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from monitor.store.tables import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("migrations run through monitor.store.migrate, which passes an open connection")
context.configure(
    connection=connection,
    target_metadata=metadata,
    # SQLite alters tables by copying them; batch mode does that for every ALTER a migration makes.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
