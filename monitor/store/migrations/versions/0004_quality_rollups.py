"""Hourly quality rollups, filled from the results already stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_HOUR = 3600


def upgrade() -> None:
    rollups = op.create_table(
        "quality_rollups",
        sa.Column("bucket_ts", sa.Integer(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("dimension", sa.String(length=128), nullable=False),
        sa.Column("scored", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=False),
        sa.Column("unscored", sa.Integer(), nullable=False),
        sa.Column("score_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("bucket_ts", "rubric", "rubric_version", "agent", "dimension"),
    )
    # The windows read rollups only: without this, results stored before the upgrade would vanish from them.
    # (The same sums as SqlStore.rebuild_rollups, frozen here as this revision's schema knew them.)
    results = sa.table("results", sa.column("rubric"), sa.column("rubric_version"), sa.column("agent"),
                       sa.column("outcome"), sa.column("score"), sa.column("evaluated_ts", sa.Float),
                       sa.column("current"))
    dimensions = sa.table("result_dimensions", sa.column("rubric"), sa.column("rubric_version"),
                          sa.column("agent"), sa.column("dimension"), sa.column("score"),
                          sa.column("evaluated_ts", sa.Float), sa.column("current"))
    postgres = op.get_bind().dialect.name == "postgresql"

    # Constants inlined (not bound parameters), so PostgreSQL sees the GROUP BY expression as the selected one.
    seconds = sa.literal_column(str(_HOUR), sa.Integer)

    def hour(column: sa.ColumnElement[float]) -> sa.ColumnElement[int]:
        if postgres:
            return (sa.func.floor(column / seconds) * seconds).cast(sa.Integer)
        return sa.cast(column / seconds, sa.Integer) * seconds

    r, d = results.c, dimensions.c
    scored = sa.case((r.outcome != "unscored", 1), else_=0)
    overall = (sa.select(hour(r.evaluated_ts), r.rubric, r.rubric_version, r.agent, sa.literal(""),
                         sa.func.sum(scored), sa.func.sum(sa.case((r.outcome == "pass", 1), else_=0)),
                         sa.func.sum(sa.case((r.outcome == "unscored", 1), else_=0)),
                         sa.func.coalesce(sa.func.sum(sa.case((r.outcome != "unscored", sa.func.coalesce(r.score, 0.0)),
                                                              else_=0.0)), 0.0))
               .where(r.current.is_(True))
               .group_by(hour(r.evaluated_ts), r.rubric, r.rubric_version, r.agent))
    per_dimension = (sa.select(hour(d.evaluated_ts), d.rubric, d.rubric_version, d.agent, d.dimension,
                               sa.func.count(), sa.literal(0), sa.literal(0), sa.func.sum(d.score).cast(sa.Float))
                     .where(d.current.is_(True))
                     .group_by(hour(d.evaluated_ts), d.rubric, d.rubric_version, d.agent, d.dimension))
    columns = ["bucket_ts", "rubric", "rubric_version", "agent", "dimension", "scored", "passed", "unscored",
               "score_sum"]
    op.execute(rollups.insert().from_select(columns, overall))
    op.execute(rollups.insert().from_select(columns, per_dimension))


def downgrade() -> None:
    op.drop_table("quality_rollups")
