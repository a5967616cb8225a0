"""The one agent scenario every producer runs, as data the tests compare against.

A restaurant-booking agent (``AGENT_NAME``) with a system prompt and two tools, ``find_table(date,
party_size)`` and ``book_table(date, time, party_size, name)``. Two sessions; each has three user turns, and
the first two turns each make one tool call whose result is fed back. Per session the conversation is::

    system, user1, assistant(tool_call find_table), tool(result), assistant(text),
            user2, assistant(tool_call book_table), tool(result), assistant(text),
            user3, assistant(text)

so a session makes 5 chat-completion requests (``CHAT_REQUESTS_PER_SESSION``) and the run makes 10.

Standard library only: the agent programs import this module with their producer venv's python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

AGENT_NAME = "table-booker"
AGENT_DESCRIPTION = "Finds and books restaurant tables."
MODEL = "gpt-4o-mini"
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
SYSTEM_PROMPT = ("You are table-booker, the booking assistant of the restaurant Chez Rubric. Use find_table to check "
                 "availability and book_table to book. Be brief.")

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "find_table",
        "description": "Find free table times for a date and party size.",
        "parameters": {"type": "object", "properties": {
            "date": {"type": "string", "description": "ISO date, e.g. 2026-12-12"},
            "party_size": {"type": "integer", "description": "Number of guests"}},
            "required": ["date", "party_size"]}}},
    {"type": "function", "function": {
        "name": "book_table",
        "description": "Book a table.",
        "parameters": {"type": "object", "properties": {
            "date": {"type": "string", "description": "ISO date"},
            "time": {"type": "string", "description": "HH:MM"},
            "party_size": {"type": "integer", "description": "Number of guests"},
            "name": {"type": "string", "description": "Name for the booking"}},
            "required": ["date", "time", "party_size", "name"]}}},
]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    result: str
    """What the tool returns (a JSON text), fed back to the model as the tool message's content."""

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str
    """The assistant's final text for this turn (after the tool result, when there is a tool call)."""
    tool_call: ToolCall | None = None


@dataclass(frozen=True)
class Session:
    conversation_id: str
    turns: tuple[Turn, ...]


def _session(n: int, date: str, size: int, times: list[str], time: str, name: str, ref: str, bye: str) -> Session:
    find = ToolCall(f"call_s{n}_find_table", "find_table", {"date": date, "party_size": size},
                    json.dumps({"date": date, "party_size": size, "free": times}))
    book = ToolCall(f"call_s{n}_book_table", "book_table", {"date": date, "time": time, "party_size": size,
                                                           "name": name},
                    json.dumps({"status": "booked", "reference": ref}))
    return Session(f"conv-table-booker-{n}", (
        Turn(f"Is there a table for {size} on {date}?",
             f"Yes: on {date} a table for {size} is free at {' or '.join(times)}. Which time would you like?", find),
        Turn(f"{time} please, under the name {name}.",
             f"Done: table for {size} on {date} at {time} for {name}, reference {ref}.", book),
        Turn(bye, "You're welcome, enjoy your dinner!"),
    ))


SESSIONS: tuple[Session, ...] = (
    _session(1, "2026-12-12", 4, ["19:00", "20:30"], "19:00", "Ada", "BK-1001", "Thanks, that's all."),
    _session(2, "2026-12-24", 2, ["18:00", "21:00"], "21:00", "Grace", "BK-1002", "Perfect, thank you."),
)
# Every user message is unique across sessions, so a request's session is known from its messages.
CHAT_REQUESTS_PER_SESSION = sum(2 if t.tool_call else 1 for t in SESSIONS[0].turns)


def tool_result(name: str, arguments: dict[str, Any]) -> str:
    """What the agents' tool functions return: the scripted result of the call with these arguments."""
    for session in SESSIONS:
        for turn in session.turns:
            call = turn.tool_call
            if call and call.name == name and all(arguments.get(k) == v for k, v in call.arguments.items()):
                return call.result
    return json.dumps({"error": f"no scripted result for {name}({arguments})"})


def expected_messages(session: Session) -> list[dict[str, Any]]:
    """The session's whole conversation as OpenAI chat messages, in order (system first)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for turn in session.turns:
        messages.append({"role": "user", "content": turn.user})
        if turn.tool_call:
            call = turn.tool_call
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments_json}}]})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": call.result})
        messages.append({"role": "assistant", "content": turn.reply})
    return messages


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text, whether ``content`` is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def next_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted assistant message answering a chat request's ``messages``: a tool call when the latest user
    turn has one and its result is not in the request yet, else the turn's text. Raises LookupError for a
    request the scenario does not know (the fake server answers 400)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") != "user":
            continue
        text = message_text(messages[index]).strip()
        turn = next((t for s in SESSIONS for t in s.turns if t.user == text), None)
        if turn is None:
            raise LookupError(f"unknown user message {text!r}")
        answered = any(m.get("role") == "tool" for m in messages[index + 1:])
        if turn.tool_call and not answered:
            call = turn.tool_call
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json}}]}
        return {"role": "assistant", "content": turn.reply}
    raise LookupError("no user message in the request")
