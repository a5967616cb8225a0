"""① The Application Insights source: GenAI spans and span events from the Log Analytics query API.

Each cycle reads ``[watermark - overlap, now - ingestion_delay)`` in slices of at most
``max_window_seconds``. One ``SourceBatch`` is yielded per completed slice, carrying the watermark at that
slice's end, so the pipeline stores the slice's spans and the new watermark together and a failure never
moves the watermark past rows that were not stored. The overlap re-reads rows ingested late; the store drops
the ones it already has by span id. A slice that reaches the service's row or size limit (a ``PartialError``,
or as many rows as the limit) is read again as two halves, so nothing is silently cut; any other partial
result fails the cycle, and so does a body that is not JSON (cut off, or a proxy's page): only a 204 or an
empty body means no data. Failures raise ``SourceError``s whose ``kind`` (auth, query, throttled, server,
timeout, partial, error) is the ``rubric_monitor_source_errors_total`` label: the pipeline logs and counts
them. A row that cannot be read, whatever the reason, is a counted rejection, never a failed cycle; lone
surrogates (which a cut at the character limit can leave) are replaced in every string read.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pydantic_core
from azure.core.credentials import AccessToken, AccessTokenInfo, TokenCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseTimeoutError,
)
from azure.core.pipeline import PipelineResponse
from azure.core.pipeline.policies import RetryPolicy
from azure.monitor.query import LogsQueryClient, LogsQueryStatus, LogsTable, LogsTableRow

from monitor.azure_auth import credential_failure
from monitor.errors import ConfigError, SourceAuthError, SourceError, SourceQueryError
from monitor.formats.conventions.legacy_events import UNNAMED_LEGACY_EVENT
from monitor.formats.genai import INPUT_MESSAGES, OPERATION_DETAILS_EVENT, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS
from monitor.formats.json_text import (
    cycle_collection_paused,
    decode_json_text,
    load_json,
    replace_lone_surrogates,
    replace_lone_surrogates_in,
)
from monitor.formats.python_literal import LiteralError, looks_like_python_literal, parse_python_literal
from monitor.metrics import MonitorMetrics
from monitor.models import SpanRecord, as_utc
from monitor.redaction import remember_secret
from monitor.settings import AppInsightsCredentialSettings, AppInsightsSourceSettings
from monitor.sources.base import SourceBatch
from monitor.sources.kql import TableSchema, Window, build_query, iso, query_timespan, schema_for

log = logging.getLogger(__name__)

SOURCE = "app_insights"
SETTINGS_WHERE = "settings"
PROPERTY_CAP = 8192
"""App Insights keeps at most this many characters of a custom property value."""
GEN_AI_PROPERTY_CAP = 256 * 1024
"""The exporter's own cut for message attributes (ingestion may still apply ``PROPERTY_CAP``)."""
JSON_VALUED_KEYS = frozenset({
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.event.content",
})
CHECKPOINT_VERSION = 1
_TOKEN_REREAD_SECONDS = 60
"""A token read from a file or the environment is declared valid this long, so the bearer-token policy
(which refreshes tokens within 5 minutes of expiry) reads it again for every request: rotation just works."""
_READ_TIMEOUT_MARGIN_SECONDS = 30
READ_BLOCK_BYTES = 1 << 20
"""Chunk size for reading response bodies: the transport's default of 4 KiB costs a Python round per chunk
of results that run to tens of megabytes."""
_CLOSING = {"[": "]", "{": "}"}
ZERO = timedelta(0)
_SMALLEST_SPLIT = timedelta(microseconds=2)
MALFORMED_SPAN = "malformed_span"
PARSE_ERROR = "parse_error"
"""Rejection reason of a row whose reading raised an error no check foresaw."""
_LOGGED_PARSE_ERRORS_PER_SLICE = 10
_BODY_HEAD_CHARS = 80


# --- credentials --------------------------------------------------------------------------------------------


class RereadTokenCredential:
    """A pre-obtained bearer token, read again on every request from a file or an environment variable."""

    def __init__(self, read: Callable[[], str | None], origin: str) -> None:
        self._read = read
        self.origin = origin

    def get_token(self, *scopes: str, claims: str | None = None, tenant_id: str | None = None,
                  enable_cae: bool = False, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token(), int(time.time()) + _TOKEN_REREAD_SECONDS)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(self._token(), int(time.time()) + _TOKEN_REREAD_SECONDS)

    def _token(self) -> str:
        try:
            token = (self._read() or "").strip()
        except OSError as exc:
            message = f"cannot read the bearer token from {self.origin}: {exc.strerror}"
            raise ClientAuthenticationError(message) from exc
        if not token:
            raise ClientAuthenticationError(f"no bearer token in {self.origin}")
        remember_secret(token)
        return token


def make_credential(settings: AppInsightsCredentialSettings) -> TokenCredential:
    if settings.kind == "token_file":
        path = settings.token_file
        if path is None:
            raise ConfigError(SETTINGS_WHERE, "source.credential.token_file", "required with kind token_file")
        return RereadTokenCredential(lambda: path.read_text(encoding="utf-8"), f"file {path}")
    if settings.kind == "token_env":
        name = settings.token_env
        return RereadTokenCredential(lambda: os.environ.get(name), f"environment variable {name}")
    from azure.identity import DefaultAzureCredential

    credential: TokenCredential = DefaultAzureCredential()
    return credential


# --- retries ------------------------------------------------------------------------------------------------


class BoundedRetryPolicy(RetryPolicy[Any, Any]):
    """azure-core's retry policy, except that a ``Retry-After`` longer than ``max_wait`` ends the retries.

    The stock policy sleeps whatever the service asks; waiting an hour inside one cycle would stall the
    daemon. Giving up honours the service's request (no early retry) and the next cycle tries again.
    """

    def __init__(self, *, max_wait: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_wait = max_wait

    def is_retry(self, settings: dict[str, Any], response: Any) -> bool:
        retry_after = self.get_retry_after(response)
        if retry_after is not None and retry_after > self.max_wait:
            return False
        return bool(super().is_retry(settings, response))


# --- rows → SpanRecords -------------------------------------------------------------------------------------


def truncated_keys(properties: dict[str, Any]) -> tuple[str, ...]:
    """Property keys whose values App Insights (or the exporter) cut short.

    A JSON-valued attribute (messages, event content) was cut when its JSON no longer closes; a full parse
    is only paid for values long enough to have reached a cap. Any other value was cut when it is exactly a
    cap long.
    """
    cut: list[str] = []
    for key, value in properties.items():
        if not isinstance(value, str):
            continue
        if key in JSON_VALUED_KEYS and value.lstrip()[:1] in _CLOSING:
            if _broken_json(value):
                cut.append(key)
        elif len(value) in (PROPERTY_CAP, GEN_AI_PROPERTY_CAP):
            cut.append(key)
    return tuple(cut)


def _broken_json(value: str) -> bool:
    """Whether a value that opens like JSON was cut: its JSON breaks off, or it is plain text as long as a cap
    (instructions may well be text that starts with a bracket)."""
    text = value.strip()
    closing = _CLOSING.get(text[:1])
    if closing is None:
        return False
    if text.endswith(closing) and len(value) < PROPERTY_CAP:
        return False  # the usual case, settled without parsing: it closes and is too short to have been cut
    decoded = decode_json_text(text)
    if decoded.error is None:
        return False
    return decoded.truncated or len(value) in (PROPERTY_CAP, GEN_AI_PROPERTY_CAP)


NO_BODY_MESSAGE = "n/a"
"""The ``message`` the exporter writes for a log record without a body (openai-v2 ``event_only``)."""
_MESSAGE_KEYS = (INPUT_MESSAGES, OUTPUT_MESSAGES, SYSTEM_INSTRUCTIONS)
_SHORT_LITERAL_CHARS = 64


@functools.lru_cache(maxsize=1024)
def _short_literal(text: str) -> Any:
    # "('stop',)", "('tool_calls',)": the same few short values on most spans, read once.
    return parse_python_literal(text)


_REPR_HINTS = ("('", "{'", "['", '(\\"')
"""How a Python ``repr`` container shows in the JSON text of a properties cell, at the start of a value."""


def _repr_valued_keys(raw: str) -> list[str]:
    """The keys of ``raw`` (a properties cell's JSON text) whose value opens like a Python ``repr`` container:
    C-level searches for the few ways one starts, then a look back to the key; no look at the other values."""
    keys: list[str] = []
    for hint in _REPR_HINTS:
        position = raw.find(hint)
        while position != -1:
            back = position - 1
            while back >= 0 and raw[back] in "([{ ":
                back -= 1
            if back > 0 and raw[back] == '"':  # the value's opening quote
                back -= 1
                while back >= 0 and raw[back] in ": ":
                    back -= 1
                if back > 0 and raw[back] == '"':  # the key's closing quote
                    opening = raw.rfind('"', 0, back)
                    key = raw[opening + 1:back]
                    if key not in keys:
                        keys.append(key)
            position = raw.find(hint, position + 1)
    return keys


def literal_properties(properties: dict[str, Any], raw: Any = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``properties`` (changed in place) with the ``gen_ai.*`` values the exporter wrote as Python ``repr`` read
    back into lists and dicts, and the keys whose ``repr`` breaks off (cut at a cap).

    The OTel SDK keeps sequences as tuples and log records may hold maps; the exporter writes ``str(value)``:
    ``"('tool_calls',)"``, ``"({'role': 'user', 'parts': (...)},)"``. They go through a bounded literal
    parser, never ``eval``. ``raw``, the cell as sent (JSON text), names the keys to look at (most rows: none)."""
    if isinstance(raw, str):
        # A repr container quotes its strings with ' (or with " when they hold a '): one test passes the rest.
        keys = _repr_valued_keys(raw) if "'" in raw else []
    else:
        keys = list(properties)
    if not keys:
        return properties, ()
    cut: list[str] = []
    for key in keys:
        value = properties.get(key)
        if not (isinstance(value, str) and key.startswith("gen_ai.") and looks_like_python_literal(value)):
            continue
        try:
            read = _short_literal(value) if len(value) <= _SHORT_LITERAL_CHARS else parse_python_literal(value)
        except LiteralError as exc:
            if exc.truncated or len(value) in (PROPERTY_CAP, GEN_AI_PROPERTY_CAP):
                cut.append(key)
            continue
        properties[key] = read  # the dict is this row's own, just decoded
    return properties, tuple(cut)


def exporter_log_record(message: str, properties: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The event name and attributes of a ``traces`` row, or ``None`` when it is not GenAI content.

    Three kinds of rows hold GenAI content: span events (``message`` is the event name), log records with an
    ``event.name`` attribute (Semantic Kernel; ``message`` is the body), and log records whose event name the
    exporter dropped (it keeps the attributes, ``gen_ai.system`` / ``gen_ai.provider.name`` among them). Of
    those, a record without a body (``"n/a"``) carrying messages is util-genai's
    ``gen_ai.client.inference.operation.details`` (``event_only``); one with a body is a legacy
    ``gen_ai.*.message`` / ``gen_ai.choice`` record, named ``UNNAMED_LEGACY_EVENT`` here and given its role by
    the reader of legacy events from its body and its place among the span's records. The application's own
    logs (no ``gen_ai.`` name or attribute) are not content.
    """
    if message.startswith("gen_ai.") and " " not in message:
        return message, properties
    event_name = properties.get("event.name")
    named = isinstance(event_name, str) and event_name.startswith("gen_ai.")
    if not named and not any(key.startswith("gen_ai.") for key in properties):
        return None
    if named:
        return str(event_name), {**properties, "body": message}
    if message in ("", NO_BODY_MESSAGE):
        if any(key in properties for key in _MESSAGE_KEYS):
            return OPERATION_DETAILS_EVENT, properties
        return None
    return UNNAMED_LEGACY_EVENT, {**properties, "body": message}


def event_span_id(trace_id: str, parent_id: str, moment: datetime, name: str,
                  properties: dict[str, Any]) -> str:
    """A stable id for a span event, so re-reading it in the overlap yields the same record."""
    canonical = json.dumps(properties, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = "\x1f".join((trace_id, parent_id, iso(moment), name, canonical))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class SliceRows:
    spans: list[SpanRecord]
    rejected: dict[str, int]
    rows: int


@dataclass(frozen=True)
class ResultTable:
    """One table of a query response with its rows as the service sent them: JSON cells, datetimes as text.

    The client's ``LogsTable`` converts every cell of every row into ``LogsTableRow`` objects (and, before
    that, its generated models copy the whole body); rows are read here straight from the decoded body
    instead, converting only the cells the reader uses, exactly as the client would.
    """

    name: str
    columns: list[str]
    column_types: list[str]
    rows: list[Any]

    @classmethod
    def of(cls, table: LogsTable, rows: list[Any]) -> ResultTable:
        """The rows of ``table`` (whose columns the client already read) as sent."""
        return cls(table.name, list(table.columns), list(table.columns_types), rows)


class QueryCapture:
    """The ``cls`` callback of a ``LogsQueryClient`` query: keeps each table's rows as sent.

    The query runs with ``stream=True`` and ``raw_response_hook=self.read_body``, so the client skips its own
    decoding of the body while the body is still read inside the pipeline, under the same retry policy as a
    buffered response. This callback decodes the body as the client would (``response.json()``) and gives
    the client the body without rows, from which it builds its result, status and partial error as usual.
    The status and body of the last response are kept, to tell "no data" (204, empty) from a body that is
    not JSON when decoding fails.
    """

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self.status: int | None = None
        self.body: bytes = b""

    def options(self) -> dict[str, Any]:
        return {"stream": True, "raw_response_hook": self.read_body, "cls": self}

    def read_body(self, response: PipelineResponse[Any, Any]) -> None:
        """``raw_response_hook``: load a streamed body inside the pipeline, as a buffered request does."""
        self.status = response.http_response.status_code
        self.body = response.http_response.read()

    @property
    def no_data(self) -> bool:
        """The last response said there is no data: 204 No Content, or an empty body."""
        return self.status == 204 or (self.status is not None and not self.body)

    def unreadable(self, target: str, exc: json.JSONDecodeError) -> SourceError:
        """The error for a body that is not JSON: it may have held rows, so the window must not be passed."""
        head = self.body[:_BODY_HEAD_CHARS].decode("utf-8", "replace")
        message = (f"app_insights {target}: the query API answered {self.status} with a body that is not JSON "
                   f"({len(self.body)} bytes; {exc.msg} at character {exc.pos}; it starts {head!r}): cut off "
                   "in transit, or a proxy's page; the watermark stays and the next cycle reads the window "
                   "again")
        if self.status in (401, 403):
            return SourceAuthError(message)
        return _kind(SourceError(message), "server" if (self.status or 0) >= 500 else "error")

    def __call__(self, pipeline_response: PipelineResponse[Any, Any], deserialized: Any,
                 headers: Any) -> Any:
        return self.take(response_json(pipeline_response.http_response))

    def take(self, body: Any) -> Any:
        """The decoded ``body`` without rows, keeping the rows."""
        if not isinstance(body, dict) or not isinstance(body.get("tables") or [], list):
            raise ValueError(f"the query API sent a {type(body).__name__} body that is not a query result")
        tables = body.get("tables") or []
        self.rows = []
        stripped = []
        for table in tables:
            rows = table.get("rows") if isinstance(table, dict) else None
            if not isinstance(rows, list):
                raise ValueError("the query API sent a result table without a list of rows")
            self.rows.append(rows)
            stripped.append({**table, "rows": []})
        return {**body, "tables": stripped} if tables else body

    def primary(self, tables: list[LogsTable]) -> ResultTable | None:
        """The ``PrimaryResult`` table (else the first) of the client's result, with the rows kept."""
        position = _primary_position(tables)
        if position is None:
            return None
        return ResultTable.of(tables[position], self.rows[position])


def response_json(response: Any) -> Any:
    """The body as the client's ``response.json()`` decodes it (``json.JSONDecodeError`` included).

    A UTF-8 body (the service's charset) is parsed as bytes: making a str of tens of megabytes first costs
    as much as parsing it. Any other charset, a byte-order mark, or a body the fast parser refuses takes
    the client's own way, text first.
    """
    if response.encoding in (None, "utf-8"):
        content = response.content
        if content and not content.startswith(codecs.BOM_UTF8):
            try:
                return pydantic_core.from_json(content, cache_strings="keys")
            except ValueError:
                pass  # invalid UTF-8 is replaced in the client's text, lone surrogates are kept: it decides
    return load_json(response.text())


_WIRE_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{7}Z")


def _client_cell(column_type: str, value: Any) -> Any:
    """A cell converted by the client itself (``LogsTableRow``), for values off the fast paths."""
    return LogsTableRow(col_types=[column_type], row=[value], row_index=0, columns=["cell"])[0]


def _datetime_cell(value: Any) -> Any:
    # The service writes every datetime as 2026-09-01T10:00:00.1234567Z; the client truncates the seventh
    # digit and tags the value with UTC, which fromisoformat does several times faster.
    if isinstance(value, str) and _WIRE_DATETIME.fullmatch(value):
        try:
            return datetime.fromisoformat(value[:26]).replace(tzinfo=UTC)
        except ValueError:
            pass
    return _client_cell("datetime", value)


def _cell_converter(column_type: str) -> Callable[[Any], Any] | None:
    """How the client converts a cell of this column type; ``None`` when it leaves the JSON value as is."""
    if column_type == "datetime":
        return _datetime_cell
    if column_type in ("timespan", "guid"):
        return str
    return None


class RowReader:
    """Reads the query's rows (one layout) into SpanRecords; counts the rows it cannot use, by reason."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self._utc_zones: set[tzinfo] = set()

    def read(self, table: LogsTable | ResultTable, window: Window) -> SliceRows:
        """The spans of ``table``: the client's ``LogsTable``, or a ``ResultTable`` with the rows as sent."""
        with cycle_collection_paused():
            return self._read(table, window)

    def _read(self, table: LogsTable | ResultTable, window: Window) -> SliceRows:
        """Every row becomes a span or event, a counted rejection, or nothing when it lies outside ``window``:
        no row can fail the slice."""
        s = self.schema
        index = {name: position for position, name in enumerate(table.columns)}
        missing = [c for c in (s.time, s.item_type, s.operation_id, s.properties) if c not in index]
        if missing:
            raise SourceQueryError(f"app_insights: the query result lacks column(s) {', '.join(missing)}; "
                                   "was source.extra_filter changing the projection?")
        cells = _Cells.of(index, s)
        # Rows as sent still need the client's conversion of the cells read; LogsTable rows had it.
        converters = self._converters(table, cells) if isinstance(table, ResultTable) else None
        width = len(index)
        by_id: dict[str, SpanRecord] = {}
        rejected: dict[str, int] = {}
        failures = 0
        for number, row in enumerate(table.rows):
            try:
                record, reason = self._row(row, cells, converters, width, window)
            except (TypeError, ValueError, OverflowError):
                # A cell of the wrong type or size (a duration of 1e15 ms ends past year 9999): this row only.
                record, reason = None, MALFORMED_SPAN
            except Exception as exc:  # the last line of defence: a row must never stop the source
                record, reason = None, PARSE_ERROR
                failures += 1
                if failures <= _LOGGED_PARSE_ERRORS_PER_SLICE:
                    log.error("app_insights: window %s: row %d could not be read (%s: %s), skipped: %.300r",
                              window, number, type(exc).__name__, exc, row)
            if record is not None:
                by_id.setdefault(record.span_id, record)
            elif reason:
                rejected[reason] = rejected.get(reason, 0) + 1
        return SliceRows(list(by_id.values()), rejected, len(table.rows))

    def _row(self, row: Any, cells: _Cells, converters: list[tuple[int, Callable[[Any], Any]]] | None,
             width: int, window: Window) -> tuple[SpanRecord | None, str]:
        """The record of one row, or why it has none (no reason: it lies outside ``window``)."""
        if converters is not None and (not isinstance(row, list) or len(row) != width):
            return None, "malformed_row"
        values = [*row, None]  # absent optional columns point at the trailing None
        for position, convert in converters or ():
            values[position] = convert(values[position])
        moment = values[cells.time]
        if not isinstance(moment, datetime):
            return None, "bad_timestamp"
        moment = self._utc(moment)
        if not window.contains(moment):
            return None, ""  # a row of the agent lookback, or of a server that ignored the window
        return self._record(values, cells, moment)

    @staticmethod
    def _converters(table: ResultTable, cells: _Cells) -> list[tuple[int, Callable[[Any], Any]]]:
        """The client's conversion of each cell the reader uses, where it changes the JSON value."""
        used = sorted(set(dataclasses.astuple(cells)) - {len(table.columns)})
        return [(position, convert) for position in used
                if (convert := _cell_converter(table.column_types[position])) is not None]

    def _utc(self, moment: datetime) -> datetime:
        # The client tags every datetime with isodate's UTC zone; converting through its Python utcoffset()
        # for each row would cost more than the rest of the row, so fixed zero-offset zones are remembered.
        zone = moment.tzinfo
        if zone is UTC:
            return moment
        if zone in self._utc_zones:
            return moment.replace(tzinfo=UTC)
        if zone is not None and zone.utcoffset(None) == ZERO:
            self._utc_zones.add(zone)
            return moment.replace(tzinfo=UTC)
        return as_utc(moment)

    def _record(self, values: list[Any], cells: _Cells, moment: datetime) -> tuple[SpanRecord | None, str]:
        kind = self.schema.item_types.get(str(values[cells.item_type]))
        if kind is None:
            return None, "unknown_item_type"
        trace_id = _text(values[cells.operation_id])
        raw_properties = values[cells.properties]
        properties = _properties(raw_properties)
        if properties is None:
            return None, "bad_properties"
        if not trace_id:
            return None, "missing_id"
        parent = _text(values[cells.parent])
        if parent == trace_id:
            parent = ""  # older SDKs wrote the operation id as a root's parent
        if kind == "trace":
            # Log records may hold structured values (openai-v2 event_only's messages), which the exporter writes as
            # Python repr; span attributes cannot nest, so span rows keep their text (their message attributes are
            # JSON, and the tuples of scalars the exporter writes for list attributes are read by no one).
            properties, cut_literals = literal_properties(properties, raw_properties)
            return self._event(values, cells, moment, trace_id, parent, properties, cut_literals)
        span_id = _text(values[cells.span_id])
        if not span_id:
            return None, "missing_id"
        duration = values[cells.duration]
        end = moment + timedelta(milliseconds=duration) if isinstance(duration, int | float) else None
        role = _text(values[cells.role])
        return SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent or None,
            name=_text(values[cells.name]),
            kind=_span_kind(kind, _text(values[cells.type])),
            start_time=moment,
            end_time=end,
            attributes=properties,
            resource={"service.name": role} if role else {},
            status=_status(values[cells.success]),
            truncated_keys=truncated_keys(properties),
        ), ""

    def _event(self, values: list[Any], cells: _Cells, moment: datetime, trace_id: str, parent: str,
               properties: dict[str, Any], cut_literals: tuple[str, ...]) -> tuple[SpanRecord | None, str]:
        message = _text(values[cells.message])
        read = exporter_log_record(message, properties)
        if read is None:
            return None, ""  # the application's own log lines: not GenAI content, as the query means it
        if not parent:
            return None, "event_without_parent"
        name, attributes = read
        role = _text(values[cells.role])
        return SpanRecord(
            trace_id=trace_id,
            # The id hashes the row as written (message, not the name read from it): stable across re-reads.
            span_id=event_span_id(trace_id, parent, moment, message, properties),
            parent_span_id=parent,
            name=name,
            kind="event",
            start_time=moment,
            attributes=attributes,
            resource={"service.name": role} if role else {},
            truncated_keys=truncated_keys(attributes) + cut_literals,
        ), ""


@dataclass(frozen=True)
class _Cells:
    """Column positions in a row; an optional column the result lacks points at the row's trailing None."""

    time: int
    item_type: int
    operation_id: int
    properties: int
    parent: int
    span_id: int
    name: int
    message: int
    duration: int
    success: int
    type: int
    role: int

    @classmethod
    def of(cls, index: dict[str, int], s: TableSchema) -> _Cells:
        absent = len(index)
        return cls(
            time=index[s.time], item_type=index[s.item_type], operation_id=index[s.operation_id],
            properties=index[s.properties], parent=index.get(s.parent_id, absent),
            span_id=index.get(s.span_id, absent), name=index.get(s.span_name, absent),
            message=index.get(s.message, absent), duration=index.get(s.duration_ms, absent),
            success=index.get(s.success, absent), type=index.get(s.dependency_type, absent),
            role=index.get(s.role_name, absent),
        )


def _text(value: Any) -> str:
    # The client turns a null guid/timespan cell into the string 'None'.
    if value is None or value == "None":
        return ""
    text = str(value)
    return text if text.isascii() else replace_lone_surrogates(text)


def _properties(cell: Any) -> dict[str, Any] | None:
    if cell is None or cell == "":
        return {}
    try:
        if isinstance(cell, dict):
            return dict(replace_lone_surrogates_in(cell))
        parsed = load_json(cell)  # replaces lone surrogates itself
    except (TypeError, ValueError, RecursionError):
        return None
    if parsed is None:
        return {}
    return parsed if isinstance(parsed, dict) else None


def _span_kind(item: str, dependency_type: str) -> str:
    if item == "request":
        return "server"
    if dependency_type.startswith("InProc"):
        return "internal"
    if dependency_type.startswith("Queue Message"):
        return "producer"
    return "client"


def _status(success: Any) -> str:
    # The exporter writes success = (status is not ERROR), so "True" cannot tell OK from UNSET.
    if success is False or (isinstance(success, str) and success.lower() == "false"):
        return "error"
    return "unset"


# --- faults -------------------------------------------------------------------------------------------------


def _service_detail(exc: HttpResponseError) -> str:
    model = getattr(exc, "model", None)
    code = getattr(model, "code", None) or getattr(getattr(exc, "error", None), "code", None)
    message = getattr(model, "message", None) or (exc.message or "").split("\n", 1)[0]
    return f"{exc.status_code} {code}: {message}" if code else f"{exc.status_code}: {message}"


def source_error(exc: Exception, target: str, settings: AppInsightsSourceSettings) -> SourceError:
    """One clear error for a failed query, whose ``kind`` is the ``source_errors`` metric label."""
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        status, detail = exc.status_code, _service_detail(exc)
        if status in (401, 403):
            return SourceAuthError(f"app_insights {target}: the query API refused the credential ({detail}); "
                                   "it needs Log Analytics Reader on the workspace (or Reader on the "
                                   "Application Insights resource) and the audience of source.endpoint")
        if status in (400, 404):
            return SourceQueryError(f"app_insights {target}: the query API rejected the query ({detail}); "
                                    "check the workspace or resource id and source.extra_filter, and paste "
                                    "`rubric-monitor check --explain` into the portal to see the error")
        if status == 429:
            throttled = SourceError(f"app_insights {target}: throttled ({detail}) after "
                                    f"{settings.retry_total} retries or a Retry-After longer than "
                                    f"{settings.retry_backoff_max_seconds:g}s; the next cycle retries")
            return _kind(throttled, "throttled")
        if status in (408, 504):
            return _kind(SourceError(f"app_insights {target}: the query timed out ({detail})"), "timeout")
        if status >= 500:
            return _kind(SourceError(f"app_insights {target}: server error ({detail}) after "
                                     f"{settings.retry_total} retries"), "server")
        return SourceError(f"app_insights {target}: unexpected reply ({detail})")
    refused = _credential_failure(exc)
    if refused is not None:
        detail = credential_failure(refused.message, "or use source.credential.kind token_file or token_env")
        return SourceAuthError(f"app_insights {target}: no usable credential: {detail}; check source.credential")
    if isinstance(exc, ServiceRequestTimeoutError | ServiceResponseTimeoutError):
        return _kind(SourceError(f"app_insights {target}: the query timed out ({exc})"), "timeout")
    if isinstance(exc, ServiceRequestError):
        return SourceError(f"app_insights {target}: cannot reach {settings.endpoint} ({exc}); check "
                           "source.endpoint and, for a private CA, source.ca_bundle")
    return SourceError(f"app_insights {target}: query failed ({exc})")


def _credential_failure(exc: BaseException) -> ClientAuthenticationError | None:
    # The query client re-raises a credential's ClientAuthenticationError as a bare HttpResponseError.
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, ClientAuthenticationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _kind(error: SourceError, kind: str) -> SourceError:
    error.kind = kind
    return error


def _limit_error(message: str | None, details: Any) -> bool:
    """Whether a PartialError says the result was too large (rows, bytes or memory): halves can succeed."""
    text = f"{message or ''} {json.dumps(details, default=str)}".lower()
    return any(marker in text for marker in ("e_query_result_set_too_large", "record count limit",
                                              "data size limit", "e_low_memory_condition", "exceeded"))


# --- the source ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    watermark: datetime
    target: str

    def dump(self) -> str:
        return json.dumps({"version": CHECKPOINT_VERSION, "target": self.target,
                           "watermark": iso(self.watermark)})


class _LimitReached:
    """A slice too big for one query: over the service's row or size limit (``partial``), or too slow to
    answer in time (``timeout``). Either way its halves may succeed."""

    def __init__(self, reason: str, kind: str = "partial") -> None:
        self.reason = reason
        self.kind = kind


class AppInsightsSource:
    """Reads GenAI spans from a Log Analytics workspace or an Application Insights resource."""

    name = SOURCE

    def __init__(self, settings: AppInsightsSourceSettings, metrics: MonitorMetrics, *,
                 credential: TokenCredential | None = None) -> None:
        _validate(settings)
        self.settings = settings
        self.metrics = metrics
        self.schema = schema_for(settings)
        self.target = (f"workspace {settings.workspace_id}" if settings.workspace_id
                       else f"resource {settings.resource_id}")
        self._owned_credential = credential is None
        self._credential = credential if credential is not None else make_credential(settings.credential)
        self._reader = RowReader(self.schema)
        self._read_through: datetime | None = None
        read_timeout = settings.server_timeout_seconds + _READ_TIMEOUT_MARGIN_SECONDS
        self._client = LogsQueryClient(
            self._credential,
            endpoint=settings.endpoint.rstrip("/"),
            audience=(settings.audience or settings.endpoint).rstrip("/"),
            retry_policy=BoundedRetryPolicy(
                max_wait=settings.retry_backoff_max_seconds,
                retry_total=settings.retry_total,
                retry_backoff_max=settings.retry_backoff_max_seconds,
                timeout=read_timeout * (settings.retry_total + 1) + settings.retry_backoff_max_seconds
                * settings.retry_total,
            ),
            connection_verify=str(settings.ca_bundle) if settings.ca_bundle else True,
            connection_data_block_size=READ_BLOCK_BYTES,
            read_timeout=read_timeout,
        )

    # --- TraceSource ----------------------------------------------------------------------------------------

    def pull(self, checkpoint: str | None, now: datetime) -> Iterator[SourceBatch]:
        now = as_utc(now)
        watermark = self._load(checkpoint)
        self._read_through = watermark
        end = now - timedelta(seconds=self.settings.ingestion_delay_seconds)
        if watermark is None:
            start = end - timedelta(seconds=self.settings.initial_lookback_seconds)
        else:
            start = watermark - timedelta(seconds=self.settings.overlap_seconds)
        self._report_lag(watermark or start, now)
        step = timedelta(seconds=self.settings.max_window_seconds)
        while start < end:
            window = Window(start, min(end, start + step))
            watermark = yield from self._read(window, watermark, now, depth=0)
            start = window.end

    def read_through(self) -> datetime | None:
        """The watermark: every slice before it was read whole and stored."""
        return self._read_through

    def close(self) -> None:
        self._client.close()
        if self._owned_credential:
            closer = getattr(self._credential, "close", None)
            if callable(closer):
                closer()

    # --- one slice ------------------------------------------------------------------------------------------

    def _read(self, window: Window, watermark: datetime | None, now: datetime,
              depth: int) -> Generator[SourceBatch, None, datetime | None]:
        outcome = self._slice_rows(window)
        if isinstance(outcome, _LimitReached):
            if depth >= self.settings.max_splits or window.end - window.start < _SMALLEST_SPLIT:
                raise _kind(SourceError(
                    f"app_insights {self.target}: window {window} still hits the service's limit "
                    f"({outcome.reason}) after {depth} splits (source.max_splits); the watermark stays at "
                    f"{iso(watermark) if watermark else 'its start'}"), outcome.kind)
            log.info("app_insights: window %s hit the service's limit (%s); reading it as two halves",
                     window, outcome.reason)
            left, right = window.halves()
            watermark = yield from self._read(left, watermark, now, depth + 1)
            return (yield from self._read(right, watermark, now, depth + 1))
        rows = outcome
        self._log_slice(rows, window)
        advanced = window.end if watermark is None else max(watermark, window.end)
        yield SourceBatch(spans=rows.spans, checkpoint=Checkpoint(advanced, self.target).dump(),
                          rejected=rows.rejected, rows=rows.rows, read_through=advanced)
        # Resumed only once the consumer stored the batch: the slice is delivered.
        self._read_through = advanced
        self._report_lag(advanced, now)
        return advanced

    def _slice_rows(self, window: Window) -> SliceRows | _LimitReached:
        # The result table is dropped once read, so only the slice's SpanRecords stay alive while the pipeline
        # stores them.
        outcome = self._query(window)
        if outcome is None:
            return SliceRows([], {}, 0)
        if isinstance(outcome, _LimitReached):
            return outcome
        return self._reader.read(outcome, window)

    def _query(self, window: Window) -> ResultTable | _LimitReached | None:
        """The result table of one window, ``None`` when the service has no data, or the limit it hit."""
        query = build_query(self.settings, self.schema, window)
        timespan = query_timespan(self.settings, window)
        capture = QueryCapture()
        started = time.perf_counter()
        try:
            if self.settings.workspace_id:
                result = self._client.query_workspace(self.settings.workspace_id, query, timespan=timespan,
                                                      server_timeout=self.settings.server_timeout_seconds,
                                                      **capture.options())
            else:
                result = self._client.query_resource(str(self.settings.resource_id), query, timespan=timespan,
                                                     server_timeout=self.settings.server_timeout_seconds,
                                                     **capture.options())
        except json.JSONDecodeError as exc:
            # The client fails to parse the empty body of a 204 (No Content: there is no data); any other body
            # that is not JSON may have held rows.
            if capture.no_data:
                return None
            raise capture.unreadable(self.target, exc) from exc
        except (AzureError, ValueError, OSError, RecursionError) as exc:
            error = source_error(exc, self.target, self.settings)
            if error.kind == "timeout":
                # Still timing out after the retries: a slice too heavy to answer in time is halved like one
                # over the row limit, so one slow slice cannot hold the watermark back for good.
                return _LimitReached(str(error), "timeout")
            raise error from exc
        finally:
            self.metrics.source_query_latency.labels(SOURCE).observe(time.perf_counter() - started)
        if result.status == LogsQueryStatus.PARTIAL:
            problem = result.partial_error
            details = getattr(problem, "details", None)
            if _limit_error(getattr(problem, "message", None), details):
                return _LimitReached(_first_inner_message(details) or "PartialError")
            raise _kind(SourceError(f"app_insights {self.target}: partial result for window {window} "
                                    f"({getattr(problem, 'code', '')}: {getattr(problem, 'message', '')}); "
                                    "it is not taken as complete, the next cycle retries"), "partial")
        table = capture.primary(result.tables)
        if table is not None and len(table.rows) >= self.settings.row_limit:
            return _LimitReached(f"{len(table.rows)} rows, the row limit (source.row_limit)")
        return table

    # --- bookkeeping ----------------------------------------------------------------------------------------

    @staticmethod
    def _log_slice(rows: SliceRows, window: Window) -> None:
        # Rows read and rows rejected travel in the batch: the pipeline counts both once the batch is stored
        # (rubric_monitor_source_rows_total, rubric_monitor_spans_rejected_total).
        if rows.rejected:
            reasons = ", ".join(f"{reason}={count}" for reason, count in sorted(rows.rejected.items()))
            log.warning("app_insights: window %s: %d row(s) skipped (%s)", window,
                        sum(rows.rejected.values()), reasons)
        log.debug("app_insights: window %s: %d rows, %d spans and events", window, rows.rows, len(rows.spans))

    def _report_lag(self, position: datetime, now: datetime) -> None:
        self.metrics.source_lag.labels(SOURCE).set(max(0.0, (now - position).total_seconds()))

    def _load(self, checkpoint: str | None) -> datetime | None:
        if not checkpoint:
            return None
        try:
            data = json.loads(checkpoint)
            watermark = as_utc(datetime.fromisoformat(str(data["watermark"]).replace("Z", "+00:00")))
            target = str(data["target"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("app_insights: unreadable stored checkpoint %r (%s); starting %gs back",
                        checkpoint[:200], exc, self.settings.initial_lookback_seconds)
            return None
        if target != self.target:
            log.warning("app_insights: the stored watermark belongs to %s, not %s; starting %gs back",
                        target, self.target, self.settings.initial_lookback_seconds)
            return None
        return watermark


def _primary_position(tables: list[LogsTable]) -> int | None:
    for position, table in enumerate(tables):
        if table.name == "PrimaryResult":
            return position
    return 0 if tables else None


def _first_inner_message(details: Any) -> str:
    for detail in details or []:
        inner = detail.get("innererror") if isinstance(detail, dict) else None
        while isinstance(inner, dict):
            if inner.get("message") and not inner.get("innererror"):
                return str(inner["message"])
            inner = inner.get("innererror")
    return ""


def _validate(settings: AppInsightsSourceSettings) -> None:
    if bool(settings.workspace_id) == bool(settings.resource_id):
        raise ConfigError(SETTINGS_WHERE, "source.workspace_id",
                          "set exactly one of source.workspace_id and source.resource_id")
    if settings.resource_id and not (settings.resource_id.lower().startswith("/subscriptions/")
                                     and "/providers/" in settings.resource_id.lower()):
        raise ConfigError(SETTINGS_WHERE, "source.resource_id",
                          f"{settings.resource_id!r} is not an Azure resource id "
                          "(/subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Insights/components/<name>)")
    scheme = settings.endpoint.split("://", 1)[0].lower() if "://" in settings.endpoint else ""
    if scheme != "https":
        raise ConfigError(SETTINGS_WHERE, "source.endpoint",
                          f"{settings.endpoint!r} is not https: bearer tokens are never sent over plain HTTP")
    if settings.audience and not settings.audience.lower().startswith("https://"):
        raise ConfigError(SETTINGS_WHERE, "source.audience", f"{settings.audience!r} is not an https URL")
    if settings.ca_bundle is not None and not settings.ca_bundle.is_file():
        raise ConfigError(SETTINGS_WHERE, "source.ca_bundle", f"{settings.ca_bundle} is not a readable file")
    if settings.credential.kind == "token_file" and settings.credential.token_file is None:
        raise ConfigError(SETTINGS_WHERE, "source.credential.token_file", "required with kind token_file")
    if settings.max_window_seconds <= 0 or settings.row_limit <= 0:
        raise ConfigError(SETTINGS_WHERE, "source.max_window_seconds",
                          "max_window_seconds and row_limit must be positive")
