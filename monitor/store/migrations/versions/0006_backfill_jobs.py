"""Backfill jobs: progress and judge spend of each backfill (rubric, version, window).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "backfill_jobs",
        sa.Column("job", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("since_ts", sa.Float(), nullable=False),
        sa.Column("until_ts", sa.Float(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("spent_usd", sa.Float(), nullable=False),
        sa.Column("max_cost_usd", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("job"),
    )


def downgrade() -> None:
    op.drop_table("backfill_jobs")
