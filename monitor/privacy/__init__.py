"""Personal data stays where it was: redaction of conversations before the judge, the store and every surface.

In: a ``Conversation`` (or a text). Out: the same with e-mail addresses, phone numbers, card numbers (Luhn),
IBANs (mod 97), IP addresses, API keys and tokens (and, with Presidio, names and places) replaced by placeholders
that are consistent within one conversation (``<EMAIL_1>``) and mean nothing outside it.

``recognizers`` (what values look like), ``pseudonymize`` (placeholders, Unicode digits), ``redactor`` (the
conversation walk; ``NoRedaction`` is its twin), ``results`` (what a result keeps: ``store.store_content``),
``evaluator`` (the wrapper every evaluator gets in ``monitor.app``), ``logs`` (the log filter), ``presidio`` (the
optional adapter). ``build_redactor`` turns the ``redaction:`` settings into a redactor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from monitor.errors import ConfigError
from monitor.privacy.pseudonymize import _allow_key
from monitor.privacy.recognizers import BUILTIN, SHORTEST_VALUE, SecretRecognizer, TextRecognizer, custom
from monitor.privacy.redactor import SURFACES, ConversationRedactor, NoRedaction, Redacted, Redactor
from monitor.settings import RedactionSettings

__all__ = ["SURFACES", "ConversationRedactor", "NoRedaction", "Redacted", "Redactor", "build_redactor"]

log = logging.getLogger(__name__)


def build_redactor(settings: RedactionSettings, count: Callable[[str, int], None] | None = None) -> Redactor:
    """The redactor the settings describe (``NoRedaction`` when off); ``ConfigError`` when Presidio is named but
    cannot be loaded."""
    if not settings.enabled:
        return NoRedaction()
    names = [name for name in dict.fromkeys(settings.recognizers) if name != "presidio"]
    if "secret" in names and "secret_after_keyword" in names:
        # One scan of the long tokens classifies both kinds.
        names.remove("secret_after_keyword")
        recognizers: list[TextRecognizer] = [SecretRecognizer("secret", provider=True, after_keyword=True)]
        recognizers.extend(BUILTIN[name] for name in names if name != "secret")
    else:
        recognizers = [BUILTIN[name] for name in names]
    for pattern in settings.custom_patterns:
        recognizers.append(custom(pattern.label.lower(), pattern.label, pattern.pattern))
    if "presidio" in settings.recognizers:
        from monitor.privacy.presidio import PresidioMissing, load

        try:
            recognizers.append(load(settings.presidio_entities, settings.presidio_model))
        except PresidioMissing as exc:
            raise ConfigError("settings", "redaction.recognizers", str(exc)) from None
    redactor = ConversationRedactor(
        recognizers, frozenset(_allow_key(v) for v in settings.allow), frozenset(settings.apply_to),
        settings.exempt_system_instructions, settings.exempt_rubric_text, count,
        (*dict.fromkeys(settings.recognizers), *(p.label.lower() for p in settings.custom_patterns)),
        # Custom patterns and Presidio may match short values; the built-ins never match fewer characters.
        1 if settings.custom_patterns or "presidio" in settings.recognizers else SHORTEST_VALUE,
        slow="presidio" in settings.recognizers)
    return redactor
