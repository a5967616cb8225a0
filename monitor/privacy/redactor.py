"""The conversation redactor: a conversation in, the same conversation with every value found replaced.

``ConversationRedactor.redact`` walks what a judge could be shown, in the order it would read it: the system
instructions (unless exempted), each message's text and reasoning, tool-call arguments and tool results
(value by value, keeping their JSON structure: a JSON string stays a JSON string of the same shape), other parts'
fields, and the reference answer. One ``Pseudonymizer`` serves the whole conversation, so a value is the same
placeholder in every turn. ``NoRedaction`` is its twin when redaction is off: the conversation as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.models import Conversation, Message, Part
from monitor.privacy.pseudonymize import Pseudonymizer, _allow_key
from monitor.privacy.recognizers import SECRET_KEY_NAMES, TextRecognizer, high_entropy

SURFACES = ("judge_prompt", "stored_content", "writeback", "logs", "review_page")


@dataclass(frozen=True)
class Redacted:
    conversation: Conversation
    pseudonymizer: Pseudonymizer
    """The conversation's placeholders: text written about it (the judge's reasons) is redacted with them."""
    counts: dict[str, int] = field(default_factory=dict)
    """Values replaced in the conversation, by recognizer."""


class Redactor(Protocol):
    enabled: bool
    surfaces: frozenset[str]
    exempt_rubric_text: bool

    def redact(self, conversation: Conversation) -> Redacted: ...

    def redact_text(self, text: str) -> str: ...

    def describe(self) -> str: ...


@dataclass
class ConversationRedactor:
    recognizers: Sequence[TextRecognizer]
    allow: frozenset[str] = frozenset()
    surfaces: frozenset[str] = frozenset(SURFACES)
    exempt_system_instructions: bool = False
    exempt_rubric_text: bool = True
    count: Callable[[str, int], None] | None = None
    """Told how many values each recognizer replaced (the metric), once per conversation or text."""
    enabled: bool = field(default=True, init=False)

    def pseudonymizer(self) -> Pseudonymizer:
        return Pseudonymizer(self.recognizers, self.allow)

    def redact(self, conversation: Conversation) -> Redacted:
        names = self.pseudonymizer()
        redact = names.redact
        update: dict[str, Any] = {}
        if conversation.system_instructions and not self.exempt_system_instructions:
            update["system_instructions"] = redact(conversation.system_instructions)
        update["messages"] = tuple(_message(message, names) for message in conversation.messages)
        if conversation.reference:
            update["reference"] = redact(conversation.reference)
        self._count(names)
        return Redacted(conversation.model_copy(update=update), names, dict(names.counts))

    def redact_text(self, text: str) -> str:
        """One text on its own (a log line, a write-back explanation): placeholders numbered within it."""
        names = self.pseudonymizer()
        clean = names.redact(text)
        self._count(names)
        return clean

    def _count(self, names: Pseudonymizer) -> None:
        if self.count is not None:
            for recognizer, n in names.counts.items():
                self.count(recognizer, n)

    def describe(self) -> str:
        where = ", ".join(s for s in SURFACES if s in self.surfaces) or "nowhere"
        names = ", ".join(dict.fromkeys(r.name for r in self.recognizers))
        return f"redaction on: recognizers {names}; applied to {where}"


@dataclass
class NoRedaction:
    """Redaction off: every text passes as it is."""

    enabled: bool = False
    surfaces: frozenset[str] = frozenset()
    exempt_rubric_text: bool = True

    def redact(self, conversation: Conversation) -> Redacted:
        return Redacted(conversation, Pseudonymizer(()))

    def redact_text(self, text: str) -> str:
        return text

    def describe(self) -> str:
        return "redaction off: conversations reach the judge, the store and write-back as they were traced"


def _message(message: Message, names: Pseudonymizer) -> Message:
    return message.model_copy(update={"parts": tuple(_part(part, names) for part in message.parts)})


def _part(part: Part, names: Pseudonymizer) -> Part:
    update: dict[str, Any] = {}
    if part.content:
        update["content"] = names.redact(part.content)
    if part.arguments is not None:
        update["arguments"] = redact_value(part.arguments, names)
    if part.response is not None:
        update["response"] = redact_value(part.response, names)
    if part.data:
        update["data"] = redact_value(part.data, names)
    return part.model_copy(update=update) if update else part


def redact_value(value: Any, names: Pseudonymizer, key: str | None = None) -> Any:
    """A JSON value with each string (and each number that is a value, such as a card number) redacted, keys
    and structure kept. A string holding a JSON object or array is redacted inside and written back as JSON."""
    if isinstance(value, dict):
        return {k: redact_value(v, names, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, names, key) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        text = str(value)
        clean = names.redact(text)
        return value if clean == text else clean
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            parsed = json.loads(stripped)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict | list):
            clean = redact_value(parsed, names, key)
            return value if clean == parsed else json.dumps(clean, ensure_ascii=False)
    if key is not None and SECRET_KEY_NAMES.search(key) and high_entropy(stripped) and not any(
            ch.isspace() for ch in stripped) and _allow_key(stripped) not in names.allow:
        names.counts["secret_after_keyword"] += 1
        return names.placeholder("SECRET", stripped)
    return names.redact(value)
