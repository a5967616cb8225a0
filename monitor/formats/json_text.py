"""JSON text as traces carry it: fast decoding, lone surrogates replaced, arrays decoded item by item (so that
an array cut short by a size cap keeps its complete leading items), and the cyclic collector paused around bursts
of decoding."""

from __future__ import annotations

import bisect
import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pydantic_core

_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER_PREFIX = re.compile(r"-?\d*(\.\d*)?([eE][-+]?\d*)?")
_DECODER = json.JSONDecoder()

@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a bounded burst of allocations that form no cycles.

    Decoding a query result and assembling its conversations allocate hundreds of thousands of containers
    that stay alive until the batch is done; each time the young generation fills up, the collector walks
    them again, which costs a fifth of the work. Reference counting still frees everything as usual; the
    collector runs again at the end. A collector that was already off is left off, so nested and
    concurrent pauses are harmless.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def load_json(text: str) -> Any:
    """``json.loads(text)``, faster.

    pydantic-core's parser is two to three times faster than the standard library's and decodes what it
    accepts to the same values (numbers included). It is the stricter of the two: it rejects what
    ``json.loads`` rejects (bad syntax, raw control characters, over-long integers) and also refuses lone
    surrogates and nesting past 200 levels. Whatever it refuses goes to ``json.loads``, which decides, so the
    result and the exception (``json.JSONDecodeError``, ``RecursionError``, or ``ValueError`` for an integer
    past the digit limit) are the standard library's, except that lone surrogates are replaced by U+FFFD and
    nesting past ``MAX_NESTING`` is refused (``RecursionError``) either way.
    """
    if isinstance(text, str):
        try:
            return pydantic_core.from_json(text, cache_strings="keys")
        except (TypeError, ValueError):
            pass  # a raw lone surrogate in ``text`` makes pydantic-core raise TypeError
    # Only this way can a value hold lone surrogates, and one would fail every later UTF-8 encoding (hashing,
    # storing, the judge's request): they are replaced here, where the cost is paid only for rare texts.
    return replace_lone_surrogates_in(json.loads(text))


MAX_NESTING = 200
"""Deepest nesting of lists and dicts in a value read: as deep as pydantic-core parses, well short of where
pydantic stops serialising (a record it cannot serialise would fail the store)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (half of a UTF-16 pair, as a cut at a character limit leaves) replaced
    by U+FFFD, so it encodes to UTF-8; ``text`` itself when it has none (the usual, cheap case)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def replace_lone_surrogates_in(value: Any, depth: int = 0) -> Any:
    """``value`` (a decoded JSON value: strings, numbers, lists, dicts) with every string, keys included,
    passed through ``replace_lone_surrogates``; ``depth`` is how deep ``value`` already sits.

    Raises ``RecursionError`` for lists and dicts nested ``MAX_NESTING`` deep: a record holding one could not
    be serialised again, so the store would fail on it.
    """
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if not isinstance(value, list | dict):
        return value
    if depth >= MAX_NESTING:
        raise RecursionError(f"nested deeper than {MAX_NESTING} levels")
    if isinstance(value, list):
        return [replace_lone_surrogates_in(item, depth + 1) for item in value]
    return {replace_lone_surrogates_in(key): replace_lone_surrogates_in(item, depth + 1)
            for key, item in value.items()}


def may_hold_lone_surrogates(text: str) -> bool:
    """Whether decoding the JSON ``text`` with the standard library can give a string with a lone surrogate."""
    if text.isascii():
        return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    return replace_lone_surrogates(text) is not text or _SURROGATE_ESCAPE.search(text) is not None


@dataclass(frozen=True)
class DecodedJson:
    """A decoded JSON text; ``truncated`` when it broke off mid-value, ``error`` when it is not JSON."""

    value: Any = None
    truncated: bool = False
    error: str | None = None


def decode_json_text(text: str) -> DecodedJson:
    try:
        return DecodedJson(load_json(text))
    except RecursionError:
        return DecodedJson(error="nested too deeply")
    except json.JSONDecodeError as exc:
        if _broke_off(text, exc):
            return DecodedJson(truncated=True, error=f"cut short after {len(text)} characters")
        return DecodedJson(error=f"not valid JSON: {exc.msg} at character {exc.pos}")
    except ValueError as exc:  # an integer literal past Python's digit limit
        return DecodedJson(error=f"not valid JSON: {exc}")


def _broke_off(text: str, exc: json.JSONDecodeError) -> bool:
    """True when the text is a prefix of a JSON value: the decoder ran out of input, not into a bad byte."""
    end = len(text.rstrip())
    if exc.msg.startswith("Unterminated string"):
        return True
    if "escape" in exc.msg:
        # A cut inside "\\u00e9" leaves an escape shorter than it should be, right at the end.
        return exc.pos >= end - 6
    rest = text[exc.pos:end]
    # A cut inside a literal ("tru", "nul") or a number ("-", "1.", "2e") stops the decoder at its first byte.
    if exc.pos >= end or any(word.startswith(rest) for word in _LITERALS):
        return True
    return _NUMBER_PREFIX.fullmatch(rest) is not None


def _scan_items(text: str, position: int, items: list[tuple[str, Any]], ends: list[int]) -> bool:
    """Decode the array items from ``position`` (the start of an item) on, appending each with its text and
    where it ends; whether the array closed at the end of ``text``."""
    while True:
        try:
            item, end = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):  # ValueError: bad JSON, or an integer past the digit limit
            return False
        items.append((text[position:end], item))
        ends.append(end)
        next_position = _after_item(text, end)
        if next_position < 0:
            return next_position == _CLOSED
        position = next_position


_CLOSED = -1
_BROKEN = -2


def _after_item(text: str, end: int) -> int:
    """Where the next item starts after an item ending at ``end``, or ``_CLOSED`` / ``_BROKEN``."""
    position = _skip_space(text, end)
    if text.startswith(",", position):
        return _skip_space(text, position + 1)
    if text.startswith("]", position):
        return _CLOSED if _skip_space(text, position + 1) == len(text) else _BROKEN
    return _BROKEN


def _skip_space(text: str, position: int) -> int:
    size = len(text)
    while position < size and text[position] in " \t\r\n":
        position += 1
    return position


_ITEM_BOUNDARY = frozenset(" \t\r\n,]")
_ARRAYS_PER_HEAD = 4
"""Arrays remembered per first item: a conversation's chat spans come together, so the last few suffice."""


@dataclass(frozen=True)
class _ScannedArray:
    """An array text already scanned: its items and where each ends, for arrays that repeat it as a prefix."""

    text: str
    ends: list[int]
    items: list[tuple[str, Any]]

    def shared_items(self, text: str) -> int:
        """How many leading items ``text`` shares with this array, character for character.

        An item counts only when ``text`` goes on after it with what can follow a complete item, so the
        decoder would stop at the same place there (a number ``12`` is not a prefix of ``123``).
        """
        low, high = 0, len(self.items)
        if text.startswith(self.text[:self.ends[-1]]):
            low = high  # the usual case: the next chat input repeats this one and goes on
        elif (closing := text.rstrip().rfind("]")) > 0 and self.text.startswith(text[:closing]):
            # The other usual case: this array (an agent span's whole history) goes on past ``text``.
            low = high = bisect.bisect_right(self.ends, closing)
        while low < high:
            middle = (low + high + 1) // 2
            if text.startswith(self.text[:self.ends[middle - 1]]):
                low = middle
            else:
                high = middle - 1
        while low and self.ends[low - 1] < len(text) and text[self.ends[low - 1]] not in _ITEM_BOUNDARY:
            low -= 1
        return low


class ArrayScanner:
    """Decodes JSON array texts item by item, remembering the arrays it has scanned (a few per leading item)."""

    def __init__(self) -> None:
        self._arrays: dict[str, list[_ScannedArray]] = {}

    def scan(self, text: str) -> tuple[list[tuple[str, Any]] | None, bool]:
        """The items of a JSON array text, each with its own text, and whether the array was complete
        (``None`` when the text is not an array at all).

        Decoding item by item gives each item's text for free, which identifies a message repeated in later
        chat inputs without encoding it again. Only the items past the longest prefix shared with an array
        scanned before are decoded: each chat input repeats the previous one and adds the new turns, so
        decoding every input from its start would cost the square of the conversation's length."""
        position = _skip_space(text, 0)
        if not text.startswith("[", position):
            return None, False
        position = _skip_space(text, position + 1)
        if text.startswith("]", position):
            return [], _skip_space(text, position + 1) == len(text)
        try:
            first, first_end = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):  # ValueError: bad JSON, or an integer past the digit limit
            return [], False
        # Arrays are indexed by their text up to the end of the first item: only those can share a prefix.
        head = text[:first_end]
        known = self._arrays.setdefault(head, [])
        items: list[tuple[str, Any]] = [(text[position:first_end], first)]
        ends = [first_end]
        for candidate in reversed(known):
            shared = candidate.shared_items(text)
            if shared > len(items):
                items, ends = candidate.items[:shared], candidate.ends[:shared]
        next_position = _after_item(text, ends[-1])
        complete = next_position == _CLOSED or (
            next_position >= 0 and _scan_items(text, next_position, items, ends))
        if len(known) >= _ARRAYS_PER_HEAD:
            del known[0]
        known.append(_ScannedArray(text, ends, items))
        return items, complete


def maybe_json_object(value: Any) -> Any:
    """Tool-call arguments often arrive as the provider's JSON string: decode it when it holds an object."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            decoded = load_json(value)
        except (ValueError, RecursionError):
            return value
        return decoded if isinstance(decoded, dict) else value
    return value
