"""``rubric-monitor run`` (the daemon, or one cycle), ``check`` (settings and rubrics as ``run`` reads them) and
``config-doc`` (every setting as a Markdown table)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from monitor.cli.common import config_arg, configure_logging, self_command
from monitor.models import utc_now
from monitor.settings import ENV_PREFIX, Settings, load_settings


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run the daemon (or one cycle with --once)")
    config_arg(run)
    run.add_argument("--once", action="store_true", help="run one cycle and exit (1 if it failed)")
    run.set_defaults(handler=cmd_run)

    check = sub.add_parser("check", help="validate settings and rubrics")
    config_arg(check)
    check.add_argument("--explain", action="store_true", help="print the App Insights KQL the daemon would run")
    check.set_defaults(handler=cmd_check)

    config_doc = sub.add_parser("config-doc", help="print every setting as a Markdown table")
    config_doc.set_defaults(handler=cmd_config_doc)


def cmd_run(args: argparse.Namespace) -> int:
    from monitor.daemon.loop import run_daemon

    settings = load_settings(args.config)
    configure_logging(settings.log_level)
    return run_daemon(settings, once=args.once, results_command=self_command("results", args.config))


def cmd_check(args: argparse.Namespace) -> int:
    from monitor.alerts.service import check_settings
    from monitor.app import build_stages, embedded_judge_warning
    from monitor.slo.spec import resolve

    settings = load_settings(args.config)
    check_settings(settings.alerts, settings.interval_seconds)
    # Every stage is built as ``run`` builds it (no scheduler, no judge call, no model loaded), so ``check``
    # refuses what ``run`` refuses, naming every problem at once.
    stages = build_stages(settings, CollectorRegistry(), load_model=False)
    try:
        active = stages.rubrics.active()
        for rubric in active:
            print(f"rubric {rubric.name} version {rubric.version} ({rubric.kind}) for agents "
                  f"{', '.join(rubric.agents)}")
        # The SLOs as ``rubric-monitor slo rules`` reads them: unique names, rubrics that are loaded, dimensions the
        # rubric has (their objectives and windows were checked with the settings and the rubric files).
        origins = {name: str(path) for name, path in stages.rubrics.sources().items()}
        for slo in resolve(settings.slos, active, origins, known_rubrics=[r.name for r in active]):
            print(f"slo {slo.name}: {slo.describe()} (from {slo.origin})")
        if warning := embedded_judge_warning(settings):
            print(f"warning: {warning}")
        if args.explain:
            if settings.source.kind == "otlp_receiver":
                print(f"source otlp_receiver listens on http://{settings.source.host}:{settings.source.port} "
                      "(POST /v1/traces, /v1/logs; no query to explain)")
            elif settings.source.kind == "otlp_file":
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


def cmd_config_doc(args: argparse.Namespace) -> int:
    print(config_table())
    return 0
