"""Fields every rubric kind shares."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
