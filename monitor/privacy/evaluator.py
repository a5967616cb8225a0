"""The one place conversations are redacted before judging: an ``Evaluator`` around each evaluator.

``PrivateEvaluator`` redacts the conversation once (the rubrics of one conversation share the redaction: the
pipeline hands each of them the same object), lets the evaluator it wraps judge the redacted conversation, then
passes the results through ``monitor.privacy.results``: the judge's words with the conversation's placeholders,
and with ``store.store_content: false`` no conversation text at all. The daemon's pipeline, ``evaluate``,
``calibrate``, ``backfill`` and the canaries all get their evaluators through ``monitor.app``, which wraps them
(``private_evaluators``), so the item cache keys, the judge request, the stored prompt and reply, the write-back
events and the alerts' examples all derive from redacted text.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.models import Conversation, EvaluationResult
from monitor.privacy.pseudonymize import Pseudonymizer
from monitor.privacy.redactor import Redacted, Redactor
from monitor.privacy.results import redact_result, strip_content

MEMO = 64
"""Conversations whose redaction is kept for the other rubrics judging them (about ``judge.concurrency``)."""


class RedactionMemo:
    """The redactions of the conversations being judged, shared by every evaluator's wrapper."""

    def __init__(self, redactor: Redactor, size: int = MEMO) -> None:
        self.redactor = redactor
        self.size = size
        self._held: OrderedDict[int, tuple[Conversation, asyncio.Future[Redacted]]] = OrderedDict()

    async def redacted(self, conversation: Conversation) -> Redacted:
        """The conversation redacted, once for all the rubrics judging it. A slow redactor (Presidio: a few
        hundred milliseconds) runs in a worker thread, so the judge calls in flight on the loop go on meanwhile."""
        key = id(conversation)
        held = self._held.get(key)
        if held is not None and held[0] is conversation:
            self._held.move_to_end(key)
            return await held[1]
        future: asyncio.Future[Redacted]
        if self.redactor.slow:
            future = asyncio.ensure_future(asyncio.to_thread(self.redactor.redact, conversation))
        else:
            future = asyncio.get_running_loop().create_future()
            future.set_result(self.redactor.redact(conversation))
        self._held[key] = (conversation, future)  # the object is held: its id cannot be reused meanwhile
        while len(self._held) > self.size:
            self._held.popitem(last=False)
        return await future


class PrivateEvaluator:
    def __init__(self, inner: Evaluator, redactor: Redactor, store_content: bool = True,
                 memo: RedactionMemo | None = None) -> None:
        self.inner = inner
        self.kinds = inner.kinds
        self.redactor = redactor
        self.store_content = store_content
        self.memo = memo or RedactionMemo(redactor)

    async def evaluate(self, conversation: Conversation, rubric: Any, context: EvaluationContext
                       ) -> list[EvaluationResult]:
        surfaces = self.redactor.surfaces
        redacted = await self.memo.redacted(conversation) if self.redactor.enabled else None
        shown = conversation
        if redacted is not None and "judge_prompt" in surfaces:
            shown = redacted.conversation
            if not self.redactor.exempt_rubric_text:
                rubric = redact_rubric(rubric, redacted.pseudonymizer)
        results = await self.inner.evaluate(shown, rubric, context)
        if redacted is not None and "stored_content" in surfaces:
            results = [redact_result(r, redacted.pseudonymizer, shown is not conversation) for r in results]
        if not self.store_content:
            seen = (conversation,) if shown is conversation else (conversation, shown)
            results = [strip_content(r, *seen) for r in results]
        if redacted is not None and redacted.counts:
            # What was replaced (counts by recognizer, never the values): `results show` says so.
            counts = dict(sorted(redacted.counts.items()))
            results = [r.model_copy(update={"details": {**r.details, "redacted": counts}}) for r in results]
        return results


def redact_rubric(rubric: Any, names: Pseudonymizer) -> Any:
    """The rubric's own text redacted too (``redaction.exempt_rubric_text: false``): its description, its
    dimensions' descriptions, its written items and guidelines."""
    update: dict[str, Any] = {}
    if getattr(rubric, "description", None):
        update["description"] = names.redact(rubric.description)
    for listed in ("items", "guidelines"):
        texts = getattr(rubric, listed, None)
        if texts:
            update[listed] = tuple(names.redact(text) for text in texts)
    dimensions = getattr(rubric, "dimensions", None)
    if dimensions:
        update["dimensions"] = tuple(d.model_copy(update={"description": names.redact(d.description)})
                                     for d in dimensions)
    return rubric.model_copy(update=update) if update else rubric


def private_evaluators(evaluators: dict[str, Evaluator], redactor: Redactor, store_content: bool
                       ) -> dict[str, Evaluator]:
    """Each evaluator wrapped (one wrapper per evaluator object, shared by the kinds it serves)."""
    memo = RedactionMemo(redactor)
    wrapped: dict[int, PrivateEvaluator] = {}
    out: dict[str, Evaluator] = {}
    for kind, evaluator in evaluators.items():
        if id(evaluator) not in wrapped:
            wrapped[id(evaluator)] = PrivateEvaluator(evaluator, redactor, store_content, memo)
        out[kind] = wrapped[id(evaluator)]
    return out
