"""Files given to ``evaluate`` and ``rubrics generate``: OTLP JSON lines or OpenAI-chat JSONL.

Every line is read on its own: a line that is not UTF-8, not JSON, or holds a field of the wrong type is
rejected, logged with the file and line number, and counted; the other lines are still read.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import ConfigError
from monitor.models import Conversation

log = logging.getLogger("monitor.input")


@dataclass
class InputFile:
    """What was read from one file: its conversations, and the lines rejected (``path:line: reason``)."""

    conversations: list[Conversation] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


def numbered_lines(path: Path, rejected: list[str]) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers; a line that is not UTF-8 is rejected here."""
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    _reject(rejected, f"{path}:{number}", f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                    continue
                if line.strip():
                    yield number, line
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from exc


def _reject(rejected: list[str], where: str, reason: str) -> None:
    log.warning("%s: line rejected: %s", where, reason)
    rejected.append(f"{where}: {reason}")


FORMAT_SAMPLE_LINES = 200
"""Lines read to tell OTLP JSON lines from OpenAI-chat JSONL."""


def _is_otlp(head: list[tuple[int, str]]) -> bool:
    """Whether more of the first lines look like OTLP documents (``resourceSpans``, ``resourceLogs``) than like
    chat records (``messages``): one odd line (``{}``, a header) does not decide the format of the whole file."""
    votes = {"otlp": 0, "chat": 0}
    for _, line in head:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            votes["otlp"] += "resourceSpans" in record or "resourceLogs" in record
            votes["chat"] += "messages" in record
    return votes["otlp"] > votes["chat"]


def read_input_file(path: Path) -> InputFile:
    """OTLP JSON lines or OpenAI-chat JSONL, told apart by the first readable lines (``_is_otlp``)."""
    from monitor.formats.chat import ChatLineError, parse_chat_line

    result = InputFile()
    lines = numbered_lines(path, result.rejected)
    head = list(itertools.islice(lines, FORMAT_SAMPLE_LINES))
    if not head:
        return result
    if _is_otlp(head):
        from monitor.assemble import assemble
        from monitor.formats.otlp import parse_otlp_line

        spans = []
        for number, line in itertools.chain(head, lines):
            parsed, rejected = parse_otlp_line(line)
            for reason, count in rejected.items():
                _reject(result.rejected, f"{path}:{number}", f"{count} span(s): {reason}")
            spans.extend(parsed)
        result.conversations = assemble(spans).conversations
    else:
        for number, line in itertools.chain(head, lines):
            try:
                result.conversations.append(parse_chat_line(line, f"{path}:{number}"))
            except ChatLineError as exc:
                _reject(result.rejected, f"{path}:{number}", str(exc))
    if result.rejected:
        log.warning("%s: %d line(s) rejected, %d conversation(s) read", path, len(result.rejected),
                    len(result.conversations))
    return result


def read_conversations(path: Path) -> list[Conversation]:
    """The conversations of an input file; unreadable lines are logged and counted (``read_input_file``)."""
    return read_input_file(path).conversations
