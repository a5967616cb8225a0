"""OpenLLMetry before the current conventions (``opentelemetry-instrumentation-openai`` 0.4x, Traceloop).

Each message is flat attributes: ``gen_ai.prompt.N.{role,content,tool_call_id}`` with tool calls as
``gen_ai.prompt.N.tool_calls.M.{id,name,arguments}``; the reply is ``gen_ai.completion.N.{role,content,
finish_reason,tool_calls.M.*}``; the tools are ``llm.request.functions.N.{name,description,parameters}``
(parameters as JSON text). ``content`` is the text, or the OpenAI content parts as JSON text. The span is
``openai.chat`` with ``llm.request.type`` ``chat`` and no ``gen_ai.operation.name``.
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

NAME = "openllmetry_legacy"
PROMPT = "gen_ai.prompt"
COMPLETION = "gen_ai.completion"
FUNCTIONS = "llm.request.functions"
REQUEST_TYPE = "llm.request.type"


def recognizes(attributes: Mapping[str, Any]) -> bool:
    return has_indexed(attributes, PROMPT) or has_indexed(attributes, COMPLETION)


def inference_operation(attributes: Mapping[str, Any]) -> str | None:
    kind = attributes.get(REQUEST_TYPE)
    return {"chat": "chat", "completion": "text_completion"}.get(str(kind)) if kind else None


def semconv_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if has_indexed(attributes, PROMPT):
        result["gen_ai.input.messages"] = [_message(item, "user") for item in unflatten(attributes, PROMPT)]
    if has_indexed(attributes, COMPLETION):
        outputs = [_message(item, "assistant") for item in unflatten(attributes, COMPLETION)]
        result["gen_ai.output.messages"] = outputs
    tools = [tool for item in unflatten(attributes, FUNCTIONS) if (tool := _tool(item)) is not None]
    if tools:
        result["gen_ai.tool.definitions"] = tools
    return result


def _message(fields: Mapping[str, Any], default_role: str) -> dict[str, Any]:
    role = fields.get("role")
    role = role if isinstance(role, str) and role else default_role
    content = fields.get("content")
    if role == "tool":
        return {"role": "tool", "parts": [tool_result_part(fields.get("tool_call_id"), content)]}
    parts = openai_content_parts(content)
    for call in fields.get("tool_calls") or ():
        if isinstance(call, dict):
            parts.append(tool_call_part(call.get("id"), call.get("name"), call.get("arguments")))
    message: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(fields.get("finish_reason"), str):
        message["finish_reason"] = fields["finish_reason"]
    return message


def _tool(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        return None
    parameters = fields.get("parameters")
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except (ValueError, RecursionError):
            parameters = None
    return function_definition(name, fields.get("description"), parameters)
