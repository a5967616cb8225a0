"""Write-back outbox: results waiting to be emitted as OpenTelemetry ``gen_ai.evaluation.result`` events.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "writeback_outbox",
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("result_id"),
    )


def downgrade() -> None:
    op.drop_table("writeback_outbox")
