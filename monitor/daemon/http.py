"""The HTTP endpoint: ``/metrics`` for Prometheus, and probes that mean something.

- ``/livez``: 200 while cycles keep finishing (whatever their outcome); 503 when none finished for 3 intervals,
  which is a stuck scheduler: restart it.
- ``/healthz``: 200 ``ok``, or 503 ``degraded`` naming why (last cycle failed, no cycle finished for
  ``STALE_INTERVALS`` intervals plus a minute, judge refusing our credential, source refusing our credential).
  Degraded is not dead: the daemon keeps retrying every cycle. ``warnings`` lists what does not fail the probe
  but makes the numbers suspect (embedded judge in production, judge drift).
- ``/readyz``: 200 when the store answers and the source's last read succeeded; 503 naming which is unreachable.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class MonitorHTTPServer:
    """Serves ``/metrics``, ``/livez``, ``/healthz`` and ``/readyz`` on a background thread."""

    def __init__(self, host: str, port: int, exposition: Exposition, health: HealthState,
                 ready: Callable[[], str | None]) -> None:
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

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
