"""A notification receiver on 127.0.0.1: records every POST (path, headers, raw body) and answers from a script
(status, headers, delay), like Slack, Teams, Alertmanager or a webhook endpoint would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.http import LocalServer, QuietHandler


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


class Receiver(LocalServer):
    def __init__(self, script: Callable[[Received], Answer] | None = None) -> None:
        self.script = script or (lambda _: Answer())
        self.received: list[Received] = []
        self._lock = threading.Lock()
        outer = self

        class _Handler(QuietHandler):
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

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), _Handler))

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def on(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]
