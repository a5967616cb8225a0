"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the real ``openai`` client.

Each request is recorded (path, headers, JSON body, arrival time) and answered by a handler: a function of
the request that returns a ``Reply`` (status, JSON or raw body, headers, delay, a body cut short). Serves both
the OpenAI paths (``/v1/chat/completions``) and Azure OpenAI's
(``/openai/deployments/{deployment}/chat/completions``).

Fault helpers: ``rate_limited`` (429 with Retry-After), ``hang`` (a reply later than any client timeout),
``malformed_body`` (a 200 that is not JSON), ``cut_body`` (the connection drops mid-body), and
``QuotaHandler``, a quota-enforcing endpoint (429 above a request rate) with a fixed latency, for limiter
tests and benchmarks.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.http import LocalServer, QuietHandler, read_json_request


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = 0.0
    """``time.monotonic()`` when the request arrived."""

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
    cut_body_at: int | None = None
    """Announce the full body but send only this many bytes, then close the connection."""


def completion(content: str, *, model: str = "scripted", prompt_tokens: int = 100,
               completion_tokens: int = 20, finish_reason: str = "stop", refusal: str | None = None) -> Reply:
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


def error(status: int, message: str = "error", code: str = "error",
          headers: dict[str, str] | None = None, *, param: str | None = None) -> Reply:
    """An error as OpenAI sends it; ``param`` names the request field at fault (``"response_format"``)."""
    body = {"message": message, "type": code, "code": code, "param": param}
    return Reply(status=status, json_body={"error": body}, headers=headers or {})


def rate_limited(retry_after: float | None = None, *, retry_after_ms: float | None = None,
                 headers: dict[str, str] | None = None, code: str = "rate_limit_exceeded") -> Reply:
    """A 429 as OpenAI sends it; ``retry_after`` in seconds (an integer on the wire, as HTTP wants)."""
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = str(math.ceil(retry_after))
    if retry_after_ms is not None:
        all_headers["retry-after-ms"] = str(int(retry_after_ms))
    return error(429, "Rate limit reached", code, all_headers)


def hang(seconds: float, content: str = "{}") -> Reply:
    """A reply that arrives only after ``seconds`` (longer than the client's timeout)."""
    reply = completion(content)
    reply.delay = seconds
    return reply


def malformed_body() -> Reply:
    """A 200 whose body is not JSON at all (a proxy's HTML page)."""
    return Reply(raw_body=b"<html><body>Bad gateway</body></html>")


def cut_body(content: str = "{}") -> Reply:
    """A completion whose HTTP body stops halfway (the connection drops)."""
    reply = completion(content)
    reply.cut_body_at = 40
    return reply


Handler = Callable[[Recorded], Reply]


def max_in_window(times: Sequence[float], window: float) -> int:
    """The largest number of ``times`` inside any interval of length ``window`` (a sliding-window rate)."""
    ordered = sorted(times)
    best = 0
    start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


class QuotaHandler:
    """An endpoint with a request quota: a token bucket of ``requests_per_minute`` holding ``burst_seconds``
    of requests, like providers that enforce per-minute quotas per second. Above it: 429 with
    ``retry-after-ms``, ``retry-after`` and (unless ``announce_limits`` is False) ``x-ratelimit-*`` headers.
    Accepted requests answer ``content`` (a string, or a function of the request) after ``latency`` plus up
    to ``jitter`` seconds. ``accepted_at`` and ``limited`` record what happened."""

    def __init__(self, requests_per_minute: float, *, content: str | Callable[[Recorded], str] = "{}",
                 latency: float = 0.0,
                 jitter: float = 0.0, burst_seconds: float = 1.0, announce_limits: bool = True,
                 seed: int = 7) -> None:
        self.rate = requests_per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_seconds)
        self.content = content
        self.latency = latency
        self.jitter = jitter
        self.announce_limits = announce_limits
        self._level = self.capacity
        self._updated = time.monotonic()
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self.accepted_at: list[float] = []
        self.limited = 0

    def __call__(self, request: Recorded) -> Reply:
        with self._lock:
            now = time.monotonic()
            self._level = min(self.capacity, self._level + (now - self._updated) * self.rate)
            self._updated = now
            if self._level < 1.0:
                self.limited += 1
                wait = (1.0 - self._level) / self.rate
                return rate_limited(wait, retry_after_ms=wait * 1000.0, headers=self._quota_headers({
                    "x-ratelimit-limit-requests": str(int(self.rate * 60)),
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": f"{int(wait * 1000) + 1}ms",
                }))
            self._level -= 1.0
            self.accepted_at.append(now)
            delay = self.latency + self._random.uniform(0.0, self.jitter)
            headers = self._quota_headers({
                "x-ratelimit-limit-requests": str(int(self.rate * 60)),
                "x-ratelimit-remaining-requests": str(int(self._level)),
                "x-ratelimit-reset-requests": f"{int((self.capacity - self._level) / self.rate * 1000)}ms",
            })
        content = self.content if isinstance(self.content, str) else self.content(request)
        reply = completion(content, prompt_tokens=len(request.prompt_text) // 4 + 1,
                           completion_tokens=len(content) // 4 + 1)
        reply.delay = delay
        reply.headers = headers
        return reply

    def _quota_headers(self, headers: dict[str, str]) -> dict[str, str]:
        # Some gateways say nothing but 429 + Retry-After: announce_limits=False plays one.
        return headers if self.announce_limits else {}


class ScriptedOpenAIServer(LocalServer):
    """Start with ``with ScriptedOpenAIServer(handler) as server:``; ``server.base_url`` ends in ``/v1``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        outer = self

        class _Handler(QuietHandler):
            def do_POST(self) -> None:
                headers, body = read_json_request(self)
                recorded = Recorded(self.path, headers, body, received_at=time.monotonic())
                with outer._lock:
                    outer.requests.append(recorded)
                reply = outer.handler(recorded)
                if reply.delay:
                    time.sleep(reply.delay)
                payload = (reply.raw_body if reply.raw_body is not None
                           else json.dumps(reply.json_body).encode())
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    if reply.cut_body_at is not None:
                        self.send_header("Connection", "close")
                        self.close_connection = True
                        payload = payload[: reply.cut_body_at]
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), _Handler))

    @property
    def root_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)
