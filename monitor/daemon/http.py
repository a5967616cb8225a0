"""The HTTP endpoint: ``/metrics`` for Prometheus, and probes that mean something.

- ``/livez``: 200 while cycles keep finishing (whatever their outcome); 503 when none finished for 3 intervals,
  which is a stuck scheduler: restart it.
- ``/healthz``: 200 ``ok``, or 503 ``degraded`` naming why (last cycle failed, no cycle finished for
  ``STALE_INTERVALS`` intervals plus a minute, judge refusing our credential, source refusing our credential).
  Degraded is not dead: the daemon keeps retrying every cycle. ``warnings`` lists what does not fail the probe
  but makes the numbers suspect (embedded judge in production, judge drift).
- ``/readyz``: 200 when the store answers and the source's last read succeeded; 503 naming which is unreachable.

Every endpoint is served by ``BoundedHTTPServer``, which cannot be held or exhausted by clients that send slowly
or too much (see its docstring); another endpoint (a receiver, a page) only brings its handler class.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import re
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from monitor.errors import ConfigError
from monitor.metrics.exposition import Exposition
from monitor.models import utc_now
from monitor.redaction import redact
from monitor.settings import MetricsSettings

log = logging.getLogger(__name__)

STALE_INTERVALS = 3
"""``/healthz`` turns degraded when no cycle has finished for this many intervals (plus ``STALE_GRACE``)."""
STALE_GRACE = timedelta(minutes=1)


@dataclass
class HealthState:
    interval: timedelta
    started_at: datetime = field(default_factory=utc_now)
    last_finished_at: datetime | None = None
    last_failures: list[str] = field(default_factory=list)
    stale_after: timedelta | None = None
    """No cycle finished for this long degrades ``/healthz``; default ``STALE_INTERVALS`` intervals plus
    ``STALE_GRACE``."""
    checks: dict[str, Callable[[], str | None]] = field(default_factory=dict)
    """Named checks returning a problem, or None when fine (judge credential, store)."""
    warning_checks: dict[str, Callable[[], str | None]] = field(default_factory=dict)
    """Named checks returning a warning: shown on ``/healthz`` without failing it (an embedded judge in
    production, a drifting judge)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cycle_finished(self, failures: list[str]) -> None:
        with self._lock:
            self.last_finished_at = utc_now()
            self.last_failures = list(failures)

    def problems(self, now: datetime | None = None) -> list[str]:
        now = now or utc_now()
        with self._lock:
            found = [f"last cycle: {f}" for f in self.last_failures]
            reference = self.last_finished_at or self.started_at
        stale_after = self.stale_after or self.interval * STALE_INTERVALS + STALE_GRACE
        if now - reference > stale_after:
            what = "no cycle finished" if self.last_finished_at is None else "the last cycle finished"
            found.append(f"stale: {what} {int((now - reference).total_seconds())}s ago "
                         f"(interval {int(self.interval.total_seconds())}s)")
        for name, check in self.checks.items():
            problem = check()
            if problem:
                found.append(f"{name}: {problem}")
        # An endpoint's error body may echo our key back; what we serve never carries a configured secret.
        return [redact(p) for p in found]

    def warnings(self) -> list[str]:
        return [f"{name}: {warning}" for name, check in self.warning_checks.items() if (warning := check())]

    def alive(self, now: datetime | None = None) -> bool:
        now = now or utc_now()
        reference = self.last_finished_at or self.started_at
        return now - reference <= self.interval * 3 + timedelta(minutes=5)


@dataclass(frozen=True)
class HTTPLimits:
    """What one client can take from a ``BoundedHTTPServer``."""

    max_pending: int = 512
    """Connections whose request has not fully arrived, held at once; a new one beyond this drops the oldest."""
    max_request_bytes: int = 64 * 1024
    """Request line, headers and body together; more is answered 413 and closed."""
    header_timeout_seconds: float = 10.0
    """Time from connecting to a complete request (however slowly its bytes trickle in); then closed."""
    write_timeout_seconds: float = 30.0
    """A worker waits this long on a client that does not read its reply."""
    workers: int = 4
    """Threads answering complete requests."""
    max_queued: int = 64
    """Complete requests handed to the workers (being answered or waiting for one); beyond this a request is
    answered 503 at once."""
    retry_after_seconds: int | None = None
    """The ``Retry-After`` of the 503 answers (``busy``, ``too_many_pending``); None sends none."""


HEAD_BYTES = 32 * 1024
"""Room for the request line and headers beside a body limit: ``HTTPLimits(max_request_bytes=body + HEAD_BYTES)``
lets a handler that checks its own body limit answer a body a little over it itself."""


_HEAD_END = b"\r\n\r\n"
_READ_BYTES = 64 * 1024
_LARGE_READ_BYTES = 1024 * 1024
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


@dataclass
class _Pending:
    connection: socket.socket
    address: Any
    deadline: float
    buffer: bytearray = field(default_factory=bytearray)
    needed: int | None = None
    """The request's length (head and ``Content-Length`` body) once its head has arrived."""


class BoundedRequestHandler(BaseHTTPRequestHandler):
    """A handler of ``BoundedHTTPServer``: the request has been read in full before it runs (``rfile`` is that
    buffer), one request per connection (HTTP/1.0 replies close it)."""

    def setup(self) -> None:
        connection, preread = self.request
        self.request = connection
        super().setup()
        self.rfile = io.BytesIO(preread)


class BoundedHTTPServer:
    """An HTTP server that cannot be held or exhausted.

    One selector thread accepts connections and reads each request (line, headers and ``Content-Length`` body)
    without blocking; only a complete request reaches one of ``limits.workers`` threads, which runs the handler.
    So a slow-loris client (a request sent a byte at a time, or never finished) costs a socket and a buffer of at
    most ``max_request_bytes``, never a thread; it is closed after ``header_timeout_seconds``, and when
    ``max_pending`` are waiting the oldest is dropped, so a scrape always gets in. A large body (up to
    ``max_request_bytes``) arrives over many reads; the head is looked for once, so its cost stays linear. Each drop
    is counted in ``dropped`` by reason (``read_timeout``, ``too_many_pending``, ``too_large``, ``busy``) and
    reported through ``on_drop``, and the client is told why when it can be (408, 503 with ``Retry-After`` when
    configured, 413). Memory is bounded by ``(max_pending + max_queued) * max_request_bytes``.

    ``handler`` is any ``BaseHTTPRequestHandler`` subclass (its ``setup`` is replaced to read the buffered
    request); it answers one request per connection (HTTP/1.0), so a connection never waits on a worker for a
    second request."""

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler], limits: HTTPLimits | None = None,
                 name: str = "http", on_drop: Callable[[str], None] | None = None) -> None:
        self.limits = limits or HTTPLimits()
        self._handler: type[BaseHTTPRequestHandler] = type(
            f"Bounded{handler.__name__}", (BoundedRequestHandler, handler), {"protocol_version": "HTTP/1.0"})
        self._on_drop = on_drop
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=128)
        self._listener.setblocking(False)
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._pending: dict[socket.socket, _Pending] = {}  # insertion order = deadline order
        self._queued = 0
        self._lock = threading.Lock()
        self._stopping = False
        self.dropped: Counter[str] = Counter()
        self._workers = ThreadPoolExecutor(self.limits.workers, thread_name_prefix=f"{name}-worker")
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def running(self) -> bool:
        """Accepting and reading connections."""
        return self._thread.is_alive() and not self._stopping

    @property
    def pending(self) -> int:
        """Connections whose request has not fully arrived."""
        with self._lock:
            return len(self._pending)

    @property
    def buffered_bytes(self) -> int:
        with self._lock:
            return sum(len(p.buffer) for p in self._pending.values())

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stopping = True
        self._wake_write.send(b"x")
        if self._thread.is_alive():
            self._thread.join()
        self._workers.shutdown(wait=True)
        for pending in list(self._pending.values()):
            self._forget(pending)
        self._selector.close()
        self._listener.close()
        self._wake_read.close()
        self._wake_write.close()

    def _serve(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        while not self._stopping:
            with self._lock:
                oldest = next(iter(self._pending.values()), None)
            timeout = None if oldest is None else max(0.0, oldest.deadline - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is not self._wake_read:
                    self._read(key.data)
            self._expire()

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the reads
            try:
                connection, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: the client waits in the backlog
                log.warning("http: cannot accept a connection: %s", exc)
                return
            connection.setblocking(False)
            with self._lock:
                while len(self._pending) >= self.limits.max_pending:
                    self._drop(next(iter(self._pending.values())), "too_many_pending", 503)
                pending = _Pending(connection, address, time.monotonic() + self.limits.header_timeout_seconds)
                self._pending[connection] = pending
            self._selector.register(connection, selectors.EVENT_READ, pending)

    def _read(self, pending: _Pending) -> None:
        # A body whose length is known is read in large pieces: each read is a turn of this thread (and of the GIL).
        wanted = _READ_BYTES if pending.needed is None else max(_READ_BYTES, min(pending.needed - len(pending.buffer),
                                                                                 _LARGE_READ_BYTES))
        try:
            chunk = pending.connection.recv(wanted)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        with self._lock:
            if not chunk:
                self._forget(pending)
                return
            searched = len(pending.buffer)
            pending.buffer += chunk
            if len(pending.buffer) > self.limits.max_request_bytes:
                self._drop(pending, "too_large", 413)
                return
            if pending.needed is None:
                # Only the new bytes (and the 3 before them) can complete the head's end.
                head_end = pending.buffer.find(_HEAD_END, max(0, searched - len(_HEAD_END) + 1))
                if head_end < 0:
                    return
                length = _CONTENT_LENGTH.search(bytes(pending.buffer[:head_end]))
                pending.needed = head_end + len(_HEAD_END) + (int(length.group(1)) if length else 0)
                if pending.needed > self.limits.max_request_bytes:
                    self._drop(pending, "too_large", 413)
                    return
            if len(pending.buffer) < pending.needed:
                return
            if self._queued >= self.limits.max_queued:
                self._drop(pending, "busy", 503)
                return
            self._forget(pending, close=False)
            self._queued += 1
        self._workers.submit(self._handle, pending)

    def _handle(self, pending: _Pending) -> None:
        connection = pending.connection
        try:
            connection.setblocking(True)
            connection.settimeout(self.limits.write_timeout_seconds)
            self._handler((connection, bytes(pending.buffer)), pending.address, self)  # type: ignore[arg-type]
        except OSError as exc:  # the client went away or stopped reading
            log.debug("http: reply not delivered: %s", exc)
        except Exception:
            log.exception("http: handler failed")
        finally:
            with self._lock:
                self._queued -= 1
            _close(connection)

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            # In arrival order, which is deadline order: the first one not due ends the search.
            expired = []
            for pending in self._pending.values():
                if pending.deadline > now:
                    break
                expired.append(pending)
            for pending in expired:
                self._drop(pending, "read_timeout", 408)

    def _drop(self, pending: _Pending, reason: str, status: int | None = None) -> None:
        """Close a connection whose request will not be served (called with the lock held). Counted before the
        client is answered, so whoever saw the answer sees the count."""
        self.dropped[reason] += 1
        log.debug("http: dropped a connection from %s: %s", pending.address, reason)
        if self._on_drop is not None:
            self._on_drop(reason)
        if status is not None:
            retry = self.limits.retry_after_seconds
            extra = f"Retry-After: {retry}\r\n" if status == 503 and retry is not None else ""
            reply = (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\n{extra}Content-Length: 0\r\n"
                     "Connection: close\r\n\r\n")
            try:  # a best-effort answer: the client learns why; never waits on it
                pending.connection.send(reply.encode())
            except OSError:
                pass
        self._forget(pending)

    def _forget(self, pending: _Pending, close: bool = True) -> None:
        self._pending.pop(pending.connection, None)
        try:
            self._selector.unregister(pending.connection)
        except (KeyError, ValueError):
            pass
        if close:
            _close(pending.connection)


def _close(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()


class MonitorHTTPServer:
    """Serves ``/metrics``, ``/livez``, ``/healthz`` and ``/readyz`` on a background thread."""

    def __init__(self, host: str, port: int, exposition: Exposition, health: HealthState,
                 ready: Callable[[], str | None], limits: HTTPLimits | None = None,
                 on_drop: Callable[[str], None] | None = None) -> None:
        outer_exposition, outer_health, outer_ready = exposition, health, ready

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http: " + format, *args)

            def _send(self, status: int, body: bytes | tuple[bytes, ...], content_type: str,
                      encoding: str | None = None) -> None:
                parts = body if isinstance(body, tuple) else (body,)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(sum(len(part) for part in parts)))
                self.end_headers()
                for part in parts:
                    self.wfile.write(part)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                self._send(status, json.dumps(payload).encode(), "application/json")

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    scrape = outer_exposition.scrape(self.headers.get("Accept", ""),
                                                     self.headers.get("Accept-Encoding", ""))
                    self._send(200, scrape.parts, scrape.content_type, scrape.content_encoding)
                elif path == "/livez":
                    alive = outer_health.alive()
                    self._json(200 if alive else 503, {"status": "ok" if alive else "stuck"})
                elif path == "/healthz":
                    problems = outer_health.problems()
                    self._json(503 if problems else 200,
                               {"status": "degraded" if problems else "ok", "problems": problems,
                                "warnings": outer_health.warnings()})
                elif path == "/readyz":
                    problem = outer_ready()
                    problem = None if problem is None else redact(problem)
                    self._json(503 if problem else 200, {"status": "not_ready" if problem else "ok",
                                                         "problem": problem})
                else:
                    self._json(404, {"error": f"no such path {path!r}"})

        self.http = BoundedHTTPServer(host, port, Handler, limits, name="metrics-http", on_drop=on_drop)

    @property
    def address(self) -> tuple[str, int]:
        return self.http.address

    def start(self) -> None:
        self.http.start()

    def close(self) -> None:
        self.http.close()


def check_metrics_host(settings: MetricsSettings) -> None:
    try:
        socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ConfigError("settings", "metrics.host", f"cannot listen on {settings.host!r}: "
                                                       f"{getattr(exc, 'strerror', None) or exc}") from None


def listen_error(settings: MetricsSettings, exc: OSError) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError("settings", "metrics.port", f"{settings.host}:{settings.port} is already in use "
                                                        "(another rubric-monitor?)")
    if exc.errno == errno.EACCES:
        return ConfigError("settings", "metrics.port", f"port {settings.port} needs privileges; use one above 1023")
    return ConfigError("settings", "metrics.host", f"cannot listen on {settings.host}:{settings.port}: "
                                                    f"{exc.strerror or exc}")
