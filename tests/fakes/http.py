"""What the fake servers share: reading a JSON request the way a real API does, a quiet HTTP/1.1 handler, serving
on 127.0.0.1 from a thread inside ``with``, and a TLS certificate from a CA of their own."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self


def read_json_request(handler: BaseHTTPRequestHandler) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers with lower-case names, the JSON body as an object; ``{}`` for an empty or unparsable body)."""
    raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        body = {}
    headers = {k.lower(): v for k, v in handler.headers.items()}
    return headers, body if isinstance(body, dict) else {}


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (connections kept alive, as real APIs and their clients do), and no access log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def send_body(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LocalServer:
    """Serves ``server`` (built on 127.0.0.1 by the subclass) from a daemon thread inside ``with``."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown (once per test) quick.
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def tls_context(ca_path: Path, *names: str) -> ssl.SSLContext:
    """A server context with a certificate for ``names`` from a new CA, whose certificate is written to
    ``ca_path`` for the client to trust."""
    import trustme  # a dev tool: the lower-bounds run imports these fakes without it

    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(ca_path))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert(*names).configure_cert(context)
    return context
