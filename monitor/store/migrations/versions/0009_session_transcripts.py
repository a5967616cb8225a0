"""Sessions across traces: the transcript hash of each trace (``trace_transcripts``), so a trace without a
conversation id that extends another conversation joins it, and ``conversations.awaiting_tool_result``, so a
conversation paused on a tool call waits for its result.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "trace_transcripts",
        sa.Column("trace_id", sa.Text(), primary_key=True),
        sa.Column("tail_hash", sa.Text(), nullable=False),
        sa.Column("conversation_key", sa.Text(), nullable=False),
    )
    op.create_index("ix_trace_transcripts_tail_hash", "trace_transcripts", ["tail_hash"], unique=False)
    op.create_index("ix_trace_transcripts_conversation_key", "trace_transcripts", ["conversation_key"],
                    unique=False)
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("awaiting_tool_result", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("awaiting_tool_result")
    op.drop_index("ix_trace_transcripts_conversation_key", table_name="trace_transcripts")
    op.drop_index("ix_trace_transcripts_tail_hash", table_name="trace_transcripts")
    op.drop_table("trace_transcripts")
