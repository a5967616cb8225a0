"""Judge throughput at a quota: how close to the quota the judge runs, and whether any evaluation is lost.

A simulated judge (the scripted OpenAI-compatible server on 127.0.0.1) answers after a fixed latency plus
jitter and enforces a request quota like a provider does (a token bucket holding one second of requests,
429 with ``Retry-After`` above it). Evaluations are real: tau-bench airline conversations, assembled from
OTel spans, rendered within the context budget and scored by the weighted evaluator through ``OpenAIJudge``
with the real openai client.

Scenarios:

- ``configured``: ``judge.requests_per_minute`` is set to the quota;
- ``learned``: no limit is configured; the judge adopts the quota the endpoint announces in
  ``x-ratelimit-limit-requests`` (as OpenAI does);
- ``429-only``: no limit configured and the endpoint announces none (a bare gateway): only ``Retry-After``
  and backoff keep the judge in line.

    /opt/rmvenv/bin/python benchmarks/bench_judge.py              # configured + learned, 600 RPM, 60 s each
    /opt/rmvenv/bin/python benchmarks/bench_judge.py --scenario 429-only --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.assemble import assemble
from monitor.errors import JudgeError
from monitor.evaluators.base import EvaluationContext
from monitor.evaluators.versions import builtin_version
from monitor.evaluators.weighted import WeightedEvaluator
from monitor.judge.openai_judge import OpenAIJudge
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.loader import parse_rubric
from monitor.settings import JudgeSettings
from tests.conftest import TAU_BENCH
from tests.fakes.openai_server import QuotaHandler, Recorded, ScriptedOpenAIServer, max_in_window
from tools.tau_to_otlp import derive_tool_definitions, tau_record_to_spans

SCENARIOS = ("configured", "learned", "429-only")
RUBRIC = {
    "name": "airline-service",
    "description": "Quality of the airline customer-service agent.",
    "dimensions": [
        {"id": "policy_adherence", "description": "Follows the airline policy in the system instructions.",
         "weight": 9},
        {"id": "tool_usage", "description": "Calls the right tools with the right arguments, and only then.",
         "weight": 6},
        {"id": "confirmation", "description": "Lists action details and obtains explicit confirmation before "
                                            "changing a booking.", "weight": 5},
        {"id": "communication", "description": "Clear, concise and courteous.", "weight": 2},
    ],
}


def verdict_for(request: Recorded) -> str:
    """A valid verdict for whatever dimensions the request's schema (or prompt) asks for."""
    schema = request.body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    dimension_ids = schema.get("properties", {}).get("dimensions", {}).get("required") or [
        d["id"] for d in RUBRIC["dimensions"]]
    return json.dumps({"dimensions": {
        d: {"reason": "Consistent with the policy shown.", "applicable": True, "score": 4}
        for d in dimension_ids
    }})


def tau_conversations() -> list[Conversation]:
    records = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    tools = derive_tool_definitions(records)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spans = [span for i, record in enumerate(records)
             for span in tau_record_to_spans(record, base_time=start + timedelta(hours=i),
                                             tool_definitions=tools)]
    return list(assemble(spans).conversations)


@dataclass
class Outcome:
    scenario: str
    evaluations: int
    scored: int
    lost: int
    elapsed: float
    http_requests: int
    rate_limited: int
    judge_calls: int
    prompt_tokens: int
    truncated: int
    peak_per_second: int
    accepted_span: float
    """Seconds from the first to the last request the server accepted."""
    accepted: int

    def report(self, quota: float) -> dict[str, Any]:
        # Steady state at the server: accepted requests over the time they span (no start-up, no last reply).
        achieved_rpm = (self.accepted - 1) / self.accepted_span * 60.0 if self.accepted > 1 else 0.0
        wall_rpm = self.scored / self.elapsed * 60.0
        return {
            "scenario": self.scenario,
            "quota_rpm": quota,
            "evaluations": self.evaluations,
            "lost_evaluations": self.lost,
            "elapsed_s": round(self.elapsed, 1),
            "achieved_rpm": round(achieved_rpm, 1),
            "fraction_of_quota": round(achieved_rpm / quota, 3),
            "wall_clock_rpm": round(wall_rpm, 1),
            "wall_clock_fraction": round(wall_rpm / quota, 3),
            "http_requests_429": self.rate_limited,
            "judge_calls_per_evaluation": round(self.judge_calls / self.evaluations, 3),
            "http_requests_per_evaluation": round(self.http_requests / self.evaluations, 3),
            "prompt_tokens_per_evaluation": round(self.prompt_tokens / self.evaluations),
            "truncated_renders": self.truncated,
            "peak_requests_in_any_1s_at_server": self.peak_per_second,
        }


async def evaluate_all(judge: OpenAIJudge, settings: JudgeSettings,
                       conversations: list[Conversation]) -> list[list[EvaluationResult] | JudgeError]:
    rubric = parse_rubric(RUBRIC, "benchmarks/airline-service.yaml", builtin_version)
    evaluator = WeightedEvaluator()
    context = EvaluationContext(judge=judge, settings=settings, store_content=False)

    async def one(conversation: Conversation) -> list[EvaluationResult] | JudgeError:
        try:
            return await evaluator.evaluate(conversation, rubric, context)
        except JudgeError as exc:
            return exc

    return list(await asyncio.gather(*(one(c) for c in conversations)))


def run_scenario(scenario: str, args: argparse.Namespace, pool: list[Conversation]) -> Outcome:
    evaluations = int(args.quota * args.duration / 60.0)
    # Each evaluation is its own conversation: distinct ids, so no verdict cache could shortcut the work.
    conversations = [pool[i % len(pool)].model_copy(update={"id": f"bench-{i}"}) for i in range(evaluations)]
    quota = QuotaHandler(args.quota, content=verdict_for, latency=args.latency, jitter=args.jitter,
                         announce_limits=scenario != "429-only")
    with ScriptedOpenAIServer(quota) as server:
        settings = JudgeSettings(
            kind="openai", model="bench-judge", base_url=server.base_url, api_key=SecretStr("bench"),
            concurrency=args.concurrency, max_retries=args.max_retries, timeout_seconds=10.0,
            requests_per_minute=args.quota if scenario == "configured" else None, cache_size=0,
        )

        async def run() -> tuple[list[list[EvaluationResult] | JudgeError], float]:
            judge = OpenAIJudge(settings, MonitorMetrics(CollectorRegistry()))
            started = time.monotonic()
            try:
                # A bound on the whole run, so a regression shows as a failure rather than a hung benchmark.
                results = await asyncio.wait_for(evaluate_all(judge, settings, conversations),
                                                 timeout=args.duration * 3 + 60)
                return results, time.monotonic() - started
            finally:
                await judge.aclose()

        results, elapsed = asyncio.run(run())
        accepted = list(quota.accepted_at)
        requests = server.count
    flat = [r for batch in results if not isinstance(batch, JudgeError) for r in batch]
    scored = [r for r in flat if r.outcome != "unscored"]
    return Outcome(
        scenario=scenario,
        evaluations=evaluations,
        scored=len(scored),
        lost=evaluations - len(scored),
        elapsed=elapsed,
        http_requests=requests,
        rate_limited=quota.limited,
        judge_calls=sum(r.judge_calls for r in flat),
        prompt_tokens=sum(r.input_tokens for r in flat),
        truncated=sum(r.context_truncated for r in flat),
        peak_per_second=max_in_window(accepted, 1.0) if accepted else 0,
        accepted_span=(max(accepted) - min(accepted)) if accepted else 0.0,
        accepted=len(accepted),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "default"], default="default",
                        help="default: configured, then learned")
    parser.add_argument("--quota", type=float, default=600.0, help="server quota, requests per minute")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of work at the quota")
    parser.add_argument("--latency", type=float, default=0.4, help="server latency, seconds")
    parser.add_argument("--jitter", type=float, default=0.2, help="extra latency, uniform 0..jitter seconds")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-retries", type=int, default=4)
    args = parser.parse_args(argv)
    pool = tau_conversations()
    scenarios = ["configured", "learned"] if args.scenario == "default" else [args.scenario]
    reports = [run_scenario(s, args, pool).report(args.quota) for s in scenarios]
    for report in reports:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
