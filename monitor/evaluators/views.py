"""Which reply a Vertex-style rubric judges, and which part of the trace the judge sees with it.

A conversation-level rubric judges the final reply (the last assistant message with text) with the whole
conversation as context; a turn-level rubric judges every assistant message with text, each with the messages
up to it. Messages that only call tools are steps of a turn, not replies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from monitor.evaluators.base import EvaluationContext, JudgeUsage, unscored_result
from monitor.models import Conversation, EvaluationResult, Message
from monitor.rubrics.base import RubricBase
from monitor.rubrics.builtin import RequestScope, TraceView


@dataclass(frozen=True)
class Target:
    """One reply to judge."""

    turn_index: int | None
    """``None`` for a conversation-level verdict, else the index of the judged assistant message."""
    response_index: int
    conversation: Conversation
    """The conversation as the judge may see it: for a turn, cut just after the judged reply."""

    @property
    def response(self) -> Message:
        return self.conversation.messages[self.response_index]


async def judge_each_reply(
    conversation: Conversation,
    rubric: RubricBase,
    context: EvaluationContext,
    judge_one: Callable[[Target], Awaitable[EvaluationResult]],
) -> list[EvaluationResult]:
    """One result per reply the rubric's level selects; unscored when the agent never replied with text."""
    units = targets(conversation, getattr(rubric, "evaluation_level", "conversation"))
    if not units:
        return [unscored_result(conversation, rubric, context, None, JudgeUsage(), "no_response",
                                "The agent gave no reply with text to judge.")]
    return [await judge_one(unit) for unit in units if unit.turn_index not in context.done_turns]


R = TypeVar("R", bound=RubricBase)


class EachReply(Generic[R]):
    """An evaluator that judges each reply its rubric's level selects (``judge_each_reply``), one
    ``_evaluate_target`` per reply."""

    async def evaluate(self, conversation: Conversation, rubric: R, context: EvaluationContext
                       ) -> list[EvaluationResult]:
        return await judge_each_reply(
            conversation, rubric, context, lambda target: self._evaluate_target(conversation, rubric, context, target)
        )

    async def _evaluate_target(self, conversation: Conversation, rubric: R, context: EvaluationContext,
                               target: Target) -> EvaluationResult:
        raise NotImplementedError


def expected_turns(conversation: Conversation, rubric: RubricBase) -> set[int] | None:
    """The turn keys a complete turn-level evaluation records (-1 when the agent never replied: one unscored
    result); None for a conversation-level one, which records its results in one go."""
    if getattr(rubric, "evaluation_level", "conversation") != "turn":
        return None
    return set(reply_indices(conversation)) or {-1}


def reply_indices(conversation: Conversation) -> list[int]:
    return [i for i, m in enumerate(conversation.messages) if m.role == "assistant" and m.text.strip()]


def targets(conversation: Conversation, level: str) -> list[Target]:
    """The replies to judge; empty when the agent never replied with text."""
    replies = reply_indices(conversation)
    if not replies:
        return []
    if level == "conversation":
        return [Target(None, replies[-1], conversation)]
    return [
        Target(i, i, conversation.model_copy(update={"messages": conversation.messages[: i + 1]}))
        for i in replies
    ]


def last_user_index(conversation: Conversation, before: int) -> int | None:
    for index in range(before - 1, -1, -1):
        if conversation.messages[index].role == "user":
            return index
    return None


@dataclass(frozen=True)
class RequestContext:
    """What adaptive items are written for: the request and the context it was made in."""

    request: str | None
    """The latest user message (``last_user`` scope); None with ``all_user``."""
    earlier_user: tuple[str, ...]
    """The user's other messages before the reply, in order (for ``all_user``: every user message)."""
    previous_agent: str | None
    """The agent's text just before the request: what a short request ("yes please") answers."""


def request_context(target: Target, scope: RequestScope) -> RequestContext | None:
    """The user's words the items are written for, in their context; None when the user asked nothing."""
    messages = target.conversation.messages[: target.response_index]
    users = [i for i, m in enumerate(messages) if m.role == "user" and m.text.strip()]
    if not users:
        return None
    if scope == "all_user":
        return RequestContext(None, tuple(messages[i].text for i in users), None)
    index = last_user_index(target.conversation, target.response_index)
    if index is None or not messages[index].text.strip():
        return None
    before = next((m.text for m in reversed(messages[:index]) if m.role == "assistant" and m.text.strip()), None)
    return RequestContext(messages[index].text, tuple(messages[i].text for i in users if i < index), before)


def _text_only(message: Message) -> Message:
    return message.model_copy(update={"parts": tuple(p for p in message.parts if p.type == "text")})


def view(target: Target, kind: TraceView) -> Conversation:
    """The part of the trace the judge sees for a metric (see ``TraceView``)."""
    conversation = target.conversation
    messages = conversation.messages[: target.response_index + 1]
    if kind == "agent_conversation":
        return conversation
    request = last_user_index(conversation, target.response_index)
    turn = messages[request or 0:]
    if kind == "agent_turn":
        return conversation.model_copy(update={"messages": turn})
    bare: dict[str, Any] = {"system_instructions": None, "tool_definitions": ()}
    if kind == "final_turn":
        return conversation.model_copy(update={**bare, "messages": turn})
    if kind == "dialogue_with_tools":
        return conversation.model_copy(update={**bare, "messages": messages})
    if kind == "final_response":
        reply = _text_only(messages[-1])
        kept = (messages[request], reply) if request is not None else (reply,)
        return conversation.model_copy(update={**bare, "messages": kept})
    dialogue = tuple(_text_only(m) for m in messages if m.role in ("user", "assistant") and m.text.strip())
    return conversation.model_copy(update={**bare, "messages": dialogue})


def output_budget(context: EvaluationContext, needed: int) -> int:
    """``judge.max_output_tokens``, raised when the reply must hold more (a verdict per item or sentence): a
    truncated reply is invalid JSON and would cost a second call."""
    return max(context.settings.max_output_tokens, needed)
