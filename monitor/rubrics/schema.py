"""Rubric definitions: the common fields every kind has, and Foundry's weighted rubric.

A rubric file is one of the kinds in ``Rubric`` (discriminated by ``kind``). A Foundry definition is accepted
verbatim: ``{"type": "rubric", "dimensions": [...], "pass_threshold": 0.5}`` or a bare list of dimensions (the
shape the Foundry docs print), read as ``kind: weighted``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from monitor.rubrics.base import SNAKE_CASE, EvaluatorMetric, JsonSchema, RubricBase
from monitor.rubrics.evaluator_kinds import (
    CodeEvaluatorRubric,
    EndpointEvaluatorRubric,
    GeckoRubric,
    PromptEvaluatorRubric,
)
from monitor.rubrics.kinds import AdaptiveRubric, StaticMetricRubric

RESIDUAL_DIMENSIONS = {
    "quality": {
        "id": "general_quality",
        "description": "Other important quality factors not already covered by the listed criteria.",
        "weight": 5,
        "always_applicable": True,
    },
    "safety": {
        "id": "general_policy_compliance",
        "description": "Other important policy and safety factors not already covered by the listed criteria.",
        "weight": 5,
        "always_applicable": True,
    },
}

class Dimension(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    description: str = Field(min_length=1)
    weight: int = Field(ge=1, le=10)
    always_applicable: bool = False
    anchors: dict[int, str] | None = None
    """Optional: what a score looks like at some levels, e.g. ``{1: "books without confirming", 5: "..."}``;
    shown to the judge under the dimension."""

    @field_validator("anchors")
    @classmethod
    def _check_anchors(cls, value: dict[int, str] | None) -> dict[int, str] | None:
        if value is None:
            return None
        for level, text in value.items():
            if not 1 <= level <= 5:
                raise ValueError(f"level {level} is not a score from 1 to 5")
            if not text.strip():
                raise ValueError(f"level {level}: the anchor text is empty")
        return {level: text.strip() for level, text in value.items()}

    def __hash__(self) -> int:
        # A frozen model hashes its fields, and a dict has no hash: rubrics are compared and hashed whole.
        return hash((self.id, self.description, self.weight, self.always_applicable,
                     tuple(sorted((self.anchors or {}).items()))))

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not SNAKE_CASE.match(value):
            raise ValueError("must be a snake_case slug like 'correct_resolution'")
        return value

    @field_validator("weight", mode="before")
    @classmethod
    def _integer_weight(cls, value: Any) -> Any:
        # "5" would pass pydantic's lax mode: a quoted weight is a mistake to name, not to guess.
        if isinstance(value, bool | str) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be an integer from 1 to 10 (not quoted)")
        return value

    @field_validator("description", mode="before")
    @classmethod
    def _strip_description(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class WeightedRubric(RubricBase):
    """Azure AI Foundry's rubric evaluator: dimensions scored 1 to 5, weighted, with applicability."""

    kind: Literal["weighted"] = "weighted"
    category: Literal["quality", "safety"] = "quality"
    dimensions: tuple[Dimension, ...] = Field(min_length=1)
    pass_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    normalization: Literal["div5", "minmax"] = "div5"
    """``div5``: weighted mean / 5 (reproduces Foundry's published outputs); ``minmax``: (weighted mean - 1) / 4."""
    display_name: str | None = None
    """Foundry's display name (evaluator envelope)."""
    data_schema: JsonSchema = None
    """Foundry's JSON Schema of the evaluator's input data; kept and checked, not used for scoring."""
    init_parameters: JsonSchema = None
    """Foundry's JSON Schema of the evaluator's parameters; kept and checked, not used for scoring."""
    metrics: dict[str, EvaluatorMetric] | None = None
    """Foundry's output metrics of the evaluator; kept and checked, not used for scoring."""

    @model_validator(mode="before")
    @classmethod
    def _foundry_verbatim(cls, data: Any) -> Any:
        # Foundry's EvaluatorDefinition is discriminated by type "rubric", which our kind already says.
        if isinstance(data, dict) and data.get("type") == "rubric":
            data = {k: v for k, v in data.items() if k != "type"}
        return data

    @model_validator(mode="after")
    def _check_dimensions(self) -> WeightedRubric:
        seen: set[str] = set()
        for index, dimension in enumerate(self.dimensions):
            if dimension.id in seen:
                raise ValueError(f"dimensions.{index}.id: duplicate dimension id {dimension.id!r}")
            seen.add(dimension.id)
        residual = RESIDUAL_DIMENSIONS[self.category]
        for index, dimension in enumerate(self.dimensions):
            # Foundry attaches the residual dimension and does not let it be edited: a rubric that changes its
            # weight or applicability would score differently here than in Foundry.
            if dimension.id == residual["id"] and (dimension.weight, dimension.always_applicable) != (
                    residual["weight"], residual["always_applicable"]):
                raise ValueError(f"dimensions.{index}: the residual dimension {dimension.id} is fixed at weight "
                                 f"{residual['weight']}, always_applicable true; leave it out (it is added) or "
                                 "state it unchanged")
        if residual["id"] not in seen:
            # The service attaches the residual dimension; so do we, so that hand-written rubrics score alike.
            object.__setattr__(self, "dimensions", (*self.dimensions, Dimension.model_validate(residual)))
        return self


Rubric = Annotated[
    WeightedRubric | AdaptiveRubric | StaticMetricRubric | PromptEvaluatorRubric | CodeEvaluatorRubric
    | EndpointEvaluatorRubric | GeckoRubric,
    Field(discriminator="kind"),
]

__all__ = ["EvaluatorMetric", "Rubric", "WeightedRubric"]
