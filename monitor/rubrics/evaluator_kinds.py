"""Foundry's other evaluator definitions (``prompt``, ``code``, ``endpoint``) and Vertex's Gecko media metrics, as
rubric kinds. Pure data: what runs them is in ``monitor.evaluators``.

Foundry's ``EvaluatorDefinition`` is a union over ``type``: ``rubric`` (our ``weighted``), ``prompt``, ``code`` and
``endpoint``, all carrying ``data_schema`` and ``init_parameters`` (JSON Schema 2020-12) and ``metrics`` (the output
metrics the evaluator produces). A definition is accepted verbatim (``type`` names the kind) or inside Foundry's
``EvaluatorVersion`` envelope (see ``monitor.rubrics.loader``).

The data an evaluator reads is the conversation's, under the names Foundry's data mappings use
(``CONVERSATION_FIELDS``); ``data_schema`` may only require those, and an evaluation whose conversation lacks one
is unscored (``missing_field``) before anything runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from monitor.rubrics.base import EvaluatorMetric, JsonSchema, RubricBase

CONVERSATION_FIELDS: dict[str, str] = {
    "query": "the user's request the judged reply answers (text)",
    "response": "the judged reply (text)",
    "query_messages": "every message before the judged reply, as [{role, content}]",
    "response_messages": "the judged reply and the tool steps of its turn, as [{role, content, tool_calls?}]",
    "tool_calls": "the agent's tool calls up to the reply, as [{id, name, arguments, result}] (only when it made any)",
    "tool_definitions": "the agent's tools, as [{name, description, parameters}] (only when the trace has them)",
    "ground_truth": "the reference answer (only when the input supplies one)",
    "system_instructions": "the agent's instructions (only when the trace has them)",
}
"""What a conversation provides to Foundry-style evaluators (``{{query}}`` in a prompt, ``item["query"]`` in code,
the keys of an endpoint's JSON body)."""

METRIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
DEFAULT_RANGES = {"continuous": (0.0, 1.0), "ordinal": (1.0, 5.0), "boolean": (0.0, 1.0)}
"""The range of a metric that declares none (Foundry makes ``min_value`` / ``max_value`` optional): a value outside
it is refused, since it could not be put on the 0 to 1 score scale."""


def _schema_properties(schema: dict[str, Any] | None) -> tuple[set[str], set[str]]:
    """The declared and the required top-level properties of a JSON Schema."""
    if not schema:
        return set(), set()
    properties = schema.get("properties") or {}
    return set(properties), set(schema.get("required") or ())


class FoundryEvaluatorRubric(RubricBase):
    """Fields Foundry's evaluator definitions share, and the pass rule of their metrics."""

    display_name: str | None = None
    """Foundry's display name (evaluator envelope)."""
    data_schema: JsonSchema = None
    """JSON Schema of the evaluator's input: its ``required`` fields must be ones a conversation provides (see
    ``CONVERSATION_FIELDS``); an evaluation whose conversation lacks one is unscored (``missing_field``)."""
    init_parameters: JsonSchema = None
    """JSON Schema of the evaluator's parameters; ``initialization_parameters`` are checked against it."""
    initialization_parameters: dict[str, Any] = Field(default_factory=dict)
    """The parameter values (Foundry passes them in the testing criterion): ``{{name}}`` in a prompt, the global
    ``init_parameters`` of code, ``init_parameters`` in an endpoint's body."""
    metrics: dict[str, EvaluatorMetric] = Field(min_length=1)
    """The output metrics, by name; every one is validated, stored and exported (see docs/rubrics.md)."""
    pass_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """Used only when no metric sets its own pass rule (a ``threshold``, or a boolean with a desirable
    direction): the result passes when the primary metric, on the 0 to 1 scale, reaches it."""

    @model_validator(mode="before")
    @classmethod
    def _foundry_verbatim(cls, data: Any) -> Any:
        # Foundry's definition names its kind in ``type``; ours in ``kind``.
        if isinstance(data, dict) and "type" in data:
            data = dict(data)
            kind = data.pop("type")
            data.setdefault("kind", kind)
        return data

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, value: dict[str, EvaluatorMetric]) -> dict[str, EvaluatorMetric]:
        for name, metric in value.items():
            if not METRIC_NAME.match(name) or name == "reason":
                raise ValueError(f"metric name {name!r}: 1 to 128 of [A-Za-z0-9_.-], starting with a letter, "
                                 "and not 'reason'")
            low, high = metric_range(metric)
            if metric.threshold is not None and not low <= metric.threshold <= high:
                raise ValueError(f"{name}: threshold {metric.threshold} is outside the metric's range {low} to "
                                 f"{high}")
        if sum(bool(m.is_primary) for m in value.values()) > 1:
            raise ValueError("only one metric may be is_primary")
        return value

    @model_validator(mode="after")
    def _check_data_and_parameters(self) -> FoundryEvaluatorRubric:
        _, required = _schema_properties(self.data_schema)
        unknown = sorted(required - set(CONVERSATION_FIELDS))
        if unknown:
            raise ValueError(f"data_schema: required field {unknown[0]!r} is not one a conversation provides "
                             f"({', '.join(CONVERSATION_FIELDS)})")
        declared, needed = _schema_properties(self.init_parameters)
        missing = sorted(needed - set(self.initialization_parameters))
        if missing:
            raise ValueError(f"initialization_parameters: {missing[0]!r} is required by init_parameters")
        if self.init_parameters is not None and self.init_parameters.get("additionalProperties") is False:
            extra = sorted(set(self.initialization_parameters) - declared)
            if extra:
                raise ValueError(f"initialization_parameters: {extra[0]!r} is not declared in init_parameters")
        return self

    @property
    def primary_metric(self) -> str:
        """The metric the result's score is: the one marked ``is_primary``, else the first declared."""
        return next((name for name, m in self.metrics.items() if m.is_primary), next(iter(self.metrics)))

    def provided_fields(self) -> tuple[str, ...]:
        """The conversation fields this evaluator receives: those ``data_schema`` declares, else all of them."""
        declared, required = _schema_properties(self.data_schema)
        named = (declared | required) & set(CONVERSATION_FIELDS)
        return tuple(f for f in CONVERSATION_FIELDS if f in named) if named else tuple(CONVERSATION_FIELDS)

    def required_fields(self) -> tuple[str, ...]:
        return tuple(sorted(_schema_properties(self.data_schema)[1]))


def metric_range(metric: EvaluatorMetric) -> tuple[float, float]:
    low, high = DEFAULT_RANGES[metric.type or "continuous"]
    return (low if metric.min_value is None else metric.min_value,
            high if metric.max_value is None else metric.max_value)


class PromptEvaluatorRubric(FoundryEvaluatorRubric):
    """Foundry's ``PromptBasedEvaluatorDefinition``: a judge prompt with ``{{field}}`` placeholders; one judge
    call whose reply (a strict JSON schema built from ``metrics``) gives every metric."""

    kind: Literal["prompt"] = "prompt"
    prompt_text: str = Field(min_length=1)
    """The evaluation instructions. ``{{query}}``, ``{{response}}``... are filled from the conversation (as
    escaped data blocks), ``{{name}}`` of an initialization parameter with its value."""

    @model_validator(mode="after")
    def _check_placeholders(self) -> PromptEvaluatorRubric:
        for name in PLACEHOLDER.findall(self.prompt_text):
            if name not in CONVERSATION_FIELDS and name not in self.initialization_parameters:
                raise ValueError(f"prompt_text: placeholder {{{{{name}}}}} is neither a conversation field "
                                 f"({', '.join(CONVERSATION_FIELDS)}) nor an initialization parameter")
        return self

    def placeholders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(PLACEHOLDER.findall(self.prompt_text)))


class CodeEvaluatorRubric(FoundryEvaluatorRubric):
    """Foundry's ``CodeBasedEvaluatorDefinition``: ``def grade(sample, item) -> float`` run in a separate, limited
    process (``monitor.evaluators.code``)."""

    kind: Literal["code"] = "code"
    code_text: str | None = None
    """The Python source holding the grading function, as Foundry stores it."""
    code_file: Path | None = None
    """Or a file holding it (relative paths are read from the rubric file's directory when the rubric is loaded:
    its content is part of the rubric's version)."""
    function: str = Field(default="grade", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The function called as ``function(sample, item)``."""
    entry_point: str | None = None
    """Foundry's name of an uploaded code file (``answer_length_evaluator.py``); kept, not used: ship the file as
    ``code_file``."""
    image_tag: str | None = None
    """Foundry's container image for the code; kept, not used (the grader runs with the daemon's Python)."""
    blob_uri: str | None = None
    """Foundry's storage of uploaded code; kept, not fetched: ship the file as ``code_file``."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    """Wall-clock limit of one run (the process is killed past it: ``unscored``, ``code_timeout``)."""
    memory_mb: int = Field(default=512, ge=32, le=65_536)
    """Address-space limit of the process (``RLIMIT_AS``); allocating past it ends the run (``code_memory``)."""

    @model_validator(mode="after")
    def _one_source(self) -> CodeEvaluatorRubric:
        if (self.code_text is None) == (self.code_file is None):
            hint = " (Foundry's uploaded code is not fetched from blob_uri)" if self.blob_uri else ""
            raise ValueError("code_text: give the grading code in code_text or its file in code_file (one of "
                             f"them){hint}")
        if self.code_text is not None and not self.code_text.strip():
            raise ValueError("code_text: is empty")
        return self


class EndpointEvaluatorRubric(FoundryEvaluatorRubric):
    """An evaluator behind an HTTP(S) service: the conversation's fields are POSTed as JSON, the reply's metrics
    validated (``monitor.evaluators.endpoint``)."""

    kind: Literal["endpoint"] = "endpoint"
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """Where the fields are POSTed."""
    connection_name: str | None = None
    """Foundry's project connection holding the URL and credential; kept, not resolved: give ``url`` and
    ``token_file``."""
    token_file: Path | None = None
    """A file holding the credential (a mounted secret), re-read for every request so a rotated one is used."""
    token_header: Literal["bearer", "api-key"] = "bearer"
    """How it is sent: ``Authorization: Bearer <token>``, or ``api-key: <token>`` (Foundry's ApiKey connections)."""
    ca_bundle: Path | None = None
    """CA bundle to verify an https service's certificate (private CAs)."""
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """Per request."""
    retries: int = Field(default=2, ge=0, le=10)
    """Further attempts after a timeout, a connection error, 429 or 5xx, waiting ``backoff_seconds`` × 2ⁿ."""
    backoff_seconds: float = Field(default=1.0, ge=0, le=60)

    @model_validator(mode="after")
    def _needs_url(self) -> EndpointEvaluatorRubric:
        if self.url is None:
            hint = f" (connection {self.connection_name!r} is Foundry's and is not resolved here)" \
                if self.connection_name else ""
            raise ValueError(f"url: the evaluator service's URL is required{hint}")
        return self


class GeckoRubric(RubricBase):
    """Vertex's Gecko metrics: yes/no questions generated from the user's prompt (cached per prompt), answered
    against the image or video the agent produced by a multimodal judge; ``score = passed / total``."""

    kind: Literal["gecko_text2image", "gecko_text2video"]
    items: tuple[str, ...] = ()
    """Fixed questions; when given, none are generated."""
    max_items: int = Field(default=12, ge=3, le=30)
    """At most this many generated questions per prompt."""
    pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of questions that must pass (1.0: every one)."""
    video_input: Literal["frames", "file"] = "frames"
    """``gecko_text2video``: send sampled frames as images (any vision judge), or the video itself as a file part
    (judges that accept video, e.g. Gemini's OpenAI-compatible endpoint)."""

    @field_validator("items")
    @classmethod
    def _distinct_items(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        stripped = tuple(v.strip() for v in values)
        if any(not v for v in stripped) or len(set(stripped)) != len(stripped):
            raise ValueError("entries must be non-empty and distinct")
        return stripped

    @model_validator(mode="after")
    def _video_only(self) -> GeckoRubric:
        if self.kind == "gecko_text2image" and self.video_input != "frames":
            raise ValueError("video_input: only gecko_text2video takes video")
        if self.samples not in (None, 1):
            raise ValueError("samples: Gecko makes one answering call; samples is not supported")
        if self.evaluation_level != "conversation":
            # The pipeline tracks turn-level evaluations by the agent's text replies; media replies differ.
            raise ValueError("evaluation_level: Gecko judges the conversation's last image or video (conversation)")
        return self
