"""Render a conversation as delimited data for a judge prompt, within a token budget.

Everything the agent saw or said is put between tags and its own ``&``, ``<`` and ``>`` are escaped (``"`` too
inside attributes), so a transcript cannot close the data block and speak to the judge.

A long conversation is fitted to ``budget_tokens`` in steps, each taken only when the previous one is not
enough, so the judge sees as much as possible:

1. every tool result longer than ``tool_result_max_chars`` keeps its head and tail (always);
2. tool results of older turns are compacted harder (the latest turns keep theirs);
3. middle turns are dropped, oldest first: the system instructions, the first user message and the latest
   turns stay; each dropped run is replaced by an ``<omitted>`` element naming the turns and the tools they
   called;
4. the longest remaining texts are cut in the middle.

Every cut is marked where it happened (``[... N chars cut ...]`` or ``<omitted>``) and ``truncated`` is True,
so a verdict on a partial view can be flagged. Turn indices are the conversation's own, gaps included.

Two markups share these steps: ``TAGGED`` (a tag around every turn, tool call and result, with ids and indices)
for every judge, and ``TERSE`` for a small model on a CPU, where each prompt token costs tens of milliseconds:
one ``role: text`` line per turn, calls and results in brackets, no tool definitions (the calls name the tools).
Both keep the ``<conversation>`` block and its escaping.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from monitor.models import Conversation, Message, Part

_OLDER_TOOL_RESULT_CHARS = 300
"""What a tool result of an older turn keeps once the budget is tight (step 2)."""
_LATEST_TURNS_KEPT_WHOLE = 2
"""Turns at the end whose tool results step 2 leaves alone: what the judge is most likely asked about."""
_MIN_TEXT_CHARS = 200
"""Step 4 never cuts a text below this: below it a message says nothing useful."""
_OMISSION_RESERVE_TOKENS = 80
"""Room kept for ``<omitted>`` markers when choosing which turns fit."""
_HEAD_SHARE = 3
"""System instructions may take at most 1/3 of the budget, tool definitions at most 1/6."""
_TOOL_NAMES_LISTED = 12


@dataclass(frozen=True)
class RenderedConversation:
    text: str
    truncated: bool
    """True when something was cut to fit the budget (marked in the text as well)."""
    estimated_tokens: int
    omitted_turns: int = 0
    """Turns left out entirely (step 3)."""
    cut_parts: int = 0
    """Texts, tool results and definitions shortened in place (steps 1, 2 and 4)."""


def estimate_tokens(text: str) -> int:
    """About four characters per token: close enough for budgets and rate limits; usage corrects it."""
    return len(text) // 4 + 1


def escape_data(text: str) -> str:
    """Escape ``<`` and ``>`` so that data cannot close the tag it is enclosed in and speak to the judge."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(text: str) -> str:
    return escape_data(text).replace('"', "&quot;")


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _dumps_compact(value: Any) -> str:
    """JSON without the spaces after separators: a tenth fewer tokens in tool arguments and results. A string
    holding a JSON object or array (how most instrumentations record tool results) is compacted too."""
    if isinstance(value, str):
        if not value.startswith(("{", "[")):
            return value
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return _dumps_compact(parsed) if isinstance(parsed, dict | list) else value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cut_middle(text: str, max_chars: int | None) -> tuple[str, bool]:
    """Keep the head and the tail (errors and conclusions tend to sit at the end) with a marker between."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    head = max_chars * 2 // 3
    tail = max_chars - head
    marker = f" [... {len(text) - max_chars} chars cut ...] "
    return text[:head] + marker + (text[len(text) - tail:] if tail else ""), True


class Markup(Protocol):
    """How a transcript is marked up. Contents arrive escaped; names, ids and roles arrive raw, for the markup to
    escape as it places them."""

    def dumps(self, value: Any) -> str: ...
    def open(self, agent: str) -> str: ...
    def truncated_note(self) -> str: ...
    def system(self, instructions: str) -> str: ...
    def tools(self, definitions: str, parameters_omitted: bool) -> str | None: ...
    def turn(self, index: int, role: str, body: list[str]) -> str: ...
    def tool_call(self, call_id: str, name: str, arguments: str) -> str: ...
    def tool_result(self, call_id: str, result: str) -> str: ...
    def reasoning(self, text: str) -> str: ...
    def part(self, kind: str, data: str) -> str: ...
    def omission(self, span: str, count: int, tool_calls: int, note: str) -> str: ...


CLOSING = "</conversation>"


class TaggedMarkup:
    """Tags with ids and turn indices: what a capable judge reads best, and what turn-level prompts point into."""

    def dumps(self, value: Any) -> str:
        return _dumps(value)

    def open(self, agent: str) -> str:
        return f'<conversation agent="{_attr(agent)}">'

    def truncated_note(self) -> str:
        return ("<note>Some values of this conversation were truncated by the trace store; judge only what is "
                "shown.</note>")

    def system(self, instructions: str) -> str:
        return f"<system_instructions>\n{instructions}\n</system_instructions>"

    def tools(self, definitions: str, parameters_omitted: bool) -> str | None:
        omitted = ' parameters="omitted"' if parameters_omitted else ""
        return f"<tool_definitions{omitted}>\n{definitions}\n</tool_definitions>"

    def turn(self, index: int, role: str, body: list[str]) -> str:
        return f'<turn index="{index}" role="{_attr(role)}">\n' + "\n".join(body) + "\n</turn>"

    def tool_call(self, call_id: str, name: str, arguments: str) -> str:
        return f'<tool_call id="{_attr(call_id)}" name="{_attr(name)}">{arguments}</tool_call>'

    def tool_result(self, call_id: str, result: str) -> str:
        return f'<tool_result id="{_attr(call_id)}">{result}</tool_result>'

    def reasoning(self, text: str) -> str:
        return f"<reasoning>{text}</reasoning>"

    def part(self, kind: str, data: str) -> str:
        return f'<part type="{_attr(kind)}">{data}</part>'

    def omission(self, span: str, count: int, tool_calls: int, note: str) -> str:
        return f'<omitted turns="{span}" count="{count}" tool_calls="{tool_calls}">{note}</omitted>'


_CONTINUATION = "\n  "
"""What a line break inside a terse turn becomes: the next line is indented, so only the markup's own lines
begin at the margin."""


def _one_turn(text: str) -> str:
    """Keep ``text`` inside the turn it belongs to: every line break (``\\n``, ``\\r``, U+2028 and the rest
    ``str.splitlines`` knows) becomes a newline and an indent, so a message holding ``\\nassistant: I booked
    your table`` cannot start a turn of its own in the ``TERSE`` markup, whose turns are told apart by their
    line starts."""
    return _CONTINUATION.join(text.splitlines())


class TerseMarkup:
    """One line per turn: about half the tokens of ``TaggedMarkup`` for a short conversation. A turn's own line
    breaks are indented (``_one_turn``): a line at the margin is always the markup's."""

    def dumps(self, value: Any) -> str:
        return _dumps_compact(value)

    def open(self, agent: str) -> str:
        return "<conversation>"

    def truncated_note(self) -> str:
        return "(some values were truncated by the trace store)"

    def system(self, instructions: str) -> str:
        return f"system: {_one_turn(instructions)}"

    def tools(self, definitions: str, parameters_omitted: bool) -> str | None:
        return None

    def turn(self, index: int, role: str, body: list[str]) -> str:
        return f"{_one_turn(escape_data(role))}: " + _one_turn("\n".join(body))

    def tool_call(self, call_id: str, name: str, arguments: str) -> str:
        return f"[call {escape_data(name)} {arguments}]"

    def tool_result(self, call_id: str, result: str) -> str:
        return f"[result {result}]"

    def reasoning(self, text: str) -> str:
        return f"[thinking {text}]"

    def part(self, kind: str, data: str) -> str:
        return f"[{escape_data(kind)} {data}]"

    def omission(self, span: str, count: int, tool_calls: int, note: str) -> str:
        return f"[{_one_turn(note)}]"


MarkupName = Literal["tagged", "terse"]
MARKUPS: dict[MarkupName, Markup] = {"tagged": TaggedMarkup(), "terse": TerseMarkup()}


@dataclass
class _Limits:
    """How much of one message may be shown."""

    tool_result_chars: int
    text_chars: int | None = None


@dataclass
class _Block:
    index: int
    message: Message
    limits: _Limits
    markup: Markup
    text: str = ""
    cuts: int = 0
    tokens: int = 0

    def render(self) -> _Block:
        self.text, self.cuts = _render_message(self.index, self.message, self.limits, self.markup)
        self.tokens = estimate_tokens(self.text) + 1
        return self


def _render_part_text(content: str, limits: _Limits) -> tuple[str, int]:
    text, cut = cut_middle(content, limits.text_chars)
    return escape_data(text), int(cut)


def _render_message(index: int, message: Message, limits: _Limits, markup: Markup) -> tuple[str, int]:
    body: list[str] = []
    cuts = 0
    for part in message.parts:
        if part.type == "text" and part.content:
            text, cut = _render_part_text(part.content, limits)
            body.append(text)
        elif part.type == "tool_call":
            arguments, cut_flag = cut_middle(markup.dumps(part.arguments), limits.text_chars)
            cut = int(cut_flag)
            body.append(markup.tool_call(part.id or "", part.name or "", escape_data(arguments)))
        elif part.type == "tool_call_response":
            cap = min(limits.tool_result_chars, limits.text_chars or limits.tool_result_chars)
            result, cut_flag = cut_middle(markup.dumps(part.response), cap)
            cut = int(cut_flag)
            body.append(markup.tool_result(part.id or "", escape_data(result)))
        elif part.type == "reasoning" and part.content:
            text, cut = _render_part_text(part.content, limits)
            body.append(markup.reasoning(text))
        else:
            data, cut_flag = cut_middle(markup.dumps(part.data), limits.text_chars)
            cut = int(cut_flag)
            body.append(markup.part(part.type, escape_data(data)))
        cuts += cut
    return markup.turn(index, message.role, body), cuts


@dataclass
class _Head:
    lines: list[str] = field(default_factory=list)
    cuts: int = 0


def _render_head(conversation: Conversation, budget_tokens: int, markup: Markup) -> _Head:
    head = _Head([markup.open(conversation.agent)])
    if conversation.truncated:
        head.lines.append(markup.truncated_note())
    budget_chars = budget_tokens * 4
    if conversation.system_instructions:
        instructions, cut = cut_middle(conversation.system_instructions, budget_chars // _HEAD_SHARE)
        head.cuts += int(cut)
        head.lines.append(markup.system(escape_data(instructions)))
    if conversation.tool_definitions:
        tools = _render_tools(conversation, budget_chars // (2 * _HEAD_SHARE), head, markup)
        if tools is not None:
            head.lines.append(tools)
    return head


def _render_tools(conversation: Conversation, max_chars: int, head: _Head, markup: Markup) -> str | None:
    tools = [t.model_dump(exclude_none=True) for t in conversation.tool_definitions]
    full = _dumps(tools)
    if len(full) <= max_chars:
        return markup.tools(escape_data(full), parameters_omitted=False)
    # Names and descriptions tell the judge what the agent could do; parameter schemas are the first to go.
    brief = _dumps([{k: v for k, v in t.items() if k in ("name", "description")} for t in tools])
    brief, _ = cut_middle(brief, max_chars)
    rendered = markup.tools(escape_data(brief), parameters_omitted=True)
    head.cuts += rendered is not None
    return rendered


def _omission(blocks: Sequence[_Block], markup: Markup) -> str:
    calls = Counter(p.name or "?" for b in blocks for p in b.message.parts if p.type == "tool_call")
    first, last = blocks[0].index, blocks[-1].index
    span = f"{first}" if first == last else f"{first}-{last}"
    noun = "turn" if len(blocks) == 1 else "turns"
    note = f"{len(blocks)} {noun} left out to fit the context budget"
    if calls:
        listed = ", ".join(f"{name} x{count}" for name, count in calls.most_common(_TOOL_NAMES_LISTED))
        more = "" if len(calls) <= _TOOL_NAMES_LISTED else f" and {len(calls) - _TOOL_NAMES_LISTED} more"
        note += f"; tools called in them: {listed}{more}"
    return markup.omission(span, len(blocks), sum(calls.values()), escape_data(note))


def _select(blocks: list[_Block], pinned: set[int], available: int) -> list[_Block]:
    """The pinned blocks plus as many of the latest others as fit in ``available`` tokens, in order."""
    used = sum(b.tokens for b in blocks if b.index in pinned)
    kept = {b.index for b in blocks if b.index in pinned}
    for block in reversed(blocks):
        if block.index in kept:
            continue
        if used + block.tokens > available:
            break
        kept.add(block.index)
        used += block.tokens
    return [b for b in blocks if b.index in kept]


def _body(blocks: list[_Block], kept: list[_Block], markup: Markup) -> tuple[list[str], int]:
    """The kept blocks' text with an ``<omitted>`` element for each run of left-out blocks between them."""
    kept_indices = {b.index for b in kept}
    lines: list[str] = []
    run: list[_Block] = []
    omitted = 0
    for block in blocks:
        if block.index in kept_indices:
            if run:
                lines.append(_omission(run, markup))
                omitted += len(run)
                run = []
            lines.append(block.text)
        else:
            run.append(block)
    if run:
        lines.append(_omission(run, markup))
        omitted += len(run)
    return lines, omitted


def _part_chars(part: Part) -> int:
    if part.type in ("text", "reasoning"):
        return len(part.content or "")
    if part.type == "tool_call":
        return len(_dumps(part.arguments))
    if part.type == "tool_call_response":
        return len(_dumps(part.response))
    return len(_dumps(part.data))


def _shrink_longest(kept: list[_Block]) -> bool:
    """Halve the text allowance of the largest kept block; False when nothing can shrink any more."""
    for block in sorted(kept, key=lambda b: b.tokens, reverse=True):
        current = block.limits.text_chars or max(map(_part_chars, block.message.parts), default=0)
        if current <= _MIN_TEXT_CHARS:
            continue
        block.limits.text_chars = max(_MIN_TEXT_CHARS, current // 2)
        block.render()
        return True
    return False


def render_conversation(
    conversation: Conversation,
    budget_tokens: int = 12_000,
    tool_result_max_chars: int = 2_000,
    upto: int | None = None,
    markup: MarkupName = "tagged",
) -> RenderedConversation:
    """Render ``conversation`` (its messages up to and including index ``upto``, when given) within about
    ``budget_tokens`` tokens; see the module docstring for what is kept and how cuts are marked."""
    messages = conversation.messages if upto is None else conversation.messages[: upto + 1]
    marks = MARKUPS[markup]
    head = _render_head(conversation, budget_tokens, marks)
    blocks = [_Block(i, m, _Limits(tool_result_max_chars), marks).render() for i, m in enumerate(messages)]
    available = budget_tokens - estimate_tokens("\n".join([*head.lines, CLOSING]))

    if sum(b.tokens for b in blocks) > available:
        for block in blocks[: max(0, len(blocks) - _LATEST_TURNS_KEPT_WHOLE)]:
            if block.message.parts and any(p.type == "tool_call_response" for p in block.message.parts):
                block.limits.tool_result_chars = min(tool_result_max_chars, _OLDER_TOOL_RESULT_CHARS)
                block.render()

    kept = blocks
    if sum(b.tokens for b in blocks) > available:
        first_user = next((b.index for b in blocks if b.message.role == "user"), None)
        pinned = {b.index for b in blocks[-1:]} | ({first_user} if first_user is not None else set())
        room = available - _OMISSION_RESERVE_TOKENS
        kept = _select(blocks, pinned, room)
        while sum(b.tokens for b in kept) > room and _shrink_longest(kept):
            pass

    lines, omitted = _body(blocks, kept, marks)
    text = "\n".join([*head.lines, *lines, CLOSING])
    cuts = head.cuts + sum(b.cuts for b in kept)
    return RenderedConversation(
        text=text,
        truncated=bool(omitted or cuts),
        estimated_tokens=estimate_tokens(text),
        omitted_turns=omitted,
        cut_parts=cuts,
    )
