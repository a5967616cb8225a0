"""Review: the daily review queue, people's labels and shadow verdicts (``monitor/review``), and current results
by rubric and time (the review page's list).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table("review_queue",
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("evaluated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("result_id")
    )
    op.create_index("ix_review_queue_rubric_day", "review_queue", ["rubric", "day"], unique=False)
    op.create_index("ix_review_queue_evaluated_ts", "review_queue", ["evaluated_ts"], unique=False)
    op.create_table("review_labels",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("reviewer", sa.String(length=256), nullable=False),
        sa.Column("result_id", sa.Integer(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("dimensions", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("labelled_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("conversation_id", "rubric", "reviewer", name="uq_review_label")
    )
    op.create_index("ix_review_labels_labelled_ts", "review_labels", ["labelled_ts"], unique=False)
    op.create_index("ix_review_labels_result_id", "review_labels", ["result_id"], unique=False)
    op.create_table("review_conversations",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("span_count", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("stored_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id")
    )
    op.create_index("ix_review_conversations_stored_ts", "review_conversations", ["stored_ts"], unique=False)
    current = sa.column("current", sa.Boolean()).is_(True)
    op.create_index("ix_results_rubric_current_evaluated_ts", "results", ["rubric", "evaluated_ts"], unique=False,
                    sqlite_where=current, postgresql_where=current)
    op.create_table("shadow_results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("candidate", sa.String(length=256), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("active_result_id", sa.Integer(), nullable=True),
        sa.Column("labelled", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("evaluated_ts", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("candidate", "conversation_id", "rubric", name="uq_shadow_result")
    )


def downgrade() -> None:
    op.drop_table("shadow_results")
    op.drop_index("ix_results_rubric_current_evaluated_ts", table_name="results")
    op.drop_index("ix_review_conversations_stored_ts", table_name="review_conversations")
    op.drop_table("review_conversations")
    op.drop_index("ix_review_labels_result_id", table_name="review_labels")
    op.drop_index("ix_review_labels_labelled_ts", table_name="review_labels")
    op.drop_table("review_labels")
    op.drop_index("ix_review_queue_evaluated_ts", table_name="review_queue")
    op.drop_index("ix_review_queue_rubric_day", table_name="review_queue")
    op.drop_table("review_queue")
