"""A fake Log Analytics query API on 127.0.0.1 (TLS by default), for the real ``azure-monitor-query`` client.

It speaks the documented wire format: ``POST /v1/workspaces/{id}/query``, ``POST /v1/{resource-id}/query``
and ``POST /v1/$batch``; a ``PrimaryResult`` table with typed columns, ``dynamic`` cells as JSON strings,
datetimes with seven fractional digits; ``PartialError`` past a row or byte limit; error bodies for 400,
401, 403, 404, 429 (with ``Retry-After``), 500 and 504; 204 with an empty body when no table was named.

What it checks, and what it does not (it cannot run KQL):
- it requires ``Authorization: Bearer <token>`` (401 without it; 403 for a token outside ``accepted_tokens``);
- it selects the tables whose names appear in the query text (outside comments and string literals);
- it filters their rows by the request's ``timespan`` on the time column, inclusive at both ends, and, when
  the query declares ``let window_start = datetime(...)`` and ``let window_end = datetime(...)`` (as
  rubric-monitor's does), by ``[window_start, window_end)`` as well: the rows its ``where`` clauses keep are
  in that window, while the timespan reaches further back for the query's lookups;
- it does NOT evaluate ``where``, ``project``, ``let`` or any other operator: every row of a named table
  inside the timespan is returned, with the union of the tables' columns (null where a table lacks one).
Faults are scripted: replies queued in ``script`` are served first, one per query request, then ``on_query``
may answer a request from its content; everything else gets data. Every request is recorded.
"""

from __future__ import annotations

import json
import re
import ssl
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from socket import socket
from typing import Any

import isodate

from tests.fakes.http import LocalServer, QuietHandler, read_json_request, tls_context

Column = tuple[str, str]
TIME_COLUMNS = ("timestamp", "TimeGenerated")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    timespan: tuple[datetime, datetime] | None = None
    tables: tuple[str, ...] = ()
    status: int = 0
    rows_returned: int = 0

    @property
    def query(self) -> str:
        return str(self.body.get("query", ""))

    @property
    def window(self) -> tuple[datetime, datetime] | None:
        """The ``[window_start, window_end)`` the query declares (its timespan may reach further back)."""
        return query_window(self.query)


@dataclass
class Reply:
    status: int = 200
    json_body: Any = None
    raw_body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def error_reply(status: int, code: str, message: str, *, inner: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None) -> Reply:
    error: dict[str, Any] = {"message": message, "code": code}
    if inner is not None:
        error["innererror"] = inner
    return Reply(status=status, json_body={"error": error}, headers=headers or {})


def bad_query(message: str = "Syntax Error") -> Reply:
    return error_reply(400, "BadArgumentError", "The request had some invalid properties",
                       inner={"code": "SyntaxError", "message": message})


def unauthorized() -> Reply:
    return error_reply(401, "AuthenticationFailed",
                       "Authentication failed. The 'Authorization' header is missing.")


def forbidden(code: str = "InsufficientAccessError") -> Reply:
    return error_reply(403, code, "The provided credentials have insufficient access to perform the "
                                  "requested operation")


def throttled(retry_after: float) -> Reply:
    # The service's throttling body is not documented; the status and Retry-After are what clients act on.
    return error_reply(429, "ThrottledError", "Too many requests. Please retry after a while.",
                       headers={"Retry-After": f"{retry_after:g}"})


def server_error(status: int = 500) -> Reply:
    codes = {500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable"}
    code = codes.get(status, "ServerError")
    return error_reply(status, code, "Something went wrong processing your query on the server.")


def gateway_timeout() -> Reply:
    return error_reply(504, "GatewayTimeout", "The query did not complete within the allowed wait time.")


def no_content() -> Reply:
    return Reply(status=204, raw_body=b"")


def partial_error_body(inner_message: str, inner_code: str = "-2133196797") -> dict[str, Any]:
    return {
        "code": "PartialError",
        "message": "There were some errors when processing your query.",
        "details": [{
            "code": "EngineError",
            "message": "Something went wrong processing your query on the server.",
            "innererror": {"code": inner_code, "message": inner_message, "severity": 2,
                           "severityName": "Error"},
        }],
    }


def row_limit_message(limit: int) -> str:
    return (f"Query result set has exceeded the internal record count limit {limit} "
            "(E_QUERY_RESULT_SET_TOO_LARGE).")


def byte_limit_message(limit: int) -> str:
    return (f"Query result set has exceeded the internal data size limit {limit} "
            "(E_QUERY_RESULT_SET_TOO_LARGE).")


@dataclass
class Table:
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def time_column(self) -> str | None:
        return next((name for name, _ in self.columns if name in TIME_COLUMNS), None)


Dataset = dict[str, Table]


def encode_cell(value: Any, column_type: str) -> Any:
    if value is None:
        return None
    if column_type == "datetime" and isinstance(value, datetime):
        utc = value.astimezone(UTC)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}0Z"
    if column_type == "dynamic" and not isinstance(value, str):
        # dynamic cells travel as JSON text; a str is taken as already-encoded (lets tests send broken JSON)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


_STRING_LITERAL = re.compile(r'@?"(?:[^"\\\n]|\\.)*"|@?\'(?:[^\'\\\n]|\\.)*\'')
_COMMENT = re.compile(r"//[^\n]*")


def tables_named(query: str, candidates: list[str]) -> list[str]:
    """Table names that occur as words in the query, ignoring string literals and comments, in query order."""
    code = _COMMENT.sub(" ", _STRING_LITERAL.sub('""', query))
    found: list[tuple[int, str]] = []
    for name in candidates:
        match = re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", code)
        if match:
            found.append((match.start(), name))
    return [name for _, name in sorted(found)]


_WINDOW_BOUND = re.compile(r"let window_(start|end) = datetime\(([^)]+)\);")


def query_window(query: str) -> tuple[datetime, datetime] | None:
    """``[window_start, window_end)`` as the query declares them, if it does."""
    bounds = {name: _as_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
              for name, value in _WINDOW_BOUND.findall(query)}
    if "start" in bounds and "end" in bounds:
        return bounds["start"], bounds["end"]
    return None


def parse_timespan(value: str | None, now: datetime) -> tuple[datetime, datetime] | None:
    """``start/end``, ``start/duration`` or ``duration`` (ending now), as the client encodes them."""
    if not value:
        return None
    if "/" in value:
        first, second = value.split("/", 1)
        start = _as_utc(isodate.parse_datetime(first))
        if second.startswith("P"):
            return start, start + isodate.parse_duration(second)
        return start, _as_utc(isodate.parse_datetime(second))
    duration = isodate.parse_duration(value)
    assert isinstance(duration, timedelta)
    return now - duration, now


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _prefer_wait(headers: dict[str, str]) -> float | None:
    match = re.search(r"wait=(\d+)", headers.get("prefer", ""))
    return float(match.group(1)) if match else None


class FakeLogAnalytics(LocalServer):
    """Start with ``with FakeLogAnalytics() as server:``; point the client at ``server.endpoint`` and trust
    ``server.ca_path``. Load data with ``add_table`` for a workspace id or an Application Insights resource
    id."""

    def __init__(self, *, tls: bool = True, row_limit: int = 500_000, byte_limit: int | None = None,
                 accepted_tokens: set[str] | None = None, query_seconds: float = 0.0) -> None:
        self.row_limit = row_limit
        self.byte_limit = byte_limit
        self.accepted_tokens = accepted_tokens
        self.query_seconds = query_seconds
        """Simulated run time of every query; past the request's ``Prefer: wait=`` the reply is 504."""
        self.script: deque[Reply] = deque()
        self.on_query: Callable[[Recorded], Reply | None] | None = None
        self.requests: list[Recorded] = []
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self._workspaces: dict[str, Dataset] = {}
        self._resources: dict[str, Dataset] = {}
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-log-analytics-")
        super().__init__(self._make_server(tls))

    # --- data -----------------------------------------------------------------------------------------------

    def add_table(self, name: str, columns: list[Column], rows: list[dict[str, Any]], *,
                  workspace_id: str | None = None, resource_id: str | None = None) -> None:
        dataset = self._dataset(workspace_id, resource_id, create=True)
        assert dataset is not None
        with self._lock:
            table = dataset.setdefault(name, Table(columns=list(columns)))
            table.rows.extend(rows)

    def clear(self) -> None:
        """Forget every table and recorded request: one server serves test after test."""
        with self._lock:
            self._workspaces.clear()
            self._resources.clear()
            self.requests.clear()

    def _dataset(self, workspace_id: str | None, resource_id: str | None, *,
                 create: bool = False) -> Dataset | None:
        if (workspace_id is None) == (resource_id is None):
            raise ValueError("give exactly one of workspace_id and resource_id")
        store, key = ((self._workspaces, workspace_id) if workspace_id is not None
                      else (self._resources, str(resource_id).strip("/").lower()))
        assert key is not None
        if create:
            return store.setdefault(key, {})
        return store.get(key)

    # --- serving --------------------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    @property
    def ca_path(self) -> Path:
        return self._ca_path

    @property
    def query_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/query")]

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._tmp.cleanup()

    def _make_server(self, tls: bool) -> ThreadingHTTPServer:
        context: ssl.SSLContext | None = None
        self._scheme = "http"
        self._ca_path = Path(self._tmp.name) / "ca.pem"
        if tls:
            context = tls_context(self._ca_path, "127.0.0.1", "localhost")
            self._scheme = "https"
        return _Server(self, context)

    def _receive(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
        reply = self._answer(recorded)
        recorded.status = reply.status
        return reply

    def _answer(self, recorded: Recorded) -> Reply:
        denied = self._check_auth(recorded.headers)
        if denied is not None:
            return denied
        with self._lock:
            scripted = self.script.popleft() if self.script else None
        if scripted is not None:
            return scripted
        path = recorded.path.split("?", 1)[0]
        if path == "/v1/$batch":
            return self._batch(recorded)
        dataset = self._dataset_for(path)
        if dataset is None:
            return error_reply(404, "PathNotFoundError", "The requested path does not exist")
        self._describe(recorded, dataset)
        if self.on_query is not None:
            hooked = self.on_query(recorded)
            if hooked is not None:
                return hooked
        wait = _prefer_wait(recorded.headers)
        if self.query_seconds:
            if wait is not None and self.query_seconds > wait:
                time.sleep(wait)
                return gateway_timeout()
            time.sleep(self.query_seconds)
        return self._run(recorded, dataset)

    def _check_auth(self, headers: dict[str, str]) -> Reply | None:
        value = headers.get("authorization", "")
        if not value.startswith("Bearer ") or not value[7:].strip():
            return unauthorized()
        if self.accepted_tokens is not None and value[7:].strip() not in self.accepted_tokens:
            return forbidden("InvalidAuthenticationToken")
        return None

    def _dataset_for(self, path: str) -> Dataset | None:
        workspace = re.fullmatch(r"/v1/workspaces/([^/]+)/query", path)
        if workspace:
            return self._workspaces.get(workspace.group(1))
        resource = re.fullmatch(r"/v1/(subscriptions/.+)/query", path)
        if resource:
            return self._resources.get(resource.group(1).strip("/").lower())
        return None

    def _describe(self, recorded: Recorded, dataset: Dataset) -> None:
        recorded.tables = tuple(tables_named(recorded.query, list(dataset)))
        recorded.timespan = parse_timespan(recorded.body.get("timespan"), self.clock())

    def data_reply(self, recorded: Recorded) -> Reply:
        """The data reply to a query request, as served when nothing is scripted (for an ``on_query`` hook
        that alters it)."""
        dataset = self._dataset_for(recorded.path.split("?", 1)[0])
        if dataset is None:
            raise ValueError(f"no workspace or resource at {recorded.path}")
        return self._run(recorded, dataset)

    def _run(self, recorded: Recorded, dataset: Dataset) -> Reply:
        if not recorded.tables:
            return no_content()
        columns: list[Column] = []
        seen: set[str] = set()
        for name in recorded.tables:
            for column in dataset[name].columns:
                if column[0] not in seen:
                    seen.add(column[0])
                    columns.append(column)
        encoded_rows = [json.dumps([encode_cell(row.get(name), kind) for name, kind in columns],
                                   ensure_ascii=False, separators=(",", ":"))
                        for name in recorded.tables
                        for row in self._rows_in(dataset[name], recorded.timespan, query_window(recorded.query))]
        kept, error = self._apply_limits(encoded_rows)
        recorded.rows_returned = len(kept)
        head = json.dumps({"name": "PrimaryResult", "columns": [{"name": n, "type": t} for n, t in columns]})
        body = '{"tables":[' + head[:-1] + ',"rows":[' + ",".join(kept) + "]}]"
        if error is not None:
            body += ',"error":' + json.dumps(error)
        return Reply(json_body=(body + "}").encode())

    def _rows_in(self, table: Table, timespan: tuple[datetime, datetime] | None,
                 window: tuple[datetime, datetime] | None) -> list[dict[str, Any]]:
        with self._lock:
            rows = list(table.rows)
        column = table.time_column
        if column is None:
            return rows
        if timespan is not None:
            start, end = timespan
            rows = [row for row in rows if start <= _as_utc(row[column]) <= end]
        if window is not None:
            start, end = window
            rows = [row for row in rows if start <= _as_utc(row[column]) < end]
        return rows

    def _apply_limits(self, encoded_rows: list[str]) -> tuple[list[str], dict[str, Any] | None]:
        if len(encoded_rows) > self.row_limit:
            return encoded_rows[: self.row_limit], partial_error_body(row_limit_message(self.row_limit))
        if self.byte_limit is not None:
            size = 0
            for index, row in enumerate(encoded_rows):
                size += len(row.encode()) + 1
                if size > self.byte_limit:
                    return encoded_rows[:index], partial_error_body(byte_limit_message(self.byte_limit))
        return encoded_rows, None

    def _batch(self, recorded: Recorded) -> Reply:
        responses = []
        for item in recorded.body.get("requests", []):
            headers = {k.lower(): v for k, v in (item.get("headers") or {}).items()}
            inner = Recorded("POST", f"/v1/workspaces/{item.get('workspace')}/query", headers,
                             item.get("body") or {})
            dataset = self._workspaces.get(str(item.get("workspace")))
            if dataset is None:
                reply = error_reply(404, "PathNotFoundError", "The requested path does not exist")
            else:
                self._describe(inner, dataset)
                reply = self._run(inner, dataset)
            body = json.loads(reply.json_body) if isinstance(reply.json_body, bytes) else reply.json_body
            responses.append({"id": item.get("id"), "status": reply.status, "body": body or {}})
        return Reply(json_body={"responses": responses})


class _Handler(QuietHandler):
    disable_nagle_algorithm = True  # headers and body go out in two writes; don't let them wait for an ACK
    server: _Server

    def do_POST(self) -> None:
        headers, body = read_json_request(self)
        recorded = Recorded("POST", self.path, headers, body)
        reply = self.server.fake._receive(recorded)
        if reply.delay:
            time.sleep(reply.delay)
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        if reply.raw_body is not None:
            payload = reply.raw_body
        elif isinstance(reply.json_body, bytes):
            payload = reply.json_body
        else:
            payload = json.dumps(reply.json_body, ensure_ascii=False).encode()
        try:
            self.send_response(reply.status)
            if reply.status != 204:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client gave up (timeout tests)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeLogAnalytics, context: ssl.SSLContext | None) -> None:
        self.fake = fake
        self.context = context
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs in the request's own thread, so a stuck client cannot stall accept().
        if self.context is None:
            super().finish_request(request, client_address)
            return
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(wrapped, client_address, self)
        finally:
            wrapped.close()

    def shutdown_request(self, request: socket) -> None:
        try:
            super().shutdown_request(request)
        except OSError:
            pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        return
