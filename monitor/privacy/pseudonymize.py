"""Placeholders for the values found, consistent within one conversation and shared with no other.

A ``Pseudonymizer`` lives for one conversation: the first e-mail address found is ``<EMAIL_1>`` wherever it
appears again (any turn, tool argument or result, in any of its formats), the second ``<EMAIL_2>``. The numbers
come from the order of appearance, never from the value (no hash of it): two conversations share no table, so a
placeholder says nothing outside its conversation, and the same customer cannot be followed from one
conversation to the next through it. The same conversation redacted again gives the same text (cache keys and
re-scoring stay stable).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from monitor.privacy.recognizers import Match, TextRecognizer, find_all


def normalized_with_offsets(text: str) -> tuple[str, list[int] | None]:
    """The NFKC form of ``text`` and, for each of its characters, the offset of the original character it came
    from (None when the text is ASCII and its own normal form: the common case costs nothing)."""
    if text.isascii():
        return text, None
    pieces: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        normal = unicodedata.normalize("NFKC", char) if ord(char) > 127 else char
        pieces.append(normal)
        origin.extend([index] * len(normal))
    return "".join(pieces), origin


def _allow_key(value: str) -> str:
    return "".join(unicodedata.normalize("NFKC", value).split()).casefold()


@dataclass
class Pseudonymizer:
    recognizers: Sequence[TextRecognizer]
    allow: frozenset[str] = frozenset()
    """Values never redacted, compared case-folded, NFKC-normalised and without whitespace."""
    placeholders: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    """Values replaced, by recognizer name."""
    _per_label: Counter[str] = field(default_factory=Counter)

    def placeholder(self, label: str, key: str) -> str:
        found = self.placeholders.get((label, key))
        if found is None:
            self._per_label[label] += 1
            found = f"<{label}_{self._per_label[label]}>"
            self.placeholders[(label, key)] = found
        return found

    def matches(self, text: str) -> list[Match]:
        normal, origin = normalized_with_offsets(text)
        found = find_all(self.recognizers, normal)
        if self.allow:
            found = [m for m in found if _allow_key(normal[m.start:m.end]) not in self.allow]
        if origin is None or not found:
            return found
        ends = len(text)
        mapped = []
        for m in found:
            start = origin[m.start]
            end = origin[m.end] if m.end < len(origin) else ends
            mapped.append(Match(start, end, m.recognizer, m.label, m.key))
        return mapped

    def redact(self, text: str) -> str:
        if not text:
            return text
        found = self.matches(text)
        if not found:
            return text
        out: list[str] = []
        position = 0
        for match in found:
            out.append(text[position:match.start])
            out.append(self.placeholder(match.label, match.key))
            self.counts[match.recognizer] += 1
            position = match.end
        out.append(text[position:])
        return "".join(out)

    def replace_known(self, text: str) -> str:
        """``redact`` for text the judge wrote: the values this conversation's placeholders stand for, and any
        other value the recognizers find, become placeholders (counted like the conversation's own)."""
        return self.redact(text)
