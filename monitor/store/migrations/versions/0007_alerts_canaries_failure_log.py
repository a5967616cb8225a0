"""Regression alerts (alert states, events, notification outbox; judge model, prompt and agent version and the
unscored reason on results), judge canary runs and the judge failure log.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table("alert_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key")
    )
    op.create_index("ix_alert_events_ts", "alert_events", ["ts"], unique=False)
    op.create_table("alert_states",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key")
    )
    op.create_table("canary_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("rubric_version", sa.Text(), nullable=False),
        sa.Column("judge_model", sa.Text(), nullable=False),
        sa.Column("ran_ts", sa.Float(), nullable=False),
        sa.Column("judged", sa.Integer(), nullable=False),
        sa.Column("agreement", sa.Float(), nullable=False),
        sa.Column("score_shift", sa.Float(), nullable=False),
        sa.Column("drift", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id")
    )
    op.create_index("ix_canary_runs_rubric", "canary_runs", ["rubric"], unique=False)
    op.create_table("judge_failure_log",
        sa.Column("conversation_key", sa.Text(), nullable=False),
        sa.Column("rubric", sa.String(length=256), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at_ts", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_key", "rubric", "revision", "attempt")
    )
    op.create_table("notification_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("notifier", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id")
    )
    op.create_index("ix_notification_outbox_status", "notification_outbox", ["status"], unique=False)
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("judge_model", sa.Text(), nullable=True))
        batch.add_column(sa.Column("prompt_version", sa.Text(), nullable=True))
        batch.add_column(sa.Column("agent_version", sa.Text(), nullable=True))
        batch.add_column(sa.Column("unscored_reason", sa.Text(), nullable=True))
    # Results stored before carry these in their JSON payload: copy them into the new columns, so regression
    # alerts compare them by judge model like new ones.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE results SET judge_model = payload::json->>'judge_model', "
                   "unscored_reason = payload::json->>'unscored_reason'")
    else:
        op.execute("UPDATE results SET judge_model = json_extract(payload, '$.judge_model'), "
                   "unscored_reason = json_extract(payload, '$.unscored_reason')")


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        for column in ("unscored_reason", "agent_version", "prompt_version", "judge_model"):
            batch.drop_column(column)
    op.drop_index("ix_notification_outbox_status", table_name="notification_outbox")
    op.drop_table("notification_outbox")
    op.drop_table("judge_failure_log")
    op.drop_index("ix_canary_runs_rubric", table_name="canary_runs")
    op.drop_table("canary_runs")
    op.drop_table("alert_states")
    op.drop_index("ix_alert_events_ts", table_name="alert_events")
    op.drop_table("alert_events")
