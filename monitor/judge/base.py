"""④ The judge stage: one chat completion whose reply must be JSON of a given schema.

A ``Judge`` is only the transport to a model: it sends a request, retries transport failures (429, 5xx,
timeouts), respects rate limits and reports usage. Whether the reply makes sense for a rubric is decided by the
evaluator that asked (``monitor.evaluators``), which retries an invalid reply once and otherwise records the
evaluation as unscored.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ResponseMode = Literal["json_schema", "json_object", "prompt"]

PromptStyle = Literal["full", "terse"]
"""How much an evaluator puts in its prompt and asks back. ``full``: the whole rubric and transcript, a reason per
verdict. ``terse``: the embedded judge's, where every token costs tens of milliseconds on a CPU: short
instructions, the rubric's first words, a one-line-per-turn transcript, and the shortest reply (one character per
dimension). Evaluators without a terse prompt use their full one."""


@dataclass(frozen=True)
class MediaPart:
    """An image (or a video, for judges that accept one) shown to a multimodal judge with a message's text."""

    mime_type: str
    data: bytes
    as_file: bool = False
    """Sent as a ``file`` content part (a video for judges that take one) instead of an ``image_url``."""

    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def describe(self) -> str:
        """How the audit trail shows it: never the bytes."""
        return f"[{'file' if self.as_file else 'image'} {self.mime_type}, {len(self.data)} bytes]"


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str
    media: tuple[MediaPart, ...] = ()
    """Images (or video files) after the text, on user messages; only a multimodal judge accepts them (the
    embedded one refuses)."""


@dataclass(frozen=True)
class JudgeRequest:
    messages: tuple[ChatMessage, ...]
    schema: dict[str, Any]
    """JSON schema the reply must follow (sent as strict ``json_schema`` where the endpoint supports it)."""
    schema_name: str = "verdict"
    model: str | None = None
    """Overrides the judge's default model (a rubric's own ``judge_model``)."""
    max_output_tokens: int | None = None
    temperature: float | None = None
    rubric: str | None = None
    """The rubric this call is for, so usage can be charged to its daily budget."""


@dataclass(frozen=True)
class JudgeReply:
    text: str
    model: str
    mode: ResponseMode
    input_tokens: int = 0
    output_tokens: int = 0
    latency_seconds: float = 0.0
    cost_usd: float = 0.0


class Judge(Protocol):
    @property
    def model(self) -> str:
        """Default model name, recorded with every result."""
        ...

    @property
    def prompt_style(self) -> PromptStyle:
        """The prompts this judge's model is given (see ``PromptStyle``)."""
        ...

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Return the model's reply, or raise a ``JudgeError`` subclass once retries are spent."""
        ...

    @property
    def problem(self) -> str | None:
        """Why the judge cannot be used now (a refused credential, a spent quota), for ``/healthz`` and the
        regression detector's cannot-judge state; None while it can."""
        ...

    def record_invalid_reply(self, model: str | None = None) -> None:
        """Count a reply the evaluator could not use (``rubric_monitor_judge_invalid_replies_total``)."""
        ...

    async def aclose(self) -> None: ...
