"""Retention: daily aggregates of compacted results (counts by outcome, score sums, dimension score counts).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "compacted_results",
        sa.Column("day_ts", sa.Integer(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("score_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day_ts", "rubric", "rubric_version", "agent", "outcome"),
    )
    op.create_table(
        "compacted_dimensions",
        sa.Column("day_ts", sa.Integer(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("dimension", sa.String(length=128), nullable=False),
        sa.Column("score", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("day_ts", "rubric", "rubric_version", "agent", "dimension", "score"),
    )


def downgrade() -> None:
    op.drop_table("compacted_dimensions")
    op.drop_table("compacted_results")
