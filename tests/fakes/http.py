"""What the fake servers share: reading a JSON request the way a real API does."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def read_json_request(handler: BaseHTTPRequestHandler) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers with lower-case names, the JSON body as an object; ``{}`` for an empty or unparsable body)."""
    raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    try:
        body = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        body = {}
    headers = {k.lower(): v for k, v in handler.headers.items()}
    return headers, body if isinstance(body, dict) else {}
