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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from monitor.errors import JudgeError, JudgeRefused
from monitor.evaluators.prompts import prompt_version
from monitor.judge.base import ChatMessage, Judge, JudgeReply, JudgeRequest
from monitor.models import Conversation, EvaluationResult
from monitor.redaction import redact
from monitor.rubrics.base import RubricBase
from monitor.settings import JudgeSettings

T = TypeVar("T")


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


_FENCED = re.compile(r"```[a-zA-Z]*[ \t]*\n?(\{.*?)```", re.DOTALL)
"""A fenced block holding an object (its language tag, if any, skipped)."""


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a key given twice is ambiguous (plain ``json`` silently keeps the last one)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(f"reply is ambiguous: duplicate key {key!r}")
        seen[key] = value
    return seen


_DECODER = json.JSONDecoder(object_pairs_hook=_refuse_duplicate_keys)


def _decode(text: str, start: int = 0) -> tuple[Any, int]:
    """``raw_decode`` refusing duplicate keys; absurd nesting or numbers are an ``InvalidReply``."""
    try:
        return _DECODER.raw_decode(text, start)
    except _DuplicateKey as exc:
        raise InvalidReply(str(exc)) from None
    except json.JSONDecodeError:
        raise
    except (RecursionError, OverflowError, ValueError) as exc:
        raise InvalidReply(f"reply is not usable JSON ({type(exc).__name__})") from None


def _embedded_objects(text: str) -> list[Any]:
    """Every top-level JSON object found in prose (a fenced block's included), in order. A ``{`` that starts no
    object is skipped; an object's own nested objects are part of it, not candidates of their own."""
    found: list[Any] = []
    position = text.find("{")
    while position >= 0:
        try:
            value, end = _decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        found.append(value)
        position = text.find("{", end)
    return found


def _json_error(exc: json.JSONDecodeError) -> InvalidReply:
    return InvalidReply(f"reply is not valid JSON ({exc.msg} at char {exc.pos})")


def extract_json(text: str) -> Any:
    """Parse a reply as JSON. A reply in ``prompt`` mode may wrap its object in a fenced block or prose; it is
    read only when that is unambiguous: the whole reply is one JSON value, or the reply holds exactly one
    distinct JSON object. A reply holding several differing objects (a verdict quoted from the conversation
    before the judge's own, two fenced blocks) or a key given twice is refused: taking the first or the last
    would let trace content choose the verdict. ``ask_judge`` then asks again, and records the reason.

    A reply that starts as JSON must be JSON as a whole (a truncated object is not searched for the objects
    nested in it), and so must every fenced block."""
    stripped = text.strip()
    try:
        value, end = _decode(stripped)
    except json.JSONDecodeError as exc:
        if stripped.startswith(("{", "[")):
            raise _json_error(exc) from None
    else:
        if end == len(stripped):
            return value  # one JSON value of any type: the terse judge's reply is a JSON string
    for fenced in _FENCED.finditer(stripped):
        try:
            _decode(fenced.group(1).strip())
        except json.JSONDecodeError as exc:
            raise _json_error(exc) from None
    candidates = _embedded_objects(stripped)
    if not candidates:
        raise InvalidReply("reply is not JSON" if "{" not in stripped else "reply holds no valid JSON object")
    if any(other != candidates[0] for other in candidates[1:]):
        raise InvalidReply(f"reply is ambiguous: it holds {len(candidates)} differing JSON objects")
    return candidates[0]


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
            # The endpoint's error body may echo our key: the reason is stored and shown by `results show`.
            return Asked(None, redact(f"refused: {exc}"))
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
    return Asked(None, redact(f"invalid_reply: {problem}"))


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
    details: Mapping[str, Any] | None = None,
) -> EvaluationResult:
    """A result that records why there is no verdict (``unscored_reason``), never a made-up low score."""
    threshold = getattr(rubric, "pass_threshold", None)
    return EvaluationResult(
        outcome="unscored", unscored_reason=problem, reason=reason, details=dict(details or {}),
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
