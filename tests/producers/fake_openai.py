"""A scenario-scripted OpenAI-compatible chat-completions server on 127.0.0.1, plain and streamed.

``ScenarioServer(stream_flavour)`` answers ``POST .../chat/completions`` with the next assistant message of
``tests.producers.scenario`` (chosen from the request's messages, so deterministic). ``"stream": true``
answers as Server-Sent Events in one of two flavours:

- ``"openai"``: as api.openai.com streams. The first chunk's delta is ``{"role": "assistant", "content": "",
  "refusal": null}`` for a text reply, or ``{"role": "assistant", "content": null, "tool_calls": [{index, id,
  type, function: {name, arguments: ""}}], "refusal": null}`` when a tool call follows; then argument
  fragments (``{"tool_calls": [{"index": 0, "function": {"arguments": "..."}}]}``) or content fragments; then
  a chunk with an empty delta and ``finish_reason``; with ``stream_options.include_usage`` every chunk has
  ``"usage": null`` and a last chunk has ``"choices": []`` and the usage.
- ``"vllm"``: as vLLM and Ollama's OpenAI-compatible endpoints stream. The first chunk's delta is
  ``{"role": "assistant", "content": ""}`` on its own, even before a tool call; the tool call then comes in one
  chunk (id, name and all its arguments); content fragments; the finish chunk; the usage chunk when asked.

Every request is kept in ``requests`` (``tests.fakes.openai_server.Recorded``).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Literal

from tests.fakes.http import LocalServer, QuietHandler, read_json_request
from tests.fakes.openai_server import Recorded
from tests.producers import scenario

StreamFlavour = Literal["openai", "vllm"]
FINGERPRINT = "fp_scripted"
CREATED = 1_790_000_000


def _usage(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, int]:
    prompt = sum(len(scenario.message_text(m)) for m in request.get("messages", [])) // 4 + 1
    completion = len(json.dumps(reply)) // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _wire_names(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """The reply with each tool call named as the request declared that tool: frameworks that prefix tool
    names (Semantic Kernel's ``Booking-find_table``) get their own name back."""
    declared = [t.get("function", {}).get("name", "") for t in request.get("tools") or [] if isinstance(t, dict)]
    calls = []
    for call in reply.get("tool_calls") or []:
        name = call["function"]["name"]
        wire = next((d for d in declared if d == name), None) or next(
            (d for d in declared if d.endswith(("-" + name, "_" + name, "." + name))), name)
        calls.append({**call, "function": {**call["function"], "name": wire}})
    return {**reply, "tool_calls": calls} if calls else reply


def _pieces(text: str, size: int = 12) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def completion_body(request: dict[str, Any], reply: dict[str, Any], response_id: str) -> dict[str, Any]:
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    message = dict(reply, refusal=None)
    return {"id": response_id, "object": "chat.completion", "created": CREATED, "model": scenario.RESPONSE_MODEL,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": _usage(request, reply)}


def stream_chunks(request: dict[str, Any], reply: dict[str, Any], response_id: str,
                  flavour: StreamFlavour) -> list[dict[str, Any]]:
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    calls = reply.get("tool_calls") or []
    deltas: list[dict[str, Any]] = []
    if flavour == "openai":
        if calls:
            call = calls[0]
            deltas.append({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": ""}}], "refusal": None})
            deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                       for piece in _pieces(call["function"]["arguments"], 8)]
        else:
            deltas.append({"role": "assistant", "content": "", "refusal": None})
            deltas += [{"content": piece} for piece in _pieces(reply["content"])]
    else:
        deltas.append({"role": "assistant", "content": ""})
        if calls:
            call = calls[0]
            deltas.append({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                           "function": dict(call["function"])}]})
        else:
            deltas += [{"content": piece} for piece in _pieces(reply["content"])]
    finish = "tool_calls" if calls else "stop"
    choices = [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
    choices.append({"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish})
    chunks = []
    for choice in choices:
        chunk: dict[str, Any] = {"id": response_id, "object": "chat.completion.chunk", "created": CREATED,
                                 "model": scenario.RESPONSE_MODEL, "system_fingerprint": FINGERPRINT,
                                 "choices": [choice]}
        if include_usage:
            chunk["usage"] = None
        chunks.append(chunk)
    if include_usage:
        chunks.append({"id": response_id, "object": "chat.completion.chunk", "created": CREATED,
                       "model": scenario.RESPONSE_MODEL, "system_fingerprint": FINGERPRINT, "choices": [],
                       "usage": _usage(request, reply)})
    return chunks


class ScenarioServer(LocalServer):
    """``with ScenarioServer("openai") as server:``; ``server.base_url`` ends in ``/v1``."""

    def __init__(self, stream_flavour: StreamFlavour = "openai") -> None:
        self.stream_flavour = stream_flavour
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    models = [{"id": scenario.MODEL, "object": "model", "created": CREATED, "owned_by": "scripted"}]
                    self.send_body(200, json.dumps({"object": "list", "data": models}).encode())
                else:
                    self.send_body(404, b'{"error": {"message": "not found", "type": "not_found"}}')

            def do_POST(self) -> None:
                headers, body = read_json_request(self)
                recorded = Recorded(self.path, headers, body, received_at=time.monotonic())
                with outer._lock:
                    outer.requests.append(recorded)
                    number = len(outer.requests)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    outer.errors.append(f"unexpected path {self.path}")
                    self.send_body(404, b'{"error": {"message": "not found", "type": "not_found"}}')
                    return
                try:
                    reply = _wire_names(body, scenario.next_reply(body.get("messages") or []))
                except LookupError as exc:
                    outer.errors.append(str(exc))
                    self.send_body(400, json.dumps({"error": {"message": str(exc), "type": "invalid_request_error",
                                                          "code": None, "param": "messages"}}).encode())
                    return
                response_id = f"chatcmpl-scripted-{number:03d}"
                if not body.get("stream"):
                    self.send_body(200, json.dumps(completion_body(body, reply, response_id)).encode())
                    return
                payload = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n"
                                   for chunk in stream_chunks(body, reply, response_id, outer.stream_flavour))
                self.send_body(200, payload + b"data: [DONE]\n\n", "text/event-stream; charset=utf-8")

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def chat_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]
