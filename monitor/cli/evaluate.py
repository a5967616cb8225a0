"""``rubric-monitor evaluate``: score the conversations of a file against one rubric, without the daemon: one
Foundry-shaped JSON verdict per line, in input order."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from monitor.app import build_judging
from monitor.cli.common import config_arg, configure_logging
from monitor.cli.progress import ProgressBar
from monitor.evaluators.versions import builtin_version
from monitor.formats.input_files import read_conversations
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.loader import load_rubric_file
from monitor.settings import load_settings


def register(sub: Any) -> None:
    evaluate = sub.add_parser("evaluate", help="score the conversations of a file against one rubric")
    config_arg(evaluate)
    evaluate.add_argument("--rubric", type=Path, required=True, help="rubric file (YAML or JSON)")
    evaluate.add_argument("--input", type=Path, required=True, help="OTLP JSON lines or OpenAI-chat JSONL")
    evaluate.set_defaults(handler=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    rubric = load_rubric_file(args.rubric, builtin_version)
    conversations = read_conversations(args.input)
    evaluator, judge, context = build_judging(settings, rubric, str(args.rubric)).parts()
    judge_settings = context.settings
    skipped: list[str] = []
    judged: list[Conversation] = []
    for conversation in conversations:
        if not conversation.has_content:
            # Nothing to judge: a verdict on an empty transcript would be made up.
            skipped.append(conversation.id)
            print(f"rubric-monitor: conversation {conversation.id!r} of {args.input} skipped: no_content "
                  "(no message carries text)", file=sys.stderr)
            continue
        judged.append(conversation)
    progress = ProgressBar(len(judged), "conversations")

    async def evaluate_all() -> None:
        # judge.concurrency conversations in flight; results are printed in input order as soon as they are ready.
        gate = asyncio.Semaphore(judge_settings.concurrency)

        async def one(conversation: Conversation) -> list[EvaluationResult]:
            async with gate:
                results = await evaluator.evaluate(conversation, rubric, context)
            progress.advance()
            return results

        tasks = [asyncio.create_task(one(c)) for c in judged]
        try:
            for task in tasks:
                for result in await task:
                    output = result.foundry_output()
                    if result.turn_index is not None:
                        output["turn_index"] = result.turn_index
                    progress.clear()
                    print(json.dumps(output, ensure_ascii=False), flush=True)
                    progress.redraw()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            progress.close()
            await judge.aclose()

    asyncio.run(evaluate_all())
    if skipped:
        print(f"rubric-monitor: {len(skipped)} conversation(s) skipped: no_content", file=sys.stderr)
    return 0
