"""The schema of release 0.1.0: spans, conversations, checkpoints, results, dimensions, judge failures and usage,
adaptive items.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table("adaptive_items",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key")
    )
    op.create_table("checkpoints",
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("source")
    )
    op.create_table("conversations",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("first_span_ts", sa.Float(), nullable=False),
        sa.Column("last_span_ts", sa.Float(), nullable=False),
        sa.Column("span_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("scored_ts", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("key")
    )
    op.create_index("ix_conversations_status", "conversations", ["status"], unique=False)
    op.create_table("judge_failures",
        sa.Column("conversation_key", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_key", "rubric", "revision")
    )
    op.create_table("judge_usage_daily",
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("usd", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("rubric", "day")
    )
    op.create_table("result_dimensions",
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("dimension", sa.String(length=128), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("score", sa.Integer(), nullable=False),
        sa.Column("current", sa.Boolean(), nullable=False),
        sa.Column("evaluated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("result_id", "dimension")
    )
    op.create_index("ix_result_dimensions_evaluated_ts", "result_dimensions", ["evaluated_ts"], unique=False)
    op.create_table("results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("turn_key", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("current", sa.Boolean(), nullable=False),
        sa.Column("agent", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("evaluated_ts", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("conversation_id", "rubric", "rubric_version", "turn_key", "revision", name="uq_result")
    )
    op.create_index("ix_results_conversation_id", "results", ["conversation_id"], unique=False)
    op.create_index("ix_results_current", "results", ["current"], unique=False)
    op.create_index("ix_results_evaluated_ts", "results", ["evaluated_ts"], unique=False)
    op.create_table("spans",
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("span_id", sa.Text(), nullable=False),
        sa.Column("conversation_key", sa.Text(), nullable=False),
        sa.Column("start_ts", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "span_id")
    )
    op.create_index("ix_spans_conversation_key", "spans", ["conversation_key"], unique=False)
    op.create_table("trace_conversations",
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("conversation_key", sa.Text(), nullable=False),
        sa.Column("from_conversation_id", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id")
    )


def downgrade() -> None:
    for table in ("trace_conversations", "spans", "results", "result_dimensions", "judge_usage_daily",
                  "judge_failures", "conversations", "checkpoints", "adaptive_items"):
        op.drop_table(table)
