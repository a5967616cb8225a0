"""Fields every rubric kind shares."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from monitor.slo.spec import RubricSlo

SNAKE_CASE = re.compile(r"^[a-z][a-z0-9_]*$")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.~-]{1,256}$")

PromptVersion = Callable[[str, "str | None"], str]
"""(rubric kind, built-in metric) → the version of the prompt it is judged with. The evaluators know their prompts
(``monitor.evaluators.versions.builtin_version``); a rubric's version includes it, so a release that changes a
prompt starts new metric series instead of mixing verdicts of two prompts."""


class CanarySet(BaseModel):
    """Conversations with agreed verdicts that the daemon re-scores on a schedule to detect judge drift."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    conversations: Path
    """OTLP JSON lines or OpenAI-chat JSONL; relative paths are read from the rubric file's directory."""
    labels: Path
    """The agreed verdicts, in ``rubric-monitor calibrate``'s labels format."""


class RubricBase(BaseModel):
    """Fields every rubric kind shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """Unique name, 1 to 256 of ``[A-Za-z0-9_.~-]`` (Foundry's evaluator-name rule)."""
    version: str | None = None
    """Explicit version; when absent, the first 12 hex digits of the content hash (set by the loader)."""
    description: str = ""
    agents: tuple[str, ...] = ("*",)
    """Agents this rubric applies to: names or ids, glob patterns allowed (``airline-*``)."""
    sampling_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of conversations scored; default ``sampling.default_rate``."""
    judge_model: str | None = None
    """Model for this rubric's judge calls; default ``judge.model``."""
    evaluation_level: Literal["conversation", "turn"] = "conversation"
    """``conversation`` scores the whole conversation; ``turn`` scores each assistant turn with its context."""
    samples: int | None = Field(default=None, ge=1, le=15)
    """Judge samples per evaluation; default ``judge.samples``."""
    daily_budget_tokens: int | None = Field(default=None, ge=1)
    """Judge tokens this rubric may spend per UTC day; sampling pauses when spent."""
    daily_budget_usd: float | None = Field(default=None, gt=0)
    """Judge USD this rubric may spend per UTC day (needs ``judge.prices``)."""
    canary: CanarySet | None = None
    """A canary set re-scored every ``canary.interval_seconds`` to detect judge drift (see ``monitor.canary``)."""
    slo: RubricSlo | None = None
    """A quality SLO on this rubric's verdicts (objective, window, burn-rate alerts; docs/slo.md). How the rubric is
    watched, not how it is scored: not part of its content version."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value) or value.startswith("builtin."):
            raise ValueError("must be 1 to 256 of [A-Za-z0-9_.~-] and not start with 'builtin.'")
        return value

    def applies_to(self, agent_name: str | None, agent_id: str | None) -> bool:
        candidates = [c for c in (agent_name, agent_id) if c] or ["unknown"]
        return any(fnmatch.fnmatchcase(c, pattern) for pattern in self.agents for c in candidates)


_JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


def check_json_schema(schema: Any, path: str = "") -> None:
    """The structure Foundry's ``data_schema`` / ``init_parameters`` must have (JSON Schema 2020-12): a schema
    object (or true/false), known ``type`` names, ``properties`` of schemas, ``required`` a list of names."""
    where = f" at {path}" if path else ""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(f"must be a JSON Schema object{where}, not {type(schema).__name__}")
    types = schema.get("type")
    for name in types if isinstance(types, list) else ([] if types is None else [types]):
        if name not in _JSON_TYPES:
            raise ValueError(f"type {name!r}{where} is not one of {', '.join(_JSON_TYPES)}")
    required = schema.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)
                                 or len(set(required)) != len(required)):
        raise ValueError(f"required{where} must be a list of distinct property names")
    properties = schema.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            raise ValueError(f"properties{where} must map names to schemas")
        for name, sub in properties.items():
            check_json_schema(sub, f"{path}.properties.{name}".lstrip("."))
    if "items" in schema:
        check_json_schema(schema["items"], f"{path}.items".lstrip("."))


def _checked_json_schema(value: Any) -> Any:
    if value is not None:
        check_json_schema(value)
    return value


JsonSchema = Annotated[dict[str, Any] | None, BeforeValidator(_checked_json_schema)]
"""A Foundry ``data_schema`` / ``init_parameters`` field, its structure checked (``check_json_schema``)."""


class EvaluatorMetric(BaseModel):
    """One output metric of a Foundry evaluator definition (``metrics``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: Literal["ordinal", "continuous", "boolean"] | None = None
    desirable_direction: Literal["increase", "decrease", "neutral"] | None = None
    min_value: float | None = None
    max_value: float | None = None
    threshold: float | None = None
    is_primary: bool | None = None

    @model_validator(mode="after")
    def _range(self) -> EvaluatorMetric:
        if self.min_value is not None and self.max_value is not None and self.min_value > self.max_value:
            raise ValueError(f"min_value {self.min_value} is above max_value {self.max_value}")
        return self
