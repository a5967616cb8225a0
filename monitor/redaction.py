"""Keep configured secrets out of everything we print, log or serve.

Every secret the daemon reads (the judge's API key, a password in ``store.url``, an App Insights bearer token)
is remembered here when it is read. ``redact`` replaces each remembered secret in a text; ``RedactingFilter``
applies it to every log record (an endpoint's error body may echo the key back, and exceptions are logged
whole); ``/healthz`` and the CLI's error line apply it too.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import unquote, urlsplit

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 8
"""Shorter values are not redacted: replacing every "test" in the logs would hide more than it protects, and no
real key or password worth hiding is that short."""

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_ordered: tuple[str, ...] = ()


def remember_secret(secret: str | None) -> None:
    """Redact ``secret`` from now on (surrounding whitespace ignored)."""
    global _secrets, _ordered
    value = (secret or "").strip()
    if len(value) < MIN_SECRET_CHARS or value in _secrets:
        return
    with _lock:
        _secrets = _secrets | {value}
        # Longest first, so a secret that contains another is replaced whole.
        _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def remember_url_password(url: str) -> None:
    """Remember the password of a URL (``scheme://user:password@host/...``), as written and URL-decoded."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        remember_secret(password)
        remember_secret(unquote(password))


def redact(text: str) -> str:
    """``text`` with every remembered secret replaced by ``[REDACTED]``."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (arguments and traceback included) with secrets redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _ordered:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install_log_redaction() -> None:
    """Attach the filter to every handler of the root logger (a filter on a logger would miss child loggers'
    records, which propagate to handlers without passing their ancestors' filters)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
