"""An OTLP/HTTP receiver on 127.0.0.1 that writes what it receives as the OpenTelemetry Collector's ``file``
exporter does: one JSON object per line, ``{"resourceSpans": [...]}`` for a traces request and
``{"resourceLogs": [...]}`` for a logs request, both pipelines into the same file.

The JSON is protobuf's JSON mapping (camelCase names, 64-bit integers such as ``intValue`` and the
``*UnixNano`` times as strings, ``AnyValue`` objects for attribute values, default values left out) with the
two things the Collector does differently: trace and span ids are lowercase hex instead of base64, and enums
(``kind``, ``status.code``, ``severityNumber``) are integers. Accepts ``POST /v1/traces`` and ``POST /v1/logs``
with protobuf (``application/x-protobuf``) or OTLP/JSON (``application/json``, hex ids) bodies, gzip or not.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.http import LocalServer, QuietHandler

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _walk_ids(value: Any, convert: Callable[[str], str]) -> None:
    """Rewrite every id field (spans, span links, log records) in place."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _ID_FIELDS and isinstance(item, str):
                value[key] = convert(item)
            else:
                _walk_ids(item, convert)
    elif isinstance(value, list):
        for item in value:
            _walk_ids(item, convert)


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode() if value else ""


def to_collector_json(message: Message) -> str:
    """One Collector file-exporter line (without the newline) for an export request."""
    data = json_format.MessageToDict(message, use_integers_for_enums=True, preserving_proto_field_name=False)
    _walk_ids(data, _b64_to_hex)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def parse_request(kind: str, raw: bytes, content_type: str) -> Message:
    """An export request from its protobuf or OTLP/JSON body; ``kind`` is ``traces`` or ``logs``."""
    message: Message = ExportTraceServiceRequest() if kind == "traces" else ExportLogsServiceRequest()
    if "json" in content_type:
        data = json.loads(raw or b"{}")
        _walk_ids(data, _hex_to_b64)
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    else:
        message.ParseFromString(raw)
    return message


class OtlpFileCollector(LocalServer):
    """``with OtlpFileCollector(path) as collector:``; point exporters at ``collector.endpoint`` (the base URL,
    ``OTEL_EXPORTER_OTLP_ENDPOINT``) or ``traces_endpoint`` / ``logs_endpoint``. Lines are appended to ``path``
    as requests arrive (flushed per line); ``counts`` says how many requests, spans and log records came."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self.counts = {"traces_requests": 0, "logs_requests": 0, "spans": 0, "log_records": 0}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0].rstrip("/")
                kind = "traces" if path.endswith("/v1/traces") else "logs" if path.endswith("/v1/logs") else None
                content_type = (self.headers.get("Content-Type") or "application/x-protobuf").lower()
                if kind is None:
                    outer.errors.append(f"unexpected path {self.path}")
                    self.send_body(404, b"", "text/plain")
                    return
                try:
                    if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                        raw = gzip.decompress(raw)
                    message = parse_request(kind, raw, content_type)
                except (OSError, DecodeError, ValueError, json_format.ParseError) as exc:
                    outer.errors.append(f"{kind}: {exc}")
                    self.send_body(400, str(exc).encode(), "text/plain")
                    return
                outer._write(kind, message)
                response: Message = ExportTraceServiceResponse() if kind == "traces" else ExportLogsServiceResponse()
                if "json" in content_type:
                    self.send_body(200, b"{}", "application/json")
                else:
                    self.send_body(200, response.SerializeToString(), "application/x-protobuf")

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    def _write(self, kind: str, message: Any) -> None:
        if kind == "traces":
            items = sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
            empty = not message.resource_spans
        else:
            items = sum(len(s.log_records) for r in message.resource_logs for s in r.scope_logs)
            empty = not message.resource_logs
        with self._lock:
            self.counts[f"{kind}_requests"] += 1
            self.counts["spans" if kind == "traces" else "log_records"] += items
            if empty:
                return  # the Collector writes nothing for an empty export
            with self.path.open("a", encoding="utf-8") as out:
                out.write(to_collector_json(message) + "\n")

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def traces_endpoint(self) -> str:
        return self.endpoint + "/v1/traces"

    @property
    def logs_endpoint(self) -> str:
        return self.endpoint + "/v1/logs"
