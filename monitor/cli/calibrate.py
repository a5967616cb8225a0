"""``rubric-monitor calibrate --rubric R --input CONVERSATIONS --labels LABELS [--json]``: score every labelled
conversation with the rubric and the configured judge, then report agreement (``monitor.trust.agreement``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from monitor.app import build_judging
from monitor.cli.common import config_arg, configure_logging
from monitor.errors import ConfigError
from monitor.evaluators.versions import builtin_version
from monitor.formats.input_files import read_conversations
from monitor.models import EvaluationResult
from monitor.rubrics.loader import load_rubric_file
from monitor.settings import Settings, load_settings
from monitor.trust.agreement import Label, agreement, judge_conversations, read_labels


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def format_report(report: dict[str, Any]) -> str:
    overall = report["overall"]
    lines = [
        f"conversations: {report['labelled']} labelled, {report['judged']} judged, "
        f"{len(report['unscored'])} unscored, {len(report['not_found'])} labelled but not in the input",
        f"pass/fail: accuracy {_fmt(overall['accuracy'])}, Cohen's kappa {_fmt(overall['kappa'])}, "
        f"Spearman (score) {_fmt(overall['spearman'])}, mean score shift {_fmt(overall['mean_score_shift'])}",
        "confusion (rows labelled, columns judge):",
        "            judge pass  judge fail",
    ]
    for name, row in zip(("labelled pass", "labelled fail"), overall["confusion"]["matrix"], strict=True):
        lines.append(f"  {name:<14}{row[0]:>8}{row[1]:>12}")
    best = report["best_threshold"]
    lines.append("best pass threshold: n/a (the labels need both passes and fails)" if best is None else
                 f"best pass threshold: {_fmt(best['threshold'])} (balanced accuracy "
                 f"{_fmt(best['balanced_accuracy'])}, precision {_fmt(best['precision'])}, "
                 f"recall {_fmt(best['recall'])})")
    for dimension, stats in report["dimensions"].items():
        lines.append(f"dimension {dimension} (n={stats['n']}): accuracy {_fmt(stats['accuracy'])}, "
                     f"within ±1 {_fmt(stats['within_one'])}, kappa {_fmt(stats['kappa'])}, weighted kappa "
                     f"{_fmt(stats['weighted_kappa'])}, Spearman {_fmt(stats['spearman'])}")
        lines.append("  rows labelled 1-5, columns judge 1-5:")
        lines.extend("  " + " ".join(f"{c:>4}" for c in row) for row in stats["confusion"]["matrix"])
    return "\n".join(lines)


def stored_labels(settings: Settings, rubric: str) -> dict[str, Label]:
    """The rubric's labels in the store (``rubric-monitor labels``, the review page), one per conversation: the
    latest when several reviewers labelled it. n/a dimensions are left out, as a file leaves them out."""
    from monitor.cli.results import open_store
    from monitor.review.store import ReviewStore

    store = open_store(settings)
    try:
        found = ReviewStore(store).labels(rubric=rubric)
    finally:
        store.close()
    if not found:
        raise ConfigError("store", "labels", f"no stored labels for rubric {rubric!r} (label on the review page or "
                                             "`rubric-monitor labels import`)")
    return {label.conversation_id: Label(label.conversation_id, label.passed, label.score,
                                         {d: v for d, v in label.dimensions.items() if v is not None})
            for label in found}


def cmd_calibrate(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    rubric = load_rubric_file(args.rubric, builtin_version)
    if rubric.evaluation_level != "conversation":
        raise ConfigError(str(args.rubric), "evaluation_level", "calibrate compares whole-conversation verdicts; "
                          "use evaluation_level: conversation")
    labels = read_labels(args.labels) if args.labels is not None else stored_labels(settings, rubric.name)
    conversations = [c for c in read_conversations(args.input) if c.id in labels]
    evaluator, judge, context = build_judging(settings, rubric, str(args.rubric), store_content=False).parts()

    async def run() -> dict[str, EvaluationResult]:
        try:
            return await judge_conversations(conversations, rubric, evaluator, context, settings.judge.concurrency)
        finally:
            await judge.aclose()

    results = asyncio.run(run())
    report = agreement(labels, results)
    report = {"rubric": rubric.name, "rubric_version": rubric.version, "judge_model": rubric.judge_model
              or judge.model, **report}
    sys.stdout.write((json.dumps(report, indent=2) if args.json else format_report(report)) + "\n")
    return 0


def register(sub: Any) -> None:
    calibrate = sub.add_parser("calibrate", help="agreement of the judge with labelled conversations")
    config_arg(calibrate, "YAML settings file (for the judge)")
    calibrate.add_argument("--rubric", type=Path, required=True, help="rubric file (YAML or JSON)")
    calibrate.add_argument("--input", type=Path, required=True, help="OTLP JSON lines or OpenAI-chat JSONL")
    source = calibrate.add_mutually_exclusive_group(required=True)
    source.add_argument("--labels", type=Path,
                        help='JSON lines of {"id", "passed", "score"?, "dimensions"?}, or CSV')
    source.add_argument("--stored-labels", action="store_true",
                        help="the rubric's labels in the store (review page, `labels import`)")
    calibrate.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    calibrate.set_defaults(handler=cmd_calibrate)
