"""Turn tau-bench chat trajectories into OpenTelemetry GenAI spans, written as OTLP JSON lines.

    python tools/tau_to_otlp.py INPUT.json OUTPUT.jsonl [--limit N] [--agent-name NAME] [--model MODEL]

Each record becomes one trace (one OTLP line): a root ``invoke_agent {agent}`` span carrying
``gen_ai.conversation.id = tau-{task_id}-{trial}`` and the whole dialogue as its input, one ``chat {model}``
child per assistant message (input: every earlier non-system message; output: that message; the system
prompt as ``gen_ai.system_instructions``; tool definitions derived from the calls seen, since the file holds
no schemas) and one ``execute_tool {name}`` child per tool message. Only the root names the conversation, as
real instrumentations do. Every message attribute is a JSON string checked against the GenAI schemas.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as ``python tools/tau_to_otlp.py`` from a checkout: make the ``monitor`` package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.formats.genai_schema import SchemaName, validate_document
from monitor.formats.otlp import spans_to_otlp_document
from monitor.models import SpanRecord

DEFAULT_START = datetime(2024, 5, 15, 19, 0, tzinfo=UTC)
RECORD_SPACING = timedelta(minutes=10)
_MESSAGE_STEP = timedelta(seconds=1)
_CALL_DURATION = timedelta(milliseconds=800)
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


def conversation_id(record: dict[str, Any]) -> str:
    return f"tau-{record['task_id']}-{record['trial']}"


def tau_record_to_spans(
    record: dict[str, Any],
    *,
    agent_name: str = "airline-agent",
    base_time: datetime,
    model: str = "gpt-4o",
    tool_definitions: Sequence[dict[str, Any]] | None = None,
) -> list[SpanRecord]:
    """The spans of one tau-bench record; message ``j`` of ``traj`` happens ``j`` s after ``base_time``."""
    traj: list[dict[str, Any]] = record["traj"]
    conv_id = conversation_id(record)
    trace_id = _hex_id(conv_id, 32)
    root_id = _hex_id(f"{conv_id}/root", 16)
    system_prompt = "\n\n".join(m["content"] for m in traj if m["role"] == "system" and m.get("content"))
    instructions = [{"type": "text", "content": system_prompt}] if system_prompt else []
    tools = list(tool_definitions) if tool_definitions is not None else derive_tool_definitions([record])
    dialogue = [(index, m) for index, m in enumerate(traj) if m["role"] != "system"]
    resource = {"service.name": agent_name}

    children: list[SpanRecord] = []
    total_input = total_output = 0
    for position, (index, message) in enumerate(dialogue):
        at = base_time + index * _MESSAGE_STEP
        span_id = _hex_id(f"{conv_id}/{index}", 16)
        if message["role"] == "assistant":
            history = [otel_message(m) for _, m in dialogue[:position]]
            output = [otel_message(message, output=True)]
            input_tokens = (len(system_prompt) + len(_dumps(history))) // 4
            output_tokens = len(_dumps(output)) // 4
            total_input += input_tokens
            total_output += output_tokens
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.response.finish_reasons": [output[0]["finish_reason"]],
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": output_tokens,
                "gen_ai.input.messages": _checked("input-messages", history),
                "gen_ai.output.messages": _checked("output-messages", output),
                "gen_ai.system_instructions": _checked("system-instructions", instructions),
                "gen_ai.tool.definitions": _checked("tool-definitions", tools),
            }
            name = f"chat {model}"
            children.append(_span(trace_id, span_id, root_id, name, "client", at, attributes, resource))
        elif message["role"] == "tool":
            name = message.get("name") or ""
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": message["tool_call_id"],
                "gen_ai.tool.call.arguments": _call_arguments(traj, index, message["tool_call_id"]),
                "gen_ai.tool.call.result": message.get("content") or "",
            }
            name = f"execute_tool {name}"
            children.append(_span(trace_id, span_id, root_id, name, "internal", at, attributes, resource))

    last = base_time + len(traj) * _MESSAGE_STEP
    root_attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.name": agent_name,
        "gen_ai.conversation.id": conv_id,
        "gen_ai.request.model": model,
        # Agent spans repeat their calls' total, as the Vercel AI SDK does: readers must not count it twice.
        "gen_ai.usage.input_tokens": total_input,
        "gen_ai.usage.output_tokens": total_output,
        "gen_ai.input.messages": _checked("input-messages", [otel_message(m) for _, m in dialogue]),
        "tau_bench.task_id": record["task_id"],
        "tau_bench.trial": record["trial"],
        "tau_bench.reward": float(record.get("reward") or 0.0),
    }
    root = SpanRecord(
        trace_id=trace_id,
        span_id=root_id,
        name=f"invoke_agent {agent_name}",
        kind="internal",
        start_time=base_time,
        end_time=last,
        attributes=root_attributes,
        resource=resource,
    )
    return [root, *children]


def otel_message(message: dict[str, Any], *, output: bool = False) -> dict[str, Any]:
    """One OpenAI chat message in the OTel GenAI parts format."""
    role = message["role"]
    if role == "tool":
        response = {
            "type": "tool_call_response", "id": message["tool_call_id"], "response": message["content"]
        }
        result: dict[str, Any] = {"role": "tool", "parts": [response]}
        if message.get("name"):
            result["name"] = message["name"]
        return result
    parts: list[dict[str, Any]] = []
    if message.get("content") is not None:
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        parts.append({
            "type": "tool_call",
            "id": call["id"],
            "name": function["name"],
            "arguments": json.loads(function["arguments"] or "{}"),
        })
    result = {"role": role, "parts": parts}
    if output:
        result["finish_reason"] = "tool_call" if message.get("tool_calls") else "stop"
    return result


def derive_tool_definitions(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tool definitions inferred from the calls made: argument names, JSON types, and as required
    the arguments every call passed."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        for message in record["traj"]:
            for call in message.get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                seen.setdefault(call["function"]["name"], []).append(arguments)
    definitions = []
    for name in sorted(seen):
        calls = seen[name]
        types: dict[str, set[str]] = {}
        for arguments in calls:
            for key, value in arguments.items():
                types.setdefault(key, set()).add(_JSON_TYPES.get(type(value), "null"))
        properties = {
            key: {"type": sorted(kinds)[0] if len(kinds) == 1 else sorted(kinds)}
            for key, kinds in types.items()
        }
        required = sorted(key for key in types if all(key in arguments for arguments in calls))
        definitions.append({
            "type": "function",
            "name": name,
            "parameters": {"type": "object", "properties": properties, "required": required},
        })
    return definitions


def _call_arguments(traj: list[dict[str, Any]], tool_index: int, call_id: str) -> str:
    # Call ids recur within a tau-bench trajectory, so the call is the nearest earlier one with that id.
    for message in reversed(traj[:tool_index]):
        for call in message.get("tool_calls") or []:
            if call["id"] == call_id:
                return str(call["function"]["arguments"])
    return "{}"


def _span(
    trace_id: str, span_id: str, parent: str, name: str, kind: str, at: datetime, attributes: dict[str, Any],
    resource: dict[str, Any],
) -> SpanRecord:
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_time=at - _CALL_DURATION,
        end_time=at,
        attributes=attributes,
        resource=resource,
    )


def _checked(schema: SchemaName, value: list[dict[str, Any]]) -> str:
    for generation in ("pre_move", "current"):
        issues = validate_document(schema, value, generation)
        if issues:
            raise ValueError(f"{schema} value does not validate ({generation} rules): {issues[0]}")
    return _dumps(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _hex_id(seed: str, digits: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:digits]


def convert_file(
    source: Path, target: Path, *, limit: int | None = None, agent_name: str = "airline-agent",
    model: str = "gpt-4o", start: datetime = DEFAULT_START,
) -> tuple[int, int]:
    """Write one OTLP JSON line per record of ``source``; returns (records, spans) written."""
    records: list[dict[str, Any]] = json.loads(source.read_text(encoding="utf-8"))
    chosen = records[:limit] if limit is not None else records
    tools = derive_tool_definitions(records)
    span_total = 0
    with target.open("w", encoding="utf-8") as out:
        for number, record in enumerate(chosen):
            spans = tau_record_to_spans(
                record, agent_name=agent_name, base_time=start + number * RECORD_SPACING, model=model,
                tool_definitions=tools,
            )
            span_total += len(spans)
            out.write(json.dumps(spans_to_otlp_document(spans), ensure_ascii=False, separators=(",", ":")))
            out.write("\n")
    return len(chosen), span_total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("input", type=Path, help="tau-bench trajectories (a JSON array of records)")
    parser.add_argument("output", type=Path, help="OTLP JSON lines file to write")
    parser.add_argument("--limit", type=int, default=None, help="convert only the first N records")
    parser.add_argument("--agent-name", default="airline-agent")
    parser.add_argument("--model", default="gpt-4o")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 0:
        parser.error("--limit must be zero or more")
    try:
        records, spans = convert_file(
            args.input, args.output, limit=args.limit, agent_name=args.agent_name, model=args.model)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"tau_to_otlp: {args.input}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {spans} spans of {records} conversations to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
