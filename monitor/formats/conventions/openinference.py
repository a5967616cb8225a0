"""OpenInference (Arize Phoenix, ``openinference-instrumentation-*``): flat ``llm.*`` attributes.

An LLM span (``openinference.span.kind`` ``LLM``, span name ``ChatCompletion``, no ``gen_ai.operation.name``)
writes each message as ``llm.input_messages.N.message.{role,content,name,tool_call_id}``, multi-part content
as ``...message.contents.M.message_content.{type,text}``, tool calls as
``...message.tool_calls.M.tool_call.{id,function.name,function.arguments}``, the reply under
``llm.output_messages.N.message.*`` and the tools as ``llm.tools.N.tool.json_schema`` (the OpenAI tool object
as JSON). ``input.value``/``output.value`` repeat the raw request and response and are not needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from monitor.formats.conventions.flattened import (
    function_definition,
    has_indexed,
    openai_content_parts,
    tool_call_part,
    tool_result_part,
    unflatten,
)

NAME = "openinference"
INPUT = "llm.input_messages"
OUTPUT = "llm.output_messages"
TOOLS = "llm.tools"
SPAN_KIND = "openinference.span.kind"


def recognizes(attributes: Mapping[str, Any]) -> bool:
    return has_indexed(attributes, INPUT) or has_indexed(attributes, OUTPUT)


def is_inference(attributes: Mapping[str, Any]) -> bool:
    return str(attributes.get(SPAN_KIND, "")).upper() == "LLM"


def semconv_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The span's content as current-convention values (structured, in the parts format)."""
    result: dict[str, Any] = {}
    if has_indexed(attributes, INPUT):
        result["gen_ai.input.messages"] = [_message(item) for item in unflatten(attributes, INPUT)]
    if has_indexed(attributes, OUTPUT):
        result["gen_ai.output.messages"] = [_message(item) for item in unflatten(attributes, OUTPUT)]
    tools = [tool for item in unflatten(attributes, TOOLS) if (tool := _tool(item)) is not None]
    if tools:
        result["gen_ai.tool.definitions"] = tools
    return result


def _message(item: Mapping[str, Any]) -> dict[str, Any]:
    raw = item.get("message")
    fields: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    role = fields.get("role")
    role = role if isinstance(role, str) and role else "user"
    content = fields.get("content")
    contents = fields.get("contents")
    if content is None and isinstance(contents, list):
        content = [c.get("message_content") for c in contents if isinstance(c, dict)]
    if role == "tool":
        return {"role": "tool", "parts": [tool_result_part(fields.get("tool_call_id"), content)]}
    parts = openai_content_parts(content)
    for call in fields.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        raw_call = call.get("tool_call")
        tool_call: Mapping[str, Any] = raw_call if isinstance(raw_call, dict) else {}
        raw_function = tool_call.get("function")
        function: Mapping[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        parts.append(tool_call_part(tool_call.get("id"), function.get("name"), function.get("arguments")))
    message: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(fields.get("name"), str):
        message["name"] = fields["name"]
    return message


def _tool(item: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = item.get("tool")
    tool: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    schema = tool.get("json_schema")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except (ValueError, RecursionError):
            return None
    if not isinstance(schema, dict):
        name = tool.get("name")
        return {"type": "function", "name": name} if isinstance(name, str) and name else None
    nested = schema.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else schema
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    return function_definition(name, function.get("description"), function.get("parameters"))
