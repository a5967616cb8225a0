"""``rubric-monitor regressions`` (the daemon's current verdicts, computed by the same code) and
``rubric-monitor notify test NAME``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.app import build_alerts
from monitor.cli.common import config_arg
from monitor.errors import ConfigError
from monitor.models import utc_now
from monitor.settings import load_settings
from monitor.store.sql import SqlStore
from monitor.store.url import store_url

_FORMAT = "{:<24} {:<24} {:<15} {:<20} {:<12} {:<9} {:<6} {:<16} {:>9} {:>9} {:>26} {:>11} {:>7}"


def _service(config: Path | None) -> Any:
    settings = load_settings(config)
    store = SqlStore(store_url(settings))
    registry = CollectorRegistry()
    return settings, build_alerts(settings, store, registry), registry


def _value(kind: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if kind == "pass_rate" else f"{value:.2f}"


def cmd_regressions(args: argparse.Namespace) -> int:
    from monitor.alerts.service import duration_seconds

    _, service, _ = _service(args.config)
    now = utc_now()
    detection = service.evaluate(now)
    rows = service.verdict_rows(detection, args.rubric, args.agent)
    print(_FORMAT.format("RUBRIC", "AGENT", "KIND", "DIMENSION", "VERDICT", "STATE", "WINDOW", "BASELINE",
                         "CURRENT", "BEFORE", "EFFECT [95% CI]", "N NOW/BEFORE", "Q"))
    for key, verdict, state in rows:
        test = verdict.test
        effect = "-" if test is None else f"{test.effect:+.3f} [{test.low:+.3f}, {test.high:+.3f}]"
        print(_FORMAT.format(
            key.rubric[:24], key.agent[:24], key.kind, key.dimension[:20] or "-", verdict.status,
            state.state if state else "inactive", verdict.window, verdict.baseline,
            _value(key.kind, verdict.current_value), _value(key.kind, verdict.baseline_value), effect,
            f"{verdict.current_n}/{verdict.baseline_n}", "-" if verdict.q_value is None else f"{verdict.q_value:.3g}"))
    for (rubric, agent), reasons in sorted(detection.cannot_judge.items()):
        if reasons and (args.rubric in (None, rubric)) and (args.agent in (None, agent)):
            print(f"cannot judge {rubric} / {agent}: {', '.join(sorted(reasons))}")
    if args.since:
        since = now.timestamp() - duration_seconds(args.since, "--since")
        for at, kind, payload in service.store.events(since):
            labels = payload.get("labels") or {}
            if args.rubric not in (None, labels.get("rubric")) or args.agent not in (None, labels.get("agent")):
                continue
            print(f"{at.isoformat()} {kind}: {payload.get('summary', '')}")
    return 0


def cmd_notify_test(args: argparse.Namespace) -> int:
    from monitor.alerts.events import probe_event
    from monitor.alerts.store import NewEvent

    settings, service, metrics = _service(args.config)
    wanted = [n for n in settings.alerts.notifiers if n.name == args.name]
    if not wanted:
        known = ", ".join(n.name for n in settings.alerts.notifiers) or "none configured"
        raise ConfigError("settings", "alerts.notifiers", f"no notifier named {args.name!r} ({known})")
    notifier = wanted[0]
    service.start(resume=False)  # only this test: a running daemon delivers its own pending notifications
    try:
        now = utc_now()
        ids = service.store.add_event(NewEvent(f"test|{args.name}|{now.timestamp():.6f}", "test",
                                               probe_event(now, service.generator_url), (args.name,)))
        service.dispatcher.submit(ids)
        budget = notifier.max_attempts * (notifier.timeout_seconds + notifier.backoff_max_seconds) + 5
        service.dispatcher.wait_idle(budget)
    finally:
        service.close()
    sent = metrics.get_sample_value("rubric_monitor_notifications_total", {"notifier": args.name, "outcome": "sent"})
    if sent:
        print(f"notifier {args.name}: test notification sent")
        return 0
    print(f"notifier {args.name}: test notification failed (see the log above)", file=sys.stderr)
    return 1


def register(sub: Any) -> None:
    regressions = sub.add_parser("regressions", help="current regression verdicts (the daemon's own computation)")
    config_arg(regressions)
    regressions.add_argument("--rubric", default=None, help="only this rubric")
    regressions.add_argument("--agent", default=None, help="only this agent")
    regressions.add_argument("--since", default=None, help="also list alert events of this long ago (e.g. 24h)")
    regressions.set_defaults(handler=cmd_regressions)

    notify = sub.add_parser("notify", help="notifications")
    notify_sub = notify.add_subparsers(dest="notify_command", required=True)
    test = notify_sub.add_parser("test", help="send a test notification through one notifier")
    config_arg(test)
    test.add_argument("name", help="notifier name (alerts.notifiers[].name)")
    test.set_defaults(handler=cmd_notify_test)
