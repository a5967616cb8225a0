"""Telemetry receivers on 127.0.0.1: an OTLP/HTTP logs endpoint (protobuf, parsed with opentelemetry-proto) and an
Application Insights ingestion endpoint (``/v2.1/track``, JSON envelopes, gzip or not)."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from tests.fakes.http import LocalServer


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


class _Receiver(LocalServer):
    def __init__(self) -> None:
        self.fail_with: int | None = None
        """Answer every request with this status (an endpoint down or refusing) while set."""
        self.requests = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                with outer._lock:
                    outer.requests += 1
                    status = outer.fail_with
                    if status is None:
                        body = outer.accept(self.path, raw)
                if status is not None:
                    body = b'{"error": "refused"}'
                self.send_response(status or 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    def accept(self, path: str, raw: bytes) -> bytes:
        raise NotImplementedError

    @property
    def root_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"


class OtlpLogsReceiver(_Receiver):
    """``records``: every log record received, as ``(record, its attributes as a dict)``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[LogRecord, dict[str, Any]]] = []

    @property
    def endpoint(self) -> str:
        return self.root_url + "/v1/logs"

    def accept(self, path: str, raw: bytes) -> bytes:
        request = ExportLogsServiceRequest()
        request.ParseFromString(raw)
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    self.records.append((record, {a.key: _value(a.value) for a in record.attributes}))
        return b"{}"


class AppInsightsIngestion(_Receiver):
    """``envelopes``: every telemetry item posted to ``/v2.1/track``."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[dict[str, Any]] = []
        self.paths: list[str] = []

    @property
    def connection_string(self) -> str:
        return (f"InstrumentationKey=00000000-0000-0000-0000-000000000001;IngestionEndpoint={self.root_url}/;"
                f"LiveEndpoint={self.root_url}/")

    def accept(self, path: str, raw: bytes) -> bytes:
        self.paths.append(path)
        items = json.loads(raw) if raw.strip().startswith(b"[") else [json.loads(line) for line in raw.splitlines()
                                                                        if line.strip()]
        self.envelopes.extend(items)
        return json.dumps({"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []}).encode()
