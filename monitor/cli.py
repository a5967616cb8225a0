"""``rubric-monitor`` command line: run, evaluate, check, rubrics, calibrate, config-doc.

Exit codes: 0 success; 1 a cycle failed (``run --once``); 2 invalid settings, rubric or input (the message names
the file and the field).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from monitor.errors import ConfigError, JudgeError
from monitor.models import Conversation, utc_now
from monitor.settings import ENV_PREFIX, Settings, load_settings

log = logging.getLogger("monitor")

EXIT_CODES = ("exit codes: 0 success; 1 a cycle failed (run --once), the judge failed (evaluate) or nothing was "
              "found (results show); 2 invalid settings, rubric or input")


def _configure_logging(level: str) -> None:
    from monitor.redaction import install_log_redaction

    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # A line per HTTP request and per scheduler tick would bury the daemon's own progress lines.
        for chatty in ("httpx", "httpx2"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        # Its warning that a run was skipped while a long first cycle runs is expected (runs are coalesced).
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        # azure-identity logs every credential it tried; our error says it in one line.
        logging.getLogger("azure.identity").setLevel(logging.ERROR)

    install_log_redaction()  # no configured secret reaches the logs, whichever module logs it


def self_command(subcommand: str, config: Path | None) -> str:
    """``subcommand`` as the user would type it, invoked as we were (``.venv/bin/rubric-monitor results --config
    examples/rubric-monitor.yaml``), so that follow-up commands we print can be pasted as they are."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "rubric-monitor"
    if Path(argv0).name == "rubric-monitor":
        shown = argv0
        if os.sep in argv0:
            absolute = Path(argv0).resolve()
            try:
                shown = str(absolute.relative_to(Path.cwd().resolve()))
            except ValueError:
                shown = str(absolute)
    else:
        shown = f"{Path(sys.executable).name} -m monitor"
    return shlex.join([*shown.split(" "), subcommand, *(["--config", str(config)] if config else [])])


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help=f"YAML settings file (default: ${ENV_PREFIX}CONFIG, else built-in defaults)")


def _cmd_run(args: argparse.Namespace) -> int:
    from monitor.app import run_daemon

    settings = load_settings(args.config)
    _configure_logging(settings.log_level)
    return run_daemon(settings, once=args.once, results_command=self_command("results", args.config))


def read_conversations(path: Path) -> list[Conversation]:
    """OTLP JSON lines or OpenAI-chat JSONL; unreadable lines are logged and counted (``monitor.input_files``)."""
    from monitor.input_files import read_input_file

    return read_input_file(path).conversations


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from monitor.app import build_evaluators, build_judge, effective_judge_settings
    from monitor.evaluators.base import EvaluationContext
    from monitor.metrics import MonitorMetrics
    from monitor.models import EvaluationResult
    from monitor.progress import ProgressBar
    from monitor.rubrics.loader import load_rubric_file

    settings = load_settings(args.config)
    _configure_logging(settings.log_level)
    rubric = load_rubric_file(args.rubric)
    conversations = read_conversations(args.input)
    evaluator = build_evaluators(settings.judge.cache_size).get(rubric.kind)
    if evaluator is None:
        raise ConfigError(str(args.rubric), "kind", f"no evaluator for kind {rubric.kind!r}")
    judge = build_judge(settings.judge, MonitorMetrics(CollectorRegistry()))
    judge_settings = effective_judge_settings(settings.judge)
    context = EvaluationContext(judge=judge, settings=judge_settings, store_content=settings.store.store_content)
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

    try:
        asyncio.run(evaluate_all())
    except JudgeError as exc:
        print(f"rubric-monitor: the judge failed: {exc}", file=sys.stderr)
        return 1
    if skipped:
        print(f"rubric-monitor: {len(skipped)} conversation(s) skipped: no_content", file=sys.stderr)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from monitor.alerts.service import check_settings
    from monitor.app import build_stages, embedded_judge_warning

    settings = load_settings(args.config)
    check_settings(settings.alerts, settings.interval_seconds)
    # Every stage is built as ``run`` builds it (no scheduler, no judge call, no model loaded), so ``check``
    # refuses what ``run`` refuses, naming every problem at once.
    stages = build_stages(settings, CollectorRegistry(), load_model=False)
    try:
        for rubric in stages.rubrics.active():
            print(f"rubric {rubric.name} version {rubric.version} ({rubric.kind}) for agents "
                  f"{', '.join(rubric.agents)}")
        if warning := embedded_judge_warning(settings):
            print(f"warning: {warning}")
        if args.explain:
            if settings.source.kind != "app_insights":
                print(f"source otlp_file reads {settings.source.path} (no query to explain)")
            else:
                from monitor.sources.kql import explain

                print(explain(settings.source, utc_now()))
    finally:
        stages.close()
    print("settings and rubrics are valid")
    return 0


def _describe_fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = info.annotation
        nested = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)
                  and issubclass(a, BaseModel)]
        if nested and getattr(annotation, "__origin__", None) is not dict:
            if getattr(annotation, "__origin__", None) is tuple:
                # A list of sections (notifiers, silences): each item has these fields.
                key = f"{key}[]"
            for sub in nested:
                label = f"{key}." if len(nested) == 1 else f"{key}.({sub.model_fields['kind'].default}) "
                yield from _describe_fields(sub, label if len(nested) == 1 else f"{key}.")
            continue
        default = info.get_default(call_default_factory=True)
        shown = "(required)" if info.is_required() else "" if default is None else json.dumps(
            default.get_secret_value() if hasattr(default, "get_secret_value") else default, default=str)
        env = "(in the file)" if "[]" in key else ENV_PREFIX + key.replace(".", "__").upper()
        yield key, shown, env, (info.description or "").replace("\n", " ")


def config_table() -> str:
    rows = ["| setting | default | environment variable | meaning |", "|---|---|---|---|"]
    seen: set[str] = set()
    for key, default, env, doc in _describe_fields(Settings, ""):
        if key in seen:
            continue
        seen.add(key)
        rows.append(f"| `{key}` | `{default}` | `{env}` | {doc.replace('|', '/')} |")
    return "\n".join(rows)


def _cmd_config_doc(args: argparse.Namespace) -> int:
    print(config_table())
    return 0


def _version() -> str:
    """The installed distribution's version, else the package's own (a checkout run with python -m monitor)."""
    import importlib.metadata

    from monitor import __version__

    try:
        return importlib.metadata.version("rubric-monitor")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rubric-monitor", epilog=EXIT_CODES,
        description="Score LLM agent conversations against rubrics with an LLM judge; export Prometheus metrics.")
    parser.add_argument("--version", action="version", version=f"rubric-monitor {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon (or one cycle with --once)")
    _config_arg(run)
    run.add_argument("--once", action="store_true", help="run one cycle and exit (1 if it failed)")
    run.set_defaults(handler=_cmd_run)

    evaluate = sub.add_parser("evaluate", help="score the conversations of a file against one rubric")
    _config_arg(evaluate)
    evaluate.add_argument("--rubric", type=Path, required=True, help="rubric file (YAML or JSON)")
    evaluate.add_argument("--input", type=Path, required=True, help="OTLP JSON lines or OpenAI-chat JSONL")
    evaluate.set_defaults(handler=_cmd_evaluate)

    check = sub.add_parser("check", help="validate settings and rubrics")
    _config_arg(check)
    check.add_argument("--explain", action="store_true", help="print the App Insights KQL the daemon would run")
    check.set_defaults(handler=_cmd_check)

    config_doc = sub.add_parser("config-doc", help="print every setting as a Markdown table")
    config_doc.set_defaults(handler=_cmd_config_doc)

    from monitor.results_cli import add_results_commands
    from monitor.rubrics.commands import add_rubrics_commands

    add_rubrics_commands(sub)
    from monitor.calibration import add_calibrate_command

    add_calibrate_command(sub)
    add_results_commands(sub, _config_arg, load_settings)
    from monitor.store.cli import add_db_commands

    add_db_commands(sub)
    from monitor.alerts.cli import add_alert_commands

    add_alert_commands(sub, _config_arg)
    from monitor.backfill import add_backfill_command

    add_backfill_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.handler is not _cmd_run:
        from monitor import shutdown

        shutdown.release()  # only the daemon treats SIGTERM as a stop request
    try:
        result: Any = args.handler(args)
        return int(result)
    except ConfigError as exc:
        from monitor.redaction import redact

        for problem in exc.all:
            print(redact(f"rubric-monitor: error: {problem}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
