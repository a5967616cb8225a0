"""Keep configured secrets out of everything we print, log or serve.

Every secret the daemon reads (the judge's API key, a password in ``store.url``, an App Insights bearer token)
is remembered here when it is read. ``redact`` replaces each remembered secret in a text; ``RedactingFilter``
applies it to every log record (an endpoint's error body may echo the key back, and exceptions are logged
whole); ``/healthz`` and the CLI's error line apply it too.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote, urlsplit

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4
"""Shorter values are never redacted: a one- to three-character "secret" protects nothing, and replacing every
"abc" or "1" in the logs would erase what they say."""
ANYWHERE_CHARS = 8
"""A secret this long or longer is replaced wherever it occurs. A shorter one (a 7-character database password)
is replaced only where it stands as a token of its own, not inside a longer word or number: so a password
``secret`` is hidden in ``password secret rejected`` and ``user:secret@host`` but ``secrets`` and
``secret_key`` stay readable. The rule therefore never erases parts of common words, and still keeps a short
password out of connection errors, URLs and echoed headers, where it is always delimited."""

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_ordered: tuple[str, ...] = ()
_short: re.Pattern[str] | None = None


def remember_secret(secret: str | None) -> None:
    """Redact ``secret`` from now on (surrounding whitespace ignored)."""
    global _secrets, _ordered, _short
    value = (secret or "").strip()
    if len(value) < MIN_SECRET_CHARS or value in _secrets:
        return
    with _lock:
        _secrets = _secrets | {value}
        # Longest first, so a secret that contains another is replaced whole.
        _ordered = tuple(s for s in sorted(_secrets, key=len, reverse=True) if len(s) >= ANYWHERE_CHARS)
        short = sorted((s for s in _secrets if len(s) < ANYWHERE_CHARS), key=len, reverse=True)
        _short = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(map(re.escape, short)) + r")(?![A-Za-z0-9_])") \
            if short else None


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
    """``text`` with every remembered secret replaced by ``[REDACTED]`` (short ones as whole tokens: see
    ``ANYWHERE_CHARS``)."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    short = _short
    return text if short is None else short.sub(REDACTED, text)


def forget_secrets() -> None:
    """Forget every secret (tests)."""
    global _secrets, _ordered, _short
    with _lock:
        _secrets, _ordered, _short = frozenset(), (), None


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (arguments and traceback included) with secrets redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _ordered and _short is None:
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
