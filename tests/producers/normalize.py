"""Compare captured producer output structurally: everything but ids, times and batching.

``normalize_otlp(path)`` reads a Collector-format JSON lines file and returns ``{"spans": [...], "logs": [...]}``:
every span and log record flattened with its resource and scope (so how the batch processors split the
exports into lines does not matter), spans ordered by start time and log records by time (then file order),
times and durations removed, ``service.instance.id`` blanked, and trace/span ids replaced by labels
(``trace-1``, ``span-3``) given in that order, so parent/child links and log-to-span links are still
compared. ``normalize_envelopes(path)`` does the same for App Insights envelopes (time, ids, durations,
machine names, and one ``_OTELRESOURCE_`` metric per batch). ``diff(a, b)`` lists the first differences as
text for an assertion message.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

_TIME_KEYS = {"startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "observedTimeUnixNano"}
_BLANK_RESOURCE_KEYS = {"service.instance.id", "host.name", "process.pid"}
# A time or duration inside a string value (some producers log "Duration: 0.0123s"): digits blanked.
_DURATION_TEXT = re.compile(r"(?i)(duration[^0-9]{0,20})[0-9.]+(e-?\d+)?")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_LOOPBACK_PORT = re.compile(r"127\.0\.0\.1:\d+")
# Attributes / properties whose values change from run to run by nature: measured durations, the fake
# servers' ports, per-process ids.
_VOLATILE_KEY = re.compile(r"(?i)(duration|server\.port|service\.instance\.id|\.pid$)")


class _Labels:
    def __init__(self) -> None:
        self.map: dict[str, str] = {}

    def __call__(self, kind: str, value: str) -> str:
        if not value:
            return ""
        key = f"{kind}:{value}"
        if key not in self.map:
            self.map[key] = f"{kind}-{sum(1 for k in self.map if k.startswith(kind + ':')) + 1}"
        return self.map[key]


def _resource(resource: dict[str, Any]) -> dict[str, Any]:
    resource = copy.deepcopy(resource)
    for attr in resource.get("attributes", []):
        if attr["key"] in _BLANK_RESOURCE_KEYS:
            attr["value"] = {"stringValue": "<blank>"}
    return resource


def _scrub_text(value: Any) -> Any:
    """Blank what varies by nature: UUIDs, loopback ports, measured durations (as attribute values, as
    property values, or in text)."""
    if isinstance(value, dict):
        if isinstance(value.get("key"), str) and "value" in value and _VOLATILE_KEY.search(value["key"]):
            return {**value, "value": "<blank>"}
        return {k: "<blank>" if _VOLATILE_KEY.search(k) and not isinstance(v, dict | list) else _scrub_text(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_text(v) for v in value]
    if isinstance(value, str):
        value = _LOOPBACK_PORT.sub("127.0.0.1:<port>", _UUID.sub("<uuid>", value))
        return _DURATION_TEXT.sub(r"\1<n>", value)
    return value


def normalize_otlp(path: Path) -> dict[str, list[dict[str, Any]]]:
    spans: list[tuple[int, int, dict[str, Any]]] = []
    logs: list[tuple[int, int, dict[str, Any]]] = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        data = json.loads(line)
        for rs in data.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    item = {"resource": _resource(rs.get("resource", {})), "scope": ss.get("scope", {}),
                            "span": span}
                    spans.append((int(span.get("startTimeUnixNano", 0)), line_no * 100000 + len(spans), item))
        for rl in data.get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                for record in sl.get("logRecords", []):
                    item = {"resource": _resource(rl.get("resource", {})), "scope": sl.get("scope", {}),
                            "record": record}
                    when = int(record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0)
                    logs.append((when, line_no * 100000 + len(logs), item))
    spans.sort(key=lambda t: (t[0], t[1]))
    logs.sort(key=lambda t: (t[0], t[1]))
    labels = _Labels()
    out_spans = []
    for _, _, item in spans:
        span = dict(item["span"])
        span["traceId"] = labels("trace", span.get("traceId", ""))
        span["spanId"] = labels("span", span.get("spanId", ""))
        if "parentSpanId" in span:
            span["parentSpanId"] = labels("span", span["parentSpanId"])
        for key in _TIME_KEYS:
            span.pop(key, None)
        span["events"] = [{k: v for k, v in e.items() if k not in _TIME_KEYS} for e in span.get("events", [])]
        for link in span.get("links", []):
            link["traceId"] = labels("trace", link.get("traceId", ""))
            link["spanId"] = labels("span", link.get("spanId", ""))
        out_spans.append(_scrub_text({**item, "span": span}))
    out_logs = []
    for _, _, item in logs:
        record = dict(item["record"])
        for key in _TIME_KEYS:
            record.pop(key, None)
        if "traceId" in record:
            record["traceId"] = labels("trace", record["traceId"])
        if "spanId" in record:
            record["spanId"] = labels("span", record["spanId"])
        out_logs.append(_scrub_text({**item, "record": record}))
    return {"spans": out_spans, "logs": out_logs}


_ENVELOPE_BLANK_TAGS = {"ai.operation.id", "ai.operation.parentId", "ai.cloud.roleInstance", "ai.device.id",
                        "ai.internal.nodeName"}


def normalize_envelopes(path: Path) -> list[dict[str, Any]]:
    """App Insights envelopes without time, ids, durations and machine names, ordered by kind then name."""
    labels = _Labels()
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        envelope = json.loads(line)
        envelope.pop("time", None)
        tags = envelope.get("tags", {})
        for key in _ENVELOPE_BLANK_TAGS & tags.keys():
            tags[key] = labels(key, tags[key])
        base = envelope.get("data", {}).get("baseData", {})
        for key in ("id", "duration"):
            if key in base:
                base[key] = "<blank>"
        out.append(_scrub_text(envelope))
    # Labels depend on arrival order, which the two exporters' threads interleave: compare without them.
    for envelope in out:
        for key in _ENVELOPE_BLANK_TAGS & envelope.get("tags", {}).keys():
            envelope["tags"][key] = "<label>"
    # The exporter sends one ``_OTELRESOURCE_`` metric envelope per export batch: keep one of each.
    unique: dict[str, dict[str, Any]] = {}
    kept = []
    for envelope in out:
        metrics = envelope.get("data", {}).get("baseData", {}).get("metrics") or []
        if any(m.get("name") == "_OTELRESOURCE_" for m in metrics):
            unique.setdefault(json.dumps(envelope, sort_keys=True), envelope)
        else:
            kept.append(envelope)
    return sorted(kept + list(unique.values()), key=lambda e: json.dumps(e, sort_keys=True))


def diff(expected: Any, actual: Any, path: str = "", limit: int = 10) -> list[str]:
    """Up to ``limit`` differences between two JSON values, as ``path: expected != actual`` lines."""
    found: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(a.keys() | b.keys()):
                if key not in a or key not in b:
                    found.append(f"{where}.{key}: {'missing' if key not in a else _short(a[key])} != "
                                 f"{'missing' if key not in b else _short(b[key])}")
                else:
                    walk(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                found.append(f"{where}: {len(a)} items != {len(b)} items")
            for index, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{where}[{index}]")
        elif a != b:
            found.append(f"{where}: {_short(a)} != {_short(b)}")

    walk(expected, actual, path)
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:157] + "..."
