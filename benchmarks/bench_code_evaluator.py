"""What a Foundry code evaluator costs per evaluation: one isolated grader process (start, limits, network
namespace, run, reply), sequentially and with the evaluator's default concurrency (one per CPU).

    python benchmarks/bench_code_evaluator.py            # 40 evaluations each way
    python benchmarks/bench_code_evaluator.py --runs 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.evaluators.base import EvaluationContext
from monitor.evaluators.code import CodeEvaluator
from monitor.evaluators.versions import builtin_version
from monitor.judge.scripted import ScriptedJudge
from monitor.models import Conversation, Message, Part
from monitor.rubrics.evaluator_kinds import CodeEvaluatorRubric
from monitor.rubrics.loader import parse_rubric
from monitor.settings import JudgeSettings

CODE = "def grade(sample, item):\n    return min(1.0, len(item['response']) / 100)\n"


def conversation(index: int) -> Conversation:
    return Conversation(id=f"c{index}", agent_name="bench", messages=(
        Message(role="user", parts=(Part(type="text", content=f"question {index}"),)),
        Message(role="assistant", parts=(Part(type="text", content="an answer " * 5),)),
    ))


async def timed(evaluator: CodeEvaluator, rubric: CodeEvaluatorRubric, index: int,
                context: EvaluationContext) -> float:
    started = time.perf_counter()
    [result] = await evaluator.evaluate(conversation(index), rubric, context)
    assert result.outcome != "unscored", result.unscored_reason
    return time.perf_counter() - started


async def main(runs: int) -> None:
    rubric = parse_rubric({"name": "bench", "kind": "code", "code_text": CODE,
                           "metrics": {"score": {"type": "continuous"}}}, "bench.yaml", builtin_version)
    assert isinstance(rubric, CodeEvaluatorRubric)
    context = EvaluationContext(ScriptedJudge(lambda _: "{}"), JudgeSettings())
    evaluator = CodeEvaluator()
    sequential = [await timed(evaluator, rubric, i, context) for i in range(runs)]
    started = time.perf_counter()
    await asyncio.gather(*(timed(evaluator, rubric, i, context) for i in range(runs)))
    parallel = time.perf_counter() - started
    print(f"CPUs {os.cpu_count()}, {runs} evaluations")
    print(f"sequential: median {statistics.median(sequential) * 1000:.0f} ms, "
          f"p95 {sorted(sequential)[int(0.95 * (runs - 1))] * 1000:.0f} ms per evaluation")
    print(f"concurrent ({evaluator.max_processes} at once): {runs / parallel:.1f} evaluations/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    asyncio.run(main(parser.parse_args().runs))
