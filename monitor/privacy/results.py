"""What a result may keep of the conversation it judged.

``redact_result`` passes the text the judge wrote (reasons, rationales, quoted sentences, the raw reply, and the
prompt when the judge was shown the conversation unredacted) through the conversation's pseudonymizer: a value the
judge quoted becomes the placeholder the conversation gave it.

``strip_content`` is ``store.store_content: false``: no conversation text in the stored result. The prompt and the
raw reply are dropped (as the evaluators already do); the free text the judge wrote about the conversation in
``details`` (sentences, rationales, excerpts, generated items, reasoning, intents) is dropped; the reasons keep
their own words, with every quote of the conversation (a run of ``QUOTE_CHARS`` characters or more found in it),
every detail text dropped, and every value a recognizer finds replaced by ``[…]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from monitor.models import Conversation, DimensionScore, EvaluationResult
from monitor.privacy.pseudonymize import Pseudonymizer
from monitor.privacy.recognizers import BUILTIN, find_all
from monitor.privacy.redactor import Slots, fill_template

ELIDED = "[…]"
QUOTE_CHARS = 12
"""A run of this many characters of the conversation in a reason is taken as a quote of it (shorter ones are
words any reason would use)."""
CONTENT_DETAIL_KEYS = frozenset({"sentence", "rationale", "excerpt", "question", "reasoning", "intents",
                                 "attempts"})
"""``details`` fields the judge writes about the conversation's content (grounding and hallucination sentences,
safety excerpts, adaptive items generated from the request, match reasoning) or that echo the judge's errors."""


def redact_result(result: EvaluationResult, names: Pseudonymizer, prompt_redacted: bool) -> EvaluationResult:
    """``result`` with the conversation's values in the judge's words replaced by their placeholders (all its
    texts matched in one pass)."""
    slots = Slots(names.allow)
    reason = slots.text(result.reason)
    dimensions = [slots.text(d.reason) for d in result.dimension_scores]
    details = slots.template(result.details)
    unscored = slots.text(result.unscored_reason) if result.unscored_reason else None
    raw_reply = slots.text(result.raw_reply) if result.raw_reply else None
    prompt = ([slots.text(m.get("content", "")) for m in result.prompt]
              if result.prompt and not prompt_redacted else None)
    done = names.redact_many(slots.entries)
    update: dict[str, Any] = {
        "reason": done[reason],
        "dimension_scores": tuple(d.model_copy(update={"reason": done[i]})
                                  for d, i in zip(result.dimension_scores, dimensions, strict=True)),
        "details": fill_template(details, done),
    }
    if unscored is not None:
        update["unscored_reason"] = done[unscored]
    if raw_reply is not None:
        update["raw_reply"] = done[raw_reply]
    if prompt is not None and result.prompt:
        update["prompt"] = [{**m, "content": done[i]} for m, i in zip(result.prompt, prompt, strict=True)]
    return result.model_copy(update=update)


def conversation_texts(conversation: Conversation) -> list[str]:
    """Every text of the conversation a judge could quote."""
    texts = [conversation.system_instructions or "", conversation.reference or ""]
    for message in conversation.messages:
        for part in message.parts:
            texts.append(part.content or "")
            for value in (part.arguments, part.response, part.data or None):
                if value is not None:
                    texts.extend(_strings(value))
    return [t for t in texts if t]


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


IDENTIFIER = re.compile(r"[\w#@+./:-]*\d[\w#@+./:-]*")
"""A word with a digit in it: order and account ids, dates, amounts, numbers of any kind."""
IDENTIFIER_CHARS = 4


def _identifiers(text: str) -> Iterable[tuple[int, int, str]]:
    for found in IDENTIFIER.finditer(text):
        word = found.group(0).rstrip(".:/-")
        if len(word) >= IDENTIFIER_CHARS:
            yield found.start(), found.start() + len(word), word.lower()


class QuoteFinder:
    """Finds, in a text, runs of ``QUOTE_CHARS`` or more characters of a conversation (case-insensitive) and the
    conversation's identifiers (a word of ``IDENTIFIER_CHARS`` or more with a digit: a quote of an order id or a
    date is shorter than any sentence)."""

    def __init__(self, texts: Sequence[str], size: int = QUOTE_CHARS) -> None:
        self.size = size
        self.grams: set[str] = set()
        self.identifiers: set[str] = set()
        for text in texts:
            folded = text.lower()
            for start in range(len(folded) - size + 1):
                self.grams.add(folded[start:start + size])
            self.identifiers.update(word for _, _, word in _identifiers(text))

    def elide(self, text: str, also: Sequence[str] = ()) -> str:
        """``text`` with every quote of the conversation, every string of ``also`` and every value the built-in
        recognizers find replaced by ``[…]`` (adjacent ones merged)."""
        if not text:
            return text
        covered = self._covered(text, also)
        out: list[str] = []
        inside = False
        for char, hidden in zip(text, covered, strict=True):
            if hidden and not inside:
                out.append(ELIDED)
            elif not hidden:
                out.append(char)
            inside = hidden
        return "".join(out)

    def _covered(self, text: str, also: Sequence[str]) -> list[bool]:
        covered = [False] * len(text)

        def cover(start: int, end: int) -> None:
            covered[start:end] = [True] * (end - start)

        folded = text.lower()
        if len(folded) == len(text):  # case folding kept the offsets (it does but for a few scripts)
            for start in range(len(folded) - self.size + 1):
                if folded[start:start + self.size] in self.grams:
                    cover(start, start + self.size)
        for snippet in also:
            position = text.find(snippet) if len(snippet) >= 4 else -1
            while position >= 0:
                cover(position, position + len(snippet))
                position = text.find(snippet, position + 1)
        for start, end, word in _identifiers(text):
            if word in self.identifiers:
                cover(start, end)
        for match in find_all(BUILTIN.values(), text):
            cover(match.start, match.end)
        return covered


def strip_content(result: EvaluationResult, *conversations: Conversation) -> EvaluationResult:
    """``result`` with no text of ``conversations`` left in it (``store.store_content: false``): the conversation
    as traced and as the judge was shown it, when redaction changed it."""
    dropped: list[str] = []
    details = _drop_content(result.details, dropped)
    # Longest first, so a sentence is elided whole before a shorter detail inside it.
    dropped = sorted({d for d in dropped if d}, key=len, reverse=True)
    finder = QuoteFinder([text for conversation in conversations for text in conversation_texts(conversation)])
    return result.model_copy(update={
        "prompt": None,
        "raw_reply": None,
        "reason": finder.elide(result.reason, dropped),
        "unscored_reason": None if result.unscored_reason is None else finder.elide(result.unscored_reason, dropped),
        "dimension_scores": tuple(DimensionScore(**{**d.model_dump(), "reason": finder.elide(d.reason, dropped)})
                                  for d in result.dimension_scores),
        "details": details,
    })


def _drop_content(value: Any, dropped: list[str]) -> Any:
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        for k, v in value.items():
            if k in CONTENT_DETAIL_KEYS:
                dropped.extend(_strings(v))
                continue
            kept[k] = _drop_content(v, dropped)
        return kept
    if isinstance(value, list):
        return [_drop_content(v, dropped) for v in value]
    return value
