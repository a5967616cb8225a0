"""Turn OpenAI-chat JSONL (``{"id", "agent", "messages", "tools"}`` per line) into OTLP JSON lines of GenAI spans.

    python tools/chat_to_otlp.py examples/conversations.jsonl examples/traces/sample.jsonl

The bundled sample traces are made this way. Spans are shaped as tau-bench conversions are (one ``invoke_agent``
root, a ``chat`` span per assistant message, an ``execute_tool`` span per tool result), with the record's own id
as ``gen_ai.conversation.id``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.formats.otlp import spans_to_otlp_document
from monitor.models import SpanRecord
from tools.tau_to_otlp import DEFAULT_START, RECORD_SPACING, tau_record_to_spans


def _tool_definition(entry: dict[str, Any]) -> dict[str, Any]:
    spec = entry.get("function", entry)
    return {"type": "function", "name": spec["name"], "description": spec.get("description", ""),
            "parameters": spec.get("parameters", {"type": "object"})}


def chat_record_to_spans(record: dict[str, Any], number: int) -> list[SpanRecord]:
    spans = tau_record_to_spans(
        {"task_id": record["id"], "trial": 0, "traj": record["messages"]},
        agent_name=record.get("agent", "agent"),
        base_time=DEFAULT_START + number * RECORD_SPACING + timedelta(seconds=number),
        tool_definitions=[_tool_definition(t) for t in record.get("tools", [])],
    )
    renamed = []
    for span in spans:
        attributes = {k: v for k, v in span.attributes.items() if not k.startswith("tau_bench.")}
        if "gen_ai.conversation.id" in attributes:
            attributes["gen_ai.conversation.id"] = record["id"]
        renamed.append(span.model_copy(update={"attributes": attributes}))
    return renamed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    with args.input.open(encoding="utf-8") as source, args.output.open("w", encoding="utf-8") as out:
        for number, line in enumerate(text for text in source if text.strip()):
            document = spans_to_otlp_document(chat_record_to_spans(json.loads(line), number))
            out.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
