"""Render a conversation as delimited data for a judge prompt.

Everything the agent saw or said is put between tags and its own ``<`` and ``>`` are escaped, so a transcript
cannot close the data block and speak to the judge. (First version: no token budget yet.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from monitor.models import Conversation, Message


@dataclass(frozen=True)
class RenderedConversation:
    text: str
    truncated: bool
    """True when something was cut to fit the budget (marked in the text as well)."""
    estimated_tokens: int


def estimate_tokens(text: str) -> int:
    """About four characters per token: close enough for budgets and rate limits, corrected by reported usage."""
    return len(text) // 4 + 1


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _render_message(index: int, message: Message, tool_result_max_chars: int) -> str:
    body: list[str] = []
    for part in message.parts:
        if part.type == "text" and part.content:
            body.append(_escape(part.content))
        elif part.type == "tool_call":
            body.append(f'<tool_call id="{_escape(part.id or "")}" name="{_escape(part.name or "")}">'
                        f"{_escape(_dumps(part.arguments))}</tool_call>")
        elif part.type == "tool_call_response":
            result = _dumps(part.response)
            if len(result) > tool_result_max_chars:
                result = result[:tool_result_max_chars] + f" [... {len(result) - tool_result_max_chars} chars cut]"
            body.append(f'<tool_result id="{_escape(part.id or "")}">{_escape(result)}</tool_result>')
        elif part.type == "reasoning" and part.content:
            body.append(f"<reasoning>{_escape(part.content)}</reasoning>")
        else:
            body.append(f'<part type="{_escape(part.type)}">{_escape(_dumps(part.data))}</part>')
    return f'<turn index="{index}" role="{_escape(message.role)}">\n' + "\n".join(body) + "\n</turn>"


def render_conversation(
    conversation: Conversation,
    budget_tokens: int = 12_000,
    tool_result_max_chars: int = 2_000,
    upto: int | None = None,
) -> RenderedConversation:
    """Render ``conversation`` (its messages up to and including index ``upto``, when given)."""
    messages = conversation.messages if upto is None else conversation.messages[: upto + 1]
    lines = [f'<conversation agent="{_escape(conversation.agent)}">']
    if conversation.truncated:
        lines.append("<note>Some values of this conversation were truncated by the trace store; judge only what "
                     "is shown.</note>")
    if conversation.system_instructions:
        lines.append(f"<system_instructions>\n{_escape(conversation.system_instructions)}\n</system_instructions>")
    if conversation.tool_definitions:
        tools = [t.model_dump(exclude_none=True) for t in conversation.tool_definitions]
        lines.append(f"<tool_definitions>\n{_escape(_dumps(tools))}\n</tool_definitions>")
    lines.extend(_render_message(i, m, tool_result_max_chars) for i, m in enumerate(messages))
    lines.append("</conversation>")
    text = "\n".join(lines)
    return RenderedConversation(text=text, truncated=False, estimated_tokens=estimate_tokens(text))
