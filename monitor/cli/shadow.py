"""``rubric-monitor shadow run|status|promote``: try a new rubric version, judge model or prompt version on the
labelled set and a live sample before it counts (``monitor.review.shadow``); only ``promote`` makes it active."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from monitor.app import build_judging
from monitor.cli.common import config_arg, configure_logging
from monitor.cli.results import open_store
from monitor.errors import ConfigError
from monitor.evaluators.versions import builtin_version
from monitor.review.shadow import ShadowRun, ShadowStatus, pass_fail, run_shadow, shadow_status
from monitor.review.store import ReviewStore
from monitor.rubrics.loader import load_rubric_file
from monitor.rubrics.registry import RubricRegistry
from monitor.settings import load_settings


def cmd_run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    if args.judge_model:
        settings = settings.model_copy(update={"judge": settings.judge.model_copy(update={"model": args.judge_model})})
    rubric = load_rubric_file(args.rubric_file, builtin_version)
    if rubric.evaluation_level != "conversation":
        raise ConfigError(str(args.rubric_file), "evaluation_level", "shadow compares whole-conversation verdicts")
    store = open_store(settings)
    try:
        review = ReviewStore(store)
        evaluator, judge, context = build_judging(settings, rubric, str(args.rubric_file), store_content=True).parts()

        async def run() -> ShadowRun:
            try:
                return await run_shadow(args.candidate, rubric, evaluator, context, review, args.live,
                                        settings.judge.concurrency)
            finally:
                await judge.aclose()

        report = asyncio.run(run())
    finally:
        store.close()
    print(f"shadow {args.candidate}: judged {report.labelled} labelled and {report.live} live conversations "
          f"({report.already} judged before, {len(report.missing)} no longer stored)", file=sys.stderr)
    return 0


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def format_status(found: ShadowStatus) -> str:
    lines = [f"{found.candidate} (rubric {found.rubric}): "
             + ", ".join(f"{k} {v}" for k, v in found.configuration.items())
             + "; active: " + (", ".join(f"{k} {v}" for k, v in found.active_configuration.items()) or "none"),
             f"  judged {found.judged} conversations, {found.labelled} of them labelled; score shift "
             f"{_fmt(found.score_shift)} (candidate - active), pass/fail flips {_fmt(found.flips)}"]
    for name, measured in (("candidate", found.candidate_agreement), ("active", found.active_agreement)):
        verdict = pass_fail(measured)
        if measured is None or verdict is None:
            lines.append(f"  {name}: no labelled conversation")
            continue
        dims = ", ".join(
            f"{d} weighted kappa {_fmt(m.value)}" for (d, measure), m in measured.measures.items()
            if measure == "weighted_kappa")
        lines.append(f"  {name}: pass/fail agreement {_fmt(verdict.value)} [{_fmt(verdict.lower)}, "
                     f"{_fmt(verdict.upper)}] n={verdict.n}" + (f"; {dims}" if dims else ""))
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    store = open_store(settings)
    try:
        found = shadow_status(ReviewStore(store), args.candidate)
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps([s.as_dict() for s in found], indent=2) + "\n")
    elif not found:
        print("no shadow candidates (start one with `rubric-monitor shadow run`)")
    else:
        print("\n".join(format_status(s) for s in found))
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    rubric = load_rubric_file(args.rubric_file, builtin_version)
    store = open_store(settings)
    try:
        found = shadow_status(ReviewStore(store), args.candidate)
    finally:
        store.close()
    if not found:
        raise ConfigError("store", "candidate", f"no shadow verdicts of candidate {args.candidate!r}: run "
                                                "`rubric-monitor shadow run` first")
    status = found[0]
    if (status.rubric, status.configuration["rubric_version"]) != (rubric.name, rubric.version):
        raise ConfigError(str(args.rubric_file), "version", f"this file is rubric {rubric.name!r} version "
                          f"{rubric.version}; candidate {args.candidate!r} ran {status.rubric!r} version "
                          f"{status.configuration['rubric_version']}")
    directory = settings.rubrics.directory
    registry = RubricRegistry(directory, builtin_version)
    registry.load()
    target = registry.sources().get(rubric.name) or directory / args.rubric_file.name
    # Written whole or not at all: the daemon's registry re-reads the directory while we write.
    text = args.rubric_file.read_bytes()
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".promote-")
    with os.fdopen(handle, "wb") as out:
        out.write(text)
    os.replace(temporary, target)
    print(f"promoted {args.candidate}: {target} is now rubric {rubric.name} version {rubric.version} (the daemon "
          "picks it up on its next cycle)", file=sys.stderr)
    model = status.configuration["judge_model"]
    if model and model != settings.judge.model:
        print(f"the candidate ran judge model {model}; set judge.model: {model} in the settings to make it "
              "active too", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    shadow = sub.add_parser("shadow", help="a candidate rubric version, judge model or prompt in shadow")
    verbs = shadow.add_subparsers(dest="shadow_command", required=True)
    run = verbs.add_parser("run", help="judge the labelled set and a live sample with the candidate (stored "
                                       "apart: no metric or alert sees it)")
    config_arg(run)
    run.add_argument("--candidate", required=True, help="the candidate's name")
    run.add_argument("--rubric-file", type=Path, required=True, help="the candidate rubric (YAML or JSON)")
    run.add_argument("--judge-model", help="judge with this model instead of judge.model")
    run.add_argument("--live", type=int, default=50, help="newest live verdicts to judge again (default 50)")
    run.set_defaults(handler=cmd_run)
    status = verbs.add_parser("status", help="the candidates' agreement and score shift beside the active one")
    config_arg(status)
    status.add_argument("--candidate", help="only this candidate")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)
    promote = verbs.add_parser("promote", help="make a candidate's rubric file the active one")
    config_arg(promote)
    promote.add_argument("--candidate", required=True)
    promote.add_argument("--rubric-file", type=Path, required=True, help="the file the candidate ran")
    promote.set_defaults(handler=cmd_promote)
