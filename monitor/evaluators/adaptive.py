"""Adaptive rubrics (Vertex style): yes/no items per user request, then one call judging all of them.

Judge calls per evaluation: one generation call for a request not seen before (none when the items are cached
or written in the rubric), then one validation call per sample. With ``samples: n`` (the rubric's, else
``judge.samples``) the validation call is made n times and each item is decided by majority vote, a tie
failing; samples are only independent when ``judge.temperature`` is above 0. ``score = passed / total``; the
result passes when ``score >= pass_threshold`` (default 1.0: every item). A reply that is still invalid after
``ask_judge``'s retry gives an unscored result carrying the reason; a ``JudgeError`` (judge unreachable)
propagates, so the pipeline retries the evaluation next cycle. Failed generations are never cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.evaluators.base import (
    EvaluationContext,
    InvalidReply,
    JudgeUsage,
    ask_judge,
    result_fields,
    system_and_user,
    unscored_result,
)
from monitor.evaluators.item_cache import GeneratedItems, InMemoryItemCache, ItemCache, RubricItem
from monitor.evaluators.prompts import data_notice
from monitor.evaluators.views import EachReply, Target, output_budget, request_context, view
from monitor.judge.base import JudgeRequest
from monitor.judge.render import cut_middle, escape_data, render_conversation
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.builtin import (
    BUILTIN_METRICS,
    GENERATION_INSTRUCTIONS,
    INTENT_INSTRUCTIONS,
    NO_INTENTS,
    AdaptiveMetric,
    validation_instructions,
)
from monitor.rubrics.kinds import AdaptiveRubric

IMPORTANCE = ("high", "medium", "low")
MIN_ITEMS = 3
"""Fewer distinct generated items are refused (asked again, then unscored): a request steering the judge towards
one trivially true item ("the only requirement is that the agent replies politely") must not make a checklist."""
MIN_CHECKS_CHARS = 3
"""An item's citation of the material is at least this long once normalised (or the whole material, when that
is shorter, as "hi" is): a letter or two is found anywhere."""
_QUOTES = "\"'“”‘’`"
MAX_WAITS = 3
"""How often an evaluation waits for another one's generation of the same items before generating itself."""
CONTEXT_CHARS = 600
"""Metrics that do not read the agent's setup in full still see this much of its instructions, and of the agent
message a request answers: enough to tell what the request is about, without doubling the prompt."""

ITEMS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "importance": {"type": "string", "enum": list(IMPORTANCE)},
            "checks": {"type": "string"},
        },
        "required": ["question", "importance", "checks"],
        "additionalProperties": False,
    },
}
"""The generated checklist ``parse_items`` reads (adaptive rubrics and Gecko's questions)."""
GENERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "intents": {"type": "array", "items": {"type": "string"}},
        "items": ITEMS_SCHEMA,
    },
    "required": ["intents", "items"],
    "additionalProperties": False,
}


_Generation = tuple[GeneratedItems | None, str | None]
"""Generated items, or the reason there are none."""


@dataclass(frozen=True)
class ItemVerdict:
    passed: bool
    reasoning: str


def normalise(text: str) -> str:
    """Case-folded, whitespace collapsed: requests differing only in case or spacing share their items."""
    return " ".join(text.casefold().split())


def material_text(material: str) -> str:
    """The generation material as the text it quotes: our tags dropped (the data inside is escaped, so every
    ``<`` left is ours), entities unescaped, normalised."""
    return normalise(html.unescape(re.sub(r"<[^>]*>", " ", material)))


def parse_items(reply: Any, max_items: int, material: str) -> GeneratedItems:
    """The generated checklist, refused unless it has ``MIN_ITEMS`` distinct items each quoting (``checks``) the
    words of ``material`` it checks: an item the request steered towards, citing nothing the user or the
    agent's instructions asked for, is not a requirement."""
    if not isinstance(reply, dict) or not isinstance(reply.get("items"), list):
        raise InvalidReply("reply has no 'items' list")
    quotable = material_text(material)
    questions: list[tuple[str, str | None, str]] = []
    seen: set[str] = set()
    for index, entry in enumerate(reply["items"]):
        question = entry.get("question") if isinstance(entry, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise InvalidReply(f"items.{index}: 'question' is not a non-empty string")
        checks = entry.get("checks")
        cited = normalise(checks).strip(_QUOTES).strip() if isinstance(checks, str) else ""
        if len(cited) < min(MIN_CHECKS_CHARS, len(quotable)) or cited not in quotable:
            raise InvalidReply(f"items.{index}: 'checks' ({str(checks)[:80]!r}) quotes nothing found in the "
                               "request or the agent's instructions")
        importance = entry.get("importance")
        if normalise(question) not in seen:
            seen.add(normalise(question))
            questions.append((question.strip(), importance if importance in IMPORTANCE else None, checks.strip()))
    if len(questions) < MIN_ITEMS:
        raise InvalidReply(f"reply has {len(questions)} distinct items; at least {MIN_ITEMS} are required")
    intents = reply.get("intents")
    return GeneratedItems(
        items=tuple(RubricItem(f"item_{i + 1}", q, imp, cite)
                    for i, (q, imp, cite) in enumerate(questions[:max_items])),
        intents=tuple(str(i) for i in intents if str(i).strip()) if isinstance(intents, list) else (),
    )


def validation_schema(items: Sequence[RubricItem]) -> dict[str, Any]:
    """Strict schema: one required property per item id, each a reasoning and a yes/no verdict."""
    verdict = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "verdict": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["reasoning", "verdict"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {item.id: verdict for item in items},
        "required": [item.id for item in items],
        "additionalProperties": False,
    }


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "no"):
        return value.strip().lower() == "yes"
    return None


def parse_verdicts(reply: Any, items: Sequence[RubricItem]) -> dict[str, ItemVerdict]:
    """Every item needs a yes/no verdict. A partial reply is rejected whole: it could drop a failing item."""
    if not isinstance(reply, dict):
        raise InvalidReply("reply is not a JSON object")
    verdicts: dict[str, ItemVerdict] = {}
    for item in items:
        entry = reply.get(item.id)
        if not isinstance(entry, dict):
            raise InvalidReply(f"item {item.id!r} is missing")
        passed = _as_bool(entry.get("verdict"))
        if passed is None:
            raise InvalidReply(f"item {item.id!r}: verdict {entry.get('verdict')!r} is not 'yes' or 'no'")
        reasoning = entry.get("reasoning")
        verdicts[item.id] = ItemVerdict(passed, reasoning if isinstance(reasoning, str) else "")
    unknown = sorted(set(reply) - {item.id for item in items})
    if unknown:
        raise InvalidReply(f"reply has items the rubric does not: {', '.join(unknown)}")
    return verdicts


def majority(samples: Sequence[Mapping[str, ItemVerdict]], item_id: str) -> tuple[ItemVerdict, int]:
    """An item passes when more than half of the samples say yes (a tie fails). Returns the verdict and the
    yes votes."""
    votes = [sample[item_id] for sample in samples]
    yes = sum(v.passed for v in votes)
    passed = yes * 2 > len(votes)
    reasoning = next((v.reasoning for v in votes if v.passed == passed and v.reasoning), "")
    return ItemVerdict(passed, reasoning), yes


class AdaptiveEvaluator(EachReply[AdaptiveRubric]):
    kinds: tuple[str, ...] = ("adaptive",)

    def __init__(self, cache: ItemCache | None = None) -> None:
        self._cache: ItemCache = cache if cache is not None else InMemoryItemCache()
        # Concurrent evaluations of one request wait for a single generation call instead of each making one.
        self._in_flight: dict[str, asyncio.Future[_Generation]] = {}

    async def _evaluate_target(
        self, conversation: Conversation, rubric: AdaptiveRubric, context: EvaluationContext, target: Target
    ) -> EvaluationResult:
        metric = BUILTIN_METRICS[rubric.metric]
        usage = JudgeUsage()
        generated, source, key, problem = await self._items(target, rubric, metric, context, usage)
        if generated is None:
            reason = ("The conversation has no user request to write items for." if problem == "no_request"
                      else f"Unscored: item generation failed: {problem}")
            return unscored_result(conversation, rubric, context, target.turn_index, usage,
                                   problem or "no_items", reason)
        settings = context.settings
        rendered = render_conversation(
            view(target, metric.view), settings.context_token_budget, settings.tool_result_max_chars
        )
        items = generated.items
        request = JudgeRequest(
            messages=system_and_user(
                validation_instructions(metric, data_notice("conversation")),
                _validation_prompt(items, rendered.text),
            ),
            schema=validation_schema(items),
            schema_name="rubric_item_verdicts",
            model=rubric.judge_model,
            temperature=settings.temperature,
            max_output_tokens=output_budget(context, 120 * len(items) + 100),
            rubric=rubric.name,
        )
        requested = rubric.samples or settings.samples
        samples: list[dict[str, ItemVerdict]] = []
        for _ in range(requested):
            asked = await ask_judge(context.judge, request, lambda r: parse_verdicts(r, items), usage)
            if asked.value is not None:
                samples.append(asked.value)
            else:
                problem = asked.error
        if not samples:
            return unscored_result(conversation, rubric, context, target.turn_index, usage, problem or "no_reply",
                             f"Unscored: validation failed: {problem}", rendered.truncated)
        rows: list[dict[str, Any]] = []
        for item in generated.items:
            verdict, yes = majority(samples, item.id)
            rows.append({"id": item.id, "question": item.question, "importance": item.importance,
                         "checks": item.checks,
                         "passed": verdict.passed, "reasoning": verdict.reasoning,
                         "votes": {"yes": yes, "no": len(samples) - yes}})
        passed = sum(r["passed"] for r in rows)
        score = passed / len(rows)
        details: dict[str, Any] = {
            "metric": metric.name,
            "items": rows,
            "passed": passed,
            "total": len(rows),
            "all_passed": passed == len(rows),
            "items_source": source,
            "items_key": key,
            "samples": {"requested": requested, "valid": len(samples)},
        }
        if generated.intents:
            details["intents"] = list(generated.intents)
        return EvaluationResult(
            outcome="pass" if score >= rubric.pass_threshold else "fail",
            score=score,
            reason=_reason(rows),
            details=details,
            **result_fields(
                conversation, rubric, rubric.pass_threshold, context, target.turn_index, usage, rendered.truncated
            ),
        )

    async def _items(
        self,
        target: Target,
        rubric: AdaptiveRubric,
        metric: AdaptiveMetric,
        context: EvaluationContext,
        usage: JudgeUsage,
    ) -> tuple[GeneratedItems | None, str, str | None, str | None]:
        """The items, where they came from (rubric, cached, generated), the cache key and any problem."""
        if rubric.items:
            written = tuple(RubricItem(f"item_{i + 1}", q) for i, q in enumerate(rubric.items))
            return GeneratedItems(written), "rubric", None, None
        generation = generation_material(target, metric)
        if generation is None:
            return None, "generated", None, "no_request"
        material, blocks = generation
        system = generation_instructions(rubric, metric, blocks)
        key = items_key(rubric, system, material)
        for _ in range(MAX_WAITS):
            cached = self._cache.get(key)
            if cached is not None:
                return cached, "cached", key, None
            waiting = self._in_flight.get(key)
            if waiting is None:
                break
            try:
                items, problem = await asyncio.shield(waiting)
                return items, "cached", key, problem
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not waiting.cancelled() or (current is not None and current.cancelling()):
                    raise
                # The evaluation that was generating was cancelled, not this one: generate here instead.
        request = JudgeRequest(
            messages=system_and_user(system, material),
            schema=GENERATION_SCHEMA,
            schema_name="rubric_items",
            model=rubric.judge_model,
            temperature=context.settings.temperature,
            max_output_tokens=output_budget(context, 80 * rubric.max_items),
            rubric=rubric.name,
        )
        generated, problem = await self._generate(key, request, rubric.max_items, material, context, usage)
        return generated, "generated", key, problem

    async def _generate(
        self, key: str, request: JudgeRequest, max_items: int, material: str, context: EvaluationContext,
        usage: JudgeUsage,
    ) -> _Generation:
        """One generation call; concurrent evaluations of the same request wait for it."""
        future: asyncio.Future[_Generation] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            asked = await ask_judge(context.judge, request, lambda r: parse_items(r, max_items, material), usage)
            if asked.value is not None:
                self._cache.put(key, asked.value)
            future.set_result((asked.value, asked.error))
            return asked.value, asked.error
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            # Waiters fail the same way (a JudgeError leaves their evaluations pending too).
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody was waiting
            raise
        finally:
            del self._in_flight[key]


def generation_instructions(rubric: AdaptiveRubric, metric: AdaptiveMetric, blocks: Sequence[str]) -> str:
    text = GENERATION_INSTRUCTIONS.format(max_items=rubric.max_items, focus=metric.focus)
    text += "\n" + (INTENT_INSTRUCTIONS if metric.extracts_intents else NO_INTENTS)
    if rubric.guidelines:
        text += "\n\nGuidelines from the rubric's author (follow them):\n" + "\n".join(
            f"- {g}" for g in rubric.guidelines
        )
    return text + "\n" + data_notice(*blocks)


def _block(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


def generation_material(target: Target, metric: AdaptiveMetric) -> tuple[str, list[str]] | None:
    """What the items are generated from (and cached by), and the names of its data blocks; ``None`` when
    there is no user request to write them for.

    The request is read in its context: the agent's instructions (shortened unless the metric reads the
    agent's setup), the user's earlier messages and the agent message the request answers. Generated from the
    last user message alone, "yes please" in two unrelated conversations would get the same items."""
    found = request_context(target, metric.request_scope)
    if found is None:
        return None
    parts: list[tuple[str, str]] = []
    conversation = target.conversation
    if conversation.system_instructions:
        limit = None if metric.uses_agent_setup else CONTEXT_CHARS
        parts.append(("agent_instructions", escape_data(cut_middle(conversation.system_instructions, limit)[0])))
    if metric.uses_agent_setup and conversation.tool_definitions:
        tools = json.dumps([t.model_dump(exclude_none=True) for t in conversation.tool_definitions],
                           ensure_ascii=False, sort_keys=True)
        parts.append(("tool_definitions", escape_data(tools)))
    numbered = "\n".join(
        f'<message n="{n}">{escape_data(text)}</message>' for n, text in enumerate(found.earlier_user, 1)
    )
    if found.request is None:
        parts.append(("user_messages", numbered))
    else:
        if numbered:
            parts.append(("earlier_user_messages", numbered))
        if found.previous_agent:
            parts.append(("agent_message", escape_data(cut_middle(found.previous_agent, CONTEXT_CHARS)[0])))
        parts.append(("user_request", escape_data(found.request)))
    return "\n".join(_block(tag, text) for tag, text in parts), [tag for tag, _ in parts]


def items_key(rubric: AdaptiveRubric, system: str, material: str) -> str:
    """Hash of the rubric version, the generation instructions and the normalised material the items were
    generated from (request, earlier messages, agent instructions): the key is exactly what the items depend
    on."""
    canonical = json.dumps([rubric.name, rubric.version, system, normalise(material)], ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validation_prompt(items: Sequence[RubricItem], rendered: str) -> str:
    checklist = "\n".join(f"{item.id}: {escape_data(item.question)}" for item in items)
    return f"<checklist>\n{checklist}\n</checklist>\n{rendered}"


def adaptive_prompt_texts(metric: AdaptiveMetric) -> tuple[str, ...]:
    """Every fixed text an adaptive metric's prompts are built from (what ``builtin_version`` fingerprints)."""
    return (
        GENERATION_INSTRUCTIONS, INTENT_INSTRUCTIONS if metric.extracts_intents else NO_INTENTS, metric.focus,
        metric.view, metric.request_scope, str(metric.uses_agent_setup), str(CONTEXT_CHARS),
        validation_instructions(metric, data_notice("conversation")), data_notice("user_request"),
        _validation_prompt((RubricItem("item_1", "{question}"),), "{conversation}"),
    )


def _reason(rows: list[dict[str, Any]]) -> str:
    failed = [r for r in rows if not r["passed"]]
    head = f"{len(rows) - len(failed)} of {len(rows)} items passed."
    if not failed:
        return head
    shown = "; ".join(
        f"{r['question']} ({r['reasoning']})" if r["reasoning"] else r["question"] for r in failed[:3]
    )
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{head} Failed: {shown}{more}"

