"""The notifier protocol and the HTTP post every real notifier shares.

An event is a plain dict (see ``monitor/alerts/events.py``); a notifier turns it into its receiver's wire format
and posts it. ``DeliveryError`` says whether trying again may help and how long the receiver asked us to wait.
Error messages never contain the URL: webhook URLs carry their credential.
"""

from __future__ import annotations

import email.utils
import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any, Protocol

USER_AGENT = "rubric-monitor"


class DeliveryError(Exception):
    def __init__(self, message: str, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class Notifier(Protocol):
    name: str

    def accepts(self, kind: str) -> bool:
        """Whether this notifier receives events of this kind (firing, resolved, annotation, test)."""
        ...

    def send(self, event: dict[str, Any]) -> None:
        """Deliver one event; raise ``DeliveryError``."""
        ...


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST ``body``; returns the status of a 2xx reply, raises ``DeliveryError`` otherwise. 408, 429 and 5xx,
    refused connections and timeouts may be retried; other 4xx mean the request itself is wrong."""
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
        retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        exc.close()
        raise DeliveryError(f"HTTP {status}", status in (408, 425, 429) or status >= 500, retry_after) from None
    except TimeoutError:
        raise DeliveryError(f"no reply within {timeout:g}s", True) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        kind = type(reason).__name__ if isinstance(reason, BaseException) else "connection failed"
        if isinstance(reason, TimeoutError | socket.timeout):
            raise DeliveryError(f"no reply within {timeout:g}s", True) from None
        # The reason of a URLError may quote the host; only its type is shown.
        raise DeliveryError(f"cannot connect ({kind})", True) from None
    except (ConnectionError, OSError) as exc:
        raise DeliveryError(f"connection failed ({type(exc).__name__})", True) from None
