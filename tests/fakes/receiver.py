"""A notification receiver on 127.0.0.1: records every POST (path, headers, raw body) and answers from a script
(status, headers, delay), like Slack, Teams, Alertmanager or a webhook endpoint would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    raw: bytes
    received_at: float
    replied_at: float = 0.0
    status: int = 0

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b"ok"


class Receiver:
    def __init__(self, script: Callable[[Received], Answer] | None = None) -> None:
        self.script = script or (lambda _: Answer())
        self.received: list[Received] = []
        self._lock = threading.Lock()
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, raw, time.monotonic())
                with outer._lock:
                    outer.received.append(got)
                answer = outer.script(got)
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                got.status = answer.status
                got.replied_at = time.monotonic()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def on(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
