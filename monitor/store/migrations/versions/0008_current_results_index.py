"""Current results by time: a partial index on ``results.evaluated_ts`` where ``current``, instead of the index of
the ``current`` flag alone (which every current result of every day kept shares, so it narrows nothing and SQLite
preferred it to the time range).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    current = sa.column("current", sa.Boolean()).is_(True)
    op.drop_index("ix_results_current", table_name="results")
    op.create_index("ix_results_current_evaluated_ts", "results", ["evaluated_ts"], unique=False,
                    sqlite_where=current, postgresql_where=current)


def downgrade() -> None:
    op.drop_index("ix_results_current_evaluated_ts", table_name="results")
    op.create_index("ix_results_current", "results", ["current"], unique=False)
