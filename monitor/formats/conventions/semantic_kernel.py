"""Semantic Kernel's agent spans: current attribute names, OpenAI-shaped values.

``invoke_agent`` spans carry ``gen_ai.input.messages`` (often ``"[]"``) and ``gen_ai.output.messages`` as
OpenAI chat messages ``{role, content, name, tool_calls, tool_call_id}`` without ``parts``, and
``gen_ai.tool.definitions`` as OpenAI tools ``[{"type": "function", "function": {...}}]``. Its chat spans
(``gen_ai.operation.name`` ``chat.completions``) put the messages in log records (``event.name``
``gen_ai.user.message`` ..., JSON-text bodies), which the legacy-event reader reads. Any producer writing
OpenAI-shaped values under the current names is read the same way: the shape is recognised, not the library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from monitor.formats.conventions.flattened import (
    function_definition,
    openai_content_parts,
    tool_call_part,
    tool_result_part,
)

NAME = "semantic_kernel"
_MESSAGE_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages")
_TOOLS = "gen_ai.tool.definitions"
_TOOL_SHAPE_CHARS = 512


def recognizes(attributes: Mapping[str, Any]) -> bool:
    """Messages without ``parts``, or tools nested under ``function``: the OpenAI shape, not the GenAI one."""
    for key in _MESSAGE_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and '"role"' in value and '"parts"' not in value:
            return True
    tools = attributes.get(_TOOLS)
    if not isinstance(tools, str):
        return False
    # The first tool shows the shape ({"type": "function", "function": {...}}); definitions run to kilobytes.
    head = tools[:_TOOL_SHAPE_CHARS]
    return '"function": {' in head or '"function":{' in head


def semconv_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key in _MESSAGE_KEYS:
        value = _decoded(attributes.get(key))
        if isinstance(value, list) and all(isinstance(m, dict) for m in value):
            result[key] = [m if "parts" in m else _message(m) for m in value]
    tools = _decoded(attributes.get(_TOOLS))
    if isinstance(tools, list):
        result[_TOOLS] = [_tool(t) if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
                          for t in tools]
    return result


def _decoded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _message(fields: Mapping[str, Any]) -> dict[str, Any]:
    role = fields.get("role")
    role = role if isinstance(role, str) and role else "assistant"
    if role == "tool":
        return {"role": "tool", "parts": [tool_result_part(fields.get("tool_call_id"), fields.get("content"))]}
    parts = openai_content_parts(fields.get("content"))
    for call in fields.get("tool_calls") or ():
        if isinstance(call, dict):
            raw_function = call.get("function")
            function: Mapping[str, Any] = raw_function if isinstance(raw_function, dict) else call
            parts.append(tool_call_part(call.get("id"), function.get("name"), function.get("arguments")))
    message: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(fields.get("name"), str):
        message["name"] = fields["name"]
    return message


def _tool(raw: Mapping[str, Any]) -> dict[str, Any]:
    function: Mapping[str, Any] = raw["function"]
    return function_definition(str(function.get("name")), function.get("description"), function.get("parameters"),
                               kind=str(raw.get("type") or "function"))
