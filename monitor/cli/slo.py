"""``rubric-monitor slo rules | export | status``: the SLOs' Prometheus rules, their Sloth or OpenSLO specs, and
their budget and burn rates now (the daemon's own computation)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from monitor.cli.common import config_arg
from monitor.errors import ConfigError
from monitor.models import utc_now
from monitor.settings import Settings, load_settings
from monitor.slo.spec import SloDefinition


def definitions(settings: Settings) -> list[SloDefinition]:
    """The settings' SLOs and the rubric files' ``slo:`` blocks (the rubrics are loaded and checked)."""
    from monitor.evaluators.versions import builtin_version
    from monitor.rubrics.registry import RubricRegistry
    from monitor.slo.spec import resolve

    registry = RubricRegistry(settings.rubrics.directory, builtin_version)
    registry.load()
    active = registry.active()
    origins = {name: str(path) for name, path in registry.sources().items()}
    return resolve(settings.slos, active, origins, known_rubrics=[r.name for r in active])


def _selected(args: argparse.Namespace, settings: Settings) -> list[SloDefinition]:
    slos = definitions(settings)
    if args.slo:
        slos = [s for s in slos if s.name == args.slo]
        if not slos:
            raise ConfigError("settings", "slos", f"no SLO named {args.slo!r}")
    return slos


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


def cmd_rules(args: argparse.Namespace) -> int:
    from monitor.slo.rules import prometheus_rule, rule_groups

    settings = load_settings(args.config)
    try:
        rules = rule_groups(_selected(args, settings), settings.alerts.max_unscored_share, args.interval)
    except ValueError as exc:
        raise ConfigError("command line", "--interval", str(exc)) from exc
    document = prometheus_rule(rules) if args.prometheus_rule else rules
    header = "# rubric-monitor SLO rules (rubric-monitor slo rules); docs/slo.md\n"
    _write(header + yaml.safe_dump(document, sort_keys=False, width=120), args.output)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from monitor.slo.export import openslo, sloth

    settings = load_settings(args.config)
    slos = _selected(args, settings)
    if args.format == "sloth":
        text = yaml.safe_dump(sloth(slos), sort_keys=False, width=120)
    else:
        text = yaml.safe_dump_all(openslo(slos), sort_keys=False, width=120)
    _write(text, args.output)
    return 0


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def cmd_status(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from monitor.app import build_slos
    from monitor.slo.service import duration_text
    from monitor.store.sql import SqlStore
    from monitor.store.url import store_url

    settings = load_settings(args.config)
    slos = _selected(args, settings)
    store = SqlStore(store_url(settings))
    try:
        service = build_slos(settings, store, CollectorRegistry(), lambda: slos)
        statuses = service.statuses(utc_now())
    finally:
        store.close()
    if args.json:
        out: list[dict[str, Any]] = []
        for status in statuses:
            slo = status.slo
            out.append({
                "slo": slo.name, "rubric": slo.rubric, "objective": slo.objective, "window": slo.window,
                "budget_remaining": status.budget_remaining, "exhaustion_seconds": status.exhaustion_seconds,
                "cannot_judge": list(status.reasons),
                "alerts": {t.tier: t.status for t in status.tiers},
                "windows": {w: {"good": f.good, "scored": f.scored, "unscored": f.unscored, "sli": f.sli,
                                "burn_rate": f.burn_rate(slo.error_budget)} for w, f in status.windows.items()},
            })
        print(json.dumps(out, indent=2))
        return 0
    for status in statuses:
        slo = status.slo
        print(f"SLO {slo.name}: {slo.describe()}")
        print(f"  error budget left: {status.budget_remaining:.1%} of {slo.window} "
              f"(exhausted in {duration_text(status.exhaustion_seconds)} at the burn rate of the last hour)")
        if status.reasons:
            print(f"  cannot judge: {', '.join(status.reasons)} (alerts neither fire nor resolve)")
        print("  alerts: " + ", ".join(f"{t.tier} {t.status}" for t in status.tiers))
        print(f"  {'WINDOW':<7} {'SLI':>8} {'BURN':>7} {'GOOD':>8} {'SCORED':>8} {'UNSCORED':>9}")
        for window, figures in status.windows.items():
            sli = "-" if figures.sli is None else f"{figures.sli:.3f}"
            print(f"  {window:<7} {sli:>8} {_rate(figures.burn_rate(slo.error_budget)):>7} {figures.good:>8} "
                  f"{figures.scored:>8} {figures.unscored:>9}")
    if not statuses:
        print("no SLO defined (settings slos:, or a rubric's slo: block; docs/slo.md)")
    return 0


def register(sub: Any) -> None:
    slo = sub.add_parser("slo", help="quality SLOs: Prometheus rules, Sloth/OpenSLO specs, budget and burn rates")
    slo_sub = slo.add_subparsers(dest="slo_command", required=True)
    rules = slo_sub.add_parser("rules", help="print the SLOs' Prometheus recording and burn-rate alerting rules")
    config_arg(rules)
    rules.add_argument("--prometheus-rule", action="store_true",
                       help="as a kube-prometheus PrometheusRule (deploy/monitoring)")
    rules.add_argument("--slo", default=None, help="only this SLO")
    rules.add_argument("--interval", default="1m",
                       help="evaluation interval of the rule groups, a divisor of 5m (default 1m)")
    rules.add_argument("--output", type=Path, default=None, help="write to this file instead of stdout")
    rules.set_defaults(handler=cmd_rules)
    export = slo_sub.add_parser("export", help="write the SLOs as Sloth or OpenSLO specs")
    config_arg(export)
    export.add_argument("--format", choices=("sloth", "openslo"), required=True)
    export.add_argument("--slo", default=None, help="only this SLO")
    export.add_argument("--output", type=Path, default=None, help="write to this file instead of stdout")
    export.set_defaults(handler=cmd_export)
    status = slo_sub.add_parser("status", help="budget left, burn rates and evaluations per SLO, from the store")
    config_arg(status)
    status.add_argument("--slo", default=None, help="only this SLO")
    status.add_argument("--json", action="store_true", help="as JSON")
    status.set_defaults(handler=cmd_status)
