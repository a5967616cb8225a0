"""Vertex-style rubric kinds: adaptive pass/fail items and static metrics.

(Placeholder definitions; the adaptive/static work fills these in.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

if TYPE_CHECKING:
    pass

from monitor.rubrics.base import RubricBase


class AdaptiveRubric(RubricBase):
    kind: Literal["adaptive"] = "adaptive"
    metric: str = "general_quality"
    items: tuple[str, ...] = ()
    guidelines: tuple[str, ...] = ()


class StaticMetricRubric(RubricBase):
    kind: Literal["grounding", "hallucination", "safety", "final_response_match"]
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
