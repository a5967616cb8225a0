"""OpenAI-chat JSONL input (``{"id", "messages", "tools"}`` per line) → conversations, for ``evaluate``.

A line is read whole or not at all: a field of the wrong type (``messages: 5``, ``tool_calls: ["x"]``, a number
as ``name``) rejects that line with the field named, and the other lines are still read. Lone surrogates
(``"\\ud800"``, valid JSON but not UTF-8) become U+FFFD; values nested deeper than ``MAX_NESTING`` reject the line.
"""

from __future__ import annotations

import json
from typing import Any

from monitor.formats.json_text import replace_lone_surrogates_in
from monitor.models import Conversation, Message, Part, ToolDefinition


class ChatLineError(ValueError):
    """One chat line that cannot be read; ``field`` is the dotted path at fault, when there is one."""

    def __init__(self, field: str | None, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


def _optional_str(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ChatLineError(field, f"must be a string, not {type(value).__name__}")


def _text(content: Any, field: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict):
                raise ChatLineError(f"{field}.{index}", "a content part must be an object")
            text = _optional_str(part.get("text"), f"{field}.{index}.text")
            if text:
                texts.append(text)
        return "\n".join(texts)
    raise ChatLineError(field, f"must be a string or a list of parts, not {type(content).__name__}")


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ChatLineError(field, f"must be a list, not {type(value).__name__}")
    return value


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ChatLineError(field, f"must be an object, not {type(value).__name__}")
    return value


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw
    return raw


def _tool(entry: Any, field: str) -> ToolDefinition:
    entry = _object(entry, field)
    spec = _object(entry["function"], f"{field}.function") if "function" in entry else entry
    where = f"{field}.function" if "function" in entry else field
    parameters = spec.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ChatLineError(f"{where}.parameters", f"must be an object, not {type(parameters).__name__}")
    return ToolDefinition(name=_optional_str(spec.get("name"), f"{where}.name") or "",
                          description=_optional_str(spec.get("description"), f"{where}.description"),
                          parameters=parameters)


def _tool_call(call: Any, field: str) -> Part:
    call = _object(call, field)
    function = _object(call.get("function") or {}, f"{field}.function")
    return Part(type="tool_call", id=_optional_str(call.get("id"), f"{field}.id"),
                name=_optional_str(function.get("name"), f"{field}.function.name"),
                arguments=_arguments(function.get("arguments")))


def chat_record_to_conversation(record: dict[str, Any], where: str) -> Conversation:
    """One chat record as a conversation; ``ChatLineError`` names the field at fault."""
    messages: list[Message] = []
    system: list[str] = []
    for index, raw in enumerate(_list(record.get("messages"), "messages")):
        field = f"messages.{index}"
        if not isinstance(raw, dict) or not isinstance(raw.get("role"), str):
            raise ChatLineError(field, "each message is an object with a string role")
        role = raw["role"]
        if role in ("system", "developer"):
            system.append(_text(raw.get("content"), f"{field}.content"))
            continue
        parts: list[Part] = []
        if role == "tool":
            response = raw.get("content")
            parts.append(Part(type="tool_call_response", id=_optional_str(raw.get("tool_call_id"),
                                                                          f"{field}.tool_call_id"),
                              response=response))
        else:
            text = _text(raw.get("content"), f"{field}.content")
            if text:
                parts.append(Part(type="text", content=text))
            for number, call in enumerate(_list(raw.get("tool_calls"), f"{field}.tool_calls")):
                parts.append(_tool_call(call, f"{field}.tool_calls.{number}"))
        messages.append(Message(role=role, parts=tuple(parts), name=_optional_str(raw.get("name"),
                                                                                  f"{field}.name")))
    identifier = record.get("id")
    if identifier is not None and (isinstance(identifier, bool) or not isinstance(identifier, str | int)):
        raise ChatLineError("id", f"must be a string, not {type(identifier).__name__}")
    return Conversation(
        id=str(identifier) if identifier not in (None, "") else where,
        agent_name=_optional_str(record.get("agent"), "agent"),
        system_instructions="\n\n".join(s for s in system if s) or None,
        tool_definitions=tuple(_tool(t, f"tools.{i}") for i, t in enumerate(_list(record.get("tools"), "tools"))),
        messages=tuple(messages),
        reference=_optional_str(record.get("reference"), "reference"),
    )


def parse_chat_line(line: str, where: str) -> Conversation:
    """One line of chat JSONL; raises ``ChatLineError`` (never anything else) when it cannot be read."""
    try:
        record = replace_lone_surrogates_in(json.loads(line))
    except RecursionError:
        raise ChatLineError(None, "nested too deeply") from None
    except ValueError as exc:  # bad JSON, or an integer past the digit limit
        raise ChatLineError(None, f"not valid JSON: {getattr(exc, 'msg', exc)}") from None
    if not isinstance(record, dict):
        raise ChatLineError(None, "each line must be a JSON object")
    return chat_record_to_conversation(record, where)
