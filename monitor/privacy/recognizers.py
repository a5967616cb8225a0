"""Recognizers: what personal data and secrets look like in text.

A ``Recognizer`` finds candidate spans with a regular expression and keeps those its check accepts (a Luhn sum
for card numbers, the ISO 13616 mod-97 checksum for IBANs, a parse for IPv6 addresses, an entropy floor for
secrets after ``key``/``token``/``secret``), so that numbers that only look like a card stay as they are. Each
match carries a ``key``: the value in a canonical form (digits only for numbers, case-folded for e-mail
addresses), so ``4111 1111 1111 1111`` and ``4111-1111-1111-1111`` are one value and get one placeholder.

Matching runs on the NFKC form of the text (full-width and other Unicode digits become ASCII digits), and the
replacement is made in the original text: ``monitor.privacy.pseudonymize`` maps the offsets back.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

Check = Callable[[str], str | None]
"""The matched text in, its canonical key out (None: not a real value, leave it)."""


@dataclass(frozen=True)
class Match:
    start: int
    end: int
    recognizer: str
    label: str
    key: str


class TextRecognizer(Protocol):
    """What ``find_all`` needs: a built-in ``Recognizer``, or the Presidio adapter."""

    @property
    def name(self) -> str: ...

    def find(self, text: str) -> Iterator[Match]: ...


@dataclass(frozen=True)
class Window:
    """Where an expression can match: a cheap scan (one that starts with a literal or a character set, which the
    regular expression engine skips through fast) finds spots, and the full expression runs only around them, from
    ``before`` characters before each spot to ``after`` characters after it."""

    spots: re.Pattern[str]
    before: int
    after: int

    def ranges(self, text: str) -> Iterator[tuple[int, int]]:
        start = end = -1
        for spot in self.spots.finditer(text):
            low, high = max(0, spot.start() - self.before), min(len(text), spot.end() + self.after)
            if low <= end:
                end = max(end, high)
                continue
            if end >= 0:
                yield start, end
            start, end = low, high
        if end >= 0:
            yield start, end


@dataclass(frozen=True)
class Recognizer:
    """``name`` is the setting's and the metric's name; ``label`` names the placeholder (``<EMAIL_1>``)."""

    name: str
    label: str
    pattern: re.Pattern[str]
    check: Check
    window: Window | None = None
    """Run the expression only around the spots this finds (the whole text otherwise)."""
    group: int = 0
    """The group of the expression that is the value."""

    def find(self, text: str) -> Iterator[Match]:
        if self.check is _iban:
            yield from iban_matches(self, text)
            return
        if self.window is None:
            found_all: Iterable[re.Match[str]] = self.pattern.finditer(text)
        else:
            # Lookbehinds still see the text before a window; one character after it lets lookaheads see it.
            found_all = (found for low, high in self.window.ranges(text)
                         for found in self.pattern.finditer(text, low, min(len(text), high + 1)))
        last_end = -1
        for found in found_all:
            start, end = found.span(self.group)
            if start < last_end or start < 0:
                continue
            key = self.check(found.group(self.group))
            if key is not None:
                last_end = end
                yield Match(start, end, self.name, self.label, key)


@dataclass(frozen=True)
class SecretRecognizer:
    """Keys and tokens: one scan for long tokens (16 characters or more of what keys are made of), each then
    classified: a provider's key format or a JWT (``provider`` on: recognizer ``secret``), or a high-entropy
    value written after ``key``/``token``/``secret``/``password`` (``after_keyword`` on: recognizer
    ``secret_after_keyword``)."""

    name: str
    label: str = "SECRET"
    provider: bool = True
    after_keyword: bool = False

    def find(self, text: str) -> Iterator[Match]:
        # Substring searches (str.find, in C) for the providers' prefixes and the keywords, then an expression
        # anchored at each: a scan of every word with an expression costs several times more on long texts.
        found: list[Match] = []
        if self.provider:
            for prefix in _PROVIDER_PREFIXES:
                at = text.find(prefix)
                while at >= 0:
                    key = _PROVIDER_KEY.match(text, at)
                    if (key is not None and (at == 0 or not _is_token_char(text[at - 1]))
                            and (key.end() == len(text) or not _is_token_char(text[key.end()]))):
                        found.append(Match(at, key.end(), "secret", self.label, key.group(0)))
                    at = text.find(prefix, at + 1)
        if self.after_keyword:
            found.extend(self._after_keywords(text))
        if len(found) > 1:
            found.sort(key=lambda m: m.start)
        last_end = -1
        for match in found:
            if match.start >= last_end:
                last_end = match.end
                yield match

    def _after_keywords(self, text: str) -> Iterator[Match]:
        lowered = text.lower()
        if len(lowered) != len(text):  # a character whose lower case is longer: offsets would shift
            lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
        for keyword in _KEYWORDS:
            at = lowered.find(keyword)
            while at >= 0:
                value = _VALUE_AFTER_KEYWORD.match(text, at + len(keyword))
                if value is not None:
                    start, end = value.span(1)
                    while end > start and text[end - 1] == ".":
                        end -= 1
                    token = text[start:end]
                    if high_entropy(token):
                        yield Match(start, end, "secret_after_keyword", self.label, token)
                at = lowered.find(keyword, at + 1)


def _is_token_char(char: str) -> bool:
    return char.isalnum() or char in "_-"


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card(text: str) -> str | None:
    digits = _digits(text)
    if not 13 <= len(digits) <= 19 or not luhn_valid(digits) or len(set(digits)) == 1:
        return None
    return digits


def iban_valid(compact: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters to numbers (A=10), remainder 1 mod 97."""
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def _iban(text: str) -> str | None:
    compact = text.replace(" ", "").replace("-", "").upper()
    # The expression may run on into the next word ("...0130 00 AND"): the longest valid prefix is the IBAN.
    for end in range(len(compact), 14, -1):
        if iban_valid(compact[:end]):
            return compact[:end]
    return None


def _iban_end(text: str, start: int, key: str) -> int:
    """Where the IBAN ``key`` found at ``start`` ends in ``text`` (separators counted)."""
    seen = 0
    position = start
    while position < len(text) and seen < len(key):
        if text[position] not in " -":
            seen += 1
        position += 1
    return position


def _phone(text: str) -> str | None:
    digits = _digits(text)
    if not 7 <= len(digits) <= 15:
        return None
    return ("+" if text.lstrip().startswith("+") else "") + digits


def _ipv6(text: str) -> str | None:
    if text.count(":") < 2 or not any(ch.isalnum() for ch in text):
        return None
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def entropy_bits_per_char(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


SECRET_MIN_CHARS = 16
SECRET_MIN_ENTROPY = 3.0
"""A value after ``key``/``token``/``secret`` is a secret from this many characters and bits per character on:
``token=aaaaaaaaaaaaaaaa`` or ``secret: not-applicable`` are not."""


_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")


def high_entropy(text: str) -> bool:
    return (len(text) >= SECRET_MIN_CHARS and _DIGIT.search(text) is not None and _LETTER.search(text) is not None
            and entropy_bits_per_char(text) >= SECRET_MIN_ENTROPY)


def _as_is(text: str) -> str | None:
    return text


def _folded(text: str) -> str | None:
    return text.casefold()


_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-])")
_CARD = re.compile(r"\d(?<![\d.,-].)(?:[ -]?\d){12,18}(?!\d)")
_IBAN = re.compile(r"[A-Z][A-Z]\d\d(?<![A-Za-z0-9]....)(?:[ -]?[A-Z0-9]){11,30}(?![a-z0-9])")
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"(?:\+|\b00)\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,5}"  # international: +44 20 7946 0958, 0049-30-123456
    r"|\(\d{2,5}\)[ .-]?\d{2,5}(?:[ .-]\d{2,5}){0,3}"  # (555) 123-4567
    r"|\b\d{3}[ .-]\d{3}[ .-]\d{4}"  # 555-123-4567
    r"|\b0\d{1,4}[ .-]\d{2,5}(?:[ .-]\d{2,5}){1,3}"  # national trunk prefix: 020 7946 0958, 030-1234-5678
    r")(?![\w])"
)
_PHONE_SPOTS = Window(re.compile(r"[+(0-9][0-9 ().-]{6,}[0-9]"), 0, 0)
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?![\w.]\d|\w)")
_IPV4_SPOTS = Window(re.compile(r"\.\d{1,3}\.\d{1,3}\.\d"), 3, 2)
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_IPV6_SPOTS = Window(re.compile(r"::|:[0-9]{0,3}[A-Fa-f][0-9A-Fa-f]{0,3}:"), 40, 40)
"""An IPv6 address has a ``::`` or a group with a hex letter: times (``19:30:00``) are not looked at; an address
written in full in decimal digits only (``1:2:3:4:5:6:7:8``) is not found."""
_EMAIL_SPOTS = Window(re.compile(r"@"), 64, 256)
_PROVIDER_KEY = re.compile(
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic, Stripe-like
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
)
_PROVIDER_PREFIXES = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "AKIA", "ASIA", "AIza",
                      "glpat-", "eyJ")
"""What ``_PROVIDER_KEY`` can start with: the expression runs only where one of them is found."""
_KEYWORDS = ("key", "token", "secret", "password", "passwd", "pwd", "bearer")
_VALUE_AFTER_KEYWORD = re.compile(
    r"[\"']?\s*(?:[:=]|\bis\b)?\s*[\"']?([A-Za-z0-9_\-+/.]{15,}[A-Za-z0-9_\-+/]={0,2})")
"""The value after a keyword: ``token=…``, ``api_key: "…"``, ``password is …``, ``Bearer …``."""
SECRET_KEY_NAMES = re.compile(r"(?i)(?:key|token|secret|password|passwd|pwd|credential|auth)")
"""JSON keys whose string value is taken as a secret when it looks like one (``{"api_key": "..."}``)."""

BUILTIN: dict[str, TextRecognizer] = {r.name: r for r in (
    SecretRecognizer("secret", provider=True),
    SecretRecognizer("secret_after_keyword", provider=False, after_keyword=True),
    Recognizer("email", "EMAIL", _EMAIL, _folded, _EMAIL_SPOTS),
    Recognizer("iban", "IBAN", _IBAN, _iban),
    Recognizer("card", "CARD", _CARD, _card),
    Recognizer("phone", "PHONE", _PHONE, _phone, _PHONE_SPOTS),
    Recognizer("ipv4", "IP", _IPV4, _as_is, _IPV4_SPOTS),
    Recognizer("ipv6", "IP", _IPV6, _ipv6, _IPV6_SPOTS),
)}
"""In priority order: where two matches overlap, the earlier recognizer (then the longer match) wins."""

SHORTEST_VALUE = 6
"""No built-in recognizer matches fewer characters (``a@b.co``): shorter JSON strings are not looked at."""


def custom(name: str, label: str, pattern: str) -> Recognizer:
    """A recognizer from a setting's regular expression; ``re.error`` when it does not compile."""
    return Recognizer(name, label, re.compile(pattern), _as_is)


def iban_matches(recognizer: Recognizer, text: str) -> Iterator[Match]:
    """IBAN matches end where the valid IBAN ends, not where the expression stopped."""
    for found in recognizer.pattern.finditer(text):
        key = _iban(found.group(0))
        if key is not None:
            yield Match(found.start(), _iban_end(text, found.start(), key), recognizer.name, recognizer.label, key)


def find_all(recognizers: Iterable[TextRecognizer], text: str) -> list[Match]:
    """Non-overlapping matches in text order; on overlap the recognizer listed first wins, then the longer one."""
    found: list[tuple[int, Match]] = []
    for rank, recognizer in enumerate(recognizers):
        found.extend((rank, match) for match in recognizer.find(text))
    if not found:
        return []
    found.sort(key=lambda item: (item[0], item[1].start, item[1].start - item[1].end))
    taken: list[Match] = []
    for _, match in found:
        if all(match.end <= other.start or match.start >= other.end for other in taken):
            taken.append(match)
    taken.sort(key=lambda m: m.start)
    return taken
