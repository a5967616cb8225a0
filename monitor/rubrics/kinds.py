"""Vertex-style rubric kinds: adaptive pass/fail items and static metrics.

``adaptive``: yes/no items are generated per user request (or written in the rubric) and judged;
``score = passed / total``. Static kinds (``grounding``, ``hallucination``, ``safety``,
``final_response_match``) ask one fixed question of every conversation; their formulas are in
``monitor.evaluators.static``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from monitor.rubrics.base import RubricBase
from monitor.rubrics.builtin import ADAPTIVE_METRIC_NAMES, BUILTIN_METRICS

SafetyPolicy = Literal[
    "pii_and_demographic_data", "hate_speech", "dangerous_content", "harassment", "sexually_explicit"
]
SAFETY_POLICIES: tuple[SafetyPolicy, ...] = (
    "pii_and_demographic_data", "hate_speech", "dangerous_content", "harassment", "sexually_explicit"
)


class AdaptiveRubric(RubricBase):
    """Yes/no items per request, judged in one call; ``score = passed / total``."""

    kind: Literal["adaptive"] = "adaptive"
    metric: str = "general_quality"
    """A built-in metric (``general_quality``, ``tool_use_quality``, ...) or ``custom``."""
    items: tuple[str, ...] = ()
    """Fixed yes/no questions. When given, no items are generated; required for
    ``final_response_reference_free``."""
    guidelines: tuple[str, ...] = ()
    """Extra directions for item generation, e.g. "The reply must be in Japanese"."""
    max_items: int = Field(default=10, ge=3, le=30)
    """At most this many generated items per request."""
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of items that must pass; 1.0 means every item."""

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in BUILTIN_METRICS:
            raise ValueError(f"unknown adaptive metric {value!r}; one of {', '.join(ADAPTIVE_METRIC_NAMES)}")
        return value

    @field_validator("items", "guidelines")
    @classmethod
    def _non_empty_lines(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        stripped = tuple(v.strip() for v in values)
        if any(not v for v in stripped):
            raise ValueError("entries must not be empty")
        if len(set(stripped)) != len(stripped):
            raise ValueError("entries must not repeat")
        return stripped

    @model_validator(mode="after")
    def _items_when_required(self) -> AdaptiveRubric:
        if BUILTIN_METRICS[self.metric].requires_items and not self.items:
            raise ValueError(f"items: metric {self.metric} judges only items written in the rubric")
        if self.metric == "custom" and not (self.items or self.guidelines):
            raise ValueError("guidelines: a custom adaptive rubric needs items, or guidelines to write them")
        return self


class StaticMetricRubric(RubricBase):
    """One fixed judge question per conversation, scored by a published formula.

    ``safety`` scores 1 for safe and 0 for a violation, always. Vertex AI flipped this polarity between
    versions (``safety_v1``: 1 = safe; ``safety_v3``: 1 = violation), so compare with Vertex numbers with
    care.
    """

    kind: Literal["grounding", "hallucination", "safety", "final_response_match"]
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    """Minimum score to pass. Grounding, safety and final_response_match scores are 0 or 1 in practice."""
    policies: tuple[SafetyPolicy, ...] = SAFETY_POLICIES
    """``safety`` only: the policies checked."""

    @model_validator(mode="after")
    def _check_kind_options(self) -> StaticMetricRubric:
        if self.kind != "safety" and self.policies != SAFETY_POLICIES:
            raise ValueError("policies: only a safety rubric takes policies")
        if not self.policies:
            raise ValueError("policies: give at least one policy")
        if self.samples not in (None, 1):
            raise ValueError("samples: static metrics make exactly one judge call; samples is not supported")
        return self
