"""``rubric-monitor backfill``: score a past window with one rubric, within a budget, resumable
(``monitor.pipeline.backfill``)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from monitor.app import run_backfill
from monitor.cli.common import config_arg, configure_logging
from monitor.errors import ConfigError, JudgeError
from monitor.models import utc_now
from monitor.settings import load_settings


def _parse_time(value: str, flag: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError("command line", flag, f"{value!r} is not an ISO 8601 time like 2026-11-24T00:00Z") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def cmd_backfill(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    configure_logging(settings.log_level)  # with the same secret redaction as every other command
    since = _parse_time(args.since, "--since")
    until = _parse_time(args.until, "--until") if args.until else utc_now()
    if until <= since:
        raise ConfigError("command line", "--until", "must be later than --since")
    registry = CollectorRegistry()
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, settings.metrics.host, registry=registry)
    try:
        progress = run_backfill(settings, args.rubric, since, until, args.budget_usd, registry)
    except JudgeError as exc:
        sys.stderr.write(f"rubric-monitor: backfill stopped, the judge failed: {exc} (run it again to resume)\n")
        return 1
    return 0 if progress.status in ("done", "budget_spent") else 1


def register(sub: Any) -> None:
    command = sub.add_parser("backfill", help="score a past window with one rubric, within a budget (resumable)")
    config_arg(command)
    command.add_argument("--rubric", required=True, help="rubric name (its active version is used)")
    command.add_argument("--since", required=True, help="window start, ISO 8601 (UTC when no offset)")
    command.add_argument("--until", default=None, help="window end, ISO 8601 (default: now)")
    command.add_argument("--budget-usd", type=float, default=None, help="stop before the judge spend passes this")
    command.add_argument("--metrics-port", type=int, default=None,
                         help="serve the backfill's progress metrics on this port while it runs")
    command.set_defaults(handler=cmd_backfill)
