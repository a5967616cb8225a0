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


@dataclass(frozen=True)
class Recognizer:
    """``name`` is the setting's and the metric's name; ``label`` names the placeholder (``<EMAIL_1>``).
    ``hint`` is a cheap test that lets a text without it skip the expression (no ``@``: no e-mail address)."""

    name: str
    label: str
    pattern: re.Pattern[str]
    check: Check
    hint: Callable[[str], bool] | None = None
    group: int = 0
    """The group of the expression that is the value (a secret after ``token=`` is the part after it)."""

    def find(self, text: str) -> Iterator[Match]:
        if self.hint is not None and not self.hint(text):
            return
        if self.check is _iban:
            yield from iban_matches(self, text)
            return
        for found in self.pattern.finditer(text):
            start, end = found.span(self.group)
            if start < 0:
                continue
            key = self.check(found.group(self.group))
            if key is not None:
                yield Match(start, end, self.name, self.label, key)


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


def _ipv4(text: str) -> str | None:
    return text


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


def high_entropy(text: str) -> bool:
    return (len(text) >= SECRET_MIN_CHARS and entropy_bits_per_char(text) >= SECRET_MIN_ENTROPY
            and any(ch.isdigit() for ch in text) and any(ch.isalpha() for ch in text))


def _secret_after_keyword(text: str) -> str | None:
    return text if high_entropy(text) else None


def _as_is(text: str) -> str | None:
    return text


def _folded(text: str) -> str | None:
    return text.casefold()


_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-])")
_CARD = re.compile(r"(?<![\d.,-])\d(?:[ -]?\d){12,18}(?![\d])")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,30}(?![a-z0-9])")
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"(?:\+|\b00)\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,5}"  # international: +44 20 7946 0958, 0049-30-123456
    r"|\(\d{2,5}\)[ .-]?\d{2,5}(?:[ .-]\d{2,5}){0,3}"  # (555) 123-4567
    r"|\b\d{3}[ .-]\d{3}[ .-]\d{4}"  # 555-123-4567
    r"|\b0\d{1,4}[ .-]\d{2,5}(?:[ .-]\d{2,5}){1,3}"  # national trunk prefix: 020 7946 0958, 030-1234-5678
    r")(?![\w])"
)
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?![\w.]\d|\w)")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_PROVIDER_KEY = re.compile(
    r"(?<![\w-])(?:"
    r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic, Stripe-like
    r"|(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"  # GitHub
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
    r")(?![\w-])"
)
_KEYWORD_SECRET = re.compile(
    r"(?i)(?:api[_-]?key|access[_-]?key|key|token|secret|password|passwd|pwd|bearer)[\"']?\s*(?:[:=]|\bis\b)?\s*"
    r"[\"']?([A-Za-z0-9_\-+/.]{15,}[A-Za-z0-9_\-+/]={0,2})")
SECRET_KEY_NAMES = re.compile(r"(?i)(?:key|token|secret|password|passwd|pwd|credential|auth)")
"""JSON keys whose string value is taken as a secret when it looks like one (``{"api_key": "..."}``)."""

BUILTIN: dict[str, Recognizer] = {r.name: r for r in (
    Recognizer("secret", "SECRET", _PROVIDER_KEY, _as_is,
               hint=lambda t: any(p in t for p in ("sk-", "gh", "xox", "AKIA", "ASIA", "AIza", "glpat", "eyJ"))),
    Recognizer("secret_after_keyword", "SECRET", _KEYWORD_SECRET, _secret_after_keyword, group=1),
    Recognizer("email", "EMAIL", _EMAIL, _folded, hint=lambda t: "@" in t),
    Recognizer("iban", "IBAN", _IBAN, _iban),
    Recognizer("card", "CARD", _CARD, _card),
    Recognizer("phone", "PHONE", _PHONE, _phone),
    Recognizer("ipv4", "IP", _IPV4, _ipv4, hint=lambda t: "." in t),
    Recognizer("ipv6", "IP", _IPV6, _ipv6, hint=lambda t: "::" in t or t.count(":") >= 2),
)}
"""In priority order: where two matches overlap, the earlier recognizer (then the longer match) wins."""

BUILTIN_NAMES: tuple[str, ...] = tuple(BUILTIN)


def custom(name: str, label: str, pattern: str) -> Recognizer:
    """A recognizer from a setting's regular expression; ``re.error`` when it does not compile."""
    return Recognizer(name, label, re.compile(pattern), _as_is)


def iban_matches(recognizer: Recognizer, text: str) -> Iterator[Match]:
    """IBAN matches end where the valid IBAN ends, not where the expression stopped."""
    for found in recognizer.pattern.finditer(text):
        key = _iban(found.group(0))
        if key is not None:
            yield Match(found.start(), _iban_end(text, found.start(), key), recognizer.name, recognizer.label, key)


class TextRecognizer(Protocol):
    """What ``find_all`` needs: a built-in ``Recognizer``, or the Presidio adapter."""

    @property
    def name(self) -> str: ...

    def find(self, text: str) -> Iterator[Match]: ...


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
