"""The conversation redactor: a conversation in, the same conversation with every value found replaced.

``ConversationRedactor.redact`` walks what a judge could be shown, in the order it would read it: the system
instructions (unless exempted), each message's text and reasoning, tool-call arguments and tool results
(value by value, keeping their JSON structure: a JSON string stays a JSON string of the same shape), other parts'
fields, and the reference answer. One ``Pseudonymizer`` serves the whole conversation, so a value is the same
placeholder in every turn. ``NoRedaction`` is its twin when redaction is off: the conversation as it is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitor.models import Conversation, Message, Part
from monitor.privacy.pseudonymize import Forced, MatchCache, Pseudonymizer, _allow_key
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
    slow: bool
    """Takes long enough per conversation (Presidio) to be run off the event loop."""
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
    names: tuple[str, ...] = ()
    """The recognizers as the settings name them (said at start), when not one per recognizer object."""
    shortest: int = 1
    """The fewest characters a recognizer matches (JSON strings shorter are skipped)."""
    slow: bool = False
    reuse_long_texts: bool = True
    """Keep the matches of long texts (an agent's system instructions) for its next conversations."""
    enabled: bool = field(default=True, init=False)
    _cache: MatchCache = field(default_factory=MatchCache, init=False, repr=False)

    def pseudonymizer(self) -> Pseudonymizer:
        return Pseudonymizer(self.recognizers, self.allow, cache=self._cache if self.reuse_long_texts else None)

    def redact(self, conversation: Conversation) -> Redacted:
        names = self.pseudonymizer()
        slots = Slots(names.allow, self.shortest)
        system = None
        if conversation.system_instructions and not self.exempt_system_instructions:
            system = slots.text(conversation.system_instructions)
        messages = [[_part_template(part, slots) for part in message.parts] for message in conversation.messages]
        reference = slots.text(conversation.reference) if conversation.reference else None
        done = names.redact_many(slots.entries)
        changed = [entry is not text for entry, text in zip(slots.entries, done, strict=True)]
        update: dict[str, Any] = {"messages": tuple(
            _fill_message(message, parts, done, changed)
            for message, parts in zip(conversation.messages, messages, strict=True))}
        if system is not None:
            update["system_instructions"] = done[system]
        if reference is not None:
            update["reference"] = done[reference]
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
        names = ", ".join(self.names or dict.fromkeys(r.name for r in self.recognizers))
        return f"redaction on: recognizers {names}; applied to {where}"


@dataclass
class NoRedaction:
    """Redaction off: every text passes as it is."""

    enabled: bool = False
    slow: bool = False
    surfaces: frozenset[str] = frozenset()
    exempt_rubric_text: bool = True

    def redact(self, conversation: Conversation) -> Redacted:
        return Redacted(conversation, Pseudonymizer(()))

    def redact_text(self, text: str) -> str:
        return text

    def describe(self) -> str:
        return "redaction off: conversations reach the judge, the store and write-back as they were traced"


@dataclass(frozen=True)
class _Slot:
    index: int
    number: int | float | None = None
    """The JSON number the text was made from (kept when nothing in it is redacted)."""


@dataclass(frozen=True)
class _JsonText:
    """A string that held a JSON object or array: redacted inside, written back as JSON if anything changed."""

    original: str
    parsed: Any
    template: Any


class Slots:
    """The texts of a conversation in reading order, each one a slot of the templates that rebuild it."""

    def __init__(self, allow: frozenset[str], shortest: int = 1) -> None:
        self.entries: list[str | Forced] = []
        self.allow = allow
        self.shortest = shortest
        """JSON strings shorter than this are not looked at (no recognizer matches them)."""

    def text(self, text: str) -> int:
        self.entries.append(text)
        return len(self.entries) - 1

    def template(self, value: Any, key: str | None = None) -> Any:
        """``value`` with each string (and each number long enough to be a card or phone number) replaced by a
        ``_Slot``; keys and structure kept."""
        if isinstance(value, str):
            return self._string(value, key)
        if isinstance(value, dict):
            return {k: self.template(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.template(v, key) for v in value]
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MIN_NUMBER_VALUE:
            return _Slot(self.text(str(value)), value)
        return value  # booleans, null, short numbers, floats

    def _string(self, value: str, key: str | None) -> Any:
        if len(value) < self.shortest:
            return value
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                parsed = json.loads(stripped)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict | list):
                return _JsonText(value, parsed, self.template(parsed, key))
        if (key is not None and _secret_key(key) and high_entropy(stripped)
                and not any(ch.isspace() for ch in stripped) and _allow_key(stripped) not in self.allow):
            self.entries.append(Forced("SECRET", stripped, "secret_after_keyword"))
            return _Slot(len(self.entries) - 1)
        return _Slot(self.text(value))


MIN_NUMBER_VALUE = 1_000_000
"""JSON numbers from 7 digits on are looked at (a card or phone number sent as a number); smaller ones are
amounts and counts."""


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    return SECRET_KEY_NAMES.search(key) is not None


def fill_template(template: Any, done: Sequence[str]) -> Any:
    if isinstance(template, _Slot):
        text = done[template.index]
        if template.number is not None and text == str(template.number):
            return template.number
        return text
    if isinstance(template, _JsonText):
        filled = fill_template(template.template, done)
        return template.original if filled == template.parsed else json.dumps(filled, ensure_ascii=False)
    if isinstance(template, dict):
        return {k: fill_template(v, done) for k, v in template.items()}
    if isinstance(template, list):
        return [fill_template(v, done) for v in template]
    return template


def _part_template(part: Part, slots: Slots) -> dict[str, Any]:
    """The part's fields as templates, with ``slots`` the range of entries they use (a part none of whose texts
    changed is kept as it is)."""
    first = len(slots.entries)
    template: dict[str, Any] = {}
    if part.content:
        template["content"] = slots.text(part.content)
    if part.arguments is not None:
        template["arguments"] = slots.template(part.arguments)
    if part.response is not None:
        template["response"] = slots.template(part.response)
    if part.data:
        template["data"] = slots.template(part.data)
    template["slots"] = (first, len(slots.entries))
    return template


def _fill_message(message: Message, parts: list[dict[str, Any]], done: Sequence[str], changed: Sequence[bool]
                  ) -> Message:
    if not any(any(changed[t["slots"][0]:t["slots"][1]]) for t in parts):
        return message
    return message.model_copy(update={"parts": tuple(
        _fill_part(part, template, done, changed) for part, template in zip(message.parts, parts, strict=True))})


def _fill_part(part: Part, template: dict[str, Any], done: Sequence[str], changed: Sequence[bool]) -> Part:
    first, end = template["slots"]
    if not any(changed[first:end]):
        return part
    update: dict[str, Any] = {name: fill_template(value, done) for name, value in template.items()
                              if name not in ("content", "slots")}
    if "content" in template:
        update["content"] = done[template["content"]]
    return part.model_copy(update=update)
