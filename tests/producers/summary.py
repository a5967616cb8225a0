"""What a captured OTLP JSON file holds, for the fixtures' README and for eyeballing a new producer:

    python -m tests.producers.summary tests/data/producers/*.otlp.jsonl

Per file: scopes, span names (kind) with counts, log record event names with counts, which attribute keys
carry message content (``gen_ai.input.messages``, ``gen_ai.prompt.*``, ``llm.input_messages.*``, …), span
events, and whether ``gen_ai.conversation.id`` / ``gen_ai.agent.name`` appear (and on what)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
CONTENT_KEY = re.compile(r"(messages|prompt|completion|content|instructions|arguments|result|tool\.definitions"
                         r"|input\.value|output\.value|body)", re.I)


def _norm_key(key: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", key)


def summarize(path: Path) -> dict[str, Any]:  # noqa: C901
    spans: Counter[str] = Counter()
    scopes: set[str] = set()
    logs: Counter[str] = Counter()
    content_keys: Counter[str] = Counter()
    span_events: Counter[str] = Counter()
    where: dict[str, set[str]] = {"gen_ai.conversation.id": set(), "gen_ai.agent.name": set()}
    for line in path.read_text().splitlines():
        data = json.loads(line)
        for rs in data.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                scopes.add(ss.get("scope", {}).get("name", ""))
                for span in ss.get("spans", []):
                    label = f"{span['name']} ({KINDS.get(span.get('kind', 0))})"
                    spans[label] += 1
                    for attr in span.get("attributes", []):
                        if attr["key"] in where:
                            where[attr["key"]].add(f"span {span['name']}")
                        if CONTENT_KEY.search(attr["key"]):
                            content_keys[f"span attr {_norm_key(attr['key'])}"] += 1
                    for event in span.get("events", []):
                        span_events[event["name"]] += 1
                        for attr in event.get("attributes", []):
                            if CONTENT_KEY.search(attr["key"]):
                                content_keys[f"span event {event['name']} attr {_norm_key(attr['key'])}"] += 1
        for rl in data.get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                scopes.add(sl.get("scope", {}).get("name", ""))
                for record in sl.get("logRecords", []):
                    attrs = {a["key"]: a["value"] for a in record.get("attributes", [])}
                    name = record.get("eventName") or attrs.get("event.name", {}).get("stringValue") or "(no name)"
                    logs[name] += 1
                    for key in where:
                        if key in attrs:
                            where[key].add(f"log {name}")
                    if "body" in record:
                        content_keys[f"log {name} body"] += 1
                    for key in attrs:
                        if CONTENT_KEY.search(key):
                            content_keys[f"log {name} attr {_norm_key(key)}"] += 1
    return {"scopes": sorted(scopes), "spans": dict(spans), "span_events": dict(span_events), "logs": dict(logs),
            "content": dict(content_keys), "where": {k: sorted(v) for k, v in where.items()}}


def main(argv: list[str]) -> None:
    for name in argv:
        print(f"## {Path(name).name}")
        print(json.dumps(summarize(Path(name)), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
