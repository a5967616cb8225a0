"""Log lines with the conversation's personal data redacted (``redaction.apply_to`` has ``logs``).

A filter on the root logger's handlers, beside ``monitor.redaction``'s filter for configured secrets (which it
leaves alone): a record whose message (arguments and traceback included) holds a value the recognizers find is
rewritten with placeholders numbered within the line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable


class PersonalDataFilter(logging.Filter):
    def __init__(self, redact: Callable[[str], str]) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True  # a malformed record is logging's to report, not ours
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def install_personal_data_filter(redact: Callable[[str], str] | None) -> None:
    """Put the filter on every handler of the root logger (replacing one installed before); None removes it."""
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, PersonalDataFilter)]:
            handler.removeFilter(old)
        if redact is not None:
            handler.addFilter(PersonalDataFilter(redact))
