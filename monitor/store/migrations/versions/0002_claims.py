"""Claims: replicas on one PostgreSQL lease the conversations they judge.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("claimed_by", sa.Text(), nullable=True))
        batch.add_column(sa.Column("claim_expires_ts", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("claim_expires_ts")
        batch.drop_column("claimed_by")
