"""OpenAI-chat JSONL input (``{"id", "messages", "tools"}`` per line) → conversations, for ``evaluate``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from monitor.errors import ConfigError
from monitor.models import Conversation, Message, Part, ToolDefinition


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _tool(entry: dict[str, Any]) -> ToolDefinition:
    spec = entry.get("function", entry)
    return ToolDefinition(name=str(spec.get("name", "")), description=spec.get("description"),
                          parameters=spec.get("parameters"))


def chat_record_to_conversation(record: dict[str, Any], where: str) -> Conversation:
    messages: list[Message] = []
    system: list[str] = []
    for index, raw in enumerate(record.get("messages") or []):
        if not isinstance(raw, dict) or "role" not in raw:
            raise ConfigError(where, f"messages.{index}", "each message needs a role")
        role = str(raw["role"])
        if role in ("system", "developer"):
            system.append(_text(raw.get("content")))
            continue
        parts: list[Part] = []
        if role == "tool":
            parts.append(Part(type="tool_call_response", id=raw.get("tool_call_id"), response=raw.get("content")))
        else:
            text = _text(raw.get("content"))
            if text:
                parts.append(Part(type="text", content=text))
            for call in raw.get("tool_calls") or []:
                function = call.get("function", {})
                parts.append(Part(type="tool_call", id=call.get("id"), name=function.get("name"),
                                  arguments=_arguments(function.get("arguments"))))
        messages.append(Message(role=role, parts=tuple(parts), name=raw.get("name")))
    return Conversation(
        id=str(record.get("id") or f"{where}#{record.get('_line', 0)}"),
        agent_name=record.get("agent"),
        system_instructions="\n\n".join(s for s in system if s) or None,
        tool_definitions=tuple(_tool(t) for t in record.get("tools") or [] if isinstance(t, dict)),
        messages=tuple(messages),
        reference=record.get("reference"),
    )


def read_chat_jsonl(lines: Iterator[tuple[int, str]], where: str) -> Iterator[Conversation]:
    for number, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}:{number}", None, f"not valid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise ConfigError(f"{where}:{number}", None, "each line must be a JSON object")
        yield chat_record_to_conversation({**record, "_line": number}, f"{where}:{number}")
