"""Python literals as the Azure Monitor exporter writes attribute values, read without ``eval``.

The exporter turns every attribute value into ``str(value)``: an OTel sequence (a tuple) arrives as
``"('tool_calls',)"``, and a structured log-record attribute (openai-v2 ``event_only`` puts the messages there)
as ``"({'role': 'system', 'parts': ({'content': '...', 'type': 'text'},)},)"``. Trace content is untrusted, so
this is a small tokenizer and parser for exactly the literals ``repr`` writes (strings, numbers, ``True``,
``False``, ``None``, tuples, lists, dicts), bounded in input length and nesting: ``ast.literal_eval`` has
neither bound and builds a whole syntax tree first. Tuples come back as lists, as JSON would have them.
"""

from __future__ import annotations

import re
from typing import Any

MAX_CHARS = 1 << 20
"""Longer text is refused unread: the exporter cuts GenAI message attributes at 256 KiB."""
MAX_DEPTH = 64
"""Deeper nesting is refused: messages → parts → arguments is a handful of levels."""


class LiteralError(ValueError):
    """The text is not a Python literal this parser reads (or exceeds its bounds); ``truncated`` when it breaks
    off at its end, as a value cut at a length cap does."""

    def __init__(self, message: str, *, truncated: bool = False) -> None:
        super().__init__(message)
        self.truncated = truncated


_TOKEN = re.compile(r"""
    \s*(?:
      (?P<punct>[()\[\]{},:])
    | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
    | (?P<word>True|False|None)
    )""", re.VERBOSE | re.DOTALL)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                   "t": "\t", "v": "\v", "\n": ""}
_WORDS = {"True": True, "False": False, "None": None}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def looks_like_python_literal(text: str) -> bool:
    """Whether ``text`` reads as ``repr`` output rather than JSON: a tuple, or a container whose first string
    is single-quoted (JSON strings always use double quotes)."""
    stripped = text.lstrip()
    if stripped.startswith("("):
        return True
    return _SINGLE_QUOTED_OPENING.match(stripped) is not None


_SINGLE_QUOTED_OPENING = re.compile(r"[\[{(][\s\[{(]*'")


def parse_python_literal(text: str, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """The value ``repr`` wrote as ``text``; raises ``LiteralError`` for anything else or beyond the bounds."""
    if len(text) > max_chars:
        raise LiteralError(f"{len(text)} characters, over the {max_chars} this parser reads")
    parser = _Parser(text, max_depth)
    value = parser.value(0)
    if text[parser.position:].strip():
        raise LiteralError(f"unexpected text at character {parser.position}")
    return value


def _decode_escape(match: re.Match[str]) -> str:
    escape = match.group(1)
    head = escape[0]
    if head in "xuU" and len(escape) > 1:
        return chr(int(escape[1:], 16))
    if head.isdigit() and head in "01234567":
        return chr(int(escape, 8))
    simple = _SIMPLE_ESCAPES.get(escape)
    return simple if simple is not None else "\\" + escape  # Python keeps unknown escapes as written


def _string(token: str) -> str:
    body = token[1:-1]
    return _ESCAPE.sub(_decode_escape, body) if "\\" in body else body


class _Parser:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.position = 0
        self.max_depth = max_depth

    def _next(self) -> tuple[str, str]:
        match = _TOKEN.match(self.text, self.position)
        if match is None:
            rest = self.text[self.position:]
            if not rest.strip():
                raise LiteralError("the text ends before the value does", truncated=True)
            # An opening quote that never closes is a string cut at the end of the text.
            truncated = rest.lstrip()[:1] in ("'", '"')
            raise LiteralError(f"not a literal at character {self.position}", truncated=truncated)
        self.position = match.end()
        kind = match.lastgroup or ""
        return kind, match.group(kind)

    def value(self, depth: int) -> Any:
        kind, token = self._next()
        return self._value_from(kind, token, depth)

    def _value_from(self, kind: str, token: str, depth: int) -> Any:
        if kind == "string":
            return _string(token)
        if kind == "number":
            return float(token) if any(c in token for c in ".eE") else int(token)
        if kind == "word":
            return _WORDS[token]
        if token in _CLOSERS:
            if depth >= self.max_depth:
                raise LiteralError(f"nested deeper than {self.max_depth} levels")
            return self._container(token, depth + 1)
        raise LiteralError(f"unexpected {token!r} at character {self.position}")

    def _container(self, opener: str, depth: int) -> Any:
        closer = _CLOSERS[opener]
        items: list[Any] = []
        pairs: dict[Any, Any] = {}
        while True:
            kind, token = self._next()
            if token == closer and kind == "punct":
                break
            item = self._value_from(kind, token, depth)
            if opener == "{":
                if isinstance(item, dict | list):
                    raise LiteralError(f"a dict key is a {type(item).__name__} at character {self.position}")
                if self._next() != ("punct", ":"):
                    raise LiteralError(f"a dict key without ':' at character {self.position}")
                pairs[item] = self.value(depth)
            else:
                items.append(item)
            kind, token = self._next()
            if token == closer and kind == "punct":
                break
            if token != ",":
                raise LiteralError(f"expected ',' or {closer!r} at character {self.position}")
        return pairs if opener == "{" else items
