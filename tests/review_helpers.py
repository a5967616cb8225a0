"""What the review tests share: a store with conversations (real spans, assembled again by the page) and verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.models import DimensionScore, EvaluationResult
from monitor.store.sql import SqlStore
from tools.chat_to_otlp import chat_record_to_spans

DAY = datetime(2026, 11, 30, tzinfo=UTC)
DIMENSIONS = ("helpfulness", "accuracy")


def chat(turns: int, text: str = "hello") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"{text} {n}"})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    return messages


def add_conversation(store: SqlStore, conversation_id: str, messages: Sequence[dict[str, Any]], number: int = 0,
                     tools: Sequence[dict[str, Any]] = ()) -> None:
    spans = chat_record_to_spans({"id": conversation_id, "agent": "support", "messages": list(messages),
                                  "tools": list(tools)}, number)
    store.add_spans("test", spans, f"cp-{conversation_id}", "ignore")


def verdict(conversation_id: str, rubric: str = "support", outcome: str = "pass", score: float | None = 0.8,
            dimensions: Sequence[int | None] = (4, 3), at: datetime = DAY, agent: str = "support",
            threshold: float = 0.6, reason: str = "the judge's reason", **extra: Any) -> EvaluationResult:
    return EvaluationResult(
        conversation_id=conversation_id, trace_ids=("t" * 32,), agent=agent, rubric=rubric, rubric_version="v1",
        rubric_kind="weighted", judge_model="judge-model", prompt_version="p1", outcome=outcome,  # type: ignore[arg-type]
        score=score, threshold=threshold, reason=reason,
        dimension_scores=tuple(
            DimensionScore(id=d, score=s, applicable=s is not None, weight=1, reason=f"{d} reason")
            for d, s in zip(DIMENSIONS, dimensions, strict=True)),
        prompt=[{"role": "system", "content": "judge instructions"}, {"role": "user", "content": "the transcript"}],
        raw_reply='{"dimensions": {}}', evaluated_at=at, **extra)


def record_many(store: SqlStore, count: int, rubric: str = "support", start: datetime = DAY) -> list[str]:
    ids = []
    for n in range(count):
        cid = f"{rubric}-{n:05d}"
        outcome = "fail" if n % 3 == 0 else "pass"
        store.record(verdict(cid, rubric, outcome, 0.3 if outcome == "fail" else 0.8, (1 + n % 5, 1 + (n * 7) % 5),
                             start + timedelta(seconds=n)))
        ids.append(cid)
    return ids
