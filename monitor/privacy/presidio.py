"""Microsoft Presidio as a recognizer (``pip install rubric-monitor[presidio]`` and a spaCy model): names,
locations and the other entity types the regular expressions cannot know. Optional: ``load`` raises
``PresidioMissing`` naming what to install when the package or the model is not there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from monitor.privacy.recognizers import Match

MIN_SCORE = 0.5
"""Presidio's confidence below which an entity is left (its low scores are mostly capitalised common words)."""


class PresidioMissing(RuntimeError):
    pass


class PresidioRecognizer:
    name = "presidio"

    def __init__(self, analyzer: Any, entities: Sequence[str]) -> None:
        self.analyzer = analyzer
        self.entities = list(entities)

    def find(self, text: str) -> Iterator[Match]:
        if not text.strip():
            return
        for found in self.analyzer.analyze(text=text, entities=self.entities, language="en"):
            if found.score >= MIN_SCORE:
                value = text[found.start:found.end]
                yield Match(found.start, found.end, f"presidio_{found.entity_type.lower()}", found.entity_type,
                            " ".join(value.split()).casefold())


def load(entities: Sequence[str], model: str = "en_core_web_sm") -> PresidioRecognizer:
    """An analyzer on ``model`` (English); only the given entity types are looked for."""
    try:
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider
    except ImportError as exc:
        raise PresidioMissing("redaction.recognizers names presidio, but presidio-analyzer is not installed "
                              "(pip install 'rubric-monitor[presidio]')") from exc
    import importlib.util

    if importlib.util.find_spec(model) is None:
        raise PresidioMissing(f"redaction.presidio_model {model!r} is not installed: install a spaCy English "
                              "model package (docs/privacy.md)")
    provider = NlpEngineProvider(nlp_configuration={
        "nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": model}]})
    analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    return PresidioRecognizer(analyzer, entities)
