"""The store's tables (SQLAlchemy Core). Migrations (``monitor/store/migrations``) create exactly these: a test
compares the migrated schema with this metadata on both backends.

Times are UTC epoch seconds (floats): exact to compare on every backend, no naive datetimes anywhere.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

metadata = MetaData()

spans_table = Table(
    "spans", metadata,
    # Span ids are unique only within their trace.
    Column("trace_id", Text, primary_key=True),
    Column("span_id", Text, primary_key=True),
    Column("conversation_key", Text, nullable=False, index=True),
    Column("start_ts", Float, nullable=False),
    Column("payload", Text, nullable=False),
)
traces_table = Table(
    "trace_conversations", metadata,
    Column("trace_id", Text, primary_key=True),
    Column("conversation_key", Text, nullable=False),
    Column("from_conversation_id", Boolean, nullable=False),
)
trace_transcripts_table = Table(
    "trace_transcripts", metadata,
    # A trace's complete transcript at its last model call, as a hash (``TraceTranscript.tail``): a later trace
    # of the same session whose first model input extends it joins its conversation (sessions without an id).
    Column("trace_id", Text, primary_key=True),
    Column("tail_hash", Text, nullable=False, index=True),
    Column("conversation_key", Text, nullable=False, index=True),
)
conversations_table = Table(
    "conversations", metadata,
    Column("key", Text, primary_key=True),
    Column("first_span_ts", Float, nullable=False),
    Column("last_span_ts", Float, nullable=False),
    Column("span_count", Integer, nullable=False),
    Column("status", String(16), nullable=False, index=True),  # pending | scored | pruned (scored, spans deleted)
    Column("revision", Integer, nullable=False),
    Column("scored_ts", Float),
    # Replicas on one PostgreSQL: the replica judging this conversation, until when (a lease it renews while
    # judging; a dead replica's claims expire and another takes them over).
    Column("claimed_by", Text),
    Column("claim_expires_ts", Float),
    # Its newest model call ended on a tool call whose result has not arrived: ready only after the idle
    # timeout and the tool-result grace (the agent is still working, not finished).
    Column("awaiting_tool_result", Boolean, nullable=False, server_default=false()),
)
checkpoints_table = Table(
    "checkpoints", metadata,
    Column("source", String(64), primary_key=True),
    Column("checkpoint", Text, nullable=False),
    Column("updated_ts", Float, nullable=False),
)
results_table = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Text, nullable=False, index=True),
    Column("rubric", String(256), nullable=False),
    Column("rubric_version", Text, nullable=False),
    Column("turn_key", Integer, nullable=False),  # -1 for a whole-conversation verdict
    Column("revision", Integer, nullable=False),
    Column("current", Boolean, nullable=False),
    Column("agent", Text, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("score", Float),
    Column("evaluated_ts", Float, nullable=False, index=True),
    Column("payload", Text, nullable=False),  # the whole EvaluationResult as JSON
    # Regression alerts compare results only within one (rubric version, judge model, prompt version), and by agent
    # version for release regressions; unscored_reason tells judge errors from other unscored results.
    Column("judge_model", Text),
    Column("prompt_version", Text),
    Column("agent_version", Text),
    Column("unscored_reason", Text),
    UniqueConstraint("conversation_id", "rubric", "rubric_version", "turn_key", "revision", name="uq_result"),
)
# The current results of a time range (the alert windows read theirs every cycle, examples and ``results`` newest
# first): a partial index holds only current ones, and the id is in every index entry, so reading the ids of a range
# never reads the table. A query uses it when it says ``current IS true`` as the index does (``current.is_(True)``).
CURRENT_BY_TIME = Index("ix_results_current_evaluated_ts", results_table.c.evaluated_ts,
                        sqlite_where=results_table.c.current.is_(True),
                        postgresql_where=results_table.c.current.is_(True))
dimensions_table = Table(
    "result_dimensions", metadata,
    Column("result_id", Integer, primary_key=True),
    Column("dimension", String(128), primary_key=True),
    Column("rubric", String(256), nullable=False),
    Column("rubric_version", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("score", Integer, nullable=False),
    Column("current", Boolean, nullable=False),
    Column("evaluated_ts", Float, nullable=False, index=True),
)
failures_table = Table(
    "judge_failures", metadata,
    Column("conversation_key", Text, primary_key=True),
    Column("rubric", String(256), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("attempts", Integer, nullable=False),
)
failure_log_table = Table(
    "judge_failure_log", metadata,
    Column("conversation_key", Text, primary_key=True),
    Column("rubric", String(256), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("at_ts", Float, nullable=False),
    Column("error", Text, nullable=False),
    Column("calls", Integer, nullable=False),
)
usage_table = Table(
    "judge_usage_daily", metadata,
    Column("rubric", String(256), primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("tokens", Integer, nullable=False),
    Column("usd", Float, nullable=False),
)

# Regression alerts (monitor/alerts/store.py): lifecycle state per alert key, the events it emitted (transitions and
# annotations, unique by key so a restart never emits one twice) and the notification outbox (one row per event and
# notifier, marked when delivered, so a restart neither re-sends nor forgets).
alert_states_table = Table(
    "alert_states", metadata,
    Column("key", Text, primary_key=True),
    Column("payload", Text, nullable=False),
    Column("updated_ts", Float, nullable=False),
)
alert_events_table = Table(
    "alert_events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", Text, nullable=False, unique=True),
    Column("kind", String(16), nullable=False),  # firing | resolved | annotation | test
    Column("ts", Float, nullable=False, index=True),
    Column("payload", Text, nullable=False),
)
notification_outbox_table = Table(
    "notification_outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", Integer, nullable=False),
    Column("notifier", String(128), nullable=False),
    Column("status", String(16), nullable=False, index=True),  # pending | sent | failed | silenced
    Column("attempts", Integer, nullable=False),
    Column("updated_ts", Float, nullable=False),
)
rollups_table = Table(
    "quality_rollups", metadata,
    # Hourly sums of current results, kept in the transaction that records a result, so a rolling window is a
    # sum over a few hundred rows per series instead of a scan of every result in it. The bucket leads the key:
    # reading one hour, or pruning old ones, is a range of the primary key.
    Column("bucket_ts", Integer, primary_key=True),  # epoch seconds of the hour's start (UTC)
    Column("rubric", String(256), primary_key=True),
    Column("rubric_version", Text, primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("dimension", String(128), primary_key=True),  # "" for the overall verdict, else a dimension id
    Column("scored", Integer, nullable=False),  # scored results (overall row) or applicable scores (dimension row)
    Column("passed", Integer, nullable=False),  # overall row only
    Column("unscored", Integer, nullable=False),  # overall row only
    Column("score_sum", Float, nullable=False),  # overall score (0..1) or dimension score (1..5) sum
    # On SQLite the primary key is the table (one b-tree to update per row instead of a table and an index).
    sqlite_with_rowid=False,
)

items_table = Table(
    "adaptive_items", metadata,
    Column("key", String(128), primary_key=True),
    Column("payload", Text, nullable=False),
    Column("created_ts", Float, nullable=False),
)

# Retention (monitor/store/retention.py): results older than ``retention.results_days`` are folded into these daily
# aggregates, then deleted: what the dashboards and regression baselines need of old results (counts by outcome,
# score sums, the distribution of each dimension's scores), at a size that grows with days, not evaluations.
compacted_results_table = Table(
    "compacted_results", metadata,
    Column("day_ts", Integer, primary_key=True),  # epoch seconds of the UTC day's start
    Column("rubric", String(256), primary_key=True),
    Column("rubric_version", Text, primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("outcome", String(16), primary_key=True),
    Column("count", Integer, nullable=False),
    Column("score_sum", Float, nullable=False),
)
compacted_dimensions_table = Table(
    "compacted_dimensions", metadata,
    Column("day_ts", Integer, primary_key=True),
    Column("rubric", String(256), primary_key=True),
    Column("rubric_version", Text, primary_key=True),
    Column("agent", Text, primary_key=True),
    Column("dimension", String(128), primary_key=True),
    Column("score", Integer, primary_key=True),  # 1..5
    Column("count", Integer, nullable=False),
)

# Write-back (monitor/writeback.py): one row per result still to be emitted as an OpenTelemetry event, inserted in
# the transaction that records the result (so no result is missed, whatever order replicas commit in) and deleted
# once the exporter acknowledged it.
outbox_table = Table(
    "writeback_outbox", metadata,
    Column("result_id", Integer, primary_key=True),
    Column("attempts", Integer, nullable=False),
    Column("created_ts", Float, nullable=False),
)

# Backfill jobs (monitor/backfill.py): progress and judge spend of each (rubric, version, window), so a resumed job
# keeps its budget.
backfill_jobs_table = Table(
    "backfill_jobs", metadata,
    Column("job", Text, primary_key=True),
    Column("rubric", String(256), nullable=False),
    Column("rubric_version", Text, nullable=False),
    Column("since_ts", Float, nullable=False),
    Column("until_ts", Float, nullable=False),
    Column("total", Integer, nullable=False),
    Column("done", Integer, nullable=False),
    Column("spent_usd", Float, nullable=False),
    Column("max_cost_usd", Float, nullable=False),  # the dearest evaluation so far: the next may cost as much
    Column("status", String(16), nullable=False),
    Column("updated_ts", Float, nullable=False),
)

canary_runs_table = Table(
    "canary_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rubric", String(256), nullable=False, index=True),
    Column("rubric_version", Text, nullable=False),
    Column("judge_model", Text, nullable=False),
    Column("ran_ts", Float, nullable=False),
    Column("judged", Integer, nullable=False),
    Column("agreement", Float, nullable=False),
    Column("score_shift", Float, nullable=False),
    Column("drift", Boolean, nullable=False),
)

# Review (monitor/review/): the verdicts set aside for people each day and why (one row per result: a uniform pick
# wins over the other reasons, so the uniform share stays an unbiased sample), people's labels (one per
# evaluation and reviewer; the result they saw is kept, the evaluation survives re-scoring), and shadow verdicts
# (a candidate rubric version, judge model or prompt version): kept apart from ``results``, so they never reach
# quality metrics or alerts.
review_queue_table = Table(
    "review_queue", metadata,
    Column("result_id", Integer, primary_key=True),
    Column("rubric", String(256), nullable=False),
    Column("agent", Text, nullable=False),
    Column("day", String(10), nullable=False),  # UTC day the verdict was picked for (YYYY-MM-DD)
    Column("reason", String(16), nullable=False),  # uniform | failing | borderline | flagged
    Column("evaluated_ts", Float, nullable=False),
    Index("ix_review_queue_rubric_day", "rubric", "day"),
    Index("ix_review_queue_evaluated_ts", "evaluated_ts"),
)
review_labels_table = Table(
    "review_labels", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Text, nullable=False),
    Column("rubric", String(256), nullable=False),
    Column("reviewer", String(256), nullable=False),
    Column("result_id", Integer),  # the verdict labelled; None for a label imported for a conversation not stored
    Column("passed", Boolean, nullable=False),
    Column("score", Float),  # 0..1, when the label carries one (imported sets)
    Column("dimensions", Text, nullable=False),  # JSON {dimension: 1..5 or null for not applicable}
    Column("note", Text, nullable=False),
    Column("labelled_ts", Float, nullable=False, index=True),
    UniqueConstraint("conversation_id", "rubric", "reviewer", name="uq_review_label"),
    Index("ix_review_labels_result_id", "result_id"),
)
# The review page's copy of a conversation as assembled from its spans (assembling a long conversation again on
# every view would cost far more than the page: its spans repeat the history). Taken when a verdict is queued or
# first shown, taken again when the conversation gained spans, and still shown once the spans are pruned.
review_conversations_table = Table(
    "review_conversations", metadata,
    Column("conversation_id", Text, primary_key=True),
    Column("span_count", Integer, nullable=False),
    Column("payload", Text, nullable=False),  # the Conversation as JSON
    Column("stored_ts", Float, nullable=False, index=True),  # pruned after retention.conversations_days
)
# The review page lists one rubric's current results newest first, a page at a time, at millions of rows.
CURRENT_BY_RUBRIC_TIME = Index("ix_results_rubric_current_evaluated_ts", results_table.c.rubric,
                               results_table.c.evaluated_ts, sqlite_where=results_table.c.current.is_(True),
                               postgresql_where=results_table.c.current.is_(True))
shadow_results_table = Table(
    "shadow_results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("candidate", String(256), nullable=False),  # the shadow configuration's name
    Column("conversation_id", Text, nullable=False),
    Column("rubric", String(256), nullable=False),
    Column("active_result_id", Integer),  # the active verdict it is compared with
    Column("labelled", Boolean, nullable=False),  # judged because people labelled it (else a live sample)
    Column("outcome", String(16), nullable=False),
    Column("score", Float),
    Column("evaluated_ts", Float, nullable=False),
    Column("payload", Text, nullable=False),
    UniqueConstraint("candidate", "conversation_id", "rubric", name="uq_shadow_result"),
)
