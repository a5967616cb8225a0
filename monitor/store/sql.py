"""The store on SQLAlchemy Core: SQLite by default, PostgreSQL in production.

Times are stored as UTC epoch seconds (floats): exact to compare on every backend, no naive datetimes anywhere.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    Integer,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    create_engine,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

import monitor.store.retention as retention
from monitor.assemble import TraceTranscript, conversation_key, trace_transcript
from monitor.errors import StoreError
from monitor.formats.genai import ReadCache
from monitor.models import EvaluationResult, SpanRecord, utc_now
from monitor.store.base import (
    BUCKET_SECONDS,
    Backlog,
    CanaryRun,
    FailedAttempt,
    LatePolicy,
    PendingConversation,
    RetentionPolicy,
    RollupChanges,
    RollupKey,
    RollupSums,
    StoredSpans,
    bucket_of,
)
from monitor.store.migrate import MigrateMode
from monitor.store.migrate import prepare as prepare_schema
from monitor.store.tables import (
    backfill_jobs_table,
    canary_runs_table,
    checkpoints_table,
    conversations_table,
    dimensions_table,
    failure_log_table,
    failures_table,
    items_table,
    outbox_table,
    results_table,
    rollups_table,
    spans_table,
    trace_transcripts_table,
    traces_table,
    usage_table,
)

_CHUNK = 500
_CONFLICT_ATTEMPTS = 3
_T = TypeVar("_T")
log = logging.getLogger(__name__)
_ROLLUP_ARRAYS = ("rollup_buckets", "rollup_rubrics", "rollup_versions", "rollup_agents", "rollup_dimensions",
                  "rollup_scored", "rollup_passed", "rollup_unscored", "rollup_score_sums")
"""Parameters of the one-statement record (``_record_statement``): the rollup rows' columns, as arrays."""
_MAX_LATE_CHANGES = 50_000
"""Rollup changes to past hours kept for ``drain_rollup_changes``; beyond it the reader is told to reload."""


_UPSERT_TRANSCRIPTS = (
    "INSERT INTO trace_transcripts (trace_id, tail_hash, conversation_key) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) "
    "ON CONFLICT (trace_id) DO UPDATE SET tail_hash = excluded.tail_hash, conversation_key = excluded.conversation_key")
_UPDATE_CONVERSATIONS = (
    "UPDATE conversations SET first_span_ts = v.first, last_span_ts = v.last, span_count = v.count, "
    "awaiting_tool_result = v.waits "
    "FROM unnest(%s::text[], %s::float8[], %s::float8[], %s::integer[], %s::boolean[]) "
    "AS v(k, first, last, count, waits) "
    "WHERE conversations.key = v.k")
"""``SqlStore._write_rows`` on PostgreSQL: a batch's transcripts and conversation updates, one statement each."""


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for a name (the same in every replica and release)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _text(value: str) -> str:
    """PostgreSQL text cannot hold NUL characters; ids that carry one are stored with U+FFFD instead."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _clean_ids(span: SpanRecord) -> SpanRecord:
    if "\x00" not in span.trace_id + span.span_id:
        return span
    return span.model_copy(update={"trace_id": _text(span.trace_id), "span_id": _text(span.span_id)})


def _joined(tails: Mapping[str, list[tuple[str, str]]], trace_id: str, transcript: TraceTranscript) -> str | None:
    """The conversation whose complete transcript ``transcript``'s first model input extends (another trace's,
    among ``tails``: tail hash → [(conversation key, trace id)]): the longest match, and of equal ones the first
    key in order, so every replica joins a trace to the same conversation."""
    for head in reversed(transcript.heads):
        keys = [key for key, owner in tails.get(head, ()) if owner != trace_id]
        if keys:
            return min(keys)
    return None


SKELETON_ATTRIBUTES = frozenset({
    "gen_ai.conversation.id", "gen_ai.thread.id", "gen_ai.operation.name", "gen_ai.response.id",
    "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.agent.version", "gen_ai.request.model", "gen_ai.response.model",
    "gen_ai.provider.name", "gen_ai.system", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
})
"""What a scored conversation's spans keep with ``store.drop_span_content``: identity, model and usage, no text."""


def span_skeleton(span: SpanRecord) -> SpanRecord:
    """``span`` without its messages, tool calls, events or any other attribute that may hold text."""
    return span.model_copy(update={
        "attributes": {k: v for k, v in span.attributes.items() if k in SKELETON_ATTRIBUTES},
        "events": (), "truncated_keys": (),
    })


def _ts(value: datetime) -> float:
    return value.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _add_to_rollup(rollup: dict[tuple[int, RollupKey], RollupSums], ts: float, rubric: str, version: str,
                   agent: str, outcome: str, score: float | None, dimension_scores: Sequence[tuple[str, int]],
                   sign: int) -> None:
    """Add (sign 1) or take out (sign -1) one result's share of its hour's rollup rows."""
    bucket = bucket_of(ts)

    def add(dimension: str, scored: int, passed: int, unscored: int, total: float) -> None:
        old = rollup.get((bucket, (rubric, version, agent, dimension)), (0, 0, 0, 0.0))
        rollup[(bucket, (rubric, version, agent, dimension))] = (
            old[0] + sign * scored, old[1] + sign * passed, old[2] + sign * unscored, old[3] + sign * total)

    if outcome == "unscored":
        add("", 0, 0, 1, 0.0)
        return
    add("", 1, int(outcome == "pass"), 0, score or 0.0)
    for dimension, value in dimension_scores:
        add(dimension, 1, 0, 0, float(value))


def _create_owner_only(url: str) -> None:
    """Create a SQLite file that does not exist yet, and its missing directory, readable by its owner only (0600,
    0700): it holds transcripts and verdicts, and SQLite would create it under the umask (0644). SQLite gives its
    journal files the database file's permissions. Existing files and other databases are left alone."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return
    path = Path(database)
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:  # created meanwhile by another process: theirs to set
        pass


class SqlStore:
    """``ResultStore`` over any SQLAlchemy URL. An empty database is created at the newest schema revision; one
    behind it is upgraded with ``migrate="auto"``, else refused (``SchemaBehind``, see ``monitor.store.migrate``)."""

    def __init__(self, url: str, migrate: MigrateMode = "auto", *, tool_result_grace_seconds: float = 0.0) -> None:
        self.url = url
        self.tool_result_grace_seconds = tool_result_grace_seconds
        """How much longer than the idle timeout a conversation paused on a tool call waits for its result."""
        self.clock: Callable[[], datetime] = utc_now
        self.outbox_enabled = False
        self.drop_span_content = False
        """Strip the spans of a conversation to ``span_skeleton`` once it is scored (``store.drop_span_content``)."""
        self.defer_span_stripping = False
        """Leave the stripping to ``strip_scored_spans``: the review queue keeps its (redacted) copies of the
        conversations it takes first, after the cycle scored them."""
        """Queue every recorded result for write-back (``writeback.kind`` is not ``off``)."""
        """When a row is stamped (scored, cached, checkpointed): a simulated clock in the retention soak."""
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite") and (url.endswith(":memory:") or url in ("sqlite://", "sqlite+pysqlite://")):
            # One shared connection, or every new connection would see a new, empty database.
            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        else:
            _create_owner_only(url)
        self._rollup_lock = threading.RLock()
        self._late_changes: list[tuple[int, RollupKey, RollupSums]] = []
        self._late_overflow = False
        try:
            self._engine = create_engine(url, future=True, **kwargs)
            prepare_schema(self._engine, migrate, f"store {self._safe_url()}")
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._safe_url()}: {exc}") from exc
        self._one_statement = self._engine.dialect.name == "postgresql"
        """Record a result in one statement (``_insert_result``)."""

    def _safe_url(self) -> str:
        return self._engine.url.render_as_string(hide_password=True) if hasattr(self, "_engine") else "(invalid)"

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self._engine.begin() as conn:
                yield conn
        except IntegrityError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._safe_url()}: {exc}") from exc

    def transaction(self) -> AbstractContextManager[Connection]:
        """A transaction for the tables of other features on the same database (regression alerts)."""
        return self._tx()

    # ① checkpoints and spans -----------------------------------------------------------------------------------

    def checkpoint(self, source: str) -> str | None:
        with self._tx() as conn:
            row = conn.execute(select(checkpoints_table.c.checkpoint).where(checkpoints_table.c.source == source))
            value = row.scalar_one_or_none()
        return value

    # A source's read-through instant rides in the checkpoints table under a name no source has (sources are named
    # by the code: otlp_file, app_insights), so replicas that do not poll learn what the poller has read in full.
    @staticmethod
    def _read_through_key(source: str) -> str:
        return f"{source}#read_through"

    def read_through(self, source: str) -> datetime | None:
        value = self.checkpoint(self._read_through_key(source))
        return datetime.fromisoformat(value) if value else None

    def save_read_through(self, source: str, at: datetime) -> None:
        with self._tx() as conn:
            self._save_checkpoint(conn, self._read_through_key(source), at.isoformat())

    def _retrying(self, what: str, write: Callable[[], _T]) -> _T:
        """Run a write transaction again when another replica inserted the same row first (the loser's
        transaction is rolled back whole; run again, it sees the winner's row)."""
        for _ in range(_CONFLICT_ATTEMPTS - 1):
            try:
                return write()
            except IntegrityError as exc:
                log.info("store: %s conflicted with another writer (%s); trying again", what, exc.orig)
        try:
            return write()
        except IntegrityError as exc:
            raise StoreError(f"store {self._safe_url()}: {what}: {exc.orig}") from exc

    def poller_lock(self, source: str) -> AbstractContextManager[bool]:
        """True for the one replica that may read ``source`` now; False for the others, which skip the pull."""
        return self.singleton_lock(f"poll:{source}")

    @contextmanager
    def singleton_lock(self, name: str) -> Iterator[bool]:
        """True inside the block for one replica at a time (a PostgreSQL session advisory lock, released when the
        block ends or the replica's connection dies); False for the others, which skip the work."""
        if self._engine.dialect.name != "postgresql":
            yield True  # SQLite: one replica per file (see monitor.store.replicas)
            return
        key = _lock_key(name)
        try:
            conn = self._engine.connect()
            held = bool(conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar())
            conn.commit()
        except SQLAlchemyError as exc:
            raise StoreError(f"store {self._safe_url()}: {exc}") from exc
        try:
            yield held
        finally:
            try:
                if held:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                    conn.commit()
                conn.close()
            except SQLAlchemyError:
                conn.invalidate()  # closing the session for real releases its advisory locks
                conn.close()

    def add_spans(
        self, source: str, spans: Sequence[SpanRecord], checkpoint: str, late_turns: LatePolicy
    ) -> StoredSpans:
        return self._retrying(f"storing spans of {source}",
                              lambda: self._add_spans(source, spans, checkpoint, late_turns))

    def _add_spans(
        self, source: str, spans: Sequence[SpanRecord], checkpoint: str, late_turns: LatePolicy
    ) -> StoredSpans:
        unique = {(s.trace_id, s.span_id): s for s in map(_clean_ids, spans)}
        with self._tx() as conn:
            existing = self._existing_spans(conn, list(unique))
            new = [s for ids, s in unique.items() if ids not in existing]
            by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
            for span in new:
                by_trace[span.trace_id].append(span)
            # Oldest first: a later trace of a session may join the conversation an earlier one of this batch began.
            ordered = sorted(by_trace.items(), key=lambda item: min((s.start_time, s.span_id) for s in item[1]))
            # One read cache for the batch: the traces of a session repeat its history in every model input.
            cache = ReadCache()
            transcripts = {trace: trace_transcript(group, cache) for trace, group in ordered}
            keys = self._conversation_keys(conn, ordered, transcripts)
            if new:
                self._insert_rows(conn, spans_table, [
                    {"span_id": s.span_id, "trace_id": s.trace_id, "conversation_key": keys[s.trace_id],
                     "start_ts": _ts(s.start_time), "payload": s.model_dump_json()}
                    for s in new
                ])
            per_key: dict[str, list[SpanRecord]] = defaultdict(list)
            for trace, group in by_trace.items():
                per_key[keys[trace]].extend(group)
            outcomes = self._touch_conversations(conn, per_key, late_turns, self._awaiting(by_trace, transcripts, keys))
            self._save_checkpoint(conn, source, checkpoint)
        return StoredSpans(new=len(new), duplicates=len(spans) - len(new), late_ignored=outcomes["late_ignored"],
                           reopened=outcomes["reopened"])

    def _insert_rows(self, conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
        """Insert rows (every one with the same keys): on PostgreSQL with COPY, one round trip and a fraction of the
        client CPU of an INSERT per row (psycopg's executemany sends one per row), which is what the OTLP receiver's
        throughput rests on; elsewhere with one executemany INSERT."""
        if not rows:
            return
        driver = conn.connection.driver_connection
        if not self._one_statement or self._engine.dialect.driver != "psycopg" or driver is None:
            conn.execute(insert(table), rows)
            return
        import psycopg

        columns = tuple(rows[0])
        pick = operator.itemgetter(*columns)  # a tuple of the row's values in column order (two columns or more)
        values = pick if len(columns) > 1 else lambda row: (pick(row),)
        statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
        try:
            with driver.cursor() as cursor, cursor.copy(statement) as copy:
                for row in rows:
                    copy.write_row(values(row))
        except psycopg.errors.IntegrityError as exc:
            # Another writer stored one of these rows first: the whole transaction is run again (``_retrying``).
            raise IntegrityError(statement, None, exc) from exc

    def _write_rows(self, conn: Connection, statement: Any, rows: list[dict[str, Any]], over_arrays: str) -> None:
        """Run ``statement`` for every row (all with the same keys). On PostgreSQL ``over_arrays`` instead: the same
        write as one statement over an array per column (``unnest``, its ``%s`` in the rows' key order), so a batch
        costs one round trip however many rows it has."""
        if not rows:
            return
        if not self._one_statement or self._engine.dialect.driver != "psycopg":
            conn.execute(statement, rows)
            return
        conn.exec_driver_sql(over_arrays, tuple([row[column] for row in rows] for column in rows[0]))

    def _touch_conversations(self, conn: Connection, per_key: dict[str, list[SpanRecord]],
                             late_turns: LatePolicy, awaiting: dict[str, bool]) -> Counter[str]:
        """The conversations of a batch's spans touched, every key at once: one look-up, one insert of the new
        conversations, one statement updating the pending ones; the outcomes counted."""
        outcomes: Counter[str] = Counter()
        c = conversations_table.c
        rows = {str(row["key"]): row for row in self._rows_among(conn, self._conversations_among, list(per_key))}
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        for key, group in per_key.items():
            row = rows.get(key)
            if row is not None and row["status"] != "pending":
                outcomes[self._touch_scored(conn, row, group, late_turns, awaiting.get(key))] += 1
                continue
            first = min(_ts(s.start_time) for s in group)
            last = max(_ts(s.end_time or s.start_time) for s in group)
            if row is None:
                inserts.append({"key": key, "first_span_ts": first, "last_span_ts": last, "span_count": len(group),
                                "status": "pending", "revision": 0, "awaiting_tool_result": bool(awaiting.get(key))})
                outcomes["new"] += 1
                continue
            # The newest trace says whether the conversation waits for a tool result; an older one arriving late
            # does not.
            newest = key in awaiting and last >= row["last_span_ts"]
            waits = awaiting[key] if newest else row["awaiting_tool_result"]
            updates.append({"k": key, "first": min(first, row["first_span_ts"]),
                            "last": max(last, row["last_span_ts"]), "count": row["span_count"] + len(group),
                            "waits": bool(waits)})
            outcomes["updated"] += 1
        self._insert_rows(conn, conversations_table, inserts)
        self._write_rows(conn, update(conversations_table).where(c.key == bindparam("k")).values(
            first_span_ts=bindparam("first"), last_span_ts=bindparam("last"), span_count=bindparam("count"),
            awaiting_tool_result=bindparam("waits")), updates, _UPDATE_CONVERSATIONS)
        return outcomes

    def _among(self, column: Any) -> ColumnElement[bool]:
        """``column`` among the values bound as ``among``: on PostgreSQL ``column = ANY(array)``, one statement text
        whatever the count, which the driver prepares once instead of parsing a new list of placeholders each
        time; elsewhere ``IN``."""
        if self._one_statement:
            return column == any_(bindparam("among", type_=postgresql.ARRAY(Text)))  # type: ignore[no-any-return]
        return column.in_(bindparam("among", expanding=True))  # type: ignore[no-any-return]

    @staticmethod
    def _rows_among(conn: Connection, query: Any, values: list[str]) -> Iterator[Any]:
        """The rows of ``query`` (a look-up built with ``_among``) for ``values``, a chunk at a time."""
        for start in range(0, len(values), _CHUNK):
            yield from conn.execute(query, {"among": values[start:start + _CHUNK]}).mappings()

    # The batch look-ups, built once: building a statement costs more client CPU than running it.

    @functools.cached_property
    def _spans_among(self) -> Any:
        return select(spans_table.c.trace_id, spans_table.c.span_id).where(self._among(spans_table.c.trace_id))

    @functools.cached_property
    def _traces_among(self) -> Any:
        return select(traces_table).where(self._among(traces_table.c.trace_id))

    @functools.cached_property
    def _conversations_among(self) -> Any:
        return select(conversations_table).where(self._among(conversations_table.c.key))

    @functools.cached_property
    def _transcripts_among(self) -> Any:
        t = trace_transcripts_table.c
        return select(t.tail_hash, t.conversation_key, t.trace_id).where(self._among(t.tail_hash))

    def _existing_spans(self, conn: Connection, ids: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (trace id, span id) pairs are stored already. Looked up by trace id, the leading column of the
        primary key, so the look-up reads the index and the spans of those traces only, however large the table
        (by span id alone, which no index leads with, it read the whole table for every batch)."""
        wanted = set(ids)
        traces = list(dict.fromkeys(trace_id for trace_id, _ in ids))
        stored = ((str(row["trace_id"]), str(row["span_id"])) for row in self._rows_among(conn, self._spans_among,
                                                                                            traces))
        return {pair for pair in stored if pair in wanted}

    def _conversation_keys(self, conn: Connection, ordered: list[tuple[str, list[SpanRecord]]],
                           transcripts: dict[str, TraceTranscript | None]) -> dict[str, str]:
        """The conversation each trace of a batch belongs to: the one its spans name (the assembler's rule), else
        the one whose complete transcript its first model input extends (a session without an id), else its own
        trace id. Traces met before are looked up one by one (their content may arrive late and move them); the
        new ones, almost every trace, with a few statements for the whole batch, so the receiver's commit costs
        about the same however many traces a batch holds."""
        names = [trace for trace, _ in ordered]
        stored = {str(row["trace_id"]): row for row in self._rows_among(conn, self._traces_among, names)}
        keys = {trace: self._stored_trace_key(conn, trace, group, transcripts[trace], stored[trace])
                for trace, group in ordered if trace in stored}
        fresh = [(trace, group) for trace, group in ordered if trace not in stored]
        named = {trace: _text(conversation_key(group)) for trace, group in fresh}
        unnamed = (transcripts[trace] for trace, _ in fresh if named[trace] == trace)
        heads = {head for transcript in unnamed if transcript is not None for head in transcript.heads}
        tails = self._tails(conn, list(heads))
        trace_rows: list[dict[str, Any]] = []
        transcript_rows: list[dict[str, Any]] = []
        for trace, _ in fresh:  # oldest first: a trace may join the conversation an earlier one of the batch began
            transcript = transcripts[trace]
            conversation_id = named[trace] if named[trace] != trace else None
            key = conversation_id or (transcript and _joined(tails, trace, transcript)) or trace
            keys[trace] = key
            trace_rows.append({"trace_id": trace, "conversation_key": key,
                               "from_conversation_id": conversation_id is not None})
            if transcript is not None and transcript.tail is not None:
                transcript_rows.append({"trace_id": trace, "tail_hash": transcript.tail, "conversation_key": key})
                tails[transcript.tail].append((key, trace))
        self._insert_rows(conn, traces_table, trace_rows)
        self._write_rows(conn, self._transcript_upsert, transcript_rows, _UPSERT_TRANSCRIPTS)
        return keys

    def _stored_trace_key(self, conn: Connection, trace_id: str, spans: list[SpanRecord],
                          transcript: TraceTranscript | None, row: Any) -> str:
        """``_conversation_keys`` for a trace stored before: the first span naming its conversation, or carrying its
        content (log records), may arrive in a later batch than the rest of the trace."""
        named = _text(conversation_key(spans))
        conversation_id = named if named != trace_id else None
        if row["from_conversation_id"] or conversation_id is None:
            key = str(row["conversation_key"])
            if conversation_id is None and key == trace_id:
                # Content may arrive after the trace was first stored (its log records in a later batch): the
                # transcript is the whole trace's.
                transcript = trace_transcript([*self._stored_trace(conn, trace_id), *spans])
                if transcript is not None:
                    joined = _joined(self._tails(conn, list(transcript.heads)), trace_id, transcript)
                    if joined is not None:
                        key = self._move_trace(conn, trace_id, key, joined, from_conversation_id=False)
        else:
            key = self._move_trace(conn, trace_id, str(row["conversation_key"]), conversation_id,
                                   from_conversation_id=True)
        if transcript is not None and transcript.tail is not None:
            self._write_rows(conn, self._transcript_upsert, [{"trace_id": trace_id, "tail_hash": transcript.tail,
                                                              "conversation_key": key}], _UPSERT_TRANSCRIPTS)
        return key

    def _tails(self, conn: Connection, heads: list[str]) -> defaultdict[str, list[tuple[str, str]]]:
        """The stored transcripts ending on one of ``heads``: tail hash → [(conversation key, trace id)]."""
        tails: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
        for row in self._rows_among(conn, self._transcripts_among, heads):
            tails[str(row["tail_hash"])].append((str(row["conversation_key"]), str(row["trace_id"])))
        return tails

    @functools.cached_property
    def _transcript_upsert(self) -> Any:
        """Record a trace's transcript, or replace the one recorded (built once, like ``_rollup_upsert``)."""
        t = trace_transcripts_table.c
        dialect = self._engine.dialect.name
        statement = (postgresql.insert(trace_transcripts_table) if dialect == "postgresql"
                     else sqlite.insert(trace_transcripts_table))
        return statement.on_conflict_do_update(
            index_elements=[t.trace_id],
            set_={"tail_hash": statement.excluded.tail_hash, "conversation_key": statement.excluded.conversation_key})

    def _move_trace(self, conn: Connection, trace_id: str, old_key: str, key: str, *,
                    from_conversation_id: bool) -> str:
        """Move a trace (keyed by ``old_key`` until now) to conversation ``key``; the key it ends under."""
        old = conn.execute(select(conversations_table).where(conversations_table.c.key == old_key)).mappings().first()
        if old is not None and old["status"] != "pending":
            # Scored already under its trace id: it stays there, and the late-turns policy applies to it.
            return old_key
        conn.execute(update(traces_table).where(traces_table.c.trace_id == trace_id)
                     .values(conversation_key=key, from_conversation_id=from_conversation_id))
        conn.execute(update(spans_table).where(spans_table.c.trace_id == trace_id).values(conversation_key=key))
        conn.execute(update(trace_transcripts_table).where(trace_transcripts_table.c.conversation_key == old_key)
                     .values(conversation_key=key))
        if old is not None:
            conn.execute(delete(conversations_table).where(conversations_table.c.key == old_key))
            self._merge_conversation(conn, key, old["first_span_ts"], old["last_span_ts"], old["span_count"])
        return key

    @staticmethod
    def _stored_trace(conn: Connection, trace_id: str) -> list[SpanRecord]:
        query = select(spans_table.c.payload).where(spans_table.c.trace_id == trace_id)
        return [SpanRecord.model_validate_json(p) for p in conn.execute(query).scalars()]

    @staticmethod
    def _awaiting(by_trace: dict[str, list[SpanRecord]], transcripts: dict[str, TraceTranscript | None],
                  keys: dict[str, str]) -> dict[str, bool]:
        """Per conversation touched: whether its newest trace of this batch (with content) ends on a tool call."""
        newest: dict[str, tuple[datetime, bool]] = {}
        for trace, group in by_trace.items():
            transcript = transcripts.get(trace)
            if transcript is None:
                continue
            end = max(s.end_time or s.start_time for s in group)
            key = keys[trace]
            if key not in newest or end >= newest[key][0]:
                newest[key] = (end, transcript.awaiting_tool_result)
        return {key: awaiting for key, (_, awaiting) in newest.items()}

    @staticmethod
    def _merge_conversation(conn: Connection, key: str, first: float, last: float, count: int) -> None:
        row = conn.execute(select(conversations_table).where(conversations_table.c.key == key)).mappings().first()
        if row is None:
            conn.execute(insert(conversations_table).values(
                key=key, first_span_ts=first, last_span_ts=last, span_count=count, status="pending", revision=0))
        else:
            conn.execute(update(conversations_table).where(conversations_table.c.key == key).values(
                first_span_ts=min(first, row["first_span_ts"]), last_span_ts=max(last, row["last_span_ts"]),
                span_count=row["span_count"] + count))

    @staticmethod
    def _touch_scored(conn: Connection, row: Any, spans: list[SpanRecord], late_turns: LatePolicy,
                      awaiting: bool | None) -> str:
        """``_touch_conversations`` for a conversation no longer pending (``row``, as read in this transaction):
        late spans reopen it (``late_turns: rescore``) or are ignored."""
        if late_turns == "ignore" or row["status"] == "pruned":
            # A pruned conversation's earlier spans are gone: re-scoring it would judge a fragment.
            return "late_ignored"
        first = min(_ts(s.start_time) for s in spans)
        last = max(_ts(s.end_time or s.start_time) for s in spans)
        values: dict[str, Any] = {
            "first_span_ts": min(first, row["first_span_ts"]),
            "last_span_ts": max(last, row["last_span_ts"]),
            "span_count": row["span_count"] + len(spans),
            "status": "pending", "revision": row["revision"] + 1, "scored_ts": None,
        }
        if awaiting is not None and last >= row["last_span_ts"]:
            values["awaiting_tool_result"] = awaiting
        conn.execute(update(conversations_table).where(conversations_table.c.key == row["key"]).values(**values))
        return "reopened"

    def _save_checkpoint(self, conn: Connection, source: str, checkpoint: str) -> None:
        now = self.clock().timestamp()
        updated = conn.execute(update(checkpoints_table).where(checkpoints_table.c.source == source)
                               .values(checkpoint=checkpoint, updated_ts=now))
        if updated.rowcount == 0:
            conn.execute(insert(checkpoints_table).values(source=source, checkpoint=checkpoint, updated_ts=now))

    # ② conversations -------------------------------------------------------------------------------------------

    def ready_conversations(self, idle_before: datetime, started_before: datetime,
                            limit: int | None = None,
                            after: tuple[datetime, str] | None = None) -> list[PendingConversation]:
        c = conversations_table.c
        query = (select(c.key, c.revision, c.first_span_ts, c.last_span_ts)
                 .where(c.status == "pending")
                 .where(self._ready(idle_before, started_before))
                 .order_by(c.first_span_ts, c.key)
                 .limit(limit))
        if after is not None:
            first, key = _ts(after[0]), after[1]
            query = query.where((c.first_span_ts > first) | ((c.first_span_ts == first) & (c.key > key)))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return [PendingConversation(r.key, r.revision, _dt(r.first_span_ts), _dt(r.last_span_ts)) for r in rows]

    def claim_ready(self, owner: str, lease_seconds: float, idle_before: datetime, started_before: datetime,
                    limit: int | None = None) -> list[PendingConversation]:
        c = conversations_table.c
        now = time.time()  # leases are wall-clock time shared by every replica, whatever clock a cycle runs on
        # A claim ends when it expires or its conversation is scored (``claimed_by`` then stays: who scored it).
        unclaimed = c.claim_expires_ts.is_(None) | (c.claim_expires_ts < now)
        # FOR UPDATE SKIP LOCKED: replicas claiming at the same moment each get different conversations, without
        # waiting for one another (SQLite, one replica, ignores it).
        query = (select(c.key, c.revision, c.first_span_ts, c.last_span_ts)
                 .where(c.status == "pending", self._ready(idle_before, started_before), unclaimed)
                 .order_by(c.first_span_ts, c.key)
                 .limit(limit)
                 .with_for_update(skip_locked=True, of=conversations_table))
        with self._tx() as conn:
            rows = conn.execute(query).all()
            keys = [r.key for r in rows]
            for start in range(0, len(keys), _CHUNK):
                conn.execute(update(conversations_table).where(c.key.in_(keys[start:start + _CHUNK]))
                             .values(claimed_by=owner, claim_expires_ts=now + lease_seconds))
        return [PendingConversation(r.key, r.revision, _dt(r.first_span_ts), _dt(r.last_span_ts)) for r in rows]

    def renew_claims(self, owner: str, keys: Sequence[str], lease_seconds: float) -> int:
        c = conversations_table.c
        renewed = 0
        with self._tx() as conn:
            for start in range(0, len(keys), _CHUNK):
                renewed += conn.execute(
                    update(conversations_table)
                    .where(and_(c.claimed_by == owner, c.key.in_(list(keys[start:start + _CHUNK]))))
                    .values(claim_expires_ts=time.time() + lease_seconds)).rowcount or 0
        return renewed

    def release_claims(self, owner: str | None) -> int:
        """Release the claims of ``owner`` on conversations still pending; ``None``: every replica's claims (only
        for a store that proves no other replica runs, such as a locked SQLite file)."""
        c = conversations_table.c
        owned = c.claimed_by == owner if owner is not None else c.claim_expires_ts.is_not(None)
        with self._tx() as conn:
            return conn.execute(update(conversations_table)
                                .where(and_(owned, c.status == "pending"))
                                .values(claim_expires_ts=None)).rowcount or 0

    def claims(self) -> dict[str, tuple[str, str | None]]:
        """Conversation key → (status, the replica that claimed it last): who judged what, for operators and
        tests."""
        c = conversations_table.c
        with self._tx() as conn:
            rows = conn.execute(select(c.key, c.status, c.claimed_by)).all()
        return {str(r.key): (str(r.status), r.claimed_by) for r in rows}

    def _ready(self, idle_before: datetime, started_before: datetime) -> ColumnElement[bool]:
        """Idle long enough (longer by the tool-result grace when paused on a tool call), or old enough."""
        c = conversations_table.c
        idle = _ts(idle_before)
        paused_idle = (c.awaiting_tool_result.is_(False)) | (c.last_span_ts <= idle - self.tool_result_grace_seconds)
        return ((c.last_span_ts <= idle) & paused_idle) | (c.first_span_ts <= _ts(started_before))

    def backlog(self, idle_before: datetime, started_before: datetime, future_after: datetime) -> Backlog:
        c = conversations_table.c
        pending = c.status == "pending"
        with self._tx() as conn:
            ready, oldest = conn.execute(select(func.count(), func.min(c.first_span_ts))
                                         .where(pending, self._ready(idle_before, started_before))).one()
            future = conn.execute(select(func.count()).where(pending, c.first_span_ts > _ts(future_after))
                                  ).scalar_one()
        return Backlog(int(ready), None if oldest is None else _dt(float(oldest)), int(future))

    def spans_of(self, key: str) -> list[SpanRecord]:
        query = (select(spans_table.c.payload).where(spans_table.c.conversation_key == key)
                 .order_by(spans_table.c.start_ts, spans_table.c.span_id))
        with self._tx() as conn:
            return [SpanRecord.model_validate_json(p) for p in conn.execute(query).scalars()]

    def mark_scored(self, key: str, revision: int) -> None:
        self.mark_scored_many([(key, revision)])

    def mark_scored_many(self, items: Sequence[tuple[str, int]]) -> None:
        c = conversations_table.c
        now = self.clock().timestamp()
        by_revision: dict[int, list[str]] = defaultdict(list)
        for key, revision in items:
            by_revision[revision].append(key)
        with self._tx() as conn:
            for revision, keys in by_revision.items():
                for start in range(0, len(keys), _CHUNK):
                    conn.execute(update(conversations_table)
                                 .where(c.key.in_(keys[start:start + _CHUNK]), c.revision == revision)
                                 .values(status="scored", scored_ts=now, claim_expires_ts=None))
                    if self.drop_span_content and not self.defer_span_stripping:
                        self._strip_spans(conn, keys[start:start + _CHUNK])

    def strip_scored_spans(self, scored_after: float, scored_until: float) -> int:
        """Strip the spans of the conversations scored in ``(scored_after, scored_until]`` (epoch seconds), when
        ``drop_span_content`` is on; returns how many conversations. Stripping twice is harmless."""
        if not self.drop_span_content:
            return 0
        c = conversations_table.c
        with self._tx() as conn:
            keys = [str(k) for k in conn.execute(select(c.key).where(
                c.status == "scored", c.scored_ts > scored_after, c.scored_ts <= scored_until)).scalars()]
            for start in range(0, len(keys), _CHUNK):
                self._strip_spans(conn, keys[start:start + _CHUNK])
        return len(keys)

    def _strip_spans(self, conn: Connection, keys: Sequence[str]) -> None:
        s = spans_table.c
        rows = conn.execute(select(s.trace_id, s.span_id, s.payload).where(s.conversation_key.in_(keys))).all()
        for trace_id, span_id, payload in rows:
            skeleton = span_skeleton(SpanRecord.model_validate_json(payload)).model_dump_json()
            if skeleton != payload:
                conn.execute(update(spans_table).where(s.trace_id == trace_id, s.span_id == span_id)
                             .values(payload=skeleton))

    # ④⑤ results -------------------------------------------------------------------------------------------------

    def has_result(self, conversation_id: str, rubric: str, rubric_version: str, revision: int) -> bool:
        c = results_table.c
        query = select(func.count()).where(and_(
            c.conversation_id == _text(conversation_id), c.rubric == rubric,
            c.rubric_version == _text(rubric_version), c.revision == revision))
        with self._tx() as conn:
            return bool(conn.execute(query).scalar_one())

    def recorded_turns(self, conversation_id: str, rubric: str, rubric_version: str, revision: int) -> set[int]:
        c = results_table.c
        query = select(c.turn_key).where(and_(
            c.conversation_id == _text(conversation_id), c.rubric == rubric,
            c.rubric_version == _text(rubric_version), c.revision == revision))
        with self._tx() as conn:
            return {int(turn) for turn in conn.execute(query).scalars()}

    def record(self, result: EvaluationResult) -> bool:
        c = results_table.c
        turn_key = -1 if result.turn_index is None else result.turn_index
        ts = _ts(result.evaluated_at)
        rubric_version, agent = _text(result.rubric_version), _text(result.agent)
        row = {
            "conversation_id": _text(result.conversation_id), "rubric": result.rubric,
            "rubric_version": rubric_version, "turn_key": turn_key, "revision": result.revision, "current": True,
            "agent": agent, "outcome": result.outcome, "score": result.score, "evaluated_ts": ts,
            "payload": result.model_dump_json(), "judge_model": _text(result.judge_model),
            "prompt_version": result.prompt_version,
            "agent_version": None if result.agent_version is None else _text(result.agent_version),
            "unscored_reason": None if result.unscored_reason is None else _text(result.unscored_reason),
        }
        scores = [(d.id, d.score) for d in result.dimension_scores
                  if d.applicable and d.score is not None and result.outcome != "unscored"]
        rollup: dict[tuple[int, RollupKey], RollupSums] = {}
        try:
            with self._rollup_lock, self._tx() as conn:
                if result.revision > 0:
                    superseded = and_(c.conversation_id == row["conversation_id"], c.rubric == result.rubric,
                                      c.turn_key == turn_key, c.revision < result.revision)
                    self._retract(conn, superseded, rollup)
                    conn.execute(update(results_table).where(superseded).values(current=False))
                _add_to_rollup(rollup, ts, result.rubric, rubric_version, agent, result.outcome, result.score,
                               scores, 1)
                self._insert_result(conn, row, scores, rollup)
            self._note_late_changes(rollup)
        except IntegrityError:
            if self.has_result(result.conversation_id, result.rubric, result.rubric_version, result.revision):
                return False
            raise StoreError(f"result of conversation {result.conversation_id!r} violates a constraint") from None
        return True

    def _insert_result(self, conn: Connection, row: dict[str, Any], scores: Sequence[tuple[str, int]],
                       rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        """Write a result row, its dimension rows, its write-back outbox entry and its share of the rollups.

        On PostgreSQL in one statement: each statement is a round trip to the server, and round trips are what
        recording costs there (one statement plus BEGIN and COMMIT; without rollups it was four round trips).
        SQLite runs in process, where a statement costs no round trip, and has no data-modifying WITH."""
        if self._one_statement:
            rollup_rows = [(bucket, *key, *sums) for (bucket, key), sums in sorted(rollup.items())]
            conn.execute(self._record_statement, {
                **row, "outbox": self.outbox_enabled,
                "dimension_ids": [dimension for dimension, _ in scores], "scores": [score for _, score in scores],
                **{name: [rollup_row[i] for rollup_row in rollup_rows] for i, name in enumerate(_ROLLUP_ARRAYS)},
            })
            return
        inserted = conn.execute(insert(results_table).values(**row))
        primary_key = inserted.inserted_primary_key
        if primary_key is None:
            raise StoreError("store returned no id for the new result row")
        result_id = primary_key[0]
        if self.outbox_enabled:
            conn.execute(insert(outbox_table).values(result_id=result_id, attempts=0, created_ts=row["evaluated_ts"]))
        if scores:
            conn.execute(insert(dimensions_table), [
                {"result_id": result_id, "dimension": dimension, "rubric": row["rubric"],
                 "rubric_version": row["rubric_version"], "agent": row["agent"], "score": score, "current": True,
                 "evaluated_ts": row["evaluated_ts"]}
                for dimension, score in scores
            ])
        self._apply_rollup(conn, rollup)

    @functools.cached_property
    def _record_statement(self) -> Any:
        """``_insert_result`` on PostgreSQL: one fixed text whatever the number of dimensions (arrays, unnested),
        so the driver prepares it once per connection. Every data-modifying WITH runs to completion even though
        nothing reads it; rollup rows come sorted by key, so replicas recording at once lock them in one order.
        A duplicate result fails the whole statement: no dimension, outbox or rollup row of it is written."""
        result_columns = ", ".join(column.name for column in results_table.c if column.name != "id")
        result_values = ", ".join(f":{column.name}" for column in results_table.c if column.name != "id")
        arrays = ", ".join(f"CAST(:{name} AS {kind}[])" for name, kind in zip(
            _ROLLUP_ARRAYS, ("integer", "text", "text", "text", "text", "integer", "integer", "integer",
                             "double precision"), strict=True))
        return text(f"""
            WITH result AS (
                INSERT INTO results ({result_columns}) VALUES ({result_values}) RETURNING id
            ), dimension_rows AS (
                INSERT INTO result_dimensions
                    (result_id, dimension, rubric, rubric_version, agent, score, current, evaluated_ts)
                SELECT result.id, d.dimension, :rubric, :rubric_version, :agent, d.score, true, :evaluated_ts
                FROM result, unnest(CAST(:dimension_ids AS text[]), CAST(:scores AS integer[])) AS d(dimension, score)
            ), outbox_row AS (
                INSERT INTO writeback_outbox (result_id, attempts, created_ts)
                SELECT result.id, 0, :evaluated_ts FROM result WHERE CAST(:outbox AS boolean)
            )
            INSERT INTO quality_rollups
                (bucket_ts, rubric, rubric_version, agent, dimension, scored, passed, unscored, score_sum)
            SELECT * FROM unnest({arrays})
            ON CONFLICT (bucket_ts, rubric, rubric_version, agent, dimension) DO UPDATE SET
                scored = quality_rollups.scored + excluded.scored,
                passed = quality_rollups.passed + excluded.passed,
                unscored = quality_rollups.unscored + excluded.unscored,
                score_sum = quality_rollups.score_sum + excluded.score_sum
        """)

    def _retract(self, conn: Connection, superseded: Any, rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        """Take the current results about to be superseded out of the rollups (and mark their dimensions)."""
        c, d = results_table.c, dimensions_table.c
        old = conn.execute(select(c.id, c.rubric, c.rubric_version, c.agent, c.outcome, c.score, c.evaluated_ts)
                           .where(and_(superseded, c.current.is_(True)))).all()
        if not old:
            return
        ids = [row.id for row in old]
        dimension_scores: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for score_row in conn.execute(select(d.result_id, d.dimension, d.score)
                                      .where(and_(d.result_id.in_(ids), d.current.is_(True)))):
            dimension_scores[score_row.result_id].append((score_row.dimension, score_row.score))
        for row in old:
            _add_to_rollup(rollup, row.evaluated_ts, row.rubric, row.rubric_version, row.agent, row.outcome,
                           row.score, dimension_scores[row.id], -1)
        conn.execute(update(dimensions_table).where(d.result_id.in_(ids)).values(current=False))

    def _apply_rollup(self, conn: Connection, rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        rows = [{"bucket_ts": bucket, "rubric": key[0], "rubric_version": key[1], "agent": key[2],
                 "dimension": key[3], "scored": sums[0], "passed": sums[1], "unscored": sums[2],
                 "score_sum": sums[3]} for (bucket, key), sums in rollup.items()]
        if rows:
            conn.execute(self._rollup_upsert, rows)

    @functools.cached_property
    def _rollup_upsert(self) -> Any:
        """Insert rollup rows, or add them to the ones there (built once: building it costs more than running it)."""
        r = rollups_table.c
        dialect = self._engine.dialect.name
        statement = postgresql.insert(rollups_table) if dialect == "postgresql" else sqlite.insert(rollups_table)
        excluded = statement.excluded
        return statement.on_conflict_do_update(
            index_elements=[r.bucket_ts, r.rubric, r.rubric_version, r.agent, r.dimension],
            set_={"scored": r.scored + excluded.scored, "passed": r.passed + excluded.passed,
                  "unscored": r.unscored + excluded.unscored, "score_sum": r.score_sum + excluded.score_sum},
        )

    def _note_late_changes(self, rollup: dict[tuple[int, RollupKey], RollupSums]) -> None:
        """Remember changes to hours already past (a superseded result, a late record) for the window reader,
        which reads the current hour itself."""
        current = bucket_of(datetime.now(UTC).timestamp())
        late = [(bucket, key, sums) for (bucket, key), sums in rollup.items() if bucket < current]
        if not late:
            return
        if len(self._late_changes) + len(late) > _MAX_LATE_CHANGES:
            self._late_overflow = True
            self._late_changes.clear()
        else:
            self._late_changes.extend(late)

    def results(self, conversation_id: str | None = None, current_only: bool = False) -> list[EvaluationResult]:
        query = select(results_table.c.payload).order_by(results_table.c.id)
        if conversation_id is not None:
            query = query.where(results_table.c.conversation_id == _text(conversation_id))
        if current_only:
            query = query.where(results_table.c.current.is_(True))
        with self._tx() as conn:
            return [EvaluationResult.model_validate_json(p) for p in conn.execute(query).scalars()]

    def find_results(self, *, rubric: str | None = None, agent: str | None = None, failed: bool = False,
                     since: datetime | None = None, limit: int | None = None) -> list[EvaluationResult]:
        """Current results, newest first, filtered in the database (``failed``: outcome fail or unscored)."""
        c = results_table.c
        query = select(c.payload).where(c.current.is_(True)).order_by(c.evaluated_ts.desc(), c.id.desc())
        if rubric is not None:
            query = query.where(c.rubric == rubric)
        if agent is not None:
            query = query.where(c.agent == _text(agent))
        if failed:
            query = query.where(c.outcome != "pass")
        if since is not None:
            query = query.where(c.evaluated_ts >= _ts(since))
        with self._tx() as conn:
            return [EvaluationResult.model_validate_json(p) for p in conn.execute(query.limit(limit)).scalars()]

    def record_failure(self, key: str, rubric: str, revision: int, error: str = "", calls: int = 0) -> int:
        return self._retrying(f"counting a judge failure of {key!r}",
                              lambda: self._record_failure(key, rubric, revision, error, calls))

    def _record_failure(self, key: str, rubric: str, revision: int, error: str, calls: int) -> int:
        f = failures_table.c
        where = and_(f.conversation_key == key, f.rubric == rubric, f.revision == revision)
        with self._tx() as conn:
            attempts = conn.execute(select(f.attempts).where(where)).scalar_one_or_none()
            if attempts is None:
                conn.execute(insert(failures_table).values(conversation_key=key, rubric=rubric, revision=revision,
                                                           attempts=1))
            else:
                conn.execute(update(failures_table).where(where).values(attempts=attempts + 1))
            attempt = 1 if attempts is None else int(attempts) + 1
            conn.execute(insert(failure_log_table).values(
                conversation_key=key, rubric=rubric, revision=revision, attempt=attempt,
                at_ts=self.clock().timestamp(), error=_text(error), calls=calls))
            return attempt

    def failed_attempts(self, key: str, rubric: str, revision: int) -> list[FailedAttempt]:
        f = failure_log_table.c
        query = (select(f.at_ts, f.error, f.calls)
                 .where(and_(f.conversation_key == key, f.rubric == rubric, f.revision == revision))
                 .order_by(f.attempt))
        with self._tx() as conn:
            return [FailedAttempt(_dt(r.at_ts), str(r.error), int(r.calls)) for r in conn.execute(query)]

    # budgets ---------------------------------------------------------------------------------------------------

    def add_usage(self, rubric: str, day: date, tokens: int, usd: float) -> None:
        self._retrying(f"charging rubric {rubric!r}", lambda: self._add_usage(rubric, day, tokens, usd))

    def _add_usage(self, rubric: str, day: date, tokens: int, usd: float) -> None:
        u = usage_table.c
        where = and_(u.rubric == rubric, u.day == day.isoformat())
        with self._tx() as conn:
            updated = conn.execute(update(usage_table).where(where)
                                   .values(tokens=u.tokens + tokens, usd=u.usd + usd))
            if updated.rowcount == 0:
                conn.execute(insert(usage_table).values(rubric=rubric, day=day.isoformat(), tokens=tokens, usd=usd))

    def usage(self, rubric: str, day: date) -> tuple[int, float]:
        u = usage_table.c
        with self._tx() as conn:
            row = conn.execute(select(u.tokens, u.usd).where(and_(u.rubric == rubric, u.day == day.isoformat()))
                               ).first()
        return (0, 0.0) if row is None else (int(row.tokens), float(row.usd))

    # ⑥ aggregates ----------------------------------------------------------------------------------------------

    def _hour_of(self, column: Any) -> Any:
        """``bucket_of`` in SQL: PostgreSQL rounds a cast to integer, SQLite truncates (and may lack floor)."""
        if self._engine.dialect.name == "postgresql":
            return (func.floor(column / BUCKET_SECONDS) * BUCKET_SECONDS).cast(Integer)
        return (column / BUCKET_SECONDS).cast(Integer) * BUCKET_SECONDS

    def rollup_sums(self, first_bucket: int, last_bucket: int) -> dict[RollupKey, RollupSums]:
        r = rollups_table.c
        query: Any = (select(r.rubric, r.rubric_version, r.agent, r.dimension, func.sum(r.scored), func.sum(r.passed),
                        func.sum(r.unscored), func.sum(r.score_sum))
                 .where(and_(r.bucket_ts >= first_bucket, r.bucket_ts <= last_bucket))
                 .group_by(r.rubric, r.rubric_version, r.agent, r.dimension))
        if first_bucket == last_bucket:
            # One hour holds one row per series: no grouping to do.
            query = (select(r.rubric, r.rubric_version, r.agent, r.dimension, r.scored, r.passed, r.unscored,
                            r.score_sum).where(r.bucket_ts == first_bucket))
        with self._tx() as conn:
            return {(row[0], row[1], row[2], row[3]): (int(row[4]), int(row[5]), int(row[6]), float(row[7]))
                    for row in conn.execute(query)}

    def rollups_frozen(self) -> Any:
        """Hold off recording in this process while the window reader drains changes and reads the rollups."""
        return self._rollup_lock

    def drain_rollup_changes(self) -> RollupChanges:
        with self._rollup_lock:
            changes = RollupChanges(tuple(self._late_changes), self._late_overflow)
            self._late_changes = []
            self._late_overflow = False
        return changes

    def prune_rollups(self, before_bucket: int) -> int:
        with self._tx() as conn:
            removed = conn.execute(delete(rollups_table).where(rollups_table.c.bucket_ts < before_bucket)).rowcount
        return int(removed or 0)

    def rebuild_rollups(self) -> int:
        """Recompute every rollup from the current results (``rubric-monitor db rebuild-rollups``); returns the
        rows written. One transaction: readers see the old rollups or the new ones."""
        r, d = results_table.c, dimensions_table.c
        hour, dimension_hour = self._hour_of(r.evaluated_ts), self._hour_of(d.evaluated_ts)
        scored = case((r.outcome != "unscored", 1), else_=0)
        overall = (select(hour, r.rubric, r.rubric_version, r.agent, literal(""), func.sum(scored),
                          func.sum(case((r.outcome == "pass", 1), else_=0)),
                          func.sum(case((r.outcome == "unscored", 1), else_=0)),
                          func.coalesce(func.sum(case((r.outcome != "unscored", func.coalesce(r.score, 0.0)),
                                                      else_=0.0)), 0.0))
                   .where(r.current.is_(True))
                   .group_by(hour, r.rubric, r.rubric_version, r.agent))
        dimensions = (select(dimension_hour, d.rubric, d.rubric_version, d.agent, d.dimension, func.count(),
                             literal(0), literal(0), func.sum(d.score).cast(Float))
                      .where(d.current.is_(True))
                      .group_by(dimension_hour, d.rubric, d.rubric_version, d.agent, d.dimension))
        columns = ["bucket_ts", "rubric", "rubric_version", "agent", "dimension", "scored", "passed", "unscored",
                   "score_sum"]
        with self._rollup_lock, self._tx() as conn:
            conn.execute(delete(rollups_table))
            conn.execute(insert(rollups_table).from_select(columns, overall))
            conn.execute(insert(rollups_table).from_select(columns, dimensions))
            written = conn.execute(select(func.count()).select_from(rollups_table)).scalar_one()
            self._late_changes = []
            self._late_overflow = True  # every window must be read again
        return int(written)

    # housekeeping ----------------------------------------------------------------------------------------------

    def prune(self, scored_before: datetime) -> int:
        c = conversations_table.c
        expired = and_(c.status == "scored", c.scored_ts <= _ts(scored_before))
        with self._tx() as conn:
            removed = conn.execute(delete(spans_table).where(
                spans_table.c.conversation_key.in_(select(c.key).where(expired)))).rowcount or 0
            conn.execute(update(conversations_table).where(expired).values(status="pruned"))
        return removed

    # adaptive rubric items ------------------------------------------------------------------------------------

    def cached_items(self, key: str) -> str | None:
        with self._tx() as conn:
            value = conn.execute(select(items_table.c.payload).where(items_table.c.key == key)).scalar_one_or_none()
        return None if value is None else str(value)

    def cache_items(self, key: str, payload: str) -> None:
        try:
            with self._tx() as conn:
                conn.execute(insert(items_table).values(key=key, payload=payload,
                                                        created_ts=self.clock().timestamp()))
        except IntegrityError:
            pass  # generated concurrently by another evaluation: the first one stays

    # judge drift canaries ------------------------------------------------------------------------------------

    def record_canary_run(self, run: CanaryRun) -> None:
        with self._tx() as conn:
            conn.execute(insert(canary_runs_table).values(
                rubric=run.rubric, rubric_version=run.rubric_version, judge_model=run.judge_model,
                ran_ts=_ts(run.ran_at), judged=run.judged, agreement=run.agreement, score_shift=run.score_shift,
                drift=run.drift))

    def last_canary_runs(self) -> dict[str, CanaryRun]:
        """The latest canary run of every rubric that has one."""
        c = canary_runs_table.c
        latest = select(c.rubric, func.max(c.id).label("id")).group_by(c.rubric).subquery()
        with self._tx() as conn:
            rows = conn.execute(select(canary_runs_table).join(latest, c.id == latest.c.id)).all()
        return {row.rubric: CanaryRun(rubric=row.rubric, rubric_version=row.rubric_version,
                                      judge_model=row.judge_model, ran_at=_dt(row.ran_ts), judged=row.judged,
                                      agreement=row.agreement, score_shift=row.score_shift, drift=bool(row.drift))
                for row in rows}

    def drifting_rubrics(self) -> set[str]:
        """Rubrics whose latest canary run found the judge drifting: their quality changes are the judge's, not
        the agent's (the regression detector suppresses them)."""
        return {name for name, run in self.last_canary_runs().items() if run.drift}

    # write-back outbox -------------------------------------------------------------------------------------------

    def outbox_batch(self, limit: int) -> list[tuple[int, EvaluationResult]]:
        """The oldest results waiting to be written back, with their row ids."""
        o, r = outbox_table.c, results_table.c
        query = (select(o.result_id, r.payload).join(results_table, r.id == o.result_id)
                 .order_by(o.result_id).limit(limit))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return [(int(row[0]), EvaluationResult.model_validate_json(row[1])) for row in rows]

    def outbox_done(self, result_ids: Sequence[int]) -> None:
        with self._tx() as conn:
            for start in range(0, len(result_ids), _CHUNK):
                conn.execute(delete(outbox_table).where(
                    outbox_table.c.result_id.in_(list(result_ids[start:start + _CHUNK]))))

    def outbox_failed(self, result_ids: Sequence[int]) -> None:
        o = outbox_table.c
        with self._tx() as conn:
            for start in range(0, len(result_ids), _CHUNK):
                conn.execute(update(outbox_table).where(o.result_id.in_(list(result_ids[start:start + _CHUNK])))
                             .values(attempts=o.attempts + 1))

    def outbox_pending(self) -> int:
        with self._tx() as conn:
            return int(conn.execute(select(func.count()).select_from(outbox_table)).scalar_one())

    # backfill jobs ----------------------------------------------------------------------------------------------

    def backfill_job(self, job: str, rubric: str, version: str, since: datetime, until: datetime
                     ) -> tuple[float, float]:
        """Start or resume a backfill job; returns (spent so far, its dearest evaluation so far)."""
        b = backfill_jobs_table.c
        with self._tx() as conn:
            row = conn.execute(select(b.spent_usd, b.max_cost_usd).where(b.job == job)).first()
            if row is None:
                conn.execute(insert(backfill_jobs_table).values(
                    job=job, rubric=rubric, rubric_version=_text(version), since_ts=_ts(since), until_ts=_ts(until),
                    total=0, done=0, spent_usd=0.0, max_cost_usd=0.0, status="running",
                    updated_ts=self.clock().timestamp()))
                return 0.0, 0.0
        return float(row[0]), float(row[1])

    def backfill_progress(self, job: str, total: int, done: int, spent_usd: float, max_cost_usd: float,
                          status: str) -> None:
        with self._tx() as conn:
            conn.execute(update(backfill_jobs_table).where(backfill_jobs_table.c.job == job).values(
                total=total, done=done, spent_usd=spent_usd, max_cost_usd=max_cost_usd, status=status,
                updated_ts=self.clock().timestamp()))

    def backfill_jobs(self) -> list[dict[str, Any]]:
        with self._tx() as conn:
            return [dict(r._mapping) for r in conn.execute(select(backfill_jobs_table)
                                                           .order_by(backfill_jobs_table.c.updated_ts))]

    def pending_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` are conversations the daemon has pending (it will score them itself)."""
        c = conversations_table.c
        found: set[str] = set()
        with self._tx() as conn:
            for start in range(0, len(keys), _CHUNK):
                chunk = [_text(k) for k in keys[start:start + _CHUNK]]
                found.update(conn.execute(select(c.key).where(and_(c.key.in_(chunk), c.status == "pending")))
                             .scalars())
        return found

    def retain(self, now: datetime, policy: RetentionPolicy) -> dict[str, int]:
        return retention.apply(self, now, policy)

    def ping(self) -> None:
        with self._tx() as conn:
            conn.execute(select(1))

    def close(self) -> None:
        self._engine.dispose()

