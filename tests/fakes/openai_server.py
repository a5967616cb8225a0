"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the real ``openai`` client.

Each request is recorded (path, headers, JSON body) and answered by a handler: a function of the request that
returns a ``Reply`` (status, JSON or raw body, headers, delay). Serves both the OpenAI paths
(``/v1/chat/completions``) and Azure OpenAI's (``/openai/deployments/{deployment}/chat/completions``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt_text(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.body.get("messages", []))


@dataclass
class Reply:
    status: int = 200
    json_body: Any = None
    raw_body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(content: str, *, model: str = "scripted", prompt_tokens: int = 100, completion_tokens: int = 20,
               finish_reason: str = "stop", refusal: str | None = None) -> Reply:
    """A well-formed chat.completion whose message content is ``content``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message = {"role": "assistant", "content": None, "refusal": refusal}
    return Reply(json_body={
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def error(status: int, message: str = "error", code: str = "error", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, json_body={"error": {"message": message, "type": code, "code": code}},
                 headers=headers or {})


Handler = Callable[[Recorded], Reply]


class ScriptedOpenAIServer:
    """Start with ``with ScriptedOpenAIServer(handler) as server:``; ``server.base_url`` ends in ``/v1``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {}
                recorded = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with outer._lock:
                    outer.requests.append(recorded)
                reply = outer.handler(recorded)
                if reply.delay:
                    time.sleep(reply.delay)
                payload = reply.raw_body if reply.raw_body is not None else json.dumps(reply.json_body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
