"""Placeholders for the values found, consistent within one conversation and shared with no other.

A ``Pseudonymizer`` lives for one conversation: the first e-mail address found is ``<EMAIL_1>`` wherever it
appears again (any turn, tool argument or result, in any of its formats), the second ``<EMAIL_2>``. The numbers
come from the order of appearance, never from the value (no hash of it): two conversations share no table, so a
placeholder says nothing outside its conversation, and the same customer cannot be followed from one
conversation to the next through it. The same conversation redacted again gives the same text (cache keys and
re-scoring stay stable).
"""

from __future__ import annotations

import bisect
import re
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from monitor.privacy.recognizers import Match, TextRecognizer, find_all

_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@dataclass(frozen=True)
class Offsets:
    """Where each character of a normalised text came from: segments that are either copied ASCII (offsets shift
    together) or one original character's normal form (every character of it maps to that one)."""

    normal_starts: list[int]
    original_starts: list[int]
    copied: list[bool]
    original_length: int
    normal_length: int

    def original(self, position: int) -> int:
        if position >= self.normal_length:
            return self.original_length
        segment = bisect.bisect_right(self.normal_starts, position) - 1
        start = self.original_starts[segment]
        return start + (position - self.normal_starts[segment]) if self.copied[segment] else start


def normalized_with_offsets(text: str) -> tuple[str, Offsets | None]:
    """The NFKC form of ``text`` (full-width and other Unicode digits become ASCII digits) and where its characters
    came from; None when the text is its own normal form (ASCII, or already NFKC: the common case costs a check)."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, None
    pieces: list[str] = []
    normal_starts: list[int] = []
    original_starts: list[int] = []
    copied: list[bool] = []
    length = last = 0
    for found in _NON_ASCII.finditer(text):
        at = found.start()
        if at > last:
            pieces.append(text[last:at])
            normal_starts.append(length)
            original_starts.append(last)
            copied.append(True)
            length += at - last
        normal = unicodedata.normalize("NFKC", text[at])
        pieces.append(normal)
        normal_starts.append(length)
        original_starts.append(at)
        copied.append(len(normal) == 1)
        length += len(normal)
        last = at + 1
    if last < len(text):
        pieces.append(text[last:])
        normal_starts.append(length)
        original_starts.append(last)
        copied.append(True)
        length += len(text) - last
    return "".join(pieces), Offsets(normal_starts, original_starts, copied, len(text), length)


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
    cache: MatchCache | None = None
    """Matches of long texts shared by the conversations one redactor serves (same recognizers, same allow-list)."""
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
        return [Match(origin.original(m.start), origin.original(m.end), m.recognizer, m.label, m.key)
                for m in found]

    def redact(self, text: str) -> str:
        return self._replace(text, self.matches(text)) if text else text

    def _replace(self, text: str, found: Sequence[Match]) -> str:
        """``text`` with each match replaced by its placeholder; ``text`` itself (the same object) when there is
        none: the redactor tells changed texts by identity."""
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

    def redact_many(self, texts: Sequence[str | Forced]) -> list[str]:
        """``redact`` of each text, matched in one pass over them all (joined by a line break the recognizers
        never match across; a match that would is dropped); a ``Forced`` entry is a value already known to be
        one (a secret under a key named like one) and becomes its placeholder. A text of ``REUSE_CHARS`` or more
        has its matches from ``cache`` when given (an agent's system instructions are the same in each of its
        conversations). Placeholders are numbered in the order of the entries."""
        per_entry = self._matches_per_entry(texts)
        out: list[str] = []
        for entry, found in zip(texts, per_entry, strict=True):
            if isinstance(entry, Forced):
                self.counts[entry.recognizer] += 1
                out.append(self.placeholder(entry.label, entry.key))
            else:
                out.append(self._replace(entry, found))
        return out

    def _matches_per_entry(self, texts: Sequence[str | Forced]) -> list[list[Match]]:
        """Each text's matches, offsets within it."""
        per_entry: list[list[Match]] = [[] for _ in texts]
        joined_parts: list[str] = []
        owners: list[tuple[int, int, int]] = []  # (entry, start in joined, end in joined)
        position = 0
        for index, entry in enumerate(texts):
            if isinstance(entry, Forced) or not entry:
                continue
            if self.cache is not None and len(entry) >= REUSE_CHARS:
                per_entry[index] = self.cache.matches(entry, self.matches)
                continue
            if joined_parts:
                joined_parts.append(SEPARATOR)
                position += len(SEPARATOR)
            joined_parts.append(entry)
            owners.append((index, position, position + len(entry)))
            position += len(entry)
        if not owners:
            return per_entry
        found = self.matches("".join(joined_parts))
        cursor = 0
        for match in found:
            while cursor < len(owners) and owners[cursor][2] <= match.start:
                cursor += 1
            if cursor == len(owners):
                break
            index, start, end = owners[cursor]
            if match.start >= start and match.end <= end:  # else across two texts: not a value of either
                per_entry[index].append(Match(match.start - start, match.end - start, match.recognizer,
                                              match.label, match.key))
        return per_entry


REUSE_CHARS = 2048


class MatchCache:
    """The matches of long texts seen lately (``REUSE_CHARS`` or more), least recently used dropped first."""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._held: OrderedDict[str, list[Match]] = OrderedDict()
        self._lock = threading.Lock()

    def matches(self, text: str, find: Callable[[str], list[Match]]) -> list[Match]:
        with self._lock:
            found = self._held.get(text)
            if found is not None:
                self._held.move_to_end(text)
                return found
        found = find(text)
        with self._lock:
            self._held[text] = found
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)
        return found


SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Forced:
    """A value known to be one without matching (``redact_many``)."""

    label: str
    key: str
    recognizer: str
