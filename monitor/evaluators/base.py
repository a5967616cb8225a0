"""④ Evaluators: a rubric kind turned into judge calls and a result.

An evaluator builds the prompt and the reply schema for its rubric kind, asks the judge through ``ask_judge``
(which retries an invalid reply once), and turns the validated reply into ``EvaluationResult``s. A reply that is
still invalid gives an *unscored* result carrying the reason, never a low score. A judge that cannot be reached
(``JudgeError``: auth, rate limit, server error, timeout after the transport's retries) is NOT a verdict: the error
propagates, the pipeline leaves the evaluation pending and retries it next cycle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from monitor.errors import JudgeError, JudgeRefused
from monitor.evaluators.prompts import prompt_version
from monitor.judge.base import ChatMessage, Judge, JudgeReply, JudgeRequest
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.base import RubricBase
from monitor.settings import JudgeSettings

T = TypeVar("T")

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class InvalidReply(ValueError):
    """The judge answered, but not with what the rubric asked for. The message says what is wrong."""


@dataclass
class JudgeUsage:
    """What the judge calls of one evaluation cost, and what was sent and received (for the audit trail)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    mode: str | None = None
    prompts: list[list[dict[str, str]]] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)

    def add(self, request: JudgeRequest, reply: JudgeReply | None) -> None:
        self.calls += 1
        # Media is recorded by type and size, never its bytes.
        self.prompts.append([{"role": m.role, "content": " ".join([m.content, *(p.describe() for p in m.media)])}
                             for m in request.messages])
        if reply is not None:
            self.input_tokens += reply.input_tokens
            self.output_tokens += reply.output_tokens
            self.cost_usd += reply.cost_usd
            self.mode = reply.mode
            self.replies.append(reply.text)

    def merge(self, other: JudgeUsage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.mode = other.mode or self.mode
        self.prompts.extend(other.prompts)
        self.replies.extend(other.replies)


@dataclass(frozen=True)
class Asked(Generic[T]):
    value: T | None
    error: str | None
    """Why there is no value: ``invalid_reply: ...`` or ``refused: ...``."""


def extract_json(text: str) -> Any:
    """Parse a reply as JSON; replies in ``prompt`` mode may wrap it in a fenced block or prose around it."""
    stripped = text.strip()
    fenced = _FENCED.search(stripped)
    candidates = [stripped] + ([fenced.group(1)] if fenced else [])
    problem = "reply is not JSON"
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError as exc:
            problem = f"reply is not valid JSON ({exc.msg} at char {exc.pos})"
        except (RecursionError, OverflowError, ValueError) as exc:  # absurd nesting or numbers
            raise InvalidReply(f"reply is not usable JSON ({type(exc).__name__})") from None
    start = stripped.find("{")
    if start >= 0:
        try:
            # The first complete object in the prose, whatever follows it.
            return json.JSONDecoder().raw_decode(stripped, start)[0]
        except json.JSONDecodeError:
            pass
        except (RecursionError, OverflowError, ValueError) as exc:
            raise InvalidReply(f"reply is not usable JSON ({type(exc).__name__})") from None
    raise InvalidReply(problem)


async def ask_judge(
    judge: Judge,
    request: JudgeRequest,
    validate: Callable[[Any], T],
    usage: JudgeUsage,
    attempts: int = 2,
) -> Asked[T]:
    """Ask, parse and validate; an invalid reply is asked again (``attempts`` in all), then given up as invalid.

    ``validate`` receives the parsed JSON and raises ``InvalidReply`` (or ``ValueError``) when it does not fit.
    A ``JudgeError`` propagates (see the module docstring).
    """
    problem = "no attempt made"
    for _ in range(attempts):
        try:
            reply = await judge.complete(request)
        except JudgeRefused as exc:
            # The model declined, or the endpoint rejects this very prompt (400): a final answer about this
            # conversation, unlike a transport failure, and asking again would get the same.
            usage.add(request, getattr(exc, "reply", None))
            return Asked(None, f"refused: {exc}")
        except JudgeError as exc:
            usage.add(request, None)
            exc.calls, exc.prompt = usage.calls, usage.prompts[-1]
            raise
        usage.add(request, reply)
        try:
            return Asked(validate(extract_json(reply.text)), None)
        except (InvalidReply, ValueError, TypeError, KeyError, RecursionError, OverflowError) as exc:
            problem = str(exc) or type(exc).__name__
            judge.record_invalid_reply(request.model)
    return Asked(None, f"invalid_reply: {problem}")


def result_fields(
    conversation: Conversation,
    rubric: RubricBase,
    threshold: float | None,
    context: EvaluationContext,
    turn_index: int | None,
    usage: JudgeUsage,
    truncated: bool = False,
) -> dict[str, Any]:
    """The fields every result carries whatever its kind: identity, cost, and the audit trail when it is kept."""
    return {
        "conversation_id": conversation.id,
        "trace_ids": conversation.trace_ids,
        "agent": conversation.agent,
        "rubric": rubric.name,
        "rubric_version": rubric.version or "",
        "rubric_kind": str(getattr(rubric, "kind", "")),
        "turn_index": turn_index,
        "judge_model": rubric.judge_model or context.judge.model,
        "prompt_version": prompt_version(context.judge.prompt_style),
        "agent_version": conversation.agent_version,
        "threshold": threshold,
        "judge_calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
        "response_mode": usage.mode,
        "context_truncated": truncated or conversation.truncated,
        "prompt": usage.prompts[-1] if usage.prompts and context.store_content else None,
        "raw_reply": "\n---\n".join(usage.replies) if usage.replies and context.store_content else None,
    }


def unscored_result(
    conversation: Conversation,
    rubric: RubricBase,
    context: EvaluationContext,
    turn_index: int | None,
    usage: JudgeUsage,
    problem: str,
    reason: str,
    truncated: bool = False,
) -> EvaluationResult:
    """A result that records why there is no verdict (``unscored_reason``), never a made-up low score."""
    threshold = getattr(rubric, "pass_threshold", None)
    return EvaluationResult(
        outcome="unscored", unscored_reason=problem, reason=reason,
        **result_fields(conversation, rubric, threshold, context, turn_index, usage, truncated),
    )


def system_and_user(system: str, user: str) -> tuple[ChatMessage, ...]:
    return (ChatMessage("system", system), ChatMessage("user", user))


@dataclass(frozen=True)
class EvaluationContext:
    """What every evaluator needs besides the conversation and the rubric."""

    judge: Judge
    settings: JudgeSettings
    store_content: bool = True
    done_turns: frozenset[int] = frozenset()
    """Turns of a turn-level evaluation already recorded (a crash cut it short): they are not judged again."""


class Evaluator(Protocol):
    kinds: tuple[str, ...]
    """The rubric kinds this evaluator scores."""

    async def evaluate(
        self, conversation: Conversation, rubric: Any, context: EvaluationContext
    ) -> list[EvaluationResult]:
        """One result for a conversation-level rubric; one per assistant turn for a turn-level one."""
        ...
