"""② Assembly: the spans of a conversation → its real message sequence.

Grouping. A trace belongs wholly to the conversation id (``gen_ai.conversation.id`` or
``gen_ai.thread.id``) that any of its spans names, because tool spans and plain chat spans usually lack it;
a trace naming none is its own conversation, keyed by the trace id.

Messages. Each chat span repeats the history in its input, so the sequence is rebuilt by merging, each message
once: first the inference spans in start order (a span whose input extends what is known adds its new tail),
then tool results that no later input showed are taken from ``execute_tool`` spans, then coarser spans
(``invoke_agent`` and the like) add only what the finer ones did not show, placed by time. System messages
become the system instructions.

Bad content never raises: an attribute that fails its schema is ignored and counted in ``Assembly.rejected``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from monitor.formats.conventions import inference_operation, may_hold_input, read_span_content
from monitor.formats.genai import (
    SYSTEM_ROLES,
    TOOL_CALL_RESULT,
    ReadCache,
    SpanContent,
    TimedMessage,
)
from monitor.formats.json_text import cycle_collection_paused, load_json, maybe_json_object
from monitor.models import CONVERSATION_ID_KEYS, Conversation, Message, Part, SpanEvent, SpanRecord, ToolDefinition

logger = logging.getLogger(__name__)

INFERENCE_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
TOKEN_OPERATIONS = INFERENCE_OPERATIONS | {"embeddings"}
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
EXECUTE_TOOL = "execute_tool"
_KNOWN_OPERATIONS = TOKEN_OPERATIONS | AGENT_OPERATIONS | {EXECUTE_TOOL, "retrieval"}
# json.dumps(..., sort_keys=True, default=str, ensure_ascii=False), without building an encoder per call.
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, default=str, ensure_ascii=False)

SpanKey = tuple[str, str]


@dataclass(frozen=True)
class Assembly:
    conversations: list[Conversation]
    rejected: dict[str, int]
    """Content attributes or events ignored because they were invalid, by reason."""


def assemble(spans: Iterable[SpanRecord], key: str | None = None) -> Assembly:
    """Conversations of ``spans`` (any mix of traces, with or without event rows), oldest first. With ``key``, the
    spans are one conversation's, grouped already (by the store, by the same rules): one conversation comes out,
    under that key."""
    with cycle_collection_paused():
        return _assemble(spans, key)


def _assemble(spans: Iterable[SpanRecord], one_key: str | None = None) -> Assembly:
    records = _dedupe(spans)
    folded = fold_event_rows(records)
    real_spans = {(r.trace_id, r.span_id) for r in records if r.kind != "event"}
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in folded:
        by_trace[span.trace_id].append(span)
    cache = ReadCache()
    contents: dict[SpanKey, SpanContent] = {}
    by_key: dict[str, list[list[SpanRecord]]] = defaultdict(list)
    if one_key is not None:
        if by_trace:
            by_key[one_key] = list(by_trace.values())
    else:
        for key, trace_spans in _group_traces(list(by_trace.values()), cache, contents):
            by_key[key].append(trace_spans)
    rejected: Counter[str] = Counter()
    problems: list[str] = []
    facts = _MessageFacts()
    conversations = [
        _ConversationBuilder(key, traces, real_spans, cache, facts, contents).build(rejected, problems)
        for key, traces in by_key.items()
    ]
    conversations.sort(key=lambda c: (c.started_at or datetime.max.replace(tzinfo=UTC), c.id))
    if rejected:
        logger.warning(
            "ignored %d invalid content attribute(s) while assembling %d conversation(s) %s; first: %s",
            sum(rejected.values()), len(conversations), dict(rejected), problems[0],
        )
        for problem in problems[1:]:
            logger.debug("ignored invalid content: %s", problem)
    return Assembly(conversations=conversations, rejected=dict(rejected))


def _group_traces(
    traces: list[list[SpanRecord]], cache: ReadCache, contents: dict[SpanKey, SpanContent]
) -> list[tuple[str, list[SpanRecord]]]:
    """Each trace with its conversation key: the id it names, else the conversation whose complete transcript
    its first model input extends (a session without a conversation id, one trace per agent run or per model
    call), else its own trace id."""
    keyed = [(conversation_key(trace), trace) for trace in traces]
    if len(keyed) < 2 or not any(key == trace[0].trace_id for key, trace in keyed):
        return keyed
    keyed.sort(key=lambda item: min((s.start_time, s.span_id) for s in item[1]))
    tails: dict[str, str] = {}
    result: list[tuple[str, list[SpanRecord]]] = []
    for key, trace in keyed:
        transcript = trace_transcript(trace, cache, contents)
        if key == trace[0].trace_id and transcript is not None:
            key = next((tails[head] for head in reversed(transcript.heads) if head in tails), key)
        if transcript is not None and transcript.tail is not None:
            tails.setdefault(transcript.tail, key)
        result.append((key, trace))
    return result


@dataclass(frozen=True)
class TraceTranscript:
    """What one trace shows of its conversation, as hashes, to join the traces of a session that names no
    conversation id.

    ``heads[k]`` hashes the system instructions and the first ``k + 2`` messages of the trace's first model
    input; ``tail`` hashes the system instructions and the whole transcript at its last model call (input and
    reply). A trace whose first input has a head equal to another trace's tail extends that conversation.
    """

    heads: tuple[str, ...]
    tail: str | None
    awaiting_tool_result: bool
    """The transcript ends on an assistant tool call whose result is not in it yet."""


def trace_transcript(
    spans: Sequence[SpanRecord], cache: ReadCache | None = None, contents: dict[SpanKey, SpanContent] | None = None,
) -> TraceTranscript | None:
    """The ``TraceTranscript`` of a trace's spans (event records folded in); None without model calls or
    content. Only the first and the last model call with input make it: they are looked for from each end, and
    a call that certainly holds no input is not read at all (the OTLP receiver computes this for every trace it
    commits)."""
    folded = fold_event_rows(spans) if any(s.kind == "event" for s in spans) else list(spans)
    calls = sorted((s for s in folded if operation_of(s) in INFERENCE_OPERATIONS and may_hold_input(s)),
                   key=lambda s: (s.start_time, s.span_id))
    reader = cache or ReadCache()
    known: dict[SpanKey, SpanContent] = {} if contents is None else contents

    def read(span: SpanRecord) -> SpanContent:
        found = known.get((span.trace_id, span.span_id))
        if found is None:
            found = known[(span.trace_id, span.span_id)] = read_span_content(span, cache=reader)
        return found

    first = next((content for content in map(read, calls) if content.input), None)
    if first is None:
        return None
    last = next(content for content in map(read, reversed(calls)) if content.input)
    first_system, first_keys = _transcript_keys(first.input, first.system_instructions, reader)
    heads: list[str] = []
    digest = hashlib.blake2b(first_system.encode(), digest_size=16)
    for index, key in enumerate(first_keys):
        digest.update(b"\x1e" + key.encode())
        if index >= 1:
            heads.append(digest.copy().hexdigest())
    last_system, last_keys = _transcript_keys(last.input + last.output[:1], last.system_instructions, reader)
    tail = hashlib.blake2b(last_system.encode(), digest_size=16)
    for key in last_keys:
        tail.update(b"\x1e" + key.encode())
    ending = [m.message for m in last.input + last.output[:1] if m.message.role not in SYSTEM_ROLES]
    awaiting = bool(ending) and ending[-1].role == "assistant" and bool(ending[-1].tool_calls)
    return TraceTranscript(tuple(heads), tail.hexdigest() if len(last_keys) >= 2 else None, awaiting)


def _transcript_keys(messages: Sequence[TimedMessage], instructions: Sequence[str],
                     cache: ReadCache) -> tuple[str, list[str]]:
    system = [*instructions, *(m.message.text for m in messages if m.message.role in SYSTEM_ROLES)]
    keys = [cache.message_key(m.message, message_key) for m in messages if m.message.role not in SYSTEM_ROLES]
    return "\n\n".join(dict.fromkeys(t for t in system if t)), keys


def conversation_key(spans: Iterable[SpanRecord]) -> str:
    """The conversation a trace belongs to, given (some of) its spans: the id named nearest the root, else the
    trace id. Span events count too (the Azure SDK puts ``gen_ai.thread.id`` on its message events)."""
    records = list(spans)
    if not records:
        raise ValueError("conversation_key needs at least one span")
    depths = _depths(records)
    named: list[tuple[int, datetime, str, str]] = []
    for record in records:
        found = record.conversation_id or _event_conversation_id(record.events)
        if found:
            depth = depths[(record.trace_id, record.span_id)]
            named.append((depth, record.start_time, record.span_id, found))
    if named:
        return min(named)[3]
    return min(records, key=lambda r: (r.start_time, r.span_id)).trace_id


def _event_conversation_id(events: Iterable[SpanEvent]) -> str | None:
    for event in events:
        for key in CONVERSATION_ID_KEYS:
            if event.attributes.get(key):
                return str(event.attributes[key])
    return None


def fold_event_rows(records: Iterable[SpanRecord]) -> list[SpanRecord]:
    """Spans with the event rows (``kind == "event"``) folded into their parents' events.

    Event rows whose parent span is absent are grouped into a stand-in span with the parent's id, so the
    messages they carry still count.
    """
    spans: list[SpanRecord] = []
    rows: dict[SpanKey, list[SpanRecord]] = defaultdict(list)
    for record in records:
        if record.kind == "event":
            rows[(record.trace_id, record.parent_span_id or record.span_id)].append(record)
        else:
            spans.append(record)
    result: list[SpanRecord] = []
    for span in spans:
        extra = rows.pop((span.trace_id, span.span_id), [])
        result.append(_with_events(span, extra) if extra else span)
    for (trace_id, span_id), orphans in rows.items():
        first = min(row.start_time for row in orphans)
        stand_in = SpanRecord(trace_id=trace_id, span_id=span_id, start_time=first)
        result.append(_with_events(stand_in, orphans))
    return result


def _with_events(span: SpanRecord, rows: list[SpanRecord]) -> SpanRecord:
    added = [SpanEvent(name=row.name, time=row.start_time, attributes=row.attributes) for row in rows]
    events = sorted((*span.events, *added), key=lambda event: event.time)
    truncated = tuple(dict.fromkeys((*span.truncated_keys, *(k for row in rows for k in row.truncated_keys))))
    return span.model_copy(update={"events": tuple(events), "truncated_keys": truncated})


def _dedupe(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """One record per span (overlapping source windows read some twice); the first copy wins."""
    seen: set[tuple[Any, ...]] = set()
    result: list[SpanRecord] = []
    for span in spans:
        key: tuple[Any, ...] = (span.trace_id, span.span_id)
        if span.kind == "event":
            key = (*key, span.parent_span_id, span.name, span.start_time)
        if key not in seen:
            seen.add(key)
            result.append(span)
    return result


def _depths(spans: Sequence[SpanRecord]) -> dict[SpanKey, int]:
    parents = {(s.trace_id, s.span_id): s.parent_span_id for s in spans if s.kind != "event"}
    depths: dict[SpanKey, int] = {}
    for span in spans:
        depth, parent = 0, span.parent_span_id
        # Bounded walk: a parent cycle in bad data must not hang the cycle.
        while parent is not None and (span.trace_id, parent) in parents and depth <= len(parents):
            depth += 1
            parent = parents[(span.trace_id, parent)]
        depths[(span.trace_id, span.span_id)] = depth
    return depths


def operation_of(span: SpanRecord) -> str | None:
    """``gen_ai.operation.name``, else the operation a conventional span name starts with (``chat gpt-4o``);
    model calls of conventions that name them otherwise (OpenInference, OpenLLMetry 0.4x, Semantic Kernel's
    ``chat.completions``) are ``chat``."""
    operation = span.operation
    if operation in _KNOWN_OPERATIONS:
        return operation  # the current conventions' values: no alias to look up
    aliased = inference_operation(span)
    if aliased is not None:
        return aliased
    if operation:
        return operation
    first_word = span.name.split(" ", 1)[0]
    return first_word if first_word in _KNOWN_OPERATIONS else None


# ---- one conversation ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    message: Message
    key: str
    time: datetime
    calls: tuple[Part, ...]
    """The message's tool calls, looked up often while filling in tool results."""


class _MessageFacts:
    """The merge key and tool calls of each message object, computed once per assembly.

    The read cache hands out one object per distinct message, so a history repeated by every chat span (and
    by every replica of a conversation in the batch) costs one key. Each entry holds its message, so the id it
    is filed under cannot be reused by another object while the entry exists.
    """

    def __init__(self) -> None:
        self._facts: dict[int, tuple[Message, str, tuple[Part, ...]]] = {}

    def entry(self, message: Message, time: datetime) -> _Entry:
        found = self._facts.get(id(message))
        if found is None or found[0] is not message:
            found = self._facts[id(message)] = (message, message_key(message), message.tool_calls)
        return _Entry(message, found[1], time, found[2])


class _ConversationBuilder:
    def __init__(
        self,
        key: str,
        traces: list[list[SpanRecord]],
        real_spans: set[SpanKey],
        cache: ReadCache,
        facts: _MessageFacts,
        contents: dict[SpanKey, SpanContent] | None = None,
    ) -> None:
        self.key = key
        self.traces = sorted(traces, key=lambda t: min((s.start_time, s.span_id) for s in t))
        self.spans = [span for trace in self.traces for span in trace]
        self.depths = _depths(self.spans)
        self.parents = {(s.trace_id, s.span_id): s.parent_span_id for s in self.spans}
        self.span_count = sum(1 for s in self.spans if (s.trace_id, s.span_id) in real_spans)
        known = contents or {}
        self.contents = {
            (s.trace_id, s.span_id): known.get((s.trace_id, s.span_id)) or read_span_content(s, cache=cache)
            for s in self.spans
        }
        self.facts = facts
        self.system_texts: list[str] = []
        # Sorting keys and operations are asked for many times per span: each is computed once.
        self.orders = {id(s): (s.start_time, self.depths[(s.trace_id, s.span_id)], s.span_id) for s in self.spans}
        self.operations = {id(s): operation_of(s) for s in self.spans}
        self.ordered = sorted(self.spans, key=self.order)

    def order(self, span: SpanRecord) -> tuple[datetime, int, str]:
        return self.orders[id(span)]

    def operation(self, span: SpanRecord) -> str | None:
        return self.operations[id(span)]

    def content(self, span: SpanRecord) -> SpanContent:
        return self.contents[(span.trace_id, span.span_id)]

    def build(self, rejected: Counter[str], problems: list[str]) -> Conversation:
        for content in self.contents.values():
            if content.rejected:
                rejected.update(content.rejected)
                problems.extend(content.problems)
        messages: list[_Entry] = []
        for trace in self.traces:
            _extend(messages, self.trace_messages(trace))
        agent_name, agent_id, agent_version = self.agent_identity()
        input_tokens, output_tokens = self.token_usage()
        ends = [t for s in self.spans for t in (s.end_time or s.start_time, *(e.time for e in s.events))]
        return Conversation(
            id=self.key,
            trace_ids=tuple(trace[0].trace_id for trace in self.traces),
            agent_name=agent_name,
            agent_id=agent_id,
            agent_version=agent_version,
            system_instructions=self.system_instructions(),
            tool_definitions=self.tool_definitions(),
            messages=tuple(entry.message for entry in messages),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            started_at=min(s.start_time for s in self.spans),
            last_activity_at=max(ends),
            span_count=self.span_count,
            truncated=any(c.truncated for c in self.contents.values()),
            scopes=tuple(dict.fromkeys(s.scope for s in self.ordered if s.scope)),
        )

    # -- messages

    def trace_messages(self, trace: list[SpanRecord]) -> list[_Entry]:
        ordered = sorted(trace, key=self.order)
        inference = [s for s in ordered if self.operation(s) in INFERENCE_OPERATIONS]
        coarser = [s for s in ordered if self.operation(s) not in INFERENCE_OPERATIONS]
        sequence: list[_Entry] = []
        for span in inference:
            content = self.content(span)
            inputs = self.entries(content.input)
            # Several output messages are several choices; the conversation went on with the first.
            outputs = self.entries(content.output[:1])
            if content.input_truncated:
                # The salvaged input stops early: its output follows an unknown gap, not the salvaged part.
                _extend(sequence, inputs)
                _extend(sequence, outputs)
            else:
                _extend(sequence, inputs + outputs)
        _fill_tool_results(sequence, [s for s in coarser if self.operation(s) == EXECUTE_TOOL])
        for span in coarser:
            _weave(sequence, self.entries(self.content(span).messages))
        return sequence

    def entries(self, messages: Iterable[TimedMessage]) -> list[_Entry]:
        result: list[_Entry] = []
        for timed in messages:
            if timed.message.role in SYSTEM_ROLES:
                self.add_system_text(timed.message.text)
            else:
                result.append(self.facts.entry(timed.message, timed.time))
        return result

    def add_system_text(self, text: str) -> None:
        if text and text not in self.system_texts:
            self.system_texts.append(text)

    def system_instructions(self) -> str | None:
        # Finest first: the inference spans, then the others, each group in span order.
        ordered = [s for s in self.ordered if self.operation(s) in INFERENCE_OPERATIONS]
        ordered += [s for s in self.ordered if self.operation(s) not in INFERENCE_OPERATIONS]
        texts = [text for span in ordered for text in self.content(span).system_instructions]
        for text in self.system_texts:
            texts.append(text)
        unique = list(dict.fromkeys(t for t in texts if t))
        return "\n\n".join(unique) if unique else None

    def tool_definitions(self) -> tuple[ToolDefinition, ...]:
        by_name: dict[str, ToolDefinition] = {}
        for span in self.ordered:
            for tool in self.content(span).tool_definitions:
                by_name.setdefault(tool.name, tool)
        return tuple(by_name.values())

    # -- agent and usage

    def agent_identity(self) -> tuple[str | None, str | None, str | None]:
        """Name, id and version from the agent span nearest the root; inference spans often carry a constant
        class name ("OpenAI Agent") instead, so they count only when no agent span names one."""
        ranked = [s for s in self.ordered if self.operation(s) in AGENT_OPERATIONS or s.kind == "server"]
        ranked += [s for s in self.ordered if self.operation(s) not in AGENT_OPERATIONS and s.kind != "server"]

        def first(*keys: str) -> str | None:
            for span in ranked:
                for key in keys:
                    value = span.attributes.get(key)
                    if value not in (None, ""):
                        return str(value)
            return None

        name = first("gen_ai.agent.name", "azure.ai.agentserver.agent_name", "agent.name")
        identifier = first("gen_ai.agent.id", "azure.ai.agentserver.agent_id")
        if name is None and identifier is None:
            name = self.service_name()
        return name, identifier, first("gen_ai.agent.version") or self.service_version()

    def service_name(self) -> str | None:
        """The resource's ``service.name``: producers that name no agent (openai-v2, OpenLLMetry) run in a
        service, and it is the agent's name as the team knows it. The SDK's default
        (``unknown_service[:executable]``) names nothing."""
        for span in self.ordered:
            value = span.resource.get("service.name")
            if value not in (None, "") and not str(value).startswith("unknown_service"):
                return str(value)
        return None

    def service_version(self) -> str | None:
        """The resource's ``service.version``: agents that do not set ``gen_ai.agent.version`` are versioned by
        their deployment (a release regression is found against the previous one)."""
        for span in self.ordered:
            value = span.resource.get("service.version")
            if value not in (None, ""):
                return str(value)
        return None

    def token_usage(self) -> tuple[int, int]:
        """Tokens of the model calls. Agent spans often repeat their children's total, so they count only when
        no model call reports usage, and then only the outermost ones."""
        usage = {(s.trace_id, s.span_id): found for s in self.spans if (found := _usage(s)) != (None, None)}
        counted = [(s.trace_id, s.span_id) for s in self.spans if self.operation(s) in TOKEN_OPERATIONS]
        counted = [key for key in counted if key in usage]
        if not counted:
            counted = [key for key in usage if not self.has_usage_above(key, usage)]
        return (sum(usage[k][0] or 0 for k in counted), sum(usage[k][1] or 0 for k in counted))

    def has_usage_above(self, key: SpanKey, usage: dict[SpanKey, tuple[int | None, int | None]]) -> bool:
        trace_id, parent = key[0], self.parents.get(key)
        for _ in range(len(self.parents)):
            if parent is None or (trace_id, parent) not in self.parents:
                return False
            if (trace_id, parent) in usage:
                return True
            parent = self.parents[(trace_id, parent)]
        return False


def _usage(span: SpanRecord) -> tuple[int | None, int | None]:
    attributes = span.attributes
    input_tokens = attributes.get("gen_ai.usage.input_tokens", attributes.get(
        "gen_ai.usage.prompt_tokens", attributes.get("llm.token_count.prompt")))
    output_tokens = attributes.get("gen_ai.usage.output_tokens", attributes.get(
        "gen_ai.usage.completion_tokens", attributes.get("llm.token_count.completion")))
    return _as_count(input_tokens), _as_count(output_tokens)


def _as_count(value: Any) -> int | None:
    """A token count as written: an int, or a string such as "450" (App Insights turns numbers into text)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        count = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return count if count >= 0 else None


# ---- merging sequences -----------------------------------------------------------------------------------


def message_key(message: Message) -> str:
    """What makes two sightings of a message the same message: role and parts, not the finish reason or name
    (the next input repeats an output without them), with JSON text decoded (one producer's string is
    another's object)."""
    parts = [
        [p.type, p.content, p.id, p.name, _normal(p.arguments), _normal(p.response), p.data]
        for p in message.parts
    ]
    return _KEY_ENCODER.encode([message.role, parts])


def _normal(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return load_json(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return maybe_json_object(value)


def _extend(sequence: list[_Entry], candidate: list[_Entry]) -> None:
    """Add what ``candidate`` (one span's view, in order) shows beyond ``sequence``.

    The usual case is a chat input that repeats the whole history: ``sequence`` is its prefix and the tail is
    new. A candidate that overlaps only the end of ``sequence`` (a sliding window, or a span that logs only
    new messages) adds what follows the overlap; one that diverges after a common prefix adds what follows it.
    """
    if not candidate:
        return
    common = _common_prefix(sequence, candidate)
    if common == len(candidate):
        return
    if common == len(sequence):
        sequence.extend(candidate[common:])
        return
    overlap = _suffix_overlap(sequence, candidate)
    sequence.extend(candidate[overlap or common:])


def _common_prefix(sequence: list[_Entry], candidate: list[_Entry]) -> int:
    limit = min(len(sequence), len(candidate))
    for index in range(limit):
        if sequence[index].key != candidate[index].key:
            return index
    return limit


def _suffix_overlap(sequence: list[_Entry], candidate: list[_Entry]) -> int:
    """The longest k with sequence[-k:] == candidate[:k]."""
    first = candidate[0].key
    for start in range(max(0, len(sequence) - len(candidate)), len(sequence)):
        if sequence[start].key != first:
            continue
        size = len(sequence) - start
        if all(sequence[start + i].key == candidate[i].key for i in range(size)):
            return size
    return 0


def _weave(sequence: list[_Entry], candidate: list[_Entry]) -> None:
    """Merge a coarse span's messages: those already present are kept where they are; each missing one goes
    after the last message it follows in ``candidate`` and after every message seen no later than it."""
    cursor = 0
    for entry in candidate:
        found = next((i for i in range(cursor, len(sequence)) if sequence[i].key == entry.key), None)
        if found is not None:
            cursor = found + 1
            continue
        position = cursor
        while position < len(sequence) and sequence[position].time <= entry.time:
            position += 1
        sequence.insert(position, entry)
        cursor = position + 1


def _fill_tool_results(sequence: list[_Entry], tool_spans: list[SpanRecord]) -> None:
    """Insert the results of ``execute_tool`` spans for tool calls that no later input answered.

    Spans are matched to calls in order, by call id (ids are not unique in every producer's data: a call id
    can recur later in the same conversation), or by tool name for calls without an id.
    """
    if not tool_spans:
        return
    by_id: dict[str, deque[SpanRecord]] = defaultdict(deque)
    by_name: dict[str, deque[SpanRecord]] = defaultdict(deque)
    for span in tool_spans:
        call_id = span.attributes.get("gen_ai.tool.call.id")
        if call_id:
            by_id[str(call_id)].append(span)
        else:
            by_name[str(span.attributes.get("gen_ai.tool.name", ""))].append(span)
    index = 0
    while index < len(sequence):
        calls = sequence[index].calls
        if not calls:
            index += 1
            continue
        answered = _answered_ids(sequence, index)
        insert_at = index + 1
        while insert_at < len(sequence) and _is_tool_result(sequence[insert_at].message):
            insert_at += 1
        added: list[_Entry] = []
        for call in calls:
            queue = by_id.get(call.id) if call.id else by_name.get(call.name or "")
            tool_span = queue.popleft() if queue else None
            if tool_span is None or (call.id in answered if call.id else bool(answered)):
                continue
            entry = _tool_result_entry(call, tool_span)
            if entry is not None:
                added.append(entry)
        sequence[insert_at:insert_at] = added
        index = insert_at + len(added)


def _answered_ids(sequence: list[_Entry], call_index: int) -> set[str | None]:
    answered: set[str | None] = set()
    for entry in sequence[call_index + 1:]:
        if entry.calls or entry.message.role == "assistant":
            break
        answered.update(p.id for p in entry.message.parts if p.type == "tool_call_response")
    return answered


def _is_tool_result(message: Message) -> bool:
    return message.role == "tool" or any(p.type == "tool_call_response" for p in message.parts)


def _tool_result_entry(call: Part, span: SpanRecord) -> _Entry | None:
    if TOOL_CALL_RESULT not in span.attributes:
        return None
    name = span.attributes.get("gen_ai.tool.name") or call.name
    message = Message(
        role="tool",
        parts=(Part(type="tool_call_response", id=call.id, response=span.attributes[TOOL_CALL_RESULT]),),
        name=str(name) if name else None,
    )
    return _Entry(message, message_key(message), span.end_time or span.start_time, message.tool_calls)

