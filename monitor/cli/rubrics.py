"""``rubric-monitor rubrics list | show NAME | validate | generate``.

Every handler returns an exit code: 0 when all is well, 2 when a rubric file or a setting is invalid (the file
and the field are printed on stderr), 1 when generation fails at the judge. The rubric directory is ``--dir``,
else ``rubrics.directory`` of the settings (``--config``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import yaml
from prometheus_client import CollectorRegistry

from monitor.cli.common import config_arg
from monitor.errors import ConfigError, RubricError, SourceError
from monitor.evaluators.foundry_agent import FoundryAgent, TokenFileCredential, default_credential, read_foundry_agent
from monitor.evaluators.generate import (
    GeneratedRubric,
    GenerationFailed,
    GenerationSources,
    check_sources,
    generate_rubric,
    sample_from_source,
    write_rubric,
)
from monitor.evaluators.versions import builtin_version
from monitor.judge import build_judge
from monitor.judge.base import Judge
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, utc_now
from monitor.rubrics.loader import check_unique, load_rubric_file, rubric_files
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import Rubric, WeightedRubric
from monitor.settings import load_settings
from monitor.sources import build_source


def register(subparsers: Any) -> None:
    rubrics = subparsers.add_parser("rubrics", help="list, show, validate and generate rubrics")
    commands = rubrics.add_subparsers(dest="rubrics_command", required=True)

    listing = commands.add_parser("list", help="the active rubrics of the rubric directory")
    _location_args(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per rubric")
    listing.set_defaults(handler=cmd_list)

    show = commands.add_parser("show", help="one rubric as the daemon reads it (residual dimension included)")
    show.add_argument("name")
    _location_args(show)
    show.set_defaults(handler=cmd_show)

    validate = commands.add_parser("validate", help="validate rubric files (exit 2 naming file and field)")
    validate.add_argument("files", nargs="*", type=Path, help="files to check (default: every rubric file)")
    _location_args(validate)
    validate.set_defaults(handler=cmd_validate)

    generate = commands.add_parser(
        "generate", help="generate a weighted rubric from an agent's instructions, references and traces",
        description="Writes the rubric file (version 1), or the next version when the rubric already exists.",
    )
    generate.add_argument("--name", required=True, help="rubric name; an existing rubric is regenerated")
    source = generate.add_mutually_exclusive_group()
    source.add_argument("--instructions", help="the agent's instructions or system prompt")
    source.add_argument("--instructions-file", type=Path, help="file holding the agent's instructions")
    generate.add_argument("--reference", type=Path, action="append", default=[],
                          help="reference document (repeatable)")
    generate.add_argument("--foundry-agent", metavar="NAME",
                          help="a Foundry agent: its instructions (prompt agents) or description (hosted agents)")
    generate.add_argument("--foundry-agent-version", metavar="VERSION", help="that version (default: latest)")
    generate.add_argument("--foundry-endpoint", default=os.environ.get("AZURE_AI_PROJECT_ENDPOINT"),
                          help="the Foundry project endpoint (default $AZURE_AI_PROJECT_ENDPOINT)")
    generate.add_argument("--foundry-token-file", type=Path,
                          help="a file holding an Entra bearer token (default: DefaultAzureCredential)")
    generate.add_argument("--foundry-ca-bundle", type=Path, help="CA bundle for the project endpoint")
    generate.add_argument("--traces", type=Path, help="OTLP JSON lines or OpenAI-chat JSONL of the agent")
    generate.add_argument("--from-app-insights", action="store_true",
                          help="sample the agent's recent conversations through the configured App Insights source")
    generate.add_argument("--since-hours", type=float, default=24.0,
                          help="how far back --from-app-insights samples (default 24)")
    generate.add_argument("--agent", help="only traces of this agent (name or id, glob patterns allowed; default "
                          "the --foundry-agent)")
    generate.add_argument("--max-conversations", type=int, default=5, help="sample conversations used")
    generate.add_argument("--category", choices=("quality", "safety"), default=None,
                          help="quality (default; residual general_quality) or safety "
                               "(residual general_policy_compliance)")
    generate.add_argument("--model", help="judge model for the generation call (default judge.model)")
    generate.add_argument("--output", type=Path, help="file to write (default: the existing rubric's file, "
                          "else <dir>/<name>.yaml)")
    _location_args(generate)
    generate.set_defaults(handler=cmd_generate)


def _location_args(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)
    parser.add_argument("--dir", type=Path, default=None, help="rubric directory (default rubrics.directory)")


def rubric_directory(args: argparse.Namespace) -> Path:
    if getattr(args, "dir", None) is not None:
        return Path(args.dir)
    return load_settings(getattr(args, "config", None)).rubrics.directory


def _fail(err: TextIO, exc: Exception) -> int:
    problems = exc.all if isinstance(exc, ConfigError) else (exc,)
    err.writelines(f"rubric-monitor: error: {problem}\n" for problem in problems)
    return 2


def _tolerant(directory: Path) -> RubricRegistry:
    """A registry that reads what validates and records the rest in ``problems``."""
    registry = RubricRegistry(directory, builtin_version)
    registry.refresh()
    return registry


def _report_problems(registry: RubricRegistry, err: TextIO) -> int:
    for problem in registry.problems.values():
        err.write(f"rubric-monitor: invalid: {problem}\n")
    return 2 if registry.problems else 0


def _summary(rubric: Rubric, path: Path) -> dict[str, Any]:
    return {
        "name": rubric.name,
        "version": rubric.version,
        "kind": rubric.kind,
        "metric": getattr(rubric, "metric", None),
        "agents": list(rubric.agents),
        "sampling_rate": rubric.sampling_rate,
        "judge_model": rubric.judge_model,
        "evaluation_level": rubric.evaluation_level,
        "file": str(path),
    }


def cmd_list(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        registry = _tolerant(rubric_directory(args))
    except ConfigError as exc:
        return _fail(err, exc)
    sources = registry.sources()
    rows = [_summary(r, sources[r.name]) for r in registry.active()]
    if args.json:
        out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    else:
        table = [("NAME", "VERSION", "KIND", "AGENTS", "SAMPLING", "JUDGE", "FILE")] + [(
            r["name"], r["version"] or "", r["kind"] + (f":{r['metric']}" if r["metric"] else ""),
            ",".join(r["agents"]), "default" if r["sampling_rate"] is None else f"{r['sampling_rate']:g}",
            r["judge_model"] or "default", r["file"],
        ) for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        out.writelines("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"
                       for row in table)
    return _report_problems(registry, err)


def cmd_show(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        registry = _tolerant(rubric_directory(args))
    except ConfigError as exc:
        return _fail(err, exc)
    rubric = registry.get(args.name)
    if rubric is None:
        err.write(f"rubric-monitor: error: no active rubric named {args.name!r}\n")
        _report_problems(registry, err)
        return 2
    out.write(f"# {registry.sources()[rubric.name]}\n")
    out.write(yaml.safe_dump(rubric.model_dump(mode="json", exclude_none=True), sort_keys=False,
                             allow_unicode=True, width=100))
    return 0


def cmd_validate(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        paths = list(args.files) or rubric_files(rubric_directory(args))
    except ConfigError as exc:
        return _fail(err, exc)
    valid: list[tuple[Rubric, Path]] = []
    failures = 0
    for path in paths:
        try:
            rubric = load_rubric_file(path, builtin_version)
        except RubricError as exc:
            err.writelines(f"rubric-monitor: invalid: {problem}\n" for problem in exc.all)
            failures += 1
            continue
        valid.append((rubric, path))
        out.write(f"ok {path}: {rubric.name} version {rubric.version} ({rubric.kind})\n")
    try:
        check_unique([r for r, _ in valid], (str(p) for _, p in valid))
    except RubricError as exc:
        err.write(f"rubric-monitor: invalid: {exc}\n")
        failures += 1
    return 2 if failures else 0


def _previous(args: argparse.Namespace, directory: Path) -> tuple[WeightedRubric | None, Path]:
    """The rubric to regenerate (if it exists) and the file to write: the rubric's own file unless
    ``--output``."""
    registry = _tolerant(directory) if directory.exists() else None
    in_directory = registry.get(args.name) if registry is not None else None
    home = registry.sources()[args.name] if registry is not None and in_directory is not None else None
    output: Path = args.output or home or directory / f"{args.name}.yaml"
    if home is not None and home.resolve() != output.resolve():
        raise RubricError(str(output), "name", f"rubric {args.name!r} already lives in {home}; regenerate it "
                          "there (leave out --output)")
    existing = load_rubric_file(output, builtin_version) if output.exists() else None
    if existing is None:
        return None, output
    if not isinstance(existing, WeightedRubric):
        raise RubricError(str(output), "kind", f"{existing.name} is a {existing.kind} rubric; only weighted "
                          "rubrics are generated")
    if existing.name != args.name:
        raise RubricError(str(output), "name", f"the file holds rubric {existing.name!r}, not {args.name!r}")
    return existing, output


def _foundry_agent(args: argparse.Namespace) -> FoundryAgent | None:
    if not args.foundry_agent:
        return None
    if not args.foundry_endpoint:
        raise ConfigError("--foundry-endpoint", None, "give the Foundry project endpoint (or set "
                          "AZURE_AI_PROJECT_ENDPOINT) to read --foundry-agent")
    credential = (TokenFileCredential(args.foundry_token_file) if args.foundry_token_file is not None
                  else default_credential())
    options = {"connection_verify": str(args.foundry_ca_bundle)} if args.foundry_ca_bundle else {}
    return read_foundry_agent(args.foundry_endpoint, args.foundry_agent, credential, args.foundry_agent_version,
                              **options)


def _app_insights_sample(args: argparse.Namespace, agent: str | None) -> tuple[Conversation, ...]:
    settings = load_settings(getattr(args, "config", None))
    if settings.source.kind != "app_insights":
        raise ConfigError("settings", "source.kind", "--from-app-insights samples the configured App Insights "
                          f"source; source.kind is {settings.source.kind}")
    now = utc_now()
    since = now - timedelta(hours=args.since_hours)
    source_settings = settings.source.model_copy(
        update={"initial_lookback_seconds": max(60.0, args.since_hours * 3600.0)})
    source = build_source(source_settings, MonitorMetrics(CollectorRegistry()))
    try:
        picked = sample_from_source(source, now, since, agent, args.max_conversations)
    except SourceError as exc:
        raise ConfigError("settings", "source", f"sampling App Insights failed: {exc}") from None
    return tuple(picked)


def _sources(args: argparse.Namespace) -> GenerationSources:
    instructions: str | None = args.instructions
    if args.instructions_file is not None:
        try:
            instructions = args.instructions_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(str(args.instructions_file), None, f"cannot read: {exc.strerror}") from exc
    base = GenerationSources(instructions=instructions, reference_files=tuple(args.reference), traces=args.traces,
                             agent=args.agent or args.foundry_agent, max_conversations=args.max_conversations,
                             conversations_from="App Insights" if args.from_app_insights else None)
    if not args.foundry_agent:
        check_sources(base)  # traces alone are refused before anything is read or sampled
    agent = _foundry_agent(args)
    conversations = _app_insights_sample(args, base.agent) if args.from_app_insights else ()
    return replace(base, foundry_agent=agent, conversations=conversations)


def _build_judge(args: argparse.Namespace) -> Judge:
    settings = load_settings(getattr(args, "config", None))
    return build_judge(settings.judge, MonitorMetrics(CollectorRegistry()))


def cmd_generate(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None, judge: Judge | None = None
) -> int:
    """Generate (or regenerate) a rubric; ``judge`` defaults to the one the settings describe."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        sources = _sources(args)
        check_sources(sources)
        previous, output = _previous(args, rubric_directory(args))
        category = args.category or (previous.category if previous else "quality")
        own_judge = judge is None
        judge = judge or _build_judge(args)
    except ConfigError as exc:
        return _fail(err, exc)
    async def run(judge: Judge) -> GeneratedRubric:
        try:
            return await generate_rubric(judge, sources, output, name=args.name, category=category,
                                         previous=previous, model=args.model)
        finally:
            if own_judge:
                await judge.aclose()

    try:
        generated = asyncio.run(run(judge))
    except ConfigError as exc:
        return _fail(err, exc)
    except GenerationFailed as exc:
        err.write(f"rubric-monitor: error: {exc}\n")
        return 1
    write_rubric(generated, output)
    for note in generated.notes:
        err.write(f"rubric-monitor: adjusted: {note}\n")
    rubric = generated.rubric
    out.write(f"wrote {output}: {rubric.name} version {rubric.version} ({rubric.category}, "
              f"{len(rubric.dimensions)} dimensions, {generated.usage.calls} judge call(s))\n")
    return 0
